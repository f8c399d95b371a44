//! `POST /v1/runs`, `GET /v1/runs`, `GET /v1/runs/{id}` and the run actions: cancel,
//! resume, messages.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepwright_app::IdempotentStart;
use stepwright_app::RunDetails;
use stepwright_core::store::RunFilter;
use stepwright_core::{CancelOutcome, Entropy, RunId, RunStatus, StartOptions, Timestamp, Workflow};
use stepwright_store::control::AuditEntry;

use super::workflows::not_registered;
use super::{Body, OptionalBody, Params, parse_run, run_in_namespace};
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::Shared;

/// The longest `wait_seconds` honoured.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// A run to start.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartRun {
    /// The registered workflow's name.
    pub workflow: String,
    /// Its version (default: the newest).
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub version: Option<u32>,
    /// The workflow's input.
    #[serde(default)]
    pub input: Value,
    /// A key that makes the start idempotent: the same key in the namespace always answers
    /// the first run it started.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Wait up to this long (at most 60) for the run to finish or stop for a person.
    #[serde(default)]
    #[schemars(range(min = 0, max = 60))]
    pub wait_seconds: Option<f64>,
    /// The run's priority among runs waiting for a worker, higher first (default: the
    /// workflow's, else 0).
    #[serde(default, deserialize_with = "super::whole::optional")]
    pub priority: Option<i32>,
    /// The run's concurrency group, instead of the one the workflow's `concurrency.key`
    /// gives: at most `limit` runs with this `key` execute at a time, across all workers.
    #[serde(default)]
    pub concurrency: Option<ConcurrencyGroup>,
}

/// A concurrency group a run is started in.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConcurrencyGroup {
    /// The group: runs with the same key share its slots.
    #[schemars(length(min = 1))]
    pub key: String,
    /// How many of its runs may execute at once.
    #[serde(deserialize_with = "super::whole::required")]
    #[schemars(range(min = 1))]
    pub limit: u32,
}

/// `POST /v1/runs` (operator): `201` and the run — finished, if it finished within
/// `wait_seconds`; `202` while it is still running; `200` and the first run for an
/// idempotency key used before.
pub(crate) async fn start(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: axum::http::HeaderMap,
    Body(body): Body<StartRun>,
) -> Result<(StatusCode, Json<RunDetails>), ApiError> {
    who.require(Role::Operator)?;
    // A malformed traceparent is ignored (a new trace begins), as W3C Trace Context says.
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let wait = wait_for(body.wait_seconds)?;
    let registered = shared
        .registered(who.namespace(), &body.workflow, body.version)
        .await?
        .ok_or_else(|| not_registered(&body.workflow, body.version))?;
    let workflow = shared.workflow(&registered).await?;
    // Refused input claims no idempotency key: the same request fixed is a first one.
    stepwright_core::Engine::check_input(&workflow, &body.input)?;
    let concurrency = match body.concurrency {
        Some(group) if group.key.is_empty() || group.limit == 0 => {
            return Err(ApiError::bad_request("concurrency needs a non-empty key and a limit of at least 1"));
        }
        group => group.map(|g| stepwright_core::Concurrency { key: g.key, limit: g.limit }),
    };
    let now = shared.now();
    let run = RunId::from_parts(now, stepwright_core::SystemEntropy::new().bytes10());
    if let Some(key) = &body.idempotency_key {
        match stepwright_app::claim_start(shared.store.as_ref(), who.namespace(), key, run, now).await? {
            IdempotentStart::Fresh => {}
            IdempotentStart::First(first) => {
                run_in_namespace(&shared, &who, first).await?;
                return Ok((StatusCode::OK, Json(wait_and_read(&shared, first, wait).await?)));
            }
            IdempotentStart::Starting(first) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "idempotency_in_progress",
                    format!("a request with idempotency key {key:?} is starting run {first}; ask again shortly"),
                ));
            }
        }
    }
    let options =
        StartOptions { caller: who.caller(), run_id: Some(run), priority: body.priority, concurrency, traceparent };
    let details = execute(&shared, &workflow, body.input, options, wait).await?;
    let status = if details.status == RunStatus::Running || details.status == RunStatus::Pending {
        StatusCode::ACCEPTED
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(details)))
}

