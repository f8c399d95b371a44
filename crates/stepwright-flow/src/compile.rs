//! Checking and compiling a workflow file into a core [`Workflow`].

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::{
    ApprovalGate, Backoff, Effect, Expr, FnGuardrail, Graph, Guardrail, GuardrailAction, GuardrailStage, Node,
    OnFailure, PatternGuardrail, RetryPolicy, TimeoutAction, Workflow,
};

use crate::expr;
use crate::yaml::{self, Item, Pos, Yaml};

mod call;
mod graph;
mod kinds;
mod scalars;
mod mcp;
mod policies;
mod resources;
mod schedules;
mod triggers;
mod worker;

use kinds::{KINDS, KindSite};
pub use mcp::McpToolUse;
pub use resources::Loaded;
use resources::Resources;
pub use scalars::parse_duration;
pub use schedules::{FileSchedule, render_schedule_input};
pub use triggers::{FileTrigger, eval_event_filter, render_event_template};

/// An approver list (`approvers: [role:lead, user:ann]`) and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApproverList {
    /// The file (as given).
    pub file: String,
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// The entries, as written.
    pub approvers: Vec<String>,
}

/// One problem in a workflow file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file (as given).
    pub file: String,
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// What is wrong.
    pub message: String,
    /// What might fix it.
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file, self.line, self.column, self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " (hint: {hint})")?;
        }
        Ok(())
    }
}

/// A file that cannot be loaded: every problem found, in file order.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", render(diagnostics))]
pub struct LoadError {
    /// Every problem found, in file order (this file's, then those of files it calls).
    pub diagnostics: Vec<Diagnostic>,
}

fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

/// Loads a workflow file from disk (the workflow only; see [`load`] for what its steps use).
pub fn load_file(path: &Path) -> Result<Workflow, LoadError> {
    load(path).map(|loaded| loaded.workflow)
}

/// Loads a workflow from YAML text (the workflow only; see [`load_source`]).
pub fn load_str(source: &str, file: &str) -> Result<Workflow, LoadError> {
    load_source(source, file).map(|loaded| loaded.workflow)
}

/// What loading may read.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The largest workflow file read, the first or one it calls, in bytes.
    pub max_file_bytes: u64,
    /// Directories a `workflow:` call may reach besides the first file's own directory tree
    /// (which is always allowed).
    pub allowed_dirs: Vec<PathBuf>,
    /// The files `workflow:` calls read, by path relative to the first file, instead of
    /// the disk (a workflow registered over HTTP with its called files). With it, no file
    /// is read from disk and `allowed_dirs` does not apply.
    pub files: Option<std::sync::Arc<std::collections::BTreeMap<String, String>>>,
}

/// Workflow files are at most this large by default (1 MiB: a few thousand steps).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

impl Default for LoadOptions {
    fn default() -> Self {
        Self { max_file_bytes: MAX_FILE_BYTES, allowed_dirs: Vec::new(), files: None }
    }
}

