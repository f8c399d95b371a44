//! What an exposed server does with hostile connections, over raw sockets: a client that
//! sends its headers too slowly (slowloris) or sits idle is disconnected at the header
//! deadline; one address holds at most its cap of connections; a body over the limit is
//! `413` whether its length is declared or chunked.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::TestServer;

fn limits(header_secs: u64, per_ip: usize) -> stepwright_server::ConnectionLimits {
    stepwright_server::ConnectionLimits { header_read_timeout: Duration::from_secs(header_secs), per_ip }
}

async fn connect(server: &TestServer) -> TcpStream {
    TcpStream::connect(server.base.trim_start_matches("http://")).await.unwrap()
}

/// Reads until the server closes the connection (or `within` passes): what it sent, and
/// whether it closed.
async fn read_to_close(stream: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_headers_and_idle_connections_are_closed_at_the_deadline() {
    let server = TestServer::start_with(|config| config.connections = limits(1, 0)).await;
    // Slowloris: a request line and one header, then a byte now and then, never the end.
    let mut slow = connect(&server).await;
    let began = Instant::now();
    slow.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let dripping = async {
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if slow.write_all(b"X").await.is_err() {
                break;
            }
        }
    };
    dripping.await;
    let (_, closed) = read_to_close(&mut slow, Duration::from_secs(5)).await;
    assert!(closed, "a client dripping its headers is disconnected");
    assert!(began.elapsed() < Duration::from_secs(9), "at the deadline, not when it gives up");

    // A kept-alive connection answered once, then idle: closed at the deadline too.
    let mut idle = connect(&server).await;
    idle.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let (answer, closed) = read_to_close(&mut idle, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(closed, "an idle kept-alive connection is closed");
    // A prompt client is served as before.
    assert_eq!(server.http.get(format!("{}/v1/health", server.base)).send().await.unwrap().status(), 200);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_address_holds_at_most_its_cap_of_connections() {
    let server = TestServer::start_with(|config| config.connections = limits(30, 3)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect(&server).await);
    }
    // The fourth is accepted by the kernel and closed by the server at once.
    let mut over = connect(&server).await;
    let _ = over.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let (answer, closed) = read_to_close(&mut over, Duration::from_secs(5)).await;
    assert!(closed && answer.is_empty(), "over the cap: {answer:?}");
    // One closed frees its slot.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = connect(&server).await;
    again.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let (answer, _) = read_to_close(&mut again, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_over_the_limit_is_413_declared_or_chunked() {
    let server = TestServer::start_with(|config| config.limits.max_body_bytes = 1_000).await;
    let key = server.key("acme", "ann", &["admin", "operator"]).await;
    let big = json!({ "source": "a".repeat(5_000) }).to_string();
    for path in ["/v1/workflows", "/v1/runs", "/v1/events", "/v1/webhooks"] {
        let declared = server
            .http
            .post(format!("{}{path}", server.base))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(declared.status(), 413, "{path}, with a length");
        // The connection is not reused: the server says it closes it.
        assert_eq!(declared.headers().get("connection").map(|v| v.as_bytes()), Some(&b"close"[..]), "{path}");
        // A streamed body has no Content-Length: it goes chunked.
        let chunks = futures_util::stream::iter(
            big.as_bytes().chunks(700).map(|c| Ok::<_, std::io::Error>(c.to_vec())).collect::<Vec<_>>(),
        );
        let chunked = server
            .http
            .post(format!("{}{path}", server.base))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(chunks))
            .send()
            .await
            .unwrap();
        assert_eq!(chunked.status(), 413, "{path}, chunked");
        let problem: serde_json::Value = chunked.json().await.unwrap();
        assert_eq!(problem["code"], "too_large", "{problem}");
    }
    server.shutdown().await;
}
