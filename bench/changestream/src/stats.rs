//! Latency statistics of the change-stream benchmark's samples.

pub use tailstream_bench_common::stats::Stats;

/// Statistics of latencies in nanoseconds (negative values are clamped to 0).
pub fn stats(v: Vec<i64>) -> Stats {
    Stats::from_ns(v.into_iter().map(|ns| ns.max(0) as u64))
}

#[cfg(test)]
mod tests {
    #[test]
    fn clamps_negative() {
        let s = super::stats(vec![2_000_000, -5]);
        assert_eq!(s.count, 2);
        assert_eq!(s.p50_ms, 0.0);
        assert_eq!(s.max_ms, 2.0);
        assert!((s.mean_ms - 1.0).abs() < 1e-9);
    }
}
