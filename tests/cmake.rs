//! The CMake build and the installed package, as a user meets them: configure, build
//! (cargo offline), run part of ctest, install into a temporary prefix; then build the
//! README's consumers (a C and a C++ program with `find_package(gmp-sched)`, the same
//! with `pkg-config --cflags --libs gmp-sched`), run them, and check that a GNU MP
//! program built in the same environment (`#include <gmp.h>`, `-lgmp`) still gets GNU MP.
//!
//! The snippets are read from README.md (its "Using libgmp from CMake / with pkg-config /
//! from C++" sections and the C example), with `/opt/gmp-sched` replaced by the
//! temporary prefix, so the README's commands are what runs here.
//!
//! Cost: the library is built once per test process by cmake, in a cargo target
//! directory kept under `CARGO_TARGET_TMPDIR` between runs (cargo rebuilds only what
//! changed); the build directory and the prefix are fresh each time. The tests share
//! that install ([`installed`]) and run their consumers one at a time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

mod support;
use support::{Outcome, run_ok};

/// Configure, cargo build (a cold release build on two loaded cores takes minutes), install.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);
/// Anything else: a consumer's configure and build, a program's run.
const TIMEOUT: Duration = Duration::from_secs(300);

/// The placeholder prefix of the README's snippets.
const README_PREFIX: &str = "/opt/gmp-sched";

static SERIAL: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn work_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("cmake")
}

fn fresh_dir(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir.to_path_buf()
}

fn command(program: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.current_dir(dir)
        // What cargo test exports for itself must not steer the nested builds.
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("PKG_CONFIG_PATH")
        .env_remove("CMAKE_PREFIX_PATH");
    cmd
}

/// Configures, builds, runs a part of ctest, installs; returns the prefix.
fn installed() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let work = work_dir();
        let build = fresh_dir(&work.join("build"));
        let prefix = fresh_dir(&work.join("prefix"));
        let cargo_target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cmake-cargo");

        let mut configure = command("cmake", manifest_dir());
        configure
            .arg("-S")
            .arg(manifest_dir())
            .arg("-B")
            .arg(&build)
            .args(["-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_INSTALL_LIBDIR=lib"])
            .arg("-DGMP_SCHED_CARGO_OFFLINE=ON")
            .arg(format!(
                "-DGMP_SCHED_CARGO_TARGET_DIR={}",
                cargo_target.display()
            ));
        run_ok(configure, "cmake configure", TIMEOUT);

        // No network: cargo runs --offline and is told so by the environment too.
        let mut cmake_build = command("cmake", &build);
        cmake_build
            .args(["--build", ".", "-j", "2"])
            .env("CARGO_NET_OFFLINE", "true");
        run_ok(cmake_build, "cmake --build", BUILD_TIMEOUT);

        // A few quick tests through ctest: it runs what the build registered.
        let mut ctest = command("ctest", &build);
        ctest.args([
            "--output-on-failure",
            "-R",
            "^(c\\.chan_basic|c\\.select_basic|c\\.maxprocs|cxx\\..*)$",
        ]);
        let out = run_ok(ctest, "ctest", TIMEOUT);
        assert!(
            out.stdout.contains("100% tests passed") && out.stdout.contains("cxx.chan"),
            "{}",
            out.report("ctest ran the wrong tests")
        );

        let mut install = command("cmake", &build);
        install
            .arg("--install")
            .arg(".")
            .arg("--prefix")
            .arg(&prefix);
        run_ok(install, "cmake --install", TIMEOUT);
        prefix
    })
}

/// The text of README.md's section `heading` (up to the next `## `).
fn readme_section(heading: &str) -> String {
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).expect("README.md");
    let start = readme
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("README.md has no section {heading:?}"));
    let body = &readme[start + 1..];
    let end = body[3..].find("\n## ").map_or(body.len(), |i| i + 3);
    body[..end].to_string()
}

