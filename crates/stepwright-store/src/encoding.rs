//! How values are stored: blobs as JSON (compressed when large), ids and hashes as bytes.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use stepwright_core::{ContentHash, StoreError};

/// Blobs of this many bytes or more are compressed (when that saves space).
pub(crate) const COMPRESS_AT: usize = 1024;

/// Outputs whose JSON is at most this long are stored in their journal row, not as blobs.
pub(crate) const INLINE_AT_MOST: usize = 256;

/// The completed outputs of a batch small enough to live inline in their journal row, as
/// their JSON bytes, by hash.
pub(crate) fn inline_outputs(batch: &stepwright_core::journal::JournalBatch) -> HashMap<ContentHash, Vec<u8>> {
    let mut inline = HashMap::new();
    for entry in &batch.entries {
        if let stepwright_core::Record::Completed { output, .. } = &entry.record
            && let Some((_, value)) = batch.blobs.iter().find(|(h, _)| h == output)
        {
            let json = serde_json::to_vec(&**value).unwrap_or_default();
            if json.len() <= INLINE_AT_MOST {
                inline.insert(*output, json);
            }
        }
    }
    inline
}

/// Codec tags stored beside each blob.
pub(crate) const CODEC_JSON: i64 = 0;
pub(crate) const CODEC_LZ4_JSON: i64 = 1;

/// Encodes a blob: `(codec, bytes)`.
pub(crate) fn encode_blob(value: &Value) -> (i64, Vec<u8>) {
    let json = serde_json::to_vec(value).unwrap_or_default();
    if json.len() >= COMPRESS_AT {
        let compressed = lz4_flex::compress_prepend_size(&json);
        if compressed.len() < json.len() {
            return (CODEC_LZ4_JSON, compressed);
        }
    }
    (CODEC_JSON, json)
}

/// Decodes a blob and checks it against its hash.
pub(crate) fn decode_blob(hash: ContentHash, codec: i64, bytes: &[u8]) -> Result<Arc<Value>, StoreError> {
    let json = match codec {
        CODEC_JSON => std::borrow::Cow::Borrowed(bytes),
        CODEC_LZ4_JSON => {
            std::borrow::Cow::Owned(lz4_flex::decompress_size_prepended(bytes).map_err(|_| StoreError::Corrupt(hash))?)
        }
        _ => return Err(StoreError::Corrupt(hash)),
    };
    let value: Value = serde_json::from_slice(&json).map_err(|_| StoreError::Corrupt(hash))?;
    if ContentHash::of_value(&value) != hash {
        return Err(StoreError::Corrupt(hash));
    }
    Ok(Arc::new(value))
}

pub(crate) fn backend(doing: &str, source: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend { doing: doing.to_owned(), source: Box::new(source) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn large_blobs_are_compressed_and_round_trip() {
        let big = json!({ "text": "abc ".repeat(1000) });
        let (codec, bytes) = encode_blob(&big);
        assert_eq!(codec, CODEC_LZ4_JSON);
        assert!(bytes.len() < 1000);
        let back = decode_blob(ContentHash::of_value(&big), codec, &bytes).unwrap();
        assert_eq!(*back, big);
        let small = json!(1);
        assert_eq!(encode_blob(&small).0, CODEC_JSON);
    }

    #[test]
    fn a_blob_that_does_not_match_its_hash_is_corrupt() {
        let (codec, bytes) = encode_blob(&json!("real"));
        let err = decode_blob(ContentHash::of_value(&json!("claimed")), codec, &bytes).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)));
    }
}
