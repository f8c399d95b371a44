//! Expressions and templates: minijinja with strict undefined.
//!
//! A string that is exactly one `{{ expr }}` evaluates to a JSON value (an object stays an
//! object); other strings with `{{` render to text. Conditions are bare expressions.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;
use stepwright_core::{ErrorCode, Scope, StepError};

mod simple;

fn env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // A template runs on the run's task and cannot be interrupted, so a step's timeout
        // cannot stop a runaway loop; fuel does: every evaluation may take this many
        // instructions (well over a second of work for none but runaway templates).
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_formatter(json_formatter);
        env
    })
}

/// Renders objects, lists, `null` and booleans inside text as JSON — what every other part
/// of a run shows — rather than minijinja's Python-style `{'a': None}`; strings and numbers
/// as they are.
fn json_formatter(
    out: &mut minijinja::Output<'_>,
    state: &mut minijinja::State<'_, '_>,
    value: &minijinja::Value,
) -> Result<(), minijinja::Error> {
    use minijinja::value::ValueKind;
    match value.kind() {
        ValueKind::Map | ValueKind::Seq | ValueKind::Iterable | ValueKind::None | ValueKind::Bool => {
            let text = serde_json::to_string(value)
                .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::BadSerialization, e.to_string()))?;
            out.write_str(&text).map_err(|e| minijinja::Error::new(minijinja::ErrorKind::WriteFailure, e.to_string()))
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// How many compiled expressions [`compiled`] keeps (a process's workflows have far fewer;
/// past it the cache starts again rather than grow).
const MAX_COMPILED: usize = 8_192;

/// An expression compiled once per process: a workflow's expressions are evaluated at every
/// step of every run, and compiling one costs more than evaluating it.
fn compiled(source: &str) -> Result<Arc<minijinja::Expression<'static, 'static>>, minijinja::Error> {
    type Cache = RwLock<HashMap<Box<str>, Arc<minijinja::Expression<'static, 'static>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    if let Some(found) = cache.read().expect("poisoned").get(source) {
        return Ok(found.clone());
    }
    let expression = Arc::new(env().compile_expression_owned(source.to_owned())?);
    let mut cache = cache.write().expect("poisoned");
    if cache.len() >= MAX_COMPILED {
        cache.clear();
    }
    cache.insert(source.into(), expression.clone());
    Ok(expression)
}

/// The instructions one expression or template may take before it fails.
pub(crate) const TEMPLATE_FUEL: u64 = 5_000_000;

fn to_mj(ctx: &Value) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(ctx))
}

/// The scope as templates see it — `{input, steps: {id: {output}}, run, <vars>}` — read
/// lazily: only what an expression names is converted, where a JSON copy of the whole scope
/// would copy every earlier step's output at every evaluation (quadratic in a long chain).
/// Inner bindings shadow outer ones; `input`, `steps` and `run` shadow variables of those
/// names, as in [`Scope::to_json`].
#[derive(Debug)]
struct ScopeView(Scope);

impl minijinja::value::Object for ScopeView {
    fn get_value(self: &Arc<Self>, key: &minijinja::Value) -> Option<minijinja::Value> {
        match key.as_str()? {
            "input" => Some(to_mj(self.0.input())),
            "steps" => Some(minijinja::Value::from_object(StepsView(self.0.clone()))),
            "run" => self.0.run().map(to_mj),
            name => self.0.var(name).map(to_mj),
        }
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        let mut keys: Vec<minijinja::Value> = self.0.var_names().into_iter().map(minijinja::Value::from).collect();
        keys.retain(|k| !matches!(k.as_str(), Some("input" | "steps" | "run")));
        keys.extend(["input", "steps"].map(minijinja::Value::from));
        if self.0.run().is_some() {
            keys.push(minijinja::Value::from("run"));
        }
        minijinja::value::Enumerator::Values(keys)
    }
}

/// `steps`: each earlier step's `{output}`, by id.
#[derive(Debug)]
struct StepsView(Scope);

