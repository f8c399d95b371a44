//! The OpenAI-compatible adapter against a loopback server speaking chat completions.

use std::sync::{Arc, Mutex};

use crate::support::fast_http;
use serde_json::{Value, json};
use stepwright_llm::{
    ChatModel, ChatRequest, FinishReason, Message, ModelErrorKind, ModelParams, OpenAi, OutputFormat, RateLimits,
    ToolCall, ToolChoice, ToolSpec, Usage,
};
use stepwright_testkit::http::{FakeServer, Reply};

fn adapter(server: &FakeServer) -> OpenAi {
    OpenAi::new(&format!("{}/v1", server.url), Some("sk-test".into()), fast_http(), &RateLimits::default()).unwrap()
}

fn lookup_tool() -> ToolSpec {
    ToolSpec {
        name: "lookup_order".into(),
        description: "Look up an order".into(),
        parameters: json!({ "type": "object", "required": ["order_id"], "properties": { "order_id": { "type": "string" } } }),
    }
}

fn request() -> ChatRequest {
    let mut request = ChatRequest::new(
        "gpt-4o-mini",
        vec![
            Message::system("You resolve tickets."),
            Message::user("Where is order 42?"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_0".into(),
                    name: "lookup_order".into(),
                    arguments: json!({ "order_id": "41" }),
                }],
            },
            Message::Tool { call_id: "call_0".into(), content: "{\"status\":\"lost\"}".into(), is_error: false },
        ],
    );
    request.tools = vec![lookup_tool()];
    request.tool_choice = Some(ToolChoice::Auto);
    request.params =
        ModelParams { temperature: Some(0.0), top_p: Some(0.5), max_tokens: Some(300), stop: vec!["END".into()] };
    request
}

#[tokio::test]
async fn a_plain_call_sends_the_wire_format_and_reads_parallel_tool_calls() {
    let server = FakeServer::scripted(vec![Reply::json(
        200,
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",
            "choices": [{ "index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [
                    { "id": "call_a", "type": "function", "function": { "name": "lookup_order", "arguments": "{\"order_id\":\"42\"}" } },
                    { "id": "call_b", "type": "function", "function": { "name": "lookup_order", "arguments": "{\"order_id\":" } }
                ]
            }}],
            "usage": { "prompt_tokens": 61, "completion_tokens": 24, "total_tokens": 85 }
        }),
    )]);
    let response = adapter(&server).chat(&request()).await.unwrap();
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage, Usage { input_tokens: 61, output_tokens: 24, ..Default::default() });
    assert_eq!(response.model, "gpt-4o-mini-2024-07-18");
    assert_eq!(response.tool_calls[0].arguments, json!({ "order_id": "42" }));
    assert_eq!(response.tool_calls[1].arguments, json!("{\"order_id\":"), "arguments that are not JSON stay text");

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], "Bearer sk-test");
    assert_eq!(sent.headers["user-agent"], stepwright_llm::USER_AGENT, "the program says who it is");
    assert!(stepwright_llm::USER_AGENT.starts_with("stepwright/0."), "{}", stepwright_llm::USER_AGENT);
    assert_eq!(
        sent.body,
        json!({
            "model": "gpt-4o-mini",
            "messages": [
                { "role": "system", "content": "You resolve tickets." },
                { "role": "user", "content": "Where is order 42?" },
                { "role": "assistant", "content": null, "tool_calls": [
                    { "id": "call_0", "type": "function", "function": { "name": "lookup_order", "arguments": "{\"order_id\":\"41\"}" } }
                ]},
                { "role": "tool", "tool_call_id": "call_0", "content": "{\"status\":\"lost\"}" }
            ],
            "tools": [{ "type": "function", "function": {
                "name": "lookup_order", "description": "Look up an order",
                "parameters": { "type": "object", "required": ["order_id"], "properties": { "order_id": { "type": "string" } } }
            }}],
            "tool_choice": "auto",
            "temperature": 0.0, "top_p": 0.5, "max_tokens": 300, "stop": ["END"]
        })
    );
}

#[tokio::test]
async fn structured_output_is_sent_as_a_strict_json_schema() {
    let server = FakeServer::scripted(vec![Reply::json(
        200,
        json!({ "model": "m", "choices": [{ "finish_reason": "stop", "message": { "role": "assistant", "content": "{\"category\":\"bug\",\"reason\":null}" } }] }),
    )]);
    let mut request = ChatRequest::new("m", vec![Message::user("Classify: it crashes")]);
    request.output = Some(OutputFormat {
        name: "answer".into(),
        schema: json!({ "type": "object", "required": ["category"], "properties": { "category": { "enum": ["billing", "bug"] }, "reason": { "type": "string" } } }),
    });
    let response = adapter(&server).chat(&request).await.unwrap();
    assert_eq!(response.content, "{\"category\":\"bug\",\"reason\":null}");
    assert_eq!(
        server.requests()[0].body["response_format"],
        json!({ "type": "json_schema", "json_schema": { "name": "answer", "strict": true, "schema": {
            "type": "object", "additionalProperties": false, "required": ["category", "reason"],
            "properties": { "category": { "enum": ["billing", "bug"] }, "reason": { "type": ["string", "null"] } }
        }}})
    );
}

