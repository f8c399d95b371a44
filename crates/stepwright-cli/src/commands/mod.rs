//! One function per command, nextest-style: `dispatch` only routes.

mod decide;
mod events;
mod experiments;
mod file;
mod history;
mod run;
mod keys;
mod remote;
mod remote_schedules;
mod runs;
mod schedules;
mod serve;
mod triggers;
mod worker;

use crate::args::{Cli, Command, ModelFlags};

/// What every command gets besides its own arguments: where the store is, and how workflow
/// files are loaded and their models reached.
pub(crate) struct Globals<'a> {
    /// `--db`, if given.
    pub(crate) db: Option<&'a str>,
    pub(crate) flags: &'a ModelFlags,
    /// `--log-format json`.
    pub(crate) json_logs: bool,
    /// `--server` (or `STEPWRIGHT_SERVER`), for a command that only consults it.
    pub(crate) server: Option<&'a str>,
}

/// Refuses a flag the command would not act on (`validate --db …`, `runs list --model …`).
fn refuse_idle_flags(cli: &Cli) -> anyhow::Result<()> {
    use crate::args::Flag;
    let models = &cli.models;
    let given = [
        (Flag::Db, cli.db.is_some(), "--db"),
        (Flag::Server, cli.server.is_some(), "--server"),
        (Flag::Models, !models.overrides.is_empty(), "--model"),
        (Flag::Models, models.cassette.is_some(), "--cassette"),
        (Flag::Models, models.cassette_mode.is_some(), "--cassette-mode"),
        (Flag::AllowDir, !models.allow_dirs.is_empty(), "--allow-dir"),
        (Flag::Durability, models.durability.is_some(), "--durability"),
        (Flag::Durability, models.async_window.is_some(), "--async-window"),
    ];
    for (flag, present, name) in given {
        if present && !cli.command.takes(flag) {
            let why = match flag {
                Flag::Db => "it opens no store",
                Flag::Server => "it calls no server",
                Flag::Models => "it runs no steps, so calls no model",
                Flag::AllowDir => "it loads no workflow file from disk",
                Flag::Durability => "it executes no run",
            };
            return Err(anyhow::anyhow!(crate::exit::BadInput(format!(
                "`{}` does not take {name}: {why}",
                cli.command.name()
            ))));
        }
    }
    if models.async_window.is_some() && models.durability != Some(crate::args::DurabilityArg::Async) {
        return Err(anyhow::anyhow!(crate::exit::BadInput(
            "--async-window is how long `--durability async` batches results: give both".into()
        )));
    }
    Ok(())
}

/// Whether a store is named (`--db`, `STEPWRIGHT_DB`): then `schedules` and `triggers` act on
/// it even with `STEPWRIGHT_SERVER` set (the server's own store, from its machine).
fn store_named(cli: &Cli) -> bool {
    cli.db.is_some() || std::env::var("STEPWRIGHT_DB").is_ok_and(|db| !db.is_empty())
}

/// `STEPWRIGHT_SERVER` set for `keys` or `experiments`, which act on a store and have no remote form: acting on
/// `./stepwright.db` instead would print empty tables as if they were the server's. A store
/// named (`--db`, `STEPWRIGHT_DB`) says which.
fn refuse_a_server_ignored(cli: &Cli, server: Option<&str>) -> anyhow::Result<()> {
    use crate::args::Command;
    let Some(server) = server else { return Ok(()) };
    let manages_a_store = matches!(cli.command, Command::Keys { .. } | Command::Experiments { .. });
    if manages_a_store && !store_named(cli) {
        return Err(anyhow::anyhow!(crate::exit::BadInput(format!(
            "`{}` acts on a store, not on a server, and STEPWRIGHT_SERVER is set ({server}): give the server's \
             store with --db (or STEPWRIGHT_DB), or unset STEPWRIGHT_SERVER to use ./stepwright.db",
            cli.command.name()
        ))));
    }
    Ok(())
}

