//! The `stepwright` binary end to end: exit codes, `--json` shapes, diagnostics.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn stepwright(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stepwright"))
        .current_dir(dir)
        .env_remove("STEPWRIGHT_DB")
        .args(args)
        .output()
        .expect("run stepwright")
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

const GREET: &str = r#"
workflow: greet
input: { type: object, required: [name], properties: { name: { type: string } } }
steps:
  - id: hello
    set: "Hello, {{ input.name }}"
  - id: loud
    set: "{{ steps.hello.output | upper }}"
"#;

const GATED: &str = r#"
workflow: gated
steps:
  - id: draft
    set: "a draft"
  - id: review
    approval: { message: "Send {{ steps.draft.output }}?" }
"#;

#[test]
fn validate_reports_problems_with_positions_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "good.yaml", GREET);
    write(dir.path(), "bad.yaml", "workflow: bad\nsteps:\n  - id: a\n    sett: 1\n");
    let good = stepwright(dir.path(), &["validate", "good.yaml"]);
    assert_eq!(good.status.code(), Some(0));
    let bad = stepwright(dir.path(), &["validate", "bad.yaml"]);
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("bad.yaml:4:5: unknown field `sett` in a step (hint: did you mean `set`?)"), "{stderr}");
}

#[test]
fn run_prints_the_json_shape_and_exits_by_status() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.yaml", GREET);
    write(dir.path(), "gated.yaml", GATED);
    let done = stepwright(dir.path(), &["run", "greet.yaml", "--input", r#"{"name": "ann"}"#, "--json"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    let report: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(report["status"], "completed");
    assert_eq!(report["output"], "HELLO, ANN");
    assert!(report["run_id"].is_string() && report["error"].is_null() && report["pending"] == serde_json::json!([]));
    assert!(dir.path().join("stepwright.db").exists(), "the default store is ./stepwright.db");

    let waiting = stepwright(dir.path(), &["run", "gated.yaml", "--json"]);
    assert_eq!(waiting.status.code(), Some(3));
    let report: Value = serde_json::from_slice(&waiting.stdout).unwrap();
    assert_eq!(report["status"], "suspended");
    assert_eq!(report["pending"][0]["kind"], "approval");
    assert_eq!(report["pending"][0]["message"], "Send a draft?");
    assert_eq!(report["pending"][0]["step"], "review");

    let bad_input = stepwright(dir.path(), &["run", "greet.yaml", "--input", r#"{"nom": 1}"#]);
    assert_eq!(bad_input.status.code(), Some(2), "an input that fails the schema is bad input");
    let not_json = stepwright(dir.path(), &["run", "greet.yaml", "--input", "{oops"]);
    assert_eq!(not_json.status.code(), Some(2));
    let usage = stepwright(dir.path(), &["run"]);
    assert_eq!(usage.status.code(), Some(2));
}

#[test]
fn runs_list_and_show_read_the_store() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.yaml", GREET);
    let db = format!("sqlite://{}", dir.path().join("runs.db").display());
    let done = stepwright(dir.path(), &["--db", &db, "run", "greet.yaml", "--input", r#"{"name": "bo"}"#, "--json"]);
    let run = serde_json::from_slice::<Value>(&done.stdout).unwrap()["run_id"].as_str().unwrap().to_owned();
    let list = stepwright(dir.path(), &["--db", &db, "runs", "list", "--json"]);
    let first: Value = serde_json::from_str(String::from_utf8_lossy(&list.stdout).lines().next().unwrap()).unwrap();
    assert_eq!((first["run_id"].as_str(), first["status"].as_str()), (Some(run.as_str()), Some("completed")));
    let show = stepwright(dir.path(), &["--db", &db, "runs", "show", &run, "--json"]);
    assert_eq!(show.status.code(), Some(0));
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["output"], "HELLO, BO");
    let steps: Vec<(String, String)> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["path"].as_str().unwrap().to_owned(), s["status"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(steps, [("hello".to_owned(), "completed".to_owned()), ("loud".to_owned(), "completed".to_owned())]);
}

#[test]
fn graph_draws_mermaid_and_dot() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.yaml", GREET);
    let mermaid = stepwright(dir.path(), &["graph", "greet.yaml"]);
    let text = String::from_utf8_lossy(&mermaid.stdout);
    assert!(text.starts_with("flowchart TD") && text.contains("s0 --> s1"), "{text}");
    let dot = stepwright(dir.path(), &["graph", "greet.yaml", "--format", "dot"]);
    assert!(String::from_utf8_lossy(&dot.stdout).contains("s0 -> s1;"));
    assert_eq!(stepwright(dir.path(), &["graph", "greet.yaml", "--format", "svg"]).status.code(), Some(2));
}
