//! `events send|list|describe`: the event log. An event is stored before anything reads it;
//! workers' triggers start runs for it and runs' waits take it from the store.

use anyhow::anyhow;
use serde_json::{Value, json};
use stepwright::Timestamp;
use stepwright::api::trigger::{EventDetails, FireView, HeldBy};
use stepwright::schedule::format_instant as rfc3339;
use stepwright::store::event::{EventQuery, NewEvent, StoredEvent};

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
            let details = stepwright::app::event_details(store.as_ref(), tenant.as_deref(), seq)
                .await?
                .ok_or_else(|| anyhow!(BadInput(format!("no event {seq} (`stepwright events list` shows them)"))))?;
            print_described(&details, json);
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

/// What `events describe` prints: the event, what each trigger did with it and what a trigger
/// still holds it for; or one JSON object.
pub(crate) fn print_described(details: &EventDetails, json: bool) {
    let event = &details.event;
    let received = rfc3339(Timestamp::from_micros(event.received_at));
    if json {
        let mut line = json!({
            "seq": event.seq,
            "name": event.name,
            "payload": event.payload,
            "idempotency_key": event.idempotency_key,
            "received_at": received,
        });
        line["fires"] = details.fires.iter().map(fire_json).collect();
        line["held"] = details
            .held
            .iter()
            .map(|held| {
                json!({ "trigger": held.trigger, "by": held.by, "key": held.key, "until": rfc3339(Timestamp::from_micros(held.until)) })
            })
            .collect();
        println!("{line}");
        return;
    }
    println!("event     {} {}", event.seq, event.name);
    println!("received  {received}");
    if let Some(key) = &event.idempotency_key {
        println!("key       {key}");
    }
    println!("payload   {}", event.payload);
    println!("fires:");
    if details.fires.is_empty() && details.held.is_empty() {
        println!("  none yet (no trigger reads its name, or none has read it yet)");
    }
    for fire in &details.fires {
        match (&fire.run_id, &fire.skipped) {
            (Some(run), _) => println!("  {}  started {run}", fire.trigger),
            (None, reason) => println!("  {}  skipped: {}", fire.trigger, reason.as_deref().unwrap_or_default()),
        }
    }
    for held in &details.held {
        let until = rfc3339(Timestamp::from_micros(held.until));
        match (held.by, &held.key) {
            (HeldBy::Debounced, key) => println!(
                "  {}  held: debounced (key {:?}) until {until}, unless a later event of its key replaces it",
                held.trigger,
                key.as_deref().unwrap_or_default()
            ),
            (HeldBy::Batched, _) => {
                println!(
                    "  {}  held: batched, starting with its batch by {until} (or when the batch is full)",
                    held.trigger
                );
            }
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
pub(crate) fn fire_json(fire: &FireView) -> Value {
    match (&fire.run_id, &fire.skipped) {
        (Some(run), _) => json!({ "trigger": fire.trigger, "event": fire.event, "started": run }),
        (None, reason) => json!({ "trigger": fire.trigger, "event": fire.event, "skipped": reason }),
    }
}
