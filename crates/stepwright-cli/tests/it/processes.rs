//! Many processes, one run: every scenario runs real `stepwright` processes against one
//! store — SQLite, and Postgres when `STEPWRIGHT_TEST_DATABASE_URL` is set (a schema per
//! test) — as an API process, workers and a person's shell would share it.
#![allow(clippy::print_stderr)] // The cancel test reports how long the cancel took.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One store the processes share, as `--db` arguments.
pub(crate) struct Db {
    pub(crate) name: &'static str,
    pub(crate) url: String,
}

impl Db {
    pub(crate) fn args<'a>(&'a self, rest: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["--db", self.url.as_str()];
        args.extend_from_slice(rest);
        args
    }
}

/// SQLite in `dir`, and Postgres in a schema of its own when configured.
pub(crate) fn stores(dir: &Path, test: &str) -> Vec<Db> {
    let mut stores = vec![Db { name: "sqlite", url: format!("sqlite://{}", dir.join("shared.db").display()) }];
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    if let Some(url) = runtime.block_on(stepwright::backends::postgres::test_url(test)) {
        stores.push(Db { name: "postgres", url });
    }
    stores
}

fn stepwright(dir: &Path, args: &[&str]) -> Output {
    crate::support::stepwright(dir, args)
}

/// Starts `stepwright` in the background.
fn spawn(dir: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_stepwright"))
        .current_dir(dir)
        .env_remove("STEPWRIGHT_DB")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stepwright")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&output.stdout), text(&output.stderr)))
}

