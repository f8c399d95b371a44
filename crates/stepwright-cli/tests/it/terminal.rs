//! What `run` shows while it works: the live view on a terminal (driven here through a
//! pseudo-terminal from util-linux `script`), plain lines anywhere else.

use std::process::Command;
use std::time::Duration;

use crate::support::{Answer, Tokens, stepwright};
use serde_json::Value;

/// The words the model streams. The workflow's output is not this text, so on the
/// terminal it can only have come from the live view.
const STREAMED: &str = "Durable workflows survive crashes and wait days for people to decide";

fn answer(_request: &Value) -> Answer {
    Answer::Text(STREAMED.into())
}

fn workflow(port: u16) -> String {
    format!(
        r#"
workflow: live
models:
  fast:
    provider: openai
    model: gpt-test
    base_url: "http://127.0.0.1:{port}/v1"
    api_key_env: STEPWRIGHT_TEST_FAKE_KEY
    pricing: {{ input: 2, output: 8 }}
steps:
  - id: write
    llm: {{ model: fast, prompt: "Write about {{{{ input }}}}" }}
  - id: tidy
    set: "{{{{ steps.write.output | length }}}}"
output: finished
"#
    )
}

/// Wraps an argument for `sh -c`.
fn quoted(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

#[test]
fn a_terminal_gets_the_live_view_and_a_pipe_gets_plain_lines() {
    if Command::new("script").arg("--version").output().is_err() {
        #[allow(clippy::print_stderr)] // A skipped test says so.
        {
            eprintln!("skipped: util-linux `script` is not installed, so no pseudo-terminal can be made");
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // One event every 120 ms: the step runs for about a second, long enough to be drawn.
    let (port, _) = crate::support::fake_openai_paced(answer, Tokens::Fixed(30, 9), Duration::from_millis(120));
    std::fs::write(dir.path().join("live.yaml"), workflow(port)).unwrap();

    let command =
        [env!("CARGO_BIN_EXE_stepwright"), "run", "live.yaml", "--input", "\"engines\""].map(quoted).join(" ");
    let on_terminal = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .current_dir(dir.path())
        .env_remove("STEPWRIGHT_DB")
        .env_remove("OPENAI_API_KEY")
        .env("STEPWRIGHT_TEST_FAKE_KEY", "sk-test")
        .env("TERM", "xterm-256color")
        .env("COLUMNS", "120")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&on_terminal.stdout);
    assert_eq!(on_terminal.status.code(), Some(0), "{screen}");
    // A live row: the running step with its spinner line, redrawn with escape sequences.
    assert!(screen.contains("write") && screen.contains("running"), "{screen}");
    assert!(screen.contains('\u{1b}'), "the live view redraws: {screen}");
    // The streamed text under the running step, as it arrived (the output is not it).
    assert!(screen.contains("Durable workflows survive"), "{screen}");
    // The closing line stays: how the step ended, its tokens and its cost.
    let closing = screen
        .lines()
        .find(|l| l.contains("✓ completed  write"))
        .unwrap_or_else(|| panic!("no closing line for `write`: {screen}"));
    assert!(closing.contains("39 tokens  $0.0001"), "{closing}");
    assert!(screen.contains("✓ completed  tidy"), "{screen}");
    assert!(screen.contains("\"finished\""), "the output follows: {screen}");

    // Off a terminal: one plain line per step, no escape sequences, no live rows.
    let piped = stepwright(dir.path(), &["run", "live.yaml", "--input", "\"engines\""]);
    assert_eq!(piped.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(!stderr.contains('\u{1b}') && !stderr.contains("running"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(lines[0].starts_with("completed  write") && lines[0].ends_with("  39 tokens  $0.0001"), "{stderr}");
    assert!(lines[1].starts_with("completed  tidy"), "{stderr}");
    assert!(lines[2].starts_with("run ") && lines[2].ends_with(" completed"), "its run id, last: {stderr}");
    assert!(!stderr.contains("Durable"), "streamed text is for terminals only: {stderr}");
}
