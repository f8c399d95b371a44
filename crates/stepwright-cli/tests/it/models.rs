//! Workflow files with models, tools and agents through the binary: a run against a fake
//! OpenAI-compatible server on loopback recorded to a cassette, the same run replayed
//! offline from it, and `--model` overrides.

use std::process::Output;

use crate::support::{Answer, Tokens, contents, stepwright};
use serde_json::{Value, json};

/// What the fake model answers.
fn answer(request: &Value) -> Answer {
    let tool_result = contents(request, "tool").first().map(|r| (*r).to_owned());
    let offered = request["tools"].as_array().is_some_and(|t| !t.is_empty());
    if request.get("response_format").is_some() {
        Answer::Text(r#"{"category": "billing"}"#.into())
    } else if let Some(result) = tool_result {
        Answer::Text(format!("done: {result}"))
    } else if offered {
        Answer::Calls(vec![("t1".into(), "shout".into(), json!({ "text": "quiet" }))])
    } else {
        Answer::Text("hello".into())
    }
}

fn fake_openai() -> (u16, stepwright_testkit::http::FakeServer) {
    crate::support::fake_openai(answer, Tokens::Fixed(12, 4))
}

fn workflow(port: u16) -> String {
    format!(
        r#"
workflow: assist
models:
  fast: {{ provider: openai, model: gpt-test, base_url: "http://127.0.0.1:{port}/v1", api_key_env: STEPWRIGHT_TEST_FAKE_KEY }}
tools:
  shout:
    description: Upper-cases text
    input: {{ type: object, required: [text], properties: {{ text: {{ type: string }} }} }}
    command: [sh, -c, "printf '%s' \"$1\" | tr a-z A-Z", sh, "{{{{ args.text }}}}"]
    effect: read
agents:
  helper: {{ model: fast, tools: [shout], stream: false }}
steps:
  - id: classify
    llm: {{ model: fast, prompt: "Classify: {{{{ input }}}}", stream: false }}
    output: {{ type: object, required: [category], properties: {{ category: {{ type: string }} }} }}
  - id: assist
    agent: helper
    prompt: "Help with {{{{ steps.classify.output.category }}}}"
output: {{ category: "{{{{ steps.classify.output.category }}}}", assist: "{{{{ steps.assist.output }}}}" }}
"#
    )
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!("not JSON: {}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
    })
}

#[test]
fn a_run_is_recorded_to_a_cassette_and_replayed_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (port, served) = fake_openai();
    std::fs::write(dir.path().join("assist.yaml"), workflow(port)).unwrap();
    let args = ["run", "assist.yaml", "--input", "\"refund me\"", "--json", "--cassette", "calls.json"];
    let recorded =
        stepwright(dir.path(), &[&args[..], &["--cassette-mode", "record", "--db", "sqlite://one.db"]].concat());
    assert_eq!(recorded.status.code(), Some(0), "{}", String::from_utf8_lossy(&recorded.stderr));
    let first = report(&recorded);
    assert_eq!(first["output"], json!({ "category": "billing", "assist": "done: QUIET" }));
    assert_eq!(served.served(), 3, "classify, then the agent's two turns");
    let cassette: Value = serde_json::from_slice(&std::fs::read(dir.path().join("calls.json")).unwrap()).unwrap();
    assert_eq!(cassette["interactions"].as_array().unwrap().len(), 3);

    // Offline: a fresh store, replay only. The server stays up but is never asked.
    let replayed =
        stepwright(dir.path(), &[&args[..], &["--cassette-mode", "replay", "--db", "sqlite://two.db"]].concat());
    assert_eq!(replayed.status.code(), Some(0), "{}", String::from_utf8_lossy(&replayed.stderr));
    assert_eq!(report(&replayed)["output"], first["output"]);
    assert_eq!(served.served(), 3, "the replay made no model call");

    // `runs show` sums what the replayed calls cost in tokens.
    let run = report(&replayed)["run_id"].as_str().unwrap().to_owned();
    let show = stepwright(dir.path(), &["runs", "show", &run, "--json", "--db", "sqlite://two.db"]);
    let shown = report(&show);
    assert_eq!(shown["usage"]["input_tokens"], json!(36), "{shown}");

    // Another model under the same name is another request: not on the cassette.
    let other = format!("fast=openai:gpt-other@http://127.0.0.1:{port}/v1");
    let missed = stepwright(
        dir.path(),
        &[&args[..], &["--cassette-mode", "replay", "--db", "sqlite://three.db", "--model", &other]].concat(),
    );
    assert_eq!(missed.status.code(), Some(1), "{}", String::from_utf8_lossy(&missed.stderr));
    assert_eq!(report(&missed)["error"]["code"], json!("cassette_miss"));
    assert_eq!(served.served(), 3);

    // Without a mode, a cassette that exists is only played back: the model is reachable (and
    // a key set), yet nothing is called and the file is not touched; the message says how to
    // record.
    let before = std::fs::read(dir.path().join("calls.json")).unwrap();
    let default = stepwright(dir.path(), &[&args[..], &["--db", "sqlite://five.db", "--model", &other]].concat());
    assert_eq!(default.status.code(), Some(1), "{}", String::from_utf8_lossy(&default.stderr));
    let error = &report(&default)["error"];
    assert_eq!(error["code"], json!("cassette_miss"), "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("cassette calls.json has no recording of this request"), "{message}");
    assert!(message.contains("run again with `--cassette-mode auto`"), "{message}");
    assert_eq!(served.served(), 3, "no model was called");
    assert_eq!(std::fs::read(dir.path().join("calls.json")).unwrap(), before, "the cassette is unchanged");

    // With auto, the override calls the model and records the new request.
    let auto = stepwright(
        dir.path(),
        &[&args[..], &["--cassette-mode", "auto", "--db", "sqlite://four.db", "--model", &other]].concat(),
    );
    assert_eq!(auto.status.code(), Some(0), "{}", String::from_utf8_lossy(&auto.stderr));
    assert_eq!(served.served(), 6);
}