/// Reads a text file of at most `limit` bytes. Only a regular file is read (not a device or
/// a pipe, which could stream without end), never more than the limit, and the error says
/// what is wrong without quoting what the file holds.
pub fn read_limited(path: &Path, limit: u64) -> Result<String, String> {
    use std::io::Read;
    // Looked at before it is opened: opening a FIFO waits for a writer, for ever.
    if !std::fs::metadata(path).map_err(|e| e.to_string())?.is_file() {
        return Err("it is not a regular file".into());
    }
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let metadata = file.metadata().map_err(|e| e.to_string())?;
    if !metadata.is_file() {
        return Err("it is not a regular file".into());
    }
    if metadata.len() > limit {
        return Err(format!("it is {} bytes; the limit is {limit}", metadata.len()));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limit {
        return Err(format!("it is over {limit} bytes, the limit"));
    }
    String::from_utf8(bytes).map_err(|e| format!("it is not UTF-8 text (at byte {})", e.utf8_error().valid_up_to()))
}

/// Loads a workflow file from disk with its models, tools and agents.
pub fn load(path: &Path) -> Result<Loaded, LoadError> {
    load_with(path, &LoadOptions::default())
}

/// [`load`] with limits and the directories `workflow:` calls may reach.
pub fn load_with(path: &Path, options: &LoadOptions) -> Result<Loaded, LoadError> {
    let file = path.display().to_string();
    let source = read_limited(path, options.max_file_bytes).map_err(|why| LoadError {
        diagnostics: vec![Diagnostic {
            file: file.clone(),
            line: 1,
            column: 1,
            message: format!("the file cannot be read: {why}"),
            hint: None,
        }],
    })?;
    load_source_with(&source, &file, options)
}

/// Loads a workflow from YAML text with its models, tools and agents; `file` names it in
/// diagnostics.
pub fn load_source(source: &str, file: &str) -> Result<Loaded, LoadError> {
    load_source_with(source, file, &LoadOptions::default())
}

/// [`load_source`] with limits and the directories `workflow:` calls may reach.
pub fn load_source_with(source: &str, file: &str, options: &LoadOptions) -> Result<Loaded, LoadError> {
    if options.files.is_some() {
        // Paths are the given files' names, not the disk's: `file` is the root's name.
        let root = Path::new(file).file_name().map_or_else(|| PathBuf::from(file), PathBuf::from);
        return load_nested(source, file, vec![root], options);
    }
    let here = Path::new(file);
    let here = here.canonicalize().unwrap_or_else(|_| here.to_path_buf());
    let mut allowed = vec![here.parent().map(Path::to_path_buf).unwrap_or_default()];
    allowed.extend(options.allowed_dirs.iter().map(|dir| dir.canonicalize().unwrap_or_else(|_| dir.clone())));
    let options = LoadOptions { allowed_dirs: allowed, ..options.clone() };
    load_nested(source, file, vec![here], &options)
}

/// Loads one file of a chain of `workflow` calls; `stack` holds the files being loaded, this
/// one last, so that a call back into any of them is reported as a cycle. `options` carries
/// every directory calls may reach (the first file's first).
fn load_nested(source: &str, file: &str, stack: Vec<PathBuf>, options: &LoadOptions) -> Result<Loaded, LoadError> {
    let mut c = Compiler {
        options: options.clone(),
        resources: Resources::default(),
        stack,
        file: file.to_owned(),
        diagnostics: Vec::new(),
        warnings: Vec::new(),
        positions: HashMap::new(),
        ids: HashSet::new(),
        current: Vec::new(),
        troubled: HashSet::new(),
        bound: Vec::new(),
        roots_only: None,
        input_fields: None,
        called_files: Some(std::collections::BTreeMap::new()),
        approver_lists: Vec::new(),
    };
    let root = match yaml::parse(source) {
        Ok(root) => root,
        Err((pos, message)) => {
            c.error(pos, message);
            return Err(c.finish_err());
        }
    };
    let workflow = c.workflow(&root);
    let schedules = c.schedules(&root, workflow.as_ref());
    let triggers = c.triggers(&root, &schedules);
    match workflow {
        Some(workflow) if c.diagnostics.is_empty() => {
            let resources = std::mem::take(&mut c.resources);
            let agents =
                resources.agents.into_values().fold(stepwright_llm::Agents::new(), |agents, spec| agents.with(spec));
            // The file's tools and agents travel with its workflow, so an engine running
            // several files gives each its own.
            let workflow = workflow.with_service(Arc::new(resources.tools)).with_service(Arc::new(agents));
            Ok(Loaded {
                workflow,
                models: resources.models,
                mcp_servers: resources.mcp_servers.into_values().collect(),
                mcp_tool_uses: resources.mcp_uses,
                schedules,
                triggers,
                warnings: c.warnings,
                called_files: c.called_files,
                approver_lists: c.approver_lists,
            })
        }
        _ => Err(c.finish_err()),
    }
}

const WORKFLOW_FIELDS: &[&str] = &[
    "workflow",
    "version",
    "description",
    "input",
    "output",
    "steps",
    "models",
    "tools",
    "mcp_servers",
    "agents",
    "concurrency",
    "priority",
    "output_schema",
    "telemetry",
    "schedules",
    "triggers",
];
const COMMON_FIELDS: &[&str] = &[
    "id",
    "description",
    "if",
    "input_schema",
    "output",
    "retry",
    "timeout",
    "on_failure",
    "effect",
    "requires_approval",
    "guardrails",
    "cache",
    "diff_key",
    "fallback",
];

struct Compiler {
    /// Limits, and the directories calls may reach.
    options: LoadOptions,
    /// What the file declares for its steps (models, tools, agents).
    resources: Resources,
    /// The files being loaded through `workflow` calls, outermost first, this one last.
    stack: Vec<PathBuf>,
    file: String,
    diagnostics: Vec<Diagnostic>,
    /// What loads but may not do what the author expects.
    warnings: Vec<Diagnostic>,
    /// Where each step path is declared, to place problems the core's checks find.
    positions: HashMap<String, Pos>,
    /// Every step id declared so far, for reference checks.
    ids: HashSet<String>,
    /// The step being compiled, innermost last.
    current: Vec<String>,
    /// Steps that already have a problem reported, so the core's checks add no echo.
    troubled: HashSet<String>,
    /// Names that enclosing operators bind for the expressions inside them (a map's `as`,
    /// `loop`, `tick`), innermost last.
    bound: Vec<String>,
    /// The only names expressions may start from here, where they see something other
    /// than the run's scope (a guardrail's `value`, a command tool's `args`).
    roots_only: Option<&'static [&'static str]>,
    /// The properties the workflow's input schema declares, and whether it allows no others
    /// (`additionalProperties: false`): what `input.NAME` in a template may name.
    input_fields: Option<(Vec<String>, bool)>,
    /// The called files read so far, by path relative to the first file's directory (see
    /// [`Loaded::called_files`]).
    called_files: Option<std::collections::BTreeMap<String, String>>,
    /// The approver lists named so far (see [`Loaded::approver_lists`]).
    approver_lists: Vec<ApproverList>,
}

