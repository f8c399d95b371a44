//! Kill a worker process with SIGKILL at random points, resume, and check: the same output
//! as an uninterrupted run, no step whose completion was committed ran again, and the
//! write step's effect happened exactly once.

#![allow(clippy::print_stderr)] // The test reports its kill count.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepwright::{Engine, InMemoryStore, RunId, Store, Timestamp};
use stepwright_crashtest::{Files, workflow};
use support::completed_paths;

const RUNS: u64 = 100;
const MIN_KILLS: usize = 200;

/// A tiny deterministic generator, so a failing kill schedule can be replayed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// The paths a process ran for a run, from the execution log.
fn executed_by(log: &Path, pid: u32, run: RunId) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (pid, run) = (pid.to_string(), run.to_string());
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let (p, r, path) = (parts.next()?, parts.next()?, parts.next()?);
            (p == pid && r == run).then(|| path.to_owned())
        })
        .collect()
}

async fn reference_output(seed: i64, dir: &Path) -> Value {
    let ledgers = dir.join("reference-ledgers");
    std::fs::create_dir_all(&ledgers).unwrap();
    let files = Files { log: dir.join("reference.log"), ledgers };
    let engine =
        Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).service(Arc::new(files)).build();
    let report = engine.start(&workflow(), json!(seed)).await.unwrap();
    report.output.expect("the reference run completes")
}

#[tokio::test]
async fn sigkill_at_random_points_then_resume() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let log = dir.path().join("exec.log");
    let worker = env!("CARGO_BIN_EXE_crash-worker");
    let mut random = Lcg(0x5eed);
    let mut kills = 0;
    let mut outcome_unknown_runs = 0;
    let started = Instant::now();
    for index in 0..RUNS {
        let seed = i64::try_from(index).unwrap();
        let run = RunId::from_parts(Timestamp::from_millis(1_700_000_000_000 + seed), [7; 10]);
        let ledgers = dir.path().join("ledgers");
        std::fs::create_dir_all(&ledgers).unwrap();
        let ledger = ledgers.join(run.to_string());
        let expected = reference_output(seed, dir.path()).await;
        let mut kills_this_run = 0;
        let output = loop {
            let committed = completed_paths(&db, run);
            let mut child = Command::new(worker)
                .args([
                    "run",
                    db.to_str().unwrap(),
                    &run.to_string(),
                    &seed.to_string(),
                    log.to_str().unwrap(),
                    ledgers.to_str().unwrap(),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let pid = child.id();
            let mut killed = false;
            if kills_this_run < 4 {
                // A run takes ~40 ms of work after process start (FULL fsyncs included).
                tokio::time::sleep(Duration::from_millis(random.next(35) + 1)).await;
                if child.try_wait().unwrap().is_none() {
                    child.kill().unwrap(); // SIGKILL
                    killed = true;
                }
            }
            let finished = child.wait_with_output().unwrap();
            for path in executed_by(&log, pid, run) {
                assert!(
                    !committed.contains(&path),
                    "run {index}: {path} ran again in process {pid} after its completion was committed"
                );
            }
            if killed {
                kills += 1;
                kills_this_run += 1;
                continue;
            }
            assert!(
                finished.status.success(),
                "run {index}: worker failed: {}",
                String::from_utf8_lossy(&finished.stderr)
            );
            let report: Value = serde_json::from_slice(&finished.stdout).unwrap();
            break report;
        };
        assert_eq!(output["status"], "completed", "run {index}: {output}");
        assert_eq!(output["output"], expected, "run {index}: resumed output differs from an uninterrupted run");
        let charges = std::fs::read_to_string(&ledger).unwrap_or_default().lines().count();
        assert_eq!(charges, 1, "run {index}: the write step's effect happened {charges} times");
        // The charge either completed once, or ended outcome_unknown and was reconciled.
        let entries = std::fs::read_to_string(&log).unwrap_or_default();
        let on_path = |line: &str, path: &str| line.split(' ').nth(2) == Some(path);
        let charged = entries.lines().filter(|l| l.contains(&run.to_string()) && on_path(l, "charge")).count();
        let reconciled = entries.lines().any(|l| l.contains(&run.to_string()) && on_path(l, "charge/@fallback"));
        assert!(charged <= 1 || reconciled, "run {index}: charge ran {charged} times without reconciling");
        if reconciled {
            outcome_unknown_runs += 1;
        }
    }
    assert!(kills >= MIN_KILLS, "only {kills} kills happened; the test needs at least {MIN_KILLS}");
    eprintln!(
        "crash test: {RUNS} runs, {kills} SIGKILLs, {outcome_unknown_runs} runs reconciled after outcome_unknown, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
