//! Schedules: tick computation (cron in time zones across both daylight-saving transitions,
//! intervals with a phase, bounds), and the scheduler's decisions under a paused clock
//! (overlap policies, catch-up after an outage, jitter, pause, exactly once between two
//! schedulers sharing a store); triggers over a stored event log (each event once, filter,
//! debounce, batch, per-key concurrency, a burst with duplicate keys read by two schedulers).

mod cadence;
mod scheduler;
mod triggers;
