//! The seed's plot: message number against latency, one panel per system, all
//! panels of a scenario in one PNG with the same (logarithmic) latency axis.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use tailstream_bench_common::fmt::{fmt_int, fmt_ms};

use crate::stats::Stats;

pub struct Panel<'a> {
    pub title: String,
    /// One latency series per consumer, indexed by message number (u64::MAX = not received).
    pub series: Vec<&'a [u64]>,
    pub stats: Stats,
    pub color: RGBColor,
}

pub const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),  // Tailstream
    RGBColor(23, 190, 207),  // Tailstream w1
    RGBColor(148, 103, 189), // Redis Pub/Sub
    RGBColor(214, 39, 40),   // Redis Streams everysec
    RGBColor(255, 127, 14),  // Redis Streams always
    RGBColor(140, 86, 75),   // Redis Streams always, a connection per send
];

/// Registers the embedded DejaVu Sans as "sans-serif" (no system fonts needed).
pub fn init_fonts() -> Result<()> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| anyhow!("the embedded DejaVu Sans font could not be loaded"))?;
    plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold())
        .map_err(|_| anyhow!("the embedded DejaVu Sans Bold font could not be loaded"))?;
    Ok(())
}

fn decade_floor(v: f64) -> f64 {
    10f64.powf(v.log10().floor())
}

fn decade_ceil(v: f64) -> f64 {
    10f64.powf(v.log10().ceil())
}

/// A latency axis label: whole milliseconds, or as many decimals as a decade below 1 ms needs.
fn axis_label_ms(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

pub fn plot_scenario(path: &Path, title: &str, n: u64, panels: &[Panel]) -> Result<()> {
    let panel_h = 300u32;
    let width = 1400u32;
    let header = 50u32;
    let height = header + panel_h * panels.len().max(1) as u32;
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let (top, body) = root.split_vertically(header);
    top.draw(&Text::new(
        title.to_string(),
        (20, 14),
        ("sans-serif", 22).into_font().style(FontStyle::Bold),
    ))
    .map_err(|e| anyhow!("{e}"))?;

    // One latency axis for every panel: whole decades around all the points.
    let (mut lo, mut hi) = (f64::MAX, 0f64);
    for p in panels {
        for s in &p.series {
            for &ns in s.iter().filter(|&&x| x != u64::MAX) {
                let ms = (ns as f64 / 1e6).max(1e-4);
                lo = lo.min(ms);
                hi = hi.max(ms);
            }
        }
    }
    if hi == 0.0 {
        lo = 0.01;
        hi = 1.0;
    }
    // The bottom a little under a whole decade, so that decade gets its label.
    let bottom = decade_floor(lo).max(1e-3);
    let (ymin, ymax) = (bottom * 0.7, decade_ceil(hi * 1.0001).max(bottom * 10.0));

    let areas = body.split_evenly((panels.len().max(1), 1));
    for (area, p) in areas.iter().zip(panels) {
        let s = &p.stats;
        let caption = format!(
            "{} — {} messages · p50 {} ms · p99 {} ms · max {} ms · stddev {} ms",
            p.title,
            fmt_int(s.count),
            fmt_ms(s.p50_ms),
            fmt_ms(s.p99_ms),
            fmt_ms(s.max_ms),
            fmt_ms(s.stddev_ms)
        );
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 17))
            .margin(10)
            .margin_right(25)
            .x_label_area_size(32)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n.max(1) as f64, (ymin..ymax).log_scale())
            .map_err(|e| anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("message number")
            .y_desc("latency (ms, log)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| axis_label_ms(*v))
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| anyhow!("{e}"))?;
        for series in &p.series {
            chart
                .draw_series(
                    series
                        .iter()
                        .enumerate()
                        .filter(|(_, &ns)| ns != u64::MAX)
                        .map(|(i, &ns)| {
                            Pixel::new((i as f64, (ns as f64 / 1e6).clamp(ymin, ymax)), p.color)
                        }),
                )
                .map_err(|e| anyhow!("{e}"))?;
        }
        // The p99 as a thin line.
        if s.count > 0 {
            chart
                .draw_series(LineSeries::new(
                    vec![(0.0, s.p99_ms.max(ymin)), (n as f64, s.p99_ms.max(ymin))],
                    BLACK.mix(0.35),
                ))
                .map_err(|e| anyhow!("{e}"))?;
        }
    }
    root.present()
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(())
}
