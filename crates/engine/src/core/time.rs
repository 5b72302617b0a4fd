//! Cluster time: mongod's `Timestamp(seconds, increment)` as one sortable integer.
//!
//! Every oplog entry has one; storage keys that follow the oplog (its entries, its
//! per-namespace index, change-stream images, capped collections' insertion order,
//! the pointers of documents stored in their insert entry) hold it big-endian, so
//! byte order is time order. [`ClusterTime`] carries it between them, converted to a
//! BSON `Timestamp` only where one is read or written.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A cluster time: the seconds in the high half of a u64 and the increment in the low
/// half, so that integer order is (seconds, increment) order. Costs what a u64 costs.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct ClusterTime(u64);

impl ClusterTime {
    /// `Timestamp(0, 0)`: before every time the clock hands out (an empty oplog).
    pub const ZERO: ClusterTime = ClusterTime(0);
    /// `Timestamp(4294967295, 4294967295)`: the greatest time.
    pub const MAX: ClusterTime = ClusterTime(u64::MAX);

    #[inline]
    pub const fn new(seconds: u32, increment: u32) -> ClusterTime {
        ClusterTime(((seconds as u64) << 32) | increment as u64)
    }

    #[inline]
    pub const fn seconds(self) -> u32 {
        (self.0 >> 32) as u32
    }

    #[inline]
    pub const fn increment(self) -> u32 {
        self.0 as u32
    }

    /// The time from its sortable integer (as stored in the oplog's state, or a position
    /// in insertion order that precedes every real time).
    #[inline]
    pub const fn from_u64(v: u64) -> ClusterTime {
        ClusterTime(v)
    }

    /// The sortable integer (for a counter or a stored number).
    #[inline]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The smallest time after this one (its increment plus one, or the next second's
    /// increment 0). [`Self::MAX`] has none and is its own.
    #[inline]
    pub const fn next(self) -> ClusterTime {
        ClusterTime(self.0.saturating_add(1))
    }

    /// The greatest time before this one; [`Self::ZERO`] has none and is its own.
    #[inline]
    pub const fn prev(self) -> ClusterTime {
        ClusterTime(self.0.saturating_sub(1))
    }

    /// Big-endian bytes: byte order is time order (keys).
    #[inline]
    pub const fn to_be_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }

    #[inline]
    pub const fn from_be_bytes(bytes: [u8; 8]) -> ClusterTime {
        ClusterTime(u64::from_be_bytes(bytes))
    }
}

impl From<bson::Timestamp> for ClusterTime {
    #[inline]
    fn from(ts: bson::Timestamp) -> ClusterTime {
        ClusterTime::new(ts.time, ts.increment)
    }
}

impl From<ClusterTime> for bson::Timestamp {
    #[inline]
    fn from(t: ClusterTime) -> bson::Timestamp {
        bson::Timestamp {
            time: t.seconds(),
            increment: t.increment(),
        }
    }
}

impl From<ClusterTime> for bson::Bson {
    #[inline]
    fn from(t: ClusterTime) -> bson::Bson {
        bson::Bson::Timestamp(t.into())
    }
}

/// As mongod prints a Timestamp in messages: `Timestamp(1700000000, 3)`.
impl fmt::Display for ClusterTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}, {})", self.seconds(), self.increment())
    }
}

impl fmt::Debug for ClusterTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterTime({}, {})", self.seconds(), self.increment())
    }
}

/// A [`ClusterTime`] shared between threads (a trim point, the newest committed time).
#[derive(Debug, Default)]
#[repr(transparent)]
pub struct AtomicClusterTime(AtomicU64);

impl AtomicClusterTime {
    pub const fn new(t: ClusterTime) -> AtomicClusterTime {
        AtomicClusterTime(AtomicU64::new(t.0))
    }

    #[inline]
    pub fn load(&self, order: Ordering) -> ClusterTime {
        ClusterTime(self.0.load(order))
    }

    #[inline]
    pub fn store(&self, t: ClusterTime, order: Ordering) {
        self.0.store(t.0, order)
    }

    /// Replaces the time with `t`; the time before.
    #[inline]
    pub fn swap(&self, t: ClusterTime, order: Ordering) -> ClusterTime {
        ClusterTime(self.0.swap(t.0, order))
    }

