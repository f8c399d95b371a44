//! Flags and the environment: a flag is taken only by the commands that act on it (and
//! shown only in their help), and a server named in the environment is never silently
//! ignored.

use crate::cli::{GREET, write};
use crate::support::stepwright;

/// A flag the command would not act on is refused with a clear error (exit 2), wherever on
/// the line it is given; the commands that act on it take it.
#[test]
fn flags_are_taken_only_by_the_commands_they_act_on() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "greet.yaml", GREET);
    for (args, says) in [
        (&["--db", "sqlite://x.db", "validate", "greet.yaml"][..], "`validate` does not take --db: it opens no store"),
        (&["graph", "greet.yaml", "--model", "fast=openai:gpt-4o"][..], "`graph` does not take --model"),
        (&["schema", "--cassette", "c.jsonl"][..], "`schema` does not take --cassette"),
        (&["runs", "list", "--cassette-mode", "replay"][..], "`runs` does not take --cassette-mode"),
        (&["--server", "http://127.0.0.1:9", "worker", "--once"][..], "`worker` does not take --server"),
        (
            &["cancel", "01a20eed-6750-77e6-926f-c4215cacbf0d", "--allow-dir", "."][..],
            "`cancel` does not take --allow-dir",
        ),
        (
            &["replay", "01a20eed-6750-77e6-926f-c4215cacbf0d", "--durability", "async"][..],
            "`replay` does not take --durability",
        ),
        (&["run", "greet.yaml", "--async-window", "1s"][..], "--async-window is how long `--durability async` batches"),
    ] {
        let output = stepwright(dir.path(), args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    assert!(!dir.path().join("x.db").exists(), "nothing was opened");
    let validated = stepwright(dir.path(), &["validate", "greet.yaml", "--allow-dir", "."]);
    assert_eq!(validated.status.code(), Some(0), "{}", String::from_utf8_lossy(&validated.stderr));
    let ran = stepwright(
        dir.path(),
        &["run", "greet.yaml", "--input", r#"{"name": "x"}"#, "--db", "sqlite://y.db", "--cassette-mode", "auto"],
    );
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    assert!(dir.path().join("y.db").exists(), "run takes --db after the command too");
    // Help shows a flag only where it acts: `runs list` lists no model or durability flags,
    // `run` does; `validate` no --db; `help CMD` is `CMD --help`.
    let help = |args: &[&str]| String::from_utf8_lossy(&stepwright(dir.path(), args).stdout).into_owned();
    for args in [&["runs", "list", "--help"][..], &["help", "runs", "list"], &["runs", "list", "-h"]] {
        let text = help(args);
        assert!(text.contains("--started-by"), "{args:?}: {text}");
        for idle in ["--model", "--cassette", "--durability", "--async-window", "--allow-dir"] {
            assert!(!text.contains(idle), "{args:?} shows {idle}: {text}");
        }
    }
    let run = help(&["run", "--help"]);
    assert!(["--model", "--cassette", "--durability", "--db", "--server"].iter().all(|f| run.contains(f)), "{run}");
    assert!(!help(&["validate", "--help"]).contains("--db"));
}

/// `STEPWRIGHT_SERVER` set is not silently ignored: `keys` and `experiments` (which act on a store) refuse
/// without a store named and creates no `./stepwright.db`; `schedules` and `triggers` call
/// the server; with a store named (`--db`), each acts on it.
#[test]
fn a_server_in_the_environment_is_not_ignored_by_store_commands() {
    let dir = tempfile::tempdir().unwrap();
    let with_server = |args: &[&str]| {
        crate::support::command(dir.path(), args).env("STEPWRIGHT_SERVER", "http://127.0.0.1:9").output().unwrap()
    };
    for args in [&["keys", "list"][..], &["experiments", "run", "e.yaml"]] {
        let refused = with_server(args);
        assert_eq!(refused.status.code(), Some(2));
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("acts on a store, not on a server, and STEPWRIGHT_SERVER is set"), "{args:?}: {said}");
    }
    for args in [&["schedules", "list"][..], &["triggers", "list"]] {
        let called = with_server(args);
        let said = String::from_utf8_lossy(&called.stderr);
        assert!(said.contains("--server needs an API key in STEPWRIGHT_API_KEY"), "{args:?} calls the server: {said}");
    }
    assert!(!dir.path().join("stepwright.db").exists(), "no store was made");
    for args in [&["keys", "list"][..], &["schedules", "list"], &["triggers", "list"]] {
        let named = with_server(&[&["--db", "sqlite://named.db"][..], args].concat());
        assert_eq!(named.status.code(), Some(0), "{args:?}: {}", String::from_utf8_lossy(&named.stderr));
    }
}
