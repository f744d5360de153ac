//! Real libraries: unmodified OpenSSL, SQLite and libpq driven from goroutines, every case
//! compared with the same code on plain pthreads (slow: minutes). Harness and conventions:
//! `support/ctest.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
#[allow(dead_code)] // each driver uses its own part of the harness
#[path = "support/ctest.rs"]
mod ctest;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use ctest::*;
use support::{GMP_ENV, Outcome};

/// Fails naming the Debian package that provides `header` unless one of `paths` exists
/// (scripts/install-deps.sh installs every one of them).
fn require_header(paths: &[&str], package: &str) {
    assert!(
        paths.iter().any(|h| Path::new(h).exists()),
        "{} not found: install {package} (scripts/install-deps.sh does)",
        paths[0]
    );
}

/// The `outcome:` line a real-library program printed (what the goroutine and pthread
/// runs of one case must agree on).
fn outcome_line(outcome: &Outcome, what: &str) -> String {
    outcome
        .stdout
        .lines()
        .find(|l| l.starts_with("outcome: "))
        .unwrap_or_else(|| panic!("{}", outcome.report(&format!("{what}: no outcome line"))))
        .to_string()
}

/// Runs `exe args` with a clean GMP_* environment plus `env`; must exit 0 (the program
/// checks every result itself). Returns its outcome line.
fn run_reallib(exe: &Path, args: &[&str], env: &[(&str, &str)], what: &str) -> String {
    let mut cmd = Command::new(exe);
    cmd.args(args).current_dir(out_dir());
    for var in GMP_ENV {
        cmd.env_remove(var);
    }
    cmd.env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let what = format!("{what} ({})", {
        let e: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        e.join(" ")
    });
    let outcome = run_with_timeout(cmd, &what);
    assert_success(&outcome, &what);
    outcome_line(&outcome, &what)
}

/// One case of a real-library program: first on plain pthreads with the hooks off (the
/// reference), then in goroutines with the hooks and preemption on at GOMAXPROCS 1 and 2
/// (and, with `stress`, again with a preemption every sysmon round); every run must pass
/// its own checks and print the reference's outcome line. `args` are the arguments
/// after the mode ("thread" or "go" is inserted after the first).
fn reallib_case(exe: &Path, args: &[&str], stress: bool) {
    let name = exe.file_name().unwrap().to_string_lossy().into_owned();
    let with_mode = |mode: &'static str| {
        let mut a: Vec<&str> = vec![args[0], mode];
        a.extend_from_slice(&args[1..]);
        a
    };
    let what = format!("{name} {}", args[0]);
    let reference = run_reallib(
        exe,
        &with_mode("thread"),
        &[("GMP_INTERPOSE", "0")],
        &format!("{what} thread"),
    );
    for procs in ["1", "2"] {
        let mut envs: Vec<Vec<(&str, &str)>> = vec![vec![("GMP_MAXPROCS", procs)]];
        if stress {
            envs.push(vec![("GMP_MAXPROCS", procs), PREEMPT_STRESS]);
        }
        for env in envs {
            let got = run_reallib(exe, &with_mode("go"), &env, &format!("{what} go"));
            assert_eq!(
                got, reference,
                "{what}: goroutines ({env:?}) and pthreads disagree"
            );
        }
    }
}

/// Compiles c-tests/reallib_openssl.c against libssl and libcrypto.
fn openssl_exe() -> PathBuf {
    require_header(&["/usr/include/openssl/ssl.h"], "libssl-dev");
    let src = manifest_dir().join("c-tests").join("reallib_openssl.c");
    compile_src_libs("reallib_openssl", &src, &["-lssl", "-lcrypto"])
}

/// OpenSSL's RSA with one key shared by 16 signers (c-tests/reallib_openssl.c): the
/// per-thread blinding OpenSSL uses unlocked is safe only if preemption never lets two
/// goroutines interleave on one thread. Also with a preemption every sysmon round.
#[test]
fn reallib_openssl_rsa() {
    let _serial = lock();
    reallib_case(&openssl_exe(), &["rsa"], true);
}

