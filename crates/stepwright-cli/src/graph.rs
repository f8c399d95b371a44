//! `graph`'s drawing: a workflow's outline (`Workflow::outline`) as Mermaid or Graphviz dot.
//! Every operator is drawn with its structure — branch arms with their conditions, fork
//! paths between a split and a join, map, loop and `every` bodies in a box with their back
//! edges, graph nodes with their edges and conditions, called and spawned workflows as
//! subgraphs, fallbacks on a dashed "on failure" edge — and each step is labelled with its
//! kind (llm, agent, tool, approval…).
//!
//! The outline is walked once into [`Mark`]s; each format writes the marks its own way.

use serde_json::Value;

use crate::args::GraphFormat;

/// A drawing's parts, in the order they are written.
enum Mark {
    Node {
        key: String,
        label: String,
        shape: Shape,
    },
    /// A subgraph holding the marks up to its `Close`.
    Open {
        key: String,
        label: String,
    },
    Close,
}

#[derive(Clone, Copy)]
enum Shape {
    Step,
    Decision,
    Join,
}

struct Edge {
    from: String,
    to: String,
    label: Option<String>,
    dashed: bool,
}

/// Where edges go into a drawn piece and where they leave it.
struct Ends {
    entries: Vec<String>,
    exits: Vec<String>,
}

#[derive(Default)]
struct Drawing {
    marks: Vec<Mark>,
    edges: Vec<Edge>,
    next: usize,
}

/// The longest text in a label, so a long condition or template keeps the drawing readable.
const LABEL_CHARS: usize = 48;

fn text(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    crate::render::shortened(&text, LABEL_CHARS)
}

/// A step's kind from its identity: file steps' identities start with their kind.
fn step_kind(node: &Value) -> &str {
    const KINDS: &[&str] = &["llm", "agent", "tool", "set", "approval", "input", "memory.store", "memory.recall"];
    let identity = node["step_type"].as_str().unwrap_or_default();
    let first = identity.split_whitespace().next().unwrap_or_default();
    KINDS.iter().find(|k| **k == first).copied().unwrap_or("step")
}

/// What a step's policies add to its label: its condition, an approval before it, a cache.
fn notes(node: &Value) -> String {
    let mut notes = String::new();
    if !node["if"].is_null() {
        notes.push_str(&format!(" (if {})", text(&node["if"])));
    }
    if !node["requires_approval"].is_null() {
        notes.push_str(" (approved first)");
    }
    if node["cache"] == Value::Bool(true) {
        notes.push_str(" (cached)");
    }
    notes
}

