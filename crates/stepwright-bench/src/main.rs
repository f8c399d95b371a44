//! Engine-overhead benchmarks. `cargo run --release -p stepwright-bench --bin bench`
//! prints one table row per workload. W3 runs in a child process of its own so that its
//! peak RSS is its own.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod events;
mod experiments;
mod observability;
mod postgres;
mod schedules;
mod yaml;

use serde_json::{Value, json};
use stepwright::{Engine, Expr, Fork, InMemoryStore, Node, Outcome, Step, StepContext, StepError, Store, Workflow};
use stepwright::{SqliteOptions, SqliteStore, Synchronous};

/// The trivial typed step: `n → n + 1`.
struct Inc;

impl Step for Inc {
    type Input = u64;
    type Output = u64;

    async fn run(&self, _ctx: &StepContext, input: u64) -> Result<Outcome<u64>, StepError> {
        Ok(Outcome::completed(input + 1))
    }
}

/// A step that awaits a 10 ms timer.
struct Tick;

impl Step for Tick {
    type Input = u64;
    type Output = u64;

    async fn run(&self, _ctx: &StepContext, input: u64) -> Result<Outcome<u64>, StepError> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(Outcome::completed(input + 1))
    }
}

/// A chain of `steps` leaf steps named `s0`, `s1`, ….
fn chain(name: &str, steps: usize, make: impl Fn(&str) -> Node) -> Workflow {
    let mut builder = Workflow::builder(name);
    for i in 0..steps {
        builder = builder.step(make(&format!("s{i}")));
    }
    builder.build().expect("valid workflow")
}

fn engine() -> Engine {
    Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).build()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// W1: one run, a chain of 1,000 trivial typed steps, in-memory journal on.
fn w1(runs: usize) -> (f64, f64) {
    let mut builder = Workflow::builder("w1");
    for i in 0..1_000 {
        builder = builder.step(Node::step(&format!("s{i}"), Inc));
    }
    chain_per_step(&builder.build().expect("valid"), 1_000, runs)
}

/// Median and best µs per step of `runs` runs of a chain of `steps` steps that each add one
/// to the input 0 (W1, Y1), in-memory journal on.
fn chain_per_step(workflow: &Workflow, steps: usize, runs: usize) -> (f64, f64) {
    let rt = current_thread();
    let mut per_step = Vec::with_capacity(runs);
    rt.block_on(async {
        let engine = engine();
        for _ in 0..runs {
            let start = Instant::now();
            let report = engine.start(workflow, json!(0)).await.expect("run");
            per_step.push(start.elapsed().as_secs_f64() * 1e6 / steps as f64);
            assert_eq!(report.output, Some(json!(steps)), "{:?}", report.error);
        }
    });
    let best = per_step.iter().copied().fold(f64::INFINITY, f64::min);
    (median(per_step), best)
}

/// W2: one run, a map over 1,000 items with a trivial step, then a join.
fn w2(runs: usize) -> (f64, f64) {
    let items: Vec<Value> = (0..1_000u64).map(Value::from).collect();
    let workflow = Workflow::builder("w2")
        .step(Fork::map("fan", Expr::new(move |_| items.clone()), "item", [Node::step("inc", Inc)]))
        .step(Node::step("join", stepwright::fn_step(|_ctx, xs: Vec<u64>| async move { Ok(xs.iter().sum::<u64>()) })))
        .build()
        .expect("valid");
    let rt = current_thread();
    let mut per_run = Vec::with_capacity(runs);
    rt.block_on(async {
        let engine = engine();
        for _ in 0..runs {
            let start = Instant::now();
            let report = engine.start(&workflow, json!(null)).await.expect("run");
            per_run.push(start.elapsed().as_secs_f64() * 1e3);
            assert_eq!(report.output, Some(json!(500_500)));
        }
    });
    let best = per_run.iter().copied().fold(f64::INFINITY, f64::min);
    (median(per_run), best)
}

/// A model that answers at once, so that a call costs only what the engine adds.
fn instant_model() -> stepwright::llm::ScriptedModel {
    stepwright::llm::ScriptedModel::new(|_request| stepwright::llm::ChatResponse {
        id: None,
        content: "{\"category\":\"bug\"}".into(),
        tool_calls: Vec::new(),
        finish_reason: stepwright::llm::FinishReason::Stop,
        usage: stepwright::llm::Usage { input_tokens: 120, output_tokens: 8, ..Default::default() },
        model: "instant-1".into(),
    })
}

