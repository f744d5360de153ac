//! Profiling: the CPU profile (gmp_cpuprofile_start, gmp_cpuprofile_stop,
//! GMP_CPUPROFILE), read back with `go tool pprof`, and goroutine labels through the
//! custom-labels thread-local ABI. Harness and conventions: `support/ctest.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;
use support::{GMP_ENV, Outcome};

/// Compiles `c-tests/cpuprof.c` with frame pointers and -rdynamic (the profile names
/// functions by their exported symbols) and runs it with `args` and `env`.
fn run_cpuprof(args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let _serial = lock();
    let exe = compile_src_flags(
        "cpuprof",
        &manifest_dir().join("c-tests/cpuprof.c"),
        FRAME_FLAGS,
    );
    let mut cmd = Command::new(&exe);
    cmd.args(args).current_dir(out_dir());
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    cmd.env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_timeout(cmd, &format!("cpuprof {}", args.join(" ")))
}

/// The go command, or None (the tests that read profiles then skip, saying so).
fn go() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("go"))
            .find(|g| g.is_file())
    });
    on_path.or_else(|| {
        let g = PathBuf::from("/usr/local/go/bin/go");
        g.is_file().then_some(g)
    })
}

/// `go tool pprof <args> <profile>`, with the profile's own names (no symbolization).
fn pprof(go: &Path, args: &[&str], profile: &Path) -> String {
    let out = Command::new(go)
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .arg(profile)
        .env("PPROF_TMPDIR", out_dir())
        .output()
        .expect("run go tool pprof");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The function names of `pprof -top`'s rows, in order (flat time, descending).
fn top_functions(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

/// `Total samples = 1.10s` of `pprof -top`'s header, in ms.
fn total_ms(top: &str) -> f64 {
    let v = top
        .split("Total samples = ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no total in:\n{top}"));
    let (num, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000.0)
    } else {
        panic!("total {v:?}")
    };
    num.parse::<f64>().expect("total") * scale
}

/// The API's errors, and a program's own SIGPROF handler is refused and kept.
#[test]
fn cpuprofile_api() {
    let o = run_cpuprof(&["api"], &[("GMP_MAXPROCS", "2")]);
    assert!(o.status.success(), "{}", o.report("cpuprof api failed"));
}

/// Two labelled goroutines burn 900 and 300 ms of CPU: pprof reads the profile, burn_hot
/// has the most flat time, the labels and goroutine ids are there, and the samples add up
/// to about the CPU time the process used.
#[test]
fn cpuprofile_top_and_labels() {
    let Some(go) = go() else {
        eprintln!(
            "cpuprofile_top_and_labels: skipped: no go command (go tool pprof reads the profile)"
        );
        return;
    };
    let file = out_dir().join("cpuprof.pb");
    let o = run_cpuprof(
        &["profile", file.to_str().expect("path")],
        &[("GMP_MAXPROCS", "2")],
    );
    assert!(o.status.success(), "{}", o.report("cpuprof profile failed"));
    let cpu_ms: f64 = o
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("cpu_ms "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no cpu_ms line: {}", o.stdout));
    let top = pprof(&go, &["-top", "-nodecount=10"], &file);
    print!("{top}");
    let funcs = top_functions(&top);
    assert_eq!(funcs.first().map(String::as_str), Some("burn_hot"), "{top}");
    assert!(funcs.iter().any(|f| f == "burn_cold"), "{top}");
    // Every M's CPU time is sampled at 100 Hz; the process's CPU time also counts C main
    // and the runtime's own threads, which are not sampled (a few ms here).
    let sampled = total_ms(&top);
    assert!(
        sampled >= 0.6 * cpu_ms && sampled <= 1.1 * cpu_ms + 20.0,
        "samples for {sampled} ms against {cpu_ms} ms of CPU time:\n{top}"
    );
    let tags = pprof(&go, &["-tags"], &file);
    print!("{tags}");
    let role = tags
        .split("role:")
        .nth(1)
        .unwrap_or_else(|| panic!("no role label:\n{tags}"));
    assert!(role.contains(": hot") && role.contains(": cold"), "{tags}");
    assert!(tags.contains("goid:"), "no goid label:\n{tags}");
    // The hot goroutine's samples carry its label: burn_hot under role=hot only.
    let hot = pprof(&go, &["-top", "-tagfocus=role=hot"], &file);
    assert_eq!(
        top_functions(&hot).first().map(String::as_str),
        Some("burn_hot"),
        "{hot}"
    );
    assert!(
        !top_functions(&hot).iter().any(|f| f == "burn_cold"),
        "{hot}"
    );
}

/// GMP_CPUPROFILE=file profiles from start-up and writes the file at exit.
#[test]
fn cpuprofile_env() {
    let Some(go) = go() else {
        eprintln!("cpuprofile_env: skipped: no go command (go tool pprof reads the profile)");
        return;
    };
    let file = out_dir().join("cpuprof-env.pb");
    let _ = std::fs::remove_file(&file);
    let o = run_cpuprof(
        &["env"],
        &[
            ("GMP_MAXPROCS", "2"),
            ("GMP_CPUPROFILE", file.to_str().expect("path")),
        ],
    );
    assert!(o.status.success(), "{}", o.report("cpuprof env failed"));
    let top = pprof(&go, &["-top"], &file);
    assert_eq!(
        top_functions(&top).first().map(String::as_str),
        Some("burn_hot"),
        "{top}"
    );
}

/// Goroutine labels through the custom-labels ABI: `custom_labels_current_set` shows the
/// running goroutine's labels, switches with the goroutines on one thread, and is null
/// for a goroutine without labels.
#[test]
fn custom_labels_abi() {
    let _serial = lock();
    let exe = compile_src_opts(
        "custom_labels",
        &manifest_dir().join("c-tests/custom_labels.c"),
        &[],
        &["-ldl"],
    );
    let mut cmd = Command::new(&exe);
    cmd.current_dir(out_dir());
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.env("GMP_MAXPROCS", "1");
    let o = run_with_timeout(cmd, "custom_labels");
    assert!(o.status.success(), "{}", o.report("custom_labels failed"));
}
