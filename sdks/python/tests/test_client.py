"""The client against a real `stepwright serve`: a run's event stream, cut mid-event by a
fault-injecting proxy, resumes by itself with no gap and no duplicate; what a handler emits
reaches the run's stream; idempotent starts."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any
from urllib.parse import urlparse

from stepwright import BadRequest, Client, NotFound, Worker


class CuttingProxy:
    """Forwards TCP to the server; the first `cuts` connections are closed after
    `cut_after` bytes of the server's answer (mid-event, mid-line)."""

    def __init__(self, target: str, cut_after: int, cuts: int = 1) -> None:
        parsed = urlparse(target)
        self.target = (parsed.hostname, parsed.port)
        self.cut_after = cut_after
        self.cuts = cuts
        self.connections = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self.listener.accept()
            self.connections += 1
            limit = self.cut_after if self.connections <= self.cuts else None
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, limit), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if limit is not None and sent + len(data) >= limit:
                    sink.sendall(data[: limit - sent])
                    break
                sink.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def test_a_stream_cut_mid_event_resumes_with_no_gap_and_no_duplicate(server: Any, namespace: str) -> None:
    key = server.key(namespace)
    steps = "".join(f"  - id: s{n}\n    set: \"{{{{ 'step {n} of a long run' }}}}\"\n" for n in range(25))
    with Client(server.url, key) as c:
        c.workflows.register(f"workflow: many\nsteps:\n{steps}")
        run = c.runs.start("many", {})
        c.runs.wait(run["run_id"], timeout=30)
        direct = list(c.runs.stream(run["run_id"]))
    ids = [e["id"] for e in direct]
    assert ids == list(range(len(ids))) and len(ids) > 40, ids
    # Cut the first two connections part-way through the answer (headers + some events).
    proxy = CuttingProxy(server.url, cut_after=1500, cuts=2)
    with Client(proxy.url, key) as through:
        resumed = list(through.runs.stream(run["run_id"]))
    assert proxy.connections >= 3, "the stream was cut and resumed"
    assert [e["id"] for e in resumed] == ids, "no gap, no duplicate"
    assert resumed == direct
    assert resumed[-1]["event"] == "run.completed"


def test_what_a_handler_emits_reaches_the_runs_stream(server: Any, namespace: str) -> None:
    key = server.key(namespace, "admin", "worker")
    source = """
workflow: chatty
tools:
  talk:
    worker: { queue: chatty }
    effect: read
steps:
  - id: call
    tool: talk
"""
    with Client(server.url, key) as c:
        c.workflows.register(source)
        worker = Worker(server.url, key, queue="chatty", wait_seconds=2)
        go = threading.Event()

        @worker.handler("talk")
        def talk(ctx: Any, task_input: Any) -> Any:
            go.wait(10)
            for word in ["durable", " steps", " in", " Python"]:
                ctx.emit(token=word)
                time.sleep(0.03)
            ctx.emit(progress={"done": 1, "total": 2}, log="half way")
            ctx.emit(progress={"done": 2, "total": 2})
            return {"said": 4}

        threading.Thread(target=worker.run, daemon=True).start()
        run = c.runs.start("chatty", {})
        seen: list[dict[str, Any]] = []

        def follow() -> None:
            for event in c.runs.stream(run["run_id"], tokens=True):
                seen.append(event)

        follower = threading.Thread(target=follow)
        follower.start()
        time.sleep(0.5)  # the follower is subscribed before the handler speaks
        go.set()
        follower.join(timeout=30)
        worker.stop()
    tokens = "".join(e["data"]["text"] for e in seen if e["event"] == "token")
    assert tokens == "durable steps in Python", seen
    progress = [e["data"]["data"]["data"] for e in seen if e["event"] == "step.progress"]
    assert progress == [{"done": 1, "total": 2}, {"done": 2, "total": 2}], seen
    logs = [e["data"]["data"]["text"] for e in seen if e["event"] == "step.log"]
    assert logs == ["half way"]
    assert seen[-1]["event"] == "run.completed"


