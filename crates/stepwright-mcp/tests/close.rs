//! Sessions are closed at exit: `close_all` ends every HTTP session this process opened with
//! the `DELETE` the streamable HTTP transport specifies. The server here is a loopback HTTP
//! server answering the MCP handshake by hand (initialize, the initialized notification, an
//! empty tool list), so the test sees exactly what the client sends.

use serde_json::{Value, json};
use stepwright_llm::Tools;
use stepwright_mcp::{McpServer, ServerConfig};
use stepwright_testkit::http::{FakeServer, Reply};

fn answer(request: &stepwright_testkit::http::Captured) -> Reply {
    let id = request.body["id"].clone();
    match (request.method.as_str(), request.body["method"].as_str()) {
        ("POST", Some("initialize")) => Reply::json(
            200,
            json!({ "jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": request.body["params"]["protocolVersion"],
                "capabilities": { "tools": {} },
                "serverInfo": { "name": "by-hand", "version": "1.0.0" } } }),
        )
        .header("mcp-session-id", "session-7"),
        ("POST", Some("tools/list")) => {
            Reply::json(200, json!({ "jsonrpc": "2.0", "id": id, "result": { "tools": [] } }))
        }
        ("POST", _) => Reply::json(202, Value::Null),
        // No stream of server-initiated messages (the spec's answer to that GET).
        ("GET", _) => Reply::json(405, Value::Null),
        _ => Reply::json(200, Value::Null),
    }
}

#[tokio::test]
async fn close_all_deletes_the_http_sessions_this_process_opened() {
    let server = FakeServer::responding(answer);
    let mut tools = Tools::new();
    // Held, as a workflow's tools hold their server.
    let _held =
        McpServer::register(ServerConfig::http("byhand", &format!("{}/mcp", server.url)), &mut tools).await.unwrap();
    let before: Vec<String> = server.requests().iter().map(|r| format!("{} {}", r.method, r.body["method"])).collect();
    assert!(!before.iter().any(|r| r.starts_with("DELETE")), "no DELETE before the end: {before:?}");
    stepwright_mcp::close_all().await;
    let deleted: Vec<_> = server.requests().into_iter().filter(|r| r.method == "DELETE").collect();
    assert_eq!(deleted.len(), 1, "one DELETE: {:?}", server.requests().iter().map(|r| &r.method).collect::<Vec<_>>());
    assert_eq!(deleted[0].path, "/mcp");
    assert_eq!(deleted[0].headers.get("mcp-session-id").map(String::as_str), Some("session-7"));

    // A server dropped with its session open (nothing holds its tools) is closed too.
    let dropped = FakeServer::responding(answer);
    drop(McpServer::register(ServerConfig::http("gone", &format!("{}/mcp", dropped.url)), &mut Tools::new()).await);
    stepwright_mcp::close_all().await;
    let deleted = dropped.requests().into_iter().filter(|r| r.method == "DELETE").count();
    assert_eq!(deleted, 1, "the dropped server's session was deleted before close_all returned");
}
