//! Traces, as the engine sees them: `tracing` spans opened where work really executes, and
//! the few operations on trace contexts an exporter provides.
//!
//! Architecture invariant: the core knows `tracing`, never OpenTelemetry. It opens spans
//! (`invoke_workflow` per activation, `step` per attempt) with the field names of the
//! conventions; an exporter (`stepwright-telemetry`) turns them into OpenTelemetry spans and
//! installs [`TraceContexts`], through which an activation gets its parent (a W3C
//! `traceparent` a caller gave) and its link to the activation before it. With nothing
//! installed, every span is disabled and costs a branch.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

/// A W3C Trace Context `traceparent` (`00-<trace id>-<parent id>-<flags>`), checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceParent(String);

impl TraceParent {
    /// The header's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 32 hex digits of the trace id.
    pub fn trace_id(&self) -> &str {
        &self.0[3..35]
    }

    /// The 16 hex digits of the span id.
    pub fn span_id(&self) -> &str {
        &self.0[36..52]
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TraceParent {
    type Err = String;

    /// Version `00` as the W3C recommendation spells it: lowercase hex, neither id all
    /// zeros. A later version is read by its first four fields, as the recommendation says.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| {
            Err(format!("{text:?} is not a W3C traceparent ({why}); expected 00-<32 hex>-<16 hex>-<2 hex>"))
        };
        let fields: Vec<&str> = text.split('-').collect();
        let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if fields.len() < 4 || (fields[0] == "00" && fields.len() != 4) {
            return bad("four fields separated by '-'");
        }
        let (version, trace, span, flags) = (fields[0], fields[1], fields[2], fields[3]);
        if !hex(version, 2) || version == "ff" {
            return bad("the version");
        }
        if !hex(trace, 32) || trace.bytes().all(|b| b == b'0') {
            return bad("the trace id");
        }
        if !hex(span, 16) || span.bytes().all(|b| b == b'0') {
            return bad("the parent id");
        }
        if !hex(flags, 2) {
            return bad("the flags");
        }
        Ok(Self(format!("00-{trace}-{span}-{flags}")))
    }
}

/// How a trace relates to another: the kinds of link the engine adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceLink {
    /// The activation before this one of the same run (it suspended or crashed).
    PreviousActivation,
    /// The run a replay or recompute re-executes.
    Original,
}

impl TraceLink {
    /// The value of the link's `stepwright.link` attribute.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreviousActivation => "previous_activation",
            Self::Original => "original",
        }
    }
}

/// What an exporter does with trace contexts the engine cannot do through `tracing` alone.
pub trait TraceContexts: Send + Sync + 'static {
    /// Makes `parent` the parent of `span` (a new span not yet entered).
    fn set_parent(&self, span: &tracing::Span, parent: &TraceParent);
    /// Links `span` (not yet entered) to the span `to` names.
    fn add_link(&self, span: &tracing::Span, to: &TraceParent, link: TraceLink);
    /// Sets a string-array attribute on `span` (what a `tracing` field cannot carry).
    fn set_strings(&self, span: &tracing::Span, key: &'static str, values: Vec<String>);
    /// The `traceparent` of `span`, if it is recorded.
    fn traceparent(&self, span: &tracing::Span) -> Option<TraceParent>;
}

static CONTEXTS: OnceLock<Box<dyn TraceContexts>> = OnceLock::new();

/// Installs the process's trace contexts (once, with its tracing subscriber); `false` if
/// some were installed before.
pub fn install(contexts: Box<dyn TraceContexts>) -> bool {
    CONTEXTS.set(contexts).is_ok()
}

/// The installed trace contexts: `None` when nothing exports traces.
pub fn contexts() -> Option<&'static dyn TraceContexts> {
    CONTEXTS.get().map(|c| c.as_ref())
}

/// The `traceparent` of the current span, to send on an outbound request (a model call,
/// an HTTP tool, an MCP request's `_meta`).
pub fn current_traceparent() -> Option<TraceParent> {
    let contexts = contexts()?;
    let span = tracing::Span::current();
    if span.is_disabled() {
        return None;
    }
    contexts.traceparent(&span)
}

/// The event kind that journals an activation's `traceparent` (at the root path), so the
/// next activation links to it.
pub const ACTIVATION_EVENT: &str = "trace.activation";
/// The event kind that journals the `traceparent` a run was started under (`POST
/// /v1/runs` with a `traceparent` header), the parent of its first activation.
pub const PARENT_EVENT: &str = "trace.parent";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_checked_as_the_recommendation_spells_it() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed: TraceParent = good.parse().unwrap();
        assert_eq!(parsed.as_str(), good);
        assert_eq!(parsed.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parsed.span_id(), "00f067aa0ba902b7");
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(bad.parse::<TraceParent>().is_err(), "{bad:?} was accepted");
        }
        // A later version with more fields is read by its first four.
        let later: TraceParent = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what".parse().unwrap();
        assert_eq!(later.as_str(), good);
    }
}
