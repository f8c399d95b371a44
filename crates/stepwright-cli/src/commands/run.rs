//! `run` and `resume`: execute a workflow here, from its file or from the store.

use std::path::PathBuf;

use serde_json::json;

use crate::args::Identity;
use crate::commands::Globals;
use crate::exit::held_elsewhere;
use crate::host::{Servers, check_tenant, cli_engine, definition_of, keep_source, open_store, parse_input, parse_run};
use crate::render::print_report;

/// `run --priority` and `--concurrency`: how the run waits its turn.
pub(crate) struct StartFlags {
    pub(crate) priority: Option<i32>,
    pub(crate) concurrency: Option<stepwright::Concurrency>,
    pub(crate) traceparent: Option<stepwright::trace::TraceParent>,
    /// `run --idempotency-key`.
    pub(crate) idempotency_key: Option<String>,
    /// `run --tag`.
    pub(crate) tags: Vec<String>,
}

/// `run`: starts a run of a file (or, with `--detach`, creates it for a worker).
pub(crate) async fn run(
    g: &Globals<'_>,
    file: PathBuf,
    input: Option<String>,
    json: bool,
    detach: bool,
    flow: StartFlags,
    who: Identity,
) -> anyhow::Result<u8> {
    let flags = g.flags;
    // The file is checked before the store is opened (a bad file creates no database).
    let loaded = stepwright::flow::load_with(&file, &flags.bindings().load_options())
        .map_err(stepwright::app::AppError::Load)?;
    let input = parse_input(input.as_deref())?;
    let store = open_store(g.db).await?;
    // Its models' rate limits are counted in the store, shared with every worker on it.
    let bindings = flags.bindings().sharing_limits_in(store.clone());
    let called = loaded.called_files.clone();
    let workflow = stepwright::app::prepare(loaded, &bindings, Servers::Connected).await?;
    keep_source(&store, &workflow, &file, called).await?;
    let engine = cli_engine(&store, !json, flags);
    let mut options = stepwright::StartOptions {
        caller: who.caller(),
        priority: flow.priority,
        concurrency: flow.concurrency,
        traceparent: flow.traceparent,
        tags: flow.tags.clone(),
        ..Default::default()
    };
    if let Some(key) = &flow.idempotency_key {
        // Refused input claims no key: the same command fixed is a first one.
        stepwright::Engine::check_input(&workflow, &input)?;
        let now = crate::time::wall_now();
        let run = stepwright::RunId::from_parts(now, stepwright::Entropy::bytes10(&stepwright::SystemEntropy::new()));
        let namespace = who.tenant.as_deref().unwrap_or_default();
        match stepwright::app::claim_start(store.as_ref(), namespace, key, run, now).await? {
            stepwright::app::IdempotentStart::Fresh => options.run_id = Some(run),
            stepwright::app::IdempotentStart::First(first) => {
                eprintln!("stepwright: idempotency key {key:?} named run {first} already; nothing new was started");
                let report = engine.report(first).await?;
                if detach {
                    println!(
                        "{}",
                        if json {
                            json!({ "run_id": first, "status": report.status }).to_string()
                        } else {
                            first.to_string()
                        }
                    );
                    return Ok(0);
                }
                return Ok(print_report(&report, json));
            }
            stepwright::app::IdempotentStart::Starting(first) => {
                return Err(anyhow::anyhow!(
                    "a start with idempotency key {key:?} is creating run {first} right now; ask again shortly"
                ));
            }
        }
    }
    if detach {
        let record = engine.create(&workflow, input, options).await?;
        println!(
            "{}",
            if json {
                json!({ "run_id": record.id, "status": record.status }).to_string()
            } else {
                record.id.to_string()
            }
        );
        return Ok(0);
    }
    let run = engine.start_with(&workflow, input, options);
    tokio::pin!(run);
    let report = tokio::select! {
        report = &mut run => report?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("stepwright: interrupted; the run stays resumable");
            return Ok(130);
        }
    };
    Ok(print_report(&report, json))
}

/// `resume`: continues a run that nobody executes, from its stored definition.
pub(crate) async fn resume(g: &Globals<'_>, run: String, json: bool, tenant: Option<String>) -> anyhow::Result<u8> {
    let flags = g.flags;
    let run = parse_run(&run)?;
    let store = open_store(g.db).await?;
    let engine = cli_engine(&store, !json, flags);
    let report = engine.report(run).await?;
    check_tenant(store.as_ref(), run, tenant.as_deref()).await?;
    if report.status.is_terminal() {
        // Nothing to continue: say how it ended, as `run` did.
        return Ok(print_report(&report, json));
    }
    let workflow = definition_of(&store, run, flags).await?;
    let report = engine.resume(&workflow, run).await.map_err(held_elsewhere)?;
    Ok(print_report(&report, json))
}
