//! The endpoints of DESIGN §13, one module per resource. Every handler that reads or
//! changes a run first finds it in the key's namespace ([`run_in_namespace`]): a run of
//! another namespace is `404`, exactly as one that does not exist.

pub(crate) mod auth;
pub(crate) mod events;
pub(crate) mod experiments;
pub(crate) mod history;
pub(crate) mod hooks;
pub(crate) mod interrupts;
pub(crate) mod links;
pub(crate) mod meta;
pub(crate) mod metrics;
pub(crate) mod runs;
pub(crate) mod schedules;
pub(crate) mod triggers;
pub(crate) mod session;
pub(crate) mod tasks;
pub(crate) mod workflows;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequest, Request};
use axum::routing::{MethodFilter, MethodRouter, on};
use serde_json::Value;
use stepwright_api::{Method, OperationId};
use stepwright_core::RunId;
use stepwright_core::journal::RunRecord;
use stepwright_store::control::AuditEntry;

use crate::keys::Principal;
use crate::problem::ApiError;
use crate::state::Shared;

/// Every route, built from the contract's table of operations: each operation's method
/// and path come from there, and its id names the handler here (an exhaustive match, so an
/// operation without a handler does not compile, and a handler without an operation is
/// never routed).
pub(crate) fn router() -> Router<Arc<Shared>> {
    // Each path: its methods' handlers, and their names (for `Allow`).
    type Routed = (&'static str, MethodRouter<Arc<Shared>>, Vec<&'static str>);
    let mut routes: Vec<Routed> = Vec::new();
    for operation in stepwright_api::operations() {
        let handler = handler(operation.id, method_filter(operation.method));
        let name = method_name(operation.method);
        match routes.iter_mut().find(|(path, ..)| *path == operation.path) {
            Some((_, methods, names)) => {
                *methods = std::mem::take(methods).merge(handler);
                names.push(name);
            }
            None => routes.push((operation.path, handler, vec![name])),
        }
    }
    routes.into_iter().fold(Router::new(), |router, (path, methods, names)| {
        // A method the path does not take: `405` as a problem document, with `Allow`.
        let allow = names.join(", ");
        let refuse = move |method: axum::http::Method| async move {
            let detail = format!("{path} takes {allow}, not {method}");
            (
                [(axum::http::header::ALLOW, allow)],
                ApiError::new(axum::http::StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", detail),
            )
        };
        router.route(path, methods.fallback(refuse))
    })
}

/// No operation at this path: `404` as a problem document (the dashboard's paths are
/// routed beside these).
pub(crate) async fn no_such_path(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found("not_found", format!("nothing is served at {}", uri.path()))
}

fn method_name(method: Method) -> &'static str {
    match method {
        Method::Get => "GET",
        Method::Post => "POST",
        Method::Delete => "DELETE",
    }
}

fn method_filter(method: Method) -> MethodFilter {
    match method {
        Method::Get => MethodFilter::GET,
        Method::Post => MethodFilter::POST,
        Method::Delete => MethodFilter::DELETE,
    }
}

