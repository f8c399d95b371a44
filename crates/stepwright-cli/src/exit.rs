//! From errors to exit codes, in one place: 2 for the user's mistakes (bad input, a run id
//! that names no run, a run held elsewhere), 1 for everything else.

use anyhow::anyhow;

use crate::time::clock_time;

/// A usage, file or input problem: exit code 2.
#[derive(Debug)]
pub(crate) struct BadInput(pub(crate) String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// The exit code and the message of a failed command: 2 when it is the caller's fault — a
/// `BadInput`, or an engine or store error the core classifies as the caller's
/// (`Fault::Caller`: no such run, a decision that does not fit, a run held elsewhere…),
/// whichever layer noticed it — else 1.
pub(crate) fn failure(error: &anyhow::Error) -> (u8, String) {
    use stepwright::app::AppError;
    use stepwright::{EngineError, Fault, StoreError};
    if error.is::<BadInput>() {
        return (2, error.to_string());
    }
    // The application layer's mistakes of the caller's (a file that does not load, a binding
    // that does not fit) say what to fix, and nothing else.
    if let Some(app @ (AppError::BadInput(_) | AppError::Load(_) | AppError::UnknownMailbox(_))) =
        error.downcast_ref::<AppError>()
    {
        return (2, app.to_string());
    }
    // A run id that names no run says just that, whichever layer noticed it.
    let missing =
        error.chain().find_map(|cause| match (cause.downcast_ref::<StoreError>(), cause.downcast_ref::<AppError>()) {
            (Some(missing @ StoreError::RunNotFound(_)), _)
            | (_, Some(AppError::Store(missing @ StoreError::RunNotFound(_)))) => Some(missing),
            _ => None,
        });
    if let Some(missing) = missing {
        return (2, format!("stepwright: {missing}"));
    }
    for cause in error.chain() {
        let fault = match (
            cause.downcast_ref::<AppError>(),
            cause.downcast_ref::<EngineError>(),
            cause.downcast_ref::<StoreError>(),
        ) {
            (Some(app), _, _) => Some(app.fault()),
            (None, Some(engine), _) => Some(engine.fault()),
            (None, None, Some(store)) => Some(store.fault()),
            (None, None, None) => None,
        };
        if let Some(fault) = fault {
            let code = if fault == Fault::Caller { 2 } else { 1 };
            return (code, format!("stepwright: {}", said(error)));
        }
    }
    (1, format!("stepwright: {}", said(error)))
}

/// An error and its causes on one line, each said once: a message that already ends with its
/// cause's text (`starting workflow "w": input_validation: …`, whose source is that validation
/// error) does not repeat it, nor does a cause that begins with the message
/// (`starting MCP server "s"` over `starting MCP server "s": running …`).
fn said(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.is_empty() || text.starts_with(&line) {
            // The cause says all the message said, and more.
            line = text;
        } else if !line.ends_with(&text) {
            line = format!("{line}: {text}");
        }
    }
    line
}

/// A resume refused because a live process executes the run: the caller's to know (exit 2).
pub(crate) fn held_elsewhere(error: stepwright::EngineError) -> anyhow::Error {
    match error {
        stepwright::EngineError::Leased { run, owner, until } => anyhow!(BadInput(format!(
            "run {run} is being executed by {owner} (its lease runs until {} UTC unless renewed); \
             it is not taken from a live process — cancel it, or resume it once that process is gone",
            clock_time(until)
        ))),
        other => anyhow!(other),
    }
}

pub(crate) fn exit_code(status: stepwright::api::RunStatus) -> u8 {
    use stepwright::api::RunStatus;
    match status {
        RunStatus::Completed => 0,
        RunStatus::Suspended | RunStatus::Pending => 3,
        _ => 1,
    }
}
