//! PNG and SVG plots of the hop latency histograms (one pair per edge
//! class) and of the completion times, with `plotters`. Text needs a TTF
//! font: `KASCADE_PLOT_FONT`, else the first of [`FONT_CANDIDATES`] present
//! (Debian: fonts-dejavu-core or fonts-liberation).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, bail};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::{Bucket, Report, buckets};
use super::stats::{Latencies, Stats};

pub(crate) const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

const FONT: &str = "sans-serif";

/// Registers the font once; the error names what was tried.
fn ensure_font() -> anyhow::Result<()> {
    static FONT_LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    FONT_LOADED
        .get_or_init(|| {
            let candidates: Vec<PathBuf> = match std::env::var_os("KASCADE_PLOT_FONT") {
                Some(p) => vec![PathBuf::from(p)],
                None => FONT_CANDIDATES.iter().map(PathBuf::from).collect(),
            };
            for path in &candidates {
                let Ok(bytes) = std::fs::read(path) else {
                    continue;
                };
                // plotters keeps registered fonts for the program's life.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plotters::style::register_font(FONT, FontStyle::Normal, bytes)
                    .map_err(|_| format!("{} is not a TTF font", path.display()));
            }
            Err(format!(
                "no TTF font for the plots: tried {} (install fonts-dejavu-core or set KASCADE_PLOT_FONT)",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// `replicasets → pods create` → `replicasets-to-pods-create`.
pub(crate) fn file_stem(class: &str) -> String {
    let mut out = String::new();
    for word in class.split_whitespace() {
        let word = if word == "→" { "to" } else { word };
        let clean: String = word
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&clean);
    }
    if out.is_empty() {
        "unnamed".to_string()
    } else {
        out
    }
}

/// Writes `<class>.png` and `<class>.svg` per edge class and
/// `completion-<kind>-<verb>.{png,svg}` per completion class into `dir`
/// (created); returns the files written.
pub(crate) fn write_plots(
    dir: &Path,
    report: &Report,
    stats: &Stats,
) -> anyhow::Result<Vec<PathBuf>> {
    ensure_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    let mut plot =
        |stem: String, title: String, l: &Latencies, axes: (&str, &str)| -> anyhow::Result<()> {
            let bs = buckets(l);
            let png = dir.join(format!("{stem}.png"));
            let svg = dir.join(format!("{stem}.svg"));
            {
                let root = BitMapBackend::new(&png, (900, 500)).into_drawing_area();
                draw(&root, &title, &bs, axes)
                    .with_context(|| format!("plotting {}", png.display()))?;
                root.present()
                    .with_context(|| format!("writing {}", png.display()))?;
            }
            {
                let root = SVGBackend::new(&svg, (900, 500)).into_drawing_area();
                draw(&root, &title, &bs, axes)
                    .with_context(|| format!("plotting {}", svg.display()))?;
                root.present()
                    .with_context(|| format!("writing {}", svg.display()))?;
            }
            for file in [&png, &svg] {
                crate::output_file::restrict(file)
                    .with_context(|| format!("cannot make {} owner-only", file.display()))?;
            }
            written.push(png);
            written.push(svg);
            Ok(())
        };
    for e in &report.edges {
        if let Some(l) = stats.edges.get(&e.edge) {
            let title = format!(
                "{} — {} hops, p50 {}, p99 {}",
                e.edge,
                e.latency.count,
                super::report::short_duration(e.latency.p50_us),
                super::report::short_duration(e.latency.p99_us)
            );
            plot(
                file_stem(&e.edge),
                title,
                l,
                ("hop latency (bucket upper bound)", "hops"),
            )?;
        }
    }
    for ((kind, verb), l) in &stats.completions {
        let title = format!("cascade completion: {kind} {verb} — {} cascades", l.count());
        plot(
            format!("completion-{}", file_stem(&format!("{kind} {verb}"))),
            title,
            l,
            ("completion time (bucket upper bound)", "cascades"),
        )?;
    }
    Ok(written)
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    bs: &[Bucket],
    (x_desc, y_desc): (&str, &str),
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let first = bs.iter().position(|b| b.count > 0).unwrap_or(0);
    let last = bs.iter().rposition(|b| b.count > 0).unwrap_or(0);
    let shown = &bs[first..=last];
    if shown.is_empty() {
        bail!("nothing to plot");
    }
    let most = shown.iter().map(|b| b.count).max().unwrap_or(1).max(1);
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (0..shown.len() as u32).into_segmented(),
            0u64..most + most / 10 + 1,
        )?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(shown.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => shown
                .get(*i as usize)
                .map(|b| b.label.clone())
                .unwrap_or_default(),
            _ => String::new(),
        })
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .draw()?;
    chart.draw_series(
        Histogram::vertical(&chart)
            .style(BLUE.mix(0.7).filled())
            .margin(4)
            .data(shown.iter().enumerate().map(|(i, b)| (i as u32, b.count))),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::file_stem;

    #[test]
    fn file_stems_are_plain() {
        assert_eq!(
            file_stem("replicasets → pods create"),
            "replicasets-to-pods-create"
        );
        assert_eq!(file_stem("pods → Running"), "pods-to-running");
        assert_eq!(file_stem("pods binding"), "pods-binding");
    }
}
