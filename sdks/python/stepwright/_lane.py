"""The ``AsyncWorker``'s lane to the server for its claims and answers: one keep-alive
HTTP/1.1 connection per lane, framed by ``h11`` (the parser ``httpx`` itself runs on) over
asyncio streams.

Why not ``httpx.AsyncClient``: on a worker's hot path every task costs a claim's answer, an
answer and the next claim, and ``httpx`` spends ~1 ms of CPU per request on the layers around
``h11`` (URL models, the connection pool's locks through ``anyio``), where this lane spends
~0.4 ms (measured on loopback, 2 vCPU: BENCHMARKS.md, "Step workers"). Everything else the
package sends goes through ``httpx``; so does the lane itself when the environment names a
proxy for the server (:func:`direct`), since the lane connects straight to it.

Errors are ``httpx``'s own transport errors, so a caller handles either path the same way.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.parse
import urllib.request
from typing import Any, Protocol

import h11
import httpx


class Lane(Protocol):
    """Sends one request at a time and returns the server's answer."""

    async def post(self, path: str, body: Any, *, timeout: float) -> httpx.Response: ...

    async def aclose(self) -> None: ...


def direct(base_url: str) -> bool:
    """Whether the lane may connect straight to ``base_url``: no proxy the environment names
    (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, as ``httpx`` reads them) applies to it."""
    parts = urllib.parse.urlsplit(base_url)
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return True
    # `NO_PROXY`, read as `urllib` reads it (typeshed does not list the function).
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    return bool(bypass(parts.hostname or "", proxies))


def open_lane(base_url: str, headers: dict[str, str], http: httpx.AsyncClient) -> Lane:
    """A lane to ``base_url``: direct unless a proxy applies, else through ``http``."""
    return H11Lane(base_url, headers) if direct(base_url) else HttpxLane(http)


class HttpxLane:
    """The lane through the package's ``httpx`` client (a proxy the environment names)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http

    async def post(self, path: str, body: Any, *, timeout: float) -> httpx.Response:
        return await self._http.post(path, json=body, timeout=timeout)

    async def aclose(self) -> None:
        """The client is its owner's to close."""


class H11Lane:
    """One connection, opened on first use and again after any failure or cancel (a request
    cut off mid-way leaves the connection in no known state)."""

    def __init__(self, base_url: str, headers: dict[str, str], *, connect_timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the server's URL must be http:// or https://, not {base_url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._tls: ssl.SSLContext | None = httpx.create_ssl_context() if parts.scheme == "https" else None
        self._prefix = parts.path.rstrip("/")
        authority = parts.netloc.rsplit("@", 1)[-1]
        self._headers = [("host", authority), ("content-type", "application/json"), *headers.items()]
        self._connect_timeout = connect_timeout
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._conn: h11.Connection | None = None
        self._busy = False

    async def post(self, path: str, body: Any, *, timeout: float) -> httpx.Response:
        if self._busy:
            raise RuntimeError("a lane sends one request at a time")
        data = json.dumps(body, separators=(",", ":")).encode()
        self._busy = True
        try:
            return await asyncio.wait_for(self._exchange(path, data), timeout)
        except asyncio.TimeoutError as error:
            self._drop()
            raise httpx.ReadTimeout(f"no answer to POST {path} within {timeout} s") from error
        except (OSError, asyncio.IncompleteReadError) as error:
            self._drop()
            raise httpx.ConnectError(f"POST {path}: {error}") from error
        except h11.ProtocolError as error:
            self._drop()
            raise httpx.RemoteProtocolError(f"POST {path}: {error}") from error
        except BaseException:
            # Cancelled (or anything else) mid-exchange: the connection is not reused.
            self._drop()
            raise
        finally:
            self._busy = False

    async def _exchange(self, path: str, data: bytes) -> httpx.Response:
        reader, writer, conn = await self._connection()
        headers = [*self._headers, ("content-length", str(len(data)))]
        out = conn.send(h11.Request(method="POST", target=self._prefix + path, headers=headers)) or b""
        out += conn.send(h11.Data(data=data)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        writer.write(out)
        head: h11.Response | None = None
        content: list[bytes] = []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                content.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise asyncio.IncompleteReadError(b"".join(content), None)
        assert head is not None  # h11 yields the response's head before its end
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
        else:
            self._drop()
        response_headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in head.headers]
        return httpx.Response(head.status_code, headers=response_headers, content=b"".join(content))

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, h11.Connection]:
        if self._streams is not None and self._conn is not None:
            reader, writer = self._streams
            # Closed by the server while idle: open another before sending anything.
            if not (reader.at_eof() or writer.is_closing()):
                return reader, writer, self._conn
            self._drop()
        opening = asyncio.open_connection(
            self._host, self._port, ssl=self._tls, server_hostname=self._host if self._tls else None
        )
        try:
            reader, writer = await asyncio.wait_for(opening, self._connect_timeout)
        except asyncio.TimeoutError as error:
            raise httpx.ConnectTimeout(f"no connection to {self._host}:{self._port} within {self._connect_timeout} s") from error
        self._streams = (reader, writer)
        self._conn = h11.Connection(h11.CLIENT)
        return reader, writer, self._conn

    def _drop(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
        self._streams = None
        self._conn = None

    async def aclose(self) -> None:
        self._drop()
