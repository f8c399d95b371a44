//! Schedules across processes: every tick of many schedules either started exactly one run
//! or is recorded as skipped with a reason — never both, never neither — while two workers
//! decide them and one is SIGKILLed again and again; on SQLite and on Postgres.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::processes::{Db, stores, text};

fn stepwright(dir: &Path, args: &[&str]) -> std::process::Output {
    crate::support::stepwright(dir, args)
}

/// A worker whose output goes nowhere (it logs a line per run; a full pipe would stop it).
fn worker(dir: &Path, db: &Db) -> Child {
    Command::new(env!("CARGO_BIN_EXE_stepwright"))
        .current_dir(dir)
        .env_remove("STEPWRIGHT_DB")
        .args(db.args(&["worker"]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a worker")
}

fn ok(output: &std::process::Output, what: &str) -> String {
    assert_eq!(output.status.code(), Some(0), "{what}: {}", text(&output.stderr));
    text(&output.stdout)
}

/// `SCHEDULES` schedules ticking every second, run by two workers for `SECONDS` seconds while
/// one of them is killed every few seconds and started again.
const SCHEDULES: usize = 100;
const SECONDS: u64 = 60;

#[test]
fn every_tick_starts_one_run_or_says_why_not_while_workers_are_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = String::from("workflow: ticking\nschedules:\n");
    for i in 0..SCHEDULES {
        file.push_str(&format!(
            "  s{i}: {{ every: 1s, overlap: allow_all, input: {{ at: \"{{{{ tick.at }}}}\" }} }}\n"
        ));
    }
    file.push_str("steps:\n  - id: note\n    set: \"{{ input.at }}\"\n");
    std::fs::write(dir.path().join("ticking.yaml"), file).unwrap();
    for db in stores(dir.path(), "every_tick_starts_one_run") {
        let created = ok(&stepwright(dir.path(), &db.args(&["schedules", "create", "ticking.yaml"])), "create");
        assert_eq!(created.lines().count(), SCHEDULES, "{}: {created}", db.name);
        let mut workers = [worker(dir.path(), &db), worker(dir.path(), &db)];
        let began = Instant::now();
        let mut kills: usize = 0;
        while began.elapsed() < Duration::from_secs(SECONDS) {
            std::thread::sleep(Duration::from_millis(2_500 + 500 * (kills % 3) as u64));
            // SIGKILL: no shutdown, mid-transaction perhaps; then a new process.
            let victim = kills % 2;
            workers[victim].kill().unwrap();
            workers[victim].wait().unwrap();
            workers[victim] = worker(dir.path(), &db);
            kills += 1;
        }
        // Quiet now, so the record is final: every decided tick is in it.
        for worker in &mut workers {
            worker.kill().unwrap();
            worker.wait().unwrap();
        }

        let listed = ok(&stepwright(dir.path(), &db.args(&["schedules", "list", "--json"])), "list");
        let names: Vec<String> = listed
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names.len(), SCHEDULES);
        let mut started_runs = HashSet::new();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut recorded = 0;
        let mut fewest = usize::MAX;
        for name in &names {
            let shown = ok(
                &stepwright(dir.path(), &db.args(&["schedules", "describe", name, "--ticks", "100000", "--json"])),
                "describe",
            );
            let shown: Value = serde_json::from_str(&shown).unwrap();
            let mut ticks: Vec<&Value> = shown["ticks"].as_array().unwrap().iter().collect();
            ticks.reverse();
            // Decided as time went (the workers were killed, never both at once): most of the
            // minute's ticks; exactly-once is what the rest checks.
            assert!(ticks.len() as u64 >= SECONDS * 3 / 4, "{}: {name} ticked {} times", db.name, ticks.len());
            fewest = fewest.min(ticks.len());
            let times: Vec<i64> = ticks
                .iter()
                .map(|t| stepwright::schedule::parse_instant(t["tick"].as_str().unwrap()).unwrap().as_micros())
                .collect();
            // No tick missing between the first and the last, none twice.
            for pair in times.windows(2) {
                assert_eq!(pair[1] - pair[0], 1_000_000, "{}: {name}: a gap or a repeat at {pair:?}", db.name);
            }
            for tick in ticks {
                recorded += 1;
                match (tick.get("started"), tick.get("skipped")) {
                    (Some(run), None) => {
                        assert!(started_runs.insert(run.as_str().unwrap().to_owned()), "{}: run {run} twice", db.name);
                    }
                    (None, Some(reason)) => *reasons.entry(reason.as_str().unwrap().to_owned()).or_default() += 1,
                    _ => panic!("{}: {name}: a tick neither started nor skipped, or both: {tick}", db.name),
                }
            }
        }
        // Every run the store has came from exactly one tick, and every started tick's run
        // exists.
        let runs = ok(&stepwright(dir.path(), &db.args(&["runs", "list", "--json", "--limit", "100000"])), "runs");
        let run_ids: HashSet<String> = runs
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["run_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(run_ids, started_runs, "{}: the runs are exactly the started ticks' runs", db.name);
        // Skips are rare (a tick found more than the catch-up window late) and each says why.
        assert!(reasons.keys().all(|r| r == "outside_catchup_window"), "{}: {reasons:?}", db.name);
        assert!(kills >= 10, "killed {kills} times");
        #[allow(clippy::print_stderr)] // The figures of the run, for the log.
        {
            eprintln!(
                "{}: {recorded} ticks of {SCHEDULES} schedules over {SECONDS}s (the fewest of one: {fewest}), {} runs \
                 started, skipped {reasons:?}, {kills} kills",
                db.name,
                started_runs.len()
            );
        }
    }
}
