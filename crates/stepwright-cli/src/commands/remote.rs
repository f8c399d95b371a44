//! The remote mode (DESIGN §13): with `--server URL` (or `STEPWRIGHT_SERVER`) and a key in
//! `STEPWRIGHT_API_KEY`, `run`, `runs list/show/events`, `approve`/`reject`/`respond`,
//! `cancel`, `resume`, `replay`, `recompute`, `fork`, `events send|list|describe`, `schedules` and
//! `triggers` (`remote_schedules`) call the
//! HTTP API instead of opening a store, with the same output and exit codes. The key decides who the caller is: `--as`,
//! `--role` and `--tenant` are refused rather than ignored; so are `--model`, `--cassette`
//! and `--allow-dir`, which are the server's configuration.

use std::time::Duration;

use anyhow::{Context, anyhow};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use stepwright::api::interrupt::{DecisionBody, DecisionKind, DecisionTaken, TimerWoken};
use stepwright::api::run::{
    CancelOutcome, CancelRun, Cancelled, ConcurrencyGroup, ResumeRun, RunMessage, RunPage, StartRun, Stored,
};
use stepwright::api::stream::StreamedEvent;
use stepwright::api::trigger::{EventDetails, EventSent, EventView, SendEvent};
use stepwright::api::workflow::{RegisterWorkflow, WorkflowVersion};
use stepwright::api::{Problem, RecomputeView, ReplayReport, RunDetails, RunStatus};

use crate::args::{Command, EventsCommand, RunsCommand};
use crate::commands::history::{fork_edits, parse_rebind, print_fork, print_recompute, print_replay};
use crate::exit::BadInput;
use crate::render::{
    owner_text_of, print_facts, print_list_header, print_list_row, print_run, print_timeline, usage_text,
};
use crate::time::micros_time;
use stepwright::store::event::StoredEvent;

/// The longest one request waits for a run; the CLI then asks again.
const WAIT_SECONDS: f64 = 30.0;

/// A server and the key to call it with.
pub(crate) struct Remote {
    base: String,
    key: String,
    http: reqwest::Client,
}

/// No request body.
const NO_BODY: Option<&()> = None;

impl Remote {
    /// The server `--server` names, with the key from `STEPWRIGHT_API_KEY`.
    pub(crate) fn new(server: &str) -> anyhow::Result<Self> {
        let key = std::env::var("STEPWRIGHT_API_KEY")
            .map_err(|_| anyhow!(BadInput("--server needs an API key in STEPWRIGHT_API_KEY".into())))?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().build().context("building the HTTP client")?;
        Ok(Self { base: server.trim_end_matches('/').to_owned(), key, http })
    }

    /// A call in a trace (the server's spans join the `traceparent` given), its answer read
    /// as the contract's type for it.
    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&impl Serialize>,
        traceparent: Option<&stepwright::trace::TraceParent>,
    ) -> anyhow::Result<T> {
        let mut request = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.key);
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent.as_str());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.with_context(|| format!("calling {}", self.base))?;
        let status = response.status();
        if !status.is_success() {
            return Err(problem(status, response.json().await.ok()));
        }
        let text = response.text().await.with_context(|| format!("reading the answer to {path}"))?;
        serde_json::from_str(&text).with_context(|| format!("the answer to {path} is not what the API promises"))
    }

    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.call(reqwest::Method::GET, path, NO_BODY, None).await
    }

    pub(crate) async fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> anyhow::Result<T> {
        self.call(reqwest::Method::POST, path, Some(body), None).await
    }

    /// A `DELETE`, answered `204` with nothing.
    pub(crate) async fn delete(&self, path: &str) -> anyhow::Result<()> {
        let request = self.http.delete(format!("{}{path}", self.base)).bearer_auth(&self.key);
        let response = request.send().await.with_context(|| format!("calling {}", self.base))?;
        let status = response.status();
        if !status.is_success() {
            return Err(problem(status, response.json().await.ok()));
        }
        Ok(())
    }

    /// The step workers the server heard from.
    pub(crate) async fn workers(&self) -> anyhow::Result<stepwright::api::task::WorkerList> {
        self.get("/v1/workers").await
    }

    /// Who in the key's namespace could meet an approver list.
    pub(crate) async fn check_approvers(
        &self,
        approvers: &[String],
    ) -> anyhow::Result<stepwright::api::interrupt::ApproversChecked> {
        let body = stepwright::api::interrupt::CheckApprovers { approvers: approvers.to_vec() };
        self.post("/v1/approvers/check", &body).await
    }

    async fn run(&self, run: &str) -> anyhow::Result<RunDetails> {
        self.get(&format!("/v1/runs/{run}")).await
    }

    /// Registers a workflow file with the files it calls (as this machine reads them: the
    /// server has no disk of ours).
    pub(crate) async fn register(&self, file: &std::path::Path) -> anyhow::Result<WorkflowVersion> {
        let source = crate::host::read_workflow_file(file)?;
        // A file that does not load here is sent as it is: the server says what is wrong.
        let files = stepwright::flow::load_with(file, &stepwright::flow::LoadOptions::default())
            .ok()
            .and_then(|loaded| loaded.called_files)
            .unwrap_or_default();
        self.post("/v1/workflows", &RegisterWorkflow { source, files }).await
    }

    /// The run once it stops (finishes or waits for a person).
    async fn until_stopped(&self, mut run: RunDetails) -> anyhow::Result<RunDetails> {
        while !run.status.has_stopped() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            run = self.run(&run.run_id).await?;
        }
        Ok(run)
    }
}

