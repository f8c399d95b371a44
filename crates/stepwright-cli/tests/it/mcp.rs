//! A workflow file's `mcp_servers` from the command line, against the official reference
//! server (`@modelcontextprotocol/server-everything` from npm; its `dist/index.js` path in
//! `STEPWRIGHT_TEST_MCP_EVERYTHING`, set by `.ci/run`): `validate` starts nothing, `run`
//! connects the server and calls its tools, and a use of a tool the server does not have is
//! reported at its position once the server says what it has.

use crate::support::stepwright;
use serde_json::{Value, json};

fn everything() -> Option<String> {
    let script = std::env::var("STEPWRIGHT_TEST_MCP_EVERYTHING").ok();
    if script.is_none() {
        #[allow(clippy::print_stderr)] // A skipped test says so.
        {
            eprintln!(
                "skipped: STEPWRIGHT_TEST_MCP_EVERYTHING is not set (the path of server-everything's dist/index.js)"
            );
        }
    }
    script
}

fn file(script: &str, tool: &str) -> String {
    format!(
        r#"
workflow: mcp-sum
input: {{ type: object, required: [a, b], properties: {{ a: {{ type: number }}, b: {{ type: number }} }} }}
mcp_servers:
  everything:
    command: node
    args: ["{script}", stdio]
    tools: [echo, get-sum, {tool}]
    effect: read
steps:
  - id: sum
    tool: everything.{tool}
    with: {{ a: "{{{{ input.a }}}}", b: "{{{{ input.b }}}}" }}
  - id: said
    tool: everything.echo
    with: {{ message: "{{{{ steps.sum.output }}}}" }}
output: "{{{{ steps.said.output }}}}"
"#
    )
}

#[test]
fn run_connects_the_files_mcp_servers_and_calls_their_tools() {
    let Some(script) = everything() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sum.yaml"), file(&script, "get-sum")).unwrap();

    let checked = stepwright(dir.path(), &["validate", "sum.yaml"]);
    assert_eq!(checked.status.code(), Some(0), "{}", String::from_utf8_lossy(&checked.stderr));

    let run = stepwright(dir.path(), &["run", "sum.yaml", "--input", r#"{"a": 2, "b": 40}"#, "--json"]);
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["status"], json!("completed"));
    assert_eq!(report["output"], json!("Echo: The sum of 2 and 40 is 42."));
}

#[test]
fn a_tool_the_server_does_not_have_is_reported_where_the_file_uses_it() {
    let Some(script) = everything() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sum.yaml"), file(&script, "teleport")).unwrap();
    // Loading cannot know what the server offers; `validate` starts no server.
    let checked = stepwright(dir.path(), &["validate", "sum.yaml"]);
    assert_eq!(checked.status.code(), Some(0), "{}", String::from_utf8_lossy(&checked.stderr));
    // `run` limits the server to the tools listed, so the server's own answer is that it
    // lacks `teleport`.
    let run = stepwright(dir.path(), &["run", "sum.yaml", "--input", r#"{"a": 1, "b": 2}"#]);
    assert_eq!(run.status.code(), Some(1), "{}", String::from_utf8_lossy(&run.stderr));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("starting MCP server \"everything\""), "{stderr}");
    assert!(stderr.contains("teleport"), "{stderr}");

    // Without a `tools` limit, the use itself is reported at its position.
    let open = file(&script, "teleport").replace("    tools: [echo, get-sum, teleport]\n", "");
    std::fs::write(dir.path().join("open.yaml"), open).unwrap();
    let run = stepwright(dir.path(), &["run", "open.yaml", "--input", r#"{"a": 1, "b": 2}"#]);
    assert_eq!(run.status.code(), Some(2), "{}", String::from_utf8_lossy(&run.stderr));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("open.yaml:11:11: MCP server `everything` has no tool `teleport` (hint: it has: "),
        "{stderr}"
    );
    assert!(stderr.contains("get-sum"), "{stderr}");
}
