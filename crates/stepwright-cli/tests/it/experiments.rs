//! `experiments run`: a changed model binding tried on 50 real past runs. The runs are made
//! against a fake OpenAI-compatible model on loopback whose two models classify differently
//! for one kind of ticket; the experiment must report exactly those runs as changed, never
//! execute the runs' `write` tool again, leave the runs as they were, draw the same sample for
//! the same seed, and stop when its budget is spent.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::{Answer, Tokens, contents, stepwright};

/// The smart model calls a ticket billing when it mentions a charge; the cheap one also when
/// it asks for a refund.
fn classifier(request: &Value) -> Answer {
    // The judge: a refund that became "billing" is worse by the rubric.
    // Only the smart model judges: a judgement from another is no verdict.
    if contents(request, "system").first().is_some_and(|s| s.starts_with("You compare two outputs")) {
        if request["model"] != json!("smart-model") {
            return Answer::Text("judged by the wrong model".into());
        }
        // A judge is shown the run's input: a ticket cannot be judged without it.
        if !contents(request, "user").first().is_some_and(|asked| asked.contains("Input:\n{\n  \"ticket\": \"")) {
            return Answer::Text("judged without the ticket".into());
        }
        return Answer::Text(
            json!({ "verdict": "worse", "reason": "a refund request is not a billing error" }).to_string(),
        );
    }
    let ticket = contents(request, "user").first().copied().unwrap_or_default().to_owned();
    let cheap = request["model"] == json!("cheap-model");
    let billing = ticket.contains("charged") || (cheap && ticket.contains("refund"));
    Answer::Text(json!({ "category": if billing { "billing" } else { "other" } }).to_string())
}

fn workflow(port: u16) -> String {
    format!(
        r#"
workflow: triage
input: {{ type: object, required: [ticket], properties: {{ ticket: {{ type: string }} }} }}
models:
  smart: {{ provider: openai, model: smart-model, base_url: "http://127.0.0.1:{port}/v1", api_key_env: STEPWRIGHT_TEST_FAKE_KEY, pricing: {{ input: 5, output: 15 }} }}
  cheap: {{ provider: openai, model: cheap-model, base_url: "http://127.0.0.1:{port}/v1", api_key_env: STEPWRIGHT_TEST_FAKE_KEY, pricing: {{ input: 0.15, output: 0.6 }} }}
tools:
  notify:
    command: [sh, -c, "echo \"$1\" >> notified.log", sh, "{{{{ args.category }}}}"]
    effect: write
steps:
  - id: classify
    llm: {{ model: smart, prompt: "Classify: {{{{ input.ticket }}}}", stream: false }}
    output: {{ type: object, required: [category], properties: {{ category: {{ enum: [billing, other] }} }} }}
  - id: notify
    tool: notify
    with: {{ category: "{{{{ steps.classify.output.category }}}}" }}
output: "{{{{ steps.classify.output }}}}"
"#
    )
}

/// The tickets: every fifth asks for a refund without mentioning a charge.
fn ticket(i: usize) -> String {
    match i % 5 {
        0 | 1 => format!("I was charged twice for order {i}"),
        2 => format!("Please refund order {i}"),
        3 => format!("Where is my parcel {i}?"),
        _ => format!("I was charged and want a refund for order {i}"),
    }
}

fn json_of(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!("not JSON: {}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
    })
}

/// The ids of the runs an experiment's report calls changed, sorted.
fn changed_runs(report: &Value) -> Vec<String> {
    let mut changed: Vec<String> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["changed"] == json!(true))
        .map(|r| r["run"].as_str().unwrap().to_owned())
        .collect();
    changed.sort();
    changed
}

fn lines(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("notified.log")).unwrap_or_default().lines().count()
}

