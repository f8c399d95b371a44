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
