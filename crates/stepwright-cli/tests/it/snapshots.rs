//! Output people read, compared with committed snapshots under `tests/snapshots/`
//! (`STEPWRIGHT_BLESS=1` rewrites them): `graph` in both formats. Run ids and times are
//! replaced by placeholders before comparing, so a snapshot holds only what must not drift.

use std::path::{Path, PathBuf};

use crate::support::stepwright;

fn snapshots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots")
}

/// Compares `actual` with the snapshot `name`, or writes it when blessing.
fn assert_snapshot(name: &str, actual: &str) {
    let path = snapshots().join(name);
    if std::env::var_os("STEPWRIGHT_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with STEPWRIGHT_BLESS=1 to write it)", path.display()));
    if expected != actual {
        let first = expected.lines().zip(actual.lines()).position(|(a, b)| a != b);
        panic!(
            "{name} changed (first difference at line {}); STEPWRIGHT_BLESS=1 rewrites it.\n--- expected\n{expected}\n--- actual\n{actual}",
            first.map_or_else(|| "end".to_owned(), |l| (l + 1).to_string())
        );
    }
}

fn graph(format: &str) -> String {
    let output = stepwright(&snapshots(), &["graph", "--format", format, "shapes.yaml"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// `graph` draws every operator's structure, not a list of top-level steps: each step of
/// the file (called workflows included) with its kind, branch conditions on their edges,
/// fork paths between a split and a join, back edges of loops and `every`, graph edges
/// with their conditions, and fallbacks.
#[test]
fn graph_draws_the_real_structure_in_mermaid_and_dot() {
    let mermaid = graph("mermaid");
    let dot = graph("dot");
    for step in [
        "classify · llm",
        "page · tool",
        "note · set",
        "ask · agent",
        "cached · set",
        "double · set",
        "check · approval",
        "inner · set",
        "paid · wait for `payment` (at most 1d)",
        "ping · set",
    ] {
        assert!(mermaid.contains(step) && dot.contains(step), "{step} is drawn in both");
    }
    assert!(mermaid.contains("|\"steps.classify.output == #quot;urgent#quot;\"|"), "a branch arm's condition");
    assert!(mermaid.contains("-.->|\"again\"|") && mermaid.contains("-.->|\"next tick\"|"), "back edges");
    assert!(mermaid.contains("-.->|\"on failure\"|"), "a fallback");
    assert!(dot.contains("label=\"steps.check.output == false\""), "a graph edge's condition");
    let ends = mermaid.lines().filter(|line| line.trim() == "end").count();
    assert_eq!(mermaid.matches("subgraph ").count(), ends, "every subgraph is closed");
    assert_eq!(dot.matches('{').count(), dot.matches('}').count(), "dot's braces balance");
    assert_snapshot("shapes.mmd", &mermaid);
    assert_snapshot("shapes.dot", &dot);
}

/// Run ids, times and durations out, so a snapshot holds only what must not drift.
fn normalized(text: &str) -> String {
    let uuid = regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap();
    let time = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)").unwrap();
    let duration = regex::Regex::new(r" +\d+(\.\d)?(ms|s)\b").unwrap();
    let text = uuid.replace_all(text, "<run>");
    let text = time.replace_all(&text, "<time>");
    duration.replace_all(&text, " <duration>").into_owned()
}

/// A step that reads the world (a counter that goes up on every call), then a step from
/// it: what replay and recompute show about it.
const COUNTED: &str = r#"
workflow: counted
tools:
  count:
    description: Counts its calls in a file
    command: [sh, -c, "n=$(($(cat \"$1\" 2>/dev/null || echo 0) + 1)); echo $n > \"$1\"; printf '{\"n\": %s, \"rows\": [{\"id\": \"a\"}]}' $n", sh, "{{ args.file }}"]
    effect: read
steps:
  - id: zeta
    tool: count
    with: { file: "{{ input }}" }
  - id: alpha
    set: "call {{ steps.zeta.output.n }}"
"#;

fn text_of(output: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// `runs show`, `replay` and `recompute` in text mode, as a person reads them: steps in the
/// order the run reached them, what differs as a structural diff, why a step was served or
/// is missing, a schema violation's message.
#[test]
fn runs_show_replay_and_recompute_read_as_snapshotted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counted.yaml"), COUNTED).unwrap();
    let counter = dir.path().join("counter").display().to_string();
    let input = serde_json::json!(counter).to_string();
    let ran = stepwright(dir.path(), &["run", "counted.yaml", "--input", &input, "--json"]);
    let run = serde_json::from_slice::<serde_json::Value>(&ran.stdout).unwrap()["run_id"].as_str().unwrap().to_owned();

    let shown = stepwright(dir.path(), &["runs", "show", &run]);
    assert_snapshot("runs-show.txt", &normalized(&text_of(&shown)));

    let replayed = stepwright(dir.path(), &["replay", &run]);
    assert_eq!(replayed.status.code(), Some(1), "the read step answers differently");
    let text = text_of(&replayed);
    assert!(text.find("zeta").unwrap() < text.find("alpha").unwrap(), "execution order: {text}");
    assert!(text.contains("    /n: 1 → 2"), "a structural diff, not hashes: {text}");
    assert_snapshot("replay.txt", &normalized(&text));

    let from = stepwright(dir.path(), &["recompute", &run, "--from", "alpha"]);
    let text = text_of(&from);
    assert!(text.contains("served        zeta (recorded before the step the recompute starts from)"), "{text}");
    assert_snapshot("recompute-from.txt", &normalized(&text));

    let dropped = COUNTED.replace(
        "  - id: alpha\n    set: \"call {{ steps.zeta.output.n }}\"\n",
        "  - id: omega\n    set: 1\n    output: { type: string }\n",
    );
    std::fs::write(dir.path().join("changed.yaml"), dropped).unwrap();
    let changed = stepwright(dir.path(), &["recompute", &run, "--file", "changed.yaml"]);
    let text = text_of(&changed);
    assert!(text.contains("missing       alpha (the new definition has no step here)"), "{text}");
    assert!(text.contains("schema_violation omega\n    the output does not match its schema"), "{text}");
    assert_snapshot("recompute-changed.txt", &normalized(&text));
}
