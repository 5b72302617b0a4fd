//! The cluster clock: hands out strictly increasing `Timestamp(seconds, increment)`
//! values for oplog entries. Wall-clock seconds when the clock moves forward; when
//! it stalls or goes backwards, the increment grows instead, so time never goes back.

use super::time::ClusterTime;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy)]
pub struct ClusterClock {
    last: ClusterTime,
}

impl ClusterClock {
    /// A clock that will only hand out times after `last` (the newest oplog entry;
    /// [`ClusterTime::ZERO`] for an empty oplog).
    pub fn after(last: ClusterTime) -> ClusterClock {
        ClusterClock { last }
    }

    /// The next time (never ends, so not an `Iterator`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> ClusterTime {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        let (secs, inc) = (self.last.seconds(), self.last.increment());
        let next = if now > secs {
            ClusterTime::new(now, 1)
        } else if inc == u32::MAX {
            let secs = secs
                .checked_add(1)
                .expect("the cluster clock ran out of seconds (year 2106)");
            ClusterTime::new(secs, 1)
        } else {
            ClusterTime::new(secs, inc + 1)
        };
        // Oplog order, resume tokens and every reader's position rest on this.
        assert!(
            next > self.last,
            "the cluster clock went backwards: {next:?} after {:?}",
            self.last
        );
        self.last = next;
        self.last
    }

    /// The newest time handed out (or the starting point).
    pub fn last(&self) -> ClusterTime {
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strictly_increasing_even_if_the_start_is_in_the_future() {
        let future = ClusterTime::new(u32::MAX - 1, 5);
        let mut c = ClusterClock::after(future);
        let a = c.next();
        let b = c.next();
        assert_eq!(a, ClusterTime::new(u32::MAX - 1, 6));
        assert!((b.seconds(), b.increment()) > (a.seconds(), a.increment()));
        assert!(b > a);
        assert_eq!(c.last(), b);
        let mut c = ClusterClock::after(ClusterTime::ZERO);
        let x = c.next();
        let y = c.next();
        assert!((y.seconds(), y.increment()) > (x.seconds(), x.increment()));
    }

    #[test]
    fn a_full_increment_moves_to_the_next_second() {
        let mut c = ClusterClock::after(ClusterTime::new(u32::MAX - 1, u32::MAX));
        assert_eq!(c.next(), ClusterTime::new(u32::MAX, 1));
    }

    #[test]
    #[should_panic(expected = "ran out of seconds")]
    fn the_clock_never_wraps_around() {
        ClusterClock::after(ClusterTime::new(u32::MAX, u32::MAX)).next();
    }
}
