//! Two runner processes on one Postgres database, one of them killed with SIGKILL again
//! and again: every run finishes with the output of an uninterrupted run, no step runs again
//! after its completion was committed, and every charge happens exactly once.
#![allow(clippy::print_stderr)] // The test reports its kill count.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPool};
use stepwright_core::journal::RunFilter;
use stepwright_core::{Engine, MemoryStore, Record, RunId, RunStatus, StartOptions, Store, Timestamp};
use stepwright_crashtest::{Files, workflow};
use stepwright_store::PostgresStore;

const RUNS: i64 = 100;

#[tokio::test]
async fn two_workers_one_killed_repeatedly() {
    let Ok(url) = std::env::var("STEPWRIGHT_TEST_DATABASE_URL") else {
        let _ = writeln!(
            std::io::stderr(),
            "skipped two_workers_one_killed_repeatedly: STEPWRIGHT_TEST_DATABASE_URL is not set"
        );
        return;
    };
    let schema = format!("sw_test_{}_{:x}", std::process::id(), stepwright_crashtest::now_micros() * 1000);
    let admin = PgPool::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}"))).execute(&admin).await.unwrap();
    let options: PgConnectOptions =
        url.parse::<PgConnectOptions>().unwrap().options([("search_path", schema.as_str())]);
    let store = Arc::new(PostgresStore::connect_with(options).await.unwrap());

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("exec.log");
    let ledgers = dir.path().join("ledgers");
    std::fs::create_dir_all(&ledgers).unwrap();
    let reference_ledgers = dir.path().join("reference-ledgers");
    std::fs::create_dir_all(&reference_ledgers).unwrap();

    // The runs, created detached; and what an uninterrupted run of each outputs.
    let creator = Engine::builder().store(store.clone() as Arc<dyn Store>).build();
    let reference = Engine::builder()
        .store(Arc::new(MemoryStore::new()) as Arc<dyn Store>)
        .service(Arc::new(Files { log: dir.path().join("reference.log"), ledgers: reference_ledgers }))
        .build();
    let mut expected = HashMap::new();
    for seed in 0..RUNS {
        let run = RunId::from_parts(Timestamp::from_millis(1_700_000_000_000 + seed), [9; 10]);
        creator
            .create(&workflow(), json!(seed), StartOptions { run_id: Some(run), ..Default::default() })
            .await
            .unwrap();
        expected.insert(run, reference.start(&workflow(), json!(seed)).await.unwrap().output.unwrap());
    }

    let worker = env!("CARGO_BIN_EXE_crash-worker");
    let spawn = |name: &str| {
        Command::new(worker)
            .args(["runner", &url, &schema, name, log.to_str().unwrap(), ledgers.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let started = Instant::now();
    let mut steady = spawn("steady");
    let steady_pid = steady.id().to_string();
    let mut kills = 0;
    let mut seed = 0x9e37_79b9_u64;
    let finished = loop {
        if let Some(status) = steady.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "the workers did not finish in two minutes");
        let mut victim = spawn(&format!("victim-{kills}"));
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        tokio::time::sleep(Duration::from_millis(50 + (seed >> 33) % 350)).await;
        if victim.try_wait().unwrap().is_none() {
            victim.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        victim.wait().unwrap();
    };
    assert!(finished.success(), "the steady worker failed: {:?}", steady.wait_with_output().unwrap().stderr);

    let runs = store.list_runs(RunFilter { limit: Some(1_000), ..RunFilter::default() }).await.unwrap();
    assert_eq!(runs.len(), RUNS as usize);
    let executions = std::fs::read_to_string(&log).unwrap();
    let mut reconciled = 0;
    for record in runs {
        let run = record.id;
        assert_eq!(record.status, RunStatus::Completed, "run {run}: {:?}", record.error);
        assert_eq!(
            record.output.as_ref(),
            Some(&expected[&run]),
            "run {run}: output differs from an uninterrupted run"
        );
        let charges = std::fs::read_to_string(ledgers.join(run.to_string())).unwrap_or_default().lines().count();
        assert_eq!(charges, 1, "run {run}: charged {charges} times");
        // No step of this run executed after its completion was committed.
        let loaded = store.load(run).await.unwrap();
        let completed: HashMap<String, i64> = loaded
            .entries
            .iter()
            .filter(|e| matches!(e.record, Record::Completed { .. }))
            .map(|e| (e.path.as_str().to_owned(), e.at.as_micros()))
            .collect();
        for line in executions.lines().filter(|l| l.split(' ').nth(1) == Some(&run.to_string())) {
            let fields: Vec<&str> = line.split(' ').collect();
            let (path, at): (&str, i64) = (fields[2], fields[3].parse().unwrap());
            if let Some(done) = completed.get(path) {
                assert!(at <= done + 5_000, "run {run}: {path} ran at {at}, after its completion at {done}");
            }
            if path == "charge/@fallback" {
                reconciled += 1;
            }
        }
    }
    assert!(kills >= 5, "only {kills} kills happened");
    let by_victims = executions.lines().filter(|l| l.split(' ').next() != Some(steady_pid.as_str())).count();
    assert!(by_victims >= 50, "the killed worker must have held runs: only {by_victims} step executions were its");
    eprintln!(
        "postgres workers: {RUNS} runs, {kills} SIGKILLs of the second worker ({by_victims} step executions in killed processes), {reconciled} reconciled charges, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&admin).await;
}
