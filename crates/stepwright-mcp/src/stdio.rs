//! A stdio MCP server as a transport whose messages are bounded in size.
//!
//! rmcp's own stdio transport drops a line over its cap (16 MiB) and keeps the connection
//! open, so the call that line answered waits forever. Here the server's output is read
//! through [`Bounded`]: past the limit the stream ends, the call fails at once as "transport
//! closed", and the flag it set says why — so the caller reports the size, and does not
//! repeat a call whose answer will be as large again.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// How long a closed server gets to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// A reader that ends the stream when one line (one JSON-RPC message) passes `limit` bytes,
/// after handing on every complete line before it, and raises `tripped`.
pub(crate) struct Bounded<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current line read so far.
    line: usize,
    tripped: Arc<AtomicBool>,
    ended: bool,
}

impl<R> Bounded<R> {
    pub(crate) fn new(inner: R, limit: usize, tripped: Arc<AtomicBool>) -> Self {
        Self { inner, limit, line: 0, tripped, ended: false }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Bounded<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let mut kept = None;
        for (at, byte) in buf.filled()[before..].iter().enumerate() {
            if *byte == b'\n' {
                this.line = 0;
            } else {
                this.line += 1;
                if this.line > this.limit {
                    kept =
                        Some(buf.filled()[before..before + at].iter().rposition(|b| *b == b'\n').map_or(0, |n| n + 1));
                    break;
                }
            }
        }
        if let Some(kept) = kept {
            // The lines before the oversized one go on; the stream ends after them.
            buf.set_filled(before + kept);
            this.ended = true;
            this.tripped.store(true, Ordering::SeqCst);
        }
        Poll::Ready(Ok(()))
    }
}

/// The server process and the bounded transport over its stdin and stdout.
pub(crate) struct StdioTransport {
    transport: AsyncRwTransport<RoleClient, Bounded<ChildStdout>, ChildStdin>,
    /// Killed when dropped (`kill_on_drop`), as when the connection is given up.
    child: Option<Child>,
    /// Raised by the reader when a message was over the limit.
    tripped: Arc<AtomicBool>,
}

impl StdioTransport {
    pub(crate) fn new(mut child: Child, limit: usize, tripped: Arc<AtomicBool>) -> io::Result<Self> {
        let missing = |what: &str| io::Error::other(format!("the server's {what} is not piped"));
        let stdout = child.stdout.take().ok_or_else(|| missing("stdout"))?;
        let stdin = child.stdin.take().ok_or_else(|| missing("stdin"))?;
        // The bound is ours (rmcp's would drop the line and wait forever).
        let transport =
            AsyncRwTransport::new(Bounded::new(stdout, limit, tripped.clone()), stdin).with_max_line_length(usize::MAX);
        Ok(Self { transport, child: Some(child), tripped })
    }
}

impl Transport<RoleClient> for StdioTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    /// The MCP stdio shutdown: close its input, give it a moment to exit, then kill it. A
    /// server whose message was refused is killed at once: it is stuck writing what nobody
    /// reads, and the calls waiting on the connection fail only once it is closed.
    async fn close(&mut self) -> Result<(), io::Error> {
        let closed = self.transport.close().await;
        if let Some(mut child) = self.child.take() {
            let stuck = self.tripped.load(Ordering::SeqCst);
            if stuck || tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
        }
        closed
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn read_all(input: &'static [u8], limit: usize) -> (Vec<u8>, bool) {
        let tripped = Arc::new(AtomicBool::new(false));
        let mut reader = Bounded::new(input, limit, tripped.clone());
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.unwrap();
        (out, tripped.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_and_the_first_past_it_ends_the_stream() {
        assert_eq!(read_all(b"short\nlines\n", 5).await, (b"short\nlines\n".to_vec(), false));
        assert_eq!(read_all(b"ok\ntoo long\nnever\n", 5).await, (b"ok\n".to_vec(), true));
        assert_eq!(read_all(b"far too long\n", 5).await, (Vec::new(), true));
    }
}
