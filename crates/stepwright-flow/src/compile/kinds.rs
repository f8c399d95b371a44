//! The step kinds of the file format, in one table: each kind's key, the step fields it adds
//! to the common ones, and the function that compiles its body. The field checks, the "has
//! no kind" hint and the dispatch all read [`KINDS`]; a new kind is one entry here, its
//! compile function, and its schema (`schema.rs`).

use std::collections::HashSet;

use serde_json::{Value, json};
use stepwright_core::{
    Branch, Every, EveryOnError, Expr, Fork, ForkMode, InterruptRequest, Loop, LoopOnError, Node, Outcome, PathResult,
    Verdict, dyn_fn_step,
};

use super::Compiler;
use crate::expr;
use crate::yaml::{Item, Yaml};

/// Where a kind's body is being compiled.
#[derive(Clone, Copy)]
pub(super) struct KindSite<'a> {
    /// The step's path (`triage`, `drafts[*]/write`), for its children's positions.
    pub(super) path: &'a str,
    /// The step's id.
    pub(super) id: &'a str,
    /// The value under the kind's key.
    pub(super) body: &'a Item,
    /// The whole step (for fields a kind adds, such as `with` or `prompt`).
    pub(super) step: &'a Item,
}

/// A step kind: its key, the step fields it adds, and how its body compiles.
pub(super) struct KindSpec {
    pub(super) name: &'static str,
    pub(super) fields: &'static [&'static str],
    pub(super) compile: fn(&mut Compiler, &KindSite<'_>) -> Option<Node>,
}

/// Every step kind, in the order the "has no kind" hint lists them.
pub(super) const KINDS: &[KindSpec] = &[
    KindSpec { name: "set", fields: &[], compile: Compiler::set_step },
    KindSpec { name: "branch", fields: &[], compile: Compiler::branch_step },
    KindSpec { name: "fork", fields: &[], compile: Compiler::fork_step },
    KindSpec { name: "map", fields: &[], compile: Compiler::map_step },
    KindSpec { name: "loop", fields: &[], compile: Compiler::loop_step },
    KindSpec { name: "graph", fields: &[], compile: |c, site| c.graph(site.path, site.id, site.body) },
    KindSpec { name: "every", fields: &[], compile: Compiler::every_step },
    KindSpec {
        name: "sleep",
        fields: &[],
        compile: |c, site| c.duration(site.body, "`sleep`").map(|d| Node::sleep(site.id, d)),
    },
    KindSpec { name: "approval", fields: &[], compile: Compiler::approval_step },
    KindSpec { name: "wait", fields: &[], compile: Compiler::wait_step },
    KindSpec { name: "input", fields: &[], compile: Compiler::input_step },
    KindSpec { name: "workflow", fields: &["with"], compile: |c, site| c.call(site.id, site.body, site.step, false) },
    KindSpec { name: "spawn", fields: &["with"], compile: |c, site| c.call(site.id, site.body, site.step, true) },
    KindSpec { name: "llm", fields: &[], compile: |c, site| c.llm_step(site.id, site.body, site.step) },
    KindSpec { name: "agent", fields: &["prompt", "session"], compile: Compiler::agent_step },
    KindSpec { name: "tool", fields: &["with"], compile: Compiler::tool_step },
    KindSpec { name: "memory.store", fields: &["with"], compile: Compiler::memory_store_step },
    KindSpec { name: "memory.recall", fields: &["with"], compile: Compiler::memory_recall_step },
];

/// The kind named `name`.
pub(super) fn kind(name: &str) -> Option<&'static KindSpec> {
    KINDS.iter().find(|k| k.name == name)
}

