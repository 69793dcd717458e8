//! Progress bars for long `--file` loads, `maintain` and the cluster tools: as wide as the
//! terminal, with an estimate of the time left only once one is meaningful.
//!
//! Plain std and indicatif, so tests/cli_edges.rs can compile it in.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::time::Duration;

/// No estimate before this much time has passed (start-up bursts mislead).
const MIN_ELAPSED: Duration = Duration::from_secs(1);
/// ... and before this fraction is done, unless [`ENOUGH_ELAPSED`] has passed.
const MIN_FRACTION: f64 = 0.02;
/// After this long the mean rate is trusted even below [`MIN_FRACTION`].
const ENOUGH_ELAPSED: Duration = Duration::from_secs(10);

/// Time left at the mean rate so far, or `None` while too little is known.
pub fn eta(elapsed: Duration, pos: u64, len: u64) -> Option<Duration> {
    if pos == 0 || len == 0 || elapsed < MIN_ELAPSED {
        return None;
    }
    let fraction = pos as f64 / len as f64;
    if fraction < MIN_FRACTION && elapsed < ENOUGH_ELAPSED {
        return None;
    }
    let left = len.saturating_sub(pos) as f64 * elapsed.as_secs_f64() / pos as f64;
    Some(Duration::from_secs(left.round() as u64))
}

/// "15s left", "2m 05s left", "3h 01m left"; empty without an estimate.
pub fn format_eta(eta: Option<Duration>) -> String {
    let Some(d) = eta else {
        return String::new();
    };
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s left"),
        60..3600 => format!("{}m {:02}s left", s / 60, s % 60),
        _ => format!("{}h {:02}m left", s / 3600, s / 60 % 60),
    }
}

/// The `{left}` template key: [`format_eta`] of the bar's state.
fn left_key(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let e = eta(state.elapsed(), state.pos(), state.len().unwrap_or(0));
    let _ = w.write_str(&format_eta(e));
}

/// A style from `template`, with the `{left}` key; the default bar if the template is bad.
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key("left", left_key)
}

/// The bar of a `--file` load of `len` bytes, drawn on `target`.
///
/// The text after the bar stays under 45 columns, and `{wide_bar}` takes
/// what the terminal has left, so the line never passes its edge.
pub fn load_bar(target: ProgressDrawTarget, len: u64) -> ProgressBar {
    ProgressBar::with_draw_target(Some(len), target)
        .with_style(style("{wide_bar} {bytes:>10}/{total_bytes:<10} {left:>12}"))
}

/// Shown while `maintain` reads the store before its copy starts (its
/// statistics and the planner's pass): a spinner and the time so far.
pub fn maintain_reading(target: ProgressDrawTarget) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target)
        .with_style(style("{spinner} {wide_msg} {elapsed:>4}"))
        .with_message("reading the store to plan the rewrite");
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Turns the spinner of [`maintain_reading`] into the bar of `maintain`
/// copying `total` tags (once, at the first tags copied).
pub fn maintain_copying(bar: &ProgressBar, total: u64) {
    if bar.length().is_none() {
        bar.disable_steady_tick();
        bar.set_style(style(MAINTAIN_BAR));
        bar.set_message("");
    }
    bar.set_length(total);
}

/// The template of `maintain`'s bar.
const MAINTAIN_BAR: &str = "{wide_bar} {percent:>3}% of tags copied {left:>12}";

/// The spinner of the cluster tools: the step under way (which node, what
/// it reads or writes) and the time so far. The tools set its message.
pub fn cluster_step(target: ProgressDrawTarget) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target)
        .with_style(style("{spinner} {wide_msg} {elapsed:>4}"));
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// The bar of a `--file -` load, whose length is unknown: bytes read so far.
pub fn stream_bar(target: ProgressDrawTarget) -> ProgressBar {
    ProgressBar::with_draw_target(None, target).with_style(style("{bytes} read"))
}
