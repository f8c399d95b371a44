//! What `run`, `resume` and the interrupt commands show while a run executes, on stderr.
//!
//! On a terminal, a live view: a line per running step path with a spinner, how long it
//! has run, its attempt and the tokens and cost of its model calls so far, and under it the
//! last line the step's model is streaming; a step that ends leaves one line above the live
//! ones saying how it ended. Off a terminal (a pipe, a log file, CI) only those closing
//! lines are written, one per step, so logs stay readable.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use stepwright::llm::{MODEL_CALL_EVENT, Totals};
use stepwright::{Observer, RunId, StepPath, StepStatus};

/// How often the live view redraws (spinners turn, durations count).
const REDRAW: Duration = Duration::from_millis(100);

/// The most of a streamed line that is kept for the live view.
const STREAM_TAIL: usize = 400;

/// Where progress goes.
pub(crate) enum Progress {
    /// A terminal: redrawn lines.
    Live(Box<LiveView>),
    /// Anything else: one plain line per step as it ends.
    Plain(Steps),
}

impl Progress {
    /// The live view when stderr is a terminal, plain lines otherwise.
    pub(crate) fn for_stderr() -> Self {
        use std::io::IsTerminal;
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        if std::io::stderr().is_terminal() && !dumb {
            Self::Live(Box::new(LiveView::new(ProgressDrawTarget::stderr_with_hz(20))))
        } else {
            Self::Plain(Steps::default())
        }
    }
}

impl Observer for Progress {
    fn step_started(&self, _run: RunId, path: &StepPath, attempt: u32) {
        match self {
            Self::Live(view) => view.started(path, attempt),
            Self::Plain(steps) => steps.started(path, attempt),
        }
    }

    fn step_finished(&self, _run: RunId, path: &StepPath, status: StepStatus) {
        match self {
            Self::Live(view) => view.finished(path, status),
            Self::Plain(steps) => eprintln!("{}", steps.finished(path, status)),
        }
    }

    fn token(&self, _run: RunId, path: &StepPath, text: &str) {
        if let Self::Live(view) = self {
            view.token(path, text);
        }
    }

    fn event(&self, _run: RunId, path: &StepPath, kind: &str, data: &Value) {
        if kind != MODEL_CALL_EVENT {
            return;
        }
        match self {
            Self::Live(view) => view.model_call(path, data),
            Self::Plain(steps) => steps.model_call(path, data),
        }
    }
}

/// What is known about one step path while it runs.
struct StepState {
    /// When its first attempt started (a resumed run's replayed steps have none).
    started: Instant,
    /// Its current attempt.
    attempt: u32,
    /// Usage and cost of its model calls so far.
    usage: Totals,
}

/// Per-step bookkeeping shared by both forms: start times, attempts, usage.
#[derive(Default)]
pub(crate) struct Steps {
    steps: Mutex<HashMap<StepPath, StepState>>,
}

impl Steps {
    fn started(&self, path: &StepPath, attempt: u32) {
        let mut steps = self.steps.lock().expect("poisoned");
        let state = steps.entry(path.clone()).or_insert_with(|| StepState {
            started: Instant::now(),
            attempt,
            usage: Totals::default(),
        });
        state.attempt = attempt;
    }

    fn model_call(&self, path: &StepPath, data: &Value) {
        let mut steps = self.steps.lock().expect("poisoned");
        if let Some(state) = steps.get_mut(path) {
            state.usage.add(data);
        }
    }

    /// The closing line of a step that ended with `status` (a retry is a line too, and the
    /// step stays known for its next attempt).
    fn finished(&self, path: &StepPath, status: StepStatus) -> String {
        let mut steps = self.steps.lock().expect("poisoned");
        let state = if status == StepStatus::Retrying {
            steps.get(path).map(Summary::of)
        } else {
            steps.remove(path).as_ref().map(Summary::of)
        };
        closing_line(status, path, state.as_ref())
    }
}

/// A step's figures at a moment.
struct Summary {
    elapsed: Duration,
    attempt: u32,
    usage: Totals,
}

impl Summary {
    fn of(state: &StepState) -> Self {
        Self { elapsed: state.started.elapsed(), attempt: state.attempt, usage: state.usage }
    }
}

/// `completed  path  1.2s  attempt 2  612 tokens  $0.0021`: the figures a step ended with.
/// A step the run did not start in this process (replayed on resume) has none.
fn closing_line(status: StepStatus, path: &StepPath, summary: Option<&Summary>) -> String {
    let mut line = format!("{:<10} {path}", status.as_str());
    if let Some(summary) = summary {
        line = format!("{line:<44} {:>7}{}", duration(summary.elapsed), figures(summary.attempt, &summary.usage));
    }
    line
}

