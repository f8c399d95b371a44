//! `graph`'s drawing: a workflow's outline (the contract's [`Outline`], as the API serves
//! it) as Mermaid or Graphviz dot. Every node is drawn by its layout, not by its operator —
//! a choice's groups on edges labelled with their conditions, parallel groups between a
//! split and a join, repeated bodies in a box with a back edge, graph nodes with their edges
//! and conditions, boxes for bodies and called workflows, fallbacks on a dashed
//! "on failure" edge — and each step is labelled with its kind (llm, agent, tool…).
//!
//! The outline is walked once into [`Mark`]s; each format writes the marks its own way.

use stepwright::api::workflow::{Outline, OutlineEdge, OutlineGroup, OutlineLayout, OutlineNode};

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
    fn sequence(&mut self, nodes: &[OutlineNode]) -> Option<Ends> {
        let mut whole: Option<Ends> = None;
        for node in nodes {
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
    fn boxed(&mut self, label: String, nodes: &[OutlineNode]) -> Ends {
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

    /// A node by its layout: no case per operator, so a new operator is drawn as it is.
    fn step(&mut self, node: &OutlineNode) -> Ends {
        let notes: String = node.notes.iter().map(|note| format!(" ({note})")).collect();
        let id = format!("{}{notes}", node.id);
        let label = if node.label.is_empty() { id.clone() } else { format!("{id} · {}", node.label) };
        let ends = match &node.layout {
            OutlineLayout::Step => self.leaf(label),
            OutlineLayout::Boxed => self.boxed(label, first(node)),
            OutlineLayout::Repeated { again } => {
                let ends = self.boxed(label, first(node));
                self.connect(&ends.exits, &ends.entries, Some(again), true);
                ends
            }
            OutlineLayout::Choice { falls_through } => self.choice(label, &node.groups, *falls_through),
            OutlineLayout::Parallel { join } => self.parallel(&id, label, &node.groups, join),
            OutlineLayout::Graph { entry, edges } => self.graph(label, first(node), entry.as_deref(), edges),
        };
        match &node.fallback {
            Some(fallback) => {
                let instead = self.boxed(format!("{id} · fallback"), &fallback.steps);
                let why = fallback.label.as_deref().unwrap_or("on failure");
                self.connect(&ends.entries, &instead.entries, Some(why), true);
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

    /// A decision with an edge to each group, labelled by the group's label.
    fn choice(&mut self, label: String, groups: &[OutlineGroup], falls_through: bool) -> Ends {
        let split = self.node(label, Shape::Decision);
        let mut exits = Vec::new();
        for group in groups {
            if let Some(ends) = self.sequence(&group.steps) {
                self.connect(std::slice::from_ref(&split), &ends.entries, group.label.as_deref(), false);
                exits.extend(ends.exits);
            }
        }
        // When none is taken, the run goes on from the decision.
        if falls_through {
            exits.push(split.clone());
        }
        Ends { entries: vec![split], exits }
    }

    /// Groups side by side in a box, between a split and a join.
    fn parallel(&mut self, id: &str, label: String, groups: &[OutlineGroup], join: &str) -> Ends {
        let key = self.key("c");
        self.marks.push(Mark::Open { key, label });
        let split = self.node(format!("{id} · split"), Shape::Decision);
        let mut group_exits = Vec::new();
        for group in groups {
            if let Some(ends) = self.sequence(&group.steps) {
                self.connect(std::slice::from_ref(&split), &ends.entries, group.label.as_deref(), false);
                group_exits.extend(ends.exits);
            }
        }
        let join = self.node(join.to_owned(), Shape::Join);
        self.connect(&group_exits, std::slice::from_ref(&join), None, false);
        self.marks.push(Mark::Close);
        Ends { entries: vec![split], exits: vec![join] }
    }

    fn graph(&mut self, label: String, nodes: &[OutlineNode], entry: Option<&str>, edges: &[OutlineEdge]) -> Ends {
        let key = self.key("c");
        self.marks.push(Mark::Open { key, label });
        let mut drawn: Vec<(&str, Ends)> = Vec::new();
        for inner in nodes {
            let ends = self.step(inner);
            drawn.push((inner.id.as_str(), ends));
        }
        self.marks.push(Mark::Close);
        let find = |name: &str| drawn.iter().position(|(id, _)| *id == name);
        // A node ends the graph where no edge is sure to be taken after it.
        let mut ending = vec![true; drawn.len()];
        for edge in edges {
            let (Some(from), Some(to)) = (find(&edge.from), find(&edge.to)) else {
                continue;
            };
            if edge.when.is_none() {
                ending[from] = false;
            }
            let (exits, entries) = (drawn[from].1.exits.clone(), drawn[to].1.entries.clone());
            self.connect(&exits, &entries, edge.when.as_deref(), false);
        }
        let entry = entry.and_then(find).unwrap_or(0);
        let entries = drawn.get(entry).map(|(_, ends)| ends.entries.clone()).unwrap_or_default();
        let exits =
            drawn.iter().zip(ending).filter(|(_, ends)| *ends).flat_map(|((_, e), _)| e.exits.clone()).collect();
        Ends { entries, exits }
    }
}

/// A node's one group's steps (a body, a graph's nodes).
fn first(node: &OutlineNode) -> &[OutlineNode] {
    node.groups.first().map(|g| g.steps.as_slice()).unwrap_or_default()
}

/// Draws a workflow's outline in `format`.
pub(crate) fn draw(outline: &Outline, format: GraphFormat) -> String {
    let mut drawing = Drawing::default();
    drawing.sequence(&outline.steps);
    match format {
        GraphFormat::Mermaid => mermaid(&drawing),
        GraphFormat::Dot => dot(&drawing, &outline.name),
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
