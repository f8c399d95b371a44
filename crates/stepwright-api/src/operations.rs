//! The API's operations: one table of every route — method, path, the role it needs, its
//! request and response types — that the server builds its router from (each id names one
//! handler, matched exhaustively) and [`crate::openapi::document`] builds the document from.
//! A route exists in both or in neither.

use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Value, json};

use crate::{Role, RunDetails, history, interrupt, run, schedule, session, stream, trigger, webhook, workflow};

mod experiments;
mod tasks;

/// An HTTP method the API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`.
    Get,
    /// `POST`.
    Post,
    /// `DELETE`.
    Delete,
}

impl Method {
    /// Its name in lower case, as OpenAPI keys operations.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Post => "post",
            Self::Delete => "delete",
        }
    }
}

/// A JSON Schema of a type, made by the document's generator (so named types become
/// `$ref`s into `components/schemas`).
pub type SchemaFn = fn(&mut SchemaGenerator) -> Value;

/// The schema of `T`, as a [`SchemaFn`].
fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
    generator.subschema_for::<T>().to_value()
}

/// One response an operation gives: status, description, body schema (`None`: no body),
/// content type.
pub type Response = (u16, &'static str, Option<SchemaFn>, &'static str);

/// A plain-text body.
fn text(_: &mut SchemaGenerator) -> Value {
    json!({ "type": "string" })
}

/// Any JSON object.
fn any_object(_: &mut SchemaGenerator) -> Value {
    json!({ "type": "object" })
}

/// One operation: a method on a path, with its types.
#[derive(Debug, Clone)]
pub struct Operation {
    /// The method.
    pub method: Method,
    /// The path, with `{name}` segments (the router's syntax and OpenAPI's).
    pub path: &'static str,
    /// Which operation: the document's `operationId` and the server's handler.
    pub id: OperationId,
    /// What it does, for the document.
    pub summary: &'static str,
    /// The role it needs (`None`: no key at all).
    pub role: Option<Role>,
    /// The request body's schema.
    pub body: Option<SchemaFn>,
    /// The query parameters' type's schema.
    pub query: Option<SchemaFn>,
    /// Its answers besides the errors.
    pub responses: Vec<Response>,
    /// The error statuses it answers besides 401, 429 and 500.
    pub errors: &'static [u16],
}

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";

/// Every operation's id: the document's `operationId` (this name in lower camel case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)] // Each is described by its entry in `operations()`.
pub enum OperationId {
    Health,
    Metrics,
    Openapi,
    AuthMethods,
    OidcStart,
    OidcCallback,
    SignIn,
    ShowSession,
    SignOut,
    RegisterWorkflow,
    ListWorkflows,
    ShowWorkflow,
    StartRun,
    ListRuns,
    ShowRun,
    ShowRunDefinition,
    ShowArtifact,
    StreamRunEvents,
    CancelRun,
    ResumeRun,
    MessageRun,
    ReplayRun,
    RecomputeRun,
    ForkRun,
    InterruptInbox,
    DecideInterrupt,
    WakeTimer,
    CheckApprovers,
    CreateLink,
    ShowLink,
    DecideByLink,
    CreateWebhook,
    ListWebhooks,
    DeleteWebhook,
    WebhookDeliveries,
    CreateSchedules,
    ListSchedules,
    ShowSchedule,
    DeleteSchedule,
    PauseSchedule,
    ResumeSchedule,
    TriggerSchedule,
    BackfillSchedule,
    SendEvent,
    ListEvents,
    ShowEvent,
    CreateTriggers,
    ListTriggers,
    ShowTrigger,
    DeleteTrigger,
    PauseTrigger,
    ResumeTrigger,
    ClaimTasks,
    HeartbeatTasks,
    AnswerTasks,
    CompleteTask,
    FailTask,
    CancelledTask,
    ReleaseTask,
    DeferTask,
    TaskChunks,
    ListTasks,
    ListQueues,
    ListWorkers,
    StartExperiment,
    ListExperiments,
    ShowExperiment,
    CancelExperiment,
    ResumeExperiment,
}

