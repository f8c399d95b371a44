//! How values are stored: blobs as JSON (compressed when large), ids and hashes as bytes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use stepwright_core::{ContentHash, StoreError};

/// Blobs of this many bytes or more are compressed (when that saves space).
pub(crate) const COMPRESS_AT: usize = 1024;

/// Outputs whose JSON is at most this long are stored in their journal row, not as blobs.
pub(crate) const INLINE_AT_MOST: usize = 256;

/// A batch's blobs, each serialized once: small completed outputs as JSON to store in their
/// journal row, everything else encoded for the blob table, without repeats.
#[derive(Default)]
pub(crate) struct EncodedBlobs {
    /// Outputs at most `INLINE_AT_MOST` bytes of JSON, by hash.
    pub(crate) inline: HashMap<ContentHash, Vec<u8>>,
    /// `(hash, codec, bytes)` for the blob table.
    pub(crate) stored: Vec<(ContentHash, i64, Vec<u8>)>,
}

/// Splits and encodes a batch's blobs (see [`EncodedBlobs`]).
pub(crate) fn encode_batch_blobs(batch: &stepwright_core::journal::JournalBatch) -> EncodedBlobs {
    let outputs: HashSet<ContentHash> = batch
        .entries
        .iter()
        .filter_map(|entry| match &entry.record {
            stepwright_core::Record::Completed { output, .. } => Some(*output),
            _ => None,
        })
        .collect();
    let mut encoded = EncodedBlobs::default();
    let mut seen = HashSet::with_capacity(batch.blobs.len());
    for (hash, value) in &batch.blobs {
        if !seen.insert(*hash) {
            continue;
        }
        let json = serde_json::to_vec(&**value).unwrap_or_default();
        if json.len() <= INLINE_AT_MOST && outputs.contains(hash) {
            encoded.inline.insert(*hash, json);
        } else {
            let (codec, bytes) = encode_json(json);
            encoded.stored.push((*hash, codec, bytes));
        }
    }
    encoded
}

/// Codec tags stored beside each blob.
pub(crate) const CODEC_JSON: i64 = 0;
pub(crate) const CODEC_LZ4_JSON: i64 = 1;

/// Encodes a blob: `(codec, bytes)`.
#[cfg(test)]
fn encode_blob(value: &Value) -> (i64, Vec<u8>) {
    encode_json(serde_json::to_vec(value).unwrap_or_default())
}

/// Encodes a blob's JSON: `(codec, bytes)`, compressed when large and when that helps.
pub(crate) fn encode_json(json: Vec<u8>) -> (i64, Vec<u8>) {
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

/// The `files` column of a definition: `NULL` or a JSON object of path → text.
pub(crate) fn files_from_column(
    column: Option<&str>,
) -> Result<std::collections::BTreeMap<String, String>, serde_json::Error> {
    column.map_or(Ok(Default::default()), serde_json::from_str)
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
    fn small_outputs_go_inline_and_other_blobs_are_stored_once() {
        use stepwright_core::journal::{JournalBatch, JournalEntry};
        use stepwright_core::{Record, StepPath, Timestamp};
        let blob = |v: Value| (ContentHash::of_value(&v), Arc::new(v));
        let (small, large, state) = (blob(json!("ok")), blob(json!("x".repeat(2000))), blob(json!({ "n": 1 })));
        let entry = |record| JournalEntry { path: StepPath::new("s"), at: Timestamp::EPOCH, record };
        let completed = |output| Record::Completed { attempt: 1, output, cached: false, started_at: None };
        let batch = JournalBatch {
            entries: vec![
                entry(completed(small.0)),
                entry(completed(large.0)),
                entry(Record::Checkpoint { attempt: 1, state: json!(null) }),
            ],
            // The large output twice, as when two steps return the same value.
            blobs: vec![small.clone(), large.clone(), large.clone(), state.clone()],
            ..JournalBatch::default()
        };
        let encoded = encode_batch_blobs(&batch);
        assert_eq!(encoded.inline.get(&small.0).map(Vec::as_slice), Some(&b"\"ok\""[..]));
        assert_eq!(encoded.inline.len(), 1, "only completed outputs go inline");
        let stored: Vec<(ContentHash, i64)> = encoded.stored.iter().map(|(h, c, _)| (*h, *c)).collect();
        assert_eq!(stored, [(large.0, CODEC_LZ4_JSON), (state.0, CODEC_JSON)]);
        for (hash, codec, bytes) in &encoded.stored {
            decode_blob(*hash, *codec, bytes).unwrap();
        }
    }

    #[test]
    fn a_blob_that_does_not_match_its_hash_is_corrupt() {
        let (codec, bytes) = encode_blob(&json!("real"));
        let err = decode_blob(ContentHash::of_value(&json!("claimed")), codec, &bytes).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)));
    }
}
