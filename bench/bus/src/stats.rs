//! Latency statistics of what the consumers received.

pub use tailstream_bench_common::stats::Stats;

/// Statistics of the received latencies (u64::MAX = not received, skipped).
pub fn stats<'a>(series: impl IntoIterator<Item = &'a [u64]>) -> Stats {
    Stats::from_ns(
        series
            .into_iter()
            .flat_map(|s| s.iter().copied())
            .filter(|&x| x != u64::MAX),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_missing() {
        let v = vec![2_000_000, u64::MAX, 4_000_000];
        let s = stats([v.as_slice()]);
        assert_eq!(s.count, 2);
        assert!((s.mean_ms - 3.0).abs() < 1e-9);
        assert!((s.stddev_ms - 1.0).abs() < 1e-9);
    }
}
