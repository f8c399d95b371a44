//! What the binary's tests share: running `stepwright` (against a store, or against a
//! `stepwright serve` process in the remote mode), and the testkit's fake OpenAI-compatible
//! chat model on loopback.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;
use stepwright_testkit::http::FakeServer;

/// Runs `scenario` once per store: SQLite in a fresh directory, and Postgres in a schema of
/// its own (with a fresh directory too) when `STEPWRIGHT_TEST_DATABASE_URL` is set. The
/// scenario gets the directory and the `--db` URL.
pub(crate) fn on_each_store(test: &str, scenario: impl Fn(&Path, &str)) {
    let sqlite = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", sqlite.path().join("shared.db").display());
    scenario(sqlite.path(), &url);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    if let Some(url) = runtime.block_on(stepwright::backends::postgres::test_url(test)) {
        let dir = tempfile::tempdir().unwrap();
        scenario(dir.path(), &url);
    }
}

/// Runs the binary in `dir` with no store or provider key from the environment (only the
/// fake key the tests' model files name).
pub(crate) fn stepwright(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().expect("run stepwright")
}

/// The binary in `dir`, with the environment [`stepwright`] gives it, to spawn.
pub(crate) fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stepwright"));
    for (name, _) in std::env::vars().filter(|(name, _)| name.starts_with("OTEL_")) {
        // Telemetry is what a test sets, not what the machine has.
        command.env_remove(name);
    }
    command
        .current_dir(dir)
        .env_remove("STEPWRIGHT_DB")
        .env_remove("STEPWRIGHT_SERVER")
        .env_remove("STEPWRIGHT_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env("STEPWRIGHT_TEST_FAKE_KEY", "sk-test")
        .args(args);
    command
}

/// A `stepwright serve` process and the address it printed; killed when dropped.
pub(crate) struct Serving {
    pub(crate) child: Child,
    pub(crate) base: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `stepwright serve` (with its worker) on `db`, on a free loopback port.
pub(crate) fn serve(dir: &Path, db: &str) -> Serving {
    serve_with(dir, db, &[])
}

/// [`serve`] with extra `serve` flags.
pub(crate) fn serve_flags(dir: &Path, db: &str, flags: &[&str]) -> Serving {
    serve_args(dir, db, &[], flags, None)
}

/// [`serve`] with these environment variables set.
pub(crate) fn serve_with(dir: &Path, db: &str, env: &[(&str, &str)]) -> Serving {
    serve_args(dir, db, env, &[], None)
}

/// [`serve`] with extra `serve` flags, keeping every line it writes to stderr in `log`.
pub(crate) fn serve_logged(
    dir: &Path,
    db: &str,
    flags: &[&str],
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) -> Serving {
    serve_args(dir, db, &[], flags, Some(log))
}

/// [`serve`] with environment variables, extra flags, and its stderr kept in `log`.
pub(crate) fn serve_args(
    dir: &Path,
    db: &str,
    env: &[(&str, &str)],
    flags: &[&str],
    log: Option<std::sync::Arc<std::sync::Mutex<Vec<String>>>>,
) -> Serving {
    let mut args = vec!["--db", db, "serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(flags);
    let mut child = command(dir, &args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stepwright serve");
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let line = lines.next().expect("serve says where it listens").expect("a line");
    let base = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split("/v1").next())
        .map(|addr| format!("http://{addr}"))
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    if let Some(log) = &log {
        log.lock().expect("poisoned").push(line);
    }
    // Keep reading stderr so the process never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if let Some(log) = &log {
                log.lock().expect("poisoned").push(line);
            }
        }
    });
    Serving { child, base }
}

/// The binary in `dir` calling `base` (`--server`) with `key`, to completion.
pub(crate) fn over_server(dir: &Path, base: &str, key: &str, args: &[&str]) -> Output {
    command(dir, &[&["--server", base][..], args].concat()).env("STEPWRIGHT_API_KEY", key).output().unwrap()
}

/// An API key for user `user` in namespace `acme` with `roles`, created in `db`.
pub(crate) fn api_key(dir: &Path, db: &str, user: &str, roles: &[&str]) -> String {
    let mut args = vec!["--db", db, "keys", "create", "--namespace", "acme", "--user", user];
    for role in roles {
        args.extend(["--role", role]);
    }
    let output = stepwright(dir, &args);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("utf-8").trim().to_owned()
}

/// Where a scenario's commands go: the default store in a fresh directory (the local mode),
/// or a `stepwright serve` process on a store of its own, called with `--server` and a key
/// of user `ann` with every role (the remote mode, DESIGN §13). The command line's
/// scenarios run in both and must see the same output and exit codes.
pub(crate) struct Target {
    dir: tempfile::TempDir,
    server: Option<(Serving, String)>,
}

impl Target {
    pub(crate) fn local() -> Self {
        Self { dir: tempfile::tempdir().expect("a temporary directory"), server: None }
    }

    pub(crate) fn remote() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = format!("sqlite://{}", dir.path().join("served.db").display());
        let key = api_key(dir.path(), &db, "ann", &["admin", "operator", "approver"]);
        let serving = serve(dir.path(), &db);
        Self { dir, server: Some((serving, key)) }
    }

    /// The directory the commands run in (and the scenario's files live in).
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn is_remote(&self) -> bool {
        self.server.is_some()
    }

    /// Runs `stepwright ARGS` and waits for it.
    pub(crate) fn stepwright(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run stepwright")
    }

    /// `stepwright ARGS`, to spawn.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = command(self.dir(), args);
        if let Some((serving, key)) = &self.server {
            command.env("STEPWRIGHT_SERVER", &serving.base).env("STEPWRIGHT_API_KEY", key);
        }
        command
    }

    /// Who decides: named with `--as ann` locally; remotely the key is `ann`'s, and `--as` is
    /// refused.
    pub(crate) fn as_ann(&self) -> &'static [&'static str] {
        if self.is_remote() { &[] } else { &["--as", "ann"] }
    }
}

pub(crate) use stepwright_testkit::openai::{Answer, Tokens, contents};

/// Starts the fake model; `script` answers each request body. Returns its port and the
/// server (which counts what it served).
pub(crate) fn fake_openai(script: fn(&Value) -> Answer, tokens: Tokens) -> (u16, FakeServer) {
    fake_openai_paced(script, tokens, std::time::Duration::ZERO)
}

/// As [`fake_openai`], but a streamed answer arrives one event every `pace`.
pub(crate) fn fake_openai_paced(
    script: fn(&Value) -> Answer,
    tokens: Tokens,
    pace: std::time::Duration,
) -> (u16, FakeServer) {
    let server = stepwright_testkit::openai::chat_model(script, tokens, pace);
    (server.port, server)
}
