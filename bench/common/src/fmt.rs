//! How the reports write numbers.

/// An integer with thousands separators: 1234567 → "1,234,567".
pub fn fmt_int(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Milliseconds with three or four significant digits, so that microseconds
/// and seconds both read well in one column: 0.123, 1.23, 12.3, 123.
pub fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A figure that may not have been measured: `decimals` places, or "n/a".
pub fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    v.map(|v| format!("{v:.decimals$}"))
        .unwrap_or_else(|| "n/a".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_int(0), "0");
        assert_eq!(fmt_int(999), "999");
        assert_eq!(fmt_int(1000), "1,000");
        assert_eq!(fmt_int(1234567), "1,234,567");
        assert_eq!(fmt_ms(0.1234), "0.123");
        assert_eq!(fmt_ms(1.234), "1.23");
        assert_eq!(fmt_ms(12.34), "12.3");
        assert_eq!(fmt_ms(123.4), "123");
        assert_eq!(fmt_opt(Some(1.26), 1), "1.3");
        assert_eq!(fmt_opt(None, 1), "n/a");
    }
}