/// A duration as the file format writes it: `1d`, `2h`, `5m`, `30s`, `500ms`.
fn duration(ms: &Value) -> String {
    let Some(ms) = ms.as_u64() else { return String::new() };
    [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s")]
        .into_iter()
        .find(|(unit, _)| ms >= *unit && ms % unit == 0)
        .map_or_else(|| format!("{ms}ms"), |(unit, name)| format!("{}{name}", ms / unit))
}

impl Drawing {
    fn key(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}{}", self.next)
    }

    fn node(&mut self, label: String, shape: Shape) -> String {
        let key = self.key("n");
        self.marks.push(Mark::Node { key: key.clone(), label, shape });
        key
    }

    fn edge(&mut self, from: &str, to: &str, label: Option<String>, dashed: bool) {
        self.edges.push(Edge { from: from.to_owned(), to: to.to_owned(), label, dashed });
    }

    fn connect(&mut self, exits: &[String], entries: &[String], label: Option<&str>, dashed: bool) {
        for from in exits {
            for to in entries {
                self.edge(from, to, label.map(str::to_owned), dashed);
            }
        }
    }

    /// A list of steps run in order; `None` when it is empty.
    fn sequence(&mut self, nodes: &Value) -> Option<Ends> {
        let mut whole: Option<Ends> = None;
        for node in nodes.as_array().into_iter().flatten() {
            let ends = self.step(node);
            whole = Some(match whole {
                None => ends,
                Some(before) => {
                    self.connect(&before.exits, &ends.entries, None, false);
                    Ends { entries: before.entries, exits: ends.exits }
                }
            });
        }
        whole
    }

    /// Steps inside a box labelled `label`; a lone node with that label when there are none.
    fn boxed(&mut self, label: String, nodes: &Value) -> Ends {
        let key = self.key("c");
        self.marks.push(Mark::Open { key, label: label.clone() });
        let ends = self.sequence(nodes);
        let ends = ends.unwrap_or_else(|| {
            let only = self.node(label, Shape::Step);
            Ends { entries: vec![only.clone()], exits: vec![only] }
        });
        self.marks.push(Mark::Close);
        ends
    }

    fn step(&mut self, node: &Value) -> Ends {
        let id = &format!("{}{}", node["id"].as_str().unwrap_or("?"), notes(node));
        let kind = node["kind"].as_str().unwrap_or("?");
        let ends = match kind {
            "step" => self.leaf(format!("{id} · {}", step_kind(node))),
            "sleep" => self.leaf(format!("{id} · sleep {}", duration(&node["duration_ms"]))),
            "wait" => self.leaf(format!(
                "{id} · wait for `{}` (at most {})",
                text(&node["event"]),
                duration(&node["timeout_ms"])
            )),
            "sequence" => self.boxed(id.to_owned(), &node["steps"]),
            "provide" => self.boxed(format!("{id} · provide"), &node["steps"]),
            "branch" => self.branch(id, node),
            "fork" => self.fork(id, node),
            "map" => {
                self.boxed(format!("{id} · map over {} as {}", text(&node["items"]), text(&node["as"])), &node["steps"])
            }
            "loop" => {
                let until = match &node["until"] {
                    Value::Null => String::new(),
                    until => format!("until {}, ", text(until)),
                };
                let label = format!("{id} · loop {until}at most {}", node["max_iterations"]);
                self.repeated(label, &node["steps"], "again")
            }
            "every" => {
                let label = format!("{id} · every {}", duration(&node["interval_ms"]));
                self.repeated(label, &node["steps"], "next tick")
            }
            "graph" => self.graph(id, node),
            "workflow" | "spawn" => {
                let callee = text(&node["workflow"]["name"]);
                let label = match node["spawn_timeout_ms"].as_u64() {
                    Some(_) => format!("{id} · spawn {callee} (at most {})", duration(&node["spawn_timeout_ms"])),
                    None => format!("{id} · workflow {callee}"),
                };
                self.boxed(label, &node["steps"])
            }
            other => self.leaf(format!("{id} · {other}")),
        };
        match node.get("fallback") {
            Some(fallback) => {
                let instead = self.boxed(format!("{id} · fallback"), &fallback["steps"]);
                self.connect(&ends.entries, &instead.entries, Some("on failure"), true);
                let mut exits = ends.exits;
                exits.extend(instead.exits);
                Ends { entries: ends.entries, exits }
            }
            None => ends,
        }
    }

    fn leaf(&mut self, label: String) -> Ends {
        let key = self.node(label, Shape::Step);
        Ends { entries: vec![key.clone()], exits: vec![key] }
    }

    /// A body in a box with an edge back from its end to its start.
    fn repeated(&mut self, label: String, body: &Value, back: &str) -> Ends {
        let ends = self.boxed(label, body);
        self.connect(&ends.exits, &ends.entries, Some(back), true);
        ends
    }

    fn branch(&mut self, id: &str, node: &Value) -> Ends {
        let split = self.node(format!("{id} · branch"), Shape::Decision);
        let mut exits = Vec::new();
        for arm in node["arms"].as_array().into_iter().flatten() {
            if let Some(ends) = self.sequence(&arm["steps"]) {
                self.connect(std::slice::from_ref(&split), &ends.entries, Some(&text(&arm["when"])), false);
                exits.extend(ends.exits);
            }
        }
        match self.sequence(&node["otherwise"]) {
            Some(ends) => {
                self.connect(std::slice::from_ref(&split), &ends.entries, Some("otherwise"), false);
                exits.extend(ends.exits);
            }
            // No arm holds: the branch is skipped and the run goes on from it.
            None => exits.push(split.clone()),
        }
        Ends { entries: vec![split], exits }
    }

    fn fork(&mut self, id: &str, node: &Value) -> Ends {
        let key = self.key("c");
        let mode = node["mode"].as_str().unwrap_or("all");
        self.marks.push(Mark::Open { key, label: format!("{id} · fork ({mode})") });
        let split = self.node(format!("{id} · split"), Shape::Decision);
        let join_label = match &node["merge"] {
            Value::Null => "join".to_owned(),
            // A file's merge is kept as its template's JSON text.
            Value::String(source) => {
                let template = serde_json::from_str::<Value>(source).unwrap_or_else(|_| Value::String(source.clone()));
                format!("merge {}", text(&template))
            }
            other => format!("merge {}", text(other)),
        };
        let mut path_exits = Vec::new();
        for (index, path) in node["paths"].as_array().into_iter().flatten().enumerate() {
            if let Some(ends) = self.sequence(path) {
                self.connect(std::slice::from_ref(&split), &ends.entries, Some(&format!("path {index}")), false);
                path_exits.extend(ends.exits);
            }
        }
        let join = self.node(join_label, Shape::Join);
        self.connect(&path_exits, std::slice::from_ref(&join), None, false);
        self.marks.push(Mark::Close);
        Ends { entries: vec![split], exits: vec![join] }
    }

    fn graph(&mut self, id: &str, node: &Value) -> Ends {
        let key = self.key("c");
        self.marks.push(Mark::Open { key, label: format!("{id} · graph (at most {} steps)", node["max_steps"]) });
        let mut drawn: Vec<(String, Ends)> = Vec::new();
        for inner in node["nodes"].as_array().into_iter().flatten() {
            let ends = self.step(inner);
            drawn.push((inner["id"].as_str().unwrap_or_default().to_owned(), ends));
        }
        self.marks.push(Mark::Close);
        let find = |name: &str| drawn.iter().position(|(id, _)| id == name);
        let edges = node["edges"].as_array().cloned().unwrap_or_default();
        // A node ends the graph where no edge is sure to be taken after it.
        let mut ending = vec![true; drawn.len()];
        for edge in &edges {
            let (Some(from), Some(to)) =
                (find(edge["from"].as_str().unwrap_or_default()), find(edge["to"].as_str().unwrap_or_default()))
            else {
                continue;
            };
            let label = match &edge["when"] {
                Value::Null => None,
                when => Some(text(when)),
            };
            if label.is_none() {
                ending[from] = false;
            }
            let (exits, entries) = (drawn[from].1.exits.clone(), drawn[to].1.entries.clone());
            self.connect(&exits, &entries, label.as_deref(), false);
        }
        let entry = node["entry"].as_str().and_then(find).unwrap_or(0);
        let entries = drawn.get(entry).map(|(_, ends)| ends.entries.clone()).unwrap_or_default();
        let exits =
            drawn.iter().zip(ending).filter(|(_, ends)| *ends).flat_map(|((_, e), _)| e.exits.clone()).collect();
        Ends { entries, exits }
    }
}

