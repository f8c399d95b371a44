//! Tool kinds through the `tool` step: subprocesses (argv, no shell, JSON in and out, exit
//! codes, timeouts that kill), HTTP endpoints, and argument validation.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::{Effect, Engine, ErrorCode, InMemoryStore, RunReport, RunStatus, Store, Workflow};
use stepwright_llm::{
    CommandTool, HttpTool, TOOL_FAILED, TOOL_NOT_FOUND, TOOL_TIMEOUT, Tool, ToolDef, ToolStep, Tools,
};
use stepwright_testkit::http::{FakeServer, Reply};

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| (*p).to_owned()).collect()
}

/// Runs one `tool` step calling `name` with `args`.
async fn call(tool: Arc<dyn Tool>, args: Value) -> RunReport {
    let name = tool.def().name.clone();
    let tools = Tools::new().with(tool).unwrap();
    let node = ToolStep::node("call", &tools, &name).unwrap();
    let workflow = Workflow::builder("tools").step(node).build().unwrap();
    let engine =
        Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).service(Arc::new(tools)).build();
    engine.start(&workflow, args).await.unwrap()
}

fn read_only(name: &str) -> ToolDef {
    ToolDef::new(name, "test tool").effect(Effect::Read)
}

#[tokio::test]
async fn a_command_gets_its_arguments_on_stdin_and_answers_json_on_stdout() {
    let tool = CommandTool::new(read_only("echo_json"), argv(&["sh", "-c", "cat"]));
    let report = call(Arc::new(tool), json!({ "order_id": "A-1", "n": [1, 2] })).await;
    assert_eq!(report.output, Some(json!({ "order_id": "A-1", "n": [1, 2] })));

    // Text that is not JSON comes back as a string; nothing at all is null.
    let tool = CommandTool::new(read_only("hello"), argv(&["sh", "-c", "echo '  hello there '"]));
    assert_eq!(call(Arc::new(tool), json!({})).await.output, Some(json!("hello there")));
    let tool = CommandTool::new(read_only("quiet"), argv(&["true"]));
    assert_eq!(call(Arc::new(tool), json!({})).await.output, Some(Value::Null));
}

#[tokio::test]
async fn arguments_reach_argv_verbatim_with_no_shell_in_between() {
    let hostile = "$(touch /tmp/stepwright-pwned); `id` && echo; *";
    let tool = CommandTool::new(read_only("say"), Vec::new())
        .argv_from(Arc::new(|args: &Value| Ok(vec!["echo".into(), args["text"].as_str().unwrap_or_default().into()])));
    let report = call(Arc::new(tool), json!({ "text": hostile })).await;
    assert_eq!(report.output, Some(json!(hostile)));

    let tool =
        CommandTool::new(read_only("env"), argv(&["sh", "-c", "printf %s \"$GREETING\""])).env("GREETING", "hej");
    assert_eq!(call(Arc::new(tool), json!({})).await.output, Some(json!("hej")));
    let dir = tempfile::tempdir().unwrap();
    let tool = CommandTool::new(read_only("pwd"), argv(&["pwd"])).cwd(dir.path());
    let report = call(Arc::new(tool), json!({})).await;
    let shown = std::fs::canonicalize(report.output.unwrap().as_str().unwrap()).unwrap();
    assert_eq!(shown, std::fs::canonicalize(dir.path()).unwrap());
}

#[tokio::test]
async fn a_non_zero_exit_is_tool_failed_with_the_end_of_stderr() {
    let tool = CommandTool::new(read_only("broken"), argv(&["sh", "-c", "echo 'no such order' >&2; exit 3"]));
    let report = call(Arc::new(tool), json!({})).await;
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.unwrap();
    assert_eq!(error.code, TOOL_FAILED);
    assert!(error.message.contains("\"sh\" exited with code 3: no such order"), "{}", error.message);

    let tool = CommandTool::new(read_only("missing"), argv(&["/nonexistent/stepwright-tool"]));
    let error = call(Arc::new(tool), json!({})).await.error.unwrap();
    assert_eq!(error.code, TOOL_FAILED);
    assert!(error.message.contains("starting \"/nonexistent/stepwright-tool\""), "{}", error.message);
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let def = read_only("sleepy").timeout(Duration::from_millis(300));
    let report = call(Arc::new(CommandTool::new(def, argv(&["sh", "-c", &script]))), json!({})).await;
    let error = report.error.unwrap();
    assert_eq!(error.code, TOOL_TIMEOUT);
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    // The child is killed when the call is dropped; give the kernel a moment to reap it.
    let mut alive = true;
    for _ in 0..100 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting for its parent's reaper: either way it no longer runs.
        if state.is_empty() || state.split(' ').nth(2) == Some("Z") {
            alive = false;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive, "the timed-out command {pid} still runs");
}

