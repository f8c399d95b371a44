//! The endpoints of DESIGN §13, one module per resource. Every handler that reads or
//! changes a run first finds it in the key's namespace ([`run_in_namespace`]): a run of
//! another namespace is `404`, exactly as one that does not exist.

pub(crate) mod auth;
pub(crate) mod events;
pub(crate) mod history;
pub(crate) mod hooks;
pub(crate) mod interrupts;
pub(crate) mod links;
pub(crate) mod meta;
pub(crate) mod runs;
pub(crate) mod schedules;
pub(crate) mod triggers;
pub(crate) mod session;
pub(crate) mod workflows;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequest, Request};
use axum::routing::{get, post};
use stepwright_core::RunId;
use stepwright_core::journal::RunRecord;

use crate::keys::Principal;
use crate::problem::ApiError;
use crate::state::Shared;

/// Every route.
pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/v1/health", get(meta::health))
        .route("/metrics", get(crate::metrics::scrape))
        .route("/v1/openapi.json", get(meta::openapi))
        .route("/v1/session", post(session::sign_in).get(session::show).delete(session::sign_out))
        .route("/v1/auth", get(auth::methods))
        .route("/v1/auth/oidc/start", get(auth::start))
        .route("/v1/auth/oidc/callback", get(auth::callback))
        .route("/v1/workflows", post(workflows::register).get(workflows::list))
        .route("/v1/workflows/{name}", get(workflows::show))
        .route("/v1/runs", post(runs::start).get(runs::list))
        .route("/v1/runs/{id}", get(runs::show))
        .route("/v1/runs/{id}/definition", get(runs::definition))
        .route("/v1/runs/{id}/artifacts/{hash}", get(runs::artifact))
        .route("/v1/runs/{id}/events", get(events::stream))
        .route("/v1/runs/{id}/cancel", post(runs::cancel))
        .route("/v1/runs/{id}/resume", post(runs::resume))
        .route("/v1/runs/{id}/messages", post(runs::message))
        .route("/v1/runs/{id}/replay", post(history::replay))
        .route("/v1/runs/{id}/recompute", post(history::recompute))
        .route("/v1/runs/{id}/fork", post(history::fork))
        .route("/v1/interrupts", get(interrupts::inbox))
        .route("/v1/interrupts/{id}/decision", post(interrupts::decide))
        .route("/v1/interrupts/{id}/link", post(links::create))
        .route("/v1/link", get(links::show))
        .route("/v1/link/decision", post(links::decide))
        .route("/v1/webhooks", post(hooks::create).get(hooks::list))
        .route("/v1/webhooks/{id}", axum::routing::delete(hooks::delete))
        .route("/v1/webhooks/{id}/deliveries", get(hooks::deliveries))
        .route("/v1/schedules", post(schedules::create).get(schedules::list))
        .route("/v1/schedules/{workflow}/{schedule}", get(schedules::show).delete(schedules::delete))
        .route("/v1/schedules/{workflow}/{schedule}/pause", post(schedules::pause))
        .route("/v1/schedules/{workflow}/{schedule}/resume", post(schedules::resume))
        .route("/v1/schedules/{workflow}/{schedule}/trigger", post(schedules::trigger))
        .route("/v1/schedules/{workflow}/{schedule}/backfill", post(schedules::backfill))
        .route("/v1/events", post(triggers::send).get(triggers::list))
        .route("/v1/events/{seq}", get(triggers::show))
        .route("/v1/triggers", post(triggers::create).get(triggers::list_triggers))
        .route("/v1/triggers/{workflow}/{trigger}", get(triggers::show_trigger).delete(triggers::delete))
        .route("/v1/triggers/{workflow}/{trigger}/pause", post(triggers::pause))
        .route("/v1/triggers/{workflow}/{trigger}/resume", post(triggers::resume))
}

/// A run id from a path, or `404` (an id that does not parse names no run).
pub(crate) fn parse_run(text: &str) -> Result<RunId, ApiError> {
    text.parse().map_err(|_| ApiError::not_found("not_found", format!("no run {text:?}")))
}

