//! What paths a definition can produce, as patterns: checked against a journal before a
//! resume, and used to find a step's `diff_key` in a recompute.

use super::walk::each_pattern;
use super::{Node, NodeKind, Workflow};
use crate::ids::{PathPattern, StepPath};

impl Workflow {
    /// The `diff_key` of the node at `path` (patterns `[*]`, `#*` match any ordinal).
    pub(crate) fn diff_key_at(&self, path: &str) -> Option<String> {
        let mut found = None;
        each_pattern(&PathPattern::root(), &self.inner.body, &mut |at, node| {
            if found.is_none()
                && let Some(key) = &node.policy.diff_key
                && at.regex().is_match(path)
            {
                found = Some(key.clone());
            }
        });
        found
    }

    /// Every step path this definition can produce, as patterns: `[*]` stands for any fork
    /// path or map item, `#*` for any iteration or visit (`drafts[*]/formal`,
    /// `refine#*/critique`). Used to check a journal against a changed definition.
    pub fn path_patterns(&self) -> Vec<String> {
        self.all_path_patterns()
            .into_iter()
            .filter(|p| !p.as_str().ends_with("/**"))
            .map(|p| p.as_str().to_owned())
            .collect()
    }

    /// The path patterns including leaf steps' sub-step patterns (`agent/**`), each once,
    /// parents before children.
    fn all_path_patterns(&self) -> Vec<PathPattern> {
        let mut out: Vec<PathPattern> = Vec::new();
        let mut push = |pattern: PathPattern| {
            if !out.contains(&pattern) {
                out.push(pattern);
            }
        };
        each_pattern(&PathPattern::root(), &self.inner.body, &mut |at, node: &Node| {
            push(at.clone());
            if matches!(node.kind, NodeKind::Step(_)) {
                push(at.any_sub_path());
            }
            for (segment, _) in node.children() {
                if let Some(own) = segment.own_pattern(at) {
                    push(own);
                }
            }
        });
        out
    }

    /// The journal paths (of those given) that have no place in this definition.
    pub fn unknown_paths<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let patterns: Vec<regex::Regex> = self.all_path_patterns().iter().map(PathPattern::regex).collect();
        let mut unknown: Vec<String> = paths
            .into_iter()
            .filter(|path| !path.is_empty())
            // Engine-internal entries (`@fallback`, `@inbox`, `@due`) belong to their step.
            .map(|path| StepPath::new(path).owning_step().to_owned())
            .filter(|path| !patterns.iter().any(|p| p.is_match(path)))
            .collect();
        unknown.sort();
        unknown.dedup();
        unknown
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::{Graph, Loop, Node, OnFailure, Workflow, fn_step};

    fn noop(id: &str) -> Node {
        Node::step(id, fn_step(|_c, x: Value| async move { Ok(x) }))
    }

    /// Every node's `diff_key` is found at its paths, graph nodes and fallbacks included
    /// (the walk reaches every child group, so no operator can be left out).
    #[test]
    fn diff_keys_are_found_below_every_operator() {
        let workflow = Workflow::builder("keys")
            .step(Loop::new("refine", 3, [noop("draft").diff_key("loop-key")]))
            .step(Graph::new("g", 4).node(noop("plan").diff_key("graph-key")))
            .step(noop("risky").on_failure(OnFailure::Fallback(Box::new(noop("spare").diff_key("fallback-key")))))
            .build()
            .unwrap();
        assert_eq!(workflow.diff_key_at("refine#2/draft").as_deref(), Some("loop-key"));
        assert_eq!(workflow.diff_key_at("g/plan#3").as_deref(), Some("graph-key"));
        assert_eq!(workflow.diff_key_at("risky/@fallback").as_deref(), Some("fallback-key"));
        assert_eq!(workflow.diff_key_at("risky"), None);
        assert_eq!(workflow.diff_key_at("refine#2/other"), None);
    }
}
