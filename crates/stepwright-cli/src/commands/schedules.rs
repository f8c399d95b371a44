//! `schedules create|list|describe|pause|resume|delete|trigger|backfill`: the schedules in
//! the store. Workers and servers start their runs; these commands keep and inspect them.

use std::path::PathBuf;

use anyhow::anyhow;
use serde_json::{Value, json};
use stepwright::app::{NotDeclared, Section};
use stepwright::schedule::{ScheduleError, ScheduleSpec, Scheduler, format_instant as rfc3339};
use stepwright::store::schedule::{ScheduleKey, ScheduleRecord, TickOutcome};

use crate::args::{Keep, Listing, Named, SchedulesCommand};
use crate::commands::Globals;
use crate::exit::BadInput;
use crate::host::{CliStore, Servers, engine_over, keep_source, open_store};

/// `schedules`: opens the store, then the subcommand.
pub(crate) async fn schedules(g: &Globals<'_>, command: SchedulesCommand) -> anyhow::Result<u8> {
    if let SchedulesCommand::Create(Keep { file, only, paused, tenant, json }) = command {
        return create(g, file, &only, paused, tenant.as_deref(), json).await;
    }
    let store = open_store(g.db).await?;
    let scheduler = scheduler(g, &store);
    match command {
        SchedulesCommand::Create(_) => unreachable!("handled above"),
        SchedulesCommand::List(Listing { tenant, json }) => list(&store, tenant.as_deref(), json).await,
        SchedulesCommand::Describe { name, next, ticks, tenant, json } => {
            describe(&store, &scheduler, &key(tenant.as_deref(), &name), next, ticks, json).await
        }
        SchedulesCommand::Pause(Named { name, tenant }) => {
            pause(&scheduler, &key(tenant.as_deref(), &name), true).await
        }
        SchedulesCommand::Resume(Named { name, tenant }) => {
            pause(&scheduler, &key(tenant.as_deref(), &name), false).await
        }
        SchedulesCommand::Delete(Named { name, tenant }) => {
            let key = key(tenant.as_deref(), &name);
            if !store.delete_schedule(&key).await? {
                return Err(not_found(&key));
            }
            eprintln!("deleted schedule {key} and its tick records (its runs stay)");
            Ok(0)
        }
        SchedulesCommand::Trigger { name, tenant, json } => {
            let (at, run) = scheduler.trigger(&key(tenant.as_deref(), &name)).await.map_err(failed)?;
            if json {
                println!("{}", json!({ "run_id": run, "tick": rfc3339(at) }));
            } else {
                println!("{run}");
            }
            Ok(0)
        }
        SchedulesCommand::Backfill { name, from, to, rate, tenant, json } => {
            let key = key(tenant.as_deref(), &name);
            let plan = scheduler.backfill_plan(&key, from, to).await.map_err(failed)?;
            let done = scheduler
                .backfill(&key, plan, rate, |tick, run| {
                    if json {
                        println!("{}", json!({ "tick": rfc3339(tick.at), "local": tick.local, "run_id": run }));
                    } else {
                        println!("{}  {run}", tick.local);
                    }
                })
                .await
                .map_err(failed)?;
            eprintln!(
                "backfilled schedule {key}: {} runs started; {} ticks of the range had started one already",
                done.started.len(),
                done.already
            );
            Ok(0)
        }
    }
}

pub(crate) fn key(tenant: Option<&str>, name: &str) -> ScheduleKey {
    ScheduleKey::new(tenant, name)
}

fn not_found(key: &ScheduleKey) -> anyhow::Error {
    anyhow!(BadInput(format!("no schedule {key} (`stepwright schedules list` shows them; names are WORKFLOW/NAME)")))
}

/// A schedule error, as the caller's fault (exit 2) when it is theirs.
pub(crate) fn failed(error: ScheduleError) -> anyhow::Error {
    match error.fault() {
        stepwright::Fault::Caller => anyhow!(BadInput(error.to_string())),
        _ => anyhow!(error),
    }
}

pub(crate) fn scheduler(g: &Globals<'_>, store: &std::sync::Arc<dyn CliStore>) -> Scheduler {
    let name = stepwright::local_worker_id("cli", &stepwright::SystemEntropy::new());
    let engine = engine_over(store).worker_id(&name).build();
    stepwright::app::scheduler(engine, store.clone(), g.flags.bindings())
}

