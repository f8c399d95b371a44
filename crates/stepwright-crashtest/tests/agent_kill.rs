//! An agent process is killed with SIGKILL right after its first tool result is committed,
//! while its second tool still runs; a new process resumes the run. Nothing that finished
//! is done again: the first model call is not repeated and the first tool does not run
//! again; only the unfinished tool (a read, safe to re-run) runs a second time.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepwright::RunId;
use support::completed_paths;

/// What each process did: (pid, "model N" | "tool NAME").
fn actions(log: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(pid, what)| (pid.to_owned(), what.to_owned())))
        .collect()
}

#[test]
fn killed_after_the_first_tool_result_the_resumed_agent_repeats_nothing_finished() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("agent.db");
    let log = dir.path().join("actions.log");
    let run: RunId = "01890000-0000-7000-8000-0000000a6e47".parse().unwrap();
    let worker = env!("CARGO_BIN_EXE_agent-worker");
    let args = |slow_ms: &str| {
        [db.to_str().unwrap().to_owned(), run.to_string(), log.to_str().unwrap().to_owned(), slow_ms.to_owned()]
    };

    let mut first = Command::new(worker).args(args("60000")).stdout(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !completed_paths(&db, run).contains("agent/turn.0/tool.0") {
        assert!(Instant::now() < deadline, "the first tool result was never committed");
        assert!(first.try_wait().unwrap().is_none(), "the worker exited early");
        std::thread::sleep(Duration::from_millis(5));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let done = completed_paths(&db, run);
    assert!(done.contains("agent/turn.0/model") && !done.contains("agent/turn.0/tool.1"), "{done:?}");

    let second = Command::new(worker).args(args("0")).output().unwrap();
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    let report: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(report["status"], json!("completed"), "{report}");
    assert_eq!(report["output"], json!("fast done | slow done"));

    let (killed, resumed) = (first.id().to_string(), second_pid(&log, &first.id().to_string()));
    let by = |pid: &str| -> Vec<String> {
        let mut did: Vec<String> = actions(&log).into_iter().filter(|(p, _)| p == pid).map(|(_, w)| w).collect();
        did.sort();
        did
    };
    assert_eq!(by(&killed), ["model 0", "tool fast", "tool slow"]);
    assert_eq!(by(&resumed), ["model 2", "tool slow"], "the resumed process made no call that had finished");
}

/// The pid of the process that is not `killed`.
fn second_pid(log: &Path, killed: &str) -> String {
    actions(log).into_iter().map(|(pid, _)| pid).find(|pid| pid != killed).expect("the second process acted")
}
