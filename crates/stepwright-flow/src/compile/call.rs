//! The `workflow` step kind: a call into another workflow file, loaded (and checked) with
//! the file that calls it. The path is relative to the calling file; a chain of calls that
//! comes back to a file already being loaded is a cycle and does not load.

use std::path::{Path, PathBuf};

use serde_json::Value;
use stepwright_core::Node;

use super::{Compiler, load_nested};
use crate::yaml::Item;

impl Compiler {
    /// `workflow: ./other.yaml` with an optional `with` (the called workflow's input; without
    /// it, the previous step's output as for any step). `spawn: ./other.yaml` is the same
    /// call with an isolated context (no memory layers inherited) and the step's `timeout`,
    /// which it requires, cancelling the whole child.
    pub(super) fn call(&mut self, id: &str, body: &Item, step: &Item, spawn: bool) -> Option<Node> {
        let kind = if spawn { "`spawn`" } else { "`workflow`" };
        let spawn_timeout = if spawn {
            match step.get("timeout") {
                Some(timeout) => Some(self.duration(timeout, "`timeout`")),
                None => {
                    self.error_hint(
                        step.pos,
                        "a `spawn` step needs a `timeout`",
                        "how long the spawned workflow may run before it is cancelled, like `timeout: 10m`",
                    );
                    return None;
                }
            }
        } else {
            None
        };
        let target = self.string(body, kind)?;
        let here = self.stack.last().cloned().unwrap_or_else(|| PathBuf::from(&self.file));
        let dir = here.parent().map(Path::to_path_buf).unwrap_or_default();
        let path = dir.join(&target);
        let (canonical, source) = match self.options.files.clone() {
            Some(files) => self.read_given(body, &target, &path, &files)?,
            None => self.read_from_disk(body, &target, &path)?,
        };
        if let Some(start) = self.stack.iter().position(|file| *file == canonical) {
            let chain: Vec<String> =
                self.stack[start..].iter().chain([&canonical]).map(|file| short_name(file)).collect();
            self.error_hint(
                body.pos,
                format!("a `workflow` call cycle: {}", chain.join(" → ")),
                "a workflow cannot call itself, directly or through others; use `loop` or `graph` to repeat",
            );
            return None;
        }
        // Kept by its path below the first file's directory (as a registered workflow's files
        // are), or, outside it, not at all.
        let first_dir = self.stack.first().and_then(|first| first.parent()).map(Path::to_path_buf);
        let relative = match (&self.options.files, &first_dir) {
            (Some(_), _) => Some(canonical.clone()),
            (None, Some(dir)) => canonical.strip_prefix(dir).ok().map(Path::to_path_buf),
            (None, None) => None,
        };
        let relative =
            relative.map(|path| path.components().filter_map(|c| c.as_os_str().to_str()).collect::<Vec<_>>().join("/"));
        match (relative, self.called_files.as_mut()) {
            (Some(relative), Some(kept)) => {
                kept.insert(relative, source.clone());
            }
            _ => self.called_files = None,
        }
        let mut stack = self.stack.clone();
        stack.push(canonical);
        let shown = path.display().to_string();
        let options = self.options.clone();
        let loaded = match load_nested(&source, &shown, stack, &options) {
            Ok(loaded) => loaded,
            Err(error) => {
                let count = error.diagnostics.len();
                self.error(
                    body.pos,
                    format!(
                        "the called workflow `{target}` does not load ({count} problem{} listed below)",
                        if count == 1 { "" } else { "s" }
                    ),
                );
                self.diagnostics.extend(error.diagnostics);
                return None;
            }
        };
        self.warnings.extend(loaded.warnings.iter().cloned());
        self.approver_lists.extend(loaded.approver_lists.iter().cloned());
        match (loaded.called_files.clone(), self.called_files.as_mut()) {
            (Some(theirs), Some(kept)) => kept.extend(theirs),
            _ => self.called_files = None,
        }
        if !loaded.mcp_servers.is_empty() {
            self.error_hint(
                body.pos,
                format!("the called workflow `{target}` declares `mcp_servers`, which this version connects only for the file a run starts from"),
                "call its steps' tools from the calling file, or move the steps there",
            );
            return None;
        }
        // The called file's models join this file's: the caller binds them (keys, cassettes,
        // `--model`), so one name must mean one model across the files.
        for (name, config) in loaded.models {
            match self.resources.models.get(&name) {
                Some(mine) if *mine != config => self.error_hint(
                    body.pos,
                    format!("model `{name}` is declared differently here and in `{target}`"),
                    "give one of them another name",
                ),
                Some(_) => {}
                None => {
                    self.resources.models.insert(name, config);
                }
            }
        }
        let mut node = match spawn_timeout {
            Some(Some(timeout)) => Node::spawn(id, &loaded.workflow, timeout),
            Some(None) => return None,
            None => Node::workflow(id, &loaded.workflow),
        };
        if step.get("with").is_some() {
            node = node.input(self.with_input(step, Value::Null));
        }
        Some(node)
    }
}

