//! What the commands print: reports, timelines, event logs, graphs, the worker's log.

use std::sync::Arc;

use serde_json::{Value, json};
use stepwright::RunReport;
use stepwright::api::history::StepChange;
use stepwright::api::{RunDetails, RunStatus, StepView, Totals};

use crate::progress;
use crate::time::wall_now;
use crate::time::{clock_time, micros_time};

pub(crate) fn change_name(change: &StepChange) -> &'static str {
    match change {
        StepChange::Clean => "clean",
        StepChange::ValueChanged { .. } => "value_changed",
        StepChange::SchemaViolation { .. } => "schema_violation",
        StepChange::Served => "served",
        StepChange::Failed { .. } => "failed",
        StepChange::Missing => "missing",
        StepChange::Added => "added",
    }
}

/// `  3 calls, 1200 in / 80 out tokens, $0.000420` from a usage roll-up.
pub(crate) fn usage_text(usage: &Totals) -> String {
    let unknown = match usage.calls_without_usage {
        0 => String::new(),
        n => format!(" (+ {n} call(s) whose provider reported no usage: tokens and cost unknown)"),
    };
    format!(
        "  {} call(s), {} in / {} out tokens, ${:.6}{unknown}",
        usage.calls, usage.input_tokens, usage.output_tokens, usage.cost_usd
    )
}

pub(crate) fn value_or_none(value: &Option<Value>) -> String {
    value.as_ref().map_or_else(|| "(none)".to_owned(), Value::to_string)
}

/// Who executes a run, for people: the owner and until when, or that its lease lapsed.
pub(crate) fn owner_text(run: &stepwright::RunRecord, now: stepwright::Timestamp) -> String {
    owner_text_of(
        stepwright::app::wire::run_status(run.status),
        run.lease.as_ref().map(|lease| (lease.owner.as_str(), lease.expires_at)),
        now,
    )
}

/// [`owner_text`] from a run's status and its lease's owner and expiry (as a server lists
/// them).
pub(crate) fn owner_text_of(
    status: RunStatus,
    lease: Option<(&str, stepwright::Timestamp)>,
    now: stepwright::Timestamp,
) -> String {
    use stepwright::is_dead_local_process;
    match lease {
        _ if status.is_terminal() => "-".to_owned(),
        None => "-".to_owned(),
        Some((owner, expires_at)) if expires_at <= now => {
            format!("{owner} (lease lapsed at {} UTC: presumed dead)", clock_time(expires_at))
        }
        Some((owner, _)) if is_dead_local_process(owner) => {
            format!("{owner} (that process is gone; taken over on resume)")
        }
        Some((owner, expires_at)) => format!("{owner} until {} UTC", clock_time(expires_at)),
    }
}

/// The worker's log: a line per claim, finished run, stopped run and store failure.
pub(crate) fn worker_log(as_json: bool, worker: String) -> stepwright::RunnerLog {
    use stepwright::RunnerEvent;
    Arc::new(move |event: RunnerEvent<'_>| {
        let at = wall_now();
        let (kind, run, status, detail) = match &event {
            RunnerEvent::Claimed { run } => ("claimed", Some(*run), None, None),
            // What metrics count; a line per run is enough for a person.
            RunnerEvent::Executing { .. } => return,
            RunnerEvent::TookOver { run, from } => ("took_over", Some(*run), None, Some(format!("from {from}"))),
            RunnerEvent::Finished { run, report } => {
                ("finished", Some(*run), Some(report.status.as_str()), report.error.as_ref().map(ToString::to_string))
            }
            RunnerEvent::Stopped { run, error } => ("stopped", Some(*run), None, Some(error.to_string())),
            RunnerEvent::StoreFailed { error } => ("store_error", None, None, Some(format!("{error:#}"))),
        };
        if as_json {
            let line =
                json!({ "at": at, "worker": worker, "event": kind, "run_id": run, "status": status, "detail": detail });
            eprintln!("{line}");
        } else {
            let mut line = format!("{} {kind:<11}", clock_time(at));
            if let Some(run) = run {
                line.push_str(&format!(" {run}"));
            }
            if let Some(status) = status {
                line.push_str(&format!(" {status}"));
            }
            if let Some(detail) = detail {
                line.push_str(&format!(": {detail}"));
            }
            eprintln!("{line}");
        }
    })
}

/// What `run --json` prints: the run's id, status, output, error, and what it waits for.
pub(crate) fn report_json(report: &RunDetails) -> Value {
    json!({
        "run_id": report.run_id,
        "status": report.status,
        "output": report.output,
        "error": report.error,
        "pending": report.pending.iter().map(|p| json!({ "id": p.id, "step": p.step, "kind": p.kind, "message": p.message })).collect::<Vec<_>>(),
        "awaiting": report.awaiting,
    })
}

