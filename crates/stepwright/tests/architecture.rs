//! Architecture invariant: within every crate of the workspace, the modules form layers —
//! at every level of the module tree, the sibling modules' uses of each other have no
//! circle. A use between a module and its own ancestor or descendant is a parent and its
//! parts, not a circle; a use between two modules is counted between their ancestors that
//! are siblings (`store::event` using `store::schedule` is a use between siblings of
//! `store`; `commands::remote` using `render` one between `commands` and `render`).
//!
//! Uses are read from the sources: `use crate::…`, `use super::…` and `use self::…`, grouped
//! (`use crate::{a, b::{c, d}}`) or not, and paths written inline (`crate::a::f()`),
//! each resolved to the deepest module it names. Comments and `#[cfg(test)]` code are left
//! out: a test may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path in its crate (`["store", "event"]`; the crate root is `[]`).
type Module = Vec<String>;

/// Every module file of a crate's `src`, by module path.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable source directory") {
            let path = entry.expect("readable").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src").with_extension("");
            let mut module: Module = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                module.pop();
            }
            found.insert(module, path);
        }
    }
    found
}

/// The source without comments and without what follows its first `#[cfg(test)]`.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// `a::{b, c::{d, e}}` as the paths it names (`a::b`, `a::c::d`, `a::c::e`).
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or_default().trim().to_owned()];
    };
    let (prefix, body) = (&tree[..open], &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())]);
    let (mut parts, mut depth, mut current) = (Vec::new(), 0, String::new());
    for ch in body.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(ch);
    }
    parts.push(current);
    parts
        .iter()
        .filter(|part| !part.trim().is_empty())
        .flat_map(|part| expand(part).into_iter().map(|path| format!("{prefix}{path}")))
        .collect()
}

/// The module paths `code` (in `module`) names, unresolved.
fn uses(module: &Module, code: &str) -> Vec<Module> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().last();
        rest = &rest[at + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let statement = &rest[..rest.find(';').unwrap_or(rest.len())];
        let statement: String = statement.split_whitespace().collect::<Vec<_>>().join(" ");
        if ["crate::", "super::", "self::", "crate::{", "super::{"].iter().any(|p| statement.starts_with(p)) {
            paths.extend(expand(&statement));
        }
    }
    for root in ["crate::", "super::"] {
        let mut rest = code;
        while let Some(at) = rest.find(root) {
            let before = rest[..at].chars().last();
            let path: String =
                rest[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            rest = &rest[at + root.len()..];
            // A path that names something (`super::{…}` is a grouped `use`, read above).
            let names_something = path.trim_end_matches(':') != root.trim_end_matches(':');
            if names_something && !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                paths.push(path);
            }
        }
    }
    paths
        .into_iter()
        .map(|path| {
            let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
            let mut at = module.clone();
            match segments.peek().copied() {
                Some("crate") => {
                    at.clear();
                    segments.next();
                }
                _ => {
                    while let Some(&segment) = segments.peek() {
                        match segment {
                            "super" => {
                                at.pop();
                            }
                            "self" => {}
                            _ => break,
                        }
                        segments.next();
                    }
                }
            }
            at.extend(segments.map(str::to_owned));
            at
        })
        .collect()
}

/// The uses between sibling modules of a crate, at every level.
fn sibling_uses(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let modules = modules(src);
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).expect("readable"));
        for named in uses(module, &code) {
            let Some(target) = (0..=named.len()).rev().map(|n| named[..n].to_vec()).find(|m| modules.contains_key(m))
            else {
                continue;
            };
            let common = module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == module.len() || common == target.len() {
                continue; // A module and its ancestor or descendant.
            }
            edges.entry(module[..=common].to_vec()).or_default().insert(target[..=common].to_vec());
        }
    }
    edges
}

/// A circle among `edges`, if there is one.
fn circle(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        at: &Module,
        edges: &BTreeMap<Module, BTreeSet<Module>>,
        path: &mut Vec<Module>,
        done: &mut BTreeSet<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(start) = path.iter().position(|m| m == at) {
            let mut circle = path[start..].to_vec();
            circle.push(at.clone());
            return Some(circle);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.clone());
        for next in edges.get(at).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(at.clone());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|start| visit(start, edges, &mut Vec::new(), &mut done))
}

fn crates() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("the workspace's crates")
        .map(|entry| entry.expect("readable").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    crates.sort();
    crates
}

#[test]
fn no_crate_has_an_import_circle() {
    let crates = crates();
    assert!(crates.len() >= 10, "the workspace's crates: {crates:?}");
    let mut circles = Vec::new();
    for src in crates {
        if let Some(circle) = circle(&sibling_uses(&src)) {
            let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
            circles.push(format!("{}: {}", src.parent().unwrap().display(), names.join(" → ")));
        }
    }
    assert!(circles.is_empty(), "modules that use each other in a circle:\n{}", circles.join("\n"));
}

/// The reader itself: a grouped import, `super`, an inline path and a test module are each
/// read as they mean, and a circle between siblings is found.
#[test]
fn the_reader_finds_grouped_relative_and_inline_uses() {
    let module: Module = vec!["store".into(), "event".into()];
    let code = code_of(
        "use super::{schedule::{Key, Tick}, Store};\nuse crate::ids::RunId; // crate::journal\nfn f() { crate::hash::of(); }\n#[cfg(test)]\nmod tests { use crate::engine; }",
    );
    let mut named: Vec<String> = uses(&module, &code).iter().map(|m| m.join("::")).collect();
    named.sort();
    named.dedup();
    assert_eq!(
        named,
        ["hash::of", "ids::RunId", "store::Store", "store::schedule::Key", "store::schedule::Tick"],
        "{code}"
    );
    let edge = |a: &[&str], b: &[&str]| {
        (a.iter().map(|s| (*s).to_owned()).collect::<Module>(), b.iter().map(|s| (*s).to_owned()).collect::<Module>())
    };
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (a, b) in [edge(&["a"], &["b"]), edge(&["b"], &["c"])] {
        edges.entry(a).or_default().insert(b);
    }
    assert_eq!(circle(&edges), None);
    let (c, a) = edge(&["c"], &["a"]);
    edges.entry(c).or_default().insert(a);
    assert!(circle(&edges).is_some());
}