def test_a_start_retried_with_its_key_starts_one_run(server: Any, namespace: str) -> None:
    key = server.key(namespace)
    with Client(server.url, key) as c:
        c.workflows.register("workflow: once\nsteps:\n  - id: a\n    set: 1\n")
        first = c.runs.start("once", {}, idempotency_key="order-1")
        again = c.runs.start("once", {}, idempotency_key="order-1")
        assert first["run_id"] == again["run_id"]
        tagged = c.runs.start("once", {}, tags=["vip", "env:prod"], wait_seconds=5)
        assert tagged["tags"] == ["vip", "env:prod"]
        assert [r["run_id"] for r in c.runs.list(tag="vip")] == [tagged["run_id"]]
        assert list(c.runs.list(tag="env")) == []
        try:
            c.runs.start("once", {}, tags=["no good"])
        except BadRequest as error:
            assert error.code == "bad_request" and "tags[0]" in error.detail, error
        else:
            raise AssertionError("a bad tag is refused")
        try:
            c.runs.get("01a21ba0-0000-7000-8000-000000000000")
        except NotFound as error:
            assert error.code == "not_found" and error.status == 404
        else:
            raise AssertionError("a missing run is NotFound")


def test_runs_interrupts_events_and_schedules(server: Any, namespace: str) -> None:
    key = server.key(namespace, "admin", "approver")
    source = """
workflow: ask
schedules:
  hourly: { every: 1h }
steps:
  - id: ok
    approval: { message: "Go?" }
  - id: paid
    wait: { event: paid, timeout: 1h }
"""
    with Client(server.url, key) as c:
        c.workflows.register(source)
        run = c.runs.start("ask", {})
        wait_for_status(c, run["run_id"], "suspended")
        inbox = c.interrupts.list()
        assert [i["message"] for i in inbox] == ["Go?"]
        decided = c.interrupts.decide(inbox[0]["id"], "approve")
        assert decided["decided_by"] == "tester"
        assert c.interrupts.check_approvers(["user:tester"]) == {"keys": 1, "groups": []}
        assert c.interrupts.check_approvers(["role:nobody"]) == {"keys": 0, "groups": []}
        wait_for_awaiting(c, run["run_id"])
        c.events.send("paid", {"amount": 3}, idempotency_key="pay-1")
        done = c.runs.wait(run["run_id"], timeout=30)
        assert done["status"] == "completed" and done["output"] == {"amount": 3}, done
        listed = list(c.runs.list(workflow="ask", limit=1))
        assert [r["run_id"] for r in listed] == [run["run_id"]]
        kept = c.schedules.create("ask")
        assert "hourly" in json.dumps(kept)
        assert "hourly" in json.dumps(c.schedules.list())
        c.schedules.pause("ask", "hourly")
        c.schedules.resume("ask", "hourly")


def wait_for_status(c: Client, run_id: str, status: str) -> None:
    deadline = time.monotonic() + 20
    while c.runs.get(run_id)["status"] != status:
        assert time.monotonic() < deadline, f"run {run_id} never became {status}"
        time.sleep(0.05)


def wait_for_awaiting(c: Client, run_id: str) -> None:
    deadline = time.monotonic() + 20
    while not c.runs.get(run_id).get("awaiting"):
        assert time.monotonic() < deadline, "the run never waited for the event"
        time.sleep(0.05)


def test_the_async_client_starts_waits_and_streams(server: Any, namespace: str) -> None:
    import asyncio

    from stepwright import AsyncClient

    key = server.key(namespace)

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with AsyncClient(server.url, key) as c:
            await c.workflows.register("workflow: hi\nsteps:\n  - id: a\n    set: \"{{ 'hi ' ~ input.name }}\"\n")
            run = await c.runs.start("hi", {"name": "Ada"})
            done = await c.runs.wait(run["run_id"], timeout=30)
            events = [e async for e in c.runs.stream(run["run_id"])]
            return done, events

    done, events = asyncio.run(scenario())
    assert done["output"] == "hi Ada"
    assert [e["id"] for e in events] == list(range(len(events))) and events[-1]["event"] == "run.completed"
