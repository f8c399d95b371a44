//! The `mcp_servers` section: MCP servers whose tools the file's agents and `tool` steps use
//! as `server.tool`. Loading only declares them (a `validate` starts no process); the caller
//! connects them before a run ([`stepwright_mcp::McpServer::register`]) and checks the uses
//! the file made of them ([`Loaded::mcp_tool_uses`](super::Loaded)) against what each server
//! offers.

use stepwright_mcp::{ServerConfig, ToolPolicy, Transport};

use super::scalars::parse_effect;
use super::{Compiler, closest};
use crate::yaml::{Item, Pos, Yaml};

const SERVER_FIELDS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "tools",
    "effect",
    "safe_to_retry",
    "needs_approval",
    "timeout",
    "connect_timeout",
    "call_timeout",
    "max_message_bytes",
    "tool_policies",
];
const POLICY_FIELDS: &[&str] = &["effect", "safe_to_retry", "needs_approval", "timeout"];

/// Where a file uses a tool of one of its MCP servers, to be checked once the server is
/// connected and says which tools it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpToolUse {
    /// The tool, as `server.tool`.
    pub tool: String,
    /// The file (as given).
    pub file: String,
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
}

impl Compiler {
    pub(super) fn mcp_section(&mut self, section: &Item) {
        let Some(entries) = self.entries(section, "`mcp_servers`") else { return };
        for (key, node) in entries {
            let name = &key.name;
            self.resources.mcp_names.push(name.clone());
            let what = format!("MCP server `{name}`");
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                self.error_hint(
                    key.pos,
                    format!("{what}: a server name may use only letters, digits, '-' and '_'"),
                    "its tools are named `server.tool`",
                );
                continue;
            }
            let Some(fields) = self.entries(node, &what) else { continue };
            self.unknown_fields(fields, SERVER_FIELDS, &what);
            let Some(transport) = self.transport(node, &what) else { continue };
            let mut config = match transport {
                Transport::Stdio { .. } => ServerConfig::stdio(name, "", &[]),
                Transport::Http { .. } => ServerConfig::http(name, ""),
            };
            config.transport = transport;
            config.policy = self.tool_policy(node);
            if let Some(tools) = node.get("tools") {
                config.only = self.string_list(tools, "`tools`");
            }
            if let Some(t) = node.get("connect_timeout").and_then(|t| self.duration(t, "`connect_timeout`")) {
                config.connect_timeout = t;
            }
            if let Some(t) = node.get("call_timeout").and_then(|t| self.duration(t, "`call_timeout`")) {
                config.call_timeout = Some(t);
            }
            if let Some(limit) = node.get("max_message_bytes") {
                match self.number(limit, "`max_message_bytes`") {
                    Some(bytes @ 1024..) => config.max_message_bytes = usize::try_from(bytes).unwrap_or(usize::MAX),
                    Some(_) => self.error(limit.pos, "`max_message_bytes` must be at least 1024"),
                    None => {}
                }
            }
            if let Some(policies) = node.get("tool_policies") {
                for (tool, policy) in self.entries(policies, "`tool_policies`").unwrap_or_default() {
                    if let Some(fields) = self.entries(policy, &format!("the policy of `{}`", tool.name)) {
                        self.unknown_fields(fields, POLICY_FIELDS, &format!("the policy of `{}`", tool.name));
                    }
                    // A tool's own policy starts from the server's and overrides what it names.
                    let own = self.tool_policy_over(policy, config.policy.clone());
                    config.tool_policies.insert(tool.name.clone(), own);
                }
            }
            self.resources.mcp_servers.insert(name.clone(), config);
        }
    }

    fn transport(&mut self, node: &Item, what: &str) -> Option<Transport> {
        match (node.get("command"), node.get("url")) {
            (Some(command), None) => {
                for field in ["headers"] {
                    if let Some(f) = node.get(field) {
                        self.error(f.pos, format!("`{field}` is for servers reached by `url`"));
                    }
                }
                let command = self.string(command, "`command`")?;
                let args = node.get("args").map(|a| self.string_list(a, "`args`")).unwrap_or_default();
                let env = node.get("env").map(|e| self.string_map(e, "`env`")).unwrap_or_default();
                let cwd = node.get("cwd").and_then(|c| self.string(c, "`cwd`")).map(Into::into);
                Some(Transport::Stdio { command, args, env, cwd })
            }
            (None, Some(url)) => {
                for field in ["args", "env", "cwd"] {
                    if let Some(f) = node.get(field) {
                        self.error(f.pos, format!("`{field}` is for servers started by `command`"));
                    }
                }
                let text = self.string(url, "`url`")?;
                if !(text.starts_with("http://") || text.starts_with("https://")) {
                    self.error_hint(
                        url.pos,
                        format!("`url` `{text}` is not an http(s) URL"),
                        "like http://127.0.0.1:3001/mcp",
                    );
                    return None;
                }
                let headers = node.get("headers").map(|h| self.string_map(h, "`headers`")).unwrap_or_default();
                Some(Transport::Http { url: text, headers })
            }
            (Some(_), Some(_)) => {
                self.error(node.pos, format!("{what} has both `command` and `url`; it has one"));
                None
            }
            (None, None) => {
                self.error_hint(
                    node.pos,
                    format!("{what} has neither `command` nor `url`"),
                    "like `command: npx` with `args: [\"-y\", \"@modelcontextprotocol/server-everything\"]`",
                );
                None
            }
        }
    }

    fn tool_policy(&mut self, node: &Item) -> ToolPolicy {
        self.tool_policy_over(node, ToolPolicy::default())
    }

    /// `effect`, `safe_to_retry`, `needs_approval` and `timeout` of `node` over `base`.
    fn tool_policy_over(&mut self, node: &Item, mut policy: ToolPolicy) -> ToolPolicy {
        if let Some(effect) = node.get("effect") {
            match self.string(effect, "`effect`").map(|e| parse_effect(&e)) {
                Some(Some(effect)) => policy.effect = effect,
                Some(None) => {
                    self.error_hint(effect.pos, "unknown `effect`", "one of: pure, read, write, external, human");
                }
                None => {}
            }
        }
        if node.get("safe_to_retry").is_some() {
            policy.safe_to_retry = self.flag(node, "safe_to_retry");
        }
        if node.get("needs_approval").is_some() {
            policy.needs_approval = self.flag(node, "needs_approval");
        }
        if let Some(timeout) = node.get("timeout").and_then(|t| self.duration(t, "`timeout`")) {
            policy.timeout = Some(timeout);
        }
        policy
    }

    fn string_list(&mut self, node: &Item, what: &str) -> Vec<String> {
        match &node.value {
            Yaml::Seq(items) => {
                items.iter().filter_map(|item| self.string(item, &format!("an item of {what}"))).collect()
            }
            _ => {
                self.error(node.pos, format!("{what} must be a list of strings, not {}", node.kind()));
                Vec::new()
            }
        }
    }

    /// A mapping of names to strings (`env`, `headers`), each bad value reported.
    pub(super) fn string_map(&mut self, node: &Item, what: &str) -> Vec<(String, String)> {
        let entries = self.entries(node, what).unwrap_or_default();
        entries
            .iter()
            .filter_map(|(key, value)| Some((key.name.clone(), self.string(value, &format!("a value of {what}"))?)))
            .collect()
    }

    /// Whether `name` is `server.tool` for a declared MCP server; such a use is recorded
    /// (and checked against the server's `tools` list if it has one).
    pub(super) fn mcp_tool(&mut self, pos: Pos, name: &str) -> Option<bool> {
        let (server, tool) = name.split_once('.')?;
        let Some(config) = self.resources.mcp_servers.get(server) else {
            if self.resources.mcp_names.iter().any(|n| n == server) {
                // Declared, with a problem reported there already.
                return Some(false);
            }
            if self.resources.mcp_names.is_empty() {
                return None;
            }
            let message = format!("tool `{name}`: no MCP server `{server}` is declared under `mcp_servers`");
            let known: Vec<String> = self.resources.mcp_names.clone();
            match closest(server, known.iter().map(String::as_str)) {
                Some(near) => self.error_hint(pos, message, format!("did you mean `{near}.{tool}`?")),
                None => self.error(pos, message),
            }
            return Some(false);
        };
        if !config.only.is_empty() && !config.only.iter().any(|t| t == tool) {
            let only = config.only.join(", ");
            self.error_hint(
                pos,
                format!("tool `{name}` is not among the tools MCP server `{server}` is limited to"),
                format!("its `tools` are: {only}"),
            );
            return Some(false);
        }
        self.resources.mcp_uses.push(McpToolUse {
            tool: name.to_owned(),
            file: self.file.clone(),
            line: pos.line.max(1),
            column: pos.column.max(1),
        });
        Some(true)
    }

    /// The declared policy of an MCP tool (`server.tool`).
    pub(super) fn mcp_policy(&self, name: &str) -> Option<ToolPolicy> {
        let (server, tool) = name.split_once('.')?;
        let config = self.resources.mcp_servers.get(server)?;
        Some(config.tool_policies.get(tool).cloned().unwrap_or_else(|| config.policy.clone()))
    }
}
