//! `worker`: executes due runs from the store until Ctrl-C (or once).

use crate::commands::Globals;
use crate::host::{engine_over, open_store};
use crate::render::worker_log;

/// `worker`: claims due runs, executes them, and logs what it does.
pub(crate) async fn worker(g: &Globals<'_>, once: bool, tenant: Option<String>) -> anyhow::Result<u8> {
    let flags = g.flags;
    let store = open_store(g.db).await?;
    let engine = engine_over(&store)
        .worker_id(&stepwright::local_worker_id("worker", &stepwright::SystemEntropy::new()))
        .config(flags.engine_config())
        .build();
    let resolver = stepwright::app::resolver(store.clone(), flags.bindings());
    // Every worker also starts the runs of due schedules: each tick once, whichever
    // process decides it first.
    let scheduler = stepwright::app::scheduler(engine.clone(), store, flags.bindings());
    let print = worker_log(g.json_logs, engine.worker_id().to_owned());
    let log: stepwright::RunnerLog = match stepwright::telemetry::metrics() {
        Some(metrics) => std::sync::Arc::new(move |event| {
            metrics.runner_event(&event);
            print(event);
        }),
        None => print,
    };
    let mut runner = stepwright::Runner::new(engine).resolve_with(resolver).log_to(log);
    if let Some(tenant) = &tenant {
        runner = runner.only_tenant(tenant);
    }
    if once {
        scheduler.pass().await?;
        runner.tick().await?;
        return Ok(0);
    }
    let stop = stepwright::CancellationToken::new();
    let signal = stop.clone();
    tokio::spawn(async move {
        crate::commands::serve::shutdown_signal().await;
        signal.cancel();
    });
    let scheduling = tokio::spawn({
        let stop = stop.clone();
        async move { scheduler.run(stop).await }
    });
    runner.run(stop).await?;
    let _ = scheduling.await;
    Ok(130)
}
