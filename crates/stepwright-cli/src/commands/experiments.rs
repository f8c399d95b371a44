//! `experiments run`: a change tried on real past runs, recomputed in a sandbox (DESIGN §18).

use std::path::{Path, PathBuf};

use stepwright::api::experiment::{ExperimentReport, ExperimentTotals, Verdict};
use stepwright::app::experiment::{Candidate, parse_experiment, run_experiment};

use crate::args::ExperimentsCommand;
use crate::commands::Globals;
use crate::exit::BadInput;
use crate::host::{cli_engine, open_store, read_workflow_file};

pub(crate) async fn experiments(g: &Globals<'_>, command: ExperimentsCommand) -> anyhow::Result<u8> {
    match command {
        ExperimentsCommand::Run { file, fail_on, tenant, json } => {
            run(g, &file, &fail_on, tenant.as_deref(), json).await
        }
    }
}

async fn run(g: &Globals<'_>, file: &Path, fail_on: &[String], tenant: Option<&str>, json: bool) -> anyhow::Result<u8> {
    let bounds: Vec<Bound> = fail_on.iter().map(|b| Bound::parse(b)).collect::<anyhow::Result<_>>()?;
    let text = stepwright::flow::read_limited(file, stepwright::flow::MAX_FILE_BYTES)
        .map_err(|why| anyhow::anyhow!(BadInput(format!("{} cannot be read: {why}", file.display()))))?;
    let spec = parse_experiment(&text, &file.display().to_string())?;
    // A change file that cannot be read is refused before the store is opened.
    let changed = spec
        .change
        .file
        .as_ref()
        .map(|changed| file.parent().map_or_else(|| PathBuf::from(changed), |dir| dir.join(changed)));
    if let Some(path) = &changed {
        read_workflow_file(path)?;
    }
    let store = open_store(g.db).await?;
    // Model calls count against the store's shared rate limits, as every command's do.
    let bindings = g.flags.bindings().sharing_limits_in(store.clone());
    let candidate = match &changed {
        Some(path) => {
            let loaded =
                stepwright::flow::load_with(path, &bindings.load_options()).map_err(stepwright::app::AppError::Load)?;
            // Compiled, never registered nor kept: nothing of the experiment is written.
            let workflow = stepwright::app::prepare(loaded, &bindings, stepwright::app::Servers::Connected).await?;
            if workflow.name() != spec.runs.workflow {
                return Err(anyhow::anyhow!(BadInput(format!(
                    "{}: `change.file` {} is workflow {:?}, but the runs are of {:?}",
                    file.display(),
                    path.display(),
                    workflow.name(),
                    spec.runs.workflow
                ))));
            }
            Candidate::Workflow(workflow)
        }
        None => Candidate::EachRunsOwn(bindings),
    };
    let engine = cli_engine(&store, false, g.flags);
    let report = run_experiment(&engine, store.as_ref(), &spec, &candidate, tenant).await?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report);
    }
    let crossed: Vec<String> = bounds.iter().filter(|b| b.crossed(&report.totals)).map(|b| b.text.clone()).collect();
    if crossed.is_empty() {
        Ok(0)
    } else {
        eprintln!("stepwright: --fail-on {}", crossed.join(", "));
        Ok(1)
    }
}

/// A total of the report that `--fail-on` bounds.
#[derive(Clone, Copy)]
enum Total {
    Changed,
    Unchanged,
    Improved,
    Regressed,
    Failed,
    Skipped,
}

impl Total {
    const NAMES: [(&'static str, Self); 6] = [
        ("changed", Self::Changed),
        ("unchanged", Self::Unchanged),
        ("improved", Self::Improved),
        ("regressed", Self::Regressed),
        ("failed", Self::Failed),
        ("skipped", Self::Skipped),
    ];

    fn of(self, totals: &ExperimentTotals) -> u64 {
        match self {
            Self::Changed => totals.changed,
            Self::Unchanged => totals.unchanged,
            Self::Improved => totals.improved,
            Self::Regressed => totals.regressed,
            Self::Failed => totals.failed,
            Self::Skipped => totals.skipped,
        }
    }
}

/// `--fail-on TOTAL>N` (or `>=`).
struct Bound {
    text: String,
    total: Total,
    at_least: u64,
}

impl Bound {
    fn parse(text: &str) -> anyhow::Result<Self> {
        let bad = || {
            let names: Vec<&str> = Total::NAMES.iter().map(|(name, _)| *name).collect();
            anyhow::anyhow!(BadInput(format!(
                "--fail-on {text:?}: expected TOTAL>N or TOTAL>=N, a total of {}",
                names.join(", ")
            )))
        };
        let (name, op_and_n) = text.split_at(text.find('>').ok_or_else(bad)?);
        let (inclusive, n) = match op_and_n.strip_prefix(">=") {
            Some(n) => (true, n),
            None => (false, &op_and_n[1..]),
        };
        let n: u64 = n.trim().parse().map_err(|_| bad())?;
        let total = Total::NAMES.iter().find(|(known, _)| *known == name.trim()).map(|(_, t)| *t).ok_or_else(bad)?;
        Ok(Self { text: text.to_owned(), total, at_least: if inclusive { n } else { n + 1 } })
    }

    fn crossed(&self, totals: &ExperimentTotals) -> bool {
        self.total.of(totals) >= self.at_least
    }
}

fn print_report(report: &ExperimentReport) {
    let t = &report.totals;
    let ended = match report.status {
        stepwright::api::experiment::ExperimentStatus::Completed => "completed".to_owned(),
        stepwright::api::experiment::ExperimentStatus::BudgetSpent => {
            format!("budget spent: {} runs not recomputed", t.skipped)
        }
    };
    println!("experiment {} on {}: {ended}", report.experiment, report.workflow);
    println!(
        "{} runs: {} changed, {} unchanged; {} improved, {} regressed, {} failed",
        t.runs, t.changed, t.unchanged, t.improved, t.regressed, t.failed
    );
    println!(
        "model calls {} → {}; cost per 1,000 runs ${:.4} → ${:.4}",
        t.before.calls, t.after.calls, t.cost_per_1000_before, t.cost_per_1000_after
    );
    let score = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    if !t.means.is_empty() {
        println!("{:<24} {:>8} {:>8}", "EVALUATOR (mean)", "OLD", "NEW");
        for mean in &t.means {
            println!("{:<24} {:>8} {:>8}", mean.name, score(mean.old), score(mean.new));
        }
    }
    println!("{:<38} {:<10} {:<8} WHAT CHANGED", "RUN", "VERDICT", "CHANGED");
    for run in &report.runs {
        let verdict = match run.verdict {
            Verdict::Improved => "improved",
            Verdict::Regressed => "regressed",
            Verdict::Same => "same",
        };
        let what = match (&run.error, run.diff.first()) {
            (Some(error), _) => format!("failed: {}", error.message),
            (None, Some(first)) if run.diff.len() > 1 => format!("{first} (+{} more)", run.diff.len() - 1),
            (None, Some(first)) => first.clone(),
            (None, None) if run.changed => format!("steps: {}", run.changed_steps.join(", ")),
            (None, None) => String::new(),
        };
        println!("{:<38} {verdict:<10} {:<8} {what}", run.run, if run.changed { "yes" } else { "no" });
    }
    if !report.look_first.is_empty() {
        println!("look first: {}", report.look_first.join(" "));
    }
}
