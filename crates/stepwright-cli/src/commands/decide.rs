//! `approve`, `reject`, `respond` and `cancel`: decisions on a run, wherever it executes.

use serde_json::json;
use stepwright::app::{Decided, Mail};
use stepwright::{Decision, Engine, RunId, RunStatus};

use crate::args::{Decider, ModelFlags};
use crate::commands::Globals;
use crate::host::{check_tenant, cli_engine, engine_over, open_store, parse_json, parse_run};
use crate::render::print_report;

/// Resolves an interrupt (the only open one unless `--interrupt`), then continues the run.
pub(crate) async fn decide(
    db: Option<&str>,
    flags: &ModelFlags,
    run: &str,
    who: &Decider,
    decision: Decision,
    json: bool,
) -> anyhow::Result<u8> {
    settle(db, flags, run, who, Some(decision), json).await
}

/// Takes `decision` (a wake of a timer: `None`) as `who`, then continues the run.
async fn settle(
    db: Option<&str>,
    flags: &ModelFlags,
    run: &str,
    who: &Decider,
    decision: Option<Decision>,
    json: bool,
) -> anyhow::Result<u8> {
    let run = parse_run(run)?;
    let store = open_store(db).await?;
    let engine = cli_engine(&store, !json, flags);
    let report = engine.report(run).await?;
    let shown = stepwright::app::details_of_report(&report, "");
    let interrupt = match decision {
        Some(_) => stepwright::app::only_interrupt(&shown, who.interrupt.as_deref())?,
        None => stepwright::app::only_timer(&shown, who.interrupt.as_deref())?,
    };
    check_tenant(store.as_ref(), run, who.tenant.as_deref()).await?;
    let caller = stepwright::Caller {
        tenant: who.tenant.clone(),
        user: who.user.clone(),
        roles: who.roles.clone(),
        ..Default::default()
    };
    // A decision that does not fit is the caller's fault: `exit::failure` says so (exit 2).
    let bindings = flags.bindings().sharing_limits_in(store.clone());
    let decided = match decision {
        Some(decision) => {
            stepwright::app::decide_then_continue(&engine, &bindings, run, &interrupt, decision, &caller).await?
        }
        None => stepwright::app::wake_then_continue(&engine, &bindings, run, &interrupt, &caller).await?,
    };
    match decided {
        Decided::Continued(report) => Ok(print_report(&report, json)),
        // The run waits on this interrupt in a live process, which continues it now.
        Decided::ContinuesIn { owner } => {
            if json {
                println!(
                    "{}",
                    json!({ "run_id": run, "status": "running", "decided": interrupt, "executed_by": owner })
                );
            } else {
                eprintln!("decided {interrupt}; run {run} goes on in {owner}, which was waiting for it");
            }
            Ok(0)
        }
        // The process waiting on this interrupt saw the decision and finished the run before
        // this one looked: the decision was taken; say how the run ended.
        Decided::FinishedElsewhere(report) => {
            if !json {
                eprintln!(
                    "decided {interrupt}; run {run} was continued by the process waiting for it and is {}",
                    report.status.as_str()
                );
            }
            Ok(print_report(&report, json))
        }
    }
}

/// `cancel`: asks, then (for a run another process executes) waits until it has stopped.
pub(crate) async fn cancel(
    engine: &Engine,
    run: RunId,
    reason: &str,
    user: Option<&str>,
    wait: std::time::Duration,
) -> anyhow::Result<u8> {
    use stepwright::CancelOutcome;
    match engine.cancel_by(run, reason, user).await? {
        CancelOutcome::Finished(status) => {
            eprintln!("run {run} had already finished: {}", status.as_str());
            Ok(if status == RunStatus::Cancelled { 0 } else { 1 })
        }
        CancelOutcome::Cancelled => {
            println!("cancelled");
            Ok(0)
        }
        CancelOutcome::Requested { owner, .. } => {
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let status = engine.report(run).await?.status;
                if status.is_terminal() {
                    if status == RunStatus::Cancelled {
                        println!("cancelled");
                        return Ok(0);
                    }
                    eprintln!("run {run} {} before the cancel reached it", status.as_str());
                    return Ok(1);
                }
                if tokio::time::Instant::now() >= deadline {
                    eprintln!("cancel of run {run} asked; {owner} executes it and has not stopped it yet");
                    return Ok(0);
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// `approve`: approves (or, with `--payload`, modifies) the open interrupt, then continues.
pub(crate) async fn approve(
    g: &Globals<'_>,
    run: String,
    who: Decider,
    payload: Option<String>,
    json: bool,
) -> anyhow::Result<u8> {
    let flags = g.flags;
    let decision = match payload {
        Some(payload) => Decision::Modify { payload: parse_json(&payload, "--payload")? },
        None => Decision::Approve,
    };
    decide(g.db, flags, &run, &who, decision, json).await
}

/// `reject`: rejects the open interrupt, then continues.
pub(crate) async fn reject(
    g: &Globals<'_>,
    run: String,
    who: Decider,
    reason: Option<String>,
    json: bool,
) -> anyhow::Result<u8> {
    let flags = g.flags;
    decide(g.db, flags, &run, &who, Decision::Reject { reason }, json).await
}

/// `respond`: answers the open input request, then continues.
pub(crate) async fn respond(
    g: &Globals<'_>,
    run: String,
    who: Decider,
    value: String,
    json: bool,
) -> anyhow::Result<u8> {
    let flags = g.flags;
    let value = parse_json(&value, "--value")?;
    decide(g.db, flags, &run, &who, Decision::Respond { value }, json).await
}

/// `cancel`: asks the run to stop, wherever it executes.
/// What `send` and `wake` store for a run.
pub(crate) enum Message {
    /// A message for a loop's inbox (JSON text, as given).
    Inbox { inbox: String, message: String },
    /// A wake-up for an `every`'s channel.
    Wake { channel: String },
}

/// `wake --timer`: a durable timer goes off now, and the run continues here.
pub(crate) async fn wake_timer(g: &Globals<'_>, run: String, timer: Option<String>, json: bool) -> anyhow::Result<u8> {
    let who = Decider { interrupt: timer, ..Decider::default() };
    settle(g.db, g.flags, &run, &who, None, json).await
}

/// `send` and `wake`: stores the message (or wake-up) for a run that exists; the process
/// executing the run, wherever it is, takes it.
pub(crate) async fn message(g: &Globals<'_>, run: String, message: Message) -> anyhow::Result<u8> {
    let run = parse_run(&run)?;
    let mail = match message {
        Message::Inbox { inbox, message } => Mail::Inbox { inbox, message: parse_json(&message, "--message")? },
        Message::Wake { channel } => Mail::Wake { channel },
    };
    let store = open_store(g.db).await?;
    let engine = engine_over(&store).build();
    let said = match &mail {
        Mail::Inbox { inbox, .. } => format!("sent to inbox {inbox} of run {run}"),
        Mail::Wake { channel } => format!("woke channel {channel} of run {run}"),
    };
    stepwright::app::send_mail(&engine, &g.flags.bindings(), run, mail).await?;
    println!("{said}");
    Ok(0)
}

pub(crate) async fn cancel_run(
    g: &Globals<'_>,
    run: String,
    reason: String,
    user: Option<String>,
    wait: std::time::Duration,
) -> anyhow::Result<u8> {
    let run = parse_run(&run)?;
    let store = open_store(g.db).await?;
    let engine = engine_over(&store).build();
    cancel(&engine, run, &reason, user.as_deref(), wait).await
}
