//! Scoring: each evaluator's score of the old and new outputs (a schema, a `check`, a
//! `compare`, an `llm` judge) and the verdict they add up to.

use std::sync::Arc;

use serde_json::{Value, json};
use stepwright_api::experiment::{Evaluator, Judge, Score, Verdict, WorkerEvaluator};

/// An evaluator ready to score: its schema compiled.
pub(super) enum Prepared {
    Schema(Arc<jsonschema::Validator>),
    Check(stepwright_flow::Expression),
    Compare(stepwright_flow::Expression),
    Judge(Judge),
    Worker(WorkerEvaluator),
}

impl Prepared {
    pub(super) fn new(evaluator: &Evaluator) -> Result<Self, String> {
        if let Some(worker) = &evaluator.worker {
            let others = [evaluator.schema.is_some(), evaluator.check.is_some(), evaluator.compare.is_some()];
            if others.contains(&true) || evaluator.judge.is_some() {
                return Err("give exactly one of `schema`, `check`, `compare`, `judge` and `worker`".into());
            }
            if worker.queue.trim().is_empty() || worker.handler.trim().is_empty() {
                return Err("a `worker` needs a `queue` and a `handler`".into());
            }
            return Ok(Self::Worker(worker.clone()));
        }
        match (&evaluator.schema, &evaluator.check, &evaluator.compare, &evaluator.judge) {
            (Some(schema), None, None, None) => jsonschema::validator_for(schema)
                .map(|v| Self::Schema(Arc::new(v)))
                .map_err(|e| format!("the schema does not compile: {e}")),
            (None, Some(check), None, None) => stepwright_flow::Expression::parse(check)
                .map(Self::Check)
                .map_err(|e| format!("`check` does not parse: {e}")),
            (None, None, Some(compare), None) => stepwright_flow::Expression::parse(compare)
                .map(Self::Compare)
                .map_err(|e| format!("`compare` does not parse: {e}")),
            (None, None, None, Some(judge)) if judge.model.trim().is_empty() || judge.rubric.trim().is_empty() => {
                Err("a `judge` needs a `model` (one of the workflow's bindings) and a `rubric`".into())
            }
            (None, None, None, Some(judge)) => Ok(Self::Judge(judge.clone())),
            _ => Err("give exactly one of `schema`, `check`, `compare`, `judge` and `worker`".into()),
        }
    }

    /// The score of the old and new outputs (either may be missing: the run or the
    /// recompute gave none).
    pub(super) fn score(&self, name: &str, input: &Value, old: Option<&Value>, new: Option<&Value>) -> Score {
        let mut score = Score { name: name.to_owned(), old: None, new: None, error: None, reason: None };
        let number = |value: Value, what: &str| match value {
            Value::Bool(b) => Ok(if b { 1.0 } else { 0.0 }),
            Value::Number(n) => n.as_f64().ok_or_else(|| format!("{what} gave {n}, out of range")),
            other => Err(format!("{what} gave {other}, not a boolean or a number")),
        };
        match self {
            Self::Schema(validator) => {
                let valid = |v: &Value| if validator.is_valid(v) { 1.0 } else { 0.0 };
                score.old = old.map(valid);
                score.new = new.map(valid);
            }
            Self::Check(check) => {
                let run = |output: &Value| {
                    check
                        .eval_over(&[("output", output), ("input", input)])
                        .map_err(|e| e.message)
                        .and_then(|v| number(v, "the check"))
                };
                match (old.map(run).transpose(), new.map(run).transpose()) {
                    (Ok(o), Ok(n)) => (score.old, score.new) = (o, n),
                    (Err(e), _) | (_, Err(e)) => score.error = Some(e),
                }
            }
            Self::Compare(compare) => match (old, new) {
                (Some(old), Some(new)) => {
                    // true is "no worse" (0), false a regression (-1); a number is the change.
                    let names = [("old", old), ("new", new), ("input", input)];
                    match compare.eval_over(&names).map_err(|e| e.message) {
                        Ok(Value::Bool(b)) => score.new = Some(if b { 0.0 } else { -1.0 }),
                        Ok(other) => match number(other, "the comparison") {
                            Ok(n) => score.new = Some(n),
                            Err(e) => score.error = Some(e),
                        },
                        Err(e) => score.error = Some(e),
                    }
                }
                _ => score.error = Some("no output to compare (the run or its recompute gave none)".into()),
            },
            Self::Judge(_) | Self::Worker(_) => score.error = Some("a judge is asked, not computed".into()),
        }
        score
    }

    /// Whether it judges the pair (its `new` is the change), not each output.
    fn is_pairwise(&self) -> bool {
        matches!(self, Self::Compare(_) | Self::Judge(_) | Self::Worker(_))
    }
}

/// What a judge is told: compare, by the rubric, and answer in the verdict's shape.
const JUDGE_INSTRUCTIONS: &str = "You compare two outputs of the same workflow for the same input: the OLD one it \
    gave, and the NEW one a change gives. Judge by the rubric alone whether NEW is better, the same, or worse than OLD, \
    and say why in one sentence. Answer with JSON: {\"verdict\": \"better\" | \"same\" | \"worse\", \"reason\": \"...\"}.";

