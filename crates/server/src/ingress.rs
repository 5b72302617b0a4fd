//! mongod's ingress connection establishment rate limiter: with
//! `ingressConnectionEstablishmentRateLimiterEnabled`, new connections are admitted at
//! most `ingressConnectionEstablishmentRatePerSec` per second (a token bucket holding
//! `ingressConnectionEstablishmentBurstCapacitySecs` seconds' worth), at most
//! `ingressConnectionEstablishmentMaxQueueDepth` wait for a token, and any other is
//! closed at once. A connection storm then costs the server a closed socket per extra
//! connection instead of a handshake each, and drivers back off (a connection closed
//! during the handshake marks the server overloaded without clearing its pool).
//!
//! The parameters are read through `setParameter`/`getParameter` like any other; the
//! limiter reads them on every admission, so a change applies to the next connection.

use crate::state::ServerState;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const ENABLED: &str = "ingressConnectionEstablishmentRateLimiterEnabled";
pub const RATE_PER_SEC: &str = "ingressConnectionEstablishmentRatePerSec";
pub const BURST_CAPACITY_SECS: &str = "ingressConnectionEstablishmentBurstCapacitySecs";
pub const MAX_QUEUE_DEPTH: &str = "ingressConnectionEstablishmentMaxQueueDepth";

/// The longest a queued connection waits for its token, whatever the settings say (a
/// driver gives up on a connection long before).
const MAX_WAIT: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct IngressLimiter {
    bucket: Mutex<Bucket>,
    /// Connections closed because the queue was full (serverStatus
    /// `connections.establishmentRateLimit.rejected`).
    pub rejected: AtomicU64,
    /// Connections that waited in the queue before being admitted.
    pub queued: AtomicU64,
}

#[derive(Default)]
struct Bucket {
    /// Tokens available; below zero while queued connections hold reservations.
    tokens: f64,
    last_refill: Option<Instant>,
    /// Connections waiting for a token now.
    waiting: u64,
}

/// The limiter's settings as the parameters give them.
struct Settings {
    rate: f64,
    capacity: f64,
    max_queue: u64,
}

fn settings(state: &ServerState) -> Option<Settings> {
    let p = state.parameters.read();
    if !p.get_bool(ENABLED).unwrap_or(false) {
        return None;
    }
    let num = |k: &str| p.get(k).and_then(tailstream_engine::query::compare::as_f64);
    let rate = num(RATE_PER_SEC).filter(|r| *r > 0.0).unwrap_or(f64::MAX);
    let burst = num(BURST_CAPACITY_SECS).filter(|b| *b > 0.0).unwrap_or(1.0);
    Some(Settings {
        rate,
        capacity: (rate * burst).max(1.0),
        max_queue: num(MAX_QUEUE_DEPTH).unwrap_or(0.0).max(0.0) as u64,
    })
}

/// What happens to one new connection.
#[derive(Debug, PartialEq)]
enum Admission {
    Now,
    /// Queued: proceeds after this wait (its token is reserved).
    After(Duration),
    Reject,
}

impl Bucket {
    fn take(&mut self, s: &Settings, now: Instant) -> Admission {
        self.tokens = match self.last_refill {
            // A bucket starts full.
            None => s.capacity,
            Some(t) => (self.tokens + now.duration_since(t).as_secs_f64() * s.rate).min(s.capacity),
        };
        self.last_refill = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Admission::Now;
        }
        if self.waiting >= s.max_queue {
            return Admission::Reject;
        }
        // Reserve the next token: the debt tells how long until it exists.
        self.tokens -= 1.0;
        self.waiting += 1;
        Admission::After(Duration::from_secs_f64(
            (-self.tokens / s.rate).min(MAX_WAIT.as_secs_f64()),
        ))
    }
}

impl IngressLimiter {
    /// Waits until a new connection may proceed; false when it must be closed instead.
    pub async fn admit(&self, state: &ServerState) -> bool {
        let Some(s) = settings(state) else {
            return true;
        };
        let admission = self.bucket.lock().take(&s, Instant::now());
        match admission {
            Admission::Now => true,
            Admission::Reject => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                false
            }
            Admission::After(wait) => {
                self.queued.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(wait).await;
                self.bucket.lock().waiting -= 1;
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_queue_then_reject() {
        let s = Settings {
            rate: 20.0,
            capacity: 20.0,
            max_queue: 1,
        };
        let mut b = Bucket::default();
        let t0 = Instant::now();
        for _ in 0..20 {
            assert_eq!(b.take(&s, t0), Admission::Now);
        }
        match b.take(&s, t0) {
            Admission::After(w) => assert!(w > Duration::ZERO && w <= Duration::from_millis(50)),
            other => panic!("expected a queued admission, got {other:?}"),
        }
        assert_eq!(b.take(&s, t0), Admission::Reject, "the queue holds one");
        // A second later the bucket has refilled (less the reserved token).
        b.waiting = 0;
        assert_eq!(b.take(&s, t0 + Duration::from_secs(1)), Admission::Now);
    }

    #[test]
    fn no_queue_rejects_as_soon_as_the_bucket_is_empty() {
        let s = Settings {
            rate: 1.0,
            capacity: 1.0,
            max_queue: 0,
        };
        let mut b = Bucket::default();
        let t0 = Instant::now();
        assert_eq!(b.take(&s, t0), Admission::Now);
        assert_eq!(b.take(&s, t0), Admission::Reject);
    }
}
