//! What a workflow file declares for its steps to use — the `models`, `tools` and `agents`
//! sections — and the step kinds that use them: `llm`, `agent`, `tool`, `memory.store`,
//! `memory.recall`. Every reference (a step's model, an agent's tools, a delegate) is checked
//! when the file loads and reported at its position.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};
use stepwright_core::{Expr, InputSource, Node};
use stepwright_llm::{
    AgentSpec, AgentStep, CommandTool, HttpTool, LlmSpec, LlmStep, ModelConfig, ModelParams, Pricing, Provider,
    RecallSpec, RecallStep, RememberSpec, RememberStep, ScopeKind, TokenLimitField, ToolDef, ToolStep, Tools,
    sampling_problem,
};

use super::kinds::KindSite;
use super::scalars::parse_effect;
use super::{Compiler, closest};
use crate::expr;
use crate::yaml::{Item, Yaml};

/// A loaded workflow file: the workflow, carrying the file's tools and agents as its own
/// services ([`stepwright_core::Workflow::services`]), and the file's models as
/// configurations — binding them (keys, cassettes, `--model` overrides) is the caller's job.
#[derive(Debug)]
pub struct Loaded {
    /// The compiled, checked workflow (its models not yet bound).
    pub workflow: stepwright_core::Workflow,
    /// The `models` section, by binding name.
    pub models: BTreeMap<String, ModelConfig>,
    /// The `mcp_servers` section, to connect before a run and register in the workflow's
    /// tools.
    pub mcp_servers: Vec<stepwright_mcp::ServerConfig>,
    /// Every use the file makes of an MCP server's tool, to check once the server says
    /// which tools it has.
    pub mcp_tool_uses: Vec<super::mcp::McpToolUse>,
    /// The `schedules` section, by name: what a worker starts when.
    pub schedules: Vec<super::schedules::FileSchedule>,
    /// The `triggers` section, by name: what a worker starts on which events.
    pub triggers: Vec<super::triggers::FileTrigger>,
    /// What loads but may not do what the file's author expects (a `retry` that cannot take
    /// effect), this file's and its called files', in file order.
    pub warnings: Vec<super::Diagnostic>,
    /// The files its `workflow:` calls read from disk (and theirs), by path relative to the
    /// first file's directory: kept with the source, so a run rebuilds the definition it
    /// started with even after a called file changes. `None` when a called file lies outside
    /// the first file's directory tree (reached through an allowed directory): then the calls
    /// are read from the disk again.
    pub called_files: Option<BTreeMap<String, String>>,
    /// Every approver list the file (and the files it calls) names, where it names it: what
    /// `validate --server` asks a server whether anyone can meet.
    pub approver_lists: Vec<super::ApproverList>,
}

/// The declared resources, while compiling.
#[derive(Default)]
pub(super) struct Resources {
    pub(super) models: BTreeMap<String, ModelConfig>,
    pub(super) tools: Tools,
    pub(super) agents: BTreeMap<String, AgentSpec>,
    /// Every agent declared, including those with problems.
    pub(super) agent_names: Vec<String>,
    pub(super) mcp_servers: BTreeMap<String, stepwright_mcp::ServerConfig>,
    /// Every MCP server declared, including those with problems.
    pub(super) mcp_names: Vec<String>,
    pub(super) mcp_uses: Vec<super::mcp::McpToolUse>,
}

const MODEL_FIELDS: &[&str] = &[
    "provider",
    "model",
    "base_url",
    "api_key_env",
    "pricing",
    "timeout",
    "max_retries",
    "api_version",
    "token_limit_field",
    "sampling",
    "requests_per_minute",
    "tokens_per_minute",
];
const TOOL_FIELDS: &[&str] = &[
    "description",
    "input",
    "output",
    "command",
    "http",
    "worker",
    "effect",
    "safe_to_retry",
    "needs_approval",
    "timeout",
    "cwd",
    "env",
];
const LLM_FIELDS: &[&str] = &[
    "model",
    "prompt",
    "messages",
    "system",
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "repair_turns",
    "stream",
    "tools",
    "max_tool_rounds",
];

/// A node's input computed from a template over the scope when the step runs.
fn templated_input(template: Value) -> InputSource {
    let source = template.to_string();
    InputSource::Expr(Expr::try_new(move |scope| expr::eval_value(&template, scope)).with_source(source))
}

