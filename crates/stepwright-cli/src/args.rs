//! The command line: clap's types for every command and flag.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

mod experiments;
mod keys;
mod runs;
mod schedules;

pub(crate) use experiments::{ExperimentsCommand, InlineExperiment};
pub(crate) use keys::{KeysCommand, OidcArgs};
pub(crate) use runs::RunsCommand;
pub(crate) use schedules::{EventsCommand, Keep, Listing, Named, SchedulesCommand, TriggersCommand};

#[derive(Parser)]
#[command(name = "stepwright", version, about = "A durable engine for AI-agent workflows")]
pub(crate) struct Cli {
    /// The store: `sqlite://PATH` or `postgres://…` (default: `STEPWRIGHT_DB`, else
    /// `sqlite://stepwright.db` in the current directory).
    #[arg(long, global = true)]
    pub(crate) db: Option<String>,
    /// Call this Stepwright server instead of opening a store (default:
    /// `STEPWRIGHT_SERVER`), with the API key in `STEPWRIGHT_API_KEY`: `run`, `runs`,
    /// `approve`/`reject`/`respond`, `cancel`, `send`, `wake`, `resume`, `replay`,
    /// `recompute`, `fork`, `events`, `schedules` and `triggers`; `validate` checks the file's
    /// `worker:` tools and approver lists against the server.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) server: Option<String>,
    #[command(flatten)]
    pub(crate) models: ModelFlags,
    #[command(flatten)]
    pub(crate) telemetry: TelemetryFlags,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// How workflow files are loaded and their models reached. Accepted anywhere on the line
/// (`stepwright --model … run`), taken only by the commands that act on them: `--model`,
/// `--cassette` and `--cassette-mode` by those that run steps, `--allow-dir` by those that
/// load a file from disk (see `Command::takes`).
#[derive(clap::Args, Clone, Debug)]
pub(crate) struct ModelFlags {
    /// A directory that `workflow:` calls may reach besides the first file's own directory
    /// tree (repeatable).
    #[arg(long = "allow-dir", value_name = "DIR", global = true)]
    pub(crate) allow_dirs: Vec<PathBuf>,
    /// Replace a model binding of the file: `NAME=provider:model[@base_url]` (repeatable).
    #[arg(long = "model", value_name = "NAME=SPEC", global = true)]
    pub(crate) overrides: Vec<String>,
    /// Record model calls to, or replay them from, this file.
    #[arg(long, value_name = "FILE", global = true)]
    pub(crate) cassette: Option<PathBuf>,
    /// `replay` (never call a model: a missing recording fails the step; the default for a
    /// file that exists), `auto` (replay what is recorded, call and record the rest into the
    /// file; the default for a new file) or `record` (call every time, rewrite the file).
    #[arg(long, value_name = "MODE", value_parser = parse_cassette_mode, global = true)]
    pub(crate) cassette_mode: Option<stepwright::llm::CassetteMode>,
    /// When a step's result must be durable: `sync` (committed before the run moves past it,
    /// the default) or `async` (completions of steps without effects are written in batches:
    /// a crash may lose the last batch, whose steps then run again; fenced steps are still
    /// written at once).
    #[arg(long, value_enum, global = true)]
    pub(crate) durability: Option<DurabilityArg>,
    /// With `--durability async`: the longest a completion waits to be written (the most a
    /// crash can lose), like `50ms` (the default) or `2s`.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg, global = true)]
    pub(crate) async_window: Option<std::time::Duration>,
}

/// What the process reports about itself: logs, and traces to an OpenTelemetry collector.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(crate) struct TelemetryFlags {
    /// Log lines on stderr: `text` (the default) or `json` (one object per line: a
    /// worker's claims and finished runs, and the engine's logs with the run id and step path
    /// of the span they are in). `STEPWRIGHT_LOG` filters the engine's logs (the `RUST_LOG`
    /// syntax, default `warn`).
    #[arg(long, value_enum, global = true)]
    pub(crate) log_format: Option<LogFormat>,
    /// Export traces over OTLP/HTTP: `on` or `off` (default: on when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set). The
    /// standard `OTEL_*` variables say the rest: headers, protocol, service name, sampler.
    #[arg(long, value_enum, global = true)]
    pub(crate) otel: Option<Switch>,
}

/// On or off.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

