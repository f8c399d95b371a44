//! `triggers create|list|describe|pause|resume|delete`: the triggers in the store. Workers
//! and servers start their runs as events come; these commands keep and inspect them.

use std::path::PathBuf;

use anyhow::anyhow;
use serde_json::{Value, json};
use stepwright::schedule::{TriggerSpec, TriggerState, format_instant as rfc3339};
use stepwright::store::schedule::{ScheduleKey, ScheduleRecord};

use crate::args::{Keep, Listing, Named, TriggersCommand};
use crate::commands::Globals;
use crate::commands::events::fire_json;
use crate::commands::schedules::{failed, key, load_to_keep, scheduler};
use crate::exit::BadInput;
use crate::host::{CliStore, open_store};
use stepwright::api::trigger::FireView;
use stepwright::app::Section;

/// `triggers`: opens the store, then the subcommand.
pub(crate) async fn triggers(g: &Globals<'_>, command: TriggersCommand) -> anyhow::Result<u8> {
    if let TriggersCommand::Create(Keep { file, only, paused, tenant, json }) = command {
        return create(g, file, &only, paused, tenant.as_deref(), json).await;
    }
    let store = open_store(g.db).await?;
    match command {
        TriggersCommand::Create(_) => unreachable!("handled above"),
        TriggersCommand::List(Listing { tenant, json }) => {
            let records = store.schedules(tenant.as_deref()).await?;
            let shown = records
                .iter()
                .filter(|r| r.on_event.is_some())
                .map(TriggerShown::of_record)
                .collect::<anyhow::Result<Vec<_>>>()?;
            print_trigger_list(&shown, json);
            Ok(0)
        }
        TriggersCommand::Describe { name, fires, tenant, json } => {
            let key = key(tenant.as_deref(), &name);
            let record = trigger(&store, &key).await?;
            let past = store.trigger_fires(&key, fires).await?;
            let fires: Vec<FireView> = past.iter().map(stepwright::app::fire_view).collect();
            print_trigger_described(&TriggerShown::of_record(&record)?, &fires, json);
            Ok(0)
        }
        TriggersCommand::Pause(Named { name, tenant }) => pause(g, &store, &key(tenant.as_deref(), &name), true).await,
        TriggersCommand::Resume(Named { name, tenant }) => {
            pause(g, &store, &key(tenant.as_deref(), &name), false).await
        }
        TriggersCommand::Delete(Named { name, tenant }) => {
            let key = key(tenant.as_deref(), &name);
            trigger(&store, &key).await?;
            store.delete_schedule(&key).await?;
            eprintln!("deleted trigger {key} and its fire records (its runs stay)");
            Ok(0)
        }
    }
}

async fn pause(
    g: &Globals<'_>,
    store: &std::sync::Arc<dyn CliStore>,
    key: &ScheduleKey,
    paused: bool,
) -> anyhow::Result<u8> {
    trigger(store, key).await?;
    let changed = scheduler(g, store).set_paused(key, paused).await.map_err(failed)?;
    let (now, already) = if paused { ("paused", "was paused already") } else { ("resumed", "was not paused") };
    eprintln!("trigger {key} {}", if changed { now } else { already });
    Ok(0)
}

/// A stored trigger, or the caller's mistake.
async fn trigger(store: &std::sync::Arc<dyn CliStore>, key: &ScheduleKey) -> anyhow::Result<ScheduleRecord> {
    match store.schedule(key).await? {
        Some(record) if record.on_event.is_some() => Ok(record),
        Some(_) => {
            Err(anyhow!(BadInput(format!("{key} is a schedule, not a trigger (`stepwright schedules describe`)"))))
        }
        None => Err(anyhow!(BadInput(format!(
            "no trigger {key} (`stepwright triggers list` shows them; names are WORKFLOW/NAME)"
        )))),
    }
}

fn mode(spec: &TriggerSpec) -> String {
    match (&spec.debounce, &spec.batch) {
        (Some(debounce), _) => format!("debounce {:?}", std::time::Duration::from_micros(debounce.period_us as u64)),
        (_, Some(batch)) => {
            format!("batch {} / {:?}", batch.max, std::time::Duration::from_micros(batch.within_us as u64))
        }
        _ => "each".to_owned(),
    }
}

/// A trigger as the commands print it, read from the store or from a server's API.
pub(crate) struct TriggerShown {
    /// `WORKFLOW/NAME`, after its tenant (`acme:tickets/new`) when it has one.
    pub(crate) name: String,
    pub(crate) tenant: Option<String>,
    pub(crate) workflow: String,
    pub(crate) spec: TriggerSpec,
    pub(crate) raw_spec: Value,
    pub(crate) paused: bool,
    pub(crate) read_through: u64,
    /// What a debounce holds: its key, the event, when it starts its run.
    pub(crate) held: Vec<(String, u64, stepwright::Timestamp)>,
    /// The events of the batch being collected.
    pub(crate) batch: Vec<u64>,
}

