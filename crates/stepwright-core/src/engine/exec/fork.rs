//! `fork` and `map`: paths run concurrently on the run's task, in path order for the
//! journal; `all` fails fast, `race` takes the first to finish, `settle` waits for all.

use crate::definition::{ForkMode, ForkPaths, ForkSpec, Node, PathResult};
use crate::error::{ErrorCode, StepError};
use crate::ids::StepPath;
use crate::journal::{Choice, Record};
use crate::scope::Scope;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::recording::StoreFailed;

use super::{Env, Exec, Flow, Res};

/// A fork's paths: each one's body and input, in path order.
struct Paths<'a> {
    bodies: Vec<&'a [Node]>,
    inputs: Vec<Arc<Value>>,
}

/// What running a fork's paths left: each path's flow in path order, and what decides the
/// fork's outcome.
struct PathsRan {
    results: Vec<Flow>,
    /// The race's winner found in this execution.
    winner: Option<usize>,
    /// The race's winner as the journal had it when this execution began.
    decided_winner: Option<usize>,
    /// `all`: the first path to fail, which failed the fork fast.
    first_failure: Option<Flow>,
}

impl Exec {
    pub(super) async fn run_fork(
        &self,
        spec: &ForkSpec,
        path: &StepPath,
        input: Arc<Value>,
        scope: &Scope,
        env: &Env,
    ) -> Res {
        let paths = match self.fork_paths(spec, path, input, scope) {
            Ok(paths) => paths,
            Err(error) => return Ok(Flow::Failed(error)),
        };
        if paths.inputs.is_empty() {
            return Ok(empty_fork(spec));
        }
        let decided_winner = if spec.mode == ForkMode::Race {
            match self.recorded_choice(path, |choice| match choice {
                Choice::Winner { winner } => Some(*winner),
                _ => None,
            }) {
                Ok(winner) => winner,
                Err(error) => return Ok(Flow::Failed(error)),
            }
        } else {
            None
        };
        let fork_cancel = env.cancel.child_token();
        let ran = self.run_paths(spec, path, &paths, decided_winner, scope, (env, &fork_cancel)).await?;
        for (index, flow) in ran.results.iter().enumerate() {
            if let Flow::Failed(e) = flow
                && e.is(&ErrorCode::CANCELLED)
                && fork_cancel.is_cancelled()
                && !env.cancel.is_cancelled()
            {
                self.run.recorder.note(&path.index(index), self.now(), Record::Cancelled { reason: e.message.clone() });
            }
        }
        if env.cancel.is_cancelled() {
            return Ok(Flow::Failed(StepError::cancelled("the fork was cancelled")));
        }
        Ok(fork_outcome(spec, ran))
    }

    /// The paths to run: static paths all get the fork's input; dynamic ones get the
    /// computed items, decided once so that a resume fans out over the same list.
    fn fork_paths<'a>(
        &self,
        spec: &'a ForkSpec,
        path: &StepPath,
        input: Arc<Value>,
        scope: &Scope,
    ) -> Result<Paths<'a>, StepError> {
        Ok(match &spec.paths {
            ForkPaths::Static(paths) => {
                Paths { bodies: paths.iter().map(Vec::as_slice).collect(), inputs: vec![input; paths.len()] }
            }
            ForkPaths::Dynamic { items, body } => {
                let items = self.decide_once(
                    path,
                    |choice| match choice {
                        Choice::Items { items } => Some(items.clone()),
                        _ => None,
                    },
                    || Ok(Choice::Items { items: items.eval(scope)? }),
                )?;
                Paths { bodies: vec![body.as_slice(); items.len()], inputs: items.into_iter().map(Arc::new).collect() }
            }
        })
    }

    /// Runs the paths concurrently on this task, at most `concurrency` at once, stopping the
    /// rest when the mode says the fork is decided (a race won, an `all` path failed).
    /// `envs` is the fork's environment and the token that stops its paths.
    async fn run_paths(
        &self,
        spec: &ForkSpec,
        path: &StepPath,
        paths: &Paths<'_>,
        decided_winner: Option<usize>,
        scope: &Scope,
        envs: (&Env, &CancellationToken),
    ) -> Result<PathsRan, StoreFailed> {
        let (env, fork_cancel) = envs;
        let count = paths.inputs.len();
        let limit = spec.concurrency.unwrap_or(count).max(1);
        let mut results: Vec<Option<Flow>> = vec![None; count];
        let mut running = FuturesUnordered::new();
        let mut next = 0usize;
        let launch = |index: usize| {
            let body = paths.bodies[index];
            let item = paths.inputs[index].clone();
            let mut child = scope.child();
            if let Some(name) = &spec.item_name {
                child.bind_var(name, item.clone());
            }
            let child_env =
                Env { layers: env.layers.clone(), cancel: fork_cancel.child_token(), services: env.services.clone() };
            let path = path.index(index);
            async move {
                let result = self.exec_seq(body, &path, item, &mut child, &child_env).await;
                (index, result)
            }
        };
        let mut stop = false;
        let mut winner = None;
        let mut first_failure: Option<Flow> = None;
        while next < count && running.len() < limit {
            if decided_winner.is_some_and(|w| w != next) {
                results[next] = Some(Flow::Failed(StepError::cancelled("another path won the race")));
            } else {
                running.push(launch(next));
            }
            next += 1;
        }
        while let Some((index, result)) = running.next().await {
            let flow = result?;
            match (&flow, spec.mode) {
                (Flow::Done(_) | Flow::Skipped(_), ForkMode::Race) if winner.is_none() => {
                    winner = Some(index);
                    self.run.recorder.note(
                        path,
                        self.now(),
                        Record::Decided { choice: Choice::Winner { winner: index } },
                    );
                    fork_cancel.cancel();
                    stop = true;
                }
                (Flow::Failed(_) | Flow::Handoff(..), ForkMode::All) if first_failure.is_none() && !stop => {
                    // Fail fast: siblings see their tokens fire and are recorded as cancelled.
                    first_failure = Some(flow.clone());
                    fork_cancel.cancel();
                    stop = true;
                }
                _ => {}
            }
            results[index] = Some(flow);
            while next < count && running.len() < limit {
                if stop || decided_winner.is_some_and(|w| w != next) {
                    results[next] =
                        Some(Flow::Failed(StepError::cancelled("the fork stopped before this path started")));
                } else {
                    running.push(launch(next));
                }
                next += 1;
            }
        }
        drop(running);
        let results = results.into_iter().map(|r| r.unwrap_or(Flow::Suspended)).collect();
        Ok(PathsRan { results, winner, decided_winner, first_failure })
    }
}