impl minijinja::value::Object for StepsView {
    fn get_value(self: &Arc<Self>, key: &minijinja::Value) -> Option<minijinja::Value> {
        let output = self.0.output(key.as_str()?)?;
        Some(minijinja::Value::from_object(StepView(to_mj(output))))
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Values(self.0.output_ids().into_iter().map(minijinja::Value::from).collect())
    }
}

/// One step as `steps.<id>` shows it: `{output}`.
#[derive(Debug)]
struct StepView(minijinja::Value);

impl minijinja::value::Object for StepView {
    fn get_value(self: &Arc<Self>, key: &minijinja::Value) -> Option<minijinja::Value> {
        (key.as_str()? == "output").then(|| self.0.clone())
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        minijinja::value::Enumerator::Str(&["output"])
    }
}

/// What an expression or template is evaluated against: a scope (read lazily) or a JSON
/// object (a trigger's event, a schedule's tick, a join's results).
#[derive(Clone, Copy)]
pub(crate) enum Context<'a> {
    Scope(&'a Scope),
    Json(&'a Value),
    /// Named values, each converted as it is (no JSON object of them all is built first).
    Named(&'a [(&'a str, &'a Value)]),
}

impl Context<'_> {
    fn value(self) -> minijinja::Value {
        match self {
            Self::Scope(scope) => minijinja::Value::from_object(ScopeView(scope.clone())),
            Self::Json(json) => to_mj(json),
            Self::Named(names) => minijinja::Value::from_object(
                names
                    .iter()
                    .map(|(name, value)| (minijinja::Value::from(*name), to_mj(value)))
                    .collect::<std::collections::BTreeMap<_, _>>(),
            ),
        }
    }
}

impl<'a> From<&'a Scope> for Context<'a> {
    fn from(scope: &'a Scope) -> Self {
        Self::Scope(scope)
    }
}

impl<'a> From<&'a [(&'a str, &'a Value)]> for Context<'a> {
    fn from(names: &'a [(&'a str, &'a Value)]) -> Self {
        Self::Named(names)
    }
}

impl<'a> From<&'a Value> for Context<'a> {
    fn from(json: &'a Value) -> Self {
        Self::Json(json)
    }
}

/// The expression inside a string that is exactly one `{{ … }}`.
pub(crate) fn single_expression(text: &str) -> Option<&str> {
    let inner = text.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    (!inner.contains("{{") && !inner.contains("}}")).then_some(inner.trim())
}

/// Checks an expression at load time; the error says what is wrong.
pub(crate) fn check_expression(source: &str) -> Result<(), String> {
    env().compile_expression(source).map(drop).map_err(|e| describe(&e))
}

/// Checks a template string at load time.
pub(crate) fn check_template(source: &str) -> Result<(), String> {
    match single_expression(source) {
        Some(expr) => check_expression(expr),
        None if source.contains("{{") || source.contains("{%") => {
            env().template_from_str(source).map(drop).map_err(|e| describe(&e))
        }
        None => Ok(()),
    }
}

/// The names an expression starts from (`input` in `input.name | upper`), sorted.
pub(crate) fn expression_roots(source: &str) -> Vec<String> {
    let mut roots: Vec<String> = env()
        .compile_expression(source)
        .map(|e| e.undeclared_variables(false).into_iter().collect())
        .unwrap_or_default();
    roots.sort();
    roots
}

/// The names a template string starts from.
pub(crate) fn template_roots(source: &str) -> Vec<String> {
    if let Some(expr) = single_expression(source) {
        return expression_roots(expr);
    }
    let mut roots: Vec<String> = env()
        .template_from_str(source)
        .map(|t| t.undeclared_variables(false).into_iter().collect())
        .unwrap_or_default();
    roots.sort();
    roots
}

/// Whether `name` is one of the template language's own globals (`range`, `dict`…).
pub(crate) fn is_global(name: &str) -> bool {
    env().globals().any(|(global, _)| global == name)
}