/// L1: engine overhead per model call: a chain of 100 `llm` steps with structured output
/// against an instant model — request building, the journaled sub-step with its
/// `llm-input`/`llm-output` artifacts and usage event, answer validation, the step around
/// it. Returns µs per call (median, best) for the store given.
fn l1(runs: usize, store: Arc<dyn Store>) -> (f64, f64) {
    let mut models = stepwright::llm::Models::new();
    models.bind_adapter("fast", "instant-1", Arc::new(instant_model()), None);
    let mut spec = stepwright::llm::LlmSpec::new("fast");
    spec.output =
        Some(json!({ "type": "object", "required": ["category"], "properties": { "category": { "type": "string" } } }));
    let mut builder = Workflow::builder("l1");
    for i in 0..100 {
        let step = Node::dyn_step(&format!("s{i}"), stepwright::llm::LlmStep::new(spec.clone()));
        builder = builder.step(step.input(stepwright::InputSource::WorkflowInput));
    }
    let workflow = builder.build().expect("valid");
    let rt = current_thread();
    let mut per_call = Vec::with_capacity(runs);
    rt.block_on(async {
        let engine = Engine::builder().store(store).service(Arc::new(models)).build();
        for _ in 0..runs {
            let start = Instant::now();
            let report = engine.start(&workflow, json!("Classify: it crashes")).await.expect("run");
            per_call.push(start.elapsed().as_secs_f64() * 1e6 / 100.0);
            assert_eq!(report.status, stepwright::RunStatus::Completed, "{:?}", report.error);
        }
    });
    let best = per_call.iter().copied().fold(f64::INFINITY, f64::min);
    (median(per_call), best)
}

/// A model that answers at once: one tool call per turn until it has seen `turns` results,
/// then a final answer.
fn looping_model(turns: usize) -> stepwright::llm::ScriptedModel {
    stepwright::llm::ScriptedModel::new(move |request| {
        let seen = request.tool_results().count();
        let tool_calls = if seen < turns {
            vec![stepwright::llm::ToolCall {
                id: format!("call_{seen}"),
                name: "lookup".into(),
                arguments: json!({ "order_id": format!("A-{seen}") }),
            }]
        } else {
            Vec::new()
        };
        stepwright::llm::ChatResponse {
            id: None,
            content: if tool_calls.is_empty() { "done".into() } else { String::new() },
            tool_calls,
            finish_reason: stepwright::llm::FinishReason::Stop,
            usage: stepwright::llm::Usage { input_tokens: 120, output_tokens: 8, ..Default::default() },
            model: "instant-1".into(),
        }
    })
}

/// A1: engine overhead per agent turn: an agent that makes `turns` turns (each a model call
/// and one tool call, both journaled sub-steps with artifacts and events), then answers,
/// against an instant model and an instant tool. Returns µs per turn (median, best).
fn a1(turns: usize, runs: usize, store: Arc<dyn Store>) -> (f64, f64) {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Order {
        #[allow(dead_code)] // Deserialized to check the arguments; the tool ignores it.
        order_id: String,
    }
    let mut models = stepwright::llm::Models::new();
    models.bind_adapter("fast", "instant-1", Arc::new(looping_model(turns)), None);
    let mut tools = stepwright::llm::Tools::new();
    let lookup = stepwright::llm::fn_tool(
        stepwright::llm::ToolDef::new("lookup", "Look up an order").effect(stepwright::Effect::Read),
        |_cx, _order: Order| async { Ok(json!({ "status": "shipped" })) },
    );
    tools.register(lookup).expect("one tool");
    let mut spec = stepwright::llm::AgentSpec::new("support", "fast");
    spec.instructions = Some("You resolve support tickets.".into());
    spec.tools = vec!["lookup".into()];
    spec.max_iterations = u32::try_from(turns).expect("small") + 1;
    let workflow = Workflow::builder("a1")
        .step(Node::dyn_step("agent", stepwright::llm::AgentStep::new(spec)))
        .build()
        .expect("valid");
    let rt = current_thread();
    let mut per_turn = Vec::with_capacity(runs);
    rt.block_on(async {
        let engine = Engine::builder().store(store).service(Arc::new(models)).service(Arc::new(tools)).build();
        for _ in 0..runs {
            let start = Instant::now();
            let report = engine.start(&workflow, json!("Where is my order?")).await.expect("run");
            per_turn.push(start.elapsed().as_secs_f64() * 1e6 / turns as f64);
            assert_eq!(report.status, stepwright::RunStatus::Completed, "{:?}", report.error);
        }
    });
    let best = per_turn.iter().copied().fold(f64::INFINITY, f64::min);
    (median(per_turn), best)
}

/// W3 (child process): 1,000 concurrent runs of 10 steps, each awaiting a 10 ms timer.
/// Prints `wall_ms peak_rss_kib`.
fn w3_child() {
    let workflow = chain("w3", 10, |id| Node::step(id, Tick));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let wall = rt.block_on(async {
        let engine = engine();
        let start = Instant::now();
        let mut handles = Vec::with_capacity(1_000);
        for _ in 0..1_000 {
            let engine = engine.clone();
            let workflow = workflow.clone();
            handles.push(tokio::spawn(async move { engine.start(&workflow, json!(0)).await }));
        }
        for handle in handles {
            let report = handle.await.expect("join").expect("run");
            assert_eq!(report.output, Some(json!(10)));
        }
        start.elapsed()
    });
    println!("{:.1} {}", wall.as_secs_f64() * 1e3, peak_rss_kib());
}

