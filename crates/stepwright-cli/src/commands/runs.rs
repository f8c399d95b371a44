//! `runs list`, `runs show` and `runs events`: what the store knows about runs.

use std::sync::Arc;

use anyhow::anyhow;
use serde_json::json;
use stepwright::store::RunFilter;
use stepwright::{RunId, RunStatus};

use crate::args::RunsCommand;
use crate::commands::Globals;
use crate::exit::BadInput;
use crate::host::{CliStore, engine_over, open_store, parse_run};
use crate::render::{owner_text, print_facts, print_list_header, print_list_row, print_timeline, usage_text};
use crate::time::local_time;
use crate::time::wall_now;

/// `runs`: opens the store, then the subcommand.
pub(crate) async fn runs(g: &Globals<'_>, command: RunsCommand) -> anyhow::Result<u8> {
    let store = open_store(g.db).await?;
    match command {
        RunsCommand::List { status, workflow, limit, before, started_by, tag, json } => {
            let before = before.as_deref().map(parse_run).transpose()?;
            let filter = RunFilter { status, workflow, before, started_by, tag, ..RunFilter::default() };
            list(&store, filter, limit, json).await
        }
        RunsCommand::Events { run, follow, json } => events(&store, run, follow, json).await,
        RunsCommand::Show { run, json } => show(&store, run, json).await,
        RunsCommand::Erase { run, json } => erase(&store, run, json).await,
        RunsCommand::Prune { older_than, status, json } => prune(&store, older_than, status, json).await,
    }
}

/// `runs erase`: one finished run, and the blobs only it referenced.
async fn erase(store: &Arc<dyn CliStore>, run: String, json: bool) -> anyhow::Result<u8> {
    let run: RunId = run.parse().map_err(|e| BadInput(format!("{e}")))?;
    let status = store.load_from(run, u64::MAX).await?.record.status;
    if !status.is_terminal() {
        return Err(BadInput(format!(
            "run {run} is {}: only a finished run is erased (cancel it first: stepwright cancel {run})",
            status.as_str()
        ))
        .into());
    }
    let removed = store.erase_run(run).await?;
    print_removed(&removed, json, &format!("erased run {run}"));
    Ok(0)
}

/// `runs prune`: finished runs last changed before `older_than` ago.
async fn prune(
    store: &Arc<dyn CliStore>,
    older_than: std::time::Duration,
    status: Option<RunStatus>,
    json: bool,
) -> anyhow::Result<u8> {
    let age = i64::try_from(older_than.as_micros()).unwrap_or(i64::MAX);
    let cut = stepwright::Timestamp::from_micros(wall_now().as_micros().saturating_sub(age));
    let policy = stepwright::store::Retention { finished_before: Some(cut), status, keep_last: None };
    let removed = store.apply_retention(policy).await?;
    // The step cache ages with the runs: what was kept before the cut is forgotten too.
    let cached = store.forget_before(cut).await?;
    if json {
        println!("{}", json!({ "runs": removed.runs, "blobs": removed.blobs, "cached": cached }));
    } else {
        println!(
            "pruned {} run(s); {} blob(s) no run references were deleted; {cached} cached step output(s) forgotten",
            removed.runs, removed.blobs
        );
    }
    Ok(0)
}

fn print_removed(removed: &stepwright::store::Removed, json: bool, what: &str) {
    if json {
        println!("{}", json!({ "runs": removed.runs, "blobs": removed.blobs }));
    } else {
        println!("{what}; {} blob(s) no run references were deleted", removed.blobs);
    }
}

