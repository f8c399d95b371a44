//! A run's history from the command line, locally and over `--server`: `replay`,
//! `recompute` (with another model) and `fork`, and `runs events` (all of it, or followed).

use crate::cli::{GATED, GREET, run_id, settled, write};
use crate::support::Target;
use serde_json::Value;

local_and_remote!(
    replay_recompute_and_fork_from_the_command_line,
    recompute_answers_a_model_binding_with_another,
    runs_events_renders_the_journal_in_order,
    runs_events_follow_watches_a_run_until_it_finishes,
);

/// The fake model says which model id it was asked for.
fn says_its_model(request: &Value) -> crate::support::Answer {
    crate::support::Answer::Text(format!("I am {}", request["model"].as_str().unwrap_or("?")))
}

fn recompute_answers_a_model_binding_with_another(target: &Target) {
    let dir = target.dir();
    let (port, model) = crate::support::fake_openai(says_its_model, crate::support::Tokens::Fixed(10, 4));
    // The fake model takes any key: PATH is a variable every process has.
    let endpoint = format!("base_url: \"http://127.0.0.1:{port}/v1\", api_key_env: PATH");
    let source = format!(
        "workflow: ask\nmodels:\n  smart: {{ provider: openai, model: gpt-big, {endpoint}, pricing: {{ input: 10, output: 30 }} }}\n  fast: {{ provider: openai, model: gpt-small, {endpoint}, pricing: {{ input: 1, output: 2 }} }}\nsteps:\n  - id: answer\n    llm: {{ model: smart, prompt: Who are you? }}\n"
    );
    write(dir, "ask.yaml", &source);
    let done = target.stepwright(&["run", "ask.yaml", "--json"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    let run = run_id(&done);

    let recomputed = target.stepwright(&["recompute", &run, "--rebind", "smart=fast", "--json"]);
    assert_eq!(recomputed.status.code(), Some(1), "a change exits 1: {}", String::from_utf8_lossy(&recomputed.stderr));
    let report: Value = serde_json::from_slice(&recomputed.stdout).unwrap();
    assert_eq!(report["recomputed_output"], "I am gpt-small", "{report}");
    assert_eq!(report["recorded_output"], "I am gpt-big", "{report}");
    // The same tokens at the cheaper model's prices: the cost delta per step and in all.
    let usage = &report["usage"];
    let cost = |totals: &Value| totals["cost_usd"].as_f64().unwrap();
    assert_eq!(usage["steps"][0]["path"], "answer", "{report}");
    assert!((cost(&usage["before"]) - 0.00022).abs() < 1e-9, "10 in, 4 out at $10/$30: {report}");
    assert!((cost(&usage["after"]) - 0.000018).abs() < 1e-9, "at $1/$2: {report}");
    assert_eq!(usage["after"]["input_tokens"], 10, "{report}");
    // `runs list` has the run's cost: 10 in, 4 out at $10/$30 per million.
    let listed = String::from_utf8_lossy(&target.stepwright(&["runs", "list"]).stdout).into_owned();
    let row = listed.lines().find(|line| line.starts_with(&run)).unwrap_or_else(|| panic!("{listed}"));
    assert!(listed.lines().next().unwrap().contains(" COST "), "{listed}");
    assert_eq!(row.split_whitespace().nth(6), Some("$0.0002"), "{listed}");
    let text = target.stepwright(&["recompute", &run, "--rebind", "smart=fast"]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("usage         answer: 14 → 14 tokens (+0), $0.0002 → $0.000018 (-$0.0002)"), "{text}");
    for (rebind, expect) in [
        ("smart", "--rebind \"smart\": expected NAME=OTHER"),
        ("smart=slow", "\"smart\" cannot be answered by \"slow\": no model is bound to it (bound: fast, smart)"),
    ] {
        let refused = target.stepwright(&["recompute", &run, "--rebind", rebind]);
        assert_eq!(refused.status.code(), Some(2), "{rebind}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains(expect), "{rebind}: {stderr}");
    }
    assert_eq!(model.served(), 3, "the run and two recomputes; nothing refused called a model");
}

fn replay_recompute_and_fork_from_the_command_line(target: &Target) {
    let dir = target.dir();
    write(dir, "greet.yaml", GREET);
    let run = run_id(&target.stepwright(&["run", "greet.yaml", "--input", r#"{"name": "di"}"#, "--json"]));

    let replayed = target.stepwright(&["replay", &run]);
    assert_eq!(replayed.status.code(), Some(0), "{}", String::from_utf8_lossy(&replayed.stderr));
    assert!(String::from_utf8_lossy(&replayed.stdout).trim_end().ends_with("identical"));

    write(dir, "quiet.yaml", &GREET.replace("| upper", "| lower"));
    let recomputed = target.stepwright(&["recompute", &run, "--file", "quiet.yaml", "--json"]);
    assert_eq!(recomputed.status.code(), Some(1), "a change exits 1: {}", String::from_utf8_lossy(&recomputed.stderr));
    let report: Value = serde_json::from_slice(&recomputed.stdout).unwrap();
    assert_eq!(report["recomputed_output"], "hello, di");
    let loud = report["steps"].as_array().unwrap().iter().find(|s| s["path"] == "loud").unwrap();
    assert_eq!(loud["change"], "value_changed");
    assert_eq!(loud["diff"][0], "/: \"HELLO, DI\" → \"hello, di\"");

    let forked =
        target.stepwright(&["fork", &run, "--at", "loud", "--set", r#"{"steps": {"hello": "Bonjour"}}"#, "--json"]);
    assert_eq!(forked.status.code(), Some(0), "{}", String::from_utf8_lossy(&forked.stderr));
    let child = run_id(&forked);
    if target.is_remote() {
        // The server continues a fork itself.
        assert_eq!(settled(target, &child)["output"], "BONJOUR");
    } else {
        let resumed = target.stepwright(&["resume", &child, "--json"]);
        assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
        assert_eq!(serde_json::from_slice::<Value>(&resumed.stdout).unwrap()["output"], "BONJOUR");
    }
    // A finished run has nothing to continue: `resume` says how it ended.
    let again = target.stepwright(&["resume", &child, "--json"]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!((again["status"].as_str(), &again["output"]), (Some("completed"), &serde_json::json!("BONJOUR")));
    let never = target.stepwright(&["fork", &run, "--at", "nowhere"]);
    assert_eq!(never.status.code(), Some(2));
    // In plain mode stdout is the new id alone, and stderr says how the fork goes on.
    let plain = target.stepwright(&["fork", &run, "--at", "loud"]);
    assert_eq!(plain.status.code(), Some(0));
    let id = String::from_utf8_lossy(&plain.stdout).trim().to_owned();
    assert!(id.parse::<stepwright::RunId>().is_ok(), "{id}");
    let said = String::from_utf8_lossy(&plain.stderr).into_owned();
    assert!(said.contains(&format!("run {id} is a fork of {run} before loud; it is ")), "{said}");
    let next = if target.is_remote() { "the server continues it" } else { "`stepwright resume" };
    assert!(said.contains(next), "{said}");
    // `runs show` names the lineage both ways.
    let parent = String::from_utf8_lossy(&target.stepwright(&["runs", "show", &run]).stdout).into_owned();
    assert!(parent.contains("  forks: ") && parent.contains(&child) && parent.contains(&id), "{parent}");
    let shown = String::from_utf8_lossy(&target.stepwright(&["runs", "show", &id]).stdout).into_owned();
    assert!(shown.contains(&format!("  forked from {run} before loud")), "{shown}");
    assert!(shown.contains("  created 20"), "{shown}");
}

/// The `kind` and `path` of each JSON line.
fn kinds(stdout: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| {
            let event: Value = serde_json::from_str(line).unwrap();
            (event["kind"].as_str().unwrap().to_owned(), event["path"].as_str().unwrap().to_owned())
        })
        .collect()
}

fn runs_events_renders_the_journal_in_order(target: &Target) {
    let dir = target.dir();
    write(dir, "greet.yaml", GREET);
    let run = run_id(&target.stepwright(&["run", "greet.yaml", "--input", r#"{"name": "di"}"#, "--json"]));
    let events = target.stepwright(&["runs", "events", &run, "--json"]);
    assert_eq!(events.status.code(), Some(0));
    let expected = [
        ("step.started", "hello"),
        ("step.completed", "hello"),
        ("step.started", "loud"),
        ("step.completed", "loud"),
        ("run.completed", ""),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(k, p)| ((*k).to_owned(), (*p).to_owned())).collect();
    assert_eq!(kinds(&events.stdout), expected);
    let last: Value = serde_json::from_str(String::from_utf8_lossy(&events.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["data"]["output"], "HELLO, DI");
    let text = String::from_utf8_lossy(&target.stepwright(&["runs", "events", &run]).stdout).into_owned();
    assert!(
        text.lines()
            .nth(1)
            .unwrap()
            .contains(r#"step.completed           hello                {"attempt":1,"output":"Hello, di"}"#),
        "{text}"
    );
    // Times for people: ISO 8601 with the date and the offset (`2026-11-24T17:05:03.120+00:00`).
    let at = text.lines().next().unwrap().split(' ').next().unwrap();
    let bytes = at.as_bytes();
    assert!(at.len() >= 24 && bytes[4] == b'-' && bytes[7] == b'-' && bytes[10] == b'T' && bytes[19] == b'.', "{at}");
    assert!(at.ends_with('Z') || at[23..].starts_with(['+', '-']), "{at}");
}

fn runs_events_follow_watches_a_run_until_it_finishes(target: &Target) {
    write(target.dir(), "gated.yaml", GATED);
    let run = run_id(&target.stepwright(&["run", "gated.yaml", "--json"]));
    let follower = target
        .command(&["runs", "events", &run, "--follow", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The follower is watching a suspended run: it must still be running.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let mut follower = follower;
    assert!(follower.try_wait().unwrap().is_none(), "--follow returned before the run finished");
    assert_eq!(target.stepwright(&["approve", &run]).status.code(), Some(0));
    let output = follower.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let seen = kinds(&output.stdout);
    let position = |kind: &str, path: &str| {
        seen.iter()
            .position(|(k, p)| k == kind && p == path)
            .unwrap_or_else(|| panic!("no {kind} at {path:?}: {seen:?}"))
    };
    assert!(position("step.completed", "draft") < position("interrupt.opened", "review"));
    assert!(position("interrupt.opened", "review") < position("interrupt.resolved", "review"));
    assert!(position("interrupt.resolved", "review") < position("step.completed", "review"));
    assert_eq!(seen.last().unwrap().0, "run.completed");
    assert_eq!(seen.iter().filter(|(k, _)| k == "interrupt.opened").count(), 1, "nothing is printed twice");
}

/// A run keeps the files its workflow calls as they were when it started: after a called file
/// changes (or is gone), `approve` continues the run with the definition it started with.
#[test]
fn a_run_goes_on_with_its_called_files_as_they_were_after_they_change() {
    let target = Target::local();
    let dir = target.dir();
    write(dir, "main.yaml", "workflow: main\nsteps:\n  - id: call\n    workflow: parts/gate.yaml\n");
    std::fs::create_dir_all(dir.join("parts")).unwrap();
    let gate =
        "workflow: gate\nsteps:\n  - id: ok\n    approval: { message: Ship it? }\n  - id: done\n    set: shipped\n";
    write(dir, "parts/gate.yaml", gate);
    let run = run_id(&target.stepwright(&["run", "main.yaml", "--json"]));
    assert_eq!(settled(&target, &run)["status"], "suspended");
    write(dir, "parts/gate.yaml", &gate.replace("shipped", "changed on disk"));
    let approved = target.stepwright(&["approve", &run, "--json"]);
    assert_eq!(approved.status.code(), Some(0), "{}", String::from_utf8_lossy(&approved.stderr));
    let shown = settled(&target, &run);
    assert_eq!(
        (&shown["status"], &shown["output"]),
        (&serde_json::json!("completed"), &serde_json::json!("shipped")),
        "{shown}"
    );
}