/// The W3 floor on this machine: the same timers in plain tokio tasks, no engine.
fn w3_floor_child() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let wall = rt.block_on(async {
        let start = Instant::now();
        let handles: Vec<_> = (0..1_000)
            .map(|_| {
                tokio::spawn(async {
                    for _ in 0..10 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.await.expect("join");
        }
        start.elapsed()
    });
    println!("{:.1} {}", wall.as_secs_f64() * 1e3, peak_rss_kib());
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn w3(runs: usize, child: &str) -> (f64, f64, u64) {
    let exe = std::env::current_exe().expect("current exe");
    let mut walls = Vec::new();
    let mut rss = 0;
    for _ in 0..runs {
        let out = Command::new(&exe).arg(child).output().expect("spawn w3 child");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text.split_whitespace();
        walls.push(parts.next().and_then(|v| v.parse().ok()).expect("wall"));
        rss = rss.max(parts.next().and_then(|v| v.parse().ok()).expect("rss"));
    }
    let best = walls.iter().copied().fold(f64::INFINITY, f64::min);
    (median(walls), best, rss)
}

pub(crate) fn sqlite_engine(dir: &std::path::Path, name: &str, synchronous: Synchronous) -> (Engine, Arc<SqliteStore>) {
    let options = SqliteOptions { synchronous, ..SqliteOptions::default() };
    let store = Arc::new(SqliteStore::open_with(dir.join(name), options).expect("open sqlite"));
    (Engine::builder().store(store.clone() as Arc<dyn Store>).build(), store)
}

pub(crate) fn inc_chain(name: &str, steps: usize) -> Workflow {
    inc_chain_of(name, steps, stepwright::Effect::Pure)
}

/// W1's chain with each step of the given effect class.
pub(crate) fn inc_chain_of(name: &str, steps: usize, effect: stepwright::Effect) -> Workflow {
    let mut builder = Workflow::builder(name);
    for i in 0..steps {
        builder = builder.step(Node::step(&format!("s{i}"), Inc).effect(effect));
    }
    builder.build().expect("valid")
}

/// D1: W1 durable — one run, 1,000 trivial steps, `sync` durability on SQLite.
fn d1(runs: usize, synchronous: Synchronous) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let workflow = inc_chain("d1", 1_000);
    let rt = current_thread();
    let mut per_step = Vec::new();
    rt.block_on(async {
        let (engine, _store) = sqlite_engine(dir.path(), "d1.db", synchronous);
        for _ in 0..runs {
            let start = Instant::now();
            let report = engine.start(&workflow, json!(0)).await.expect("run");
            per_step.push(start.elapsed().as_secs_f64() * 1e6 / 1_000.0);
            assert_eq!(report.output, Some(json!(1_000)));
        }
    });
    let best = per_step.iter().copied().fold(f64::INFINITY, f64::min);
    (median(per_step), best)
}

/// D2: W2 durable — one run fanning out to 1,000 branches and joining, FULL.
fn d2(runs: usize) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let items: Vec<Value> = (0..1_000u64).map(Value::from).collect();
    let workflow = Workflow::builder("d2")
        .step(Fork::map("fan", Expr::new(move |_| items.clone()), "item", [Node::step("inc", Inc)]))
        .step(Node::step("join", stepwright::fn_step(|_ctx, xs: Vec<u64>| async move { Ok(xs.iter().sum::<u64>()) })))
        .build()
        .expect("valid");
    let rt = current_thread();
    let mut per_run = Vec::new();
    rt.block_on(async {
        let (engine, _store) = sqlite_engine(dir.path(), "d2.db", Synchronous::Full);
        for _ in 0..runs {
            let start = Instant::now();
            let report = engine.start(&workflow, json!(null)).await.expect("run");
            per_run.push(start.elapsed().as_secs_f64() * 1e3);
            assert_eq!(report.output, Some(json!(500_500)));
        }
    });
    let best = per_run.iter().copied().fold(f64::INFINITY, f64::min);
    (median(per_run), best)
}

/// D3 / D4: `concurrent` runs of 10 steps on SQLite FULL, each step optionally awaiting a
/// 10 ms timer. Returns (wall ms, committed steps per second).
fn concurrent_sqlite(concurrent: usize, timer: bool) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let workflow = if timer { chain("d3", 10, |id| Node::step(id, Tick)) } else { inc_chain("d4", 10) };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let (engine, _store) = sqlite_engine(
            dir.path(),
            "d34.db",
            if std::env::var("D3_NORMAL").is_ok() { Synchronous::Normal } else { Synchronous::Full },
        );
        let start = Instant::now();
        let handles: Vec<_> = (0..concurrent)
            .map(|_| {
                let engine = engine.clone();
                let workflow = workflow.clone();
                tokio::spawn(async move { engine.start(&workflow, json!(0)).await })
            })
            .collect();
        for handle in handles {
            let report = handle.await.expect("join").expect("run");
            assert_eq!(report.output, Some(json!(10)));
        }
        let wall = start.elapsed().as_secs_f64();
        (wall * 1e3, (concurrent * 10) as f64 / wall)
    })
}

