//! `schedules`, `triggers` and `events`: runs that start themselves, and what starts them.

#[allow(clippy::wildcard_imports)] // The argument types every group shares.
use super::*;

/// `triggers` subcommands. A trigger is named `WORKFLOW/NAME` (the file's workflow and the
/// name under its `triggers:`).
#[derive(Subcommand)]
pub(crate) enum TriggersCommand {
    /// Keep a workflow file's triggers in the store (create them, reading the events sent
    /// from now on, or replace them keeping their place); workers start their runs.
    Create {
        /// The workflow file.
        file: PathBuf,
        /// Only this trigger of the file (repeatable; default: all of them).
        #[arg(long = "only", value_name = "NAME")]
        only: Vec<String>,
        /// Keep them paused: the events they match are recorded as skipped (`paused`).
        #[arg(long)]
        paused: bool,
        /// The tenant (namespace) whose events they read and their runs belong to.
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object per trigger.
        #[arg(long)]
        json: bool,
    },
    /// The triggers, by name: event, state.
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// One trigger: its spec, what it holds (debounced events, a batch) and its last fires
    /// with the run each started or why it started none.
    Describe {
        /// The trigger (`WORKFLOW/NAME`).
        name: String,
        /// How many past fires to show.
        #[arg(long, default_value_t = 10)]
        fires: usize,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Pause a trigger: the events it matches start nothing (recorded `paused`).
    Pause {
        /// The trigger (`WORKFLOW/NAME`).
        name: String,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Resume a paused trigger from the next event.
    Resume {
        /// The trigger (`WORKFLOW/NAME`).
        name: String,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Delete a trigger and its fire records (its runs stay).
    Delete {
        /// The trigger (`WORKFLOW/NAME`).
        name: String,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// `events` subcommands.
#[derive(Subcommand)]
pub(crate) enum EventsCommand {
    /// Store an event; triggers and waits take it from the store.
    Send {
        /// The event's name (`ticket.created`).
        name: String,
        /// Its payload: JSON, or `@file.json`.
        #[arg(long, default_value = "null")]
        payload: String,
        /// A key naming one event in the tenant: sending it again stores nothing and
        /// prints the first event.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// The tenant it belongs to.
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Events, newest first.
    List {
        /// Only events with this name.
        #[arg(long)]
        name: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        limit: u64,
        /// The tenant whose events to list (default: the events sent without one).
        #[arg(long)]
        tenant: Option<String>,
        /// JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// One event and its history: the runs it started, by trigger, or why it started none.
    Describe {
        /// The event's sequence number (`events send` prints it).
        seq: u64,
        /// Its tenant (default: none).
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// `schedules` subcommands. A schedule is named `WORKFLOW/NAME` (the file's workflow and
/// the name under its `schedules:`).
#[derive(Subcommand)]
pub(crate) enum SchedulesCommand {
    /// Keep a workflow file's schedules in the store (create them, or replace them keeping
    /// what they decided); workers start their runs from then on.
    Create {
        /// The workflow file.
        file: PathBuf,
        /// Only this schedule of the file (repeatable; default: all of them).
        #[arg(long = "only", value_name = "NAME")]
        only: Vec<String>,
        /// Keep them paused: their ticks are recorded as skipped until `schedules resume`.
        #[arg(long)]
        paused: bool,
        /// The tenant (namespace) they and their runs belong to.
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object per schedule.
        #[arg(long)]
        json: bool,
    },
    /// The schedules, by name: cadence, state, next fire.
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// One schedule: its spec, its next fires, the ticks waiting for a run, and its last
    /// ticks with the run each started or why it started none.
    Describe {
        /// The schedule (`WORKFLOW/NAME`).
        name: String,
        /// How many next fires to show.
        #[arg(long, default_value_t = 5)]
        next: usize,
        /// How many past ticks to show.
        #[arg(long, default_value_t = 10)]
        ticks: usize,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Pause a schedule: its ticks start nothing (recorded `paused`).
    Pause {
        /// The schedule (`WORKFLOW/NAME`).
        name: String,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Resume a paused schedule from its next tick.
    Resume {
        /// The schedule (`WORKFLOW/NAME`).
        name: String,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Delete a schedule and its tick records (its runs stay).
    Delete {
        /// The schedule (`WORKFLOW/NAME`).
        name: String,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Start a run of a schedule now, outside its cadence (recorded as a tick).
    Trigger {
        /// The schedule (`WORKFLOW/NAME`).
        name: String,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Start the runs of the ticks in a past range that started none (an outage, a pause,
    /// before the schedule existed), oldest first, at a bounded rate.
    Backfill {
        /// The schedule (`WORKFLOW/NAME`).
        name: String,
        /// After this time (RFC 3339).
        #[arg(long, value_parser = parse_instant_arg)]
        from: stepwright::Timestamp,
        /// Up to this time, inclusive (RFC 3339); not after the schedule's last decided tick.
        #[arg(long, value_parser = parse_instant_arg)]
        to: stepwright::Timestamp,
        /// At most this many runs a second.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
        rate: u32,
        /// Its tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// JSON lines, one per run started.
        #[arg(long)]
        json: bool,
    },
}

/// A time argument in RFC 3339.
pub(crate) fn parse_instant_arg(text: &str) -> Result<stepwright::Timestamp, String> {
    stepwright::schedule::parse_instant(text)
        .ok_or_else(|| format!("{text:?} is not an RFC 3339 time like 2026-11-23T07:00:00Z"))
}