pub(crate) fn wait_for(seconds: Option<f64>) -> Result<Duration, ApiError> {
    match seconds {
        None => Ok(Duration::ZERO),
        Some(s) if (0.0..=60.0).contains(&s) => Ok(Duration::from_secs_f64(s).min(MAX_WAIT)),
        Some(s) => Err(ApiError::bad_request(format!("wait_seconds must be a number from 0 to 60, not {s}"))),
    }
}

/// Creates the run and, when this server executes runs and the client waits, executes it
/// in a task of its own (a client that leaves does not stop it); answers when it stops or
/// `wait` passes. A run nobody waits for is left to the runner.
async fn execute(
    shared: &Arc<Shared>,
    workflow: &Workflow,
    input: Value,
    options: StartOptions,
    wait: Duration,
) -> Result<RunDetails, ApiError> {
    let run = options.run_id.expect("chosen above");
    if shared.executes && !wait.is_zero() {
        // Created leased and executed in one go: the fastest path to a finished run.
        let (engine, workflow) = (shared.engine.clone(), workflow.clone());
        let task = tokio::spawn(async move { engine.start_with(&workflow, input, options).await });
        match tokio::time::timeout(wait, task).await {
            Ok(Ok(Ok(report))) if report.status.is_terminal() || report.status == RunStatus::Suspended => {
                return Ok(stepwright_app::run_details(&shared.engine, report.run_id).await?);
            }
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(error))) => return Err(error.into()),
            Ok(Err(panicked)) => return Err(ApiError::internal(format!("the run's task failed: {panicked}"))),
            Err(_still_running) => {}
        }
        return wait_and_read(shared, run, Duration::ZERO).await;
    }
    // Created pending: this server's runner (woken by the store) or another worker claims
    // it — one owner, handed over rather than raced for, within the runner's concurrency.
    shared.engine.create(workflow, input, options).await?;
    wait_and_read(shared, run, wait).await
}

