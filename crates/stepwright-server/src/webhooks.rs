//! Webhooks: a namespace's events posted to its URLs, durably. Two loops per server:
//!
//! - **finding** reads, per namespace with webhooks, the runs changed since its watermark
//!   (kept in the store) and adds one delivery per (webhook, event) to the outbox — keyed, so
//!   an event found twice (by two servers, or again after a crash) is delivered once;
//! - **delivering** leases due deliveries (no two servers send one at once), posts each
//!   with `Stepwright-Signature: t=<unix>,v1=<hex hmac-sha256 of "t.body">`, and records the
//!   attempt: delivered on a 2xx, else again after a backoff (1 s doubling to 10 min), failed
//!   after the last attempt. A server killed mid-delivery leaves the row leased; its lease
//!   lapses and any server sends it again.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use stepwright_api as api;
use stepwright_api::webhook::{WebhookInterrupt, WebhookPayload};
use stepwright_app::wire;
use stepwright_core::store::RunFilter;
use stepwright_core::{Clock, RunStatus, Timestamp};
use stepwright_store::ServerStore;
use stepwright_store::control::{Attempt, Delivery, DeliveryState, NewDelivery, Webhook};
use tokio_util::sync::CancellationToken;

use crate::destination::{DestinationPolicy, Refused};

/// The events a webhook may ask for.
pub(crate) const EVENTS: [&str; 4] = WebhookPayload::EVENTS;

/// How often each loop looks for work.
const EVERY: Duration = Duration::from_millis(200);

/// A window re-read behind the watermark: runs are stamped by the processes that write them,
/// whose clocks and commits do not line up exactly; a delivery found twice is sent once.
const SLACK: Duration = Duration::from_secs(5);

/// How many changed runs one read takes (the watermark carries the rest to the next turn).
const PER_READ: usize = 200;

/// How many attempts a delivery gets.
const MAX_ATTEMPTS: usize = 12;

/// How long a delivery is leased to the server sending it.
const LEASE: Duration = Duration::from_secs(30);

/// The longest a receiver is waited for.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The wait before attempt `n + 1` after `n` failed ones.
fn backoff(failed: usize) -> Duration {
    let exponent = u32::try_from(failed.saturating_sub(1)).unwrap_or(u32::MAX).min(10);
    Duration::from_secs(1u64 << exponent).min(Duration::from_secs(600))
}