/// A fork with no paths: a race has no winner; the others merge nothing.
fn empty_fork(spec: &ForkSpec) -> Flow {
    if spec.mode == ForkMode::Race {
        return Flow::Failed(StepError::new(ErrorCode::ALL_PATHS_FAILED, "the race had no paths"));
    }
    match &spec.merge {
        Some(merge) => match merge(Vec::new()) {
            Ok(value) => Flow::Done(Arc::new(value)),
            Err(error) => Flow::Failed(error),
        },
        None => Flow::Done(Arc::new(json!([]))),
    }
}

/// The fork's outcome from its paths' flows, by mode (and the explicit merge, if any).
fn fork_outcome(spec: &ForkSpec, ran: PathsRan) -> Flow {
    let PathsRan { results, winner, decided_winner, first_failure } = ran;
    let to_result = |flow: &Flow| match flow {
        Flow::Done(v) => PathResult::Completed((**v).clone()),
        Flow::Skipped(_) => PathResult::Completed(Value::Null),
        Flow::Failed(e) if e.is(&ErrorCode::CANCELLED) => PathResult::Cancelled,
        Flow::Failed(e) => PathResult::Failed(e.clone()),
        Flow::Suspended | Flow::Handoff(..) => PathResult::Cancelled,
    };
    let merged = |default: Value| -> Flow {
        match &spec.merge {
            Some(merge) => match merge(results.iter().map(to_result).collect()) {
                Ok(value) => Flow::Done(Arc::new(value)),
                Err(error) => Flow::Failed(error),
            },
            None => Flow::Done(Arc::new(default)),
        }
    };
    let suspended = results.iter().any(|f| matches!(f, Flow::Suspended));
    match spec.mode {
        ForkMode::All => {
            if let Some(failure) = first_failure {
                return failure;
            }
            if suspended {
                return Flow::Suspended;
            }
            let outputs: Vec<Value> = results
                .iter()
                .map(|f| match f {
                    Flow::Done(v) => (**v).clone(),
                    _ => Value::Null,
                })
                .collect();
            merged(Value::Array(outputs))
        }
        ForkMode::Race => {
            if let Some(index) =
                winner.or(decided_winner.filter(|w| matches!(results[*w], Flow::Done(_) | Flow::Skipped(_))))
            {
                let output = match &results[index] {
                    Flow::Done(v) => (**v).clone(),
                    _ => Value::Null,
                };
                return merged(output);
            }
            if suspended {
                return Flow::Suspended;
            }
            let messages: Vec<String> = results
                .iter()
                .enumerate()
                .map(|(i, f)| match f {
                    Flow::Failed(e) => format!("path {i}: {e}"),
                    _ => format!("path {i}: did not complete"),
                })
                .collect();
            Flow::Failed(StepError::new(
                ErrorCode::ALL_PATHS_FAILED,
                format!("every path of the race failed ({})", messages.join("; ")),
            ))
        }
        ForkMode::Settle => {
            if suspended {
                return Flow::Suspended;
            }
            let settled: Vec<Value> = results
                .iter()
                .map(|f| match f {
                    Flow::Done(v) => json!({ "status": "completed", "output": **v }),
                    Flow::Skipped(r) => json!({ "status": "skipped", "reason": r }),
                    Flow::Failed(e) => json!({ "status": "failed", "error": { "code": e.code, "message": e.message } }),
                    Flow::Suspended | Flow::Handoff(..) => json!({ "status": "cancelled" }),
                })
                .collect();
            merged(Value::Array(settled))
        }
    }
}