/// Waits (at most a minute) until `ready` holds.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The runs in the store, newest first.
fn runs(dir: &Path, db: &Db) -> Vec<Value> {
    let output = stepwright(dir, &db.args(&["runs", "list", "--json", "--limit", "500"]));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    text(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn shown(dir: &Path, db: &Db, run: &str) -> Value {
    json_of(&stepwright(dir, &db.args(&["runs", "show", run, "--json"])))
}

fn events(dir: &Path, db: &Db, run: &str) -> Vec<Value> {
    let output = stepwright(dir, &db.args(&["runs", "events", run, "--json"]));
    text(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The one run in the store once it exists.
fn the_run(dir: &Path, db: &Db) -> String {
    let mut found = None;
    wait_for("the run to be created", || {
        found = runs(dir, db).first().and_then(|r| r["run_id"].as_str().map(str::to_owned));
        found.is_some()
    });
    found.unwrap()
}

fn step_status(dir: &Path, db: &Db, run: &str, path: &str) -> Option<String> {
    shown(dir, db, run)["steps"]
        .as_array()?
        .iter()
        .find(|s| s["path"] == path)
        .and_then(|s| s["status"].as_str().map(str::to_owned))
}

pub(crate) fn process_alive(pid: u32) -> bool {
    // A zombie (exited, not yet reaped by its parent) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

/// Parallel paths on one run: a fork of two `set` steps and a map of 100 items, 16 at
/// once, each item committing on its own — every path's entries land (Postgres used to
/// fail the first parallel commit on a duplicate journal key).
#[test]
fn fork_and_map_with_parallel_commits_complete_on_every_store() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "fan.yaml",
        "workflow: fan\nsteps:\n  - id: f\n    fork: { mode: all, paths: [ [ { id: a, set: 1 } ], [ { id: b, set: 2 } ] ] }\n  \
         - id: m\n    map:\n      items: \"{{ range(100) | list }}\"\n      as: n\n      concurrency: 16\n      steps:\n        \
         - id: double\n          set: \"{{ n * 2 }}\"\n        - id: plus\n          set: \"{{ steps.double.output + 1 }}\"\n",
    );
    for db in stores(dir.path(), "fork_and_map_with_parallel_commits") {
        let output = stepwright(dir.path(), &db.args(&["run", "fan.yaml", "--json"]));
        assert_eq!(output.status.code(), Some(0), "{}: {}", db.name, text(&output.stderr));
        let report = json_of(&output);
        let expected: Vec<Value> = (0..100).map(|n| json!(n * 2 + 1)).collect();
        assert_eq!(report["output"], Value::Array(expected), "{}", db.name);
        let steps = shown(dir.path(), &db, report["run_id"].as_str().unwrap())["steps"].as_array().unwrap().len();
        assert!(steps >= 2 + 100 * 2, "{}: every path's steps are in the journal ({steps})", db.name);
    }
}

/// A file whose second step runs a tool process for half a minute (its pid written first,
/// so the test can see it die), then a step that must never start once cancelled.
const SLOW_TOOL: &str = r#"
workflow: slow-tool
tools:
  nap:
    command: [sh, -c, "echo $$ > \"$1\"; exec sleep 30", sh, "{{ args.pidfile }}"]
    effect: read
steps:
  - id: first
    set: 1
  - id: wait
    tool: nap
    with: { pidfile: "{{ input.pidfile }}" }
  - id: after
    set: "never"
"#;

/// `cancel` from a second process reaches a run that a `run` process executes: the tool's
/// process is killed, the next step never starts, the run ends `cancelled` with who and
/// why, and its `run.cancelled` event; nothing overwrites that status.
#[test]
fn cancel_from_another_process_stops_a_running_tool() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "slow.yaml", SLOW_TOOL);
    for db in stores(dir.path(), "cancel_from_another_process_stops_a_running_tool") {
        let pidfile = dir.path().join(format!("{}.pid", db.name));
        let input = json!({ "pidfile": pidfile }).to_string();
        let child = spawn(dir.path(), &db.args(&["run", "slow.yaml", "--json", "--input", &input]));
        wait_for("the tool to start", || {
            std::fs::read_to_string(&pidfile).is_ok_and(|p| p.trim().parse::<u32>().is_ok())
        });
        let tool: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        let run = runs(dir.path(), &db)[0]["run_id"].as_str().unwrap().to_owned();
        let started = Instant::now();
        let cancelled = stepwright(dir.path(), &db.args(&["cancel", &run, "--as", "ann", "--reason", "too slow"]));
        let took = started.elapsed();
        assert_eq!(cancelled.status.code(), Some(0), "{}: {}", db.name, text(&cancelled.stderr));
        assert_eq!(text(&cancelled.stdout).trim(), "cancelled");
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{}: a cancelled run exits 1: {}", db.name, text(&output.stderr));
        let report = json_of(&output);
        assert_eq!(report["status"], "cancelled");
        assert_eq!(report["error"]["message"], "cancelled by ann: too slow");
        wait_for("the tool process to be gone", || !process_alive(tool));
        let show = shown(dir.path(), &db, &run);
        assert_eq!(show["status"], "cancelled");
        assert!(show["steps"].as_array().unwrap().iter().all(|s| s["path"] != "after"), "{show}");
        let events = events(dir.path(), &db, &run);
        let cancelled_event = events.iter().find(|e| e["kind"] == "run.cancelled").expect("a run.cancelled event");
        assert_eq!(
            (cancelled_event["data"]["by"].as_str(), cancelled_event["data"]["reason"].as_str()),
            (Some("ann"), Some("too slow"))
        );
        // Asking again changes nothing.
        let again = stepwright(dir.path(), &db.args(&["cancel", &run]));
        assert_eq!(again.status.code(), Some(0));
        assert!(text(&again.stderr).contains("already finished: cancelled"), "{}", text(&again.stderr));
        eprintln!("{}: cancel answered after {took:?}", db.name);
    }
}

/// A cancelled `every` stops ticking, in the process that runs it.
#[test]
fn cancel_stops_an_every_loop_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "poll.yaml",
        "workflow: poll\nsteps:\n  - id: poll\n    every:\n      interval: 200ms\n      steps:\n        - id: t\n          set: \"{{ tick }}\"\n",
    );
    for db in stores(dir.path(), "cancel_stops_an_every_loop") {
        let child = spawn(dir.path(), &db.args(&["run", "poll.yaml", "--json"]));
        let run = the_run(dir.path(), &db);
        let ticks = |dir: &Path| {
            shown(dir, &db, &run)["steps"]
                .as_array()
                .map_or(0, |s| s.iter().filter(|s| s["path"].as_str().is_some_and(|p| p.ends_with("/t"))).count())
        };
        wait_for("two ticks", || ticks(dir.path()) >= 2);
        let cancelled = stepwright(dir.path(), &db.args(&["cancel", &run]));
        assert_eq!(cancelled.status.code(), Some(0), "{}: {}", db.name, text(&cancelled.stderr));
        let output = child.wait_with_output().unwrap();
        assert_eq!(json_of(&output)["status"], "cancelled", "{}", db.name);
        let after = ticks(dir.path());
        std::thread::sleep(Duration::from_millis(600));
        assert_eq!(ticks(dir.path()), after, "{}: no tick after the cancel", db.name);
        assert_eq!(shown(dir.path(), &db, &run)["status"], "cancelled");
    }
}