impl Compiler {
    /// `set`: a value rendered from its template over the scope.
    fn set_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { id, body, .. } = *site;
        self.templates(body);
        let template = body.to_json();
        // The template is part of the step's identity, so of the definition hash.
        let name = format!("set {template}");
        Some(Node::dyn_step(
            id,
            dyn_fn_step(&name, move |ctx, _input| {
                let result = expr::eval_value(&template, ctx.scope());
                async move { result.map(Outcome::completed) }
            }),
        ))
    }

    /// `approval`: asks a person, with a rendered message, for a decision on the input.
    fn approval_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { id, body, .. } = *site;
        let entries = self.entries(body, "`approval`")?;
        self.unknown_fields(entries, &["message", "approvers", "timeout", "on_timeout"], "`approval`");
        let gate = self.gate(body)?;
        let message = gate.message.clone();
        let approvers = gate.approvers.clone();
        let timeout = gate.timeout;
        let name = format!("approval {}", body.to_json());
        Some(Node::dyn_step(
            id,
            dyn_fn_step(&name, move |ctx, input| {
                let rendered = rendered_message(&message, &ctx);
                let approvers = approvers.clone();
                async move {
                    let mut request = InterruptRequest::approval(rendered?).payload((*input).clone());
                    for approver in &approvers {
                        request = request.approver(approver);
                    }
                    if let Some((after, action)) = timeout {
                        request = request.timeout(after, action);
                    }
                    Ok(Outcome::suspended(request))
                }
            }),
        ))
    }

    /// `wait`: the next message sent to the run's inbox `event` (`stepwright send RUN
    /// --inbox EVENT`), within `timeout`, checked against `schema`.
    fn wait_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { id, body, step, .. } = *site;
        let entries = self.entries(body, "`wait`")?;
        self.unknown_fields(entries, &["event", "timeout", "schema", "match"], "`wait`");
        let event = match body.get("event") {
            Some(event) => {
                let name = self.string(event, "`wait.event`")?;
                if name.is_empty() || name.starts_with('@') {
                    self.error(event.pos, "`wait.event` must be a name that does not start with '@'");
                    return None;
                }
                name
            }
            None => {
                self.error_hint(
                    body.pos,
                    "`wait` needs an `event`",
                    "the inbox its message is sent to: `event: payment`",
                );
                return None;
            }
        };
        let timeout = match body.get("timeout") {
            Some(timeout) => self.duration(timeout, "`wait.timeout`")?,
            None => {
                self.error_hint(
                    body.pos,
                    "`wait` needs a `timeout`",
                    "how long to wait for the event before the step fails, like `timeout: 1d`",
                );
                return None;
            }
        };
        let mut node = match body.get("match") {
            None => Node::wait(id, &event, timeout),
            Some(matching) => {
                if !matches!(matching.value, crate::yaml::Yaml::Map(_)) {
                    self.error_hint(
                        matching.pos,
                        "`wait.match` must be a mapping",
                        "the fields a stored event's payload must have: `match: { ticket: \"{{ input.ticket }}\" }`",
                    );
                    return None;
                }
                // Rendered over the scope when the wait begins.
                self.templates(matching);
                let template = matching.to_json();
                let source = template.to_string();
                let matching = stepwright_core::Expr::try_new(move |scope| crate::expr::eval_value(&template, scope))
                    .with_source(source);
                Node::wait_matching(id, &event, timeout, matching)
            }
        };
        if let Some(schema) = body.get("schema") {
            if let Some(output) = step.get("output") {
                self.error(output.pos, "a `wait` step's message schema is its `wait.schema`; give it once");
            }
            node = node.output_schema(self.schema(schema, "`wait.schema`"));
        }
        Some(node)
    }

    /// `input`: asks a person, with a rendered message (as `approval` does), for a value
    /// matching a schema.
    fn input_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { id, body, .. } = *site;
        let entries = self.entries(body, "`input`")?;
        self.unknown_fields(entries, &["message", "schema"], "`input`");
        let message = body.get("message").and_then(|m| {
            self.templates(m);
            self.string(m, "`input.message`")
        });
        let message = message.unwrap_or_default();
        let name = format!("input {}", body.to_json());
        // The form's field order rides on the request's schema, outside the step's name (so
        // outside the definition hash).
        let schema = body
            .get("schema")
            .map_or(json!({}), |s| stepwright_core::with_field_order(self.schema(s, "`schema`"), &s.property_order()));
        Some(Node::dyn_step(
            id,
            dyn_fn_step(&name, move |ctx, _input| {
                let rendered = rendered_message(&message, &ctx);
                let schema = schema.clone();
                async move { Ok(Outcome::suspended(InterruptRequest::input(rendered?, schema))) }
            }),
        ))
    }

    /// `branch`: arms of `when` + `steps`, and an optional `otherwise`.
    fn branch_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { path, id, body, .. } = *site;
        let Yaml::Seq(arms) = &body.value else {
            self.error(body.pos, format!("`branch` must be a list of arms, not {}", body.kind()));
            return None;
        };
        let mut branch = Branch::new(id);
        let mut scope = HashSet::new();
        for arm in arms {
            let Some(entries) = self.entries(arm, "a branch arm") else { continue };
            self.unknown_fields(entries, &["when", "steps", "otherwise"], "a branch arm");
            if let Some(otherwise) = arm.get("otherwise") {
                branch = branch.otherwise(self.steps(path, otherwise, &mut scope));
            } else if let Some(when) = arm.get("when") {
                let Some(source) = self.expression(when, "`when`") else { continue };
                let steps = match arm.get("steps") {
                    Some(steps) => self.steps(path, steps, &mut scope),
                    None => {
                        self.error(arm.pos, "a `when` arm needs `steps`");
                        continue;
                    }
                };
                let condition = Expr::try_new({
                    let source = source.clone();
                    move |scope| expr::truthy(&source, scope)
                })
                .with_source(source);
                branch = branch.when(condition, steps);
            } else {
                self.error(arm.pos, "a branch arm needs `when` (with `steps`) or `otherwise`");
            }
        }
        Some(branch.into())
    }

    /// `fork`: static `paths`, run concurrently under a `mode`.
    fn fork_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { path, id, body, .. } = *site;
        let entries = self.entries(body, "`fork`")?;
        self.unknown_fields(entries, &["mode", "concurrency", "paths", "merge"], "`fork`");
        let mut fork = Fork::new(id);
        if let Some(mode) = body.get("mode") {
            match mode.as_str() {
                Some("all") => fork = fork.mode(ForkMode::All),
                Some("race") => fork = fork.mode(ForkMode::Race),
                Some("settle") => fork = fork.mode(ForkMode::Settle),
                _ => self.error_hint(mode.pos, "unknown fork `mode`", "one of: all, race, settle"),
            }
        }
        if let Some(limit) = body.get("concurrency").and_then(|c| self.number(c, "`concurrency`")) {
            fork = fork.concurrency(limit as usize);
        }
        match body.get("paths").map(|p| &p.value) {
            Some(Yaml::Seq(paths)) => {
                for (index, p) in paths.iter().enumerate() {
                    let mut scope = HashSet::new();
                    fork = fork.path(self.steps(&format!("{path}[{index}]"), p, &mut scope));
                }
            }
            _ => self.error(body.pos, "`fork` needs `paths`, a list of step lists"),
        }
        Some(self.merge(fork, body).into())
    }

    /// `map`: the same `steps` for each of the `items`, bound `as` a name.
    fn map_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { path, id, body, .. } = *site;
        let entries = self.entries(body, "`map`")?;
        self.unknown_fields(entries, &["items", "as", "concurrency", "steps", "merge"], "`map`");
        let items = body.get("items").and_then(|i| self.expression(i, "`items`"));
        let name = body.get("as").and_then(|a| self.string(a, "`as`")).unwrap_or_else(|| "item".into());
        let had = self.ids.insert(name.clone());
        let mut scope = HashSet::new();
        let steps = match body.get("steps") {
            Some(s) => self.binding(&name, |c| c.steps(&format!("{path}[*]"), s, &mut scope)),
            None => {
                self.error(body.pos, "`map` needs `steps`");
                Vec::new()
            }
        };
        if had {
            self.ids.remove(&name);
        }
        let source = items?;
        let items = Expr::try_new({
            let source = source.clone();
            move |scope| match expr::eval(&source, scope)? {
                Value::Array(items) => Ok(items),
                other => Err(stepwright_core::StepError::new(
                    stepwright_core::ErrorCode::EXPRESSION,
                    format!("`items` must evaluate to a list, not {other}"),
                )),
            }
        })
        .with_source(source);
        let mut map = Fork::map(id, items, &name, steps);
        if let Some(limit) = body.get("concurrency").and_then(|c| self.number(c, "`concurrency`")) {
            map = map.concurrency(limit as usize);
        }
        Some(self.merge(map, body).into())
    }

    /// A fork's or map's `merge`: a template over `results` (each path's `{status, output}`
    /// or `{status, error: {code, message}}`, in path order) that becomes its output.
    fn merge(&mut self, fork: Fork, body: &Item) -> Fork {
        let Some(merge) = body.get("merge") else { return fork };
        let outer = self.roots_only.replace(&["results"]);
        self.templates(merge);
        self.roots_only = outer;
        let template = merge.to_json();
        fork.merge_described(&template.to_string(), move |results| {
            let results: Vec<Value> = results
                .into_iter()
                .map(|result| match result {
                    PathResult::Completed(output) => json!({ "status": "completed", "output": output }),
                    PathResult::Failed(error) => {
                        json!({ "status": "failed", "error": { "code": error.code, "message": error.message } })
                    }
                    PathResult::Cancelled => json!({ "status": "cancelled" }),
                })
                .collect();
            expr::eval_value(&template, &json!({ "results": results }))
        })
    }

    /// `loop`: `steps` until `until` holds or `max_iterations` runs out; each iteration's
    /// input from `prepare_next`, failed iterations as `on_error` says, and with an `inbox`,
    /// one message per iteration (ending when none comes within `park_timeout`).
    fn loop_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { path, id, body, .. } = *site;
        let entries = self.entries(body, "`loop`")?;
        self.unknown_fields(
            entries,
            &["steps", "until", "max_iterations", "prepare_next", "on_error", "inbox", "park_timeout"],
            "`loop`",
        );
        let max = body.get("max_iterations").and_then(|m| self.number(m, "`max_iterations`")).unwrap_or(10);
        let mut scope = HashSet::new();
        let steps = match body.get("steps") {
            Some(s) => self.binding("loop", |c| c.steps(&format!("{path}#*"), s, &mut scope)),
            None => {
                self.error(body.pos, "`loop` needs `steps`");
                Vec::new()
            }
        };
        let mut looped = Loop::new(id, u32::try_from(max).unwrap_or(u32::MAX), steps);
        let until = body.get("until").and_then(|u| self.binding("loop", |c| c.expression(u, "`until`")));
        if let Some(source) = until {
            looped = looped.until(
                Expr::try_new({
                    let source = source.clone();
                    move |scope| {
                        Ok(if expr::truthy(&source, scope)? {
                            Verdict::done(format!("`{source}` holds"))
                        } else {
                            Verdict::again(format!("`{source}` does not hold yet"))
                        })
                    }
                })
                .with_source(source),
            );
        }
        if let Some(next) = body.get("prepare_next") {
            // Over the iteration's scope: its steps' outputs and `loop`.
            self.binding("loop", |c| c.templates(next));
            let template = next.to_json();
            let source = template.to_string();
            looped =
                looped.prepare_next(Expr::try_new(move |scope| expr::eval_value(&template, scope)).with_source(source));
        }
        if let Some(on_error) = body.get("on_error") {
            match on_error.as_str() {
                Some("abort") => looped = looped.on_error(LoopOnError::Abort),
                Some("retry") => looped = looped.on_error(LoopOnError::Retry),
                Some("skip") => looped = looped.on_error(LoopOnError::Skip),
                _ => self.error_hint(on_error.pos, "unknown `on_error`", "one of: abort, retry, skip"),
            }
        }
        let park = body.get("park_timeout").and_then(|t| self.duration(t, "`park_timeout`"));
        match (body.get("inbox"), park) {
            (Some(inbox), Some(park)) => {
                if let Some(name) = self.string(inbox, "`inbox`") {
                    looped = looped.inbox(&name, park);
                }
            }
            (Some(inbox), None) if body.get("park_timeout").is_none() => self.error_hint(
                inbox.pos,
                "a loop with an `inbox` needs a `park_timeout`",
                "how long an iteration waits for a message before the loop ends, like `park_timeout: 1h`",
            ),
            (None, Some(_)) => {
                let at = body.get("park_timeout").map_or(body.pos, |t| t.pos);
                self.error(at, "`park_timeout` is how long to wait for an `inbox` message: this loop has no `inbox`");
            }
            _ => {}
        }
        Some(looped.into())
    }

    /// `every`: `steps` on an `interval`, with `jitter`, a `wake` channel and `on_error`.
    fn every_step(&mut self, site: &KindSite<'_>) -> Option<Node> {
        let KindSite { path, id, body, .. } = *site;
        let entries = self.entries(body, "`every`")?;
        self.unknown_fields(entries, &["interval", "jitter", "wake", "on_error", "steps"], "`every`");
        let interval = match body.get("interval") {
            Some(i) => self.duration(i, "`interval`"),
            None => {
                self.error_hint(body.pos, "`every` needs an `interval`", "like `interval: 1h`");
                None
            }
        };
        let mut scope = HashSet::new();
        // Each tick's steps see `tick` (1-based) besides the outer scope.
        let steps = match body.get("steps") {
            Some(s) => self.binding("tick", |c| c.steps(&format!("{path}#*"), s, &mut scope)),
            None => {
                self.error(body.pos, "`every` needs `steps`");
                Vec::new()
            }
        };
        let mut every = Every::new(id, interval?, steps);
        if let Some(j) = body.get("jitter") {
            // Checked here too, so it is reported beside the step's other problems.
            match j.value {
                Yaml::Float(f) if (0.0..1.0).contains(&f) => every = every.jitter(f),
                Yaml::Int(0) => {}
                _ => self.error(j.pos, "`jitter` must be a number at least 0 and below 1, like 0.1"),
            }
        }
        if let Some(channel) = body.get("wake").and_then(|w| self.string(w, "`wake`")) {
            every = every.wake_on(&channel);
        }
        if let Some(on_error) = body.get("on_error") {
            match on_error.as_str() {
                Some("continue") => every = every.on_error(EveryOnError::Continue),
                Some("fail") => every = every.on_error(EveryOnError::Fail),
                _ => self.error_hint(on_error.pos, "unknown `on_error`", "one of: continue, fail"),
            }
        }
        Some(every.into())
    }
}

/// A message a person is shown (an approval's, an input's), its template rendered over the
/// run's scope; a value that is not text is shown as JSON.
fn rendered_message(message: &str, ctx: &stepwright_core::StepContext) -> Result<String, stepwright_core::StepError> {
    Ok(match expr::eval_value(&Value::String(message.to_owned()), ctx.scope())? {
        Value::String(text) => text,
        other => other.to_string(),
    })
}
