//! `schedules` and `triggers` with `--server`: the API's `/v1/schedules` and `/v1/triggers` in
//! the key's namespace, printed as the local commands print them. `create FILE` registers the
//! file (a new source of a name is its next version, as `run FILE --server` registers it) and
//! keeps that version's schedules or triggers; the key's namespace is the tenant.

use anyhow::anyhow;
use serde_json::json;
use stepwright::api::schedule::{
    BackfillAccepted, BackfillRequest, CreateSchedules, ScheduleDetails, ScheduleView, TickView, Triggered,
};
use stepwright::api::trigger::{CreateTriggers, TriggerDetails, TriggerView};
use stepwright::schedule::format_instant as rfc3339;
use stepwright::store::schedule::TickOutcome;
use stepwright::{RunId, Timestamp};

use super::remote::Remote;
use super::schedules::{Described, Shown, print_described, print_list};
use super::triggers::{TriggerShown, print_trigger_described, print_trigger_list};
use crate::args::{Keep, Listing, Named, SchedulesCommand, TriggersCommand};
use crate::exit::BadInput;

/// `--tenant` is the key's to say over `--server`.
fn no_tenant(tenant: Option<&String>) -> anyhow::Result<()> {
    match tenant {
        Some(_) => {
            Err(anyhow!(BadInput("with --server the API key's namespace is the tenant: --tenant is not taken".into())))
        }
        None => Ok(()),
    }
}

/// `WORKFLOW/NAME` as the API's path below `/v1/schedules` or `/v1/triggers`.
fn path(kind: &str, name: &str) -> anyhow::Result<String> {
    match name.split_once('/') {
        Some((workflow, entry)) if !workflow.is_empty() && !entry.is_empty() => {
            Ok(format!("/v1/{kind}/{workflow}/{entry}"))
        }
        _ => Err(anyhow!(BadInput(format!(
            "{name:?}: a name is WORKFLOW/NAME (the file's workflow and the name in its file)"
        )))),
    }
}

fn tick_outcome(tick: &TickView) -> TickOutcome {
    match tick.run_id.as_deref().and_then(|run| run.parse::<RunId>().ok()) {
        Some(run) => TickOutcome::Started { run },
        None => TickOutcome::Skipped { reason: tick.skipped.clone().unwrap_or_default() },
    }
}

/// The schedules of the key's namespace over `--server`.
pub(crate) async fn schedules(remote: &Remote, command: SchedulesCommand) -> anyhow::Result<u8> {
    match command {
        SchedulesCommand::Create(Keep { file, only, paused, tenant, json }) => {
            no_tenant(tenant.as_ref())?;
            let registered = remote.register(&file).await?;
            eprintln!("registered {} as version {} of {}", file.display(), registered.version, registered.name);
            let body = CreateSchedules { workflow: registered.name, version: Some(registered.version), only, paused };
            let kept: Vec<ScheduleView> = remote.post("/v1/schedules", &body).await?;
            for view in &kept {
                let shown = Shown::of_view(view);
                if json {
                    print_list(std::slice::from_ref(&shown), true)?;
                } else {
                    let next = shown.next_fire.map_or_else(|| "never".to_owned(), rfc3339);
                    println!("{}  next {next}{}", shown.name, if shown.paused { "  (paused)" } else { "" });
                }
            }
            Ok(0)
        }
        SchedulesCommand::List(Listing { tenant, json }) => {
            no_tenant(tenant.as_ref())?;
            let views: Vec<ScheduleView> = remote.get("/v1/schedules").await?;
            print_list(&views.iter().map(Shown::of_view).collect::<Vec<_>>(), json)
        }
        SchedulesCommand::Describe { name, next, ticks, tenant, json } => {
            no_tenant(tenant.as_ref())?;
            let details: ScheduleDetails = remote.get(&path("schedules", &name)?).await?;
            let at = |t: &TickView| (Timestamp::from_micros(t.at), t.local.clone());
            let described = Described {
                shown: Shown::of_view(&details.schedule),
                next_fires: details.next_fires.iter().take(next).map(at).collect(),
                last_run: details.last_run.clone(),
                waiting: details.waiting.iter().map(at).collect(),
                ticks: details
                    .ticks
                    .iter()
                    .take(ticks)
                    .map(|t| (Timestamp::from_micros(t.at), t.local.clone(), tick_outcome(t)))
                    .collect(),
            };
            print_described(&described, json)
        }
        SchedulesCommand::Pause(Named { name, tenant }) => {
            set_paused(remote, "schedules", "schedule", &name, tenant.as_ref(), true).await
        }
        SchedulesCommand::Resume(Named { name, tenant }) => {
            set_paused(remote, "schedules", "schedule", &name, tenant.as_ref(), false).await
        }
        SchedulesCommand::Delete(Named { name, tenant }) => {
            no_tenant(tenant.as_ref())?;
            remote.delete(&path("schedules", &name)?).await?;
            eprintln!("deleted schedule {name} and its tick records (its runs stay)");
            Ok(0)
        }
        SchedulesCommand::Trigger { name, tenant, json } => {
            no_tenant(tenant.as_ref())?;
            let started: Triggered = remote.post(&format!("{}/trigger", path("schedules", &name)?), &json!({})).await?;
            if json {
                println!(
                    "{}",
                    json!({ "run_id": started.run_id, "tick": rfc3339(Timestamp::from_micros(started.tick_at)) })
                );
            } else {
                println!("{}", started.run_id);
            }
            Ok(0)
        }
        SchedulesCommand::Backfill { name, from, to, rate, tenant, json } => {
            no_tenant(tenant.as_ref())?;
            let body = BackfillRequest { from: rfc3339(from), to: rfc3339(to), rate: Some(rate) };
            let accepted: BackfillAccepted =
                remote.post(&format!("{}/backfill", path("schedules", &name)?), &body).await?;
            if json {
                println!("{}", json!({ "ticks": accepted.ticks, "already": accepted.already }));
            }
            // The server starts them in the background: `schedules describe` shows each tick's run.
            eprintln!(
                "backfilling schedule {name} at {rate}/s on the server: {} runs to start; {} ticks of the range had started one already",
                accepted.ticks, accepted.already
            );
            Ok(0)
        }
    }
}

