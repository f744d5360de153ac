//! The harness of the C tests: the drivers `tests/c_<area>.rs`, one per subsystem, include
//! this module (`#[path = "support/ctest.rs"] mod ctest;`, beside `mod common;` and
//! `mod support;`). They compile and run the C programs in `c-tests/` against the library
//! `cargo test` just built, one `#[test]` per program (or per program and case).
//!
//! Conventions:
//! - The library is the `libgmp.so` cargo built for this run, in the `deps` directory
//!   beside the test executable: `cargo test` builds the cdylib there but copies it up
//!   to `target/<profile>/` only on `cargo build`, so the copy up there may be stale
//!   (it is used only when `deps` has none). Programs link it **by path** (never
//!   `-lgmp`, which is GNU MP), with an rpath to `CARGO_TARGET_TMPDIR/c-tests/lib`,
//!   where a `libgmp.so.0` symlink (the SONAME) points at it.
//! - Each program is compiled with `cc -std=c11 -Wall -Wextra -Werror -Wpedantic -O2
//!   -pthread -I include` into `CARGO_TARGET_TMPDIR/c-tests/`, run with a clean `GMP_*`
//!   environment plus what the test sets, killed after [`TIMEOUT`], and must exit 0; a
//!   failure prints its stdout and stderr.
//! - Misuse cases: a program given `argv[1]` runs one misuse and must die by SIGABRT
//!   with the expected `gmp:` message on stderr (core dumps are switched off for them).
//! - The machine has two cores and one of the programs measures a parallel speed-up, so
//!   every C test (compiling included) holds [`C_TESTS`]: C programs run one at a
//!   time, beside at most the Rust unit tests of other binaries. [`C_TESTS`] and
//!   [`COMPILED`] belong to one test process (one driver); cargo runs the test binaries
//!   one after another, so two drivers never run C programs at the same time.
//! - A helper used by one driver lives in that driver; this module holds what several
//!   share.
//! - Cross builds (scripts/aarch64.sh): `GMP_TEST_CC` names the C compiler (default `cc`)
//!   and `GMP_TEST_RUNNER` a command, split at spaces, that runs the compiled programs
//!   (`qemu-aarch64 -L /usr/aarch64-linux-gnu`, or `scripts/aarch64-vm/run`, which runs
//!   them in an aarch64 virtual machine); [`cc`] and [`program`] honour them.
//!   `GMP_TEST_DEBUG` goes in front of the `GMP_DEBUG` of every program [`run_c`] runs
//!   (a test's own keys come later and win): under qemu-user, `asyncpreemptsig=3`
//!   (qemu delivers a POSIX timer's signal with the host's timer id, which the runtime's
//!   handler does not recognise, and emulates no perf events).

use std::collections::HashSet;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::common::library;
use crate::support::{self, GMP_ENV, Outcome};

/// A program still running after this long is killed and its test fails.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// Serialises the C tests (see the module doc).
pub static C_TESTS: Mutex<()> = Mutex::new(());

/// Programs already compiled by this test process (always accessed under [`C_TESTS`]).
pub static COMPILED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

pub fn lock() -> MutexGuard<'static, ()> {
    // A failed test poisons the lock; the others must still run.
    C_TESTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The C compiler: `GMP_TEST_CC`, or `cc`.
pub fn cc() -> String {
    std::env::var("GMP_TEST_CC").unwrap_or_else(|_| "cc".to_string())
}

/// A command that runs the compiled program `exe`: directly, or under `GMP_TEST_RUNNER`
/// (an emulator for a cross build's programs).
pub fn program(exe: impl AsRef<std::ffi::OsStr>) -> Command {
    let runner = runner();
    match runner.split_first() {
        Some((first, rest)) => {
            let mut cmd = Command::new(first);
            cmd.args(rest).arg(exe);
            cmd
        }
        None => Command::new(exe),
    }
}

