//! Objects in request bodies: serde's derive also reads a struct from an array of its fields'
//! values in order (`"change": [null, null]`), which the document — an `object` — does not
//! allow, so a field typed by a struct reads it only from an object. For
//! `#[serde(deserialize_with = …)]`.

use serde::de::{DeserializeOwned, Error, Unexpected};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

fn unexpected(value: &Value) -> Unexpected<'_> {
    match value {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(_) => Unexpected::Other("a number"),
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

fn from_object<E: Error, T: DeserializeOwned>(value: Value) -> Result<T, E> {
    if !value.is_object() {
        return Err(E::invalid_type(unexpected(&value), &"an object"));
    }
    T::deserialize(value).map_err(E::custom)
}

/// A struct, from an object only.
pub fn object<'de, D: Deserializer<'de>, T: DeserializeOwned>(deserializer: D) -> Result<T, D::Error> {
    from_object(Value::deserialize(deserializer)?)
}

/// An optional struct (`null` or absent: none; absent needs `#[serde(default)]`), from an
/// object only.
pub fn optional<'de, D: Deserializer<'de>, T: DeserializeOwned>(deserializer: D) -> Result<Option<T>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(None),
        value => from_object(value).map(Some),
    }
}

/// A list of structs, each from an object only.
pub fn list<'de, D: Deserializer<'de>, T: DeserializeOwned>(deserializer: D) -> Result<Vec<T>, D::Error> {
    Vec::<Value>::deserialize(deserializer)?.into_iter().map(from_object).collect()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        #[serde(default)]
        a: Option<u32>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        #[serde(deserialize_with = "super::object")]
        one: Inner,
        #[serde(default, deserialize_with = "super::optional")]
        maybe: Option<Inner>,
        #[serde(default, deserialize_with = "super::list")]
        many: Vec<Inner>,
    }

    #[test]
    fn a_struct_is_read_from_an_object_only() {
        let read = |text: &str| serde_json::from_str::<Outer>(text).map_err(|e| e.to_string());
        assert_eq!(
            read(r#"{"one": {"a": 1}, "maybe": null, "many": [{}]}"#),
            Ok(Outer { one: Inner { a: Some(1) }, maybe: None, many: vec![Inner { a: None }] })
        );
        assert!(Inner::deserialize(serde_json::json!([1])).is_ok(), "what serde's derive alone takes");
        for bad in [r#"{"one": [1]}"#, r#"{"one": {}, "maybe": [null]}"#, r#"{"one": {}, "many": [[2]]}"#] {
            assert!(read(bad).unwrap_err().contains("invalid type: sequence, expected an object"), "{bad}");
        }
    }
}
