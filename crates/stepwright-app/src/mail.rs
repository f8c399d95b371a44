//! Messages for a run: a message for one of its inboxes (a `loop`'s `inbox`, a `wait`'s
//! event), or a wake-up for one of its `every` channels — sent only to a name the run reads.
//! A message for a name nothing reads would be stored and never taken: a typo that passes
//! in silence is refused instead, with the names the run does read.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use serde_json::Value;
use stepwright_core::{ContentHash, Engine, Mailboxes, RunId};

use crate::{AppError, Bindings};

/// What is sent to a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Mail {
    /// A message for the inbox `inbox`.
    Inbox {
        /// The inbox (a loop's `inbox`, a wait's `event`).
        inbox: String,
        /// The message.
        message: Value,
    },
    /// A wake-up for the `every` channel `channel`.
    Wake {
        /// The channel (an `every`'s `wake`).
        channel: String,
    },
}

/// Stores `mail` for `run` after checking that the run's workflow reads the inbox or channel
/// it names. The process executing the run, wherever it is, takes it. A run whose definition
/// has no source in the store (a Rust workflow) is sent to unchecked.
pub async fn send_mail(engine: &Engine, bindings: &Bindings, run: RunId, mail: Mail) -> Result<(), AppError> {
    let store = engine.store();
    // A message for a run that does not exist would wait for it forever: refused (not found).
    let record = store.load_from(run, u64::MAX).await?.record;
    let hash = record.definition_hash;
    let known = SHAPES.lock().expect("poisoned").get(&hash).cloned();
    let shape = match known {
        Some(shape) => Some(shape),
        None => match store.get_definition(hash).await? {
            Some(source) => {
                // The shape is all that is asked of it: its MCP servers are declared, not started.
                let workflow = crate::rebuild_declared(&source, bindings).await?;
                let shape = Shape { workflow: workflow.name().to_owned(), mailboxes: workflow.mailboxes() };
                let mut shapes = SHAPES.lock().expect("poisoned");
                if shapes.len() >= MAX_SHAPES {
                    shapes.clear();
                }
                shapes.insert(hash, shape.clone());
                Some(shape)
            }
            None => None,
        },
    };
    if let Some(shape) = shape {
        check(run, &shape, &mail)?;
    }
    match mail {
        Mail::Inbox { inbox, message } => engine.send(run, &inbox, message).await?,
        Mail::Wake { channel } => engine.wake(run, &channel).await?,
    }
    Ok(())
}

/// What a definition's messages may name: a definition hash stands for one text forever, so
/// its shape is compiled once per process (the cache is emptied when it grows past
/// [`MAX_SHAPES`]).
#[derive(Debug, Clone)]
struct Shape {
    workflow: String,
    mailboxes: Mailboxes,
}

static SHAPES: LazyLock<Mutex<HashMap<ContentHash, Shape>>> = LazyLock::new(Mutex::default);

/// The most definitions whose shapes are kept.
const MAX_SHAPES: usize = 1024;

fn check(run: RunId, shape: &Shape, mail: &Mail) -> Result<(), AppError> {
    let mailboxes = &shape.mailboxes;
    let (kind, name, known) = match mail {
        Mail::Inbox { inbox, .. } => ("inbox", inbox, &mailboxes.inboxes),
        Mail::Wake { channel } => ("wake channel", channel, &mailboxes.wake_channels),
    };
    if known.contains(name) {
        return Ok(());
    }
    let reads = match known.len() {
        0 => format!("its workflow {:?} reads no {kind}", shape.workflow),
        _ => format!(
            "its workflow {:?} reads: {}",
            shape.workflow,
            known.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        ),
    };
    let hint = stepwright_flow::closest(name, known.iter().map(String::as_str))
        .map(|near| format!(" (did you mean `{near}`?)"))
        .unwrap_or_default();
    Err(AppError::UnknownMailbox(format!("run {run} has no {kind} `{name}`{hint}; {reads}")))
}
