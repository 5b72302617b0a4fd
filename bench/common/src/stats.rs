//! Latency statistics: samples in nanoseconds, figures in milliseconds.

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// Population standard deviation, as the seed figures of the message-bus benchmark.
    pub stddev_ms: f64,
}

impl Stats {
    /// Statistics of latencies in nanoseconds (none: every figure 0).
    pub fn from_ns(samples: impl IntoIterator<Item = u64>) -> Stats {
        let mut v: Vec<u64> = samples.into_iter().collect();
        if v.is_empty() {
            return Stats::default();
        }
        v.sort_unstable();
        let n = v.len();
        let ms = |ns: u64| ns as f64 / 1e6;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        Stats {
            count: n as u64,
            p50_ms: ms(percentile(&v, 50.0)),
            p99_ms: ms(percentile(&v, 99.0)),
            p999_ms: ms(percentile(&v, 99.9)),
            max_ms: ms(v[n - 1]),
            mean_ms: mean / 1e6,
            stddev_ms: var.sqrt() / 1e6,
        }
    }
}

/// Nearest-rank percentile `p` (0 to 100) of `sorted`, which must not be empty:
/// the smallest value with at least p% of the values at or below it. The
/// 1e-9 keeps p% of n that is a whole number in exact arithmetic from rounding
/// up to the next rank in floating point.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let n = sorted.len();
    sorted[((p / 100.0 * n as f64 - 1e-9).ceil() as usize).clamp(1, n) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=1000).rev().map(|i| i * 1_000_000).collect();
        let s = Stats::from_ns(v);
        assert_eq!(s.count, 1000);
        assert_eq!(s.p50_ms, 500.0);
        assert_eq!(s.p99_ms, 990.0);
        assert_eq!(s.p999_ms, 999.0);
        assert_eq!(s.max_ms, 1000.0);
        assert!((s.mean_ms - 500.5).abs() < 1e-9);
    }

    #[test]
    fn stddev_is_the_population_one() {
        let s = Stats::from_ns([2_000_000, 4_000_000]);
        assert!((s.mean_ms - 3.0).abs() < 1e-9);
        assert!((s.stddev_ms - 1.0).abs() < 1e-9);
    }

    #[test]
    fn nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 99.0), 4.0);
        assert_eq!(percentile(&v, 50.0), 2.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(Stats::from_ns([]).count, 0);
    }
}
