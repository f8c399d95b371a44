//! Traces, exported to a real OTLP receiver on loopback and decoded with the official
//! protobuf definitions: the span tree and its attributes, one trace per activation linked
//! to the one before, nothing executed twice across a crash, and a replay's own trace.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepwright_testkit::openai::{Answer, Tokens};
use stepwright_testkit::otlp::{OtlpReceiver, ReceivedSpan};

use crate::support::{command, fake_openai, on_each_store};

/// The llm step's request has no tools; the agent's first turn calls `lookup`, its second
/// `crash` (which kills the process the first time), its third answers.
fn script(request: &Value) -> Answer {
    if request["tools"].is_null() {
        return Answer::Text("a summary".into());
    }
    let results = request["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    match results {
        0 => Answer::Calls(vec![("call-1".into(), "lookup".into(), json!({ "q": "rust" }))]),
        1 => Answer::Calls(vec![("call-2".into(), "crash".into(), json!({}))]),
        _ => Answer::Text("researched".into()),
    }
}

fn workflow(port: u16) -> String {
    format!(
        r#"
workflow: traced
models:
  fast: {{ provider: openai, model: gpt-test, base_url: "http://127.0.0.1:{port}/v1", api_key_env: STEPWRIGHT_TEST_FAKE_KEY }}
tools:
  lookup:
    description: Looks a thing up
    input: {{ type: object, properties: {{ q: {{ type: string }} }} }}
    command: [sh, -c, "printf found"]
    effect: read
  crash:
    description: Kills the process that runs it, the first time (after its finished spans were exported)
    input: {{ type: object }}
    command: [sh, -c, "[ -e crashed ] || {{ touch crashed; sleep 1; kill -9 $PPID; sleep 5; }}; printf survived"]
    effect: read
agents:
  helper: {{ model: fast, tools: [lookup, crash], stream: false }}
steps:
  - id: summarize
    llm: {{ model: fast, prompt: "Summarize: {{{{ input }}}}", stream: false }}
  - id: research
    agent: helper
    prompt: "Research {{{{ steps.summarize.output }}}}"
  - id: ship
    approval: {{ message: "Ship it?" }}
"#
    )
}

/// `stepwright` exporting to `receiver`, quickly (a batch every 100 ms).
fn traced(dir: &Path, receiver: &OtlpReceiver, args: &[&str]) -> std::process::Output {
    command(dir, args)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .output()
        .expect("run stepwright")
}