/// ECDSA P-256 signing and verifying with one shared key.
#[test]
fn reallib_openssl_ecdsa() {
    let _serial = lock();
    reallib_case(&openssl_exe(), &["ecdsa"], false);
}

/// A TLS server (RSA-2048 certificate, a handler per connection) and 16 clients doing
/// full handshakes over TCP, every certificate verified and every line echoed.
///
/// A goroutine asleep in an OpenSSL lock wait is made seen by sysmon; with goroutines
/// parked in hooked socket calls bound to its M, the wait must not move to a helper thread
/// at once (`unseen::wrapped`'s grace): the M would run one of them, which then used the
/// thread's RSA blinding the sleeper was halfway through (a wrong RSA-PSS signature, "bad
/// signature" at the client) or took a rwlock the sleeper held for writing on that thread
/// (EDEADLK). Without the grace, about one run in 15 failed at GOMAXPROCS=2.
#[test]
fn reallib_openssl_tls() {
    let _serial = lock();
    reallib_case(&openssl_exe(), &["tls"], true);
}

/// The same TLS server and clients with an ECDSA P-256 server certificate.
#[test]
fn reallib_openssl_tls_ecdsa() {
    let _serial = lock();
    reallib_case(&openssl_exe(), &["tls_ecdsa"], false);
}

/// A temporary directory under `out_dir()`, emptied first.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = out_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// Compiles c-tests/reallib_sqlite.c against libsqlite3.
fn sqlite_exe() -> PathBuf {
    require_header(&["/usr/include/sqlite3.h"], "libsqlite3-dev");
    let src = manifest_dir().join("c-tests").join("reallib_sqlite.c");
    compile_src_libs("reallib_sqlite", &src, &["-lsqlite3"])
}

