//! What the binary's tests share: running `stepwright`, and the testkit's fake
//! OpenAI-compatible chat model on loopback.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use stepwright_testkit::http::FakeServer;

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

pub(crate) use stepwright_testkit::openai::{Answer, Tokens, contents};

/// Starts the fake model; `script` answers each request body. Returns its port and the
/// server (which counts what it served).
pub(crate) fn fake_openai(script: fn(&Value) -> Answer, tokens: Tokens) -> (u16, FakeServer) {
    fake_openai_paced(script, tokens, std::time::Duration::ZERO)
}

/// As [`fake_openai`], but a streamed answer arrives one event every `pace`.
pub(crate) fn fake_openai_paced(
    script: fn(&Value) -> Answer,
    tokens: Tokens,
    pace: std::time::Duration,
) -> (u16, FakeServer) {
    let server = stepwright_testkit::openai::chat_model(script, tokens, pace);
    (server.port, server)
}