/// A real-looking stream: role chunk, text with a multi-byte character, a keep-alive
/// comment, two tool calls whose arguments arrive in fragments, the finish chunk, the usage
/// chunk (`choices: []`) and `[DONE]`.
fn stream_text() -> String {
    let chunks = [
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "role": "assistant", "content": "" }, "finish_reason": null }] }),
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "content": "Checking — " }, "finish_reason": null }] }),
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "content": "one moment 😀" }, "finish_reason": null }] }),
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "tool_calls": [{ "index": 0, "id": "call_a", "type": "function", "function": { "name": "lookup_order", "arguments": "" } }] } }] }),
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "tool_calls": [{ "index": 0, "function": { "arguments": "{\"order_" } }] } }] }),
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "tool_calls": [{ "index": 1, "id": "call_b", "type": "function", "function": { "name": "lookup_order", "arguments": "{\"order_id\": \"7\"}" } }] } }] }),
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "tool_calls": [{ "index": 0, "function": { "arguments": "id\": \"42\"}" } }] } }] }),
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
        json!({ "model": "gpt-4o-mini", "choices": [], "usage": { "prompt_tokens": 50, "completion_tokens": 31, "total_tokens": 81 } }),
    ];
    let mut text = String::new();
    for (i, chunk) in chunks.iter().enumerate() {
        text.push_str(&format!("data: {chunk}\n\n"));
        if i == 2 {
            text.push_str(": keep-alive\n\n");
        }
    }
    text.push_str("data: [DONE]\n\n");
    text
}

#[tokio::test]
async fn a_stream_split_at_awkward_boundaries_accumulates_text_tool_calls_and_usage() {
    for piece in [7, 13, 64, 4096] {
        let server = FakeServer::scripted(vec![Reply::sse(&stream_text(), piece)]);
        let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = {
            let tokens = tokens.clone();
            move |t: &str| tokens.lock().unwrap().push(t.to_owned())
        };
        let response = adapter(&server).chat_stream(&request(), &sink).await.unwrap();
        assert_eq!(response.content, "Checking — one moment 😀", "pieces of {piece} bytes");
        assert_eq!(tokens.lock().unwrap().concat(), response.content);
        assert_eq!(tokens.lock().unwrap().len(), 2, "one token per text delta, none for empty deltas");
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.usage, Usage { input_tokens: 50, output_tokens: 31, ..Default::default() });
        let calls: Vec<(&str, &Value)> = response.tool_calls.iter().map(|c| (c.id.as_str(), &c.arguments)).collect();
        assert_eq!(calls, [("call_a", &json!({ "order_id": "42" })), ("call_b", &json!({ "order_id": "7" }))]);
        let sent = &server.requests()[0].body;
        assert_eq!(sent["stream"], json!(true));
        assert_eq!(sent["stream_options"], json!({ "include_usage": true }));
    }
}

#[tokio::test]
async fn a_stream_dropped_midway_or_ending_without_done_is_interrupted_and_not_retried() {
    let full = stream_text();
    let cut = full.find("tool_calls").unwrap();
    let server = FakeServer::scripted(vec![Reply::sse(&full, 5).dropped_after(cut)]);
    let error = adapter(&server).chat_stream(&request(), &|_| {}).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::StreamInterrupted, "{error}");
    assert_eq!(server.requests().len(), 1, "tokens were streamed already: the adapter does not call again");

    let without_done = full.replace("data: [DONE]\n\n", "");
    let server = FakeServer::scripted(vec![Reply::sse(&without_done, 4096)]);
    let error = adapter(&server).chat_stream(&request(), &|_| {}).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::StreamInterrupted, "{error}");
    assert!(error.message.contains("[DONE]"), "{error}");
}

