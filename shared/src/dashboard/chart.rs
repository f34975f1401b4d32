//! The chart of depth and throughput over the sampled span: an SVG drawn on the server, so
//! the page needs no script.

use maud::{Markup, html};

use super::history::History;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 180.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 56.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 24.0;
/// The shortest span drawn.
const MIN_SPAN_MS: i64 = 60_000;

/// Depth (left axis) and tasks leaving the queue per minute (right axis), from `now_ms` back
/// over the history's span, or to the first sample when the dashboard started since (at
/// least a minute).
pub fn chart(history: &History, now_ms: i64) -> Markup {
    let first = history.samples().next().map_or(now_ms, |s| s.at_ms);
    let span = (now_ms - first).clamp(MIN_SPAN_MS, history.span_ms().max(MIN_SPAN_MS));
    let from = now_ms - span;
    let depth: Vec<(i64, f64)> = history
        .samples()
        .map(|s| (s.at_ms, s.depth as f64))
        .collect();
    let rate = history.throughput();
    let depth_top = nice_ceiling(depth.iter().map(|p| p.1).fold(0.0, f64::max));
    let rate_top = nice_ceiling(rate.iter().map(|p| p.1).fold(0.0, f64::max));
    let x = |at: i64| LEFT + (at - from).clamp(0, span) as f64 / span as f64 * plot_width();
    let depth_line = polyline(&depth, x, depth_top);
    let rate_line = polyline(&rate, x, rate_top);
    html! {
        svg class="chart" viewBox={"0 0 " (WIDTH) " " (HEIGHT)} role="img"
            aria-label="Queue depth and throughput over the last hour" {
            (axes(depth_top, rate_top, span))
            @if depth.is_empty() {
                text x=(WIDTH / 2.0) y=(HEIGHT / 2.0) text-anchor="middle" class="muted" {
                    "No samples yet"
                }
            }
            polyline class="depth" data-points=(depth.len()) points=(depth_line) {}
            polyline class="rate" data-points=(rate.len()) points=(rate_line) {}
        }
    }
}

fn plot_width() -> f64 {
    WIDTH - LEFT - RIGHT
}

fn plot_height() -> f64 {
    HEIGHT - TOP - BOTTOM
}

/// `x,y` pairs of an SVG polyline, `top` at the top of the plot.
fn polyline(points: &[(i64, f64)], x: impl Fn(i64) -> f64, top: f64) -> String {
    points
        .iter()
        .map(|&(at, value)| {
            let y = TOP + plot_height() * (1.0 - value / top);
            format!("{:.1},{:.1}", x(at), y)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Frame, the two scales and the time marks.
fn axes(depth_top: f64, rate_top: f64, span_ms: i64) -> Markup {
    let bottom = TOP + plot_height();
    html! {
        rect x=(LEFT) y=(TOP) width=(plot_width()) height=(plot_height()) class="frame" {}
        text x=(LEFT - 6.0) y=(TOP + 4.0) text-anchor="end" class="depth-label" { (label(depth_top)) }
        text x=(LEFT - 6.0) y=(bottom) text-anchor="end" class="depth-label" { "0" }
        text x=(WIDTH - RIGHT + 6.0) y=(TOP + 4.0) class="rate-label" { (label(rate_top)) "/min" }
        text x=(WIDTH - RIGHT + 6.0) y=(bottom) class="rate-label" { "0" }
        text x=(LEFT) y=(HEIGHT - 6.0) class="muted" { "-" (super::shell::duration(span_ms)) }
        text x=(WIDTH - RIGHT) y=(HEIGHT - 6.0) text-anchor="end" class="muted" { "now" }
    }
}

/// The smallest of 1, 2 or 5 times a power of ten not below `value` (at least 1).
fn nice_ceiling(value: f64) -> f64 {
    if value <= 1.0 {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|candidate| *candidate >= value)
        .unwrap_or(10.0 * power)
}

fn label(value: f64) -> String {
    if value >= 1_000_000.0 {
        format!("{}M", value / 1_000_000.0)
    } else if value >= 1_000.0 {
        format!("{}k", value / 1_000.0)
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::history::Sample;
    use super::*;

    #[test]
    fn scales_round_up_to_one_two_or_five() {
        let tops: Vec<f64> = [0.0, 1.0, 3.0, 10.0, 11.0, 240.0, 999.0, 5001.0]
            .iter()
            .map(|v| nice_ceiling(*v))
            .collect();
        assert_eq!(tops, [1.0, 1.0, 5.0, 10.0, 20.0, 500.0, 1000.0, 10000.0]);
        assert_eq!(label(20_000.0), "20k");
    }

    #[test]
    fn the_newest_sample_sits_at_the_right_edge_and_the_largest_depth_at_the_top() {
        let mut history = History::new(3_600_000);
        let now = 10_000_000;
        for (at, depth) in [(now - 3_600_000, 0), (now - 1_800_000, 50), (now, 100)] {
            history.push(Sample {
                at_ms: at,
                depth,
                ..Sample::default()
            });
        }
        let svg = chart(&history, now).into_string();
        let mid_x = LEFT + plot_width() / 2.0;
        let right_x = LEFT + plot_width();
        let expected = format!(
            "{mid_x:.1},{:.1} {right_x:.1},{TOP:.1}\"",
            TOP + plot_height() / 2.0
        );
        assert!(svg.contains(&expected), "{expected} not in {svg}");
        assert!(svg.contains("data-points=\"3\""));
        assert!(!svg.contains("No samples yet"));
    }

    #[test]
    fn a_young_history_fills_the_width_from_its_first_sample() {
        let mut history = History::new(3_600_000);
        let now = 10_000_000;
        for at in [now - 120_000, now] {
            history.push(Sample {
                at_ms: at,
                depth: 1,
                ..Sample::default()
            });
        }
        let svg = chart(&history, now).into_string();
        assert!(svg.contains(&format!("points=\"{LEFT:.1},")), "{svg}");
        assert!(svg.contains(">-2 min<"), "{svg}");
    }

    #[test]
    fn an_empty_history_says_so() {
        let svg = chart(&History::new(3_600_000), 0).into_string();
        assert!(svg.contains("No samples yet"));
    }
}