impl Compiler {
    /// Reads `models`, `tools`, `mcp_servers` and `agents` (in that order: agents refer to
    /// the others).
    pub(super) fn resources(&mut self, root: &Item) {
        if let Some(models) = root.get("models") {
            self.models_section(models);
        }
        if let Some(tools) = root.get("tools") {
            self.tools_section(tools);
        }
        if let Some(servers) = root.get("mcp_servers") {
            self.mcp_section(servers);
        }
        if let Some(agents) = root.get("agents") {
            self.agents_section(agents);
        }
    }

    fn models_section(&mut self, section: &Item) {
        let Some(entries) = self.entries(section, "`models`") else { return };
        for (key, node) in entries {
            let Some(fields) = self.entries(node, &format!("model `{}`", key.name)) else { continue };
            self.unknown_fields(fields, MODEL_FIELDS, &format!("model `{}`", key.name));
            let provider = match node.get("provider") {
                Some(p) => match self.string(p, "`provider`").map(|s| s.parse::<Provider>()) {
                    Some(Ok(provider)) => Some(provider),
                    Some(Err(why)) => {
                        self.error(p.pos, why);
                        None
                    }
                    None => None,
                },
                None => {
                    self.error_hint(node.pos, format!("model `{}` has no `provider`", key.name), "openai or anthropic");
                    None
                }
            };
            let model = match node.get("model") {
                Some(m) => self.string(m, "`model`"),
                None => {
                    self.error_hint(
                        node.pos,
                        format!("model `{}` has no `model`", key.name),
                        "like `model: gpt-4o-mini`",
                    );
                    None
                }
            };
            let (Some(provider), Some(model)) = (provider, model) else { continue };
            let mut config = ModelConfig::new(provider, &model);
            if let Some(url) = node.get("base_url") {
                config.base_url = self.string(url, "`base_url`");
                if let Some(text) = &config.base_url
                    && !(text.starts_with("http://") || text.starts_with("https://"))
                {
                    self.error(url.pos, format!("`base_url` {text:?} is not an http:// or https:// URL"));
                }
            }
            if let Some(env) = node.get("api_key_env") {
                config.api_key_env = self.string(env, "`api_key_env`");
            }
            if let Some(pricing) = node.get("pricing") {
                config.pricing = self.pricing(pricing);
            }
            if let Some(timeout) = node.get("timeout").and_then(|t| self.duration(t, "`timeout`")) {
                config.http.timeout = timeout;
            }
            if let Some(retries) = node.get("max_retries").and_then(|r| self.number(r, "`max_retries`")) {
                config.http.max_retries = u32::try_from(retries).unwrap_or(u32::MAX);
            }
            for (field, limit) in [
                ("requests_per_minute", &mut config.http.requests_per_minute),
                ("tokens_per_minute", &mut config.http.tokens_per_minute),
            ] {
                let Some(value) = node.get(field) else { continue };
                match self.number(value, &format!("`{field}`")) {
                    Some(0) => {
                        self.error(value.pos, format!("`{field}` must be at least 1 (leave it out for no limit)"));
                    }
                    Some(n) => *limit = std::num::NonZeroU32::new(u32::try_from(n).unwrap_or(u32::MAX)),
                    None => {}
                }
            }
            if let Some(version) = node.get("api_version") {
                if provider == Provider::Anthropic {
                    config.api_version = self.string(version, "`api_version`");
                } else {
                    self.error(version.pos, "`api_version` is the `anthropic-version` header: anthropic bindings only");
                }
            }
            if let Some(field) = node.get("token_limit_field") {
                match (provider, self.string(field, "`token_limit_field`").as_deref()) {
                    (Provider::Anthropic, _) => {
                        self.error(field.pos, "`token_limit_field` is for openai bindings (Anthropic's is max_tokens)");
                    }
                    (_, Some("max_tokens")) => config.token_limit_field = Some(TokenLimitField::MaxTokens),
                    (_, Some("max_completion_tokens")) => {
                        config.token_limit_field = Some(TokenLimitField::MaxCompletionTokens);
                    }
                    (_, Some(other)) => self.error_hint(
                        field.pos,
                        format!("unknown `token_limit_field` {other:?}"),
                        "max_tokens or max_completion_tokens",
                    ),
                    (_, None) => {}
                }
            }
            if let Some(sampling) = node.get("sampling") {
                match sampling.value {
                    Yaml::Bool(takes) => config.sampling = Some(takes),
                    _ => self.error(sampling.pos, "`sampling` must be true or false"),
                }
            }
            self.resources.models.insert(key.name.clone(), config);
        }
    }

