//! A fake provider server on loopback, on plain threads (so sync tests and tokio tests use
//! it alike): it reads real HTTP/1.1 requests and writes real responses — JSON with a
//! length, or server-sent events in chunked encoding written piece by piece (so the client
//! sees them split where the test says), and connections dropped mid-stream.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// How a reply's body is sent.
#[derive(Debug, Clone)]
pub enum Body {
    /// A JSON document with `content-length`.
    Json(Value),
    /// Bytes of a content type, with `content-length`.
    Bytes {
        /// The `content-type`.
        content_type: String,
        /// The body.
        bytes: Vec<u8>,
    },
    /// SSE in chunked encoding: these pieces, each written and flushed on its own, `pace`
    /// apart; `complete: false` closes the connection without the final chunk (a drop
    /// mid-stream).
    Sse {
        /// The bytes of the stream, cut where the client should see cuts.
        pieces: Vec<Vec<u8>>,
        /// Whether the stream ends properly.
        complete: bool,
        /// The pause before each piece (a model generating).
        pace: Duration,
    },
}

/// One reply.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// Extra response headers.
    pub headers: Vec<(String, String)>,
    /// The body, and how it is written (whole, or streamed in pieces).
    pub body: Body,
}

impl Reply {
    /// A JSON reply.
    pub fn json(status: u16, body: Value) -> Self {
        Self { status, headers: Vec::new(), body: Body::Json(body) }
    }

    /// A reply of bytes of a content type (a protobuf message).
    pub fn bytes(status: u16, content_type: &str, bytes: Vec<u8>) -> Self {
        Self { status, headers: Vec::new(), body: Body::Bytes { content_type: content_type.to_owned(), bytes } }
    }

    /// An SSE stream cut into pieces of `piece` bytes (cuts land anywhere, inside UTF-8 too),
    /// 2 ms apart so that separate writes reach the client as separate reads.
    pub fn sse(text: &str, piece: usize) -> Self {
        let pieces = text.as_bytes().chunks(piece).map(<[u8]>::to_vec).collect();
        Self::sse_pieces(pieces, Duration::from_millis(2))
    }

    /// An SSE stream of these pieces, `pace` apart.
    pub fn sse_pieces(pieces: Vec<Vec<u8>>, pace: Duration) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: Body::Sse { pieces, complete: true, pace },
        }
    }

    /// The stream is cut off after `bytes` bytes.
    #[must_use]
    pub fn dropped_after(mut self, bytes: usize) -> Self {
        if let Body::Sse { pieces, complete, .. } = &mut self.body {
            let all: Vec<u8> = pieces.concat();
            *pieces = vec![all[..bytes.min(all.len())].to_vec()];
            *complete = false;
        }
        self
    }

    /// Adds a response header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub struct Captured {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The request target (`/v1/chat/completions`).
    pub path: String,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    /// The body as JSON (`null` when it is not JSON).
    pub body: Value,
    /// The body's bytes.
    pub raw: Vec<u8>,
    /// When it was read in full.
    pub received_at: std::time::Instant,
}

type Responder = dyn Fn(&Captured) -> Reply + Send + Sync;

/// The server. It lives until the test process ends.
pub struct FakeServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The port it listens on.
    pub port: u16,
    captured: Arc<Mutex<Vec<Captured>>>,
}

impl FakeServer {
    /// Replies in order, one per request, each on a connection of its own; past the
    /// script, a 500 that says so.
    pub fn scripted(replies: Vec<Reply>) -> Self {
        let script = Mutex::new(replies.into_iter());
        Self::start(false, move |_| {
            script.lock().expect("poisoned").next().unwrap_or_else(|| {
                Reply::json(500, json!({ "error": { "message": "the fake server has no more scripted replies" } }))
            })
        })
    }

    /// Answers each request with `respond`, keeping connections alive as clients expect.
    pub fn responding(respond: impl Fn(&Captured) -> Reply + Send + Sync + 'static) -> Self {
        Self::start(true, respond)
    }

    fn start(keep_alive: bool, respond: impl Fn(&Captured) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("an address").port();
        let captured = Arc::new(Mutex::new(Vec::new()));
        let respond: Arc<Responder> = Arc::new(respond);
        {
            let captured = captured.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { continue };
                    let (captured, respond) = (captured.clone(), respond.clone());
                    std::thread::spawn(move || {
                        let _ = serve(stream, keep_alive, &captured, respond.as_ref());
                    });
                }
            });
        }
        Self { url: format!("http://127.0.0.1:{port}"), port, captured }
    }

    /// Every request so far, in the order they arrived.
    pub fn requests(&self) -> Vec<Captured> {
        self.captured.lock().expect("poisoned").clone()
    }

    /// How many requests it has answered.
    pub fn served(&self) -> usize {
        self.captured.lock().expect("poisoned").len()
    }
}

/// Serves one connection: one request, or (keep-alive) requests until the client closes.
fn serve(
    stream: TcpStream,
    keep_alive: bool,
    captured: &Mutex<Vec<Captured>>,
    respond: &Responder,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line)?;
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        let mut words = request_line.split_whitespace();
        let request = Captured {
            method: words.next().unwrap_or_default().to_owned(),
            path: words.next().unwrap_or_default().to_owned(),
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            raw: body,
            received_at: std::time::Instant::now(),
        };
        captured.lock().expect("poisoned").push(request.clone());
        let reply = respond(&request);
        let open = write_reply(&mut writer, reply, keep_alive)?;
        if !open {
            return Ok(());
        }
    }
}

/// Writes a reply; whether the connection stays open for another request.
fn write_reply(writer: &mut TcpStream, reply: Reply, keep_alive: bool) -> std::io::Result<bool> {
    let mut head = format!("HTTP/1.1 {} Fake\r\n", reply.status);
    if !keep_alive {
        head.push_str("connection: close\r\n");
    }
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match reply.body {
        Body::Json(value) => {
            let text = value.to_string();
            head.push_str(&format!("content-type: application/json\r\ncontent-length: {}\r\n\r\n", text.len()));
            writer.write_all(head.as_bytes())?;
            writer.write_all(text.as_bytes())?;
            writer.flush()?;
            Ok(keep_alive)
        }
        Body::Bytes { content_type, bytes } => {
            head.push_str(&format!("content-type: {content_type}\r\ncontent-length: {}\r\n\r\n", bytes.len()));
            writer.write_all(head.as_bytes())?;
            writer.write_all(&bytes)?;
            writer.flush()?;
            Ok(keep_alive)
        }
        Body::Sse { pieces, complete, pace } => {
            head.push_str("cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n");
            writer.write_all(head.as_bytes())?;
            writer.flush()?;
            for piece in pieces {
                if !pace.is_zero() {
                    std::thread::sleep(pace);
                }
                writer.write_all(format!("{:x}\r\n", piece.len()).as_bytes())?;
                writer.write_all(&piece)?;
                writer.write_all(b"\r\n")?;
                writer.flush()?;
            }
            if !complete {
                writer.shutdown(std::net::Shutdown::Both)?;
                return Ok(false);
            }
            writer.write_all(b"0\r\n\r\n")?;
            writer.flush()?;
            Ok(keep_alive)
        }
    }
}