/// The run's details once it stops (finishes or waits for a person) or `wait` passes.
pub(crate) async fn wait_and_read(shared: &Shared, run: RunId, wait: Duration) -> Result<RunDetails, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let details = stepwright_app::run_details(&shared.engine, run).await?;
        let stopped = details.status.is_terminal() || details.status == RunStatus::Suspended;
        if stopped || tokio::time::Instant::now() >= deadline {
            return Ok(details);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `GET /v1/runs` filters.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListRuns {
    /// Only runs with this status.
    #[serde(default)]
    pub status: Option<RunStatus>,
    /// Only runs of this workflow.
    #[serde(default)]
    pub workflow: Option<String>,
    /// At most this many (1 to 500, default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    #[schemars(extend("format" = "uuid"))]
    pub cursor: Option<String>,
    /// Only runs created at or after this time (µs since the epoch).
    #[serde(default)]
    pub created_after: Option<i64>,
    /// Only runs created before this time (µs since the epoch).
    #[serde(default)]
    pub created_before: Option<i64>,
    /// Only runs whose input (as JSON text) contains this text, ignoring case.
    #[serde(default)]
    #[schemars(length(min = 1, max = 200))]
    pub input_contains: Option<String>,
    /// Only runs forked from this run.
    #[serde(default)]
    #[schemars(extend("format" = "uuid"))]
    pub parent: Option<String>,
    /// Include each run's model usage and cost (`usage`), read from its events.
    #[serde(default)]
    pub usage: Option<bool>,
}

/// A page of runs.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RunPage {
    /// Newest first.
    pub runs: Vec<RunSummary>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A run in a listing.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RunSummary {
    /// The run's id.
    pub run_id: String,
    /// Its workflow.
    pub workflow: String,
    /// Where it stands.
    pub status: RunStatus,
    /// When it was created (µs since the epoch).
    pub created_at: i64,
    /// When its status last changed (µs since the epoch): for a finished run, when it ended.
    pub updated_at: i64,
    /// The worker executing it, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When that worker's lease lapses unless renewed (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<i64>,
    /// The run it was forked from, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// Its model usage and cost so far, when asked for (`usage=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<stepwright_app::Totals>,
}

/// `GET /v1/runs`: the namespace's runs, newest first, paged.
pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Params(query): Params<ListRuns>,
) -> Result<Json<RunPage>, ApiError> {
    let limit = query.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::bad_request("limit must be from 1 to 500"));
    }
    if query.input_contains.as_ref().is_some_and(|text| text.is_empty() || text.len() > 200) {
        return Err(ApiError::bad_request("input_contains must be 1 to 200 characters"));
    }
    let parent = match &query.parent {
        Some(parent) => Some(parent.parse::<RunId>().map_err(|_| ApiError::bad_request("parent is not a run id"))?),
        None => None,
    };
    let before = match &query.cursor {
        Some(cursor) => Some(cursor.parse::<RunId>().map_err(|_| ApiError::bad_request("cursor is not one we gave"))?),
        None => None,
    };
    let filter = RunFilter {
        status: query.status,
        workflow: query.workflow,
        tenant: Some(who.namespace().to_owned()),
        limit: Some(limit + 1),
        before,
        headers_only: true,
        updated_since: None,
        created_from: query.created_after.map(Timestamp::from_micros),
        created_until: query.created_before.map(Timestamp::from_micros),
        input_contains: query.input_contains,
        parent,
        concurrency_key: None,
    };
    let mut runs = shared.store.list_runs(filter).await?;
    let more = runs.len() > limit;
    runs.truncate(limit);
    let next_cursor = more.then(|| runs.last().map(|run| run.id.to_string())).flatten();
    let mut usage = match query.usage {
        Some(true) => {
            let ids: Vec<RunId> = runs.iter().map(|run| run.id).collect();
            stepwright_app::usage_of(shared.store.as_ref(), &ids).await?.into_iter().map(Some).collect()
        }
        _ => vec![None; runs.len()],
    }
    .into_iter();
    let runs = runs
        .into_iter()
        .map(|run| {
            let lease = run.lease.filter(|_| !run.status.is_terminal());
            RunSummary {
                run_id: run.id.to_string(),
                workflow: run.workflow,
                status: run.status,
                created_at: run.created_at.as_micros(),
                updated_at: run.updated_at.as_micros(),
                lease_expires_at: lease.as_ref().map(|lease| lease.expires_at.as_micros()),
                owner: lease.map(|lease| lease.owner),
                parent_run_id: run.parent.map(|parent| parent.run.to_string()),
                usage: usage.next().flatten(),
            }
        })
        .collect();
    Ok(Json(RunPage { runs, next_cursor }))
}

/// `GET /v1/runs/{id}`: the `runs show --json` shape.
pub(crate) async fn show(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<RunDetails>, ApiError> {
    let run = parse_run(&id)?;
    run_in_namespace(&shared, &who, run).await?;
    Ok(Json(stepwright_app::run_details(&shared.engine, run).await?))
}

/// The definition a run is pinned to.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RunDefinition {
    /// The run.
    pub run_id: String,
    /// Its definition hash.
    pub hash: String,
    /// Its structure (steps, operators, policies), as `stepwright graph` draws it: the
    /// version the run executes, not necessarily the newest one.
    pub graph: Value,
    /// Its model bindings: what a recompute's `models` may name.
    pub models: Vec<ModelBinding>,
}