/// A cancel reaches a run a `worker` executes; the worker lives on and says what happened.
#[test]
fn cancel_reaches_a_run_a_worker_executes() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "slow.yaml", SLOW_TOOL);
    for db in stores(dir.path(), "cancel_reaches_a_run_a_worker_executes") {
        let pidfile = dir.path().join(format!("worker-{}.pid", db.name));
        let input = json!({ "pidfile": pidfile }).to_string();
        let created = stepwright(dir.path(), &db.args(&["run", "slow.yaml", "--detach", "--json", "--input", &input]));
        assert_eq!(created.status.code(), Some(0), "{}", text(&created.stderr));
        let run = json_of(&created)["run_id"].as_str().unwrap().to_owned();
        let mut worker = spawn(dir.path(), &db.args(&["worker", "--log-format", "json"]));
        wait_for("the tool to start", || {
            std::fs::read_to_string(&pidfile).is_ok_and(|p| p.trim().parse::<u32>().is_ok())
        });
        let listed = runs(dir.path(), &db);
        let owner = listed[0]["owner"].as_str().unwrap_or_default().to_owned();
        assert!(owner.starts_with("worker@"), "{}: the run shows its owner: {listed:?}", db.name);
        let cancelled = stepwright(dir.path(), &db.args(&["cancel", &run, "--reason", "stop"]));
        assert_eq!(cancelled.status.code(), Some(0), "{}: {}", db.name, text(&cancelled.stderr));
        assert_eq!(shown(dir.path(), &db, &run)["status"], "cancelled");
        assert!(worker.try_wait().unwrap().is_none(), "the worker goes on");
        let _ = Command::new("kill").args(["-INT", &worker.id().to_string()]).status();
        let output = worker.wait_with_output().unwrap();
        let log: Vec<Value> = text(&output.stderr).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let of_run: Vec<(&str, Option<&str>)> = log
            .iter()
            .filter(|l| l["run_id"] == json!(run))
            .map(|l| (l["event"].as_str().unwrap(), l["status"].as_str()))
            .collect();
        assert_eq!(
            of_run,
            [("claimed", None), ("finished", Some("cancelled"))],
            "{}: {}",
            db.name,
            text(&output.stderr)
        );
        assert!(log.iter().all(|l| l["worker"] == json!(owner)), "every line names the worker");
    }
}

/// An approval whose deadline is short enough to wait for in process is in the store the
/// moment the run waits on it: a person approves from another process, and the waiting
/// process — not the approving one — continues the run, once.
#[test]
fn an_approval_waited_on_in_process_is_decided_from_another() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "gate.yaml",
        "workflow: gate\nsteps:\n  - id: ask\n    approval: { message: \"Ship it?\", timeout: 5s, on_timeout: reject }\n  \
         - id: ship\n    set: \"{{ steps.ask.output }}\"\n",
    );
    for db in stores(dir.path(), "an_approval_waited_on_in_process") {
        let child = spawn(dir.path(), &db.args(&["run", "gate.yaml", "--json"]));
        let run = the_run(dir.path(), &db);
        wait_for("the approval to be open", || step_status(dir.path(), &db, &run, "ask").as_deref() == Some("waiting"));
        let approved = stepwright(dir.path(), &db.args(&["approve", &run, "--as", "ann"]));
        assert_eq!(approved.status.code(), Some(0), "{}: {}", db.name, text(&approved.stderr));
        // The waiting process continues the run; if it finished before `approve` looked,
        // `approve` says so instead.
        let said = text(&approved.stderr);
        assert!(
            said.contains("goes on in cli@") || said.contains("was continued by the process waiting for it"),
            "{said}"
        );
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}: {}", db.name, text(&output.stderr));
        assert_eq!(json_of(&output)["status"], "completed");
        let log = events(dir.path(), &db, &run);
        let resolved: Vec<&Value> = log.iter().filter(|e| e["kind"] == "interrupt.resolved").collect();
        assert_eq!(resolved.len(), 1, "{}: decided once", db.name);
        assert_eq!(resolved[0]["data"]["resolution"]["by"], "ann");
        assert_eq!(resolved[0]["data"]["resolution"]["timed_out"], false);
        let ship: Vec<&Value> = log.iter().filter(|e| e["kind"] == "step.completed" && e["path"] == "ship").collect();
        assert_eq!(ship.len(), 1, "{}: the run continued once", db.name);
    }
}

/// `resume` never takes a run from a live process (exit 2, naming the holder); once that
/// process is killed, `resume` takes the run over at once (no lease wait) and finishes it
/// without running finished steps again.
#[test]
fn resume_refuses_a_live_run_and_takes_over_a_dead_ones() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "nap.yaml",
        "workflow: nap\nsteps:\n  - id: first\n    set: 1\n  - id: nap\n    sleep: 6s\n  - id: last\n    set: 2\n",
    );
    for db in stores(dir.path(), "resume_refuses_a_live_run") {
        let mut child = spawn(dir.path(), &db.args(&["run", "nap.yaml", "--json"]));
        let run = the_run(dir.path(), &db);
        wait_for("the first step", || step_status(dir.path(), &db, &run, "first").as_deref() == Some("completed"));
        let refused = stepwright(dir.path(), &db.args(&["resume", &run]));
        assert_eq!(refused.status.code(), Some(2), "{}: {}", db.name, text(&refused.stderr));
        let why = text(&refused.stderr);
        assert!(why.contains("is being executed by cli@") && why.contains("lease runs until"), "{why}");
        let shown_live = stepwright(dir.path(), &db.args(&["runs", "show", &run]));
        assert!(text(&shown_live.stdout).contains("executed by cli@"), "{}", text(&shown_live.stdout));
        child.kill().unwrap();
        child.wait().unwrap();
        let shown_dead = stepwright(dir.path(), &db.args(&["runs", "show", &run]));
        assert!(text(&shown_dead.stdout).contains("that process is gone"), "{}", text(&shown_dead.stdout));
        let started = Instant::now();
        let resumed = stepwright(dir.path(), &db.args(&["resume", &run, "--json"]));
        assert_eq!(resumed.status.code(), Some(0), "{}: {}", db.name, text(&resumed.stderr));
        assert!(started.elapsed() < Duration::from_secs(30), "{}: taken over without waiting out the lease", db.name);
        assert_eq!(json_of(&resumed)["output"], 2);
        let first = shown(dir.path(), &db, &run)["steps"][0].clone();
        assert_eq!((first["path"].as_str(), first["attempts"].as_u64()), (Some("first"), Some(1)));
        // A finished run is shown, with its status's exit code.
        let again = stepwright(dir.path(), &db.args(&["resume", &run, "--json"]));
        assert_eq!(again.status.code(), Some(0));
        assert_eq!(json_of(&again)["status"], "completed");
    }
}

