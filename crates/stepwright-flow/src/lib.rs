//! The workflow file format (DESIGN §9): YAML parsed with positions, expressions and
//! templates in minijinja with strict undefined, every problem reported at once as
//! `file:line:col: message`, compiled to the same core definitions as the Rust API.
//!
//! This crate knows YAML and expressions; it knows no SQL and no HTTP. The models, tools,
//! MCP servers and agents a file declares become `stepwright-llm` and `stepwright-mcp`
//! values ([`Loaded`]); connecting to providers and servers is left to the caller.

mod compile;
mod expr;
mod schema;
mod yaml;

pub use compile::{
    ApproverList, Diagnostic, FileSchedule, FileTrigger, LoadError, LoadOptions, Loaded, MAX_FILE_BYTES, McpToolUse,
    closest, eval_event_filter, load, load_file, load_source, load_source_with, load_str, load_with, parse_duration,
    read_limited, render_event_template, render_schedule_input,
};
pub use expr::Expression;
pub use schema::file_schema;

/// Evaluates one expression — the language of `when:` and `{{ … }}`, with strict undefined —
/// against a JSON context (what an experiment's evaluators are written in).
///
/// # Errors
/// The expression does not parse, names something the context lacks, or fails.
pub fn eval_expression(source: &str, ctx: &serde_json::Value) -> Result<serde_json::Value, stepwright_core::StepError> {
    expr::eval(source, ctx)
}

/// Whether `source` is one well-formed expression; the parser's message when not.
///
/// # Errors
/// What the parser said.
pub fn check_expression(source: &str) -> Result<(), String> {
    expr::check_expression(source)
}
