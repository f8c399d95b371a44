//! `worker`: executes due runs from the store until Ctrl-C (or once).

use std::sync::Arc;

use crate::commands::Globals;
use crate::host::{definition_of, engine_over, open_store};
use crate::render::worker_log;

/// `worker`: claims due runs, executes them, and logs what it does.
pub(crate) async fn worker(
    g: &Globals<'_>,
    once: bool,
    log_format: crate::args::LogFormat,
    tenant: Option<String>,
) -> anyhow::Result<u8> {
    let flags = g.flags;
    let store = open_store(g.db).await?;
    let engine = engine_over(&store)
        .worker_id(&stepwright_core::local_worker_id("worker", &stepwright_core::SystemEntropy::new()))
        .build();
    let worker_flags = flags.clone();
    let resolver: stepwright_core::DefinitionResolver = Arc::new(move |record| {
        let (store, flags) = (store.clone(), worker_flags.clone());
        // Why a definition cannot be built (its source is gone, an MCP server will not start)
        // goes to the worker's log with the run, instead of the run being skipped silently.
        Box::pin(async move { definition_of(&store, record.id, &flags).await.map_err(|e| format!("{e:#}")) })
    });
    let log = worker_log(log_format == crate::args::LogFormat::Json, engine.worker_id().to_owned());
    let mut runner = stepwright_core::Runner::new(engine).resolve_with(resolver).log_to(log);
    if let Some(tenant) = &tenant {
        runner = runner.only_tenant(tenant);
    }
    if once {
        runner.tick().await?;
        return Ok(0);
    }
    let stop = stepwright_core::CancellationToken::new();
    let signal = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        signal.cancel();
    });
    runner.run(stop).await?;
    Ok(130)
}