    fn pricing(&mut self, node: &Item) -> Option<Pricing> {
        let fields = self.entries(node, "`pricing`")?;
        self.unknown_fields(fields, &["input", "output", "cache_read", "cache_write"], "`pricing`");
        let mut price = |name: &str, required: bool| -> Option<f64> {
            let Some(value) = node.get(name) else {
                if required {
                    self.error_hint(node.pos, format!("`pricing` needs `{name}`"), "US dollars per million tokens");
                }
                return None;
            };
            match value.value {
                Yaml::Int(i) if i >= 0 => Some(i as f64),
                Yaml::Float(f) if f >= 0.0 => Some(f),
                _ => {
                    self.error(value.pos, format!("`pricing.{name}` must be a number of dollars at least 0"));
                    None
                }
            }
        };
        let input = price("input", true);
        let output = price("output", true);
        let cache_read = price("cache_read", false);
        let cache_write = price("cache_write", false);
        Some(Pricing { input: input?, output: output?, cache_read, cache_write })
    }

    fn tools_section(&mut self, section: &Item) {
        let Some(entries) = self.entries(section, "`tools`") else { return };
        for (key, node) in entries {
            let name = &key.name;
            let Some(fields) = self.entries(node, &format!("tool `{name}`")) else { continue };
            self.unknown_fields(fields, TOOL_FIELDS, &format!("tool `{name}`"));
            let description = node.get("description").and_then(|d| self.string(d, "`description`")).unwrap_or_default();
            let mut def = ToolDef::new(name, &description);
            let before = self.diagnostics.len();
            if let Some(schema) = node.get("output") {
                def = def.output_schema(self.schema(schema, "the tool's `output`"));
            }
            if let Some(schema) = node.get("input") {
                def = def.input_schema(self.schema(schema, "the tool's `input`"));
            }
            // A schema reported here is not reported again by the registry.
            let schema_ok = self.diagnostics.len() == before;
            if let Some(effect) = node.get("effect") {
                match self.string(effect, "`effect`").map(|e| parse_effect(&e)) {
                    Some(Some(effect)) => def = def.effect(effect),
                    Some(None) => {
                        self.error_hint(effect.pos, "unknown `effect`", "one of: pure, read, write, external, human");
                    }
                    None => {}
                }
            }
            if self.flag(node, "safe_to_retry") {
                def = def.safe_to_retry();
            }
            if self.flag(node, "needs_approval") {
                def = def.needs_approval();
            }
            if let Some(timeout) = node.get("timeout").and_then(|t| self.duration(t, "`timeout`")) {
                def = def.timeout(timeout);
            }
            let kinds: Vec<&str> =
                ["command", "http", "worker"].into_iter().filter(|kind| node.get(kind).is_some()).collect();
            let tool: Option<Arc<dyn stepwright_llm::Tool>> = match (
                node.get("command"),
                node.get("http"),
                node.get("worker"),
            ) {
                _ if kinds.len() > 1 => {
                    self.error(
                        node.pos,
                        format!(
                            "tool `{name}` has {}; it has one",
                            kinds.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(" and ")
                        ),
                    );
                    None
                }
                (Some(command), _, _) => self.command_tool(def, node, command).map(|t| Arc::new(t) as _),
                (_, Some(http), _) => self.http_tool(def, node, http).map(|t| Arc::new(t) as _),
                (_, _, Some(worker)) => self.worker_tool(def, node, worker).map(|t| Arc::new(t) as _),
                (None, None, None) => {
                    self.error_hint(
                        node.pos,
                        format!("tool `{name}` has none of `command`, `http` or `worker`"),
                        "like `command: [\"./scripts/lookup\", \"{{ args.id }}\"]`, or `worker: { queue: py }` for a step worker",
                    );
                    None
                }
            };
            if let Some(tool) = tool
                && schema_ok
                && let Err(why) = self.resources.tools.register(tool)
            {
                self.error(key.pos, why.to_string());
            }
        }
    }

