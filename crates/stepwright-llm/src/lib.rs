//! Stepwright's models: adapters for OpenAI-compatible chat completions and Anthropic
//! Messages on one trait, cassettes that record and replay calls, structured output with
//! repair turns, and the `llm` step whose every call is a journaled sub-step.
//!
//! Architecture invariant: this crate knows providers' wire formats and HTTP; the kernel
//! (`stepwright-core`) knows none of it, and this crate knows nothing of YAML or SQL.

mod adapter;
mod agent;
mod anthropic;
mod cassette;
mod error;
mod http;
mod http_tool;
mod memory;
mod models;
mod openai;
mod prices;
mod provider;
mod process;
mod schema;
mod sse;
mod step;
mod tools;
mod types;
mod worker;

pub use adapter::{ChatModel, ScriptedModel, TokenSink};
pub use agent::{
    AGENT_COMPLETED_EVENT, AGENT_EMPTY_ANSWER, AGENT_HANDOFF_EVENT, AGENT_STARTED_EVENT, AGENT_STUCK,
    AGENT_STUCK_EVENT, AgentHooks, AgentSpec, AgentStep, Agents, BUDGET_EXCEEDED, Budget, HookEvent, OnStuck,
    STUCK_RETRIES, TOOL_CALL_EVENT, ToolHooks,
};
pub use anthropic::{
    Anthropic, DEFAULT_API_VERSION as ANTHROPIC_DEFAULT_API_VERSION, DEFAULT_MAX_TOKENS as ANTHROPIC_DEFAULT_MAX_TOKENS,
};
pub use cassette::{Cassette, CassetteError, CassetteMode, Interaction, MAX_CASSETTE_BYTES};
pub use error::{ModelError, ModelErrorKind};
pub use http::{HttpOptions, RateLimits, USER_AGENT, install_crypto_provider};
pub use http_tool::{HttpTool, PUSH_QUEUE, signature, task_view};
pub use memory::{
    ACCESS_DENIED, DEFAULT_MAX_STORED_MESSAGES, MemoryService, RecallSpec, RecallStep, RememberSpec, RememberStep,
    ScopeKind, Sessions,
};
pub use models::{
    CallRecord, ContentRenderer, DEFAULT_TIMEOUT, MODEL_CALL_EVENT, ModelConfig, Models, Pricing, Provider, Rollup,
    Totals, call_event, rollup,
};
pub use openai::OpenAi;
pub use prices::{PRICE_TABLE_VERSION, list_price};
pub use process::{DEFAULT_KILL_GRACE, process_groups_stopped};
pub use step::{LlmSpec, LlmStep};
pub use tools::WorkerTarget;
pub use tools::{
    ArgvFn, CommandTool, DEFAULT_MAX_OUTPUT_BYTES, FnTool, RegisterError, TOOL_FAILED, TOOL_NOT_FOUND, TOOL_TIMEOUT,
    Tool, ToolContext, ToolDef, ToolStep, Tools, fn_tool, model_name,
};
pub use types::{
    ChatRequest, ChatResponse, FinishReason, Message, ModelParams, OutputFormat, TokenLimitField, ToolCall, ToolChoice,
    ToolSpec, Usage, sampling_problem,
};
pub use worker::{DEFAULT_LEASE, WorkerTool};

#[cfg(test)]
mod send_sync {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_handles_are_send_and_sync() {
        assert_send_sync::<super::Models>();
        assert_send_sync::<super::Cassette>();
        assert_send_sync::<super::OpenAi>();
        assert_send_sync::<super::Anthropic>();
        assert_send_sync::<super::LlmStep>();
        assert_send_sync::<super::AgentStep>();
        assert_send_sync::<super::Agents>();
        assert_send_sync::<super::Tools>();
        assert_send_sync::<super::CommandTool>();
        assert_send_sync::<super::HttpTool>();
    }
}
