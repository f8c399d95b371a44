"""The AsyncWorker's lane (`stepwright._lane`): one keep-alive connection per lane, against
real sockets — a server that closes its connections, one that never answers, a cancel
mid-request — and the fall back to httpx when the environment names a proxy."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from stepwright import AsyncWorker, errors
from stepwright._lane import H11Lane, HttpxLane, direct, open_lane

from test_worker import client, workflow  # noqa: F401 - `client` is a fixture


class Answers:
    """A loopback server that answers each request with its count and body; `close_after`
    closes the connection after each answer, `silent` never answers."""

    def __init__(self, *, close_after: bool = False, silent: bool = False, status: int = 200) -> None:
        self.close_after, self.silent, self.status = close_after, silent, status
        self.connections = 0
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
                body = await reader.readexactly(length)
                self.requests += 1
                if self.silent:
                    await asyncio.sleep(3600)
                data = json.dumps({"n": self.requests, "got": json.loads(body), "code": "lease_lost", "detail": "no"}).encode()
                writer.write(
                    f"HTTP/1.1 {self.status} X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n".encode() + data
                )
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


async def serving(answers: Answers) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(answers.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/base"


def test_a_lane_keeps_its_connection_and_opens_another_when_the_server_closed_it() -> None:
    async def scenario() -> None:
        kept = Answers()
        server, url = await serving(kept)
        lane = H11Lane(url, {"authorization": "Bearer k"})
        for i in range(3):
            response = await lane.post("/v1/x", {"i": i}, timeout=5)
            assert response.json()["got"] == {"i": i}
        assert (kept.connections, kept.requests) == (1, 3)
        await lane.aclose()
        server.close()

        closing = Answers(close_after=True)
        server, url = await serving(closing)
        lane = H11Lane(url, {})
        for i in range(3):
            response = await lane.post("/v1/x", {"i": i}, timeout=5)
            assert response.json()["got"] == {"i": i}
            await asyncio.sleep(0.05)  # the server's close reaches the lane
        assert (closing.connections, closing.requests) == (3, 3)
        await lane.aclose()
        server.close()

    asyncio.run(scenario())


def test_a_lane_times_out_and_a_cancel_mid_request_leaves_it_usable() -> None:
    async def scenario() -> None:
        silent = Answers(silent=True)
        server, url = await serving(silent)
        lane = H11Lane(url, {})
        with pytest.raises(httpx.ReadTimeout):
            await lane.post("/v1/x", {}, timeout=0.2)
        pending = asyncio.ensure_future(lane.post("/v1/x", {}, timeout=30))
        await asyncio.sleep(0.2)
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        silent.silent = False
        response = await lane.post("/v1/x", {"after": True}, timeout=5)
        assert response.json()["got"] == {"after": True}
        # Each cut-off request dropped its connection: a third one carried the last request.
        assert silent.connections == 3
        await lane.aclose()
        server.close()

    asyncio.run(scenario())


def test_a_lanes_problem_answer_raises_the_typed_error() -> None:
    async def scenario() -> None:
        refusing = Answers(status=409)
        server, url = await serving(refusing)
        lane = H11Lane(url, {})
        response = await lane.post("/v1/x", {}, timeout=5)
        with pytest.raises(errors.Conflict) as refused:
            errors.raise_for_problem(response)
        assert refused.value.code == "lease_lost"
        await lane.aclose()
        server.close()

    asyncio.run(scenario())


def test_a_lane_refuses_a_second_request_at_once() -> None:
    async def scenario() -> None:
        silent = Answers(silent=True)
        server, url = await serving(silent)
        lane = H11Lane(url, {})
        first = asyncio.ensure_future(lane.post("/v1/x", {}, timeout=30))
        await asyncio.sleep(0.1)
        with pytest.raises(RuntimeError, match="one request at a time"):
            await lane.post("/v1/x", {}, timeout=30)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await lane.aclose()
        server.close()

    asyncio.run(scenario())


def test_a_proxy_the_environment_names_sends_the_lane_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert direct("http://10.0.0.5:8080")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert direct("http://10.0.0.5:8080")
    assert not direct("https://stepwright.example")
    monkeypatch.setenv("ALL_PROXY", "http://proxy:3128")
    assert not direct("http://10.0.0.5:8080")
    monkeypatch.setenv("NO_PROXY", "10.0.0.5")
    assert direct("http://10.0.0.5:8080")
    with pytest.raises(ValueError, match="http:// or https://"):
        H11Lane("ftp://x", {})

    async def lanes() -> tuple[Any, Any]:
        async with httpx.AsyncClient() as http:
            return open_lane("http://10.0.0.5:8080", {}, http), open_lane("http://10.0.0.6:8080", {}, http)

    bypassed, proxied = asyncio.run(lanes())
    assert isinstance(bypassed, H11Lane) and isinstance(proxied, HttpxLane)


class ForwardProxy(BaseHTTPRequestHandler):
    """A forward HTTP proxy (absolute-form requests) that notes each path it forwarded."""

    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def do_POST(self) -> None:  # noqa: N802
        self.forward()

    def do_GET(self) -> None:  # noqa: N802
        self.forward()

    def forward(self) -> None:
        target = httpx.URL(self.path)
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        ForwardProxy.seen.append(target.path)
        upstream = http.client.HTTPConnection(target.host, target.port, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "connection")}
        upstream.request(self.command, target.raw_path.decode(), body=body, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        upstream.close()

    def log_message(self, *args: Any) -> None:
        pass


def test_an_async_worker_behind_a_proxy_claims_and_answers_through_it(
    server: Any, client: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, key = client
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), ForwardProxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    ForwardProxy.seen = []
    c.workflows.register(workflow("behind-proxy", queue="proxied", handler="shout"))
    worker = AsyncWorker(server.url, key, queue="proxied", slots=2, wait_seconds=1)

    @worker.handler("shout")
    async def shout(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
        return {"text": task_input["text"].upper()}

    thread = threading.Thread(target=lambda: asyncio.run(worker.run()), daemon=True)
    thread.start()
    run = c.runs.start("behind-proxy", {"text": "via proxy", "sleep": 0})
    assert c.runs.wait(run["run_id"], timeout=30)["status"] == "completed"
    worker.stop()
    thread.join(timeout=20)
    proxy.shutdown()
    assert "/v1/tasks/claim" in ForwardProxy.seen and "/v1/tasks/answers" in ForwardProxy.seen
