//! The kernel's values as the contract's views (`stepwright-api`): the one place the two
//! vocabularies meet. Every match is exhaustive, so a new kernel variant does not compile
//! until the wire has a spelling for it; the tests check each spelling is the kernel's own.

use stepwright_api as api;
use stepwright_core as core;

/// A run's status on the wire.
pub fn run_status(status: core::RunStatus) -> api::RunStatus {
    match status {
        core::RunStatus::Pending => api::RunStatus::Pending,
        core::RunStatus::Running => api::RunStatus::Running,
        core::RunStatus::Suspended => api::RunStatus::Suspended,
        core::RunStatus::Completed => api::RunStatus::Completed,
        core::RunStatus::Failed => api::RunStatus::Failed,
        core::RunStatus::Cancelled => api::RunStatus::Cancelled,
    }
}

/// A status from the wire, as the store filters by it.
pub fn kernel_run_status(status: api::RunStatus) -> core::RunStatus {
    match status {
        api::RunStatus::Pending => core::RunStatus::Pending,
        api::RunStatus::Running => core::RunStatus::Running,
        api::RunStatus::Suspended => core::RunStatus::Suspended,
        api::RunStatus::Completed => core::RunStatus::Completed,
        api::RunStatus::Failed => core::RunStatus::Failed,
        api::RunStatus::Cancelled => core::RunStatus::Cancelled,
    }
}

/// A step's status on the wire.
pub fn step_status(status: core::StepStatus) -> api::StepStatus {
    match status {
        core::StepStatus::Completed => api::StepStatus::Completed,
        core::StepStatus::Failed => api::StepStatus::Failed,
        core::StepStatus::Skipped => api::StepStatus::Skipped,
        core::StepStatus::Suspended => api::StepStatus::Suspended,
        core::StepStatus::Handoff => api::StepStatus::Handoff,
        core::StepStatus::Cancelled => api::StepStatus::Cancelled,
        core::StepStatus::Retrying => api::StepStatus::Retrying,
        core::StepStatus::Running => api::StepStatus::Running,
        core::StepStatus::Waiting => api::StepStatus::Waiting,
    }
}

/// A step's activity on the wire.
pub fn activity(activity: core::inspect::Activity) -> api::StepActivity {
    use core::inspect::Activity;
    match activity {
        Activity::Executing => api::StepActivity::Executing,
        Activity::Person => api::StepActivity::Person,
        Activity::Timer => api::StepActivity::Timer,
        Activity::Event => api::StepActivity::Event,
        Activity::Worker => api::StepActivity::Worker,
        Activity::Retry => api::StepActivity::Retry,
    }
}

/// Who started a run, from the caller it was started as: a schedule's and a trigger's
/// starts say so in the caller's metadata (`schedule`/`tick`, `trigger`/`events`); any
/// other user is a person. A run started anonymously (a local command) has none.
pub fn started_by(caller: &core::Caller) -> Option<api::StartedBy> {
    let id = caller.user.clone()?;
    let text = |key: &str| caller.metadata.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
    let (kind, tick, events) = if caller.metadata.contains_key("schedule") {
        (api::StarterKind::Schedule, text("tick"), Vec::new())
    } else if caller.metadata.contains_key("trigger") {
        let events = caller.metadata.get("events").and_then(serde_json::Value::as_array);
        let events = events.map(|events| events.iter().filter_map(serde_json::Value::as_u64).collect());
        (api::StarterKind::Trigger, None, events.unwrap_or_default())
    } else {
        (api::StarterKind::User, None, Vec::new())
    };
    Some(api::StartedBy { kind, id, tick, events })
}

/// An interrupt's kind on the wire.
pub fn interrupt_kind(kind: core::InterruptKind) -> api::InterruptKind {
    match kind {
        core::InterruptKind::Approval => api::InterruptKind::Approval,
        core::InterruptKind::Input => api::InterruptKind::Input,
        core::InterruptKind::Event => api::InterruptKind::Event,
        core::InterruptKind::Timer => api::InterruptKind::Timer,
    }
}

/// Model usage and cost on the wire.
pub fn totals(totals: stepwright_llm::Totals) -> api::Totals {
    let stepwright_llm::Totals { calls, input_tokens, output_tokens, cost_usd, calls_without_usage, latency_ms } =
        totals;
    api::Totals { calls, input_tokens, output_tokens, cost_usd, calls_without_usage, latency_ms }
}

