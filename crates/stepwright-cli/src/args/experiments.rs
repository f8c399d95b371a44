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
    Run {
        /// The experiment file (YAML): `experiment`, `runs`, `change`, `evaluators`,
        /// `concurrency`, `budget_usd`.
        file: PathBuf,
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