impl TelemetryFlags {
    /// What to install.
    pub(crate) fn settings(self) -> stepwright::telemetry::Settings {
        stepwright::telemetry::Settings {
            log_format: match self.log_format {
                Some(LogFormat::Json) => stepwright::telemetry::LogFormat::Json,
                _ => stepwright::telemetry::LogFormat::Text,
            },
            otel: self.otel.map(|switch| switch == Switch::On),
            prometheus: false,
        }
    }
}

fn parse_traceparent(text: &str) -> Result<stepwright::trace::TraceParent, String> {
    text.parse()
}

/// `--durability`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DurabilityArg {
    /// Every step's result is committed before the run moves past it.
    Sync,
    /// Results of steps without effects are written in batches.
    Async,
}

impl ModelFlags {
    /// The engine settings `--durability` and `--async-window` ask for.
    pub(crate) fn engine_config(&self) -> stepwright::EngineConfig {
        let mut config = stepwright::EngineConfig::default();
        if self.durability == Some(DurabilityArg::Async) {
            config.durability = stepwright::Durability::Async;
        }
        if let Some(window) = self.async_window {
            config.async_max_delay = window;
        }
        config.capture_content = stepwright::telemetry::content_capture();
        config
    }

    pub(crate) fn bindings(&self) -> stepwright::app::Bindings {
        stepwright::app::Bindings {
            allow_dirs: self.allow_dirs.clone(),
            overrides: self.overrides.clone(),
            cassette: self.cassette.clone(),
            cassette_mode: match (self.cassette_mode, &self.cassette) {
                (Some(mode), _) => mode,
                (None, Some(path)) => stepwright::llm::CassetteMode::default_for(path),
                (None, None) => stepwright::llm::CassetteMode::Auto,
            },
            ..Default::default()
        }
    }
}

/// A flag given on the line that some commands act on and others do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flag {
    /// `--db`: the command opens a store.
    Db,
    /// `--server`: the command can call a server instead.
    Server,
    /// `--model`, `--cassette`, `--cassette-mode`: the command runs steps.
    Models,
    /// `--allow-dir`: the command loads a workflow file from disk.
    AllowDir,
    /// `--durability`, `--async-window`: the command executes runs.
    Durability,
}

impl Command {
    /// Whether this command acts on `flag`: a flag it would ignore is refused, so a person
    /// never believes `validate --db …` checked against a store.
    pub(crate) fn takes(&self, flag: Flag) -> bool {
        // Of `schedules` and `triggers`, only `create` loads a workflow file.
        if flag == Flag::AllowDir {
            match self {
                Self::Schedules { command } => return matches!(command, SchedulesCommand::Create(_)),
                Self::Triggers { command } => return matches!(command, TriggersCommand::Create(_)),
                _ => {}
            }
        }
        takes(self.name(), flag)
    }

    /// Whether the command has a remote form (`--server`: it calls the HTTP API instead of
    /// opening a store).
    pub(crate) fn has_remote_form(&self) -> bool {
        has_remote_form(self.name())
    }

    /// The command's name as typed.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Run { .. } => "run",
            Self::Validate { .. } => "validate",
            Self::Schema => "schema",
            Self::Graph { .. } => "graph",
            Self::Runs { .. } => "runs",
            Self::Approve { .. } => "approve",
            Self::Reject { .. } => "reject",
            Self::Respond { .. } => "respond",
            Self::Resume { .. } => "resume",
            Self::Cancel { .. } => "cancel",
            Self::Send { .. } => "send",
            Self::Wake { .. } => "wake",
            Self::Replay { .. } => "replay",
            Self::Recompute { .. } => "recompute",
            Self::Fork { .. } => "fork",
            Self::Worker { .. } => "worker",
            Self::Serve { .. } => "serve",
            Self::Keys { .. } => "keys",
            Self::Schedules { .. } => "schedules",
            Self::Triggers { .. } => "triggers",
            Self::Events { .. } => "events",
            Self::Experiments { .. } => "experiments",
        }
    }
}

