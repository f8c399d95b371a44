//! `GET /v1/runs/{id}/events`: a run's events as Server-Sent Events. Each event's `id:` is
//! its position in the run's event sequence, so `Last-Event-ID` (or `?after=N`) resumes with
//! nothing lost or repeated, on any server and across restarts. The stream ends after the
//! run's final event, and a client that comes back after it gets `204 No Content` (which
//! stops a browser's `EventSource` from reconnecting forever); a client that leaves never
//! cancels the run.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, Stream};

use tokio::sync::broadcast;

use super::{Params, parse_run, run_in_namespace};
use crate::feed::{Next, StreamedToken};
use crate::keys::Principal;
use crate::problem::ApiError;
use crate::state::Shared;
use stepwright_api::stream::StreamFrom;

/// How often an idle stream sends a comment, so proxies and clients keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Where a stream stands.
struct Position {
    /// The next event to send; `None` once the last one was.
    from: Option<usize>,
    /// Streamed tokens, when asked for.
    tokens: Option<broadcast::Receiver<Arc<StreamedToken>>>,
    /// What the feed answered before the stream began (read to tell a finished stream).
    first: Option<Next>,
}

/// `GET /v1/runs/{id}/events`.
pub(crate) async fn stream(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    Params(query): Params<StreamFrom>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let run = parse_run(&id)?;
    let record = run_in_namespace(&shared, &who, run).await?;
    let last_seen = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_request("Last-Event-ID is not an event id we sent"))?,
        ),
        None => query.after,
    };
    let from = last_seen.map_or(0, |id| usize::try_from(id).unwrap_or(usize::MAX).saturating_add(1));
    let slot = shared.limits.open_stream(&who.key.id)?;
    let feed = shared.feeds.subscribe(run);
    let shutdown = shared.shutdown.clone();
    let tokens = query.tokens.then(|| feed.tokens());
    // A finished run's client that resumes after its last event: nothing more will come.
    let first = match (record.status.is_terminal(), last_seen) {
        (true, Some(_)) => match feed.next(from).await {
            Next::End => return Ok(StatusCode::NO_CONTENT.into_response()),
            other => Some(other),
        },
        _ => None,
    };
    Ok(Sse::new(events(feed, from, tokens, first, shutdown, slot))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// The stream of a run's events from `from` on (and its tokens, if asked for).
fn events(
    feed: Arc<crate::feed::Feed>,
    from: usize,
    tokens: Option<broadcast::Receiver<Arc<StreamedToken>>>,
    first: Option<Next>,
    shutdown: tokio_util::sync::CancellationToken,
    slot: crate::limits::StreamSlot,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let events = stream::unfold(Position { from: Some(from), tokens, first }, move |mut position| {
        let (feed, shutdown) = (feed.clone(), shutdown.clone());
        // The slot is held as long as the stream lives.
        let _held = &slot;
        async move {
            let from = position.from?;
            let next = if let Some(first) = position.first.take() {
                first
            } else {
                tokio::select! {
                    // Recorded events first: a token never jumps ahead of a backlog.
                    biased;
                    next = feed.next(from) => next,
                    Some(token) = next_token(position.tokens.as_mut()) => {
                        let sent = Event::default().event("token").json_data(&*token)
                            .unwrap_or_else(|_| Event::default().comment("a token that does not serialize"));
                        return Some((vec![sent], position));
                    }
                    () = shutdown.cancelled() => {
                        let bye = Event::default().comment("server shutting down; reconnect with Last-Event-ID");
                        return Some((vec![bye], Position { from: None, tokens: None, first: None }));
                    }
                }
            };
            match next {
                Next::Events(events, next) => {
                    let sent = events
                        .iter()
                        .enumerate()
                        .map(|(offset, event)| {
                            Event::default()
                                .id((from + offset).to_string())
                                .event(event.kind.clone())
                                .json_data(&**event)
                                .unwrap_or_else(|_| Event::default().comment("an event that does not serialize"))
                        })
                        .collect();
                    position.from = Some(next);
                    Some((sent, position))
                }
                Next::End => None,
                Next::Failed(why) => Some((
                    vec![Event::default().comment(format!("reading the run failed: {why}"))],
                    Position { from: None, tokens: None, first: None },
                )),
            }
        }
    });
    futures_util::StreamExt::flat_map(events, |batch| stream::iter(batch.into_iter().map(Ok)))
}

/// The next streamed token, skipping over any a slow reader missed; never, without tokens.
async fn next_token(tokens: Option<&mut broadcast::Receiver<Arc<StreamedToken>>>) -> Option<Arc<StreamedToken>> {
    let Some(tokens) = tokens else { return std::future::pending().await };
    loop {
        match tokens.recv().await {
            Ok(token) => return Some(token),
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
        }
    }
}
