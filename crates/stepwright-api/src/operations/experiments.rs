//! The experiments' operations (DESIGN §18).

use super::{JSON, Method, Operation, OperationId, schema};
use crate::{Role, experiment};

/// The experiment operations, in the document's order.
pub(super) fn operations() -> Vec<Operation> {
    vec![
        Operation {
            method: Method::Post,
            path: "/v1/experiments",
            id: OperationId::StartExperiment,
            summary: "Start an experiment: the population is fixed by id now, then each run is recomputed in a sandbox with the change (effects and decisions served from its journal; nothing registered), scored and kept as it goes, by this server in the background. `202`: follow it with `GET /v1/experiments/{id}`.",
            role: Some(Role::Operator),
            body: Some(schema::<experiment::ExperimentSpec>),
            query: None,
            responses: vec![(202, "Started.", Some(schema::<experiment::ExperimentSummary>), JSON)],
            errors: &[400, 403, 404, 413, 415, 422],
        },
        Operation {
            method: Method::Get,
            path: "/v1/experiments",
            id: OperationId::ListExperiments,
            summary: "The namespace's experiments, newest first (the newest 200).",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "Newest first.", Some(schema::<Vec<experiment::ExperimentSummary>>), JSON)],
            errors: &[403],
        },
        Operation {
            method: Method::Get,
            path: "/v1/experiments/{id}",
            id: OperationId::ShowExperiment,
            summary: "An experiment: its spec and its report — while it runs, of the runs recomputed so far.",
            role: Some(Role::Viewer),
            body: None,
            query: None,
            responses: vec![(200, "The experiment.", Some(schema::<experiment::ExperimentDetails>), JSON)],
            errors: &[403, 404],
        },
        Operation {
            method: Method::Post,
            path: "/v1/experiments/{id}/cancel",
            id: OperationId::CancelExperiment,
            summary: "Stop a running experiment: no run is started after this; what was recomputed stays in its report. `409` when it has ended.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(200, "Cancelled.", Some(schema::<experiment::ExperimentSummary>), JSON)],
            errors: &[403, 404, 409],
        },
        Operation {
            method: Method::Post,
            path: "/v1/experiments/{id}/resume",
            id: OperationId::ResumeExperiment,
            summary: "Go on with an experiment that a stopped process left running: the runs it kept are not recomputed. `409` when it has ended, or this server is at work on it.",
            role: Some(Role::Operator),
            body: None,
            query: None,
            responses: vec![(202, "Going on.", Some(schema::<experiment::ExperimentSummary>), JSON)],
            errors: &[403, 404, 409],
        },
    ]
}
