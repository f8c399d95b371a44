"""Every resource of the API through both clients, against a real `stepwright serve`: each
method reaches its operation and its answer has the shape `stepwright.models` says."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from stepwright import AsyncClient, Client, Conflict, NotFound

HERE = Path(__file__).resolve().parent

SOURCE = """
workflow: everything
schedules:
  hourly: { every: 1h, input: {} }
triggers:
  on-ping: { event: ping }
steps:
  - id: ok
    approval: { message: "Go?" }
  - id: nap
    sleep: 6h
  - id: shaped
    set: { seen: "{{ input.n }}" }
"""


def test_the_models_are_generated_from_the_document() -> None:
    tool = HERE.parent / "tools" / "generate_models.py"
    subprocess.run([sys.executable, str(tool), "--check"], check=True)


def test_every_resource_answers_through_the_client(server: Any, namespace: str) -> None:
    key = server.key(namespace, "admin", "approver", "operator", "worker")
    with Client(server.url, key) as c:
        assert c.health()["status"] == "ok"
        version = c.workflows.register(SOURCE)
        assert [w["name"] for w in c.workflows.list()] == ["everything"]
        assert c.workflows.get("everything")["name"] == "everything" and version["version"] >= 1

        run = c.runs.start("everything", {"n": 1})
        deadline = time.monotonic() + 20
        while not c.interrupts.list():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [item] = c.interrupts.list()
        assert c.interrupts.link(item["id"], expires_in_seconds=600)["url"]
        c.interrupts.decide(item["id"], "approve")
        while not (timers := c.interrupts.list(kind="timer")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert c.interrupts.list() == [], "a timer is not a decision"
        assert c.interrupts.wake(timers[0]["id"])["interrupt_id"] == timers[0]["interrupt_id"]
        done = c.runs.wait(run["run_id"], timeout=30)
        assert done["status"] == "completed", done
        assert c.runs.definition(run["run_id"])["run_id"] == run["run_id"]
        assert c.runs.replay(run["run_id"])["identical"] is True
        assert c.runs.recompute(run["run_id"])["run"] == run["run_id"]
        forked = c.runs.fork(run["run_id"], "shaped", input={"n": 2})
        assert forked["parent"] is not None and forked["parent"]["run_id"] == run["run_id"]
        assert c.runs.cancel(forked["run_id"])["run_id"] == forked["run_id"]

        sent = c.events.send("ping", {"x": 1}, idempotency_key="ping-1")
        assert c.events.get(sent["event"]["seq"])["name"] == "ping"
        assert [e["name"] for e in c.events.list(name="ping")] == ["ping"]

        assert [s["schedule"] for s in c.schedules.create("everything", paused=True)] == ["hourly"]
        assert c.schedules.get("everything", "hourly")["schedule"] == "hourly"
        assert c.schedules.resume("everything", "hourly")["paused"] is False
        assert c.schedules.pause("everything", "hourly")["paused"] is True
        c.schedules.delete("everything", "hourly")
        assert c.schedules.list() == []

        assert [t["trigger"] for t in c.triggers.create("everything", paused=True)] == ["on-ping"]
        assert c.triggers.get("everything", "on-ping")["trigger"] == "on-ping"
        assert c.triggers.resume("everything", "on-ping")["paused"] is False
        c.triggers.delete("everything", "on-ping")
        assert c.triggers.list() == []

        hook = c.webhooks.create("http://127.0.0.1:9/hook", ["run.failed"], "s3cret-s3cret-s3cret")
        assert [h["id"] for h in c.webhooks.list()] == [hook["id"]]
        assert c.webhooks.deliveries(hook["id"]) == []
        c.webhooks.delete(hook["id"])
        try:
            c.webhooks.deliveries(hook["id"])
            raise AssertionError("a deleted webhook is gone")
        except NotFound:
            pass

        assert c.queues.list()["queues"] == [] and c.workers.list()["workers"] == []
        assert c.tasks.list() == []

        spec = {"experiment": "again", "runs": {"workflow": "everything", "ids": [run["run_id"]]}, "evaluators": [{"name": "same", "compare": "new == old"}]}
        started = c.experiments.start(spec)
        assert (started["experiment"], started["runs"]) == ("again", 1), started
        ended = c.experiments.wait(started["id"], timeout=30)
        assert ended["status"] == "completed" and ended["spec"]["runs"]["ids"] == [run["run_id"]], ended
        totals = ended["report"]["totals"]
        assert (totals["runs"], totals["unchanged"], totals["regressed"]) == (1, 1, 0), totals
        assert [e["id"] for e in c.experiments.list()] == [started["id"]]
        for verb in (c.experiments.cancel, c.experiments.resume):
            try:
                verb(started["id"])
                raise AssertionError("an ended experiment is neither cancelled nor resumed")
            except Conflict as e:
                assert e.code == "experiment_ended"


def test_the_async_client_has_the_same_resources(server: Any, namespace: str) -> None:
    key = server.key(namespace, "admin", "approver", "operator")

    async def walk() -> None:
        async with AsyncClient(server.url, key) as c:
            assert (await c.health())["status"] == "ok"
            await c.workflows.register(SOURCE)
            assert [w["name"] for w in await c.workflows.list()] == ["everything"]
            run = await c.runs.start("everything", {"n": 1})
            while not await c.interrupts.list():
                await asyncio.sleep(0.05)
            [item] = await c.interrupts.list()
            await c.interrupts.decide(item["id"], "approve")
            while not (timers := await c.interrupts.list(kind="timer")):
                await asyncio.sleep(0.05)
            await c.interrupts.wake(timers[0]["id"])
            assert (await c.runs.wait(run["run_id"], timeout=30))["status"] == "completed"
            assert (await c.runs.replay(run["run_id"]))["identical"] is True
            listed = [r["run_id"] async for r in c.runs.list(workflow="everything")]
            assert listed == [run["run_id"]]
            assert [s["schedule"] for s in await c.schedules.create("everything", paused=True)] == ["hourly"]
            assert [t["trigger"] for t in await c.triggers.create("everything", paused=True)] == ["on-ping"]
            await c.schedules.delete("everything", "hourly")
            assert await c.schedules.list() == []
            assert (await c.queues.list())["queues"] == []
            started = await c.experiments.start({"experiment": "again", "runs": {"workflow": "everything", "ids": [run["run_id"]]}})
            assert (await c.experiments.wait(started["id"], timeout=30))["report"]["totals"]["unchanged"] == 1
            assert [e["id"] for e in await c.experiments.list()] == [started["id"]]
            try:
                await c.experiments.cancel(started["id"])
                raise AssertionError("an ended experiment is not cancelled")
            except Conflict:
                pass

    asyncio.run(walk())
