//! The remote mode (DESIGN §13): with `--server URL` (or `STEPWRIGHT_SERVER`) and a key in
//! `STEPWRIGHT_API_KEY`, `run`, `runs list/show/events`, `approve`/`reject`/`respond`,
//! `cancel`, `resume`, `replay`, `recompute`, `fork` and `events send|list|describe` call the
//! HTTP API instead of opening a store, with the same output and exit codes. The key decides who the caller is: `--as`,
//! `--role` and `--tenant` are refused rather than ignored; so are `--model`, `--cassette`
//! and `--allow-dir`, which are the server's configuration.

use std::time::Duration;

use anyhow::{Context, anyhow};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::args::{Command, EventsCommand, RunsCommand};
use crate::commands::history::{fork_edits, parse_rebind, print_fork, print_recompute, print_replay};
use crate::exit::{BadInput, exit_code};
use crate::render::{
    local_time, owner_text_of, print_facts, print_list_header, print_list_row, print_report, print_timeline, usage_text,
};
use stepwright::store::event::{EventFire, StoredEvent};
use stepwright::store::schedule::TickOutcome;

/// The longest one request waits for a run; the CLI then asks again.
const WAIT_SECONDS: u64 = 30;

/// A server and the key to call it with.
pub(crate) struct Remote {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl Remote {
    /// The server `--server` names, with the key from `STEPWRIGHT_API_KEY`.
    pub(crate) fn new(server: &str) -> anyhow::Result<Self> {
        let key = std::env::var("STEPWRIGHT_API_KEY")
            .map_err(|_| anyhow!(BadInput("--server needs an API key in STEPWRIGHT_API_KEY".into())))?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().build().context("building the HTTP client")?;
        Ok(Self { base: server.trim_end_matches('/').to_owned(), key, http })
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        self.call_traced(method, path, body, None).await
    }

