"""A FastMCP server for the interop tests (`crates/stepwright-mcp/tests/fastmcp.rs`): a tool
that answers, one that is slow (and leaves a mark when it is cancelled), one whose result is
as large as asked, one that fails, one that kills the server mid-call, and one that says
what the request's `_meta` held (trace context, idempotency key).

    python server.py stdio
    python server.py http PORT
"""

import asyncio
import json
import os
import sys

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError

mcp = FastMCP("interop")


@mcp.tool
def echo(text: str) -> str:
    """Says the text back."""
    return text


@mcp.tool
async def slow(seconds: float, mark: str = "") -> str:
    """Sleeps; if the client cancels the call, writes `cancelled` to the file `mark`."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if mark:
            with open(mark, "w") as out:
                out.write("cancelled")
        raise
    return f"slept {seconds}"


@mcp.tool
def huge(mebibytes: float, mark: str = "") -> str:
    """A text result of this many MiB; each call adds a line to the file `mark`."""
    if mark:
        with open(mark, "a") as out:
            out.write("called\n")
    return "x" * int(mebibytes * 1024 * 1024)


@mcp.tool
def fail(message: str) -> str:
    """Fails with this message (an error result, not a protocol error)."""
    raise ToolError(message)


@mcp.tool
def meta(ctx: Context) -> str:
    """The request's `_meta`, as JSON (`null` when it had none)."""
    held = ctx.request_context.meta
    if held is not None and hasattr(held, "model_dump"):
        held = held.model_dump()
    return json.dumps(held)


@mcp.tool
def crash() -> str:
    """The server process dies mid-call."""
    sys.stderr.write("crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False)
    else:
        mcp.run(show_banner=False)