/// D7: journal bytes per trivial step (the database file's growth over 10,000 steps).
fn d7() -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let workflow = inc_chain("d7", 1_000);
    let rt = current_thread();
    rt.block_on(async {
        let (engine, store) = sqlite_engine(dir.path(), "d7.db", Synchronous::Normal);
        engine.start(&workflow, json!(0)).await.expect("warm-up run");
        let size = |store: &SqliteStore| rusqlite_size(store.path());
        let before = size(&store);
        for _ in 0..10 {
            engine.start(&workflow, json!(0)).await.expect("run");
        }
        let after = size(&store);
        (after - before) as f64 / 10_000.0
    })
}

/// `steps` trivial steps, then a step behind an approval gate that records when it started,
/// then `after` more trivial steps.
fn gated_chain(steps: usize, started: Arc<std::sync::Mutex<Option<Instant>>>, after: usize) -> Workflow {
    let mut builder = Workflow::builder("gated");
    for i in 0..steps {
        builder = builder.step(Node::step(&format!("s{i}"), Inc));
    }
    builder
        .step(
            Node::step(
                "next",
                stepwright::fn_step(move |_ctx, x: u64| {
                    let started = started.clone();
                    async move {
                        started.lock().expect("poisoned").get_or_insert_with(Instant::now);
                        Ok(x)
                    }
                }),
            )
            .requires_approval(stepwright::ApprovalGate::new("continue?")),
        )
        .steps((0..after).map(|i| Node::step(&format!("t{i}"), Inc)))
        .build()
        .expect("valid")
}

/// Creates a run of `gated_chain(steps)` suspended at its gate, approved, in `db`.
/// (The W4 shape: 50 steps, the gated 51st, 49 more: 100 in all.)
async fn approved_run(db: &std::path::Path, steps: usize) -> stepwright::RunId {
    let store = Arc::new(SqliteStore::open(db).expect("open"));
    let engine = Engine::builder().store(store as Arc<dyn Store>).worker_id("bench").build();
    let workflow = gated_chain(steps, Arc::default(), 49);
    let report = engine.start(&workflow, json!(0)).await.expect("run");
    assert_eq!(report.status, stepwright::RunStatus::Suspended);
    let gate = &report.pending[0].id;
    engine.resolve(report.run_id, gate, stepwright::Decision::Approve, &Default::default()).await.expect("approve");
    report.run_id
}

/// D5 child: open the store, resume the run, exit.
fn d5_child(db: &str, run: &str) {
    let rt = current_thread();
    rt.block_on(async {
        let store = Arc::new(SqliteStore::open(db).expect("open"));
        let engine = Engine::builder().store(store as Arc<dyn Store>).worker_id("bench").build();
        let report =
            engine.resume(&gated_chain(50, Arc::default(), 49), run.parse().expect("run id")).await.expect("resume");
        assert_eq!(report.status, stepwright::RunStatus::Completed);
    });
}

/// D5a: a 100-step run stopped after step 50, finished by a new process (process start
/// included). The run's remaining 50 steps: the approved gate's step, then 49 more.
fn d5_process(runs: usize) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("exe");
    let mut walls = Vec::new();
    for i in 0..runs {
        let db = dir.path().join(format!("d5-{i}.db"));
        let run = current_thread().block_on(approved_run(&db, 50));
        let start = Instant::now();
        let status = Command::new(&exe)
            .args(["d5-child", db.to_str().expect("path"), &run.to_string()])
            .status()
            .expect("spawn");
        walls.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(status.success());
    }
    median(walls)
}

