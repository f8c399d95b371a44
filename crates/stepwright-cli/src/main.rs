//! `stepwright`: run, validate and inspect workflows (DESIGN §10).
//!
//! A thin binary: parse arguments, dispatch, print, exit with the documented code —
//! 0 completed (or valid), 1 failed, 2 bad usage, file or input, 3 suspended, 130 Ctrl-C.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod progress;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use stepwright_core::journal::DefinitionSource;
use stepwright_core::store::RunFilter;
use stepwright_core::{
    Decision, Engine, EngineBuilder, MemoryBank, RunId, RunReport, RunStatus, SessionStore, StepPath, Store,
};

#[derive(Parser)]
#[command(name = "stepwright", version, about = "A durable engine for AI-agent workflows")]
struct Cli {
    /// The store: `sqlite://PATH` or `postgres://…` (default: `STEPWRIGHT_DB`, else
    /// `sqlite://stepwright.db` in the current directory).
    #[arg(long, global = true)]
    db: Option<String>,
    #[command(flatten)]
    models: ModelFlags,
    #[command(subcommand)]
    command: Command,
}

/// How workflow files are loaded and their models reached (every command that loads a
/// file or runs steps).
#[derive(clap::Args, Clone, Debug, Default)]
struct ModelFlags {
    /// A directory that `workflow:` calls may reach besides the first file's own directory
    /// tree (repeatable).
    #[arg(long = "allow-dir", value_name = "DIR", global = true)]
    allow_dirs: Vec<PathBuf>,
    /// Replace a model binding of the file: `NAME=provider:model[@base_url]` (repeatable).
    #[arg(long = "model", value_name = "NAME=SPEC", global = true)]
    overrides: Vec<String>,
    /// Record model calls to, or replay them from, this file.
    #[arg(long, value_name = "FILE", global = true)]
    cassette: Option<PathBuf>,
    /// `auto` (replay what is recorded, call and record the rest), `replay` (never call a
    /// model: a missing recording fails the step) or `record`.
    #[arg(long, value_name = "MODE", default_value = "auto", global = true)]
    cassette_mode: String,
}

impl ModelFlags {
    fn load_options(&self) -> stepwright_flow::LoadOptions {
        stepwright_flow::LoadOptions { allowed_dirs: self.allow_dirs.clone(), ..Default::default() }
    }
}

/// The largest `--input @FILE` read (16 MiB).
const MAX_INPUT_BYTES: u64 = 16 << 20;

/// A store with everything the CLI's steps use: the journal, sessions and memory.
trait CliStore: Store + SessionStore + MemoryBank {}

impl<T: Store + SessionStore + MemoryBank> CliStore for T {}