#[tokio::test]
async fn an_error_inside_a_stream_is_reported_with_its_message() {
    let text = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\"}}\n\n";
    let server = FakeServer::scripted(vec![Reply::sse(text, 16)]);
    let error = adapter(&server).chat_stream(&request(), &|_| {}).await.unwrap_err();
    assert_eq!(error.kind, ModelErrorKind::Server);
    assert!(error.message.contains("The server had an error"), "{error}");

    // A provider's long error text (an echoed request, a page) is kept short: it is journaled.
    let long = "x".repeat(20_000);
    let text = format!("data: {}\n\n", json!({ "error": { "message": long, "type": "server_error" } }));
    let server = FakeServer::scripted(vec![Reply::sse(&text, 4096)]);
    let error = adapter(&server).chat_stream(&request(), &|_| {}).await.unwrap_err();
    assert!(error.message.chars().count() <= 1_100 && error.message.ends_with('…'), "{} chars", error.message.len());
    let server = FakeServer::scripted(vec![Reply::json(400, json!({ "error": { "message": long } }))]);
    let error = adapter(&server).chat(&request()).await.unwrap_err();
    assert!(error.message.chars().count() <= 1_100 && error.message.ends_with('…'), "{} chars", error.message.len());
}

#[tokio::test]
async fn rate_limits_and_server_errors_are_retried_honouring_retry_after() {
    let body = json!({ "model": "m", "choices": [{ "finish_reason": "stop", "message": { "content": "ok" } }] });
    let server = FakeServer::scripted(vec![
        Reply::json(429, json!({ "error": { "message": "Rate limit reached", "type": "requests" } }))
            .header("retry-after-ms", "30"),
        Reply::json(502, json!({ "error": { "message": "bad gateway" } })),
        Reply::json(200, body),
    ]);
    let started = std::time::Instant::now();
    let response = adapter(&server).chat(&request()).await.unwrap();
    assert_eq!(response.content, "ok");
    assert_eq!(server.requests().len(), 3);
    assert!(started.elapsed() >= std::time::Duration::from_millis(30), "waited as retry-after asked");
}

#[tokio::test]
async fn retries_stop_at_max_retries_with_the_last_error() {
    let error = json!({ "error": { "message": "overloaded" } });
    let server = FakeServer::scripted(vec![Reply::json(503, error.clone()); 5]);
    let failure = adapter(&server).chat(&request()).await.unwrap_err();
    assert_eq!(failure.kind, ModelErrorKind::Overloaded);
    assert_eq!(failure.status, Some(503));
    assert_eq!(server.requests().len(), 3, "one call and max_retries (2) retries");
}

#[tokio::test]
async fn a_retry_after_longer_than_max_backoff_is_left_to_the_step_retry_policy() {
    let server = FakeServer::scripted(vec![
        Reply::json(429, json!({ "error": { "message": "slow down" } })).header("retry-after", "3600"),
    ]);
    let failure = adapter(&server).chat(&request()).await.unwrap_err();
    assert_eq!(failure.kind, ModelErrorKind::RateLimited);
    assert_eq!(failure.retry_after, Some(std::time::Duration::from_secs(3600)));
    assert_eq!(server.requests().len(), 1);
    let step_error: stepwright_core::StepError = failure.into();
    assert!(step_error.retryable);
    assert_eq!(step_error.code.as_str(), "model_rate_limited");
}

#[tokio::test]
async fn client_errors_are_terminal_with_the_providers_message() {
    for (status, kind) in
        [(400, ModelErrorKind::BadRequest), (401, ModelErrorKind::Unauthorized), (403, ModelErrorKind::Forbidden)]
    {
        let server = FakeServer::scripted(vec![Reply::json(
            status,
            json!({ "error": { "message": format!("provider says {status}"), "type": "invalid_request_error", "code": null } }),
        )]);
        let failure = adapter(&server).chat(&request()).await.unwrap_err();
        assert_eq!(failure.kind, kind);
        assert!(failure.message.contains(&format!("provider says {status}")), "{failure}");
        assert_eq!(server.requests().len(), 1, "{status} is not retried");
        let step_error: stepwright_core::StepError = failure.into();
        assert!(!step_error.retryable);
    }
}

#[tokio::test]
async fn a_connection_refused_is_a_retryable_connection_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let adapter = OpenAi::new(&url, None, fast_http(), &RateLimits::default()).unwrap();
    let failure = adapter.chat(&request()).await.unwrap_err();
    assert_eq!(failure.kind, ModelErrorKind::Connection, "{failure}");
    assert!(failure.kind.retryable());
}

#[tokio::test]
async fn a_rate_limit_per_key_spaces_out_requests() {
    let body = json!({ "model": "m", "choices": [{ "finish_reason": "stop", "message": { "content": "ok" } }] });
    let server = FakeServer::scripted(vec![Reply::json(200, body); 3]);
    let limits = RateLimits::default();
    let options = stepwright_llm::HttpOptions { requests_per_minute: std::num::NonZeroU32::new(120), ..fast_http() };
    // Two adapters with the same key share one limiter: 120/min is one per 500 ms, with a
    // burst of two (a second's worth).
    let a = OpenAi::new(&format!("{}/v1", server.url), Some("k".into()), options.clone(), &limits).unwrap();
    let b = OpenAi::new(&format!("{}/v1", server.url), Some("k".into()), options, &limits).unwrap();
    let started = std::time::Instant::now();
    a.chat(&request()).await.unwrap();
    b.chat(&request()).await.unwrap();
    a.chat(&request()).await.unwrap();
    assert!(started.elapsed() >= std::time::Duration::from_millis(450), "{:?}", started.elapsed());
}

