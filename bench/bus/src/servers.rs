//! The servers the benchmark starts itself (Tailstream, redis-server) and the
//! /proc readings (CPU seconds of a process, the clocks).

use std::{
    fs,
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};

// ---------------------------------------------------------------------------
// Clocks and /proc

/// CLOCK_MONOTONIC in nanoseconds: one clock for every thread and every process
/// of this machine, so a send timestamp taken by the producer can be compared
/// with a receive time taken by a consumer in another thread or process.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall-clock seconds since the epoch (the seed's `{time: <now>}`).
pub fn unix_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// utime + stime of a process (all its threads), in clock ticks.
pub fn proc_cpu_ticks(pid: &str) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at field 3 (state).
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// utime + stime + cutime + cstime of this process (the benchmark, with the
/// consumer processes it has waited for), in clock ticks.
pub fn self_cpu_ticks_with_children() -> Option<u64> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let mut sum = 0u64;
    for i in 11..=14 {
        sum += f.get(i)?.parse::<u64>().ok()?;
    }
    Some(sum)
}

pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

pub fn mem_total_gib() -> f64 {
    fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0 / 1024.0)
        .unwrap_or(0.0)
}

/// Waits up to `max` for a process to use less than 5% of a core over 300 ms
/// (background flushes and compactions of the previous row).
pub fn wait_idle(pid: u32, max: Duration) {
    let p = pid.to_string();
    let hz = clock_ticks();
    let deadline = Instant::now() + max;
    while Instant::now() < deadline {
        let (Some(a), t0) = (proc_cpu_ticks(&p), Instant::now()) else {
            return;
        };
        std::thread::sleep(Duration::from_millis(300));
        let Some(b) = proc_cpu_ticks(&p) else { return };
        let busy = (b - a) as f64 / hz / t0.elapsed().as_secs_f64();
        if busy < 0.05 {
            return;
        }
    }
}

fn free_port() -> Result<u16> {
    // A free port: bind port 0, note the number, let it go.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .context("cannot find a free port")
}

fn stamp() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------
// A server process the benchmark started

pub struct ServerProc {
    pub what: &'static str,
    child: Child,
    pub pid: u32,
    pub port: u16,
    pub dir: PathBuf,
    log: PathBuf,
    pub bin: PathBuf,
    stopped: bool,
}

impl ServerProc {
    fn spawn(
        what: &'static str,
        bin: PathBuf,
        dir: PathBuf,
        port: u16,
        args: Vec<String>,
    ) -> Result<ServerProc> {
        let log = dir.join("server.log");
        let logfile = fs::File::create(&log).context("cannot create the server log")?;
        let child = Command::new(&bin)
            .args(&args)
            .current_dir(&dir)
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

    /// Tailstream on a free port of 127.0.0.1 with a fresh --dbpath under `parent`.
    pub fn tailstream(bin: PathBuf, parent: &Path) -> Result<ServerProc> {
        if !bin.is_file() {
            bail!(
                "Tailstream binary {} not found: build it (bash scripts/run.sh, or cargo build --release \
                 in the repository), or pass --server-bin / set $TAILSTREAM_BIN, or benchmark a running \
                 server with --uri",
                bin.display()
            );
        }
        let dir = parent.join(format!(
            "tailstream-bench-bus-{}-{}",
            std::process::id(),
            stamp()
        ));
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let port = free_port()?;
        let args = vec![
            "--port".into(),
            port.to_string(),
            "--bind_ip".into(),
            "127.0.0.1".into(),
            "--dbpath".into(),
            dir.join("db").display().to_string(),
            "--quiet".into(),
        ];
        ServerProc::spawn("the Tailstream server", bin, dir, port, args)
    }

    /// redis-server on a free port of 127.0.0.1, its working directory a fresh
    /// directory under `parent`. `appendfsync`: None = no persistence at all (no
    /// RDB snapshots, no AOF); Some("everysec" | "always") = AOF on with that policy
    /// (and still no RDB snapshots).
    pub fn redis(bin: PathBuf, parent: &Path, appendfsync: Option<&str>) -> Result<ServerProc> {
        let dir = parent.join(format!(
            "tailstream-bench-bus-redis-{}-{}",
            std::process::id(),
            stamp()
        ));
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let port = free_port()?;
        let mut args: Vec<String> = vec![
            "--port".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            dir.display().to_string(),
            "--daemonize".into(),
            "no".into(),
            "--save".into(),
            "".into(),
            "--loglevel".into(),
            "warning".into(),
        ];
        match appendfsync {
            None => args.extend(["--appendonly".into(), "no".into()]),
            Some(policy) => args.extend([
                "--appendonly".into(),
                "yes".into(),
                "--appendfsync".into(),
                policy.into(),
            ]),
        }
        ServerProc::spawn("redis-server", bin, dir, port, args)
    }

    pub fn log_tail(&self, n: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Log lines at WARN or ERROR level (Tailstream runs with --quiet), or Redis
    /// warnings (`#`).
    pub fn log_problems(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.contains("WARN")
                    || l.contains("ERROR")
                    || l.contains("panicked")
                    || l.contains(" # ")
            })
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