/// D5b / D6: time from `resume` (after `resolve` for D6) to the next step's start, with
/// `completed` steps already in the journal; the store is freshly opened for D5b.
fn resume_to_next_step(completed: usize, runs: usize, include_resolve: bool) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = current_thread();
    let mut times = Vec::new();
    for i in 0..runs {
        let db = dir.path().join(format!("r-{i}.db"));
        let started = Arc::new(std::sync::Mutex::new(None));
        let workflow = gated_chain(completed, started.clone(), 0);
        rt.block_on(async {
            let store = Arc::new(SqliteStore::open(&db).expect("open"));
            let engine = Engine::builder().store(store as Arc<dyn Store>).worker_id("bench").build();
            let report = engine.start(&workflow, json!(0)).await.expect("run");
            let gate = report.pending[0].id.clone();
            let (engine, t0) = if include_resolve {
                // D6: the same process decides, then continues.
                let t0 = Instant::now();
                engine
                    .resolve(report.run_id, &gate, stepwright::Decision::Approve, &Default::default())
                    .await
                    .expect("approve");
                (engine, t0)
            } else {
                engine
                    .resolve(report.run_id, &gate, stepwright::Decision::Approve, &Default::default())
                    .await
                    .expect("approve");
                drop(engine);
                // D5b: a fresh store over the file, as a new process would have.
                let t0 = Instant::now();
                let store = Arc::new(SqliteStore::open(&db).expect("open"));
                (Engine::builder().store(store as Arc<dyn Store>).worker_id("bench").build(), t0)
            };
            engine.resume(&workflow, report.run_id).await.expect("resume");
            let at = started.lock().expect("poisoned").expect("the next step ran");
            times.push(at.duration_since(t0).as_secs_f64() * 1e3);
        });
    }
    median(times)
}

/// The CLI figures: `validate` on a 200-step file and `run` of a three-step workflow, each
/// a fresh `stepwright` process (from `target/release`, next to this binary).
fn cli_figures(runs: usize) -> (f64, f64) {
    let exe = std::env::current_exe().expect("exe");
    let cli = exe.with_file_name("stepwright");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut big = String::from("workflow: big\nsteps:\n");
    for i in 0..200 {
        big.push_str(&format!("  - id: s{i}\n    set: \"{{{{ input.n + {i} }}}}\"\n"));
    }
    std::fs::write(dir.path().join("big.yaml"), big).expect("write");
    std::fs::write(
        dir.path().join("three.yaml"),
        "workflow: three\nsteps:\n  - id: a\n    set: 1\n  - id: b\n    set: \"{{ steps.a.output + 1 }}\"\n  - id: c\n    set: \"{{ steps.b.output * 2 }}\"\n",
    )
    .expect("write");
    let time = |args: &[&str]| -> f64 {
        let start = Instant::now();
        let status = Command::new(&cli).current_dir(dir.path()).args(args).output().expect("spawn");
        assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
        start.elapsed().as_secs_f64() * 1e3
    };
    let validate = median((0..runs).map(|_| time(&["validate", "big.yaml"])).collect());
    let run = median((0..runs).map(|_| time(&["run", "three.yaml", "--json"])).collect());
    (validate, run)
}

