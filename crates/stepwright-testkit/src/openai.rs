//! A fake OpenAI-compatible chat model: it answers each chat-completions request as a
//! function of the conversation it is sent, in the real wire format — a `chat.completion`
//! body, or `chat.completion.chunk` events ending in `[DONE]` when the request asks to
//! stream (with the usage chunk `stream_options.include_usage` asks for).

use std::time::Duration;

use serde_json::{Value, json};

use crate::http::{FakeServer, Reply};

/// What the model says to one request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A final answer in plain text.
    Text(String),
    /// Tool calls, as `(id, name, arguments)`.
    Calls(Vec<(String, String, Value)>),
}

/// The token counts the model reports.
#[derive(Debug, Clone, Copy)]
pub enum Tokens {
    /// About four characters a token, so usage and cost look like a real model's.
    Proportional,
    /// The same counts (input, output) for every call.
    Fixed(u64, u64),
}

/// Starts the model; `script` answers each request body. A streamed answer arrives one
/// event every `pace` (a chunked body, as a provider sends while the model generates).
pub fn chat_model(script: fn(&Value) -> Answer, tokens: Tokens, pace: Duration) -> FakeServer {
    FakeServer::responding(move |request| {
        assert!(
            request.method == "POST" && request.path == "/v1/chat/completions",
            "the fake model serves chat completions, not {} {}",
            request.method,
            request.path
        );
        reply_to(&request.body, &script(&request.body), tokens, pace)
    })
}

/// The reply a chat-completions `request` gets for `answer`.
pub fn reply_to(request: &Value, answer: &Answer, tokens: Tokens, pace: Duration) -> Reply {
    let usage = usage(request, answer, tokens);
    if request["stream"] == json!(true) {
        streamed(request, answer, usage, pace)
    } else {
        whole(request, answer, &usage)
    }
}

/// The text of every message of a role in a request, in order.
pub fn contents<'a>(request: &'a Value, role: &str) -> Vec<&'a str> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == role)
        .filter_map(|m| m["content"].as_str())
        .collect()
}

fn usage(request: &Value, answer: &Answer, tokens: Tokens) -> Value {
    if let Tokens::Fixed(input, output) = tokens {
        return json!({ "prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output });
    }
    let prompt: usize = request["messages"].to_string().len() + request["tools"].to_string().len();
    let completion = match answer {
        Answer::Text(text) => text.len(),
        Answer::Calls(calls) => calls.iter().map(|(_, name, args)| name.len() + args.to_string().len()).sum(),
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

fn whole(request: &Value, answer: &Answer, usage: &Value) -> Reply {
    let (message, finish) = match answer {
        Answer::Text(text) => (json!({ "role": "assistant", "content": text }), "stop"),
        Answer::Calls(calls) => {
            (json!({ "role": "assistant", "content": null, "tool_calls": tool_calls(calls) }), "tool_calls")
        }
    };
    Reply::json(
        200,
        json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": request["model"],
            "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
            "usage": usage,
        }),
    )
}

fn streamed(request: &Value, answer: &Answer, usage: Value, pace: Duration) -> Reply {
    let chunk = |choices: Value, usage: Value| {
        let mut chunk = json!({ "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": request["model"], "choices": choices });
        if !usage.is_null() {
            chunk["usage"] = usage;
        }
        format!("data: {chunk}\n\n")
    };
    let mut events = vec![chunk(json!([{ "index": 0, "delta": { "role": "assistant", "content": "" } }]), Value::Null)];
    let finish = match answer {
        Answer::Text(text) => {
            // A few words a chunk, as models send them.
            let words: Vec<&str> = text.split_inclusive(' ').collect();
            for piece in words.chunks(3) {
                let delta = json!({ "content": piece.concat() });
                events.push(chunk(json!([{ "index": 0, "delta": delta }]), Value::Null));
            }
            "stop"
        }
        Answer::Calls(calls) => {
            events.push(chunk(json!([{ "index": 0, "delta": { "tool_calls": tool_calls(calls) } }]), Value::Null));
            "tool_calls"
        }
    };
    events.push(chunk(json!([{ "index": 0, "delta": {}, "finish_reason": finish }]), Value::Null));
    events.push(chunk(json!([]), usage));
    events.push("data: [DONE]\n\n".to_owned());
    Reply::sse_pieces(events.into_iter().map(String::into_bytes).collect(), pace)
}
