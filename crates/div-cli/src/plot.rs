//! Line charts in the terminal, drawn with braille characters: each character cell holds a
//! 2×4 grid of dots, so a chart of `width` cells has `2 × width` columns of resolution.

use div_core::Chart;

/// The chart's plot width, in cells, so that its widest line (the x range under the axis: the
/// y labels' width, two spaces, the plot's width and one more) is `columns` wide; at least 8.
pub(crate) fn width_for(chart: &Chart, columns: usize) -> usize {
    let ys = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    let (y0, y1) = range(ys);
    let labels = if y0.is_finite() && y1.is_finite() {
        number(y0).chars().count().max(number(y1).chars().count())
    } else {
        0
    };
    columns.saturating_sub(labels + 3).max(8)
}

/// A chart as text: its title, a y axis with the range, the plot, an x axis with the range,
/// then one line per series with its last, lowest and highest values.
pub(crate) fn render(chart: &Chart, width: usize, height: usize) -> String {
    let width = width.max(8);
    let height = height.max(2);
    let all: Vec<(f64, f64)> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .collect();
    let mut out = format!("{} (over {})\n", chart.title, chart.x);
    if all.is_empty() {
        out.push_str("  no points yet\n");
        return out;
    }
    let (x0, x1) = range(all.iter().map(|p| p.0));
    let (y0, y1) = range(all.iter().map(|p| p.1));
    let (cols, rows) = (width * 2, height * 4);
    let mut dots = vec![vec![false; cols]; rows];
    let col = |x: f64| scale(x, x0, x1, cols);
    let row = |y: f64| rows - 1 - scale(y, y0, y1, rows);
    for series in &chart.series {
        let mut last: Option<(usize, usize)> = None;
        for &(x, y) in &series.points {
            let at = (col(x), row(y));
            match last {
                Some(from) => line(&mut dots, from, at),
                None => dots[at.1][at.0] = true,
            }
            last = Some(at);
        }
    }
    let top = number(y1);
    let bottom = number(y0);
    let label_width = top.chars().count().max(bottom.chars().count());
    for r in 0..height {
        let label = if r == 0 {
            top.clone()
        } else if r == height - 1 {
            bottom.clone()
        } else {
            String::new()
        };
        let tick = if r == 0 || r == height - 1 {
            '┤'
        } else {
            '│'
        };
        out.push_str(&format!("{label:>label_width$} {tick}"));
        let mut row = String::new();
        for c in 0..width {
            row.push(cell(&dots, r, c));
        }
        out.push_str(row.trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "{} └{}\n",
        " ".repeat(label_width),
        "─".repeat(width)
    ));
    let left = number(x0);
    let right = number(x1);
    let gap = (width + 1).saturating_sub(left.chars().count() + right.chars().count());
    out.push_str(&format!(
        "{}  {left}{}{right}\n",
        " ".repeat(label_width),
        " ".repeat(gap.max(1))
    ));
    for series in &chart.series {
        let ys = series.points.iter().map(|p| p.1);
        match series.points.last() {
            Some(&(_, last)) => {
                let (lo, hi) = range(ys);
                out.push_str(&format!(
                    "  {}: {} points, last {}, min {}, max {}\n",
                    series.name,
                    series.points.len(),
                    number(last),
                    number(lo),
                    number(hi)
                ));
            }
            None => out.push_str(&format!("  {}: no points\n", series.name)),
        }
    }
    out
}

fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// Where `v` falls among `n` slots from `lo` to `hi` (the middle one when they are equal).
fn scale(v: f64, lo: f64, hi: f64, n: usize) -> usize {
    if hi <= lo {
        return n / 2;
    }
    let f = (v - lo) / (hi - lo) * (n - 1) as f64;
    (f.round().max(0.0) as usize).min(n - 1)
}

