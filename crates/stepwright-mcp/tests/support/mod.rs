//! What the MCP interop tests share.

/// The path of an npm-installed MCP server's script from the environment variable `.ci/run`
/// sets, or `None` after saying that the test was skipped.
pub(crate) fn server_script(variable: &str) -> Option<String> {
    let path = std::env::var(variable).ok().filter(|p| !p.is_empty());
    if path.is_none() {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("skipped: {variable} is not set (`.ci/run` installs the server from npm)");
        }
    }
    path
}

/// Spawns a server process (killed when dropped) and waits until it listens on `port`.
#[allow(dead_code, reason = "not every test binary that shares this module starts an HTTP server")]
pub(crate) async fn listening(mut command: tokio::process::Command, port: u16) -> tokio::process::Child {
    let child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..400 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return child;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the server did not listen on port {port}");
}
