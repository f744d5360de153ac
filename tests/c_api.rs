//! The C API as a whole: the header compiles on its own (C11 and C++17), every entry point's
//! argument checks and wrong-caller answers and the misuses that abort (`bad_input`), the
//! start-up configuration from the environment and its effects, the library staying
//! loaded after `dlclose`, signals relayed to channels (`signal_notify`), and scopes (`scope`, `scope_locks`). Harness and
//! conventions: `support/ctest.rs`.

use std::collections::HashSet;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use common::library;
use ctest::*;
use support::{GMP_ENV, Outcome};

// ---- the header on its own ----

fn compile_header(compiler: &str, std: &str, ext: &str) {
    let _serial = lock();
    let tu = out_dir().join(format!("header_only.{ext}"));
    // Included twice: the include guard must hold.
    std::fs::write(
        &tu,
        "#include <gmp-sched/gmp.h>\n#include <gmp-sched/gmp.h>\nint main(void) { return 0; }\n",
    )
    .expect("write translation unit");
    let mut cmd = Command::new(compiler);
    cmd.arg(format!("-std={std}"))
        .args([
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wpedantic",
            "-fsyntax-only",
            "-I",
        ])
        .arg(manifest_dir().join("include"))
        .arg(&tu);
    let outcome = run_with_timeout(cmd, compiler);
    assert!(
        outcome.status.success(),
        "{}",
        outcome.report(&format!(
            "include/gmp-sched/gmp.h does not compile as {std}"
        ))
    );
}

#[test]
fn header_compiles_as_c11() {
    compile_header("cc", "c11", "c");
}

#[test]
fn header_compiles_as_cxx17() {
    compile_header("c++", "c++17", "cpp");
}

// ---- argument checks, wrong callers, and the misuses that abort ----

#[test]
fn bad_input() {
    expect_success("bad_input", &[]);
}

#[test]
fn bad_input_negative_wg() {
    expect_abort(
        "bad_input",
        "negative_wg",
        &["gmp: sync: negative WaitGroup counter"],
    );
}

#[test]
fn bad_input_negative_wg_goroutine() {
    expect_abort(
        "bad_input",
        "negative_wg_goroutine",
        &["gmp: sync: negative WaitGroup counter"],
    );
}

#[test]
fn bad_input_stack_overflow() {
    expect_abort(
        "bad_input",
        "stack_overflow",
        &["gmp: goroutine ", "stack overflow"],
    );
}

/// A stack the address space cannot hold is -ENOMEM, not -EINVAL.
#[test]
fn bad_input_nomem() {
    expect_case("bad_input", "nomem", &[]);
}

#[test]
fn bad_input_thread_fuse() {
    expect_abort("bad_input", "thread_fuse", &["gmp: thread exhaustion"]);
}

// ---- start-up configuration from the environment, and its effects ----

#[test]
fn config_env_out_of_range() {
    let default = expect_success("config_env", &[]);
    assert!(
        !default.stderr.contains("gmp: ignoring"),
        "{}",
        default.report("config_env without GMP_* variables warned")
    );
    let odd = expect_success(
        "config_env",
        &[
            ("GMP_MAXPROCS", "100000"),
            ("GMP_MAX_THREADS", "0"),
            ("GMP_STACK_SIZE", "2G"),
        ],
    );
    for needle in [
        "gmp: ignoring GMP_MAXPROCS=\"100000\"",
        "gmp: ignoring GMP_MAX_THREADS=\"0\"",
        "gmp: ignoring GMP_STACK_SIZE=\"2G\"",
    ] {
        assert!(
            odd.stderr.contains(needle),
            "{}",
            odd.report(&format!("config_env: stderr lacks {needle:?}"))
        );
    }
    // The defaults are used: the same values as without the variables.
    assert_eq!(
        odd.stdout, default.stdout,
        "out-of-range values changed the configuration"
    );
    assert!(
        default.stdout.contains("max_threads 10000\n"),
        "{}",
        default.stdout
    );
}

/// Like [`run_c`], with the program started through `prefix` (e.g. `taskset -c 0`): the
/// command run is `prefix... <program> args...`.
fn run_c_under(name: &str, prefix: &[&str], args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let _serial = lock();
    let exe = compile(name);
    let mut cmd = Command::new(prefix[0]);
    cmd.args(&prefix[1..])
        .arg(&exe)
        .args(args)
        .current_dir(out_dir());
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    cmd.env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_timeout(
        cmd,
        &format!("{} {name} {}", prefix.join(" "), args.join(" ")),
    )
}

fn assert_abort(outcome: &Outcome, what: &str, needle: &str) {
    assert_eq!(
        outcome.status.signal(),
        Some(libc::SIGABRT),
        "{}",
        outcome.report(&format!("{what} should have died by SIGABRT"))
    );
    assert!(
        outcome.stderr.contains(needle),
        "{}",
        outcome.report(&format!("{what}: stderr lacks {needle:?}"))
    );
}

#[test]
fn config_stack_size_env() {
    // 700 KiB fit in GMP_STACK_SIZE=1M, not in the 256 KiB default.
    let ok = run_c(
        "config_effects",
        &["stack", "700"],
        &[("GMP_STACK_SIZE", "1M")],
    );
    assert_success(&ok, "config_effects stack 700 with GMP_STACK_SIZE=1M");
    let overflow = run_c("config_effects", &["stack", "700"], &[]);
    assert_abort(
        &overflow,
        "config_effects stack 700 (default size)",
        "stack overflow",
    );
}