/// Bresenham's line between two dots.
fn line(dots: &mut [Vec<bool>], from: (usize, usize), to: (usize, usize)) {
    let (mut x, mut y) = (from.0 as i64, from.1 as i64);
    let (x1, y1) = (to.0 as i64, to.1 as i64);
    let (dx, dy) = ((x1 - x).abs(), -(y1 - y).abs());
    let (sx, sy) = (if x < x1 { 1 } else { -1 }, if y < y1 { 1 } else { -1 });
    let mut err = dx + dy;
    loop {
        if let Some(r) = dots.get_mut(y as usize)
            && let Some(d) = r.get_mut(x as usize)
        {
            *d = true;
        }
        if x == x1 && y == y1 {
            break;
        }
        let e2 = 2 * err;
        if e2 >= dy {
            err += dy;
            x += sx;
        }
        if e2 <= dx {
            err += dx;
            y += sy;
        }
    }
}

/// The braille character for cell (`r`, `c`).
fn cell(dots: &[Vec<bool>], r: usize, c: usize) -> char {
    // Bit of each dot, by (column, row) within the cell.
    const BITS: [[u32; 4]; 2] = [[0x01, 0x02, 0x04, 0x40], [0x08, 0x10, 0x20, 0x80]];
    let mut bits = 0;
    for (dc, column) in BITS.iter().enumerate() {
        for (dr, bit) in column.iter().enumerate() {
            if dots[r * 4 + dr][c * 2 + dc] {
                bits |= bit;
            }
        }
    }
    if bits == 0 {
        ' '
    } else {
        char::from_u32(0x2800 + bits).unwrap_or(' ')
    }
}

/// A number short enough for an axis: `0.0123`, `2.31`, `1500`, `1.2e6`.
pub(crate) fn number(v: f64) -> String {
    let a = v.abs();
    if v == v.trunc() && a < 1e6 {
        format!("{v:.0}")
    } else if (1e-3..1e6).contains(&a) {
        let s = format!("{v:.4}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    } else {
        format!("{v:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use div_core::Series;

    use super::*;

    fn chart(points: &[(f64, f64)]) -> Chart {
        Chart {
            title: "loss".into(),
            x: "step".into(),
            series: vec![Series {
                name: "loss".into(),
                points: points.to_vec(),
            }],
        }
    }

    #[test]
    fn a_falling_line_is_drawn_from_top_left_to_bottom_right() {
        insta::assert_snapshot!(render(&chart(&[(0.0, 2.0), (1.0, 1.0), (2.0, 0.5), (3.0, 0.25)]), 12, 3), @r"
        loss (over step)
           2 ┤⠑⠤⡀
             │  ⠈⠒⠤⣀
        0.25 ┤      ⠉⠒⠢⠤⢄⣀
             └────────────
              0           3
          loss: 4 points, last 0.25, min 0.25, max 2
        ");
    }

    /// The plot fills the columns given, labels included.
    #[test]
    fn a_chart_fills_the_width_it_is_given() {
        let c = chart(&[(0.0, 2.0), (1.0, 1.0), (2.0, 0.5), (3.0, 0.25)]);
        for columns in [40, 150] {
            let text = render(&c, width_for(&c, columns), 3);
            let lines: Vec<&str> = text.lines().collect();
            let axis = lines.iter().position(|l| l.contains('└')).expect("an axis");
            assert_eq!(lines[axis].chars().count(), columns - 1, "{text}");
            assert_eq!(lines[axis + 1].chars().count(), columns, "{text}");
        }
        assert_eq!(width_for(&chart(&[]), 150), 147);
        assert_eq!(width_for(&c, 3), 8);
    }

    #[test]
    fn a_chart_without_points_says_so() {
        assert_eq!(
            render(&chart(&[]), 10, 3),
            "loss (over step)\n  no points yet\n"
        );
    }

    #[test]
    fn numbers_are_short() {
        for (v, s) in [
            (0.0, "0"),
            (2.5, "2.5"),
            (0.01234, "0.0123"),
            (1500.0, "1500"),
            (2.0e7, "2.00e7"),
        ] {
            assert_eq!(number(v), s);
        }
    }
}