/// `GMP_TEST_RUNNER`'s words (empty without one): what a command that starts a C test
/// program itself (through `sh` or `unshare`) puts before the program's path.
pub fn runner() -> Vec<String> {
    std::env::var("GMP_TEST_RUNNER")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A directory holding only `libgmp.so.0 -> <library()>`, for the programs' rpath.
/// The link is replaced by a rename, never removed first: a program starting while
/// another test compiles must always find its library.
pub fn soname_dir() -> PathBuf {
    let dir = out_dir().join("lib");
    std::fs::create_dir_all(&dir).expect("create c-tests/lib");
    let link = dir.join("libgmp.so.0");
    if std::fs::read_link(&link).ok().as_deref() != Some(library().as_path()) {
        let tmp = dir.join(format!("libgmp.so.0.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(library(), &tmp).expect("symlink libgmp.so.0");
        std::fs::rename(&tmp, &link).expect("rename the libgmp.so.0 link into place");
    }
    dir
}

pub fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-tests");
    std::fs::create_dir_all(&dir).expect("create CARGO_TARGET_TMPDIR/c-tests");
    dir
}

/// Runs `cmd` to completion with piped output, killing it after [`TIMEOUT`].
pub fn run_with_timeout(cmd: Command, what: &str) -> Outcome {
    support::run_as_is(cmd, what, TIMEOUT)
}

/// Compiles `c-tests/<name>.c` once per test process; returns the executable.
/// The caller holds [`C_TESTS`].
pub fn compile(name: &str) -> PathBuf {
    compile_src(
        name,
        &manifest_dir().join("c-tests").join(format!("{name}.c")),
    )
}

/// `compile` for a C file anywhere in the tree (examples/).
pub fn compile_src(name: &str, src: &Path) -> PathBuf {
    compile_src_opts(name, src, &[], &[])
}

/// `compile_src` linking the system libraries `libs` too (`-lhiredis`...).
pub fn compile_src_libs(name: &str, src: &Path, libs: &[&str]) -> PathBuf {
    compile_src_opts(name, src, &[], libs)
}

/// `compile_src` with extra compiler flags.
pub fn compile_src_flags(name: &str, src: &Path, extra: &[&str]) -> PathBuf {
    compile_src_opts(name, src, extra, &[])
}

/// `compile_src` with extra compiler flags and system libraries.
pub fn compile_src_opts(name: &str, src: &Path, extra: &[&str], libs: &[&str]) -> PathBuf {
    let exe = out_dir().join(name);
    let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    let set = compiled.get_or_insert_with(HashSet::new);
    if set.contains(name) {
        return exe;
    }
    let mut cmd = Command::new(cc());
    cmd.args([
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wpedantic",
        "-O2",
        "-pthread",
    ])
    .args(extra)
    .arg("-I")
    .arg(manifest_dir().join("include"))
    .arg(src)
    .arg(library())
    .arg("-lm")
    .args(libs)
    .arg(format!("-Wl,-rpath,{}", soname_dir().display()))
    .arg("-o")
    .arg(&exe);
    let outcome = run_with_timeout(cmd, &format!("cc {name}.c"));
    assert!(
        outcome.status.success(),
        "{}",
        outcome.report(&format!("compiling {name}.c failed"))
    );
    set.insert(name.to_string());
    exe
}

/// Compiles and runs a C test with `args` and `env` (on top of a clean `GMP_*` set).
pub fn run_c(name: &str, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let _serial = lock();
    let exe = compile(name);
    let mut cmd = program(&exe);
    cmd.args(args).current_dir(out_dir());
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    // cargo points LD_LIBRARY_PATH at target/<profile>, whose libgmp.so.0 link may lead to
    // a stale copy of the library; the programs' rpath names the one this test built.
    cmd.env_remove("LD_LIBRARY_PATH");
    let extra = std::env::var("GMP_TEST_DEBUG").unwrap_or_default();
    if !extra.is_empty() {
        cmd.env("GMP_DEBUG", &extra);
    }
    for (k, v) in env {
        if *k == "GMP_DEBUG" && !extra.is_empty() {
            cmd.env(k, format!("{extra},{v}"));
        } else {
            cmd.env(k, v);
        }
    }
    run_with_timeout(cmd, &format!("{name} {}", args.join(" ")))
}

/// Runs a C test that must exit 0.
pub fn expect_success(name: &str, env: &[(&str, &str)]) -> Outcome {
    let outcome = run_c(name, &[], env);
    assert!(
        outcome.status.success(),
        "{}",
        outcome.report(&format!("{name} failed"))
    );
    print!("{}", outcome.stdout);
    outcome
}

/// Runs case `case` of a multi-case C test, which must exit 0.
pub fn expect_case(name: &str, case: &str, env: &[(&str, &str)]) {
    let outcome = run_c(name, &[case], env);
    assert!(
        outcome.status.success(),
        "{}",
        outcome.report(&format!("{name} {case} failed"))
    );
    print!("{}", outcome.stdout);
}

/// Runs misuse `case` of a C test: it must die by SIGABRT with every one of `needles`
/// on stderr.
pub fn expect_abort(name: &str, case: &str, needles: &[&str]) {
    let outcome = run_c(name, &[case], &[]);
    let what = format!("{name} {case}");
    assert_eq!(
        outcome.status.signal(),
        Some(libc::SIGABRT),
        "{}",
        outcome.report(&format!("{what} should have died by SIGABRT"))
    );
    for needle in needles {
        assert!(
            outcome.stderr.contains(needle),
            "{}",
            outcome.report(&format!("{what}: stderr lacks {needle:?}"))
        );
    }
}

/// Checks that `outcome` exited 0 (the test fails with its output otherwise); prints its
/// stdout.
pub fn assert_success(outcome: &Outcome, what: &str) {
    assert!(
        outcome.status.success(),
        "{}",
        outcome.report(&format!("{what} failed"))
    );
    print!("{}", outcome.stdout);
}

/// The GMP_DEBUG setting that sends a preemption request every sysmon round.
pub const PREEMPT_STRESS: (&str, &str) = ("GMP_DEBUG", "asyncpreemptstress=1");

/// The flags under which backtraces are complete and name the program's functions.
pub const FRAME_FLAGS: &[&str] = &["-fno-omit-frame-pointer", "-rdynamic"];

/// The features the short torture runs switch on (TORTURE_FEATURES, see c-tests/torture.c).
pub const TORTURE_FEATURES: &str = "all";
