//! A step's policies: retries, timeouts, on_failure, approval gates, guardrails, caching.

#[allow(clippy::wildcard_imports)] // The compiler's own vocabulary.
use super::*;

impl Compiler {
    /// `requires_approval` / `approval` settings.
    pub(super) fn gate(&mut self, node: &Item) -> Option<ApprovalGate> {
        let message = match node.get("message") {
            Some(m) => {
                self.templates(m);
                self.string(m, "`message`")?
            }
            None => "Approve?".into(),
        };
        let mut gate = ApprovalGate::new(message);
        match node.get("approvers").map(|a| &a.value) {
            Some(Yaml::Seq(items)) => {
                let mut named = Vec::new();
                for item in items {
                    if let Some(who) = self.string(item, "an approver") {
                        named.push(who.clone());
                        gate = gate.approver(who);
                    }
                }
                let pos = node.get("approvers").map_or(node.pos, |a| a.pos);
                if !named.is_empty() {
                    self.approver_lists.push(ApproverList {
                        file: self.file.clone(),
                        line: pos.line.max(1),
                        column: pos.column.max(1),
                        approvers: named,
                    });
                }
            }
            Some(_) => self.error(node.pos, "`approvers` must be a list like [\"role:lead\", \"user:ann\"]"),
            None => {}
        }
        if let Some(timeout) = node.get("timeout").and_then(|t| self.duration(t, "`timeout`")) {
            let action = match node.get("on_timeout").map(|a| a.as_str()) {
                None | Some(Some("reject")) => TimeoutAction::Reject,
                Some(Some("approve")) => TimeoutAction::Approve,
                Some(Some("fail")) => TimeoutAction::Fail,
                Some(_) => {
                    let pos = node.get("on_timeout").map_or(node.pos, |n| n.pos);
                    self.error_hint(pos, "unknown `on_timeout`", "one of: reject, approve, fail");
                    TimeoutAction::Reject
                }
            };
            gate = gate.timeout(timeout, action);
        }
        Some(gate)
    }

