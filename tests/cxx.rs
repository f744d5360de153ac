//! Compiles and runs the C++ programs in `cxx-tests/` (the tests of `gmp-sched/gmp.hpp`)
//! and the C++ examples against the library `cargo test` just built.
//!
//! - Each program is compiled twice, as C++17 and as C++20 (`GMP_CXX_STD=c++20` keeps
//!   one), with `-Wall -Wextra -Werror -Wpedantic` under
//!   `-fsanitize=address,undefined -fno-sanitize-recover=all`, linked to the
//!   `libgmp.so` of this run by path (never `-lgmp`, which is GNU MP) with an rpath to a
//!   directory holding its SONAME, and must exit 0 within [`TIMEOUT`].
//! - AddressSanitizer: the runtime announces its stack switches to ASan (`src/rt/asan.rs`).
//!   Heap errors and leaks (of channel elements too: every test waits for its goroutines
//!   before exiting) are caught. `detect_stack_use_after_return` stays off: its fake stacks are per thread and a
//!   goroutine may resume on another one. `GMP_CXX_SANITIZE=undefined` runs UBSan alone.
//! - The programs run one at a time (the machine has two cores; the C tests hold their
//!   own lock).

use std::collections::HashSet;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

mod common;
mod support;
use support::{Outcome, run, run_ok};

const TIMEOUT: Duration = Duration::from_secs(120);

/// Serialises the tests of this file (see the module doc).
static SERIAL: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cxx-tests");
    std::fs::create_dir_all(&dir).expect("create CARGO_TARGET_TMPDIR/cxx-tests");
    dir
}

/// A directory holding only `libgmp.so.0 -> <library()>`, for the programs' rpath.
fn soname_dir() -> PathBuf {
    let dir = out_dir().join("lib");
    std::fs::create_dir_all(&dir).expect("create cxx-tests/lib");
    let link = dir.join("libgmp.so.0");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(common::library(), &link).expect("symlink libgmp.so.0");
    dir
}

fn sanitizers() -> String {
    std::env::var("GMP_CXX_SANITIZE").unwrap_or_else(|_| "address,undefined".to_string())
}

/// The standards every program is compiled for: C++17 and C++20, or the one
/// `GMP_CXX_STD` names.
fn standards() -> Vec<String> {
    match std::env::var("GMP_CXX_STD") {
        Ok(one) if !one.is_empty() => vec![one],
        _ => vec!["c++17".to_string(), "c++20".to_string()],
    }
}

/// The programs this test process has compiled (several tests run one program).
static COMPILED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Compiles `src` (relative to the repository) as `std` into `out_dir()/name-std`, once
/// per test process.
fn compile(src: &str, name: &str, std: &str) -> PathBuf {
    let exe = out_dir().join(format!("{name}-{std}"));
    let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    let compiled = compiled.get_or_insert_with(HashSet::new);
    if compiled.contains(&exe) {
        return exe;
    }
    let mut cmd = Command::new("c++");
    cmd.arg(format!("-std={std}"))
        .args(["-Wall", "-Wextra", "-Werror", "-Wpedantic"])
        .args(["-O1", "-g", "-pthread", "-fno-omit-frame-pointer"])
        .arg(format!("-fsanitize={}", sanitizers()))
        .arg("-fno-sanitize-recover=all")
        .arg("-I")
        .arg(manifest_dir().join("include"))
        .arg(manifest_dir().join(src))
        .arg(common::library())
        .arg(format!("-Wl,-rpath,{}", soname_dir().display()))
        .arg("-o")
        .arg(&exe);
    run_ok(cmd, &format!("c++ -std={std} {src}"), TIMEOUT);
    compiled.insert(exe.clone());
    exe
}

fn run_program(exe: &Path, args: &[&str]) -> Outcome {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .current_dir(out_dir())
        // cargo's LD_LIBRARY_PATH may lead to a stale copy of the library.
        .env_remove("LD_LIBRARY_PATH")
        .env(
            "ASAN_OPTIONS",
            "detect_stack_use_after_return=0:detect_leaks=1:abort_on_error=0",
        )
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1");
    run(
        cmd,
        &format!("{} {}", exe.display(), args.join(" ")),
        TIMEOUT,
    )
}

