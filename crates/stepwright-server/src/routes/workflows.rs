//! `POST /v1/workflows`, `GET /v1/workflows`, `GET /v1/workflows/{name}`: workflow files
//! registered by name; each new source of a name is its next version.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use stepwright_api::workflow::{RegisterWorkflow, VersionInfo, WorkflowDetails, WorkflowSummary, WorkflowVersion};
use stepwright_app::Servers;
use stepwright_store::control::NewWorkflow;

use super::Body;
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::{Shared, registered_source};

/// `POST /v1/workflows` (admin): validates with the loader's diagnostics (`422` with every
/// `line:col` problem), keeps the source, and answers the version (`201`, or `200` when
/// this source was registered before).
pub(crate) async fn register(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Body(body): Body<RegisterWorkflow>,
) -> Result<(StatusCode, Json<WorkflowVersion>), ApiError> {
    who.require(Role::Admin)?;
    // Compiled the way every later process compiles it: from the given files, not a disk.
    let loaded = shared.bindings.load_source(&body.source, "workflow.yaml", &body.files)?;
    let workflow = stepwright_app::prepare(loaded, &shared.bindings, Servers::Declared).await?;
    let name = workflow.name().to_owned();
    let existing = shared.store.registered_workflows(who.namespace()).await?;
    let seen = existing.iter().any(|w| w.name == name && w.hash == workflow.hash());
    let registered = shared
        .store
        .register_workflow(NewWorkflow {
            namespace: who.namespace().to_owned(),
            name,
            hash: workflow.hash(),
            source: body.source,
            files: body.files,
            at: shared.now(),
            by: Some(who.key.user.clone()),
        })
        .await?;
    // Kept by hash too, so a worker rebuilds a run's definition without the registry.
    shared.store.put_definition(registered.hash, registered_source(&registered)).await?;
    shared.registered_changed(who.namespace());
    // Registering changes what later runs of the name start with: audited, as a new version.
    if !seen {
        let detail = serde_json::json!({ "version": registered.version, "hash": registered.hash.to_hex() });
        super::audit(&shared, &who, "workflow.registered", registered.name.clone(), detail).await?;
    }
    let status = if seen { StatusCode::OK } else { StatusCode::CREATED };
    Ok((
        status,
        Json(WorkflowVersion { name: registered.name, version: registered.version, hash: registered.hash.to_hex() }),
    ))
}

/// `GET /v1/workflows`: the namespace's workflows, by name.
pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    who: Principal,
) -> Result<Json<Vec<WorkflowSummary>>, ApiError> {
    let all = shared.store.registered_workflows(who.namespace()).await?;
    let mut summaries: Vec<WorkflowSummary> = Vec::new();
    for workflow in all {
        match summaries.last_mut() {
            Some(last) if last.name == workflow.name => last.versions += 1,
            _ => summaries.push(WorkflowSummary { name: workflow.name, latest_version: workflow.version, versions: 1 }),
        }
    }
    Ok(Json(summaries))
}

/// `GET /v1/workflows/{name}`: one workflow with its versions, input schema and graph.
pub(crate) async fn show(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(name): Path<String>,
) -> Result<Json<WorkflowDetails>, ApiError> {
    let versions: Vec<_> =
        shared.store.registered_workflows(who.namespace()).await?.into_iter().filter(|w| w.name == name).collect();
    let newest = versions.first().ok_or_else(|| not_registered(&name, None))?;
    let workflow = shared.workflow(newest).await?;
    let graph = stepwright_app::wire::outline(&workflow);
    Ok(Json(WorkflowDetails {
        name: name.clone(),
        // With its fields' order, which a form follows (not in the hashed description).
        input_schema: workflow.input_schema_for_forms(),
        graph,
        versions: versions
            .iter()
            .map(|w| VersionInfo {
                version: w.version,
                hash: w.hash.to_hex(),
                registered_at: w.registered_at.as_micros(),
                registered_by: w.registered_by.clone(),
            })
            .collect(),
    }))
}

/// `404` for a workflow name (and version) the namespace has not registered.
pub(crate) fn not_registered(name: &str, version: Option<u32>) -> ApiError {
    let what = match version {
        Some(version) => format!("no workflow {name:?} version {version} is registered"),
        None => format!("no workflow {name:?} is registered"),
    };
    ApiError::not_found("workflow_not_found", what)
}
