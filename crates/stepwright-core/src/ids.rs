//! Identifiers: run ids, step paths, interrupt ids, timestamps.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::hash::ContentHash;

/// The id of one run: a UUIDv7, so ids sort by creation time.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(uuid::Uuid);

impl RunId {
    /// Builds a UUIDv7 from a timestamp and ten random bytes (both injected, so tests
    /// produce exact ids).
    pub fn from_parts(at: Timestamp, random: [u8; 10]) -> Self {
        let millis = u64::try_from(at.as_micros() / 1000).unwrap_or(0);
        Self(uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid())
    }

    /// A run id from its 16 bytes (as stores keep it).
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(uuid::Uuid::from_bytes(bytes))
    }

    /// The underlying UUID.
    pub fn as_uuid(&self) -> uuid::Uuid {
        self.0
    }
}

impl schemars::JsonSchema for RunId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RunId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "uuid", "description": "A run's id (a UUIDv7)." })
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RunId({})", self.0)
    }
}

/// The error returned when a string is not a run id.
#[derive(Debug, thiserror::Error)]
#[error("invalid run id {text:?}")]
pub struct ParseRunIdError {
    text: String,
    #[source]
    source: uuid::Error,
}

impl FromStr for RunId {
    type Err = ParseRunIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(text).map(Self).map_err(|source| ParseRunIdError { text: text.to_owned(), source })
    }
}

/// A point in time: microseconds since the Unix epoch.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Self = Self(0);

    /// A timestamp from microseconds since the Unix epoch.
    pub const fn from_micros(micros: i64) -> Self {
        Self(micros)
    }

    /// A timestamp from milliseconds since the Unix epoch.
    pub const fn from_millis(millis: i64) -> Self {
        Self(millis * 1000)
    }

    /// Microseconds since the Unix epoch.
    pub const fn as_micros(self) -> i64 {
        self.0
    }

    /// This instant plus a duration (saturating).
    pub fn plus(self, duration: std::time::Duration) -> Self {
        let micros = i64::try_from(duration.as_micros()).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(micros))
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Self) -> std::time::Duration {
        std::time::Duration::from_micros(u64::try_from(self.0 - earlier.0).unwrap_or(0))
    }
}

/// The stable identity of one step execution inside a run, such as `drafts[1]/write`,
/// `refine#3/critique` or `research/turn.2/tool.0`.
///
/// Segments are separated by `/`. `[i]` marks the i-th path of a fork or item of a map
/// (0-based, declaration or item order); `#n` marks the n-th iteration of a loop or visit of
/// a graph node (1-based). Ordinals never come from completion order, so a path names the
/// same execution in every replay.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StepPath(Arc<str>);

impl schemars::JsonSchema for StepPath {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StepPath".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A step execution's path in its run, such as `drafts[1]/write` or `refine#3/critique`.",
        })
    }
}

impl StepPath {
    /// The root: the workflow body itself.
    pub fn root() -> Self {
        Self(Arc::from(""))
    }

    /// A path from its textual form.
    pub fn new(text: &str) -> Self {
        Self(Arc::from(text))
    }

    /// `self/segment`.
    pub fn join(&self, segment: &str) -> Self {
        if self.0.is_empty() {
            Self(Arc::from(segment))
        } else {
            // Paths are short: build in a stack buffer, so the `Arc<str>` is the only
            // allocation (a `String` first would cost a second one).
            let len = self.0.len() + 1 + segment.len();
            let mut buffer = [0u8; 128];
            if len <= buffer.len() {
                buffer[..self.0.len()].copy_from_slice(self.0.as_bytes());
                buffer[self.0.len()] = b'/';
                buffer[self.0.len() + 1..len].copy_from_slice(segment.as_bytes());
                // Whole `&str`s joined by an ASCII byte are valid UTF-8.
                if let Ok(text) = std::str::from_utf8(&buffer[..len]) {
                    return Self(Arc::from(text));
                }
            }
            Self(Arc::from(format!("{}/{segment}", self.0)))
        }
    }

