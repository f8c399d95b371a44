//! The OpenAPI 3.1 document, generated from the contract's types (their JSON Schemas) and
//! the table of [`crate::operations`]. The committed `docs/openapi.json` is this document; a
//! test keeps the two in step.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::operations::{Method, OperationId, operations};
use crate::problem::Problem;

/// The reason phrase of a status the API answers.
fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        410 => "Gone",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// The document.
pub fn document() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut generator = settings.into_generator();
    let problem = generator.subschema_for::<Problem>().to_value();
    let mut paths: Map<String, Value> = Map::new();
    let mut queries: Vec<String> = Vec::new();
    for op in operations() {
        let mut parameters: Vec<Value> = path_parameters(op.path);
        if let Some(query) = op.query {
            let query = query(&mut generator);
            if let Some(name) = query.get("$ref").and_then(Value::as_str) {
                queries.push(name.trim_start_matches("#/components/schemas/").to_owned());
            }
            parameters.extend(query_parameters(&query, generator.definitions()));
        }
        if op.id == OperationId::StartRun {
            parameters.push(json!({
                "name": "traceparent",
                "in": "header",
                "required": false,
                "description": "W3C Trace Context: the run's first activation is traced as a child of this span (a malformed value is ignored, as the recommendation says).",
                "schema": { "type": "string" },
            }));
        }
        let mut responses: Map<String, Value> = Map::new();
        for (status, description, body, content_type) in op.responses {
            let mut response = json!({ "description": description });
            if let Some(body) = body {
                let body = body(&mut generator);
                let body = if content_type == "text/event-stream" {
                    // One event of the stream (what an SSE-aware reader checks each event
                    // against), or the stream's whole text (what a generated client, which
                    // reads the body at once, gets): OpenAPI 3.1 has no `itemSchema`.
                    let mut choices = body["oneOf"].as_array().cloned().unwrap_or_else(|| vec![body.clone()]);
                    choices.push(json!({ "type": "string", "description": "The stream's whole text: `id:`, `event:` and `data:` lines, a blank line after each event." }));
                    json!({ "oneOf": choices })
                } else {
                    body
                };
                response["content"] = json!({ content_type: { "schema": body } });
            }
            responses.insert(status.to_string(), response);
        }
        let mut errors: Vec<u16> = op.errors.to_vec();
        if op.role.is_some() {
            errors.extend([401, 429]);
        }
        errors.push(500);
        for status in errors {
            responses.insert(
                status.to_string(),
                json!({ "description": reason(status), "content": { "application/problem+json": { "schema": problem } } }),
            );
        }
        let mut operation = json!({
            "operationId": op.id.name(),
            "summary": op.summary,
            "parameters": parameters,
            "responses": responses,
        });
        match op.role {
            None => operation["security"] = json!([]),
            Some(role) => {
                operation["description"] = json!(format!("Needs a key with the `{}` role.", role.as_str()));
            }
        }
        if let Some(body) = op.body {
            // A body that may be left out: these actions have defaults for all of it.
            let optional = matches!(
                op.id,
                OperationId::CancelRun | OperationId::ResumeRun | OperationId::RecomputeRun | OperationId::CreateLink
            );
            let body = body(&mut generator);
            operation["requestBody"] = json!({ "required": op.method == Method::Post && !optional, "content": { "application/json": { "schema": body } } });
        }
        paths.entry(op.path).or_insert_with(|| json!({}))[op.method.as_str()] = operation;
    }
    let mut definitions = generator.take_definitions(true);
    // A query type is spelled out as parameters; its schema is kept only if something else
    // names it.
    let named = Value::Object(paths.clone()).to_string() + &Value::Object(definitions.clone()).to_string();
    for name in &queries {
        if !named.contains(&format!("\"#/components/schemas/{name}\"")) {
            definitions.remove(name);
        }
    }
    let mut schemas = Value::Object(definitions);
    let mut paths = Value::Object(paths);
    bound_integers(&mut schemas);
    bound_integers(&mut paths);
    spell_out_any(&mut schemas);
    spell_out_any(&mut paths);
    plain_enums(&mut schemas);
    plain_enums(&mut paths);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Stepwright",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Durable AI-agent workflows over HTTP: register workflows, start runs, stream their events, decide their interrupts. Errors are application/problem+json with a stable `code`.",
            "license": { "name": "Apache-2.0", "identifier": "Apache-2.0" },
        },
        "servers": [{ "url": "/", "description": "The server that serves this document." }],
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "apiKey": { "type": "http", "scheme": "bearer", "description": "An API key from `stepwright keys create`." },
                "session": { "type": "apiKey", "in": "cookie", "name": "stepwright_session", "description": "A browser's session from `POST /v1/session`; a request it authenticates that changes anything also sends `X-Stepwright-Csrf`." },
            },
        },
        "security": [{ "apiKey": [] }, { "session": [] }],
    })
}