impl TriggerShown {
    fn of_record(record: &ScheduleRecord) -> anyhow::Result<Self> {
        let state: TriggerState = serde_json::from_value(record.state.clone())?;
        Ok(Self {
            name: record.key.to_string(),
            tenant: record.key.tenant.clone(),
            workflow: record.workflow.clone(),
            spec: serde_json::from_value(record.spec.clone())?,
            raw_spec: record.spec.clone(),
            paused: record.paused,
            read_through: state.read_through,
            held: state.held.iter().map(|(group, held)| (group.clone(), held.event.seq, held.due)).collect(),
            batch: state.batch.iter().map(|e| e.seq).collect(),
        })
    }

    /// A trigger the API shows (what it holds is only in its details).
    pub(crate) fn of_view(view: &stepwright::api::trigger::TriggerView) -> anyhow::Result<Self> {
        Ok(Self {
            name: format!("{}/{}", view.workflow, view.trigger),
            tenant: None,
            workflow: view.workflow.clone(),
            spec: serde_json::from_value(view.spec.clone())?,
            raw_spec: view.spec.clone(),
            paused: view.paused,
            read_through: 0,
            held: Vec::new(),
            batch: Vec::new(),
        })
    }

    /// In one JSON object (`list`, `create --json`).
    fn summary(&self) -> Value {
        json!({
            "name": self.name.split_once(':').filter(|_| self.tenant.is_some()).map_or(self.name.as_str(), |(_, name)| name),
            "tenant": self.tenant,
            "workflow": self.workflow,
            "event": self.spec.event,
            "when": self.spec.when,
            "mode": mode(&self.spec),
            "paused": self.paused,
        })
    }
}

/// What `triggers list` prints: a table, or JSON lines.
pub(crate) fn print_trigger_list(triggers: &[TriggerShown], json: bool) {
    if !json {
        println!("{:<32} {:<28} {:<10} STATE", "NAME", "EVENT", "MODE");
    }
    for trigger in triggers {
        let line = trigger.summary();
        if json {
            println!("{line}");
        } else {
            println!(
                "{:<32} {:<28} {:<10} {}",
                trigger.name,
                trigger.spec.event,
                mode(&trigger.spec),
                if trigger.paused { "paused" } else { "active" }
            );
        }
    }
}

/// What `triggers describe` prints: the trigger, what it holds and its last fires; or one
/// JSON object.
pub(crate) fn print_trigger_described(trigger: &TriggerShown, fires: &[FireView], json: bool) {
    if json {
        let held: Vec<Value> = trigger
            .held
            .iter()
            .map(|(key, event, due)| json!({ "key": key, "event": event, "due": rfc3339(*due) }))
            .collect();
        println!(
            "{}",
            json!({
                "name": trigger.summary()["name"],
                "tenant": trigger.tenant,
                "workflow": trigger.workflow,
                "paused": trigger.paused,
                "spec": trigger.raw_spec,
                "read_through": trigger.read_through,
                "held": held,
                "batch": trigger.batch,
                "fires": fires.iter().map(fire_json).collect::<Vec<_>>(),
            })
        );
        return;
    }
    let spec = &trigger.spec;
    println!("trigger   {}{}", trigger.name, if trigger.paused { "  (paused)" } else { "" });
    println!("workflow  {}", trigger.workflow);
    println!("event     {}{}", spec.event, spec.when.as_ref().map(|w| format!("  when {w}")).unwrap_or_default());
    println!("mode      {}", mode(spec));
    println!("read      through event {}", trigger.read_through);
    for (key, event, due) in &trigger.held {
        println!("  held: event {event} (key {key:?}) until {}", rfc3339(*due));
    }
    if !trigger.batch.is_empty() {
        println!("  batch: events {:?}", trigger.batch);
    }
    println!("last fires:");
    for fire in fires {
        match (&fire.run_id, &fire.skipped) {
            (Some(run), _) => println!("  event {}  started {run}", fire.event),
            (None, reason) => println!("  event {}  skipped: {}", fire.event, reason.as_deref().unwrap_or_default()),
        }
    }
}

async fn create(
    g: &Globals<'_>,
    file: PathBuf,
    only: &[String],
    paused: bool,
    tenant: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    let (store, workflow, _, file_triggers) = load_to_keep(g, &file, only, Section::Triggers).await?;
    let scheduler = scheduler(g, &store);
    let kept = stepwright::app::create_triggers(&scheduler, tenant, &workflow, &file_triggers, only, paused)
        .await
        .map_err(failed)?;
    for record in &kept {
        if json {
            println!("{}", TriggerShown::of_record(record)?.summary());
        } else {
            println!(
                "{}  on {}{}",
                record.key,
                record.on_event.as_deref().unwrap_or(""),
                if record.paused { "  (paused)" } else { "" }
            );
        }
    }
    Ok(0)
}
