//! The commit bus: what every commit tells the readers waiting for new data.
//!
//! A commit publishes one [`CommitNotice`] (its durability sequence number, its newest
//! oplog time and the namespaces it wrote) on a channel every tailable cursor can wait
//! on, and on one channel per namespace bit it wrote, where collection change streams
//! wait: a commit to collection B never wakes a stream on collection A.
//!
//! Change-stream getMores that wait register here too ([`CommitBus::waiting`]); a
//! commit to a namespace someone waits on then asks for its fsync itself (see
//! [`CommitBus::waits_on`]), one thread hop sooner than the woken getMore could.
//!
//! Ordering: the commit publishes after its batch is in the store and after the
//! durability sequence counted it, so a woken reader always finds what it was woken
//! for. Subscribers subscribe before they look (no lost wake-up): a `watch` channel
//! remembers the last notice.
//!
//! A channel nobody subscribes to (most namespace bits, and every channel while its
//! readers are busy) gets the notice stored without a wake-up: a send wakes through
//! eight locked `Notify`s (tokio's watch), 350 instructions a channel, two channels a
//! commit. Store-buffering order makes that safe: the commit writes the store, then
//! a SeqCst fence, then reads the channel's receiver count; a subscriber counts itself
//! in, then a SeqCst fence, then looks at the store. One of the two sees the other: the
//! commit the new receiver (and wakes it), or the receiver the commit's writes.

use super::time::ClusterTime;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use tokio::sync::watch;

/// Namespace bits: a commit's namespaces hashed into a 64-bit mask.
pub const NAMESPACE_BITS: usize = 64;
/// The waiter slot of streams on a database or the deployment (every bit).
const ALL_NAMESPACES_SLOT: usize = NAMESPACE_BITS;

/// What waiting readers (tailable cursors, change streams) are told after each commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitNotice {
    pub seq: u64,
    /// The newest oplog time committed.
    pub last_ts: ClusterTime,
    /// One bit per namespace the commit wrote ([`namespace_bit`]), so a change stream on
    /// another collection lets the commit pass without waking up.
    pub ns_mask: u64,
}

/// The [`CommitNotice::ns_mask`] bit of a namespace (FNV-1a, 64 buckets).
pub fn namespace_bit(ns: &str) -> u64 {
    1u64 << (fnv1a(&[ns.as_bytes()]) % NAMESPACE_BITS as u64)
}

/// 64-bit FNV-1a over `parts` in order: the namespace bits here, and the hash parallel
/// change streams spread events with (a namespace's bytes, or a document key's). A few
/// lines, and fast on the short inputs hashed; a crate would add nothing.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// A waiting change-stream getMore, counted while it lives (see [`CommitBus::waiting`]).
pub struct ChangeStreamWaiting<'a> {
    counter: &'a AtomicU32,
}

impl Drop for ChangeStreamWaiting<'_> {
    fn drop(&mut self) {
        let before = self.counter.fetch_sub(1, Ordering::Relaxed);
        assert!(before > 0, "a change-stream waiter counted out twice");
    }
}

pub struct CommitBus {
    /// Every commit's notice.
    all: watch::Sender<CommitNotice>,
    /// The same notices, one channel per namespace bit ([`namespace_bit`]): a change
    /// stream on one collection waits on its bit's channel, so commits to other
    /// collections do not wake it at all (with a thousand streams on other collections,
    /// one commit would otherwise wake a thousand tasks that all go back to sleep).
    by_bit: Vec<watch::Sender<CommitNotice>>,
    /// Change-stream getMores waiting for events, by namespace bit (the last slot:
    /// streams on a database or the deployment).
    stream_waiters: [AtomicU32; NAMESPACE_BITS + 1],
}

