//! Cassettes: model calls recorded by the hash of their canonical request and played back,
//! so tests, examples and the quickstart run offline and deterministically.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::json;
use stepwright_core::ContentHash;

use crate::types::{ChatRequest, ChatResponse};

/// What a cassette does on each call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CassetteMode {
    /// Call the model every time and record the answer (replacing an earlier recording of
    /// the same request).
    Record,
    /// Never call the model: a request with no recording is a `cassette_miss` error.
    Replay,
    /// Play back what is recorded; call and record what is not.
    #[default]
    Auto,
}

impl CassetteMode {
    /// The mode when none is asked for: a file that exists is only played back (no command
    /// changes a file it was given unless recording is asked for by name); a new one records.
    pub fn default_for(path: &Path) -> Self {
        if path.exists() { Self::Replay } else { Self::Auto }
    }
}

impl std::str::FromStr for CassetteMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "record" => Ok(Self::Record),
            "replay" => Ok(Self::Replay),
            "auto" => Ok(Self::Auto),
            other => Err(format!("unknown cassette mode {other:?}: expected record, replay or auto")),
        }
    }
}

/// A cassette could not be read or written.
// The variants' fields are named for what they hold and the variant's message says how
// they relate; a doc per field would only repeat its name.
#[allow(missing_docs)]
#[derive(Debug, thiserror::Error)]
pub enum CassetteError {
    /// Reading or writing the file failed.
    #[error("{doing} cassette {path}: {source}")]
    Io {
        /// What was being done.
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not a cassette.
    #[error("reading cassette {path}: {message}")]
    Format {
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// A cassette is at most this large (64 MiB: thousands of recorded calls).
pub const MAX_CASSETTE_BYTES: u64 = 64 << 20;

/// Reads a cassette file: a regular file of at most [`MAX_CASSETTE_BYTES`].
fn read_cassette(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    // Looked at before it is opened: opening a FIFO waits for a writer, for ever.
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "it is not a regular file"));
    }
    let file = std::fs::File::open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "it is not a regular file"));
    }
    if metadata.len() > MAX_CASSETTE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("it is {} bytes; the limit is {MAX_CASSETTE_BYTES}", metadata.len()),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CASSETTE_BYTES).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// One recorded call.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interaction {
    /// The request key (see [`Cassette::key`]).
    pub key: String,
    /// The provider the request went to (`openai`, `anthropic`): part of the match key.
    pub provider: String,
    /// The request, for people reading the file.
    pub request: ChatRequest,
    /// The answer played back.
    pub response: ChatResponse,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CassetteFile {
    version: u32,
    interactions: Vec<Interaction>,
}

/// A cassette file and its mode.
#[derive(Debug)]
pub struct Cassette {
    path: PathBuf,
    mode: CassetteMode,
    file: Mutex<CassetteFile>,
}

impl Cassette {
    /// Opens a cassette. `replay` needs the file; `record` starts empty (the file is written
    /// at the first call); `auto` reads the file if it exists.
    pub fn open(path: impl AsRef<Path>, mode: CassetteMode) -> Result<Self, CassetteError> {
        // The longest a cassette may be: a cassette is read whole, so a device or a huge file
        // must not be.
        let path = path.as_ref().to_owned();
        let file = match (mode, read_cassette(&path)) {
            (CassetteMode::Record, _) => CassetteFile { version: 1, interactions: Vec::new() },
            (CassetteMode::Auto, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                CassetteFile { version: 1, interactions: Vec::new() }
            }
            (_, Err(source)) => return Err(CassetteError::Io { doing: "reading", path, source }),
            (_, Ok(bytes)) => {
                let file: CassetteFile = serde_json::from_slice(&bytes)
                    .map_err(|e| CassetteError::Format { path: path.clone(), message: e.to_string() })?;
                if file.version != 1 {
                    return Err(CassetteError::Format {
                        path,
                        message: format!("version {} is not supported (expected 1)", file.version),
                    });
                }
                file
            }
        };
        Ok(Self { path, mode, file: Mutex::new(file) })
    }

    /// Whether it records, replays or both.
    pub fn mode(&self) -> CassetteMode {
        self.mode
    }

    /// Where it is kept; recordings are written here as they happen.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The key of a request: the hash of its canonical JSON with the provider. The base URL
    /// and the key are not part of it, so a recording plays back against any endpoint.
    pub fn key(provider: &str, request: &ChatRequest) -> ContentHash {
        ContentHash::of_value(&json!({ "provider": provider, "request": request }))
    }

    /// The recorded answer to a request, if any (never in `record` mode).
    pub fn lookup(&self, key: &ContentHash) -> Option<ChatResponse> {
        if self.mode == CassetteMode::Record {
            return None;
        }
        let hex = key.to_hex();
        let file = self.file.lock().expect("poisoned");
        file.interactions.iter().find(|i| i.key == hex).map(|i| i.response.clone())
    }

    /// Records an answer and rewrites the file (to a temporary file, then renamed, so a
    /// crash never leaves half a cassette).
    /// `key` is [`Cassette::key`] of the provider and request.
    pub fn record(
        &self,
        key: &ContentHash,
        provider: &str,
        request: &ChatRequest,
        response: &ChatResponse,
    ) -> Result<(), CassetteError> {
        let key = key.to_hex();
        let mut file = self.file.lock().expect("poisoned");
        let interaction = Interaction {
            key: key.clone(),
            provider: provider.to_owned(),
            request: request.clone(),
            response: response.clone(),
        };
        match file.interactions.iter_mut().find(|i| i.key == key) {
            Some(existing) => *existing = interaction,
            None => file.interactions.push(interaction),
        }
        let mut text = serde_json::to_string_pretty(&*file).expect("a cassette serializes");
        text.push('\n');
        let temporary = self.path.with_extension("tmp");
        std::fs::write(&temporary, text)
            .and_then(|()| std::fs::rename(&temporary, &self.path))
            .map_err(|source| CassetteError::Io { doing: "writing", path: self.path.clone(), source })
    }

    /// How many calls are recorded.
    pub fn len(&self) -> usize {
        self.file.lock().expect("poisoned").interactions.len()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
