//! For [`Store`](super::Store) implementors: the rules every backend applies the same way
//! (claims, take-overs, cancels, retention, fences, session owners, memory names), kept in
//! one place so that the in-memory, SQLite and Postgres stores agree. The conformance suite
//! in `stepwright-store` checks that they do.

use std::collections::HashMap;

use crate::hash::ContentHash;
use crate::ids::{RunId, Timestamp};
use crate::journal::{CancelRequest, Lease, Record, RunRecord, RunStatus};
use crate::store::bank::{MAX_MEMORY_NAME_LEN, MemoryAddress, MemoryHit};
use crate::store::session::{MAX_SESSION_ID_LEN, SessionOwner};
use crate::store::{CancelOutcome, Retention, StatusUpdate, StoreError};

/// Decides what a cancel request does to a run as a store has it at `now` (shared by the
/// backends, so they agree).
pub fn decide_cancel(record: &RunRecord, now: Timestamp) -> CancelOutcome {
    if record.status.is_terminal() {
        return CancelOutcome::Finished(record.status);
    }
    match &record.lease {
        Some(lease) if record.status == RunStatus::Running && lease.expires_at > now => {
            CancelOutcome::Requested { owner: lease.owner.clone(), until: lease.expires_at }
        }
        _ => CancelOutcome::Cancelled,
    }
}

/// The status change a store actually writes for `update` on a run whose status is
/// `current`: a finished run never changes again (`Finished`), and a run with a cancel
/// request that would stop without finishing (suspend, yield) is cancelled instead, so a
/// cancel that raced with a suspension is not lost.
pub fn effective_update(
    run: RunId,
    current: RunStatus,
    cancel: Option<&CancelRequest>,
    update: StatusUpdate,
) -> Result<StatusUpdate, StoreError> {
    if current.is_terminal() {
        return Err(StoreError::Finished { run, status: current });
    }
    match cancel {
        Some(request) if matches!(update.status, RunStatus::Suspended | RunStatus::Pending) => Ok(StatusUpdate {
            status: RunStatus::Cancelled,
            output: None,
            error: Some(request.error()),
            wake_at: None,
            ..update
        }),
        _ => Ok(update),
    }
}

/// Whether a run is ready for `claim_due` at `now`.
pub fn is_due(record: &RunRecord, now: Timestamp) -> bool {
    let free = record.lease.as_ref().is_none_or(|l| l.expires_at <= now);
    free && match record.status {
        RunStatus::Pending => record.wake_at.is_none_or(|w| w <= now),
        RunStatus::Running => true,
        RunStatus::Suspended => record.wake_at.is_some_and(|w| w <= now),
        _ => false,
    }
}

/// Checks a claim against a run's header; returns the new lease.
pub fn try_claim(
    record: &RunRecord,
    owner: &str,
    now: Timestamp,
    lease_for: std::time::Duration,
) -> Result<Lease, StoreError> {
    if record.status.is_terminal() {
        return Err(StoreError::Finished { run: record.id, status: record.status });
    }
    // A live lease is a live owner, whoever it is: even the same worker name must not run
    // a run twice at once (two `resume`s in one process, a server's two requests).
    if let Some(lease) = &record.lease
        && lease.expires_at > now
    {
        return Err(StoreError::Leased { run: record.id, owner: lease.owner.clone(), until: lease.expires_at });
    }
    let token = record.lease.as_ref().map_or(0, |l| l.token) + 1;
    Ok(Lease {
        took_over_from: took_over_from(record, owner),
        ..Lease::new(record.id, owner, token, now.plus(lease_for))
    })
}

/// Whom a claim by `owner` takes `record` from: the holder of a lapsed lease on a run that
/// was executing (a suspended or pending run has no holder to take it from).
pub fn took_over_from(record: &RunRecord, owner: &str) -> Option<String> {
    record
        .lease
        .as_ref()
        .filter(|lease| record.status == RunStatus::Running && !lease.owner.is_empty() && lease.owner != owner)
        .map(|lease| lease.owner.clone())
}

/// Checks that a claim may start `record` given how many runs of its concurrency group
/// hold a slot now (`held`: running or suspended); a store that claims a pending run of a
/// group marks it running in the same write (see [`start_claimed`]), under a lock that
/// serializes the claims of the group, so that two claims never both see room.
pub fn admit(record: &RunRecord, held: usize) -> Result<(), StoreError> {
    match record.flow.needs_slot(record.status) {
        Some(group) if held >= group.limit as usize => {
            Err(StoreError::Queued { run: record.id, key: group.key.clone(), limit: group.limit })
        }
        _ => Ok(()),
    }
}

/// What a claim does to a run it admitted to its concurrency group: it is running from
/// now (and so holds its slot).
pub fn start_claimed(record: &mut RunRecord, now: Timestamp) {
    if record.flow.needs_slot(record.status).is_some() {
        record.status = RunStatus::Running;
        record.wake_at = None;
        record.updated_at = now;
    }
}

/// Whether a run holds a slot of concurrency group `key`.
pub fn holds_slot(record: &RunRecord, key: &str) -> bool {
    matches!(record.status, RunStatus::Running | RunStatus::Suspended)
        && record.flow.concurrency.as_ref().is_some_and(|group| group.key == key)
}

