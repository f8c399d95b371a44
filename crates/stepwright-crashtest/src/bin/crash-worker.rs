//! The crash-test worker.
//!
//! `crash-worker run DB RUN SEED LOG LEDGERS`: starts run RUN of the crash-test workflow on
//! SQLite with input `{seed}`, or resumes it; prints the final report as JSON.
//!
//! `crash-worker runner POSTGRES_URL SCHEMA WORKER LOG LEDGERS [CONCURRENCY [STOP_FILE]]`: a
//! runner loop on Postgres (1 s leases, both crash-test workflows registered, 16 runs at once
//! unless told) that exits once no run is left unfinished — and, given a stop file, only
//! once that file exists too (the harness is done adding runs), printing how its appends
//! were group-committed.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use stepwright::SqliteStore;
use stepwright::store::RunFilter;
use stepwright::{Engine, EngineConfig, Runner, StartOptions, Store, StoreError};
use stepwright_crashtest::{Files, mapped_workflow, workflow};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]).await,
        Some("runner") => runner(&args[1..]).await,
        _ => Err(
            "usage: crash-worker run DB RUN SEED LOG LEDGERS | runner URL SCHEMA WORKER LOG LEDGERS [CONCURRENCY [STOP]]"
                .into(),
        ),
    }
}

async fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [db, run, seed, log, ledgers] = args else { return Err("bad arguments".into()) };
    let store = Arc::new(SqliteStore::open(db)?);
    let files = Files { log: PathBuf::from(log), ledgers: PathBuf::from(ledgers) };
    // A restarted worker keeps its identity, so it takes its own runs back at once.
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .service(Arc::new(files))
        .worker_id("crash-worker")
        .build();
    let workflow = workflow();
    let run = run.parse()?;
    let report = match store.load(run).await {
        // Finished already (the previous process was killed after the last commit).
        Ok(loaded) if loaded.record.status.is_terminal() => engine.report(run).await?,
        Ok(_) => engine.resume(&workflow, run).await?,
        Err(StoreError::RunNotFound(_)) => {
            let input = json!(seed.parse::<i64>()?);
            engine.start_with(&workflow, input, StartOptions { run_id: Some(run), ..StartOptions::default() }).await?
        }
        Err(other) => return Err(other.into()),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

async fn runner(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let (Some([url, schema, worker, log, ledgers]), extra) = (args.first_chunk::<5>(), &args[5.min(args.len())..])
    else {
        return Err("bad arguments".into());
    };
    let concurrency: usize = extra.first().map(|c| c.parse()).transpose()?.unwrap_or(16);
    let stop = extra.get(1).map(PathBuf::from);
    let options: sqlx::postgres::PgConnectOptions =
        url.parse::<sqlx::postgres::PgConnectOptions>()?.options([("search_path", schema.as_str())]);
    let store = Arc::new(stepwright::PostgresStore::connect_with(options).await?);
    let files = Files { log: PathBuf::from(log), ledgers: PathBuf::from(ledgers) };
    let config = EngineConfig { lease_for: Duration::from_secs(1), ..EngineConfig::default() };
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .service(Arc::new(files))
        .worker_id(worker)
        .config(config)
        .build();
    let runner = Runner::new(engine)
        .register(&workflow())
        .register(&mapped_workflow())
        .max_concurrent(concurrency)
        .poll_interval(Duration::from_millis(50));
    loop {
        runner.tick().await?;
        let done_adding = stop.as_ref().is_none_or(|stop| stop.exists());
        let unfinished =
            store.list_runs(RunFilter { limit: Some(100_000), headers_only: true, ..RunFilter::default() }).await?;
        if done_adding && unfinished.iter().all(|r| r.status.is_terminal()) {
            // For the harness: how many appends its commits carried.
            let stats = store.group_commit_stats();
            println!("group commit: {} commits, {} appends, largest {}", stats.commits, stats.appends, stats.largest);
            return Ok(());
        }
        store.wait_for_work(Duration::from_millis(50)).await;
    }
}
