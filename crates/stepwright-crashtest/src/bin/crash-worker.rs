//! `crash-worker DB RUN SEED LOG LEDGER`: starts run RUN of the crash-test workflow with
//! input `{seed}`, or resumes it if the store has it; prints the final report as JSON.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use stepwright_core::{Engine, StartOptions, Store, StoreError};
use stepwright_crashtest::{Files, workflow};
use stepwright_store::SqliteStore;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, run, seed, log, ledger] = args.as_slice() else {
        return Err("usage: crash-worker DB RUN SEED LOG LEDGER".into());
    };
    let store = Arc::new(SqliteStore::open(db)?);
    let files = Files { log: PathBuf::from(log), ledger: PathBuf::from(ledger) };
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