/// A script that forks: a background `sleep`, a subshell that ignores `SIGTERM` (only
/// `SIGKILL` ends it), and a subshell with a grandchild of its own. Every pid goes to
/// `$1` (the script's own last), one a line.
const FORKER: &str = r#"
pids="$1"
sleep 300 & echo $! >> "$pids"
( trap '' TERM; while :; do sleep 1; done ) & echo $! >> "$pids"
( sleep 300 & echo $! >> "$pids"; wait ) & echo $! >> "$pids"
echo $$ >> "$pids"
wait
"#;

/// Whether `pid` still runs (a zombie waiting for its reaper does not).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

/// The pids a [`FORKER`] wrote, once it has written all five.
async fn forked(pids: &std::path::Path) -> Vec<u32> {
    for _ in 0..500 {
        let written: Vec<u32> =
            std::fs::read_to_string(pids).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect();
        if written.len() == 5 {
            return written;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the script did not write its pids");
}

/// Waits until none of `pids` runs (at most `within`); the ones still running if some do.
async fn gone(pids: &[u32], within: Duration) -> Vec<u32> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|pid| runs(*pid)).collect();
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_timed_out_command_takes_its_children_and_grandchildren_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let def = read_only("forker").timeout(Duration::from_millis(500));
    let tool = CommandTool::new(def, argv(&["sh", "-c", FORKER, "sh", pids.to_str().unwrap()]))
        .kill_grace(Duration::from_millis(300));
    let report = call(Arc::new(tool), json!({})).await;
    assert_eq!(report.error.unwrap().code, TOOL_TIMEOUT);
    let pids = forked(&pids).await;
    // SIGTERM ends all but the subshell that ignores it; SIGKILL after the grace ends that.
    let left = gone(&pids, Duration::from_secs(20)).await;
    assert!(left.is_empty(), "still running after the timeout: {left:?} of {pids:?}");
}

#[tokio::test]
async fn what_a_finished_command_leaves_in_its_group_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    // The script leaves a background job that holds no pipe and ignores SIGTERM, and exits.
    let script = r#"( trap '' TERM; exec 0<&- 1>&- 2>&-; while :; do sleep 1; done ) & echo $! > "$1"; echo done"#;
    let tool = CommandTool::new(read_only("leaver"), argv(&["sh", "-c", script, "sh", pids.to_str().unwrap()]))
        .kill_grace(Duration::from_millis(300));
    let report = call(Arc::new(tool), json!({})).await;
    assert_eq!(report.output, Some(json!("done")), "{:?}", report.error);
    let pid: u32 = std::fs::read_to_string(&pids).unwrap().trim().parse().unwrap();
    let left = gone(&[pid], Duration::from_secs(20)).await;
    assert!(left.is_empty(), "the background job {pid} outlived its step");
}

/// Another worker takes the run over (as one does once this worker's lease lapsed unseen):
/// the keeper's renewal finds the lease lost, the run stops, and the tool's whole tree with
/// it — as on a cancel.
#[tokio::test]
async fn a_lost_lease_stops_the_tools_whole_process_tree() {
    use stepwright_core::{Clock, EngineConfig, EngineError, RunId, StartOptions};
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let tool = CommandTool::new(read_only("forker"), argv(&["sh", "-c", FORKER, "sh", pids.to_str().unwrap()]))
        .kill_grace(Duration::from_millis(300));
    let tools = Tools::new().with(Arc::new(tool)).unwrap();
    let node = ToolStep::node("call", &tools, "forker").unwrap();
    let workflow = Workflow::builder("tools").step(node).build().unwrap();
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .service(Arc::new(tools))
        .worker_id("w")
        .config(EngineConfig { lease_for: Duration::from_millis(600), ..EngineConfig::default() })
        .build();
    let run: RunId = "01890000-0000-7000-8000-00000000105e".parse().unwrap();
    let started = {
        let (engine, workflow) = (engine.clone(), workflow.clone());
        let options = StartOptions { run_id: Some(run), ..StartOptions::default() };
        tokio::spawn(async move { engine.start_with(&workflow, json!({}), options).await })
    };
    let pids = forked(&pids).await;
    let now = stepwright_core::TokioClock::new().now();
    store.take_over(run, "w", "another-worker", now, Duration::from_secs(30)).await.unwrap();
    let stopped = started.await.unwrap();
    assert!(matches!(stopped, Err(EngineError::LeaseLost { .. })), "{stopped:?}");
    let left = gone(&pids, Duration::from_secs(20)).await;
    assert!(left.is_empty(), "still running after the lease was lost: {left:?} of {pids:?}");
}