/// Two `resume`s started together: exactly one executes the run.
#[test]
fn of_two_resumes_at_once_exactly_one_executes() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "once.yaml",
        "workflow: once\nsteps:\n  - id: nap\n    sleep: 2s\n  - id: done\n    set: \"{{ run.id }}\"\n",
    );
    for db in stores(dir.path(), "of_two_resumes_at_once") {
        let created = stepwright(dir.path(), &db.args(&["run", "once.yaml", "--detach", "--json"]));
        let run = json_of(&created)["run_id"].as_str().unwrap().to_owned();
        let first = spawn(dir.path(), &db.args(&["resume", &run, "--json"]));
        let second = spawn(dir.path(), &db.args(&["resume", &run, "--json"]));
        let outputs = [first.wait_with_output().unwrap(), second.wait_with_output().unwrap()];
        let mut codes: Vec<i32> = outputs.iter().map(|o| o.status.code().unwrap()).collect();
        codes.sort_unstable();
        assert_eq!(codes, [0, 2], "{}: {:?}", db.name, outputs.iter().map(|o| text(&o.stderr)).collect::<Vec<_>>());
        let winner = outputs.iter().find(|o| o.status.code() == Some(0)).unwrap();
        assert_eq!(json_of(winner)["output"], json!(run), "templates see run.id");
        let nap = shown(dir.path(), &db, &run)["steps"][0].clone();
        assert_eq!(nap["attempts"], 1, "{}: the step ran once", db.name);
    }
}

/// Who started a run is what its templates and its user-scoped memory see; another user
/// of the same database does not see that memory, another tenant cannot decide its
/// approvals.
#[test]
fn identity_reaches_templates_memory_and_decisions() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "me.yaml",
        "workflow: me\nsteps:\n  - id: who\n    set: \"{{ run.user }}@{{ run.tenant }} ({{ run.roles | join(',') }})\"\n  \
         - id: remember\n    memory.store: { namespace: notes, scope: user }\n    with: { key: color, value: \"{{ input.color }}\", text: \"favourite color {{ input.color }}\" }\n  \
         - id: recall\n    memory.recall: { namespace: notes, scope: user }\n    with: { key: color }\n  \
         - id: gate\n    approval: { message: ok? }\n",
    );
    write(
        dir.path(),
        "peek.yaml",
        "workflow: peek\nsteps:\n  - id: recall\n    memory.recall: { namespace: notes, scope: user }\n    with: { key: color }\n",
    );
    for db in stores(dir.path(), "identity_reaches_templates_memory") {
        let ann = ["--tenant", "acme", "--as", "ann", "--role", "lead"];
        let started = stepwright(
            dir.path(),
            &[db.args(&["run", "me.yaml", "--json", "--input", r#"{"color": "teal"}"#]), ann.to_vec()].concat(),
        );
        assert_eq!(started.status.code(), Some(3), "{}: {}", db.name, text(&started.stderr));
        let run = json_of(&started)["run_id"].as_str().unwrap().to_owned();
        let show = shown(dir.path(), &db, &run);
        let output_of = |path: &str| {
            show["steps"].as_array().unwrap().iter().find(|s| s["path"] == path).unwrap()["output"].clone()
        };
        assert_eq!(output_of("who"), "ann@acme (lead)");
        assert_eq!(output_of("recall")[0]["value"], "teal");
        // Ann sees her memory from another run; Bob, in the same tenant, does not.
        let again = stepwright(dir.path(), &[db.args(&["run", "peek.yaml", "--json"]), ann.to_vec()].concat());
        assert_eq!(json_of(&again)["output"][0]["value"], "teal", "{}", db.name);
        let bob = stepwright(dir.path(), &db.args(&["run", "peek.yaml", "--json", "--tenant", "acme", "--as", "bob"]));
        assert_eq!(json_of(&bob)["output"], json!([]), "{}: another user's memory is not seen", db.name);
        // Another tenant may not decide; Ann's tenant may.
        let foreign = stepwright(dir.path(), &db.args(&["approve", &run, "--as", "eve", "--tenant", "globex"]));
        assert_eq!(foreign.status.code(), Some(2), "{}", text(&foreign.stderr));
        assert!(text(&foreign.stderr).contains("does not belong to tenant"), "{}", text(&foreign.stderr));
        let approved = stepwright(dir.path(), &db.args(&["approve", &run, "--as", "ann", "--tenant", "acme"]));
        assert_eq!(approved.status.code(), Some(0), "{}: {}", db.name, text(&approved.stderr));
    }
}

/// A worker dedicated to a tenant executes only that tenant's runs; `resume --tenant`
/// refuses another tenant's run.
#[test]
fn a_tenants_worker_takes_only_its_runs() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "hi.yaml", "workflow: hi\nsteps:\n  - id: a\n    set: \"{{ run.tenant }}\"\n");
    for db in stores(dir.path(), "a_tenants_worker_takes_only_its_runs") {
        let create = |tenant: &str| {
            let created =
                stepwright(dir.path(), &db.args(&["run", "hi.yaml", "--detach", "--json", "--tenant", tenant]));
            json_of(&created)["run_id"].as_str().unwrap().to_owned()
        };
        let (acme, globex) = (create("acme"), create("globex"));
        let refused = stepwright(dir.path(), &db.args(&["resume", &globex, "--tenant", "acme"]));
        assert_eq!(refused.status.code(), Some(2), "{}: {}", db.name, text(&refused.stderr));
        assert!(text(&refused.stderr).contains("does not belong to tenant \"acme\""), "{}", text(&refused.stderr));
        let worker = stepwright(dir.path(), &db.args(&["worker", "--once", "--tenant", "acme"]));
        assert_eq!(worker.status.code(), Some(0), "{}: {}", db.name, text(&worker.stderr));
        assert!(text(&worker.stderr).contains(&format!("finished    {acme} completed")), "{}", text(&worker.stderr));
        assert_eq!(shown(dir.path(), &db, &acme)["output"], "acme");
        assert_eq!(shown(dir.path(), &db, &globex)["status"], "pending", "{}: another tenant's run waits", db.name);
    }
}