/// Compiles and runs `cxx-tests/<name>.cpp` for each standard; it must exit 0 and print
/// "<name>: ok".
fn expect_success(name: &str) {
    let _serial = lock();
    for std in standards() {
        let exe = compile(&format!("cxx-tests/{name}.cpp"), name, &std);
        let outcome = run_program(&exe, &[]);
        assert!(
            outcome.status.success() && outcome.stdout.contains(&format!("{name}: ok")),
            "{}",
            outcome.report(&format!("{name} ({std}) failed"))
        );
    }
}

#[test]
fn go() {
    expect_success("go");
}

#[test]
fn chan() {
    expect_success("chan");
}

#[test]
fn select() {
    expect_success("select");
}

#[test]
fn sync() {
    expect_success("sync");
}

#[test]
fn timed() {
    expect_success("timed");
}

#[test]
fn ranges() {
    expect_success("ranges");
}

#[test]
fn namespace() {
    expect_success("namespace");
}

#[test]
fn signal() {
    expect_success("signal");
}

/// Scopes: cancel and deadline end the waits of the scope's goroutines and its owner with
/// std::system_error; the destructor waits, cancels when an exception unwinds through it,
/// and restores the enclosing scope.
#[test]
fn scope() {
    expect_success("scope");
}

/// `cxx-tests/<name>.cpp <case>` must die by SIGABRT with `needle` on stderr (a misuse
/// the wrapper reports with a `gmp:` line).
fn expect_abort(name: &str, case: &str, needle: &str) {
    let _serial = lock();
    for std in standards() {
        let exe = compile(&format!("cxx-tests/{name}.cpp"), name, &std);
        let outcome = run_program(&exe, &[case]);
        assert_eq!(
            outcome.status.signal(),
            Some(libc::SIGABRT),
            "{}",
            outcome.report(&format!(
                "{name} {case} ({std}) should have died by SIGABRT"
            ))
        );
        assert!(
            outcome.stderr.contains(needle),
            "{}",
            outcome.report(&format!("{name} {case} ({std}): stderr lacks {needle:?}"))
        );
    }
}

/// An exception escaping a goroutine: SIGABRT with a `gmp:` line naming it.
#[test]
fn go_uncaught_exception() {
    expect_abort(
        "go",
        "throw",
        "gmp: goroutine 1: uncaught exception of type std::runtime_error: boom in goroutine",
    );
}

#[test]
fn go_uncaught_non_std_exception() {
    expect_abort(
        "go",
        "throw_int",
        "gmp: goroutine 1: uncaught exception of type int",
    );
}

#[test]
fn timed_mutex_unlock_of_unlocked() {
    expect_abort(
        "timed",
        "unlock_unlocked",
        "gmp: sync: unlock of unlocked timed_mutex",
    );
}

/// gmp.hpp alone compiles warning-free as C++17 and C++20, with and without the C
/// header's inline fast paths.
#[test]
fn header_alone() {
    let _serial = lock();
    let src = out_dir().join("header_alone.cpp");
    std::fs::write(
        &src,
        "#include <gmp-sched/gmp.hpp>\n#include <gmp-sched/gmp.hpp>\n",
    )
    .expect("write");
    for std in ["-std=c++17", "-std=c++20"] {
        for define in ["-DGMP_SCHED_TEST", "-DGMP_NO_INLINE_FAST_PATHS"] {
            let mut cmd = Command::new("c++");
            cmd.args([std, define, "-Wall", "-Wextra", "-Werror", "-Wpedantic"])
                .args(["-Wshadow", "-Wconversion", "-fsyntax-only", "-I"])
                .arg(manifest_dir().join("include"))
                .arg(&src);
            run_ok(cmd, &format!("c++ {std} {define} gmp.hpp"), TIMEOUT);
        }
    }
}

/// The C++ example runs and checks its own result.
#[test]
fn example_pipeline() {
    let _serial = lock();
    for std in standards() {
        let exe = compile("examples/pipeline.cpp", "pipeline", &std);
        let outcome = run_program(&exe, &[]);
        assert!(
            outcome.status.success() && outcome.stdout.contains("primes below"),
            "{}",
            outcome.report(&format!("examples/pipeline.cpp ({std}) failed"))
        );
        print!("{}", outcome.stdout);
    }
}