/// The fenced code blocks of `text` in language `lang`, in order.
fn code_blocks(text: &str, lang: &str) -> Vec<String> {
    let fence = format!("```{lang}\n");
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&fence) {
        let after = &rest[i + fence.len()..];
        let end = after
            .find("```")
            .expect("unterminated code block in README.md");
        blocks.push(after[..end].to_string());
        rest = &after[end + 3..];
    }
    blocks
}

fn block(heading: &str, lang: &str, index: usize) -> String {
    code_blocks(&readme_section(heading), lang)
        .into_iter()
        .nth(index)
        .unwrap_or_else(|| panic!("README section {heading:?} lacks ```{lang} block #{index}"))
}

/// A fresh directory holding the README's hello.c and hello.cpp.
fn consumer_dir(name: &str) -> PathBuf {
    let dir = fresh_dir(&work_dir().join(name));
    std::fs::write(dir.join("hello.c"), block("Example", "c", 0)).expect("write hello.c");
    std::fs::write(
        dir.join("hello.cpp"),
        block("Using libgmp from C++", "cpp", 0),
    )
    .expect("write hello.cpp");
    dir
}

/// Runs a README shell snippet in `dir` with the temporary prefix in place of
/// /opt/gmp-sched.
fn run_snippet(script: &str, dir: &Path, prefix: &Path, what: &str) -> Outcome {
    let script = script.replace(README_PREFIX, &prefix.display().to_string());
    let mut sh = command("sh", dir);
    sh.arg("-ec").arg(&script);
    run_ok(sh, &format!("{what}:\n{script}"), TIMEOUT)
}

fn check_hello_outputs(out: &Outcome, what: &str) {
    for needle in ["goroutine", "says", "goroutines left"] {
        assert!(
            out.stdout.contains(needle),
            "{}",
            out.report(&format!("{what}: no {needle:?}"))
        );
    }
}

fn needed(binary: &Path) -> String {
    let mut readelf = command("readelf", Path::new("/"));
    readelf.arg("-d").arg(binary);
    run_ok(readelf, "readelf -d", TIMEOUT).stdout
}

/// The installed files are where the package promises, and nothing lands where GNU MP's
/// library and header live.
#[test]
fn install_layout() {
    let prefix = installed();
    for file in [
        "lib/gmp-sched/libgmp.so.0",
        "lib/gmp-sched/libgmp.so",
        "lib/gmp-sched/libgmp.a",
        "include/gmp-sched/gmp.h",
        "include/gmp-sched/gmp.hpp",
        "lib/cmake/gmp-sched/gmp-sched-config.cmake",
        "lib/cmake/gmp-sched/gmp-sched-config-version.cmake",
        "lib/pkgconfig/gmp-sched.pc",
    ] {
        assert!(prefix.join(file).exists(), "{file} is not installed");
    }
    for file in [
        "lib/libgmp.so",
        "lib/libgmp.a",
        "lib/libgmp.so.0",
        "include/gmp.h",
        "include/gmp.hpp",
    ] {
        assert!(!prefix.join(file).exists(), "{file} would shadow GNU MP");
    }
    // The licence texts the tree has.
    for license in ["LICENSE-MIT", "LICENSE-APACHE"] {
        if manifest_dir().join(license).exists() {
            let doc = prefix.join("share/doc/gmp-sched").join(license);
            assert!(doc.exists(), "{} is not installed", doc.display());
        }
    }
    // The package's version is Cargo.toml's (CMakeLists.txt reads it from there).
    let pc =
        std::fs::read_to_string(prefix.join("lib/pkgconfig/gmp-sched.pc")).expect("gmp-sched.pc");
    let want = format!("Version: {}", env!("CARGO_PKG_VERSION"));
    assert!(
        pc.lines().any(|l| l == want),
        "gmp-sched.pc lacks {want:?}:\n{pc}"
    );
    let link = std::fs::read_link(prefix.join("lib/gmp-sched/libgmp.so")).expect("a symlink");
    assert_eq!(link, Path::new("libgmp.so.0"));
    let dynamic = needed(&prefix.join("lib/gmp-sched/libgmp.so.0"));
    assert!(
        dynamic.contains("Library soname: [libgmp.so.0]"),
        "{dynamic}"
    );
}

