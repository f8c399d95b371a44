//! `serve`: the HTTP API over the store, until Ctrl-C or SIGTERM.

use crate::commands::Globals;
use crate::host::open_store;

/// `serve`: binds, says where, serves; exits 0 after a graceful shutdown.
pub(crate) async fn serve(g: &Globals<'_>, mut config: stepwright::server::ServerConfig) -> anyhow::Result<u8> {
    let store = open_store(g.db).await?;
    // The process's metrics (kept for `serve`): served at `/metrics`.
    config.metrics = stepwright::telemetry::metrics()
        .map(|metrics| std::sync::Arc::new(Scraped(metrics)) as std::sync::Arc<dyn stepwright::server::ServerMetrics>);
    let server = stepwright::server::Server::bind(store, config).await?;
    let addr = server.local_addr()?;
    // The API's address comes first: scripts read it off this line.
    eprintln!(
        "stepwright: serving the API on http://{addr}/v1 and the dashboard on http://{addr}/ (Ctrl-C or SIGTERM to stop)"
    );
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

/// The operator's `/metrics` token, from the variable `--metrics-token-env` names.
pub(crate) fn metrics_token(var: Option<String>) -> anyhow::Result<Option<String>> {
    let Some(var) = var else { return Ok(None) };
    match std::env::var(&var) {
        Ok(token) if token.trim().len() >= 16 => Ok(Some(token.trim().to_owned())),
        Ok(_) => Err(anyhow::anyhow!("--metrics-token-env {var}: the token must be 16 characters or more")),
        Err(_) => Err(anyhow::anyhow!("--metrics-token-env {var}: the variable is not set (or not UTF-8)")),
    }
}

/// The provider sign-in the flags describe, if any; the client secret from its variable.
pub(crate) fn oidc_config(args: crate::args::OidcArgs) -> anyhow::Result<Option<stepwright::server::OidcConfig>> {
    let Some(issuer) = args.oidc_issuer else { return Ok(None) };
    let client_secret =
        match args.oidc_client_secret_env {
            Some(var) => Some(std::env::var(&var).map_err(|_| {
                anyhow::anyhow!("--oidc-client-secret-env {var}: the variable is not set (or not UTF-8)")
            })?),
            None => None,
        };
    let scopes = if args.oidc_scopes.is_empty() { vec!["email".into(), "profile".into()] } else { args.oidc_scopes };
    Ok(Some(stepwright::server::OidcConfig {
        issuer,
        client_id: args.oidc_client_id.unwrap_or_default(),
        client_secret,
        redirect_url: args.oidc_redirect_url,
        scopes,
        groups_claim: args.oidc_groups_claim,
        mappings: args.oidc_map,
        allow: args.oidc_allow,
    }))
}

/// Ctrl-C, or SIGTERM (what a service manager or a container runtime sends).
pub(crate) async fn shutdown_signal() {
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

/// The process's metrics, as the server reports into them and serves them at `/metrics`.
#[derive(Debug)]
struct Scraped(&'static stepwright::telemetry::Metrics);

impl stepwright::server::ServerMetrics for Scraped {
    fn observer(&self) -> std::sync::Arc<dyn stepwright::Observer> {
        self.0.observer()
    }

    fn runner_event(&self, event: &stepwright::RunnerEvent<'_>) {
        self.0.runner_event(event);
    }

    fn webhook_delivery(&self, namespace: &str, outcome: &str) {
        self.0.webhook_delivery(namespace, outcome);
    }

    fn prometheus_text(&self, queue_depths: &[(String, u64)]) -> String {
        for (namespace, runs) in queue_depths {
            self.0.queue_depth(namespace, *runs);
        }
        self.0.prometheus_text().unwrap_or_default()
    }
}