/// The spans received once `enough` holds (exports are asynchronous).
fn spans_once(receiver: &OtlpReceiver, enough: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let spans = receiver.spans();
        if enough(&spans) || Instant::now() > deadline {
            return spans;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// On SQLite and on Postgres: each process reads the previous activation's trace context back
/// from the store.
#[test]
fn a_run_is_traced_once_per_activation_across_a_crash_and_a_replay_has_its_own_trace() {
    on_each_store("traced_across_a_crash", traced_across_a_crash);
}

fn traced_across_a_crash(dir: &Path, url: &str) {
    let receiver = OtlpReceiver::start();
    let (port, model) = fake_openai(script, Tokens::Fixed(12, 4));
    std::fs::write(dir.join("traced.yaml"), workflow(port)).unwrap();
    let caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let db = ["--db", url];

    // Activation 1, in the caller's trace: killed by the crash tool mid-agent.
    let first = traced(
        dir,
        &receiver,
        &[&db[..], &["run", "traced.yaml", "--input", "\"rust\"", "--json", "--traceparent", caller]].concat(),
    );
    assert_eq!(first.status.code(), None, "killed: {}", String::from_utf8_lossy(&first.stderr));
    let runs = crate::support::stepwright(dir, &[&db[..], &["runs", "list", "--json"]].concat());
    let listed: Value = serde_json::from_str(String::from_utf8_lossy(&runs.stdout).lines().next().unwrap()).unwrap();
    let run = listed["run_id"].as_str().unwrap().to_owned();

    // Activation 2: the resume finishes the agent and suspends at the approval.
    let resumed = traced(dir, &receiver, &[&db[..], &["resume", &run, "--json"]].concat());
    assert_eq!(resumed.status.code(), Some(3), "suspended: {}", String::from_utf8_lossy(&resumed.stderr));
    // Activation 3: approved, it completes.
    let approved = traced(dir, &receiver, &[&db[..], &["approve", &run, "--json"]].concat());
    assert_eq!(approved.status.code(), Some(0), "{}", String::from_utf8_lossy(&approved.stderr));
    // A replay: its own trace.
    let replayed = traced(dir, &receiver, &[&db[..], &["replay", &run, "--json"]].concat());
    assert_eq!(replayed.status.code(), Some(0), "{}", String::from_utf8_lossy(&replayed.stderr));
    assert_eq!(model.served(), 4, "the model was called once per turn: summarize, then three agent turns");

    let spans = spans_once(&receiver, |s| named(s, "invoke_workflow traced").len() >= 3);
    let roots = named(&spans, "invoke_workflow traced");
    let activation = |kind: &str| -> Vec<&ReceivedSpan> {
        roots.iter().copied().filter(|s| s.str("stepwright.activation") == Some(kind)).collect()
    };
    // The killed activation's root never ended, so it was never exported.
    let (resumes, replays) = (activation("resume"), activation("replay"));
    assert_eq!((resumes.len(), replays.len(), roots.len()), (2, 1, 3), "{roots:#?}");
    for root in &roots {
        assert_eq!(root.service, "stepwright");
        assert_eq!(root.str("stepwright.run.id"), Some(run.as_str()));
        assert_eq!(root.str("gen_ai.operation.name"), Some("invoke_workflow"));
        assert_eq!(root.str("gen_ai.workflow.name"), Some("traced"));
        assert_eq!(root.parent_span_id, "", "an activation is a trace's root");
    }
    let (second, third, replay) = {
        let mut resumes = resumes.clone();
        resumes.sort_by_key(|s| s.str("stepwright.run.status") == Some("completed"));
        (resumes[0], resumes[1], replays[0])
    };
    assert_eq!(second.str("stepwright.run.status"), Some("suspended"));
    assert_eq!(third.str("stepwright.run.status"), Some("completed"));

    // No model or tool call appears twice across the activations. (The replay runs `read`
    // tools again, for real, in its own trace: that is what a replay checks.)
    let chats = named(&spans, "chat gpt-test");
    assert_eq!(chats.len(), 4, "{chats:#?}");
    let tools = |replayed: bool| -> Vec<&str> {
        let mut tools: Vec<&str> = spans
            .iter()
            .filter(|s| s.name.starts_with("execute_tool") && (s.trace_id == replay.trace_id) == replayed)
            .map(|s| s.name.as_str())
            .collect();
        tools.sort_unstable();
        tools
    };
    assert_eq!(tools(false), ["execute_tool crash", "execute_tool lookup"], "each tool call once");
    assert_eq!(tools(true), ["execute_tool crash", "execute_tool lookup"], "the replay's own executions");

    // Activation 1 ran in the caller's trace: its finished spans are there.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let in_first: Vec<&str> = spans.iter().filter(|s| s.trace_id == caller_trace).map(|s| s.name.as_str()).collect();
    for name in ["step summarize", "chat gpt-test", "execute_tool lookup"] {
        assert!(in_first.contains(&name), "{name} in the caller's trace: {in_first:?}");
    }
    assert!(!in_first.contains(&"execute_tool crash"), "the crashed call never ended: {in_first:?}");
    // Activation 2 is a trace of its own, linked to activation 1; it served what 1 did.
    assert_ne!(second.trace_id, caller_trace);
    assert_eq!(second.links.len(), 1);
    assert_eq!(second.links[0].0, caller_trace, "linked to the previous activation");
    assert_eq!(second.links[0].2.get("stepwright.link"), Some(&json!("previous_activation")));
    assert_eq!(second.int("stepwright.served.steps"), Some(1), "summarize: {second:#?}");
    assert_eq!(second.int("stepwright.served.calls"), Some(3), "two model turns and the lookup");
    // Activation 3 links to activation 2's root itself; the replay to activation 3's.
    assert_eq!(
        (third.links[0].0.as_str(), third.links[0].1.as_str()),
        (second.trace_id.as_str(), second.span_id.as_str())
    );
    assert_ne!(replay.trace_id, third.trace_id, "a replay has its own trace");
    assert_eq!(
        (replay.links[0].0.as_str(), replay.links[0].1.as_str()),
        (third.trace_id.as_str(), third.span_id.as_str())
    );
    assert_eq!(replay.links[0].2.get("stepwright.link"), Some(&json!("original")));
    assert!(
        spans.iter().filter(|s| s.trace_id == replay.trace_id).all(|s| !s.name.starts_with("chat")),
        "a replay pays for no model call"
    );

    // The tree of activation 2: step → invoke_agent → chat and execute_tool.
    let in_second: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.trace_id == second.trace_id).collect();
    let research = in_second.iter().find(|s| s.name == "step research").expect("the agent's step");
    assert_eq!(research.parent_span_id, second.span_id);
    assert_eq!(research.str("stepwright.step.path"), Some("research"));
    assert_eq!(research.int("stepwright.attempt"), Some(1));
    assert_eq!(research.str("stepwright.step.status"), Some("completed"));
    let agent = in_second.iter().find(|s| s.name == "invoke_agent helper").expect("the agent");
    assert_eq!(agent.parent_span_id, research.span_id);
    assert_eq!(agent.str("gen_ai.agent.name"), Some("helper"));
    let crash = in_second.iter().find(|s| s.name == "execute_tool crash").expect("the crash tool, once");
    assert_eq!(crash.parent_span_id, agent.span_id);
    assert_eq!(crash.str("gen_ai.tool.name"), Some("crash"));
    assert_eq!(crash.str("gen_ai.tool.call.id"), Some("call-2"));
    let last_turn = in_second.iter().find(|s| s.name == "chat gpt-test").expect("the agent's last turn");
    assert_eq!(last_turn.parent_span_id, agent.span_id);
    let ship = in_second.iter().find(|s| s.name == "step ship").expect("the approval");
    assert_eq!(ship.str("stepwright.step.status"), Some("suspended"));

    // A chat span, in the GenAI conventions' terms.
    for chat in &chats {
        assert_eq!(chat.kind, "CLIENT");
        assert_eq!(chat.str("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.str("gen_ai.provider.name"), Some("openai"));
        assert_eq!(chat.str("gen_ai.request.model"), Some("gpt-test"));
        assert_eq!(chat.str("gen_ai.response.model"), Some("gpt-test"));
        assert_eq!(chat.str("gen_ai.output.type"), Some("text"));
        // Where the request went: the fake model on loopback.
        assert_eq!(chat.str("server.address"), Some("127.0.0.1"));
        assert!(chat.int("server.port").is_some_and(|port| port > 0), "{:?}", chat.attributes);
        assert_eq!(chat.str("gen_ai.response.id"), Some("chatcmpl-fake"));
        assert_eq!(
            (chat.int("gen_ai.usage.input_tokens"), chat.int("gen_ai.usage.output_tokens")),
            (Some(12), Some(4))
        );
        let reasons = &chat.attributes["gen_ai.response.finish_reasons"];
        assert!(reasons == &json!(["stop"]) || reasons == &json!(["tool_calls"]), "{reasons}");
    }
    // The model request carried the chat span's context.
    let requests = model.requests();
    for (request, chat) in requests.iter().zip(&chats) {
        let sent = request.headers.get("traceparent").expect("a traceparent on every model request");
        assert_eq!(sent.split('-').nth(1), Some(chat.trace_id.as_str()), "{sent}");
    }
}

#[test]
fn nothing_is_exported_with_otel_off_and_an_unsupported_protocol_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = OtlpReceiver::start();
    std::fs::write(dir.path().join("hello.yaml"), "workflow: hello\nsteps:\n  - id: a\n    set: 1\n").unwrap();
    let args = ["--db", "sqlite://hello.db", "run", "hello.yaml", "--json"];
    let off = traced(dir.path(), &receiver, &[&args[..], &["--otel", "off"]].concat());
    assert_eq!(off.status.code(), Some(0), "{}", String::from_utf8_lossy(&off.stderr));
    let on = traced(dir.path(), &receiver, &args);
    assert_eq!(on.status.code(), Some(0), "{}", String::from_utf8_lossy(&on.stderr));
    let spans = spans_once(&receiver, |s| !s.is_empty());
    assert_eq!(
        named(&spans, "invoke_workflow hello").len(),
        1,
        "only the run with --otel on (the default with an endpoint)"
    );
    assert_eq!(named(&spans, "step a").len(), 1);

    let grpc = command(dir.path(), &args)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    assert_eq!(grpc.status.code(), Some(2));
    let said = String::from_utf8_lossy(&grpc.stderr);
    assert!(said.contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\"") && said.contains("http/protobuf"), "{said}");
}

/// A cassette run's tokens and cost: the spans say what the provider reported (the
/// recordings' usage, to the token), the journal says the same, and the cost on each span
/// is the one computed at the call and journaled with it.
#[test]
fn a_cassette_runs_tokens_and_cost_are_the_providers_figures_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = OtlpReceiver::start();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let cassette = examples.join("refine.cassette.json");
    let file = examples.join("refine.yaml").display().to_string();
    let input = r#"{"brief": "a durable workflow engine for AI agents, in one binary"}"#;
    let args = [
        "--db",
        "sqlite://refine.db",
        "run",
        file.as_str(),
        "--input",
        input,
        "--json",
        "--cassette",
        cassette.to_str().unwrap(),
        "--cassette-mode",
        "replay",
    ];
    let run = traced(dir.path(), &receiver, &args);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let run_id = serde_json::from_slice::<Value>(&run.stdout).unwrap()["run_id"].as_str().unwrap().to_owned();

    let recorded: Value = serde_json::from_slice(&std::fs::read(&cassette).unwrap()).unwrap();
    let mut reported: Vec<(String, i64, i64)> = recorded["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let usage = &i["response"]["usage"];
            let model = i["request"]["model"].as_str().unwrap().to_owned();
            (model, usage["input_tokens"].as_i64().unwrap(), usage["output_tokens"].as_i64().unwrap())
        })
        .collect();
    reported.sort();
    let spans = spans_once(&receiver, |s| !named(s, "invoke_workflow refine").is_empty());
    let chats: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name.starts_with("chat ")).collect();
    let mut exported: Vec<(String, i64, i64)> = chats
        .iter()
        .map(|s| {
            let model = s.str("gen_ai.request.model").unwrap().to_owned();
            (model, s.int("gen_ai.usage.input_tokens").unwrap(), s.int("gen_ai.usage.output_tokens").unwrap())
        })
        .collect();
    exported.sort();
    assert_eq!(exported, reported, "each recorded call once, with the provider's token counts");

    // The cost on each span is the file's prices times the provider's counts.
    let price = |model: &str| match model {
        "gpt-4o-mini" => (0.15, 0.6),
        "gpt-4o" => (2.5, 10.0),
        other => panic!("no price for {other}"),
    };
    let mut total = 0.0;
    for chat in &chats {
        let (input, output) = price(chat.str("gen_ai.request.model").unwrap());
        let tokens = (chat.int("gen_ai.usage.input_tokens").unwrap(), chat.int("gen_ai.usage.output_tokens").unwrap());
        let expected = (tokens.0 as f64 * input + tokens.1 as f64 * output) / 1e6;
        let cost = chat.attributes["stepwright.cost.usd"].as_f64().unwrap();
        assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
        assert_eq!(chat.str("stepwright.cassette"), Some("replayed"));
        total += cost;
    }
    // The journal agrees, to the token and to the cent's fraction.
    let shown =
        crate::support::stepwright(dir.path(), &["--db", "sqlite://refine.db", "runs", "show", &run_id, "--json"]);
    let usage = serde_json::from_slice::<Value>(&shown.stdout).unwrap()["usage"].clone();
    let sum = |i: usize| reported.iter().map(|r| if i == 0 { r.1 } else { r.2 }).sum::<i64>();
    assert_eq!(
        (usage["input_tokens"].as_i64(), usage["output_tokens"].as_i64()),
        (Some(sum(0)), Some(sum(1))),
        "{usage}"
    );
    assert!((usage["cost_usd"].as_f64().unwrap() - total).abs() < 1e-12, "{usage} vs {total}");

    // The metrics exported over OTLP at exit say the same.
    let metric_sum = |name: &str, kind: Option<&str>| -> f64 {
        receiver
            .metric(name)
            .iter()
            .filter(|(attributes, _)| kind.is_none_or(|k| attributes.get("gen_ai.token.type") == Some(&json!(k))))
            .map(|(_, value)| value)
            .sum()
    };
    let tokens = (
        metric_sum("gen_ai.client.token.usage", Some("input")),
        metric_sum("gen_ai.client.token.usage", Some("output")),
    );
    assert_eq!(tokens, (sum(0) as f64, sum(1) as f64), "the token histograms' sums");
    // Each model's figures apart: the model asked for is on the metrics too.
    for (attributes, _) in receiver.metric("gen_ai.client.token.usage") {
        let asked = attributes.get("gen_ai.request.model").and_then(Value::as_str).unwrap_or_default().to_owned();
        assert!(reported.iter().any(|(model, ..)| *model == asked), "{attributes:?}");
    }
    assert!((metric_sum("stepwright.model.cost", None) - total).abs() < 1e-12, "the cost counter");
    assert_eq!(metric_sum("stepwright.runs.finished", None), 1.0);
}

