//! Accepting connections: HTTP/1 through hyper, with what an exposed server needs and
//! `axum::serve` does not set — a deadline for a request's headers (which is also how long a
//! kept-alive connection may sit idle before its next request: slowloris connections are
//! closed, not held), and a cap on the connections one client address holds at once.
//! Shutdown is graceful: the listener closes, idle connections close, and requests under
//! way (streams end on their own, told by the server) finish first.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

/// How connections are accepted and kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a client has to send a request's headers, from the moment the connection
    /// waits for them (a new connection, or a kept-alive one after its last response).
    pub header_read_timeout: Duration,
    /// The most connections one client address may hold open at once (`0`: no cap). A
    /// connection over the cap is closed at once.
    pub per_ip: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self { header_read_timeout: Duration::from_secs(10), per_ip: 1024 }
    }
}

/// Open connections per client address.
#[derive(Debug, Default)]
struct OpenPerAddress(Mutex<HashMap<IpAddr, usize>>);

/// One open connection, counted against its address until dropped.
struct Counted {
    open: Arc<OpenPerAddress>,
    ip: IpAddr,
}

impl OpenPerAddress {
    /// Counts a new connection from `ip`, unless the address already holds `cap`.
    fn admit(self: &Arc<Self>, ip: IpAddr, cap: usize) -> Option<Counted> {
        let mut open = self.0.lock().expect("poisoned");
        let count = open.entry(ip).or_default();
        if cap > 0 && *count >= cap {
            return None;
        }
        *count += 1;
        Some(Counted { open: self.clone(), ip })
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut open = self.open.0.lock().expect("poisoned");
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Serves `app` on `listener` until `stop` completes, then shuts down gracefully.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(OpenPerAddress::default());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    // When a refusal was last logged (at most one line per 10 s).
    let mut refused_logged: Option<tokio::time::Instant> = None;
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of descriptors, or a connection reset before it was accepted: the
                // listener itself is fine; wait a moment so a full table can drain.
                Err(error) => {
                    tracing::warn!(error = %error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Some(counted) = open.admit(peer.ip(), limits.per_ip) else {
            if refused_logged.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                refused_logged = Some(tokio::time::Instant::now());
                tracing::warn!(client = %peer.ip(), cap = limits.per_ip, "a client holds the most connections allowed; closing new ones");
            }
            drop(stream);
            continue;
        };
        // An event leaves as soon as it is written, not when a segment fills.
        let _ = stream.set_nodelay(true);
        // The router's routes are readied once; a clone is a pointer (about 18 KiB an idle
        // connection, hyper's buffers and the task).
        let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that goes away mid-request, or sends no headers in time, ends here.
            let _ = connection.await;
            drop(counted);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_cap_and_gets_slots_back() {
        let open = Arc::new(OpenPerAddress::default());
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = open.admit(a, 2).unwrap();
        let _second = open.admit(a, 2).unwrap();
        assert!(open.admit(a, 2).is_none(), "a third from one address");
        assert!(open.admit(b, 2).is_some(), "another address is not held back");
        drop(first);
        assert!(open.admit(a, 2).is_some(), "a closed connection frees its slot");
        assert!((0..5000).all(|_| open.admit(a, 0).map(std::mem::forget).is_some()), "0: no cap");
    }
}
