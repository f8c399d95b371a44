//! The JSON Schema of the file format (`stepwright_flow::file_schema`, committed as
//! `docs/workflow.schema.json`) against the loader: every file that loads is valid against
//! it, every corpus file with an unknown field is not. `STEPWRIGHT_BLESS=1` rewrites the
//! committed copy.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&stepwright_flow::file_schema()).expect("the file format's schema compiles")
}

/// A YAML file as JSON, read by the YAML library itself rather than the loader, so the
/// schema is checked against the file as any YAML tool sees it.
fn as_json(source: &str) -> Value {
    serde_saphyr::from_str(source).expect("YAML")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// Every step kind and every common field, in a file that loads.
const EVERYTHING: &str = r#"
workflow: everything
version: "1.0.0"
description: Every kind and field.
input: { type: object }
telemetry: { capture_content: true, max_content_bytes: 100 }
schedules:
  morning: { cron: "0 7 * * 1-5", timezone: Europe/Berlin, dst: { gap: skip, fold: twice }, input: { day: "{{ tick.local }}" }, overlap: buffer_one, catchup_window: 1h, jitter: 30s, start: "2026-12-01T00:00:00Z", end: "2027-12-01T00:00:00+01:00", pause_on_failure: true }
  quarterly: { every: 15m, phase: 5m, overlap: allow_all, input: {} }
triggers:
  on-ticket: { event: "ticket.*", when: "event.payload.priority != 'low'", input: { id: "{{ event.payload.id }}" }, debounce: { key: "{{ event.payload.customer }}", period: 30s }, concurrency: { key: "{{ event.name }}", limit: 2 } }
  rows: { event: row.added, batch: { max: 10, within: 5s } }
models:
  fast: { provider: openai, model: m, base_url: "http://127.0.0.1:9/v1", api_key_env: K, pricing: { input: 1, output: 2, cache_read: 0.1, cache_write: 1.25 }, timeout: 5s, max_retries: 1, token_limit_field: max_completion_tokens, sampling: true }
  deep: { provider: anthropic, model: c, base_url: "http://127.0.0.1:9", api_key_env: K, api_version: "2023-06-01", sampling: false }
tools:
  cmd: { description: d, input: { type: object }, command: [echo, "{{ args.x }}"], effect: read, timeout: 1s, cwd: /tmp, env: { A: b } }
  web: { http: { url: "http://127.0.0.1:9/x", method: GET, headers: { a: b } }, effect: external, safe_to_retry: true, needs_approval: true }
mcp_servers:
  srv: { command: node, args: [s.js], env: { A: b }, cwd: /tmp, tools: [t], effect: write, safe_to_retry: true, needs_approval: false, timeout: 1s, connect_timeout: 2s, call_timeout: 1s, tool_policies: { t: { effect: read } } }
  remote: { url: "http://127.0.0.1:9/mcp", headers: { a: b } }
agents:
  helper: { model: fast, instructions: Help., tools: [cmd, srv.t], max_iterations: 3, stuck_after: 2, on_stuck: stop, budget: { tokens: 100 }, params: { temperature: 0 }, stream: false }
steps:
  - id: a
    description: first
    set: 1
    retry: { max_attempts: 2, backoff: linear, initial_delay: 1s, max_delay: 2s, jitter: 0.1 }
    timeout: 5s
    on_failure: skip
    effect: pure
    output: { type: integer }
    guardrails: [ { on: output, action: warn, when: "value > 5" }, { pattern: "x+", action: redact } ]
  - id: b
    if: steps.a.output == 1
    branch:
      - when: "true"
        steps: [ { id: c, sleep: 1s } ]
      - otherwise: [ { id: d, set: 2 } ]
  - id: e
    fork: { mode: settle, concurrency: 2, paths: [ [ { id: f, set: 1 } ], [ { id: g, set: 2 } ] ] }
  - id: h
    map: { items: "[1, 2]", as: num, concurrency: 1, steps: [ { id: i, set: "{{ num }}" } ] }
  - id: j
    loop: { max_iterations: 2, until: "loop.iteration >= 1", steps: [ { id: k, set: "{{ loop.iteration }}" } ] }
  - id: l
    graph: { entry: m, max_steps: 3, nodes: [ { id: m, set: 1 }, { id: o, set: 2 } ], edges: [ { from: m, to: o, when: "true" } ] }
  - id: p
    every: { interval: 1h, jitter: 0.1, wake: now, on_error: fail, steps: [ { id: q, set: 1 } ] }
  - id: r
    input: { message: "Give a number", schema: { type: number } }
  - id: s
    approval: { message: "OK?", approvers: ["role:lead"], timeout: 1d, on_timeout: approve }
  - id: t
    llm: { model: fast, system: s, prompt: p, temperature: 0, top_p: 1, max_tokens: 10, stop: END, repair_turns: 1, stream: false }
  - id: u
    agent: helper
    prompt: hi
    session: s-1
  - id: v
    tool: cmd
    with: { x: 1 }
    requires_approval: { message: Run?, approvers: ["user:ann"] }
  - id: w
    tool: srv.t
  - id: x
    memory.store: { namespace: notes, scope: global }
    with: { key: k, value: 1 }
  - id: recall
    memory.recall: { namespace: notes, scope: user, limit: 2 }
    with: k
  - id: reply
    wait: { event: ticket.updated, timeout: 1h, match: { ticket: "{{ steps.a.output }}" }, schema: { type: object } }
output: "{{ steps.a.output }}"
"#;

#[test]
fn the_committed_schema_is_the_generated_one() {
    let path = root().join("docs/workflow.schema.json");
    let generated = serde_json::to_string_pretty(&stepwright_flow::file_schema()).unwrap() + "\n";
    if std::env::var("STEPWRIGHT_BLESS").is_ok() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == generated, "docs/workflow.schema.json is stale; STEPWRIGHT_BLESS=1 rewrites it");
}