/// The triggers of the key's namespace over `--server`.
pub(crate) async fn triggers(remote: &Remote, command: TriggersCommand) -> anyhow::Result<u8> {
    match command {
        TriggersCommand::Create(Keep { file, only, paused, tenant, json }) => {
            no_tenant(tenant.as_ref())?;
            let registered = remote.register(&file).await?;
            eprintln!("registered {} as version {} of {}", file.display(), registered.version, registered.name);
            let body = CreateTriggers { workflow: registered.name, version: Some(registered.version), only, paused };
            let kept: Vec<TriggerView> = remote.post("/v1/triggers", &body).await?;
            let shown = kept.iter().map(TriggerShown::of_view).collect::<anyhow::Result<Vec<_>>>()?;
            if json {
                print_trigger_list(&shown, true);
            } else {
                for trigger in &shown {
                    println!(
                        "{}  on {}{}",
                        trigger.name,
                        trigger.spec.event,
                        if trigger.paused { "  (paused)" } else { "" }
                    );
                }
            }
            Ok(0)
        }
        TriggersCommand::List(Listing { tenant, json }) => {
            no_tenant(tenant.as_ref())?;
            let views: Vec<TriggerView> = remote.get("/v1/triggers").await?;
            print_trigger_list(&views.iter().map(TriggerShown::of_view).collect::<anyhow::Result<Vec<_>>>()?, json);
            Ok(0)
        }
        TriggersCommand::Describe { name, fires, tenant, json } => {
            no_tenant(tenant.as_ref())?;
            let details: TriggerDetails = remote.get(&path("triggers", &name)?).await?;
            let mut shown = TriggerShown::of_view(&details.trigger)?;
            shown.read_through = details.read_through;
            shown.held = details
                .held
                .iter()
                .map(|held| {
                    let key = held["key"].as_str().unwrap_or_default().to_owned();
                    let due = Timestamp::from_micros(held["due_at"].as_i64().unwrap_or_default());
                    (key, held["event"].as_u64().unwrap_or_default(), due)
                })
                .collect();
            shown.batch = details.batch.clone();
            let fires: Vec<_> = details.fires.iter().take(fires).cloned().collect();
            print_trigger_described(&shown, &fires, json);
            Ok(0)
        }
        TriggersCommand::Pause(Named { name, tenant }) => {
            set_paused(remote, "triggers", "trigger", &name, tenant.as_ref(), true).await
        }
        TriggersCommand::Resume(Named { name, tenant }) => {
            set_paused(remote, "triggers", "trigger", &name, tenant.as_ref(), false).await
        }
        TriggersCommand::Delete(Named { name, tenant }) => {
            no_tenant(tenant.as_ref())?;
            remote.delete(&path("triggers", &name)?).await?;
            eprintln!("deleted trigger {name} and its fire records (its runs stay)");
            Ok(0)
        }
    }
}

async fn set_paused(
    remote: &Remote,
    kind: &str,
    what: &str,
    name: &str,
    tenant: Option<&String>,
    paused: bool,
) -> anyhow::Result<u8> {
    no_tenant(tenant)?;
    let verb = if paused { "pause" } else { "resume" };
    let _: serde_json::Value = remote.post(&format!("{}/{verb}", path(kind, name)?), &json!({})).await?;
    eprintln!("{what} {name} {}", if paused { "paused" } else { "resumed" });
    Ok(0)
}
