//! The cluster clock: hands out strictly increasing `Timestamp(seconds, increment)`
//! values for oplog entries. Wall-clock seconds when the clock moves forward; when
//! it stalls or goes backwards, the increment grows instead, so time never goes back.

use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy)]
pub struct ClusterClock {
    last: (u32, u32),
}

impl ClusterClock {
    /// A clock that will only hand out times after `last` (the newest oplog entry).
    pub fn after(last: Option<bson::Timestamp>) -> ClusterClock {
        ClusterClock {
            last: last.map(|t| (t.time, t.increment)).unwrap_or((0, 0)),
        }
    }

    pub fn next(&mut self) -> bson::Timestamp {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        let (secs, inc) = self.last;
        self.last = if now > secs {
            (now, 1)
        } else if inc == u32::MAX {
            (secs + 1, 1)
        } else {
            (secs, inc + 1)
        };
        bson::Timestamp {
            time: self.last.0,
            increment: self.last.1,
        }
    }

    /// The newest time handed out (or the starting point).
    pub fn last(&self) -> bson::Timestamp {
        bson::Timestamp {
            time: self.last.0,
            increment: self.last.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strictly_increasing_even_if_the_start_is_in_the_future() {
        let future = bson::Timestamp {
            time: u32::MAX - 1,
            increment: 5,
        };
        let mut c = ClusterClock::after(Some(future));
        let a = c.next();
        let b = c.next();
        assert_eq!(
            a,
            bson::Timestamp {
                time: u32::MAX - 1,
                increment: 6
            }
        );
        assert!((b.time, b.increment) > (a.time, a.increment));
        let mut c = ClusterClock::after(None);
        let x = c.next();
        let y = c.next();
        assert!((y.time, y.increment) > (x.time, x.increment));
    }
}