/// `runs list`: the newest runs first that `filter` lets through, `limit` at a time.
pub(crate) async fn list(store: &Arc<dyn CliStore>, filter: RunFilter, limit: usize, json: bool) -> anyhow::Result<u8> {
    if limit == 0 {
        return Err(anyhow!(BadInput("--limit must be at least 1".into())));
    }
    // One more than shown says whether another page exists.
    let filter = RunFilter { limit: Some(limit + 1), headers_only: true, ..filter };
    let mut runs = store.list_runs(filter.clone()).await?;
    let more = runs.len() > limit;
    runs.truncate(limit);
    let now = wall_now();
    let ids: Vec<stepwright::RunId> = runs.iter().map(|run| run.id).collect();
    let usage = stepwright::app::usage_of(store.as_ref(), &ids).await?;
    if json {
        for (run, usage) in runs.iter().zip(&usage) {
            println!(
                "{}",
                json!({
                    "run_id": run.id,
                    "workflow": run.workflow,
                    "status": run.status,
                    "created_at": run.created_at,
                    "updated_at": run.updated_at,
                    "started_by": stepwright::app::wire::started_by(&run.caller),
                    "tags": run.tags,
                    "owner": run.lease.as_ref().map(|l| &l.owner),
                    "lease_expires_at": run.lease.as_ref().map(|l| l.expires_at),
                    "usage": usage,
                })
            );
        }
    } else {
        print_list_header();
        for (run, usage) in runs.iter().zip(&usage) {
            let times = (run.created_at, run.updated_at);
            print_list_row(
                &run.id.to_string(),
                &run.workflow,
                stepwright::app::wire::run_status(run.status),
                times,
                Some(usage),
                stepwright::app::wire::started_by(&run.caller).as_ref(),
                &owner_text(run, now),
            );
        }
    }
    if more && let Some(last) = runs.last() {
        let filters = [
            ("status", filter.status.map(RunStatus::as_str)),
            ("workflow", filter.workflow.as_deref()),
            ("started-by", filter.started_by.as_deref()),
            ("tag", filter.tag.as_deref()),
        ];
        eprintln!("more runs: {}", crate::render::next_runs_page(&filters, json, &last.id.to_string(), limit));
    }
    Ok(0)
}

/// `runs events`: a run's lifecycle and audit events (and, with `--follow`, those to come).
pub(crate) async fn events(store: &Arc<dyn CliStore>, run: String, follow: bool, json: bool) -> anyhow::Result<u8> {
    let run = parse_run(&run)?;
    let mut cursor = stepwright::inspect::EventCursor::new();
    loop {
        for event in cursor.poll(store.as_ref(), run).await? {
            if json {
                println!("{}", serde_json::to_string(&event)?);
            } else {
                println!("{} {:<24} {:<20} {}", local_time(event.at), event.kind, event.path.as_str(), event.data);
            }
        }
        if !follow || cursor.finished() {
            return Ok(0);
        }
        // Polling keeps `--follow` working on every store and across processes;
        // a quarter second is well below what a person watching notices.
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(130),
        }
    }
}

/// `runs show`: a run's status, owner, steps, usage and open interrupts.
pub(crate) async fn show(store: &Arc<dyn CliStore>, run: String, json: bool) -> anyhow::Result<u8> {
    let run: RunId = run.parse().map_err(|e| BadInput(format!("{e}")))?;
    let engine = engine_over(store).build();
    let details = stepwright::app::run_details(&engine, run).await?;
    let loaded = store.load_from(run, u64::MAX).await?;
    if json {
        println!("{}", serde_json::to_string(&details)?);
    } else {
        println!("run {} ({}) {}", run, loaded.record.workflow, details.status.as_str());
        let children = stepwright::store::RunFilter {
            parent: Some(run),
            headers_only: true,
            limit: Some(50),
            ..Default::default()
        };
        let forks: Vec<String> = store.list_runs(children).await?.iter().map(|r| r.id.to_string()).collect();
        print_facts(&details, &forks);
        if !details.status.is_terminal() && loaded.record.lease.is_some() {
            println!("  executed by {}", owner_text(&loaded.record, wall_now()));
        }
        if let Some(queued) = &details.queued {
            println!("  queued: {}", queued.reason);
        }
        if let Some(cancel) = &loaded.record.cancel {
            println!(
                "  cancel asked{}: {}",
                cancel.by.as_deref().map(|by| format!(" by {by}")).unwrap_or_default(),
                cancel.reason
            );
        }
        print_timeline(&details.steps);
        if let Some(total) = &details.usage {
            println!("  model usage:{}", usage_text(total));
        }
        for pending in &details.pending {
            println!("  waiting: {} at {} — {}", pending.id, pending.step, pending.message);
        }
    }
    Ok(0)
}
