//! The Tailstream server the benchmark starts for each scenario, and the /proc
//! readings (CPU seconds and disk reads of a process, clocks, the machine).
//! Trimmed from bench/bus/src/servers.rs.

use std::{
    fs,
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};

/// CLOCK_MONOTONIC in nanoseconds: the producer's send stamp and the consumer's
/// receive time come from this one clock, whatever thread takes them.
pub fn mono_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
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

/// `read_bytes` of /proc/<pid>/io: what the process made the kernel fetch from
/// the block device (page-cache hits are not counted).
pub fn proc_read_bytes(pid: u32) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Empties the page cache (root only), so that a read afterwards comes from the disk.
pub fn drop_caches() -> bool {
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// Bytes available to us on the filesystem of `path`.
pub fn free_disk_bytes(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs fills the struct we pass; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Raises the soft limit of open files to the hard limit: 1,000 streams are
/// 1,000 connections on each side, and the server inherits the limit from us.
pub fn raise_nofile_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur as u64
    }
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
/// (background flushes and compactions of the previous step).
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
        if ((b - a) as f64 / hz / t0.elapsed().as_secs_f64()) < 0.05 {
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

/// A Tailstream server the benchmark started: its own port and data directory,
/// stopped (SIGTERM) and deleted when dropped.
pub struct ServerProc {
    child: Child,
    pub pid: u32,
    pub port: u16,
    /// Holds `db/` (the --dbpath) and `server.log`.
    pub dir: PathBuf,
    log: PathBuf,
    stopped: bool,
}

impl ServerProc {
    /// Tailstream on a free port of 127.0.0.1 with a fresh --dbpath under `parent`.
    pub fn tailstream(bin: &Path, parent: &Path, oplog_mb: u64) -> Result<ServerProc> {
        // The binary is rebuilt now and then by someone else: wait for it a while.
        let deadline = Instant::now() + Duration::from_secs(300);
        while !bin.is_file() {
            if Instant::now() > deadline {
                bail!(
                    "Tailstream binary {} not found: build it or pass --server-bin / set $TAILSTREAM_BIN",
                    bin.display()
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        let dir = parent.join(format!(
            "tailstream-bench-changestream-{}-{}",
            std::process::id(),
            stamp()
        ));
        fs::create_dir_all(dir.join("db"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let port = free_port()?;
        let log = dir.join("server.log");
        let logfile = fs::File::create(&log).context("cannot create the server log")?;
        let args = [
            "--port".to_string(),
            port.to_string(),
            "--bind_ip".into(),
            "127.0.0.1".into(),
            "--dbpath".into(),
            dir.join("db").display().to_string(),
            "--replSet".into(),
            "rs0".into(),
            "--quiet".into(),
            "--oplogSize".into(),
            oplog_mb.to_string(),
        ];
        let child = match Command::new(bin)
            .args(&args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(logfile.try_clone()?)
            .stderr(logfile)
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(anyhow!(e).context(format!("cannot start {}", bin.display())));
            }
        };
        let mut server = ServerProc {
            pid: child.id(),
            child,
            port,
            dir,
            log,
            stopped: false,
        };
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = server.child.try_wait()? {
                server.stopped = true;
                bail!(
                    "the server exited during startup ({status}); its log:\n{}",
                    server.log_tail(40)
                );
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "the server did not listen on port {port} within 120 s; its log:\n{}",
                    server.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    pub fn uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/?directConnection=true", self.port)
    }

    pub fn dbpath(&self) -> PathBuf {
        self.dir.join("db")
    }

    pub fn log_tail(&self, n: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Log lines at WARN or ERROR level (the server runs with --quiet).
    pub fn log_problems(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"))
            .map(str::to_string)
            .collect()
    }

    /// Err describes how the server ended, if it did.
    pub fn check_alive(&mut self) -> std::result::Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "the server exited unexpectedly ({status}); its log:\n{}",
                self.log_tail(30)
            )),
            Err(e) => Err(format!("cannot wait for the server: {e}")),
        }
    }

    /// SIGTERM, wait up to 60 s, then SIGKILL. Returns a description of an abnormal end.
    pub fn stop(&mut self) -> Option<String> {
        if self.stopped {
            return None;
        }
        self.stopped = true;
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(format!("the server had already exited ({status})"));
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
                        Some(format!("the server exited with {status} after SIGTERM"))
                    };
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Some(
                        "the server did not stop within 60 s of SIGTERM and was killed".into(),
                    );
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