impl CommitBus {
    /// A bus whose channels start at `first` (the newest commit found at open).
    pub fn new(first: CommitNotice) -> CommitBus {
        CommitBus {
            all: watch::channel(first).0,
            by_bit: (0..NAMESPACE_BITS)
                .map(|_| watch::channel(first).0)
                .collect(),
            stream_waiters: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// The last notice published.
    pub fn last(&self) -> CommitNotice {
        *self.all.borrow()
    }

    /// Every commit's notices (tailable cursors wait on this).
    pub fn subscribe(&self) -> watch::Receiver<CommitNotice> {
        counted_in(&self.all)
    }

    /// Notices of the commits that wrote a namespace of `mask` (a single
    /// [`namespace_bit`]), or of every commit for any other mask. Each notice is the
    /// commit's own, with its full `ns_mask`.
    pub fn subscribe_for(&self, mask: u64) -> watch::Receiver<CommitNotice> {
        if mask.count_ones() == 1 {
            counted_in(&self.by_bit[mask.trailing_zeros() as usize])
        } else {
            counted_in(&self.all)
        }
    }

    /// Registers a change-stream getMore waiting for commits to `interest` (a mask of
    /// namespace bits) until the guard drops. A commit that checked [`Self::waits_on`]
    /// just before the registration counted itself first (both SeqCst), so the getMore,
    /// asking once for the newest commit's fsync after registering, covers it.
    pub fn waiting(&self, interest: u64) -> ChangeStreamWaiting<'_> {
        let slot = if interest.count_ones() == 1 {
            interest.trailing_zeros() as usize
        } else {
            ALL_NAMESPACES_SLOT
        };
        self.stream_waiters[slot].fetch_add(1, Ordering::SeqCst);
        ChangeStreamWaiting {
            counter: &self.stream_waiters[slot],
        }
    }

    /// Whether a change stream waits on any namespace of `ns_mask`.
    pub fn waits_on(&self, ns_mask: u64) -> bool {
        if self.stream_waiters[ALL_NAMESPACES_SLOT].load(Ordering::SeqCst) > 0 {
            return true;
        }
        let mut bits = ns_mask;
        while bits != 0 {
            if self.stream_waiters[bits.trailing_zeros() as usize].load(Ordering::SeqCst) > 0 {
                return true;
            }
            bits &= bits - 1;
        }
        false
    }

    /// Tells the waiting readers of a commit. Commits publish in commit order (under
    /// the writer lock), so the times never go backwards.
    pub fn publish(&self, notice: CommitNotice) {
        let last = self.last();
        assert!(
            notice.last_ts >= last.last_ts && notice.seq >= last.seq,
            "commit notices go backwards: {notice:?} after {last:?}"
        );
        // The commit's writes are in the store: now the receiver counts (see the
        // module's doc).
        fence(Ordering::SeqCst);
        send(&self.all, notice);
        let mut bits = notice.ns_mask;
        while bits != 0 {
            let bit = bits.trailing_zeros() as usize;
            send(&self.by_bit[bit], notice);
            bits &= bits - 1;
        }
    }
}

/// A receiver of `tx`, counted in before the caller looks at the store (see the
/// module's doc).
fn counted_in(tx: &watch::Sender<CommitNotice>) -> watch::Receiver<CommitNotice> {
    let rx = tx.subscribe();
    fence(Ordering::SeqCst);
    rx
}

/// Sends `notice` on `tx`; to a channel without receivers, only stores it (a later
/// subscriber borrows it; nobody is there to wake).
fn send(tx: &watch::Sender<CommitNotice>, notice: CommitNotice) {
    if tx.receiver_count() == 0 {
        tx.send_if_modified(|last| {
            *last = notice;
            false
        });
    } else {
        tx.send_replace(notice);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit asks for its own fsync exactly when a waiting stream watches one of
    /// its namespaces: a collection stream its collection's bit, a database or
    /// deployment stream every bit; and only while the getMore waits.
    #[test]
    fn commits_ask_for_the_fsync_only_while_a_stream_watching_them_waits() {
        let bus = CommitBus::new(CommitNotice::default());
        let a = namespace_bit("db.a");
        let b = (0..64).map(|i| 1u64 << i).find(|bit| *bit != a).unwrap();
        assert!(!bus.waits_on(a | b), "nobody waits");
        {
            let _on_a = bus.waiting(a);
            let _again_on_a = bus.waiting(a);
            assert!(bus.waits_on(a));
            assert!(bus.waits_on(a | b));
            assert!(!bus.waits_on(b), "a commit to another collection");
            drop(_again_on_a);
            assert!(bus.waits_on(a), "one waiter is left");
        }
        assert!(!bus.waits_on(a), "the getMores returned");
        {
            let _database = bus.waiting(a | b);
            assert!(bus.waits_on(b));
            let _deployment = bus.waiting(u64::MAX);
            assert!(bus.waits_on(1 << 63));
        }
        assert!(!bus.waits_on(u64::MAX));
    }

    /// A notice reaches every subscriber and the channels of the bits it wrote, and
    /// only those.
    #[test]
    fn a_notice_wakes_its_namespaces_channels_only() {
        let bus = CommitBus::new(CommitNotice::default());
        let a = namespace_bit("db.a");
        let b = (0..64).map(|i| 1u64 << i).find(|bit| *bit != a).unwrap();
        let mut all = bus.subscribe();
        let mut on_a = bus.subscribe_for(a);
        let on_b = bus.subscribe_for(b);
        let notice = CommitNotice {
            seq: 1,
            last_ts: ClusterTime::new(1, 7),
            ns_mask: a,
        };
        bus.publish(notice);
        assert!(all.has_changed().unwrap());
        assert_eq!(*on_a.borrow_and_update(), notice);
        assert!(!on_b.has_changed().unwrap());
        assert_eq!(bus.last(), notice);
        assert_eq!(*all.borrow_and_update(), notice);
    }

    /// A notice published while a channel has no receiver is stored without a wake-up:
    /// a later subscriber borrows it, and the next notice wakes that subscriber.
    #[test]
    fn a_channel_without_receivers_keeps_the_last_notice() {
        let bus = CommitBus::new(CommitNotice::default());
        let a = namespace_bit("db.a");
        let first = CommitNotice {
            seq: 1,
            last_ts: ClusterTime::new(1, 1),
            ns_mask: a,
        };
        bus.publish(first);
        assert_eq!(bus.last(), first);
        let mut all = bus.subscribe();
        let mut on_a = bus.subscribe_for(a);
        assert_eq!(*all.borrow(), first);
        assert_eq!(*on_a.borrow(), first);
        assert!(!all.has_changed().unwrap() && !on_a.has_changed().unwrap());
        let second = CommitNotice {
            seq: 2,
            last_ts: ClusterTime::new(1, 2),
            ns_mask: a,
        };
        bus.publish(second);
        assert!(all.has_changed().unwrap() && on_a.has_changed().unwrap());
        assert_eq!(*all.borrow_and_update(), second);
        assert_eq!(*on_a.borrow_and_update(), second);
        drop((all, on_a));
        let third = CommitNotice {
            seq: 3,
            last_ts: ClusterTime::new(1, 3),
            ns_mask: a,
        };
        bus.publish(third);
        assert_eq!(*bus.subscribe_for(a).borrow(), third);
    }

    #[test]
    #[should_panic(expected = "go backwards")]
    fn a_notice_older_than_the_last_is_refused() {
        let bus = CommitNotice {
            seq: 5,
            last_ts: ClusterTime::new(1, 9),
            ns_mask: 1,
        };
        let bus = CommitBus::new(bus);
        bus.publish(CommitNotice {
            seq: 6,
            last_ts: ClusterTime::new(1, 8),
            ns_mask: 1,
        });
    }
}
