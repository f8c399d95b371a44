//! The binary end to end: each test runs `stepwright` as a real process (several, where the claim is about processes) against real stores and loopback model servers.
//!
//! One test binary for the crate: each module is one area (a file per area, as before),
//! linked once instead of once per file.

/// Each scenario (a function of a `Target`) as a test of the local mode and a test of the remote mode.
macro_rules! local_and_remote {
    ($($scenario:ident),* $(,)?) => {
        mod local {
            $(#[test] fn $scenario() { super::$scenario(&crate::support::Target::local()) })*
        }
        mod remote {
            $(#[test] fn $scenario() { super::$scenario(&crate::support::Target::remote()) })*
        }
    };
}

mod support;

mod cli;
mod events;
mod examples;
mod experiment_example;
mod experiments;
mod flags;
mod hardening;
mod history;
mod hostile;
mod mcp;
mod models;
mod processes;
mod readme;
mod schedules;
mod serve;
mod snapshots;
mod tags;
mod telemetry;
mod terminal;