/// SQLite: one connection shared by 8 workers under a pthread mutex around commits that
/// write and fdatasync, then the same in serialized mode without the program's mutex
/// (c-tests/reallib_sqlite.c).
#[test]
fn reallib_sqlite_shared() {
    let _serial = lock();
    let dir = scratch_dir("sqlite-shared");
    reallib_case(&sqlite_exe(), &["shared", dir.to_str().unwrap()], true);
    reallib_case(&sqlite_exe(), &["serialized", dir.to_str().unwrap()], false);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SQLite: a connection per file per worker, opened and closed every round, with a
/// CPU-heavy query (preemption inside SQLite's global mutexes).
#[test]
fn reallib_sqlite_perfile() {
    let _serial = lock();
    let dir = scratch_dir("sqlite-perfile");
    reallib_case(&sqlite_exe(), &["perfile", dir.to_str().unwrap()], true);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A PostgreSQL server of its own: a fresh cluster (`initdb`) in a temporary directory,
/// listening on 127.0.0.1 and a unix socket in that directory, run as an unprivileged
/// user when the tests run as root (initdb and postgres refuse root); stopped (fast
/// shutdown) and removed when dropped.
struct PgServer {
    child: std::process::Child,
    dir: PathBuf,
    port: u16,
    user: String,
}

/// The directory of PostgreSQL's server programs: `pg_config --bindir` (libpq-dev), else
/// the newest /usr/lib/postgresql/<version>/bin.
fn pg_bindir() -> PathBuf {
    if let Ok(o) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
        if o.status.success() && dir.join("initdb").is_file() && dir.join("postgres").is_file() {
            return dir;
        }
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.retain(|d| d.join("initdb").is_file() && d.join("postgres").is_file());
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    dirs.pop().unwrap_or_else(|| {
        panic!("initdb not found: install postgresql (scripts/install-deps.sh does)")
    })
}

/// The user the server runs as: this one, or when running as root `postgres` (the
/// package's) or else `nobody`. Returns (name, uid, gid, whether to switch).
fn pg_user() -> (String, u32, u32, bool) {
    // SAFETY: getuid has no preconditions; getpwnam/getpwuid return a pointer into static
    // storage that is read before any other call (the tests calling it hold C_TESTS).
    unsafe {
        let uid = libc::getuid();
        if uid != 0 {
            let pw = libc::getpwuid(uid);
            assert!(!pw.is_null(), "getpwuid({uid}) found no user");
            let name = std::ffi::CStr::from_ptr((*pw).pw_name)
                .to_string_lossy()
                .into_owned();
            return (name, uid, libc::getgid(), false);
        }
        for name in ["postgres", "nobody"] {
            let c = std::ffi::CString::new(name).unwrap();
            let pw = libc::getpwnam(c.as_ptr());
            if !pw.is_null() {
                return (name.to_string(), (*pw).pw_uid, (*pw).pw_gid, true);
            }
        }
    }
    panic!("running as root and neither user postgres nor nobody exists: initdb refuses root");
}

impl PgServer {
    fn start() -> PgServer {
        use std::os::unix::process::CommandExt;
        let bin = pg_bindir();
        let (user, uid, gid, switch) = pg_user();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        // Under /tmp: the server's user must reach it, and a unix socket path is short.
        let dir = std::env::temp_dir().join(format!("gmp-pg-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("create the cluster's directory");
        if switch {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .expect("chown the cluster's directory");
        }
        let as_user = |program: &str| {
            let mut cmd = Command::new(bin.join(program));
            if switch {
                cmd.uid(uid).gid(gid);
            }
            cmd.env_remove("LD_PRELOAD").current_dir(&dir);
            cmd
        };
        let data = dir.join("data");
        let mut initdb = as_user("initdb");
        initdb.arg("-D").arg(&data).args([
            "-A",
            "trust",
            "-U",
            &user,
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        let outcome = run_with_timeout(initdb, "initdb");
        assert_success(&outcome, "initdb");
        let log = std::fs::File::create(dir.join("server.log")).expect("create server.log");
        if switch {
            std::os::unix::fs::chown(dir.join("server.log"), Some(uid), Some(gid))
                .expect("chown server.log");
        }
        let child = as_user("postgres")
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=250",
            ])
            .args(["-c", "fsync=off", "-c", "shared_buffers=16MB"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn postgres");
        let server = PgServer {
            child,
            dir,
            port,
            user,
        };
        // Up when pg_isready says it accepts connections on both transports.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = |host: &Path| {
                Command::new(bin.join("pg_isready"))
                    .arg("-h")
                    .arg(host)
                    .args(["-p", &port.to_string(), "-q"])
                    .status()
                    .is_ok_and(|s| s.success())
            };
            if ready(&server.dir) && ready(Path::new("127.0.0.1")) {
                return server;
            }
            let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "postgres did not come up on port {port}; its log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// libpq's connection string for `transport` ("unix" or "tcp").
    fn conninfo(&self, transport: &str) -> String {
        let host = match transport {
            "unix" => format!("host={}", self.dir.display()),
            _ => "hostaddr=127.0.0.1".to_string(),
        };
        format!(
            "{host} port={} user={} dbname=postgres sslmode=disable gssencmode=disable connect_timeout=20",
            self.port, self.user
        )
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGINT: fast shutdown (backends end, the postmaster exits); SIGKILL if it lingers.
        // SAFETY: kill has no memory preconditions; the pid is our own child's.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// libpq against a PostgreSQL server the test starts (c-tests/reallib_pq.c): 100
/// connections, all in pg_sleep(0.3) at once, then LISTEN/NOTIFY between them and
/// PQcancel of running queries, over the unix socket and over TCP.
#[test]
fn reallib_pq() {
    require_header(&["/usr/include/postgresql/libpq-fe.h"], "libpq-dev");
    let _serial = lock();
    let src = manifest_dir().join("c-tests").join("reallib_pq.c");
    let exe = compile_src_opts(
        "reallib_pq",
        &src,
        &["-I/usr/include/postgresql"],
        &["-lpq"],
    );
    let server = PgServer::start();
    for transport in ["unix", "tcp"] {
        let conninfo = server.conninfo(transport);
        reallib_case(&exe, &[transport, &conninfo], false);
    }
    drop(server);
}