/// The server's problem document as the command's error: its 4xx are the caller's fault
/// (exit 2), the rest ours (exit 1).
fn problem(status: reqwest::StatusCode, body: Option<Problem>) -> anyhow::Error {
    let (detail, code) = body.map_or_else(|| ("no detail".to_owned(), "unknown".to_owned()), |p| (p.detail, p.code));
    let message = format!("{detail} ({code}, HTTP {})", status.as_u16());
    if status.is_client_error() { anyhow!(BadInput(format!("stepwright: {message}"))) } else { anyhow!(message) }
}

/// Runs a command against the server.
pub(crate) async fn dispatch(remote: &Remote, command: Command) -> anyhow::Result<u8> {
    let no_identity = |given: bool| -> anyhow::Result<()> {
        if given {
            return Err(anyhow!(BadInput(
                "with --server the API key is the caller: --as, --role and --tenant are not taken".into()
            )));
        }
        Ok(())
    };
    match command {
        Command::Run { file, input, json, detach, priority, concurrency, traceparent, idempotency_key, tags, who } => {
            no_identity(who.tenant.is_some() || who.user.is_some() || !who.roles.is_empty())?;
            let registered = remote.register(&file).await?;
            let start = StartRun {
                workflow: registered.name,
                version: Some(registered.version),
                input: crate::host::parse_input(input.as_deref())?,
                idempotency_key,
                wait_seconds: Some(if detach { 0.0 } else { WAIT_SECONDS }),
                priority,
                concurrency: concurrency.map(|c| ConcurrencyGroup { key: c.key, limit: c.limit }),
                tags,
            };
            let run: RunDetails =
                remote.call(reqwest::Method::POST, "/v1/runs", Some(&start), traceparent.as_ref()).await?;
            if detach {
                if json {
                    println!("{}", serde_json::json!({ "run_id": run.run_id, "status": run.status }));
                } else {
                    println!("{}", run.run_id);
                }
                return Ok(0);
            }
            Ok(print_run(&remote.until_stopped(run).await?, json))
        }
        Command::Runs { command } => runs(remote, command).await,
        Command::Approve { run, who, payload, json } => {
            no_identity(who.tenant.is_some() || who.user.is_some() || !who.roles.is_empty())?;
            let body = match payload {
                Some(payload) => DecisionBody {
                    decision: DecisionKind::Modify,
                    payload: Some(crate::host::parse_json(&payload, "--payload")?),
                    value: None,
                    reason: None,
                },
                None => DecisionBody { decision: DecisionKind::Approve, payload: None, value: None, reason: None },
            };
            decide(remote, &run, who.interrupt.as_deref(), body, json).await
        }
        Command::Reject { run, who, reason, json } => {
            no_identity(who.tenant.is_some() || who.user.is_some() || !who.roles.is_empty())?;
            let body = DecisionBody { decision: DecisionKind::Reject, payload: None, value: None, reason };
            decide(remote, &run, who.interrupt.as_deref(), body, json).await
        }
        Command::Respond { run, who, value, json } => {
            no_identity(who.tenant.is_some() || who.user.is_some() || !who.roles.is_empty())?;
            let value = Some(crate::host::parse_json(&value, "--value")?);
            let body = DecisionBody { decision: DecisionKind::Respond, payload: None, value, reason: None };
            decide(remote, &run, who.interrupt.as_deref(), body, json).await
        }
        Command::Events { command } => events(remote, command).await,
        Command::Send { run, inbox, message } => {
            let message = crate::host::parse_json(&message, "--message")?;
            let body = RunMessage { inbox: Some(inbox.clone()), message: Some(message), wake: None };
            let _: Stored = remote.post(&format!("/v1/runs/{run}/messages"), &body).await?;
            println!("sent to inbox {inbox} of run {run}");
            Ok(0)
        }
        Command::Wake { run, channel: Some(channel), .. } => {
            let body = RunMessage { inbox: None, message: None, wake: Some(channel.clone()) };
            let _: Stored = remote.post(&format!("/v1/runs/{run}/messages"), &body).await?;
            println!("woke channel {channel} of run {run}");
            Ok(0)
        }
        Command::Wake { run, timer, json, .. } => {
            let shown: RunDetails = remote.get(&format!("/v1/runs/{run}")).await?;
            let timer = stepwright::app::only_timer(&shown, timer.as_ref().and_then(Option::as_deref))?;
            let path = format!("/v1/interrupts/{run}.{timer}/wake");
            let woken: TimerWoken = remote.post(&path, &serde_json::json!({})).await?;
            if json {
                println!("{}", serde_json::to_string(&woken)?);
            } else {
                println!("woke timer {timer} of run {run}; the run is {}", woken.status.as_str());
            }
            Ok(0)
        }
        Command::Cancel { run, reason, user, wait } => {
            no_identity(user.is_some())?;
            let cancelled: Cancelled =
                remote.post(&format!("/v1/runs/{run}/cancel"), &CancelRun { reason: Some(reason) }).await?;
            match cancelled.outcome {
                CancelOutcome::Finished => {
                    eprintln!("run {run} had already finished: {}", cancelled.status.as_str());
                    Ok(if cancelled.status == RunStatus::Cancelled { 0 } else { 1 })
                }
                CancelOutcome::Cancelled => {
                    println!("cancelled");
                    Ok(0)
                }
                CancelOutcome::Requested => {
                    let deadline = tokio::time::Instant::now() + wait;
                    loop {
                        let status = remote.run(&run).await?.status;
                        if status == RunStatus::Cancelled {
                            println!("cancelled");
                            return Ok(0);
                        }
                        if matches!(status, RunStatus::Completed | RunStatus::Failed) {
                            eprintln!("run {run} {} before the cancel reached it", status.as_str());
                            return Ok(1);
                        }
                        if tokio::time::Instant::now() >= deadline {
                            let owner = cancelled.executed_by.as_deref().unwrap_or("another process");
                            eprintln!("cancel of run {run} asked; {owner} executes it and has not stopped it yet");
                            return Ok(0);
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
        Command::Resume { run, json, tenant } => {
            no_identity(tenant.is_some())?;
            let body = ResumeRun { wait_seconds: Some(WAIT_SECONDS) };
            let resumed: RunDetails = remote.post(&format!("/v1/runs/{run}/resume"), &body).await?;
            Ok(print_run(&remote.until_stopped(resumed).await?, json))
        }
        Command::Replay { run, json } => {
            let report: ReplayReport =
                remote.call(reqwest::Method::POST, &format!("/v1/runs/{run}/replay"), NO_BODY, None).await?;
            print_replay(&report, json)
        }
        Command::Recompute { run, file, from, rebind, persist, json } => {
            let mut body = stepwright::api::history::RecomputeRun {
                from,
                version: None,
                models: parse_rebind(&rebind)?,
                persist,
                source: None,
                files: Default::default(),
            };
            if let Some(file) = file {
                // The edited file travels with the request and is registered nowhere: a
                // what-if never changes what later runs start with.
                body.source = Some(crate::host::read_workflow_file(&file)?);
            }
            let report: RecomputeView = remote.post(&format!("/v1/runs/{run}/recompute"), &body).await?;
            print_recompute(&report, json)
        }
        Command::Fork { run, at, set, json } => {
            let patch = fork_edits(set.as_deref())?;
            let body = stepwright::api::history::ForkRun {
                at: at.clone(),
                input: patch.input,
                steps: patch.outputs.into_iter().collect(),
                wait_seconds: None,
            };
            let forked: RunDetails = remote.post(&format!("/v1/runs/{run}/fork"), &body).await?;
            let id = forked.run_id.parse().context("the server's answer names no run")?;
            print_fork(id, forked.status, crate::host::parse_run(&run)?, &at, json, true);
            Ok(0)
        }
        other => {
            let _ = other;
            Err(anyhow!(BadInput("this command is not available with --server (it needs the store)".into())))
        }
    }
}

/// Decides the run's interrupt (the only open one unless `--interrupt`), then prints the run
/// once it stops.
async fn decide(
    remote: &Remote,
    run: &str,
    interrupt: Option<&str>,
    body: DecisionBody,
    json: bool,
) -> anyhow::Result<u8> {
    let shown = remote.run(run).await?;
    let interrupt = stepwright::app::only_interrupt(&shown, interrupt)?.to_string();
    let _: DecisionTaken = remote.post(&format!("/v1/interrupts/{run}.{interrupt}/decision"), &body).await?;
    // The server continues the run (or its runner claims it); wait for it to finish or stop
    // again. A run still suspended with no other interrupt open may not have been picked up
    // yet: looked at again for up to 2 s (past that it waits on something else: a timer).
    let decided_at = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut after = remote.run(run).await?;
    loop {
        let ours_open = after.pending.iter().any(|p| p.id == interrupt);
        let not_yet_continued = after.pending.is_empty() && decided_at.elapsed() < Duration::from_secs(2);
        if after.status != RunStatus::Suspended || !(ours_open || not_yet_continued) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        after = remote.run(run).await?;
    }
    Ok(print_run(&remote.until_stopped(after).await?, json))
}

async fn runs(remote: &Remote, command: RunsCommand) -> anyhow::Result<u8> {
    match command {
        RunsCommand::List { status, workflow, limit, before, started_by, tag, json } => {
            if limit == 0 {
                return Err(anyhow!(BadInput("--limit must be at least 1".into())));
            }
            let filters = [
                ("status", status.map(|s| s.as_str().to_owned())),
                ("workflow", workflow.clone()),
                ("started-by", started_by.clone()),
                ("tag", tag.clone()),
            ];
            let mut query = vec![("limit", limit.to_string()), ("usage", "true".to_owned())];
            query.extend(status.map(|status| ("status", status.as_str().to_owned())));
            query.extend(workflow.map(|workflow| ("workflow", workflow)));
            query.extend(before.map(|before| ("cursor", before)));
            query.extend(started_by.map(|who| ("started_by", who)));
            query.extend(tag.map(|tag| ("tag", tag)));
            let url = reqwest::Url::parse_with_params("http://query/", &query).context("a query")?;
            let page: RunPage = remote.get(&format!("/v1/runs?{}", url.query().unwrap_or_default())).await?;
            if json {
                for run in &page.runs {
                    println!(
                        "{}",
                        serde_json::json!({ "run_id": run.run_id, "workflow": run.workflow, "status": run.status, "created_at": run.created_at, "updated_at": run.updated_at, "started_by": run.started_by, "tags": run.tags, "owner": run.owner, "lease_expires_at": run.lease_expires_at, "usage": run.usage })
                    );
                }
            } else {
                print_list_header();
                let now = crate::time::wall_now();
                for run in &page.runs {
                    let lease = run.owner.as_deref().zip(run.lease_expires_at.map(stepwright::Timestamp::from_micros));
                    print_list_row(
                        &run.run_id,
                        &run.workflow,
                        run.status,
                        (
                            stepwright::Timestamp::from_micros(run.created_at),
                            stepwright::Timestamp::from_micros(run.updated_at),
                        ),
                        run.usage.as_ref(),
                        run.started_by.as_ref(),
                        &owner_text_of(run.status, lease, now),
                    );
                }
            }
            if let Some(cursor) = &page.next_cursor {
                let filters: Vec<(&str, Option<&str>)> = filters.iter().map(|(f, v)| (*f, v.as_deref())).collect();
                eprintln!("more runs: {}", crate::render::next_runs_page(&filters, json, cursor, limit));
            }
            Ok(0)
        }
        RunsCommand::Erase { .. } | RunsCommand::Prune { .. } => Err(anyhow!(BadInput(
            "runs erase and runs prune act on a store: give it with --db (or STEPWRIGHT_DB), not --server".into()
        ))),
        RunsCommand::Show { run, json } => {
            let shown = remote.run(&run).await?;
            if json {
                println!("{}", serde_json::to_string(&shown)?);
                return Ok(0);
            }
            println!("run {} ({}) {}", run, shown.workflow, shown.status.as_str());
            let children: RunPage = remote.get(&format!("/v1/runs?parent={run}&limit=50")).await?;
            let forks: Vec<String> = children.runs.into_iter().map(|r| r.run_id).collect();
            print_facts(&shown, &forks);
            if let Some(owner) = shown.owner.as_deref().filter(|_| shown.status == RunStatus::Running) {
                println!("  executed by {owner}");
            }
            if let Some(queued) = &shown.queued {
                println!("  queued: {}", queued.reason);
            }
            print_timeline(&shown.steps);
            if let Some(usage) = &shown.usage {
                println!("  model usage:{}", usage_text(usage));
            }
            for pending in &shown.pending {
                println!("  waiting: {} at {} — {}", pending.id, pending.step, pending.message);
            }
            Ok(0)
        }
        RunsCommand::Events { run, follow, json } => {
            let response = remote
                .http
                .get(format!("{}/v1/runs/{run}/events", remote.base))
                .bearer_auth(&remote.key)
                .send()
                .await
                .with_context(|| format!("calling {}", remote.base))?;
            if !response.status().is_success() {
                let status = response.status();
                return Err(problem(status, response.json().await.ok()));
            }
            let mut events = response.bytes_stream().eventsource();
            // Without --follow, what is there now: the stream is read until it ends or is
            // quiet for a moment (a waiting run's stream stays open).
            let quiet = if follow { Duration::from_secs(u64::MAX >> 2) } else { Duration::from_millis(300) };
            while let Ok(Some(event)) = tokio::time::timeout(quiet, events.next()).await {
                let event = event.context("reading the event stream")?;
                let record: StreamedEvent = serde_json::from_str(&event.data).context("an event that is not one")?;
                if json {
                    println!("{}", serde_json::to_string(&record)?);
                } else {
                    println!("{} {:<24} {:<20} {}", micros_time(record.at), record.kind, record.path, record.data);
                }
            }
            Ok(0)
        }
    }
}

/// `events send|list|describe` through the API, printed as the local commands print.
async fn events(remote: &Remote, command: EventsCommand) -> anyhow::Result<u8> {
    use crate::commands::events::{print_described, print_list, print_sent};
    let refuse_tenant = |tenant: &Option<String>| -> anyhow::Result<()> {
        match tenant {
            Some(_) => Err(anyhow!(BadInput(
                "with --server the API key's namespace is the tenant: --tenant is not taken".into()
            ))),
            None => Ok(()),
        }
    };
    match command {
        EventsCommand::Send { name, payload, idempotency_key, tenant, json } => {
            refuse_tenant(&tenant)?;
            let payload = crate::host::parse_input(Some(&payload))
                .map_err(|e| anyhow!(BadInput(e.to_string().replace("the input", "the payload"))))?;
            let sent: EventSent = remote.post("/v1/events", &SendEvent { name, payload, idempotency_key }).await?;
            print_sent(&stored_event(sent.event), sent.created, json);
        }
        EventsCommand::List { name, limit, tenant, json } => {
            refuse_tenant(&tenant)?;
            let mut params = vec![("limit", limit.min(500).to_string())];
            params.extend(name.map(|name| ("name", name)));
            let query = reqwest::Url::parse_with_params("http://query/", &params).context("a query")?;
            let listed: Vec<EventView> =
                remote.get(&format!("/v1/events?{}", query.query().unwrap_or_default())).await?;
            print_list(&listed.into_iter().map(stored_event).collect::<Vec<_>>(), json);
        }
        EventsCommand::Describe { seq, tenant, json } => {
            refuse_tenant(&tenant)?;
            let shown: EventDetails = remote.get(&format!("/v1/events/{seq}")).await?;
            print_described(&shown, json);
        }
    }
    Ok(0)
}

/// An event as the API shows it, as the store keeps it (for the local commands' printers).
fn stored_event(view: EventView) -> StoredEvent {
    StoredEvent {
        seq: view.seq,
        tenant: None,
        name: view.name,
        payload: view.payload,
        idempotency_key: view.idempotency_key,
        received_at: stepwright::Timestamp::from_micros(view.received_at),
    }
}