/// A file's name for a cycle message (the whole path says little more and is long).
impl Compiler {
    /// A called file on disk: canonical, inside an allowed directory tree, not too large.
    fn read_from_disk(&mut self, body: &Item, target: &str, path: &Path) -> Option<(PathBuf, String)> {
        let canonical = match path.canonicalize() {
            Ok(canonical) => canonical,
            Err(e) => {
                self.error_hint(
                    body.pos,
                    format!("the called workflow `{target}` cannot be read: {e}"),
                    "a `workflow` path is relative to the file that calls it",
                );
                return None;
            }
        };
        // A file may call only into its own directory tree (or a directory it was allowed):
        // a workflow file from elsewhere must not make the loader read `/etc/shadow`.
        if !self.options.allowed_dirs.iter().any(|dir| canonical.starts_with(dir)) {
            let first = self.options.allowed_dirs.first().map(|d| d.display().to_string()).unwrap_or_default();
            self.error_hint(
                body.pos,
                format!("the called workflow `{target}` is outside the directory tree of the first file ({first})"),
                "call files beside or below it, or allow another directory (`stepwright --allow-dir DIR`)",
            );
            return None;
        }
        match crate::compile::read_limited(&canonical, self.options.max_file_bytes) {
            Ok(source) => Some((canonical, source)),
            Err(why) => {
                self.error(body.pos, format!("the called workflow `{target}` cannot be read: {why}"));
                None
            }
        }
    }

    /// A called file from the set that came with the first one (a registered workflow):
    /// the path is resolved without a disk, and may not climb above the first file.
    fn read_given(
        &mut self,
        body: &Item,
        target: &str,
        path: &Path,
        files: &std::collections::BTreeMap<String, String>,
    ) -> Option<(PathBuf, String)> {
        let mut parts: Vec<&str> = Vec::new();
        for part in path.components() {
            match part {
                std::path::Component::Normal(name) => parts.push(name.to_str().unwrap_or_default()),
                std::path::Component::ParentDir if parts.pop().is_some() => {}
                std::path::Component::CurDir => {}
                _ => {
                    self.error_hint(
                        body.pos,
                        format!("the called workflow `{target}` is outside the files registered with the workflow"),
                        "a called file's path is relative to the file that calls it and stays below the first file",
                    );
                    return None;
                }
            }
        }
        let key = parts.join("/");
        if self.stack.iter().any(|file| *file == Path::new(&key)) {
            // A call back into a file being loaded: the caller reports the cycle.
            return Some((PathBuf::from(key), String::new()));
        }
        match files.get(&key) {
            Some(source) if source.len() as u64 <= self.options.max_file_bytes => {
                Some((PathBuf::from(key), source.clone()))
            }
            Some(source) => {
                self.error(
                    body.pos,
                    format!(
                        "the called workflow `{target}` is {} bytes, more than the limit of {}",
                        source.len(),
                        self.options.max_file_bytes
                    ),
                );
                None
            }
            None => {
                let known: Vec<&str> = files.keys().map(String::as_str).collect();
                self.error_hint(
                    body.pos,
                    format!(
                        "the called workflow `{target}` (`{key}`) is not among the files registered with the workflow"
                    ),
                    format!("the files given: {}", if known.is_empty() { "none".to_owned() } else { known.join(", ") }),
                );
                None
            }
        }
    }
}

fn short_name(file: &Path) -> String {
    file.file_name().map_or_else(|| file.display().to_string(), |name| name.to_string_lossy().into_owned())
}