#[test]
fn every_file_that_loads_is_valid_against_the_schema() {
    let validator = validator();
    stepwright_flow::load_str(EVERYTHING, "everything.yaml").unwrap_or_else(|e| panic!("{e}"));
    let mut sources = vec![("everything.yaml".to_owned(), EVERYTHING.to_owned())];
    for file in yaml_files(&root().join("examples")) {
        sources.push((file.display().to_string(), std::fs::read_to_string(&file).unwrap()));
    }
    assert!(sources.len() >= 5);
    for (name, source) in sources {
        let errors: Vec<String> =
            validator.iter_errors(&as_json(&source)).map(|e| format!("{} at {}", e, e.instance_path())).collect();
        assert!(errors.is_empty(), "{name} loads but the schema rejects it:\n{}", errors.join("\n"));
    }
}

#[test]
fn a_file_with_an_unknown_field_is_invalid_against_the_schema() {
    let validator = validator();
    let mut checked = 0;
    for file in yaml_files(&root().join("crates/stepwright-flow/tests/corpus")) {
        let diagnostics = std::fs::read_to_string(file.with_extension("diagnostics")).unwrap();
        if !diagnostics.contains("unknown field") {
            continue;
        }
        let source = std::fs::read_to_string(&file).unwrap();
        let Ok(document) = serde_saphyr::from_str::<Value>(&source) else { continue };
        assert!(!validator.is_valid(&document), "{} has an unknown field the schema allows", file.display());
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} corpus files with unknown fields");
    // And one per level, so each nested type is closed.
    for (what, text) in [
        ("workflow", "workflow: w\nsteps: []\ncolour: red\n"),
        ("step", "workflow: w\nsteps: [ { id: a, set: 1, colour: red } ]\n"),
        ("fork", "workflow: w\nsteps: [ { id: a, fork: { paths: [], colour: red } } ]\n"),
        ("model", "workflow: w\nsteps: []\nmodels: { m: { provider: openai, model: x, colour: red } }\n"),
        ("agent", "workflow: w\nsteps: []\nagents: { a: { model: m, colour: red } }\n"),
        ("mcp server", "workflow: w\nsteps: []\nmcp_servers: { s: { command: x, colour: red } }\n"),
        ("duration", "workflow: w\nsteps: [ { id: a, sleep: soon } ]\n"),
        ("effect", "workflow: w\nsteps: [ { id: a, set: 1, effect: loud } ]\n"),
    ] {
        assert!(!validator.is_valid(&as_json(text)), "the schema allows a bad {what}");
    }
}
