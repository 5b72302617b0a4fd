//! Random numbers for `$rand` and `$sample`: xorshift64*, seeded from the clock (no
//! reproducible sequence is promised, as on mongod).

use std::sync::atomic::{AtomicU64, Ordering};

static RNG_STATE: AtomicU64 = AtomicU64::new(0);

/// The next 64 random bits.
pub fn next_u64() -> u64 {
    let mut s = RNG_STATE.load(Ordering::Relaxed);
    if s == 0 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15);
        s = t ^ 0x9E37_79B9_7F4A_7C15 ^ ((&RNG_STATE as *const _ as u64) << 7);
        if s == 0 {
            s = 0x2545_F491_4F6C_DD1D;
        }
    }
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    RNG_STATE.store(s, Ordering::Relaxed);
    s.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// A uniformly distributed double in [0, 1).
pub fn random_f64() -> f64 {
    (next_u64() >> 11) as f64 / (1u64 << 53) as f64
}