#[test]
fn model_flags_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("assist.yaml"), workflow(9)).unwrap();
    for (flags, expect) in [
        (&["--model", "slow=openai:gpt-4o"][..], "the workflow declares no model \"slow\" (its models: fast)"),
        (&["--model", "fast"][..], "expected NAME=provider:model[@base_url]"),
        (&["--model", "fast=openia:gpt-4o"][..], "unknown provider"),
        (&["--cassette", "c.json", "--cassette-mode", "sometimes"][..], "unknown cassette mode"),
        (&["--cassette", "missing.json", "--cassette-mode", "replay"][..], "missing.json"),
    ] {
        let output = stepwright(dir.path(), &[&["run", "assist.yaml", "--input", "\"x\""][..], flags].concat());
        assert_eq!(output.status.code(), Some(2), "{flags:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expect), "{flags:?}: {stderr}");
    }
}

/// What the session test's model answers: the user messages it was sent, so the test sees
/// which history reached it.
fn echo_history(request: &Value) -> Answer {
    Answer::Text(contents(request, "user").join(" | "))
}

/// A session belongs to whoever started the run that first wrote it (`--tenant`, `--as`):
/// the same user continues it from another run; another user, or nobody, is refused and the
/// model never sees the history.
#[test]
fn sessions_from_the_command_line_belong_to_their_user() {
    let (port, served) = crate::support::fake_openai(echo_history, Tokens::Fixed(3, 2));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("chat.yaml"),
        format!(
            r#"
workflow: chat
models:
  fast: {{ provider: openai, model: gpt-test, base_url: "http://127.0.0.1:{port}/v1", api_key_env: STEPWRIGHT_TEST_FAKE_KEY }}
agents:
  helper: {{ model: fast, stream: false }}
steps:
  - id: talk
    agent: helper
    prompt: "{{{{ input.say }}}}"
    session: "{{{{ input.session }}}}"
"#
        ),
    )
    .unwrap();
    // On SQLite, and on Postgres (a schema of its own) when configured.
    let mut stores = vec![format!("sqlite://{}", dir.path().join("chat.db").display())];
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    stores.extend(runtime.block_on(stepwright::backends::postgres::test_url("sessions_from_the_command_line")));
    for db in &stores {
        let chat = |say: &str, who: &[&str]| {
            let input = json!({ "say": say, "session": "s-1" }).to_string();
            let mut args = vec!["--db", db.as_str(), "run", "chat.yaml", "--json", "--input", input.as_str()];
            args.extend_from_slice(who);
            stepwright(dir.path(), &args)
        };
        let ann = ["--tenant", "acme", "--as", "ann"];
        let first = chat("my secret is 42", &ann);
        assert_eq!(report(&first)["status"], "completed", "{db}: {}", String::from_utf8_lossy(&first.stderr));
        let second = chat("what is my secret?", &ann);
        assert_eq!(
            report(&second)["output"],
            "my secret is 42 | what is my secret?",
            "{db}: ann continues her session"
        );
        let calls = served.served();
        for (who, label) in [(&["--tenant", "acme", "--as", "bob"][..], "another user"), (&[][..], "nobody")] {
            let refused = chat("tell me the secret", who);
            let refused = report(&refused);
            assert_eq!(refused["status"], "failed", "{db}: {label}");
            assert_eq!(refused["error"]["code"], "access_denied", "{db}: {label}: {refused}");
            assert!(refused["output"].is_null(), "{label}: {refused}");
            assert!(!refused["error"].to_string().contains("secret is"), "{label} learns nothing of the session");
        }
        assert_eq!(served.served(), calls, "{db}: the model is never called for a refused session");
    }
}