    /// Moves the time forward to `t` (never back); the time before.
    #[inline]
    pub fn fetch_max(&self, t: ClusterTime, order: Ordering) -> ClusterTime {
        ClusterTime(self.0.fetch_max(t.0, order))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Edge values of both halves, in (seconds, increment) order.
    const EDGES: [(u32, u32); 9] = [
        (0, 0),
        (0, 1),
        (0, u32::MAX),
        (1, 0),
        (1, u32::MAX),
        (0x7FFF_FFFF, 0x8000_0000),
        (0x8000_0000, 0x7FFF_FFFF),
        (u32::MAX, 0),
        (u32::MAX, u32::MAX),
    ];

    fn ts((time, increment): (u32, u32)) -> bson::Timestamp {
        bson::Timestamp { time, increment }
    }

    #[test]
    fn order_is_seconds_then_increment() {
        for a in EDGES {
            for b in EDGES {
                let (ta, tb) = (ClusterTime::from(ts(a)), ClusterTime::from(ts(b)));
                assert_eq!(ta.cmp(&tb), a.cmp(&b), "{a:?} against {b:?}");
                assert_eq!(
                    ta.to_be_bytes().cmp(&tb.to_be_bytes()),
                    a.cmp(&b),
                    "key bytes of {a:?} against {b:?}"
                );
            }
        }
    }

    #[test]
    fn round_trips() {
        for e in EDGES {
            let t = ClusterTime::from(ts(e));
            assert_eq!((t.seconds(), t.increment()), e);
            assert_eq!(bson::Timestamp::from(t), ts(e));
            assert_eq!(ClusterTime::from_be_bytes(t.to_be_bytes()), t);
            assert_eq!(ClusterTime::from_u64(t.as_u64()), t);
            assert_eq!(bson::Bson::from(t), bson::Bson::Timestamp(ts(e)));
        }
        assert_eq!(ClusterTime::from(ts((0, 0))), ClusterTime::ZERO);
        assert_eq!(
            ClusterTime::from(ts((u32::MAX, u32::MAX))),
            ClusterTime::MAX
        );
    }

    #[test]
    fn next_is_the_smallest_later_time() {
        let t = ClusterTime::new(5, 9);
        assert_eq!(t.next(), ClusterTime::new(5, 10));
        assert_eq!(ClusterTime::new(5, u32::MAX).next(), ClusterTime::new(6, 0));
        assert_eq!(ClusterTime::new(6, 0).prev(), ClusterTime::new(5, u32::MAX));
        assert_eq!(t.next().prev(), t);
        for e in EDGES.iter().filter(|e| **e != (u32::MAX, u32::MAX)) {
            let t = ClusterTime::from(ts(*e));
            assert!(t < t.next());
            // Nothing lies between: every edge value is at most t or at least next.
            for other in EDGES.map(|o| ClusterTime::from(ts(o))) {
                assert!(
                    other <= t || other >= t.next(),
                    "{other:?} between {t:?} and next"
                );
            }
        }
        assert_eq!(ClusterTime::MAX.next(), ClusterTime::MAX);
        assert_eq!(ClusterTime::ZERO.prev(), ClusterTime::ZERO);
    }

    #[test]
    fn prints_as_mongod_prints_a_timestamp() {
        let t = ClusterTime::new(1_700_000_000, 3);
        assert_eq!(t.to_string(), "Timestamp(1700000000, 3)");
        assert_eq!(t.to_string(), bson::Timestamp::from(t).to_string());
        assert_eq!(
            ClusterTime::MAX.to_string(),
            "Timestamp(4294967295, 4294967295)"
        );
    }

    #[test]
    fn atomic_time_moves_forward_only_with_fetch_max() {
        let a = AtomicClusterTime::new(ClusterTime::new(3, 1));
        let before = a.fetch_max(ClusterTime::new(2, 9), Ordering::SeqCst);
        assert_eq!(before, ClusterTime::new(3, 1));
        assert_eq!(a.load(Ordering::SeqCst), ClusterTime::new(3, 1));
        a.fetch_max(ClusterTime::new(3, 2), Ordering::SeqCst);
        assert_eq!(a.load(Ordering::SeqCst), ClusterTime::new(3, 2));
        a.store(ClusterTime::ZERO, Ordering::SeqCst);
        assert_eq!(a.load(Ordering::SeqCst), ClusterTime::ZERO);
    }

    #[test]
    fn is_a_plain_u64() {
        assert_eq!(std::mem::size_of::<ClusterTime>(), 8);
        assert_eq!(std::mem::align_of::<ClusterTime>(), 8);
        assert_eq!(std::mem::size_of::<AtomicClusterTime>(), 8);
    }
}