/// Runs both loops until `stop`.
pub(crate) async fn run(
    store: Arc<dyn ServerStore>,
    destinations: DestinationPolicy,
    metrics: Option<Arc<dyn crate::metrics::ServerMetrics>>,
    stop: CancellationToken,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Names resolve through the policy, so a connection goes only to an address it allowed;
    // no redirect is followed (a public receiver must not bounce a delivery inwards), and no
    // proxy from the environment is used (it would resolve the name itself).
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .dns_resolver(destinations.clone())
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build();
    let Ok(http) = client else { return };
    let http = Sender { http, destinations };
    let clock = stepwright_core::TokioClock::new();
    loop {
        // A store that fails is asked again at the next turn; nothing is lost meanwhile.
        let _ = find(store.as_ref(), clock.now()).await;
        let _ = deliver(store.as_ref(), &http, metrics.as_deref(), clock.now()).await;
        tokio::select! {
            () = tokio::time::sleep(EVERY) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Adds the deliveries of every run changed since each namespace's watermark.
async fn find(store: &dyn ServerStore, now: Timestamp) -> Result<(), stepwright_core::StoreError> {
    let webhooks = store.webhooks(None).await?;
    let mut namespaces: Vec<&str> = webhooks.iter().map(|w| w.namespace.as_str()).collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    for namespace in namespaces {
        let hooks: Vec<&Webhook> = webhooks.iter().filter(|w| w.namespace == namespace).collect();
        // A webhook hears of what changes after it is made.
        let first = hooks.iter().map(|w| w.created_at).min().unwrap_or(now);
        let watermark = store.webhook_watermark(namespace).await?.unwrap_or(first);
        let behind = Timestamp::from_micros(watermark.as_micros() - i64::try_from(SLACK.as_micros()).unwrap_or(0));
        // Two reads: the slack behind the watermark (late commits), and forward from it —
        // each bounded, so a busy window behind cannot hold the watermark back.
        let mut reached = watermark;
        let mut reads = vec![behind.max(first), watermark.max(first)];
        reads.dedup();
        for since in reads {
            let filter = RunFilter {
                tenant: Some(namespace.to_owned()),
                updated_since: Some(since),
                headers_only: false,
                limit: Some(PER_READ),
                ..RunFilter::default()
            };
            for run in &store.list_runs(filter).await? {
                for (key, body) in events_of(store, run).await? {
                    let event = body.event();
                    let wanted: Vec<&&Webhook> = hooks
                        .iter()
                        .filter(|w| w.events.iter().any(|e| *e == event) && w.created_at <= run.updated_at)
                        .collect();
                    if wanted.is_empty() {
                        continue;
                    }
                    let body = serde_json::to_string(&body).expect("a payload is JSON");
                    for hook in wanted {
                        let delivery = NewDelivery {
                            webhook_id: hook.id.clone(),
                            namespace: namespace.to_owned(),
                            event_key: key.clone(),
                            event: event.to_owned(),
                            body: body.clone(),
                            at: now,
                        };
                        store.enqueue_delivery(delivery).await?;
                    }
                }
                if since >= watermark {
                    reached = reached.max(run.updated_at);
                }
            }
        }
        store.set_webhook_watermark(namespace, reached).await?;
    }
    Ok(())
}

/// The webhook events of a run so far, each with its delivery key: each interrupt it
/// opened (and the stop it made for it), read from its journal so that a stop decided before
/// this looked is not missed; its end; and a stop on a timer it is in now.
async fn events_of(
    store: &dyn ServerStore,
    run: &stepwright_core::RunRecord,
) -> Result<Vec<(String, WebhookPayload)>, stepwright_core::StoreError> {
    let (run_id, workflow) = (run.id.to_string(), run.workflow.clone());
    let mut events = Vec::new();
    let loaded = store.load(run.id).await?;
    for entry in &loaded.entries {
        if let stepwright_core::Record::InterruptOpened { id, request, deadline } = &entry.record {
            let interrupt = WebhookInterrupt {
                id: id.to_string(),
                step: entry.path.as_str().to_owned(),
                kind: wire::interrupt_kind(request.kind),
                message: request.message.clone(),
                payload: request.payload.clone(),
                deadline: deadline.map(Timestamp::as_micros),
                decide: format!("/v1/interrupts/{}.{id}/decision", run.id),
            };
            let at = entry.at.as_micros();
            let opened = WebhookPayload::InterruptOpened {
                run_id: run_id.clone(),
                workflow: workflow.clone(),
                at,
                interrupt: interrupt.clone(),
            };
            events.push((format!("interrupt.opened:{}:{id}", run.id), opened));
            let stopped = WebhookPayload::RunSuspended {
                run_id: run_id.clone(),
                workflow: workflow.clone(),
                at,
                status: api::RunStatus::Suspended,
                interrupt: Some(interrupt),
                wake_at: None,
            };
            events.push((format!("run.suspended:{}:{id}", run.id), stopped));
        }
    }
    let (at, status) = (run.updated_at.as_micros(), wire::run_status(run.status));
    match run.status {
        RunStatus::Completed => {
            let output = run.output.clone().unwrap_or(Value::Null);
            let body = WebhookPayload::RunCompleted { run_id, workflow, at, status, output };
            events.push((format!("run.completed:{}", run.id), body));
        }
        RunStatus::Failed => {
            let error =
                run.error.as_ref().map(|e| api::ErrorView { code: e.code.to_string(), message: e.message.clone() });
            let body = WebhookPayload::RunFailed { run_id, workflow, at, status, error };
            events.push((format!("run.failed:{}", run.id), body));
        }
        // A stop with no interrupt (a timer): once per time it is found stopped.
        RunStatus::Suspended if loaded.open_interrupts().is_empty() => {
            let key = format!("run.suspended:{}:at:{at}", run.id);
            let wake_at = run.wake_at.map(Timestamp::as_micros);
            events.push((key, WebhookPayload::RunSuspended { run_id, workflow, at, status, interrupt: None, wake_at }));
        }
        _ => {}
    }
    Ok(events)
}

/// Sends the due deliveries this server could lease.
async fn deliver(
    store: &dyn ServerStore,
    http: &Sender,
    metrics: Option<&dyn crate::metrics::ServerMetrics>,
    now: Timestamp,
) -> Result<(), stepwright_core::StoreError> {
    let due = store.claim_deliveries(now, LEASE, 32).await?;
    if due.is_empty() {
        return Ok(());
    }
    let webhooks = store.webhooks(None).await?;
    for delivery in due {
        let Some(hook) = webhooks.iter().find(|w| w.id == delivery.webhook_id) else { continue };
        let (attempt, refused) = send(http, hook, &delivery).await;
        let failed = delivery.attempts.len() + 1;
        let clock = stepwright_core::TokioClock::new();
        let (state, next) = match attempt.status {
            Some(status) if (200..300).contains(&status) => (DeliveryState::Delivered, clock.now()),
            // A destination the policy refuses stays refused: no attempt is worth repeating.
            _ if failed >= MAX_ATTEMPTS || refused => (DeliveryState::Failed, clock.now()),
            _ => (DeliveryState::Pending, clock.now().plus(backoff(failed))),
        };
        store.record_attempt(delivery.id, attempt, state, next).await?;
        if let Some(metrics) = metrics {
            metrics.webhook_delivery(
                &hook.namespace,
                match state {
                    DeliveryState::Delivered => "delivered",
                    DeliveryState::Failed => "failed",
                    _ => "retrying",
                },
            );
        }
    }
    Ok(())
}

/// The delivery client and the policy its resolver applies.
struct Sender {
    http: reqwest::Client,
    destinations: DestinationPolicy,
}

/// Posts one delivery: the attempt, and whether the destination was refused (nothing was
/// sent, and the log says only why).
async fn send(sender: &Sender, hook: &Webhook, delivery: &Delivery) -> (Attempt, bool) {
    let clock = stepwright_core::TokioClock::new();
    let at = clock.now();
    let unix = at.as_micros() / 1_000_000;
    // A literal address is checked here (the resolver sees only names); a webhook stored
    // before the policy existed, or an allow-list since narrowed, is refused the same way.
    if let Err(refused) = sender.destinations.check_url(&hook.url) {
        return (Attempt { at, status: None, error: Some(format!("destination refused: {refused}")) }, true);
    }
    let sent = sender
        .http
        .post(&hook.url)
        .header("content-type", "application/json")
        .header("stepwright-signature", stepwright_llm::signature(&hook.secret, unix, delivery.body.as_bytes()))
        .header("stepwright-event", &delivery.event)
        .header("stepwright-delivery", delivery.id.to_string())
        .body(delivery.body.clone())
        .send()
        .await;
    match sent {
        Ok(response) => {
            let status = response.status().as_u16();
            let error = (!response.status().is_success()).then(|| format!("the receiver answered {status}"));
            (Attempt { at, status: Some(status), error }, false)
        }
        Err(error) => {
            // The resolver's refusal is somewhere in the error's chain.
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
            while let Some(cause) = source {
                if let Some(refused) = cause.downcast_ref::<Refused>() {
                    return (
                        Attempt { at, status: None, error: Some(format!("destination refused: {refused}")) },
                        true,
                    );
                }
                source = cause.source();
            }
            let why = if error.is_timeout() {
                "the receiver did not answer in time"
            } else if error.is_connect() {
                "the receiver could not be reached"
            } else {
                "the request failed"
            };
            // The innermost cause says what happened (a TLS certificate, a refused connection).
            let mut innermost: &(dyn std::error::Error + 'static) = &error;
            while let Some(cause) = innermost.source() {
                innermost = cause;
            }
            (Attempt { at, status: None, error: Some(format!("{why}: {innermost}")) }, false)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn backoff_doubles_to_ten_minutes() {
        let waits: Vec<u64> = (1..=12).map(|n| super::backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 600, 600]);
    }
}