/// A closed set of strings as `enum` rather than a `oneOf` of documented `const`s (what
/// schemars writes when each variant has a doc comment): the two validate alike, but
/// generators make a parser of the `oneOf` that accepts only its first value
/// (openapi-python-client); each value's description moves into the schema's.
fn plain_enums(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            let values: Option<Vec<(Value, Option<String>)>> =
                fields.get("oneOf").and_then(Value::as_array).and_then(|choices| {
                    choices
                        .iter()
                        .map(|choice| {
                            let choice = choice.as_object()?;
                            let known = choice.keys().all(|k| matches!(k.as_str(), "const" | "type" | "description"));
                            let constant = choice.get("const").filter(|c| c.is_string())?;
                            (known && choice.get("type").is_none_or(|t| t == "string")).then(|| {
                                (constant.clone(), choice.get("description").and_then(Value::as_str).map(str::to_owned))
                            })
                        })
                        .collect()
                });
            if let Some(values) = values.filter(|v| !v.is_empty()) {
                fields.remove("oneOf");
                let notes: Vec<String> = values
                    .iter()
                    .filter_map(|(value, note)| Some(format!("`{}`: {}", value.as_str()?, note.as_deref()?)))
                    .collect();
                if !notes.is_empty() {
                    let head = fields.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
                    let text = if head.is_empty() { notes.join(" ") } else { format!("{head} {}", notes.join(" ")) };
                    fields.insert("description".into(), Value::String(text));
                }
                fields.insert("type".into(), json!("string"));
                fields.insert("enum".into(), Value::Array(values.into_iter().map(|(v, _)| v).collect()));
            }
            fields.values_mut().for_each(plain_enums);
        }
        Value::Array(items) => items.iter_mut().for_each(plain_enums),
        _ => {}
    }
}

/// Any value as `{}` rather than the boolean schema `true` (what schemars writes for a JSON
/// value): both mean "anything", but common client generators (openapi-python-client) read
/// only the object form.
fn spell_out_any(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                match (key.as_str(), &mut *field) {
                    ("items" | "additionalProperties" | "contentSchema", Value::Bool(true)) => *field = json!({}),
                    ("properties", Value::Object(properties)) => {
                        for property in properties.values_mut() {
                            if *property == Value::Bool(true) {
                                *property = json!({});
                            }
                        }
                    }
                    _ => {}
                }
                spell_out_any(field);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(spell_out_any),
        _ => {}
    }
}

/// Integer schemas with the range of the type the server reads them into (schemars gives
/// the `format` and, for unsigned types, the minimum): a number out of it is refused, so
/// the document says so.
fn bound_integers(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            let range: Option<(Value, Value)> = match fields.get("format").and_then(Value::as_str) {
                Some("uint8") => Some((json!(0), json!(u8::MAX))),
                Some("uint16") => Some((json!(0), json!(u16::MAX))),
                Some("uint32") => Some((json!(0), json!(u32::MAX))),
                Some("uint64" | "uint") => Some((json!(0), json!(u64::MAX))),
                Some("int32") => Some((json!(i32::MIN), json!(i32::MAX))),
                Some("int64" | "int") => Some((json!(i64::MIN), json!(i64::MAX))),
                _ => None,
            };
            if let Some((min, max)) = range {
                fields.entry("minimum").or_insert(min);
                fields.entry("maximum").or_insert(max);
            }
            fields.values_mut().for_each(bound_integers);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

fn path_parameters(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|part| part.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
        .map(|name| {
            // An event's sequence number is a whole number; every other path segment a name.
            let schema = match name {
                "seq" => json!({ "type": "integer", "minimum": 0, "maximum": i64::MAX }),
                _ => json!({ "type": "string" }),
            };
            json!({ "name": name, "in": "path", "required": true, "schema": schema })
        })
        .collect()
}

/// A query type's properties as query parameters.
fn query_parameters(schema: &Value, definitions: &Map<String, Value>) -> Vec<Value> {
    let resolved = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .and_then(|name| definitions.get(name))
        .unwrap_or(schema);
    let required: Vec<&str> =
        resolved["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    resolved["properties"]
        .as_object()
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| {
                    let mut parameter = json!({
                        "name": name,
                        "in": "query",
                        "required": required.contains(&name.as_str()),
                        "schema": property,
                    });
                    if let Some(description) = property.get("description") {
                        parameter["description"] = description.clone();
                    }
                    parameter
                })
                .collect()
        })
        .unwrap_or_default()
}
