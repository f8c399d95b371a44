//! Expressions and templates: minijinja with strict undefined.
//!
//! A string that is exactly one `{{ expr }}` evaluates to a JSON value (an object stays an
//! object); other strings with `{{` render to text. Conditions are bare expressions.

use std::sync::OnceLock;

use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;
use stepwright_core::{ErrorCode, StepError};

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

/// The instructions one expression or template may take before it fails.
pub(crate) const TEMPLATE_FUEL: u64 = 5_000_000;

fn to_mj(ctx: &Value) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(ctx))
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
pub(crate) fn eval(source: &str, ctx: &Value) -> Result<Value, StepError> {
    let expr = env().compile_expression(source).map_err(|e| failed("the expression", source, &e))?;
    let value = expr.eval(to_mj(ctx)).map_err(|e| failed("the expression", source, &e))?;
    check_defined(source, &value)?;
    serde_json::to_value(&value)
        .map_err(|e| StepError::new(ErrorCode::EXPRESSION, format!("converting `{source}`: {e}")))
}

/// Evaluates a condition: the expression's truthiness.
pub(crate) fn truthy(source: &str, ctx: &Value) -> Result<bool, StepError> {
    let expr = env().compile_expression(source).map_err(|e| failed("the condition", source, &e))?;
    let value = expr.eval(to_mj(ctx)).map_err(|e| failed("the condition", source, &e))?;
    check_defined(source, &value)?;
    Ok(value.is_true())
}

/// Evaluates a templated value: strings that are one `{{ expr }}` become the expression's
/// value; other strings with `{{` render; lists and objects are evaluated element by element.
pub(crate) fn eval_value(value: &Value, ctx: &Value) -> Result<Value, StepError> {
    Ok(match value {
        Value::String(text) => match single_expression(text) {
            Some(expr) => eval(expr, ctx)?,
            None if text.contains("{{") || text.contains("{%") => {
                Value::String(env().render_str(text, to_mj(ctx)).map_err(|e| failed("the template", text, &e))?)
            }
            None => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(|v| eval_value(v, ctx)).collect::<Result<_, _>>()?),
        Value::Object(map) => Value::Object(
            map.iter().map(|(k, v)| Ok((k.clone(), eval_value(v, ctx)?))).collect::<Result<_, StepError>>()?,
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
