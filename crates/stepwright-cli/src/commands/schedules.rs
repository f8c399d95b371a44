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
            println!("{}", Shown::of_record(record).summary()?);
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

/// A schedule as the commands print it, read from the store or from a server's API.
pub(crate) struct Shown {
    /// `WORKFLOW/NAME`.
    pub(crate) name: String,
    pub(crate) tenant: Option<String>,
    pub(crate) workflow: String,
    pub(crate) spec: Value,
    pub(crate) paused: bool,
    /// The next tick that starts a run (a skipped daylight-saving tick is due, not fired).
    pub(crate) next_fire: Option<stepwright::Timestamp>,
}

impl Shown {
    fn of_record(record: &ScheduleRecord) -> Self {
        Self {
            name: record.key.name.clone(),
            tenant: record.key.tenant.clone(),
            workflow: record.workflow.clone(),
            spec: record.spec.clone(),
            paused: record.paused,
            next_fire: stepwright::schedule::next_fire(record, crate::time::wall_now()),
        }
    }

    pub(crate) fn of_view(view: &stepwright::api::schedule::ScheduleView) -> Self {
        Self {
            name: format!("{}/{}", view.workflow, view.schedule),
            tenant: None,
            workflow: view.workflow.clone(),
            spec: view.spec.clone(),
            paused: view.paused,
            next_fire: view.next_fire_at.map(stepwright::Timestamp::from_micros),
        }
    }

    /// In one JSON object (`list`, `create --json`).
    fn summary(&self) -> anyhow::Result<Value> {
        let spec: ScheduleSpec = serde_json::from_value(self.spec.clone())?;
        Ok(json!({
            "name": self.name,
            "tenant": self.tenant,
            "workflow": self.workflow,
            "cadence": cadence_text(&spec),
            "overlap": spec.overlap,
            "paused": self.paused,
            "next_fire": self.next_fire.map(rfc3339),
        }))
    }
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
    let records = store.schedules(tenant).await?;
    let shown: Vec<Shown> = records.iter().filter(|r| r.on_event.is_none()).map(Shown::of_record).collect();
    print_list(&shown, json)
}

/// What `schedules list` prints: a table, or JSON lines.
pub(crate) fn print_list(schedules: &[Shown], json: bool) -> anyhow::Result<u8> {
    if !json {
        println!("{:<32} {:<36} {:<8} {:<26} STATE", "NAME", "CADENCE", "OVERLAP", "NEXT FIRE");
    }
    for shown in schedules {
        let line = shown.summary()?;
        if json {
            println!("{line}");
        } else {
            let name = match &shown.tenant {
                Some(tenant) => format!("{tenant}:{}", shown.name),
                None => shown.name.clone(),
            };
            println!(
                "{:<32} {:<36} {:<8} {:<26} {}",
                name,
                line["cadence"].as_str().unwrap_or_default(),
                line["overlap"].as_str().unwrap_or_default(),
                line["next_fire"].as_str().unwrap_or("never"),
                if shown.paused { "paused" } else { "active" }
            );
        }
    }
    Ok(0)
}

/// A schedule with its next fires, the ticks waiting for a run and its last ticks, as
/// `schedules describe` prints it.
pub(crate) struct Described {
    pub(crate) shown: Shown,
    pub(crate) next_fires: Vec<(stepwright::Timestamp, String)>,
    pub(crate) last_run: Option<String>,
    pub(crate) waiting: Vec<(stepwright::Timestamp, String)>,
    /// Newest first: the run each started, or why it started none.
    pub(crate) ticks: Vec<(stepwright::Timestamp, String, TickOutcome)>,
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
    let described = Described {
        shown: Shown::of_record(&record),
        next_fires: next_fires.iter().map(|t| (t.at, t.local.clone())).collect(),
        last_run: state.last_run.map(|run| run.to_string()),
        waiting: state.waiting.iter().map(|w| (w.at, w.local.clone())).collect(),
        ticks: past.iter().map(|t| (t.at, t.local.clone(), t.outcome.clone())).collect(),
    };
    print_described(&described, json)
}

/// What `schedules describe` prints: the schedule, its next fires, the ticks waiting and its
/// last ticks; or one JSON object.
pub(crate) fn print_described(described: &Described, json: bool) -> anyhow::Result<u8> {
    let Described { shown, next_fires, last_run, waiting, ticks } = described;
    let at = |(at, local): &(stepwright::Timestamp, String)| json!({ "tick": rfc3339(*at), "local": local });
    if json {
        let tick_json = |(at, local, outcome): &(stepwright::Timestamp, String, TickOutcome)| match outcome {
            TickOutcome::Started { run } => json!({ "tick": rfc3339(*at), "local": local, "started": run }),
            TickOutcome::Skipped { reason } => json!({ "tick": rfc3339(*at), "local": local, "skipped": reason }),
        };
        println!(
            "{}",
            json!({
                "name": shown.name,
                "tenant": shown.tenant,
                "workflow": shown.workflow,
                "paused": shown.paused,
                "spec": shown.spec,
                "next_fires": next_fires.iter().map(at).collect::<Vec<_>>(),
                "last_run": last_run,
                "waiting": waiting.iter().map(at).collect::<Vec<_>>(),
                "ticks": ticks.iter().map(tick_json).collect::<Vec<_>>(),
            })
        );
        return Ok(0);
    }
    let spec: ScheduleSpec = serde_json::from_value(shown.spec.clone())?;
    let name = match &shown.tenant {
        Some(tenant) => format!("{tenant}:{}", shown.name),
        None => shown.name.clone(),
    };
    println!("schedule  {name}{}", if shown.paused { "  (paused)" } else { "" });
    println!("workflow  {}", shown.workflow);
    println!("cadence   {}", cadence_text(&spec));
    println!(
        "overlap   {}   catch-up window {:?}   jitter {:?}{}",
        serde_json::to_value(spec.overlap)?.as_str().unwrap_or_default(),
        std::time::Duration::from_micros(spec.catchup_window_us.unsigned_abs()),
        std::time::Duration::from_micros(spec.jitter_us.unsigned_abs()),
        if spec.pause_on_failure { "   pauses on failure" } else { "" }
    );
    if let Some(run) = last_run {
        println!("last run  {run}");
    }
    println!("next fires:");
    if next_fires.is_empty() {
        println!("  none (past its end)");
    }
    for (_, local) in next_fires {
        println!("  {local}");
    }
    if !waiting.is_empty() {
        println!("waiting for the last run to end:");
        for (_, local) in waiting {
            println!("  {local}");
        }
    }
    println!("last ticks:");
    for (_, local, outcome) in ticks {
        match outcome {
            TickOutcome::Started { run } => println!("  {local}  started {run}"),
            TickOutcome::Skipped { reason } => println!("  {local}  skipped: {reason}"),
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