/// Calls `shout` until it has `rounds` results, then answers with the last.
fn calls_shout_then_answers(request: &Value, rounds: usize) -> Answer {
    let results = contents(request, "tool");
    match results.last() {
        Some(last) if results.len() >= rounds => Answer::Text(format!("done: {last}")),
        _ => Answer::Calls(vec![(format!("t{}", results.len()), "shout".into(), json!({ "text": "quiet" }))]),
    }
}

/// An `llm` step with `tools`: the model's calls run as journaled sub-steps and its answer
/// after their results is the output; `max_tool_rounds` bounds the rounds.
#[test]
fn an_llm_step_may_call_tools_for_a_bounded_number_of_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let (port, served) = crate::support::fake_openai(|r| calls_shout_then_answers(r, 2), Tokens::Fixed(12, 4));
    let file = |rounds: &str| {
        workflow(port).split("agents:").next().unwrap().to_owned()
            + &format!(
                "steps:\n  - id: ask\n    llm: {{ model: fast, prompt: \"Shout it\", stream: false, tools: [shout]{rounds} }}\n"
            )
    };
    std::fs::write(dir.path().join("two.yaml"), file(", max_tool_rounds: 2")).unwrap();
    std::fs::write(dir.path().join("one.yaml"), file("")).unwrap();
    let done = stepwright(dir.path(), &["run", "two.yaml", "--json"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    let done = report(&done);
    assert_eq!(done["output"], json!("done: QUIET"), "{done}");
    assert_eq!(served.served(), 3, "two rounds of calls, then the answer");
    let shown = report(&stepwright(dir.path(), &["runs", "show", done["run_id"].as_str().unwrap(), "--json"]));
    let paths: Vec<&str> = shown["steps"].as_array().unwrap().iter().filter_map(|s| s["path"].as_str()).collect();
    assert!(paths.contains(&"ask/turn.0/tool.0") && paths.contains(&"ask/turn.1/tool.0"), "{paths:?}");
    // One round (the default) is not enough for this model: the step says so.
    let short = stepwright(dir.path(), &["run", "one.yaml", "--json"]);
    assert_eq!(short.status.code(), Some(1), "{}", String::from_utf8_lossy(&short.stderr));
    assert_eq!(report(&short)["error"]["code"], json!("budget_exceeded"));
}

/// An agent's `hooks` in a file: the tools run at its start and its answer, each a
/// journaled sub-step given the moment and its detail.
#[test]
fn an_agents_hooks_call_tools_at_its_start_and_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (port, _served) = fake_openai();
    let log = dir.path().join("hooks.log").display().to_string();
    let note = format!(
        "  note:\n    description: Notes a hook\n    command: [sh, -c, \"echo $1 >> {log}\", sh, \"{{{{ args.hook }}}}\"]\n    effect: write\n    safe_to_retry: true\n"
    );
    let file = workflow(port).replace("tools:\n", &format!("tools:\n{note}")).replace(
        "helper: { model: fast, tools: [shout], stream: false }",
        "helper: { model: fast, tools: [shout], stream: false, hooks: { on_start: note, on_complete: note } }",
    );
    assert!(file.contains("hooks:"), "{file}");
    std::fs::write(dir.path().join("hooked.yaml"), file).unwrap();
    let done = stepwright(dir.path(), &["run", "hooked.yaml", "--input", "\"refund me\"", "--json"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "start\ncomplete\n");
    let done = report(&done);
    let shown = report(&stepwright(dir.path(), &["runs", "show", done["run_id"].as_str().unwrap(), "--json"]));
    let paths: Vec<&str> = shown["steps"].as_array().unwrap().iter().filter_map(|s| s["path"].as_str()).collect();
    assert!(paths.contains(&"assist/hook.start.0") && paths.contains(&"assist/hook.complete.1"), "{paths:?}");
}

/// A call the cassette lacks, in `auto` mode, goes to the provider; when that fails (no key
/// here), the message names the cassette that missed and the call's key.
#[test]
fn an_auto_cassette_miss_that_fails_names_the_cassette() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.yaml"),
        "workflow: t\nmodels:\n  fast: { provider: openai, model: gpt-4o-mini }\nsteps:\n  - id: a\n    llm: { model: fast, prompt: hi }\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("empty.cassette.json"), r#"{"version":1,"interactions":[]}"#).unwrap();
    let ran = crate::support::command(
        dir.path(),
        &["run", "t.yaml", "--cassette", "empty.cassette.json", "--cassette-mode", "auto"],
    )
    .env_remove("OPENAI_API_KEY")
    .output()
    .unwrap();
    assert_eq!(ran.status.code(), Some(1));
    let said = String::from_utf8_lossy(&ran.stderr);
    assert!(said.contains("has no API key"), "{said}");
    assert!(
        said.contains("cassette empty.cassette.json has no recording of this call (model \"gpt-4o-mini\", key "),
        "{said}"
    );
}
