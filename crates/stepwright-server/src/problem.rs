//! Errors as `application/problem+json` (RFC 9457), each with the stable error code
//! (docs/error-codes.md). The application layer says whose fault an error is; this module
//! only picks the status that says it.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
pub use stepwright_api::Problem;
use stepwright_app::AppError;
use stepwright_core::{EngineError, Fault, StoreError};

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub problem: Problem,
}

impl ApiError {
    /// An error with this status, code and detail.
    pub fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> Self {
        let title = status.canonical_reason().unwrap_or("Error").to_owned();
        Self {
            status,
            problem: Problem {
                code: code.to_owned(),
                title,
                detail: detail.into(),
                status: status.as_u16(),
                problems: Vec::new(),
            },
        }
    }

    /// `400`: the request does not parse or does not fit.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", detail)
    }

    /// `401`: no key, or one that is unknown, revoked or expired.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", detail)
    }

    /// `403`: the key may not do this.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "access_denied", detail)
    }

    /// `404`: nothing by that name in the key's namespace.
    pub fn not_found(code: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, detail)
    }

    /// `429`: the key's rate or stream limit.
    pub fn too_many(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", detail)
    }

    /// `500`: ours.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", detail)
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let code = error.code();
        let status = match (&error, code) {
            (_, "not_found") => StatusCode::NOT_FOUND,
            (EngineError::Resolve { .. }, "access_denied") => StatusCode::FORBIDDEN,
            (EngineError::Resolve { .. }, "already_resolved" | "run_finished") => StatusCode::CONFLICT,
            (EngineError::Leased { .. } | EngineError::NotResumable { .. }, _) | (_, "queued") => StatusCode::CONFLICT,
            _ if error.fault() == Fault::Caller => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, code, error.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let status = match (&error, error.fault()) {
            (StoreError::RunNotFound(_) | StoreError::TaskNotFound(_), _) => StatusCode::NOT_FOUND,
            (_, Fault::Caller) => StatusCode::CONFLICT,
            (_, Fault::Engine) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, error.code(), error.to_string())
    }
}

impl From<AppError> for ApiError {
    fn from(error: AppError) -> Self {
        match error {
            AppError::Engine(error) => error.into(),
            AppError::Store(error) => error.into(),
            held @ AppError::ExperimentHeld { .. } => Self::new(StatusCode::CONFLICT, held.code(), held.to_string()),
            AppError::Load(load) => {
                let problems: Vec<String> = load.diagnostics.iter().map(ToString::to_string).collect();
                let mut api = Self::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_workflow",
                    format!("the workflow does not load ({} problem(s))", problems.len()),
                );
                api.problem.problems = problems;
                api
            }
            other => {
                let status = match other.fault() {
                    Fault::Caller => StatusCode::UNPROCESSABLE_ENTITY,
                    Fault::Engine => StatusCode::INTERNAL_SERVER_ERROR,
                };
                Self::new(status, other.code(), other.to_string())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            // Ours, not the caller's: an operator wants to see it without asking the caller.
            tracing::error!(
                status = self.status.as_u16(),
                code = self.problem.code.as_str(),
                detail = self.problem.detail.as_str(),
                "request failed"
            );
        }
        let too_many = self.status == StatusCode::TOO_MANY_REQUESTS;
        let mut response = (self.status, axum::Json(self.problem)).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if too_many {
            // The limits are per second (and per open stream): a second later is a fair try.
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::PAYLOAD_TOO_LARGE {
            // The body was not read to its end, so the connection carries no further request:
            // said, a client does not reuse it (and see its next request fail on a closed socket).
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
