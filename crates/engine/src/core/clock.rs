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
        let next = if now > secs {
            (now, 1)
        } else if inc == u32::MAX {
            let secs = secs
                .checked_add(1)
                .expect("the cluster clock ran out of seconds (year 2106)");
            (secs, 1)
        } else {
            (secs, inc + 1)
        };
        // Oplog order, resume tokens and every reader's position rest on this.
        assert!(
            next > self.last,
            "the cluster clock went backwards: {next:?} after {:?}",
            self.last
        );
        self.last = next;
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

    #[test]
    fn a_full_increment_moves_to_the_next_second() {
        let future = bson::Timestamp {
            time: u32::MAX - 1,
            increment: u32::MAX,
        };
        let next = ClusterClock::after(Some(future)).next();
        assert_eq!(
            next,
            bson::Timestamp {
                time: u32::MAX,
                increment: 1
            }
        );
    }

    /// Past the last second a timestamp holds, the clock stops rather than wrap to 0.
    #[test]
    #[should_panic(expected = "ran out of seconds")]
    fn the_clock_never_wraps_around() {
        let last = bson::Timestamp {
            time: u32::MAX,
            increment: u32::MAX,
        };
        ClusterClock::after(Some(last)).next();
    }
}