/// A model binding a definition has.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ModelBinding {
    /// The name steps call it by.
    pub name: String,
    /// The provider's model id it sends.
    pub model: String,
}

/// `GET /v1/runs/{id}/definition`: the structure of the definition the run is pinned to.
pub(crate) async fn definition(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<RunDefinition>, ApiError> {
    let run = parse_run(&id)?;
    let record = run_in_namespace(&shared, &who, run).await?;
    let workflow = shared.definition_of(&record).await?;
    Ok(Json(RunDefinition {
        run_id: run.to_string(),
        hash: record.definition_hash.to_hex(),
        graph: workflow.describe().clone(),
        models: stepwright_app::model_bindings(&workflow)
            .into_iter()
            .map(|(name, model)| ModelBinding { name, model })
            .collect(),
    }))
}

/// An artifact a step captured (a model call's input or output, a tool call, ...).
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Artifact {
    /// Its content hash.
    pub hash: String,
    /// Its kind (`llm-input`, `llm-output`, `tool-call`, ...).
    pub kind: String,
    /// The step that captured it.
    pub path: String,
    /// Its content.
    pub content: Value,
}

/// `GET /v1/runs/{id}/artifacts/{hash}`: an artifact of the run; `404` if the run captured
/// none with this hash, or kept only its hash (capture mode `hash`).
pub(crate) async fn artifact(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((id, hash)): Path<(String, String)>,
) -> Result<Json<Artifact>, ApiError> {
    let run = parse_run(&id)?;
    run_in_namespace(&shared, &who, run).await?;
    let missing = || ApiError::not_found("not_found", format!("run {run} has no stored artifact {hash}"));
    let loaded = shared.store.load(run).await?;
    let (path, kind, content_hash) = loaded
        .entries
        .iter()
        .find_map(|entry| match &entry.record {
            stepwright_core::Record::Artifact { kind, hash: content, stored: true } if content.to_hex() == hash => {
                Some((entry.path.as_str().to_owned(), kind.clone(), *content))
            }
            _ => None,
        })
        .ok_or_else(missing)?;
    let content = loaded.blobs.get(&content_hash).ok_or_else(missing)?;
    Ok(Json(Artifact { hash, kind, path, content: (**content).clone() }))
}

/// A cancel.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelRun {
    /// Why (kept in the run's error: `cancelled by ann: too slow`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// What a cancel did.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Cancelled {
    /// The run.
    pub run_id: String,
    /// `cancelled` (nobody executed it), `requested` (the process executing it stops it),
    /// or `finished` (it had ended already; `status` says how).
    pub outcome: String,
    /// Where the run stands.
    pub status: RunStatus,
    /// The worker that executes it and stops it, for `requested`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executed_by: Option<String>,
}

/// `POST /v1/runs/{id}/cancel` (operator): as `stepwright cancel`; reaches a run executing
/// in any process.
pub(crate) async fn cancel(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    OptionalBody(body): OptionalBody<CancelRun>,
) -> Result<Json<Cancelled>, ApiError> {
    who.require(Role::Operator)?;
    let run = parse_run(&id)?;
    run_in_namespace(&shared, &who, run).await?;
    let reason = body.reason.unwrap_or_else(|| "cancelled over the API".into());
    let outcome = shared.engine.cancel_by(run, &reason, Some(&who.key.user)).await?;
    audit(&shared, &who, "run.cancelled", run.to_string(), json!({ "reason": reason })).await?;
    let (outcome, status, executed_by) = match outcome {
        CancelOutcome::Finished(status) => ("finished", status, None),
        CancelOutcome::Cancelled => ("cancelled", RunStatus::Cancelled, None),
        CancelOutcome::Requested { owner, .. } => ("requested", RunStatus::Running, Some(owner)),
    };
    Ok(Json(Cancelled { run_id: run.to_string(), outcome: outcome.into(), status, executed_by }))
}

