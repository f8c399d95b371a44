//! `experiments`: a change tried on real past runs, recomputed in a sandbox (DESIGN §18),
//! kept in the store as it goes so that a stopped one goes on (`resume`), stopped (`cancel`)
//! and read back (`list`, `show`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stepwright::api::experiment::{
    Change, Evaluator, ExperimentReport, ExperimentSpec, ExperimentStatus, ExperimentSummary, ExperimentTotals,
    Population, Verdict,
};
use stepwright::app::experiment::{
    Candidate, Keeping, begin_experiment, check_experiment, experiment_candidate, experiment_details,
    experiment_summary, kept_spec, parse_experiment, parse_inputs, run_experiment, take_hold, with_models,
};
use stepwright::store::experiment::{ExperimentRecord, ExperimentState};

use crate::args::{ExperimentsCommand, InlineExperiment};
use crate::commands::Globals;
use crate::exit::BadInput;
use crate::host::{CliStore, cli_engine, open_store, parse_run, read_workflow_file};

pub(crate) async fn experiments(g: &Globals<'_>, command: ExperimentsCommand) -> anyhow::Result<u8> {
    match command {
        ExperimentsCommand::Run { file, inline, fail_on, tenant, json } => {
            let bounds: Vec<Bound> = fail_on.iter().map(|b| Bound::parse(b)).collect::<anyhow::Result<_>>()?;
            let spec = match &file {
                Some(file) => read_spec(file)?,
                None => inline_spec(*inline)?,
            };
            run(g, spec, &bounds, tenant.as_deref(), json).await
        }
        ExperimentsCommand::Resume { id, fail_on, json } => resume(g, &id, &fail_on, json).await,
        ExperimentsCommand::List { tenant, limit, json } => list(g, tenant, limit, json).await,
        ExperimentsCommand::Show { id, json } => show(g, &id, json).await,
        ExperimentsCommand::Cancel { id } => cancel(g, &id).await,
    }
}

/// The experiment a file says; its change file kept by its full path, so that `resume`
/// from anywhere reads the same file.
fn read_spec(file: &Path) -> anyhow::Result<ExperimentSpec> {
    let text = stepwright::flow::read_limited(file, stepwright::flow::MAX_FILE_BYTES)
        .map_err(|why| anyhow::anyhow!(BadInput(format!("{} cannot be read: {why}", file.display()))))?;
    let mut spec = parse_experiment(&text, &file.display().to_string())?;
    if let Some(inputs) = spec.runs.inputs_file.take() {
        spec.runs.inputs = read_inputs(&file.parent().map_or_else(|| PathBuf::from(&inputs), |dir| dir.join(&inputs)))?;
    }
    if let Some(changed) = &spec.change.file {
        spec.change.file =
            Some(kept_path(&file.parent().map_or_else(|| PathBuf::from(changed), |dir| dir.join(changed)))?);
    }
    Ok(spec)
}

/// A JSON Lines file of new inputs, read now: they are kept with the experiment, so that a
/// resume tries the same ones whatever becomes of the file.
fn read_inputs(path: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let text = stepwright::flow::read_limited(path, MAX_INPUTS_BYTES)
        .map_err(|why| anyhow::anyhow!(BadInput(format!("{} cannot be read: {why}", path.display()))))?;
    Ok(parse_inputs(&text, &path.display().to_string())?)
}

/// How large a file of new inputs may be.
const MAX_INPUTS_BYTES: u64 = 256 * 1024 * 1024;

/// A change file, read now (one that cannot be read is refused before the store is
/// opened) and kept by its full path.
fn kept_path(path: &Path) -> anyhow::Result<String> {
    read_workflow_file(path)?;
    Ok(path.canonicalize().unwrap_or_else(|_| path.to_owned()).display().to_string())
}

