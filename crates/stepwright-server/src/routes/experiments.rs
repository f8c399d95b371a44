//! `/v1/experiments` (DESIGN §18): a change tried on the namespace's past runs, each
//! recomputed in a sandbox by this server in the background and kept as it goes — start,
//! list, show (its report so far while it runs), cancel, resume. The work is the app layer's
//! ([`stepwright_app::experiment`]), as the CLI's `experiments` does it.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;
use stepwright_api::experiment::{ExperimentDetails, ExperimentSpec, ExperimentSummary};
use stepwright_app::experiment::{
    Candidate, Keeping, RENEW_EVERY, begin_experiment, check_experiment, experiment_candidate, experiment_details,
    experiment_summary, hold_from, holder_stopped, kept_spec, run_experiment, take_hold,
};
use stepwright_core::RunId;
use stepwright_core::store::experiment::{ExperimentRecord, ExperimentState};

use super::{Body, audit};
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::Shared;

/// How many experiments `GET /v1/experiments` lists.
const LISTED: usize = 200;

/// `POST /v1/experiments` (operator): the spec checked, the change compiled and the
/// population fixed now (a bad one is refused here, not in the background); `202`.
pub(crate) async fn start(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Body(spec): Body<ExperimentSpec>,
) -> Result<(StatusCode, Json<ExperimentSummary>), ApiError> {
    who.require(Role::Operator)?;
    check_experiment(&spec).map_err(stepwright_app::AppError::BadInput)?;
    if let Some(name) = spec.change.models.keys().next() {
        // The caller would choose where this server sends its provider key.
        return Err(stepwright_app::AppError::BadInput(format!(
            "`change.models.{name}`: a model of the caller's choosing is the CLI's `--model`; over the API, \
             `change.rebind` it to a binding the definition has, or send a `change.source` that declares it"
        ))
        .into());
    }
    let candidate = experiment_candidate(shared.store.as_ref(), who.namespace(), &spec, &shared.bindings).await?;
    let id = shared.engine.new_id();
    // Held by this server while it works: another takes it up if this one stops.
    let hold = Some(hold_from(shared.engine.worker_id(), shared.now()));
    let fixed = begin_experiment(
        shared.store.as_ref(),
        shared.store.as_ref(),
        &spec,
        Some(who.namespace()),
        id,
        shared.now(),
        hold,
    )
    .await?;
    let detail = json!({
        "name": spec.experiment,
        "workflow": spec.runs.workflow,
        "runs": fixed.runs.ids.len(),
        "inputs": fixed.runs.inputs.len(),
    });
    audit(&shared, &who, "experiment.started", id.to_string(), detail).await?;
    let record = experiment_in_namespace(&shared, &who, &id.to_string()).await?;
    work_on(&shared, who.namespace().to_owned(), id, fixed, candidate);
    Ok((StatusCode::ACCEPTED, Json(experiment_summary(&record))))
}

/// `GET /v1/experiments` (viewer): the namespace's newest, without their reports.
pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    who: Principal,
) -> Result<Json<Vec<ExperimentSummary>>, ApiError> {
    who.require(Role::Viewer)?;
    let all = shared.store.experiments(Some(who.namespace().to_owned()), LISTED).await?;
    Ok(Json(all.iter().map(experiment_summary).collect()))
}

/// `GET /v1/experiments/{id}` (viewer).
pub(crate) async fn show(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<ExperimentDetails>, ApiError> {
    who.require(Role::Viewer)?;
    let record = experiment_in_namespace(&shared, &who, &id).await?;
    Ok(Json(experiment_details(shared.store.as_ref(), record).await?))
}

/// `POST /v1/experiments/{id}/cancel` (operator): whichever process works on it stops
/// before its next run.
pub(crate) async fn cancel(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<ExperimentSummary>, ApiError> {
    who.require(Role::Operator)?;
    let record = experiment_in_namespace(&shared, &who, &id).await?;
    if !shared.store.experiment_cancel(record.id).await? {
        return Err(ended(&record));
    }
    audit(&shared, &who, "experiment.cancelled", record.id.to_string(), json!({})).await?;
    let record = experiment_in_namespace(&shared, &who, &id).await?;
    Ok(Json(experiment_summary(&record)))
}

/// `POST /v1/experiments/{id}/resume` (operator): goes on with one whose process stopped.
pub(crate) async fn resume(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<ExperimentSummary>), ApiError> {
    who.require(Role::Operator)?;
    let record = experiment_in_namespace(&shared, &who, &id).await?;
    if record.state != ExperimentState::Running {
        return Err(ended(&record));
    }
    if shared.experiments_at_work.lock().expect("poisoned").contains(&record.id) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "already_running",
            format!("experiment {} is at work in this server", record.id),
        ));
    }
    let spec = kept_spec(&record)?;
    let candidate = experiment_candidate(shared.store.as_ref(), who.namespace(), &spec, &shared.bindings).await?;
    // Another live server at work on it keeps it (409, naming it); one that stopped is taken.
    take_hold(shared.store.as_ref(), &record, shared.engine.worker_id(), shared.now()).await?;
    audit(&shared, &who, "experiment.resumed", record.id.to_string(), json!({})).await?;
    work_on(&shared, who.namespace().to_owned(), record.id, spec, candidate);
    Ok((StatusCode::ACCEPTED, Json(experiment_summary(&record))))
}

