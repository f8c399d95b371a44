//! A `worker` evaluator: a step worker's handler (code of the user's own, in any language
//! with a package) compares a run's old and new outputs. It is asked through a run of its
//! own — one `tool:` step on the worker's queue — so the worker protocol, with its leases,
//! retries and `no_worker`, carries the question as it carries any step; the run is the
//! run's tenant's, started by `experiment`, and stays to be read.

use std::time::Duration;

use serde_json::{Value, json};
use stepwright_api::experiment::{Score, WorkerEvaluator};
use stepwright_core::Caller;
use stepwright_core::journal::{DefinitionSource, RunStatus};
use stepwright_core::{Engine, StartOptions};

/// The workflow an evaluation runs: the worker's handler, given `{input, old, new}`.
const EVALUATION: &str = "experiment-evaluation";

/// How long an evaluation may take, its worker's queueing included.
const ANSWER_WITHIN: Duration = Duration::from_secs(600);

/// How often an evaluation's run is looked at while it waits for its worker.
const LOOK_EVERY: Duration = Duration::from_millis(50);

fn source(worker: &WorkerEvaluator) -> String {
    let quoted = |text: &str| serde_json::to_string(text).unwrap_or_default();
    format!(
        "workflow: {EVALUATION}\n\
         description: An experiment's evaluator, served by a step worker.\n\
         tools:\n  evaluate:\n    description: Compares a run's old and new outputs.\n    \
         worker: {{ queue: {}, handler: {}, schedule_to_start: 5m }}\n    effect: read\n\
         steps:\n  - id: evaluate\n    tool: evaluate\n    \
         with: {{ input: \"{{{{ input.input }}}}\", old: \"{{{{ input.old }}}}\", new: \"{{{{ input.new }}}}\" }}\n",
        quoted(&worker.queue),
        quoted(&worker.handler)
    )
}

/// Asks the handler about a pair of outputs (an unchanged output is the same: not asked).
pub(super) async fn ask_worker(
    engine: &Engine,
    name: &str,
    worker: &WorkerEvaluator,
    caller: &Caller,
    input: &Value,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Score {
    let mut score = Score { name: name.to_owned(), old: None, new: None, error: None, reason: None };
    let (Some(old), Some(new)) = (old, new) else {
        score.error = Some("no output to compare (the run or its recompute gave none)".into());
        return score;
    };
    if old == new {
        score.new = Some(0.0);
        return score;
    }
    match evaluate(engine, worker, caller, json!({ "input": input, "old": old, "new": new })).await {
        Ok(answer) => {
            let (value, reason) = match &answer {
                Value::Object(fields) if fields.contains_key("score") => {
                    (fields["score"].clone(), fields.get("reason").and_then(Value::as_str).map(str::to_owned))
                }
                other => (other.clone(), None),
            };
            match value {
                Value::Bool(no_worse) => score.new = Some(if no_worse { 0.0 } else { -1.0 }),
                Value::Number(n) => score.new = n.as_f64(),
                other => {
                    score.error = Some(format!(
                        "the worker answered {other}: expected true, false, a number or {{\"score\": …}}"
                    ));
                }
            }
            score.reason = reason;
        }
        Err(why) => score.error = Some(why),
    }
    score
}

/// Runs one evaluation and waits for it: its output, or why there is none.
async fn evaluate(engine: &Engine, worker: &WorkerEvaluator, caller: &Caller, input: Value) -> Result<Value, String> {
    let text = source(worker);
    let loaded = stepwright_flow::load_source(&text, &format!("{EVALUATION}.yaml"))
        .map_err(|e| format!("the evaluation does not load: {e}"))?;
    let workflow = crate::prepare(loaded, &crate::Bindings::default(), crate::Servers::Declared)
        .await
        .map_err(|e| format!("the evaluation does not load: {e}"))?;
    // Kept by hash, so whichever process continues the run when the worker answers
    // rebuilds it.
    let kept = DefinitionSource { name: format!("{EVALUATION}.yaml"), ..DefinitionSource::default_yaml(&text) };
    engine.store().put_definition(workflow.hash(), kept).await.map_err(|e| e.to_string())?;
    let caller = Caller {
        tenant: caller.tenant.clone(),
        user: Some("experiment".into()),
        roles: Vec::new(),
        metadata: serde_json::Map::new(),
    };
    let report = engine
        .start_with(&workflow, input, StartOptions { caller, ..StartOptions::default() })
        .await
        .map_err(|e| format!("the evaluation could not start: {e}"))?;
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    loop {
        let record = engine.store().load_from(report.run_id, u64::MAX).await.map_err(|e| e.to_string())?.record;
        match record.status {
            RunStatus::Completed => return Ok(record.output.unwrap_or(Value::Null)),
            RunStatus::Failed | RunStatus::Cancelled => {
                let why = record.error.map_or_else(|| record.status.as_str().to_owned(), |e| e.message);
                return Err(format!("the worker's evaluation (run {}) did not complete: {why}", report.run_id));
            }
            _ if tokio::time::Instant::now() >= deadline => {
                return Err(format!(
                    "the worker's evaluation (run {}) took longer than {ANSWER_WITHIN:?}",
                    report.run_id
                ));
            }
            _ => tokio::time::sleep(LOOK_EVERY).await,
        }
    }
}
