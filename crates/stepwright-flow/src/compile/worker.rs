//! A `worker:` tool (DESIGN §17): calls run in a step worker that polls a queue.
//!
//! ```yaml
//! tools:
//!   summarise:
//!     worker: { queue: py, handler: summarise@2, heartbeat_timeout: 30s, schedule_to_start: 5m }
//!     timeout: 10m                 # one claim's length when there is no heartbeat_timeout
//!     effect: external
//! ```

use stepwright_llm::{ToolDef, WorkerTarget, WorkerTool};

use super::Compiler;
use crate::yaml::{Item, Yaml};

const WORKER_FIELDS: &[&str] = &["queue", "handler", "heartbeat_timeout", "schedule_to_start", "concurrency"];

/// Whether `text` is a queue or handler name: letters, digits, `_`, `-`, `.` (and, for a
/// handler, one `@version` of the same characters).
fn is_name(text: &str, versioned: bool) -> bool {
    let plain = |part: &str| {
        !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    match text.split_once('@') {
        Some((name, version)) if versioned => plain(name) && plain(version),
        Some(_) => false,
        None => plain(text),
    }
}

impl Compiler {
    pub(super) fn worker_tool(&mut self, def: ToolDef, node: &Item, worker: &Item) -> Option<WorkerTool> {
        for field in ["cwd", "env"] {
            if let Some(f) = node.get(field) {
                self.error(f.pos, format!("`{field}` is for `command` tools"));
            }
        }
        let name = def.name.clone();
        let fields = self.entries(worker, "`worker`")?;
        self.unknown_fields(fields, WORKER_FIELDS, "`worker`");
        let queue = match worker.get("queue") {
            Some(q) => self.string(q, "`queue`").and_then(|queue| {
                if is_name(&queue, false) {
                    Some(queue)
                } else {
                    self.error_hint(
                        q.pos,
                        format!("`queue` {queue:?} is not a queue name"),
                        "letters, digits, `_`, `-` and `.`, like `py`",
                    );
                    None
                }
            })?,
            None => "default".to_owned(),
        };
        let handler = match worker.get("handler") {
            Some(h) => self.string(h, "`handler`").and_then(|handler| {
                if is_name(&handler, true) {
                    Some(handler)
                } else {
                    self.error_hint(
                        h.pos,
                        format!("`handler` {handler:?} is not a handler name"),
                        "a name, or a name and a version: `summarise`, `summarise@2`",
                    );
                    None
                }
            })?,
            None if is_name(&name, false) => name,
            None => {
                self.error_hint(
                    worker.pos,
                    format!("tool `{name}`'s name is not a handler name; give the `handler` the worker registers"),
                    "`handler: summarise`",
                );
                return None;
            }
        };
        let heartbeat_timeout = worker.get("heartbeat_timeout").and_then(|t| self.duration(t, "`heartbeat_timeout`"));
        let schedule_to_start = worker.get("schedule_to_start").and_then(|t| self.duration(t, "`schedule_to_start`"));
        let concurrency = match worker.get("concurrency") {
            None => None,
            Some(c) => {
                let entries = self.entries(c, "`worker`'s `concurrency`")?;
                self.unknown_fields(entries, &["limit"], "`worker`'s `concurrency`");
                match c.get("limit").map(|item| (item, &item.value)) {
                    Some((_, Yaml::Int(n))) if (1..=i64::from(u32::MAX)).contains(n) => Some(*n as u32),
                    Some((item, _)) => {
                        self.error(item.pos, "`worker`'s `concurrency` `limit` must be a whole number of at least 1");
                        None
                    }
                    None => {
                        self.error_hint(
                            c.pos,
                            "`worker`'s `concurrency` needs a `limit`",
                            "`concurrency: { limit: 1 }`",
                        );
                        None
                    }
                }
            }
        };
        Some(WorkerTool::new(def, WorkerTarget { queue, handler, heartbeat_timeout, schedule_to_start, concurrency }))
    }
}