/// When a run's execution began and ended: its first `step.started` and its last event.
fn executed_between(dir: &Path, db: &Db, run: &str) -> (i64, i64) {
    let log = events(dir, db, run);
    let started = log.iter().find(|e| e["kind"] == "step.started").expect("a step started")["at"].as_i64().unwrap();
    let ended = log.iter().rev().find(|e| e["kind"] == "run.completed").expect("the run completed")["at"].as_i64();
    (started, ended.unwrap())
}

/// Flow control across two worker processes on one store: with `concurrency: {key:
/// customer, limit: 1}` no two runs of one customer ever execute at once (checked from the
/// journal's times), while runs of different customers do; and waiting runs are claimed in
/// priority order (a run created last with `--priority 10` goes first in its group).
#[test]
fn a_concurrency_limit_holds_across_two_workers_and_priority_orders_claims() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "per-customer.yaml",
        "workflow: per-customer\nconcurrency: { key: \"{{ input.customer }}\", limit: 1 }\nsteps:\n  \
         - id: work\n    sleep: 300ms\n",
    );
    for db in stores(dir.path(), "a_concurrency_limit_holds") {
        let mut created: Vec<(String, &str)> = Vec::new();
        let start = |customer: &str, priority: &str| {
            let input = json!({ "customer": customer }).to_string();
            let created = stepwright(
                dir.path(),
                &db.args(&["run", "per-customer.yaml", "--detach", "--input", &input, "--priority", priority]),
            );
            assert_eq!(created.status.code(), Some(0), "{}: {}", db.name, text(&created.stderr));
            text(&created.stdout).trim().to_owned()
        };
        for customer in ["acme", "globex", "acme", "globex", "acme", "globex"] {
            created.push((start(customer, "0"), customer));
        }
        let urgent = start("acme", "10");
        created.push((urgent.clone(), "acme"));
        let shown = text(&stepwright(dir.path(), &db.args(&["runs", "show", &urgent])).stdout);
        assert!(
            shown.contains(
                "queued: no worker has claimed it yet (its concurrency group \"acme\" has room; priority 10)"
            ),
            "{}: {shown}",
            db.name
        );
        let workers: Vec<Child> = (0..2).map(|_| spawn(dir.path(), &db.args(&["worker"]))).collect();
        wait_for("every run to finish", || runs(dir.path(), &db).iter().all(|r| r["status"] == "completed"));
        for mut worker in workers {
            let _ = worker.kill();
            let _ = worker.wait();
        }
        let times: Vec<(&str, (i64, i64), &String)> =
            created.iter().map(|(run, customer)| (*customer, executed_between(dir.path(), &db, run), run)).collect();
        for (i, (customer, (start, end), run)) in times.iter().enumerate() {
            for (other_customer, (other_start, other_end), other) in &times[i + 1..] {
                if customer == other_customer {
                    assert!(
                        end <= other_start || other_end <= start,
                        "{}: runs {run} and {other} of {customer} overlapped: {start}..{end} and {other_start}..{other_end}",
                        db.name
                    );
                }
            }
        }
        let overlapped = times.iter().any(|(c, (s, e), _)| times.iter().any(|(d, (t, f), _)| c != d && s < f && t < e));
        assert!(overlapped, "{}: runs of different customers executed at once", db.name);
        // Every run was waiting when the workers started: the urgent one, created last,
        // went first in its group.
        let acme: Vec<&(&str, (i64, i64), &String)> = times.iter().filter(|t| t.0 == "acme").collect();
        let first = acme.iter().min_by_key(|t| t.1.0).unwrap();
        assert_eq!(*first.2, urgent, "{}: the priority-10 run did not go first: {acme:?}", db.name);
    }
}

