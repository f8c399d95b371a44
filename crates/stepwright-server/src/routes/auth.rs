//! `GET /v1/auth`: how one may sign in here; `GET /v1/auth/oidc/start` and
//! `…/callback`: signing in through the OpenID Connect provider (authorization code with
//! PKCE). The callback ends in the same session cookie `POST /v1/session` sets.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::Params;
use super::audit;
use super::session::{secure, with_cookie};
use crate::keys::{Principal, SESSION_COOKIE, SESSION_FOR, cookie, create_provider_session};
use crate::oidc::{Oidc, OidcError, Pending};
use crate::problem::ApiError;
use crate::state::Shared;
use stepwright_api::session::{AuthMethods, Callback};

/// The cookie a started sign-in is kept in until its callback: `Lax`, because the callback
/// is a navigation from the provider's site, which a `Strict` cookie would not come back on.
const PENDING_COOKIE: &str = "stepwright_oidc";

/// The path of the callback, under this server's address.
const CALLBACK: &str = "/v1/auth/oidc/callback";

/// `GET /v1/auth` (no key): how one may sign in.
pub(crate) async fn methods(State(shared): State<Arc<Shared>>) -> Json<AuthMethods> {
    Json(AuthMethods { api_key: true, oidc: shared.oidc.is_some() })
}

fn provider(shared: &Shared) -> Result<&Oidc, ApiError> {
    shared.oidc.as_ref().ok_or_else(|| {
        ApiError::not_found("oidc_not_configured", "this server signs in with API keys only (no --oidc-issuer)")
    })
}

/// The callback URL: as configured, else on the host the browser reached.
fn redirect_url(oidc: &Oidc, headers: &HeaderMap) -> String {
    if let Some(url) = &oidc.config.redirect_url {
        return url.clone();
    }
    let scheme = if secure(headers).is_empty() { "http" } else { "https" };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("localhost");
    format!("{scheme}://{host}{CALLBACK}")
}

/// `GET /v1/auth/oidc/start` (no key): `302` to the provider, with a fresh state, nonce and
/// PKCE challenge kept in a ten-minute HttpOnly cookie.
pub(crate) async fn start(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let oidc = provider(&shared)?;
    let pending = Pending::new().map_err(|e| ApiError::internal(e.to_string()))?;
    let url = oidc
        .authorization_url(&pending, &redirect_url(oidc, &headers))
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "oidc_provider", e.to_string()))?;
    let cookie = format!(
        "{PENDING_COOKIE}={}; HttpOnly; SameSite=Lax; Path=/v1/auth/oidc; Max-Age=600{}",
        pending.encode(),
        secure(&headers)
    );
    let mut response = StatusCode::FOUND.into_response();
    response.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&url).map_err(|_| ApiError::internal("the provider's URL is not a header"))?,
    );
    with_cookie(response, &cookie)
}

/// `GET /v1/auth/oidc/callback` (no key): checks the state, exchanges the code, checks the ID
/// token, maps the person's groups, and signs the browser in (a page that goes on to `/`).
pub(crate) async fn callback(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Params(query): Params<Callback>,
) -> Result<Response, ApiError> {
    let oidc = provider(&shared)?;
    let clear = format!("{PENDING_COOKIE}=; HttpOnly; SameSite=Lax; Path=/v1/auth/oidc; Max-Age=0{}", secure(&headers));
    let outcome = sign_in(&shared, oidc, &headers, query).await;
    let response = match outcome {
        Ok(session_cookie) => {
            let page = with_cookie(
                page(StatusCode::OK, "Signed in", "Signed in; opening the dashboard…", true),
                &session_cookie,
            )?;
            with_cookie_appended(page, &clear)?
        }
        Err(error) => {
            let status = match error {
                OidcError::NotAllowed(_) => StatusCode::FORBIDDEN,
                OidcError::Provider(_) => StatusCode::BAD_GATEWAY,
                _ => StatusCode::BAD_REQUEST,
            };
            with_cookie(page(status, "Sign-in failed", &format!("Sign-in failed: {error}"), false), &clear)?
        }
    };
    Ok(response)
}

async fn sign_in(shared: &Shared, oidc: &Oidc, headers: &HeaderMap, query: Callback) -> Result<String, OidcError> {
    let pending = cookie(headers, PENDING_COOKIE).and_then(Pending::decode).ok_or(OidcError::State)?;
    if query.state.as_deref() != Some(pending.state.as_str()) {
        return Err(OidcError::State);
    }
    if let Some(error) = query.error {
        let more = query.error_description.map(|d| format!(": {d}")).unwrap_or_default();
        return Err(OidcError::Refused(format!("{error}{more}")));
    }
    if let Some(issuer) = &query.iss
        && issuer.trim_end_matches('/') != oidc.config.issuer.trim_end_matches('/')
    {
        return Err(OidcError::Token(format!("the callback names another issuer ({issuer})")));
    }
    let code = query.code.ok_or_else(|| OidcError::Refused("no code".into()))?;
    let signed = oidc.finish(&code, &pending, &redirect_url(oidc, headers)).await?;
    let now = shared.now();
    let session = create_provider_session(shared.store.as_ref(), &signed.namespace, &signed.user, signed.roles, now)
        .await
        .map_err(|e| OidcError::Provider(format!("keeping the session: {e}")))?;
    let who = Principal { key: Arc::new(session.key), by_cookie: true };
    let detail =
        json!({ "via": "oidc", "issuer": oidc.config.issuer, "subject": signed.subject, "groups": signed.groups });
    audit(shared, &who, "session.created", who.key.id.clone(), detail)
        .await
        .map_err(|e| OidcError::Provider(format!("auditing the session: {}", e.problem.detail)))?;
    Ok(format!(
        "{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
        session.secret,
        SESSION_FOR.as_secs(),
        secure(headers)
    ))
}

/// A second `Set-Cookie` on a response.
fn with_cookie_appended(mut response: Response, cookie: &str) -> Result<Response, ApiError> {
    let value = HeaderValue::from_str(cookie).map_err(|e| ApiError::internal(e.to_string()))?;
    response.headers_mut().append(header::SET_COOKIE, value);
    Ok(response)
}

/// A small page: on success it moves on to the dashboard by itself. (A navigation this page
/// starts is same-site, so the `Strict` session cookie goes with it; a redirect answered to
/// the provider's navigation would not carry it.)
fn page(status: StatusCode, title: &str, text: &str, go_on: bool) -> Response {
    let escape = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
    let refresh = if go_on { r#"<meta http-equiv="refresh" content="0;url=/">"# } else { "" };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}<title>{}</title></head>\
         <body><p role=\"status\">{}</p><p><a href=\"/\">Go to the dashboard</a></p></body></html>",
        escape(title),
        escape(text)
    );
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'none'"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oidc::OidcConfig;

    #[test]
    fn the_callback_is_the_configured_url_else_the_host_reached() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("dash.example.com"));
        let derived = Oidc::new(OidcConfig::default());
        assert_eq!(redirect_url(&derived, &headers), "http://dash.example.com/v1/auth/oidc/callback");
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(redirect_url(&derived, &headers), "https://dash.example.com/v1/auth/oidc/callback");
        let configured = Oidc::new(OidcConfig {
            redirect_url: Some("https://stepwright.internal/v1/auth/oidc/callback".into()),
            ..OidcConfig::default()
        });
        assert_eq!(redirect_url(&configured, &headers), "https://stepwright.internal/v1/auth/oidc/callback");
    }
}