/// `tokens_per_minute`: a call goes while the minute's tokens are not spent, and its usage
/// is counted after it; once they are spent, the next call waits for the next minute.
#[tokio::test]
async fn a_token_limit_holds_calls_once_the_minute_is_spent() {
    let body = json!({ "model": "m", "choices": [{ "finish_reason": "stop", "message": { "content": "ok" } }],
                       "usage": { "prompt_tokens": 50, "completion_tokens": 10 } });
    let server = FakeServer::responding(move |_| Reply::json(200, body.clone()));
    let options = stepwright_llm::HttpOptions { tokens_per_minute: std::num::NonZeroU32::new(100), ..fast_http() };
    let model = OpenAi::new(&format!("{}/v1", server.url), Some("k".into()), options, &RateLimits::default()).unwrap();
    // Token windows are wall-clock minutes: start with enough of this one left.
    let into_minute = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() % 60;
    while into_minute() > 50 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    model.chat(&request()).await.unwrap();
    model.chat(&request()).await.unwrap();
    assert_eq!(server.served(), 2, "60 tokens used, then 120: both went while the minute had tokens left");
    let third = tokio::time::timeout(std::time::Duration::from_secs(1), model.chat(&request())).await;
    assert!(third.is_err(), "the minute's 100 tokens are spent: the third call waits for the next minute");
    assert_eq!(server.served(), 2);
}

/// OpenAI counts cached prompt tokens inside `prompt_tokens` and says how many in
/// `prompt_tokens_details.cached_tokens`; the completion's id is kept, whole and streamed.
#[tokio::test]
async fn cached_prompt_tokens_and_the_completion_id_are_read() {
    let server = FakeServer::scripted(vec![Reply::json(
        200,
        json!({
            "id": "chatcmpl-7", "object": "chat.completion", "model": "gpt-4o-mini",
            "choices": [{ "index": 0, "finish_reason": "stop", "message": { "role": "assistant", "content": "ok" } }],
            "usage": { "prompt_tokens": 1500, "completion_tokens": 8, "total_tokens": 1508, "prompt_tokens_details": { "cached_tokens": 1024 } }
        }),
    )]);
    let response = adapter(&server).chat(&request()).await.unwrap();
    assert_eq!(response.id.as_deref(), Some("chatcmpl-7"));
    assert_eq!(
        response.usage,
        Usage { input_tokens: 1500, output_tokens: 8, cache_read_input_tokens: 1024, cache_creation_input_tokens: 0 }
    );

    let chunk = |body: Value| format!("data: {body}\n\n");
    let streamed = [
        chunk(json!({ "id": "chatcmpl-8", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "role": "assistant", "content": "ok" } }] })),
        chunk(json!({ "id": "chatcmpl-8", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] })),
        chunk(json!({ "id": "chatcmpl-8", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "choices": [], "usage": { "prompt_tokens": 900, "completion_tokens": 2, "prompt_tokens_details": { "cached_tokens": 512 } } })),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let server = FakeServer::scripted(vec![Reply::sse(&streamed, 4096)]);
    let response = adapter(&server).chat_stream(&request(), &|_: &str| {}).await.unwrap();
    assert_eq!(response.id.as_deref(), Some("chatcmpl-8"));
    assert_eq!(
        response.usage,
        Usage { input_tokens: 900, output_tokens: 2, cache_read_input_tokens: 512, cache_creation_input_tokens: 0 }
    );
}

/// An empty answer being repaired goes back as the empty string it was: the API allows a null
/// `content` only beside `tool_calls`.
#[tokio::test]
async fn an_empty_assistant_turn_is_sent_as_an_empty_string_not_null() {
    let server = FakeServer::scripted(vec![Reply::json(
        200,
        json!({ "model": "m", "choices": [{ "finish_reason": "stop", "message": { "role": "assistant", "content": "fine" } }] }),
    )]);
    let request = ChatRequest::new(
        "m",
        vec![Message::user("Oslo?"), Message::assistant(""), Message::user("Your answer was empty. Answer.")],
    );
    adapter(&server).chat(&request).await.unwrap();
    assert_eq!(server.requests()[0].body["messages"][1], json!({ "role": "assistant", "content": "" }));
}
