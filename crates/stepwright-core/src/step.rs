//! The step contract: a typed trait, its dynamic JSON form, and a closure helper.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::StepContext;
use crate::error::{ErrorCode, StepError};
use crate::outcome::Outcome;

/// A typed step: input and output are Rust types, their JSON Schemas derived.
///
/// ```
/// use stepwright_core::{Outcome, Step, StepContext, StepError};
///
/// struct Double;
///
/// impl Step for Double {
///     type Input = u64;
///     type Output = u64;
///
///     async fn run(&self, _ctx: &StepContext, input: u64) -> Result<Outcome<u64>, StepError> {
///         Ok((input * 2).into())
///     }
/// }
/// ```
pub trait Step: Send + Sync + 'static {
    /// The input type; deserialized from the node's input (strictly: errors name the path).
    type Input: DeserializeOwned + JsonSchema + Send;
    /// The output type.
    type Output: Serialize + JsonSchema + Send;

    /// Runs the step.
    fn run(
        &self,
        ctx: &StepContext,
        input: Self::Input,
    ) -> impl Future<Output = Result<Outcome<Self::Output>, StepError>> + Send;
}

/// The dynamic JSON form the engine drives: Rust steps (through [`TypedStep`]) and steps from
/// workflow files run through the same machinery.
pub trait DynStep: Send + Sync + 'static {
    /// Runs the step on a JSON input.
    fn run<'a>(&'a self, ctx: &'a StepContext, input: Arc<Value>) -> BoxFuture<'a, Result<Outcome<Value>, StepError>>;

    /// A short name for the step's implementation, for people: `agent`, `llm`, a Rust type's
    /// name.
    fn type_name(&self) -> &str;

    /// Whether the step hands its work to a step worker ([`StepContext::dispatch`]): its
    /// fence's intent is then written in the same commit as the task, so a task never
    /// exists without its intent, nor an intent without its task.
    fn dispatches(&self) -> bool {
        false
    }

    /// What identifies the step's behaviour: its implementation and its configuration (an
    /// agent's spec, a prompt). It is part of the definition hash, so a changed
    /// configuration is a changed definition, and of the step cache's key. Defaults to
    /// [`type_name`](Self::type_name), for steps whose code is their whole configuration.
    fn identity(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(self.type_name())
    }

    /// The input schema, if known.
    fn input_schema(&self) -> Option<Value> {
        None
    }

    /// The output schema, if known.
    fn output_schema(&self) -> Option<Value> {
        None
    }
}

/// Adapts a typed [`Step`] to [`DynStep`].
pub struct TypedStep<S> {
    step: S,
}

impl<S: Step> TypedStep<S> {
    /// Wraps a typed step.
    pub fn new(step: S) -> Self {
        Self { step }
    }
}

/// Deserializes a step input, naming the JSON path of the first problem.
pub(crate) fn decode_input<T: DeserializeOwned>(input: &Value) -> Result<T, StepError> {
    serde_path_to_error::deserialize(input).map_err(|e| {
        // An RFC 6901 JSON pointer: `/lines/1/quantity`, with `~` and `/` escaped.
        let mut pointer = String::new();
        for segment in e.path().iter() {
            pointer.push('/');
            match segment {
                serde_path_to_error::Segment::Seq { index } => pointer.push_str(&index.to_string()),
                serde_path_to_error::Segment::Map { key } => {
                    pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                }
                serde_path_to_error::Segment::Enum { variant } => pointer.push_str(variant),
                serde_path_to_error::Segment::Unknown => pointer.push('?'),
            }
        }
        if pointer.is_empty() {
            pointer.push('/');
        }
        StepError::new(ErrorCode::INPUT_VALIDATION, format!("input at {pointer}: {}", e.inner()))
    })
}

fn encode_output<T: Serialize>(output: T) -> Result<Value, StepError> {
    serde_json::to_value(output)
        .map_err(|e| StepError::new(ErrorCode::OUTPUT_VALIDATION, format!("serializing the output: {e}")))
}

impl<S: Step> DynStep for TypedStep<S> {
    fn run<'a>(&'a self, ctx: &'a StepContext, input: Arc<Value>) -> BoxFuture<'a, Result<Outcome<Value>, StepError>> {
        Box::pin(async move {
            let typed: S::Input = decode_input(&input)?;
            let outcome = self.step.run(ctx, typed).await?;
            match outcome.kind {
                crate::outcome::OutcomeKind::Completed(output) => {
                    let value = encode_output(output)?;
                    Ok(Outcome { kind: crate::outcome::OutcomeKind::Completed(value), events: outcome.events })
                }
                _ => Ok(outcome.map(|_| Value::Null)),
            }
        })
    }

    fn type_name(&self) -> &str {
        std::any::type_name::<S>()
    }

    fn input_schema(&self) -> Option<Value> {
        Some(schemars::schema_for!(S::Input).to_value())
    }

    fn output_schema(&self) -> Option<Value> {
        Some(schemars::schema_for!(S::Output).to_value())
    }
}

/// A step from an async closure that receives an owned context and the typed input and
/// returns the output. See [`fn_step`].
pub struct FnStep<F, I, O> {
    f: F,
    name: &'static str,
    _types: PhantomData<fn(I) -> O>,
}

/// Makes a step from a closure: `fn_step(|ctx, n: u64| async move { Ok(n + 1) })`.
///
/// ```
/// use stepwright_core::{Node, fn_step};
///
/// let node = Node::step("add-one", fn_step(|_ctx, n: u64| async move { Ok(n + 1) }));
/// assert_eq!(node.id(), "add-one");
/// ```
pub fn fn_step<F, I, O, Fut>(f: F) -> FnStep<F, I, O>
where
    F: Fn(StepContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, StepError>> + Send + 'static,
    I: DeserializeOwned + JsonSchema + Send + 'static,
    O: Serialize + JsonSchema + Send + 'static,
{
    FnStep { f, name: std::any::type_name::<F>(), _types: PhantomData }
}

impl<F, I, O, Fut> Step for FnStep<F, I, O>
where
    F: Fn(StepContext, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, StepError>> + Send + 'static,
    I: DeserializeOwned + JsonSchema + Send + 'static,
    O: Serialize + JsonSchema + Send + 'static,
{
    type Input = I;
    type Output = O;

    async fn run(&self, ctx: &StepContext, input: I) -> Result<Outcome<O>, StepError> {
        let _ = self.name;
        (self.f)(ctx.clone(), input).await.map(Outcome::completed)
    }
}

/// A dynamic step from a closure over JSON that returns a full [`Outcome`].
pub(crate) struct DynFnStep<F> {
    f: F,
    name: String,
}

/// Makes a dynamic step: `dyn_fn_step("name", |ctx, input| async move { Ok(Outcome::completed(input)) })`.
pub fn dyn_fn_step<F, Fut>(name: &str, f: F) -> Arc<dyn DynStep>
where
    F: Fn(StepContext, Arc<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Outcome<Value>, StepError>> + Send + 'static,
{
    Arc::new(DynFnStep { f, name: name.to_owned() })
}

impl<F, Fut> DynStep for DynFnStep<F>
where
    F: Fn(StepContext, Arc<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Outcome<Value>, StepError>> + Send + 'static,
{
    fn run<'a>(&'a self, ctx: &'a StepContext, input: Arc<Value>) -> BoxFuture<'a, Result<Outcome<Value>, StepError>> {
        Box::pin((self.f)(ctx.clone(), input))
    }

    fn type_name(&self) -> &str {
        &self.name
    }
}
