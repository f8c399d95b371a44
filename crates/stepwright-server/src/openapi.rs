//! The OpenAPI 3.1 document, generated from the request and response types themselves
//! (their JSON Schemas) and the table of operations below, which names each route's types.
//! The committed `docs/openapi.json` is this document; a test keeps the two in step.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::keys::Role;
use crate::problem::Problem;
use crate::routes::{auth, events, history, hooks, interrupts, links, runs, schedules, session, triggers, workflows};

/// One operation: a method on a path, with its types.
struct Operation {
    method: &'static str,
    path: &'static str,
    id: &'static str,
    summary: &'static str,
    /// The role it needs (`None`: no key at all).
    role: Option<Role>,
    body: Option<Value>,
    query: Option<Value>,
    /// Status, description, body schema (`None`: no JSON body), content type.
    responses: Vec<(u16, &'static str, Option<Value>, &'static str)>,
    /// The error statuses it answers besides 401, 429 and 500.
    errors: &'static [u16],
}

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
    generator.subschema_for::<T>().to_value()
}

fn operations(g: &mut SchemaGenerator) -> Vec<Operation> {
    let run = schema::<stepwright_app::RunDetails>(g);
    vec![
        Operation {
            method: "get",
            path: "/v1/health",
            id: "health",
            summary: "Liveness: `{\"status\":\"ok\"}`.",
            role: None,
            body: None,
            query: None,
            responses: vec![(200, "The server is up.", Some(schema::<crate::routes::meta::Health>(g)), JSON)],
            errors: &[],
        },
        Operation {
            method: "get",
            path: "/metrics",
            id: "metrics",
            summary: "What this server's process counts, in the Prometheus text format: runs started and finished by workflow and status, step and model-call durations, tokens and cost by model, time to first chunk, queue depth, claim latency, lease takeovers, webhook deliveries. Across every tenant, so an admin's to read; `404` when the host keeps no metrics.",
            role: Some(Role::Admin),
            body: None,
            query: None,
            responses: vec![(
                200,
                "The metrics.",
                Some(json!({ "type": "string" })),
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            errors: &[403, 404],
        },
        Operation {
            method: "get",
            path: "/v1/openapi.json",
            id: "openapi",
            summary: "This document.",
            role: None,
            body: None,
            query: None,
            responses: vec![(200, "The OpenAPI 3.1 document.", Some(json!({ "type": "object" })), JSON)],
            errors: &[],
        },
        Operation {
            method: "get",
            path: "/v1/auth",
            id: "authMethods",
            summary: "How one may sign in here: with an API key, and through an OpenID Connect provider if one is set up.",
            role: None,
            body: None,
            query: None,
            responses: vec![(200, "The ways to sign in.", Some(schema::<auth::AuthMethods>(g)), JSON)],
            errors: &[],
        },
        Operation {
            method: "get",
            path: "/v1/auth/oidc/start",
            id: "oidcStart",
            summary: "Start signing in through the OpenID Connect provider: `302` to it (authorization code with PKCE), with the state in a ten-minute HttpOnly cookie.",
            role: None,
            body: None,
            query: None,
            responses: vec![(302, "Off to the provider.", None, JSON)],
            errors: &[404, 502],
        },
        Operation {
            method: "get",
            path: "/v1/auth/oidc/callback",
            id: "oidcCallback",
            summary: "Where the provider sends the browser back: the code is exchanged, the ID token checked, the groups mapped; an HTML page that signs the browser in (the session cookie) or says why not.",
            role: None,
            body: None,
            query: Some(schema::<auth::Callback>(g)),
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
            method: "post",
            path: "/v1/session",
            id: "signIn",
            summary: "Sign a browser in with an API key: `201` and an HttpOnly, `SameSite=Strict` cookie holding a session key (12 hours at most, revoked with the key). A request the cookie authenticates changes nothing without the `X-Stepwright-Csrf` header.",
            role: None,
            body: Some(schema::<session::SignIn>(g)),
            query: None,
            responses: vec![(
                201,
                "Signed in; `Set-Cookie` holds the session.",
                Some(schema::<session::Session>(g)),
                JSON,
            )],
            errors: &[400, 401, 413, 415, 422, 429],
        },
        Operation {
            method: "get",
            path: "/v1/session",
            id: "showSession",
            summary: "Who the request is from: namespace, user, roles, the key in use.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The caller.", Some(schema::<session::Session>(g)), JSON)],
            errors: &[],
        },
        Operation {
            method: "delete",
            path: "/v1/session",
            id: "signOut",
            summary: "Sign out: the session's key is revoked and the cookie cleared (`400` for a request that carries an API key instead).",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(204, "Signed out.", None, JSON)],
            errors: &[403, 409],
        },
        Operation {
            method: "post",
            path: "/v1/workflows",
            id: "registerWorkflow",
            summary: "Register a workflow file (and the files it calls); each new source of a name is its next version.",
            role: Some(Role::Admin),
            body: Some(schema::<workflows::RegisterWorkflow>(g)),
            query: None,
            responses: vec![
                (201, "Registered as a new version.", Some(schema::<workflows::WorkflowVersion>(g)), JSON),
                (
                    200,
                    "This source was registered before: its version.",
                    Some(schema::<workflows::WorkflowVersion>(g)),
                    JSON,
                ),
            ],
            errors: &[400, 403, 413, 415, 422],
        },
        Operation {
            method: "get",
            path: "/v1/workflows",
            id: "listWorkflows",
            summary: "The namespace's registered workflows.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "By name.", Some(schema::<Vec<workflows::WorkflowSummary>>(g)), JSON)],
            errors: &[],
        },
        Operation {
            method: "get",
            path: "/v1/workflows/{name}",
            id: "showWorkflow",
            summary: "One workflow: its versions, input schema and graph.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The workflow.", Some(schema::<workflows::WorkflowDetails>(g)), JSON)],
            errors: &[404],
        },
        Operation {
            method: "post",
            path: "/v1/runs",
            id: "startRun",
            summary: "Start a run of a registered workflow (idempotent with `idempotency_key`).",
            role: Some(Role::Operator),
            body: Some(schema::<runs::StartRun>(g)),
            query: None,
            responses: vec![
                (
                    201,
                    "Started; finished or waiting for a person if it did within `wait_seconds`.",
                    Some(run.clone()),
                    JSON,
                ),
                (202, "Started and still running after `wait_seconds`.", Some(run.clone()), JSON),
                (200, "The run this idempotency key started before.", Some(run.clone()), JSON),
            ],
            errors: &[400, 403, 404, 409, 413, 415, 422],
        },
        Operation {
            method: "get",
            path: "/v1/runs",
            id: "listRuns",
            summary: "The namespace's runs, newest first, paged by `next_cursor`.",
            role: Some(Role::Viewer),
            body: None,
            query: Some(schema::<runs::ListRuns>(g)),
            responses: vec![(200, "A page.", Some(schema::<runs::RunPage>(g)), JSON)],
            errors: &[400],
        },
        Operation {
            method: "get",
            path: "/v1/runs/{id}",
            id: "showRun",
            summary: "A run: status, output, error, pending interrupts, steps, usage (the `runs show --json` shape).",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The run.", Some(run.clone()), JSON)],
            errors: &[404],
        },
        Operation {
            method: "get",
            path: "/v1/runs/{id}/definition",
            id: "showRunDefinition",
            summary: "The structure of the definition the run is pinned to (its version, not necessarily the newest).",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The run's graph.", Some(schema::<runs::RunDefinition>(g)), JSON)],
            errors: &[404],
        },
        Operation {
            method: "get",
            path: "/v1/runs/{id}/artifacts/{hash}",
            id: "showArtifact",
            summary: "An artifact a step of the run captured (a model call's input or output, a tool call), by its content hash.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The artifact.", Some(schema::<runs::Artifact>(g)), JSON)],
            errors: &[404],
        },
        Operation {
            method: "get",
            path: "/v1/runs/{id}/events",
            id: "streamRunEvents",
            summary: "The run's events as Server-Sent Events; `id:` is the event's position, `Last-Event-ID` or `?after=` resumes.",
            role: Some(Role::Viewer),
            body: None,
            query: Some(schema::<events::StreamFrom>(g)),
            responses: vec![(200, "The event stream; it ends after the run's final event.", Some(sse_event(g)), SSE)],
            errors: &[400, 404],
        },
        Operation {
            method: "post",
            path: "/v1/runs/{id}/cancel",
            id: "cancelRun",
            summary: "Cancel a run, wherever it executes.",
            role: Some(Role::Operator),
            body: Some(schema::<runs::CancelRun>(g)),
            query: None,
            responses: vec![(200, "What the cancel did.", Some(schema::<runs::Cancelled>(g)), JSON)],
            errors: &[403, 404, 413, 422],
        },
        Operation {
            method: "post",
            path: "/v1/runs/{id}/resume",
            id: "resumeRun",
            summary: "Continue a pending or suspended run, or one a dead process left running; a finished run is answered as it ended.",
            role: Some(Role::Operator),
            body: Some(schema::<runs::ResumeRun>(g)),
            query: None,
            responses: vec![
                (200, "It finished (or had finished) or stopped again.", Some(run.clone()), JSON),
                (202, "Still running.", Some(run.clone()), JSON),
            ],
            errors: &[400, 403, 404, 409, 413, 422],
        },
        Operation {
            method: "post",
            path: "/v1/runs/{id}/messages",
            id: "messageRun",
            summary: "A message to a loop's inbox, or a wake-up of an `every` channel; answered once stored.",
            role: Some(Role::Operator),
            body: Some(schema::<runs::RunMessage>(g)),
            query: None,
            responses: vec![(202, "Stored.", Some(schema::<runs::Stored>(g)), JSON)],
            errors: &[400, 403, 404, 413, 415, 422],
        },
        Operation {
            method: "post",
            path: "/v1/runs/{id}/replay",
            id: "replayRun",
            summary: "Re-execute a run in a sandbox with its own definition, serving every recorded effect; compare step by step (nothing is written).",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(
                200,
                "The comparison; `identical` says whether every step and the output came out the same.",
                Some(schema::<stepwright_core::ReplayReport>(g)),
                JSON,
            )],
            errors: &[403, 404, 422],
        },
        Operation {
            method: "post",
            path: "/v1/runs/{id}/recompute",
            id: "recomputeRun",
            summary: "Re-execute a run (or from a step), optionally with another registered version or model binding, and report what changed.",
            role: Some(Role::Operator),
            body: Some(schema::<history::RecomputeRun>(g)),
            query: None,
            responses: vec![(
                200,
                "What changed, step by step; `changed` gates CI as the CLI's exit code does; `usage` compares the model calls' tokens and cost.",
                Some(schema::<stepwright_app::RecomputeView>(g)),
                JSON,
            )],
            errors: &[400, 403, 404, 413, 422],
        },
        Operation {
            method: "post",
            path: "/v1/runs/{id}/fork",
            id: "forkRun",
            summary: "A new run from the checkpoint before a step, optionally with a new input or step outputs.",
            role: Some(Role::Operator),
            body: Some(schema::<history::ForkRun>(g)),
            query: None,
            responses: vec![(201, "The new run (lineage: this run and the step).", Some(run), JSON)],
            errors: &[400, 403, 404, 413, 415, 422],
        },
        Operation {
            method: "get",
            path: "/v1/interrupts",
            id: "interruptInbox",
            summary: "The approvals inbox: every open interrupt of the namespace the key may decide.",
            role: Some(Role::Viewer),
            body: None,
            query: Some(schema::<interrupts::InboxQuery>(g)),
            responses: vec![(200, "Oldest run first.", Some(schema::<Vec<interrupts::InboxItem>>(g)), JSON)],
            errors: &[400],
        },
        Operation {
            method: "post",
            path: "/v1/interrupts/{id}/decision",
            id: "decideInterrupt",
            summary: "Decide an interrupt as the key's user; the run then continues.",
            role: Some(Role::Approver),
            body: Some(schema::<interrupts::DecisionBody>(g)),
            query: None,
            responses: vec![(200, "Decided.", Some(schema::<interrupts::DecisionTaken>(g)), JSON)],
            errors: &[400, 403, 404, 409, 413, 415, 422],
        },
        Operation {
            method: "post",
            path: "/v1/interrupts/{id}/link",
            id: "createLink",
            summary: "A signed-in-free link that decides this interrupt once, as the caller; it expires (default one hour) and is spent by its decision.",
            role: Some(Role::Approver),
            body: Some(schema::<links::NewLink>(g)),
            query: None,
            responses: vec![(201, "The link; send its `url`.", Some(schema::<links::LinkMade>(g)), JSON)],
            errors: &[400, 403, 404, 409, 413, 422],
        },
        Operation {
            method: "get",
            path: "/v1/link",
            id: "showLink",
            summary: "With an approval link's key: the request it decides.",
            role: Some(Role::Approver),
            body: None,
            query: None,
            responses: vec![(200, "The open request.", Some(schema::<links::LinkView>(g)), JSON)],
            errors: &[409, 410],
        },
        Operation {
            method: "post",
            path: "/v1/link/decision",
            id: "decideByLink",
            summary: "With an approval link's key: decide its interrupt, once, as the approver who made the link.",
            role: Some(Role::Approver),
            body: Some(schema::<interrupts::DecisionBody>(g)),
            query: None,
            responses: vec![(200, "Decided; the link is spent.", Some(schema::<interrupts::DecisionTaken>(g)), JSON)],
            errors: &[400, 403, 404, 409, 410, 413, 415, 422],
        },
        Operation {
            method: "post",
            path: "/v1/webhooks",
            id: "createWebhook",
            summary: "Post the namespace's events to a URL, signed with `Stepwright-Signature: t=<unix>,v1=<hex hmac-sha256 of \"t.body\">`; durable, retried with backoff.",
            role: Some(Role::Admin),
            body: Some(schema::<hooks::NewWebhook>(g)),
            query: None,
            responses: vec![(201, "Made.", Some(schema::<hooks::WebhookView>(g)), JSON)],
            errors: &[400, 403, 413, 415, 422],
        },
        Operation {
            method: "get",
            path: "/v1/webhooks",
            id: "listWebhooks",
            summary: "The namespace's webhooks (never their secrets).",
            role: Some(Role::Admin),
            body: None,
            query: None,
            responses: vec![(200, "Oldest first.", Some(schema::<Vec<hooks::WebhookView>>(g)), JSON)],
            errors: &[403],
        },
        Operation {
            method: "delete",
            path: "/v1/webhooks/{id}",
            id: "deleteWebhook",
            summary: "Delete a webhook; its pending deliveries are not attempted again.",
            role: Some(Role::Admin),
            body: None,
            query: None,
            responses: vec![(204, "Deleted.", None, JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: "get",
            path: "/v1/webhooks/{id}/deliveries",
            id: "webhookDeliveries",
            summary: "The redelivery log: each delivery with its attempts, newest first.",
            role: Some(Role::Admin),
            body: None,
            query: None,
            responses: vec![(200, "Newest first.", Some(schema::<Vec<hooks::DeliveryView>>(g)), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: "post",
            path: "/v1/schedules",
            id: "createSchedules",
            summary: "Keep a registered workflow's `schedules:` in the namespace (created, or replaced keeping what they decided); every worker starts their runs, each tick once.",
            role: Some(Role::Operator),
            body: Some(schema::<schedules::CreateSchedules>(g)),
            query: None,
            responses: vec![(201, "Kept.", Some(schema::<Vec<schedules::ScheduleView>>(g)), JSON)],
            errors: &[400, 403, 404, 409, 413, 415, 422],
        },
        Operation {
            method: "get",
            path: "/v1/schedules",
            id: "listSchedules",
            summary: "The namespace's schedules, by workflow and name.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "By name.", Some(schema::<Vec<schedules::ScheduleView>>(g)), JSON)],
            errors: &[403],
        },
        Operation {
            method: "get",
            path: "/v1/schedules/{workflow}/{schedule}",
            id: "showSchedule",
            summary: "A schedule: its spec, next fires, ticks waiting for a run, and last ticks with the run each started or why it started none.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The schedule.", Some(schema::<schedules::ScheduleDetails>(g)), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: "delete",
            path: "/v1/schedules/{workflow}/{schedule}",
            id: "deleteSchedule",
            summary: "Delete a schedule and its tick records; its runs stay.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(204, "Deleted.", None, JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: "post",
            path: "/v1/schedules/{workflow}/{schedule}/pause",
            id: "pauseSchedule",
            summary: "Pause a schedule: its ticks start nothing and are recorded `paused`.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Paused.", Some(schema::<schedules::ScheduleView>(g)), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: "post",
            path: "/v1/schedules/{workflow}/{schedule}/resume",
            id: "resumeSchedule",
            summary: "Resume a paused schedule from its next tick.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Resumed.", Some(schema::<schedules::ScheduleView>(g)), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: "post",
            path: "/v1/schedules/{workflow}/{schedule}/trigger",
            id: "triggerSchedule",
            summary: "Start a run of a schedule now, outside its cadence (recorded as a tick).",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(201, "Started.", Some(schema::<schedules::Triggered>(g)), JSON)],
            errors: &[400, 403, 404],
        },
        Operation {
            method: "post",
            path: "/v1/schedules/{workflow}/{schedule}/backfill",
            id: "backfillSchedule",
            summary: "Start, in the background and at the rate asked, a run for every tick of a past range that started none (before the schedule existed, or skipped: an outage, a pause); a second backfill of the range starts nothing.",
            role: Some(Role::Operator),
            body: Some(schema::<schedules::BackfillRequest>(g)),
            query: None,
            responses: vec![(202, "Accepted: what it starts.", Some(schema::<schedules::BackfillAccepted>(g)), JSON)],
            errors: &[400, 403, 404, 413, 415, 422],
        },
        Operation {
            method: "post",
            path: "/v1/events",
            id: "sendEvent",
            summary: "Store an event in the namespace (before anything reads it): triggers start runs for it, waits take it. With an idempotency key sent before, nothing is stored and the first event comes back (200).",
            role: Some(Role::Operator),
            body: Some(schema::<triggers::SendEvent>(g)),
            query: None,
            responses: vec![
                (201, "Stored.", Some(schema::<triggers::EventSent>(g)), JSON),
                (
                    200,
                    "Its idempotency key was sent before: the first event.",
                    Some(schema::<triggers::EventSent>(g)),
                    JSON,
                ),
            ],
            errors: &[400, 403, 413, 415, 422],
        },
        Operation {
            method: "get",
            path: "/v1/events",
            id: "listEvents",
            summary: "The namespace's events, newest first (`before` pages).",
            role: Some(Role::Viewer),
            body: None,
            query: Some(schema::<triggers::ListEvents>(g)),
            responses: vec![(200, "Newest first.", Some(schema::<Vec<triggers::EventView>>(g)), JSON)],
            errors: &[400, 403],
        },
        Operation {
            method: "get",
            path: "/v1/events/{seq}",
            id: "showEvent",
            summary: "An event and its history: what each trigger did with it (the run it started, or why none).",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The event.", Some(schema::<triggers::EventDetails>(g)), JSON)],
            errors: &[400, 403, 404],
        },
        Operation {
            method: "post",
            path: "/v1/triggers",
            id: "createTriggers",
            summary: "Keep a registered workflow's `triggers:` in the namespace (created, reading the events stored from now on, or replaced keeping their place); every worker starts their runs, each event once.",
            role: Some(Role::Operator),
            body: Some(schema::<triggers::CreateTriggers>(g)),
            query: None,
            responses: vec![(201, "Kept.", Some(schema::<Vec<triggers::TriggerView>>(g)), JSON)],
            errors: &[400, 403, 404, 409, 413, 415, 422],
        },
        Operation {
            method: "get",
            path: "/v1/triggers",
            id: "listTriggers",
            summary: "The namespace's triggers, by workflow and name.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "By name.", Some(schema::<Vec<triggers::TriggerView>>(g)), JSON)],
            errors: &[403],
        },
        Operation {
            method: "get",
            path: "/v1/triggers/{workflow}/{trigger}",
            id: "showTrigger",
            summary: "A trigger: its spec, the events it holds (debounce, batch) and its last fires.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The trigger.", Some(schema::<triggers::TriggerDetails>(g)), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: "delete",
            path: "/v1/triggers/{workflow}/{trigger}",
            id: "deleteTrigger",
            summary: "Delete a trigger and its fire records; its runs and the events stay.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(204, "Deleted.", None, JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: "post",
            path: "/v1/triggers/{workflow}/{trigger}/pause",
            id: "pauseTrigger",
            summary: "Pause a trigger: the events it matches start nothing and are recorded `paused`.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Paused.", Some(schema::<triggers::TriggerView>(g)), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: "post",
            path: "/v1/triggers/{workflow}/{trigger}/resume",
            id: "resumeTrigger",
            summary: "Resume a paused trigger from the next event.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Resumed.", Some(schema::<triggers::TriggerView>(g)), JSON)],
            errors: &[403, 404],
        },
    ]
}