    pub(super) fn flag(&mut self, node: &Item, field: &str) -> bool {
        match node.get(field).map(|f| (f.pos, &f.value)) {
            None => false,
            Some((_, Yaml::Bool(b))) => *b,
            Some((pos, _)) => {
                self.error(pos, format!("`{field}` must be true or false"));
                false
            }
        }
    }

    fn command_tool(&mut self, def: ToolDef, node: &Item, command: &Item) -> Option<CommandTool> {
        let Yaml::Seq(parts) = &command.value else {
            self.error_hint(
                command.pos,
                "`command` must be a list: the program, then its arguments",
                "no shell is involved; like [\"./scripts/lookup\", \"{{ args.id }}\"]",
            );
            return None;
        };
        if parts.is_empty() {
            self.error(command.pos, "`command` is empty");
            return None;
        }
        self.warn_on_templated_code(parts);
        let mut templates = Vec::new();
        for part in parts {
            let outer = self.roots_only.replace(&["args"]);
            self.templates(part);
            self.roots_only = outer;
            templates.push(Value::String(self.string(part, "a `command` part")?));
        }
        let render = Arc::new(move |args: &Value| -> Result<Vec<String>, String> {
            let scope = serde_json::json!({ "args": args });
            templates
                .iter()
                .map(|t| match expr::eval_value(t, &scope).map_err(|e| e.message)? {
                    Value::String(s) => Ok(s),
                    other => Ok(other.to_string()),
                })
                .collect()
        });
        let mut tool = CommandTool::new(def, Vec::new()).argv_from(render);
        if let Some(cwd) = node.get("cwd").and_then(|c| self.string(c, "`cwd`")) {
            tool = tool.cwd(cwd);
        }
        if let Some(env) = node.get("env") {
            for (name, value) in self.string_map(env, "`env`") {
                tool = tool.env(&name, &value);
            }
        }
        Some(tool)
    }

    /// Warns where a template is written into code an interpreter runs (`[sh, -c, "… {{ args.x
    /// }}"]`): the argument's text becomes code, so an argument like `$(rm -rf ~)` runs. The
    /// safe form passes it as an argument of its own, which the code reads (`"$1"`).
    fn warn_on_templated_code(&mut self, parts: &[Item]) {
        fn text(item: &Item) -> Option<&str> {
            match &item.value {
                Yaml::Str(s) => Some(s.as_str()),
                _ => None,
            }
        }
        let Some(program) = parts.first().and_then(text) else { return };
        let name = program.rsplit('/').next().unwrap_or(program);
        let (shell, code_flag) = match name {
            "sh" | "bash" | "zsh" | "dash" | "ksh" | "ash" | "fish" => (true, 'c'),
            n if n.starts_with("python") => (false, 'c'),
            "node" | "perl" | "ruby" => (false, 'e'),
            _ => return,
        };
        // The code is the argument after the first flag cluster that holds the code flag
        // (`-c`, `-ec`, `-lc`, `-e`).
        let mut args = parts.iter().skip(1);
        let code = loop {
            let Some(arg) = args.next() else { return };
            let Some(flags) = text(arg).and_then(|a| a.strip_prefix('-')) else { return };
            if !flags.starts_with('-') && flags.contains(code_flag) {
                break args.next();
            }
        };
        if let Some(code) = code.filter(|code| text(code).is_some_and(|s| s.contains("{{") || s.contains("{%"))) {
            let hint = if shell {
                format!(
                    "pass the value as an argument and read it in the script: [{name}, -c, 'echo \"$1\"', {name}, \"{{{{ args.x }}}}\"]"
                )
            } else {
                "pass the value as an argument of its own (read from argv), or on stdin: the tool's arguments arrive there as JSON".to_owned()
            };
            let danger = if shell {
                "an argument like `$(rm -rf ~)` runs as a command"
            } else {
                "an argument can run code of its choosing"
            };
            self.warn(
                code.pos,
                format!("a template inside the code `{name}` runs: the value becomes code, and {danger}"),
                hint,
            );
        }
    }

