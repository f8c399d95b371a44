//! `replay`, `recompute` and `fork`: new executions from a run's history.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use stepwright::api::history::StepChange;
use stepwright::api::{RecomputeView, ReplayReport, RunStatus, Totals};
use stepwright::{RunId, StepPath};

use crate::commands::Globals;
use crate::exit::BadInput;
use crate::host::{Servers, cli_engine, definition_of, keep_source, open_store, parse_json, parse_run};
use crate::render::{change_name, value_or_none};

/// `replay`: re-executes a run in a sandbox, serving every recorded result, and compares.
pub(crate) async fn replay(g: &Globals<'_>, run: String, json: bool) -> anyhow::Result<u8> {
    let flags = g.flags;
    let run = parse_run(&run)?;
    let store = open_store(g.db).await?;
    let workflow = definition_of(&store, run, flags).await?;
    let report = cli_engine(&store, false, g.flags).replay(&workflow, run).await?;
    print_replay(&stepwright::app::wire::replay_report(report), json)
}

/// Prints a replay's comparison (local or from a server); exit 0 identical, 1 changed.
pub(crate) fn print_replay(report: &ReplayReport, json: bool) -> anyhow::Result<u8> {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        // In the order the run reached its steps; a different output with what differs.
        for step in &report.steps {
            println!("{:<12} {}", format!("{:?}", step.outcome).to_lowercase(), step.path);
            for line in &step.diff {
                println!("    {line}");
            }
        }
        if report.recorded_output != report.replayed_output {
            println!(
                "output       {} → {}",
                value_or_none(&report.recorded_output),
                value_or_none(&report.replayed_output)
            );
        }
        println!("{}", if report.identical { "identical" } else { "changed" });
    }
    Ok(u8::from(!report.identical))
}

/// `recompute`: re-executes a run from a step on (or with a changed file) and diffs.
pub(crate) async fn recompute(
    g: &Globals<'_>,
    run: String,
    file: Option<PathBuf>,
    from: Option<String>,
    rebind: &[String],
    persist: bool,
    json: bool,
) -> anyhow::Result<u8> {
    let flags = g.flags;
    let run = parse_run(&run)?;
    let rebind = parse_rebind(rebind)?;
    let store = open_store(g.db).await?;
    let workflow = match &file {
        Some(file) => {
            let loaded = stepwright::flow::load_with(file, &flags.bindings().load_options())
                .map_err(stepwright::app::AppError::Load)?;
            let called = loaded.called_files.clone();
            let workflow = stepwright::app::prepare(loaded, &flags.bindings(), Servers::Connected).await?;
            keep_source(&store, &workflow, file, called).await?;
            workflow
        }
        None => definition_of(&store, run, flags).await?,
    };
    let workflow = stepwright::app::rebind_models(workflow, &rebind)?;
    let options =
        stepwright::RecomputeOptions { from: from.as_deref().map(StepPath::new), persist, without_diff: None };
    let engine = cli_engine(&store, false, g.flags);
    print_recompute(&stepwright::app::recompute_with_report(&engine, &workflow, run, options).await?, json)
}

/// `--rebind NAME=OTHER` options, as the map the API's `models` takes.
pub(crate) fn parse_rebind(entries: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    entries
        .iter()
        .map(|entry| match entry.split_once('=') {
            Some((name, other)) if !name.is_empty() && !other.is_empty() => Ok((name.to_owned(), other.to_owned())),
            _ => Err(anyhow::anyhow!(BadInput(format!("--rebind {entry:?}: expected NAME=OTHER, two model bindings")))),
        })
        .collect()
}