/// One Server-Sent Event as a stream carries it (the OpenAPI 3.2 way of describing a
/// stream's items): a recorded event, with `id` its position, `event` its name and `data`
/// the event as JSON; or, with `?tokens=true`, a `token` event without an `id`.
fn sse_event(g: &mut SchemaGenerator) -> Value {
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
                        "contentSchema": schema::<events::StreamedEvent>(g),
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
                        "contentSchema": schema::<crate::feed::StreamedToken>(g),
                    },
                },
            },
        ],
    })
}

/// The document.
pub fn document() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut generator = settings.into_generator();
    let problem = schema::<Problem>(&mut generator);
    let operations = operations(&mut generator);
    let mut paths: Map<String, Value> = Map::new();
    for op in operations {
        let mut parameters: Vec<Value> = path_parameters(op.path);
        if let Some(query) = &op.query {
            parameters.extend(query_parameters(query, generator.definitions()));
        }
        if op.method == "post" && op.path == "/v1/runs" {
            parameters.push(json!({
                "name": "traceparent",
                "in": "header",
                "required": false,
                "description": "W3C Trace Context: the run's first activation is traced as a child of this span (a malformed value is ignored, as the recommendation says).",
                "schema": { "type": "string" },
            }));
        }
        let mut responses: Map<String, Value> = Map::new();
        for (status, description, body, content_type) in op.responses {
            let mut response = json!({ "description": description });
            if let Some(body) = body {
                response["content"] = json!({ content_type: { "schema": body } });
            }
            responses.insert(status.to_string(), response);
        }
        let mut errors: Vec<u16> = op.errors.to_vec();
        if op.role.is_some() {
            errors.extend([401, 429]);
        }
        errors.push(500);
        for status in errors {
            let description =
                axum::http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Error");
            responses.insert(
                status.to_string(),
                json!({ "description": description, "content": { "application/problem+json": { "schema": problem } } }),
            );
        }
        let mut operation = json!({
            "operationId": op.id,
            "summary": op.summary,
            "parameters": parameters,
            "responses": responses,
        });
        match op.role {
            None => operation["security"] = json!([]),
            Some(role) => {
                operation["description"] = json!(format!("Needs a key with the `{}` role.", role.as_str()));
            }
        }
        if let Some(body) = op.body {
            operation["requestBody"] = json!({ "required": op.method == "post" && !matches!(op.id, "cancelRun" | "resumeRun" | "recomputeRun" | "createLink"), "content": { JSON: { "schema": body } } });
        }
        paths.entry(op.path).or_insert_with(|| json!({}))[op.method] = operation;
    }
    let mut schemas = Value::Object(generator.take_definitions(true));
    let mut paths = Value::Object(paths);
    bound_integers(&mut schemas);
    bound_integers(&mut paths);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Stepwright",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Durable AI-agent workflows over HTTP: register workflows, start runs, stream their events, decide their interrupts. Errors are application/problem+json with a stable `code`.",
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "apiKey": { "type": "http", "scheme": "bearer", "description": "An API key from `stepwright keys create`." },
                "session": { "type": "apiKey", "in": "cookie", "name": "stepwright_session", "description": "A browser's session from `POST /v1/session`; a request it authenticates that changes anything also sends `X-Stepwright-Csrf`." },
            },
        },
        "security": [{ "apiKey": [] }, { "session": [] }],
    })
}