/// Asks the judge's model to compare the outputs; the score and what the call cost.
pub(super) async fn ask_judge(
    name: &str,
    judge: &Judge,
    models: Option<&stepwright_llm::Models>,
    input: &Value,
    old: Option<&Value>,
    new: Option<&Value>,
) -> (Score, f64) {
    let mut score = Score { name: name.to_owned(), old: None, new: None, error: None, reason: None };
    let (Some(old), Some(new)) = (old, new) else {
        score.error = Some("no output to compare (the run or its recompute gave none)".into());
        return (score, 0.0);
    };
    if old == new {
        // Nothing to judge: the same output is the same, and costs no call.
        score.new = Some(0.0);
        return (score, 0.0);
    }
    let Some(models) = models.filter(|m| m.has(&judge.model)) else {
        let names = models.map(|m| m.names().join(", ")).unwrap_or_default();
        score.error =
            Some(format!("the judge's model `{}` is not one of the workflow's bindings ({names})", judge.model));
        return (score, 0.0);
    };
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let request = stepwright_llm::ChatRequest {
        model: String::new(),
        messages: vec![
            stepwright_llm::Message::System { content: JUDGE_INSTRUCTIONS.to_owned() },
            stepwright_llm::Message::User {
                content: format!(
                    "Rubric: {}\n\nInput:\n{}\n\nOLD output:\n{}\n\nNEW output:\n{}",
                    judge.rubric,
                    pretty(input),
                    pretty(old),
                    pretty(new)
                ),
            },
        ],
        tools: Vec::new(),
        tool_choice: None,
        output: Some(stepwright_llm::OutputFormat {
            name: "verdict".into(),
            schema: json!({
                "type": "object",
                "required": ["verdict", "reason"],
                "properties": { "verdict": { "enum": ["better", "same", "worse"] }, "reason": { "type": "string" } },
                "additionalProperties": false
            }),
        }),
        params: stepwright_llm::ModelParams::default(),
    };
    match models.chat("experiment/judge", &judge.model, request, None).await {
        Ok(call) => {
            let cost = call.cost_usd.unwrap_or(0.0);
            let answer: Value = serde_json::from_str(&call.response.content).unwrap_or(Value::Null);
            match answer["verdict"].as_str() {
                Some("better") => score.new = Some(1.0),
                Some("same") => score.new = Some(0.0),
                Some("worse") => score.new = Some(-1.0),
                _ => score.error = Some(format!("the judge answered {:?}, not a verdict", call.response.content)),
            }
            score.reason = answer["reason"].as_str().map(str::to_owned);
            (score, cost)
        }
        Err(e) => {
            score.error = Some(format!("the judge's call failed: {e}"));
            (score, 0.0)
        }
    }
}

/// Regressed when the recompute failed where the run had not, or an evaluator scored it
/// lower; improved when none did and one scored it higher.
pub(super) fn judge(evaluators: &[(String, Prepared)], scores: &[Score], failed_now: bool) -> Verdict {
    if failed_now {
        return Verdict::Regressed;
    }
    let (mut worse, mut better) = (false, false);
    for ((_, evaluator), score) in evaluators.iter().zip(scores) {
        if evaluator.is_pairwise() {
            let change = score.new.unwrap_or(0.0);
            worse |= change < 0.0;
            better |= change > 0.0;
        } else if let (Some(old), Some(new)) = (score.old, score.new) {
            worse |= new < old;
            better |= new > old;
        } else if score.old.is_some() && score.new.is_none() {
            worse = true;
        }
    }
    if worse {
        Verdict::Regressed
    } else if better {
        Verdict::Improved
    } else {
        Verdict::Same
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluators_score_old_and_new_and_judge() {
        let prepared = |e: Evaluator| (e.name.clone(), Prepared::new(&e).unwrap());
        let evaluator = |name: &str| Evaluator {
            name: name.into(),
            schema: None,
            check: None,
            compare: None,
            judge: None,
            worker: None,
        };
        let evaluators = vec![
            prepared(Evaluator { schema: Some(json!({ "required": ["category"] })), ..evaluator("shape") }),
            prepared(Evaluator { check: Some("output.score".into()), ..evaluator("score") }),
            prepared(Evaluator { compare: Some("new.category == old.category".into()), ..evaluator("same") }),
        ];
        let input = json!({});
        let score_all = |old: Value, new: Value| -> Vec<Score> {
            evaluators.iter().map(|(n, e)| e.score(n, &input, Some(&old), Some(&new))).collect()
        };
        let same = score_all(json!({ "category": "a", "score": 3 }), json!({ "category": "a", "score": 3 }));
        assert_eq!((same[0].old, same[0].new, same[1].new, same[2].new), (Some(1.0), Some(1.0), Some(3.0), Some(0.0)));
        assert_eq!(judge(&evaluators, &same, false), Verdict::Same);
        let better = score_all(json!({ "category": "a", "score": 3 }), json!({ "category": "a", "score": 5 }));
        assert_eq!(judge(&evaluators, &better, false), Verdict::Improved);
        let moved = score_all(json!({ "category": "a", "score": 3 }), json!({ "category": "b", "score": 9 }));
        assert_eq!(moved[2].new, Some(-1.0));
        assert_eq!(judge(&evaluators, &moved, false), Verdict::Regressed, "a category that moved is a regression");
        let broken = score_all(json!({ "category": "a", "score": 3 }), json!({ "score": 3 }));
        assert_eq!((broken[0].new, broken[2].error.is_some()), (Some(0.0), true));
        assert_eq!(judge(&evaluators, &broken, false), Verdict::Regressed);
        assert_eq!(judge(&evaluators, &same, true), Verdict::Regressed, "a recompute that failed");
        let text = score_all(json!({ "category": "a", "score": "high" }), json!({ "category": "a", "score": "high" }));
        assert!(text[1].error.as_deref().unwrap().contains("not a boolean or a number"), "{:?}", text[1]);
    }
}
