//! Latency statistics (milliseconds).

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// Population standard deviation, as the seed's figures.
    pub stddev_ms: f64,
}

/// Statistics of the received latencies (u64::MAX = not received, skipped).
pub fn stats<'a>(series: impl IntoIterator<Item = &'a [u64]>) -> Stats {
    let mut v: Vec<u64> = series
        .into_iter()
        .flat_map(|s| s.iter().copied())
        .filter(|&x| x != u64::MAX)
        .collect();
    if v.is_empty() {
        return Stats::default();
    }
    v.sort_unstable();
    let n = v.len();
    let ms = |ns: u64| ns as f64 / 1e6;
    // Nearest-rank percentile.
    let pct = |p: f64| ms(v[((p / 100.0 * n as f64 - 1e-9).ceil() as usize).clamp(1, n) - 1]);
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
    Stats {
        count: n as u64,
        p50_ms: pct(50.0),
        p99_ms: pct(99.0),
        p999_ms: pct(99.9),
        max_ms: ms(v[n - 1]),
        mean_ms: mean / 1e6,
        stddev_ms: var.sqrt() / 1e6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=1000).map(|i| i * 1_000_000).collect();
        let s = stats([v.as_slice()]);
        assert_eq!(s.count, 1000);
        assert_eq!(s.p50_ms, 500.0);
        assert_eq!(s.p99_ms, 990.0);
        assert_eq!(s.p999_ms, 999.0);
        assert_eq!(s.max_ms, 1000.0);
        assert!((s.mean_ms - 500.5).abs() < 1e-9);
    }

    #[test]
    fn skips_missing() {
        let v = vec![2_000_000, u64::MAX, 4_000_000];
        let s = stats([v.as_slice()]);
        assert_eq!(s.count, 2);
        assert!((s.mean_ms - 3.0).abs() < 1e-9);
        assert!((s.stddev_ms - 1.0).abs() < 1e-9);
    }
}
