//! Structured output: schemas transformed the way each provider wants them, and answers
//! validated against the schema the workflow wrote.

use serde_json::{Map, Value, json};

/// OpenAI's strict mode: every object lists all its properties as `required` and has
/// `additionalProperties: false`; a property the original did not require becomes nullable
/// instead (and [`strip_optional_nulls`] removes the nulls from the answer again).
pub(crate) fn openai_strict(schema: &Value) -> Value {
    let Value::Object(map) = schema else { return schema.clone() };
    let mut out = map.clone();
    let is_object =
        map.get("type").is_some_and(|t| t == "object" || t.as_array().is_some_and(|a| a.contains(&json!("object"))))
            || map.contains_key("properties");
    if is_object {
        let required = required_names(map);
        let mut properties = Map::new();
        if let Some(Value::Object(props)) = map.get("properties") {
            for (name, property) in props {
                let strict = openai_strict(property);
                let strict = if required.iter().any(|r| r == name) { strict } else { nullable(strict) };
                properties.insert(name.clone(), strict);
            }
        }
        out.insert("required".into(), Value::Array(properties.keys().map(|k| json!(k)).collect()));
        out.insert("properties".into(), Value::Object(properties));
        out.insert("additionalProperties".into(), json!(false));
    }
    if let Some(items) = map.get("items") {
        out.insert("items".into(), openai_strict(items));
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        if let Some(Value::Array(options)) = map.get(key) {
            out.insert(key.into(), Value::Array(options.iter().map(openai_strict).collect()));
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get(key) {
            out.insert(key.into(), Value::Object(defs.iter().map(|(k, v)| (k.clone(), openai_strict(v))).collect()));
        }
    }
    Value::Object(out)
}

fn required_names(map: &Map<String, Value>) -> Vec<String> {
    map.get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The schema, also accepting `null`.
fn nullable(schema: Value) -> Value {
    let Value::Object(mut map) = schema else { return schema };
    match map.get_mut("type") {
        Some(Value::String(t)) => {
            let t = std::mem::take(t);
            map.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) => {
            if !types.contains(&json!("null")) {
                types.push(json!("null"));
            }
        }
        _ => return json!({ "anyOf": [Value::Object(map), { "type": "null" }] }),
    }
    if let Some(Value::Array(values)) = map.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    Value::Object(map)
}

/// The property a structured answer with a non-object root is wrapped in on the wire.
pub(crate) const WRAPPED: &str = "value";

/// Whether a schema's root is an object (what both providers require of a structured answer).
fn object_rooted(schema: &Value) -> bool {
    schema.get("type").is_some_and(|t| t == "object")
        || (schema.get("type").is_none() && schema.get("properties").is_some() && schema.get("$ref").is_none())
}

/// The schema as sent: an object-rooted one as it is; any other (an array, a string, an
/// `anyOf`) as the one required property `value` of an object, which [`unwrap_answer`]
/// takes off the answer, so the step sees the answer its schema describes. `$defs` stay at
/// the root, where `$ref`s find them.
pub(crate) fn object_root(schema: &Value) -> (Value, bool) {
    if object_rooted(schema) {
        return (schema.clone(), false);
    }
    let mut inner = schema.clone();
    let mut wrapped = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(defs) = inner.as_object_mut().and_then(|m| m.remove(key)) {
            wrapped.insert(key.to_owned(), defs);
        }
    }
    wrapped.insert("type".into(), json!("object"));
    wrapped.insert("properties".into(), json!({ WRAPPED: inner }));
    wrapped.insert("required".into(), json!([WRAPPED]));
    wrapped.insert("additionalProperties".into(), json!(false));
    (Value::Object(wrapped), true)
}

/// The answer inside its wrapper (see [`object_root`]); text that is not the wrapper as is,
/// for the step's own check to report.
pub(crate) fn unwrap_answer(text: &str) -> String {
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(Value::Object(mut map)) if map.len() == 1 && map.contains_key(WRAPPED) => {
            map.remove(WRAPPED).map_or_else(String::new, |v| v.to_string())
        }
        _ => text.to_owned(),
    }
}

/// The response with its structured answer taken out of the wrapper the request put its
/// schema in (when it did).
pub(crate) fn unwrapped(
    request: &crate::types::ChatRequest,
    mut response: crate::types::ChatResponse,
) -> crate::types::ChatResponse {
    if request.output.as_ref().is_some_and(|output| !object_rooted(&output.schema)) {
        response.content = unwrap_answer(&response.content);
    }
    response
}

