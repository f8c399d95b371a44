//! `branch`: the first arm whose condition holds runs; the arm taken is decided once.

use crate::definition::{Node, Predicate};
use crate::ids::StepPath;
use crate::journal::{Arm, Choice, OtherwiseArm};
use crate::scope::Scope;
use serde_json::Value;
use std::sync::Arc;

use super::{Env, Exec, Flow, Res};

impl Exec {
    pub(super) async fn run_branch(
        &self,
        arms: &[(Predicate, Vec<Node>)],
        otherwise: Option<&[Node]>,
        path: &StepPath,
        input: Arc<Value>,
        scope: &mut Scope,
        env: &Env,
    ) -> Res {
        let chosen = self.decide_once(
            path,
            |choice| match choice {
                Choice::Arm { arm } => Some(*arm),
                _ => None,
            },
            || {
                for (index, (condition, _)) in arms.iter().enumerate() {
                    if condition.eval(scope)? {
                        return Ok(Choice::Arm { arm: Some(Arm::When(index)) });
                    }
                }
                Ok(Choice::Arm { arm: otherwise.map(|_| Arm::Otherwise(OtherwiseArm::Otherwise)) })
            },
        );
        let body = match chosen {
            Ok(Some(Arm::When(index))) => arms.get(index).map(|(_, body)| body.as_slice()),
            Ok(Some(Arm::Otherwise(_))) => otherwise,
            Ok(None) => None,
            Err(error) => return Ok(Flow::Failed(error)),
        };
        match body {
            Some(body) => self.exec_seq(body, path, input, scope, env).await,
            None => Ok(Flow::Skipped("no branch condition matched".into())),
        }
    }
}
