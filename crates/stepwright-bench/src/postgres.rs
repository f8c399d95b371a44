//! D8, the Postgres harness: runs of ten trivial steps created in a schema of their own,
//! then executed by N `bench d8-worker` processes (each a `Runner` as `stepwright worker`
//! runs it); reported with steps per second, claim-to-start latency, commits and statements
//! per step, and beside them the floor: what the same database commits as single-row
//! `INSERT` transactions from 1 and more clients, measured in the same run.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::Connection;
use stepwright::{Engine, Record, RunId, RunnerEvent, Store};

use crate::{current_thread, inc_chain};

/// Steps in each run.
const STEPS: usize = 10;

/// What the harness is asked for: `--workers 1,2 --runs 1000 --floor-clients 1,16`.
pub(crate) struct Options {
    pub(crate) workers: Vec<usize>,
    pub(crate) runs: usize,
    pub(crate) floor_clients: Vec<usize>,
}

impl Options {
    pub(crate) fn from_args(args: &[String]) -> Self {
        let list = |name: &str, default: &[usize]| -> Vec<usize> {
            args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map_or_else(
                || default.to_vec(),
                |v| v.split(',').map(|n| n.trim().parse().expect("a number")).collect(),
            )
        };
        Self {
            workers: list("--workers", &[1, 2]),
            runs: list("--runs", &[1_000])[0],
            floor_clients: list("--floor-clients", &[1, 16]),
        }
    }
}

async fn store_in_schema(url: &str, schema: &str) -> Arc<stepwright::PostgresStore> {
    let options: sqlx::postgres::PgConnectOptions =
        url.parse::<sqlx::postgres::PgConnectOptions>().expect("url").options([("search_path", schema)]);
    Arc::new(stepwright::PostgresStore::connect_with(options).await.expect("connect"))
}

/// An empty schema of the given name (dropped first if a previous run left it), an admin
/// pool to drop it with afterwards, and a store in it.
async fn fresh_schema(url: &str, schema: &str) -> (sqlx::PgPool, Arc<stepwright::PostgresStore>) {
    let admin = sqlx::PgPool::connect(url).await.expect("connect");
    for sql in [format!("DROP SCHEMA IF EXISTS {schema} CASCADE"), format!("CREATE SCHEMA {schema}")] {
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&admin).await.expect("schema");
    }
    (admin, store_in_schema(url, schema).await)
}

fn wall_micros() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock");
    i64::try_from(now.as_micros()).expect("micros")
}

/// `bench d8-worker URL SCHEMA NAME`: a runner until no run is left unfinished; prints
/// `claimed RUN MICROS` for each claim, and how its appends were group-committed.
pub(crate) fn d8_worker(url: &str, schema: &str, name: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let store = store_in_schema(url, schema).await;
        let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).worker_id(name).build();
        let claims: Arc<Mutex<Vec<(RunId, i64)>>> = Arc::default();
        let log: stepwright::RunnerLog = Arc::new({
            let claims = claims.clone();
            move |event| {
                if let RunnerEvent::Claimed { run } = event {
                    claims.lock().expect("poisoned").push((run, wall_micros()));
                }
            }
        });
        let runner = stepwright::Runner::new(engine)
            .register(&inc_chain("d8", STEPS))
            .max_concurrent(256)
            .poll_interval(Duration::from_millis(100))
            .log_to(log);
        let stop = stepwright::CancellationToken::new();
        let watcher = {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                // Done when no run waits or runs: one look every 50 ms. `EXISTS` stops at the
                // first open run (through the partial index of open runs); a `count(*)` per
                // worker every 50 ms took ~6% of the database's CPU with 8 workers on 16 cores.
                loop {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let open: bool = sqlx::query_scalar(
                        "SELECT EXISTS (SELECT 1 FROM stepwright_runs WHERE status IN ('pending', 'running'))",
                    )
                    .fetch_one(store.pool())
                    .await
                    .expect("look");
                    if !open {
                        stop.cancel();
                        return;
                    }
                }
            })
        };
        runner.run(stop).await.expect("runner");
        watcher.await.expect("watcher");
        let mut out = std::io::stdout().lock();
        for (run, at) in claims.lock().expect("poisoned").iter() {
            writeln!(out, "claimed {run} {at}").expect("stdout");
        }
        let stats = store.group_commit_stats();
        writeln!(out, "commits {} {} {}", stats.commits, stats.appends, stats.largest).expect("stdout");
    });
}