async fn create(
    g: &Globals<'_>,
    file: PathBuf,
    only: &[String],
    paused: bool,
    tenant: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    let (store, workflow, file_schedules, _) = load_to_keep(g, &file, only, Section::Schedules).await?;
    let scheduler = scheduler(g, &store);
    let kept = stepwright::app::create_schedules(&scheduler, tenant, &workflow, &file_schedules, only, paused)
        .await
        .map_err(failed)?;
    for record in &kept {
        if json {
            println!("{}", summary(record)?);
        } else {
            let next = record.due_at.map_or_else(|| "never".to_owned(), rfc3339);
            println!("{}  next {next}{}", record.key, if record.paused { "  (paused)" } else { "" });
        }
    }
    Ok(0)
}

/// A workflow file loaded to keep its `schedules:` or `triggers:`: the file checked before the store is opened (a bad file creates no
/// database), `only` checked against the names the section declares, the workflow
/// prepared and its source kept in the store (so any worker rebuilds it).
pub(crate) async fn load_to_keep(
    g: &Globals<'_>,
    file: &std::path::Path,
    only: &[String],
    section: Section,
) -> anyhow::Result<(
    std::sync::Arc<dyn CliStore>,
    stepwright::Workflow,
    Vec<stepwright::flow::FileSchedule>,
    Vec<stepwright::flow::FileTrigger>,
)> {
    let flags = g.flags;
    let loaded =
        stepwright::flow::load_with(file, &flags.bindings().load_options()).map_err(stepwright::app::AppError::Load)?;
    match stepwright::app::check_declared(&loaded, section, only) {
        Ok(()) => {}
        Err(NotDeclared::Empty { kind }) => {
            return Err(anyhow!(BadInput(format!("{} has no `{kind}s:` section", file.display()))));
        }
        Err(NotDeclared::Unknown { kind, name, declared }) => {
            return Err(anyhow!(BadInput(format!(
                "--only {name}: {} declares no such {kind} (it has: {})",
                file.display(),
                declared.join(", ")
            ))));
        }
    }
    let (schedules, triggers) = (loaded.schedules.clone(), loaded.triggers.clone());
    let store = open_store(g.db).await?;
    let bindings = flags.bindings().sharing_limits_in(store.clone());
    let called = loaded.called_files.clone();
    let workflow = stepwright::app::prepare(loaded, &bindings, Servers::Connected).await?;
    keep_source(&store, &workflow, file, called).await?;
    Ok((store, workflow, schedules, triggers))
}

/// A schedule in one JSON object (`list`, `create --json`).
fn summary(record: &ScheduleRecord) -> anyhow::Result<Value> {
    let spec: ScheduleSpec = serde_json::from_value(record.spec.clone())?;
    Ok(json!({
        "name": record.key.name,
        "tenant": record.key.tenant,
        "workflow": record.workflow,
        "cadence": cadence_text(&spec),
        "overlap": spec.overlap,
        "paused": record.paused,
        // The next tick that starts a run (a skipped daylight-saving tick is due, not fired).
        "next_fire": stepwright::schedule::next_fire(record, crate::time::wall_now()).map(rfc3339),
    }))
}

fn cadence_text(spec: &ScheduleSpec) -> String {
    match &spec.cadence {
        stepwright::schedule::Cadence::Cron { expression, timezone, .. } => format!("cron {expression} {timezone}"),
        stepwright::schedule::Cadence::Every { period_us, phase_us } => {
            let period = std::time::Duration::from_micros(period_us.unsigned_abs());
            match phase_us {
                0 => format!("every {period:?}"),
                phase => format!("every {period:?} at +{:?}", std::time::Duration::from_micros(phase.unsigned_abs())),
            }
        }
    }
}