/// What follows each `root` (`steps.`, `input.`) in `source` that starts a name (is not the
/// tail of another, as `loop.input.` or `my_steps.` are).
fn after_root<'a>(source: &'a str, root: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(root) {
        let before = rest[..at].chars().last();
        rest = &rest[at + root.len()..];
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            found.push(rest);
        }
    }
    found
}

/// The names every expression over a run's scope may start from.
const SCOPE_ROOTS: &[&str] = &["input", "steps", "run"];

/// The item a JSON pointer names inside `node` (as deep as the file has it), and the
/// pointer as a dotted path (`properties.x.type`).
fn locate<'a>(node: &'a Item, pointer: &str) -> (&'a Item, String) {
    let mut at = node;
    let mut path = Vec::new();
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        let next = match &at.value {
            Yaml::Map(_) => at.get(&token),
            Yaml::Seq(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        };
        path.push(token);
        match next {
            Some(next) => at = next,
            None => break,
        }
    }
    (at, path.join("."))
}

/// The closest of `candidates` to `word` (for "did you mean" hints): at most two edits away.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates.into_iter().map(|c| (strsim::levenshtein(word, c), c)).filter(|(d, _)| *d <= 2).min().map(|(_, c)| c)
}

impl Compiler {
    fn error(&mut self, pos: Pos, message: impl Into<String>) {
        self.troubled.extend(self.current.iter().cloned());
        self.diagnostics.push(Diagnostic {
            file: self.file.clone(),
            line: pos.line.max(1),
            column: pos.column.max(1),
            message: message.into(),
            hint: None,
        });
    }

    fn warn(&mut self, pos: Pos, message: impl Into<String>, hint: impl Into<String>) {
        self.warnings.push(Diagnostic {
            file: self.file.clone(),
            line: pos.line.max(1),
            column: pos.column.max(1),
            message: message.into(),
            hint: Some(hint.into()),
        });
    }

    fn error_hint(&mut self, pos: Pos, message: impl Into<String>, hint: impl Into<String>) {
        self.error(pos, message);
        if let Some(last) = self.diagnostics.last_mut() {
            last.hint = Some(hint.into());
        }
    }

    fn finish_err(mut self) -> LoadError {
        // This file's problems in file order, then those of the files it calls, each file's
        // in its own order (the sort is stable).
        let file = self.file.clone();
        self.diagnostics.sort_by_key(|d| if d.file == file { (0, d.line, d.column) } else { (1, 0, 0) });
        LoadError { diagnostics: self.diagnostics }
    }

