//! `GET /v1/interrupts` (the approvals inbox across runs) and
//! `POST /v1/interrupts/{id}/decision`. A decision is taken as the key's user, with the key's
//! roles: approvers are enforced from the key, never from the body.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::json;
use stepwright_api::InterruptKind;
use stepwright_api::interrupt::{
    ApproversChecked, CheckApprovers, DecisionBody, DecisionKind, DecisionTaken, InboxItem, InboxQuery, TimerWoken,
};
use stepwright_core::journal::{LoadedRun, RunRecord};
use stepwright_core::store::RunFilter;
use stepwright_core::{Approver, Caller, Decision, InterruptId, InterruptRequest, RunId, RunStatus};

use super::audit;
use super::{Body, Params, run_in_namespace};
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::Shared;

/// The most waiting runs one inbox read looks at.
const INBOX_RUNS: usize = 1000;

/// `GET /v1/interrupts?status=open`: every open decision of the namespace the key may take
/// (it has the approver role and is among the interrupt's approvers, if it names any),
/// oldest run first; `kind` lists one kind instead (timers and awaited events are not
/// decisions, and are listed only when asked for).
pub(crate) async fn inbox(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Params(query): Params<InboxQuery>,
) -> Result<Json<Vec<InboxItem>>, ApiError> {
    if let Some(status) = query.status.as_deref().filter(|s| *s != "open") {
        return Err(ApiError::bad_request(format!("status {status:?}: the inbox lists `open` interrupts")));
    }
    if !who.has(Role::Approver) {
        return Ok(Json(Vec::new()));
    }
    let filter = RunFilter {
        status: Some(RunStatus::Suspended),
        tenant: Some(who.namespace().to_owned()),
        limit: Some(INBOX_RUNS),
        headers_only: true,
        ..RunFilter::default()
    };
    let mut waiting = shared.store.list_runs(filter).await?;
    waiting.reverse();
    let caller = who.caller();
    let listed = |kind: InterruptKind| match query.kind {
        Some(asked) => kind == asked,
        None => matches!(kind, InterruptKind::Approval | InterruptKind::Input),
    };
    let mut items = Vec::new();
    for run in waiting {
        let loaded = shared.store.load(run.id).await?;
        items.extend(open_interrupts(&loaded, &caller).into_iter().filter(|item| listed(item.kind)));
    }
    Ok(Json(items))
}

/// A run's open interrupts that `caller` may decide, in id order, as the inbox shows them.
pub(crate) fn open_interrupts(loaded: &LoadedRun, caller: &Caller) -> Vec<InboxItem> {
    let run = &loaded.record;
    loaded
        .open_interrupts()
        .into_iter()
        .filter(|open| open.request.may_decide(caller))
        .map(|open| InboxItem {
            id: format!("{}.{}", run.id, open.id),
            run_id: run.id.to_string(),
            workflow: run.workflow.clone(),
            interrupt_id: open.id.to_string(),
            step: open.step.as_str().to_owned(),
            kind: stepwright_app::wire::interrupt_kind(open.request.kind),
            message: open.request.message.clone(),
            payload: open.request.payload.clone(),
            schema: open.request.schema.clone(),
            deadline: open.deadline.map(|at| at.as_micros()),
        })
        .collect()
}

/// `POST /v1/interrupts/{id}/decision` (approver): `403` if the key is not among the
/// interrupt's approvers, `409` if another decision won; the run then continues.
pub(crate) async fn decide(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    Body(body): Body<DecisionBody>,
) -> Result<Json<DecisionTaken>, ApiError> {
    let missing = || ApiError::not_found("not_found", format!("no interrupt {id:?}"));
    let (run, interrupt) = id.split_once('.').ok_or_else(missing)?;
    let run: RunId = run.parse().map_err(|_| missing())?;
    let record = run_in_namespace(&shared, &who, run).await.map_err(|_| missing())?;
    who.require(Role::Approver)?;
    let decision = decision_of(body)?;
    Ok(Json(take_decision(&shared, &who, &record, InterruptId::new(interrupt), decision).await?))
}