/// One D8 measurement.
pub(crate) struct D8 {
    pub(crate) workers: usize,
    pub(crate) runs: usize,
    pub(crate) wall_ms: f64,
    pub(crate) steps_per_second: f64,
    pub(crate) claim_to_start_p50_ms: f64,
    pub(crate) claim_to_start_p99_ms: f64,
    pub(crate) commits_per_step: f64,
    pub(crate) statements_per_step: Option<f64>,
    /// Appends per group commit, and the largest commit (all workers).
    pub(crate) appends_per_commit: f64,
    pub(crate) largest_commit: u64,
}

/// The database's commit and statement counters (statements only with
/// `pg_stat_statements` loaded).
async fn counters(admin: &sqlx::PgPool) -> (i64, Option<i64>) {
    // Stats are read from a snapshot per transaction; a fresh one sees the exited workers'.
    let _ = sqlx::query("SELECT pg_stat_clear_snapshot()").execute(admin).await;
    let commits: i64 =
        sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
            .fetch_one(admin)
            .await
            .expect("pg_stat_database");
    let statements: Option<i64> = sqlx::query_scalar(
        "SELECT sum(calls)::bigint FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(admin)
    .await
    .ok()
    .flatten();
    (commits, statements)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Runs `runs` runs on `workers` worker processes.
pub(crate) fn d8(url: &str, workers: usize, runs: usize) -> D8 {
    let schema = format!("sw_bench_{}_{workers}", std::process::id());
    let rt = current_thread();
    let admin = rt.block_on(async {
        let (admin, store) = fresh_schema(url, &schema).await;
        let engine = Engine::builder().store(store as Arc<dyn Store>).build();
        let workflow = inc_chain("d8", STEPS);
        for _ in 0..runs {
            engine.create(&workflow, json!(0), Default::default()).await.expect("create");
        }
        admin
    });
    // Let the creating connections' counters reach the statistics first.
    std::thread::sleep(Duration::from_millis(1_200));
    let before = rt.block_on(counters(&admin));
    let exe = std::env::current_exe().expect("exe");
    let start = Instant::now();
    let children: Vec<_> = (0..workers)
        .map(|i| {
            Command::new(&exe)
                .args(["d8-worker", url, &schema, &format!("w{i}")])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let outputs: Vec<String> = children
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("wait");
            assert!(output.status.success(), "a worker failed");
            String::from_utf8(output.stdout).expect("utf-8")
        })
        .collect();
    let wall = start.elapsed().as_secs_f64();
    // A backend reports its counters when it exits, at most a second later.
    std::thread::sleep(Duration::from_millis(1_200));
    let after = rt.block_on(counters(&admin));
    let steps = (runs * STEPS) as f64;

    let mut claimed: HashMap<RunId, i64> = HashMap::new();
    let (mut commits, mut appends, mut largest) = (0_u64, 0_u64, 0_u64);
    for line in outputs.iter().flat_map(|o| o.lines()) {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["claimed", run, at] => {
                claimed.insert(run.parse().expect("run id"), at.parse().expect("micros"));
            }
            ["commits", c, a, l] => {
                commits += c.parse::<u64>().expect("count");
                appends += a.parse::<u64>().expect("count");
                largest = largest.max(l.parse().expect("count"));
            }
            _ => {}
        }
    }
    let mut latencies = rt.block_on(async {
        let store = store_in_schema(url, &schema).await;
        let done: i64 = sqlx::query_scalar("SELECT count(*) FROM stepwright_runs WHERE status = 'completed'")
            .fetch_one(store.pool())
            .await
            .expect("count");
        assert_eq!(done, i64::try_from(runs).expect("runs"), "every run completed");
        let mut latencies = Vec::with_capacity(claimed.len());
        for (run, at) in &claimed {
            let loaded = store.load(*run).await.expect("load");
            let started = loaded.entries.first().map(|first| match &first.record {
                Record::Completed { started_at: Some(started), .. } => started.as_micros(),
                _ => first.at.as_micros(),
            });
            if let Some(started) = started {
                latencies.push((started - at) as f64 / 1e3);
            }
        }
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&admin).await;
        latencies
    });
    latencies.sort_by(f64::total_cmp);
    D8 {
        workers,
        runs,
        wall_ms: wall * 1e3,
        steps_per_second: steps / wall,
        claim_to_start_p50_ms: percentile(&latencies, 0.5),
        claim_to_start_p99_ms: percentile(&latencies, 0.99),
        commits_per_step: (after.0 - before.0) as f64 / steps,
        statements_per_step: after.1.zip(before.1).map(|(a, b)| (a - b) as f64 / steps),
        appends_per_commit: appends as f64 / commits.max(1) as f64,
        largest_commit: largest,
    }
}

