//! `schedules`, `triggers` and `events`: runs that start themselves, and what starts them.

#[allow(clippy::wildcard_imports)] // The argument types every group shares.
use super::*;

/// A workflow file's schedules or triggers to keep in the store: created, or replaced
/// keeping what they decided (a schedule's ticks, a trigger's place in the event log).
#[derive(clap::Args)]
pub(crate) struct Keep {
    /// The workflow file.
    pub(crate) file: PathBuf,
    /// Only this one of the file's (repeatable; default: all of them).
    #[arg(long = "only", value_name = "NAME")]
    pub(crate) only: Vec<String>,
    /// Keep them paused: what would start a run (a tick, a matching event) is recorded as
    /// skipped (`paused`) until they are resumed.
    #[arg(long)]
    pub(crate) paused: bool,
    /// The tenant (namespace) they, the events they read and their runs belong to.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// One JSON object each.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A schedule or a trigger, by name.
#[derive(clap::Args)]
pub(crate) struct Named {
    /// Its name (`WORKFLOW/NAME`: the file's workflow and the name in its file).
    pub(crate) name: String,
    /// Its tenant.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
}

/// Which schedules or triggers to list.
#[derive(clap::Args)]
pub(crate) struct Listing {
    /// Only this tenant's.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// JSON lines.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `triggers` subcommands. A trigger is named `WORKFLOW/NAME` (the file's workflow and the
/// name under its `triggers:`).
#[derive(Subcommand)]
pub(crate) enum TriggersCommand {
    /// Keep a workflow file's triggers in the store (create them, reading the events sent
    /// from now on, or replace them keeping their place); workers start their runs.
    Create(Keep),
    /// The triggers, by name: event, state.
    List(Listing),
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
    Pause(Named),
    /// Resume a paused trigger from the next event.
    Resume(Named),
    /// Delete a trigger and its fire records (its runs stay).
    Delete(Named),
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
    Create(Keep),
    /// The schedules, by name: cadence, state, next fire.
    List(Listing),
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
    Pause(Named),
    /// Resume a paused schedule from its next tick.
    Resume(Named),
    /// Delete a schedule and its tick records (its runs stay).
    Delete(Named),
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