/// Runs the command; the exit code on success.
pub(crate) async fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    refuse_idle_flags(&cli)?;
    let server = cli.server.clone().or_else(|| std::env::var("STEPWRIGHT_SERVER").ok().filter(|s| !s.is_empty()));
    let keeps_schedules =
        matches!(cli.command, crate::args::Command::Schedules { .. } | crate::args::Command::Triggers { .. });
    if let Some(server) = server.as_deref()
        && cli.command.has_remote_form()
        && !(keeps_schedules && cli.server.is_none() && store_named(&cli))
    {
        let flags = &cli.models;
        if !flags.overrides.is_empty() || flags.cassette.is_some() || !flags.allow_dirs.is_empty() {
            return Err(anyhow::anyhow!(crate::exit::BadInput(
                "with --server the server binds models and files: --model, --cassette and --allow-dir are its \
                 configuration (`stepwright serve --model …`), not taken here"
                    .into()
            )));
        }
        if flags.durability.is_some() {
            return Err(anyhow::anyhow!(crate::exit::BadInput(
                "with --server the server's engine executes the run: --durability is its configuration \
                 (`stepwright serve --durability …`), not taken here"
                    .into()
            )));
        }
        let remote = remote::Remote::new(server)?;
        let work = async {
            match cli.command {
                crate::args::Command::Schedules { command } => remote_schedules::schedules(&remote, command).await,
                crate::args::Command::Triggers { command } => remote_schedules::triggers(&remote, command).await,
                other => remote::dispatch(&remote, other).await,
            }
        };
        return tokio::select! {
            code = work => code,
            _ = tokio::signal::ctrl_c() => {
                // Only the waiting stops: a run the server was asked to start or continue goes on there.
                eprintln!("stepwright: interrupted; the server goes on with the run");
                Ok(130)
            }
        };
    }
    refuse_a_server_ignored(&cli, server.as_deref())?;
    let json_logs = cli.telemetry.log_format == Some(crate::args::LogFormat::Json);
    let g = Globals { db: cli.db.as_deref(), flags: &cli.models, json_logs, server: server.as_deref() };
    let done = local(&g, cli.command).await;
    // The MCP servers the command connected to are closed before it exits: an HTTP
    // session is deleted, a stdio server's input closed.
    stepwright::mcp::close_all().await;
    done
}

/// Runs a command against the store.
async fn local(g: &Globals<'_>, command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Schema => file::schema(),
        Command::Validate { file } => file::validate(g, file).await,
        Command::Graph { file, format } => file::graph(g, file, format).await,
        Command::Run { file, input, json, detach, priority, concurrency, traceparent, idempotency_key, tags, who } => {
            let flow = run::StartFlags { priority, concurrency, traceparent, idempotency_key, tags };
            run::run(g, file, input, json, detach, flow, who).await
        }
        Command::Resume { run, json, tenant } => run::resume(g, run, json, tenant).await,
        Command::Approve { run, who, payload, json } => decide::approve(g, run, who, payload, json).await,
        Command::Reject { run, who, reason, json } => decide::reject(g, run, who, reason, json).await,
        Command::Respond { run, who, value, json } => decide::respond(g, run, who, value, json).await,
        Command::Cancel { run, reason, user, wait } => decide::cancel_run(g, run, reason, user, wait).await,
        Command::Send { run, inbox, message } => {
            decide::message(g, run, decide::Message::Inbox { inbox, message }).await
        }
        Command::Wake { run, channel: Some(channel), .. } => {
            decide::message(g, run, decide::Message::Wake { channel }).await
        }
        Command::Wake { run, timer, json, .. } => decide::wake_timer(g, run, timer.flatten(), json).await,
        Command::Worker { once, tenant } => worker::worker(g, once, tenant).await,
        Command::Replay { run, json } => history::replay(g, run, json).await,
        Command::Recompute { run, file, from, rebind, persist, json } => {
            history::recompute(g, run, file, from, &rebind, persist, json).await
        }
        Command::Fork { run, at, set, json } => history::fork(g, run, at, set, json).await,
        Command::Runs { command } => runs::runs(g, command).await,
        Command::Serve {
            listen,
            no_worker,
            cors_origins,
            max_body_bytes,
            rate_limit,
            max_streams_per_key,
            header_timeout,
            max_connections_per_ip,
            drain,
            webhook_allow,
            metrics_token_env,
            oidc,
        } => {
            let limits = stepwright::server::LimitsConfig {
                max_body_bytes,
                requests_per_second: rate_limit,
                streams_per_key: max_streams_per_key,
            };
            let config = stepwright::server::ServerConfig {
                listen,
                bindings: g.flags.bindings(),
                worker: !no_worker,
                cors_origins,
                limits,
                connections: stepwright::server::ConnectionLimits {
                    header_read_timeout: std::time::Duration::from_secs(header_timeout),
                    per_ip: max_connections_per_ip,
                },
                drain: std::time::Duration::from_secs(drain),
                oidc: serve::oidc_config(oidc)?,
                engine: g.flags.engine_config(),
                metrics: None,
                webhook_destinations: stepwright::server::DestinationPolicy::allowing(webhook_allow),
                metrics_token: serve::metrics_token(metrics_token_env)?,
            };
            serve::serve(g, config).await
        }
        Command::Keys { command } => keys::keys(g, command).await,
        Command::Schedules { command } => schedules::schedules(g, command).await,
        Command::Triggers { command } => triggers::triggers(g, command).await,
        Command::Events { command } => events::events(g, command).await,
        Command::Experiments { command } => experiments::experiments(g, command).await,
    }
}
