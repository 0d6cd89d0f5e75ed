//! Allocation curves as SVG: GPU allocation (%) against arrived GPU demand
//! (%), like the FGD paper's figure, ours solid and published dashed.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One curve.
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

/// Writes `curves` to an SVG file.
pub fn allocation_svg(path: &Path, title: &str, curves: &[Curve]) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plot {}: {e}", path.display());
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let y_min =
        curves.iter().flat_map(|c| c.points.iter().filter(|p| p.0 >= 60.0).map(|p| p.1)).fold(100.0f64, f64::min);
    let y_lo = (y_min - 5.0).clamp(0.0, 95.0).floor();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(60.0f64..131.0, y_lo..100.0f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("arrived GPU demand (% of capacity)")
        .y_desc("GPU allocation (%)")
        .draw()
        .map_err(|e| err(&e))?;
    for c in curves {
        let colour = Palette99::pick(c.colour).to_rgba();
        let style = colour.stroke_width(if c.dashed { 1 } else { 2 });
        let pts = c.points.iter().copied().filter(|p| p.0 >= 60.0);
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