    /// A call in a trace: the server's spans join the `traceparent` given.
    async fn call_traced(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        traceparent: Option<&stepwright::trace::TraceParent>,
    ) -> anyhow::Result<Value> {
        let mut request = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.key);
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent.as_str());
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.with_context(|| format!("calling {}", self.base))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        Err(problem(status, &body))
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    /// The run once it stops (finishes or waits for a person).
    async fn until_stopped(&self, mut run: Value) -> anyhow::Result<Value> {
        loop {
            let status = run["status"].as_str().unwrap_or_default();
            if !matches!(status, "running" | "pending") {
                return Ok(run);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            run = self.get(&format!("/v1/runs/{}", run["run_id"].as_str().unwrap_or_default())).await?;
        }
    }
}

/// The server's problem document as the command's error: its 4xx are the caller's fault
/// (exit 2), the rest ours (exit 1).
fn problem(status: reqwest::StatusCode, body: &Value) -> anyhow::Error {
    let detail = body["detail"].as_str().unwrap_or("no detail");
    let code = body["code"].as_str().unwrap_or("unknown");
    let message = format!("{detail} ({code}, HTTP {})", status.as_u16());
    if status.is_client_error() { anyhow!(BadInput(format!("stepwright: {message}"))) } else { anyhow!(message) }
}

/// Whether a command has a remote form.
pub(crate) fn supported(command: &Command) -> bool {
    matches!(
        command,
        Command::Run { .. }
            | Command::Runs { .. }
            | Command::Approve { .. }
            | Command::Reject { .. }
            | Command::Respond { .. }
            | Command::Cancel { .. }
            | Command::Send { .. }
            | Command::Wake { .. }
            | Command::Resume { .. }
            | Command::Replay { .. }
            | Command::Recompute { .. }
            | Command::Fork { .. }
            | Command::Events { .. }
    )
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
        Command::Run { file, input, json, detach, priority, concurrency, traceparent, idempotency_key, who } => {
            no_identity(who.tenant.is_some() || who.user.is_some() || !who.roles.is_empty())?;
            let source = crate::host::read_workflow_file(&file)?;
            let registered = remote.post("/v1/workflows", json!({ "source": source })).await?;
            let input = crate::host::parse_input(input.as_deref())?;
            let wait = if detach { 0 } else { WAIT_SECONDS };
            let body = json!({
                "workflow": registered["name"],
                "version": registered["version"],
                "input": input,
                "wait_seconds": wait,
                "priority": priority,
                "concurrency": concurrency.map(|c| json!({ "key": c.key, "limit": c.limit })),
                "idempotency_key": idempotency_key,
            });
            let run = remote.call_traced(reqwest::Method::POST, "/v1/runs", Some(body), traceparent.as_ref()).await?;
            if detach {
                let id = run["run_id"].as_str().unwrap_or_default();
                if json {
                    println!("{}", json!({ "run_id": id, "status": run["status"] }));
                } else {
                    println!("{id}");
                }
                return Ok(0);
            }
            report(&remote.until_stopped(run).await?, json)
        }
        Command::Runs { command } => runs(remote, command).await,
        Command::Approve { run, who, payload, json } => {
            no_identity(who.tenant.is_some() || who.user.is_some() || !who.roles.is_empty())?;
            let body = match payload {
                Some(payload) => {
                    json!({ "decision": "modify", "payload": crate::host::parse_json(&payload, "--payload")? })
                }
                None => json!({ "decision": "approve" }),
            };
            decide(remote, &run, who.interrupt.as_deref(), body, json).await
        }
        Command::Reject { run, who, reason, json } => {
            no_identity(who.tenant.is_some() || who.user.is_some() || !who.roles.is_empty())?;
            decide(remote, &run, who.interrupt.as_deref(), json!({ "decision": "reject", "reason": reason }), json)
                .await
        }
        Command::Respond { run, who, value, json } => {
            no_identity(who.tenant.is_some() || who.user.is_some() || !who.roles.is_empty())?;
            let value = crate::host::parse_json(&value, "--value")?;
            decide(remote, &run, who.interrupt.as_deref(), json!({ "decision": "respond", "value": value }), json).await
        }
        Command::Events { command } => events(remote, command).await,
        Command::Send { run, inbox, message } => {
            let message = crate::host::parse_json(&message, "--message")?;
            remote.post(&format!("/v1/runs/{run}/messages"), json!({ "inbox": inbox, "message": message })).await?;
            println!("sent to inbox {inbox} of run {run}");
            Ok(0)
        }
        Command::Wake { run, channel } => {
            remote.post(&format!("/v1/runs/{run}/messages"), json!({ "wake": channel })).await?;
            println!("woke channel {channel} of run {run}");
            Ok(0)
        }
        Command::Cancel { run, reason, user, wait } => {
            no_identity(user.is_some())?;
            let cancelled = remote.post(&format!("/v1/runs/{run}/cancel"), json!({ "reason": reason })).await?;
            match cancelled["outcome"].as_str() {
                Some("finished") => {
                    let status = cancelled["status"].as_str().unwrap_or_default();
                    eprintln!("run {run} had already finished: {status}");
                    Ok(if status == "cancelled" { 0 } else { 1 })
                }
                Some("cancelled") => {
                    println!("cancelled");
                    Ok(0)
                }
                _ => {
                    let deadline = tokio::time::Instant::now() + wait;
                    loop {
                        let shown = remote.get(&format!("/v1/runs/{run}")).await?;
                        let status = shown["status"].as_str().unwrap_or_default().to_owned();
                        if status == "cancelled" {
                            println!("cancelled");
                            return Ok(0);
                        }
                        if matches!(status.as_str(), "completed" | "failed") {
                            eprintln!("run {run} {status} before the cancel reached it");
                            return Ok(1);
                        }
                        if tokio::time::Instant::now() >= deadline {
                            let owner = cancelled["executed_by"].as_str().unwrap_or("another process");
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
            let resumed =
                remote.post(&format!("/v1/runs/{run}/resume"), json!({ "wait_seconds": WAIT_SECONDS })).await?;
            report(&remote.until_stopped(resumed).await?, json)
        }
        Command::Replay { run, json } => {
            let report = remote.post(&format!("/v1/runs/{run}/replay"), json!({})).await?;
            print_replay(&serde_json::from_value(report).context("the server's answer is not a replay report")?, json)
        }
        Command::Recompute { run, file, from, rebind, persist, json } => {
            let mut body = json!({ "from": from, "persist": persist, "models": parse_rebind(&rebind)? });
            if let Some(file) = file {
                // The new definition is registered, then named by its version.
                let shown = remote.get(&format!("/v1/runs/{run}")).await?;
                let source = crate::host::read_workflow_file(&file)?;
                let registered = remote.post("/v1/workflows", json!({ "source": source })).await?;
                if registered["name"] != shown["workflow"] {
                    return Err(anyhow!(BadInput(format!(
                        "{} is workflow {}, run {run} is of workflow {}: over --server a run is recomputed with a \
                         version of its own workflow",
                        file.display(),
                        registered["name"],
                        shown["workflow"]
                    ))));
                }
                body["version"] = registered["version"].clone();
            }
            let report = remote.post(&format!("/v1/runs/{run}/recompute"), body).await?;
            print_recompute(
                &serde_json::from_value(report).context("the server's answer is not a recompute report")?,
                json,
            )
        }
        Command::Fork { run, at, set, json } => {
            let patch = fork_edits(set.as_deref())?;
            let body = json!({ "at": at, "input": patch.input, "steps": patch.outputs });
            let forked = remote.post(&format!("/v1/runs/{run}/fork"), body).await?;
            let id =
                forked["run_id"].as_str().and_then(|id| id.parse().ok()).context("the server's answer names no run")?;
            let status =
                serde_json::from_value(forked["status"].clone()).context("the server's answer has no status")?;
            print_fork(id, status, crate::host::parse_run(&run)?, &at, json, true);
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
async fn decide(remote: &Remote, run: &str, interrupt: Option<&str>, body: Value, json: bool) -> anyhow::Result<u8> {
    let shown = as_report(&remote.get(&format!("/v1/runs/{run}")).await?)?;
    let interrupt = stepwright::app::only_interrupt(&shown, interrupt)?.to_string();
    remote.post(&format!("/v1/interrupts/{run}.{interrupt}/decision"), body).await?;
    // The server continues the run (or its runner claims it); wait for it to finish or stop
    // again. A run still suspended with no other interrupt open may not have been picked up
    // yet: looked at again for up to 2 s (past that it waits on something else: a timer).
    let decided_at = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut after = remote.get(&format!("/v1/runs/{run}")).await?;
    loop {
        let pending: Vec<&str> = after["pending"]
            .as_array()
            .map(|p| p.iter().filter_map(|i| i["id"].as_str()).collect())
            .unwrap_or_default();
        let ours_open = pending.contains(&interrupt.as_str());
        let not_yet_continued = pending.is_empty() && decided_at.elapsed() < Duration::from_secs(2);
        if after["status"] != "suspended" || !(ours_open || not_yet_continued) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        after = remote.get(&format!("/v1/runs/{run}")).await?;
    }
    report(&remote.until_stopped(after).await?, json)
}

/// A run as the server shows it, read as the report the local commands print: the same
/// printing, the same exit code. (The API's error has no `retryable`; a report printed here
/// does not need it.)
fn as_report(run: &Value) -> anyhow::Result<stepwright::RunReport> {
    let mut run = run.clone();
    if let Some(error) = run["error"].as_object_mut() {
        error.entry("retryable").or_insert(json!(false));
    }
    serde_json::from_value(run).context("the server's answer is not a run")
}

/// Prints a run as `run --json` / the run's output, and answers its exit code.
fn report(run: &Value, json: bool) -> anyhow::Result<u8> {
    let report = as_report(run)?;
    print_report(&report, json);
    Ok(exit_code(report.status))
}

async fn runs(remote: &Remote, command: RunsCommand) -> anyhow::Result<u8> {
    match command {
        RunsCommand::List { status, workflow, limit, before, json } => {
            if limit == 0 {
                return Err(anyhow!(BadInput("--limit must be at least 1".into())));
            }
            let mut query = vec![format!("limit={limit}"), "usage=true".to_owned()];
            if let Some(status) = status {
                query.push(format!("status={}", status.as_str()));
            }
            if let Some(workflow) = workflow {
                query.push(format!("workflow={workflow}"));
            }
            if let Some(before) = before {
                query.push(format!("cursor={before}"));
            }
            let page = remote.get(&format!("/v1/runs?{}", query.join("&"))).await?;
            let runs = page["runs"].as_array().cloned().unwrap_or_default();
            if json {
                for run in &runs {
                    println!(
                        "{}",
                        json!({ "run_id": run["run_id"], "workflow": run["workflow"], "status": run["status"], "created_at": run["created_at"], "updated_at": run["updated_at"], "owner": run["owner"], "lease_expires_at": run["lease_expires_at"], "usage": run["usage"] })
                    );
                }
            } else {
                print_list_header();
                let now = crate::host::wall_now();
                for run in &runs {
                    let status: stepwright::RunStatus =
                        serde_json::from_value(run["status"].clone()).context("a listed run without a status")?;
                    let lease = run["owner"]
                        .as_str()
                        .zip(run["lease_expires_at"].as_i64().map(stepwright::Timestamp::from_micros));
                    let time =
                        |field: &str| stepwright::Timestamp::from_micros(run[field].as_i64().unwrap_or_default());
                    let usage: Option<stepwright::llm::Totals> = serde_json::from_value(run["usage"].clone()).ok();
                    print_list_row(
                        run["run_id"].as_str().unwrap_or_default(),
                        run["workflow"].as_str().unwrap_or_default(),
                        status,
                        (time("created_at"), time("updated_at")),
                        usage.as_ref(),
                        &owner_text_of(status, lease, now),
                    );
                }
            }
            if let Some(cursor) = page["next_cursor"].as_str() {
                eprintln!("more runs: stepwright runs list --before {cursor} --limit {limit}");
            }
            Ok(0)
        }
        RunsCommand::Erase { .. } | RunsCommand::Prune { .. } => Err(anyhow!(BadInput(
            "runs erase and runs prune act on a store: give it with --db (or STEPWRIGHT_DB), not --server".into()
        ))),
        RunsCommand::Show { run, json } => {
            let shown = remote.get(&format!("/v1/runs/{run}")).await?;
            if json {
                println!("{shown}");
                return Ok(0);
            }
            println!(
                "run {} ({}) {}",
                run,
                shown["workflow"].as_str().unwrap_or_default(),
                shown["status"].as_str().unwrap_or_default()
            );
            let children = remote.get(&format!("/v1/runs?parent={run}&limit=50")).await?;
            let forks: Vec<String> = children["runs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["run_id"].as_str().map(str::to_owned))
                .collect();
            print_facts(&shown, &forks);
            if let Some(owner) = shown["owner"].as_str().filter(|_| shown["status"] == "running") {
                println!("  executed by {owner}");
            }
            if let Some(reason) = shown["queued"]["reason"].as_str() {
                println!("  queued: {reason}");
            }
            print_timeline(shown["steps"].as_array().map(Vec::as_slice).unwrap_or_default());
            if shown["usage"].is_object() {
                println!("  model usage:{}", usage_text(&shown["usage"]));
            }
            for pending in shown["pending"].as_array().into_iter().flatten() {
                println!(
                    "  waiting: {} at {} — {}",
                    pending["id"].as_str().unwrap_or_default(),
                    pending["step"].as_str().unwrap_or_default(),
                    pending["message"].as_str().unwrap_or_default()
                );
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
                return Err(problem(status, &response.json().await.unwrap_or(Value::Null)));
            }
            let mut events = response.bytes_stream().eventsource();
            // Without --follow, what is there now: the stream is read until it ends or is
            // quiet for a moment (a waiting run's stream stays open).
            let quiet = if follow { Duration::from_secs(u64::MAX >> 2) } else { Duration::from_millis(300) };
            while let Ok(Some(event)) = tokio::time::timeout(quiet, events.next()).await {
                let event = event.context("reading the event stream")?;
                let record: stepwright::journal::EventRecord =
                    serde_json::from_str(&event.data).context("an event that is not one")?;
                if json {
                    println!("{}", serde_json::to_string(&record)?);
                } else {
                    println!(
                        "{} {:<24} {:<20} {}",
                        local_time(record.at),
                        record.kind,
                        record.path.as_str(),
                        record.data
                    );
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
            let sent = remote
                .post("/v1/events", json!({ "name": name, "payload": payload, "idempotency_key": idempotency_key }))
                .await?;
            print_sent(&stored_event(&sent["event"])?, sent["created"] == json!(true), json);
        }
        EventsCommand::List { name, limit, tenant, json } => {
            refuse_tenant(&tenant)?;
            let mut params = vec![("limit", limit.min(500).to_string())];
            params.extend(name.map(|name| ("name", name)));
            let query = reqwest::Url::parse_with_params("http://query/", &params).context("a query")?;
            let listed = remote.get(&format!("/v1/events?{}", query.query().unwrap_or_default())).await?;
            let events = listed.as_array().map(Vec::as_slice).unwrap_or_default();
            print_list(&events.iter().map(stored_event).collect::<anyhow::Result<Vec<_>>>()?, json);
        }
        EventsCommand::Describe { seq, tenant, json } => {
            refuse_tenant(&tenant)?;
            let shown = remote.get(&format!("/v1/events/{seq}")).await?;
            let fires: Vec<EventFire> = shown["fires"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|fire| EventFire {
                    trigger: fire["trigger"].as_str().unwrap_or_default().to_owned(),
                    event: fire["event"].as_u64().unwrap_or_default(),
                    outcome: match fire["run_id"].as_str().and_then(|run| run.parse().ok()) {
                        Some(run) => TickOutcome::Started { run },
                        None => {
                            TickOutcome::Skipped { reason: fire["skipped"].as_str().unwrap_or_default().to_owned() }
                        }
                    },
                    recorded_at: stepwright::Timestamp::from_micros(0),
                })
                .collect();
            print_described(&stored_event(&shown)?, &fires, json);
        }
    }
    Ok(0)
}

/// An event as the API shows it (`EventView`), as the store keeps it.
fn stored_event(view: &Value) -> anyhow::Result<StoredEvent> {
    Ok(StoredEvent {
        seq: view["seq"].as_u64().context("an event without `seq`")?,
        tenant: None,
        name: view["name"].as_str().unwrap_or_default().to_owned(),
        payload: view["payload"].clone(),
        idempotency_key: view["idempotency_key"].as_str().map(str::to_owned),
        received_at: stepwright::Timestamp::from_micros(view["received_at"].as_i64().unwrap_or_default()),
    })
}