/// Whether the command named `name` acts on `flag` (what [`Command::takes`] answers, and
/// what `--help` shows: a flag a command would refuse is hidden from its help).
pub(crate) fn takes(name: &str, flag: Flag) -> bool {
    let runs_steps = matches!(
        name,
        "run"
            | "resume"
            | "approve"
            | "reject"
            | "respond"
            | "replay"
            | "recompute"
            | "experiments"
            | "worker"
            | "serve"
    );
    match flag {
        Flag::Db => !matches!(name, "schema" | "validate" | "graph"),
        // `validate --server` checks the file against the server's live step workers.
        Flag::Server => has_remote_form(name) || name == "validate",
        Flag::Models => runs_steps,
        // Replay and recompute run in a private sandbox, written nowhere.
        Flag::Durability => runs_steps && !matches!(name, "replay" | "recompute" | "experiments"),
        // `schedules create` and `triggers create` load a file too ([`Command::takes`] refuses
        // the flag on their other subcommands; help shows it on the command).
        Flag::AllowDir => {
            matches!(name, "run" | "validate" | "graph" | "recompute" | "experiments" | "schedules" | "triggers")
        }
    }
}

/// Whether the command named `name` has a remote form (`--server`).
fn has_remote_form(name: &str) -> bool {
    matches!(
        name,
        "run"
            | "runs"
            | "approve"
            | "reject"
            | "respond"
            | "cancel"
            | "send"
            | "wake"
            | "resume"
            | "replay"
            | "recompute"
            | "fork"
            | "events"
            | "schedules"
            | "triggers"
    )
}

/// The help of the (sub)command `args` name, showing only the flags it acts on: the flags are
/// accepted anywhere on the line, so they are global to the parser, and clap's own help would
/// list them under every command.
pub(crate) fn help_for(args: impl IntoIterator<Item = String>) -> String {
    let mut command = with_idle_flags_hidden();
    let mut at = &mut command;
    let mut long = false;
    for word in args.into_iter().skip(1) {
        long |= word == "--help" || word == "help";
        // `stepwright help run` is `stepwright run --help`.
        if word == "help" || at.find_subcommand(&word).is_none() {
            continue;
        }
        at = at.find_subcommand_mut(&word).expect("found above");
    }
    if long { at.render_long_help() } else { at.render_help() }.to_string()
}

/// The command line with each subcommand's idle flags hidden: for rendering help only (clap
/// indexes a built command's flags, and hiding them after the build leaves that index stale
/// for parsing).
fn with_idle_flags_hidden() -> clap::Command {
    use clap::CommandFactory;
    let mut command = Cli::command();
    command.build();
    let names: Vec<String> = command.get_subcommands().map(|sub| sub.get_name().to_owned()).collect();
    let flags: [(&str, Flag); 8] = [
        ("db", Flag::Db),
        ("server", Flag::Server),
        ("overrides", Flag::Models),
        ("cassette", Flag::Models),
        ("cassette_mode", Flag::Models),
        ("allow_dirs", Flag::AllowDir),
        ("durability", Flag::Durability),
        ("async_window", Flag::Durability),
    ];
    for name in names {
        let idle: Vec<&str> = flags.iter().filter(|(_, flag)| !takes(&name, *flag)).map(|(id, _)| *id).collect();
        command = command.mut_subcommand(&name, |sub| hide(sub, &idle));
    }
    command
}

