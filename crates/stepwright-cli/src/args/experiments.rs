//! `experiments`: a change tried on real past runs before it ships (DESIGN §18).

#[allow(clippy::wildcard_imports)] // The argument types every group shares.
use super::*;

/// `experiments` subcommands.
#[derive(Subcommand)]
pub(crate) enum ExperimentsCommand {
    /// Recompute the runs an experiment file names with its change (a new file, other model
    /// bindings), in a sandbox: no side effect is executed again and nothing is registered.
    /// Scores each run with the file's evaluators and reports what changed, improved and
    /// regressed, and the cost per 1,000 runs then and now.
    ///
    /// Without a file, the flags say the same on one line:
    /// `experiments run --workflow triage --model smart=openai:gpt-4o-mini --sample 200 --seed 1`.
    /// A `--model` (either form) is kept with the experiment, so a resume recomputes with it.
    Run {
        /// The experiment file (YAML): `experiment`, `runs`, `change`, `evaluators`,
        /// `concurrency`, `budget_usd`. Or leave it out and give `--workflow`.
        #[arg(required_unless_present = "workflow")]
        file: Option<PathBuf>,
        /// The experiment without a file.
        #[command(flatten)]
        inline: Box<InlineExperiment>,
        /// Exit 1 when a total passes a bound: `'regressed>0'`, `'changed>=5'` (quoted: a shell
        /// reads `>` as a redirect). Totals: changed, unchanged, improved, regressed, failed,
        /// skipped; repeatable.
        #[arg(long = "fail-on", value_name = "TOTAL>N")]
        fail_on: Vec<String>,
        /// Only runs of this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object: the whole report.
        #[arg(long)]
        json: bool,
    },
    /// Go on with an experiment that was stopped (a crash, Ctrl-C): the runs it finished are
    /// not recomputed again.
    Resume {
        /// The experiment's id (`experiments run` says it when it starts).
        id: String,
        /// As `run`'s.
        #[arg(long = "fail-on", value_name = "TOTAL>N")]
        fail_on: Vec<String>,
        /// One JSON object: the whole report.
        #[arg(long)]
        json: bool,
    },
    /// The experiments in the store, newest first: id, name, workflow, state, when.
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// One JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Stop a running experiment (in this process or another): no run is started after
    /// this; what was recomputed stays in its report.
    Cancel {
        /// The experiment's id.
        id: String,
    },
    /// One experiment: its report once it ended, else of the runs recomputed so far.
    Show {
        /// The experiment's id.
        id: String,
        /// One JSON object: the experiment, its spec and its report.
        #[arg(long)]
        json: bool,
    },
}

/// `experiments run`'s one-line form: what a file's `runs`, `change`, `evaluators`,
/// `concurrency` and `budget_usd` say (each flag conflicts with a file).
#[derive(clap::Args, Debug, Default)]
pub(crate) struct InlineExperiment {
    /// The workflow whose past runs are recomputed (`runs.workflow`).
    #[arg(long, conflicts_with = "file", help_heading = "Without a file")]
    pub(crate) workflow: Option<String>,
    /// What the report calls it (default: the workflow and the change).
    #[arg(long, requires = "workflow", help_heading = "Without a file")]
    pub(crate) name: Option<String>,
    /// Only runs that ended so (default: completed).
    #[arg(long, requires = "workflow", value_parser = parse_run_status, help_heading = "Without a file")]
    pub(crate) status: Option<stepwright::api::RunStatus>,
    /// Only runs created at or after this instant (RFC 3339).
    #[arg(long, requires = "workflow", help_heading = "Without a file")]
    pub(crate) since: Option<String>,
    /// Only runs created before this instant (RFC 3339).
    #[arg(long, requires = "workflow", help_heading = "Without a file")]
    pub(crate) until: Option<String>,
    /// Only runs started by this user (`schedule:NAME`, `trigger:NAME` for theirs).
    #[arg(long, requires = "workflow", help_heading = "Without a file")]
    pub(crate) started_by: Option<String>,
    /// Only runs with this tag (`run --tag`).
    #[arg(long, requires = "workflow", value_parser = crate::args::parse_tag, help_heading = "Without a file")]
    pub(crate) tag: Option<String>,
    /// Exactly this run (repeatable); the filters then do not apply.
    #[arg(long = "run", value_name = "RUN_ID", requires = "workflow", help_heading = "Without a file")]
    pub(crate) runs: Vec<String>,
    /// New inputs instead of past runs: a JSON Lines file, one input per line
    /// (`runs.inputs_file`). Each is run fresh in a sandbox, then and now; the runs the
    /// filters find serve the effects they recorded.
    #[arg(long, value_name = "FILE", requires = "workflow", help_heading = "Without a file")]
    pub(crate) inputs: Option<PathBuf>,
    /// At most this many runs (or inputs), drawn at random with `--seed`.
    #[arg(long, requires = "workflow", help_heading = "Without a file")]
    pub(crate) sample: Option<u32>,
    /// The sample's seed (the same seed, the same runs; default 0).
    #[arg(long, requires = "workflow", help_heading = "Without a file")]
    pub(crate) seed: Option<u64>,
    /// A new version of the workflow file, compiled and never registered (`change.file`).
    #[arg(long = "change", value_name = "FILE", requires = "workflow", help_heading = "Without a file")]
    pub(crate) change: Option<PathBuf>,
    /// A registered version of the workflow (`change.version`; needs `--tenant`).
    #[arg(long, requires = "workflow", conflicts_with = "change", help_heading = "Without a file")]
    pub(crate) version: Option<u32>,
    /// `NAME=OTHER`: calls to model binding NAME go to the definition's binding OTHER
    /// (repeatable; `change.rebind`).
    #[arg(long, value_name = "NAME=OTHER", requires = "workflow", help_heading = "Without a file")]
    pub(crate) rebind: Vec<String>,
    /// Re-execute from this step on; what comes before it is served from the journal.
    #[arg(long, value_name = "STEP", requires = "workflow", help_heading = "Without a file")]
    pub(crate) from: Option<String>,
    /// An expression over `old`, `new` and `input` scoring each changed run: true is no
    /// worse, false a regression, a number above 0 an improvement (`new.category == old.category`).
    #[arg(long, value_name = "EXPR", requires = "workflow", help_heading = "Without a file")]
    pub(crate) compare: Option<String>,
    /// How many runs are recomputed at once (1–64; default 4).
    #[arg(long, requires = "workflow", help_heading = "Without a file")]
    pub(crate) concurrency: Option<u32>,
    /// Stop starting recomputes once their model calls cost this many US dollars.
    #[arg(long = "budget-usd", value_name = "USD", requires = "workflow", help_heading = "Without a file")]
    pub(crate) budget_usd: Option<f64>,
}

fn parse_run_status(text: &str) -> Result<stepwright::api::RunStatus, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| format!("unknown status {text:?}: pending, running, suspended, completed, failed or cancelled"))
}