#[test]
fn config_set_default_stack_size() {
    let ok = run_c("config_effects", &["set_stack", "700"], &[]);
    assert_success(&ok, "config_effects set_stack 700");
}

#[test]
fn config_max_threads_env() {
    // Three spinners at GOMAXPROCS 3 need three threads: allowed under 8, not under 2.
    let ok = run_c(
        "config_effects",
        &["threads", "3"],
        &[("GMP_MAX_THREADS", "8")],
    );
    assert_success(&ok, "config_effects threads 3 with GMP_MAX_THREADS=8");
    let fused = run_c(
        "config_effects",
        &["threads", "3"],
        &[("GMP_MAX_THREADS", "2")],
    );
    assert_abort(
        &fused,
        "config_effects threads 3 with GMP_MAX_THREADS=2",
        "gmp: thread exhaustion",
    );
}

#[test]
fn config_default_maxprocs_affinity() {
    // One CPU in the affinity mask: GOMAXPROCS 1 by default.
    let out = run_c_under(
        "config_effects",
        &["taskset", "-c", "0"],
        &["maxprocs", "1"],
        &[],
    );
    assert_success(&out, "taskset -c 0 config_effects maxprocs 1");
}

/// A CPU cgroup of our own with a quota of half a CPU, if this machine lets us make one
/// (root, cgroup v1 `cpu` controller or v2 with `cpu` enabled); removed on drop.
struct CpuCgroup(PathBuf);

impl CpuCgroup {
    fn new() -> Option<CpuCgroup> {
        let name = format!("gmp-c-tests-{}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
        let (dir, file, value) = if v2.exists() {
            let root = Path::new("/sys/fs/cgroup");
            let ctl = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
            if !ctl.split_whitespace().any(|c| c == "cpu") {
                return None;
            }
            (root.join(name), "cpu.max", "50000 100000")
        } else {
            (
                Path::new("/sys/fs/cgroup/cpu").join(name),
                "cpu.cfs_quota_us",
                "50000",
            )
        };
        std::fs::create_dir(&dir).ok()?;
        let cg = CpuCgroup(dir);
        std::fs::write(cg.0.join(file), value).ok()?;
        Some(cg)
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn config_default_maxprocs_cgroup() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        eprintln!("config_default_maxprocs_cgroup: skipped (one CPU: a quota changes nothing)");
        return;
    }
    let Some(cg) = CpuCgroup::new() else {
        eprintln!("config_default_maxprocs_cgroup: skipped (cannot create a CPU cgroup here)");
        return;
    };
    // The shell moves itself into the cgroup, then becomes the program.
    let script = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cg.0.display());
    let out = run_c_under(
        "config_effects",
        &["sh", "-c", &script, "sh"],
        &["maxprocs", "1"],
        &[],
    );
    assert_success(
        &out,
        "config_effects maxprocs 1 in a cgroup with a quota of 0.5 CPU",
    );
}

// ---- loading: dlopen and dlclose ----

/// Compiles `c-tests/<name>.c` without linking libgmp (the program dlopen()s it), once
/// per test process. The caller holds [`C_TESTS`].
fn compile_dlopen(name: &str) -> PathBuf {
    let exe = out_dir().join(name);
    let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    let set = compiled.get_or_insert_with(HashSet::new);
    if set.contains(name) {
        return exe;
    }
    let src = manifest_dir().join("c-tests").join(format!("{name}.c"));
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
    .arg(&src)
    .arg("-ldl")
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

#[test]
fn dlclose_reload() {
    let _serial = lock();
    let exe = compile_dlopen("dlclose_reload");
    let mut cmd = program(&exe);
    cmd.current_dir(out_dir()).env("GMP_TEST_LIB", library());
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    let outcome = run_with_timeout(cmd, "dlclose_reload");
    assert!(
        outcome.status.success(),
        "{}",
        outcome.report("dlclose_reload failed")
    );
}

/// Signals relayed to channels as Go's os/signal does: delivery from any thread, several
/// channels per signal, a full channel missing one, nothing after stop, the program's own
/// handler back after the last stop, and every refused argument.
#[test]
fn signal_notify() {
    expect_success("signal_notify", &[]);
}

/// Scopes: a cancel ends every kind of wait of the scope's goroutines (and of a thread in
/// it) within 10 ms, with -ECANCELED; a deadline ends them with -ETIMEDOUT; scopes nest
/// (the inner deadline is the earlier, the outer cancel reaches inner goroutines); a
/// goroutine returning inside a scope it began ends it; goroutines outside keep waiting.
#[test]
fn scope() {
    expect_success("scope", &[("GMP_MAXPROCS", "2")]);
}

/// Scopes end mutex and rwmutex waits (-ECANCELED within 10 ms, without the lock), and the
/// locks stay exact: unscoped waiters behind cancelled ones get the lock, raced unlocks
/// and cancels lose nobody, a storm of scoped and unscoped lockers (starvation mode
/// included) never overlaps, and every word ends at 0.
#[test]
fn scope_locks() {
    expect_success("scope_locks", &[("GMP_MAXPROCS", "2")]);
}
