//! What a production operator relies on, proven with real processes: a run is activated
//! once however it is started over HTTP; a tool's whole process tree dies with its step
//! (cancel, timeout, a spawned workflow's timeout, the server stopping); a stopped server
//! hands its runs back. On SQLite, and on Postgres when `STEPWRIGHT_TEST_DATABASE_URL` is set.
#![allow(clippy::print_stderr)] // The burst reports its rate for the closing note.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::processes::{Db, stores, text};
use crate::support::{serve_logged, stepwright};

/// One command tool per run that appends the run's number to `marks` (so executions are
/// counted) and then sleeps as long as the input says.
const COUNTED: &str = r#"
workflow: counted
tools:
  mark:
    command: [sh, -c, "echo \"$1\" >> marks; sleep \"$2\"", sh, "{{ args.n }}", "{{ args.sleep }}"]
    effect: read
    timeout: 2m
steps:
  - id: mark
    tool: mark
    with: { n: "{{ input.n }}", sleep: "{{ input.sleep }}" }
"#;

/// How many fast runs the burst starts, and how many runs whose tool outlives a lease.
const BURST: usize = 2_000;
const SLOW: usize = 4;

fn key(dir: &Path, db: &str) -> String {
    crate::support::api_key(dir, db, "ann", &["admin", "operator"])
}

/// A server's API as one key calls it.
struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    fn new(base: &str, key: &str) -> Self {
        Self { http: reqwest::Client::new(), base: base.to_owned(), key: key.to_owned() }
    }

    /// Registers a workflow file's source.
    async fn register(&self, source: &str) {
        let registered = self.http.post(format!("{}/v1/workflows", self.base)).bearer_auth(&self.key);
        let registered = registered.json(&json!({ "source": source })).send().await.unwrap();
        assert_eq!(registered.status(), 201, "{}", registered.text().await.unwrap());
    }

    /// Starts a run (`POST /v1/runs` with `body`): its id, once answered 201 or 202.
    async fn start(&self, body: Value) -> String {
        let response = self.http.post(format!("{}/v1/runs", self.base)).bearer_auth(&self.key).json(&body);
        let response = response.send().await.unwrap();
        let status = response.status().as_u16();
        let run: Value = response.json().await.unwrap();
        assert!(matches!(status, 201 | 202), "{status}: {run}");
        run["run_id"].as_str().unwrap().to_owned()
    }
}

/// 2,000 starts over HTTP (half waiting for the run, half not) and four runs whose tool runs
/// 35 s — past the 30 s lease the keeper renews: every tool runs once, and no activation
/// loses its lease (the server's log has no `lease_lost`).
#[test]
fn every_run_started_over_http_is_activated_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let scenarios: Vec<_> = stores(dir.path(), "every_run_started_over_http_is_activated_once")
        .into_iter()
        .map(|db| {
            let dir = tempfile::tempdir().unwrap();
            std::thread::spawn(move || activated_once(dir.path(), &db))
        })
        .collect();
    for scenario in scenarios {
        scenario.join().unwrap();
    }
}

