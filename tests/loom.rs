//! Runs the loom models of the crate (`loom_tests` modules, e.g. in `src/rt/runq.rs`) from
//! a plain `cargo test`: they need the whole crate built with `--cfg loom`, which only a
//! nested cargo with its own target directory (`<target>/loom`) can do without rebuilding
//! the normal one. The first run builds the crate and its dev-dependencies again in release
//! mode (a minute or two on two cores); later runs reuse that build.
//!
//! Set `LOOM_MAX_PREEMPTIONS` to override the models' preemption bounds,
//! `GMP_SKIP_LOOM=1` to skip.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn loom_models() {
    if std::env::var_os("GMP_SKIP_LOOM").is_some_and(|v| v == "1") {
        eprintln!("loom_models: skipped (GMP_SKIP_LOOM=1)");
        return;
    }
    // CARGO_TARGET_TMPDIR is <target>/tmp: put the loom build beside it.
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp
        .parent()
        .map(|t| t.join("loom"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/loom"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let status = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["test", "--release", "--lib", "loom_tests"])
        .env("RUSTFLAGS", "--cfg loom")
        .env("CARGO_TARGET_DIR", &target)
        // Would override RUSTFLAGS if an outer build exported it.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("loom_models: cannot run cargo");
    assert!(status.success(), "loom models failed: {status}");
}