/// Two workflows served: one that completes after a model call, one that fails.
fn served_workflows(port: u16) -> [(&'static str, String); 2] {
    [
        (
            "answers.yaml",
            format!(
                r#"
workflow: answers
models:
  fast: {{ provider: openai, model: gpt-test, base_url: "http://127.0.0.1:{port}/v1", api_key_env: STEPWRIGHT_TEST_FAKE_KEY }}
steps:
  - id: say
    llm: {{ model: fast, prompt: "Say {{{{ input }}}}", stream: true }}
"#
            ),
        ),
        (
            "breaks.yaml",
            "workflow: breaks\ntools:\n  boom:\n    command: [sh, -c, \"exit 3\"]\n    effect: read\nsteps:\n  - id: boom\n    tool: boom\n"
                .to_owned(),
        ),
    ]
}

/// `/metrics` on `serve`, read by prometheus_client's parser (an independent reader):
/// the runs it counts by workflow and status are those `runs list` shows, and the tokens
/// are the provider's.
/// On SQLite and on Postgres.
#[test]
fn metrics_are_served_in_the_prometheus_format_and_agree_with_runs_list() {
    let Some(python) = std::env::var("STEPWRIGHT_TEST_PROMETHEUS_PYTHON").ok().filter(|p| !p.is_empty()) else {
        #[allow(clippy::print_stderr)] // A skipped test says so.
        {
            eprintln!("skipped: STEPWRIGHT_TEST_PROMETHEUS_PYTHON is not set (`.ci/run` installs prometheus_client)");
        }
        return;
    };
    on_each_store("metrics_agree_with_runs_list", |dir, db| metrics_agree_with_runs_list(&python, dir, db));
}

fn metrics_agree_with_runs_list(python: &str, dir: &Path, db: &str) {
    let (port, _model) = fake_openai(|_| Answer::Text("hello there".into()), Tokens::Fixed(12, 4));
    for (name, text) in served_workflows(port) {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let key = crate::support::api_key(dir, db, "ann", &["admin", "operator"]);
    let viewer = crate::support::api_key(dir, db, "bob", &["viewer"]);
    let other = {
        let args = ["--db", db, "keys", "create", "--namespace", "globex", "--user", "gus", "--role", "admin"];
        let output = crate::support::stepwright(dir, &args);
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    };
    const OPERATOR: &str = "the-operators-scrape-token";
    let serving = crate::support::serve_args(
        dir,
        db,
        &[("SCRAPE_TOKEN", OPERATOR)],
        &["--metrics-token-env", "SCRAPE_TOKEN"],
        None,
    );
    let remote = |args: &[&str]| {
        command(dir, &[&["--server", serving.base.as_str()][..], args].concat())
            .env("STEPWRIGHT_API_KEY", &key)
            .output()
            .unwrap()
    };
    for _ in 0..3 {
        let ran = remote(&["run", "answers.yaml", "--input", "\"hi\"", "--json"]);
        assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    }
    for _ in 0..2 {
        let ran = remote(&["run", "breaks.yaml", "--json"]);
        assert_eq!(ran.status.code(), Some(1), "{}", String::from_utf8_lossy(&ran.stderr));
    }

    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let scrape = |key: &str| {
        runtime.block_on(async {
            let response =
                reqwest::Client::new().get(format!("{}/metrics", serving.base)).bearer_auth(key).send().await.unwrap();
            let status = response.status().as_u16();
            let kind = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned());
            (status, kind, response.text().await.unwrap())
        })
    };
    assert_eq!(scrape(&viewer).0, 403, "counts are an admin's to read");
    assert_eq!(scrape("not-a-key-nor-the-token").0, 401);
    // Another namespace's admin sees none of acme's series; the operator's token sees them.
    let (status, _, theirs) = scrape(&other);
    assert_eq!(status, 200, "{theirs}");
    assert!(!theirs.contains("answers") && !theirs.contains("\"acme\""), "another namespace's names leak: {theirs}");
    let (status, _, everything) = scrape(OPERATOR);
    assert_eq!(status, 200, "{everything}");
    assert!(everything.contains("stepwright_namespace=\"acme\"") && everything.contains("target_info"), "{everything}");
    let (status, kind, text) = scrape(&key);
    assert_eq!(status, 200, "{text}");
    assert_eq!(kind.as_deref(), Some("text/plain; version=0.0.4; charset=utf-8"));

    let mut parser = std::process::Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/prometheus/parse.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut parser.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let parsed = parser.wait_with_output().unwrap();
    assert!(parsed.status.success(), "the parser refused it: {}\n{text}", String::from_utf8_lossy(&parsed.stderr));
    let samples: Vec<Value> =
        String::from_utf8_lossy(&parsed.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let value = |name: &str, labels: &[(&str, &str)]| -> f64 {
        samples
            .iter()
            .filter(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
            .map(|s| s["value"].as_f64().unwrap())
            .sum()
    };

    // The runs, as `runs list` shows them.
    let listed = remote(&["runs", "list", "--json"]);
    let runs: Vec<Value> =
        String::from_utf8_lossy(&listed.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 5);
    for (workflow, status) in [("answers", "completed"), ("breaks", "failed")] {
        let listed = runs.iter().filter(|r| r["workflow"] == workflow && r["status"] == status).count() as f64;
        let labels = [("stepwright_workflow", workflow), ("stepwright_run_status", status)];
        assert_eq!(value("stepwright_runs_finished_total", &labels), listed, "{workflow} {status}\n{text}");
        assert_eq!(value("stepwright_runs_started_total", &[("stepwright_workflow", workflow)]), listed);
    }
    // Three calls of 12 input and 4 output tokens, streamed; two failed tool steps.
    let tokens = |kind: &str| value("gen_ai_client_token_usage_sum", &[("gen_ai_token_type", kind)]);
    assert_eq!((tokens("input"), tokens("output")), (36.0, 12.0), "{text}");
    assert_eq!(value("gen_ai_client_operation_duration_seconds_count", &[("gen_ai_provider_name", "openai")]), 3.0);
    assert_eq!(value("gen_ai_client_operation_time_to_first_chunk_seconds_count", &[]), 3.0, "{text}");
    let failed = [("stepwright_workflow", "breaks"), ("stepwright_step_status", "failed")];
    assert_eq!(value("stepwright_step_duration_seconds_count", &failed), 2.0, "{text}");
    assert_eq!(value("stepwright_queue_depth", &[]), 0.0, "nothing waits for a worker");
    // Every sample an admin key reads is its namespace's.
    assert!(samples.iter().all(|s| s["labels"]["stepwright_namespace"] == "acme"), "{text}");
}

/// `--log-format json`: one JSON object per line, each inside a run carrying the spans it is
/// in — the run id, the step path, and the trace id of the activation, which is the trace
/// the exported spans are in.
#[test]
fn json_log_lines_carry_the_run_the_step_and_the_trace() {
    on_each_store("json_log_lines", json_log_lines);
}

fn json_log_lines(dir: &Path, db: &str) {
    let receiver = OtlpReceiver::start();
    let flaky = "workflow: flaky\ntools:\n  once:\n    command: [sh, -c, \"[ -e tried ] || { touch tried; exit 1; }; printf ok\"]\n    effect: read\nsteps:\n  - id: shaky\n    tool: once\n    retry: { max_attempts: 2, initial_delay: 10ms }\n";
    std::fs::write(dir.join("flaky.yaml"), flaky).unwrap();
    let output = command(dir, &["--db", db, "--log-format", "json", "run", "flaky.yaml", "--json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("STEPWRIGHT_LOG", "info")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let run = serde_json::from_slice::<Value>(&output.stdout).unwrap()["run_id"].as_str().unwrap().to_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let line = |message: &str| {
        lines.iter().find(|l| l["message"] == message).unwrap_or_else(|| panic!("no {message:?} in {stderr}"))
    };
    let started = line("activation started");
    assert_eq!(started["level"], "INFO");
    let activation = &started["spans"][0];
    assert_eq!(activation["stepwright.run.id"], json!(run));
    let trace_id = activation["trace_id"].as_str().expect("the activation's trace id").to_owned();
    let retried = line("step attempt failed; retrying");
    let step = retried["spans"].as_array().unwrap().iter().find(|s| s["name"] == "step").expect("the step's span");
    assert_eq!((&step["stepwright.step.path"], &step["stepwright.attempt"]), (&json!("shaky"), &json!(1)));
    assert_eq!(retried["spans"][0]["trace_id"], json!(trace_id), "the same activation");
    assert_eq!(line("activation ended")["status"], "completed");
    // The exported spans are in that trace.
    let spans = spans_once(&receiver, |s| !named(s, "invoke_workflow flaky").is_empty());
    let steps = named(&spans, "step shaky");
    assert_eq!(steps.len(), 2, "two attempts");
    assert!(steps.iter().all(|s| s.trace_id == trace_id));
    assert!(steps.iter().any(|s| s.status == "ERROR" && s.int("stepwright.attempt") == Some(1)), "{steps:#?}");
}

/// W3C Trace Context in and out: `run --traceparent` against a server (the API's
/// `traceparent` header) puts the run's first activation under the caller's span, executed
/// by the server's worker; an HTTP tool's request carries the span of the step that calls it.
#[test]
fn a_callers_trace_reaches_the_run_through_the_api_and_the_run_reaches_its_http_tools() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = OtlpReceiver::start();
    let web = stepwright_testkit::http::FakeServer::responding(|_| {
        stepwright_testkit::http::Reply::json(200, json!({ "ok": true }))
    });
    let file = format!(
        "workflow: called\ntools:\n  web:\n    http: {{ url: \"{}/hook\", method: POST }}\n    effect: read\nsteps:\n  - id: call\n    tool: web\n    with: {{ a: 1 }}\n",
        web.url
    );
    std::fs::write(dir.path().join("called.yaml"), file).unwrap();
    let db = format!("sqlite://{}", dir.path().join("served.db").display());
    let key = crate::support::api_key(dir.path(), &db, "ann", &["admin", "operator"]);
    let serving = crate::support::serve_with(
        dir.path(),
        &db,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()), ("OTEL_BSP_SCHEDULE_DELAY", "100")],
    );
    let caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let ran = command(
        dir.path(),
        &["--server", serving.base.as_str(), "run", "called.yaml", "--json", "--traceparent", caller],
    )
    .env("STEPWRIGHT_API_KEY", &key)
    .output()
    .unwrap();
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));

    // The server exports in batches as spans end: the activation's root ends last, maybe in
    // a later batch than its step's.
    let spans =
        spans_once(&receiver, |s| !named(s, "step call").is_empty() && !named(s, "invoke_workflow called").is_empty());
    let root = named(&spans, "invoke_workflow called");
    assert_eq!(root.len(), 1, "{spans:#?}");
    assert_eq!(root[0].trace_id, "0af7651916cd43dd8448eb211c80319c", "in the caller's trace");
    assert_eq!(root[0].parent_span_id, "b7ad6b7169203331", "under the caller's span");
    let step = named(&spans, "step call")[0];
    assert_eq!(step.parent_span_id, root[0].span_id);
    let sent = web.requests()[0].headers.get("traceparent").cloned().expect("the tool's request carries a traceparent");
    assert_eq!(sent, format!("00-{}-{}-01", step.trace_id, step.span_id), "the step's span is the tool call's parent");

    // A malformed traceparent is ignored, as W3C Trace Context says: the run starts a trace.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let started: Value = runtime.block_on(async {
        let http = reqwest::Client::new();
        let body = json!({ "workflow": "called", "input": null, "wait_seconds": 10 });
        let response = http
            .post(format!("{}/v1/runs", serving.base))
            .bearer_auth(&key)
            .header("traceparent", "00-not-a-trace-01")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 201);
        response.json().await.unwrap()
    });
    assert_eq!(started["status"], "completed");
    let spans = spans_once(&receiver, |s| named(s, "invoke_workflow called").len() >= 2);
    let roots = named(&spans, "invoke_workflow called");
    assert_eq!(roots.len(), 2);
    assert!(roots.iter().any(|r| r.parent_span_id.is_empty() && r.trace_id != root[0].trace_id), "{roots:#?}");
    let refused = command(dir.path(), &["run", "called.yaml", "--traceparent", "00-nope"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "the command line refuses what it cannot read");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is not a W3C traceparent"));
}