    /// `self/id` for a shared id; at the root this reuses the id's allocation.
    pub fn join_id(&self, id: &Arc<str>) -> Self {
        if self.0.is_empty() { Self(id.clone()) } else { self.join(id) }
    }

    /// `self[index]`: the index-th fork path or map item.
    pub fn index(&self, index: usize) -> Self {
        Self(Arc::from(format!("{}[{index}]", self.0)))
    }

    /// `self#ordinal`: the ordinal-th loop iteration or graph visit.
    pub fn ordinal(&self, ordinal: u64) -> Self {
        Self(Arc::from(format!("{}#{ordinal}", self.0)))
    }

    /// `self/@fallback`: where this step's fallback runs, in its place.
    pub fn fallback(&self) -> Self {
        self.join(FALLBACK)
    }

    /// The step an engine-internal entry belongs to: `a/b` for `a/b/@inbox`, `a/b/@fallback`
    /// or `a/b/@due` (the first `@` segment and all after it removed).
    pub fn owning_step(&self) -> &str {
        self.0.split("/@").next().unwrap_or(&self.0)
    }

    /// `self/name.ordinal`: a numbered sub-step such as an agent's `turn.2`.
    pub fn sub(&self, name: &str, ordinal: u64) -> Self {
        self.join(&format!("{name}.{ordinal}"))
    }

    /// The textual form.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the root path.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `self` is `other` or lies below it.
    pub fn starts_with(&self, other: &StepPath) -> bool {
        other.0.is_empty()
            || (self.0.starts_with(&*other.0)
                && matches!(self.0.as_bytes().get(other.0.len()), None | Some(b'/' | b'[' | b'#')))
    }
}

/// A path is looked up by its text (`map.get("a/b")`): its order and hash are its text's.
impl std::borrow::Borrow<str> for StepPath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for StepPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "<root>" } else { &self.0 })
    }
}

impl fmt::Debug for StepPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StepPath({:?})", &*self.0)
    }
}

/// A pattern over step paths: the grammar of [`StepPath`] with `[*]` for any fork path or
/// map item, `#*` for any iteration or visit, and a trailing `/**` for any sub-path
/// (`drafts[*]/formal`, `refine#*/critique`, `research/**`). What a definition can produce.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PathPattern(String);

impl PathPattern {
    /// The workflow body itself.
    pub(crate) fn root() -> Self {
        Self(String::new())
    }

    /// `self/id`.
    pub(crate) fn join(&self, id: &str) -> Self {
        if self.0.is_empty() { Self(id.to_owned()) } else { Self(format!("{}/{id}", self.0)) }
    }

    /// `self[*]`: any fork path or map item (see [`StepPath::index`]).
    pub(crate) fn any_index(&self) -> Self {
        Self(format!("{}[*]", self.0))
    }

    /// `self#*`: any iteration or visit (see [`StepPath::ordinal`]).
    pub(crate) fn any_ordinal(&self) -> Self {
        Self(format!("{}#*", self.0))
    }

    /// `self/@fallback`: where a step's fallback runs (see [`StepPath::fallback`]).
    pub(crate) fn fallback(&self) -> Self {
        self.join(FALLBACK)
    }

    /// `self/**`: a leaf step's journaled sub-steps (an agent's `turn.2/tool.0`).
    pub(crate) fn any_sub_path(&self) -> Self {
        Self(format!("{}/**", self.0))
    }

    /// The textual form.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The pattern as an anchored regular expression over paths' textual form.
    pub(crate) fn regex(&self) -> regex::Regex {
        let mut out = String::from("^");
        let mut rest = self.0.as_str();
        while !rest.is_empty() {
            if let Some(tail) = rest.strip_prefix("[*]") {
                out.push_str(r"\[\d+\]");
                rest = tail;
            } else if let Some(tail) = rest.strip_prefix("/**") {
                out.push_str("/.+");
                rest = tail;
            } else if let Some(tail) = rest.strip_prefix("#*") {
                out.push_str(r"#\d+");
                rest = tail;
            } else {
                let c = rest.chars().next().expect("not empty");
                out.push_str(&regex::escape(&c.to_string()));
                rest = &rest[c.len_utf8()..];
            }
        }
        out.push('$');
        regex::Regex::new(&out).expect("an escaped pattern is a valid regex")
    }
}

