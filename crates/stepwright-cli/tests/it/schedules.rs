//! Schedules across processes: every tick of many schedules either started exactly one run
//! or is recorded as skipped with a reason — never both, never neither — while two workers
//! decide them and one is SIGKILLed again and again; on SQLite and on Postgres.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::processes::{Db, stores, text};

fn stepwright(dir: &Path, args: &[&str]) -> std::process::Output {
    crate::support::stepwright(dir, args)
}

/// A worker whose output goes nowhere (it logs a line per run; a full pipe would stop it).
pub(crate) fn worker(dir: &Path, db: &Db) -> Child {
    Command::new(env!("CARGO_BIN_EXE_stepwright"))
        .current_dir(dir)
        .env_remove("STEPWRIGHT_DB")
        .args(db.args(&["worker"]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a worker")
}

pub(crate) fn ok(output: &std::process::Output, what: &str) -> String {
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

/// Every `schedules` subcommand and option, against a store: `create --only --paused
/// --tenant`, `list` (table and JSON), `describe --next --ticks`, `pause`, `resume`,
/// `trigger`, `backfill --from --to --rate`, `delete`; a worker started between them.
#[test]
fn the_schedules_commands_do_what_they_say() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("commands.db").display());
    std::fs::write(
        dir.path().join("digest.yaml"),
        "workflow: digest\nschedules:\n  fast: { every: 1s, overlap: allow_all, catchup_window: 1s }\n  morning: { cron: \"0 7 * * 1-5\", timezone: Europe/Berlin }\nsteps:\n  - id: a\n    set: 1\n",
    )
    .unwrap();
    let run = |args: &[&str]| stepwright(dir.path(), &[&["--db", db.as_str()][..], args].concat());
    let json_lines = |output: &std::process::Output| -> Vec<Value> {
        text(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };

    // --only and --paused; an unknown --only is refused.
    let refused = run(&["schedules", "create", "digest.yaml", "--only", "hourly"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("it has: fast, morning"), "{}", text(&refused.stderr));
    let created = run(&["schedules", "create", "digest.yaml", "--only", "morning", "--paused", "--json"]);
    let created = json_lines(&created);
    assert_eq!(created.len(), 1);
    assert_eq!((&created[0]["name"], &created[0]["paused"]), (&json!("digest/morning"), &json!(true)));
    // --tenant: the same names in another tenant are other schedules.
    ok(&run(&["schedules", "create", "digest.yaml", "--tenant", "acme"]), "create in acme");
    let acme = json_lines(&run(&["schedules", "list", "--tenant", "acme", "--json"]));
    assert_eq!(acme.iter().map(|s| s["name"].as_str().unwrap()).collect::<Vec<_>>(), ["digest/fast", "digest/morning"]);
    assert!(acme.iter().all(|s| s["tenant"] == "acme"));
    assert_eq!(json_lines(&run(&["schedules", "list", "--json"])).len(), 3, "every tenant's without --tenant");
    let table = ok(&run(&["schedules", "list"]), "list");
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("digest/morning")
            && table.contains("cron 0 7 * * 1-5 Europe/Berlin")
            && table.contains("paused"),
        "{table}"
    );

    // describe: --next fires in the zone, on weekdays at 07:00.
    let shown: Value = serde_json::from_str(&ok(
        &run(&["schedules", "describe", "digest/morning", "--next", "3", "--json"]),
        "describe",
    ))
    .unwrap();
    let fires = shown["next_fires"].as_array().unwrap();
    assert_eq!(fires.len(), 3);
    assert!(fires.iter().all(|f| f["local"].as_str().unwrap().contains("T07:00:00+0")), "{shown}");
    let human = ok(&run(&["schedules", "describe", "digest/morning"]), "describe");
    assert!(human.contains("next fires:") && human.contains("(paused)"), "{human}");
    let missing = run(&["schedules", "describe", "digest/evening"]);
    assert_eq!(missing.status.code(), Some(2));

    // resume and pause say what changed.
    let resumed = run(&["schedules", "resume", "digest/morning"]);
    assert!(text(&resumed.stderr).contains("resumed"), "{}", text(&resumed.stderr));
    let again = run(&["schedules", "resume", "digest/morning"]);
    assert!(text(&again.stderr).contains("was not paused"), "{}", text(&again.stderr));
    let paused = run(&["schedules", "pause", "digest/morning"]);
    assert!(text(&paused.stderr).contains("paused"));

    // trigger: a run now, recorded as a tick.
    let triggered: Value =
        serde_json::from_str(&ok(&run(&["schedules", "trigger", "digest/morning", "--json"]), "trigger")).unwrap();
    let shown: Value = serde_json::from_str(&ok(
        &run(&["schedules", "describe", "digest/morning", "--ticks", "1", "--json"]),
        "describe",
    ))
    .unwrap();
    assert_eq!(shown["ticks"][0]["started"], triggered["run_id"]);

    // The fast schedule in acme, with no worker for three seconds and a one-second catch-up
    // window: a worker records the late ticks as skipped; a backfill starts them, at the rate.
    std::thread::sleep(Duration::from_secs(3));
    ok(&run(&["worker", "--once"]), "worker");
    let shown: Value = serde_json::from_str(&ok(
        &run(&["schedules", "describe", "digest/fast", "--tenant", "acme", "--ticks", "100", "--json"]),
        "describe",
    ))
    .unwrap();
    let ticks = shown["ticks"].as_array().unwrap();
    let skipped: Vec<&Value> = ticks.iter().filter(|t| t["skipped"] == "outside_catchup_window").collect();
    assert!(!skipped.is_empty(), "{shown}");
    let oldest = ticks.last().unwrap()["tick"].as_str().unwrap();
    let newest = ticks[0]["tick"].as_str().unwrap();
    let from = stepwright::schedule::parse_instant(oldest).unwrap().as_micros() - 1;
    let from = chrono::DateTime::<chrono::Utc>::from_timestamp_micros(from).unwrap().to_rfc3339();
    let began = std::time::Instant::now();
    let backfilled = run(&[
        "schedules",
        "backfill",
        "digest/fast",
        "--tenant",
        "acme",
        "--from",
        &from,
        "--to",
        newest,
        "--rate",
        "2",
        "--json",
    ]);
    assert_eq!(backfilled.status.code(), Some(0), "{}", text(&backfilled.stderr));
    let started = json_lines(&backfilled);
    assert_eq!(started.len(), skipped.len(), "one run per skipped tick");
    assert!(began.elapsed() >= Duration::from_millis(500 * (started.len() as u64 - 1)), "2 a second");
    let later = run(&[
        "schedules",
        "backfill",
        "digest/fast",
        "--tenant",
        "acme",
        "--from",
        &from,
        "--to",
        "2999-01-01T00:00:00Z",
    ]);
    assert_eq!(later.status.code(), Some(2), "{}", text(&later.stderr));
    let bad_time = run(&["schedules", "backfill", "digest/fast", "--from", "yesterday", "--to", newest]);
    assert_eq!(bad_time.status.code(), Some(2));

    // delete: the schedule and its ticks go; its runs stay.
    let runs_before = text(&run(&["runs", "list", "--json", "--limit", "1000"]).stdout).lines().count();
    ok(&run(&["schedules", "delete", "digest/fast", "--tenant", "acme"]), "delete");
    assert_eq!(run(&["schedules", "delete", "digest/fast", "--tenant", "acme"]).status.code(), Some(2));
    assert_eq!(text(&run(&["runs", "list", "--json", "--limit", "1000"]).stdout).lines().count(), runs_before);
    assert_eq!(json_lines(&run(&["schedules", "list", "--tenant", "acme", "--json"])).len(), 1);
}