/// Integer schemas with the range of the type the server reads them into (schemars gives
/// the `format` and, for unsigned types, the minimum): a number out of it is refused, so
/// the document says so.
fn bound_integers(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            let range: Option<(Value, Value)> = match fields.get("format").and_then(Value::as_str) {
                Some("uint8") => Some((json!(0), json!(u8::MAX))),
                Some("uint16") => Some((json!(0), json!(u16::MAX))),
                Some("uint32") => Some((json!(0), json!(u32::MAX))),
                Some("uint64" | "uint") => Some((json!(0), json!(u64::MAX))),
                Some("int32") => Some((json!(i32::MIN), json!(i32::MAX))),
                Some("int64" | "int") => Some((json!(i64::MIN), json!(i64::MAX))),
                _ => None,
            };
            if let Some((min, max)) = range {
                fields.entry("minimum").or_insert(min);
                fields.entry("maximum").or_insert(max);
            }
            fields.values_mut().for_each(bound_integers);
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

fn path_parameters(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|part| part.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
        .map(|name| {
            // An event's sequence number is a whole number; every other path segment a name.
            let schema = match name {
                "seq" => json!({ "type": "integer", "minimum": 0, "maximum": i64::MAX }),
                _ => json!({ "type": "string" }),
            };
            json!({ "name": name, "in": "path", "required": true, "schema": schema })
        })
        .collect()
}

/// A query type's properties as query parameters.
fn query_parameters(schema: &Value, definitions: &Map<String, Value>) -> Vec<Value> {
    let resolved = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .and_then(|name| definitions.get(name))
        .unwrap_or(schema);
    let required: Vec<&str> =
        resolved["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    resolved["properties"]
        .as_object()
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| {
                    let mut parameter = json!({
                        "name": name,
                        "in": "query",
                        "required": required.contains(&name.as_str()),
                        "schema": property,
                    });
                    if let Some(description) = property.get("description") {
                        parameter["description"] = description.clone();
                    }
                    parameter
                })
                .collect()
        })
        .unwrap_or_default()
}
