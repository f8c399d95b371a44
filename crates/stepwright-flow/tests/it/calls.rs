//! The `workflow` step kind: calls between workflow files, checked when the calling file
//! loads (missing files, problems in the called file, call cycles, model clashes) and run as
//! subworkflows that keep their own tools.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use stepwright_core::{Engine, InMemoryStore, RunStatus, Store};

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn messages(path: &Path) -> Vec<String> {
    match stepwright_flow::load(path) {
        Ok(_) => panic!("{} loads", path.display()),
        Err(error) => error.diagnostics.iter().map(ToString::to_string).collect(),
    }
}

#[tokio::test]
async fn a_called_file_runs_as_a_subworkflow_with_its_own_tools() {
    let dir = tempfile::tempdir().unwrap();
    // Both files declare a tool named `mark`; each file's steps must get its own.
    write(
        dir.path(),
        "parts/child.yaml",
        r#"
workflow: child
input: { type: object, required: [text], properties: { text: { type: string } } }
tools:
  mark:
    description: Marks text as the child's
    input: { type: object, properties: { text: { type: string } } }
    command: [sh, -c, "printf 'child:%s' \"$1\"", sh, "{{ args.text }}"]
steps:
  - id: marked
    tool: mark
    with: { text: "{{ input.text }}" }
output: { marked: "{{ steps.marked.output }}" }
"#,
    );
    let parent = write(
        dir.path(),
        "parent.yaml",
        r#"
workflow: parent
tools:
  mark:
    description: Marks text as the parent's
    input: { type: object, properties: { text: { type: string } } }
    command: [sh, -c, "printf 'parent:%s' \"$1\"", sh, "{{ args.text }}"]
steps:
  - id: mine
    tool: mark
    with: { text: "{{ input.word }}" }
  - id: called
    workflow: parts/child.yaml
    with: { text: "{{ input.word }}" }
  - id: relay
    set: "{{ steps.called.output.marked }}"
output: { mine: "{{ steps.mine.output }}", called: "{{ steps.relay.output }}" }
"#,
    );
    let loaded = stepwright_flow::load(&parent).unwrap_or_else(|e| panic!("{e}"));
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).build();
    let report = engine.start(&loaded.workflow, json!({ "word": "hi" })).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.output, Some(json!({ "mine": "parent:hi", "called": "child:hi" })));
    // The called workflow's steps are journaled under the calling step's path.
    let journal = store.load(report.run_id).await.unwrap();
    let paths: Vec<String> = journal.entries.iter().map(|e| e.path.to_string()).collect();
    assert!(paths.iter().any(|p| p == "called/marked"), "{paths:?}");

    // The called file's input schema is checked when the call runs.
    let bad = write(
        dir.path(),
        "bad-input.yaml",
        "workflow: bad\nsteps:\n  - id: called\n    workflow: parts/child.yaml\n    with: { text: 3 }\n",
    );
    let loaded = stepwright_flow::load(&bad).unwrap();
    let report = engine.start(&loaded.workflow, json!({})).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.error.unwrap().code.as_str(), "input_validation");
}

#[test]
fn a_call_cycle_is_a_load_error_at_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.yaml", "workflow: a\nsteps:\n  - id: tob\n    workflow: b.yaml\n");
    write(
        dir.path(),
        "b.yaml",
        "workflow: b\nsteps:\n  - id: first\n    set: 1\n  - id: back\n    workflow: ./a.yaml\n",
    );
    let found = messages(&a);
    let a_name = a.display().to_string();
    let b_name = dir.path().join("b.yaml").display().to_string();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!(found[0], format!("{a_name}:4:15: the called workflow `b.yaml` does not load (1 problem listed below)"));
    assert_eq!(
        found[1],
        format!(
            "{b_name}:6:15: a `workflow` call cycle: a.yaml → b.yaml → a.yaml (hint: a workflow cannot call itself, \
             directly or through others; use `loop` or `graph` to repeat)"
        )
    );

    // A file calling itself.
    let own = write(dir.path(), "own.yaml", "workflow: own\nsteps:\n  - id: again\n    workflow: own.yaml\n");
    let found = messages(&own);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].contains("4:15: a `workflow` call cycle: own.yaml → own.yaml"), "{}", found[0]);

    // The same file called twice, not in a cycle, is fine.
    write(dir.path(), "leaf.yaml", "workflow: leaf\nsteps:\n  - id: one\n    set: 1\n");
    let twice = write(
        dir.path(),
        "twice.yaml",
        "workflow: twice\nsteps:\n  - id: first\n    workflow: leaf.yaml\n  - id: second\n    workflow: leaf.yaml\n",
    );
    stepwright_flow::load(&twice).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn problems_in_a_called_file_are_reported_in_that_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "child.yaml", "workflow: child\nsteps:\n  - id: one\n    set: 1\n    colour: red\n");
    let parent = write(
        dir.path(),
        "parent.yaml",
        "workflow: parent\nsteps:\n  - id: call\n    workflow: child.yaml\n  - id: gone\n    workflow: nowhere.yaml\n  - id: odd\n    workflow: [a]\n    with: 1\n    extra: 2\n",
    );
    let found = messages(&parent);
    let p = parent.display().to_string();
    let c = dir.path().join("child.yaml").display().to_string();
    assert_eq!(found.len(), 5, "{found:#?}");
    assert_eq!(found[0], format!("{p}:4:15: the called workflow `child.yaml` does not load (1 problem listed below)"));
    assert!(
        found[1].starts_with(&format!("{p}:6:15: the called workflow `nowhere.yaml` cannot be read: ")),
        "{}",
        found[1]
    );
    assert!(found[1].ends_with("(hint: a `workflow` path is relative to the file that calls it)"), "{}", found[1]);
    assert_eq!(found[2], format!("{p}:8:15: `workflow` must be a string, not a list"));
    assert!(found[3].starts_with(&format!("{p}:10:5: unknown field `extra` in a step")), "{}", found[3]);
    assert!(found[4].starts_with(&format!("{c}:5:5: unknown field `colour` in a step")), "{}", found[4]);
}

