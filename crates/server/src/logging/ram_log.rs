//! mongod's RAM logs: the last lines of the log kept in memory, for `getLog`.
//! `global` holds the newest `GLOBAL_LINES` lines; `startupWarnings` the warnings
//! logged before the server started listening.

use parking_lot::Mutex;
use std::collections::VecDeque;

/// Lines `getLog: "global"` returns at most (mongod's RamLog keeps 1024).
pub const GLOBAL_LINES: usize = 1024;
/// Startup warnings kept (mongod keeps them in a RamLog of the same size).
pub const STARTUP_WARNING_LINES: usize = 1024;
/// A line longer than this is cut in the RAM log (mongod truncates its RamLog lines
/// to 10 KB too); the log file keeps it whole.
pub const MAX_LINE_BYTES: usize = 10 * 1024;

pub struct RamLog {
    capacity_lines: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    lines: VecDeque<String>,
    total_lines_written: u64,
}

impl RamLog {
    pub const fn new(capacity_lines: usize) -> RamLog {
        RamLog {
            capacity_lines,
            inner: parking_lot::const_mutex(Inner {
                lines: VecDeque::new(),
                total_lines_written: 0,
            }),
        }
    }

    pub fn push(&self, line: &str) {
        let mut line = line.to_string();
        if line.len() > MAX_LINE_BYTES {
            let mut cut = MAX_LINE_BYTES;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
        }
        let mut inner = self.inner.lock();
        if inner.lines.len() == self.capacity_lines {
            inner.lines.pop_front();
        }
        inner.lines.push_back(line);
        inner.total_lines_written += 1;
        assert!(inner.lines.len() <= self.capacity_lines);
    }

    /// (lines ever written, the lines kept, oldest first).
    pub fn snapshot(&self) -> (u64, Vec<String>) {
        let inner = self.inner.lock();
        (
            inner.total_lines_written,
            inner.lines.iter().cloned().collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_lines_and_counts_every_one() {
        let log = RamLog::new(3);
        for i in 0..5 {
            log.push(&format!("line {i}"));
        }
        let (total, lines) = log.snapshot();
        assert_eq!(total, 5);
        assert_eq!(lines, ["line 2", "line 3", "line 4"]);
    }

    #[test]
    fn a_long_line_is_cut_on_a_character_boundary() {
        let log = RamLog::new(1);
        log.push(&"é".repeat(MAX_LINE_BYTES));
        let (_, lines) = log.snapshot();
        assert!(lines[0].len() <= MAX_LINE_BYTES && lines[0].len() >= MAX_LINE_BYTES - 1);
        assert!(lines[0].chars().all(|c| c == 'é'));
    }
}
