//! Progress of long work (an index build over a large collection, trimming an oplog
//! made smaller), as mongod's `ProgressMeter` reports it: the running operation's
//! progress (`currentOp`'s `msg` and `progress: {done, total}`) after every step, and
//! the "progress meter" log line (id 51773: `name`, `done`, `total`, `percent`,
//! `units`) at most every [`LOG_INTERVAL`], so short work logs nothing.

use std::time::{Duration, Instant};
use tailstream_query::script::{Operation, Progress};

/// mongod's ProgressMeter default (`secondsBetween = 3`): a line every 3 seconds is
/// enough to watch a build of minutes and too few to flood the log.
pub const LOG_INTERVAL: Duration = Duration::from_secs(3);

/// mongod's log id of a progress line.
const ID_PROGRESS_METER: i64 = 51773;

pub struct ProgressMeter {
    name: &'static str,
    units: &'static str,
    total: u64,
    done: u64,
    last_log: Instant,
    interval: Duration,
}

impl ProgressMeter {
    /// Work of `total` `units`; the running operation (if any) shows it from now on.
    pub fn new(name: &'static str, units: &'static str, total: u64) -> ProgressMeter {
        ProgressMeter::with_interval(name, units, total, LOG_INTERVAL)
    }

    fn with_interval(
        name: &'static str,
        units: &'static str,
        total: u64,
        interval: Duration,
    ) -> ProgressMeter {
        let meter = ProgressMeter {
            name,
            units,
            total,
            done: 0,
            last_log: Instant::now(),
            interval,
        };
        meter.show();
        meter
    }

    /// `n` more done; returns whether a log line was written.
    pub fn hit(&mut self, n: u64) -> bool {
        self.done = self.done.saturating_add(n);
        self.show();
        if self.total == 0 || self.last_log.elapsed() < self.interval {
            return false;
        }
        self.last_log = Instant::now();
        tracing::info!(
            id = ID_PROGRESS_METER,
            name = self.name,
            done = saturating_i64(self.done),
            total = saturating_i64(self.total),
            percent = self.percent(),
            units = self.units,
            "progress meter"
        );
        true
    }

    fn progress(&self) -> Progress {
        Progress {
            name: self.name,
            done: self.done,
            total: self.total,
        }
    }

    fn percent(&self) -> i64 {
        saturating_i64(self.progress().percent())
    }

    fn show(&self) {
        Operation::set_progress_current(Some(self.progress()));
    }
}

impl Drop for ProgressMeter {
    /// The work ended (done, failed or killed): the operation shows no progress.
    fn drop(&mut self) {
        Operation::set_progress_current(None);
    }
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operation_shows_the_progress_until_the_meter_ends() {
        let op = Operation::new(None);
        let _in = op.enter();
        let progress = |done, total| {
            Some(Progress {
                name: "Index Build: scanning collection",
                done,
                total,
            })
        };
        {
            let mut m = ProgressMeter::new("Index Build: scanning collection", "documents", 200);
            assert_eq!(op.progress(), progress(0, 200));
            assert!(!m.hit(50), "no line before the interval");
            assert_eq!(op.progress(), progress(50, 200));
            assert_eq!(m.percent(), 25);
        }
        assert_eq!(op.progress(), None);
    }

    #[test]
    fn a_line_once_the_interval_has_passed() {
        let mut m = ProgressMeter::with_interval("Oplog truncation", "bytes", 10, Duration::ZERO);
        assert!(m.hit(3));
        assert!(m.hit(30), "past an estimated total");
        assert_eq!(m.percent(), 100);
        let mut empty = ProgressMeter::with_interval("x", "bytes", 0, Duration::ZERO);
        assert!(!empty.hit(1), "no total: nothing to report");
    }
}
