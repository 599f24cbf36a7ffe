//! Line charts as SVG text: one panel, its series, axes with units and a legend of its
//! metrics. The same SVG is inlined in `dashboard.html` and rasterised to PNG
//! ([`crate::dashboard`]), so the page and the images show the same pixels.
//!
//! Why hand-written rather than `plotters`: a panel is a few lines, ticks and labels; writing
//! the SVG directly keeps every element addressable by CSS in the page, needs no font
//! backend (the text is drawn by the browser or by `resvg` with the embedded font) and adds
//! no dependency.

use std::fmt::Write as _;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Line {
    /// Legend text.
    pub label: String,
    /// CSS colour.
    pub color: String,
    /// SVG `stroke-dasharray` ("" = solid).
    pub dash: String,
    /// `(step, value)`; NaN or infinite values break the line.
    pub points: Vec<(f64, f64)>,
}

/// How the y axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// log10 of |value| (for KL and gradient norms that span decades); |values| ≤ 1e-12 sit at
    /// the floor, exact zeros are left out.
    Log,
}

/// One legend entry: text, colour, dash.
#[derive(Debug, Clone, PartialEq)]
pub struct LegendEntry {
    pub label: String,
    pub color: String,
    pub dash: String,
}

/// A chart to draw.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    /// y-axis label with its unit, e.g. `nats / token`.
    pub y_label: String,
    pub scale: Scale,
    pub lines: Vec<Line>,
    /// Force the y range to include these values (e.g. 0 and 1 for rates).
    pub y_include: Vec<f64>,
    /// Legend entries; empty = one per line.
    pub legend: Vec<LegendEntry>,
}

pub const WIDTH: f64 = 460.0;
pub const HEIGHT: f64 = 270.0;
const LEFT: f64 = 62.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 72.0;
/// The font embedded in the page and given to the rasteriser.
pub const FONT_FAMILY: &str = "DejaVu Sans";

/// Escapes text for SVG/HTML.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// "Nice" tick positions (1, 2 or 5 × 10^k apart) covering `[lo, hi]`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let start = (lo / step).ceil() as i64;
    let end = (hi / step).floor() as i64;
    (start..=end).map(|i| i as f64 * step).collect()
}

/// A tick label: short, without float noise.
fn tick_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        return format!("{v:.0e}");
    }
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

fn transform(scale: Scale, v: f64) -> Option<f64> {
    if !v.is_finite() {
        return None;
    }
    Some(match scale {
        Scale::Linear => v,
        // Exact zeros (a step without gradient) leave a gap rather than a dive to the floor.
        Scale::Log if v == 0.0 => return None,
        Scale::Log => v.abs().max(1e-12).log10(),
    })
}

impl Chart {
    /// The chart as a standalone `<svg>` element (with its size, so it also stands alone as
    /// a file for the rasteriser), its x axis the training step.
    pub fn to_svg(&self) -> String {
        self.to_svg_with_x_label("training step")
    }