/// X1: how long a cancel from another process takes to stop a running step. A `stepwright
/// run` executes a tool process (which writes its pid, then sleeps); a `stepwright cancel`
/// process is started, and the time from its start to the tool process's death and to the
/// run process's exit is taken (each polled every 0.5 ms). Median over `runs` per store.
fn cancel_figures(runs: usize, db: &str) -> (f64, f64) {
    let exe = std::env::current_exe().expect("exe");
    let cli = exe.with_file_name("stepwright");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("slow.yaml"),
        "workflow: slow
tools:
  nap:
    command: [sh, -c, \"echo $$ > \\\"$1\\\"; exec sleep 30\", sh, \"{{ args.pidfile }}\"]\n    effect: read\nsteps:\n  - id: wait\n    tool: nap\n    with: { pidfile: \"{{ input.pidfile }}\" }\n",
    )
    .expect("write");
    let db = if db == "sqlite" { format!("sqlite://{}", dir.path().join("x1.db").display()) } else { db.to_owned() };
    let alive = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    let (mut to_step, mut to_exit) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let pidfile = dir.path().join(format!("tool-{i}.pid"));
        let input = format!("{{\"pidfile\": {:?}}}", pidfile.display().to_string());
        let mut run = Command::new(&cli)
            .current_dir(dir.path())
            .args(["--db", &db, "run", "slow.yaml", "--json", "--input", &input])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn run");
        let tool = loop {
            if let Some(pid) = std::fs::read_to_string(&pidfile).ok().filter(|p| p.ends_with('\n')) {
                break pid.trim().to_owned();
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let listed = Command::new(&cli)
            .current_dir(dir.path())
            .args(["--db", &db, "runs", "list", "--json", "--limit", "1"])
            .output()
            .expect("list");
        let line = String::from_utf8_lossy(&listed.stdout).into_owned();
        let run_id =
            serde_json::from_str::<serde_json::Value>(line.lines().next().expect("a run")).expect("json")["run_id"]
                .as_str()
                .expect("id")
                .to_owned();
        let start = Instant::now();
        let mut cancel = Command::new(&cli)
            .current_dir(dir.path())
            .args(["--db", &db, "cancel", &run_id])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn cancel");
        while alive(&tool) {
            std::thread::sleep(Duration::from_micros(500));
        }
        to_step.push(start.elapsed().as_secs_f64() * 1e3);
        while run.try_wait().expect("wait").is_none() {
            std::thread::sleep(Duration::from_micros(500));
        }
        to_exit.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(cancel.wait().expect("cancel").success());
    }
    (median(to_step), median(to_exit))
}

/// The size of a SQLite database after a checkpoint (pages in use × page size).
fn rusqlite_size(path: &std::path::Path) -> u64 {
    stepwright::used_bytes(path).expect("a store file's size")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("w3-child") => return w3_child(),
        Some("w3-floor-child") => return w3_floor_child(),
        Some("d5-child") => return d5_child(&args[1], &args[2]),
        Some("d8-worker") => return postgres::d8_worker(&args[1], &args[2], &args[3]),
        Some("o1-child") => return observability::child(&args[1], args[2].parse().expect("runs")),
        _ => {}
    }
    let quick = args.iter().any(|a| a == "--quick");
    // `--only w1` (or w2, w3) runs one workload, for profiling.
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let (r1, r2, r3) = if quick { (10, 10, 1) } else { (200, 200, 15) };
    println!("| workload | what | median | best | target |");
    println!("|---|---|---|---|---|");
    if wanted("w1") {
        let (median1, best1) = w1(r1);
        println!(
            "| W1 | chain of 1,000 trivial typed steps, in-memory journal ({r1} runs) | {median1:.3} µs/step | {best1:.3} µs/step | ≤ 1 µs/step |"
        );
    }
    if wanted("y1") {
        for (steps, runs) in [(10, r1 * 10), (100, r1), (1_000, r1 / 10)] {
            let (median, best) = yaml::y1(steps, runs.max(1));
            println!(
                "| Y1 | chain of {steps} YAML `set` steps, one expression each, in-memory journal ({} runs) | {median:.3} µs/step | {best:.3} µs/step | (report) |",
                runs.max(1)
            );
        }
    }
    if wanted("w2") {
        let (median2, best2) = w2(r2);
        println!(
            "| W2 | map over 1,000 items + join ({r2} runs) | {median2:.3} ms/run | {best2:.3} ms/run | ≤ 2 ms/run |"
        );
    }
    if wanted("w3") {
        let (floor, _, floor_rss) = w3(r3, "w3-floor-child");
        println!(
            "| W3 floor | the same 10,000 timers in plain tokio tasks, no engine ({r3} processes) | {floor:.1} ms wall | | (reference) |"
        );
        println!("| W3 floor | peak RSS of that process | {:.1} MiB | | (reference) |", floor_rss as f64 / 1024.0);
        let (median3, best3, rss) = w3(r3, "w3-child");
        println!(
            "| W3 | 1,000 concurrent runs × 10 steps × 10 ms timer ({r3} processes) | {median3:.1} ms wall | {best3:.1} ms wall | ≤ 130 ms, floor 100 ms |"
        );
        println!("| W3 | peak RSS of the W3 process (max over runs) | {:.1} MiB | | ≤ 64 MiB |", rss as f64 / 1024.0);
    }
    if wanted("d1") {
        let runs = if quick { 2 } else { 10 };
        let (full, full_best) = d1(runs, Synchronous::Full);
        println!(
            "| D1 | W1 durable: 1,000 trivial steps, `sync`, SQLite FULL ({runs} runs) | {full:.1} µs/step | {full_best:.1} µs/step | ≤ 250 µs/step |"
        );
        let (normal, normal_best) = d1(runs, Synchronous::Normal);
        println!(
            "| D1 | the same on SQLite NORMAL ({runs} runs) | {normal:.1} µs/step | {normal_best:.1} µs/step | ≤ 30 µs/step |"
        );
    }
    if only.as_deref() == Some("d1-normal") {
        let (normal, best) = d1(if quick { 2 } else { 10 }, Synchronous::Normal);
        println!("| D1 | SQLite NORMAL | {normal:.1} µs/step | {best:.1} µs/step | ≤ 30 µs/step |");
    }
    if wanted("d2") {
        let runs = if quick { 2 } else { 10 };
        let (median, best) = d2(runs);
        println!(
            "| D2 | W2 durable: fan-out to 1,000 branches + join, FULL ({runs} runs) | {median:.1} ms/run | {best:.1} ms/run | ≤ 20 ms/run |"
        );
    }
    if wanted("d3") {
        let runs = if quick { 1 } else { 5 };
        let walls: Vec<f64> = (0..runs).map(|_| concurrent_sqlite(1_000, true).0).collect();
        let best = walls.iter().copied().fold(f64::INFINITY, f64::min);
        let wall = median(walls);
        println!(
            "| D3 | W3 durable: 1,000 concurrent runs × 10 steps × 10 ms timer, FULL ({runs} runs) | {wall:.1} ms wall | {best:.1} ms wall | ≤ 200 ms |"
        );
    }
    if wanted("d4") {
        let (wall, rate) = concurrent_sqlite(1_000, false);
        println!(
            "| D4 | 1,000 concurrent runs × 10 trivial steps, FULL ({wall:.0} ms wall) | {rate:.0} steps/s | | ≥ 20,000 steps/s |"
        );
    }
    if wanted("d7") {
        let bytes = d7();
        println!(
            "| D7 | journal bytes per trivial step (SQLite file growth over 10,000 steps) | {bytes:.0} B/step | | ≤ 300 B |"
        );
    }
    if wanted("d5") {
        let runs = if quick { 3 } else { 15 };
        let process = d5_process(runs);
        println!(
            "| D5 | W4: 100-step run stopped after step 50, finished by a new process, process start included ({runs} runs) | {process:.1} ms | | ≤ 20 ms |"
        );
        let to_next = resume_to_next_step(1_000, runs, false);
        println!(
            "| D5 | resume of a run with 1,000 completed steps (fresh store): to the next step ({runs} runs) | {to_next:.2} ms | | ≤ 10 ms |"
        );
    }
    if wanted("d6") {
        let runs = if quick { 3 } else { 25 };
        let latency = resume_to_next_step(10, runs, true);
        println!(
            "| D6 | approval resolved → next step starts, same process ({runs} runs) | {latency:.2} ms | | ≤ 2 ms |"
        );
    }
    if wanted("l1") {
        let runs = if quick { 5 } else { 100 };
        let (median, best) = l1(runs, Arc::new(InMemoryStore::new()));
        println!(
            "| L1 | engine overhead per model call: 100 `llm` steps with structured output, instant model, in-memory journal ({runs} runs) | {median:.1} µs/call | {best:.1} µs/call | ≤ 50 µs + the commit |"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let (_, store) = sqlite_engine(dir.path(), "l1.db", Synchronous::Normal);
        let (median, best) = l1(runs.min(20), store);
        println!(
            "| L1 | the same with the commits, SQLite NORMAL | {median:.1} µs/call | {best:.1} µs/call | (reference) |"
        );
    }
    if wanted("r1") {
        experiments::print_r1(if quick { &[100, 1_000] } else { &[1_000, 10_000] });
    }
    if wanted("x2") {
        experiments::print_x2(if quick { 100 } else { 1_000 });
    }
    if wanted("o1") {
        observability::o1(if quick { 10 } else { 200 });
    }
    if wanted("a1") {
        let runs = if quick { 5 } else { 100 };
        for turns in [10, 50] {
            let (median, best) = a1(turns, runs, Arc::new(InMemoryStore::new()));
            println!(
                "| A1 | engine overhead per agent turn (model call + tool call, both journaled): {turns}-turn agent, instant model and tool, in-memory journal ({runs} runs) | {median:.1} µs/turn | {best:.1} µs/turn | ≤ 50 µs + the commit |"
            );
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (_, store) = sqlite_engine(dir.path(), "a1.db", Synchronous::Normal);
        let (median, best) = a1(10, runs.min(20), store);
        println!(
            "| A1 | the 10-turn agent with the commits, SQLite NORMAL | {median:.1} µs/turn | {best:.1} µs/turn | (reference) |"
        );
    }
    if wanted("w3-postgres") {
        match std::env::var("STEPWRIGHT_TEST_DATABASE_URL") {
            Ok(url) => {
                let runs = if quick { 1 } else { 5 };
                let sqlite = median((0..runs).map(|_| concurrent_sqlite(1_000, true).0).collect());
                let postgres = median((0..runs).map(|_| postgres::w3_on_postgres(&url, 1_000)).collect());
                println!(
                    "| W3 on Postgres | 1,000 concurrent runs × 10 steps × 10 ms timer, one process, Postgres ({runs} runs) | {postgres:.1} ms wall | | ≤ 2× the same on SQLite FULL: {sqlite:.1} ms ({:.2}×) |",
                    postgres / sqlite
                );
            }
            Err(_) => println!("| W3 on Postgres | skipped: STEPWRIGHT_TEST_DATABASE_URL is not set | | | |"),
        }
    }
    if wanted("d8") {
        match std::env::var("STEPWRIGHT_TEST_DATABASE_URL") {
            Ok(url) => {
                let options = postgres::Options::from_args(&args);
                for clients in &options.floor_clients {
                    let tps = postgres::floor(&url, *clients, 3.0);
                    println!(
                        "| D8 floor | the same Postgres: single-row INSERT per transaction, {clients} client(s), 3 s | {tps:.0} tps | | (floor) |"
                    );
                }
                for workers in &options.workers {
                    let d8 = postgres::d8(&url, *workers, options.runs);
                    let statements = d8.statements_per_step.map_or_else(
                        || "statements/step n/a (no pg_stat_statements)".to_owned(),
                        |s| format!("{s:.2} statements/step"),
                    );
                    println!(
                        "| D8 | {} runs × 10 trivial steps on Postgres, {} worker process(es) ({:.0} ms wall; claim→first step p50 {:.1} ms, p99 {:.1} ms; {:.2} commits/step, {statements}; {:.1} appends per group commit, largest {}) | {:.0} steps/s | | (report) |",
                        d8.runs,
                        d8.workers,
                        d8.wall_ms,
                        d8.claim_to_start_p50_ms,
                        d8.claim_to_start_p99_ms,
                        d8.commits_per_step,
                        d8.appends_per_commit,
                        d8.largest_commit,
                        d8.steps_per_second
                    );
                }
            }
            Err(_) => println!("| D8 | skipped: STEPWRIGHT_TEST_DATABASE_URL is not set | | | |"),
        }
    }
    if wanted("s1") {
        let (period, seconds, idle) =
            if quick { (Duration::from_secs(10), 10, 5) } else { (Duration::from_secs(60), 60, 30) };
        let dir = tempfile::tempdir().expect("tempdir");
        let mut stores = vec![("SQLite", schedules::Target::Sqlite(dir.path().join("s1.db")))];
        if let Ok(url) = std::env::var("STEPWRIGHT_TEST_DATABASE_URL") {
            stores.push(("Postgres", schedules::Target::Postgres(url)));
        }
        for (name, store) in stores {
            let f = schedules::s1(store, period, seconds, idle);
            println!(
                "| S1 | {} schedules every {period:?} (phases spread), one worker, {name}: tick → run executing over {seconds} s ({} ticks) | p50 {:.1} ms, p99 {:.1} ms | max {:.1} ms | (report) |",
                schedules::SCHEDULES,
                f.ticks,
                f.p50_ms,
                f.p99_ms,
                f.max_ms
            );
            println!(
                "| S1 | the same worker with no tick due (each schedule's next a year away), {name}, {idle} s | {:.1} ms CPU/s | | (report) |",
                f.idle_cpu_ms_per_s
            );
        }
    }
    if wanted("e1") {
        let (rate, seconds, burst) = if quick { (100, 5, 800) } else { (200, 30, 8_000) };
        let dir = tempfile::tempdir().expect("tempdir");
        let mut stores = vec![("SQLite", schedules::Target::Sqlite(dir.path().join("e1.db")))];
        if let Ok(url) = std::env::var("STEPWRIGHT_TEST_DATABASE_URL") {
            stores.push(("Postgres", schedules::Target::Postgres(url)));
        }
        for (name, store) in stores {
            let f = events::e1(store, rate, seconds, burst);
            println!(
                "| E1 | {rate} events/s for {seconds} s, one trigger, one worker (woken by the sends, as `serve` is), {name}: event → run executing ({} runs) | p50 {:.1} ms, p99 {:.1} ms | max {:.1} ms | (report) |",
                f.events, f.p50_ms, f.p99_ms, f.max_ms
            );
            println!(
                "| E1 | {burst} events from 8 senders at once (each with an idempotency key), {name} | {:.0} events/s | | (report) |",
                f.burst_per_second
            );
        }
    }
    let cli_built = std::env::current_exe().map(|e| e.with_file_name("stepwright").exists()).unwrap_or(false);
    if wanted("x1") && cli_built {
        let runs = if quick { 3 } else { 20 };
        let mut stores = vec![("SQLite".to_owned(), "sqlite".to_owned())];
        if let Ok(url) = std::env::var("STEPWRIGHT_TEST_DATABASE_URL") {
            stores.push(("Postgres".to_owned(), url));
        }
        for (name, db) in stores {
            let (step, exit) = cancel_figures(runs, &db);
            println!(
                "| X1 | `stepwright cancel` from another process → the running step's tool process is gone, {name}, cancel process start included ({runs} runs) | {step:.1} ms | | ≤ 250 ms |"
            );
            println!(
                "| X1 | the same → the `run` process has exited with the run `cancelled` ({runs} runs) | {exit:.1} ms | | (report) |"
            );
        }
    }
    if wanted("cli") && !cli_built {
        println!("| CLI | skipped: build it first with `cargo build --release -p stepwright-cli` | | | |");
    }
    if wanted("cli") && cli_built {
        let runs = if quick { 3 } else { 20 };
        let (validate, run) = cli_figures(runs);
        println!(
            "| CLI | `stepwright validate` on a 200-step file, process start included ({runs} runs) | {validate:.1} ms | | ≤ 50 ms |"
        );
        println!(
            "| CLI | `stepwright run` of a three-step workflow on SQLite, process start included ({runs} runs) | {run:.1} ms | | ≤ 50 ms |"
        );
    }
}