/// The segment a step's fallback runs under: `step/@fallback`. Segments that start with `@`
/// are the engine's own (`@fallback`, `@inbox`, `@due`); step ids cannot start with one.
const FALLBACK: &str = "@fallback";

/// The stable id of an interrupt: derived from the run, the step path and the interrupt's
/// ordinal within that step, so a re-executed step asks for the same interrupt again.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InterruptId(Arc<str>);

impl InterruptId {
    /// The id of the `ordinal`-th interrupt opened by the step at `path` in `run`.
    pub fn derive(run: RunId, path: &StepPath, ordinal: u32) -> Self {
        let hash = ContentHash::of_parts(&[run.as_uuid().as_bytes(), path.as_str().as_bytes(), &ordinal.to_le_bytes()]);
        Self(Arc::from(format!("int_{}", &hash.to_hex()[..16])))
    }

    /// An id from its textual form.
    pub fn new(text: &str) -> Self {
        Self(Arc::from(text))
    }

    /// The textual form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for InterruptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a workflow or step name against `^[a-z][a-z0-9-]*$`; returns why it fails.
pub fn check_step_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err("names must not be empty".into()),
        Some(first) if !first.is_ascii_lowercase() => {
            return Err(format!("{name:?} must start with a lowercase letter (a-z)"));
        }
        Some(_) => {}
    }
    if let Some(bad) = chars.find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')) {
        return Err(format!("{name:?} contains {bad:?}; names may use only a-z, 0-9 and '-'"));
    }
    Ok(())
}

/// The idempotency key of a fenced step: SHA-256 of run id and step path, hex. A fallback
/// (`step/@fallback`) gets the key of the step it stands in for, so a reconciling fallback
/// can look up whether the original effect happened.
pub(crate) fn idempotency_key(run: RunId, path: &StepPath) -> String {
    let mut text = path.as_str();
    while let Some(stripped) = text.strip_suffix(FALLBACK).and_then(|t| t.strip_suffix('/')) {
        text = stripped;
    }
    ContentHash::of_parts(&[run.as_uuid().as_bytes(), text.as_bytes()]).to_hex()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_compose() {
        let root = StepPath::root();
        let drafts = root.join("drafts");
        assert_eq!(drafts.index(1).join("write").as_str(), "drafts[1]/write");
        assert_eq!(root.join("refine").ordinal(3).join("critique").as_str(), "refine#3/critique");
        assert_eq!(root.join("research").sub("turn", 2).sub("tool", 0).as_str(), "research/turn.2/tool.0");
        assert!(drafts.index(1).join("write").starts_with(&drafts));
        assert!(!root.join("draftsx").starts_with(&drafts));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_step_name("ticket-triage2").is_ok());
        assert!(check_step_name("Ticket").is_err());
        assert!(check_step_name("9a").is_err());
        assert!(check_step_name("a_b").is_err());
        assert!(check_step_name("").is_err());
    }

    #[test]
    fn run_ids_are_v7_and_parse() {
        let id = RunId::from_parts(Timestamp::from_millis(1_700_000_000_000), [7; 10]);
        assert_eq!(id.as_uuid().get_version_num(), 7);
        assert_eq!(id.to_string().parse::<RunId>().unwrap(), id);
    }

    #[test]
    fn interrupt_ids_are_stable() {
        let run = RunId::from_parts(Timestamp::EPOCH, [1; 10]);
        let path = StepPath::new("review");
        assert_eq!(InterruptId::derive(run, &path, 0), InterruptId::derive(run, &path, 0));
        assert_ne!(InterruptId::derive(run, &path, 0), InterruptId::derive(run, &path, 1));
    }
}
