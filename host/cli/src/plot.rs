//! Allocation curves as SVG: GPU allocation (%) against arrived GPU demand
//! (%), like the FGD paper's figure, ours solid and published dashed.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One curve.
#[derive(Debug, Clone)]
pub struct Curve {
    /// Legend label.
    pub label: String,
    /// `(arrived %, allocation %)` points, ascending.
    pub points: Vec<(f64, f64)>,
    /// Colour index (curves of one policy share it).
    pub colour: usize,
    /// Dashed (published) or solid (ours).
    pub dashed: bool,
}

/// What a chart shows around its curves.
pub struct Frame<'a> {
    /// Caption, and its font size.
    pub title: (&'a str, u32),
    /// Width and height in pixels.
    pub size: (u32, u32),
    /// The axes' ranges.
    pub x: std::ops::Range<f64>,
    /// See `x`.
    pub y: std::ops::Range<f64>,
    /// The axes' descriptions.
    pub x_desc: &'a str,
    /// See `x_desc`.
    pub y_desc: &'a str,
}

/// Writes `curves` in `frame` to an SVG file, with a legend at the lower
/// right.
pub fn lines_svg(path: &Path, frame: &Frame<'_>, curves: &[Curve]) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plot {}: {e}", path.display());
    let root = SVGBackend::new(path, frame.size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(frame.title.0, ("sans-serif", frame.title.1))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(frame.x.clone(), frame.y.clone())
        .map_err(|e| err(&e))?;
    chart.configure_mesh().x_desc(frame.x_desc).y_desc(frame.y_desc).draw().map_err(|e| err(&e))?;
    for c in curves {
        let colour = Palette99::pick(c.colour).to_rgba();
        let style = colour.stroke_width(if c.dashed { 1 } else { 2 });
        let pts = c.points.iter().copied();
        let legend = if c.dashed {
            chart.draw_series(DashedLineSeries::new(pts.collect::<Vec<_>>(), 6, 4, style))
        } else {
            chart.draw_series(LineSeries::new(pts, style))
        }
        .map_err(|e| err(&e))?;
        legend.label(c.label.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Writes allocation `curves` to an SVG file, from 60% of arrived demand
/// (where the policies part) to 131%.
pub fn allocation_svg(path: &Path, title: &str, curves: &[Curve]) -> Result<()> {
    let shown: Vec<Curve> = curves
        .iter()
        .map(|c| Curve { points: c.points.iter().copied().filter(|p| p.0 >= 60.0).collect(), ..c.clone() })
        .collect();
    let y_min = shown.iter().flat_map(|c| c.points.iter().map(|p| p.1)).fold(100.0f64, f64::min);
    let y_lo = (y_min - 5.0).clamp(0.0, 95.0).floor();
    let frame = Frame {
        title: (title, 22),
        size: (960, 640),
        x: 60.0..131.0,
        y: y_lo..100.0,
        x_desc: "arrived GPU demand (% of capacity)",
        y_desc: "GPU allocation (%)",
    };
    lines_svg(path, &frame, &shown)
}
