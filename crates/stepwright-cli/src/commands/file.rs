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

/// `validate`: loads a file (connecting nothing) and reports every problem.
pub(crate) async fn validate(g: &Globals<'_>, file: PathBuf) -> anyhow::Result<u8> {
    let flags = g.flags;
    load(&file, flags, Servers::Declared).await?;
    println!("{}: ok", file.display());
    Ok(0)
}

/// `graph`: draws a file's definition as Mermaid or dot.
pub(crate) async fn graph(g: &Globals<'_>, file: PathBuf, format: crate::args::GraphFormat) -> anyhow::Result<u8> {
    let flags = g.flags;
    let workflow = load(&file, flags, Servers::Declared).await?;
    println!("{}", draw(&workflow.outline(), format));
    Ok(0)
}
