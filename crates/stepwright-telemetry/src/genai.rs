//! The attribute names Stepwright's spans carry.
//!
//! The OpenTelemetry GenAI conventions moved in 2026 to their own repository with no tagged
//! release, and the Rust `opentelemetry-semantic-conventions` crate carries only their
//! deprecated names; so the names are kept here, pinned to
//! `open-telemetry/semantic-conventions-genai` at commit
//! `e8fc5751506258db1459d1bde47994e01dee922e` (`model/gen-ai/registry.yaml`), and the MCP
//! names to `model/mcp/` of the same repository. The engine and the model layer write these
//! names as `tracing` field names (a field name cannot be a constant there); the test
//! `the_span_fields_are_the_pinned_names` checks every one of them against this module.

/// The operation: `chat`, `invoke_agent`, `execute_tool`, `invoke_workflow`.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// The provider as the client identifies it (`openai`, `anthropic`).
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The model a request names.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// The request's token limit.
pub const GEN_AI_REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
/// The request's temperature.
pub const GEN_AI_REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
/// The request's top_p.
pub const GEN_AI_REQUEST_TOP_P: &str = "gen_ai.request.top_p";
/// Whether the request streamed.
pub const GEN_AI_REQUEST_STREAM: &str = "gen_ai.request.stream";
/// The completion's id.
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
/// The model that answered.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// Why generation stopped, per choice.
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// Seconds from the request to the first streamed chunk.
pub const GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
/// Prompt tokens, cached ones included.
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Prompt tokens served from the provider's cache.
pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// Prompt tokens written to the provider's cache.
pub const GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
/// Generated tokens.
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// The agent's name.
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
/// The workflow's name.
pub const GEN_AI_WORKFLOW_NAME: &str = "gen_ai.workflow.name";
/// The tool's name.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// The model's id for this tool call.
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `function` (a tool the agent runs) or `extension` (an MCP server's).
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
/// The tool call's arguments (content: captured only on request).
pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// The tool call's result (content: captured only on request).
pub const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// The messages sent to the model (content: captured only on request).
pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// The messages the model returned (content: captured only on request).
pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// What the model was asked to answer with: `json` (structured output) or `text`.
pub const GEN_AI_OUTPUT_TYPE: &str = "gen_ai.output.type";
/// A conversation (an agent's session).
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";

/// What a token count counts: `input` or `output`.
pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";

/// Metric: GenAI operation duration (seconds).
pub const GEN_AI_CLIENT_OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
/// Metric: input and output tokens used.
pub const GEN_AI_CLIENT_TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// Metric: time to the first chunk of a streamed answer (seconds).
pub const GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
/// Metric: a workflow's duration (here: an activation's, seconds).
pub const GEN_AI_WORKFLOW_DURATION: &str = "gen_ai.workflow.duration";

/// MCP: the JSON-RPC method (`tools/call`).
pub const MCP_METHOD_NAME: &str = "mcp.method.name";
/// MCP: the session, for the streamable HTTP transport.
pub const MCP_SESSION_ID: &str = "mcp.session.id";
/// How an MCP server is reached: `pipe` (a child's stdio) or `tcp` (streamable HTTP).
pub const NETWORK_TRANSPORT: &str = "network.transport";
/// The host of a model's endpoint, or of an MCP server reached over HTTP.
pub const SERVER_ADDRESS: &str = "server.address";
/// The port of a model's endpoint.
pub const SERVER_PORT: &str = "server.port";

/// Stepwright: the run.
pub const STEPWRIGHT_RUN_ID: &str = "stepwright.run.id";
/// Stepwright: the step path (`research/turn.2/tool.0`).
pub const STEPWRIGHT_STEP_PATH: &str = "stepwright.step.path";
/// Stepwright: the attempt of the step (from 1).
pub const STEPWRIGHT_ATTEMPT: &str = "stepwright.attempt";
/// Stepwright: the tenant the run was started in.
pub const STEPWRIGHT_TENANT: &str = "stepwright.tenant";
/// Stepwright: what started this activation (`start`, `resume`, `replay`, `recompute`).
pub const STEPWRIGHT_ACTIVATION: &str = "stepwright.activation";
/// Stepwright: steps this activation served from the journal instead of executing them.
pub const STEPWRIGHT_SERVED_STEPS: &str = "stepwright.served.steps";
/// Stepwright: model and tool calls this activation served from the journal.
pub const STEPWRIGHT_SERVED_CALLS: &str = "stepwright.served.calls";
/// Stepwright: how a link relates two traces (`previous_activation`, `original`).
pub const STEPWRIGHT_LINK: &str = "stepwright.link";
/// Stepwright: what a call cost in US dollars, from the price table, as journaled.
pub const STEPWRIGHT_COST_USD: &str = "stepwright.cost.usd";

#[cfg(test)]
mod tests {
    /// Every name defined above.
    fn pinned() -> Vec<&'static str> {
        include_str!("genai.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("pub const ")?.split_once("= \"")?.1.strip_suffix("\";"))
            .collect()
    }

    /// The `gen_ai.*` and `mcp.*` names the code that opens spans and records metrics writes
    /// (field names of `tracing` macros, attribute keys), outside comments.
    fn written() -> Vec<String> {
        let sources = [
            include_str!("../../stepwright-core/src/engine/execute.rs"),
            include_str!("../../stepwright-core/src/engine/exec/attempt.rs"),
            include_str!("../../stepwright-llm/src/models.rs"),
            include_str!("../../stepwright-llm/src/agent/conversation.rs"),
            include_str!("../../stepwright-llm/src/agent/tools.rs"),
            include_str!("../../stepwright-mcp/src/lib.rs"),
            include_str!("metrics.rs"),
        ];
        let mut names = Vec::new();
        for line in sources.iter().flat_map(|s| s.lines()).filter(|l| !l.trim_start().starts_with("//")) {
            for prefix in ["gen_ai.", "mcp."] {
                for (at, _) in line.match_indices(prefix) {
                    let before = line[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_') {
                        continue; // `stepwright.mcp.server` is ours, not the conventions'
                    }
                    let name: String = line[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_' || *c == '.')
                        .collect();
                    names.push(name.trim_end_matches('.').to_owned());
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }

    #[test]
    fn the_span_fields_are_the_pinned_names() {
        let pinned = pinned();
        let written = written();
        assert!(written.len() > 20, "the scan finds the names: {written:?}");
        let unknown: Vec<&String> = written.iter().filter(|name| !pinned.contains(&name.as_str())).collect();
        assert!(unknown.is_empty(), "names not in the pinned module (a typo, or a name to pin): {unknown:?}");
    }
}