/// A value that is undefined somewhere (a misspelt name or field) is an error with strict
/// undefined, even when nothing prints it: a one-expression template would otherwise
/// quietly become `null`.
fn check_defined(source: &str, value: &minijinja::Value) -> Result<(), StepError> {
    fn first_undefined(value: &minijinja::Value, depth: usize) -> bool {
        if value.is_undefined() {
            return true;
        }
        if depth > 64 {
            return false;
        }
        match value.kind() {
            minijinja::value::ValueKind::Seq | minijinja::value::ValueKind::Iterable => {
                value.try_iter().map(|mut items| items.any(|item| first_undefined(&item, depth + 1))).unwrap_or(false)
            }
            minijinja::value::ValueKind::Map => value
                .try_iter()
                .map(|mut keys| {
                    keys.any(|key| value.get_item(&key).is_ok_and(|item| first_undefined(&item, depth + 1)))
                })
                .unwrap_or(false),
            _ => false,
        }
    }
    if first_undefined(value, 0) {
        return Err(StepError::new(
            ErrorCode::EXPRESSION,
            format!("evaluating `{source}`: undefined value (a name or field that does not exist)"),
        ));
    }
    Ok(())
}

fn describe(e: &minijinja::Error) -> String {
    e.detail().map_or_else(|| e.to_string(), str::to_owned)
}

fn failed(what: &str, source: &str, e: &minijinja::Error) -> StepError {
    StepError::new(ErrorCode::EXPRESSION, format!("evaluating {what} `{source}`: {}", describe(e)))
}

/// Evaluates an expression against a context.
pub(crate) fn eval<'a>(source: &str, ctx: impl Into<Context<'a>>) -> Result<Value, StepError> {
    eval_mj(source, &ctx.into().value())
}

fn eval_mj(source: &str, ctx: &minijinja::Value) -> Result<Value, StepError> {
    let expr = compiled(source).map_err(|e| failed("the expression", source, &e))?;
    eval_compiled(source, &expr, ctx)
}

/// `expr` (compiled from `source`) over `ctx`, as JSON.
fn eval_compiled(
    source: &str,
    expr: &minijinja::Expression<'static, 'static>,
    ctx: &minijinja::Value,
) -> Result<Value, StepError> {
    let value = expr.eval(ctx).map_err(|e| failed("the expression", source, &e))?;
    check_defined(source, &value)?;
    serde_json::to_value(&value)
        .map_err(|e| StepError::new(ErrorCode::EXPRESSION, format!("converting `{source}`: {e}")))
}

/// An expression checked once and evaluated many times (an experiment's `check` and
/// `compare`, over every run): a simple comparison is answered without minijinja where its
/// answer cannot differ (see `simple`), anything else by minijinja.
pub struct Expression {
    source: Box<str>,
    /// Compiled once, here (not looked up in the shared cache on every evaluation).
    compiled: minijinja::Expression<'static, 'static>,
    comparison: Option<simple::Comparison>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression").field("source", &self.source).field("comparison", &self.comparison).finish()
    }
}

impl Expression {
    /// Compiles `source`; the parser's message when it is not one well-formed expression.
    ///
    /// # Errors
    /// What the parser said.
    pub fn parse(source: &str) -> Result<Self, String> {
        let compiled = env().compile_expression_owned(source.to_owned()).map_err(|e| describe(&e))?;
        Ok(Self { source: source.into(), compiled, comparison: simple::parse(source) })
    }

    /// Its value over named values (`old`, `new`, `input`), as minijinja gives it.
    ///
    /// # Errors
    /// It names something not given, or fails.
    pub fn eval_over(&self, names: &[(&str, &Value)]) -> Result<Value, StepError> {
        match self.comparison.as_ref().and_then(|c| c.eval(names)) {
            Some(answer) => Ok(Value::Bool(answer)),
            None => eval_compiled(&self.source, &self.compiled, &Context::from(names).value()),
        }
    }
}