fn activated_once(dir: &Path, db: &Db) {
    let key = key(dir, &db.url);
    let log = Arc::new(Mutex::new(Vec::new()));
    let server = serve_logged(dir, &db.url, &[], log.clone());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let api = Api::new(&server.base, &key);
    let runs: Vec<String> = runtime.block_on(async {
        api.register(COUNTED).await;
        let start = |n: usize, sleep: u32, wait: Option<u32>| {
            let mut body = json!({ "workflow": "counted", "input": { "n": n, "sleep": sleep } });
            if let Some(wait) = wait {
                body["wait_seconds"] = json!(wait);
            }
            api.start(body)
        };
        let mut runs = Vec::new();
        for n in 0..SLOW {
            runs.push(start(BURST + n, 35, None).await);
        }
        let began = Instant::now();
        let burst: Vec<String> = futures_util::stream::iter(0..BURST)
            .map(|n| start(n, 0, (n % 2 == 0).then_some(5)))
            .buffer_unordered(16)
            .collect()
            .await;
        let took = began.elapsed();
        eprintln!("{}: {BURST} starts over HTTP in {took:?} ({:.0}/s)", db.name, BURST as f64 / took.as_secs_f64());
        runs.extend(burst);
        runs
    });
    // Every run completes (the slow ones after 35 s).
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut left = runs;
    while !left.is_empty() {
        assert!(Instant::now() < deadline, "{}: {} runs did not complete", db.name, left.len());
        std::thread::sleep(Duration::from_millis(500));
        left = runtime.block_on(async {
            let mut still = Vec::new();
            for run in &left {
                let shown: Value = api
                    .http
                    .get(format!("{}/v1/runs/{run}", api.base))
                    .bearer_auth(&api.key)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if shown["status"] != "completed" {
                    assert!(shown["status"] == "running" || shown["status"] == "pending", "{}: {shown}", db.name);
                    still.push(run.clone());
                }
            }
            still
        });
    }
    let marks = std::fs::read_to_string(dir.join("marks")).unwrap();
    let mut executions = vec![0u32; BURST + SLOW];
    for line in marks.lines() {
        executions[line.trim().parse::<usize>().unwrap()] += 1;
    }
    let twice: Vec<usize> = (0..BURST + SLOW).filter(|n| executions[*n] != 1).collect();
    assert!(twice.is_empty(), "{}: tools not run exactly once: {twice:?}", db.name);
    drop(server);
    let log = log.lock().unwrap();
    assert!(log.iter().any(|line| line.contains("serving the API")), "{}: {log:?}", db.name);
    let lost: Vec<&String> =
        log.iter().filter(|line| line.contains("lease_lost") || line.contains("lease lost")).collect();
    assert!(lost.is_empty(), "{}: {} lost leases: {lost:?}", db.name, lost.len());
    eprintln!("{}: {} runs, each tool once, 0 lease_lost", db.name, BURST + SLOW);
}

/// A tool script that forks: a background `sleep`, a subshell that ignores `SIGTERM` (only
/// `SIGKILL` ends it), and a subshell with a grandchild of its own; every pid (its own
/// last) goes to the file it is given, one a line.
const FORKER: &str = r#"
pids="$1"
sleep 300 & echo $! >> "$pids"
( trap '' TERM; while :; do sleep 1; done ) & echo $! >> "$pids"
( sleep 300 & echo $! >> "$pids"; wait ) & echo $! >> "$pids"
echo $$ >> "$pids"
wait
"#;

/// The tool, called by a step with `timeout` (or none), and a file that spawns it with one.
fn forking_files(dir: &Path) {
    std::fs::write(dir.join("forker.sh"), FORKER).unwrap();
    let workflow = |name: &str, timeout: &str| {
        format!(
            "workflow: {name}\ntools:\n  forker:\n    command: [sh, forker.sh, \"{{{{ args.pids }}}}\"]\n    \
             effect: read\nsteps:\n  - id: fork\n    tool: forker\n    with: {{ pids: \"{{{{ input.pids }}}}\" }}\n{timeout}"
        )
    };
    std::fs::write(dir.join("forks.yaml"), workflow("forks", "")).unwrap();
    std::fs::write(dir.join("times-out.yaml"), workflow("times-out", "    timeout: 1s\n")).unwrap();
    std::fs::write(
        dir.join("spawns.yaml"),
        "workflow: spawns\nsteps:\n  - id: isolated\n    spawn: forks.yaml\n    with: { pids: \"{{ input.pids }}\" }\n    \
         timeout: 1s\n",
    )
    .unwrap();
}