async fn list(store: &std::sync::Arc<dyn CliStore>, tenant: Option<&str>, json: bool) -> anyhow::Result<u8> {
    let records = store.schedules(tenant).await?.into_iter().filter(|r| r.on_event.is_none());
    if !json {
        println!("{:<32} {:<36} {:<8} {:<26} STATE", "NAME", "CADENCE", "OVERLAP", "NEXT FIRE");
    }
    for record in records {
        let line = summary(&record)?;
        if json {
            println!("{line}");
        } else {
            let name = match &record.key.tenant {
                Some(tenant) => format!("{tenant}:{}", record.key.name),
                None => record.key.name.clone(),
            };
            println!(
                "{:<32} {:<36} {:<8} {:<26} {}",
                name,
                line["cadence"].as_str().unwrap_or_default(),
                line["overlap"].as_str().unwrap_or_default(),
                line["next_fire"].as_str().unwrap_or("never"),
                if record.paused { "paused" } else { "active" }
            );
        }
    }
    Ok(0)
}

async fn describe(
    store: &std::sync::Arc<dyn CliStore>,
    scheduler: &Scheduler,
    key: &ScheduleKey,
    next: usize,
    ticks: usize,
    json: bool,
) -> anyhow::Result<u8> {
    let record = store.schedule(key).await?.filter(|r| r.on_event.is_none()).ok_or_else(|| not_found(key))?;
    let next_fires = scheduler.next_ticks(key, next).await.map_err(failed)?;
    let state: stepwright::schedule::ScheduleState = serde_json::from_value(record.state.clone())?;
    let past = store.ticks(key, ticks).await?;
    let tick_json = |t: &stepwright::store::schedule::TickRecord| match &t.outcome {
        TickOutcome::Started { run } => json!({ "tick": rfc3339(t.at), "local": t.local, "started": run }),
        TickOutcome::Skipped { reason } => json!({ "tick": rfc3339(t.at), "local": t.local, "skipped": reason }),
    };
    if json {
        println!(
            "{}",
            json!({
                "name": record.key.name,
                "tenant": record.key.tenant,
                "workflow": record.workflow,
                "paused": record.paused,
                "spec": record.spec,
                "next_fires": next_fires.iter().map(|t| json!({ "tick": rfc3339(t.at), "local": t.local })).collect::<Vec<_>>(),
                "last_run": state.last_run,
                "waiting": state.waiting.iter().map(|w| json!({ "tick": rfc3339(w.at), "local": w.local })).collect::<Vec<_>>(),
                "ticks": past.iter().map(tick_json).collect::<Vec<_>>(),
            })
        );
        return Ok(0);
    }
    let spec: ScheduleSpec = serde_json::from_value(record.spec.clone())?;
    println!("schedule  {key}{}", if record.paused { "  (paused)" } else { "" });
    println!("workflow  {}", record.workflow);
    println!("cadence   {}", cadence_text(&spec));
    println!(
        "overlap   {}   catch-up window {:?}   jitter {:?}{}",
        serde_json::to_value(spec.overlap)?.as_str().unwrap_or_default(),
        std::time::Duration::from_micros(spec.catchup_window_us.unsigned_abs()),
        std::time::Duration::from_micros(spec.jitter_us.unsigned_abs()),
        if spec.pause_on_failure { "   pauses on failure" } else { "" }
    );
    if let Some(run) = state.last_run {
        println!("last run  {run}");
    }
    println!("next fires:");
    if next_fires.is_empty() {
        println!("  none (past its end)");
    }
    for tick in &next_fires {
        println!("  {}", tick.local);
    }
    if !state.waiting.is_empty() {
        println!("waiting for the last run to end:");
        for waiting in &state.waiting {
            println!("  {}", waiting.local);
        }
    }
    println!("last ticks:");
    for tick in &past {
        match &tick.outcome {
            TickOutcome::Started { run } => println!("  {}  started {run}", tick.local),
            TickOutcome::Skipped { reason } => println!("  {}  skipped: {reason}", tick.local),
        }
    }
    Ok(0)
}

async fn pause(scheduler: &Scheduler, key: &ScheduleKey, paused: bool) -> anyhow::Result<u8> {
    let changed = scheduler.set_paused(key, paused).await.map_err(failed)?;
    let (now, already) = if paused { ("paused", "was paused already") } else { ("resumed", "was not paused") };
    eprintln!("schedule {key} {}", if changed { now } else { already });
    Ok(0)
}
