//! `schema`, `validate` and `graph`: commands on a workflow file, which open no store.

use std::path::PathBuf;

use crate::commands::Globals;
use crate::graph::draw;
use crate::host::{Servers, load};

/// `schema`: prints the file format's JSON Schema.
pub(crate) fn schema() -> anyhow::Result<u8> {
    println!("{}", serde_json::to_string_pretty(&stepwright::flow::file_schema())?);
    Ok(0)
}

/// `validate`: loads a file (connecting nothing) and reports every problem, then every
/// warning (what loads but may not do what its author expects), which does not fail it.
pub(crate) async fn validate(g: &Globals<'_>, file: PathBuf) -> anyhow::Result<u8> {
    let bindings = g.flags.bindings();
    let loaded =
        stepwright::flow::load_with(&file, &bindings.load_options()).map_err(stepwright::app::AppError::Load)?;
    let warnings = loaded.warnings.clone();
    let approver_lists = loaded.approver_lists.clone();
    let targets = worker_targets(&loaded.workflow);
    stepwright::app::prepare(loaded, &bindings, Servers::Declared).await?;
    for warning in &warnings {
        let hint = warning.hint.as_ref().map(|h| format!(" (hint: {h})")).unwrap_or_default();
        eprintln!("{}:{}:{}: warning: {}{hint}", warning.file, warning.line, warning.column, warning.message);
    }
    if let Some(server) = g.server {
        let remote = super::remote::Remote::new(server)?;
        // An approver list no key or provider group of the namespace meets: its step would
        // wait for someone who cannot sign in.
        for list in &approver_lists {
            let checked = remote.check_approvers(&list.approvers).await?;
            if checked.keys == 0 && checked.groups.is_empty() {
                eprintln!(
                    "{}:{}:{}: warning: no key or OIDC group at {server} can approve [{}] (hint: give a person a key with the approver role that meets it, like `stepwright keys create --user ann --role approver --role role:lead`, or map a provider group: `--oidc-map leads=NAMESPACE:approver+role:lead`)",
                    list.file,
                    list.line,
                    list.column,
                    list.approvers.join(", ")
                );
            }
        }
        let workers = remote.workers().await?;
        for (tool, target) in &targets {
            let offered = workers
                .workers
                .iter()
                .any(|w| w.queue == target.queue && stepwright::store::task::offers(&w.handlers, &target.handler));
            if !offered {
                eprintln!(
                    "{}: warning: tool `{tool}`: no live worker offers `{}` on queue `{}` at {server} (hint: start one;                      a run that calls it waits, or fails with no_worker after its schedule_to_start)",
                    file.display(),
                    target.handler,
                    target.queue
                );
            }
        }
    }
    println!("{}: ok", file.display());
    Ok(0)
}

/// A file's `worker:` tools and where their calls go.
fn worker_targets(workflow: &stepwright::Workflow) -> Vec<(String, stepwright::llm::WorkerTarget)> {
    let Some(tools) = workflow.services().get::<stepwright::llm::Tools>() else { return Vec::new() };
    tools
        .names()
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), tools.get(name)?.worker_target()?.clone())))
        .collect()
}

/// `graph`: draws a file's definition as Mermaid or dot.
pub(crate) async fn graph(g: &Globals<'_>, file: PathBuf, format: crate::args::GraphFormat) -> anyhow::Result<u8> {
    let flags = g.flags;
    let workflow = load(&file, flags, Servers::Declared).await?;
    println!("{}", draw(&stepwright::app::wire::outline(&workflow), format));
    Ok(0)
}