/// The installed static library is scripts/static-lib.sh's: one object, no debug
/// information or LLVM bitcode, and no global name but the shared library's exports (a
/// program may link it beside another Rust static library without a clash).
#[test]
fn installed_static_library_is_compact() {
    let prefix = installed();
    let lib = prefix.join("lib/gmp-sched");
    let archive = lib.join("libgmp.a");
    let size = std::fs::metadata(&archive)
        .expect("libgmp.a installed")
        .len();
    assert!(size < 8 << 20, "{} is {size} bytes", archive.display());
    let symbols = |args: &[&str], file: &Path| -> Vec<String> {
        let out = Command::new("nm")
            .args(args)
            .arg(file)
            .output()
            .expect("nm");
        assert!(
            out.status.success(),
            "nm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().last())
            .filter(|n| !n.ends_with(':') && !n.is_empty())
            .map(|n| n.split('@').next().unwrap_or(n).to_string())
            .collect()
    };
    let exports = symbols(&["-D", "--defined-only"], &lib.join("libgmp.so.0"));
    assert!(exports.iter().any(|n| n == "gmp_go"), "{exports:?}");
    let globals = symbols(&["-g", "--defined-only"], &archive);
    let extra: Vec<&String> = globals.iter().filter(|n| !exports.contains(n)).collect();
    assert!(
        extra.is_empty(),
        "libgmp.a makes global what libgmp.so does not export: {extra:?}"
    );
    assert!(
        globals.iter().any(|n| n == "gmp_go"),
        "gmp_go is not in libgmp.a"
    );
}

/// README "Using libgmp from CMake": find_package, gmp::sched from C and C++, plus
/// gmp::sched_static.
#[test]
fn find_package_consumers() {
    let prefix = installed();
    let _serial = lock();
    let dir = consumer_dir("consumer-cmake");
    let mut lists = block("Using libgmp from CMake", "cmake", 0);
    lists.push_str(
        "add_executable(hello_static hello.c)\n\
         target_link_libraries(hello_static PRIVATE gmp::sched_static)\n",
    );
    std::fs::write(dir.join("CMakeLists.txt"), lists).expect("write CMakeLists.txt");
    let out = run_snippet(
        &block("Using libgmp from CMake", "sh", 1),
        &dir,
        prefix,
        "README CMake consumer",
    );
    check_hello_outputs(&out, "hello (find_package)");
    assert!(
        out.stdout.contains("got three"),
        "{}",
        out.report("hello_cpp")
    );

    let exe = dir.join("build/hello_static");
    let dynamic = needed(&exe);
    assert!(
        !dynamic.contains("libgmp"),
        "hello_static links libgmp dynamically:\n{dynamic}"
    );
    let out = run_ok(
        command(exe.to_str().expect("utf-8 path"), &dir),
        "hello_static",
        TIMEOUT,
    );
    check_hello_outputs(&out, "hello_static");

    // The consumer records our SONAME and runs from its rpath, nothing else.
    let dynamic = needed(&dir.join("build/hello_cpp"));
    assert!(dynamic.contains("[libgmp.so.0]"), "{dynamic}");
}

/// README "Using libgmp with pkg-config" and "Using libgmp from C++".
#[test]
fn pkg_config_consumers() {
    let prefix = installed();
    let _serial = lock();
    let dir = consumer_dir("consumer-pkg-config");
    let c = block("Using libgmp with pkg-config", "sh", 0);
    let out = run_snippet(&c, &dir, prefix, "README pkg-config consumer");
    check_hello_outputs(&out, "hello (pkg-config)");
    assert!(needed(&dir.join("hello")).contains("[libgmp.so.0]"));

    let cxx = format!(
        "export PKG_CONFIG_PATH={README_PREFIX}/lib/pkgconfig\n{}",
        block("Using libgmp from C++", "sh", 0)
    );
    let out = run_snippet(&cxx, &dir, prefix, "README C++ consumer");
    for word in ["got one", "got two", "got three"] {
        assert!(out.stdout.contains(word), "{}", out.report("hello_cpp"));
    }
}

/// A GNU MP program built with our prefix in every search path still gets GNU MP's
/// header and library.
#[test]
fn gnu_mp_is_not_shadowed() {
    let prefix = installed();
    let _serial = lock();
    let dir = fresh_dir(&work_dir().join("gnu-mp"));
    std::fs::write(
        dir.join("fact.c"),
        "#include <gmp.h>\n#include <stdio.h>\n\
         int main(void) {\n\
             mpz_t f;\n\
             mpz_init(f);\n\
             mpz_fac_ui(f, 25);\n\
             gmp_printf(\"%Zd %s\\n\", f, gmp_version);\n\
             mpz_clear(f);\n\
             return 0;\n\
         }\n",
    )
    .expect("write fact.c");
    let p = prefix.display();
    let script = format!(
        "export PKG_CONFIG_PATH={p}/lib/pkgconfig CMAKE_PREFIX_PATH={p}\n\
         export C_INCLUDE_PATH={p}/include LIBRARY_PATH={p}/lib LD_LIBRARY_PATH={p}/lib\n\
         cc -std=c11 -I{p}/include fact.c -L{p}/lib -Wl,-rpath,{p}/lib -lgmp -o fact\n\
         ./fact\n\
         cc -std=c11 fact.c $(pkg-config --cflags --libs gmp) -o fact_pc\n\
         ./fact_pc\n"
    );
    let out = run_snippet(&script, &dir, prefix, "GNU MP program");
    assert!(
        out.stdout.starts_with("15511210043330985984000000 "),
        "{}",
        out.report("25! from GNU MP")
    );
    for exe in ["fact", "fact_pc"] {
        let dynamic = needed(&dir.join(exe));
        assert!(
            dynamic.contains("[libgmp.so.10]") && !dynamic.contains("[libgmp.so.0]"),
            "{exe}: {dynamic}"
        );
    }
}

/// The C half of a program that uses GNU MP and libgmp together: goroutines compute
/// factorials in GNU MP integers; then the C++ half runs.
const BOTH_C: &str = r#"#include <gmp.h>
#include <gmp-sched/gmp.h>
#include <stdint.h>
#include <stdio.h>

#if !defined(__GNU_MP_VERSION) || !defined(GMP_SCHED_H)
#error "<gmp.h> must be GNU MP's and <gmp-sched/gmp.h> libgmp's"
#endif

int cxx_half(void);

static gmp_wg wg = GMP_WG_INIT;
static mpz_t fact[3];

static void factorial(void *arg) {
    uintptr_t i = (uintptr_t)arg;
    mpz_fac_ui(fact[i], 23 + i);
    gmp_wg_done(&wg);
}

int main(void) {
    gmp_wg_add(&wg, 3);
    for (uintptr_t i = 0; i < 3; i++) {
        mpz_init(fact[i]);
        gmp_go(factorial, (void *)i);
    }
    gmp_wg_wait(&wg);
    for (int i = 0; i < 3; i++) {
        gmp_printf("%d! = %Zd\n", 23 + i, fact[i]);
        mpz_clear(fact[i]);
    }
    return cxx_half();
}
"#;

/// The C++ half: GNU MP's mpz_class travels over a gmp::chan between goroutines.
const BOTH_CXX: &str = r#"#include <gmpxx.h>
#include <gmp-sched/gmp.hpp>
#include <cstdio>

extern "C" int cxx_half(void) {
    gmp::chan<mpz_class> ch(1);
    gmp::wait_group wg;
    wg.add(1);
    gmp::go([ch, &wg] {
        mpz_class x = 1;
        x <<= 100;
        if (!ch.send(std::move(x)))
            std::puts("closed");
        wg.done();
    });
    auto got = ch.recv();
    wg.wait();
    std::printf("2^100 = %s\n", got ? got->get_str().c_str() : "nothing");
    return got ? 0 : 1;
}
"#;

/// The output both halves must print.
const BOTH_OUTPUT: &str = "23! = 25852016738884976640000\n\
                           24! = 620448401733239439360000\n\
                           25! = 15511210043330985984000000\n\
                           2^100 = 1267650600228229401496703205376\n";

/// One target that uses GNU MP (`<gmp.h>`, `<gmpxx.h>`, libgmp.so.10, libgmpxx) and
/// libgmp (`<gmp-sched/gmp.h>`, `<gmp-sched/gmp.hpp>`, libgmp.so.0), built from the
/// installed package with find_package and with pkg-config: each header and each library
/// is the right one.
#[test]
fn gnu_mp_and_libgmp_in_one_target() {
    let prefix = installed();
    let _serial = lock();
    let dir = fresh_dir(&work_dir().join("consumer-both"));
    std::fs::write(dir.join("both.c"), BOTH_C).expect("write both.c");
    std::fs::write(dir.join("both.cpp"), BOTH_CXX).expect("write both.cpp");
    let version = format!(
        "{}.{}",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    std::fs::write(
        dir.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.16)\n\
             project(both C CXX)\n\
             set(CMAKE_CXX_STANDARD 17)\n\
             find_package(gmp-sched {version} REQUIRED)\n\
             find_library(GNU_MP_LIBRARY gmp)\n\
             find_library(GNU_MPXX_LIBRARY gmpxx)\n\
             if(NOT GNU_MP_LIBRARY OR NOT GNU_MPXX_LIBRARY)\n\
             \x20   message(FATAL_ERROR \"GNU MP (libgmp-dev) is not installed\")\n\
             endif()\n\
             add_executable(both both.c both.cpp)\n\
             target_compile_options(both PRIVATE -Wall -Wextra -Werror -pedantic)\n\
             target_link_libraries(both PRIVATE gmp::sched ${{GNU_MPXX_LIBRARY}} \
             ${{GNU_MP_LIBRARY}})\n"
        ),
    )
    .expect("write CMakeLists.txt");
    let p = prefix.display();
    let script = format!(
        "cmake -S . -B build -DCMAKE_PREFIX_PATH={p}\n\
         cmake --build build\n\
         ./build/both\n\
         export PKG_CONFIG_PATH={p}/lib/pkgconfig\n\
         cc -std=c11 -Wall -Wextra -Werror -Wpedantic $(pkg-config --cflags gmp-sched) \
         -c both.c -o both_c.o\n\
         c++ -std=c++17 -Wall -Wextra -Werror -pedantic $(pkg-config --cflags gmp-sched) \
         -c both.cpp -o both_cxx.o\n\
         c++ both_c.o both_cxx.o $(pkg-config --libs gmp-sched) -lgmpxx -lgmp -o both_pc\n\
         ./both_pc\n"
    );
    let mut sh = command("sh", &dir);
    sh.arg("-ec").arg(&script);
    let out = run_ok(sh, &format!("GNU MP and libgmp:\n{script}"), TIMEOUT);
    // Once from the CMake build, once from the pkg-config one (cmake's log around them).
    assert_eq!(
        out.stdout.matches(BOTH_OUTPUT).count(),
        2,
        "{}",
        out.report("both programs' output")
    );
    for exe in ["build/both", "both_pc"] {
        let dynamic = needed(&dir.join(exe));
        // (libgmpxx is linked too, but mpz_class's inline code needs nothing from it.)
        for lib in ["[libgmp.so.10]", "[libgmp.so.0]"] {
            assert!(
                dynamic.contains(lib),
                "{exe} does not need {lib}:\n{dynamic}"
            );
        }
    }
}