/// The experiment the flags say: what a file would.
fn inline_spec(inline: InlineExperiment) -> anyhow::Result<ExperimentSpec> {
    let workflow = inline.workflow.unwrap_or_default();
    let pair = |flag: &str, text: &str| -> anyhow::Result<(String, String)> {
        let (name, other) = text.split_once('=').filter(|(n, o)| !n.is_empty() && !o.is_empty()).ok_or_else(|| {
            anyhow::anyhow!(BadInput(format!("--{flag} {text:?}: expected NAME=OTHER, such as smart=fast")))
        })?;
        Ok((name.to_owned(), other.to_owned()))
    };
    let change = Change {
        file: inline.change.as_deref().map(kept_path).transpose()?,
        version: inline.version,
        rebind: inline.rebind.iter().map(|r| pair("rebind", r)).collect::<anyhow::Result<_>>()?,
        from: inline.from,
        ..Change::default()
    };
    let evaluators = inline
        .compare
        .map(|compare| Evaluator {
            name: "compare".into(),
            schema: None,
            check: None,
            compare: Some(compare),
            judge: None,
            worker: None,
        })
        .into_iter()
        .collect();
    let spec = ExperimentSpec {
        experiment: inline.name.unwrap_or_else(|| format!("{workflow} from the command line")),
        runs: Population {
            workflow,
            status: inline.status,
            since: inline.since,
            until: inline.until,
            started_by: inline.started_by,
            tag: inline.tag,
            ids: inline.runs,
            inputs: inline.inputs.as_deref().map(read_inputs).transpose()?.unwrap_or_default(),
            inputs_file: None,
            sample: inline.sample,
            seed: inline.seed.unwrap_or_default(),
        },
        change,
        evaluators,
        concurrency: inline.concurrency,
        budget_usd: inline.budget_usd,
    };
    check_experiment(&spec).map_err(|why| anyhow::anyhow!(BadInput(format!("the experiment the flags say: {why}"))))?;
    Ok(spec)
}

async fn run(
    g: &Globals<'_>,
    mut spec: ExperimentSpec,
    bounds: &[Bound],
    tenant: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    // `--model` is kept with the experiment, so that a resume recomputes with it too.
    for entry in &g.flags.overrides {
        let (name, model) = entry.split_once('=').ok_or_else(|| {
            anyhow::anyhow!(BadInput(format!("--model {entry:?}: expected NAME=provider:model[@base_url]")))
        })?;
        if let Some(kept) = spec.change.models.get(name).filter(|kept| *kept != model) {
            return Err(anyhow::anyhow!(BadInput(format!(
                "--model {entry}: the experiment's change already replaces {name} with {kept}"
            ))));
        }
        spec.change.models.insert(name.to_owned(), model.to_owned());
    }
    check_experiment(&spec).map_err(|why| anyhow::anyhow!(BadInput(why)))?;
    let store = open_store(g.db).await?;
    let candidate = candidate(g, &store, &spec, tenant).await?;
    let engine = cli_engine(&store, false, g.flags);
    let id = engine.new_id();
    let now = engine.clock().now();
    // Held by no one: a server never takes up a CLI's experiment (its models and files are
    // this command's); `experiments resume` goes on with it.
    let spec = begin_experiment(store.as_ref(), store.as_ref(), &spec, tenant, id, now, None).await?;
    let population = if spec.runs.inputs.is_empty() {
        format!("{} runs", spec.runs.ids.len())
    } else {
        let drawn = spec.runs.sample.map_or(spec.runs.inputs.len(), |n| spec.runs.inputs.len().min(n as usize));
        format!("{drawn} new inputs, served what {} recorded runs did", spec.runs.ids.len())
    };
    eprintln!("experiment {id}: {population} (`stepwright experiments resume {id}` goes on if it is stopped)");
    go(g, &store, &spec, &candidate, tenant, id, None, bounds, json).await
}

async fn resume(g: &Globals<'_>, id: &str, fail_on: &[String], json: bool) -> anyhow::Result<u8> {
    let bounds: Vec<Bound> = fail_on.iter().map(|b| Bound::parse(b)).collect::<anyhow::Result<_>>()?;
    if let Some(entry) = g.flags.overrides.first() {
        return Err(anyhow::anyhow!(BadInput(format!(
            "--model {entry}: an experiment goes on with the models it started with (`experiments show {id}` lists them)"
        ))));
    }
    let id = parse_run(id)?;
    let store = open_store(g.db).await?;
    let record = kept(&store, id).await?;
    if record.state != ExperimentState::Running {
        return Err(anyhow::anyhow!(BadInput(format!(
            "experiment {id} has ended ({}): `stepwright experiments show {id}` prints its report",
            record.state.as_str()
        ))));
    }
    let spec = kept_spec(&record)?;
    let candidate = candidate(g, &store, &spec, record.tenant.as_deref()).await?;
    // A server's experiment is held: a live server at work on it keeps it (exit 2, saying
    // which); one whose server stopped is taken, and held here while this works, so that no
    // server takes it up meanwhile.
    let engine = cli_engine(&store, false, g.flags);
    let holder = record.hold.as_ref().map(|_| engine.worker_id().to_owned());
    if let Some(holder) = &holder {
        take_hold(store.as_ref(), &record, holder, engine.clock().now()).await?;
    }
    go(g, &store, &spec, &candidate, record.tenant.as_deref(), id, holder.as_deref(), &bounds, json).await
}

