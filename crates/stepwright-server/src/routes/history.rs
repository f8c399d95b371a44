//! `POST /v1/runs/{id}/replay`, `…/recompute` and `…/fork`: new executions from a run's
//! history (DESIGN §7), answered with the reports the CLI's commands of those names print
//! with `--json`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;
use stepwright_api::history::{ForkRun, RecomputeRun};
use stepwright_app::RunDetails;
use stepwright_core::{ForkPatch, RecomputeOptions, ReplayReport, StepPath};

use super::runs::wait_for;
use super::workflows::not_registered;
use super::{Body, OptionalBody, audit, parse_run, run_in_namespace};
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::Shared;

/// `POST /v1/runs/{id}/replay` (operator): re-executes the run in a sandbox with the
/// definition it is pinned to, serving every recorded effect, and compares step by step.
/// Nothing is written.
pub(crate) async fn replay(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<ReplayReport>, ApiError> {
    who.require(Role::Operator)?;
    let run = parse_run(&id)?;
    let record = run_in_namespace(&shared, &who, run).await?;
    let workflow = shared.definition_of(&record).await?;
    Ok(Json(shared.engine.replay(&workflow, run).await?))
}

/// `POST /v1/runs/{id}/recompute` (operator): re-executes the run (or from a step) in a
/// sandbox and reports per step `clean`, `value_changed` (with the differences) or
/// `schema_violation`, the decisions that changed, whether anything did, and the model
/// usage and cost before and after.
pub(crate) async fn recompute(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    OptionalBody(body): OptionalBody<RecomputeRun>,
) -> Result<Json<stepwright_app::RecomputeView>, ApiError> {
    who.require(Role::Operator)?;
    let run = parse_run(&id)?;
    let record = run_in_namespace(&shared, &who, run).await?;
    let workflow = match (body.version, &body.source) {
        (Some(_), Some(_)) => return Err(ApiError::bad_request("give a `version` or a `source`, not both")),
        // A what-if over an edited file: compiled here as a registration would be, and
        // registered nowhere.
        (None, Some(source)) => {
            let loaded = shared.bindings.load_source(source, "workflow.yaml", &body.files)?;
            let workflow = stepwright_app::prepare(loaded, &shared.bindings, stepwright_app::Servers::Declared).await?;
            if workflow.name() != record.workflow {
                return Err(ApiError::bad_request(format!(
                    "the source is workflow {:?}, the run is of workflow {:?}: a run is recomputed with a version of its own workflow",
                    workflow.name(),
                    record.workflow
                )));
            }
            if body.persist {
                // The kept run is pinned to this definition: a worker rebuilds it by hash.
                let kept = stepwright_core::journal::DefinitionSource {
                    name: format!("{}.yaml", record.workflow),
                    files: body.files.clone(),
                    ..stepwright_core::journal::DefinitionSource::default_yaml(source)
                };
                shared.store.put_definition(workflow.hash(), kept).await?;
            }
            workflow
        }
        (None, None) => shared.definition_of(&record).await?,
        (Some(version), None) => {
            let registered = shared
                .registered(who.namespace(), &record.workflow, Some(version))
                .await?
                .ok_or_else(|| not_registered(&record.workflow, Some(version)))?;
            shared.workflow(&registered).await?
        }
    };
    let workflow = stepwright_app::rebind_models(workflow, &body.models)?;
    let options =
        RecomputeOptions { from: body.from.as_deref().map(StepPath::new), persist: body.persist, without_diff: None };
    let view = stepwright_app::recompute_with_report(&shared.engine, &workflow, run, options).await?;
    if let Some(forked) = &view.forked {
        let detail = json!({ "parent": run.to_string(), "from": body.from, "version": body.version, "models": body.models, "edited_source": body.source.is_some() });
        audit(&shared, &who, "run.recomputed", forked.clone(), detail).await?;
    }
    Ok(Json(view))
}

/// `POST /v1/runs/{id}/fork` (operator): `201` and the new run, whose lineage names this one
/// and the step. This server's runner continues it unless it runs with `--no-worker` (then a
/// worker claims it).
pub(crate) async fn fork(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    Body(body): Body<ForkRun>,
) -> Result<(StatusCode, Json<RunDetails>), ApiError> {
    who.require(Role::Operator)?;
    let run = parse_run(&id)?;
    let record = run_in_namespace(&shared, &who, run).await?;
    let wait = wait_for(body.wait_seconds)?;
    let workflow = shared.definition_of(&record).await?;
    if let Some(input) = &body.input {
        stepwright_core::Engine::check_input(&workflow, input)?;
    }
    let patch = ForkPatch { input: body.input, outputs: body.steps.into_iter().collect() };
    let forked = shared.engine.fork(run, &StepPath::new(&body.at), patch).await?;
    audit(&shared, &who, "run.forked", forked.id.to_string(), json!({ "parent": run.to_string(), "at": body.at }))
        .await?;
    // A fork is created pending: this server's runner (or another worker) claims it.
    Ok((StatusCode::CREATED, Json(stepwright_app::wait_until_stopped(&shared.engine, forked.id, wait).await?)))
}