/// The five pids a forker wrote, once it has.
fn forked(pids: &Path) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let written: Vec<u32> =
            std::fs::read_to_string(pids).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect();
        if written.len() == 5 {
            return written;
        }
        assert!(Instant::now() < deadline, "the tool never wrote its pids to {}", pids.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that none of `pids` runs within 30 s (the grace before `SIGKILL` is 5 s; the
/// processes themselves would run for minutes).
fn all_gone(what: &str, pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|pid| crate::processes::process_alive(*pid)).collect();
        if left.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            // Leave nothing behind for the next test, then fail.
            for pid in &left {
                let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
            }
            panic!("{what}: still running: {left:?} of {pids:?}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Cancel from another process: the tool's children and grandchildren die with it, the one
/// that ignores SIGTERM after the grace period.
#[test]
fn cancel_stops_a_tools_whole_process_tree() {
    let dir = tempfile::tempdir().unwrap();
    forking_files(dir.path());
    for db in stores(dir.path(), "cancel_stops_a_tools_whole_process_tree") {
        let pids = dir.path().join(format!("{}.cancel.pids", db.name));
        let input = json!({ "pids": pids }).to_string();
        let run = crate::support::command(dir.path(), &db.args(&["run", "forks.yaml", "--json", "--input", &input]))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let forked = forked(&pids);
        let listed = stepwright(dir.path(), &db.args(&["runs", "list", "--json"]));
        let id = text(&listed.stdout).lines().next().map(|l| serde_json::from_str::<Value>(l).unwrap()).unwrap();
        let cancelled = stepwright(dir.path(), &db.args(&["cancel", id["run_id"].as_str().unwrap()]));
        assert_eq!(cancelled.status.code(), Some(0), "{}: {}", db.name, text(&cancelled.stderr));
        let output = run.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{}: {}", db.name, text(&output.stderr));
        all_gone(&format!("{}: after cancel", db.name), &forked);
    }
}

/// A step's `timeout` and a `spawn`'s `timeout` stop the tool's whole tree too.
#[test]
fn timeouts_stop_a_tools_whole_process_tree() {
    let dir = tempfile::tempdir().unwrap();
    forking_files(dir.path());
    let db = format!("sqlite://{}", dir.path().join("timeouts.db").display());
    for file in ["times-out.yaml", "spawns.yaml"] {
        let pids = dir.path().join(format!("{file}.pids"));
        let input = json!({ "pids": pids }).to_string();
        let output = stepwright(dir.path(), &["--db", &db, "run", file, "--json", "--input", &input]);
        assert_eq!(output.status.code(), Some(1), "{file}: {}", text(&output.stderr));
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(report["status"], "failed", "{file}: {report}");
        all_gone(&format!("{file}: after the timeout"), &forked(&pids));
    }
}

/// `serve` stopped by SIGTERM while its runner executes a tool: the tool's tree is gone by
/// the time the server has exited, and the run's lease is handed back (the run is pending,
/// for any worker to continue at once).
#[test]
fn a_stopped_server_stops_its_tools_and_hands_its_runs_back() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    forking_files(dir.path());
    let db = format!("sqlite://{}", dir.path().join("served.db").display());
    let key = key(dir.path(), &db);
    let mut server = serve_logged(dir.path(), &db, &[], Arc::new(Mutex::new(Vec::new())));
    let pids = dir.path().join("served.pids");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let api = Api::new(&server.base, &key);
    let run = runtime.block_on(async {
        api.register(&std::fs::read_to_string(dir.path().join("forks.yaml")).unwrap()).await;
        api.start(json!({ "workflow": "forks", "input": { "pids": pids } })).await
    });
    let forked = forked(&pids);
    let _ = std::process::Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status();
    let exited = server.child.wait().unwrap();
    assert!(exited.success(), "{exited:?}");
    // Gone by the time the server exited (a moment for the kernel to reap them).
    all_gone("after serve stopped", &forked);
    let shown = stepwright(dir.path(), &["--db", &db, "runs", "show", &run, "--json"]);
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["status"], "pending", "handed back: {shown}");
    assert!(shown.get("owner").is_none_or(Value::is_null), "no lease left: {shown}");
}

/// A TCP proxy on loopback in front of Postgres that can be cut: while cut, it closes every
/// connection it carries and every new one — the database, as the server sees it, is down.
struct CuttableProxy {
    addr: std::net::SocketAddr,
    cut: Arc<std::sync::atomic::AtomicBool>,
    epoch: Arc<tokio::sync::watch::Sender<u64>>,
    _runtime: tokio::runtime::Runtime,
}

impl CuttableProxy {
    fn start(upstream: std::net::SocketAddr) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (epoch, _) = tokio::sync::watch::channel(0u64);
        let epoch = Arc::new(epoch);
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn({
            let (cut, epoch) = (cut.clone(), epoch.clone());
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if cut.load(std::sync::atomic::Ordering::SeqCst) {
                        continue; // dropped: the database is down
                    }
                    let mut cuts = epoch.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else { return };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = cuts.changed() => {}
                        }
                    });
                }
            }
        });
        Self { addr, cut, epoch, _runtime: runtime }
    }

    /// Cuts every connection now and refuses new ones until [`CuttableProxy::restore`].
    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        self.epoch.send_modify(|n| *n += 1);
    }

    fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A read step (3 s) and then a `write` tool, executed by `serve`'s runner on Postgres; the