/// Draws a workflow's outline in `format`.
pub(crate) fn draw(outline: &Value, format: GraphFormat) -> String {
    let mut drawing = Drawing::default();
    drawing.sequence(&outline["steps"]);
    match format {
        GraphFormat::Mermaid => mermaid(&drawing),
        GraphFormat::Dot => dot(&drawing, outline["name"].as_str().unwrap_or("workflow")),
    }
}

fn mermaid(drawing: &Drawing) -> String {
    let quote = |text: &str| text.replace('"', "#quot;");
    let mut lines = vec!["flowchart TD".to_owned()];
    let mut depth = 1;
    for mark in &drawing.marks {
        let indent = "  ".repeat(depth);
        match mark {
            Mark::Node { key, label, shape } => {
                let label = quote(label);
                lines.push(match shape {
                    Shape::Step => format!("{indent}{key}[\"{label}\"]"),
                    Shape::Decision => format!("{indent}{key}{{\"{label}\"}}"),
                    Shape::Join => format!("{indent}{key}((\"{label}\"))"),
                });
            }
            Mark::Open { key, label } => {
                lines.push(format!("{indent}subgraph {key}[\"{}\"]", quote(label)));
                depth += 1;
            }
            Mark::Close => {
                depth -= 1;
                lines.push(format!("{}end", "  ".repeat(depth)));
            }
        }
    }
    // Edges after every subgraph: an edge written inside one would pull its nodes in.
    for edge in &drawing.edges {
        let arrow = if edge.dashed { "-.->" } else { "-->" };
        lines.push(match &edge.label {
            Some(label) => format!("  {} {arrow}|\"{}\"| {}", edge.from, quote(label), edge.to),
            None => format!("  {} {arrow} {}", edge.from, edge.to),
        });
    }
    lines.join("\n")
}

fn dot(drawing: &Drawing, name: &str) -> String {
    let quote = |text: &str| format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""));
    let mut lines = vec![format!("digraph {} {{", quote(name)), "  node [shape=box];".to_owned()];
    let mut depth = 1;
    for mark in &drawing.marks {
        let indent = "  ".repeat(depth);
        match mark {
            Mark::Node { key, label, shape } => {
                let shape = match shape {
                    Shape::Step => "",
                    Shape::Decision => ", shape=diamond",
                    Shape::Join => ", shape=circle",
                };
                lines.push(format!("{indent}{key} [label={}{shape}];", quote(label)));
            }
            Mark::Open { key, label } => {
                lines.push(format!("{indent}subgraph cluster_{key} {{"));
                lines.push(format!("{indent}  label={};", quote(label)));
                depth += 1;
            }
            Mark::Close => {
                depth -= 1;
                lines.push(format!("{}}}", "  ".repeat(depth)));
            }
        }
    }
    for edge in &drawing.edges {
        let mut attributes = Vec::new();
        if let Some(label) = &edge.label {
            attributes.push(format!("label={}", quote(label)));
        }
        if edge.dashed {
            attributes.push("style=dashed".to_owned());
        }
        let attributes = if attributes.is_empty() { String::new() } else { format!(" [{}]", attributes.join(", ")) };
        lines.push(format!("  {} -> {}{attributes};", edge.from, edge.to));
    }
    lines.push("}".to_owned());
    lines.join("\n")
}