/// Whether OpenAI's strict mode can say what the schema says. It cannot express an object
/// whose keys are not listed (a map: `additionalProperties` a schema or `true`; a free-form
/// `{type: object}`; `patternProperties`), nor a `$ref` with keys beside it: the strict
/// transform would narrow such a schema (a map to `{}`), so it is sent non-strict instead.
pub(crate) fn strict_expressible(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            let object = map
                .get("type")
                .is_some_and(|t| t == "object" || t.as_array().is_some_and(|a| a.contains(&json!("object"))));
            let listed = map.get("properties").is_some_and(|p| p.as_object().is_some_and(|p| !p.is_empty()));
            let closed = map.get("additionalProperties").is_none_or(|a| a == &json!(false));
            if object && (!listed || !closed) {
                return false;
            }
            if map.contains_key("patternProperties") || (map.contains_key("$ref") && map.len() > 1) {
                return false;
            }
            map.values().all(strict_expressible)
        }
        Value::Array(items) => items.iter().all(strict_expressible),
        _ => true,
    }
}

/// Removes the `null`s a strict-mode answer put in properties the original schema does not
/// require (recursively), so the answer is checked against the schema as written.
pub(crate) fn strip_optional_nulls(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(fields) => {
            let required = schema.as_object().map(required_names).unwrap_or_default();
            let properties = schema.get("properties").and_then(Value::as_object);
            fields.retain(|name, v| {
                !(v.is_null() && properties.is_some_and(|p| p.contains_key(name)) && !required.contains(name))
            });
            if let Some(properties) = properties {
                for (name, v) in fields.iter_mut() {
                    if let Some(property) = properties.get(name) {
                        strip_optional_nulls(property, v);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    strip_optional_nulls(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Checks a value against a schema; every problem as `at /pointer: message`.
pub(crate) fn validate(schema: &Value, value: &Value) -> Result<(), Vec<String>> {
    let validator = jsonschema::validator_for(schema).map_err(|e| vec![format!("the schema is invalid: {e}")])?;
    check(&validator, value)
}

/// Checks a value against a compiled schema; every problem as `at /pointer: message`.
pub(crate) fn check(validator: &jsonschema::Validator, value: &Value) -> Result<(), Vec<String>> {
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|e| {
            let at = e.instance_path().to_string();
            format!("at {}: {e}", if at.is_empty() { "/" } else { &at })
        })
        .collect();
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket_schema() -> Value {
        json!({
            "type": "object",
            "required": ["category"],
            "properties": {
                "category": { "enum": ["billing", "bug", "other"] },
                "priority": { "type": "integer" },
                "tags": { "type": "array", "items": { "type": "object", "properties": { "name": { "type": "string" } } } },
                "note": { "enum": ["a", "b"], "type": "string" }
            }
        })
    }

    #[test]
    fn strict_mode_requires_everything_and_makes_optionals_nullable() {
        let strict = openai_strict(&ticket_schema());
        assert_eq!(strict["additionalProperties"], json!(false));
        assert_eq!(strict["required"], json!(["category", "note", "priority", "tags"]));
        assert_eq!(strict["properties"]["category"], json!({ "enum": ["billing", "bug", "other"] }), "required: as is");
        assert_eq!(strict["properties"]["priority"]["type"], json!(["integer", "null"]));
        assert_eq!(strict["properties"]["note"], json!({ "enum": ["a", "b", null], "type": ["string", "null"] }));
        let item = &strict["properties"]["tags"]["items"];
        assert_eq!(item["additionalProperties"], json!(false), "nested objects too");
        assert_eq!(item["required"], json!(["name"]));
        assert_eq!(item["properties"]["name"]["type"], json!(["string", "null"]));
    }

    #[test]
    fn a_strict_answer_validates_against_the_original_once_its_nulls_are_stripped() {
        let schema = ticket_schema();
        let mut answer = json!({ "category": "bug", "priority": null, "note": null, "tags": [{ "name": null }] });
        assert!(validate(&schema, &answer).is_err(), "null is not an integer");
        strip_optional_nulls(&schema, &mut answer);
        assert_eq!(answer, json!({ "category": "bug", "tags": [{}] }));
        validate(&schema, &answer).unwrap();
    }

    #[test]
    fn validation_names_every_problem_with_its_pointer() {
        let problems = validate(&ticket_schema(), &json!({ "category": "sales", "priority": "high" })).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().any(|p| p.starts_with("at /category:")), "{problems:?}");
        assert!(problems.iter().any(|p| p.starts_with("at /priority:")), "{problems:?}");
    }
}
