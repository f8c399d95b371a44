//! The README's worked experiment (`examples/experiment/`), offline: fifty support tickets run
//! through `triage.yaml` with every model call played back from the cassette, then
//! `cheaper.yaml` tries the cheaper model on them, judged by the smart one. The cassette is a
//! recording against the scripted model below; a test records it again and checks the
//! committed one is exactly that (`STEPWRIGHT_BLESS=1` rewrites it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::{Answer, Tokens, contents};

fn example(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/experiment")
        .join(file)
        .canonicalize()
        .unwrap()
        .display()
        .to_string()
}

/// The models the cassette was recorded from. `gpt-4o` files a refund under billing; the
/// cheaper `gpt-4o-mini` takes "arrived broken" for a bug. The judge (`gpt-4o`) calls that
/// worse, and anything else the same.
fn triage_models(request: &Value) -> Answer {
    if contents(request, "system").first().is_some_and(|s| s.starts_with("You compare two outputs")) {
        let said = contents(request, "user").first().copied().unwrap_or_default().to_owned();
        let (old, new) = said.split_once("NEW output").unwrap_or_default();
        if old.contains("\"billing\"") && new.contains("\"bug\"") {
            return Answer::Text(
                json!({ "verdict": "worse", "reason": "a refund for a broken item is a billing matter, not a bug" })
                    .to_string(),
            );
        }
        return Answer::Text(json!({ "verdict": "same", "reason": "the same category" }).to_string());
    }
    let ticket = contents(request, "user").first().copied().unwrap_or_default().to_lowercase();
    let cheap = request["model"] == json!("gpt-4o-mini");
    let category = if ticket.contains("crash") || (cheap && ticket.contains("refund")) {
        "bug"
    } else if ticket.contains("refund") || ticket.contains("charged") || ticket.contains("invoice") {
        "billing"
    } else {
        "other"
    };
    Answer::Text(json!({ "category": category }).to_string())
}

fn tickets() -> Vec<String> {
    std::fs::read_to_string(example("tickets.jsonl")).unwrap().lines().map(str::to_owned).collect()
}

/// `stepwright ARGS` in `dir` with no API key in its environment (or the one given).
fn offline(dir: &Path, args: &[&str], key: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stepwright"));
    command.current_dir(dir).env_remove("STEPWRIGHT_DB").env_remove("OPENAI_API_KEY").args(args);
    if let Some(key) = key {
        command.env("OPENAI_API_KEY", key);
    }
    command.output().unwrap()
}

/// The README's commands: the fifty runs, then the experiment, with `extra` flags (a cassette
/// mode, model endpoints) added to each. The experiment's JSON report and exit code.
fn run_the_example(dir: &Path, cassette: &str, extra: &[String], key: Option<&str>) -> (Value, Option<i32>) {
    let db = format!("sqlite://{}", dir.join("triage.db").display());
    let common: Vec<&str> =
        ["--db", &db, "--cassette", cassette].into_iter().chain(extra.iter().map(String::as_str)).collect();
    let triage = example("triage.yaml");
    for ticket in tickets() {
        let mut args = vec!["run", triage.as_str(), "--input", ticket.as_str(), "--json"];
        args.extend(&common);
        let ran = offline(dir, &args, key);
        assert_eq!(ran.status.code(), Some(0), "{ticket}: {}", String::from_utf8_lossy(&ran.stdout));
    }
    let cheaper = example("cheaper.yaml");
    let mut args = vec!["experiments", "run", cheaper.as_str(), "--json", "--fail-on", "regressed>0"];
    args.extend(&common);
    let ran = offline(dir, &args, key);
    let report = serde_json::from_slice(&ran.stdout)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&ran.stderr)));
    (report, ran.status.code())
}

#[test]
fn the_readme_experiment_runs_offline_from_its_cassette() {
    let dir = tempfile::tempdir().unwrap();
    let cassette = example("triage.cassette.json");
    let before = std::fs::read(&cassette).unwrap();
    let (report, code) = run_the_example(dir.path(), &cassette, &[], None);
    assert_eq!(code, Some(1), "--fail-on regressed>0: {report}");
    let totals = &report["totals"];
    assert_eq!(
        [&totals["runs"], &totals["changed"], &totals["regressed"], &totals["improved"], &totals["would_execute"]],
        [&json!(50), &json!(10), &json!(10), &json!(0), &json!(10)],
        "{totals}"
    );
    assert!(totals["cost_per_1000_after"].as_f64() < totals["cost_per_1000_before"].as_f64(), "{totals}");
    let regressed = report["runs"].as_array().unwrap().iter().find(|r| r["verdict"] == json!("regressed")).unwrap();
    assert_eq!(regressed["would_execute"], json!([{ "step": "tell", "input": { "category": "bug" } }]));
    assert_eq!(regressed["scores"][2]["reason"], json!("a refund for a broken item is a billing matter, not a bug"));

    // The README's new tickets: run fresh then and now, their `tell` served what the fifty runs
    // answered for the same input; two would tell another team.
    let db = format!("sqlite://{}", dir.path().join("triage.db").display());
    let new = example("new-tickets.yaml");
    let args = ["experiments", "run", new.as_str(), "--json", "--db", &db, "--cassette", &cassette];
    let ran = offline(dir.path(), &args, None);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let report: Value = serde_json::from_slice(&ran.stdout).unwrap();
    let totals = &report["totals"];
    assert_eq!(
        [&totals["runs"], &totals["changed"], &totals["regressed"], &totals["would_execute"]],
        [&json!(10), &json!(2), &json!(2), &json!(2)],
        "{totals}"
    );
    let same = report["runs"].as_array().unwrap().iter().find(|r| r["changed"] == json!(false)).unwrap();
    assert_eq!(same["fresh"]["served"][0]["step"], json!("tell"), "{same}");
    assert_eq!(std::fs::read(&cassette).unwrap(), before, "played back, not written");
}

#[test]
fn recording_the_experiment_example_again_reproduces_its_cassette() {
    let (port, _served) = crate::support::fake_openai(triage_models, Tokens::Proportional);
    let base = format!("http://127.0.0.1:{port}/v1");
    let dir = tempfile::tempdir().unwrap();
    let recorded = dir.path().join("recorded.cassette.json");
    let extra: Vec<String> = vec![
        "--cassette-mode".into(),
        "auto".into(),
        "--model".into(),
        format!("smart=openai:gpt-4o@{base}"),
        "--model".into(),
        format!("cheap=openai:gpt-4o-mini@{base}"),
    ];
    let (report, _) = run_the_example(dir.path(), &recorded.display().to_string(), &extra, Some("sk-recording"));
    assert_eq!(report["totals"]["regressed"], json!(10), "{report}");
    let committed = PathBuf::from(example("triage.cassette.json"));
    if std::env::var("STEPWRIGHT_BLESS").is_ok() {
        std::fs::copy(&recorded, &committed).unwrap();
    }
    let (fresh, kept) = (crate::examples::recordings(&recorded), crate::examples::recordings(&committed));
    assert_eq!(fresh.len(), 110, "fifty runs, fifty recomputes, ten judgements");
    assert!(
        fresh == kept,
        "the committed cassette is not what the example records now; STEPWRIGHT_BLESS=1 rewrites it"
    );
}
