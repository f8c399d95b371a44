//! `run --tag`, `runs list --tag`, `runs show` and `experiments run --tag`, against a store
//! and against a server, with the same assertions.

use serde_json::Value;

use crate::cli::{GREET, write};
use crate::support::Target;

local_and_remote!(tags_are_given_to_a_run_found_by_and_drawn_by);

fn json_lines(output: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout).lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

fn tags_are_given_to_a_run_found_by_and_drawn_by(target: &Target) {
    let dir = target.dir();
    write(dir, "greet.yaml", GREET);
    let start = |name: &str, tags: &[&str]| {
        let input = format!(r#"{{"name": "{name}"}}"#);
        let mut args = vec!["run", "greet.yaml", "--input", &input, "--json"];
        for tag in tags {
            args.extend(["--tag", tag]);
        }
        let done = target.stepwright(&args);
        assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
        serde_json::from_slice::<Value>(&done.stdout).unwrap()["run_id"].as_str().unwrap().to_owned()
    };
    let vip = start("ann", &["vip", "env:prod"]);
    start("bo", &["env:prod-eu"]);
    start("cy", &[]);
    let older = start("di", &["batch"]);
    let newer = start("ed", &["batch"]);

    let listed = json_lines(&target.stepwright(&["runs", "list", "--json", "--tag", "vip"]));
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0]["run_id"].as_str(), &listed[0]["tags"]),
        (Some(vip.as_str()), &serde_json::json!(["vip", "env:prod"]))
    );
    let prod = json_lines(&target.stepwright(&["runs", "list", "--json", "--tag", "env:prod"]));
    assert_eq!(prod.len(), 1, "a whole tag, not a prefix: {prod:?}");
    let shown = target.stepwright(&["runs", "show", &vip]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.lines().any(|line| line == "  tags: vip, env:prod"), "{shown}");

    // A bad tag is a usage error before anything starts; so is a bad filter.
    for args in
        [&["run", "greet.yaml", "--input", r#"{"name": "x"}"#, "--tag", "no good"][..], &["runs", "list", "--tag", ""]]
    {
        let refused = target.stepwright(args);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("a tag"), "{args:?}: {stderr}");
    }
    assert_eq!(json_lines(&target.stepwright(&["runs", "list", "--json"])).len(), 5, "nothing more started");

    // A page of a filtered listing says how to get the next one with the same filters.
    let first = target.stepwright(&["runs", "list", "--tag", "batch", "--limit", "1", "--json"]);
    assert_eq!(json_lines(&first).iter().map(|r| r["run_id"].as_str().unwrap()).collect::<Vec<_>>(), [newer.as_str()]);
    let stderr = String::from_utf8_lossy(&first.stderr).into_owned();
    let next = stderr.lines().find_map(|line| line.strip_prefix("more runs: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert_eq!(next, format!("stepwright runs list --tag batch --json --before {newer} --limit 1"));
    let words = shlex::split(next).unwrap();
    let second = target.stepwright(&words[1..].iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(json_lines(&second).iter().map(|r| r["run_id"].as_str().unwrap()).collect::<Vec<_>>(), [older.as_str()]);
    assert!(!String::from_utf8_lossy(&second.stderr).contains("more runs"), "the last page");

    // An experiment over the runs with a tag recomputes those alone (experiments act on a
    // store: the CLI has no remote form of them).
    if target.is_remote() {
        return;
    }
    let tried = target.stepwright(&["experiments", "run", "--workflow", "greet", "--tag", "env:prod-eu", "--json"]);
    assert_eq!(tried.status.code(), Some(0), "{}", String::from_utf8_lossy(&tried.stderr));
    let report: Value = serde_json::from_slice(&tried.stdout).unwrap();
    assert_eq!(report["totals"]["runs"], 1, "{report}");
}