#[tokio::test]
async fn a_fenced_command_gets_its_idempotency_key() {
    let def = ToolDef::new("charge", "Charge").effect(Effect::Write);
    let tool = CommandTool::new(def, argv(&["sh", "-c", "printf %s \"$STEPWRIGHT_IDEMPOTENCY_KEY\""]));
    let key = call(Arc::new(tool), json!({})).await.output.unwrap();
    assert_eq!(key.as_str().unwrap().len(), 64, "{key}");
}

#[tokio::test]
async fn arguments_that_do_not_match_the_schema_never_reach_the_tool() {
    let def = read_only("typed").input_schema(json!({
        "type": "object", "required": ["order_id"], "properties": { "order_id": { "type": "string" } }
    }));
    let tool = CommandTool::new(def, argv(&["sh", "-c", "echo ran; exit 9"]));
    let error = call(Arc::new(tool), json!({ "order_id": 7 })).await.error.unwrap();
    assert_eq!(error.code, ErrorCode::INPUT_VALIDATION);
    assert!(error.message.contains("at /order_id"), "{}", error.message);
}

#[tokio::test]
async fn an_http_tool_sends_queries_and_bodies_and_maps_error_statuses() {
    let server = FakeServer::scripted(vec![
        Reply::json(200, json!({ "status": "shipped" })),
        Reply::json(201, json!({ "id": 9 })),
        Reply::json(503, json!({ "error": "down for maintenance" })),
    ]);
    let url = format!("{}/orders", server.url);
    let get = HttpTool::new(read_only("lookup"), "get", &url).unwrap().header("x-api-key", "k1");
    let report = call(Arc::new(get), json!({ "order_id": "A 1", "full": true })).await;
    assert_eq!(report.output, Some(json!({ "status": "shipped" })));

    let def = ToolDef::new("create", "Create an order").effect(Effect::Write);
    let post = HttpTool::new(def, "POST", &url).unwrap();
    let report = call(Arc::new(post), json!({ "item": "book" })).await;
    assert_eq!(report.output, Some(json!({ "id": 9 })));

    let post = HttpTool::new(read_only("fails"), "POST", &url).unwrap();
    let error = call(Arc::new(post), json!({})).await.error.unwrap();
    assert_eq!(error.code, TOOL_FAILED);
    assert!(error.retryable, "a 503 may succeed later");
    assert!(error.message.contains("503") && error.message.contains("down for maintenance"), "{}", error.message);

    let requests = server.requests();
    assert_eq!((requests[0].method.as_str(), requests[0].path.as_str()), ("GET", "/orders?full=true&order_id=A+1"));
    assert_eq!(requests[0].headers["x-api-key"], "k1");
    assert_eq!(requests[0].headers["user-agent"], stepwright_llm::USER_AGENT);
    assert_eq!((requests[1].method.as_str(), &requests[1].body), ("POST", &json!({ "item": "book" })));
    assert_eq!(requests[1].headers["idempotency-key"].len(), 64, "a write carries its idempotency key");
    assert!(!requests[2].headers.contains_key("idempotency-key"), "a read does not");

    assert!(HttpTool::new(read_only("bad"), "FETCH IT", &url).is_err());
    assert!(HttpTool::new(read_only("bad"), "GET", "ftp://example.com").is_err());
}