    pub(super) fn policies(&mut self, mut step: Node, node: &Item, path: &str) -> Option<Node> {
        if let Some(text) = node.get("description").and_then(|d| self.string(d, "`description`")) {
            step = step.description(text);
        }
        if let Some(schema) = node.get("input_schema") {
            step = step.input_schema(self.schema(schema, "`input_schema`"));
        }
        if let Some(schema) = node.get("output") {
            step = step.output_schema(self.schema(schema, "`output`"));
        }
        if let Some(timeout) = node.get("timeout").and_then(|t| self.duration(t, "`timeout`")) {
            step = step.timeout(timeout);
        }
        if let Some(retry) = node.get("retry") {
            if let Some(entries) = self.entries(retry, "`retry`") {
                self.unknown_fields(
                    entries,
                    &["max_attempts", "backoff", "initial_delay", "max_delay", "jitter"],
                    "`retry`",
                );
            }
            let attempts = retry.get("max_attempts").and_then(|a| self.number(a, "`max_attempts`")).unwrap_or(3);
            let mut policy = RetryPolicy::new(u32::try_from(attempts).unwrap_or(u32::MAX));
            if let Some(b) = retry.get("backoff") {
                match b.as_str() {
                    Some("fixed") => policy = policy.backoff(Backoff::Fixed),
                    Some("linear") => policy = policy.backoff(Backoff::Linear),
                    Some("exponential") => policy = policy.backoff(Backoff::Exponential),
                    _ => self.error_hint(b.pos, "unknown `backoff`", "one of: fixed, linear, exponential"),
                }
            }
            if let Some(d) = retry.get("initial_delay").and_then(|d| self.duration(d, "`initial_delay`")) {
                policy = policy.initial_delay(d);
            }
            if let Some(d) = retry.get("max_delay").and_then(|d| self.duration(d, "`max_delay`")) {
                policy = policy.max_delay(d);
            }
            if let Some(j) = retry.get("jitter") {
                match j.value {
                    Yaml::Float(f) => policy = policy.jitter(f),
                    Yaml::Int(i) => policy = policy.jitter(i as f64),
                    _ => self.error(j.pos, "`jitter` must be a number between 0 and 1"),
                }
            }
            step = step.retry(policy);
            self.retry_warnings(node, retry, attempts);
        }
        if let Some(on_failure) = node.get("on_failure") {
            match on_failure.as_str() {
                Some("abort") => step = step.on_failure(OnFailure::Abort),
                Some("skip") => step = step.on_failure(OnFailure::Skip),
                Some("retry") => step = step.on_failure(OnFailure::Retry),
                Some("fallback") => match node.get("fallback") {
                    Some(steps) => {
                        // The fallback runs in the step's place, at `<step>/@fallback`,
                        // with the step's input.
                        let nodes = self.steps(&format!("{path}/@fallback"), steps, &mut HashSet::new());
                        step = step.on_failure(OnFailure::Fallback(Box::new(Node::sequence("fallback", nodes))));
                    }
                    None => self.error_hint(
                        on_failure.pos,
                        "`on_failure: fallback` needs `fallback`, the steps to run instead",
                        "like `fallback: [ { id: cached, set: \"{{ input }}\" } ]`",
                    ),
                },
                _ => self.error_hint(on_failure.pos, "unknown `on_failure`", "one of: abort, skip, retry, fallback"),
            }
        }
        if let Some(fallback) = node.get("fallback")
            && node.get("on_failure").and_then(|f| f.as_str()) != Some("fallback")
        {
            self.error_hint(
                fallback.pos,
                "`fallback` steps run only with `on_failure: fallback`",
                "add `on_failure: fallback` to the step, or remove `fallback`",
            );
        }
        if let Some(cache) = node.get("cache") {
            match cache.value {
                Yaml::Bool(true) => step = step.cache(),
                Yaml::Bool(false) => {}
                _ => self.error(cache.pos, format!("`cache` must be true or false, not {}", cache.kind())),
            }
        }
        if let Some(field) = node.get("diff_key").and_then(|k| self.string(k, "`diff_key`")) {
            step = step.diff_key(&field);
        }
        if let Some(effect) = node.get("effect") {
            match effect.as_str() {
                Some("pure") => step = step.effect(Effect::Pure),
                Some("read") => step = step.effect(Effect::Read),
                Some("write") => step = step.effect(Effect::Write),
                Some("external") => step = step.effect(Effect::External),
                Some("human") => step = step.effect(Effect::Human),
                _ => self.error_hint(effect.pos, "unknown `effect`", "one of: pure, read, write, external, human"),
            }
        }
        if let Some(gate) = node.get("requires_approval") {
            if let Some(entries) = self.entries(gate, "`requires_approval`") {
                self.unknown_fields(entries, &["message", "approvers", "timeout", "on_timeout"], "`requires_approval`");
            }
            if let Some(gate) = self.gate(gate) {
                step = step.requires_approval(gate);
            }
        }
        if let Some(list) = node.get("guardrails") {
            match &list.value {
                Yaml::Seq(items) => {
                    for item in items {
                        if let Some(guardrail) = self.guardrail(item) {
                            step = step.guardrail(guardrail);
                        }
                    }
                }
                _ => self.error_hint(
                    list.pos,
                    format!("`guardrails` must be a list, not {}", list.kind()),
                    "like [{ on: output, action: redact, pattern: '\\d{3}-\\d{2}-\\d{4}' }]",
                ),
            }
        }
        Some(step)
    }