/// What the runs are recomputed with: the spec's change file, compiled (never registered),
/// a `source` or registered `version` of the tenant's, or each run's own definition; model
/// calls count against the store's shared rate limits.
async fn candidate(
    g: &Globals<'_>,
    store: &Arc<dyn CliStore>,
    spec: &ExperimentSpec,
    tenant: Option<&str>,
) -> anyhow::Result<Candidate> {
    let bindings = with_models(&g.flags.bindings(), spec).sharing_limits_in(store.clone());
    let Some(path) = spec.change.file.as_deref().map(PathBuf::from) else {
        if spec.change.version.is_some() && tenant.is_none() {
            return Err(anyhow::anyhow!(BadInput(
                "`change.version` is a version registered in a namespace: name it with --tenant".into()
            )));
        }
        return Ok(experiment_candidate(store.as_ref(), tenant.unwrap_or_default(), spec, &bindings).await?);
    };
    let loaded =
        stepwright::flow::load_with(&path, &bindings.load_options()).map_err(stepwright::app::AppError::Load)?;
    let workflow = stepwright::app::prepare(loaded, &bindings, stepwright::app::Servers::Connected).await?;
    if workflow.name() != spec.runs.workflow {
        return Err(anyhow::anyhow!(BadInput(format!(
            "`change.file` {} is workflow {:?}, but the runs are of {:?}",
            path.display(),
            workflow.name(),
            spec.runs.workflow
        ))));
    }
    Ok(Candidate::Workflow(workflow, bindings))
}

#[allow(clippy::too_many_arguments)] // The one place both `run` and `resume` end in.
async fn go(
    g: &Globals<'_>,
    store: &Arc<dyn CliStore>,
    spec: &ExperimentSpec,
    candidate: &Candidate,
    tenant: Option<&str>,
    id: stepwright::RunId,
    holder: Option<&str>,
    bounds: &[Bound],
    json: bool,
) -> anyhow::Result<u8> {
    let engine = cli_engine(store, false, g.flags);
    let keeping = Keeping { store: store.as_ref(), id, holder };
    let report = run_experiment(&engine, store.as_ref(), spec, candidate, tenant, Some(keeping)).await?;
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

async fn kept(store: &Arc<dyn CliStore>, id: stepwright::RunId) -> anyhow::Result<ExperimentRecord> {
    store.experiment(id).await?.ok_or_else(|| anyhow::anyhow!(BadInput(format!("experiment {id} does not exist"))))
}

async fn list(g: &Globals<'_>, tenant: Option<String>, limit: usize, json: bool) -> anyhow::Result<u8> {
    let store = open_store(g.db).await?;
    let all = store.experiments(tenant, limit).await?;
    let rows: Vec<ExperimentSummary> = all.iter().map(experiment_summary).collect();
    if json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        println!("{:<38} {:<20} {:<20} {:<13} {:>6} CREATED", "ID", "NAME", "WORKFLOW", "STATE", "RUNS");
        for (e, row) in all.iter().zip(&rows) {
            println!(
                "{:<38} {:<20} {:<20} {:<13} {:>6} {}",
                row.id,
                row.experiment,
                row.workflow,
                e.state.as_str(),
                row.runs,
                stepwright::schedule::format_instant(e.created_at)
            );
        }
    }
    Ok(0)
}

async fn show(g: &Globals<'_>, id: &str, json: bool) -> anyhow::Result<u8> {
    let id = parse_run(id)?;
    let store = open_store(g.db).await?;
    let record = kept(&store, id).await?;
    let (name, state) = (record.name.clone(), record.state);
    let details = experiment_details(store.as_ref(), record).await?;
    if json {
        println!("{}", serde_json::to_string(&details)?);
        return Ok(0);
    }
    if state == ExperimentState::Running {
        println!(
            "experiment {id} ({name}): running; {} of {} runs recomputed and kept so far \
             (`stepwright experiments resume {id}` goes on if its process stopped)",
            details.recomputed, details.runs
        );
    }
    print_report(&details.report);
    Ok(0)
}

