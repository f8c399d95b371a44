//! The dashboard: a page, a script and a style sheet, embedded in the binary (no CDN, no
//! Node toolchain, nothing fetched at run time) and served under `/`, beside the API under
//! `/v1`, which is all the page uses. `/link` is the page an approval link opens.
//!
//! The script is plain JavaScript as written in `dashboard/` (no build step): what the
//! browser runs is what the repository holds. The page's Content-Security-Policy allows
//! only this server's own script, styles and API — no inline script, no other origin — so
//! text a run produced can never run as code here.

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::state::Shared;

/// One embedded file.
struct Asset {
    body: &'static str,
    content_type: &'static str,
}

const PAGE: Asset = Asset { body: include_str!("../dashboard/index.html"), content_type: "text/html; charset=utf-8" };
const SCRIPT: Asset =
    Asset { body: include_str!("../dashboard/app.js"), content_type: "text/javascript; charset=utf-8" };
const STYLES: Asset = Asset { body: include_str!("../dashboard/app.css"), content_type: "text/css; charset=utf-8" };

/// What the page may load and call: itself only.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                      connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The dashboard's routes.
pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/", get(|headers: HeaderMap| async move { serve(&PAGE, &headers) }))
        .route("/link", get(|headers: HeaderMap| async move { serve(&PAGE, &headers) }))
        .route("/assets/app.js", get(|headers: HeaderMap| async move { serve(&SCRIPT, &headers) }))
        .route("/assets/app.css", get(|headers: HeaderMap| async move { serve(&STYLES, &headers) }))
}

/// The file with headers that keep it fresh (revalidated by its hash, so a new binary's
/// files are never mixed with an old one's) and fenced in.
fn serve(asset: &Asset, request: &HeaderMap) -> Response {
    let etag = format!("\"{}\"", &hex::encode(Sha256::digest(asset.body.as_bytes()))[..16]);
    let unchanged = request
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag));
    let mut response =
        if unchanged { StatusCode::NOT_MODIFIED.into_response() } else { (StatusCode::OK, asset.body).into_response() };
    let headers = response.headers_mut();
    let mut set = |name: header::HeaderName, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    set(header::CONTENT_TYPE, asset.content_type);
    set(header::CACHE_CONTROL, "no-cache");
    set(header::ETAG, &etag);
    set(header::CONTENT_SECURITY_POLICY, POLICY);
    set(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(header::REFERRER_POLICY, "no-referrer");
    set(header::X_FRAME_OPTIONS, "DENY");
    response
}