/// A model binding's `requests_per_minute` is counted in the store, for every process on
/// it: two workers (one per tenant, so that each surely executes runs), each with far more
/// calls to make than the limit allows, together keep within 10 % of 600 requests a minute
/// over ten seconds — where each counting alone would let 1,200 through.
#[test]
fn a_model_rate_limit_is_shared_by_two_workers() {
    let dir = tempfile::tempdir().unwrap();
    let (port, served) =
        crate::support::fake_openai(|_| crate::support::Answer::Text("ok".into()), crate::support::Tokens::Fixed(5, 1));
    write(
        dir.path(),
        "busy.yaml",
        &format!(
            "workflow: busy\nmodels:\n  fast: {{ provider: openai, model: gpt-test, base_url: \"http://127.0.0.1:{port}/v1\", \
             api_key_env: PATH, requests_per_minute: 600 }}\nsteps:\n  - id: m\n    map:\n      \
             items: \"{{{{ range(400) | list }}}}\"\n      as: n\n      concurrency: 32\n      steps:\n        \
             - id: ask\n          llm: {{ model: fast, prompt: \"{{{{ run.tenant }}}} {{{{ n }}}}\", stream: false }}\n"
        ),
    );
    for db in stores(dir.path(), "a_model_rate_limit_is_shared") {
        let before = served.requests().len();
        for tenant in ["north", "south"] {
            let created = stepwright(dir.path(), &db.args(&["run", "busy.yaml", "--detach", "--tenant", tenant]));
            assert_eq!(created.status.code(), Some(0), "{}: {}", db.name, text(&created.stderr));
        }
        let workers: Vec<Child> =
            ["north", "south"].iter().map(|t| spawn(dir.path(), &db.args(&["worker", "--tenant", t]))).collect();
        wait_for("the first model call", || served.requests().len() > before);
        std::thread::sleep(Duration::from_secs(12));
        for mut worker in workers {
            let _ = worker.kill();
            let _ = worker.wait();
        }
        let calls: Vec<_> = served.requests().into_iter().skip(before).collect();
        let first = calls[0].received_at;
        let window = |c: &&stepwright_testkit::http::Captured| {
            let since = c.received_at.duration_since(first);
            since >= Duration::from_secs(1) && since < Duration::from_secs(11)
        };
        let in_ten_seconds = calls.iter().filter(window).count();
        eprintln!("{}: {in_ten_seconds} model requests in 10 s (limit 600/min: 100)", db.name);
        assert!(
            (90..=110).contains(&in_ten_seconds),
            "{}: {in_ten_seconds} requests in 10 s at 600/min shared by two workers",
            db.name
        );
        for tenant in ["north", "south"] {
            let from = calls.iter().filter(window).filter(|c| c.body.to_string().contains(tenant)).count();
            // A window serves whoever asks first, not fair shares: a worker may get far fewer
            // than half, but both asked all along and both were served.
            assert!(from >= 5, "{}: worker {tenant} made {from} of the calls: both call the model", db.name);
        }
    }
}

/// A pure step that counts its executions in a file (one line each) and is `cache`d.
const CACHED: &str = r#"
workflow: cached
tools:
  count:
    command: [sh, -c, "echo ran >> \"$1\"; printf '%s!' \"$2\"", sh, "{{ args.counter }}", "{{ args.word }}"]
    effect: read
steps:
  - id: shout
    tool: count
    with: { counter: "{{ input.counter }}", word: "{{ input.word }}" }
    effect: pure
CACHE
"#;

/// `cache: true` keeps a pure step's output in the store: a second `run` process with the
/// same input is served it without running the step, a different input runs it; without
/// `cache` every run runs it.
#[test]
fn a_cached_step_is_served_to_another_process_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "cached.yaml", &CACHED.replace("CACHE\n", "    cache: true\n"));
    write(dir.path(), "uncached.yaml", &CACHED.replace("CACHE\n", ""));
    for db in stores(dir.path(), "a_cached_step_is_served") {
        for (file, expected_runs) in [("cached.yaml", 2), ("uncached.yaml", 3)] {
            let counter = dir.path().join(format!("{}-{file}.count", db.name));
            let input = |word: &str| json!({ "counter": counter.display().to_string(), "word": word }).to_string();
            for word in ["hey", "hey", "ho"] {
                let output = stepwright(dir.path(), &db.args(&["run", file, "--input", &input(word), "--json"]));
                assert_eq!(output.status.code(), Some(0), "{}: {}", db.name, text(&output.stderr));
                assert_eq!(json_of(&output)["output"], json!(format!("{word}!")), "{}", db.name);
            }
            let ran = std::fs::read_to_string(&counter).unwrap().lines().count();
            assert_eq!(ran, expected_runs, "{}: {file} ran its step {ran} times for hey, hey, ho", db.name);
        }
    }
}