/// database goes away for 8 s in the middle of the read step. The run waits the outage out
/// and completes — the write done once, nothing `outcome_unknown` — well within the 30 s its
/// lease would have taken to lapse.
#[test]
fn a_postgres_outage_mid_run_is_waited_out_and_the_write_runs_once() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let Some(db) = stores(dir.path(), "a_postgres_outage_mid_run").into_iter().find(|db| db.name == "postgres") else {
        return;
    };
    let upstream: std::net::SocketAddr = "127.0.0.1:5432".parse().unwrap();
    assert!(db.url.contains("127.0.0.1:5432"), "the test database is on {upstream}: {}", db.url);
    let proxy = CuttableProxy::start(upstream);
    let through_proxy = db.url.replace("127.0.0.1:5432", &proxy.addr.to_string());
    let workflow = r#"
workflow: outage
tools:
  slow_read:
    command: [sh, -c, "sleep 3; echo read"]
    effect: read
  charge:
    command: [sh, -c, "echo charged >> charges; echo done"]
    effect: write
steps:
  - id: look
    tool: slow_read
  - id: pay
    tool: charge
"#;
    let key = key(dir.path(), &db.url);
    let log = Arc::new(Mutex::new(Vec::new()));
    let server = serve_logged(dir.path(), &through_proxy, &[], log.clone());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let api = Api::new(&server.base, &key);
    let run = runtime.block_on(async {
        api.register(workflow).await;
        api.start(json!({ "workflow": "outage", "input": null })).await
    });
    // Mid-read: the database goes away for 8 s, through the read's end and the write's start.
    std::thread::sleep(Duration::from_millis(1_500));
    let cut_at = Instant::now();
    proxy.cut();
    std::thread::sleep(Duration::from_secs(8));
    proxy.restore();
    // Read straight from the database (not through the proxy or the server).
    let deadline = Instant::now() + Duration::from_secs(60);
    let shown = loop {
        let shown = stepwright(dir.path(), &db.args(&["runs", "show", &run, "--json"]));
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap_or(Value::Null);
        if shown["status"] == "completed" || shown["status"] == "failed" {
            break shown;
        }
        assert!(Instant::now() < deadline, "the run did not finish after the outage: {shown}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let finished_after = cut_at.elapsed();
    assert_eq!(shown["status"], "completed", "{shown}");
    let charges = std::fs::read_to_string(dir.path().join("charges")).unwrap_or_default();
    assert_eq!(charges.lines().count(), 1, "the write ran once: {charges:?}");
    assert!(!shown.to_string().contains("outcome_unknown"), "{shown}");
    // Not by a take-over when the lease lapsed (30 s after the last renewal): here, once the
    // database answered.
    assert!(finished_after < Duration::from_secs(25), "it waited for its lease: {finished_after:?}");
    drop(server);
    eprintln!("postgres outage of 8 s: the run completed {finished_after:?} after the cut");
    let log = log.lock().unwrap();
    assert!(log.iter().any(|l| l.contains("the store failed")), "the outage was met and waited out: {log:?}");
}

/// Two workers on one store: the one executing a run stops (SIGTERM) or dies (SIGKILL), and
/// the other continues the run within a couple of seconds — the first hands its lease back,
/// the second sees the dead process's lease — not after the lease's 30 s.
#[test]
fn a_worker_that_stops_or_dies_is_succeeded_at_once_on_the_same_host() {
    let dir = tempfile::tempdir().unwrap();
    // Three steps of 2 s: the run is mid-step when its worker goes.
    std::fs::write(
        dir.path().join("steps.yaml"),
        "workflow: steps\ntools:\n  nap:\n    command: [sh, -c, \"sleep 2; echo $1 >> naps\", sh, \"{{ args.n }}\"]\n    \
         effect: read\nsteps:\n  - { id: one, tool: nap, with: { n: 1 } }\n  - { id: two, tool: nap, with: { n: 2 } }\n  \
         - { id: three, tool: nap, with: { n: 3 } }\n",
    )
    .unwrap();
    for db in stores(dir.path(), "a_worker_that_stops_or_dies_is_succeeded") {
        for signal in ["TERM", "KILL"] {
            let _ = std::fs::remove_file(dir.path().join("naps"));
            let worker = || {
                crate::support::command(dir.path(), &db.args(&["worker"]))
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            };
            let (mut first, mut second) = (worker(), worker());
            let created = stepwright(dir.path(), &db.args(&["run", "steps.yaml", "--detach", "--json"]));
            let run = serde_json::from_slice::<Value>(&created.stdout).unwrap()["run_id"].as_str().unwrap().to_owned();
            // Once a step has started, the owner is known: stop it mid-step.
            let owner = loop {
                let shown: Value =
                    serde_json::from_slice(&stepwright(dir.path(), &db.args(&["runs", "show", &run, "--json"])).stdout)
                        .unwrap();
                if let Some(owner) = shown["owner"].as_str().filter(|_| shown["status"] == "running") {
                    break owner.to_owned();
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let pid: u32 = owner.split(':').nth_back(1).unwrap().parse().unwrap();
            let (gone, other) = if pid == first.id() { (&mut first, &mut second) } else { (&mut second, &mut first) };
            assert_eq!(gone.id(), pid, "{}: the owner {owner} is one of the workers", db.name);
            std::thread::sleep(Duration::from_millis(500));
            let stopped_at = Instant::now();
            let _ = std::process::Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status();
            // The other worker takes the run: its owner changes to the survivor (timed from the
            // signal, not from the stopped process's exit, which may come later).
            let taken_after = loop {
                let shown: Value =
                    serde_json::from_slice(&stepwright(dir.path(), &db.args(&["runs", "show", &run, "--json"])).stdout)
                        .unwrap();
                let by_other = shown["owner"].as_str().is_some_and(|o| o.contains(&format!(":{}:", other.id())));
                if by_other || shown["status"] == "completed" {
                    break stopped_at.elapsed();
                }
                assert!(stopped_at.elapsed() < Duration::from_secs(60), "{}: never taken over: {shown}", db.name);
                std::thread::sleep(Duration::from_millis(50));
            };
            // The lease is 30 s: a take-over in a few seconds is the hand-back (TERM) or the
            // dead owner seen (KILL).
            gone.wait().unwrap();
            assert!(taken_after < Duration::from_secs(5), "{} {signal}: taken over after {taken_after:?}", db.name);
            eprintln!("{} {signal}: the other worker took the run {taken_after:?} after", db.name);
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let shown: Value =
                    serde_json::from_slice(&stepwright(dir.path(), &db.args(&["runs", "show", &run, "--json"])).stdout)
                        .unwrap();
                if shown["status"] == "completed" {
                    break;
                }
                assert!(Instant::now() < deadline, "{}: {shown}", db.name);
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = other.kill();
            let _ = other.wait();
        }
    }
}