/// A resume.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeRun {
    /// Wait up to this long (at most 60) for it to finish or stop again.
    #[serde(default)]
    #[schemars(range(min = 0, max = 60))]
    pub wait_seconds: Option<f64>,
}

/// `POST /v1/runs/{id}/resume` (operator): continues a run that is pending, suspended, or
/// was left running by a process that is gone (`409` if a live process executes it).
pub(crate) async fn resume(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    OptionalBody(body): OptionalBody<ResumeRun>,
) -> Result<(StatusCode, Json<RunDetails>), ApiError> {
    who.require(Role::Operator)?;
    let run = parse_run(&id)?;
    let record = run_in_namespace(&shared, &who, run).await?;
    let wait = wait_for(body.wait_seconds)?;
    if record.status.is_terminal() {
        // Nothing to continue: how it ended, as the command line's `resume` answers.
        return Ok((StatusCode::OK, Json(stepwright_app::run_details(&shared.engine, run).await?)));
    }
    let workflow = shared.definition_of(&record).await?;
    let engine = shared.engine.clone();
    let task = tokio::spawn(async move { engine.resume(&workflow, run).await });
    let details = match tokio::time::timeout(wait.max(Duration::from_millis(50)), task).await {
        Ok(Ok(Ok(report))) => stepwright_app::run_details(&shared.engine, report.run_id).await?,
        Ok(Ok(Err(error))) => return Err(error.into()),
        Ok(Err(panicked)) => return Err(ApiError::internal(format!("the run's task failed: {panicked}"))),
        Err(_still_running) => stepwright_app::run_details(&shared.engine, run).await?,
    };
    let status = if details.status.is_terminal() || details.status == RunStatus::Suspended {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(details)))
}

/// A message for a run: to a loop's inbox, or a wake-up of an `every` channel.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunMessage {
    /// The inbox a loop reads (with `message`).
    #[serde(default)]
    pub inbox: Option<String>,
    /// The message.
    #[serde(default, deserialize_with = "present")]
    pub message: Option<Value>,
    /// A wake channel to wake instead.
    #[serde(default)]
    pub wake: Option<String>,
}

/// A message's two shapes, for the document: either an inbox and its message, or a
/// channel to wake (the handler says which was meant when a body has parts of both).
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // Only its schema is used.
enum RunMessageShape {
    /// A message to a loop's inbox.
    Inbox(InboxMessage),
    /// A wake-up of an `every` channel.
    Wake(WakeChannel),
}

/// A message to a loop's inbox.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used.
struct InboxMessage {
    /// The inbox a loop reads.
    inbox: String,
    /// The message (any JSON, `null` too).
    message: Value,
}

/// A wake-up of an `every` channel.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used.
struct WakeChannel {
    /// The channel.
    wake: String,
}

/// A field that is there, `null` included (`None`: absent).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl JsonSchema for RunMessage {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RunMessage".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        RunMessageShape::json_schema(generator)
    }
}

/// What was stored.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Stored {
    /// The run.
    pub run_id: String,
    /// Always true: the answer comes once the message is stored.
    pub stored: bool,
}

/// `POST /v1/runs/{id}/messages` (operator): answered once stored.
pub(crate) async fn message(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    Body(body): Body<RunMessage>,
) -> Result<(StatusCode, Json<Stored>), ApiError> {
    who.require(Role::Operator)?;
    let run = parse_run(&id)?;
    run_in_namespace(&shared, &who, run).await?;
    match body {
        RunMessage { inbox: Some(inbox), message: Some(message), wake: None } => {
            shared.engine.send(run, &inbox, message).await?;
        }
        RunMessage { inbox: None, message: None, wake: Some(channel) } => shared.engine.wake(run, &channel).await?,
        _ => return Err(ApiError::bad_request("send either {inbox, message} or {wake}")),
    }
    Ok((StatusCode::ACCEPTED, Json(Stored { run_id: run.to_string(), stored: true })))
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
