//! `workflow` and `spawn`: a called workflow's steps below the calling node, or a
//! child run of its own.

use crate::error::{ErrorCode, StepError};
use crate::ids::StepPath;
use crate::scope::Scope;
use serde_json::Value;
use std::sync::Arc;

use super::{Env, Exec, Flow, Res};

impl Exec {
    pub(super) async fn run_subworkflow(
        &self,
        workflow: &crate::definition::Workflow,
        spawn: Option<std::time::Duration>,
        path: &StepPath,
        input: Arc<Value>,
        scope: &Scope,
        env: &Env,
    ) -> Res {
        {
            {
                let def = &workflow.inner;
                if let Some(schema) = &def.input_schema
                    && let Err(error) = schema.check(&input, ErrorCode::INPUT_VALIDATION, "the subworkflow input")
                {
                    return Ok(Flow::Failed(error));
                }
                let layers = if spawn.is_some() { self.run.root_layers.clone() } else { env.layers.clone() };
                let services = env.services.layered(workflow.services());
                let inner = Env { layers, cancel: env.cancel.child_token(), services };
                let mut child_scope = scope.isolated(input.clone());
                let body = self.exec_seq(&def.body, path, input, &mut child_scope, &inner);
                let flow = match spawn {
                    None => body.await?,
                    Some(limit) => tokio::select! {
                        result = body => result?,
                        () = self.run.clock.sleep(limit) => {
                            inner.cancel.cancel();
                            Flow::Failed(StepError::timeout(format!("the spawned workflow did not finish within {limit:?}")))
                        }
                    },
                };
                let Flow::Done(last) = flow else {
                    return Ok(flow);
                };
                let output = match &def.output {
                    Some(expr) => match expr.eval(&child_scope) {
                        Ok(value) => Arc::new(value),
                        Err(error) => return Ok(Flow::Failed(error)),
                    },
                    None => last,
                };
                if let Some(schema) = &def.output_schema
                    && let Err(error) = schema.check(&output, ErrorCode::OUTPUT_VALIDATION, "the subworkflow output")
                {
                    return Ok(Flow::Failed(error));
                }
                Ok(Flow::Done(output))
            }
        }
    }
}
