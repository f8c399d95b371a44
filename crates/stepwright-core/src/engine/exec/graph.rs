//! `graph`: nodes visited along edges whose conditions hold, each edge decided once.

use crate::definition::{GraphSpec, Node};
use crate::error::{ErrorCode, StepError};
use crate::ids::StepPath;
use crate::journal::Choice;
use crate::scope::Scope;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

use super::{Env, Exec, Flow, Res, null};

impl Exec {
    pub(super) async fn run_graph(
        &self,
        spec: &GraphSpec,
        path: &StepPath,
        input: Arc<Value>,
        scope: &Scope,
        env: &Env,
    ) -> Res {
        let by_name: HashMap<&str, &Node> = spec.nodes.iter().map(|n| (&*n.id, n)).collect();
        let mut current: String = spec.entry.clone().unwrap_or_else(|| spec.nodes[0].id.to_string());
        let mut visits: HashMap<String, u64> = HashMap::new();
        let mut child = scope.child();
        let mut input = input;
        let mut last: Arc<Value>;
        let mut step: u32 = 0;
        loop {
            step += 1;
            if step > spec.max_steps {
                return Ok(Flow::Failed(StepError::new(
                    ErrorCode::MAX_STEPS,
                    format!("the graph took more than max_steps ({}) steps; last node {current:?}", spec.max_steps),
                )));
            }
            let Some(node) = by_name.get(current.as_str()).copied() else {
                return Ok(Flow::Failed(StepError::new(
                    ErrorCode::UNKNOWN_HANDOFF_TARGET,
                    format!("graph has no node {current:?}"),
                )));
            };
            let visit = visits.entry(current.clone()).or_default();
            *visit += 1;
            let node_path = path.join(&node.id).ordinal(*visit);
            match self.exec_node(node, node_path, input.clone(), &mut child, env).await? {
                Flow::Done(value) => {
                    child.bind_output(&node.id, value.clone());
                    last = value.clone();
                    input = value;
                }
                Flow::Skipped(_) => {
                    child.bind_output(&node.id, null());
                    last = null();
                    input = null();
                }
                Flow::Handoff(target, payload) if by_name.contains_key(target.as_str()) => {
                    current = target;
                    input = payload;
                    continue;
                }
                other => return Ok(other),
            }
            let decision_path = path.ordinal(u64::from(step));
            let next = self.decide_once(
                &decision_path,
                |choice| match choice {
                    Choice::Next { next } => Some(next.clone()),
                    _ => None,
                },
                || {
                    for edge in spec.edges.iter().filter(|e| e.from == current) {
                        let take = match &edge.when {
                            None => true,
                            Some(when) => when.eval(&child)?,
                        };
                        if take {
                            return Ok(Choice::Next { next: Some(edge.to.clone()) });
                        }
                    }
                    Ok(Choice::Next { next: None })
                },
            );
            match next {
                Ok(Some(next)) => current = next,
                Ok(None) => return Ok(Flow::Done(last)),
                Err(error) => return Ok(Flow::Failed(error)),
            }
        }
    }
}
