//! A server process a benchmark starts itself: Tailstream (or, through
//! [`ServerProc::spawn`], anything else that listens on a port, such as
//! redis-server), each with its own free port and fresh directory, stopped
//! (SIGTERM) and deleted at the end.

use std::{
    fs,
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use mongodb::{bson::doc, Client};

/// The Tailstream binary when none is given: $TAILSTREAM_BIN, else what
/// `bash scripts/run.sh` builds, `~/.cache/tailstream/target/release/tailstream`.
pub fn default_server_bin() -> PathBuf {
    if let Some(b) = std::env::var_os("TAILSTREAM_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(b);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache/tailstream/target/release/tailstream")
}

pub fn free_port() -> Result<u16> {
    // A free port: bind port 0, note the number, let it go.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .context("cannot find a free port")
}

/// Creates `<parent>/<prefix>-<pid>-<nanoseconds>`: a directory no other run,
/// earlier or concurrent, uses.
pub fn fresh_dir(parent: &Path, prefix: &str) -> Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = parent.join(format!("{prefix}-{}-{stamp}", std::process::id()));
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// A server process the benchmark started: its own port and directory, stopped
/// (SIGTERM) and the directory deleted when dropped.
pub struct ServerProc {
    /// How messages name it: "the server", "redis-server".
    pub what: &'static str,
    child: Child,
    pub pid: u32,
    pub port: u16,
    /// Holds `server.log` (and Tailstream's `db/`, the --dbpath).
    pub dir: PathBuf,
    log: PathBuf,
    pub bin: PathBuf,
    stopped: bool,
    /// The certificates directory when the server was started with TLS
    /// (`$BENCH_TLS_CERTS`): clients connect with `tls=true&tlsCAFile=<dir>/ca.pem`.
    tls_certs: Option<PathBuf>,
}

/// `$BENCH_TLS_CERTS`: a directory made by `python3 tests/tls_certs.py DIR`. When set,
/// every Tailstream a benchmark starts runs `--tlsMode requireTLS` with its
/// `server.pem`, and [`ServerProc::uri`] asks for TLS (the cost of TLS, issue 29).
pub fn tls_certs_dir() -> Option<PathBuf> {
    std::env::var_os("BENCH_TLS_CERTS")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

impl ServerProc {
    /// Runs `bin args`, its output going to `dir/server.log`, and waits
    /// up to 120 s for it to listen on `port` of 127.0.0.1. If it cannot start,
    /// exits or does not listen, the error says so with the end of its log, and
    /// `dir` is deleted.
    pub fn spawn(
        what: &'static str,
        bin: PathBuf,
        dir: PathBuf,
        port: u16,
        args: &[String],
    ) -> Result<ServerProc> {
        let log = dir.join("server.log");
        let logfile = fs::File::create(&log).context("cannot create the server log")?;
        let child = Command::new(&bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(logfile.try_clone()?)
            .stderr(logfile)
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(anyhow!(e).context(format!("cannot start {}", bin.display())));
            }
        };
        let pid = child.id();
        let mut server = ServerProc {
            what,
            child,
            pid,
            port,
            dir,
            log,
            bin,
            stopped: false,
            tls_certs: None,
        };
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = server.child.try_wait()? {
                server.stopped = true;
                bail!(
                    "{what} exited during startup ({status}); its log:\n{}",
                    server.log_tail(40)
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "{what} did not listen on port {port} within 120 s; its log:\n{}",
                    server.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    /// Tailstream on a free port of 127.0.0.1, in a [`fresh_dir`] under `parent`
    /// named after `dir_prefix`, with `--dbpath <dir>/db` and `--quiet` (so its
    /// log holds only warnings and errors), then `extra_args`.
    pub fn tailstream(
        what: &'static str,
        bin: PathBuf,
        parent: &Path,
        dir_prefix: &str,
        extra_args: &[String],
    ) -> Result<ServerProc> {
        if !bin.is_file() {
            bail!(
                "Tailstream binary {} not found: build it (bash scripts/run.sh, or cargo build --release \
                 in the repository), or pass --server-bin / set $TAILSTREAM_BIN, or benchmark a running \
                 server with --uri",
                bin.display()
            );
        }
        let dir = fresh_dir(parent, dir_prefix)?;
        let dbpath = dir.join("db");
        fs::create_dir_all(&dbpath)
            .with_context(|| format!("cannot create {}", dbpath.display()))?;
        let port = free_port()?;
        let mut args = vec![
            "--port".into(),
            port.to_string(),
            "--bind_ip".into(),
            "127.0.0.1".into(),
            "--dbpath".into(),
            dbpath.display().to_string(),
            "--quiet".into(),
        ];
        let tls = tls_certs_dir();
        if let Some(certs) = &tls {
            args.extend([
                "--tlsMode".into(),
                "requireTLS".into(),
                "--tlsCertificateKeyFile".into(),
                certs.join("server.pem").display().to_string(),
            ]);
        }
        args.extend_from_slice(extra_args);
        let mut server = ServerProc::spawn(what, bin, dir, port, &args)?;
        server.tls_certs = tls;
        Ok(server)
    }

    /// The URI of a MongoDB-compatible server started here.
    pub fn uri(&self) -> String {
        let tls = match &self.tls_certs {
            Some(certs) => format!("&tls=true&tlsCAFile={}", certs.join("ca.pem").display()),
            None => String::new(),
        };
        format!("mongodb://127.0.0.1:{}/?directConnection=true{tls}", self.port)
    }

    /// Tailstream's --dbpath.
    pub fn dbpath(&self) -> PathBuf {
        self.dir.join("db")
    }

    pub fn log_tail(&self, n: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Log lines at WARN or ERROR level, or a panic (Tailstream runs with --quiet).
    pub fn log_problems(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .map(str::to_string)
            .collect()
    }

    /// Whether the server is still running; Err describes how it ended.
    pub fn check_alive(&mut self) -> std::result::Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!("{} exited unexpectedly ({status})", self.what)),
            Err(e) => Err(format!("cannot wait for {}: {e}", self.what)),
        }
    }

    /// SIGTERM, wait up to 60 s, then SIGKILL. Returns a description of an abnormal end.
    pub fn stop(&mut self) -> Option<String> {
        if self.stopped {
            return None;
        }
        self.stopped = true;
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(format!("{} had already exited ({status})", self.what));
        }
        // SAFETY: plain kill(2) on our own child's pid, which has not been reaped yet.
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    return if status.success() || status.code().is_none() {
                        None
                    } else {
                        Some(format!("{} exited with {status} after SIGTERM", self.what))
                    };
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Some(format!(
                        "{} did not stop within 60 s of SIGTERM and was killed",
                        self.what
                    ));
                }
            }
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The server's name and version from buildInfo, as the reports' headers give
/// it: `Tailstream <v> (MongoDB <v> compatible)`, or `MongoDB <v> (<git version>)`.
pub async fn server_version(client: &Client) -> Result<String> {
    let bi = client
        .database("admin")
        .run_command(doc! {"buildInfo": 1})
        .await?;
    let version = bi.get_str("version").unwrap_or("?").to_string();
    Ok(match bi.get_str("tailstreamVersion") {
        Ok(tv) => format!("Tailstream {tv} (MongoDB {version} compatible)"),
        Err(_) => format!(
            "MongoDB {version} ({})",
            bi.get_str("gitVersion").unwrap_or("?")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_dirs_differ() {
        let parent = std::env::temp_dir();
        let a = fresh_dir(&parent, "tailstream-bench-common-test").unwrap();
        let b = fresh_dir(&parent, "tailstream-bench-common-test").unwrap();
        assert_ne!(a, b);
        assert!(a.is_dir() && a.starts_with(&parent));
        fs::remove_dir_all(&a).unwrap();
        fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn missing_binary_is_reported() {
        let err = ServerProc::tailstream(
            "the server",
            PathBuf::from("/nonexistent/tailstream"),
            &std::env::temp_dir(),
            "tailstream-bench-common-test",
            &[],
        )
        .err()
        .unwrap();
        assert!(err
            .to_string()
            .contains("/nonexistent/tailstream not found"));
    }
}
