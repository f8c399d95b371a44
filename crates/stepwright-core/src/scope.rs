//! What a step can read: the workflow input, earlier outputs and bound variables.

use std::sync::Arc;

use serde_json::{Map, Value};

/// Read access to the workflow input, the outputs of earlier steps in enclosing scopes, and
/// variables bound by enclosing operators (a map's `as` name, `loop`).
///
/// Scopes are persistent: a fork path or map item gets a child scope that shares its parent
/// (a copy of the state at the fork, costing one pointer), and nothing a child binds is
/// visible to its siblings or its parent. Merging is explicit: the operator's output is what
/// the parent sees.
#[derive(Clone, Debug)]
pub struct Scope {
    input: Arc<Value>,
    frame: Arc<Frame>,
    /// The run, as templates see it (`run.id`, `run.tenant`, `run.user`, `run.roles`).
    run: Option<Arc<Value>>,
}

#[derive(Clone, Debug, Default)]
struct Frame {
    parent: Option<Arc<Frame>>,
    outputs: Vec<(Arc<str>, Arc<Value>)>,
    vars: Vec<(Arc<str>, Arc<Value>)>,
}

impl Scope {
    /// A root scope over a workflow input.
    pub fn new(input: Arc<Value>) -> Self {
        Self { input, frame: Arc::new(Frame::default()), run: None }
    }

    /// This scope, seeing the run it belongs to as `run`.
    #[must_use]
    pub fn with_run(mut self, run: Value) -> Self {
        self.run = Some(Arc::new(run));
        self
    }

    /// The run this scope belongs to, if known.
    pub fn run(&self) -> Option<&Value> {
        self.run.as_deref()
    }

    /// The workflow input.
    pub fn input(&self) -> &Value {
        &self.input
    }

    pub(crate) fn input_arc(&self) -> &Arc<Value> {
        &self.input
    }

    /// The output of the nearest earlier step with this id (`null` for a skipped step).
    pub fn output(&self, id: &str) -> Option<&Value> {
        self.find(id, |f| &f.outputs)
    }

    pub(crate) fn output_arc(&self, id: &str) -> Option<&Arc<Value>> {
        let mut frame = Some(&self.frame);
        while let Some(f) = frame {
            if let Some((_, v)) = f.outputs.iter().rev().find(|(k, _)| &**k == id) {
                return Some(v);
            }
            frame = f.parent.as_ref();
        }
        None
    }

    /// A variable bound by an enclosing operator (a map's `as` name, `loop`).
    pub fn var(&self, name: &str) -> Option<&Value> {
        self.find(name, |f| &f.vars)
    }

    fn find<'a>(&'a self, key: &str, pick: impl Fn(&'a Frame) -> &'a Vec<(Arc<str>, Arc<Value>)>) -> Option<&'a Value> {
        let mut frame = Some(&*self.frame);
        while let Some(f) = frame {
            if let Some((_, v)) = pick(f).iter().rev().find(|(k, _)| &**k == key) {
                return Some(v);
            }
            frame = f.parent.as_deref();
        }
        None
    }

    /// The ids of the outputs in scope, each once.
    pub fn output_ids(&self) -> Vec<String> {
        self.names(|f| &f.outputs)
    }

    /// The names of the variables in scope, each once.
    pub fn var_names(&self) -> Vec<String> {
        self.names(|f| &f.vars)
    }

    fn names(&self, pick: impl Fn(&Frame) -> &Vec<(Arc<str>, Arc<Value>)>) -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        let mut frame = Some(&*self.frame);
        while let Some(f) = frame {
            seen.extend(pick(f).iter().map(|(k, _)| k.to_string()));
            frame = f.parent.as_deref();
        }
        seen.into_iter().collect()
    }

    /// A child scope: sees everything here; what it binds stays in it.
    pub(crate) fn child(&self) -> Self {
        Self {
            input: self.input.clone(),
            frame: Arc::new(Frame { parent: Some(self.frame.clone()), outputs: Vec::new(), vars: Vec::new() }),
            run: self.run.clone(),
        }
    }

    /// A scope that sees only `input` and the run (an isolated subworkflow or spawn).
    pub(crate) fn isolated(&self, input: Arc<Value>) -> Self {
        Self { run: self.run.clone(), ..Self::new(input) }
    }

    pub(crate) fn bind_output(&mut self, id: &Arc<str>, value: Arc<Value>) {
        // Copy-on-write: free when no step kept a clone of this scope.
        Arc::make_mut(&mut self.frame).outputs.push((id.clone(), value));
    }

    pub(crate) fn bind_var(&mut self, name: &str, value: Arc<Value>) {
        Arc::make_mut(&mut self.frame).vars.push((Arc::from(name), value));
    }

    /// The scope as one JSON object, `{input, steps: {id: {output}}, <vars>}`: what templates
    /// and expressions see. Inner bindings shadow outer ones.
    pub fn to_json(&self) -> Value {
        let mut frames = Vec::new();
        let mut frame = Some(&*self.frame);
        while let Some(f) = frame {
            frames.push(f);
            frame = f.parent.as_deref();
        }
        let mut steps = Map::new();
        let mut root = Map::new();
        for f in frames.into_iter().rev() {
            for (id, value) in &f.outputs {
                let mut entry = Map::new();
                entry.insert("output".into(), (**value).clone());
                steps.insert(id.to_string(), Value::Object(entry));
            }
            for (name, value) in &f.vars {
                root.insert(name.to_string(), (**value).clone());
            }
        }
        root.insert("input".into(), (*self.input).clone());
        root.insert("steps".into(), Value::Object(steps));
        if let Some(run) = &self.run {
            root.insert("run".into(), (**run).clone());
        }
        Value::Object(root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn children_see_parents_but_not_the_reverse() {
        let mut root = Scope::new(Arc::new(json!({"q": 1})));
        root.bind_output(&Arc::from("a"), Arc::new(json!(1)));
        let mut child = root.child();
        child.bind_output(&Arc::from("b"), Arc::new(json!(2)));
        child.bind_var("item", Arc::new(json!("x")));
        assert_eq!(child.output("a"), Some(&json!(1)));
        assert_eq!(child.output("b"), Some(&json!(2)));
        assert_eq!(root.output("b"), None);
        assert_eq!(
            child.to_json(),
            json!({"input": {"q": 1}, "item": "x", "steps": {"a": {"output": 1}, "b": {"output": 2}}})
        );
    }

    #[test]
    fn later_bindings_shadow_earlier() {
        let mut scope = Scope::new(Arc::new(Value::Null));
        scope.bind_output(&Arc::from("a"), Arc::new(json!(1)));
        let snapshot = scope.clone();
        scope.bind_output(&Arc::from("a"), Arc::new(json!(2)));
        assert_eq!(scope.output("a"), Some(&json!(2)));
        assert_eq!(snapshot.output("a"), Some(&json!(1)), "a snapshot is not changed by later writes");
    }
}
