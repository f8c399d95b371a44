//! A `graph` step: its nodes, edges and routes.

#[allow(clippy::wildcard_imports)] // The compiler's own vocabulary.
use super::*;

impl Compiler {
    /// A `graph`: `nodes` (steps, each visited any number of times), `edges` tried in order
    /// after a node (`from`, `to`, optional `when`; none taken ends the graph with that
    /// node's output), an `entry` (default: the first node) and `max_steps` (default 25).
    pub(super) fn graph(&mut self, path: &str, id: &str, body: &Item) -> Option<Node> {
        let entries = self.entries(body, "`graph`")?;
        self.unknown_fields(entries, &["nodes", "edges", "entry", "max_steps"], "`graph`");
        let max_steps = body.get("max_steps").and_then(|m| self.number(m, "`max_steps`")).unwrap_or(25);
        let Some(Yaml::Seq(items)) = body.get("nodes").map(|n| &n.value) else {
            self.error_hint(
                body.pos,
                "`graph` needs `nodes`, a list of steps",
                "like `nodes: [ { id: draft, set: … } ]`",
            );
            return None;
        };
        // Nodes may read each other's outputs (a later node's output exists on a second
        // visit), so every node id is declared before any node is compiled.
        let names: Vec<String> =
            items.iter().filter_map(|item| item.get("id").and_then(|i| i.as_str()).map(str::to_owned)).collect();
        self.ids.extend(names.iter().cloned());
        let mut scope = HashSet::new();
        let mut graph = Graph::new(id, u32::try_from(max_steps).unwrap_or(u32::MAX));
        for item in items {
            if let Some(node) = self.step(path, item, &mut scope) {
                graph = graph.node(node);
            }
        }
        // The core names a node's visits `graph/node#n`; place its problems at the node too.
        for name in &names {
            let plain = format!("{path}/{name}");
            let aliases: Vec<(String, Pos)> = self
                .positions
                .iter()
                .filter_map(|(at, pos)| {
                    let rest = at.strip_prefix(&plain)?;
                    (rest.is_empty() || rest.starts_with('/')).then(|| (format!("{plain}#*{rest}"), *pos))
                })
                .collect();
            self.positions.extend(aliases);
        }
        let name = |c: &mut Self, node: Option<&Item>, what: &str| -> Option<String> {
            let node = node?;
            let text = c.string(node, what)?;
            if names.contains(&text) {
                return Some(text);
            }
            let message = format!("{what} `{text}` is not a node of this graph");
            match closest(&text, names.iter().map(String::as_str)) {
                Some(near) => c.error_hint(node.pos, message, format!("did you mean `{near}`?")),
                None => c.error_hint(node.pos, message, format!("the nodes are: {}", names.join(", "))),
            }
            None
        };
        if let Some(entry) = name(self, body.get("entry"), "`entry`") {
            graph = graph.entry(&entry);
        }
        match body.get("edges").map(|e| (e.pos, &e.value)) {
            None => {}
            Some((_, Yaml::Seq(edges))) => {
                for edge in edges {
                    let Some(fields) = self.entries(edge, "an edge") else { continue };
                    self.unknown_fields(fields, &["from", "to", "when"], "an edge");
                    let from = name(self, edge.get("from"), "`from`");
                    let to = name(self, edge.get("to"), "`to`");
                    if edge.get("from").is_none() || edge.get("to").is_none() {
                        self.error_hint(edge.pos, "an edge needs `from` and `to`", "like { from: draft, to: review }");
                        continue;
                    }
                    let when = match edge.get("when") {
                        Some(w) => match self.expression(w, "the edge's `when`") {
                            Some(source) => Some(source),
                            None => continue,
                        },
                        None => None,
                    };
                    let (Some(from), Some(to)) = (from, to) else { continue };
                    graph = match when {
                        None => graph.edge(&from, &to),
                        Some(source) => graph.edge_if(
                            &from,
                            &to,
                            Expr::try_new({
                                let source = source.clone();
                                move |scope| expr::truthy(&source, scope)
                            })
                            .with_source(source),
                        ),
                    };
                }
            }
            Some((pos, _)) => self.error(pos, "`edges` must be a list like [{ from: a, to: b, when: … }]"),
        }
        Some(graph.into())
    }
}