/// An MCP call carries its span's context in the request's `_meta` (the MCP conventions'
/// propagation), here to a FastMCP server that says what it received, over stdio and over
/// streamable HTTP; the call is a `tools/call {tool}` CLIENT span under the step, saying how
/// the server is reached and (over HTTP) the session it is in.
#[test]
fn an_mcp_request_carries_the_trace_in_its_meta() {
    let Some(python) = std::env::var("STEPWRIGHT_TEST_FASTMCP_PYTHON").ok().filter(|p| !p.is_empty()) else {
        #[allow(clippy::print_stderr)] // A skipped test says so.
        {
            eprintln!("skipped: STEPWRIGHT_TEST_FASTMCP_PYTHON is not set (`.ci/run` installs FastMCP)");
        }
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fastmcp/server.py");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut http = std::process::Command::new(&python)
        .args([script.to_str().unwrap(), "http", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "FastMCP did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let stdio = format!("command: \"{python}\"\n    args: [\"{}\", stdio]", script.display());
    let served = format!("url: \"http://127.0.0.1:{port}/mcp\"");
    for (transport, reached) in [("pipe", stdio), ("tcp", served)] {
        let dir = tempfile::tempdir().unwrap();
        let receiver = OtlpReceiver::start();
        let file = format!(
            "workflow: meta\nmcp_servers:\n  interop:\n    {reached}\n    tools: [meta]\n    effect: read\nsteps:\n  - id: ask\n    tool: interop.meta\n"
        );
        std::fs::write(dir.path().join("meta.yaml"), file).unwrap();
        let ran = traced(dir.path(), &receiver, &["--db", "sqlite://meta.db", "run", "meta.yaml", "--json"]);
        assert_eq!(ran.status.code(), Some(0), "{transport}: {}", String::from_utf8_lossy(&ran.stderr));
        let output = serde_json::from_slice::<Value>(&ran.stdout).unwrap()["output"].clone();
        let held: Value = serde_json::from_str(output.as_str().expect("the tool's text")).unwrap();
        let sent = held["traceparent"].as_str().unwrap_or_else(|| panic!("no traceparent in {held}"));

        let spans = spans_once(&receiver, |s| !named(s, "tools/call meta").is_empty());
        let call = named(&spans, "tools/call meta")[0];
        assert_eq!(call.kind, "CLIENT");
        assert_eq!((call.str("mcp.method.name"), call.str("gen_ai.tool.name")), (Some("tools/call"), Some("meta")));
        assert_eq!(call.str("network.transport"), Some(transport));
        assert_eq!(sent, format!("00-{}-{}-01", call.trace_id, call.span_id), "the call's own span");
        assert_eq!(call.parent_span_id, named(&spans, "step ask")[0].span_id);
        match transport {
            "tcp" => {
                assert_eq!(call.str("server.address"), Some("127.0.0.1"));
                let session = call.str("mcp.session.id").expect("the HTTP session");
                assert!(session.len() >= 8, "FastMCP's session id: {session:?}");
            }
            _ => assert_eq!(call.str("mcp.session.id"), None, "stdio has no session id"),
        }
    }
    let _ = http.kill();
    let _ = http.wait();
}

fn captured_workflow(port: u16, telemetry: &str) -> String {
    format!(
        r#"
workflow: captured
{telemetry}
models:
  fast: {{ provider: openai, model: gpt-test, base_url: "http://127.0.0.1:{port}/v1", api_key_env: STEPWRIGHT_TEST_FAKE_KEY }}
steps:
  - id: ask
    llm: {{ model: fast, prompt: "My SSN is 987-65-4321. {{{{ input }}}}", stream: false }}
    guardrails:
      - {{ on: output, action: redact, pattern: '\d{{3}}-\d{{2}}-\d{{4}}' }}
"#
    )
}

/// Content capture: off unless asked (the process's variable or the workflow's
/// `telemetry`), the workflow's word winning; what goes on the span passed the step's output
/// guardrails first and is cut at `max_content_bytes`.
#[test]
fn content_goes_on_spans_only_when_asked_redacted_and_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (port, _model) = fake_openai(|_| Answer::Text("Noted: 123-45-6789.".into()), Tokens::Fixed(12, 4));
    let cases = [
        ("default", "", None, false),
        ("process", "", Some("true"), true),
        ("file", "telemetry: { capture_content: true }", None, true),
        ("file-off", "telemetry: { capture_content: false }", Some("true"), false),
        ("cut", "telemetry: { capture_content: true, max_content_bytes: 30 }", None, true),
    ];
    for (name, telemetry, variable, captured) in cases {
        let receiver = OtlpReceiver::start();
        std::fs::write(dir.path().join(format!("{name}.yaml")), captured_workflow(port, telemetry)).unwrap();
        let file = format!("{name}.yaml");
        let mut run =
            command(dir.path(), &["--db", "sqlite://captured.db", "run", &file, "--input", "\"Help.\"", "--json"]);
        run.env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
        if let Some(value) = variable {
            run.env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value);
        }
        let ran = run.output().unwrap();
        assert_eq!(ran.status.code(), Some(0), "{name}: {}", String::from_utf8_lossy(&ran.stderr));
        let spans = spans_once(&receiver, |s| !named(s, "chat gpt-test").is_empty());
        let chat = named(&spans, "chat gpt-test")[0];
        let (input, output) = (chat.str("gen_ai.input.messages"), chat.str("gen_ai.output.messages"));
        assert_eq!((input.is_some(), output.is_some()), (captured, captured), "{name}: {chat:#?}");
        let (Some(input), Some(output)) = (input, output) else { continue };
        for text in [input, output] {
            assert!(!text.contains("987-65-4321") && !text.contains("123-45-6789"), "{name}: redacted first: {text}");
        }
        if name == "cut" {
            assert!(input.len() < 80 && input.contains("…[cut: "), "{name}: {input}");
        } else {
            let sent: Value = serde_json::from_str(input).unwrap();
            assert_eq!(sent[0]["role"], "user", "{name}: {sent}");
            assert!(sent[0]["parts"][0]["content"].as_str().unwrap().contains("Help."), "{sent}");
            let answered: Value = serde_json::from_str(output).unwrap();
            assert_eq!((&answered[0]["role"], &answered[0]["finish_reason"]), (&json!("assistant"), &json!("stop")));
        }
    }
}

/// A failed step's span says what kind of error it was (`error.type`, the error's stable code).
#[test]
fn a_failed_steps_span_carries_its_error_type() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = OtlpReceiver::start();
    let source = "workflow: broken\nsteps:\n  - id: a\n    set: \"{{ 1 / 0 }}\"\n";
    std::fs::write(dir.path().join("broken.yaml"), source).unwrap();
    let run = traced(dir.path(), &receiver, &["--db", "sqlite://broken.db", "run", "broken.yaml", "--json"]);
    assert_eq!(run.status.code(), Some(1), "{}", String::from_utf8_lossy(&run.stderr));
    let failed: Value = serde_json::from_slice(&run.stdout).unwrap();
    let spans = spans_once(&receiver, |s| !named(s, "step a").is_empty());
    let step = named(&spans, "step a")[0];
    assert_eq!(step.str("stepwright.step.status"), Some("failed"));
    assert_eq!(step.str("error.type"), failed["error"]["code"].as_str(), "{failed}");
}