/// A replay's report on the wire.
pub fn replay_report(report: core::ReplayReport) -> api::ReplayReport {
    use api::history::{StepComparison, StepReplay};
    let outcome = |outcome| match outcome {
        core::StepReplay::Identical => StepReplay::Identical,
        core::StepReplay::Different => StepReplay::Different,
        core::StepReplay::Served => StepReplay::Served,
        core::StepReplay::Missing => StepReplay::Missing,
        core::StepReplay::Added => StepReplay::Added,
    };
    api::ReplayReport {
        run: report.run.to_string(),
        steps: report
            .steps
            .into_iter()
            .map(|step| StepComparison {
                path: step.path.as_str().to_owned(),
                outcome: outcome(step.outcome),
                recorded: step.recorded.map(|hash| hash.to_hex()),
                replayed: step.replayed.map(|hash| hash.to_hex()),
                diff: step.diff,
            })
            .collect(),
        recorded_output: report.recorded_output,
        replayed_output: report.replayed_output,
        identical: report.identical,
    }
}

/// An error on the wire.
pub fn error_view(error: &stepwright_core::StepError) -> api::run::ErrorView {
    api::run::ErrorView { code: error.code.to_string(), message: error.message.clone() }
}

/// A recompute's step changes on the wire.
pub(crate) fn step_change(change: core::StepChange) -> api::history::StepChange {
    use api::history::StepChange;
    match change {
        core::StepChange::Clean => StepChange::Clean,
        core::StepChange::ValueChanged { diff } => StepChange::ValueChanged { diff },
        core::StepChange::SchemaViolation { message } => StepChange::SchemaViolation { message },
        core::StepChange::Served => StepChange::Served,
        core::StepChange::Failed { error } => StepChange::Failed { error: error_view(&error) },
        core::StepChange::Missing => StepChange::Missing,
        core::StepChange::Added => StepChange::Added,
    }
}

/// A task's state as the API spells it.
pub fn task_status(state: stepwright_core::store::task::TaskState) -> stepwright_api::task::TaskStatus {
    use stepwright_api::task::TaskStatus;
    use stepwright_core::store::task::TaskState;
    match state {
        TaskState::Pending => TaskStatus::Pending,
        TaskState::Claimed => TaskStatus::Claimed,
        TaskState::Completed => TaskStatus::Completed,
        TaskState::Failed => TaskStatus::Failed,
        TaskState::Lapsed => TaskStatus::Lapsed,
        TaskState::NoWorker => TaskStatus::NoWorker,
        TaskState::Cancelled => TaskStatus::Cancelled,
    }
}

/// A task's state as the store spells it.
pub fn task_state(status: stepwright_api::task::TaskStatus) -> stepwright_core::store::task::TaskState {
    use stepwright_api::task::TaskStatus;
    use stepwright_core::store::task::TaskState;
    match status {
        TaskStatus::Pending => TaskState::Pending,
        TaskStatus::Claimed => TaskState::Claimed,
        TaskStatus::Completed => TaskState::Completed,
        TaskStatus::Failed => TaskState::Failed,
        TaskStatus::Lapsed => TaskState::Lapsed,
        TaskStatus::NoWorker => TaskState::NoWorker,
        TaskStatus::Cancelled => TaskState::Cancelled,
    }
}

/// A definition's outline on the wire: what `graph` and the dashboard draw.
pub fn outline(workflow: &core::Workflow) -> api::workflow::Outline {
    let outline = workflow.outline();
    api::workflow::Outline { name: outline.name, version: outline.version, steps: outline_nodes(outline.steps) }
}

fn outline_nodes(nodes: Vec<core::OutlineNode>) -> Vec<api::workflow::OutlineNode> {
    nodes.into_iter().map(outline_node).collect()
}