#[derive(Subcommand)]
enum Command {
    /// Run a workflow file; live progress, then the output.
    Run {
        /// The workflow file.
        file: PathBuf,
        /// The input: JSON, or `@file.json`.
        #[arg(long)]
        input: Option<String>,
        /// Print one JSON object: run_id, status, output, error, pending.
        #[arg(long)]
        json: bool,
        /// Create the run and return at once (a worker executes it).
        #[arg(long)]
        detach: bool,
        #[command(flatten)]
        who: Identity,
    },
    /// Load and check a workflow file; every problem as `file:line:col: message`.
    Validate {
        /// The workflow file.
        file: PathBuf,
    },
    /// Print the JSON Schema of the workflow file format, for editors (YAML language
    /// servers read it from a `# yaml-language-server: $schema=…` comment).
    Schema,
    /// Draw a workflow.
    Graph {
        /// The workflow file.
        file: PathBuf,
        /// `mermaid` or `dot`.
        #[arg(long, default_value = "mermaid")]
        format: String,
    },
    /// Inspect runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// Approve an open interrupt (with `--payload`: approve with a corrected value), then
    /// continue the run.
    Approve {
        /// The run id.
        run: String,
        #[command(flatten)]
        who: Decider,
        /// Approve with this corrected payload (JSON).
        #[arg(long)]
        payload: Option<String>,
        /// One JSON object, as `run --json` prints.
        #[arg(long)]
        json: bool,
    },
    /// Reject an open interrupt, then continue the run.
    Reject {
        /// The run id.
        run: String,
        #[command(flatten)]
        who: Decider,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Answer an `input` interrupt with a value, then continue the run.
    Respond {
        /// The run id.
        run: String,
        #[command(flatten)]
        who: Decider,
        /// The answer (JSON).
        #[arg(long)]
        value: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Continue a run left by a crash, Ctrl-C, a checkpoint or a due timer. A run another
    /// live process executes is not taken (exit 2, saying who holds it and until when); one
    /// whose process died on this host is taken over at once, others once their lease
    /// lapses. A finished run is shown with its status's exit code.
    Resume {
        /// The run id.
        run: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
        /// Resume only a run of this tenant (another tenant's run is refused).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Cancel a run, wherever it executes: a run nobody executes is cancelled at once; a run
    /// a live process executes is stopped by that process (its running steps and tools are
    /// stopped, no later step starts), and this waits for it to end.
    Cancel {
        /// The run id.
        run: String,
        /// Why.
        #[arg(long, default_value = "cancelled from the command line")]
        reason: String,
        /// Who asks (kept with the cancellation).
        #[arg(long = "as")]
        user: Option<String>,
        /// How long to wait for a run executing elsewhere to stop (`10s`, `1m`).
        #[arg(long, default_value = "10s", value_parser = parse_duration_arg)]
        wait: std::time::Duration,
    },
    /// Re-execute a run with current code (effects and decisions served from the journal)
    /// and report per step whether outputs are identical. Exit 0 identical, 1 changed.
    Replay {
        /// The run id.
        run: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Re-execute a run (or from a step) with a new definition, and report what changed.
    /// Exit 0 clean, 1 changed.
    Recompute {
        /// The run id.
        run: String,
        /// The new workflow file (default: the run's own definition).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Re-execute from this step on.
        #[arg(long)]
        from: Option<String>,
        /// Keep the result as a new run forked from this one.
        #[arg(long)]
        persist: bool,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Start a new run from the checkpoint before a step.
    Fork {
        /// The run id.
        run: String,
        /// The step to fork before.
        #[arg(long)]
        at: String,
        /// Edits: `{"input": …, "steps": {"<path>": <output>}}`.
        #[arg(long)]
        set: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Claim and execute due runs: created with --detach, timers, retries, deadlines, runs
    /// left by a dead worker. Runs until Ctrl-C.
    Worker {
        /// Execute what is due now, then exit.
        #[arg(long)]
        once: bool,
        /// `text` (a line per claim, finished run, stopped run and store error, on stderr)
        /// or `json` (the same as JSON lines).
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        log_format: String,
        /// Execute only runs started in this tenant (a worker dedicated to one tenant).
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// Who starts a run: templates see it as `run.tenant`, `run.user`, `run.roles`; sessions
/// and user-scoped memory belong to it (DESIGN §14: whoever may open the database is
/// trusted to say who they are).
#[derive(clap::Args)]
struct Identity {
    /// The tenant (namespace) the run belongs to.
    #[arg(long)]
    tenant: Option<String>,
    /// The user starting it.
    #[arg(long = "as")]
    user: Option<String>,
    /// A role of that user (repeatable).
    #[arg(long = "role")]
    roles: Vec<String>,
}

impl Identity {
    fn caller(&self) -> stepwright_core::Caller {
        stepwright_core::Caller {
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            roles: self.roles.clone(),
            ..Default::default()
        }
    }
}

/// A duration argument, written as in workflow files (`500ms`, `10s`, `5m`, `1h`).
fn parse_duration_arg(text: &str) -> Result<std::time::Duration, String> {
    stepwright_flow::parse_duration(text).ok_or_else(|| format!("{text:?} is not a duration like 500ms, 10s, 5m or 1h"))
}

/// Who decides, and which interrupt.
#[derive(clap::Args)]
struct Decider {
    /// The interrupt (default: the run's only open one).
    #[arg(long)]
    interrupt: Option<String>,
    /// Decide as this user.
    #[arg(long = "as")]
    user: Option<String>,
    /// A role of the deciding user (repeatable).
    #[arg(long = "role")]
    roles: Vec<String>,
    /// The deciding user's tenant: a run of another tenant is refused.
    #[arg(long)]
    tenant: Option<String>,
}

#[derive(Subcommand)]
enum RunsCommand {
    /// A table of runs, newest first, a page at a time (the next page's command is printed
    /// on stderr when more exist).
    List {
        /// Only runs with this status.
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this workflow.
        #[arg(long)]
        workflow: Option<String>,
        /// At most this many runs.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Only runs older than this one (the last run of the previous page).
        #[arg(long)]
        before: Option<String>,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A run's event log: step lifecycle (`step.started`, `step.completed`, `step.failed`,
    /// `interrupt.opened`, ...) interleaved with the events its steps emitted.
    Events {
        /// The run id.
        run: String,
        /// Keep printing as the run goes on, until it finishes (Ctrl-C stops watching).
        #[arg(long)]
        follow: bool,
        /// JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// One run's timeline.
    Show {
        /// The run id.
        run: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// A usage, file or input problem: exit code 2.
#[derive(Debug)]
struct BadInput(String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

fn main() -> ExitCode {
    // A reader that went away (`stepwright schema | head`) ends the output, not in a panic:
    // `println!` panics on a closed pipe, and that panic is turned into a quiet exit.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info.payload().downcast_ref::<String>().map_or("", String::as_str);
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default_hook(info);
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("stepwright: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.is::<BadInput>() => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
        Err(e) => match run_not_found(&e) {
            // A run id that names no run is the user's mistake, whichever layer noticed it.
            Some(missing) => {
                eprintln!("stepwright: {missing}");
                ExitCode::from(2)
            }
            None => {
                eprintln!("stepwright: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

/// The `RunNotFound` somewhere in an error's chain of causes.
fn run_not_found(error: &anyhow::Error) -> Option<&stepwright_core::StoreError> {
    error
        .chain()
        .filter_map(|cause| cause.downcast_ref::<stepwright_core::StoreError>())
        .find(|cause| matches!(cause, stepwright_core::StoreError::RunNotFound(_)))
}

async fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    let flags = cli.models.clone();
    let flags = &flags;
    match cli.command {
        Command::Schema => {
            println!("{}", serde_json::to_string_pretty(&stepwright_flow::file_schema())?);
            Ok(0)
        }
        Command::Validate { file } => {
            load(&file, flags, Servers::Declared).await?;
            println!("{}: ok", file.display());
            Ok(0)
        }
        Command::Graph { file, format } => {
            let workflow = load(&file, flags, Servers::Declared).await?;
            println!("{}", draw(workflow.describe(), &format)?);
            Ok(0)
        }
        Command::Run { file, input, json, detach, who } => {
            let workflow = load(&file, flags, Servers::Connected).await?;
            let input = parse_input(input.as_deref())?;
            let store = open_store(cli.db.as_deref()).await?;
            // Keep the source: any later command, or a worker elsewhere, rebuilds the
            // definition from the store.
            let source = std::fs::read_to_string(&file)?;
            let definition = DefinitionSource { format: "yaml".into(), name: file.display().to_string(), source };
            store.put_definition(workflow.hash(), definition).await?;
            let engine = cli_engine(&store, !json);
            let options = stepwright_core::StartOptions { caller: who.caller(), ..Default::default() };
            if detach {
                let record = engine.create(&workflow, input, options).await.map_err(input_error)?;
                println!(
                    "{}",
                    if json {
                        json!({ "run_id": record.id, "status": record.status }).to_string()
                    } else {
                        record.id.to_string()
                    }
                );
                return Ok(0);
            }
            let run = engine.start_with(&workflow, input, options);
            tokio::pin!(run);
            let report = tokio::select! {
                report = &mut run => report.map_err(input_error)?,
                _ = tokio::signal::ctrl_c() => {
                    eprintln!("stepwright: interrupted; the run stays resumable");
                    return Ok(130);
                }
            };
            print_report(&report, json);
            Ok(exit_code(report.status))
        }
        Command::Approve { run, who, payload, json } => {
            let decision = match payload {
                Some(payload) => Decision::Modify { payload: parse_json(&payload, "--payload")? },
                None => Decision::Approve,
            };
            decide(cli.db.as_deref(), flags, &run, &who, decision, json).await
        }
        Command::Reject { run, who, reason, json } => {
            decide(cli.db.as_deref(), flags, &run, &who, Decision::Reject { reason }, json).await
        }
        Command::Respond { run, who, value, json } => {
            let value = parse_json(&value, "--value")?;
            decide(cli.db.as_deref(), flags, &run, &who, Decision::Respond { value }, json).await
        }
        Command::Resume { run, json, tenant } => {
            let run = parse_run(&run)?;
            let store = open_store(cli.db.as_deref()).await?;
            let engine = cli_engine(&store, !json);
            let report = engine.report(run).await?;
            check_tenant(store.as_ref(), run, tenant.as_deref()).await?;
            if report.status.is_terminal() {
                // Nothing to continue: say how it ended, as `run` did.
                print_report(&report, json);
                return Ok(exit_code(report.status));
            }
            let workflow = definition_of(&store, run, flags).await?;
            let report = engine.resume(&workflow, run).await.map_err(held_elsewhere)?;
            print_report(&report, json);
            Ok(exit_code(report.status))
        }
        Command::Cancel { run, reason, user, wait } => {
            let run = parse_run(&run)?;
            let store = open_store(cli.db.as_deref()).await?;
            let engine = engine_over(&store).build();
            cancel(&engine, run, &reason, user.as_deref(), wait).await
        }
        Command::Worker { once, log_format, tenant } => {
            let store = open_store(cli.db.as_deref()).await?;
            let engine = engine_over(&store)
                .worker_id(&stepwright_core::local_worker_id("worker", &stepwright_core::SystemEntropy::new()))
                .build();
            let worker_flags = flags.clone();
            let resolver: stepwright_core::DefinitionResolver = Arc::new(move |record| {
                let (store, flags) = (store.clone(), worker_flags.clone());
                Box::pin(async move { definition_of(&store, record.id, &flags).await.ok() })
            });
            let log = worker_log(log_format == "json", engine.worker_id().to_owned());
            let mut runner = stepwright_core::Runner::new(engine).resolve_with(resolver).log_to(log);
            if let Some(tenant) = &tenant {
                runner = runner.only_tenant(tenant);
            }
            if once {
                runner.tick().await?;
                return Ok(0);
            }
            let stop = tokio_util_stop();
            let signal = stop.clone();
            tokio::spawn(async move {
                let _ = tokio::signal::ctrl_c().await;
                signal.cancel();
            });
            runner.run(stop).await?;
            Ok(130)
        }
        Command::Replay { run, json } => {
            let run = parse_run(&run)?;
            let store = open_store(cli.db.as_deref()).await?;
            let workflow = definition_of(&store, run, flags).await?;
            let report = cli_engine(&store, false).replay(&workflow, run).await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                for step in &report.steps {
                    println!("{:<12} {}", format!("{:?}", step.outcome).to_lowercase(), step.path);
                }
                println!("{}", if report.identical { "identical" } else { "changed" });
            }
            Ok(u8::from(!report.identical))
        }
        Command::Recompute { run, file, from, persist, json } => {
            let run = parse_run(&run)?;
            let store = open_store(cli.db.as_deref()).await?;
            let workflow = match &file {
                Some(file) => load(file, flags, Servers::Connected).await?,
                None => definition_of(&store, run, flags).await?,
            };
            if let Some(file) = &file {
                let source = std::fs::read_to_string(file)?;
                let definition = DefinitionSource { format: "yaml".into(), name: file.display().to_string(), source };
                store.put_definition(workflow.hash(), definition).await?;
            }
            let options = stepwright_core::RecomputeOptions { from: from.as_deref().map(StepPath::new), persist };
            let report = cli_engine(&store, false).recompute(&workflow, run, options).await.map_err(|e| match e {
                stepwright_core::EngineError::InvalidRequest { .. } => anyhow!(BadInput(e.to_string())),
                other => anyhow!(other),
            })?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                for step in &report.steps {
                    match &step.change {
                        stepwright_core::StepChange::ValueChanged { diff } => {
                            println!("value_changed {}", step.path);
                            for line in diff {
                                println!("    {line}");
                            }
                        }
                        other => println!("{:<13} {}", change_name(other), step.path),
                    }
                }
                for decision in &report.decisions {
                    println!("decision      {}: {} → {}", decision.path, show(&decision.before), show(&decision.after));
                }
                if let Some(forked) = report.forked {
                    println!("kept as run {forked}");
                }
                println!("{}", if report.changed { "changed" } else { "clean" });
            }
            Ok(u8::from(report.changed))
        }
        Command::Fork { run, at, set, json } => {
            let run = parse_run(&run)?;
            let store = open_store(cli.db.as_deref()).await?;
            let mut patch = stepwright_core::ForkPatch::default();
            if let Some(set) = set {
                let edits = parse_json(&set, "--set")?;
                patch.input = edits.get("input").cloned();
                if let Some(steps) = edits.get("steps").and_then(Value::as_object) {
                    patch.outputs = steps.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                }
            }
            let record =
                cli_engine(&store, false).fork(run, &StepPath::new(&at), patch).await.map_err(|e| match e {
                    stepwright_core::EngineError::InvalidRequest { .. } => anyhow!(BadInput(e.to_string())),
                    other => anyhow!(other),
                })?;
            if json {
                println!("{}", json!({ "run_id": record.id, "status": record.status, "parent": run, "at": at }));
            } else {
                println!("{}", record.id);
            }
            Ok(0)
        }
        Command::Runs { command } => {
            let store = open_store(cli.db.as_deref()).await?;
            match command {
                RunsCommand::List { status, workflow, limit, before, json } => {
                    let status = status
                        .map(|s| RunStatus::parse(&s).ok_or_else(|| BadInput(format!("unknown status {s:?}"))))
                        .transpose()?;
                    if limit == 0 {
                        return Err(anyhow!(BadInput("--limit must be at least 1".into())));
                    }
                    let before = before.as_deref().map(parse_run).transpose()?;
                    // One more than shown says whether another page exists.
                    let filter = RunFilter { status, workflow, limit: Some(limit + 1), before, headers_only: true };
                    let mut runs = store.list_runs(filter).await?;
                    let more = runs.len() > limit;
                    runs.truncate(limit);
                    let now = wall_now();
                    if json {
                        for run in &runs {
                            println!(
                                "{}",
                                json!({
                                    "run_id": run.id,
                                    "workflow": run.workflow,
                                    "status": run.status,
                                    "created_at": run.created_at,
                                    "owner": run.lease.as_ref().map(|l| &l.owner),
                                    "lease_expires_at": run.lease.as_ref().map(|l| l.expires_at),
                                })
                            );
                        }
                    } else {
                        println!("{:<38} {:<24} {:<10} OWNER", "RUN", "WORKFLOW", "STATUS");
                        for run in &runs {
                            println!(
                                "{:<38} {:<24} {:<10} {}",
                                run.id,
                                run.workflow,
                                run.status.as_str(),
                                owner_text(run, now)
                            );
                        }
                    }
                    if more && let Some(last) = runs.last() {
                        eprintln!("more runs: stepwright runs list --before {} --limit {limit}", last.id);
                    }
                    Ok(0)
                }
                RunsCommand::Events { run, follow, json } => {
                    let run = parse_run(&run)?;
                    let mut log = EventLog::default();
                    loop {
                        for event in log.poll(store.as_ref(), run).await? {
                            if json {
                                println!("{}", serde_json::to_string(&event)?);
                            } else {
                                println!(
                                    "{} {:<24} {:<20} {}",
                                    clock_time(event.at),
                                    event.kind,
                                    event.path.as_str(),
                                    event.data
                                );
                            }
                        }
                        if !follow || log.finished {
                            return Ok(0);
                        }
                        // Polling keeps `--follow` working on every store and across processes;
                        // a quarter second is well below what a person watching notices.
                        tokio::select! {
                            () = tokio::time::sleep(std::time::Duration::from_millis(250)) => {}
                            _ = tokio::signal::ctrl_c() => return Ok(130),
                        }
                    }
                }
                RunsCommand::Show { run, json } => {
                    let run: RunId = run.parse().map_err(|e| BadInput(format!("{e}")))?;
                    let engine = engine_over(&store).build();
                    let report = engine.report(run).await?;
                    let loaded = store.load(run).await?;
                    let mut steps = timeline(&loaded);
                    // Model usage and cost, summed per step from the `model.call` events.
                    let events = store.events(run).await?;
                    let (by_step, total) = stepwright_llm::rollup(&events);
                    for step in &mut steps {
                        if let Some(usage) = step["path"].as_str().and_then(|p| by_step.get(p)) {
                            step["usage"] = json!(usage);
                        }
                    }
                    if json {
                        let mut object = report_json(&report);
                        object["workflow"] = json!(loaded.record.workflow);
                        if let Some(lease) = &loaded.record.lease {
                            object["owner"] = json!(lease.owner);
                            object["lease_expires_at"] = json!(lease.expires_at);
                        }
                        object["steps"] = Value::Array(steps);
                        if total.calls > 0 {
                            object["usage"] = json!(total);
                        }
                        println!("{object}");
                    } else {
                        println!("run {} ({}) {}", run, loaded.record.workflow, report.status.as_str());
                        if !report.status.is_terminal() && loaded.record.lease.is_some() {
                            println!("  executed by {}", owner_text(&loaded.record, wall_now()));
                        }
                        if let Some(cancel) = &loaded.record.cancel {
                            println!(
                                "  cancel asked{}: {}",
                                cancel.by.as_deref().map(|by| format!(" by {by}")).unwrap_or_default(),
                                cancel.reason
                            );
                        }
                        print_timeline(&steps);
                        if total.calls > 0 {
                            println!("  model usage:{}", usage_text(&json!(total)));
                        }
                        for pending in &report.pending {
                            println!("  waiting: {} at {} — {}", pending.id, pending.step, pending.message);
                        }
                    }
                    Ok(0)
                }
            }
        }
    }
}

/// Each command is its own worker (`cli@host:pid:nonce`): a run it executes is not taken by
/// another command while it lives, and is taken over at once once it is gone.
fn cli_engine(store: &Arc<dyn CliStore>, progress: bool) -> Engine {
    let name = stepwright_core::local_worker_id("cli", &stepwright_core::SystemEntropy::new());
    let mut builder = engine_over(store).worker_id(&name);
    if progress {
        builder = builder.observer(Arc::new(progress::Progress::for_stderr()));
    }
    builder.build()
}

fn change_name(change: &stepwright_core::StepChange) -> &'static str {
    use stepwright_core::StepChange;
    match change {
        StepChange::Clean => "clean",
        StepChange::ValueChanged { .. } => "value_changed",
        StepChange::SchemaViolation { .. } => "schema_violation",
        StepChange::Served => "served",
        StepChange::Missing => "missing",
        StepChange::Added => "added",
    }
}

/// `  3 calls, 1200 in / 80 out tokens, $0.000420` from a usage roll-up.
fn usage_text(usage: &Value) -> String {
    format!(
        "  {} call(s), {} in / {} out tokens, ${:.6}",
        usage["calls"],
        usage["input_tokens"],
        usage["output_tokens"],
        usage["cost_usd"].as_f64().unwrap_or(0.0)
    )
}

fn show(value: &Option<Value>) -> String {
    value.as_ref().map_or_else(|| "(none)".to_owned(), Value::to_string)
}

fn tokio_util_stop() -> stepwright_core::CancellationToken {
    stepwright_core::CancellationToken::new()
}

fn parse_run(text: &str) -> anyhow::Result<RunId> {
    text.parse().map_err(|e| anyhow!(BadInput(format!("{e}"))))
}

fn parse_json(text: &str, what: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).map_err(|e| anyhow!(BadInput(format!("{what} is not JSON: {e}"))))
}

/// Rebuilds a run's definition from the source the store keeps.
async fn definition_of(
    store: &Arc<dyn CliStore>,
    run: RunId,
    flags: &ModelFlags,
) -> anyhow::Result<stepwright_core::Workflow> {
    let record = store.load(run).await?.record;
    let source = store.get_definition(record.definition_hash).await?.ok_or_else(|| {
        anyhow!("run {run} was not started from a workflow file this store knows (workflow {:?})", record.workflow)
    })?;
    let loaded = stepwright_flow::load_source_with(&source.source, &source.name, &flags.load_options())
        .map_err(|e| anyhow!(BadInput(e.to_string())))?;
    let workflow = prepare(loaded, flags, Servers::Connected).await?;
    if workflow.hash() != record.definition_hash {
        return Err(anyhow!(
            "the stored source of {} no longer compiles to the definition run {run} is pinned to",
            source.name
        ));
    }
    Ok(workflow)
}

/// Resolves an interrupt (the only open one unless `--interrupt`), then continues the run.
async fn decide(
    db: Option<&str>,
    flags: &ModelFlags,
    run: &str,
    who: &Decider,
    decision: Decision,
    json: bool,
) -> anyhow::Result<u8> {
    let run = parse_run(run)?;
    let store = open_store(db).await?;
    let engine = cli_engine(&store, !json);
    let report = engine.report(run).await?;
    let interrupt = match &who.interrupt {
        Some(id) => stepwright_core::InterruptId::new(id),
        None => match report.pending.as_slice() {
            [only] => only.id.clone(),
            [] => return Err(anyhow!(BadInput(format!("run {run} has no open interrupt")))),
            many => {
                let ids: Vec<String> = many.iter().map(|p| format!("{} ({})", p.id, p.step)).collect();
                return Err(anyhow!(BadInput(format!(
                    "run {run} has several open interrupts; pick one with --interrupt: {}",
                    ids.join(", ")
                ))));
            }
        },
    };
    check_tenant(store.as_ref(), run, who.tenant.as_deref()).await?;
    let caller = stepwright_core::Caller {
        tenant: who.tenant.clone(),
        user: who.user.clone(),
        roles: who.roles.clone(),
        ..Default::default()
    };
    engine.resolve(run, &interrupt, decision, &caller).await.map_err(|e| match e {
        stepwright_core::EngineError::Resolve { .. } => anyhow!(BadInput(e.to_string())),
        other => anyhow!(other),
    })?;
    let workflow = definition_of(&store, run, flags).await?;
    match engine.resume(&workflow, run).await {
        Ok(report) => {
            print_report(&report, json);
            Ok(exit_code(report.status))
        }
        // The run waits on this interrupt in a live process, which continues it now.
        Err(stepwright_core::EngineError::Leased { owner, .. }) => {
            if json {
                println!(
                    "{}",
                    json!({ "run_id": run, "status": "running", "decided": interrupt, "executed_by": owner })
                );
            } else {
                eprintln!("decided {interrupt}; run {run} goes on in {owner}, which was waiting for it");
            }
            Ok(0)
        }
        Err(other) => Err(anyhow!(other)),
    }
}

/// Refuses a run of another tenant than the one the caller names.
async fn check_tenant(store: &dyn Store, run: RunId, tenant: Option<&str>) -> anyhow::Result<()> {
    let Some(tenant) = tenant else { return Ok(()) };
    let record = store.load_from(run, u64::MAX).await?.record;
    if record.caller.tenant.as_deref() != Some(tenant) {
        return Err(anyhow!(BadInput(format!("access denied: run {run} does not belong to tenant {tenant:?}"))));
    }
    Ok(())
}

/// A resume refused because a live process executes the run: the caller's to know (exit 2).
fn held_elsewhere(error: stepwright_core::EngineError) -> anyhow::Error {
    match error {
        stepwright_core::EngineError::Leased { run, owner, until } => anyhow!(BadInput(format!(
            "run {run} is being executed by {owner} (its lease runs until {} UTC unless renewed); \
             it is not taken from a live process — cancel it, or resume it once that process is gone",
            clock_time(until)
        ))),
        other => anyhow!(other),
    }
}

/// Who executes a run, for people: the owner and until when, or that its lease lapsed.
fn owner_text(run: &stepwright_core::RunRecord, now: stepwright_core::Timestamp) -> String {
    use stepwright_core::is_dead_local_process;
    match &run.lease {
        _ if run.status.is_terminal() => "-".to_owned(),
        None => "-".to_owned(),
        Some(lease) if lease.expires_at <= now => {
            format!("{} (lease lapsed at {} UTC: presumed dead)", lease.owner, clock_time(lease.expires_at))
        }
        Some(lease) if is_dead_local_process(&lease.owner) => {
            format!("{} (that process is gone; taken over on resume)", lease.owner)
        }
        Some(lease) => format!("{} until {} UTC", lease.owner, clock_time(lease.expires_at)),
    }
}

/// `cancel`: asks, then (for a run another process executes) waits until it has stopped.
async fn cancel(
    engine: &Engine,
    run: RunId,
    reason: &str,
    user: Option<&str>,
    wait: std::time::Duration,
) -> anyhow::Result<u8> {
    use stepwright_core::CancelOutcome;
    match engine.cancel_by(run, reason, user).await? {
        CancelOutcome::Finished(status) => {
            eprintln!("run {run} had already finished: {}", status.as_str());
            Ok(if status == RunStatus::Cancelled { 0 } else { 1 })
        }
        CancelOutcome::Cancelled => {
            println!("cancelled");
            Ok(0)
        }
        CancelOutcome::Requested { owner, .. } => {
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let status = engine.report(run).await?.status;
                if status.is_terminal() {
                    if status == RunStatus::Cancelled {
                        println!("cancelled");
                        return Ok(0);
                    }
                    eprintln!("run {run} {} before the cancel reached it", status.as_str());
                    return Ok(1);
                }
                if tokio::time::Instant::now() >= deadline {
                    eprintln!("cancel of run {run} asked; {owner} executes it and has not stopped it yet");
                    return Ok(0);
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// The worker's log: a line per claim, finished run, stopped run and store failure.
fn worker_log(as_json: bool, worker: String) -> stepwright_core::RunnerLog {
    use stepwright_core::RunnerEvent;
    Arc::new(move |event: RunnerEvent<'_>| {
        let at = wall_now();
        let (kind, run, status, detail) = match &event {
            RunnerEvent::Claimed { run } => ("claimed", Some(*run), None, None),
            RunnerEvent::Finished { run, report } => {
                ("finished", Some(*run), Some(report.status.as_str()), report.error.as_ref().map(ToString::to_string))
            }
            RunnerEvent::Stopped { run, error } => ("stopped", Some(*run), None, Some(error.to_string())),
            RunnerEvent::StoreFailed { error } => ("store_error", None, None, Some(format!("{error:#}"))),
        };
        if as_json {
            let line =
                json!({ "at": at, "worker": worker, "event": kind, "run_id": run, "status": status, "detail": detail });
            eprintln!("{line}");
        } else {
            let mut line = format!("{} {kind:<11}", clock_time(at));
            if let Some(run) = run {
                line.push_str(&format!(" {run}"));
            }
            if let Some(status) = status {
                line.push_str(&format!(" {status}"));
            }
            if let Some(detail) = detail {
                line.push_str(&format!(": {detail}"));
            }
            eprintln!("{line}");
        }
    })
}

fn input_error(e: stepwright_core::EngineError) -> anyhow::Error {
    match e {
        stepwright_core::EngineError::InvalidInput { .. } => anyhow!(BadInput(e.to_string())),
        other => anyhow!(other),
    }
}

/// Whether preparing a workflow starts the MCP servers its file declares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Servers {
    /// Only declared: checking or drawing a file starts no process.
    Declared,
    /// Connected and their tools registered, to run steps.
    Connected,
}

async fn load(file: &Path, flags: &ModelFlags, servers: Servers) -> anyhow::Result<stepwright_core::Workflow> {
    let loaded =
        stepwright_flow::load_with(file, &flags.load_options()).map_err(|e| anyhow!(BadInput(e.to_string())))?;
    prepare(loaded, flags, servers).await
}

/// Binds a loaded file's models (with `--model` overrides and `--cassette`) and hands them
/// to its workflow as a service, beside the file's tools and agents; with
/// [`Servers::Connected`], also starts its MCP servers and adds their tools.
async fn prepare(
    loaded: stepwright_flow::Loaded,
    flags: &ModelFlags,
    servers: Servers,
) -> anyhow::Result<stepwright_core::Workflow> {
    let stepwright_flow::Loaded { workflow, models: mut configs, mcp_servers, mcp_tool_uses } = loaded;
    for entry in &flags.overrides {
        let (name, spec) = entry
            .split_once('=')
            .ok_or_else(|| BadInput(format!("--model {entry:?}: expected NAME=provider:model[@base_url]")))?;
        if !configs.contains_key(name) {
            let known: Vec<&str> = configs.keys().map(String::as_str).collect();
            return Err(anyhow!(BadInput(format!(
                "--model {name}=…: the workflow declares no model {name:?} (its models: {})",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ))));
        }
        let config =
            stepwright_llm::ModelConfig::parse_spec(spec).map_err(|e| BadInput(format!("--model {entry:?}: {e}")))?;
        configs.insert(name.to_owned(), config);
    }
    let mut models = stepwright_llm::Models::new();
    for (name, config) in &configs {
        models.bind(name, config).map_err(|e| BadInput(format!("model {name:?}: {e}")))?;
    }
    if let Some(path) = &flags.cassette {
        let mode: stepwright_llm::CassetteMode =
            flags.cassette_mode.parse().map_err(|e: String| BadInput(format!("--cassette-mode: {e}")))?;
        let cassette = stepwright_llm::Cassette::open(path, mode)
            .map_err(|e| BadInput(format!("--cassette {}: {e}", path.display())))?;
        models = models.with_cassette(cassette);
    }
    let workflow = workflow.with_service(Arc::new(models));
    if servers == Servers::Declared || mcp_servers.is_empty() {
        return Ok(workflow);
    }
    connect_servers(workflow, mcp_servers, &mcp_tool_uses).await
}

/// Connects a file's MCP servers, adds their tools to the workflow's, and checks every use
/// the file makes of them (which tools a server has is known only now).
async fn connect_servers(
    workflow: stepwright_core::Workflow,
    servers: Vec<stepwright_mcp::ServerConfig>,
    uses: &[stepwright_flow::McpToolUse],
) -> anyhow::Result<stepwright_core::Workflow> {
    let mut tools = workflow.services().get::<stepwright_llm::Tools>().map(|t| (*t).clone()).unwrap_or_default();
    for config in servers {
        let name = config.name.clone();
        stepwright_mcp::McpServer::register(config, &mut tools)
            .await
            .with_context(|| format!("starting MCP server {name:?}"))?;
    }
    let problems: Vec<String> = uses
        .iter()
        .filter(|used| tools.get(&used.tool).is_none())
        .map(|used| {
            let (server, tool) = used.tool.split_once('.').unwrap_or_default();
            let prefix = format!("{server}.");
            let offered: Vec<&str> = tools.names().into_iter().filter_map(|n| n.strip_prefix(&prefix)).collect();
            format!(
                "{}:{}:{}: MCP server `{server}` has no tool `{tool}` (hint: it has: {})",
                used.file,
                used.line,
                used.column,
                offered.join(", ")
            )
        })
        .collect();
    if !problems.is_empty() {
        return Err(anyhow!(BadInput(problems.join("\n"))));
    }
    Ok(workflow.with_service(Arc::new(tools)))
}

/// An engine over the store, with the store's sessions and memory for agent and memory
/// steps.
fn engine_over(store: &Arc<dyn CliStore>) -> EngineBuilder {
    Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .service(Arc::new(stepwright_llm::Sessions::new(store.clone() as Arc<dyn SessionStore>)))
        .service(Arc::new(stepwright_llm::MemoryService::new(store.clone() as Arc<dyn MemoryBank>)))
}

fn parse_input(input: Option<&str>) -> anyhow::Result<Value> {
    let Some(input) = input else { return Ok(Value::Null) };
    let text = match input.strip_prefix('@') {
        Some(path) => stepwright_flow::read_limited(Path::new(path), MAX_INPUT_BYTES)
            .map_err(|why| BadInput(format!("the input file {path} cannot be read: {why}")))?,
        None => input.to_owned(),
    };
    serde_json::from_str(&text).map_err(|e| anyhow!(BadInput(format!("the input is not JSON: {e}"))))
}

async fn open_store(db: Option<&str>) -> anyhow::Result<Arc<dyn CliStore>> {
    let url = db
        .map(str::to_owned)
        .or_else(|| std::env::var("STEPWRIGHT_DB").ok())
        .unwrap_or_else(|| "sqlite://stepwright.db".into());
    if let Some(path) = url.strip_prefix("sqlite://") {
        let store = stepwright_store::SqliteStore::open(path).with_context(|| format!("opening {url}"))?;
        return Ok(Arc::new(store));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = stepwright_store::PostgresStore::connect(&url).await.with_context(|| "connecting to postgres")?;
        return Ok(Arc::new(store));
    }
    Err(anyhow!(BadInput(format!("--db {url:?}: expected sqlite://PATH or postgres://…"))))
}

fn exit_code(status: RunStatus) -> u8 {
    match status {
        RunStatus::Completed => 0,
        RunStatus::Suspended | RunStatus::Pending => 3,
        _ => 1,
    }
}

fn report_json(report: &RunReport) -> Value {
    json!({
        "run_id": report.run_id,
        "status": report.status,
        "output": report.output,
        "error": report.error.as_ref().map(|e| json!({ "code": e.code, "message": e.message })),
        "pending": report.pending.iter().map(|p| json!({ "id": p.id, "step": p.step, "kind": p.kind, "message": p.message })).collect::<Vec<_>>(),
    })
}

fn print_report(report: &RunReport, as_json: bool) {
    if as_json {
        println!("{}", report_json(report));
        return;
    }
    match report.status {
        RunStatus::Completed => println!("{}", serde_json::to_string_pretty(&report.output).unwrap_or_default()),
        RunStatus::Suspended => {
            eprintln!("run {} is waiting:", report.run_id);
            for p in &report.pending {
                eprintln!("  {} at {}: {}", p.id, p.step, p.message);
            }
        }
        _ => {
            if let Some(error) = &report.error {
                eprintln!("run {} {}: {error}", report.run_id, report.status.as_str());
            }
        }
    }
}

/// Each step path's last state, in journal order: status, attempts, how long it took from
/// its first start to its end (`duration_ms`, when both are journaled) and its output.
fn timeline(loaded: &stepwright_core::journal::LoadedRun) -> Vec<Value> {
    use stepwright_core::{Record, Timestamp};
    #[derive(Default)]
    struct Row {
        status: &'static str,
        attempts: u32,
        started: Option<Timestamp>,
        ended: Option<Timestamp>,
        output: Option<Value>,
    }
    let mut order: Vec<String> = Vec::new();
    let mut rows: std::collections::HashMap<String, Row> = std::collections::HashMap::new();
    for entry in &loaded.entries {
        let (status, attempt, started, ended) = match &entry.record {
            Record::Started { attempt } => ("running", *attempt, Some(entry.at), None),
            Record::Completed { attempt, started_at, .. } => ("completed", *attempt, *started_at, Some(entry.at)),
            Record::Failed { attempt, retry_at: Some(_), started_at, .. } => ("retrying", *attempt, *started_at, None),
            Record::Failed { attempt, started_at, .. } => ("failed", *attempt, *started_at, Some(entry.at)),
            Record::Skipped { .. } => ("skipped", 0, None, Some(entry.at)),
            Record::InterruptOpened { .. } => ("waiting", 0, None, None),
            Record::Cancelled { .. } => ("cancelled", 0, None, Some(entry.at)),
            _ => continue,
        };
        let path = entry.path.as_str();
        if !rows.contains_key(path) {
            order.push(path.to_owned());
        }
        let row = rows.entry(path.to_owned()).or_default();
        row.status = status;
        row.attempts = row.attempts.max(attempt);
        row.started = row.started.or(started);
        row.ended = ended;
        if let Record::Completed { output, .. } = &entry.record {
            row.output = loaded.blobs.get(output).map(|v| (**v).clone());
        }
    }
    order
        .into_iter()
        .map(|path| {
            let row = &rows[&path];
            let mut step = json!({ "path": path, "status": row.status, "attempts": row.attempts });
            if let (Some(started), Some(ended)) = (row.started, row.ended) {
                step["duration_ms"] = json!(ended.since(started).as_secs_f64() * 1000.0);
            }
            if let Some(output) = &row.output {
                step["output"] = output.clone();
            }
            step
        })
        .collect()
}

/// The timeline as a table for people: a row per step path, outputs shortened.
fn print_timeline(steps: &[Value]) {
    println!(
        "  {:<32} {:<10} {:>5} {:>9} {:>8} {:>9}  OUTPUT",
        "STEP", "STATUS", "TRIES", "DURATION", "TOKENS", "COST"
    );
    for step in steps {
        let duration = step["duration_ms"]
            .as_f64()
            .map_or_else(|| "-".to_owned(), |ms| progress::duration(std::time::Duration::from_secs_f64(ms / 1000.0)));
        let usage = &step["usage"];
        let tokens = usage["input_tokens"].as_u64().map(|i| i + usage["output_tokens"].as_u64().unwrap_or(0));
        let cost = usage["cost_usd"].as_f64().filter(|c| *c > 0.0);
        println!(
            "  {:<32} {:<10} {:>5} {:>9} {:>8} {:>9}  {}",
            step["path"].as_str().unwrap_or_default(),
            step["status"].as_str().unwrap_or_default(),
            step["attempts"].as_u64().unwrap_or_default(),
            duration,
            tokens.map_or_else(|| "-".to_owned(), |t| t.to_string()),
            cost.map_or_else(|| "-".to_owned(), progress::dollars),
            step.get("output").map(|o| shortened(&o.to_string(), 48)).unwrap_or_default(),
        );
    }
}

/// `text` cut to `width` characters, marked with `…` when cut.
fn shortened(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    format!("{}…", text.chars().take(width - 1).collect::<String>())
}

/// A run's event log read incrementally: its journal rendered as lifecycle events,
/// interleaved with the events its steps emitted, then `run.<status>` once it has finished.
#[derive(Default)]
struct EventLog {
    /// Journal entries already rendered.
    journal_seen: u64,
    /// Emitted events already returned.
    events_seen: u64,
    /// Whether the final `run.<status>` line has been returned.
    finished: bool,
}

impl EventLog {
    /// What is new since the last call, in time order.
    async fn poll(
        &mut self,
        store: &dyn Store,
        run: RunId,
    ) -> anyhow::Result<Vec<stepwright_core::journal::EventRecord>> {
        use stepwright_core::journal::EventRecord;
        if self.finished {
            return Ok(Vec::new());
        }
        // Only what has not been seen is read. The header and journal are read before the
        // emitted events: a run's status changes only after its last commit, so once the
        // status read here is final, the entries and events read with it are the last.
        let loaded = store.load_from(run, self.journal_seen).await?;
        let emitted = store.events_from(run, self.events_seen).await?;
        let lifecycle = |path: &StepPath, at, kind: &str, data: Value| EventRecord {
            run,
            path: path.clone(),
            at,
            tenant: None,
            user: None,
            kind: kind.to_owned(),
            data,
        };
        // (time, rank, event): an attempt's start sorts before what it emitted, its end after.
        let mut new: Vec<(stepwright_core::Timestamp, u8, EventRecord)> = Vec::new();
        for entry in &loaded.entries {
            let mut data = serde_json::to_value(&entry.record)?;
            let kind = data.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
            if let Some(object) = data.as_object_mut() {
                object.remove("type");
                object.remove("started_at");
            }
            let kind = match kind.as_str() {
                // Draws of `now`/`uuid`/`random` are replay bookkeeping, not progress.
                "value" => continue,
                "interrupt_opened" => "interrupt.opened".to_owned(),
                "interrupt_resolved" => "interrupt.resolved".to_owned(),
                other => format!("step.{other}"),
            };
            match &entry.record {
                stepwright_core::Record::Completed { attempt, output, started_at, .. } => {
                    if let Some(started) = started_at {
                        let started_data = json!({ "attempt": attempt });
                        new.push((*started, 0, lifecycle(&entry.path, *started, "step.started", started_data)));
                    }
                    data["output"] = loaded.blobs.get(output).map_or(Value::Null, |v| (**v).clone());
                }
                stepwright_core::Record::Failed { attempt, started_at: Some(started), .. } => {
                    let started_data = json!({ "attempt": attempt });
                    new.push((*started, 0, lifecycle(&entry.path, *started, "step.started", started_data)));
                }
                _ => {}
            }
            let rank = if kind == "step.started" { 0 } else { 2 };
            new.push((entry.at, rank, lifecycle(&entry.path, entry.at, &kind, data)));
        }
        self.journal_seen += loaded.entries.len() as u64;
        self.events_seen += emitted.len() as u64;
        for event in emitted {
            new.push((event.at, 1, event));
        }
        new.sort_by_key(|(at, rank, _)| (*at, *rank));
        let mut events: Vec<EventRecord> = new.into_iter().map(|(_, _, event)| event).collect();
        let record = &loaded.record;
        if record.status.is_terminal() {
            self.finished = true;
            let data = json!({ "output": record.output, "error": record.error });
            let kind = format!("run.{}", record.status.as_str());
            events.push(lifecycle(&StepPath::root(), record.updated_at, &kind, data));
        }
        Ok(events)
    }
}

/// `HH:MM:SS.mmm` (UTC) of a timestamp, for the text form of the event log.
fn clock_time(at: stepwright_core::Timestamp) -> String {
    let millis = at.as_micros().div_euclid(1000);
    let of_day = millis.rem_euclid(86_400_000);
    let (hours, minutes) = (of_day / 3_600_000, of_day / 60_000 % 60);
    let (seconds, millis) = (of_day / 1000 % 60, of_day % 1000);
    format!("{hours:02}:{minutes:02}:{seconds:02}.{millis:03}")
}

/// Mermaid or Graphviz dot of a definition's top-level structure.
fn draw(description: &Value, format: &str) -> anyhow::Result<String> {
    let steps = description["steps"].as_array().cloned().unwrap_or_default();
    let mut lines = Vec::new();
    match format {
        "mermaid" => {
            lines.push("flowchart TD".to_owned());
            for (i, step) in steps.iter().enumerate() {
                lines.push(format!(
                    "  s{i}[\"{} ({})\"]",
                    step["id"].as_str().unwrap_or("?"),
                    step["kind"].as_str().unwrap_or("?")
                ));
                if i > 0 {
                    lines.push(format!("  s{} --> s{i}", i - 1));
                }
            }
        }
        "dot" => {
            lines.push("digraph workflow {".to_owned());
            for (i, step) in steps.iter().enumerate() {
                lines.push(format!(
                    "  s{i} [label=\"{} ({})\"];",
                    step["id"].as_str().unwrap_or("?"),
                    step["kind"].as_str().unwrap_or("?")
                ));
                if i > 0 {
                    lines.push(format!("  s{} -> s{i};", i - 1));
                }
            }
            lines.push("}".to_owned());
        }
        other => return Err(anyhow!(BadInput(format!("unknown --format {other:?}: mermaid or dot")))),
    }
    Ok(lines.join("\n"))
}

/// The wall clock as a timestamp (for showing leases and log lines).
fn wall_now() -> stepwright_core::Timestamp {
    use stepwright_core::Clock;
    stepwright_core::TokioClock::new().now()
}
