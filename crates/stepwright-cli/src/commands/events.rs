//! `events send|list|describe`: the event log. An event is stored before anything reads it;
//! workers' triggers start runs for it and runs' waits take it from the store.

use anyhow::anyhow;
use serde_json::{Value, json};
use stepwright::schedule::format_instant as rfc3339;
use stepwright::store::event::{EventFire, EventQuery, NewEvent, StoredEvent};
use stepwright::store::schedule::TickOutcome;

use crate::args::EventsCommand;
use crate::commands::Globals;
use crate::exit::BadInput;
use crate::host::{open_store, parse_input};
use crate::time::wall_now;

/// `events`: opens the store, then the subcommand.
pub(crate) async fn events(g: &Globals<'_>, command: EventsCommand) -> anyhow::Result<u8> {
    match command {
        EventsCommand::Send { name, payload, idempotency_key, tenant, json } => {
            let payload = parse_input(Some(&payload))
                .map_err(|e| anyhow!(BadInput(e.to_string().replace("the input", "the payload"))))?;
            let store = open_store(g.db).await?;
            let event = NewEvent { tenant, name, payload, idempotency_key, at: wall_now() };
            let appended = store.append_event(event).await.map_err(caller_or_ours)?;
            print_sent(&appended.event, appended.created, json);
            Ok(0)
        }
        EventsCommand::List { name, limit, tenant, json } => {
            let store = open_store(g.db).await?;
            let events = store
                .event_log(tenant.as_deref(), EventQuery { name, limit: limit as usize, ..Default::default() })
                .await?;
            print_list(&events, json);
            Ok(0)
        }
        EventsCommand::Describe { seq, tenant, json } => {
            let store = open_store(g.db).await?;
            let event = store
                .event_by_seq(tenant.as_deref(), seq)
                .await?
                .ok_or_else(|| anyhow!(BadInput(format!("no event {seq} (`stepwright events list` shows them)"))))?;
            let fires = store.event_fires(tenant.as_deref(), seq).await?;
            print_described(&event, &fires, json);
            Ok(0)
        }
    }
}

/// What `events send` prints: the sequence number (and, on stderr, that nothing was stored
/// when the key was sent before), or one JSON object.
pub(crate) fn print_sent(event: &StoredEvent, created: bool, json: bool) {
    if json {
        println!("{}", json!({ "event": event_json(event), "created": created }));
    } else {
        println!("{}", event.seq);
        if !created {
            eprintln!("its idempotency key names event {} sent before: nothing stored", event.seq);
        }
    }
}

/// What `events list` prints: a table, or JSON lines.
pub(crate) fn print_list(events: &[StoredEvent], json: bool) {
    if !json {
        println!("{:<8} {:<28} {:<24} PAYLOAD", "SEQ", "NAME", "RECEIVED");
    }
    for event in events {
        if json {
            println!("{}", event_json(event));
        } else {
            let mut payload = event.payload.to_string();
            if payload.len() > 60 {
                payload = format!("{}…", payload.chars().take(59).collect::<String>());
            }
            println!("{:<8} {:<28} {:<24} {payload}", event.seq, event.name, rfc3339(event.received_at));
        }
    }
}

/// What `events describe` prints: the event and its fires, or one JSON object.
pub(crate) fn print_described(event: &StoredEvent, fires: &[EventFire], json: bool) {
    if json {
        let mut line = event_json(event);
        line["fires"] = fires.iter().map(fire_json).collect();
        println!("{line}");
        return;
    }
    println!("event     {} {}", event.seq, event.name);
    println!("received  {}", rfc3339(event.received_at));
    if let Some(key) = &event.idempotency_key {
        println!("key       {key}");
    }
    println!("payload   {}", event.payload);
    println!("fires:");
    if fires.is_empty() {
        println!("  none yet (no trigger matched it, or none has read it yet)");
    }
    for fire in fires {
        match &fire.outcome {
            TickOutcome::Started { run } => println!("  {}  started {run}", fire.trigger),
            TickOutcome::Skipped { reason } => println!("  {}  skipped: {reason}", fire.trigger),
        }
    }
}

/// A store's refusal of the caller's event (a bad name or key) exits 2.
fn caller_or_ours(error: stepwright::StoreError) -> anyhow::Error {
    match error.fault() {
        stepwright::Fault::Caller => anyhow!(BadInput(error.to_string())),
        _ => anyhow!(error),
    }
}

/// An event in one JSON object.
pub(crate) fn event_json(event: &StoredEvent) -> Value {
    json!({
        "seq": event.seq,
        "name": event.name,
        "tenant": event.tenant,
        "payload": event.payload,
        "idempotency_key": event.idempotency_key,
        "received_at": rfc3339(event.received_at),
    })
}

/// A fire in one JSON object.
pub(crate) fn fire_json(fire: &EventFire) -> Value {
    match &fire.outcome {
        TickOutcome::Started { run } => json!({ "trigger": fire.trigger, "event": fire.event, "started": run }),
        TickOutcome::Skipped { reason } => json!({ "trigger": fire.trigger, "event": fire.event, "skipped": reason }),
    }
}