fn outline_node(node: core::OutlineNode) -> api::workflow::OutlineNode {
    let group = |g: core::OutlineGroup| api::workflow::OutlineGroup { label: g.label, steps: outline_nodes(g.steps) };
    api::workflow::OutlineNode {
        id: node.id,
        kind: node.kind,
        label: node.label,
        notes: node.notes,
        layout: match node.layout {
            core::OutlineLayout::Step => api::workflow::OutlineLayout::Step,
            core::OutlineLayout::Boxed => api::workflow::OutlineLayout::Boxed,
            core::OutlineLayout::Repeated { again } => api::workflow::OutlineLayout::Repeated { again },
            core::OutlineLayout::Choice { falls_through } => api::workflow::OutlineLayout::Choice { falls_through },
            core::OutlineLayout::Parallel { join } => api::workflow::OutlineLayout::Parallel { join },
            core::OutlineLayout::Graph { entry, edges } => api::workflow::OutlineLayout::Graph {
                entry,
                edges: edges
                    .into_iter()
                    .map(|e| api::workflow::OutlineEdge { from: e.from, to: e.to, when: e.when })
                    .collect(),
            },
        },
        groups: node.groups.into_iter().map(group).collect(),
        fallback: node.fallback.map(group),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outline on the wire is the kernel's, field for field, in every layout.
    #[test]
    fn the_outline_on_the_wire_is_the_kernels() {
        use std::time::Duration;

        use stepwright_core::{Branch, Expr, Fork, Graph, Loop, Node, OnFailure, Workflow};
        let set = |id: &str| {
            Node::dyn_step(
                id,
                core::dyn_fn_step("set", |_ctx, input| async move { Ok(core::Outcome::completed((*input).clone())) }),
            )
        };
        let when = |source: &str| Expr::new(|_| true).with_source(source);
        let called = Workflow::builder("called").step(set("inner")).build().unwrap();
        let workflow = Workflow::builder("every-layout")
            .step(set("a").on_failure(OnFailure::Fallback(Box::new(set("spare")))).cache())
            .step(Branch::new("route").when(when("input.x"), [set("b")]))
            .step(Fork::new("fan").path([set("c")]).path([set("d")]))
            .step(Loop::new("again", 2, [set("e")]))
            .step(Graph::new("g", 3).node(set("f")).node(set("h")).edge_if("f", "h", when("input.y")))
            .step(Node::workflow("call", &called))
            .step(Node::sleep("nap", Duration::from_secs(5)))
            .build()
            .unwrap();
        let kernel = serde_json::to_value(workflow.outline()).unwrap();
        let wire = serde_json::to_value(outline(&workflow)).unwrap();
        assert_eq!(kernel, wire);
        let read: api::workflow::Outline = serde_json::from_value(wire).unwrap();
        assert_eq!(read, outline(&workflow), "the contract reads back what it wrote");
    }

    /// Each wire spelling is the kernel's own (the journal and the file format use the
    /// kernel's; the API must say the same words).
    #[test]
    fn every_status_is_spelled_as_the_kernel_spells_it() {
        let same = |kernel: serde_json::Value, wire: serde_json::Value| assert_eq!(kernel, wire);
        for status in [
            core::RunStatus::Pending,
            core::RunStatus::Running,
            core::RunStatus::Suspended,
            core::RunStatus::Completed,
            core::RunStatus::Failed,
            core::RunStatus::Cancelled,
        ] {
            same(serde_json::json!(status), serde_json::json!(run_status(status)));
            assert_eq!(kernel_run_status(run_status(status)), status);
            assert_eq!(status.as_str(), run_status(status).as_str());
        }
        for status in [
            core::StepStatus::Completed,
            core::StepStatus::Failed,
            core::StepStatus::Skipped,
            core::StepStatus::Suspended,
            core::StepStatus::Handoff,
            core::StepStatus::Cancelled,
            core::StepStatus::Retrying,
            core::StepStatus::Running,
            core::StepStatus::Waiting,
        ] {
            same(serde_json::json!(status), serde_json::json!(step_status(status)));
            assert_eq!(status.as_str(), step_status(status).as_str());
        }
        for kind in [
            core::InterruptKind::Approval,
            core::InterruptKind::Input,
            core::InterruptKind::Event,
            core::InterruptKind::Timer,
        ] {
            same(serde_json::json!(kind), serde_json::json!(interrupt_kind(kind)));
        }
    }

    #[test]
    fn usage_reads_back_as_the_model_layer_wrote_it() {
        let kernel = stepwright_llm::Totals {
            calls: 3,
            input_tokens: 10,
            output_tokens: 20,
            cost_usd: 0.5,
            calls_without_usage: 1,
            latency_ms: 812.5,
        };
        assert_eq!(serde_json::json!(kernel), serde_json::json!(totals(kernel)));
    }

    /// The event stream sends the journal's event records as they are; a client reads each
    /// as the contract's `StreamedEvent`, field for field.
    #[test]
    fn a_journal_event_reads_as_the_streamed_event() {
        let record = core::journal::EventRecord {
            run: core::RunId::from_parts(core::Timestamp::from_micros(1_700_000_000_000_000), [7; 10]),
            path: core::StepPath::new("drafts[1]/write"),
            at: core::Timestamp::from_micros(1_700_000_000_123_456),
            tenant: Some("acme".into()),
            user: None,
            kind: "step.completed".into(),
            data: serde_json::json!({ "output": [1, 2] }),
        };
        let text = serde_json::to_string(&record).unwrap();
        let read: api::stream::StreamedEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(read.run, record.run.to_string());
        assert_eq!(read.path, "drafts[1]/write");
        assert_eq!(read.at, record.at.as_micros());
        assert_eq!((read.tenant.as_deref(), read.user.as_deref()), (Some("acme"), None));
        assert_eq!((read.kind.as_str(), &read.data), ("step.completed", &record.data));
        assert_eq!(serde_json::to_value(&read).unwrap(), serde_json::to_value(&record).unwrap());
    }
}