/// Prints what a recompute found (local or from a server); exit 0 clean, 1 changed.
pub(crate) fn print_recompute(view: &RecomputeView, json: bool) -> anyhow::Result<u8> {
    let report = view;
    if json {
        println!("{}", serde_json::to_string(view)?);
    } else {
        for step in &report.steps {
            match &step.change {
                StepChange::ValueChanged { diff } => {
                    println!("value_changed {}", step.path);
                    for line in diff {
                        println!("    {line}");
                    }
                }
                StepChange::SchemaViolation { message } => {
                    println!("schema_violation {}", step.path);
                    println!("    {message}");
                }
                StepChange::Failed { error } => {
                    println!("failed        {}", step.path);
                    println!("    {}: {}", error.code, error.message);
                }
                other => match &step.why {
                    Some(why) => println!("{:<13} {} ({why})", change_name(other), step.path),
                    None => println!("{:<13} {}", change_name(other), step.path),
                },
            }
        }
        for decision in &report.decisions {
            println!(
                "decision      {}: {} → {}",
                decision.path,
                value_or_none(&decision.before),
                value_or_none(&decision.after)
            );
        }
        for step in &view.usage.steps {
            println!("usage         {}: {}", step.path, usage_change(&step.before, &step.after));
        }
        let usage = &view.usage;
        if usage.before.calls + usage.after.calls > 0 {
            println!("usage         run: {}", usage_change(&usage.before, &usage.after));
        }
        if let Some(forked) = &report.forked {
            println!("kept as run {forked}");
        }
        if let Some(error) = &report.error {
            println!("the recompute ended {}: {}: {}", report.status.as_str(), error.code, error.message);
        }
        println!("{}", if report.changed { "changed" } else { "clean" });
    }
    Ok(u8::from(report.changed))
}

/// `1200 → 900 tokens (-300), $0.0021 → $0.0009 (-$0.0012)`: model usage before and after.
fn usage_change(before: &Totals, after: &Totals) -> String {
    let tokens = |t: &Totals| t.input_tokens + t.output_tokens;
    let delta = i128::from(tokens(after)) - i128::from(tokens(before));
    let cost = after.cost_usd - before.cost_usd;
    // Sums of floats differ in their last bits: less than a millionth of a dollar is no change.
    let cost = if cost.abs() < 5e-7 { 0.0 } else { cost };
    let sign = if cost < 0.0 { "-" } else { "+" };
    format!(
        "{} → {} tokens ({delta:+}), {} → {} ({sign}{})",
        tokens(before),
        tokens(after),
        crate::progress::dollars(before.cost_usd),
        crate::progress::dollars(after.cost_usd),
        crate::progress::dollars(cost.abs())
    )
}

/// `fork`: a new run from a run's history up to a step, with edits.
pub(crate) async fn fork(
    g: &Globals<'_>,
    run: String,
    at: String,
    set: Option<String>,
    json: bool,
) -> anyhow::Result<u8> {
    let run = parse_run(&run)?;
    let store = open_store(g.db).await?;
    let patch = fork_edits(set.as_deref())?;
    let record = cli_engine(&store, false, g.flags).fork(run, &StepPath::new(&at), patch).await?;
    print_fork(record.id, stepwright::app::wire::run_status(record.status), run, &at, json, false);
    Ok(0)
}

/// Prints a new fork (local or from a server); `by_server`: the server continues it itself.
pub(crate) fn print_fork(id: RunId, status: RunStatus, parent: RunId, at: &str, json: bool, by_server: bool) {
    if json {
        println!("{}", json!({ "run_id": id, "status": status, "parent": parent, "at": at }));
    } else {
        println!("{id}");
        // stdout stays the id alone (for `$(stepwright fork …)`); how to go on, on stderr.
        let next = if by_server {
            "the server continues it".to_owned()
        } else {
            format!("`stepwright resume {id}` continues it here, or a `stepwright worker` on this store takes it")
        };
        eprintln!("run {id} is a fork of {parent} before {at}; it is {}: {next}", status.as_str());
    }
}

/// A fork's `--set` edits: `{"input": …, "steps": {"<path>": <output>}}`.
pub(crate) fn fork_edits(set: Option<&str>) -> anyhow::Result<stepwright::ForkPatch> {
    let mut patch = stepwright::ForkPatch::default();
    if let Some(set) = set {
        let edits = parse_json(set, "--set")?;
        patch.input = edits.get("input").cloned();
        if let Some(steps) = edits.get("steps").and_then(Value::as_object) {
            patch.outputs = steps.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        }
    }
    Ok(patch)
}
