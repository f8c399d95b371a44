//! A scripted HTTP/1.1 server on loopback that speaks what the providers speak: JSON
//! answers with a length, SSE answers in chunked encoding written piece by piece (so the
//! client sees them split where the test says), and connections dropped mid-stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a reply's body is sent.
#[derive(Clone)]
pub(crate) enum Body {
    /// A JSON document with `content-length`.
    Json(Value),
    /// SSE: these pieces, each written and flushed on its own; `complete: false` closes the
    /// connection without the final chunk (a drop mid-stream).
    Sse { pieces: Vec<Vec<u8>>, complete: bool },
}

/// One scripted reply.
#[derive(Clone)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Reply {
    pub(crate) fn json(status: u16, body: Value) -> Self {
        Self { status, headers: Vec::new(), body: Body::Json(body) }
    }

    /// An SSE stream cut into pieces of `piece` bytes (cuts land anywhere, inside UTF-8 too).
    pub(crate) fn sse(text: &str, piece: usize) -> Self {
        let pieces = text.as_bytes().chunks(piece).map(<[u8]>::to_vec).collect();
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: Body::Sse { pieces, complete: true },
        }
    }

    /// The stream is cut off after `bytes` bytes.
    pub(crate) fn dropped_after(mut self, bytes: usize) -> Self {
        if let Body::Sse { pieces, complete } = &mut self.body {
            let all: Vec<u8> = pieces.concat();
            *pieces = vec![all[..bytes.min(all.len())].to_vec()];
            *complete = false;
        }
        self
    }

    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub(crate) struct Captured {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

/// The server: replies in order, one per request; past the script, a 500 that says so.
pub(crate) struct FakeServer {
    pub url: String,
    captured: Arc<Mutex<Vec<Captured>>>,
}

impl FakeServer {
    pub(crate) async fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let captured = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(replies.into_iter()));
        {
            let captured = captured.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((socket, _)) = listener.accept().await else { return };
                    let captured = captured.clone();
                    let script = script.clone();
                    tokio::spawn(async move {
                        let _ = serve(socket, &captured, &script).await;
                    });
                }
            });
        }
        Self { url, captured }
    }

    pub(crate) fn requests(&self) -> Vec<Captured> {
        self.captured.lock().unwrap().clone()
    }
}

async fn serve(
    mut socket: TcpStream,
    captured: &Mutex<Vec<Captured>>,
    script: &Mutex<std::vec::IntoIter<Reply>>,
) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let method = request_line.split(' ').next().unwrap_or_default().to_owned();
    let path = request_line.split(' ').nth(1).unwrap_or_default().to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buffer.len() < head_end + length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buffer[head_end..]).unwrap_or(Value::Null);
    captured.lock().unwrap().push(Captured { method, path, headers, body });
    let reply = script.lock().unwrap().next().unwrap_or_else(|| {
        Reply::json(500, serde_json::json!({ "error": { "message": "the fake server has no more scripted replies" } }))
    });
    let mut head = format!("HTTP/1.1 {} Fake\r\nconnection: close\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match reply.body {
        Body::Json(value) => {
            let text = value.to_string();
            head.push_str(&format!("content-type: application/json\r\ncontent-length: {}\r\n\r\n", text.len()));
            socket.write_all(head.as_bytes()).await?;
            socket.write_all(text.as_bytes()).await?;
        }
        Body::Sse { pieces, complete } => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            socket.flush().await?;
            for piece in pieces {
                socket.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).await?;
                socket.write_all(&piece).await?;
                socket.write_all(b"\r\n").await?;
                socket.flush().await?;
                // Separate writes reach the client as separate reads.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            if complete {
                socket.write_all(b"0\r\n\r\n").await?;
            }
        }
    }
    socket.flush().await?;
    socket.shutdown().await
}

/// Adapter options for tests: short backoffs and timeouts.
pub(crate) fn fast_http() -> stepwright_llm::HttpOptions {
    stepwright_llm::HttpOptions {
        timeout: Duration::from_secs(5),
        max_retries: 2,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_secs(2),
        requests_per_minute: None,
    }
}

/// The paths a run completed, in journal order (steps and sub-steps).
pub(crate) fn completed_paths(store: &stepwright_core::InMemoryStore, run: stepwright_core::RunId) -> Vec<String> {
    store
        .entries(run)
        .iter()
        .filter(|e| matches!(e.record, stepwright_core::Record::Completed { .. }))
        .map(|e| e.path.as_str().to_owned())
        .collect()
}
