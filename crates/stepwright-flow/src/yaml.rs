//! A YAML document as a tree in which every node knows its line and column.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::Spanned;

/// Where something is in its file (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pos {
    pub line: u64,
    pub column: u64,
}

/// A YAML value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Yaml {
    /// `~` or `null`.
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Item>),
    /// A mapping, in file order.
    Map(Vec<(Key, Item)>),
}

/// A YAML item (a scalar, a list or a map) and where the file has it. (Called an item,
/// not a node, so as not to be confused with the workflow nodes the compiler builds.)
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Item {
    /// The scalar, list or map.
    pub value: Yaml,
    /// Where the item starts, for diagnostics.
    pub pos: Pos,
}

/// A mapping key and where it is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Key {
    pub name: String,
    pub pos: Pos,
}

impl Item {
    /// A schema's top-level property names in the order the file writes them (what a form
    /// shows them in; the JSON the schema becomes has no order).
    pub(crate) fn property_order(&self) -> Vec<String> {
        match self.get("properties").map(|p| &p.value) {
            Some(Yaml::Map(entries)) => entries.iter().map(|(key, _)| key.name.clone()).collect(),
            _ => Vec::new(),
        }
    }

    /// The node as plain JSON (positions dropped).
    pub(crate) fn to_json(&self) -> Value {
        match &self.value {
            Yaml::Null => Value::Null,
            Yaml::Bool(b) => Value::Bool(*b),
            Yaml::Int(i) => Value::from(*i),
            Yaml::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Yaml::Str(s) => Value::String(s.clone()),
            Yaml::Seq(items) => Value::Array(items.iter().map(Item::to_json).collect()),
            Yaml::Map(entries) => Value::Object(entries.iter().map(|(k, v)| (k.name.clone(), v.to_json())).collect()),
        }
    }

    /// The entry of a mapping with this key.
    pub(crate) fn get(&self, key: &str) -> Option<&Item> {
        match &self.value {
            Yaml::Map(entries) => entries.iter().find(|(k, _)| k.name == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.value {
            Yaml::Str(s) => Some(s),
            _ => None,
        }
    }

    /// What kind of value this is, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match &self.value {
            Yaml::Null => "null",
            Yaml::Bool(_) => "a boolean",
            Yaml::Int(_) => "an integer",
            Yaml::Float(_) => "a number",
            Yaml::Str(_) => "a string",
            Yaml::Seq(_) => "a list",
            Yaml::Map(_) => "a mapping",
        }
    }
}

fn pos(location: &serde_saphyr::Location) -> Pos {
    Pos { line: location.line(), column: location.column() }
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<Yaml>::deserialize(deserializer)?;
        Ok(Item { value: spanned.value, pos: pos(&spanned.referenced) })
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<String>::deserialize(deserializer)?;
        Ok(Key { name: spanned.value, pos: pos(&spanned.referenced) })
    }
}

impl<'de> Deserialize<'de> for Yaml {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(YamlVisitor)
    }
}

struct YamlVisitor;

impl<'de> Visitor<'de> for YamlVisitor {
    type Value = Yaml;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Yaml, E> {
        Ok(Yaml::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Yaml, E> {
        Ok(Yaml::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Yaml, E> {
        Ok(i64::try_from(v).map_or(Yaml::Float(v as f64), Yaml::Int))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Yaml, E> {
        Ok(Yaml::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Yaml, E> {
        Ok(Yaml::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Yaml, E> {
        Ok(Yaml::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Yaml, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Item>()? {
            items.push(item);
        }
        Ok(Yaml::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Yaml, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            let value = map.next_value::<Item>()?;
            entries.push((key, value));
        }
        Ok(Yaml::Map(entries))
    }
}

/// Parses a document; a syntax error comes back with its position.
///
/// Scalars follow YAML 1.2's core schema, as editors' YAML servers do: only `true` and
/// `false` are booleans, so `id: n` or `answer: yes` are the strings they look like, not
/// YAML 1.1's booleans.
pub(crate) fn parse(source: &str) -> Result<Item, (Pos, String)> {
    let options = serde_saphyr::options! { strict_booleans: true };
    serde_saphyr::from_str_with_options::<Item>(source, options).map_err(|e| {
        let at = e.location().map(|l| pos(&l)).unwrap_or_default();
        let message = e.to_string();
        let first = message.lines().next().unwrap_or("invalid YAML");
        // The position is reported separately; drop the parser's own "error: line L column C: ".
        let first = match first.find(": ").filter(|_| first.starts_with("error: line")) {
            Some(i) => first[i + 2..].find(": ").map_or(&first[i + 2..], |j| &first[i + 2 + j + 2..]),
            None => first.strip_prefix("error: ").unwrap_or(first),
        };
        (at, format!("invalid YAML: {first}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_know_where_they_are() {
        let doc = parse("workflow: demo\nsteps:\n  - id: a\n    set: 1\n").unwrap();
        let steps = doc.get("steps").unwrap();
        assert_eq!(steps.pos.line, 3);
        let Yaml::Seq(items) = &steps.value else { panic!() };
        let Yaml::Map(entries) = &items[0].value else { panic!() };
        assert_eq!(entries[1].0.name, "set");
        assert_eq!((entries[1].0.pos.line, entries[1].0.pos.column), (4, 5));
        assert_eq!(doc.to_json()["steps"][0]["set"], 1);
    }

    #[test]
    fn only_true_and_false_are_booleans() {
        let doc = parse("a: y\nb: no\nc: on\nd: Yes\ne: true\nf: false\ng: 'true'\n").unwrap();
        let json = doc.to_json();
        assert_eq!(
            json,
            serde_json::json!({ "a": "y", "b": "no", "c": "on", "d": "Yes", "e": true, "f": false, "g": "true" })
        );
    }
}