/// `sub` and its own subcommands with the flags `ids` hidden from their help.
fn hide(mut sub: clap::Command, ids: &[&str]) -> clap::Command {
    for id in ids {
        if sub.get_arguments().any(|arg| arg.get_id() == id) {
            sub = sub.mut_arg(*id, |arg| arg.hide(true));
        }
    }
    let nested: Vec<String> = sub.get_subcommands().map(|s| s.get_name().to_owned()).collect();
    for name in nested {
        sub = sub.mut_subcommand(&name, |s| hide(s, ids));
    }
    sub
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
        /// The run's priority among runs waiting for a worker, higher first (default: the
        /// file's `priority`, else 0).
        #[arg(long, allow_hyphen_values = true)]
        priority: Option<i32>,
        /// The run's concurrency group instead of the file's: at most LIMIT runs with KEY
        /// execute at a time, across every worker on the store.
        #[arg(long, value_name = "KEY=LIMIT", value_parser = parse_concurrency)]
        concurrency: Option<stepwright::Concurrency>,
        /// Start the run in this trace (a W3C `traceparent`, as a caller's span gives it):
        /// its first activation's spans are children of that span.
        #[arg(long, value_name = "TRACEPARENT", value_parser = parse_traceparent)]
        traceparent: Option<stepwright::trace::TraceParent>,
        /// Start at most one run for this key (in the tenant; 1 to 255 characters): a second
        /// `run` with it starts nothing and shows the first run, as the API's
        /// `idempotency_key` does.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Tag the run (repeat for more, at most 16): `runs list --tag` and an experiment's
        /// population find it by any of them. 1 to 64 ASCII letters, digits and `_ - . : / =`.
        #[arg(long = "tag", value_name = "TAG", value_parser = parse_tag)]
        tags: Vec<String>,
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
        #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
        format: GraphFormat,
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
    /// Send a message to a run's loop inbox: stored at once, taken by the loop's next
    /// iteration wherever the run executes.
    Send {
        /// The run id.
        run: String,
        /// The inbox (a `loop`'s `inbox`).
        #[arg(long)]
        inbox: String,
        /// The message: JSON.
        #[arg(long)]
        message: String,
    },
    /// Wake an `every` step's channel (its next tick runs now, wherever the run executes),
    /// or with `--timer` a durable timer (a `sleep`): it goes off now and the run goes on.
    Wake {
        /// The run id.
        run: String,
        /// The channel (an `every`'s `wake`).
        #[arg(long, required_unless_present = "timer", conflicts_with = "timer")]
        channel: Option<String>,
        /// The timer's interrupt id (alone: the run's only running timer).
        #[arg(long)]
        timer: Option<Option<String>>,
        /// With `--timer`: the run's report as one JSON object.
        #[arg(long, requires = "timer")]
        json: bool,
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
        /// `NAME=OTHER`: calls to model binding NAME go to the definition's binding OTHER
        /// (its endpoint and model), to compare models; repeatable.
        #[arg(long, value_name = "NAME=OTHER")]
        rebind: Vec<String>,
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
        /// Execute only runs started in this tenant (a worker dedicated to one tenant).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Serve the HTTP API (DESIGN §13) over the store, executing runs too unless
    /// `--no-worker`. Stops on Ctrl-C or SIGTERM: stops accepting, ends event streams,
    /// lets runs in flight finish for `--drain`.
    Serve {
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
        listen: std::net::SocketAddr,
        /// Do not execute runs here: `stepwright worker` processes on the same store do.
        #[arg(long)]
        no_worker: bool,
        /// An origin browsers may call the API from (repeatable); none: no CORS.
        #[arg(long = "cors-origin", value_name = "ORIGIN")]
        cors_origins: Vec<String>,
        /// The largest request body, in bytes.
        #[arg(long, default_value_t = 4 << 20, value_name = "BYTES")]
        max_body_bytes: usize,
        /// Requests per second one API key may make.
        #[arg(long, default_value_t = 1000, value_name = "N")]
        rate_limit: u32,
        /// Event streams one API key may hold open at once.
        #[arg(long, default_value_t = 1000, value_name = "N")]
        max_streams_per_key: usize,
        /// Seconds a client has to send a request's headers (also how long a kept-alive
        /// connection may wait idle for its next request); a slower one is disconnected.
        #[arg(long, default_value_t = 10, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
        header_timeout: u64,
        /// Connections one client address may hold open at once (0: no cap). Behind a
        /// reverse proxy every client has the proxy's address: raise it, or cap there.
        #[arg(long, default_value_t = 1024, value_name = "N")]
        max_connections_per_ip: usize,
        /// How long a shutdown lets runs in flight finish, in seconds.
        #[arg(long, default_value_t = 10, value_name = "SECONDS")]
        drain: u64,
        /// A network webhooks may post to besides public addresses (repeatable): an
        /// intranet receiver's, as `10.1.0.0/16` or `192.168.4.7/32`. Without it, loopback,
        /// private, link-local and metadata addresses are refused.
        #[arg(long = "webhook-allow", value_name = "CIDR")]
        webhook_allow: Vec<stepwright::server::IpNet>,
        /// The environment variable holding a token that reads every namespace's series at
        /// `/metrics` (the operator's scraper: `Authorization: Bearer <token>`). Without it,
        /// a namespace admin's key reads its own namespace's series only.
        #[arg(long, value_name = "VAR")]
        metrics_token_env: Option<String>,
        #[command(flatten)]
        oidc: OidcArgs,
    },
    /// API keys for the HTTP API: create (the secret is shown once), list, revoke.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Schedules: runs a workflow file starts itself (its `schedules:`), exactly once per
    /// tick whatever the number of `worker` and `serve` processes.
    Schedules {
        #[command(subcommand)]
        command: SchedulesCommand,
    },
    /// Triggers: runs a workflow file starts on events (its `triggers:`), once per event
    /// (or debounced group, or batch) whatever the number of `worker` and `serve` processes.
    Triggers {
        #[command(subcommand)]
        command: TriggersCommand,
    },
    /// Events: send one (stored first, then matched by triggers and waits), list them, and
    /// see what one started.
    Events {
        #[command(subcommand)]
        command: EventsCommand,
    },
    /// Experiments: try a new file or model on real past runs, recomputed in a sandbox, and
    /// see what changed, improved and regressed.
    Experiments {
        #[command(subcommand)]
        command: ExperimentsCommand,
    },
}

/// Who starts a run: templates see it as `run.tenant`, `run.user`, `run.roles`; sessions
/// and user-scoped memory belong to it (DESIGN §14: whoever may open the database is
/// trusted to say who they are).
#[derive(clap::Args)]
pub(crate) struct Identity {
    /// The tenant (namespace) the run belongs to.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// The user starting it.
    #[arg(long = "as")]
    pub(crate) user: Option<String>,
    /// A role of that user (repeatable).
    #[arg(long = "role")]
    pub(crate) roles: Vec<String>,
}

impl Identity {
    pub(crate) fn caller(&self) -> stepwright::Caller {
        stepwright::Caller {
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            roles: self.roles.clone(),
            ..Default::default()
        }
    }
}

/// A duration argument, written as in workflow files (`500ms`, `10s`, `5m`, `1h`).
pub(crate) fn parse_duration_arg(text: &str) -> Result<std::time::Duration, String> {
    stepwright::flow::parse_duration(text)
        .ok_or_else(|| format!("{text:?} is not a duration like 500ms, 10s, 5m or 1h"))
}

/// Who decides, and which interrupt.
#[derive(clap::Args, Default)]
pub(crate) struct Decider {
    /// The interrupt (default: the run's only open one).
    #[arg(long)]
    pub(crate) interrupt: Option<String>,
    /// Decide as this user.
    #[arg(long = "as")]
    pub(crate) user: Option<String>,
    /// A role of the deciding user (repeatable).
    #[arg(long = "role")]
    pub(crate) roles: Vec<String>,
    /// The deciding user's tenant: a run of another tenant is refused.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
}

/// How `graph` draws.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GraphFormat {
    /// A Mermaid flowchart.
    Mermaid,
    /// Graphviz dot.
    Dot,
}

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// A line of text per event.
    Text,
    /// A JSON object per line.
    Json,
}

