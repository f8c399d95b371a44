//! `POST /v1/webhooks`, `GET /v1/webhooks`, `DELETE /v1/webhooks/{id}` and
//! `GET /v1/webhooks/{id}/deliveries` (the redelivery log). Managing webhooks is an admin's.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;
use stepwright_api::webhook::{AttemptView, DeliveryView, NewWebhook, WebhookView};
use stepwright_store::control::{Delivery, DeliveryState, Webhook};

use super::Body;
use super::audit;
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::Shared;
use crate::webhooks::EVENTS;

/// A webhook as the API shows it.
fn webhook_view(webhook: &Webhook) -> WebhookView {
    WebhookView {
        id: webhook.id.clone(),
        url: webhook.url.clone(),
        events: webhook.events.clone(),
        created_at: webhook.created_at.as_micros(),
    }
}

/// A delivery as the API shows it.
fn delivery_view(delivery: Delivery) -> DeliveryView {
    let state = match delivery.state {
        DeliveryState::Pending => "pending",
        DeliveryState::Delivered => "delivered",
        DeliveryState::Failed => "failed",
    };
    DeliveryView {
        id: delivery.id,
        event: delivery.event,
        state: state.into(),
        next_attempt_at: (delivery.state == DeliveryState::Pending).then(|| delivery.next_attempt_at.as_micros()),
        attempts: delivery
            .attempts
            .into_iter()
            .map(|a| AttemptView { at: a.at.as_micros(), status: a.status, error: a.error })
            .collect(),
        body: serde_json::from_str(&delivery.body).unwrap_or(serde_json::Value::Null),
    }
}

/// `POST /v1/webhooks` (admin).
pub(crate) async fn create(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Body(body): Body<NewWebhook>,
) -> Result<(StatusCode, Json<WebhookView>), ApiError> {
    who.require(Role::Admin)?;
    // A public destination only (or one the operator allows): checked with its name
    // resolved now, and again at every delivery.
    shared.destinations.check_registered(&body.url).await.map_err(|refused| ApiError::bad_request(refused.0))?;
    if body.events.is_empty() {
        return Err(ApiError::bad_request(format!("events must name at least one of {}", EVENTS.join(", "))));
    }
    if let Some(unknown) = body.events.iter().find(|e| !EVENTS.contains(&e.as_str())) {
        return Err(ApiError::bad_request(format!("event {unknown:?}: the events are {}", EVENTS.join(", "))));
    }
    if body.secret.chars().count() < 16 {
        return Err(ApiError::bad_request("secret must be 16 characters or more"));
    }
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| ApiError::internal(format!("no randomness for an id: {e}")))?;
    let webhook = Webhook {
        id: format!("swh{}", hex::encode(random)),
        namespace: who.namespace().to_owned(),
        url: body.url,
        events: body.events,
        secret: body.secret,
        created_at: shared.now(),
    };
    shared.store.create_webhook(webhook.clone()).await?;
    audit(
        &shared,
        &who,
        "webhook.created",
        webhook.id.clone(),
        json!({ "url": webhook.url, "events": webhook.events }),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(webhook_view(&webhook))))
}

/// `GET /v1/webhooks` (admin).
pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    who: Principal,
) -> Result<Json<Vec<WebhookView>>, ApiError> {
    who.require(Role::Admin)?;
    let webhooks = shared.store.webhooks(Some(who.namespace())).await?;
    Ok(Json(webhooks.iter().map(webhook_view).collect()))
}

/// `DELETE /v1/webhooks/{id}` (admin): `204`; its pending deliveries are not attempted again.
pub(crate) async fn delete(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    who.require(Role::Admin)?;
    if !shared.store.delete_webhook(who.namespace(), &id, shared.now()).await? {
        return Err(ApiError::not_found("not_found", format!("no webhook {id:?}")));
    }
    audit(&shared, &who, "webhook.deleted", id, json!({})).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/webhooks/{id}/deliveries` (admin): the redelivery log, newest first.
pub(crate) async fn deliveries(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<Vec<DeliveryView>>, ApiError> {
    who.require(Role::Admin)?;
    if !shared.store.webhooks(Some(who.namespace())).await?.iter().any(|w| w.id == id) {
        return Err(ApiError::not_found("not_found", format!("no webhook {id:?}")));
    }
    let deliveries = shared.store.deliveries(who.namespace(), &id, 200).await?;
    Ok(Json(deliveries.into_iter().map(delivery_view).collect()))
}