/// Prints a run this process executed or decided (the kernel's report), as [`print_run`];
/// answers the exit code its status means.
pub(crate) fn print_report(report: &RunReport, as_json: bool) -> u8 {
    // The workflow's name is not printed with a report: it need not be read for it.
    print_run(&stepwright::app::details_of_report(report, ""), as_json)
}

/// Prints a run where it stopped — `run --json`'s line, or the output (or what it waits
/// for, or why it failed) for people — and answers the exit code its status means.
pub(crate) fn print_run(report: &RunDetails, as_json: bool) -> u8 {
    let code = crate::exit::exit_code(report.status);
    if as_json {
        println!("{}", report_json(report));
        return code;
    }
    match report.status {
        RunStatus::Completed => {
            println!("{}", serde_json::to_string_pretty(&report.output).unwrap_or_default());
            // On stderr: stdout stays the output alone, for pipes.
            eprintln!("run {} completed", report.run_id);
        }
        RunStatus::Suspended => {
            eprintln!("run {} is waiting:", report.run_id);
            for p in &report.pending {
                match (p.kind, p.deadline) {
                    (stepwright::api::InterruptKind::Timer, Some(until)) => {
                        eprintln!("  {} at {}: a timer, until {}", p.id, p.step, micros_time(until));
                    }
                    _ => eprintln!("  {} at {}: {}", p.id, p.step, p.message),
                }
            }
            for awaited in &report.awaiting {
                eprintln!(
                    "  {}: the event `{}`, until {} (send it: stepwright send {} --inbox {} --message JSON)",
                    awaited.step,
                    awaited.event,
                    micros_time(awaited.until),
                    report.run_id,
                    awaited.event
                );
            }
            for task in &report.tasks {
                eprintln!("  {}: {}", task.step, task.reason);
            }
            // Nothing to decide or send: it sleeps until a time (an `every`'s next tick, a
            // retry's delay), when a worker resumes it.
            if report.pending.is_empty() && report.awaiting.is_empty() && report.tasks.is_empty() {
                match report.wake_at {
                    Some(at) => eprintln!(
                        "  its next wake-up, at {} (a worker resumes it then; an `every` is woken early by `stepwright wake {} --channel NAME`)",
                        micros_time(at),
                        report.run_id
                    ),
                    None => eprintln!("  nothing it can name (see `stepwright runs show {}`)", report.run_id),
                }
            }
        }
        _ => {
            if let Some(error) = &report.error {
                eprintln!("run {} {}: {}: {}", report.run_id, report.status.as_str(), error.code, error.message);
            }
        }
    }
    code
}

/// The timeline as a table for people: a row per step path, outputs shortened.
pub(crate) fn print_timeline(steps: &[StepView]) {
    println!(
        "  {:<32} {:<10} {:>5} {:>9} {:>8} {:>9}  OUTPUT",
        "STEP", "STATUS", "TRIES", "DURATION", "TOKENS", "COST"
    );
    let now = crate::time::wall_now().as_micros();
    let lasted = |from: i64, to: i64| {
        progress::duration(std::time::Duration::from_micros(u64::try_from(to - from).unwrap_or(0)))
    };
    for step in steps {
        // A step that goes on shows how long it has run so far.
        let duration = match (step.duration_ms, step.started_at) {
            (Some(ms), _) => progress::duration(std::time::Duration::from_secs_f64(ms / 1000.0)),
            (None, Some(started)) if step.ended_at.is_none() => format!("{}…", lasted(started, now)),
            _ => "-".to_owned(),
        };
        let tokens = step.usage.map(|usage| usage.input_tokens + usage.output_tokens);
        let cost = step.usage.map(|usage| usage.cost_usd).filter(|c| *c > 0.0);
        println!(
            "  {:<32} {:<10} {:>5} {:>9} {:>8} {:>9}  {}",
            step.path,
            step.status.as_str(),
            step.attempts,
            duration,
            tokens.map_or_else(|| "-".to_owned(), |t| t.to_string()),
            cost.map_or_else(|| "-".to_owned(), progress::dollars),
            match (&step.waiting_for, &step.output) {
                (Some(waits), _) => format!("waits for {waits}"),
                (None, Some(output)) => shortened(&output.to_string(), 48),
                (None, None) => String::new(),
            },
        );
        // What it did when, once there was more than executing.
        if step.spans.len() > 1 {
            let spans: Vec<String> = step
                .spans
                .iter()
                .map(|span| format!("{} {}", activity_text(span.activity), lasted(span.from, span.to.unwrap_or(now))))
                .collect();
            println!("  {:<32} {}", "", spans.join(" · "));
        }
    }
}

