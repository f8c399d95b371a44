//! What the binary's tests share: running `stepwright`, and a fake OpenAI-compatible chat
//! completions server on loopback speaking the real wire format — a JSON body, or
//! server-sent `chat.completion.chunk` events ending in `[DONE]` when the request asks to
//! stream (with the usage chunk `stream_options.include_usage` asks for).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

/// Runs the binary in `dir` with no store or provider key from the environment (only the
/// fake key the tests' model files name).
pub(crate) fn stepwright(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stepwright"))
        .current_dir(dir)
        .env_remove("STEPWRIGHT_DB")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env("STEPWRIGHT_TEST_FAKE_KEY", "sk-test")
        .args(args)
        .output()
        .expect("run stepwright")
}

/// What the model says to one request: text, or tool calls as `(id, name, arguments)`.
pub(crate) enum Reply {
    /// An answer.
    Text(String),
    /// Tool calls.
    Calls(Vec<(String, String, Value)>),
}

/// The text of every message of a role, in order.
pub(crate) fn contents<'a>(request: &'a Value, role: &str) -> Vec<&'a str> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == role)
        .filter_map(|m| m["content"].as_str())
        .collect()
}

/// The token counts the server reports.
#[derive(Clone, Copy)]
pub(crate) enum Tokens {
    /// About four characters a token, so usage and cost look like a real model's.
    Proportional,
    /// The same counts (input, output) for every call.
    Fixed(u64, u64),
}

/// Starts the server; `script` answers each request body. Returns the port and a count of
/// requests served.
pub(crate) fn fake_openai(script: fn(&Value) -> Reply, tokens: Tokens) -> (u16, Arc<AtomicUsize>) {
    fake_openai_paced(script, tokens, std::time::Duration::ZERO)
}

/// As [`fake_openai`], but a streamed answer arrives one event every `pace` (a chunked
/// body, as a provider sends while the model generates) instead of all at once.
pub(crate) fn fake_openai_paced(
    script: fn(&Value) -> Reply,
    tokens: Tokens,
    pace: std::time::Duration,
) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let count = count.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0;
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        if header.trim().is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    assert!(line.starts_with("POST /v1/chat/completions"), "{line}");
                    let request: Value = serde_json::from_slice(&body).unwrap();
                    let reply = script(&request);
                    count.fetch_add(1, Ordering::SeqCst);
                    let streamed = request["stream"] == json!(true);
                    let usage = usage(&request, &reply, tokens);
                    let written = if streamed {
                        respond_streamed(&mut writer, &request, &reply, usage, pace)
                    } else {
                        respond_whole(&mut writer, &request, &reply, &usage)
                    };
                    if written.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, served)
}

fn usage(request: &Value, reply: &Reply, tokens: Tokens) -> Value {
    if let Tokens::Fixed(input, output) = tokens {
        return json!({ "prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output });
    }
    let prompt: usize = request["messages"].to_string().len() + request["tools"].to_string().len();
    let completion = match reply {
        Reply::Text(text) => text.len(),
        Reply::Calls(calls) => calls.iter().map(|(_, name, args)| name.len() + args.to_string().len()).sum(),
    };
    let (input, output) = (prompt.div_ceil(4), completion.div_ceil(4).max(1));
    json!({ "prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output })
}

fn tool_calls(calls: &[(String, String, Value)]) -> Value {
    calls
        .iter()
        .enumerate()
        .map(|(index, (id, name, args))| {
            json!({ "index": index, "id": id, "type": "function", "function": { "name": name, "arguments": args.to_string() } })
        })
        .collect()
}

fn respond_whole(writer: &mut impl Write, request: &Value, reply: &Reply, usage: &Value) -> std::io::Result<()> {
    let (message, finish) = match reply {
        Reply::Text(text) => (json!({ "role": "assistant", "content": text }), "stop"),
        Reply::Calls(calls) => {
            (json!({ "role": "assistant", "content": null, "tool_calls": tool_calls(calls) }), "tool_calls")
        }
    };
    let body = json!({
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": request["model"],
        "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
        "usage": usage,
    })
    .to_string();
    write!(writer, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())
}

fn respond_streamed(
    writer: &mut impl Write,
    request: &Value,
    reply: &Reply,
    usage: Value,
    pace: std::time::Duration,
) -> std::io::Result<()> {
    let chunk = |choices: Value, usage: Value| {
        let mut chunk = json!({ "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": request["model"], "choices": choices });
        if !usage.is_null() {
            chunk["usage"] = usage;
        }
        format!("data: {chunk}\n\n")
    };
    let mut events = vec![chunk(json!([{ "index": 0, "delta": { "role": "assistant", "content": "" } }]), Value::Null)];
    let finish = match reply {
        Reply::Text(text) => {
            // A few words a chunk, as models send them.
            let words: Vec<&str> = text.split_inclusive(' ').collect();
            for piece in words.chunks(3) {
                let delta = json!({ "content": piece.concat() });
                events.push(chunk(json!([{ "index": 0, "delta": delta }]), Value::Null));
            }
            "stop"
        }
        Reply::Calls(calls) => {
            events.push(chunk(json!([{ "index": 0, "delta": { "tool_calls": tool_calls(calls) } }]), Value::Null));
            "tool_calls"
        }
    };
    events.push(chunk(json!([{ "index": 0, "delta": {}, "finish_reason": finish }]), Value::Null));
    events.push(chunk(json!([]), usage));
    events.push("data: [DONE]\n\n".to_owned());
    if !pace.is_zero() {
        write!(
            writer,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )?;
        for event in events {
            std::thread::sleep(pace);
            write!(writer, "{:x}\r\n{event}\r\n", event.len())?;
            writer.flush()?;
        }
        return write!(writer, "0\r\n\r\n");
    }
    let body = events.concat();
    write!(
        writer,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}
