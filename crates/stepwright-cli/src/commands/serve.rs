//! `serve`: the HTTP API over the store, until Ctrl-C or SIGTERM.

use crate::commands::Globals;
use crate::host::open_store;

/// `serve`: binds, says where, serves; exits 0 after a graceful shutdown.
pub(crate) async fn serve(g: &Globals<'_>, config: stepwright::server::ServerConfig) -> anyhow::Result<u8> {
    let store = open_store(g.db).await?;
    let server = stepwright::server::Server::bind(store, config).await?;
    let addr = server.local_addr()?;
    eprintln!("stepwright: serving the API on http://{addr}/v1 (Ctrl-C or SIGTERM to stop)");
    let stop = stepwright::CancellationToken::new();
    let signal = stop.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        signal.cancel();
    });
    server.serve(stop).await?;
    eprintln!("stepwright: stopped");
    Ok(0)
}

/// Ctrl-C, or SIGTERM (what a service manager or a container runtime sends).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