/// `  attempt 2  612 tokens  $0.0021`, each part only when it says something.
fn figures(attempt: u32, usage: &Totals) -> String {
    let mut text = String::new();
    if attempt > 1 {
        text.push_str(&format!("  attempt {attempt}"));
    }
    if usage.calls > 0 {
        text.push_str(&format!("  {} tokens", usage.input_tokens + usage.output_tokens));
        if usage.cost_usd > 0.0 {
            text.push_str(&format!("  {}", dollars(usage.cost_usd)));
        }
    }
    text
}

/// `$0.0021`; a cost too small for four places keeps two significant digits (`$0.000032`).
pub(crate) fn dollars(cost: f64) -> String {
    if cost >= 0.0001 { format!("${cost:.4}") } else { format!("${cost:.6}") }
}

/// `312ms`, `4.2s`, `3m07s`.
pub(crate) fn duration(elapsed: Duration) -> String {
    let millis = elapsed.as_millis();
    if millis < 1000 {
        format!("{millis}ms")
    } else if millis < 60_000 {
        format!("{:.1}s", elapsed.as_secs_f64())
    } else {
        format!("{}m{:02}s", millis / 60_000, millis / 1000 % 60)
    }
}

/// The running rows of the live view: a spinner line per step, and the streamed line under
/// it while its model streams.
struct Row {
    bar: ProgressBar,
    stream: Option<ProgressBar>,
    /// The line being streamed (its tail).
    streamed: String,
}

/// The live view on a terminal.
pub(crate) struct LiveView {
    multi: MultiProgress,
    steps: Steps,
    rows: Mutex<HashMap<StepPath, Row>>,
    /// How a running step's line looks, and the streamed line under it (parsed once).
    row_style: ProgressStyle,
    stream_style: ProgressStyle,
    /// How much of a streamed line fits: the terminal's width less the indent.
    stream_width: usize,
}

impl LiveView {
    pub(crate) fn new(target: ProgressDrawTarget) -> Self {
        let style =
            |template| ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner());
        // Read once: a resize mid-run only makes the streamed line shorter or wrap.
        // A terminal that reports no size (0 columns) gets a common width.
        let columns = console::Term::stderr()
            .size_checked()
            .map(|(_, columns)| usize::from(columns))
            .filter(|columns| *columns > 0)
            .unwrap_or(100);
        Self {
            multi: MultiProgress::with_draw_target(target),
            steps: Steps::default(),
            rows: Mutex::default(),
            row_style: style("{spinner:.cyan} {prefix:<32} running {elapsed:>4} {msg}"),
            stream_style: style("    {msg:.dim}"),
            stream_width: columns.saturating_sub(6).max(20),
        }
    }

    fn started(&self, path: &StepPath, attempt: u32) {
        self.steps.started(path, attempt);
        let mut rows = self.rows.lock().expect("poisoned");
        let row = rows.entry(path.clone()).or_insert_with(|| {
            let spinner = ProgressBar::new_spinner().with_style(self.row_style.clone()).with_prefix(path.to_string());
            let bar = self.multi.add(spinner);
            bar.enable_steady_tick(REDRAW);
            Row { bar, stream: None, streamed: String::new() }
        });
        self.refresh(path, row);
    }

    fn model_call(&self, path: &StepPath, data: &Value) {
        self.steps.model_call(path, data);
        if let Some(row) = self.rows.lock().expect("poisoned").get_mut(path) {
            // A finished call's text is in the journal; the next call streams afresh.
            row.streamed.clear();
            self.refresh(path, row);
        }
    }

    fn token(&self, path: &StepPath, text: &str) {
        let mut rows = self.rows.lock().expect("poisoned");
        let Some(row) = rows.get_mut(path) else { return };
        // Only the line being written is shown: what came before a newline is done.
        match text.rfind('\n') {
            Some(at) => row.streamed = text[at + 1..].to_owned(),
            None => row.streamed.push_str(text),
        }
        if row.streamed.len() > STREAM_TAIL {
            let mut cut = row.streamed.len() - STREAM_TAIL;
            while !row.streamed.is_char_boundary(cut) {
                cut += 1;
            }
            row.streamed.drain(..cut);
        }
        let stream = row.stream.get_or_insert_with(|| {
            self.multi.insert_after(&row.bar, ProgressBar::new_spinner().with_style(self.stream_style.clone()))
        });
        stream.set_message(tail_that_fits(&row.streamed, self.stream_width));
    }

    fn finished(&self, path: &StepPath, status: StepStatus) {
        let line = self.steps.finished(path, status);
        let mut rows = self.rows.lock().expect("poisoned");
        if status == StepStatus::Retrying {
            if let Some(row) = rows.get_mut(path) {
                row.streamed.clear();
                if let Some(stream) = row.stream.take() {
                    stream.finish_and_clear();
                    self.multi.remove(&stream);
                }
                self.refresh(path, row);
            }
            return;
        }
        if let Some(row) = rows.remove(path) {
            if let Some(stream) = row.stream {
                stream.finish_and_clear();
                self.multi.remove(&stream);
            }
            row.bar.finish_and_clear();
            self.multi.remove(&row.bar);
        }
        // Printed above the live rows, where it stays.
        let _ = self.multi.println(format!("{} {line}", mark(status)));
    }

    /// Puts a row's figures (attempt, tokens, cost) on its line.
    fn refresh(&self, path: &StepPath, row: &Row) {
        let steps = self.steps.steps.lock().expect("poisoned");
        if let Some(state) = steps.get(path) {
            row.bar.set_message(figures(state.attempt, &state.usage).trim_start().to_owned());
        }
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        let _ = self.multi.clear();
    }
}