/// Evaluates a condition: the expression's truthiness.
pub(crate) fn truthy<'a>(source: &str, ctx: impl Into<Context<'a>>) -> Result<bool, StepError> {
    let expr = compiled(source).map_err(|e| failed("the condition", source, &e))?;
    let value = expr.eval(ctx.into().value()).map_err(|e| failed("the condition", source, &e))?;
    check_defined(source, &value)?;
    Ok(value.is_true())
}

/// Evaluates a templated value: strings that are one `{{ expr }}` become the expression's
/// value; other strings with `{{` render; lists and objects are evaluated element by element.
pub(crate) fn eval_value<'a>(value: &Value, ctx: impl Into<Context<'a>>) -> Result<Value, StepError> {
    // A value with nothing to evaluate needs no context.
    match value {
        Value::String(text) if !text.contains("{{") && !text.contains("{%") => return Ok(value.clone()),
        Value::Null | Value::Bool(_) | Value::Number(_) => return Ok(value.clone()),
        _ => {}
    }
    eval_value_mj(value, &ctx.into().value())
}

fn eval_value_mj(value: &Value, ctx: &minijinja::Value) -> Result<Value, StepError> {
    Ok(match value {
        Value::String(text) => match single_expression(text) {
            Some(expr) => eval_mj(expr, ctx)?,
            None if text.contains("{{") || text.contains("{%") => {
                Value::String(env().render_str(text, ctx).map_err(|e| failed("the template", text, &e))?)
            }
            None => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| eval_value_mj(v, ctx)).collect::<Result<_, _>>()?),
        Value::Object(map) => Value::Object(
            map.iter().map(|(k, v)| Ok((k.clone(), eval_value_mj(v, ctx)?))).collect::<Result<_, StepError>>()?,
        ),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_expression_keeps_its_type_and_text_renders() {
        let ctx = json!({ "input": { "n": 2, "who": "ann" }, "steps": { "a": { "output": { "x": [1, 2] } } } });
        assert_eq!(eval_value(&json!("{{ steps.a.output }}"), &ctx).unwrap(), json!({ "x": [1, 2] }));
        assert_eq!(eval_value(&json!("hi {{ input.who }} ({{ input.n * 2 }})"), &ctx).unwrap(), json!("hi ann (4)"));
        assert_eq!(
            eval_value(&json!({ "k": "{{ input.n + 1 }}", "plain": 5 }), &ctx).unwrap(),
            json!({ "k": 3, "plain": 5 })
        );
        assert!(truthy("input.n > 1", &ctx).unwrap());
    }

    #[test]
    fn objects_inside_text_render_as_json() {
        let ctx = json!({ "a": { "w": true, "y": [1, "two"], "z": null }, "n": 1.5, "s": "it's" });
        let text = eval_value(&json!("got {{ a }}, {{ a.y }}, {{ a.z }}, {{ a.w }}, {{ n }}, {{ s }}"), &ctx).unwrap();
        assert_eq!(text, json!(r#"got {"w":true,"y":[1,"two"],"z":null}, [1,"two"], null, true, 1.5, it's"#));
    }

    #[test]
    fn a_runaway_template_runs_out_of_fuel() {
        let error = eval_value(
            &json!("{% for a in range(10000) %}{% for b in range(10000) %}{{ a * b }}{% endfor %}{% endfor %}"),
            &json!({}),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::EXPRESSION);
        assert!(error.message.contains("fuel"), "{}", error.message);
        // An ordinary large template has fuel to spare.
        let items: Vec<i64> = (0..10_000).collect();
        let total = eval("items | sum", &json!({ "items": items })).unwrap();
        assert_eq!(total, json!(49_995_000));
    }

    #[test]
    fn undefined_names_are_errors() {
        let ctx = json!({ "input": {} });
        let error = eval("input.missing.deeper", &ctx).unwrap_err();
        assert_eq!(error.code, ErrorCode::EXPRESSION);
        assert!(check_expression("a ==").is_err());
        assert!(check_template("{{ unclosed").is_err());
        assert!(check_template("no templating").is_ok());
    }
}
