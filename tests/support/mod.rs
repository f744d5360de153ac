//! Running external programs from the C, C++ and CMake tests (`tests/c_*.rs` through
//! `support/ctest.rs`, `tests/cxx.rs`, `tests/cmake.rs`): compilers, cmake, the programs they build. Every command runs with
//! piped output and a deadline; a failure reports the command's stdout and stderr.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `GMP_*` variables a program must not inherit from whoever runs `cargo test`.
pub const GMP_ENV: &[&str] = &[
    "GMP_MAXPROCS",
    "GMP_STACK_SIZE",
    "GMP_MAX_THREADS",
    "GMP_DEBUG",
    "GMP_INTERPOSE",
    "GMP_TRACE",
    "GMP_TRACE_DIR",
    "GMP_TRACE_LATENCY",
    "GMP_CPUPROFILE",
    "GMP_RESOLV_ROOT",
];

/// What a finished command left behind.
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn report(&self, what: &str) -> String {
        format!(
            "{what}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` to completion with piped output and no core dumps, killing it (and
/// failing the test) after `timeout`.
pub fn run(mut cmd: Command, what: &str, timeout: Duration) -> Outcome {
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    run_as_is(cmd, what, timeout)
}

/// `run` with the environment the caller set up (the C tests set `GMP_*` themselves).
pub fn run_as_is(mut cmd: Command, what: &str, timeout: Duration) -> Outcome {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        cmd.pre_exec(|| {
            let no_core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {:?}: {e}", cmd.get_program()));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout piped")));
    let err = drain(Box::new(child.stderr.take().expect("stderr piped")));
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            let _ = child.kill();
            break child.wait().expect("wait after kill");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let outcome = Outcome {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    };
    assert!(
        !timed_out,
        "{}",
        outcome.report(&format!(
            "{what} timed out after {timeout:?} and was killed"
        ))
    );
    outcome
}

/// Runs `cmd`, which must exit 0.
pub fn run_ok(cmd: Command, what: &str, timeout: Duration) -> Outcome {
    let outcome = run(cmd, what, timeout);
    assert!(
        outcome.status.success(),
        "{}",
        outcome.report(&format!("{what} failed"))
    );
    outcome
}
