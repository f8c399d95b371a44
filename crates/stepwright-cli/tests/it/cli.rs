//! The `stepwright` binary end to end: exit codes, `--json` shapes, diagnostics. The
//! scenarios of the commands that have a remote form (DESIGN §13) run twice, against a store
//! (`local::`) and against a `stepwright serve` process (`remote::`), with the same
//! assertions: the same output, the same exit codes.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{Target, stepwright};
use serde_json::{Value, json};

local_and_remote!(
    run_prints_the_json_shape_and_exits_by_status,
    runs_list_and_show_read_the_store,
    a_suspended_run_is_approved_from_a_second_process_and_completes,
    respond_reject_and_cancel,
    detached_runs_are_executed_by_a_worker,
    a_run_takes_a_priority_and_a_concurrency_group,
    send_reaches_a_loop_inbox_and_wake_an_every_channel,
    a_timer_is_woken_not_approved,
    a_running_step_is_shown_running_with_its_time_so_far,
    a_decision_for_a_wait_says_how_to_answer_it,
    an_unknown_run_id_is_a_usage_error,
    ctrl_c_stops_the_command_and_the_run_is_finished,
);

pub(crate) fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

pub(crate) const GREET: &str = r#"
workflow: greet
input: { type: object, required: [name], properties: { name: { type: string } } }
steps:
  - id: hello
    set: "Hello, {{ input.name }}"
  - id: loud
    set: "{{ steps.hello.output | upper }}"
"#;

pub(crate) const GATED: &str = r#"
workflow: gated
steps:
  - id: draft
    set: "a draft"
  - id: review
    approval: { message: "Send {{ steps.draft.output }}?" }
"#;

#[test]
fn validate_reports_problems_with_positions_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "good.yaml", GREET);
    write(dir.path(), "bad.yaml", "workflow: bad\nsteps:\n  - id: a\n    sett: 1\n");
    let good = stepwright(dir.path(), &["validate", "good.yaml"]);
    assert_eq!(good.status.code(), Some(0));
    let bad = stepwright(dir.path(), &["validate", "bad.yaml"]);
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("bad.yaml:4:5: unknown field `sett` in a step (hint: did you mean `set`?)"), "{stderr}");
    write(dir.path(), "odd.yaml", "workflow: odd\nsteps:\n  - id: a\n    set: 1\n    retry: { max_attempts: 3 }\n");
    let odd = stepwright(dir.path(), &["validate", "odd.yaml"]);
    assert_eq!(odd.status.code(), Some(0), "a warning does not fail validation");
    let stderr = String::from_utf8_lossy(&odd.stderr);
    assert!(stderr.contains("odd.yaml:5:12: warning: this `retry` never takes effect"), "{stderr}");
}