/// `POST /v1/interrupts/{id}/wake` (operator): a durable timer goes off now; `422` for an
/// interrupt that waits for a decision, `409` if it went off (or was woken) already.
pub(crate) async fn wake(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<TimerWoken>, ApiError> {
    let missing = || ApiError::not_found("not_found", format!("no interrupt {id:?}"));
    let (run, interrupt) = id.split_once('.').ok_or_else(missing)?;
    let run: RunId = run.parse().map_err(|_| missing())?;
    let record = run_in_namespace(&shared, &who, run).await.map_err(|_| missing())?;
    who.require(Role::Operator)?;
    let interrupt = InterruptId::new(interrupt);
    let workflow = shared.definition_of(&record).await?;
    let status = stepwright_app::wake_in_background(&shared.engine, workflow, run, &interrupt, &who.caller()).await?;
    audit(&shared, &who, "timer.woken", format!("{run}.{interrupt}"), json!({})).await?;
    Ok(Json(TimerWoken {
        run_id: run.to_string(),
        interrupt_id: interrupt.to_string(),
        woken_by: who.key.user.clone(),
        status: stepwright_app::wire::run_status(status),
    }))
}

/// Takes a decision as `who` and continues the run.
pub(crate) async fn take_decision(
    shared: &Arc<Shared>,
    who: &Principal,
    record: &RunRecord,
    interrupt: InterruptId,
    decision: Decision,
) -> Result<DecisionTaken, ApiError> {
    let run = record.id;
    let detail = json!({ "decision": decision });
    // Continued here, in a task of its own (the answer does not wait for the rest of the
    // run), as `stepwright approve` does — also with `--no-worker`: a decided run is not due
    // for a worker's claim, so the process that took the decision takes the run on. A live
    // process that waits on the interrupt continues it instead, and a worker takes it over if
    // this process dies first. The definition is found first: a run that cannot be continued
    // here is not decided here.
    let workflow = shared.definition_of(record).await?;
    let status =
        stepwright_app::decide_in_background(&shared.engine, workflow, run, &interrupt, decision, &who.caller())
            .await?;
    audit(shared, who, "interrupt.decided", format!("{run}.{interrupt}"), detail).await?;
    Ok(DecisionTaken {
        run_id: run.to_string(),
        interrupt_id: interrupt.to_string(),
        decided_by: who.key.user.clone(),
        status: stepwright_app::wire::run_status(status),
    })
}

/// The decision a body asks for, or `400` for fields its kind does not take.
pub(crate) fn decision_of(body: DecisionBody) -> Result<Decision, ApiError> {
    Ok(match (body.decision, body.payload, body.value, body.reason) {
        (DecisionKind::Approve, None, None, None) => Decision::Approve,
        (DecisionKind::Reject, None, None, reason) => Decision::Reject { reason },
        (DecisionKind::Modify, Some(payload), None, None) => Decision::Modify { payload },
        (DecisionKind::Respond, None, Some(value), None) => Decision::Respond { value },
        (kind, ..) => {
            return Err(ApiError::bad_request(format!(
                "{kind:?} takes {}",
                match kind {
                    DecisionKind::Approve => "no other field",
                    DecisionKind::Reject => "only a `reason`",
                    DecisionKind::Modify => "a `payload` (and nothing else)",
                    DecisionKind::Respond => "a `value` (and nothing else)",
                }
            )));
        }
    })
}

/// `POST /v1/approvers/check` (operator): who in the namespace could meet an approver list —
/// its live keys with the approver role that meet it, and the OIDC groups mapped to it with
/// that role whose members would (a `user:` entry: whose members may be that user).
pub(crate) async fn check_approvers(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Body(body): Body<CheckApprovers>,
) -> Result<Json<ApproversChecked>, ApiError> {
    who.require(Role::Operator)?;
    if body.approvers.is_empty() || body.approvers.len() > 100 {
        return Err(ApiError::bad_request("`approvers` lists 1 to 100 entries"));
    }
    let list = body.approvers.iter().fold(InterruptRequest::approval(""), |list, entry| list.approver(entry));
    let now = shared.now();
    let keys = shared.store.keys(Some(who.namespace())).await?;
    let deciders = keys
        .into_iter()
        .filter(|key| key.revoked_at.is_none() && key.expires_at.is_none_or(|at| at > now))
        .map(|key| Principal { key: Arc::new(key), by_cookie: false })
        .filter(|holder| holder.has(Role::Approver) && list.may_decide(&holder.caller()))
        .count();
    let names_a_user = list.approvers.iter().any(|a| matches!(a, Approver::User(_)));
    let groups = shared
        .oidc
        .iter()
        .flat_map(|oidc| oidc.config.mappings.iter())
        .filter(|mapping| {
            mapping.namespace == who.namespace() && mapping.roles.iter().any(|r| r == Role::Approver.as_str())
        })
        .filter(|mapping| {
            let member = Caller {
                roles: mapping.roles.iter().map(|r| crate::keys::custom_role(r).unwrap_or(r).to_owned()).collect(),
                ..Caller::default()
            };
            names_a_user || list.may_decide(&member)
        })
        .map(|mapping| mapping.group.clone())
        .collect();
    Ok(Json(ApproversChecked { keys: u32::try_from(deciders).unwrap_or(u32::MAX), groups }))
}
