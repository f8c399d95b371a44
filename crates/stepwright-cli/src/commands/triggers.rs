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
            if !json {
                println!("{:<32} {:<28} {:<10} STATE", "NAME", "EVENT", "MODE");
            }
            for record in store.schedules(tenant.as_deref()).await?.iter().filter(|r| r.on_event.is_some()) {
                let line = summary(record)?;
                if json {
                    println!("{line}");
                } else {
                    println!(
                        "{:<32} {:<28} {:<10} {}",
                        record.key.to_string(),
                        line["event"].as_str().unwrap_or_default(),
                        line["mode"].as_str().unwrap_or_default(),
                        if record.paused { "paused" } else { "active" }
                    );
                }
            }
            Ok(0)
        }
        TriggersCommand::Describe { name, fires, tenant, json } => {
            let key = key(tenant.as_deref(), &name);
            let record = trigger(&store, &key).await?;
            let spec: TriggerSpec = serde_json::from_value(record.spec.clone())?;
            let state: TriggerState = serde_json::from_value(record.state.clone())?;
            let past = store.trigger_fires(&key, fires).await?;
            let held: Vec<Value> = state
                .held
                .iter()
                .map(|(group, held)| json!({ "key": group, "event": held.event.seq, "due": rfc3339(held.due) }))
                .collect();
            let batch: Vec<u64> = state.batch.iter().map(|e| e.seq).collect();
            if json {
                println!(
                    "{}",
                    json!({
                        "name": record.key.name,
                        "tenant": record.key.tenant,
                        "workflow": record.workflow,
                        "paused": record.paused,
                        "spec": record.spec,
                        "read_through": state.read_through,
                        "held": held,
                        "batch": batch,
                        "fires": past.iter().map(|fire| fire_json(&stepwright::app::fire_view(fire))).collect::<Vec<_>>(),
                    })
                );
                return Ok(0);
            }
            println!("trigger   {key}{}", if record.paused { "  (paused)" } else { "" });
            println!("workflow  {}", record.workflow);
            println!(
                "event     {}{}",
                spec.event,
                spec.when.as_ref().map(|w| format!("  when {w}")).unwrap_or_default()
            );
            println!("mode      {}", mode(&spec));
            println!("read      through event {}", state.read_through);
            for held in &held {
                println!(
                    "  held: event {} (key {:?}) until {}",
                    held["event"],
                    held["key"].as_str().unwrap_or_default(),
                    held["due"].as_str().unwrap_or_default()
                );
            }
            if !batch.is_empty() {
                println!("  batch: events {batch:?}");
            }
            println!("last fires:");
            for fire in &past {
                match &fire.outcome {
                    stepwright::store::schedule::TickOutcome::Started { run } => {
                        println!("  event {}  started {run}", fire.event);
                    }
                    stepwright::store::schedule::TickOutcome::Skipped { reason } => {
                        println!("  event {}  skipped: {reason}", fire.event);
                    }
                }
            }
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

/// A trigger in one JSON object (`list`, `create --json`).
fn summary(record: &ScheduleRecord) -> anyhow::Result<Value> {
    let spec: TriggerSpec = serde_json::from_value(record.spec.clone())?;
    Ok(json!({
        "name": record.key.name,
        "tenant": record.key.tenant,
        "workflow": record.workflow,
        "event": spec.event,
        "when": spec.when,
        "mode": mode(&spec),
        "paused": record.paused,
    }))
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
            println!("{}", summary(record)?);
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
