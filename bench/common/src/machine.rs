//! The machine and its processes: the clocks, the CPU ticks and I/O counters of
//! a process (/proc), waiting for a process to go idle, and what a report's
//! header says about the hardware.

use std::{
    fs,
    time::{Duration, Instant},
};

use serde::Serialize;

/// CLOCK_MONOTONIC in nanoseconds: one clock for every thread and every process
/// of this machine, so a send timestamp taken by a producer can be compared
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

/// Clock ticks per second, the unit of the CPU times in /proc/<pid>/stat.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The sum of fields `first..=last` of /proc/<pid>/stat, counted from 0 at the
/// field after the command name (the state).
fn proc_stat_sum(pid: &str, first: usize, last: usize) -> Option<u64> {
    stat_sum(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?, first, last)
}

/// `proc_stat_sum` of the text of one stat file (a process's or a thread's).
fn stat_sum(stat: &str, first: usize, last: usize) -> Option<u64> {
    // Fields after the command name (which may contain spaces) start at field 3 (state).
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let mut sum = 0u64;
    for i in first..=last {
        sum += f.get(i)?.parse::<u64>().ok()?;
    }
    Some(sum)
}

/// utime + stime of a process (all its threads), in clock ticks. `pid` is a
/// number or `self`.
pub fn proc_cpu_ticks(pid: &str) -> Option<u64> {
    proc_stat_sum(pid, 11, 12)
}

/// utime + stime of the threads of a process whose name starts with `prefix`
/// (e.g. `rocksdb` for the storage engine's flush and compaction threads), in
/// clock ticks.
pub fn proc_threads_cpu_ticks(pid: &str, prefix: &str) -> Option<u64> {
    let mut sum = 0u64;
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let stat = match fs::read_to_string(task.path().join("stat")) {
            Ok(s) => s,
            Err(_) => continue, // the thread ended meanwhile
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if stat[open + 1..close].starts_with(prefix) {
            sum += stat_sum(&stat, 11, 12).unwrap_or(0);
        }
    }
    Some(sum)
}

/// utime + stime + cutime + cstime of a process: its own CPU and that of the
/// children it has waited for, in clock ticks.
pub fn proc_cpu_ticks_with_children(pid: &str) -> Option<u64> {
    proc_stat_sum(pid, 11, 14)
}

/// A counter of /proc/<pid>/io, in bytes: `read_bytes` is what the process made
/// the kernel fetch from the block device (page-cache hits are not counted),
/// `write_bytes` what it caused to be written towards storage.
pub fn proc_io_bytes(pid: &str, counter: &str) -> Option<u64> {
    fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(counter)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits up to `max` for a process to use less than 5% of a core over 300 ms
/// (background flushes and compactions of what ran before), so that they are
/// not counted in the next measurement.
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

/// When and on what a run was made: the start of every report's header and of
/// its JSON `meta` (flattened into it, so the JSON keys stay where they were).
#[derive(Debug, Serialize)]
pub struct Machine {
    pub date: String,
    pub nproc: usize,
    pub cpu_model: String,
    pub mem_total_gib: f64,
}

impl Machine {
    /// This machine, dated now.
    pub fn now() -> Machine {
        Machine {
            date: chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string(),
            nproc: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            cpu_model: cpu_model(),
            mem_total_gib: mem_total_gib(),
        }
    }

    /// `<date> · machine: <n> CPUs (<model>), <m> GiB RAM`, the start of the
    /// Markdown reports' header line.
    pub fn header(&self) -> String {
        format!(
            "{} · machine: {} CPUs ({}), {:.1} GiB RAM",
            self.date, self.nproc, self.cpu_model, self.mem_total_gib
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_readings() {
        assert!(proc_cpu_ticks("self").is_some());
        assert!(proc_cpu_ticks_with_children("self") >= proc_cpu_ticks("self"));
        assert!(proc_cpu_ticks("no-such-process").is_none());
        let a = mono_ns();
        assert!(mono_ns() >= a);
        assert!(clock_ticks() > 0.0);
    }

    #[test]
    fn counts_only_the_named_threads() {
        let busy = std::thread::Builder::new()
            .name("rocksdb:test".into())
            .spawn(|| {
                let t0 = Instant::now();
                let mut x = 0u64;
                while t0.elapsed() < Duration::from_millis(300) {
                    x = x.wrapping_mul(31).wrapping_add(1);
                }
                x
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let named = proc_threads_cpu_ticks("self", "rocksdb").unwrap();
        let none = proc_threads_cpu_ticks("self", "no-such-thread").unwrap();
        busy.join().unwrap();
        assert!(named > 0, "a thread spinning 200 ms used no ticks");
        assert_eq!(none, 0);
    }
}