/// A timeline span's activity, for people.
fn activity_text(activity: stepwright::api::StepActivity) -> &'static str {
    use stepwright::api::StepActivity;
    match activity {
        StepActivity::Executing => "executing",
        StepActivity::Person => "waiting for a person",
        StepActivity::Timer => "waiting for a timer",
        StepActivity::Event => "waiting for an event",
        StepActivity::Worker => "waiting for a worker",
        StepActivity::Retry => "waiting to retry",
    }
}

/// `text` cut to `width` characters, marked with `…` when cut.
pub(crate) fn shortened(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    format!("{}…", text.chars().take(width - 1).collect::<String>())
}

/// The header of `runs list`'s table.
/// The command that shows the next page of `runs list`: the same filters and output, from
/// `cursor` on.
pub(crate) fn next_runs_page(filters: &[(&str, Option<&str>)], json: bool, cursor: &str, limit: usize) -> String {
    let mut words: Vec<String> = vec!["stepwright".into(), "runs".into(), "list".into()];
    for (flag, value) in filters {
        if let Some(value) = value {
            words.extend([format!("--{flag}"), (*value).to_owned()]);
        }
    }
    if json {
        words.push("--json".into());
    }
    words.extend(["--before".into(), cursor.to_owned(), "--limit".into(), limit.to_string()]);
    shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
}

pub(crate) fn print_list_header() {
    println!(
        "{:<38} {:<24} {:<10} {:<19} {:>9} {:>10}  {:<20} WORKER",
        "RUN", "WORKFLOW", "STATUS", "CREATED", "DURATION", "COST", "STARTED BY"
    );
}

/// A row of `runs list`: the duration is the run's whole life so far (to its end, once it
/// has finished); the cost is its model calls' so far (`-` when it made none); who started
/// it (`-`: nobody known, a local command); the worker executing it.
pub(crate) fn print_list_row(
    run: &str,
    workflow: &str,
    status: RunStatus,
    (created, updated): (stepwright::Timestamp, stepwright::Timestamp),
    usage: Option<&Totals>,
    started_by: Option<&stepwright::api::StartedBy>,
    owner: &str,
) {
    let started_by = started_by.map_or("-", |by| by.id.as_str());
    let cost = usage.filter(|u| u.calls > 0).map_or_else(|| "-".to_owned(), |u| progress::dollars(u.cost_usd));
    let end = if status.is_terminal() { updated } else { crate::time::wall_now() };
    let lived = std::time::Duration::from_micros(u64::try_from(end.as_micros() - created.as_micros()).unwrap_or(0));
    let created = chrono::DateTime::from_timestamp_micros(created.as_micros())
        .map_or_else(String::new, |t| t.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M:%S").to_string());
    println!(
        "{run:<38} {workflow:<24} {:<10} {created:<19} {:>9} {cost:>10}  {started_by:<20} {owner}",
        status.as_str(),
        progress::duration(lived)
    );
}

/// The facts `runs show` prints in both modes under its first line: when the run was
/// created, why it failed, when it wakes, where it was forked from, and its forks.
pub(crate) fn print_facts(shown: &RunDetails, forks: &[String]) {
    if let Some(created) = shown.created_at {
        match &shown.started_by {
            Some(by) => println!("  created {} by {}", micros_time(created), started_by_text(by)),
            None => println!("  created {}", micros_time(created)),
        }
    }
    if !shown.tags.is_empty() {
        println!("  tags: {}", shown.tags.join(", "));
    }
    if let Some(error) = &shown.error {
        println!("  error: {}: {}", error.code, error.message);
    }
    if let Some(wake) = shown.wake_at {
        println!("  wakes at {}", micros_time(wake));
    }
    for awaited in &shown.awaiting {
        println!(
            "  {} waits for the event `{}` until {} (stepwright send {} --inbox {} --message JSON)",
            awaited.step,
            awaited.event,
            micros_time(awaited.until),
            shown.run_id,
            awaited.event,
        );
    }
    for task in &shown.tasks {
        println!("  {} waits for task {}: {}", task.step, task.task_id, task.reason);
    }
    if let Some(parent) = &shown.parent {
        println!("  forked from {} before {}", parent.run_id, parent.at);
    }
    if !forks.is_empty() {
        println!("  forks: {}", forks.join(", "));
    }
}

/// Who started a run, as `runs show` says it: `lee`, `schedule:hourly (tick …)`,
/// `trigger:on-ping (events 3, 4)`.
pub(crate) fn started_by_text(by: &stepwright::api::StartedBy) -> String {
    match (&by.tick, by.events.as_slice()) {
        (Some(tick), _) => format!("{} (tick {tick})", by.id),
        (None, []) => by.id.clone(),
        (None, events) => {
            let events: Vec<String> = events.iter().map(u64::to_string).collect();
            format!("{} (events {})", by.id, events.join(", "))
        }
    }
}