    /// Warns where a `retry` cannot take effect (docs/error-codes.md, "the retry rule"): on a
    /// kind whose failures are never retryable, or with fewer than two attempts.
    pub(super) fn retry_warnings(&mut self, node: &Item, retry: &Item, attempts: u64) {
        const NEVER_RETRYABLE: &[&str] = &["set", "approval", "input", "sleep", "wait"];
        let on_failure_retry = node.get("on_failure").and_then(|f| f.as_str()) == Some("retry");
        if let Some(kind) = NEVER_RETRYABLE.iter().find(|kind| node.get(kind).is_some())
            && !on_failure_retry
        {
            self.warn(
                retry.pos,
                format!("this `retry` never takes effect: a `{kind}` step's failures are not retryable"),
                "see \"the retry rule\" in docs/error-codes.md; `on_failure: retry` retries every failure",
            );
        }
        if attempts < 2 {
            self.warn(
                retry.pos,
                format!("this `retry` never takes effect: `max_attempts: {attempts}` allows no second attempt"),
                "`max_attempts` counts every attempt, the first included: 3 tries twice more",
            );
        }
    }

    /// One entry of `guardrails`: where it looks (`on`), what a violation does (`action`),
    /// and the check, a regular expression (`pattern`) or a condition on `value` (`when`).
    pub(super) fn guardrail(&mut self, node: &Item) -> Option<Guardrail> {
        let entries = self.entries(node, "a guardrail")?;
        const FIELDS: &[&str] = &["on", "action", "pattern", "when"];
        self.unknown_fields(entries, FIELDS, "a guardrail");
        // A misspelt `pattern` already has its diagnostic; "needs a check" would echo it.
        let misspelt = entries.iter().any(|(key, _)| !FIELDS.contains(&key.name.as_str()));
        let stage = match node.get("on").map(|n| (n.pos, n.as_str())) {
            None | Some((_, Some("output"))) => GuardrailStage::Output,
            Some((_, Some("input"))) => GuardrailStage::Input,
            Some((pos, _)) => {
                self.error_hint(pos, "unknown guardrail `on`", "one of: input, output");
                return None;
            }
        };
        let action = match node.get("action").map(|n| (n.pos, n.as_str())) {
            None | Some((_, Some("block"))) => GuardrailAction::Block,
            Some((_, Some("warn"))) => GuardrailAction::Warn,
            Some((_, Some("redact"))) => GuardrailAction::Redact,
            Some((pos, _)) => {
                self.error_hint(pos, "unknown guardrail `action`", "one of: block, warn, redact");
                return None;
            }
        };
        match (node.get("pattern"), node.get("when")) {
            (Some(pattern), None) => {
                let text = self.string(pattern, "`pattern`")?;
                match PatternGuardrail::new(format!("pattern /{text}/"), &text) {
                    Ok(check) => Some(Guardrail::new(stage, action, check)),
                    Err(e) => {
                        // The regex crate's messages span lines; the last one says what is wrong.
                        let message = e.to_string();
                        let why = message.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
                        let why = why.trim().trim_start_matches("error: ");
                        self.error(pattern.pos, format!("`pattern` is not a regular expression: {why}"));
                        None
                    }
                }
            }
            (None, Some(when)) => {
                if action == GuardrailAction::Redact {
                    self.error_hint(
                        when.pos,
                        "a `when` guardrail cannot redact",
                        "use `pattern` to redact, or action block or warn",
                    );
                    return None;
                }
                let outer = self.roots_only.replace(&["value"]);
                let source = self.expression(when, "the guardrail's `when`");
                self.roots_only = outer;
                let source = source?;
                let name = format!("when {source}");
                let check = FnGuardrail::new(name, move |value: &Value| {
                    // A condition that cannot be evaluated counts as a violation: a guardrail
                    // fails closed.
                    match expr::truthy(&source, &json!({ "value": value })) {
                        Ok(false) => None,
                        Ok(true) => Some(format!("`{source}` holds")),
                        Err(e) => Some(format!("`{source}` could not be evaluated: {e}")),
                    }
                });
                Some(Guardrail::new(stage, action, check))
            }
            (Some(_), Some(_)) => {
                self.error(node.pos, "a guardrail has either `pattern` or `when`, not both");
                None
            }
            (None, None) if misspelt => None,
            (None, None) => {
                self.error_hint(
                    node.pos,
                    "a guardrail needs a check",
                    "`pattern: <regular expression>` or `when: <condition on value>`",
                );
                None
            }
        }
    }
}
