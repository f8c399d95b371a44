//! Schedules: tick computation (cron in time zones across both daylight-saving transitions,
//! intervals with a phase, bounds), and the scheduler's decisions under a paused clock
//! (overlap policies, catch-up after an outage, jitter, pause, exactly once between two
//! schedulers sharing a store).

mod cadence;
mod scheduler;