impl OperationId {
    /// The `operationId` (`startRun`, …).
    pub fn name(self) -> String {
        let debug = format!("{self:?}");
        let mut chars = debug.chars();
        chars.next().map(|first| first.to_ascii_lowercase().to_string() + chars.as_str()).unwrap_or_default()
    }
}

/// Every operation, in the order the document lists them.
pub fn operations() -> Vec<Operation> {
    vec![
        Operation {
            method: Method::Get,
            path: "/v1/health",
            id: OperationId::Health,
            summary: "Liveness, and the protocol versions spoken: `{\"status\":\"ok\",\"protocols\":{\"worker\":[1]}}`.",
            role: None,
            body: None,
            query: None,
            responses: vec![(200, "The server is up.", Some(schema::<session::Health>), JSON)],
            errors: &[],
        },
        Operation {
            method: Method::Get,
            path: "/metrics",
            id: OperationId::Metrics,
            summary: "What this server's process counts, in the Prometheus text format: runs started and finished by workflow and status, step and model-call durations, tokens and cost by model, time to first chunk, queue depth, claim latency, lease takeovers, webhook deliveries. Across every tenant, so an admin's to read; `404` when the host keeps no metrics.",
            role: Some(Role::Admin),
            body: None,
            query: None,
            responses: vec![(200, "The metrics.", Some(text), "text/plain; version=0.0.4; charset=utf-8")],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Get,
            path: "/v1/openapi.json",
            id: OperationId::Openapi,
            summary: "This document.",
            role: None,
            body: None,
            query: None,
            responses: vec![(200, "The OpenAPI 3.1 document.", Some(any_object), JSON)],
            errors: &[],
        },
        Operation {
            method: Method::Get,
            path: "/v1/auth",
            id: OperationId::AuthMethods,
            summary: "How one may sign in here: with an API key, and through an OpenID Connect provider if one is set up.",
            role: None,
            body: None,
            query: None,
            responses: vec![(200, "The ways to sign in.", Some(schema::<session::AuthMethods>), JSON)],
            errors: &[],
        },
        Operation {
            method: Method::Get,
            path: "/v1/auth/oidc/start",
            id: OperationId::OidcStart,
            summary: "Start signing in through the OpenID Connect provider: `302` to it (authorization code with PKCE), with the state in a ten-minute HttpOnly cookie.",
            role: None,
            body: None,
            query: None,
            responses: vec![(302, "Off to the provider.", None, JSON)],
            errors: &[404, 502],
        },
        Operation {
            method: Method::Get,
            path: "/v1/auth/oidc/callback",
            id: OperationId::OidcCallback,
            summary: "Where the provider sends the browser back: the code is exchanged, the ID token checked, the groups mapped; an HTML page that signs the browser in (the session cookie) or says why not.",
            role: None,
            body: None,
            query: Some(schema::<session::Callback>),
            responses: vec![
                (
                    200,
                    "Signed in; `Set-Cookie` holds the session, and the page goes on to the dashboard.",
                    None,
                    "text/html",
                ),
                (
                    400,
                    "The sign-in failed (state, token or provider refusal): a page that says why.",
                    None,
                    "text/html",
                ),
                (
                    403,
                    "The person may not sign in here (allow-list, or no mapped group): a page that says why.",
                    None,
                    "text/html",
                ),
            ],
            errors: &[404, 502],
        },
        Operation {
            method: Method::Post,
            path: "/v1/session",
            id: OperationId::SignIn,
            summary: "Sign a browser in with an API key: `201` and an HttpOnly, `SameSite=Strict` cookie holding a session key (12 hours at most, revoked with the key). A request the cookie authenticates changes nothing without the `X-Stepwright-Csrf` header.",
            role: None,
            body: Some(schema::<session::SignIn>),
            query: None,
            responses: vec![(
                201,
                "Signed in; `Set-Cookie` holds the session.",
                Some(schema::<session::Session>),
                JSON,
            )],
            errors: &[400, 401, 413, 415, 422, 429],
        },
        Operation {
            method: Method::Get,
            path: "/v1/session",
            id: OperationId::ShowSession,
            summary: "Who the request is from: namespace, user, roles, the key in use.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The caller.", Some(schema::<session::Session>), JSON)],
            errors: &[],
        },
        Operation {
            method: Method::Delete,
            path: "/v1/session",
            id: OperationId::SignOut,
            summary: "Sign out: the session's key is revoked and the cookie cleared (`400` for a request that carries an API key instead).",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(204, "Signed out.", None, JSON)],
            errors: &[403, 409],
        },
        Operation {
            method: Method::Post,
            path: "/v1/workflows",
            id: OperationId::RegisterWorkflow,
            summary: "Register a workflow file (and the files it calls); each new source of a name is its next version.",
            role: Some(Role::Admin),
            body: Some(schema::<workflow::RegisterWorkflow>),
            query: None,
            responses: vec![
                (201, "Registered as a new version.", Some(schema::<workflow::WorkflowVersion>), JSON),
                (
                    200,
                    "This source was registered before: its version.",
                    Some(schema::<workflow::WorkflowVersion>),
                    JSON,
                ),
            ],
            errors: &[400, 403, 413, 415, 422],
        },
        Operation {
            method: Method::Get,
            path: "/v1/workflows",
            id: OperationId::ListWorkflows,
            summary: "The namespace's registered workflows.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "By name.", Some(schema::<Vec<workflow::WorkflowSummary>>), JSON)],
            errors: &[],
        },
        Operation {
            method: Method::Get,
            path: "/v1/workflows/{name}",
            id: OperationId::ShowWorkflow,
            summary: "One workflow: its versions, input schema and graph.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The workflow.", Some(schema::<workflow::WorkflowDetails>), JSON)],
            errors: &[404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/runs",
            id: OperationId::StartRun,
            summary: "Start a run of a registered workflow (idempotent with `idempotency_key`).",
            role: Some(Role::Operator),
            body: Some(schema::<run::StartRun>),
            query: None,
            responses: vec![
                (
                    201,
                    "Started; finished or waiting for a person if it did within `wait_seconds`.",
                    Some(schema::<RunDetails>),
                    JSON,
                ),
                (202, "Started and still running after `wait_seconds`.", Some(schema::<RunDetails>), JSON),
                (200, "The run this idempotency key started before.", Some(schema::<RunDetails>), JSON),
            ],
            errors: &[400, 403, 404, 409, 413, 415, 422],
        },
        Operation {
            method: Method::Get,
            path: "/v1/runs",
            id: OperationId::ListRuns,
            summary: "The namespace's runs, newest first, paged by `next_cursor`.",
            role: Some(Role::Viewer),
            body: None,
            query: Some(schema::<run::ListRuns>),
            responses: vec![(200, "A page.", Some(schema::<run::RunPage>), JSON)],
            errors: &[400],
        },
        Operation {
            method: Method::Get,
            path: "/v1/runs/{id}",
            id: OperationId::ShowRun,
            summary: "A run: status, output, error, pending interrupts, steps, usage (the `runs show --json` shape).",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The run.", Some(schema::<RunDetails>), JSON)],
            errors: &[404],
        },
        Operation {
            method: Method::Get,
            path: "/v1/runs/{id}/definition",
            id: OperationId::ShowRunDefinition,
            summary: "The structure of the definition the run is pinned to (its version, not necessarily the newest).",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The run's graph.", Some(schema::<run::RunDefinition>), JSON)],
            errors: &[404],
        },
        Operation {
            method: Method::Get,
            path: "/v1/runs/{id}/artifacts/{hash}",
            id: OperationId::ShowArtifact,
            summary: "An artifact a step of the run captured (a model call's input or output, a tool call), by its content hash.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The artifact.", Some(schema::<run::Artifact>), JSON)],
            errors: &[404],
        },
        Operation {
            method: Method::Get,
            path: "/v1/runs/{id}/events",
            id: OperationId::StreamRunEvents,
            summary: "The run's events as Server-Sent Events; `id:` is the event's position, `Last-Event-ID` or `?after=` resumes.",
            role: Some(Role::Viewer),
            body: None,
            query: Some(schema::<stream::StreamFrom>),
            responses: vec![
                (200, "The event stream; it ends after the run's final event.", Some(sse_event), SSE),
                (204, "The run has ended and its final event was read already: nothing more will come (an EventSource stops reconnecting).", None, JSON),
            ],
            errors: &[400, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/runs/{id}/cancel",
            id: OperationId::CancelRun,
            summary: "Cancel a run, wherever it executes.",
            role: Some(Role::Operator),
            body: Some(schema::<run::CancelRun>),
            query: None,
            responses: vec![(200, "What the cancel did.", Some(schema::<run::Cancelled>), JSON)],
            errors: &[403, 404, 413, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/runs/{id}/resume",
            id: OperationId::ResumeRun,
            summary: "Continue a pending or suspended run, or one a dead process left running; a finished run is answered as it ended.",
            role: Some(Role::Operator),
            body: Some(schema::<run::ResumeRun>),
            query: None,
            responses: vec![
                (200, "It finished (or had finished) or stopped again.", Some(schema::<RunDetails>), JSON),
                (202, "Still running.", Some(schema::<RunDetails>), JSON),
            ],
            errors: &[400, 403, 404, 409, 413, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/runs/{id}/messages",
            id: OperationId::MessageRun,
            summary: "A message to a loop's inbox, or a wake-up of an `every` channel; answered once stored.",
            role: Some(Role::Operator),
            body: Some(schema::<run::RunMessage>),
            query: None,
            responses: vec![(202, "Stored.", Some(schema::<run::Stored>), JSON)],
            errors: &[400, 403, 404, 413, 415, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/runs/{id}/replay",
            id: OperationId::ReplayRun,
            summary: "Re-execute a run in a sandbox with its own definition, serving every recorded effect; compare step by step (nothing is written).",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(
                200,
                "The comparison; `identical` says whether every step and the output came out the same.",
                Some(schema::<history::ReplayReport>),
                JSON,
            )],
            errors: &[403, 404, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/runs/{id}/recompute",
            id: OperationId::RecomputeRun,
            summary: "Re-execute a run (or from a step), optionally with another registered version or model binding, and report what changed.",
            role: Some(Role::Operator),
            body: Some(schema::<history::RecomputeRun>),
            query: None,
            responses: vec![(
                200,
                "What changed, step by step; `changed` gates CI as the CLI's exit code does; `usage` compares the model calls' tokens and cost.",
                Some(schema::<history::RecomputeView>),
                JSON,
            )],
            errors: &[400, 403, 404, 413, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/runs/{id}/fork",
            id: OperationId::ForkRun,
            summary: "A new run from the checkpoint before a step, optionally with a new input or step outputs.",
            role: Some(Role::Operator),
            body: Some(schema::<history::ForkRun>),
            query: None,
            responses: vec![(201, "The new run (lineage: this run and the step).", Some(schema::<RunDetails>), JSON)],
            errors: &[400, 403, 404, 413, 415, 422],
        },
        Operation {
            method: Method::Get,
            path: "/v1/interrupts",
            id: OperationId::InterruptInbox,
            summary: "The approvals inbox: every open decision of the namespace the key may take (`kind` lists timers or awaited events instead).",
            role: Some(Role::Viewer),
            body: None,
            query: Some(schema::<interrupt::InboxQuery>),
            responses: vec![(200, "Oldest run first.", Some(schema::<Vec<interrupt::InboxItem>>), JSON)],
            errors: &[400],
        },
        Operation {
            method: Method::Post,
            path: "/v1/interrupts/{id}/decision",
            id: OperationId::DecideInterrupt,
            summary: "Decide an interrupt as the key's user; the run then continues.",
            role: Some(Role::Approver),
            body: Some(schema::<interrupt::DecisionBody>),
            query: None,
            responses: vec![(200, "Decided.", Some(schema::<interrupt::DecisionTaken>), JSON)],
            errors: &[400, 403, 404, 409, 413, 415, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/interrupts/{id}/wake",
            id: OperationId::WakeTimer,
            summary: "Wake a durable timer now (its step goes on as if the time had come); the run then continues. Only timers are woken; a decision is never skipped this way.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Woken.", Some(schema::<interrupt::TimerWoken>), JSON)],
            errors: &[403, 404, 409, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/approvers/check",
            id: OperationId::CheckApprovers,
            summary: "Who in the namespace could meet an approver list: live keys and OIDC group mappings with the approver role that meet it (what `validate --server` warns about when there are none).",
            role: Some(Role::Operator),
            body: Some(schema::<interrupt::CheckApprovers>),
            query: None,
            responses: vec![(200, "Who could decide.", Some(schema::<interrupt::ApproversChecked>), JSON)],
            errors: &[400, 403, 413, 415, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/interrupts/{id}/link",
            id: OperationId::CreateLink,
            summary: "A signed-in-free link that decides this interrupt once, as the caller; it expires (default one hour) and is spent by its decision.",
            role: Some(Role::Approver),
            body: Some(schema::<interrupt::NewLink>),
            query: None,
            responses: vec![(201, "The link; send its `url`.", Some(schema::<interrupt::LinkMade>), JSON)],
            errors: &[400, 403, 404, 409, 413, 422],
        },
        Operation {
            method: Method::Get,
            path: "/v1/link",
            id: OperationId::ShowLink,
            summary: "With an approval link's key: the request it decides.",
            role: Some(Role::Approver),
            body: None,
            query: None,
            responses: vec![(200, "The open request.", Some(schema::<interrupt::LinkView>), JSON)],
            errors: &[409, 410],
        },
        Operation {
            method: Method::Post,
            path: "/v1/link/decision",
            id: OperationId::DecideByLink,
            summary: "With an approval link's key: decide its interrupt, once, as the approver who made the link.",
            role: Some(Role::Approver),
            body: Some(schema::<interrupt::DecisionBody>),
            query: None,
            responses: vec![(200, "Decided; the link is spent.", Some(schema::<interrupt::DecisionTaken>), JSON)],
            errors: &[400, 403, 404, 409, 410, 413, 415, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/webhooks",
            id: OperationId::CreateWebhook,
            summary: "Post the namespace's events to a URL, signed with `Stepwright-Signature: t=<unix>,v1=<hex hmac-sha256 of \"t.body\">`; durable, retried with backoff.",
            role: Some(Role::Admin),
            body: Some(schema::<webhook::NewWebhook>),
            query: None,
            responses: vec![(201, "Made.", Some(schema::<webhook::WebhookView>), JSON)],
            errors: &[400, 403, 413, 415, 422],
        },
        Operation {
            method: Method::Get,
            path: "/v1/webhooks",
            id: OperationId::ListWebhooks,
            summary: "The namespace's webhooks (never their secrets).",
            role: Some(Role::Admin),
            body: None,
            query: None,
            responses: vec![(200, "Oldest first.", Some(schema::<Vec<webhook::WebhookView>>), JSON)],
            errors: &[403],
        },
        Operation {
            method: Method::Delete,
            path: "/v1/webhooks/{id}",
            id: OperationId::DeleteWebhook,
            summary: "Delete a webhook; its pending deliveries are not attempted again.",
            role: Some(Role::Admin),
            body: None,
            query: None,
            responses: vec![(204, "Deleted.", None, JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Get,
            path: "/v1/webhooks/{id}/deliveries",
            id: OperationId::WebhookDeliveries,
            summary: "The redelivery log: each delivery with its attempts, newest first.",
            role: Some(Role::Admin),
            body: None,
            query: None,
            responses: vec![(200, "Newest first.", Some(schema::<Vec<webhook::DeliveryView>>), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/schedules",
            id: OperationId::CreateSchedules,
            summary: "Keep a registered workflow's `schedules:` in the namespace (created, or replaced keeping what they decided); every worker starts their runs, each tick once.",
            role: Some(Role::Operator),
            body: Some(schema::<schedule::CreateSchedules>),
            query: None,
            responses: vec![(201, "Kept.", Some(schema::<Vec<schedule::ScheduleView>>), JSON)],
            errors: &[400, 403, 404, 409, 413, 415, 422],
        },
        Operation {
            method: Method::Get,
            path: "/v1/schedules",
            id: OperationId::ListSchedules,
            summary: "The namespace's schedules, by workflow and name.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "By name.", Some(schema::<Vec<schedule::ScheduleView>>), JSON)],
            errors: &[403],
        },
        Operation {
            method: Method::Get,
            path: "/v1/schedules/{workflow}/{schedule}",
            id: OperationId::ShowSchedule,
            summary: "A schedule: its spec, next fires, ticks waiting for a run, and last ticks with the run each started or why it started none.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The schedule.", Some(schema::<schedule::ScheduleDetails>), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Delete,
            path: "/v1/schedules/{workflow}/{schedule}",
            id: OperationId::DeleteSchedule,
            summary: "Delete a schedule and its tick records; its runs stay.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(204, "Deleted.", None, JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/schedules/{workflow}/{schedule}/pause",
            id: OperationId::PauseSchedule,
            summary: "Pause a schedule: its ticks start nothing and are recorded `paused`.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Paused.", Some(schema::<schedule::ScheduleView>), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/schedules/{workflow}/{schedule}/resume",
            id: OperationId::ResumeSchedule,
            summary: "Resume a paused schedule from its next tick.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Resumed.", Some(schema::<schedule::ScheduleView>), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/schedules/{workflow}/{schedule}/trigger",
            id: OperationId::TriggerSchedule,
            summary: "Start a run of a schedule now, outside its cadence (recorded as a tick).",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(201, "Started.", Some(schema::<schedule::Triggered>), JSON)],
            errors: &[400, 403, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/schedules/{workflow}/{schedule}/backfill",
            id: OperationId::BackfillSchedule,
            summary: "Start, in the background and at the rate asked, a run for every tick of a past range that started none (before the schedule existed, or skipped: an outage, a pause); a second backfill of the range starts nothing.",
            role: Some(Role::Operator),
            body: Some(schema::<schedule::BackfillRequest>),
            query: None,
            responses: vec![(202, "Accepted: what it starts.", Some(schema::<schedule::BackfillAccepted>), JSON)],
            errors: &[400, 403, 404, 413, 415, 422],
        },
        Operation {
            method: Method::Post,
            path: "/v1/events",
            id: OperationId::SendEvent,
            summary: "Store an event in the namespace (before anything reads it): triggers start runs for it, waits take it. With an idempotency key sent before, nothing is stored and the first event comes back (200).",
            role: Some(Role::Operator),
            body: Some(schema::<trigger::SendEvent>),
            query: None,
            responses: vec![
                (201, "Stored.", Some(schema::<trigger::EventSent>), JSON),
                (
                    200,
                    "Its idempotency key was sent before: the first event.",
                    Some(schema::<trigger::EventSent>),
                    JSON,
                ),
            ],
            errors: &[400, 403, 413, 415, 422],
        },
        Operation {
            method: Method::Get,
            path: "/v1/events",
            id: OperationId::ListEvents,
            summary: "The namespace's events, newest first (`before` pages).",
            role: Some(Role::Viewer),
            body: None,
            query: Some(schema::<trigger::ListEvents>),
            responses: vec![(200, "Newest first.", Some(schema::<Vec<trigger::EventView>>), JSON)],
            errors: &[400, 403],
        },
        Operation {
            method: Method::Get,
            path: "/v1/events/{seq}",
            id: OperationId::ShowEvent,
            summary: "An event and its history: what each trigger did with it (the run it started, or why none).",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The event.", Some(schema::<trigger::EventDetails>), JSON)],
            errors: &[400, 403, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/triggers",
            id: OperationId::CreateTriggers,
            summary: "Keep a registered workflow's `triggers:` in the namespace (created, reading the events stored from now on, or replaced keeping their place); every worker starts their runs, each event once.",
            role: Some(Role::Operator),
            body: Some(schema::<trigger::CreateTriggers>),
            query: None,
            responses: vec![(201, "Kept.", Some(schema::<Vec<trigger::TriggerView>>), JSON)],
            errors: &[400, 403, 404, 409, 413, 415, 422],
        },
        Operation {
            method: Method::Get,
            path: "/v1/triggers",
            id: OperationId::ListTriggers,
            summary: "The namespace's triggers, by workflow and name.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "By name.", Some(schema::<Vec<trigger::TriggerView>>), JSON)],
            errors: &[403],
        },
        Operation {
            method: Method::Get,
            path: "/v1/triggers/{workflow}/{trigger}",
            id: OperationId::ShowTrigger,
            summary: "A trigger: its spec, the events it holds (debounce, batch) and its last fires.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The trigger.", Some(schema::<trigger::TriggerDetails>), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Delete,
            path: "/v1/triggers/{workflow}/{trigger}",
            id: OperationId::DeleteTrigger,
            summary: "Delete a trigger and its fire records; its runs and the events stay.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(204, "Deleted.", None, JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/triggers/{workflow}/{trigger}/pause",
            id: OperationId::PauseTrigger,
            summary: "Pause a trigger: the events it matches start nothing and are recorded `paused`.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Paused.", Some(schema::<trigger::TriggerView>), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/triggers/{workflow}/{trigger}/resume",
            id: OperationId::ResumeTrigger,
            summary: "Resume a paused trigger from the next event.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Resumed.", Some(schema::<trigger::TriggerView>), JSON)],
            errors: &[403, 404],
        },
    ]
    .into_iter()
    .chain(tasks::operations())
    .chain(experiments::operations())
    .collect()
}

/// The schema of `T` with every type it uses spelled out in place (no `$ref`): for the
/// stream's event description, which lives in an extension that tools do not resolve.
fn inline<T: JsonSchema>() -> Value {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.root_schema_for::<T>().to_value();
    if let Some(fields) = schema.as_object_mut() {
        fields.remove("$schema");
        fields.remove("title");
    }
    schema
}

/// One Server-Sent Event as a stream carries it (the OpenAPI 3.2 way of describing a
/// stream's items): a recorded event, with `id` its position, `event` its name and `data`
/// the event as JSON; or, with `?tokens=true`, a `token` event without an `id`.
fn sse_event(_: &mut SchemaGenerator) -> Value {
    json!({
        "oneOf": [
            {
                "type": "object",
                "required": ["id", "event", "data"],
                "properties": {
                    "id": { "type": "string", "pattern": "^[0-9]+$", "description": "The event's position in the run's event sequence." },
                    "event": { "type": "string", "description": "The event's name (`step.started`, `run.completed`, …)." },
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": inline::<stream::StreamedEvent>(),
                    },
                },
            },
            {
                "type": "object",
                "required": ["event", "data"],
                "properties": {
                    "event": { "const": "token" },
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": inline::<stream::StreamedToken>(),
                    },
                },
            },
        ],
    })
}
