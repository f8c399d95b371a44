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
