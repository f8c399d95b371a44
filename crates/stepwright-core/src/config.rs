//! How an engine behaves: durability, artifact capture, in-process waits, leases and polls.
//! Read by the recorder and the executor; set by whoever builds the engine. (The step cache
//! is a store seam: `store::cache`.)

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// When a step's result must be durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// A step's result is committed before the run moves past it (the default). A crash
    /// loses nothing that completed; a pure or read step that was running re-runs.
    #[default]
    Sync,
    /// Completions of steps without effects (and decisions, values) are written in batches,
    /// at most `EngineConfig::async_max_delay` or `async_max_entries` apart. A crash may lose
    /// the last batch: those steps run again on resume (they are pure or read, or their
    /// outcome is recorded as a failure). Fenced steps (`write`, `external`), interrupts and
    /// checkpoints are still written at once, so no effect is ever done twice.
    Async,
    /// Nothing is written to the store: runs live in memory only and cannot be resumed
    /// after the process ends (tests, throwaway runs). The loss window is the whole run.
    None,
}

/// What is kept of artifacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactCapture {
    /// Content and hash.
    #[default]
    Full,
    /// Only the hash (compliance: prove what was seen without keeping it).
    HashOnly,
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// When results must be durable.
    pub durability: Durability,
    /// What is kept of artifacts.
    pub artifacts: ArtifactCapture,
    /// Timers, retry backoffs and interrupt deadlines up to this long are waited for in
    /// process; longer ones leave the run suspended with a wake-up time, for a runner to
    /// resume when due.
    pub in_process_wait_limit: Duration,
    /// How long a cancelled step may take to stop on its own before its future is dropped.
    pub cancel_grace: Duration,
    /// How long a worker's claim on a run lasts without a heartbeat; heartbeats come every
    /// third of it. A worker that dies loses its runs to others after at most this long.
    pub lease_for: Duration,
    /// `async` durability: the longest a deferred journal entry waits to be written.
    pub async_max_delay: Duration,
    /// `async` durability: the most entries that wait before a write.
    pub async_max_entries: usize,
    /// How often an engine executing runs asks the store whether any of them was asked to
    /// cancel from elsewhere (another process, the API). Stores that announce cancels
    /// (Postgres: `NOTIFY`) answer sooner; this is the fallback.
    pub cancel_poll: Duration,
    /// How often a run waiting in process on an interrupt asks the store whether someone
    /// decided it from elsewhere.
    pub decision_poll: Duration,
    /// Put prompts, completions and tool arguments and results on the exported spans (off
    /// by default: they may hold personal data). A workflow's own setting wins.
    pub capture_content: Option<ContentCapture>,
    /// How long a run holds its activation for a step worker's answer before it suspends
    /// (releasing its lease until the task is answered or one of its deadlines comes): a
    /// quick handler's answer is taken at once, a slow one pins no engine worker. While it
    /// holds, a run the runner executes lends its slot to the next due run.
    pub task_hold: Duration,
    /// A step still running after this long has its start written to the journal at once
    /// (not with its end), so the API, the event stream and the dashboard show it running:
    /// a quick step costs one write, a slow one two.
    pub show_running_after: Duration,
}

/// Content on spans: how much of each value, after the step's output guardrails redacted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentCapture {
    /// The most bytes of one value's JSON kept; the rest is cut, and the cut said.
    pub max_bytes: usize,
}

impl Default for ContentCapture {
    fn default() -> Self {
        Self { max_bytes: 4096 }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            durability: Durability::Sync,
            artifacts: ArtifactCapture::Full,
            in_process_wait_limit: Duration::from_secs(60),
            cancel_grace: Duration::from_secs(5),
            lease_for: Duration::from_secs(30),
            async_max_delay: Duration::from_millis(50),
            async_max_entries: 512,
            cancel_poll: Duration::from_millis(100),
            decision_poll: Duration::from_millis(100),
            task_hold: Duration::from_secs(2),
            show_running_after: Duration::from_millis(200),
            capture_content: None,
        }
    }
}
