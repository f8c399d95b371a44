//! `runs`: listing, showing and tidying runs.

#[allow(clippy::wildcard_imports)] // The argument types every group shares.
use super::*;

#[derive(Subcommand)]
pub(crate) enum RunsCommand {
    /// A table of runs, newest first, a page at a time (the next page's command is printed
    /// on stderr when more exist).
    List {
        /// Only runs with this status.
        #[arg(long, value_parser = parse_status)]
        status: Option<stepwright::RunStatus>,
        /// Only runs of this workflow.
        #[arg(long)]
        workflow: Option<String>,
        /// At most this many runs.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Only runs older than this one (the last run of the previous page).
        #[arg(long)]
        before: Option<String>,
        /// Only runs started by this user (`schedule:NAME`, `trigger:NAME` for theirs).
        #[arg(long)]
        started_by: Option<String>,
        /// Only runs with this tag (a whole tag: `env:prod` does not find `env:prod-eu`).
        #[arg(long, value_parser = parse_tag)]
        tag: Option<String>,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A run's event log: step lifecycle (`step.started`, `step.completed`, `step.failed`,
    /// `interrupt.opened`, ...) interleaved with the events its steps emitted.
    Events {
        /// The run id.
        run: String,
        /// Keep printing as the run goes on, until it finishes (Ctrl-C stops watching).
        #[arg(long)]
        follow: bool,
        /// JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// One run's timeline.
    Show {
        /// The run id.
        run: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Delete a finished run and everything it recorded (journal, events, its memory), then
    /// every blob no run references any more.
    Erase {
        /// The run id.
        run: String,
        /// One JSON object: `{"runs": 1, "blobs": N}`.
        #[arg(long)]
        json: bool,
    },
    /// Delete finished runs last changed longer ago than `--older-than` (retention), and the
    /// cached step outputs kept longer ago than that.
    Prune {
        /// How old: `30d`, `12h`.
        #[arg(long, value_parser = parse_duration_arg)]
        older_than: std::time::Duration,
        /// Only runs that ended so: completed, failed or cancelled.
        #[arg(long, value_parser = parse_finished_status)]
        status: Option<stepwright::RunStatus>,
        /// One JSON object: `{"runs": N, "blobs": M, "cached": K}`.
        #[arg(long)]
        json: bool,
    },
}
