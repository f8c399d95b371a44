//! O1: what observability costs. W1 (1,000 trivial steps) and A1 (a 10-turn agent) in three
//! processes each: with nothing installed; with the telemetry installed as `stepwright` does
//! with no exporter (the log layer only); and exporting every span over OTLP/HTTP to a
//! receiver on loopback that takes and drops each batch (run by the parent process). Each
//! mode runs in several processes, interleaved, and keeps its best median, so drift between
//! processes weighs on every mode alike.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The child: sets the mode up, then prints `w1_median a1_median` (µs per step, per turn).
pub(crate) fn child(mode: &str, runs: usize) {
    let telemetry = match mode {
        "none" => None,
        "installed" | "exporter" => {
            let settings = stepwright::telemetry::Settings::default();
            Some(stepwright::telemetry::install(settings).expect("telemetry"))
        }
        other => panic!("no mode {other}"),
    };
    assert_eq!(telemetry.as_ref().is_some_and(|t| t.exports_traces()), mode == "exporter", "{mode}");
    let (w1, _) = crate::w1(runs);
    let (a1, _) = crate::a1(10, runs, Arc::new(stepwright::InMemoryStore::new()));
    if let Some(telemetry) = &telemetry {
        telemetry.flush();
    }
    println!("{w1} {a1}");
}

/// A receiver that accepts OTLP/HTTP exports and drops them; counts requests and bytes.
fn receiver() -> (String, Arc<(AtomicU64, AtomicU64)>) {
    let counts = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = listener.local_addr().expect("an address");
    let seen = counts.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            listener.set_nonblocking(true).expect("nonblocking");
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    seen.0.fetch_add(1, Ordering::Relaxed);
                    seen.1.fetch_add(body.len() as u64, Ordering::Relaxed);
                    ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
                }
            });
            axum::serve(listener, app).await.expect("serve");
        });
    });
    (format!("http://{addr}"), counts)
}

/// Processes per mode: between two processes on a small shared machine the same work
/// varies by several per cent, more than what is measured.
const ROUNDS: usize = 5;

/// Runs the three modes ([`ROUNDS`] times each, interleaved) and prints the table rows.
pub(crate) fn o1(runs: usize) {
    let (endpoint, counts) = receiver();
    let me = std::env::current_exe().expect("this binary");
    let mut best: std::collections::BTreeMap<&str, (f64, f64)> = std::collections::BTreeMap::new();
    for _round in 0..ROUNDS {
        for mode in ["none", "installed", "exporter"] {
            let mut command = Command::new(&me);
            command.args(["o1-child", mode, &runs.to_string()]);
            for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("OTEL_") || name == "STEPWRIGHT_LOG")
            {
                command.env_remove(name);
            }
            if mode == "exporter" {
                command
                    .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
                    // Every span is exported, none dropped for a full queue.
                    .env("OTEL_BSP_MAX_QUEUE_SIZE", "1048576")
                    .env("OTEL_BSP_SCHEDULE_DELAY", "200");
            }
            let output = command.output().expect("spawn the child");
            assert!(output.status.success(), "{mode}: {}", String::from_utf8_lossy(&output.stderr));
            let text = String::from_utf8_lossy(&output.stdout);
            let mut numbers = text.split_whitespace().map(|n| n.parse::<f64>().expect("a number"));
            let (w1, a1) = (numbers.next().expect("w1"), numbers.next().expect("a1"));
            let entry = best.entry(mode).or_insert((f64::INFINITY, f64::INFINITY));
            *entry = (entry.0.min(w1), entry.1.min(a1));
        }
    }
    let (none, installed, exporter) = (best["none"], best["installed"], best["exporter"]);
    let percent = |with: f64, without: f64| (with - without) / without * 100.0;
    println!(
        "| O1 | W1 with nothing installed ({runs} runs, best of {ROUNDS} processes) | {:.3} µs/step | | (reference) |",
        none.0
    );
    println!(
        "| O1 | W1 with the telemetry installed, no exporter | {:.3} µs/step | {:+.1} % | ≤ 2 % |",
        installed.0,
        percent(installed.0, none.0)
    );
    println!(
        "| O1 | W1 exporting every span (OTLP/HTTP to loopback) | {:.3} µs/step | {:+.3} µs/step | ≤ 5 µs/step |",
        exporter.0,
        exporter.0 - none.0
    );
    println!("| O1 | A1 (10 turns) with nothing installed | {:.1} µs/turn | | (reference) |", none.1);
    println!(
        "| O1 | A1 with the telemetry installed, no exporter | {:.1} µs/turn | {:+.1} % | (reference) |",
        installed.1,
        percent(installed.1, none.1)
    );
    println!(
        "| O1 | A1 exporting every span | {:.1} µs/turn | {:+.1} µs/turn | (reference) |",
        exporter.1,
        exporter.1 - none.1
    );
    println!(
        "| O1 | what the receiver took | {} requests, {:.1} MiB | | |",
        counts.0.load(Ordering::Relaxed),
        counts.1.load(Ordering::Relaxed) as f64 / (1024.0 * 1024.0)
    );
}