fn run_prints_the_json_shape_and_exits_by_status(target: &Target) {
    let dir = target.dir();
    write(dir, "greet.yaml", GREET);
    write(dir, "gated.yaml", GATED);
    let done = target.stepwright(&["run", "greet.yaml", "--input", r#"{"name": "ann"}"#, "--json"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    let report: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(report["status"], "completed");
    assert_eq!(report["output"], "HELLO, ANN");
    assert!(report["run_id"].is_string() && report["error"].is_null() && report["pending"] == serde_json::json!([]));
    if !target.is_remote() {
        assert!(dir.join("stepwright.db").exists(), "the default store is ./stepwright.db");
    }

    let waiting = target.stepwright(&["run", "gated.yaml", "--json"]);
    assert_eq!(waiting.status.code(), Some(3));
    let report: Value = serde_json::from_slice(&waiting.stdout).unwrap();
    assert_eq!(report["status"], "suspended");
    assert_eq!(report["pending"][0]["kind"], "approval");
    assert_eq!(report["pending"][0]["message"], "Send a draft?");
    assert_eq!(report["pending"][0]["step"], "review");

    let bad_input = target.stepwright(&["run", "greet.yaml", "--input", r#"{"nom": 1}"#]);
    assert_eq!(bad_input.status.code(), Some(2), "an input that fails the schema is bad input");
    let not_json = target.stepwright(&["run", "greet.yaml", "--input", "{oops"]);
    assert_eq!(not_json.status.code(), Some(2));
    let usage = target.stepwright(&["run"]);
    assert_eq!(usage.status.code(), Some(2));
}

fn runs_list_and_show_read_the_store(target: &Target) {
    let dir = target.dir();
    write(dir, "greet.yaml", GREET);
    let done = target.stepwright(&["run", "greet.yaml", "--input", r#"{"name": "bo"}"#, "--json"]);
    let run = serde_json::from_slice::<Value>(&done.stdout).unwrap()["run_id"].as_str().unwrap().to_owned();
    let list = target.stepwright(&["runs", "list", "--json"]);
    let first: Value = serde_json::from_str(String::from_utf8_lossy(&list.stdout).lines().next().unwrap()).unwrap();
    assert_eq!((first["run_id"].as_str(), first["status"].as_str()), (Some(run.as_str()), Some("completed")));
    // `--status` keeps to runs with that status.
    let completed = target.stepwright(&["runs", "list", "--json", "--status", "completed"]);
    assert_eq!(String::from_utf8_lossy(&completed.stdout).lines().count(), 1);
    let failed = target.stepwright(&["runs", "list", "--json", "--status", "failed"]);
    assert_eq!((failed.status.code(), String::from_utf8_lossy(&failed.stdout).lines().count()), (Some(0), 0));
    let show = target.stepwright(&["runs", "show", &run, "--json"]);
    assert_eq!(show.status.code(), Some(0));
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["output"], "HELLO, BO");
    let steps: Vec<(String, String)> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["path"].as_str().unwrap().to_owned(), s["status"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(steps, [("hello".to_owned(), "completed".to_owned()), ("loud".to_owned(), "completed".to_owned())]);
    assert_eq!(shown["steps"][0]["output"], "Hello, bo");
    assert_eq!(shown["steps"][1]["attempts"], 1);
    assert!(shown["steps"][1]["duration_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{}", shown["steps"][1]);

    // For people: a table with a row per step, its output shortened to fit.
    let long = format!(r#"{{"name": "{}"}}"#, "b".repeat(80));
    let done = target.stepwright(&["run", "greet.yaml", "--input", &long, "--json"]);
    let run = serde_json::from_slice::<Value>(&done.stdout).unwrap()["run_id"].as_str().unwrap().to_owned();
    let table = target.stepwright(&["runs", "show", &run]);
    let table = String::from_utf8_lossy(&table.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], format!("run {run} (greet) completed"));
    assert!(lines[1].starts_with("  created 20"), "{table}");
    let lines = &lines[1..];
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(header, ["STEP", "STATUS", "TRIES", "DURATION", "TOKENS", "COST", "OUTPUT"]);
    let hello: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(&hello[..3], ["hello", "completed", "1"], "{table}");
    assert!(hello[3].ends_with("ms") || hello[3].ends_with('s'), "a duration: {table}");
    assert_eq!(&hello[4..6], ["-", "-"], "no model calls: {table}");
    assert!(lines[2].ends_with(&format!(r#""Hello, {}…"#, "b".repeat(39))), "{table}");

    // The runs table: created (local time), how long each run lived and its cost, aligned.
    let listed = String::from_utf8_lossy(&target.stepwright(&["runs", "list"]).stdout).into_owned();
    let rows: Vec<&str> = listed.lines().collect();
    let header: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["RUN", "WORKFLOW", "STATUS", "CREATED", "DURATION", "COST", "STARTED", "BY", "WORKER"],
        "{listed}"
    );
    // Who started each run: the key's user over a server; nobody known for a local command.
    let starter = if target.is_remote() { "ann" } else { "-" };
    let created = rows[0].find("CREATED").unwrap();
    for row in &rows[1..] {
        assert!(row[created..].starts_with("20"), "aligned under CREATED: {listed}");
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert!(cells[5].ends_with("ms") || cells[5].ends_with('s'), "a duration: {listed}");
        assert_eq!(cells[6], "-", "no model calls, no cost: {listed}");
        assert_eq!(cells[7], starter, "{listed}");
    }
    assert_eq!(rows.len(), 3, "two runs: {listed}");
}

#[test]
fn graph_draws_mermaid_and_dot() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.yaml", GREET);
    let mermaid = stepwright(dir.path(), &["graph", "greet.yaml"]);
    let text = String::from_utf8_lossy(&mermaid.stdout);
    assert!(text.starts_with("flowchart TD") && text.contains("n1 --> n2"), "{text}");
    let dot = stepwright(dir.path(), &["graph", "greet.yaml", "--format", "dot"]);
    assert!(String::from_utf8_lossy(&dot.stdout).contains("n1 -> n2;"));
    assert_eq!(stepwright(dir.path(), &["graph", "greet.yaml", "--format", "svg"]).status.code(), Some(2));
}

const ASK: &str = r#"
workflow: ask
steps:
  - id: size
    input: { message: "How many?", schema: { type: integer, minimum: 1 } }
  - id: double
    set: "{{ steps.size.output * 2 }}"
"#;

pub(crate) fn run_id(output: &Output) -> String {
    serde_json::from_slice::<Value>(&output.stdout).unwrap()["run_id"].as_str().unwrap().to_owned()
}

fn a_suspended_run_is_approved_from_a_second_process_and_completes(target: &Target) {
    let dir = target.dir();
    write(dir, "gated.yaml", GATED);
    let started = target.stepwright(&["run", "gated.yaml", "--json"]);
    assert_eq!(started.status.code(), Some(3));
    let run = run_id(&started);
    // Another process; it needs no file: the definition comes from the store.
    std::fs::remove_file(dir.join("gated.yaml")).unwrap();
    let approved = target.stepwright(&[&["approve", &run, "--json"][..], target.as_ann()].concat());
    assert_eq!(approved.status.code(), Some(0), "{}", String::from_utf8_lossy(&approved.stderr));
    let report: Value = serde_json::from_slice(&approved.stdout).unwrap();
    assert_eq!(report["status"], "completed");
    assert_eq!(report["output"], "a draft", "an approval passes its payload on");
    let again = target.stepwright(&["approve", &run]);
    assert_eq!(again.status.code(), Some(2), "nothing is open any more");
}

fn respond_reject_and_cancel(target: &Target) {
    let dir = target.dir();
    write(dir, "ask.yaml", ASK);
    write(dir, "gated.yaml", GATED);
    let asked = target.stepwright(&["run", "ask.yaml", "--json"]);
    let run = run_id(&asked);
    let invalid = target.stepwright(&["respond", &run, "--value", "0"]);
    assert_eq!(invalid.status.code(), Some(2), "the answer must match the schema");
    let answered = target.stepwright(&["respond", &run, "--value", "21", "--json"]);
    assert_eq!(serde_json::from_slice::<Value>(&answered.stdout).unwrap()["output"], 42);

    let gated = run_id(&target.stepwright(&["run", "gated.yaml", "--json"]));
    let rejected = target.stepwright(&["reject", &gated, "--reason", "tone", "--json"]);
    assert_eq!(rejected.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&rejected.stdout).unwrap();
    assert_eq!(report["error"]["code"], "rejected");

    let other = run_id(&target.stepwright(&["run", "gated.yaml", "--json"]));
    let cancelled = target.stepwright(&["cancel", &other]);
    assert_eq!((cancelled.status.code(), String::from_utf8_lossy(&cancelled.stdout).trim()), (Some(0), "cancelled"));
    let shown: Value = serde_json::from_slice(&target.stepwright(&["runs", "show", &other, "--json"]).stdout).unwrap();
    assert_eq!(shown["status"], "cancelled");
}

fn detached_runs_are_executed_by_a_worker(target: &Target) {
    let dir = target.dir();
    write(dir, "greet.yaml", GREET);
    let created = target.stepwright(&["run", "greet.yaml", "--input", r#"{"name": "cy"}"#, "--detach", "--json"]);
    assert_eq!(created.status.code(), Some(0));
    let run = run_id(&created);
    if !target.is_remote() {
        // Remotely, the server's own worker takes it.
        let worker = stepwright(dir, &["worker", "--once"]);
        assert_eq!(worker.status.code(), Some(0), "{}", String::from_utf8_lossy(&worker.stderr));
    }
    let shown = settled(target, &run);
    assert_eq!((shown["status"].as_str(), shown["output"].as_str()), (Some("completed"), Some("HELLO, CY")));
}

/// `run --priority` and `--concurrency KEY=LIMIT` travel with the run: a run waiting on a
/// person holds the group's one slot, and the next run of the group waits, saying why.
fn a_run_takes_a_priority_and_a_concurrency_group(target: &Target) {
    let dir = target.dir();
    write(dir, "gated.yaml", GATED);
    write(dir, "greet.yaml", GREET);
    let work = || {
        if !target.is_remote() {
            // Remotely, the server's own worker claims what it may.
            let worker = stepwright(dir, &["worker", "--once"]);
            assert_eq!(worker.status.code(), Some(0), "{}", String::from_utf8_lossy(&worker.stderr));
        }
    };
    let first = run_id(&target.stepwright(&["run", "gated.yaml", "--detach", "--json", "--concurrency", "desk=1"]));
    work();
    assert_eq!(settled(target, &first)["status"], "suspended", "waiting on a person, holding the slot");
    let second = target.stepwright(&[
        "run",
        "greet.yaml",
        "--input",
        r#"{"name": "dee"}"#,
        "--detach",
        "--json",
        "--priority",
        "3",
        "--concurrency",
        "desk=1",
    ]);
    assert_eq!(second.status.code(), Some(0), "{}", String::from_utf8_lossy(&second.stderr));
    let second = run_id(&second);
    work();
    let shown: Value = serde_json::from_slice(&target.stepwright(&["runs", "show", &second, "--json"]).stdout).unwrap();
    assert_eq!(shown["status"], "pending", "{shown}");
    let queued = &shown["queued"];
    assert_eq!(
        (&queued["priority"], &queued["concurrency_key"], &queued["concurrency_limit"]),
        (&json!(3), &json!("desk"), &json!(1))
    );
    assert_eq!(queued["held_by"], json!([first]), "{shown}");
    let text = String::from_utf8_lossy(&target.stepwright(&["runs", "show", &second]).stdout).into_owned();
    assert!(text.contains("queued: concurrency group \"desk\" is full: 1 of 1 at a time, held by"), "{text}");
    for (flag, expect) in [("desk", "expected KEY=LIMIT"), ("desk=0", "at least 1"), ("desk=x", "not a whole number")] {
        let refused = target.stepwright(&["run", "greet.yaml", "--detach", "--concurrency", flag]);
        assert_eq!(refused.status.code(), Some(2), "{flag}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains(expect),
            "{flag}: {}",
            String::from_utf8_lossy(&refused.stderr)
        );
    }
}

/// `send` stores messages a loop's inbox takes one an iteration; `wake` runs an `every`'s
/// next tick now instead of in an hour; both refuse a run that does not exist.
fn send_reaches_a_loop_inbox_and_wake_an_every_channel(target: &Target) {
    let dir = target.dir();
    write(
        dir,
        "notes.yaml",
        "workflow: notes\nsteps:\n  - id: gather\n    loop:\n      inbox: notes\n      park_timeout: 2s\n      \
         steps:\n        - id: add\n          set: \"{{ loop.input ~ loop.message }}\"\n",
    );
    write(
        dir,
        "ping.yaml",
        "workflow: ping\nsteps:\n  - id: ping\n    every:\n      interval: 1h\n      wake: poke\n      steps:\n        \
         - id: beat\n          set: \"{{ tick }}\"\n",
    );
    let work = || {
        if !target.is_remote() {
            let worker = stepwright(dir, &["worker", "--once"]);
            assert_eq!(worker.status.code(), Some(0), "{}", String::from_utf8_lossy(&worker.stderr));
        }
    };
    let run = run_id(&target.stepwright(&["run", "notes.yaml", "--detach", "--json", "--input", r#""""#]));
    for message in [r#""a""#, r#""b""#] {
        let sent = target.stepwright(&["send", &run, "--inbox", "notes", "--message", message]);
        assert_eq!(sent.status.code(), Some(0), "{}", String::from_utf8_lossy(&sent.stderr));
        assert!(String::from_utf8_lossy(&sent.stdout).contains("sent to inbox notes"));
    }
    work();
    let shown = settled(target, &run);
    assert_eq!((shown["status"].as_str(), &shown["output"]), (Some("completed"), &json!("ab")), "{shown}");

    let ping = run_id(&target.stepwright(&["run", "ping.yaml", "--detach", "--json"]));
    work();
    let beats = || {
        let events = target.stepwright(&["runs", "events", &ping, "--json"]);
        String::from_utf8_lossy(&events.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|e| e["kind"] == "step.completed" && e["path"].as_str().is_some_and(|p| p.ends_with("beat")))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while beats() < 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(beats(), 1, "the first tick, then an hour's wait");
    let woke = target.stepwright(&["wake", &ping, "--channel", "poke"]);
    assert_eq!(woke.status.code(), Some(0), "{}", String::from_utf8_lossy(&woke.stderr));
    work();
    while beats() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(beats(), 2, "woken: the second tick ran now");
    assert_eq!(target.stepwright(&["cancel", &ping]).status.code(), Some(0));

    let nobody = "01890000-0000-7000-8000-00000000dead";
    for args in [&["send", nobody, "--inbox", "notes", "--message", "1"][..], &["wake", nobody, "--channel", "poke"]] {
        let refused = target.stepwright(args);
        assert_eq!(refused.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("not found"),
            "{}",
            String::from_utf8_lossy(&refused.stderr)
        );
    }
    // A name the run does not read would be stored and never taken: refused, with a hint.
    for (args, says) in [
        (
            &["send", &run, "--inbox", "note", "--message", "1"][..],
            "has no inbox `note` (did you mean `notes`?); its workflow \"notes\" reads: `notes`",
        ),
        (&["wake", &ping, "--channel", "poek"], "has no wake channel `poek` (did you mean `poke`?)"),
    ] {
        let refused = target.stepwright(args);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let bad = target.stepwright(&["send", &run, "--inbox", "notes", "--message", "{oops"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--message is not JSON"));
}

/// A durable timer is not a decision: `approve` refuses it and names what the run waits
/// on; `wake --timer` makes it go off now and the run goes on.
fn a_timer_is_woken_not_approved(target: &Target) {
    let dir = target.dir();
    write(dir, "nap.yaml", "workflow: nap\nsteps:\n  - id: nap\n    sleep: 6h\n  - id: up\n    set: awake\n");
    let started = target.stepwright(&["run", "nap.yaml", "--json"]);
    let run = run_id(&started);
    let waiting = settled(target, &run);
    assert_eq!(waiting["status"], "suspended");
    let nap = &waiting["steps"][0];
    assert!(nap["waiting_for"].as_str().is_some_and(|w| w.starts_with("a timer until 20")), "{waiting}");
    let text = String::from_utf8_lossy(&target.stepwright(&["runs", "show", &run]).stdout).into_owned();
    assert!(text.contains("waits for a timer until"), "{text}");
    let approved = target.stepwright(&["approve", &run]);
    assert_eq!(approved.status.code(), Some(2));
    let said = String::from_utf8_lossy(&approved.stderr);
    assert!(said.contains("has no open interrupt; it waits on") && said.contains("(a timer)"), "{said}");
    let woke = target.stepwright(&["wake", &run, "--timer"]);
    assert_eq!(woke.status.code(), Some(0), "{}", String::from_utf8_lossy(&woke.stderr));
    let shown = settled(target, &run);
    assert_eq!((shown["status"].as_str(), &shown["output"]), (Some("completed"), &json!("awake")), "{shown}");
    let activities: Vec<&str> =
        shown["steps"][0]["spans"].as_array().unwrap().iter().map(|s| s["activity"].as_str().unwrap()).collect();
    assert!(activities.contains(&"timer"), "{shown}");
    let text = String::from_utf8_lossy(&target.stepwright(&["runs", "show", &run]).stdout).into_owned();
    assert!(text.contains("waiting for a timer"), "{text}");
    let again = target.stepwright(&["wake", &run, "--timer"]);
    assert_eq!(again.status.code(), Some(2), "a finished run has no timer to wake");
}

/// A step that runs a while is shown running — its attempt and its time so far — by
/// `runs show` and `runs events` before it ends, whatever its effect.
fn a_running_step_is_shown_running_with_its_time_so_far(target: &Target) {
    let dir = target.dir();
    write(
        dir,
        "slow.yaml",
        "workflow: slow\ntools:\n  nap:\n    command: [sleep, \"3\"]\n    effect: read\nsteps:\n  - id: nap\n    tool: nap\n",
    );
    let mut running =
        target.command(&["run", "slow.yaml", "--json"]).stdout(std::process::Stdio::null()).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let shown = loop {
        let listed = target.stepwright(&["runs", "list", "--json"]);
        let run = String::from_utf8_lossy(&listed.stdout)
            .lines()
            .next()
            .map(|line| serde_json::from_str::<Value>(line).unwrap()["run_id"].as_str().unwrap().to_owned());
        if let Some(run) = run {
            let shown: Value =
                serde_json::from_slice(&target.stepwright(&["runs", "show", &run, "--json"]).stdout).unwrap();
            if shown["steps"].as_array().is_some_and(|steps| !steps.is_empty()) {
                break (run, shown);
            }
        }
        assert!(std::time::Instant::now() < deadline, "the running step was never shown");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let (run, details) = shown;
    let nap = &details["steps"][0];
    assert_eq!(
        (nap["path"].as_str(), nap["status"].as_str(), nap["attempts"].as_u64()),
        (Some("nap"), Some("running"), Some(1)),
        "{details}"
    );
    assert!(nap["started_at"].is_i64() && nap["ended_at"].is_null(), "{details}");
    let text = String::from_utf8_lossy(&target.stepwright(&["runs", "show", &run]).stdout).into_owned();
    let row = text.lines().find(|line| line.trim_start().starts_with("nap ")).unwrap_or_default().to_owned();
    assert!(row.contains("running") && row.contains('…'), "the time so far: {text}");
    let events = String::from_utf8_lossy(&target.stepwright(&["runs", "events", &run, "--json"]).stdout).into_owned();
    assert!(events.lines().any(|line| line.contains("\"step.started\"") && line.contains("\"nap\"")), "{events}");
    assert!(running.wait().unwrap().success());
}

/// A `wait` is answered by a message, not a decision: `respond` says so, and how.
fn a_decision_for_a_wait_says_how_to_answer_it(target: &Target) {
    let dir = target.dir();
    write(dir, "paid.yaml", "workflow: paid\nsteps:\n  - id: payment\n    wait: { event: payment, timeout: 1d }\n");
    let run = run_id(&target.stepwright(&["run", "paid.yaml", "--json"]));
    assert_eq!(settled(target, &run)["status"], "suspended");
    let refused = target.stepwright(&["respond", &run, "--value", "1"]);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    let how = format!("it waits on the event `payment` at payment (send it: stepwright send {run} --inbox payment");
    assert!(said.contains(&how), "{said}");
    assert_eq!(target.stepwright(&["cancel", &run]).status.code(), Some(0));
}

/// A mistyped flag is answered with the flag that exists.
#[test]
fn a_mistyped_flag_gets_the_one_that_exists() {
    let dir = tempfile::tempdir().unwrap();
    let typed = stepwright(dir.path(), &["run", "flow.yaml", "--inputs", "{}"]);
    assert_eq!(typed.status.code(), Some(2));
    let said = String::from_utf8_lossy(&typed.stderr);
    assert!(said.contains("a similar argument exists: '--input'"), "{said}");
}

/// The run as `runs show --json` prints it once it no longer runs (at most 10 s).
pub(crate) fn settled(target: &Target, run: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let shown: Value = serde_json::from_slice(&target.stepwright(&["runs", "show", run, "--json"]).stdout).unwrap();
        if !matches!(shown["status"].as_str(), Some("running" | "pending")) || std::time::Instant::now() > deadline {
            return shown;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_run_killed_mid_way_is_finished_by_resume() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "slow.yaml",
        "workflow: slow\nsteps:\n  - id: first\n    set: 1\n  - id: nap\n    sleep: 3s\n  - id: last\n    set: \"{{ steps.first.output + 1 }}\"\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_stepwright"))
        .current_dir(dir.path())
        .env_remove("STEPWRIGHT_DB")
        .args(["run", "slow.yaml", "--json"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    child.kill().unwrap(); // SIGKILL, mid-sleep
    child.wait().unwrap();
    let listed = stepwright(dir.path(), &["runs", "list", "--json"]);
    let line: Value = serde_json::from_str(String::from_utf8_lossy(&listed.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(line["status"], "running", "the killed process left the run running");
    let run = line["run_id"].as_str().unwrap().to_owned();
    let resumed = stepwright(dir.path(), &["resume", &run, "--json"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&resumed.stdout).unwrap()["output"], 2);
    let events = stepwright(dir.path(), &["runs", "events", &run, "--json"]);
    assert_eq!(events.status.code(), Some(0));
}

/// The runs in a store, as `runs list --json` prints them.
fn listed(dir: &Path, db: &[&str]) -> Vec<Value> {
    let mut args = db.to_vec();
    args.extend(["runs", "list", "--json"]);
    lines_of(&stepwright(dir, &args))
}

/// Each line of the output, as JSON.
fn lines_of(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Ctrl-C stops the command, not the work: locally the run is left to `resume`; remotely the
/// server goes on with it.
fn ctrl_c_stops_the_command_and_the_run_is_finished(target: &Target) {
    write(
        target.dir(),
        "slow.yaml",
        "workflow: slow\nsteps:\n  - id: first\n    set: 1\n  - id: nap\n    sleep: 2s\n  - id: last\n    set: \"{{ steps.first.output + 1 }}\"\n",
    );
    let child = target
        .command(&["run", "slow.yaml", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the run is in the store, the command is waiting on it and on Ctrl-C.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while lines_of(&target.stepwright(&["runs", "list", "--json"])).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the run never appeared in the store");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let interrupt = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(interrupt.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(output.stdout.is_empty(), "no output for a run that did not finish");
    let runs = lines_of(&target.stepwright(&["runs", "list", "--json"]));
    assert_eq!(runs.len(), 1);
    let run = runs[0]["run_id"].as_str().unwrap().to_owned();
    let report = if target.is_remote() {
        assert!(stderr.contains("interrupted; the server goes on with the run"), "{stderr}");
        settled(target, &run)
    } else {
        assert!(stderr.contains("interrupted; the run stays resumable"), "{stderr}");
        assert_eq!(runs[0]["status"], "running", "the run is left as it was, to be resumed");
        let resumed = target.stepwright(&["resume", &run, "--json"]);
        assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
        serde_json::from_slice(&resumed.stdout).unwrap()
    };
    assert_eq!((report["status"].as_str(), &report["output"]), (Some("completed"), &serde_json::json!(2)));
    // `first` ran once: the rest of the run took its output from the journal.
    let shown: Value = serde_json::from_slice(&target.stepwright(&["runs", "show", &run, "--json"]).stdout).unwrap();
    assert_eq!(shown["steps"][0]["path"], "first");
    assert_eq!(shown["steps"][0]["attempts"], 1);
}

#[test]
fn workers_share_one_postgres_database() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let Some(url) = runtime.block_on(stepwright::backends::postgres::test_url("workers_share_one_postgres_database"))
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "double.yaml",
        "workflow: double\nsteps:\n  - id: nap\n    sleep: 300ms\n  - id: twice\n    set: \"{{ input.n * 2 }}\"\n",
    );
    let db = ["--db", url.as_str()];
    let mut runs = Vec::new();
    for n in 0..8 {
        let input = format!(r#"{{"n": {n}}}"#);
        let created = stepwright(
            dir.path(),
            &[&db[..], &["run", "double.yaml", "--detach", "--json", "--input", &input]].concat(),
        );
        assert_eq!(created.status.code(), Some(0), "{}", String::from_utf8_lossy(&created.stderr));
        runs.push((run_id(&created), n));
    }
    let workers: Vec<std::process::Child> = (0..2)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_stepwright"))
                .current_dir(dir.path())
                .args(["--db", &url, "worker"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let finished = loop {
        let done = listed(dir.path(), &db).iter().filter(|r| r["status"] == "completed").count();
        if done == runs.len() || std::time::Instant::now() > deadline {
            break done;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    for mut worker in workers {
        let _ = worker.kill();
        let _ = worker.wait();
    }
    assert_eq!(finished, runs.len(), "the two workers finished every run");
    for (run, n) in runs {
        let shown: Value = serde_json::from_slice(
            &stepwright(dir.path(), &[&db[..], &["runs", "show", &run, "--json"]].concat()).stdout,
        )
        .unwrap();
        assert_eq!(shown["output"], n * 2, "{shown}");
        // Each step completed on its first attempt.
        for step in shown["steps"].as_array().unwrap() {
            assert_eq!(step["attempts"], 1, "{shown}");
        }
    }
}

fn an_unknown_run_id_is_a_usage_error(target: &Target) {
    let nobody = "01890000-0000-7000-8000-00000000dead";
    for command in [&["runs", "show"][..], &["runs", "events"], &["approve"], &["resume"], &["cancel"], &["replay"]] {
        let mut args = command.to_vec();
        args.push(nobody);
        let output = target.stepwright(&args);
        assert_eq!(output.status.code(), Some(2), "{command:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let said = format!("stepwright: run {nobody} was not found");
        if target.is_remote() {
            // The server's error code and status follow.
            assert_eq!(stderr.trim(), format!("{said} (not_found, HTTP 404)"), "{command:?}");
        } else {
            assert_eq!(stderr.trim(), said, "{command:?}");
        }
    }
}

/// A model that answers at once with fixed usage.
fn instant_model() -> stepwright::llm::ScriptedModel {
    stepwright::llm::ScriptedModel::new(|_request| stepwright::llm::ChatResponse {
        id: None,
        content: "fine".into(),
        tool_calls: Vec::new(),
        finish_reason: stepwright::llm::FinishReason::Stop,
        usage: stepwright::llm::Usage { input_tokens: 1000, output_tokens: 100, ..Default::default() },
        model: "instant-1".into(),
    })
}

#[test]
fn runs_show_sums_model_usage_and_cost_per_step() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let run = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
        let store = Arc::new(stepwright::backends::SqliteStore::open(&path).unwrap());
        let mut models = stepwright::llm::Models::new();
        let pricing = stepwright::llm::Pricing::per_million(2.0, 10.0);
        models.bind_adapter("fast", "instant-1", Arc::new(instant_model()), Some(pricing));
        let ask = |id: &str| {
            stepwright::Node::dyn_step(id, stepwright::llm::LlmStep::new(stepwright::llm::LlmSpec::new("fast")))
                .input(stepwright::InputSource::WorkflowInput)
        };
        let workflow = stepwright::Workflow::builder("asks").step(ask("first")).step(ask("second")).build().unwrap();
        let engine =
            stepwright::Engine::builder().store(store as Arc<dyn stepwright::Store>).service(Arc::new(models)).build();
        // In the namespace of the key the remote half below calls with.
        let caller = stepwright::Caller { tenant: Some("acme".into()), ..stepwright::Caller::default() };
        let options = stepwright::StartOptions { caller, ..stepwright::StartOptions::default() };
        engine.start_with(&workflow, serde_json::json!("how are you?"), options).await.unwrap().run_id.to_string()
    });
    let db = format!("sqlite://{}", path.display());
    let show = stepwright(dir.path(), &["--db", &db, "runs", "show", &run, "--json"]);
    assert_eq!(show.status.code(), Some(0), "{}", String::from_utf8_lossy(&show.stderr));
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    // Each call: 1000 × $2 + 100 × $10 per million = $0.003.
    assert_eq!(shown["usage"]["calls"], 2);
    assert_eq!(shown["usage"]["input_tokens"], 2000);
    assert!((shown["usage"]["cost_usd"].as_f64().unwrap() - 0.006).abs() < 1e-12, "{}", shown["usage"]);
    assert_eq!(shown["steps"][0]["usage"]["output_tokens"], 100);
    let text = stepwright(dir.path(), &["--db", &db, "runs", "show", &run]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("model usage:  2 call(s), 2000 in / 200 out tokens, $0.006000"), "{text}");

    // Over a server on the same store: the same details, the same table.
    let key = crate::support::api_key(dir.path(), &db, "ann", &["operator"]);
    let serving = crate::support::serve(dir.path(), &db);
    let remote = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_stepwright"))
            .current_dir(dir.path())
            .env_remove("STEPWRIGHT_DB")
            .env("STEPWRIGHT_SERVER", &serving.base)
            .env("STEPWRIGHT_API_KEY", &key)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap()
    };
    let over_http: Value = serde_json::from_str(&remote(&["runs", "show", &run, "--json"])).unwrap();
    assert_eq!(over_http, shown);
    assert_eq!(remote(&["runs", "show", &run]), text);
}

#[test]
fn schema_prints_the_file_formats_json_schema() {
    let dir = tempfile::tempdir().unwrap();
    let out = stepwright(dir.path(), &["schema"]);
    assert_eq!(out.status.code(), Some(0));
    let schema: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(schema["required"], serde_json::json!(["workflow", "steps"]), "{}", schema["required"]);
    let step = &schema["$defs"]["Step"]["properties"];
    for kind in ["set", "llm", "agent", "tool", "workflow", "memory.store", "loop", "if"] {
        assert!(step.get(kind).is_some(), "no `{kind}` in a step's schema");
    }
    // A reader that stops early is not an error.
    let mut child = Command::new(env!("CARGO_BIN_EXE_stepwright"))
        .arg("schema")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `runs erase` deletes one finished run (never a live one); `runs prune` deletes finished
/// runs older than a duration, of one status if asked; what they removed is said.
#[test]
fn runs_erase_and_prune_delete_finished_runs() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    write(dir, "greet.yaml", GREET);
    write(dir, "gated.yaml", GATED);
    let done: Vec<String> = ["ann", "bo", "cy"]
        .iter()
        .map(|name| {
            run_id(&stepwright(dir, &["run", "greet.yaml", "--json", "--input", &format!(r#"{{"name": "{name}"}}"#)]))
        })
        .collect();
    let waiting = run_id(&stepwright(dir, &["run", "gated.yaml", "--json"]));

    let refused = stepwright(dir, &["runs", "erase", &waiting]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is suspended: only a finished run is erased"));
    let erased = stepwright(dir, &["runs", "erase", &done[0], "--json"]);
    assert_eq!(erased.status.code(), Some(0), "{}", String::from_utf8_lossy(&erased.stderr));
    let removed: Value = serde_json::from_slice(&erased.stdout).unwrap();
    assert_eq!(removed["runs"], 1);
    assert_eq!(stepwright(dir, &["runs", "show", &done[0]]).status.code(), Some(2), "gone");

    let pruned = |args: &[&str]| -> Value {
        let output = stepwright(dir, &[&["runs", "prune", "--json"][..], args].concat());
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    assert_eq!(pruned(&["--older-than", "1h"])["runs"], 0, "nothing is an hour old");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(pruned(&["--older-than", "10ms", "--status", "failed"])["runs"], 0, "no failed run");
    assert_eq!(pruned(&["--older-than", "10ms"])["runs"], 2, "the two completed runs left");
    let listed = String::from_utf8_lossy(&stepwright(dir, &["runs", "list", "--json"]).stdout).into_owned();
    assert_eq!(listed.lines().count(), 1, "the suspended run stays: {listed}");
    assert!(listed.contains(&waiting));
    let text = stepwright(dir, &["runs", "prune", "--older-than", "1d"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("pruned 0 run(s); 0 blob(s)"));
    // The step cache ages with the runs: a kept output is forgotten once older than the cut.
    write(dir, "cached.yaml", "workflow: cached\nsteps:\n  - id: a\n    set: 1\n    cache: true\n");
    assert_eq!(stepwright(dir, &["run", "cached.yaml"]).status.code(), Some(0));
    assert_eq!(pruned(&["--older-than", "1h"])["cached"], 0, "kept just now");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(pruned(&["--older-than", "10ms"])["cached"], 1, "older than 10 ms");
    let bad = stepwright(dir, &["runs", "prune", "--older-than", "1d", "--status", "running"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("prune deletes finished runs only"));
}

/// In plain mode a finished `run` says its run id (on stderr: stdout stays the output), and a
/// run waiting on a timer says until when.
#[test]
fn a_plain_run_says_its_id_and_a_timer_says_until_when() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    write(dir, "greet.yaml", GREET);
    write(dir, "nap.yaml", "workflow: nap\nsteps:\n  - id: nap\n    sleep: 2h\n");
    let done = stepwright(dir, &["run", "greet.yaml", "--input", r#"{"name": "ed"}"#]);
    assert_eq!(done.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&done.stdout).trim(), r#""HELLO, ED""#, "stdout is the output alone");
    let listed: Value = serde_json::from_str(
        String::from_utf8_lossy(&stepwright(dir, &["runs", "list", "--json"]).stdout).lines().next().unwrap(),
    )
    .unwrap();
    let said = String::from_utf8_lossy(&done.stderr).into_owned();
    assert!(said.contains(&format!("run {} completed", listed["run_id"].as_str().unwrap())), "{said}");
    let napping = stepwright(dir, &["run", "nap.yaml"]);
    assert_eq!(napping.status.code(), Some(3), "waiting");
    let said = String::from_utf8_lossy(&napping.stderr).into_owned();
    assert!(said.contains("at nap: a timer, until 20"), "{said}");
    let nap = run_id_of_newest(dir);
    let shown = String::from_utf8_lossy(&stepwright(dir, &["runs", "show", &nap]).stdout).into_owned();
    assert!(shown.contains("  wakes at 20"), "{shown}");
    // A failed run shows its error.
    write(dir, "broken.yaml", "workflow: broken\nsteps:\n  - id: bad\n    set: \"{{ input.nothing.here }}\"\n");
    assert_eq!(stepwright(dir, &["run", "broken.yaml", "--input", "{}"]).status.code(), Some(1));
    let shown =
        String::from_utf8_lossy(&stepwright(dir, &["runs", "show", &run_id_of_newest(dir)]).stdout).into_owned();
    assert!(shown.contains("  error: expression: "), "{shown}");
}

fn run_id_of_newest(dir: &Path) -> String {
    let listed = stepwright(dir, &["runs", "list", "--json"]);
    let newest: Value = serde_json::from_str(String::from_utf8_lossy(&listed.stdout).lines().next().unwrap()).unwrap();
    newest["run_id"].as_str().unwrap().to_owned()
}

/// Log lines on a pipe are plain text: no terminal colour codes in a file or a CI log.
#[test]
fn logs_on_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.yaml", GREET);
    let ran = crate::support::command(dir.path(), &["run", "greet.yaml", "--input", r#"{"name": "bo"}"#])
        .env("STEPWRIGHT_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(0));
    let logs = String::from_utf8_lossy(&ran.stderr);
    assert!(logs.contains("DEBUG") || logs.contains("INFO"), "some log lines to check: {logs}");
    assert!(!logs.contains('\u{1b}'), "{logs:?}");
}

/// A failure to start says its message once (an error that already ends with its cause, or
/// whose cause repeats it, is not printed twice).
#[test]
fn a_start_failure_says_its_message_once() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.yaml", GREET);
    write(
        dir.path(),
        "mcp.yaml",
        "workflow: m\nmcp_servers:\n  s: { command: /nonexistent/bin }\nsteps:\n  - id: a\n    tool: s.x\n",
    );
    for (args, said) in [
        (&["run", "greet.yaml", "--input", "{}"][..], "input_validation: the workflow input does not match"),
        (&["run", "mcp.yaml"], "starting MCP server \"s\""),
    ] {
        let failed = stepwright(dir.path(), args);
        let text = String::from_utf8_lossy(&failed.stderr).into_owned();
        assert_eq!(text.matches(said).count(), 1, "{args:?}: {text}");
    }
}

/// A run that waits only for a time (an `every`'s next tick) says until when, not nothing.
#[test]
fn a_run_waiting_for_its_next_tick_says_until_when() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "ping.yaml",
        "workflow: ping\nsteps:\n  - id: ping\n    every:\n      interval: 1h\n      wake: poke\n      steps:\n        - id: beat\n          set: \"{{ tick }}\"\n",
    );
    let ran = stepwright(dir.path(), &["run", "ping.yaml"]);
    assert_eq!(ran.status.code(), Some(3), "suspended");
    let said = String::from_utf8_lossy(&ran.stderr);
    assert!(said.contains("is waiting:\n  its next wake-up, at 20"), "{said}");
    assert!(said.contains("--channel NAME"), "{said}");
}
