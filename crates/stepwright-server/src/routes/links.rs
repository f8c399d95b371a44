//! Approval links: one interrupt, one decision, no sign-in. An approver makes one
//! (`POST /v1/interrupts/{id}/link`) and sends it by chat or mail — a webhook receiver holding
//! an approver's key does so on `interrupt.opened`. Whoever opens it sees the request
//! (`GET /v1/link`) and decides it once (`POST /v1/link/decision`), as the approver who made
//! it. The link carries a key of its own (`{key id}.l…`) in the URL's fragment, which
//! browsers never send to a server nor put in a `Referer`; it expires (one hour by default),
//! is revoked with the key that made it, and is spent by its decision.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use stepwright_api::interrupt::{DecisionBody, DecisionTaken, LinkMade, LinkView, NewLink};
use stepwright_core::{InterruptId, RunId};

use super::interrupts::{open_interrupts, take_decision};
use super::{Body, OptionalBody, run_in_namespace};
use crate::keys::{Principal, Role, create_link, link_scope, secret_hash};
use crate::problem::ApiError;
use crate::state::Shared;

/// How long a link lasts unless asked otherwise.
const DEFAULT_LASTS: Duration = Duration::from_secs(3600);

/// The longest a link may last.
const LONGEST: Duration = Duration::from_secs(7 * 24 * 3600);

/// `POST /v1/interrupts/{id}/link` (approver, among the interrupt's approvers): `201` and a
/// link that decides this interrupt once, as the caller.
pub(crate) async fn create(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    headers: HeaderMap,
    OptionalBody(body): OptionalBody<NewLink>,
) -> Result<(StatusCode, Json<LinkMade>), ApiError> {
    let lasts = match body.expires_in_seconds {
        None => DEFAULT_LASTS,
        Some(seconds) if (60..=LONGEST.as_secs()).contains(&seconds) => Duration::from_secs(seconds),
        Some(seconds) => {
            return Err(ApiError::bad_request(format!("expires_in_seconds must be from 60 to 604800, not {seconds}")));
        }
    };
    let (run, interrupt) = split(&id)?;
    run_in_namespace(&shared, &who, run).await.map_err(|_| no_interrupt(&id))?;
    who.require(Role::Approver)?;
    let loaded = shared.store.load(run).await?;
    if !open_interrupts(&loaded, &who.caller()).iter().any(|item| item.interrupt_id == interrupt.as_str()) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_open",
            format!("interrupt {id} is not open, or this key is not among its approvers"),
        ));
    }
    let now = shared.now();
    let link = create_link(shared.store.as_ref(), &who.key, &id, now, lasts)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    super::audit(&shared, &who, "link.created", id.clone(), serde_json::json!({ "link": link.key.id })).await?;
    let path = format!("/link#{}", link.secret);
    let scheme = match headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()) {
        Some(proto) if proto.eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("localhost");
    Ok((
        StatusCode::CREATED,
        Json(LinkMade {
            url: format!("{scheme}://{host}{path}"),
            path,
            interrupt: id,
            expires_at: link.key.expires_at.map_or(i64::MAX, stepwright_core::Timestamp::as_micros),
        }),
    ))
}

/// The holder of an approval link: its key, read from `Authorization: Bearer`, straight from
/// the store (a link spent on another server is refused here at once), and the interrupt.
pub(crate) struct LinkHolder {
    who: Principal,
    run: RunId,
    interrupt: InterruptId,
}

impl FromRequestParts<Arc<Shared>> for LinkHolder {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, shared: &Arc<Shared>) -> Result<Self, Self::Rejection> {
        let secret = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| ApiError::unauthorized("send the link's key as `Authorization: Bearer <key>`"))?;
        let key = shared
            .store
            .key_by_secret(secret_hash(secret))
            .await?
            .ok_or_else(|| ApiError::unauthorized("this is not an approval link we made"))?;
        let scope = link_scope(&key).ok_or_else(|| ApiError::unauthorized("this key is not an approval link's"))?;
        if key.revoked_at.is_some() {
            return Err(ApiError::new(StatusCode::GONE, "link_used", "this approval link was used (or revoked)"));
        }
        if key.expires_at.is_some_and(|at| at <= shared.now()) {
            return Err(ApiError::new(StatusCode::GONE, "link_expired", "this approval link has expired"));
        }
        shared.limits.check_rate(&key.id)?;
        let (run, interrupt) = split(scope)?;
        Ok(Self { who: Principal { key: Arc::new(key), by_cookie: false }, run, interrupt })
    }
}

/// `GET /v1/link` (the link's key): the request it decides; `409` once someone decided it.
pub(crate) async fn show(State(shared): State<Arc<Shared>>, link: LinkHolder) -> Result<Json<LinkView>, ApiError> {
    let loaded = shared.store.load(link.run).await?;
    let item = open_interrupts(&loaded, &link.who.caller())
        .into_iter()
        .find(|item| item.interrupt_id == link.interrupt.as_str())
        .ok_or_else(decided)?;
    Ok(Json(LinkView {
        interrupt: item,
        decide_as: link.who.key.user.clone(),
        expires_at: link.who.key.expires_at.map(stepwright_core::Timestamp::as_micros),
    }))
}

/// `POST /v1/link/decision` (the link's key): decides the interrupt as the approver who made
/// the link, and spends the link; `409` if someone else decided first, `410` once used.
pub(crate) async fn decide(
    State(shared): State<Arc<Shared>>,
    link: LinkHolder,
    Body(body): Body<DecisionBody>,
) -> Result<Json<DecisionTaken>, ApiError> {
    let decision = super::interrupts::decision_of(body)?;
    link.who.require(Role::Approver)?;
    let record = run_in_namespace(&shared, &link.who, link.run).await?;
    let taken = take_decision(&shared, &link.who, &record, link.interrupt.clone(), decision).await;
    // Spent whatever came of it but a refused value (which can be corrected and sent again).
    if !matches!(&taken, Err(error) if error.status == StatusCode::UNPROCESSABLE_ENTITY || error.status == StatusCode::BAD_REQUEST)
    {
        shared.store.revoke_key(&link.who.key.id, shared.now()).await?;
        shared.forget_key(&link.who.key.id);
    }
    Ok(Json(taken?))
}

/// A run id and an interrupt id from `<run id>.<interrupt id>`.
fn split(id: &str) -> Result<(RunId, InterruptId), ApiError> {
    let (run, interrupt) = id.split_once('.').ok_or_else(|| no_interrupt(id))?;
    let run: RunId = run.parse().map_err(|_| no_interrupt(id))?;
    Ok((run, InterruptId::new(interrupt)))
}

fn no_interrupt(id: &str) -> ApiError {
    ApiError::not_found("not_found", format!("no interrupt {id:?}"))
}

fn decided() -> ApiError {
    ApiError::new(StatusCode::CONFLICT, "already_resolved", "someone else decided this request already")
}