/// The handler of an operation, on `method`.
fn handler(id: OperationId, method: MethodFilter) -> MethodRouter<Arc<Shared>> {
    use OperationId as Op;
    match id {
        Op::Health => on(method, meta::health),
        Op::Metrics => on(method, metrics::scrape),
        Op::Openapi => on(method, meta::openapi),
        Op::AuthMethods => on(method, auth::methods),
        Op::OidcStart => on(method, auth::start),
        Op::OidcCallback => on(method, auth::callback),
        Op::SignIn => on(method, session::sign_in),
        Op::ShowSession => on(method, session::show),
        Op::SignOut => on(method, session::sign_out),
        Op::RegisterWorkflow => on(method, workflows::register),
        Op::ListWorkflows => on(method, workflows::list),
        Op::ShowWorkflow => on(method, workflows::show),
        Op::StartRun => on(method, runs::start),
        Op::ListRuns => on(method, runs::list),
        Op::ShowRun => on(method, runs::show),
        Op::ShowRunDefinition => on(method, runs::definition),
        Op::ShowArtifact => on(method, runs::artifact),
        Op::StreamRunEvents => on(method, events::stream),
        Op::CancelRun => on(method, runs::cancel),
        Op::ResumeRun => on(method, runs::resume),
        Op::MessageRun => on(method, runs::message),
        Op::ReplayRun => on(method, history::replay),
        Op::RecomputeRun => on(method, history::recompute),
        Op::ForkRun => on(method, history::fork),
        Op::InterruptInbox => on(method, interrupts::inbox),
        Op::DecideInterrupt => on(method, interrupts::decide),
        Op::WakeTimer => on(method, interrupts::wake),
        Op::CheckApprovers => on(method, interrupts::check_approvers),
        Op::CreateLink => on(method, links::create),
        Op::ShowLink => on(method, links::show),
        Op::DecideByLink => on(method, links::decide),
        Op::CreateWebhook => on(method, hooks::create),
        Op::ListWebhooks => on(method, hooks::list),
        Op::DeleteWebhook => on(method, hooks::delete),
        Op::WebhookDeliveries => on(method, hooks::deliveries),
        Op::CreateSchedules => on(method, schedules::create),
        Op::ListSchedules => on(method, schedules::list),
        Op::ShowSchedule => on(method, schedules::show),
        Op::DeleteSchedule => on(method, schedules::delete),
        Op::PauseSchedule => on(method, schedules::pause),
        Op::ResumeSchedule => on(method, schedules::resume),
        Op::TriggerSchedule => on(method, schedules::trigger),
        Op::BackfillSchedule => on(method, schedules::backfill),
        Op::SendEvent => on(method, triggers::send),
        Op::ListEvents => on(method, triggers::list),
        Op::ShowEvent => on(method, triggers::show),
        Op::CreateTriggers => on(method, triggers::create),
        Op::ListTriggers => on(method, triggers::list_triggers),
        Op::ShowTrigger => on(method, triggers::show_trigger),
        Op::DeleteTrigger => on(method, triggers::delete),
        Op::PauseTrigger => on(method, triggers::pause),
        Op::ResumeTrigger => on(method, triggers::resume),
        Op::ClaimTasks => on(method, tasks::claim),
        Op::HeartbeatTasks => on(method, tasks::heartbeat),
        Op::AnswerTasks => on(method, tasks::answers),
        Op::CompleteTask => on(method, tasks::complete),
        Op::FailTask => on(method, tasks::fail),
        Op::CancelledTask => on(method, tasks::cancelled),
        Op::ReleaseTask => on(method, tasks::release),
        Op::DeferTask => on(method, tasks::defer),
        Op::TaskChunks => on(method, tasks::chunks),
        Op::ListTasks => on(method, tasks::list),
        Op::ListQueues => on(method, tasks::queues),
        Op::ListWorkers => on(method, tasks::workers),
        Op::StartExperiment => on(method, experiments::start),
        Op::ListExperiments => on(method, experiments::list),
        Op::ShowExperiment => on(method, experiments::show),
        Op::CancelExperiment => on(method, experiments::cancel),
        Op::ResumeExperiment => on(method, experiments::resume),
    }
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
        // Every body is an object: serde's derive alone would read a struct from an array of
        // its fields' values too.
        if !value.is_object() {
            let message = "Failed to deserialize the JSON body into the target type: the body is not a JSON object";
            return Err(ApiError::new(axum::http::StatusCode::UNPROCESSABLE_ENTITY, "bad_request", message));
        }
        serde_path_to_error::deserialize(value).map(Self).map_err(|e| {
            let at = e.path().to_string();
            let at = if at == "." { String::new() } else { format!("{at}: ") };
            let message = format!("Failed to deserialize the JSON body into the target type: {at}{}", e.inner());
            ApiError::new(axum::http::StatusCode::UNPROCESSABLE_ENTITY, "bad_request", message)
        })
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
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::new(axum::http::StatusCode::UNPROCESSABLE_ENTITY, "bad_request", format!("the body: {e}"))
        })?;
        if !value.is_object() {
            let message = "the body is not a JSON object";
            return Err(ApiError::new(axum::http::StatusCode::UNPROCESSABLE_ENTITY, "bad_request", message));
        }
        serde_json::from_value(value).map(Self).map_err(|e| {
            ApiError::new(axum::http::StatusCode::UNPROCESSABLE_ENTITY, "bad_request", format!("the body: {e}"))
        })
    }
}

/// Appends to the audit log.
pub(crate) async fn audit(
    shared: &Shared,
    who: &Principal,
    action: &str,
    subject: String,
    detail: Value,
) -> Result<(), ApiError> {
    let entry = AuditEntry {
        namespace: who.namespace().to_owned(),
        at: shared.now(),
        actor: who.actor(),
        action: action.to_owned(),
        subject,
        detail,
    };
    Ok(shared.store.audit(entry).await?)
}
