//! Fuzzing the loader: whatever the input, it returns a workflow or diagnostics with real
//! positions, and never panics. Mutates every corpus and example file, and tries YAML-like
//! noise. `STEPWRIGHT_FUZZ_CASES` sets the number of cases (default 2,000 each).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn seeds() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seeds: Vec<String> = [root.join("tests/corpus"), root.join("../../examples")]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    seeds.push(
        "workflow: ok\nsteps:\n  - id: a\n    set: \"{{ input.x }}\"\n  - id: b\n    branch:\n      - when: steps.a.output\n        steps: [{id: c, set: 1}]\n      - otherwise: [{id: d, sleep: 1s}]\n  - id: m\n    map: {items: \"{{ [1, 2] }}\", as: n, steps: [{id: e, set: \"{{ n }}\"}]}\n"
            .to_owned(),
    );
    seeds
}

fn cases() -> u32 {
    std::env::var("STEPWRIGHT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000)
}

fn check(source: &str) -> Result<(), TestCaseError> {
    match stepwright_flow::load_str(source, "fuzz.yaml") {
        Ok(_) => Ok(()),
        Err(error) => {
            prop_assert!(!error.diagnostics.is_empty(), "an error names at least one problem");
            for d in &error.diagnostics {
                prop_assert!(d.line >= 1 && d.column >= 1, "a diagnostic without a position: {d}");
                prop_assert!(!d.message.is_empty());
            }
            Ok(())
        }
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Insert(usize, String),
    Delete(usize, usize),
    Replace(usize, String),
}

fn edit() -> impl Strategy<Value = Edit> {
    let piece = prop_oneof![
        Just(":".to_owned()),
        Just("- ".to_owned()),
        Just("\n".to_owned()),
        Just("  ".to_owned()),
        Just("{{".to_owned()),
        Just("}}".to_owned()),
        Just("[".to_owned()),
        Just("]".to_owned()),
        Just("id: x".to_owned()),
        Just("steps:".to_owned()),
        Just("set: 1".to_owned()),
        Just("wait: { event: e, timeout: 1s }".to_owned()),
        Just("on_failure: fallback".to_owned()),
        Just("fallback:".to_owned()),
        Just("cache: true".to_owned()),
        Just("merge: \"{{ results }}\"".to_owned()),
        Just("spawn: ./x.yaml".to_owned()),
        Just("schema: { type: strnig }".to_owned()),
        Just("&a".to_owned()),
        Just("*a".to_owned()),
        Just("!!str ".to_owned()),
        Just("\"".to_owned()),
        "[a-z#{}\\[\\]:\\- ]{1,6}",
    ];
    prop_oneof![
        (any::<usize>(), piece.clone()).prop_map(|(at, s)| Edit::Insert(at, s)),
        (any::<usize>(), 1usize..8).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<usize>(), piece).prop_map(|(at, s)| Edit::Replace(at, s)),
    ]
}

fn apply(source: &str, edits: &[Edit]) -> String {
    let mut text: Vec<char> = source.chars().collect();
    for e in edits {
        let len = text.len().max(1);
        match e {
            Edit::Insert(at, s) => {
                let at = at % len;
                text.splice(at..at, s.chars());
            }
            Edit::Delete(at, n) => {
                let at = at % len;
                let end = (at + n).min(text.len());
                text.drain(at.min(end)..end);
            }
            Edit::Replace(at, s) => {
                let at = at % len;
                let end = (at + s.len()).min(text.len());
                text.splice(at.min(end)..end, s.chars());
            }
        }
    }
    text.into_iter().collect()
}

#[test]
fn mutated_files_never_panic_the_loader() {
    let seeds = seeds();
    let mut runner = TestRunner::new(Config { cases: cases(), ..Config::default() });
    runner
        .run(&(0..seeds.len(), prop::collection::vec(edit(), 1..6)), |(seed, edits)| {
            check(&apply(&seeds[seed], &edits))
        })
        .unwrap();
}

#[test]
fn yaml_like_noise_never_panics_the_loader() {
    let mut runner = TestRunner::new(Config { cases: cases(), ..Config::default() });
    runner.run(&"[a-z0-9 :\\-\\n\\[\\]{}\"'|>&*!#.]{0,200}", |text| check(&text)).unwrap();
}
