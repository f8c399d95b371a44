//! The body of every error answer: `application/problem+json` (RFC 9457) with the stable
//! error code of `docs/error-codes.md`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The body of an error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Problem {
    /// The stable error code (`not_found`, `access_denied`, `invalid_workflow`, …).
    pub code: String,
    /// A short summary of the kind of problem.
    pub title: String,
    /// What happened in this case.
    pub detail: String,
    /// The HTTP status, repeated.
    pub status: u16,
    /// For `invalid_workflow`: every problem in the file, at its `file:line:col`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}