#[test]
fn an_experiment_reports_exactly_the_runs_a_new_model_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (port, served) = crate::support::fake_openai(classifier, Tokens::Fixed(12, 4));
    std::fs::write(dir.path().join("triage.yaml"), workflow(port)).unwrap();
    let mut refunds = Vec::new();
    for i in 0..50 {
        let input = json!({ "ticket": ticket(i) }).to_string();
        let ran = stepwright(dir.path(), &["run", "triage.yaml", "--input", &input, "--json"]);
        assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
        if i % 5 == 2 {
            refunds.push(json_of(&ran)["run_id"].as_str().unwrap().to_owned());
        }
    }
    refunds.sort();
    assert_eq!((lines(dir.path()), served.served()), (50, 50));
    let listed_before = stepwright(dir.path(), &["runs", "list", "--json", "--limit", "100"]).stdout;

    std::fs::write(
        dir.path().join("cheaper.yaml"),
        "experiment: cheaper\nruns: { workflow: triage }\nchange: { rebind: { smart: cheap } }\nconcurrency: 4\n\
         evaluators:\n  - { name: shape, schema: { required: [category] } }\n  \
         - { name: same-category, compare: new.category == old.category }\n  \
         - { name: judge, judge: { model: smart, rubric: Is the category right for the ticket? } }\n",
    )
    .unwrap();
    let ran = stepwright(dir.path(), &["experiments", "run", "cheaper.yaml", "--json", "--fail-on", "regressed>0"]);
    assert_eq!(ran.status.code(), Some(1), "--fail-on regressed>0: {}", String::from_utf8_lossy(&ran.stderr));
    assert!(String::from_utf8_lossy(&ran.stderr).contains("--fail-on regressed>0"));
    let report = json_of(&ran);
    let totals = &report["totals"];
    assert_eq!(report["status"], json!("completed"));
    assert_eq!(
        [&totals["runs"], &totals["changed"], &totals["unchanged"], &totals["regressed"], &totals["improved"]],
        [&json!(50), &json!(10), &json!(40), &json!(10), &json!(0)],
        "{totals}"
    );
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(changed_runs(&report), refunds, "exactly the refund tickets changed");
    let one = runs.iter().find(|r| r["run"] == json!(refunds[0])).unwrap();
    assert_eq!(one["diff"], json!([r#"/category: "other" → "billing""#]), "{one}");
    // The step that changed, with its own diff (its model call's record aside).
    assert_eq!(
        one["step_changes"],
        json!([{ "path": "classify", "change": "value_changed", "diff": [r#"/category: "other" → "billing""#] }]),
        "{one}"
    );
    assert_eq!(one["changed_steps"], json!(["classify"]));
    assert_eq!(one["verdict"], json!("regressed"));
    // Its `notify` write was served, not executed — and its input changed: the report says
    // what it would have been given. An unchanged run's write would get what it got.
    assert_eq!(one["would_execute"], json!([{ "step": "notify", "input": { "category": "billing" } }]), "{one}");
    assert_eq!(totals["would_execute"], json!(10));
    assert_eq!(one["scores"][0], json!({ "name": "shape", "old": 1.0, "new": 1.0 }));
    assert_eq!(one["scores"][1], json!({ "name": "same-category", "old": null, "new": -1.0 }));
    // The judge (the workflow's own `smart` binding, not the rebound one) was asked about the
    // ten changed runs only, and said why.
    assert_eq!(
        one["scores"][2],
        json!({ "name": "judge", "old": null, "new": -1.0, "reason": "a refund request is not a billing error" })
    );
    let unchanged = runs.iter().find(|r| r["changed"] == json!(false)).unwrap();
    assert_eq!(unchanged.get("would_execute"), None, "{unchanged}");
    assert_eq!(unchanged["scores"][2], json!({ "name": "judge", "old": null, "new": 0.0 }), "not asked");
    assert!((totals["evaluation_cost_usd"].as_f64().unwrap() - 0.0012).abs() < 1e-9, "{totals}");
    assert_eq!(report["look_first"].as_array().unwrap().len(), 10);
    // Every run's one model call was made again, on the cheaper model: the cost fell.
    assert_eq!((&totals["before"]["calls"], &totals["after"]["calls"]), (&json!(50), &json!(50)));
    let (before, after) =
        (totals["cost_per_1000_before"].as_f64().unwrap(), totals["cost_per_1000_after"].as_f64().unwrap());
    assert!((before - 0.12).abs() < 1e-9 && (after - 0.0042).abs() < 1e-9, "{before} → {after}");
    assert_eq!(served.served(), 110, "50 recomputed calls and 10 judgements");
    // The models' time then and now: each call's latency, summed (the loopback model answers
    // in a few milliseconds, never in none).
    let latency = |when: &str| totals[when]["latency_ms"].as_f64().unwrap();
    assert!(latency("before") > 0.0 && latency("after") > 0.0, "{totals}");
    assert!(one["usage"]["after"]["latency_ms"].as_f64().unwrap() > 0.0, "{one}");
    // The `write` tool ran no more (its step is served from each run's journal), and the runs
    // are as they were.
    assert_eq!(lines(dir.path()), 50, "no write executed again");
    assert_eq!(stepwright(dir.path(), &["runs", "list", "--json", "--limit", "100"]).stdout, listed_before);

    // The table says the same.
    let table = stepwright(dir.path(), &["experiments", "run", "cheaper.yaml"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert_eq!(table.status.code(), Some(0), "no --fail-on: {text}");
    assert!(text.contains("50 runs: 10 changed, 40 unchanged; 0 improved, 10 regressed, 0 failed"), "{text}");
    assert!(text.contains("cost per 1,000 runs $0.1200 → $0.0042; model time per run "), "{text}");
    assert!(text.contains("10 runs would execute a write with another input (not executed"), "{text}");
    assert!(text.contains(&format!("  {}:\n    classify /category: \"other\" → \"billing\"", refunds[0])), "{text}");
    assert!(
        text.contains(&format!(
            "{:<38} regressed  yes      would execute a write at notify with {{\"category\":\"billing\"}}; \
             /category: \"other\" → \"billing\"",
            refunds[0]
        )),
        "{text}"
    );

    // A new version of the file (classify on the cheap model): compiled, not registered, the same
    // runs change; a file of another workflow is refused.
    std::fs::write(
        dir.path().join("triage-v2.yaml"),
        workflow(port).replace("llm: { model: smart", "llm: { model: cheap"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("v2.yaml"),
        "experiment: v2\nruns: { workflow: triage }\nchange: { file: triage-v2.yaml }\n",
    )
    .unwrap();
    let v2 = json_of(&stepwright(dir.path(), &["experiments", "run", "v2.yaml", "--json"]));
    assert_eq!((&v2["totals"]["changed"], &v2["totals"]["unchanged"]), (&json!(10), &json!(40)), "{}", v2["totals"]);
    std::fs::write(dir.path().join("other.yaml"), "workflow: other\nsteps:\n  - id: a\n    set: 1\n").unwrap();
    std::fs::write(
        dir.path().join("wrong.yaml"),
        "experiment: wrong\nruns: { workflow: triage }\nchange: { file: other.yaml }\n",
    )
    .unwrap();
    let wrong = stepwright(dir.path(), &["experiments", "run", "wrong.yaml"]);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("is workflow \"other\", but the runs are of \"triage\""),
        "{wrong:?}"
    );
    assert_eq!(lines(dir.path()), 50);

    // No change: each run's own definition again, nothing changes.
    std::fs::write(dir.path().join("same.yaml"), "experiment: same\nruns: { workflow: triage, sample: 5, seed: 3 }\n")
        .unwrap();
    let sampled = |file: &str| {
        let out = stepwright(dir.path(), &["experiments", "run", file, "--json", "--fail-on", "changed>=1"]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let report = json_of(&out);
        report["runs"].as_array().unwrap().iter().map(|r| r["run"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    let first = sampled("same.yaml");
    assert_eq!(first.len(), 5);
    assert_eq!(sampled("same.yaml"), first, "the same seed draws the same runs");

    // A budget: one cheap call costs $0.0000042; at one run at a time, the third passes $0.00001.
    std::fs::write(
        dir.path().join("budget.yaml"),
        "experiment: capped\nruns: { workflow: triage }\nchange: { rebind: { smart: cheap } }\nconcurrency: 1\n\
         budget_usd: 0.00001\n",
    )
    .unwrap();
    let capped = stepwright(dir.path(), &["experiments", "run", "budget.yaml", "--json"]);
    let report = json_of(&capped);
    assert_eq!(report["status"], json!("budget_spent"), "{report}");
    assert_eq!((&report["totals"]["runs"], &report["totals"]["skipped"]), (&json!(3), &json!(47)));
    assert_eq!(lines(dir.path()), 50);

    // The one-line form: no file, the flags say the same; `--model` replaces the binding with
    // another model (not one the file has) and is kept with the experiment.
    let cheap = format!("smart=openai:cheap-model@http://127.0.0.1:{port}/v1");
    let args = ["experiments", "run", "--workflow", "triage", "--model", &cheap, "--sample", "20", "--seed", "7"];
    let compare = ["--compare", "new.category == old.category", "--json"];
    let inline = stepwright(dir.path(), &[&args[..], &compare[..]].concat());
    assert_eq!(inline.status.code(), Some(0), "{}", String::from_utf8_lossy(&inline.stderr));
    let report = json_of(&inline);
    let drawn: Vec<String> =
        report["runs"].as_array().unwrap().iter().map(|r| r["run"].as_str().unwrap().to_owned()).collect();
    std::fs::write(
        dir.path().join("twenty.yaml"),
        "experiment: twenty\nruns: { workflow: triage, sample: 20, seed: 7 }\n",
    )
    .unwrap();
    assert_eq!(sampled("twenty.yaml"), drawn, "the flags draw the sample a file with the same seed draws");
    let changed = changed_runs(&report);
    let expected: Vec<String> = refunds.iter().filter(|r| drawn.contains(r)).cloned().collect();
    assert!(!expected.is_empty(), "the sample holds refund tickets");
    assert_eq!(changed, expected, "exactly the sampled refund tickets changed");
    let one = report["runs"].as_array().unwrap().iter().find(|r| r["run"] == json!(expected[0])).unwrap();
    assert_eq!(one["scores"][0], json!({ "name": "compare", "old": null, "new": -1.0 }), "{one}");
    let said = String::from_utf8_lossy(&inline.stderr).into_owned();
    let id = said.strip_prefix("experiment ").and_then(|rest| rest.split(':').next()).expect("the experiment's id");
    let shown = json_of(&stepwright(dir.path(), &["experiments", "show", id, "--json"]));
    let spec = &shown["spec"];
    assert_eq!(spec["change"]["models"], json!({ "smart": cheap.trim_start_matches("smart=") }), "{spec}");
    let kept: Vec<&str> = spec["runs"]["ids"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert_eq!(kept, drawn, "the population is kept as the runs drawn");
    assert_eq!(spec["experiment"], json!("triage from the command line"));
    let again = stepwright(dir.path(), &["experiments", "resume", id, "--model", "smart=openai:other"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("goes on with the models it started with"), "{again:?}");
    // A flag beside a file, and a flag without `--workflow`, are refused before anything runs.
    for refused in [
        &["experiments", "run", "cheaper.yaml", "--workflow", "triage"][..],
        &["experiments", "run", "--sample", "3"][..],
        &["experiments", "run", "--workflow", "triage", "--rebind", "smart"][..],
        &["experiments", "run", "--workflow", "triage", "--sample", "0"][..],
    ] {
        let out = stepwright(dir.path(), refused);
        assert_eq!(out.status.code(), Some(2), "{refused:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(lines(dir.path()), 50);
}

#[test]
fn an_experiment_file_is_checked_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    for (file, says) in [
        ("experiment: e\nruns: { workflow: w }\nshots: 3\n", "unknown field `shots`"),
        (
            "experiment: e\nruns: { workflow: w }\nevaluators: [{ name: a, check: 'output ==' }]\n",
            "`check` does not parse",
        ),
        ("experiment: e\nruns: { workflow: w }\nchange: { file: missing.yaml }\n", "missing.yaml cannot be read"),
    ] {
        std::fs::write(dir.path().join("e.yaml"), file).unwrap();
        let out = stepwright(dir.path(), &["experiments", "run", "e.yaml"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(stderr.contains(says), "{file}: {stderr}");
    }
    let bad = stepwright(dir.path(), &["experiments", "run", "e.yaml", "--fail-on", "regresed>0"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected TOTAL>N"), "{bad:?}");
    assert!(!dir.path().join("stepwright.db").exists(), "a bad file opens no store");
}

/// `stepwright --db DB ARGS` in `dir`.
fn on(dir: &Path, db: &str, args: &[&str]) -> std::process::Output {
    let all: Vec<&str> = ["--db", db].into_iter().chain(args.iter().copied()).collect();
    stepwright(dir, &all)
}

/// An experiment is kept as it goes: killed mid-way (SIGKILL), `experiments resume ID` goes on
/// and recomputes only the runs it had not finished — the read tool the runs call counts
/// exactly those — then `list` and `show` read it back, and a second `resume` is refused. On
/// SQLite, and on Postgres when `STEPWRIGHT_TEST_DATABASE_URL` is set.
#[test]
fn a_killed_experiment_resumes_without_recomputing_what_it_finished() {
    crate::support::on_each_store("experiment_resumes", |dir, db| {
        let looked = || std::fs::read_to_string(dir.join("looked.log")).unwrap_or_default().lines().count();
        let (mut child, id) = slow_experiment_started(dir, db, std::process::Stdio::null());
        let kept = || recomputed_so_far(dir, db, &id);
        child.kill().unwrap();
        child.wait().unwrap();
        let (finished, looked_at_kill) = (kept(), looked());
        assert!((3..8).contains(&finished), "killed mid-way: {finished} kept");
        let text = String::from_utf8_lossy(&on(dir, db, &["experiments", "show", &id]).stdout).into_owned();
        assert!(text.contains(&format!("running; {finished} of 8 runs recomputed and kept so far")), "{text}");

        let resumed = on(dir, db, &["experiments", "resume", &id, "--json"]);
        assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
        let report = json_of(&resumed);
        assert_eq!((&report["status"], &report["totals"]["runs"]), (&json!("completed"), &json!(8)), "{report}");
        assert_eq!(report["totals"]["unchanged"], json!(8), "the same definition, the same outputs");
        assert_eq!(looked() - looked_at_kill, 8 - finished as usize, "only the runs not kept were recomputed");

        let listed = json_of(&on(dir, db, &["experiments", "list", "--json"]));
        assert_eq!(listed[0]["id"], json!(id));
        assert_eq!(
            (&listed[0]["experiment"], &listed[0]["status"], &listed[0]["runs"]),
            (&json!("again"), &json!("completed"), &json!(8))
        );
        let shown = json_of(&on(dir, db, &["experiments", "show", &id, "--json"]));
        assert_eq!(shown["report"], report, "show prints the kept report");
        assert_eq!((&shown["status"], &shown["recomputed"]), (&json!("completed"), &json!(8)));
        let again = on(dir, db, &["experiments", "resume", &id]);
        assert_eq!(again.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&again.stderr).contains("has ended (completed)"), "{again:?}");
    });
}

/// Eight runs of a workflow whose read tool takes 0.3 s (and counts its calls in
/// `looked.log`), and an experiment over them started in a child process (one at a time),
/// returned once it has kept three results, with its id.
fn slow_experiment_started(dir: &Path, db: &str, stdout: std::process::Stdio) -> (std::process::Child, String) {
    std::fs::write(
        dir.join("slow.yaml"),
        "workflow: slow\ntools:\n  look:\n    command: [sh, -c, 'echo x >> looked.log; sleep 0.3; echo done']\n    \
         effect: read\nsteps:\n  - id: look\n    tool: look\n",
    )
    .unwrap();
    for _ in 0..8 {
        let ran = on(dir, db, &["run", "slow.yaml", "--json"]);
        assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    }
    assert_eq!(std::fs::read_to_string(dir.join("looked.log")).unwrap().lines().count(), 8);
    std::fs::write(dir.join("again.yaml"), "experiment: again\nruns: { workflow: slow }\nconcurrency: 1\n").unwrap();
    let mut child = crate::support::command(dir, &["--db", db, "experiments", "run", "again.yaml", "--json"])
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stderr.take().unwrap()), &mut first).unwrap();
    let id = first.split_whitespace().nth(1).unwrap().trim_end_matches(':').to_owned();
    assert!(first.contains("8 runs"), "{first}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while recomputed_so_far(dir, db, &id) < 3 {
        assert!(std::time::Instant::now() < deadline, "the experiment kept nothing");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (child, id)
}

fn recomputed_so_far(dir: &Path, db: &str, id: &str) -> u64 {
    json_of(&on(dir, db, &["experiments", "show", id, "--json"]))["recomputed"].as_u64().unwrap()
}

/// `experiments cancel` from another process stops a running experiment before its next
/// run: the process at work ends it `cancelled` with what it recomputed, and it is then
/// neither cancelled again nor resumed. On SQLite, and on Postgres when set.
#[test]
fn an_experiment_is_cancelled_from_another_process() {
    crate::support::on_each_store("experiment_cancelled", |dir, db| {
        let (child, id) = slow_experiment_started(dir, db, std::process::Stdio::piped());
        let cancelled = on(dir, db, &["experiments", "cancel", &id]);
        assert_eq!(cancelled.status.code(), Some(0), "{cancelled:?}");
        let ended = child.wait_with_output().unwrap();
        assert_eq!(ended.status.code(), Some(0), "{}", String::from_utf8_lossy(&ended.stderr));
        let report: Value = serde_json::from_slice(&ended.stdout).unwrap();
        let (runs, skipped) =
            (report["totals"]["runs"].as_u64().unwrap(), report["totals"]["skipped"].as_u64().unwrap());
        assert_eq!(report["status"], json!("cancelled"), "{report}");
        assert!((3..8).contains(&runs) && runs + skipped == 8, "stopped mid-way: {runs} recomputed, {skipped} not");
        let looked = std::fs::read_to_string(dir.join("looked.log")).unwrap().lines().count() as u64;
        assert_eq!(looked, 8 + runs, "no run was started that the report does not hold");
        let shown = json_of(&on(dir, db, &["experiments", "show", &id, "--json"]));
        assert_eq!((&shown["status"], &shown["report"]), (&json!("cancelled"), &report));
        let again = on(dir, db, &["experiments", "cancel", &id]);
        assert_eq!(again.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&again.stderr).contains("has ended (cancelled)"), "{again:?}");
        let resumed = on(dir, db, &["experiments", "resume", &id]);
        assert!(String::from_utf8_lossy(&resumed.stderr).contains("has ended (cancelled)"), "{resumed:?}");
    });
}

/// The cheap model, answering slowly: an experiment on it can be killed mid-way.
fn slow_classifier(request: &Value) -> Answer {
    if request["model"] == json!("cheap-model") {
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    classifier(request)
}

/// A `--model` is kept with the experiment: killed mid-way (SIGKILL), `experiments resume` with
/// no flag recomputes the rest with that model too — the refund ticket it had not reached
/// changes as the cheap model classifies it. On SQLite, and on Postgres when set.
#[test]
fn a_resumed_experiment_recomputes_with_the_model_it_started_with() {
    crate::support::on_each_store("experiment_kept_model", |dir, db| {
        let (port, _served) = crate::support::fake_openai(slow_classifier, Tokens::Fixed(12, 4));
        std::fs::write(dir.join("triage.yaml"), workflow(port)).unwrap();
        let mut refunds = Vec::new();
        for i in 0..10 {
            let input = json!({ "ticket": ticket(i) }).to_string();
            let ran = on(dir, db, &["run", "triage.yaml", "--input", &input, "--json"]);
            assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
            if i % 5 == 2 {
                refunds.push(json_of(&ran)["run_id"].as_str().unwrap().to_owned());
            }
        }
        let cheap = format!("smart=openai:cheap-model@http://127.0.0.1:{port}/v1");
        let args = ["--db", db, "experiments", "run", "--workflow", "triage", "--model", &cheap, "--concurrency", "1"];
        let mut child = crate::support::command(dir, &args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stderr.take().unwrap()), &mut first).unwrap();
        let id = first.split_whitespace().nth(1).unwrap().trim_end_matches(':').to_owned();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while recomputed_so_far(dir, db, &id) < 1 {
            assert!(std::time::Instant::now() < deadline, "the experiment kept nothing");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let finished = recomputed_so_far(dir, db, &id);
        assert!(finished < 7, "killed before the second refund ticket (the 8th run): {finished} kept");

        let resumed = on(dir, db, &["experiments", "resume", &id, "--json"]);
        assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
        let report = json_of(&resumed);
        assert_eq!(report["totals"]["runs"], json!(10), "{report}");
        refunds.sort();
        assert_eq!(changed_runs(&report), refunds, "the runs recomputed after the resume used the kept model too");
    });
}

/// A change that adds a write step: the experiment reports, per run, the write it would do and
/// with what, and does none — the tool's log has no line more.
#[test]
fn an_experiment_does_not_run_a_write_step_the_change_adds() {
    let dir = tempfile::tempdir().unwrap();
    let (port, _served) = crate::support::fake_openai(classifier, Tokens::Fixed(12, 4));
    let v1 = workflow(port);
    std::fs::write(dir.path().join("triage.yaml"), &v1).unwrap();
    for i in [0, 3] {
        let input = json!({ "ticket": ticket(i) }).to_string();
        let ran = stepwright(dir.path(), &["run", "triage.yaml", "--input", &input, "--json"]);
        assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    }
    assert_eq!(lines(dir.path()), 2);
    let again = "  - id: notify-again\n    tool: notify\n    with: { category: \"again {{ steps.classify.output.category }}\" }\noutput:";
    // Before the workflow's `output:`, the file's last.
    let at = v1.rfind("output:").unwrap();
    std::fs::write(dir.path().join("triage-v2.yaml"), format!("{}{again}{}", &v1[..at], &v1[at + "output:".len()..]))
        .unwrap();
    std::fs::write(
        dir.path().join("again.yaml"),
        "experiment: again\nruns: { workflow: triage }\nchange: { file: triage-v2.yaml }\n",
    )
    .unwrap();
    let tried = stepwright(dir.path(), &["experiments", "run", "again.yaml", "--json"]);
    let report = json_of(&tried);
    assert_eq!(
        lines(dir.path()),
        2,
        "no write ran: {}",
        std::fs::read_to_string(dir.path().join("notified.log")).unwrap()
    );
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{report}");
    let mut said: Vec<Value> = runs.iter().map(|r| r["would_execute"].clone()).collect();
    said.sort_by_key(Value::to_string);
    assert_eq!(
        said,
        [
            json!([{ "step": "notify-again", "input": { "category": "again billing" } }]),
            json!([{ "step": "notify-again", "input": { "category": "again other" } }]),
        ],
        "{report}"
    );
    assert_eq!(report["totals"]["would_execute"], json!(2), "{report}");
}

/// New inputs (a JSON Lines file) tried then and now: each is run fresh in a sandbox with the
/// workflow as its runs ran it, then recomputed on the cheaper model. The `notify` write is
/// served what a past run answered for the same input, else not executed; nothing is written
/// to the store and nothing notified.
#[test]
fn an_experiment_tries_new_inputs_with_the_effects_past_runs_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let (port, served) = crate::support::fake_openai(classifier, Tokens::Fixed(12, 4));
    std::fs::write(dir.path().join("triage.yaml"), workflow(port)).unwrap();
    // Five past runs, all billing: the only `notify` answer recorded is for "billing".
    let mut past = Vec::new();
    for i in 0..5 {
        let input = json!({ "ticket": format!("I was charged twice for order {i}") }).to_string();
        let ran = stepwright(dir.path(), &["run", "triage.yaml", "--input", &input, "--json"]);
        assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
        past.push(json_of(&ran)["run_id"].as_str().unwrap().to_owned());
    }
    let listed_before = stepwright(dir.path(), &["runs", "list", "--json", "--limit", "100"]).stdout;
    assert_eq!((lines(dir.path()), served.served()), (5, 5));
    std::fs::write(
        dir.path().join("cases.jsonl"),
        "{\"ticket\": \"I was charged twice for order 77\"}\n{\"ticket\": \"Please refund order 8\"}\n\
         {\"ticket\": \"Where is my parcel 9?\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("new.yaml"),
        "experiment: new tickets\nruns: { workflow: triage, inputs_file: cases.jsonl }\n\
         change: { rebind: { smart: cheap } }\n\
         evaluators:\n  - { name: same-category, compare: new.category == old.category }\n",
    )
    .unwrap();
    let ran = stepwright(dir.path(), &["experiments", "run", "new.yaml", "--json"]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    assert!(String::from_utf8_lossy(&ran.stderr).contains("3 new inputs, served what 5 recorded runs did"));
    let report = json_of(&ran);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(report["totals"]["runs"], json!(3), "{report}");
    let case =
        |line: u64| runs.iter().find(|r| r["fresh"]["line"] == json!(line)).unwrap_or_else(|| panic!("{report}"));

    // A billing ticket: billing then and now; its notify served the newest past run's answer.
    let billing = case(1);
    assert_eq!(billing["fresh"]["input"], json!({ "ticket": "I was charged twice for order 77" }));
    assert_eq!(billing["fresh"]["served"], json!([{ "step": "notify", "run": past[4] }]), "{billing}");
    assert_eq!((&billing["changed"], &billing["status"]), (&json!(false), &json!("completed")), "{billing}");
    // A refund: "other" then, whose notify no past run performed (not executed: the run then
    // failed there); "billing" now, whose notify a past run answered.
    let refund = case(2);
    assert_eq!(refund["changed"], json!(true), "{refund}");
    assert_eq!(refund["status"], json!("completed"), "{refund}");
    assert_eq!(refund["diff"], json!(["(the run gave no output; the recompute did)"]), "{refund}");
    // A parcel: "other" then and now; notify not executed either time — the same, unchanged.
    let parcel = case(3);
    assert_eq!((&parcel["changed"], &parcel["status"]), (&json!(false), &json!("failed")), "{parcel}");
    assert_eq!(parcel["error"]["code"], json!("not_executed"), "{parcel}");
    assert!(parcel["error"]["message"].as_str().unwrap().contains("no recorded run gave this input"), "{parcel}");
    // Model calls were made then and now (two per input); nothing was notified or kept.
    assert_eq!(served.served(), 5 + 6);
    assert_eq!(lines(dir.path()), 5, "no write executed");
    assert_eq!(stepwright(dir.path(), &["runs", "list", "--json", "--limit", "100"]).stdout, listed_before);

    // Kept as any experiment: listed with its three inputs, shown with their results.
    let id = stepwright(dir.path(), &["experiments", "list", "--json"]);
    let listed = json_of(&id);
    assert_eq!(listed[0]["runs"], json!(3), "{listed}");
    let shown = json_of(&stepwright(dir.path(), &["experiments", "show", listed[0]["id"].as_str().unwrap(), "--json"]));
    assert_eq!(shown["report"]["runs"], report["runs"], "{shown}");

    // The table names an input by its line; a sample draws from the inputs.
    let table = stepwright(dir.path(), &["experiments", "run", "--workflow", "triage", "--inputs", "cases.jsonl"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("input line 3 "), "{text}");
    let sampled = stepwright(
        dir.path(),
        &["experiments", "run", "--workflow", "triage", "--inputs", "cases.jsonl", "--sample", "2", "--json"],
    );
    assert_eq!(json_of(&sampled)["totals"]["runs"], json!(2));
    // A new input's run "then" is made now: it counts against the budget. A case costs
    // $0.00012 then and $0.0000042 now: after two, $0.0002 is spent (not counting "then", all
    // three would be tried).
    std::fs::write(
        dir.path().join("budget.yaml"),
        "experiment: budget\nruns: { workflow: triage, inputs_file: cases.jsonl }\n\
         change: { rebind: { smart: cheap } }\nconcurrency: 1\nbudget_usd: 0.0002\n",
    )
    .unwrap();
    let budget = json_of(&stepwright(dir.path(), &["experiments", "run", "budget.yaml", "--json"]));
    assert_eq!(
        (&budget["status"], &budget["totals"]["runs"], &budget["totals"]["skipped"]),
        (&json!("budget_spent"), &json!(2), &json!(1)),
        "{budget}"
    );

    // A line that is not JSON is named, and a blank one (an input's place is its line); so
    // is a population with no recorded run.
    for (text, said) in
        [("{\"ticket\": \"a\"}\n{oops\n", "bad.jsonl:2: not a JSON value"), ("1\n\n2\n", "bad.jsonl:2: a blank line")]
    {
        std::fs::write(dir.path().join("bad.jsonl"), text).unwrap();
        let bad = stepwright(dir.path(), &["experiments", "run", "--workflow", "triage", "--inputs", "bad.jsonl"]);
        assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
        assert!(String::from_utf8_lossy(&bad.stderr).contains(said), "{}", String::from_utf8_lossy(&bad.stderr));
    }
    let none = stepwright(
        dir.path(),
        &["experiments", "run", "--workflow", "triage", "--inputs", "cases.jsonl", "--status", "failed"],
    );
    assert!(String::from_utf8_lossy(&none.stderr).contains("no recorded run of \"triage\" matches"), "{none:?}");
    // The same of past runs: an empty population is said, not read as every run.
    let none = stepwright(dir.path(), &["experiments", "run", "--workflow", "triage", "--status", "failed"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no run of \"triage\" matches"), "{none:?}");
}

/// A server killed (SIGKILL) mid-experiment: a server started again on the same store takes
/// the experiment up — the process that held it is gone — and goes on without recomputing
/// what was kept: every run is recomputed once, the one under way at the kill at most twice,
/// and the experiment completes with no one asking. On SQLite, and on Postgres when set.
#[test]
fn a_server_takes_up_the_experiment_of_a_server_that_died() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    crate::support::on_each_store("experiment_taken_up", |dir, db| {
        let looked = || std::fs::read_to_string(dir.join("looked.log")).unwrap_or_default().lines().count();
        let key = crate::support::api_key(dir, db, "ann", &["admin", "operator"]);
        let mut first = crate::support::serve(dir, db);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let http = reqwest::Client::new();
        let call = |base: String, method: reqwest::Method, path: &str, body: Option<Value>| {
            let mut request = http.request(method, format!("{base}{path}")).bearer_auth(&key);
            if let Some(body) = body {
                request = request.json(&body);
            }
            async move {
                let response = request.send().await.unwrap();
                (response.status().as_u16(), response.json::<Value>().await.unwrap_or(Value::Null))
            }
        };
        let slow = "workflow: slow\ntools:\n  look:\n    command: [sh, -c, 'echo x >> looked.log; sleep 0.3; echo done']\n    \
                    effect: read\nsteps:\n  - id: look\n    tool: look\n";
        let id = runtime.block_on(async {
            let post =
                |path: &'static str, body: Value| call(first.base.clone(), reqwest::Method::POST, path, Some(body));
            assert_eq!(post("/v1/workflows", json!({ "source": slow })).await.0, 201);
            for _ in 0..8 {
                let (status, run) = post("/v1/runs", json!({ "workflow": "slow", "wait_seconds": 10 })).await;
                assert_eq!((status, &run["status"]), (201, &json!("completed")), "{run}");
            }
            let spec = json!({ "experiment": "again", "runs": { "workflow": "slow" }, "concurrency": 1 });
            let (status, started) = post("/v1/experiments", spec).await;
            assert_eq!(status, 202, "{started}");
            started["id"].as_str().unwrap().to_owned()
        });
        let show = |base: &str| {
            runtime.block_on(call(base.to_owned(), reqwest::Method::GET, &format!("/v1/experiments/{id}"), None)).1
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while show(&first.base)["recomputed"].as_u64().unwrap_or(0) < 3 {
            assert!(std::time::Instant::now() < deadline, "the experiment kept nothing");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        first.child.kill().unwrap();
        first.child.wait().unwrap();
        let looked_at_kill = looked();
        let second = crate::support::serve(dir, db);
        let kept_at_kill = show(&second.base)["recomputed"].as_u64().unwrap();
        assert!((3..8).contains(&kept_at_kill), "killed mid-way: {kept_at_kill} kept");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let shown = loop {
            let shown = show(&second.base);
            if shown["status"] == json!("completed") {
                break shown;
            }
            assert!(std::time::Instant::now() < deadline, "not taken up: {shown}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        let totals = &shown["report"]["totals"];
        assert_eq!((&totals["runs"], &totals["unchanged"]), (&json!(8), &json!(8)), "{shown}");
        let again = looked() - looked_at_kill;
        let left = 8 - kept_at_kill as usize;
        assert!(again == left || again == left + 1, "{again} recomputed after the kill, {left} were left");
    });
}