/// A run waiting a day for an event: `send` from another process makes it due, and a
/// worker process takes the message and finishes it.
#[test]
fn a_wait_is_answered_by_send_from_another_process() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "paid.yaml",
        "workflow: paid\nsteps:\n  - id: payment\n    wait: { event: payment, timeout: 1d, schema: { type: object, required: [paid] } }\n  \
         - id: receipt\n    set: \"paid {{ steps.payment.output.paid }}\"\n",
    );
    for db in stores(dir.path(), "a_wait_is_answered_by_send") {
        let started = stepwright(dir.path(), &db.args(&["run", "paid.yaml", "--json"]));
        assert_eq!(started.status.code(), Some(3), "{}: {}", db.name, text(&started.stderr));
        let report = json_of(&started);
        let run = report["run_id"].as_str().unwrap().to_owned();
        assert_eq!(report["awaiting"][0]["event"], "payment", "{}: {report}", db.name);
        let shown = shown(dir.path(), &db, &run);
        assert_eq!(shown["awaiting"][0]["step"], "payment", "{}", db.name);
        assert_eq!(shown["steps"][0]["status"], "waiting", "{}", db.name);
        let idle = stepwright(dir.path(), &db.args(&["worker", "--once"]));
        assert_eq!(idle.status.code(), Some(0), "{}", db.name);
        assert_eq!(
            self::shown(dir.path(), &db, &run)["status"],
            "suspended",
            "{}: nothing is due before the send",
            db.name
        );
        let sent =
            stepwright(dir.path(), &db.args(&["send", &run, "--inbox", "payment", "--message", r#"{"paid": 7}"#]));
        assert_eq!(sent.status.code(), Some(0), "{}: {}", db.name, text(&sent.stderr));
        let worked = stepwright(dir.path(), &db.args(&["worker", "--once"]));
        assert_eq!(worked.status.code(), Some(0), "{}: {}", db.name, text(&worked.stderr));
        let done = self::shown(dir.path(), &db, &run);
        assert_eq!((done["status"].as_str(), &done["output"]), (Some("completed"), &json!("paid 7")), "{}", db.name);
    }
}

/// Two pure steps that count their executions (a line each in a file), then a step whose
/// first execution kills the process running the run (SIGKILL to its parent).
const CRASHES: &str = r#"
workflow: crashes
tools:
  count:
    description: Counts an execution
    command: [sh, -c, "echo $2 >> \"$1\"; printf '%s' \"$2\"", sh, "{{ args.file }}", "{{ args.name }}"]
    effect: read
  crash:
    description: Kills the process that runs it, the first time
    command: [sh, -c, "[ -e \"$1\" ] || { touch \"$1\"; kill -9 $PPID; sleep 5; }; printf done", sh, "{{ args.marker }}"]
    effect: read
steps:
  - id: a
    tool: count
    with: { file: "{{ input.dir }}/count", name: a }
    effect: pure
  - id: b
    tool: count
    with: { file: "{{ input.dir }}/count", name: b }
    effect: pure
  - id: c
    tool: crash
    with: { marker: "{{ input.dir }}/crashed" }
"#;

/// `--durability`: with `sync` (the default) the steps that completed before a crash are
/// in the journal and a resume serves them; with `async` (and a window longer than the
/// crash takes) their completions were still waiting to be written, so the resume runs them
/// again. Both runs end completed.
#[test]
fn durability_async_may_lose_the_last_batch_of_completions_and_sync_does_not() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "crashes.yaml", CRASHES);
    for db in stores(dir.path(), "durability_async_may_lose") {
        for (mode, extra, runs_of_each) in
            [("sync", &[][..], 1), ("async", &["--durability", "async", "--async-window", "60s"][..], 2)]
        {
            let work = dir.path().join(format!("{}-{mode}", db.name));
            std::fs::create_dir_all(&work).unwrap();
            let input = json!({ "dir": work.display().to_string() }).to_string();
            let mut args = db.args(&["run", "crashes.yaml", "--input", &input, "--json"]);
            args.extend_from_slice(extra);
            let crashed = stepwright(dir.path(), &args);
            assert_eq!(crashed.status.code(), None, "{} {mode}: killed by SIGKILL", db.name);
            let run = runs(dir.path(), &db)[0]["run_id"].as_str().unwrap().to_owned();
            let mut resume = db.args(&["resume", &run, "--json"]);
            resume.extend_from_slice(extra);
            let resumed = stepwright(dir.path(), &resume);
            assert_eq!(resumed.status.code(), Some(0), "{} {mode}: {}", db.name, text(&resumed.stderr));
            assert_eq!(json_of(&resumed)["output"], json!("done"), "{} {mode}", db.name);
            let counted = std::fs::read_to_string(work.join("count")).unwrap();
            for step in ["a", "b"] {
                let ran = counted.lines().filter(|line| *line == step).count();
                assert_eq!(ran, runs_of_each, "{} {mode}: step {step} ran {ran} times: {counted:?}", db.name);
            }
        }
    }
}

