//! `stepwright`: run, validate and inspect workflows (DESIGN §10).
//!
//! A thin binary: parse arguments (`args`), dispatch to one function per command
//! (`commands/`), print (`render`), exit with the documented code (`exit`) — 0 completed (or
//! valid), 1 failed, 2 bad usage, file or input, 3 suspended, 130 Ctrl-C. What the commands
//! stand on (the store, the engine, loading files) is in `host`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod args;
mod commands;
mod exit;
mod graph;
mod host;
mod progress;
mod render;
mod time;

use std::process::ExitCode;

use clap::Parser;

use args::Cli;

fn main() -> ExitCode {
    // A reader that went away (`stepwright schema | head`) ends the output, not in a panic:
    // `println!` panics on a closed pipe, and that panic is turned into a quiet exit.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info.payload().downcast_ref::<String>().map_or("", String::as_str);
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default_hook(info);
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {
            print!("{}", args::help_for(std::env::args()));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // Before the runtime: the exporter's client runs on a thread of its own.
    let settings = stepwright::telemetry::Settings {
        // `serve` answers `/metrics`.
        prometheus: matches!(cli.command, args::Command::Serve { .. }),
        ..cli.telemetry.settings()
    };
    let telemetry = match stepwright::telemetry::install(settings) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("stepwright: telemetry: {e}");
            return ExitCode::from(2);
        }
    };
    // A server answers many clients at once: a thread per core, so that one run's commit (an
    // fsync, made on the committing caller's thread) never stalls the requests of the others.
    // Every other command starts faster on one thread (a worker's runs share its commits).
    let mut builder = match cli.command {
        args::Command::Serve { .. } => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("stepwright: starting the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let done = runtime.block_on(async {
        let done = commands::dispatch(cli).await;
        // A tool's process group stopped by a cancel, a timeout or a shutdown got SIGTERM;
        // the process stays until each is gone or got its SIGKILL (see `llm::process`).
        let grace = stepwright::app::DEFAULT_KILL_GRACE + std::time::Duration::from_secs(1);
        stepwright::app::process_groups_stopped(grace).await;
        done
    });
    let code = match done {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let (code, message) = exit::failure(&e);
            eprintln!("{message}");
            ExitCode::from(code)
        }
    };
    drop(runtime);
    // The spans still buffered are exported before the process exits.
    drop(telemetry);
    code
}