/// The mark in front of a step's closing line on a terminal.
fn mark(status: StepStatus) -> &'static str {
    match status {
        StepStatus::Completed => "✓",
        StepStatus::Failed | StepStatus::Cancelled => "✗",
        StepStatus::Suspended => "⏸",
        _ => "·",
    }
}

/// The end of `text` that fits in `width` characters, marked with `…` when cut.
fn tail_that_fits(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        return text.to_owned();
    }
    let skip = count - width + 1;
    format!("…{}", text.chars().skip(skip).collect::<String>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn usage(input: u64, output: u64, cost: f64) -> Value {
        json!({ "usage": { "input_tokens": input, "output_tokens": output }, "cost_usd": cost })
    }

    #[test]
    fn closing_lines_carry_duration_attempts_tokens_and_cost() {
        let steps = Steps::default();
        let path = StepPath::new("draft");
        steps.started(&path, 1);
        steps.model_call(&path, &usage(100, 20, 0.001));
        let retry = steps.finished(&path, StepStatus::Retrying);
        assert!(retry.starts_with("retrying   draft"), "{retry}");
        assert!(retry.ends_with("  120 tokens  $0.0010"), "{retry}");
        steps.started(&path, 2);
        steps.model_call(&path, &usage(50, 10, 0.0));
        let done = steps.finished(&path, StepStatus::Completed);
        assert!(done.starts_with("completed  draft"), "{done}");
        assert!(done.ends_with("  attempt 2  180 tokens  $0.0010"), "{done}");
        assert!(done.contains("ms ") || done.contains("s "), "a duration: {done}");
        // The step is forgotten once it ended: a replayed step has no figures.
        assert_eq!(steps.finished(&path, StepStatus::Completed), "completed  draft");
    }

    #[test]
    fn a_step_without_model_calls_shows_no_usage() {
        let steps = Steps::default();
        let path = StepPath::new("send");
        steps.started(&path, 1);
        let line = steps.finished(&path, StepStatus::Failed);
        assert!(!line.contains("tokens") && !line.contains("attempt"), "{line}");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Duration::from_millis(312)), "312ms");
        assert_eq!(duration(Duration::from_millis(4_240)), "4.2s");
        assert_eq!(duration(Duration::from_secs(187)), "3m07s");
        assert_eq!(dollars(0.002_14), "$0.0021");
        assert_eq!(dollars(0.000_032), "$0.000032");
    }

    #[test]
    fn streamed_text_keeps_its_newest_end() {
        assert_eq!(tail_that_fits("short", 10), "short");
        assert_eq!(tail_that_fits("abcdefghijkl", 5), "…ijkl");
        assert_eq!(tail_that_fits("ééééé", 3), "…éé");
    }

    #[test]
    fn the_live_view_keeps_rows_for_running_steps_only() {
        let view = LiveView::new(ProgressDrawTarget::hidden());
        let (a, b) = (StepPath::new("a"), StepPath::new("b"));
        view.started(&a, 1);
        view.started(&b, 1);
        view.token(&a, "Hello\nwor");
        view.token(&a, "ld");
        {
            let rows = view.rows.lock().unwrap();
            assert_eq!(rows.len(), 2);
            assert_eq!(rows[&a].streamed, "world", "only the line being written");
            assert_eq!(rows[&a].stream.as_ref().unwrap().message(), "world");
            assert!(rows[&b].stream.is_none(), "a step that streams nothing has no stream line");
        }
        view.model_call(&a, &usage(7, 3, 0.0));
        assert_eq!(view.rows.lock().unwrap()[&a].bar.message(), "10 tokens");
        view.finished(&a, StepStatus::Retrying);
        assert!(view.rows.lock().unwrap()[&a].stream.is_none(), "a retry starts its stream afresh");
        view.finished(&a, StepStatus::Completed);
        view.finished(&b, StepStatus::Failed);
        assert!(view.rows.lock().unwrap().is_empty());
    }
}