/// `run --idempotency-key`: of several processes starting with one key at once, one
/// creates a run and the others answer with it; an attached `run` with a used key shows the
/// first run's outcome; another tenant's key is another key; a key too long is refused.
#[test]
fn run_with_an_idempotency_key_starts_one_run_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "once.yaml", "workflow: once\nsteps:\n  - id: a\n    set: \"{{ input }}\"\n");
    for db in stores(dir.path(), "run_with_an_idempotency_key") {
        let starts: Vec<Child> = (0..4)
            .map(|_| {
                spawn(
                    dir.path(),
                    &db.args(&["run", "once.yaml", "--detach", "--input", "1", "--idempotency-key", "nightly-7"]),
                )
            })
            .collect();
        let ids: Vec<String> = starts
            .into_iter()
            .map(|child| {
                let output = child.wait_with_output().unwrap();
                assert_eq!(output.status.code(), Some(0), "{}: {}", db.name, text(&output.stderr));
                text(&output.stdout).trim().to_owned()
            })
            .collect();
        assert!(ids.iter().all(|id| *id == ids[0]), "{}: one run for the key: {ids:?}", db.name);
        assert_eq!(runs(dir.path(), &db).len(), 1, "{}", db.name);
        // A worker completes it; an attached `run` with the key shows its outcome.
        let worked = stepwright(dir.path(), &db.args(&["worker", "--once"]));
        assert_eq!(worked.status.code(), Some(0), "{}", text(&worked.stderr));
        let again = stepwright(
            dir.path(),
            &db.args(&["run", "once.yaml", "--input", "2", "--json", "--idempotency-key", "nightly-7"]),
        );
        assert_eq!(again.status.code(), Some(0), "{}: {}", db.name, text(&again.stderr));
        let shown = json_of(&again);
        assert_eq!((shown["run_id"].as_str(), &shown["output"]), (Some(ids[0].as_str()), &json!(1)), "the first run's");
        assert!(text(&again.stderr).contains("named run"), "{}", text(&again.stderr));
        // Another tenant: another key.
        let other = stepwright(
            dir.path(),
            &db.args(&[
                "run",
                "once.yaml",
                "--input",
                "3",
                "--detach",
                "--idempotency-key",
                "nightly-7",
                "--tenant",
                "acme",
            ]),
        );
        assert_eq!(other.status.code(), Some(0), "{}", text(&other.stderr));
        assert_ne!(text(&other.stdout).trim(), ids[0]);
        let long = "k".repeat(256);
        let refused = stepwright(dir.path(), &db.args(&["run", "once.yaml", "--detach", "--idempotency-key", &long]));
        assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
        assert!(text(&refused.stderr).contains("1 to 255 characters"));
        assert_eq!(runs(dir.path(), &db).len(), 2, "{}", db.name);
    }
}

/// A worker process executes a slow step; another process reading the same store sees it
/// `running` (with its start, no end) while it runs, and `completed` after — on Postgres as on
/// SQLite.
#[test]
fn a_step_another_process_runs_is_seen_running_on_every_store() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "nap.yaml",
        "workflow: nap\ntools:\n  nap:\n    command: [sleep, \"3\"]\n    effect: read\nsteps:\n  - id: nap\n    tool: nap\n",
    );
    for db in stores(dir.path(), "a_step_another_process_runs_is_seen_running_on_every_store") {
        let created = stepwright(dir.path(), &db.args(&["run", "nap.yaml", "--detach", "--json"]));
        assert_eq!(created.status.code(), Some(0), "{}", text(&created.stderr));
        let run = json_of(&created)["run_id"].as_str().unwrap().to_owned();
        let mut worker = spawn(dir.path(), &db.args(&["worker"]));
        wait_for("the step to show running", || {
            step_status(dir.path(), &db, &run, "nap").as_deref() == Some("running")
        });
        let details = shown(dir.path(), &db, &run);
        let nap = &details["steps"][0];
        assert!(nap["started_at"].is_i64() && nap["ended_at"].is_null(), "{}: {details}", db.name);
        assert_eq!(details["status"], "running", "{}: {details}", db.name);
        wait_for("the run to complete", || shown(dir.path(), &db, &run)["status"] == "completed");
        assert_eq!(step_status(dir.path(), &db, &run, "nap").as_deref(), Some("completed"), "{}", db.name);
        let _ = Command::new("kill").args(["-INT", &worker.id().to_string()]).status();
        worker.wait().unwrap();
    }
}
