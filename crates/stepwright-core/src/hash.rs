//! Canonical JSON and content hashes.
//!
//! Everything that is content-addressed (step outputs, artifacts, cache keys, definition
//! hashes) is hashed with SHA-256 over *canonical JSON*: object keys sorted by their UTF-8
//! bytes, no insignificant whitespace, numbers as `serde_json` prints them. The encoding is
//! written straight into the hasher, so hashing allocates nothing for scalars and arrays.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// A SHA-256 digest of canonical JSON (or of raw bytes), printed as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash([u8; 32]);

impl ContentHash {
    /// Hashes a JSON value in its canonical form.
    pub fn of_value(value: &Value) -> Self {
        let mut sink = HashSink(Sha256::new());
        write_canonical(value, &mut sink);
        Self(sink.0.finalize().into())
    }

    /// Hashes raw bytes.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Hashes a sequence of labelled parts, each length-prefixed so that no two different
    /// sequences share an encoding (used for idempotency and cache keys).
    pub fn of_parts(parts: &[&[u8]]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        Self(hasher.finalize().into())
    }

    /// A hash from its 32 raw bytes (as stores keep it); `None` for any other length.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The digest as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        let mut out = String::with_capacity(64);
        for byte in self.0 {
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        out
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({})", &self.to_hex()[..12])
    }
}

/// The error returned when a string is not 64 hex digits.
#[derive(Debug, thiserror::Error)]
#[error("invalid content hash {0:?}: expected 64 lowercase hex digits")]
pub struct ParseHashError(String);

impl FromStr for ContentHash {
    type Err = ParseHashError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return Err(ParseHashError(text.to_owned()));
        }
        let mut out = [0u8; 32];
        for (index, pair) in bytes.chunks_exact(2).enumerate() {
            let high = hex_digit(pair[0]).ok_or_else(|| ParseHashError(text.to_owned()))?;
            let low = hex_digit(pair[1]).ok_or_else(|| ParseHashError(text.to_owned()))?;
            out[index] = (high << 4) | low;
        }
        Ok(Self(out))
    }
}

fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

impl schemars::JsonSchema for ContentHash {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ContentHash".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[0-9a-f]{64}$",
            "description": "SHA-256 of a value's canonical JSON, in hex.",
        })
    }
}

impl Serialize for ContentHash {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_hex())
    }
}

impl<'de> Deserialize<'de> for ContentHash {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Returns the canonical JSON encoding of a value (what [`ContentHash::of_value`] hashes).
#[cfg(test)]
fn canonical_json(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    out
}

trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

struct HashSink(Sha256);

impl Sink for HashSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

fn write_canonical(value: &Value, sink: &mut impl Sink) {
    match value {
        Value::Null => sink.put(b"null"),
        Value::Bool(true) => sink.put(b"true"),
        Value::Bool(false) => sink.put(b"false"),
        Value::Number(number) => {
            sink.put(number.to_string().as_bytes());
        }
        Value::String(text) => write_string(text, sink),
        Value::Array(items) => {
            sink.put(b"[");
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    sink.put(b",");
                }
                write_canonical(item, sink);
            }
            sink.put(b"]");
        }
        Value::Object(map) => {
            // serde_json's default map is already sorted, but a dependency enabling
            // `preserve_order` would silently change every hash; sorting here makes the
            // encoding independent of that feature.
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            sink.put(b"{");
            for (index, key) in keys.into_iter().enumerate() {
                if index > 0 {
                    sink.put(b",");
                }
                write_string(key, sink);
                sink.put(b":");
                write_canonical(&map[key], sink);
            }
            sink.put(b"}");
        }
    }
}

fn write_string(text: &str, sink: &mut impl Sink) {
    // serde_json's escaping is the canonical one (minimal escapes, `\u00XX` for controls).
    let needs_escape = text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\');
    if needs_escape {
        let encoded = serde_json::to_string(text).unwrap_or_default();
        sink.put(encoded.as_bytes());
    } else {
        sink.put(b"\"");
        sink.put(text.as_bytes());
        sink.put(b"\"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_and_whitespace_dropped() {
        let value = json!({"b": 1, "a": [true, null, "x\"y"], "c": {"z": 1.5, "y": -2}});
        assert_eq!(
            String::from_utf8(canonical_json(&value)).unwrap(),
            r#"{"a":[true,null,"x\"y"],"b":1,"c":{"y":-2,"z":1.5}}"#
        );
    }

    #[test]
    fn hash_matches_sha256_of_canonical_bytes() {
        let value = json!({"b": 1, "a": "é\n"});
        assert_eq!(ContentHash::of_value(&value), ContentHash::of_bytes(&canonical_json(&value)));
        let hex = ContentHash::of_value(&value).to_hex();
        assert_eq!(hex.parse::<ContentHash>().unwrap().to_hex(), hex);
    }

    #[test]
    fn known_digest() {
        // sha256("null")
        assert_eq!(
            ContentHash::of_value(&Value::Null).to_hex(),
            "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
        );
    }

    #[test]
    fn parts_are_length_prefixed() {
        assert_ne!(ContentHash::of_parts(&[b"ab", b"c"]), ContentHash::of_parts(&[b"a", b"bc"]));
    }
}