async fn cancel(g: &Globals<'_>, id: &str) -> anyhow::Result<u8> {
    let id = parse_run(id)?;
    let store = open_store(g.db).await?;
    let record = kept(&store, id).await?;
    if !store.experiment_cancel(id).await? {
        return Err(anyhow::anyhow!(BadInput(format!(
            "experiment {id} has ended ({}): there is nothing to cancel",
            record.state.as_str()
        ))));
    }
    println!("experiment {id} cancelled: no run is started after this; what was recomputed stays in its report");
    Ok(0)
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
        ExperimentStatus::Completed => "completed".to_owned(),
        ExperimentStatus::BudgetSpent => format!("budget spent: {} runs not recomputed", t.skipped),
        ExperimentStatus::Cancelled => format!("cancelled: {} runs not recomputed", t.skipped),
        ExperimentStatus::Running => format!("so far ({} runs to go)", t.skipped),
    };
    println!("experiment {} on {}: {ended}", report.experiment, report.workflow);
    let what = if report.runs.iter().any(|r| r.fresh.is_some()) { "new inputs" } else { "runs" };
    println!(
        "{} {what}: {} changed, {} unchanged; {} improved, {} regressed, {} failed",
        t.runs, t.changed, t.unchanged, t.improved, t.regressed, t.failed
    );
    if t.would_execute > 0 {
        println!(
            "{} {what} would execute a write with another input (not executed: see WHAT CHANGED)",
            t.would_execute
        );
    }
    let per_run = |ms: f64| if t.runs == 0 { 0.0 } else { ms / t.runs as f64 };
    println!(
        "model calls {} → {}; cost per 1,000 runs ${:.4} → ${:.4}; model time per run {:.1} ms → {:.1} ms",
        t.before.calls,
        t.after.calls,
        t.cost_per_1000_before,
        t.cost_per_1000_after,
        per_run(t.before.latency_ms),
        per_run(t.after.latency_ms)
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
        let writes = run.would_execute.iter().map(|w| format!("would execute a write at {} with {}", w.step, w.input));
        let what = match (&run.error, run.diff.first()) {
            (Some(error), _) => format!("failed: {}", error.message),
            (None, _) if !run.would_execute.is_empty() => {
                writes.chain(run.diff.first().cloned()).collect::<Vec<_>>().join("; ")
            }
            (None, Some(first)) if run.diff.len() > 1 => format!("{first} (+{} more)", run.diff.len() - 1),
            (None, Some(first)) => first.clone(),
            (None, None) if run.changed => step_lines(run).first().cloned().unwrap_or_else(|| "how it ended".into()),
            (None, None) => String::new(),
        };
        println!("{:<38} {verdict:<10} {:<8} {what}", name_of(run), if run.changed { "yes" } else { "no" });
    }
    if !report.look_first.is_empty() {
        let named: Vec<String> = report
            .look_first
            .iter()
            .map(|key| report.runs.iter().find(|r| r.run == *key).map_or_else(|| key.clone(), name_of))
            .collect();
        println!("look first: {}", named.join(", "));
        // What changed inside the runs to look at first, step by step.
        for run in report.runs.iter().filter(|r| report.look_first.contains(&r.run)) {
            let lines = step_lines(run);
            if !lines.is_empty() {
                println!("  {}:", name_of(run));
                for line in lines {
                    println!("    {line}");
                }
            }
        }
    }
}

/// A run by its id; a new input by its line (its key is no run of the store).
fn name_of(run: &stepwright::api::experiment::ExperimentRun) -> String {
    run.fresh.as_ref().map_or_else(|| run.run.clone(), |case| format!("input line {}", case.line))
}

/// A run's changed steps and decisions, a line each: `classify /category: "other" → "billing"`.
fn step_lines(run: &stepwright::api::experiment::ExperimentRun) -> Vec<String> {
    use stepwright::api::history::StepChange;
    let mut lines: Vec<String> = run
        .step_changes
        .iter()
        .flat_map(|step| match &step.change {
            StepChange::ValueChanged { diff } => diff.iter().map(|line| format!("{} {line}", step.path)).collect(),
            StepChange::SchemaViolation { message } => vec![format!("{} breaks its schema: {message}", step.path)],
            StepChange::Failed { error } => vec![format!("{} failed: {}", step.path, error.message)],
            _ => Vec::new(),
        })
        .collect();
    lines.extend(run.decisions.iter().map(|d| {
        let shown =
            |v: &Option<serde_json::Value>| v.as_ref().map_or_else(|| "nothing".to_owned(), ToString::to_string);
        format!("{} decided {} → {}", d.path, shown(&d.before), shown(&d.after))
    }));
    lines
}