/// The floor: `clients` connections each committing single-row `INSERT`s (as pgbench's
/// simplest custom script does) for `seconds`; transactions per second.
pub(crate) fn floor(url: &str, clients: usize, seconds: f64) -> f64 {
    let table = format!("sw_bench_floor_{}", std::process::id());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let admin = sqlx::PgPool::connect(url).await.expect("connect");
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}"))).execute(&admin).await.expect("drop");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, v BIGINT NOT NULL)")))
            .execute(&admin)
            .await
            .expect("create");
        let until = Instant::now() + Duration::from_secs_f64(seconds);
        let tasks: Vec<_> = (0..clients)
            .map(|client| {
                let (url, insert) = (url.to_owned(), format!("INSERT INTO {table} (v) VALUES ($1)"));
                tokio::spawn(async move {
                    let mut connection = sqlx::PgConnection::connect(&url).await.expect("connect");
                    let mut done = 0_u64;
                    while Instant::now() < until {
                        sqlx::query(sqlx::AssertSqlSafe(insert.as_str()))
                            .bind(client as i64)
                            .execute(&mut connection)
                            .await
                            .expect("insert");
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        let mut total = 0;
        for task in tasks {
            total += task.await.expect("client");
        }
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}"))).execute(&admin).await;
        total as f64 / seconds
    })
}

/// W3 on Postgres: `concurrent` runs started at once in one process, each 10 steps awaiting a
/// 10 ms timer, journaled in a schema of their own; wall time in ms.
pub(crate) fn w3_on_postgres(url: &str, concurrent: usize) -> f64 {
    let schema = format!("sw_bench_w3_{}", std::process::id());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let (admin, store) = fresh_schema(url, &schema).await;
        let engine = Engine::builder().store(store as Arc<dyn Store>).build();
        let workflow = crate::chain("w3pg", STEPS, |id| stepwright::Node::step(id, crate::Tick));
        let start = Instant::now();
        let handles: Vec<_> = (0..concurrent)
            .map(|_| {
                let (engine, workflow) = (engine.clone(), workflow.clone());
                tokio::spawn(async move { engine.start(&workflow, json!(0)).await })
            })
            .collect();
        for handle in handles {
            let report = handle.await.expect("join").expect("run");
            assert_eq!(report.output, Some(json!(10)));
        }
        let wall = start.elapsed().as_secs_f64() * 1e3;
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE"))).execute(&admin).await;
        wall
    })
}

/// A Postgres store in a fresh schema of its own, for S1 (made on the caller's runtime).
pub(crate) async fn s1_store(url: &str) -> Arc<stepwright::PostgresStore> {
    fresh_schema(url, "stepwright_bench_s1").await.1
}

/// A fresh schema for E1.
pub(crate) async fn e1_store(url: &str) -> Arc<stepwright::PostgresStore> {
    fresh_schema(url, "stepwright_bench_e1").await.1
}