/// The run's header if it is in the caller's namespace, else `404`.
pub(crate) async fn run_in_namespace(shared: &Shared, who: &Principal, run: RunId) -> Result<RunRecord, ApiError> {
    let missing = || ApiError::not_found("not_found", format!("run {run} was not found"));
    let record = match shared.store.load_from(run, u64::MAX).await {
        Ok(loaded) => loaded.record,
        Err(stepwright_core::StoreError::RunNotFound(_)) => return Err(missing()),
        Err(other) => return Err(other.into()),
    };
    if record.caller.tenant.as_deref() != Some(who.namespace()) {
        return Err(missing());
    }
    Ok(record)
}

/// A JSON body whose problems are `400` (not JSON) or `422` (not the type) problem documents
/// naming the field, never axum's plain-text rejections. Unknown fields are errors (the types
/// deny them).
pub(crate) struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let value = match axum::Json::<serde_json::Value>::from_request(request, state).await {
            Ok(axum::Json(value)) => value,
            Err(rejection) => {
                let status = rejection.status();
                let mut error = ApiError::new(status, "bad_request", rejection.body_text());
                if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    error.problem.code = "too_large".into();
                }
                return Err(error);
            }
        };
        serde_path_to_error::deserialize(value).map(Self).map_err(|e| {
            let at = e.path().to_string();
            let at = if at == "." { String::new() } else { format!("{at}: ") };
            let message = format!("Failed to deserialize the JSON body into the target type: {at}{}", e.inner());
            ApiError::new(axum::http::StatusCode::UNPROCESSABLE_ENTITY, "bad_request", message)
        })
    }
}

/// Whole numbers in request bodies: JSON has one kind of number, and `3.0` is the integer 3
/// to JSON Schema (and to a client whose numbers are floats), so an integer field takes a
/// whole number written with a fraction; any other fraction, or a number out of the type's
/// range, is refused naming the range. For `#[serde(deserialize_with = …)]`.
pub(crate) mod whole {
    use serde::Deserialize;
    use serde::de::Error;

    fn integer<'de, D, T>(number: &serde_json::Number) -> Result<T, D::Error>
    where
        D: serde::Deserializer<'de>,
        T: TryFrom<i128>,
    {
        let whole = match (number.as_i64(), number.as_u64(), number.as_f64()) {
            (Some(n), _, _) => Some(i128::from(n)),
            (_, Some(n), _) => Some(i128::from(n)),
            #[allow(clippy::cast_possible_truncation)] // Checked whole and in range first.
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1.7e38 => Some(f as i128),
            _ => None,
        };
        let Some(whole) = whole else {
            return Err(D::Error::custom(format!("invalid type: {number} is not a whole number")));
        };
        T::try_from(whole).map_err(|_| {
            D::Error::custom(format!("invalid value: {whole} is out of range for {}", std::any::type_name::<T>()))
        })
    }

    /// A required integer.
    pub(crate) fn required<'de, D, T>(deserializer: D) -> Result<T, D::Error>
    where
        D: serde::Deserializer<'de>,
        T: TryFrom<i128>,
    {
        integer::<D, T>(&serde_json::Number::deserialize(deserializer)?)
    }

    /// An optional integer (`null` or absent: none; absent needs `#[serde(default)]`).
    pub(crate) fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        D: serde::Deserializer<'de>,
        T: TryFrom<i128>,
    {
        Option::<serde_json::Number>::deserialize(deserializer)?.as_ref().map(integer::<D, T>).transpose()
    }
}

/// Query parameters whose problems are `400` problem documents.
pub(crate) struct Params<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for Params<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Self(value)),
            Err(rejection) => Err(ApiError::bad_request(rejection.body_text())),
        }
    }
}

/// A JSON body that may be left out (an empty body is the type's default).
pub(crate) struct OptionalBody<T>(pub T);

impl<S, T> FromRequest<S> for OptionalBody<T>
where
    T: serde::de::DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(request, state).await.map_err(|rejection| {
            let mut error = ApiError::new(rejection.status(), "bad_request", rejection.body_text());
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                error.problem.code = "too_large".into();
            }
            error
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(T::default()));
        }
        serde_json::from_slice(&bytes).map(Self).map_err(|e| {
            ApiError::new(axum::http::StatusCode::UNPROCESSABLE_ENTITY, "bad_request", format!("the body: {e}"))
        })
    }
}
