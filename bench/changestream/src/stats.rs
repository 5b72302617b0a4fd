//! Latency percentiles (milliseconds), nearest rank.

use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

/// Statistics of latencies in nanoseconds (negative values are clamped to 0).
pub fn stats(mut v: Vec<i64>) -> Stats {
    if v.is_empty() {
        return Stats::default();
    }
    v.sort_unstable();
    let n = v.len();
    let ms = |ns: i64| ns.max(0) as f64 / 1e6;
    let pct = |p: f64| ms(v[((p / 100.0 * n as f64 - 1e-9).ceil() as usize).clamp(1, n) - 1]);
    Stats {
        count: n as u64,
        p50_ms: pct(50.0),
        p99_ms: pct(99.0),
        p999_ms: pct(99.9),
        max_ms: ms(v[n - 1]),
        mean_ms: v.iter().map(|&x| x.max(0) as f64).sum::<f64>() / n as f64 / 1e6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<i64> = (1..=1000).rev().map(|i| i * 1_000_000).collect();
        let s = stats(v);
        assert_eq!(s.count, 1000);
        assert_eq!(s.p50_ms, 500.0);
        assert_eq!(s.p99_ms, 990.0);
        assert_eq!(s.p999_ms, 999.0);
        assert_eq!(s.max_ms, 1000.0);
        assert!((s.mean_ms - 500.5).abs() < 1e-9);
    }
}