#[test]
fn a_called_files_models_join_the_callers_and_must_agree() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "child.yaml",
        "workflow: child\nmodels:\n  fast: { provider: openai, model: gpt-4o-mini }\n  deep: { provider: anthropic, model: claude-opus }\nsteps:\n  - id: say\n    llm: { model: deep, prompt: hi }\n",
    );
    let agreeing = write(
        dir.path(),
        "agreeing.yaml",
        "workflow: agreeing\nmodels:\n  fast: { provider: openai, model: gpt-4o-mini }\nsteps:\n  - id: call\n    workflow: child.yaml\n",
    );
    let loaded = stepwright_flow::load(&agreeing).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.models.keys().collect::<Vec<_>>(), ["deep", "fast"]);

    let clashing = write(
        dir.path(),
        "clashing.yaml",
        "workflow: clashing\nmodels:\n  fast: { provider: openai, model: gpt-4o }\nsteps:\n  - id: call\n    workflow: child.yaml\n",
    );
    let found = messages(&clashing);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].ends_with(
        "6:15: model `fast` is declared differently here and in `child.yaml` (hint: give one of them another name)"
    ));
}

/// A workflow registered with its called files (over HTTP) loads them from the set given,
/// not from a disk: calls resolve relative to the calling file, may not climb above the
/// first one, and a missing one names the files there are.
#[tokio::test]
async fn called_files_can_come_from_a_given_set_instead_of_the_disk() {
    let files: std::collections::BTreeMap<String, String> = [
        (
            "parts/child.yaml".to_owned(),
            "workflow: child\nsteps:\n  - id: inner\n    workflow: ../leaf.yaml\n".to_owned(),
        ),
        ("leaf.yaml".to_owned(), "workflow: leaf\nsteps:\n  - id: shout\n    set: \"{{ input ~ '!' }}\"\n".to_owned()),
    ]
    .into();
    let options = stepwright_flow::LoadOptions { files: Some(Arc::new(files.clone())), ..Default::default() };
    let main = "workflow: main\nsteps:\n  - id: call\n    workflow: ./parts/child.yaml\n    with: \"{{ input }}\"\n";
    // No such directory exists: only the given set can satisfy the calls.
    let loaded = stepwright_flow::load_source_with(main, "nowhere/main.yaml", &options).expect("loads from the set");
    let engine = Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).build();
    let report = engine.start(&loaded.workflow, json!("hi")).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{report:?}");
    assert_eq!(report.output, Some(json!("hi!")));

    let problems = |source: &str, files: &std::collections::BTreeMap<String, String>| -> Vec<String> {
        let options = stepwright_flow::LoadOptions { files: Some(Arc::new(files.clone())), ..Default::default() };
        match stepwright_flow::load_source_with(source, "main.yaml", &options) {
            Ok(_) => panic!("{source} loads"),
            Err(error) => error.diagnostics.iter().map(ToString::to_string).collect(),
        }
    };
    let missing = problems("workflow: m\nsteps:\n  - id: c\n    workflow: other.yaml\n", &files);
    assert!(
        missing[0].contains("main.yaml:4:15")
            && missing[0].contains("`other.yaml`")
            && missing[0].contains("leaf.yaml, parts/child.yaml"),
        "{missing:?}"
    );
    let escaping = problems("workflow: m\nsteps:\n  - id: c\n    workflow: ../../etc/passwd\n", &files);
    assert!(escaping[0].contains("outside the files registered"), "{escaping:?}");
    let cyclic: std::collections::BTreeMap<String, String> =
        [("a.yaml".to_owned(), "workflow: a\nsteps:\n  - id: back\n    workflow: main.yaml\n".to_owned())].into();
    let cycle = problems("workflow: m\nsteps:\n  - id: c\n    workflow: a.yaml\n", &cyclic);
    assert!(cycle.iter().any(|p| p.contains("call cycle: main.yaml → a.yaml → main.yaml")), "{cycle:?}");
}