    fn entries<'a>(&mut self, node: &'a Item, what: &str) -> Option<&'a [(yaml::Key, Item)]> {
        match &node.value {
            Yaml::Map(entries) => Some(entries),
            _ => {
                self.error(node.pos, format!("{what} must be a mapping, not {}", node.kind()));
                None
            }
        }
    }

    fn unknown_fields(&mut self, entries: &[(yaml::Key, Item)], allowed: &[&str], what: &str) {
        for (key, _) in entries {
            if !allowed.contains(&key.name.as_str()) {
                let message = format!("unknown field `{}` in {what}", key.name);
                match closest(&key.name, allowed.iter().copied()) {
                    Some(near) => self.error_hint(key.pos, message, format!("did you mean `{near}`?")),
                    None => self.error_hint(key.pos, message, format!("expected one of: {}", allowed.join(", "))),
                }
            }
        }
    }

    fn string(&mut self, node: &Item, what: &str) -> Option<String> {
        match &node.value {
            Yaml::Str(s) => Some(s.clone()),
            _ => {
                self.error(node.pos, format!("{what} must be a string, not {}", node.kind()));
                None
            }
        }
    }

    fn number(&mut self, node: &Item, what: &str) -> Option<u64> {
        match &node.value {
            Yaml::Int(i) if *i >= 0 => Some(*i as u64),
            _ => {
                self.error(node.pos, format!("{what} must be a whole number, not {}", node.kind()));
                None
            }
        }
    }

    fn duration(&mut self, node: &Item, what: &str) -> Option<Duration> {
        let text = self.string(node, what)?;
        match parse_duration(&text) {
            Some(d) => Some(d),
            None => {
                self.error_hint(
                    node.pos,
                    format!("{what} `{text}` is not a duration"),
                    "write it like 500ms, 30s, 5m, 2h or 1d",
                );
                None
            }
        }
    }

    /// Checks an expression (syntax and references to steps declared earlier).
    fn expression(&mut self, node: &Item, what: &str) -> Option<String> {
        let source = match &node.value {
            Yaml::Str(s) => expr::single_expression(s).unwrap_or(s).to_owned(),
            Yaml::Bool(b) => b.to_string(),
            _ => {
                self.error(node.pos, format!("{what} must be an expression, not {}", node.kind()));
                return None;
            }
        };
        if let Err(why) = expr::check_expression(&source) {
            self.error(node.pos, format!("{what} `{source}` does not parse: {why}"));
            return None;
        }
        if !self.references(node.pos, &source) {
            self.roots(node.pos, &expr::expression_roots(&source));
        }
        Some(source)
    }

    /// Every name an expression starts from must be one it can see here: a typo such as
    /// `inptu` or `stpes` is reported at load time, not found null at run time.
    fn roots(&mut self, pos: Pos, used: &[String]) {
        let known: Vec<String> = match self.roots_only {
            Some(only) => only.iter().map(|n| (*n).to_owned()).collect(),
            None => SCOPE_ROOTS.iter().map(|n| (*n).to_owned()).chain(self.bound.iter().cloned()).collect(),
        };
        for name in used {
            if known.contains(name) || expr::is_global(name) {
                continue;
            }
            let message = format!("`{name}` is not a name an expression can use here");
            let hint = match closest(name, known.iter().map(String::as_str)) {
                Some(near) => format!("did you mean `{near}`? it can use: {}", known.join(", ")),
                None => format!("it can use: {}", known.join(", ")),
            };
            self.error_hint(pos, message, hint);
        }
    }

    /// Compiles `inner` with `name` bound for the expressions inside it.
    fn binding<T>(&mut self, name: &str, inner: impl FnOnce(&mut Self) -> T) -> T {
        self.bound.push(name.to_owned());
        let result = inner(self);
        self.bound.pop();
        result
    }

    /// A JSON Schema written in the file, reported at its position if it is not one.
    fn schema(&mut self, node: &Item, what: &str) -> Value {
        let schema = node.to_json();
        if let Err(why) = stepwright_core::check_schema(&schema) {
            // At the offending keyword's value (`type: strnig` on its own line), not at the
            // schema's start; the path says where it is inside the schema.
            let (at, path) = locate(node, &why.pointer);
            let inside = if path.is_empty() { String::new() } else { format!(" (at `{path}`)") };
            self.error(at.pos, format!("{what} is not a valid JSON Schema{inside}: {why}"));
        }
        schema
    }

    /// Checks every template string inside a value.
    fn templates(&mut self, node: &Item) {
        match &node.value {
            Yaml::Str(s) => {
                if let Err(why) = expr::check_template(s) {
                    self.error(node.pos, format!("the template `{s}` does not parse: {why}"));
                } else if !self.references(node.pos, s) {
                    // (A dashed id's tail would be reported again as an unknown name.)
                    self.roots(node.pos, &expr::template_roots(s));
                    self.input_names(node.pos, s);
                }
            }
            Yaml::Seq(items) => items.iter().for_each(|i| self.templates(i)),
            Yaml::Map(entries) => entries.iter().for_each(|(_, v)| self.templates(v)),
            _ => {}
        }
    }

    /// `input.NAME` should name a property the workflow's input schema declares: an error
    /// when the schema allows no others, else a warning (a typo reads as `null`).
    fn input_names(&mut self, pos: Pos, source: &str) {
        let Some((names, closed)) = self.input_fields.clone() else { return };
        // Only where `input` is the workflow's (not a name an operator binds, not a scope of
        // its own such as a guardrail's).
        if self.bound.iter().any(|b| b == "input") || self.roots_only.is_some_and(|roots| !roots.contains(&"input")) {
            return;
        }
        for rest in after_root(source, "input.") {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if name.is_empty() || names.contains(&name) {
                continue;
            }
            let message = format!(
                "`input.{name}` names no property of the workflow's input (its schema declares {})",
                names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            );
            let hint = match closest(&name, names.iter().map(String::as_str)) {
                Some(near) => format!("did you mean `{near}`?"),
                None => "declare it under the input schema's `properties`".to_owned(),
            };
            if closed { self.error_hint(pos, message, hint) } else { self.warn(pos, message, hint) }
        }
    }

    /// `steps.<id>` must name a step declared earlier in the file. `true` when it found an id
    /// with a `-` written as `steps.a-b`.
    fn references(&mut self, pos: Pos, source: &str) -> bool {
        let mut dashed_found = false;
        for rest in after_root(source, "steps.") {
            let id: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !id.is_empty() && !self.ids.contains(&id) {
                let known: Vec<String> = self.ids.iter().cloned().collect();
                // `steps.fetch-page` reads as `steps.fetch - page`: an id with a `-` is
                // written `steps['fetch-page']` in an expression.
                let dashed: String =
                    rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect();
                if dashed.contains('-') && self.ids.contains(dashed.trim_end_matches('-')) {
                    let dashed = dashed.trim_end_matches('-');
                    self.error_hint(
                        pos,
                        format!("`steps.{dashed}` reads as a subtraction (`steps.{id} - …`)"),
                        format!("write `steps['{dashed}']`: an id with a `-` is looked up by its name in brackets"),
                    );
                    dashed_found = true;
                    continue;
                }
                let message = format!("`steps.{id}` refers to no step declared before this point");
                match closest(&id, known.iter().map(String::as_str)) {
                    Some(near) => self.error_hint(pos, message, format!("did you mean `{near}`?")),
                    None => self.error(pos, message),
                }
            }
        }
        dashed_found
    }

    /// The workflow's `telemetry: {capture_content, max_content_bytes}`: content on the
    /// spans of its runs, whatever the engine says.
    fn telemetry(
        &mut self,
        root: &Item,
        builder: stepwright_core::WorkflowBuilder,
    ) -> stepwright_core::WorkflowBuilder {
        let Some(node) = root.get("telemetry") else { return builder };
        let Some(entries) = self.entries(node, "`telemetry`") else { return builder };
        self.unknown_fields(entries, &["capture_content", "max_content_bytes"], "`telemetry`");
        let capture = match node.get("capture_content").map(|n| (n.pos, &n.value)) {
            Some((_, Yaml::Bool(on))) => Some(*on),
            Some((pos, _)) => {
                self.error(pos, "`telemetry.capture_content` must be true or false");
                None
            }
            None => None,
        };
        let mut content = stepwright_core::ContentCapture::default();
        if let Some(most) = node.get("max_content_bytes") {
            match self.number(most, "`telemetry.max_content_bytes`") {
                Some(0) => self.error(most.pos, "`telemetry.max_content_bytes` must be at least 1"),
                Some(n) => content.max_bytes = usize::try_from(n).unwrap_or(usize::MAX),
                None => {}
            }
            if capture != Some(true) {
                self.error_hint(
                    most.pos,
                    "`telemetry.max_content_bytes` does nothing without `capture_content: true`",
                    "content goes on spans only when captured",
                );
            }
        }
        match capture {
            Some(true) => builder.capture_content(Some(content)),
            Some(false) => builder.capture_content(None),
            None => builder,
        }
    }

    /// The workflow's `concurrency: {key, limit}` (the key a template over `input`) and
    /// `priority`.
    fn flow_control(
        &mut self,
        root: &Item,
        mut builder: stepwright_core::WorkflowBuilder,
    ) -> stepwright_core::WorkflowBuilder {
        if let Some(node) = root.get("priority") {
            match &node.value {
                Yaml::Int(n) if i32::try_from(*n).is_ok() => builder = builder.priority(*n as i32),
                _ => self
                    .error(node.pos, format!("`priority` must be a whole number (higher first), not {}", node.kind())),
            }
        }
        let Some(node) = root.get("concurrency") else { return builder };
        let Some(entries) = self.entries(node, "`concurrency`") else { return builder };
        self.unknown_fields(entries, &["key", "limit"], "`concurrency`");
        let limit = match node.get("limit") {
            Some(limit) => match self.number(limit, "`concurrency.limit`") {
                Some(0) => {
                    self.error(limit.pos, "`concurrency.limit` must be at least 1");
                    None
                }
                n => n.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            },
            None => {
                self.error_hint(
                    node.pos,
                    "`concurrency` needs a `limit`",
                    "how many runs with one key at a time: `limit: 1`",
                );
                None
            }
        };
        let key = match node.get("key") {
            Some(key) => {
                // The key is computed when a run is created: only its input is known then.
                let outer = self.roots_only.replace(&["input"]);
                self.templates(key);
                self.roots_only = outer;
                Some(key.to_json())
            }
            None => {
                self.error_hint(
                    node.pos,
                    "`concurrency` needs a `key`",
                    "the group of a run: `key: \"{{ input.customer }}\"`",
                );
                None
            }
        };
        if let (Some(template), Some(limit)) = (key, limit) {
            let source = template.to_string();
            let key = Expr::try_new(move |scope| expr::eval_value(&template, scope)).with_source(source);
            builder = builder.concurrency(key, limit);
        }
        builder
    }

    fn workflow(&mut self, root: &Item) -> Option<Workflow> {
        let entries = self.entries(root, "a workflow file")?;
        self.unknown_fields(entries, WORKFLOW_FIELDS, "the workflow");
        self.resources(root);
        let name = match root.get("workflow") {
            Some(node) => self.string(node, "`workflow`"),
            None => {
                self.error_hint(
                    root.pos,
                    "the file has no `workflow` name",
                    "start the file with `workflow: my-workflow`",
                );
                None
            }
        };
        let version = root.get("version").and_then(|v| self.string(v, "`version`")).unwrap_or_else(|| "0.0.0".into());
        let mut builder = Workflow::builder(name.as_deref().unwrap_or("unnamed")).version(&version);
        if let Some(node) = root.get("input") {
            builder = builder.input_order(node.property_order());
            let schema = self.schema(node, "the workflow's `input`");
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
                self.input_fields = Some((properties.keys().cloned().collect(), closed));
            }
            builder = builder.input_schema(schema);
        }
        if let Some(schema) = root.get("output_schema") {
            builder = builder.output_schema(self.schema(schema, "the workflow's `output_schema`"));
        }
        let steps = match root.get("steps") {
            Some(node) => self.steps("", node, &mut HashSet::new()),
            None => {
                self.error(root.pos, "the workflow has no `steps`");
                Vec::new()
            }
        };
        builder = builder.steps(steps);
        builder = self.flow_control(root, builder);
        builder = self.telemetry(root, builder);
        if let Some(output) = root.get("output") {
            self.templates(output);
            let template = output.to_json();
            let source = template.to_string();
            builder =
                builder.output(Expr::try_new(move |scope| expr::eval_value(&template, scope)).with_source(source));
        }
        match builder.build() {
            Ok(workflow) if self.diagnostics.is_empty() => Some(workflow),
            Ok(_) => None,
            Err(error) => {
                // Ids are checked here already, with their exact position; a step with a
                // problem reported here gets no echo from the core (a dropped child makes
                // its parent look empty); "no steps" only when nothing else was said.
                let checked_here = |m: &str| {
                    m.starts_with("duplicate step id")
                        || m.starts_with("step id:")
                        || m.contains("not a valid JSON Schema")
                };
                let said_something = !self.diagnostics.is_empty();
                let echo = |p: &stepwright_core::BuildProblem| {
                    checked_here(&p.message)
                        || self.troubled.contains(&p.at)
                        || (p.at == "<workflow>" && p.message.contains("at least one step") && said_something)
                };
                let problems: Vec<_> = error.problems.into_iter().filter(|p| !echo(p)).collect();
                for problem in problems {
                    let pos = self.positions.get(&problem.at).copied().unwrap_or(root.pos);
                    self.error(pos, problem.message);
                }
                None
            }
        }
    }

    fn steps(&mut self, prefix: &str, node: &Item, scope: &mut HashSet<String>) -> Vec<Node> {
        let Yaml::Seq(items) = &node.value else {
            self.error(node.pos, format!("`steps` must be a list, not {}", node.kind()));
            return Vec::new();
        };
        items.iter().filter_map(|item| self.step(prefix, item, scope)).collect()
    }

    fn step(&mut self, prefix: &str, node: &Item, scope: &mut HashSet<String>) -> Option<Node> {
        let entries = self.entries(node, "a step")?;
        let kinds: Vec<&yaml::Key> =
            entries.iter().map(|(k, _)| k).filter(|k| kinds::kind(&k.name).is_some()).collect();
        let extra: &[&str] = kinds.first().and_then(|k| kinds::kind(&k.name)).map_or(&[], |k| k.fields);
        let allowed: Vec<&str> =
            COMMON_FIELDS.iter().copied().chain(KINDS.iter().map(|k| k.name)).chain(extra.iter().copied()).collect();
        self.unknown_fields(entries, &allowed, "a step");
        let id = match node.get("id") {
            Some(id_node) => {
                let id = self.string(id_node, "a step `id`")?;
                if let Err(why) = stepwright_core::check_step_name(&id) {
                    self.error(id_node.pos, format!("step id: {why}"));
                }
                if !scope.insert(id.clone()) {
                    self.error(id_node.pos, format!("duplicate step id `{id}` in the same scope"));
                }
                id
            }
            None => {
                self.error_hint(node.pos, "a step needs an `id`", "add `id: a-name` to the step");
                return None;
            }
        };
        let path = if prefix.is_empty() { id.clone() } else { format!("{prefix}/{id}") };
        self.positions.insert(path.clone(), node.pos);
        self.current.push(path.clone());
        let step = self.step_body(node, &id, &path, &kinds);
        self.current.pop();
        step
    }

    fn step_body(&mut self, node: &Item, id: &str, path: &str, kinds: &[&yaml::Key]) -> Option<Node> {
        let id = id.to_owned();
        match kinds.len() {
            0 => {
                self.error_hint(
                    node.pos,
                    format!("step `{id}` has no kind"),
                    format!("give it exactly one of: {}", KINDS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")),
                );
                return None;
            }
            1 => {}
            _ => {
                let names: Vec<String> = kinds.iter().map(|k| format!("`{}`", k.name)).collect();
                self.error(
                    node.pos,
                    format!("step `{id}` has {} kinds ({}); a step has exactly one", names.len(), names.join(", ")),
                );
                return None;
            }
        }
        // Conditions see earlier steps only; the step's own id becomes visible after it.
        let condition = node.get("if").and_then(|c| self.expression(c, "the `if` condition"));
        let kind = kinds[0];
        let body = node.get(&kind.name).expect("the kind key is present");
        let spec = kinds::kind(&kind.name).expect("only known kinds are collected");
        let compiled = (spec.compile)(self, &KindSite { path, id: &id, body, step: node });
        self.ids.insert(id.clone());
        let mut step = compiled?;
        if let Some(source) = condition {
            step = step.only_if(
                Expr::try_new({
                    let source = source.clone();
                    move |scope| expr::truthy(&source, scope)
                })
                .with_source(source),
            );
        }
        self.policies(step, node, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2d"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("1.5m"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("soon"), None);
        assert_eq!(parse_duration("10 parsecs"), None);
    }
}