#[test]
fn registration_rejects_duplicates_clashes_and_bad_schemas() {
    let tool = |name: &str| Arc::new(CommandTool::new(read_only(name), argv(&["true"]))) as Arc<dyn Tool>;
    let mut tools = Tools::new();
    tools.register(tool("everything.echo")).unwrap();
    assert_eq!(tools.spec("everything.echo").unwrap().name, "everything__echo");
    assert!(tools.by_model_name("everything__echo").is_some());
    let duplicate = tools.register(tool("everything.echo")).unwrap_err();
    assert_eq!(duplicate.to_string(), "a tool named \"everything.echo\" is registered already");
    let clash = tools.register(tool("everything__echo")).unwrap_err();
    assert!(clash.to_string().contains("same name for the model"), "{clash}");
    let bad = Arc::new(CommandTool::new(read_only("bad").input_schema(json!({ "type": 12 })), argv(&["true"])));
    assert!(tools.register(bad).unwrap_err().to_string().contains("invalid input schema"));
    assert!(tools.register(tool("")).unwrap_err().to_string().contains("is empty"));

    // A name over 64 characters once escaped (a long MCP tool under its server's prefix) is
    // shortened for the model, not refused: its first 55 characters, `_`, 8 hex digits of a
    // hash of the whole name; two that share the 55 stay apart.
    let long = format!("filesystem.{}", "read_multiple_files_with_metadata_".repeat(2));
    let longer = format!("{long}_and_more");
    tools.register(tool(&long)).unwrap();
    tools.register(tool(&longer)).unwrap();
    let (short, other) = (tools.spec(&long).unwrap().name, tools.spec(&longer).unwrap().name);
    assert_eq!((short.len(), other.len()), (64, 64), "{short} {other}");
    assert!(short.starts_with("filesystem__read_multiple_files_with_metadata_read_mult"), "{short}");
    assert!(short.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{short}");
    assert_ne!(short, other);
    assert_eq!(tools.by_model_name(&short).unwrap().def().name, long, "the model's name finds the tool");
    assert_eq!(stepwright_llm::model_name(&long), short, "the same name every time");
}

#[tokio::test]
async fn a_tool_step_for_an_unknown_tool_is_a_build_error() {
    let error = ToolStep::node("call", &Tools::new(), "nope").unwrap_err();
    assert_eq!(error.code, TOOL_NOT_FOUND);
}

#[tokio::test]
async fn a_tool_node_carries_the_tools_approval_gate_and_effect_fence() {
    let def = ToolDef::new("wipe", "Wipe a disk").effect(Effect::Write).needs_approval();
    let tool = Arc::new(CommandTool::new(def, argv(&["sh", "-c", "printf wiped"])));
    let tools = Tools::new().with(tool).unwrap();
    let node = ToolStep::node("call", &tools, "wipe").unwrap();
    let workflow = Workflow::builder("tools").step(node).build().unwrap();
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).service(Arc::new(tools)).build();
    let report = engine.start(&workflow, json!({})).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended, "nothing runs before a person approves");
    let id = report.pending[0].id.clone();
    engine
        .resolve(report.run_id, &id, stepwright_core::Decision::Approve, &stepwright_core::Caller::default())
        .await
        .unwrap();
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!("wiped")));
    let fenced = store
        .entries(report.run_id)
        .iter()
        .any(|e| matches!(e.record, stepwright_core::Record::Intent { .. }) && e.path.as_str() == "call");
    assert!(fenced, "a write tool's step commits its intent first");
}

#[tokio::test]
async fn a_command_that_writes_too_much_is_stopped() {
    // `yes` writes forever: the call must end at the cap, not when memory runs out.
    let tool = CommandTool::new(read_only("chatty"), argv(&["yes", "stepwright"])).max_output_bytes(1 << 20);
    let report = tokio::time::timeout(Duration::from_secs(10), call(Arc::new(tool), json!({})))
        .await
        .expect("the call ends at the cap");
    let error = report.error.unwrap();
    assert_eq!(error.code, TOOL_FAILED);
    assert!(error.message.contains("more than 1048576 bytes to stdout"), "{}", error.message);

    // Stderr is kept only at its end, and output under the cap is whole.
    let script = "head -c 300000 /dev/zero | tr '\\0' e >&2; echo the-end >&2; printf '{\"ok\":1}'; exit 4";
    let tool = CommandTool::new(read_only("noisy"), argv(&["sh", "-c", script])).max_output_bytes(8);
    let error = call(Arc::new(tool), json!({})).await.error.unwrap();
    assert!(error.message.contains("exited with code 4") && error.message.ends_with("the-end"), "{}", error.message);
    let tool = CommandTool::new(read_only("exact"), argv(&["printf", "{\"ok\":1}"])).max_output_bytes(8);
    assert_eq!(call(Arc::new(tool), json!({})).await.output, Some(json!({ "ok": 1 })));
}
