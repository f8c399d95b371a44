//! `POST /v1/workflows`, `GET /v1/workflows`, `GET /v1/workflows/{name}`: workflow files
//! registered by name; each new source of a name is its next version.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepwright_app::Servers;
use stepwright_store::control::NewWorkflow;

use super::Body;
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::{Shared, registered_source};

/// A workflow file to register.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegisterWorkflow {
    /// The file's YAML text.
    pub source: String,
    /// The files it calls (`workflow: parts/x.yaml`), by path relative to it.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// A registered version.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct WorkflowVersion {
    /// The workflow's name.
    pub name: String,
    /// Its version: 1 for the first source of the name, one more for each new source.
    pub version: u32,
    /// The definition hash its runs are pinned to.
    pub hash: String,
}

/// A registered workflow in a listing.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct WorkflowSummary {
    /// The workflow's name.
    pub name: String,
    /// Its newest version (what a run started by name gets).
    pub latest_version: u32,
    /// How many versions it has.
    pub versions: usize,
}

/// A registered workflow with its versions, input schema and graph.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct WorkflowDetails {
    /// The workflow's name.
    pub name: String,
    /// Its versions, newest first.
    pub versions: Vec<VersionInfo>,
    /// The newest version's input schema, if it declares one.
    pub input_schema: Option<Value>,
    /// The newest version's structure (steps, operators, policies), as `stepwright graph`
    /// draws it.
    pub graph: Value,
}

/// One version of a workflow.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct VersionInfo {
    /// The version.
    pub version: u32,
    /// Its definition hash.
    pub hash: String,
    /// When it was registered (µs since the epoch).
    pub registered_at: i64,
    /// Who registered it.
    pub registered_by: Option<String>,
}

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
    let mut options = shared.bindings.load_options();
    options.files = Some(Arc::new(body.files.clone()));
    let loaded = stepwright_flow::load_source_with(&body.source, "workflow.yaml", &options)
        .map_err(|e| ApiError::from(stepwright_app::AppError::Load(e)))?;
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
    let graph = workflow.describe().clone();
    Ok(Json(WorkflowDetails {
        name: name.clone(),
        input_schema: graph.get("input").cloned().filter(|schema| !schema.is_null()),
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