    fn http_tool(&mut self, def: ToolDef, node: &Item, http: &Item) -> Option<HttpTool> {
        for field in ["cwd", "env"] {
            if let Some(f) = node.get(field) {
                self.error(f.pos, format!("`{field}` is for `command` tools"));
            }
        }
        let fields = self.entries(http, "`http`")?;
        self.unknown_fields(
            fields,
            &["url", "method", "headers", "signing_secret_env", "async", "heartbeat_timeout"],
            "`http`",
        );
        let url = match http.get("url") {
            Some(u) => self.string(u, "`url`")?,
            None => {
                self.error(http.pos, "`http` needs a `url`");
                return None;
            }
        };
        let method = http.get("method").and_then(|m| self.string(m, "`method`")).unwrap_or_else(|| "POST".into());
        let mut tool = match HttpTool::new(def, &method, &url) {
            Ok(tool) => tool,
            Err(why) => {
                self.error(http.pos, why);
                return None;
            }
        };
        if let Some(headers) = http.get("headers") {
            for (name, value) in self.string_map(headers, "`headers`") {
                tool = tool.header(&name, &value);
            }
        }
        if let Some(env) = http.get("signing_secret_env") {
            let name = self.string(env, "`signing_secret_env`")?;
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                self.error_hint(
                    env.pos,
                    format!("`signing_secret_env` {name:?} is not an environment variable's name"),
                    "the variable's name, not the secret: `signing_secret_env: PUSH_SECRET`",
                );
                return None;
            }
            tool = tool.signed_with_env(&name);
        }
        let push = match http.get("async") {
            Some(item) => match &item.value {
                Yaml::Bool(on) => *on,
                _ => {
                    self.error(item.pos, "`async` is true or false");
                    return None;
                }
            },
            None => false,
        };
        let heartbeat_timeout = http.get("heartbeat_timeout").map(|t| (t.pos, self.duration(t, "`heartbeat_timeout`")));
        match (push, heartbeat_timeout) {
            (true, timeout) => match tool.push(timeout.and_then(|(_, t)| t)) {
                Ok(pushed) => tool = pushed,
                Err(why) => {
                    self.error(http.pos, why);
                    return None;
                }
            },
            (false, Some((pos, _))) => {
                self.error_hint(pos, "`heartbeat_timeout` is for push mode", "add `async: true`, or remove it");
                return None;
            }
            (false, None) => {}
        }
        Some(tool)
    }

    fn agents_section(&mut self, section: &Item) {
        let Some(entries) = self.entries(section, "`agents`") else { return };
        // Every agent's name first: agents may delegate to agents declared after them.
        let names: Vec<String> = entries.iter().map(|(k, _)| k.name.clone()).collect();
        self.resources.agent_names.clone_from(&names);
        for (key, node) in entries {
            let Some(fields) = self.entries(node, &format!("agent `{}`", key.name)) else { continue };
            if let Some(output) = node.get("output") {
                self.schema(output, "the agent's `output`");
            }
            // References first, from the file, so they are reported even if the rest of the
            // agent does not parse.
            if let Some(model) = node.get("model").and_then(|m| m.as_str()) {
                self.check_model(node.get("model"), model);
            }
            for (field, known) in [("tools", None), ("delegates", Some(&names)), ("handoffs", Some(&names))] {
                let Some(Yaml::Seq(items)) = node.get(field).map(|n| &n.value) else { continue };
                for item in items {
                    let Some(name) = item.as_str() else { continue };
                    match known {
                        None => {
                            self.check_tool(item.pos, name);
                        }
                        Some(agents) if !agents.iter().any(|a| a == name) => {
                            let message = format!("`{field}` names `{name}`, which is not an agent of this file");
                            match closest(name, agents.iter().map(String::as_str)) {
                                Some(near) => self.error_hint(item.pos, message, format!("did you mean `{near}`?")),
                                None => self.error(item.pos, message),
                            }
                        }
                        Some(_) => {}
                    }
                }
            }
            if let Some(hooks) = node.get("hooks")
                && let Yaml::Map(moments) = &hooks.value
            {
                for (_, tool) in moments {
                    if let Some(name) = tool.as_str() {
                        self.check_tool(tool.pos, name);
                    }
                }
            }
            let mut json = node.to_json();
            if let Value::Object(map) = &mut json {
                if map.contains_key("name") {
                    let pos = fields.iter().find(|(k, _)| k.name == "name").map_or(node.pos, |(k, _)| k.pos);
                    self.error(pos, "an agent's name is its key under `agents`; remove `name`");
                    continue;
                }
                map.insert("name".into(), Value::String(key.name.clone()));
            }
            let spec: AgentSpec = match serde_json::from_value(json) {
                Ok(spec) => spec,
                Err(why) => {
                    // serde names the problem but not where; the field it names is found
                    // by its key when it is one of the agent's own.
                    let text = why.to_string();
                    let pos = fields
                        .iter()
                        .find(|(k, _)| text.contains(&format!("`{}`", k.name)))
                        .map_or(node.pos, |(k, _)| k.pos);
                    self.error(pos, format!("agent `{}`: {text}", key.name));
                    continue;
                }
            };
            if let Some(config) = self.resources.models.get(&spec.model)
                && let Some(problem) =
                    sampling_problem(&spec.params, config.takes_sampling(), config.provider == Provider::Anthropic)
            {
                let at = node.get("params").map_or(node.pos, |n| n.pos);
                self.error(at, format!("agent `{}`, model `{}`: {problem}", key.name, spec.model));
            }
            self.resources.agents.insert(key.name.clone(), spec);
        }
    }

    fn check_model(&mut self, node: Option<&Item>, name: &str) -> bool {
        if self.resources.models.contains_key(name) {
            return true;
        }
        let pos = node.map_or(crate::yaml::Pos::default(), |n| n.pos);
        let message = format!("model `{name}` is not declared under `models`");
        let known: Vec<String> = self.resources.models.keys().cloned().collect();
        match closest(name, known.iter().map(String::as_str)) {
            Some(near) => self.error_hint(pos, message, format!("did you mean `{near}`?")),
            None if known.is_empty() => {
                self.error_hint(pos, message, "add `models: { NAME: { provider: openai, model: gpt-4o-mini } }`");
            }
            None => self.error_hint(pos, message, format!("the models are: {}", known.join(", "))),
        }
        false
    }

    fn check_tool(&mut self, pos: crate::yaml::Pos, name: &str) -> bool {
        if self.resources.tools.get(name).is_some() {
            return true;
        }
        if let Some(known) = self.mcp_tool(pos, name) {
            return known;
        }
        let message = format!("tool `{name}` is not declared under `tools`");
        let known: Vec<String> = self.resources.tools.names().into_iter().map(str::to_owned).collect();
        match closest(name, known.iter().map(String::as_str)) {
            Some(near) => self.error_hint(pos, message, format!("did you mean `{near}`?")),
            None => self.error(pos, message),
        }
        false
    }

    /// `agent`: a declared agent, given a `prompt` (and a `session`).
    pub(super) fn agent_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { id, body, step, .. } = *site;
        let name = self.string(body, "`agent`")?;
        let Some(spec) = self.resources.agents.get(&name).cloned() else {
            if self.resources.agent_names.contains(&name) {
                // Declared, with a problem reported there already.
                return None;
            }
            let message = format!("agent `{name}` is not declared under `agents`");
            let known = self.resources.agent_names.clone();
            match closest(&name, known.iter().map(String::as_str)) {
                Some(near) => self.error_hint(body.pos, message, format!("did you mean `{near}`?")),
                None => self.error(body.pos, message),
            }
            return None;
        };
        let Some(prompt) = step.get("prompt") else {
            self.error_hint(
                step.pos,
                "an `agent` step needs a `prompt`",
                "like `prompt: \"Investigate: {{ input.ticket }}\"`",
            );
            return None;
        };
        self.templates(prompt);
        let mut input = Map::new();
        input.insert("prompt".into(), prompt.to_json());
        if let Some(session) = step.get("session") {
            self.templates(session);
            input.insert("session".into(), session.to_json());
        }
        Some(Node::dyn_step(id, AgentStep::new(spec)).input(templated_input(Value::Object(input))))
    }

    /// `tool`: a declared tool (or an MCP server's), called `with` an input.
    pub(super) fn tool_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { id, body, step, .. } = *site;
        let name = self.string(body, "`tool`")?;
        if !self.check_tool(body.pos, &name) {
            return None;
        }
        let node = match self.mcp_policy(&name) {
            // An MCP server's tool is registered when the server is connected; its
            // node takes the policy the file declares for it.
            Some(policy) if self.resources.tools.get(&name).is_none() => {
                ToolStep::declared_node(id, &name, policy.effect, policy.safe_to_retry, policy.needs_approval)
            }
            _ => ToolStep::node(id, &self.resources.tools, &name).ok()?,
        };
        Some(node.input(self.with_input(step, Value::Object(Map::new()))))
    }

    /// `memory.store`: writes the step's `with` (key, value) to the memory bank.
    pub(super) fn memory_store_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { id, body, step, .. } = *site;
        let (namespace, scope) = self.memory_target(body, "memory.store", &["namespace", "scope"])?;
        if step.get("with").is_none() {
            self.error_hint(
                step.pos,
                "a `memory.store` step needs `with`",
                "like `with: { key: name, value: \"{{ input.name }}\" }`",
            );
            return None;
        }
        let node = RememberStep::node(id, RememberSpec { namespace, scope });
        Some(node.input(self.with_input(step, Value::Null)))
    }

    /// `memory.recall`: searches the memory bank for the step's `with` query.
    pub(super) fn memory_recall_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { id, body, step, .. } = *site;
        let (namespace, scope) = self.memory_target(body, "memory.recall", &["namespace", "scope", "limit"])?;
        let limit = body.get("limit").and_then(|l| self.number(l, "`limit`")).unwrap_or(5);
        let spec = RecallSpec { namespace, scope, limit: usize::try_from(limit).unwrap_or(usize::MAX) };
        Some(RecallStep::node(id, spec).input(self.with_input(step, Value::Null)))
    }

    /// The input a step's `with` renders to (`default` without one).
    pub(super) fn with_input(&mut self, step: &Item, default: Value) -> InputSource {
        match step.get("with") {
            Some(with) => {
                self.templates(with);
                templated_input(with.to_json())
            }
            None => InputSource::Value(default),
        }
    }

    fn memory_target(&mut self, body: &Item, kind: &str, allowed: &[&str]) -> Option<(String, ScopeKind)> {
        let fields = self.entries(body, &format!("`{kind}`"))?;
        self.unknown_fields(fields, allowed, &format!("`{kind}`"));
        let namespace = match body.get("namespace") {
            Some(n) => self.string(n, "`namespace`")?,
            None => {
                self.error_hint(body.pos, format!("`{kind}` needs a `namespace`"), "like `namespace: facts`");
                return None;
            }
        };
        let scope = match body.get("scope") {
            None => ScopeKind::Run,
            Some(s) => match s.as_str() {
                Some("run") => ScopeKind::Run,
                Some("session") => ScopeKind::Session,
                Some("user") => ScopeKind::User,
                Some("global") => ScopeKind::Global,
                _ => {
                    self.error_hint(s.pos, "unknown memory `scope`", "one of: run, session, user, global");
                    return None;
                }
            },
        };
        Some((namespace, scope))
    }

    pub(super) fn llm_step(&mut self, id: &str, body: &Item, step: &Item) -> Option<Node> {
        let fields = self.entries(body, "`llm`")?;
        self.unknown_fields(fields, LLM_FIELDS, "`llm`");
        let model = match body.get("model") {
            Some(m) => self.string(m, "`model`")?,
            None => {
                self.error_hint(body.pos, "`llm` needs a `model`", "a name declared under `models`");
                return None;
            }
        };
        let known = self.check_model(body.get("model"), &model);
        let mut input = Map::new();
        match (body.get("prompt"), body.get("messages")) {
            (Some(prompt), None) => {
                self.templates(prompt);
                input.insert("prompt".into(), prompt.to_json());
            }
            (None, Some(messages)) => {
                self.templates(messages);
                input.insert("messages".into(), messages.to_json());
            }
            (Some(_), Some(_)) => {
                self.error(body.pos, "`llm` takes `prompt` or `messages`, not both");
                return None;
            }
            (None, None) => {
                self.error_hint(
                    body.pos,
                    "`llm` needs a `prompt` (or `messages`)",
                    "like `prompt: \"Summarize {{ input.text }}\"`",
                );
                return None;
            }
        }
        if let Some(system) = body.get("system") {
            self.templates(system);
            input.insert("system".into(), system.to_json());
        }
        let mut params = ModelParams::default();
        let float = |c: &mut Self, name: &str| -> Option<f64> {
            let node = body.get(name)?;
            match node.value {
                Yaml::Int(i) => Some(i as f64),
                Yaml::Float(f) => Some(f),
                _ => {
                    c.error(node.pos, format!("`{name}` must be a number"));
                    None
                }
            }
        };
        params.temperature = float(self, "temperature");
        params.top_p = float(self, "top_p");
        params.max_tokens = body.get("max_tokens").and_then(|m| self.number(m, "`max_tokens`")).map(|m| m as u32);
        if let Some(config) = self.resources.models.get(&model)
            && let Some(problem) =
                sampling_problem(&params, config.takes_sampling(), config.provider == Provider::Anthropic)
        {
            let at = body.get("temperature").or_else(|| body.get("top_p")).map_or(body.pos, |n| n.pos);
            self.error(at, format!("model `{model}`: {problem}"));
        }
        if let Some(stop) = body.get("stop") {
            match &stop.value {
                Yaml::Str(s) => params.stop = vec![s.clone()],
                Yaml::Seq(items) => {
                    params.stop = items.iter().filter_map(|i| self.string(i, "a `stop` sequence")).collect();
                }
                _ => self.error(stop.pos, "`stop` must be a string or a list of strings"),
            }
        }
        let mut spec = LlmSpec::new(&model);
        spec.params = params;
        // The step's `output` schema is also what the model is asked to answer in.
        spec.output = step.get("output").map(crate::yaml::Item::to_json);
        if let Some(turns) = body.get("repair_turns").and_then(|r| self.number(r, "`repair_turns`")) {
            spec.repair_turns = u32::try_from(turns).unwrap_or(u32::MAX);
        }
        if body.get("stream").is_some() {
            spec.stream = self.flag(body, "stream");
        }
        if !known {
            return None;
        }
        if let Some(tools) = body.get("tools") {
            return self.llm_with_tools(id, body, tools, spec, input);
        }
        if let Some(rounds) = body.get("max_tool_rounds") {
            self.error(rounds.pos, "`max_tool_rounds` bounds the rounds of `tools`: this `llm` offers none");
        }
        Some(Node::dyn_step(id, LlmStep::new(spec)).input(templated_input(Value::Object(input))))
    }

    /// An `llm` step offering `tools`: the calls the model makes run (each a journaled
    /// sub-step, fenced by its tool's effect, as an agent's), their results go back to it,
    /// and its answer is the step's output; after `max_tool_rounds` rounds (default 1) of
    /// calls, another call fails the step with `budget_exceeded`. Compiled to an agent
    /// named after the step, so it is journaled, replayed and costed as agents are.
    fn llm_with_tools(
        &mut self,
        id: &str,
        body: &Item,
        tools: &Item,
        spec: LlmSpec,
        mut input: Map<String, Value>,
    ) -> Option<Node> {
        let Yaml::Seq(items) = &tools.value else {
            self.error_hint(tools.pos, "`tools` must be a list of tool names", "like `tools: [lookup_order]`");
            return None;
        };
        let mut names = Vec::new();
        for item in items {
            let name = self.string(item, "a tool name")?;
            if !self.check_tool(item.pos, &name) {
                return None;
            }
            names.push(name);
        }
        if body.get("messages").is_some() {
            self.error(tools.pos, "an `llm` with `tools` takes a `prompt`, not `messages`");
            return None;
        }
        let rounds = match body.get("max_tool_rounds") {
            Some(rounds) => match self.number(rounds, "`max_tool_rounds`")? {
                0 => {
                    self.error(rounds.pos, "`max_tool_rounds` must be at least 1 (without tools, leave `tools` out)");
                    return None;
                }
                n => u32::try_from(n).unwrap_or(u32::MAX - 1),
            },
            None => 1,
        };
        let mut agent = stepwright_llm::AgentSpec::new(id, &spec.model);
        agent.tools = names;
        agent.max_iterations = rounds + 1;
        agent.params = spec.params;
        agent.output = spec.output;
        agent.repair_turns = spec.repair_turns;
        agent.stream = spec.stream;
        if let Some(system) = input.remove("system") {
            match system {
                Value::String(text) if !text.contains("{{") && !text.contains("{%") => agent.instructions = Some(text),
                _ => {
                    let at = body.get("system").map_or(body.pos, |s| s.pos);
                    self.error(
                        at,
                        "with `tools`, `system` is fixed text (no templates): it is the model's instructions",
                    );
                    return None;
                }
            }
        }
        Some(Node::dyn_step(id, AgentStep::new(agent)).input(templated_input(Value::Object(input))))
    }
}