fn parse_cassette_mode(text: &str) -> Result<stepwright::llm::CassetteMode, String> {
    text.parse()
}

fn parse_status(text: &str) -> Result<stepwright::RunStatus, String> {
    stepwright::RunStatus::parse(text)
        .ok_or_else(|| format!("unknown status {text:?}: pending, running, suspended, completed, failed or cancelled"))
}

fn parse_finished_status(text: &str) -> Result<stepwright::RunStatus, String> {
    match stepwright::RunStatus::parse(text) {
        Some(status) if status.is_terminal() => Ok(status),
        _ => Err(format!("{text:?}: prune deletes finished runs only: completed, failed or cancelled")),
    }
}

/// `--concurrency KEY=LIMIT` (the key may hold `=`; the limit is after the last one).
pub(crate) fn parse_tag(text: &str) -> Result<String, String> {
    stepwright::journal::check_tag(text).map(|()| text.to_owned())
}

fn parse_concurrency(text: &str) -> Result<stepwright::Concurrency, String> {
    let (key, limit) = text.rsplit_once('=').ok_or("expected KEY=LIMIT, such as acme=1")?;
    let limit: u32 = limit.parse().map_err(|_| format!("{limit:?} is not a whole number"))?;
    if key.is_empty() || limit == 0 {
        return Err("the key must not be empty and the limit must be at least 1".into());
    }
    Ok(stepwright::Concurrency { key: key.to_owned(), limit })
}
