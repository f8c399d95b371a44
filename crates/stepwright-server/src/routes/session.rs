//! `POST /v1/session`, `GET /v1/session`, `DELETE /v1/session`: a browser signs in with an
//! API key and is kept signed in by an HttpOnly, `SameSite=Strict` cookie holding a session
//! key of its own (derived from the key, revoked with it, expiring in 12 hours at most). The
//! page never sees a secret; a request the cookie authenticates changes nothing without the
//! `X-Stepwright-Csrf` header, which another site's page cannot make a browser send.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Body;
use super::audit;
use crate::keys::{Principal, SESSION_COOKIE, SESSION_FOR, create_session};
use crate::problem::ApiError;
use crate::state::Shared;
use stepwright_api::session::{Session, SignIn};

impl From<&Principal> for Session {
    fn from(who: &Principal) -> Self {
        Self {
            namespace: who.key.namespace.clone(),
            user: who.key.user.clone(),
            roles: who.key.roles.clone(),
            key_id: who.key.id.clone(),
            expires_at: who.key.expires_at.map(stepwright_core::Timestamp::as_micros),
        }
    }
}

/// `Secure` when the request reached us over TLS (as a proxy in front says): a browser then
/// sends the cookie over TLS only. On plain HTTP (loopback) it could not be set at all.
pub(crate) fn secure(headers: &HeaderMap) -> &'static str {
    let tls =
        headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("https"));
    if tls { "; Secure" } else { "" }
}

/// `POST /v1/session`: `201` with who is signed in, and the session cookie.
pub(crate) async fn sign_in(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Body(body): Body<SignIn>,
) -> Result<Response, ApiError> {
    let who = shared.authenticate(body.api_key.trim()).await?;
    shared.limits.check_rate(&who.key.id)?;
    let session = create_session(shared.store.as_ref(), &who.key, shared.now())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    audit(&shared, &who, "session.created", session.key.id.clone(), json!({})).await?;
    let lasts = session.key.expires_at.map(|until| until.as_micros() - session.key.created_at.as_micros());
    let max_age = lasts.map_or(SESSION_FOR.as_secs(), |micros| u64::try_from(micros / 1_000_000).unwrap_or(0));
    let cookie = format!(
        "{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{}",
        session.secret,
        secure(&headers)
    );
    let signed_in = Principal { key: Arc::new(session.key), by_cookie: true };
    with_cookie((StatusCode::CREATED, Json(Session::from(&signed_in))).into_response(), &cookie)
}

/// The response with the cookie set.
pub(crate) fn with_cookie(mut response: Response, cookie: &str) -> Result<Response, ApiError> {
    let value = HeaderValue::from_str(cookie).map_err(|e| ApiError::internal(e.to_string()))?;
    response.headers_mut().insert(header::SET_COOKIE, value);
    Ok(response)
}

/// `GET /v1/session`: who the request is from (by key or by session cookie).
pub(crate) async fn show(who: Principal) -> Json<Session> {
    Json(Session::from(&who))
}

/// `DELETE /v1/session`: signs out — the session's key is revoked and the cookie cleared.
/// `204`; a request authenticated by an `Authorization` header has no session to end (`400`).
pub(crate) async fn sign_out(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if !who.by_cookie {
        return Err(ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "no_session",
            "no session to sign out of: this request carries an API key, not the session cookie",
        ));
    }
    shared.store.revoke_key(&who.key.id, shared.now()).await?;
    shared.forget_key(&who.key.id);
    audit(&shared, &who, "session.ended", who.key.id.clone(), json!({})).await?;
    let cleared = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}", secure(&headers));
    with_cookie(StatusCode::NO_CONTENT.into_response(), &cleared)
}