/// The order in which due runs are claimed: higher priority first, then the oldest.
pub fn claim_order(record: &RunRecord) -> (std::cmp::Reverse<i32>, Timestamp, RunId) {
    (std::cmp::Reverse(record.flow.priority), record.created_at, record.id)
}

/// Checks a take-over (see [`Store::take_over`]) against a run's header; returns the new
/// lease.
pub fn try_take_over(
    record: &RunRecord,
    from: &str,
    owner: &str,
    now: Timestamp,
    lease_for: std::time::Duration,
) -> Result<Lease, StoreError> {
    match &record.lease {
        Some(lease) if lease.owner == from && !record.status.is_terminal() => Ok(Lease {
            took_over_from: took_over_from(record, owner),
            ..Lease::new(record.id, owner, lease.token + 1, now.plus(lease_for))
        }),
        _ => try_claim(record, owner, now, lease_for),
    }
}

/// Which runs a retention policy removes from a list of headers (shared by the backends,
/// so they agree): finished, updated before the cut-off, and not among the newest
/// `keep_last` finished runs of their workflow.
pub fn retention_victims(runs: &[RunRecord], policy: &Retention) -> Vec<RunId> {
    let mut finished: Vec<&RunRecord> = runs
        .iter()
        .filter(|r| r.status.is_terminal() && policy.status.is_none_or(|status| r.status == status))
        .collect();
    finished.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut victims = Vec::new();
    for run in finished {
        let rank = seen.entry(run.workflow.as_str()).or_default();
        *rank += 1;
        if policy.keep_last.is_some_and(|keep| *rank <= keep) {
            continue;
        }
        if policy.finished_before.is_none_or(|cut| run.updated_at < cut) {
            victims.push(run.id);
        }
    }
    victims
}

/// The blob hashes an entry references.
pub fn referenced_blob(record: &Record) -> Option<ContentHash> {
    match record {
        Record::Completed { output, .. } => Some(*output),
        Record::Artifact { hash, stored: true, .. } => Some(*hash),
        _ => None,
    }
}

/// Refuses a write whose fencing token is not the run's current lease token.
pub fn check_fence(record: Option<&RunRecord>, run: RunId, fence: Option<u64>) -> Result<(), StoreError> {
    let Some(token) = fence else { return Ok(()) };
    let current = record.and_then(|r| r.lease.as_ref()).map(|l| l.token);
    if current == Some(token) { Ok(()) } else { Err(StoreError::LeaseLost { run, token }) }
}

// Sessions.

/// Checks a session id: 1 to [`MAX_SESSION_ID_LEN`] bytes, no control characters.
pub fn check_session_id(session: &str) -> Result<(), String> {
    if session.is_empty() {
        return Err("a session id must not be empty".into());
    }
    if session.len() > MAX_SESSION_ID_LEN {
        return Err(format!("a session id must be at most {MAX_SESSION_ID_LEN} bytes, this one has {}", session.len()));
    }
    if session.chars().any(char::is_control) {
        return Err(format!("session id {session:?} contains a control character"));
    }
    Ok(())
}

/// The error for a caller who does not own a session. It says neither who does nor whether
/// the session has messages.
pub fn session_denied(session: &str) -> StoreError {
    StoreError::AccessDenied(format!("session {session:?} belongs to another user or tenant"))
}

/// Whether a session exists, given its stored owner as a backend read it (`None`: no such
/// session); `AccessDenied` if it is someone else's. Every backend decides through this.
pub fn check_owner(session: &str, stored: Option<(String, String)>, caller: &SessionOwner) -> Result<bool, StoreError> {
    match stored {
        None => Ok(false),
        Some(found) if found == caller.stored() => Ok(true),
        Some(_) => Err(session_denied(session)),
    }
}

/// The error for an invalid session id.
pub fn bad_session_id(problem: String) -> StoreError {
    StoreError::Invalid(problem)
}

// The memory bank.

/// The words of a query, as every backend matches them: maximal runs of letters and digits,
/// lowercased, each once, in order of first appearance. A query with no words finds nothing.
pub fn query_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        if !terms.contains(&word) {
            terms.push(word);
        }
    }
    terms
}

/// Checks an address's namespace and key: 1 to [`MAX_MEMORY_NAME_LEN`] bytes, no control
/// characters.
pub fn check_address(address: &MemoryAddress) -> Result<(), StoreError> {
    check_memory_name("namespace", &address.namespace)?;
    check_memory_name("key", &address.key)
}

/// Checks a namespace or key.
pub fn check_memory_name(what: &str, name: &str) -> Result<(), StoreError> {
    if name.is_empty() {
        return Err(StoreError::Invalid(format!("a memory {what} must not be empty")));
    }
    if name.len() > MAX_MEMORY_NAME_LEN {
        return Err(StoreError::Invalid(format!(
            "a memory {what} must be at most {MAX_MEMORY_NAME_LEN} bytes, {name:.40?}… has {}",
            name.len()
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(StoreError::Invalid(format!("memory {what} {name:?} contains a control character")));
    }
    Ok(())
}

/// Orders hits as every backend must: score (higher first), then the newest update, then
/// the key.
pub fn sort_hits(hits: &mut [MemoryHit]) {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.item.updated_at.cmp(&a.item.updated_at))
            .then_with(|| a.item.address.key.cmp(&b.item.address.key))
    });
}