    /// [`Self::to_svg`] with another x axis (e.g. samples used).
    pub fn to_svg_with_x_label(&self, x_label: &str) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="{FONT_FAMILY}" font-size="11">"#
        );
        let _ = write!(
            s,
            r##"<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/><text x="{LEFT}" y="18" font-size="13" font-weight="bold" fill="#222">{}</text>"##,
            escape(&self.title)
        );
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        let points: Vec<(f64, f64)> = self
            .lines
            .iter()
            .flat_map(|l| l.points.iter())
            .filter_map(|&(x, y)| transform(self.scale, y).map(|ty| (x, ty)))
            .collect();
        if points.is_empty() {
            let _ = write!(
                s,
                r##"<text x="{}" y="{}" text-anchor="middle" fill="#888">not recorded by this run</text></svg>"##,
                WIDTH / 2.0,
                HEIGHT / 2.0
            );
            return s;
        }
        let (mut x0, mut x1) = (f64::MAX, f64::MIN);
        let (mut y0, mut y1) = (f64::MAX, f64::MIN);
        for &(x, y) in &points {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        for &v in &self.y_include {
            if let Some(t) = transform(self.scale, v) {
                y0 = y0.min(t);
                y1 = y1.max(t);
            }
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        if y1 - y0 < 1e-12 {
            let pad = if y0 == 0.0 { 1.0 } else { y0.abs() * 0.1 };
            y0 -= pad;
            y1 += pad;
        } else {
            let pad = 0.05 * (y1 - y0);
            y0 -= pad;
            y1 += pad;
        }
        if self.scale == Scale::Log {
            y0 = y0.floor();
            y1 = y1.ceil();
        }
        let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * plot_w;
        let py = |y: f64| TOP + plot_h - (y - y0) / (y1 - y0) * plot_h;

        // Frame, grid and ticks.
        let _ = write!(
            s,
            r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#bbb"/>"##
        );
        let y_ticks = match self.scale {
            Scale::Linear => nice_ticks(y0, y1, 5),
            Scale::Log => {
                let step = ((y1 - y0) / 5.0).ceil().max(1.0);
                let mut t = Vec::new();
                let mut v = y0;
                while v <= y1 + 1e-9 {
                    t.push(v);
                    v += step;
                }
                t
            }
        };
        for &t in &y_ticks {
            let y = py(t);
            let label = match self.scale {
                Scale::Linear => tick_label(t),
                Scale::Log => format!("1e{}", t.round() as i64),
            };
            let _ = write!(
                s,
                r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#444">{label}</text>"##,
                LEFT + plot_w,
                LEFT - 5.0,
                y + 4.0
            );
        }
        for &t in &nice_ticks(x0, x1, 6) {
            let x = px(t);
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#444">{}</text>"##,
                TOP + plot_h,
                TOP + plot_h + 14.0,
                tick_label(t)
            );
        }
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333">{}</text>"##,
            LEFT + plot_w / 2.0,
            TOP + plot_h + 28.0,
            escape(x_label)
        );
        let _ = write!(
            s,
            r##"<text transform="translate(13 {:.1}) rotate(-90)" text-anchor="middle" fill="#333">{}</text>"##,
            TOP + plot_h / 2.0,
            escape(&self.y_label)
        );

        // Lines: a NaN breaks the path; a lone point gets a dot.
        for line in &self.lines {
            let mut d = String::new();
            let mut run_len = 0;
            let mut lone = Vec::new();
            let mut last = None;
            for &(x, y) in &line.points {
                match transform(self.scale, y) {
                    Some(ty) => {
                        let (sx, sy) = (px(x), py(ty));
                        let _ = write!(
                            d,
                            "{}{sx:.1},{sy:.1} ",
                            if run_len == 0 { "M" } else { "L" }
                        );
                        run_len += 1;
                        last = Some((sx, sy));
                    }
                    None => {
                        if run_len == 1 {
                            lone.extend(last);
                        }
                        run_len = 0;
                    }
                }
            }
            if run_len == 1 {
                lone.extend(last);
            }
            let dash = if line.dash.is_empty() {
                String::new()
            } else {
                format!(r#" stroke-dasharray="{}""#, line.dash)
            };
            let _ = write!(
                s,
                r#"<path d="{}" fill="none" stroke="{}" stroke-width="1.8"{dash}/>"#,
                d.trim_end(),
                line.color
            );
            for (sx, sy) in lone {
                let _ = write!(
                    s,
                    r#"<circle cx="{sx:.1}" cy="{sy:.1}" r="2.5" fill="{}"/>"#,
                    line.color
                );
            }
        }

        // Legend below the axis label, in rows of what fits.
        let entries: Vec<LegendEntry> = if self.legend.is_empty() {
            self.lines
                .iter()
                .map(|l| LegendEntry {
                    label: l.label.clone(),
                    color: l.color.clone(),
                    dash: l.dash.clone(),
                })
                .collect()
        } else {
            self.legend.clone()
        };
        let mut x = LEFT;
        let mut y = HEIGHT - 26.0;
        for entry in &entries {
            let width = 30.0 + 6.3 * entry.label.chars().count() as f64;
            if x + width > WIDTH && x > LEFT {
                x = LEFT;
                y += 15.0;
            }
            if y > HEIGHT - 2.0 {
                break;
            }
            let dash = if entry.dash.is_empty() {
                String::new()
            } else {
                format!(r#" stroke-dasharray="{}""#, entry.dash)
            };
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{:.1}" y="{y:.1}" fill="#333">{}</text>"##,
                y - 4.0,
                x + 18.0,
                y - 4.0,
                entry.color,
                x + 22.0,
                escape(&entry.label)
            );
            x += width;
        }
        s.push_str("</svg>");
        s
    }
}