/// Looks, now and every [`RENEW_EVERY`] until `stop`, for running experiments whose holder
/// stopped (its hold lapsed, or its process on this host is gone) and takes them up: each
/// goes on here without recomputing what was kept. One no server held (a CLI's) is left to
/// `stepwright experiments resume`: its models and files are the CLI's.
pub(crate) async fn take_up(shared: Arc<Shared>, stop: tokio_util::sync::CancellationToken) {
    loop {
        match shared.store.experiments_running(100).await {
            Ok(running) => {
                for record in running {
                    take_up_one(&shared, record).await;
                }
            }
            Err(error) => tracing::warn!(error = %error, "the running experiments could not be read"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RENEW_EVERY) => {}
        }
    }
}

async fn take_up_one(shared: &Arc<Shared>, record: ExperimentRecord) {
    let (now, me) = (shared.now(), shared.engine.worker_id());
    let Some(namespace) = record.tenant.clone() else { return };
    if !holder_stopped(&record, now) || shared.experiments_at_work.lock().expect("poisoned").contains(&record.id) {
        return;
    }
    let prepared = async {
        let spec = kept_spec(&record)?;
        let candidate = experiment_candidate(shared.store.as_ref(), &namespace, &spec, &shared.bindings).await?;
        take_hold(shared.store.as_ref(), &record, me, now).await?;
        Ok::<_, stepwright_app::AppError>((spec, candidate))
    };
    match prepared.await {
        Ok((spec, candidate)) => {
            let from = record.hold.as_ref().map_or("", |hold| hold.holder.as_str());
            tracing::info!(experiment = %record.id, from, "an experiment whose holder stopped is taken up");
            work_on(shared, namespace, record.id, spec, candidate);
        }
        // Taken up first by another server: it goes on there.
        Err(stepwright_app::AppError::ExperimentHeld { .. }) => {}
        Err(error) => {
            tracing::warn!(experiment = %record.id, error = %error, "an experiment whose holder stopped cannot go on here");
        }
    }
}

/// Recomputes the experiment's runs in the background, each result kept as it comes, held by
/// this server (renewed as it goes); a server stopped mid-way leaves it `running`, and
/// another takes it up once the hold lapses (`resume` asks for it at once).
fn work_on(shared: &Arc<Shared>, namespace: String, id: RunId, spec: ExperimentSpec, candidate: Candidate) {
    shared.experiments_at_work.lock().expect("poisoned").insert(id);
    let shared = shared.clone();
    tokio::spawn(async move {
        let holder = shared.engine.worker_id().to_owned();
        let keeping = Keeping { store: shared.store.as_ref(), id, holder: Some(&holder) };
        let store = shared.store.as_ref();
        let ran = run_experiment(&shared.engine, store, &spec, &candidate, Some(&namespace), Some(keeping)).await;
        match ran {
            Ok(_) => {}
            // Another server took it up (this one was stopped longer than its hold): it goes on there.
            Err(held @ stepwright_app::AppError::ExperimentHeld { .. }) => {
                tracing::info!(experiment = %id, why = %held, "an experiment is left to the server that took it up");
            }
            Err(error) => {
                tracing::warn!(experiment = %id, error = %error, "an experiment stopped; a server takes it up once its hold lapses (`POST /v1/experiments/{{id}}/resume`: at once)");
            }
        }
        shared.experiments_at_work.lock().expect("poisoned").remove(&id);
    });
}

/// The experiment if it is the caller's namespace's, else `404` (as one that does not exist).
async fn experiment_in_namespace(shared: &Shared, who: &Principal, id: &str) -> Result<ExperimentRecord, ApiError> {
    let missing = || ApiError::not_found("not_found", format!("experiment {id:?} was not found"));
    let id: RunId = id.parse().map_err(|_| missing())?;
    match shared.store.experiment(id).await? {
        Some(record) if record.tenant.as_deref() == Some(who.namespace()) => Ok(record),
        _ => Err(missing()),
    }
}

fn ended(record: &ExperimentRecord) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "experiment_ended",
        format!("experiment {} has ended ({})", record.id, record.state.as_str()),
    )
}
