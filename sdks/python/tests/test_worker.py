"""The Python package against a real `stepwright serve`: steps written in Python, with the
engine's guarantees (retries, the effect fence, cancellation, leases)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from stepwright import Client, Conflict, HandlerError, Worker

HERE = Path(__file__).resolve().parent


def workflow(name: str, *, queue: str, handler: str, effect: str = "read", worker_extra: str = "", step_extra: str = "") -> str:
    return f"""
workflow: {name}
tools:
  {handler}:
    worker: {{ queue: {queue}, handler: {handler}{worker_extra} }}
    effect: {effect}
steps:
  - id: call
    tool: {handler}
    with: {{ text: "{{{{ input.text }}}}", sleep: "{{{{ input.sleep }}}}" }}
{step_extra}
"""


@pytest.fixture
def client(server: Any, namespace: str) -> Iterator[tuple[Client, str]]:
    key = server.key(namespace)
    with Client(server.url, key) as client:
        yield client, key


def background(worker: Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return thread


def test_a_sync_handler_runs_a_step_and_the_run_completes(server: Any, client: tuple[Client, str]) -> None:
    c, key = client
    c.workflows.register(workflow("shout", queue="py", handler="shout"))
    worker = Worker(server.url, key, queue="py", wait_seconds=2)

    @worker.handler("shout")
    def shout(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
        assert ctx.attempt == 1 and ctx.step == "call"
        return {"text": task_input["text"].upper(), "run": ctx.run_id}

    thread = background(worker)
    run = c.runs.start("shout", {"text": "hello", "sleep": 0})
    done = c.runs.wait(run["run_id"], timeout=30)
    worker.stop()
    thread.join(timeout=10)
    assert done["status"] == "completed", done
    assert done["output"] == {"text": "HELLO", "run": run["run_id"]}
    tasks = c.tasks.list(run=run["run_id"])
    assert [t["state"] for t in tasks] == ["completed"]


def test_an_async_handler_runs_and_a_handler_error_fails_the_step_with_its_code(
    server: Any, client: tuple[Client, str]
) -> None:
    c, key = client
    c.workflows.register(workflow("checked", queue="py", handler="check"))
    worker = Worker(server.url, key, queue="py", wait_seconds=2)

    @worker.handler("check")
    async def check(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
        import asyncio

        await asyncio.sleep(0.01)
        if task_input["text"] == "bad":
            raise HandlerError("not_allowed", "bad text is refused")
        return {"ok": task_input["text"]}

    thread = background(worker)
    good = c.runs.wait(c.runs.start("checked", {"text": "fine", "sleep": 0})["run_id"], timeout=30)
    bad = c.runs.wait(c.runs.start("checked", {"text": "bad", "sleep": 0})["run_id"], timeout=30)
    worker.stop()
    thread.join(timeout=10)
    assert good["status"] == "completed" and good["output"] == {"ok": "fine"}
    assert bad["status"] == "failed"
    assert bad["error"]["code"] == "not_allowed", bad["error"]


def start_slow_worker(server: Any, key: str, queue: str, calls: Path, label: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    return subprocess.Popen(
        [sys.executable, str(HERE / "slow_worker.py"), server.url, key, queue, str(calls), label], env=env
    )


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)


def test_a_read_step_whose_worker_is_killed_runs_again_on_another_worker(
    server: Any, client: tuple[Client, str], tmp_path: Path
) -> None:
    c, key = client
    c.workflows.register(
        workflow(
            "resilient",
            queue="slow",
            handler="slow",
            effect="read",
            worker_extra=", heartbeat_timeout: 1s",
            step_extra="    retry: { max_attempts: 3, initial_delay: 10ms }",
        )
    )
    calls = tmp_path / "calls"
    first = start_slow_worker(server, key, "slow", calls, "first")
    run = c.runs.start("resilient", {"text": "x", "sleep": 30})
    wait_for(lambda: calls.exists() and len(calls.read_text().splitlines()) == 1)
    time.sleep(0.6)  # a heartbeat carries the handler's checkpoint
    first.send_signal(signal.SIGKILL)
    first.wait()
    second = start_slow_worker(server, key, "slow", calls, "second")
    try:
        # The first attempt's lease runs out (1 s without a heartbeat); its retry is a new
        # task, which the second worker takes.
        wait_for(lambda: len(calls.read_text().splitlines()) == 2, timeout=30)
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait()
    lines = [line.split(" ", 2) for line in calls.read_text().splitlines()]
    assert [attempt for _, attempt, _ in lines] == ["1", "2"], lines
    assert lines[0][0] != lines[1][0], "each attempt is a task of its own"
    assert json.loads(lines[0][2]) is None and json.loads(lines[1][2]) == {"from_attempt": 1}, "the retry resumes from the checkpoint"
    tasks = {t["attempt"]: t["state"] for t in c.tasks.list(run=run["run_id"])}
    assert tasks[1] == "lapsed", tasks
    c.runs.cancel(run["run_id"])


def test_an_unsafe_write_whose_worker_is_killed_ends_outcome_unknown_and_never_runs_twice(
    server: Any, client: tuple[Client, str], tmp_path: Path
) -> None:
    c, key = client
    c.workflows.register(
        workflow(
            "charge",
            queue="pay",
            handler="slow",
            effect="write",
            worker_extra=", heartbeat_timeout: 1s",
            step_extra="    retry: { max_attempts: 3, initial_delay: 10ms }",
        )
    )
    calls = tmp_path / "calls"
    worker = start_slow_worker(server, key, "pay", calls, "first")
    run = c.runs.start("charge", {"text": "x", "sleep": 30})
    wait_for(lambda: calls.exists() and len(calls.read_text().splitlines()) == 1)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    other = start_slow_worker(server, key, "pay", calls, "second")
    try:
        done = c.runs.wait(run["run_id"], timeout=30)
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    assert done["status"] == "failed", done
    assert done["error"]["code"] == "outcome_unknown", done["error"]
    assert len(calls.read_text().splitlines()) == 1, "the write never ran twice"


def test_a_stale_workers_late_completion_is_refused_and_the_journal_holds_one_completion(
    server: Any, client: tuple[Client, str]
) -> None:
    c, key = client
    c.workflows.register(
        workflow(
            "fenced",
            queue="stale",
            handler="echo",
            worker_extra=", heartbeat_timeout: 1s",
            step_extra="    retry: { max_attempts: 2, initial_delay: 10ms }",
        )
    )
    run = c.runs.start("fenced", {"text": "x", "sleep": 0})
    headers = {"authorization": f"Bearer {key}", "stepwright-protocol": "1"}
    claim = {"worker": {"id": "stale"}, "queue": "stale", "handlers": ["echo"], "wait_seconds": 10}
    with httpx.Client(base_url=server.url, headers=headers, timeout=20) as http:
        first = http.post("/v1/tasks/claim", json=claim).json()["tasks"][0]
        # The lease runs out; the retry is a new task another worker takes and completes.
        second = http.post("/v1/tasks/claim", json={**claim, "worker": {"id": "fresh"}}).json()["tasks"][0]
        assert second["id"] != first["id"] and second["attempt"] == 2
        done = http.post(f"/v1/tasks/{second['id']}/complete", json={"lease": second["lease"], "output": {"by": "fresh"}})
        assert done.status_code == 200, done.text
        late = http.post(f"/v1/tasks/{first['id']}/complete", json={"lease": first["lease"], "output": {"by": "stale"}})
        assert late.status_code == 409, late.text
        assert late.json()["code"] == "lease_lost"
        again = http.post(f"/v1/tasks/{second['id']}/complete", json={"lease": second["lease"], "output": {"by": "fresh"}})
        assert again.status_code == 200 and again.json()["state"] == "completed", "a repeat is answered the same"
    done_run = c.runs.wait(run["run_id"], timeout=30)
    assert done_run["output"] == {"by": "fresh"}
    steps = [s for s in done_run["steps"] if s["path"] == "call"]
    assert len(steps) == 1 and steps[0]["status"] == "completed"
    with pytest.raises(Conflict):
        c._request("POST", f"/v1/tasks/{first['id']}/complete", json={"lease": first["lease"], "output": {}})


def test_many_answers_in_one_request_are_each_fenced_by_their_own_lease(server: Any, client: tuple[Client, str]) -> None:
    c, key = client
    c.workflows.register(workflow("batched", queue="batch", handler="echo"))
    runs = [c.runs.start("batched", {"text": str(n), "sleep": 0}) for n in range(3)]
    headers = {"authorization": f"Bearer {key}", "stepwright-protocol": "1"}
    claim = {"worker": {"id": "batcher"}, "queue": "batch", "handlers": ["echo"], "max": 3, "wait_seconds": 10}
    with httpx.Client(base_url=server.url, headers=headers, timeout=20) as http:
        tasks: list[dict[str, Any]] = []
        while len(tasks) < 3:
            tasks += http.post("/v1/tasks/claim", json=claim).json()["tasks"]
        first, second, third = tasks
        answers = [
            {"id": first["id"], "lease": first["lease"], "outcome": "complete", "output": {"n": first["input"]["text"]}},
            {"id": second["id"], "lease": second["lease"] + 7, "outcome": "complete", "output": {}},
            {"id": third["id"], "lease": third["lease"], "outcome": "fail"},
            {"id": "tsk_nope", "lease": 1, "outcome": "cancelled"},
        ]
        taken = http.post("/v1/tasks/answers", json={"answers": answers})
        assert taken.status_code == 200, taken.text
        results = [(r["id"], r.get("state"), r.get("code")) for r in taken.json()["answers"]]
        assert results == [
            (first["id"], "completed", None),
            (second["id"], None, "lease_lost"),
            (third["id"], None, "bad_request"),
            ("tsk_nope", None, "not_found"),
        ], results
        rest = [
            {"id": second["id"], "lease": second["lease"], "outcome": "complete", "output": {"n": second["input"]["text"]}},
            {"id": third["id"], "lease": third["lease"], "outcome": "fail", "error": {"code": "nope", "message": "no"}},
        ]
        assert [r["state"] for r in http.post("/v1/tasks/answers", json={"answers": rest}).json()["answers"]] == [
            "completed",
            "failed",
        ]
        empty = http.post("/v1/tasks/answers", json={"answers": []})
        assert empty.status_code == 422 and empty.json()["code"] == "bad_request", empty.text
    outcomes = sorted(str(c.runs.wait(r["run_id"], timeout=30)["status"]) for r in runs)
    assert outcomes == ["completed", "completed", "failed"], outcomes


def test_a_task_nobody_claims_fails_no_worker_after_schedule_to_start(server: Any, client: tuple[Client, str]) -> None:
    c, _ = client
    c.workflows.register(workflow("lonely", queue="nobody", handler="echo", worker_extra=", schedule_to_start: 1s"))
    run = c.runs.start("lonely", {"text": "x", "sleep": 0})
    done = c.runs.wait(run["run_id"], timeout=30)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "no_worker", done["error"]
    assert "queue `nobody`" in done["error"]["message"]


def test_cancel_reaches_a_running_python_handler(server: Any, client: tuple[Client, str]) -> None:
    c, key = client
    c.workflows.register(workflow("long", queue="cancel", handler="wait"))
    worker = Worker(server.url, key, queue="cancel", wait_seconds=2)
    started = threading.Event()
    stopped_after: list[float] = []

    @worker.handler("wait")
    def wait(ctx: Any, task_input: Any) -> Any:
        started.set()
        begun = time.monotonic()
        while not ctx.is_cancelled:
            time.sleep(0.005)
            if time.monotonic() - begun > 20:
                return {"never": "cancelled"}
        stopped_after.append(time.monotonic())
        ctx.check_cancelled()

    thread = background(worker)
    run = c.runs.start("long", {"text": "x", "sleep": 0})
    assert started.wait(20)
    asked = time.monotonic()
    c.runs.cancel(run["run_id"])
    wait_for(lambda: bool(stopped_after), timeout=15)
    worker.stop()
    thread.join(timeout=10)
    assert stopped_after[0] - asked < 5.0
    assert c.runs.get(run["run_id"])["status"] == "cancelled"
    assert [t["state"] for t in c.tasks.list(run=run["run_id"])] == ["cancelled"]


def test_a_run_says_which_worker_it_waits_for(server: Any, client: tuple[Client, str]) -> None:
    c, key = client
    c.workflows.register(workflow("waits", queue="idle", handler="later", worker_extra=", schedule_to_start: 1m"))
    run = c.runs.start("waits", {"text": "x", "sleep": 0})
    wait_for(lambda: bool(c.runs.get(run["run_id"]).get("tasks")))
    waiting = c.runs.get(run["run_id"])["tasks"]
    assert [(t["step"], t["queue"], t["handler"], t["state"]) for t in waiting] == [("call", "idle", "later", "pending")]
    assert waiting[0]["reason"].startswith("no worker polls queue `idle` for `later`"), waiting[0]["reason"]
    # Once a worker holds it, the run says which.
    headers = {"authorization": f"Bearer {key}", "stepwright-protocol": "1"}
    claim = {"worker": {"id": "w-42"}, "queue": "idle", "handlers": ["later"], "wait_seconds": 5}
    task = httpx.post(f"{server.url}/v1/tasks/claim", json=claim, headers=headers, timeout=10).json()["tasks"][0]
    held = c.runs.get(run["run_id"])["tasks"]
    assert held[0]["state"] == "claimed" and held[0]["worker"] == "w-42"
    assert held[0]["reason"] == "worker w-42 runs `later` (attempt 1)"
    workers = httpx.get(f"{server.url}/v1/workers", headers=headers).json()["workers"]
    assert [(w["id"], w["queue"], w["handlers"]) for w in workers] == [("w-42", "idle", ["later"])]
    queues = httpx.get(f"{server.url}/v1/queues", headers=headers).json()["queues"]
    assert queues == [{"queue": "idle", "pending": 0, "claimed": 1, "pollers": 0, "handlers": ["later"]}]
    done = httpx.post(f"{server.url}/v1/tasks/{task['id']}/complete", json={"lease": task["lease"], "output": 1}, headers=headers)
    assert done.status_code == 200
    assert c.runs.wait(run["run_id"], timeout=30)["output"] == 1
    assert "tasks" not in c.runs.get(run["run_id"]), "a finished run waits on nothing"


def test_heartbeats_keep_a_handlers_lease_while_it_runs_longer_than_the_lease(
    server: Any, client: tuple[Client, str]
) -> None:
    c, key = client
    c.workflows.register(workflow("steady", queue="beat", handler="slow", worker_extra=", heartbeat_timeout: 1s"))
    worker = Worker(server.url, key, queue="beat", wait_seconds=2)

    @worker.handler("slow")
    def slow(ctx: Any, task_input: Any) -> Any:
        time.sleep(2.5)  # blocks its thread; the heartbeat has its own
        return {"attempt": ctx.attempt}

    thread = background(worker)
    done = c.runs.wait(c.runs.start("steady", {"text": "x", "sleep": 0})["run_id"], timeout=30)
    worker.stop()
    thread.join(timeout=10)
    assert done["status"] == "completed" and done["output"] == {"attempt": 1}, done


def test_validate_with_a_server_warns_when_no_live_worker_offers_a_handler(
    server: Any, client: tuple[Client, str], tmp_path: Path
) -> None:
    from conftest import BIN

    c, key = client
    file = tmp_path / "flow.yaml"
    file.write_text(workflow("checked-live", queue="live", handler="present@2"))

    def validate() -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, STEPWRIGHT_API_KEY=key)
        return subprocess.run([BIN, "validate", str(file), "--server", server.url], env=env, capture_output=True, text=True)

    before = validate()
    assert before.returncode == 0, before.stderr
    assert "no live worker offers `present@2` on queue `live`" in before.stderr, before.stderr
    worker = Worker(server.url, key, queue="live", wait_seconds=2)
    worker.handler("present@2")(lambda ctx, task_input: None)
    thread = background(worker)
    wait_for(lambda: "no live worker" not in validate().stderr)
    worker.stop()
    thread.join(timeout=10)
    assert validate().stdout.strip().endswith(": ok")


def test_a_replay_serves_a_worker_steps_journaled_output_with_no_worker(server: Any, client: tuple[Client, str]) -> None:
    c, key = client
    c.workflows.register(workflow("replayed", queue="replay", handler="once"))
    worker = Worker(server.url, key, queue="replay", wait_seconds=2)
    calls: list[int] = []

    @worker.handler("once")
    def once(ctx: Any, task_input: Any) -> Any:
        calls.append(ctx.attempt)
        return {"n": len(calls)}

    thread = background(worker)
    run = c.runs.start("replayed", {"text": "x", "sleep": 0})
    done = c.runs.wait(run["run_id"], timeout=30)
    worker.stop()
    thread.join(timeout=10)
    started = time.monotonic()
    report = c._request("POST", f"/v1/runs/{run['run_id']}/replay", json={})
    assert report["identical"] is True and report["replayed_output"] == done["output"] == {"n": 1}, report
    assert time.monotonic() - started < 2.0, "served, not dispatched to a worker that is not there"
    assert calls == [1], "the handler ran once"


def test_a_recompute_hands_a_read_step_to_the_worker_again_and_never_a_write(
    server: Any, client: tuple[Client, str]
) -> None:
    c, key = client
    source = workflow("requoted", queue="requote", handler="quote") + """
  - id: book
    tool: book
    with: { price: "{{ steps.call.output.price }}" }
"""
    source = source.replace(
        "steps:", "  book:\n    worker: { queue: requote, handler: book }\n    effect: write\nsteps:", 1
    )
    c.workflows.register(source)
    worker = Worker(server.url, key, queue="requote", wait_seconds=2)
    quotes: list[tuple[int, bool]] = []
    bookings: list[Any] = []

    @worker.handler("quote")
    def quote(ctx: Any, task_input: Any) -> Any:
        quotes.append((ctx.attempt, ctx.recompute))
        return {"price": 10 * len(quotes)}

    @worker.handler("book")
    def book(ctx: Any, task_input: Any) -> Any:
        bookings.append(task_input)
        return {"booked": task_input["price"]}

    thread = background(worker)
    try:
        run = c.runs.start("requoted", {"text": "x", "sleep": 0})
        done = c.runs.wait(run["run_id"], timeout=30)
        assert done["status"] == "completed" and done["output"] == {"booked": 10}, done
        report = c._request("POST", f"/v1/runs/{run['run_id']}/recompute", json={})
    finally:
        worker.stop()
        thread.join(timeout=10)
    assert quotes == [(1, False), (1, True)], "the read step went to the worker again, marked as a recompute"
    assert bookings == [{"price": 10}], "the write was served from the journal, never booked twice"
    changes = {step["path"]: step["change"] for step in report["steps"]}
    assert changes["call"] == "value_changed" and changes["book"] == "served", report
    tasks = c.tasks.list(run=run["run_id"])
    assert sorted(t.get("recompute", False) for t in tasks) == [False, False, True], tasks
    assert c.runs.get(run["run_id"])["output"] == {"booked": 10}, "the run itself is unchanged"


def test_an_asyncio_worker_runs_many_tasks_at_once_and_a_cancel_cancels_its_coroutine(
    server: Any, client: tuple[Client, str]
) -> None:
    import asyncio

    from stepwright import AsyncWorker

    c, key = client
    c.workflows.register(workflow("many-at-once", queue="aio", handler="nap"))
    worker = AsyncWorker(server.url, key, queue="aio", slots=50, wait_seconds=2)
    inside = {"now": 0, "most": 0}
    cancelled: list[str] = []

    @worker.handler("nap")
    async def nap(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
        inside["now"] += 1
        inside["most"] = max(inside["most"], inside["now"])
        try:
            await asyncio.sleep(30 if task_input["text"] == "forever" else 0.3)
        except asyncio.CancelledError:
            cancelled.append(ctx.run_id)
            raise
        finally:
            inside["now"] -= 1
        return {"text": task_input["text"]}

    thread = threading.Thread(target=lambda: asyncio.run(worker.run()), daemon=True)
    thread.start()
    runs = [c.runs.start("many-at-once", {"text": str(n), "sleep": 0}) for n in range(20)]
    forever = c.runs.start("many-at-once", {"text": "forever", "sleep": 0})
    done = [c.runs.wait(r["run_id"], timeout=30) for r in runs]
    assert [d["output"]["text"] for d in done] == [str(n) for n in range(20)]
    assert inside["most"] >= 10, f"tasks ran concurrently on one loop (at most {inside['most']} at once)"
    c.runs.cancel(forever["run_id"])
    wait_for(lambda: cancelled == [forever["run_id"]], timeout=10)
    worker.stop()
    thread.join(timeout=10)
    assert [t["state"] for t in c.tasks.list(run=forever["run_id"])] == ["cancelled"]


def test_a_worker_key_limited_to_a_queue_pattern_works_only_those_queues(server: Any, namespace: str) -> None:
    admin = server.key(namespace, "admin")
    limited = server.key(namespace, "worker:py-*")
    headers = {"authorization": f"Bearer {limited}", "stepwright-protocol": "1"}
    claim = {"worker": {"id": "w"}, "handlers": ["x"], "wait_seconds": 0}
    allowed = httpx.post(f"{server.url}/v1/tasks/claim", json={**claim, "queue": "py-gpu"}, headers=headers)
    assert allowed.status_code == 200, allowed.text
    refused = httpx.post(f"{server.url}/v1/tasks/claim", json={**claim, "queue": "ts"}, headers=headers)
    assert refused.status_code == 403 and "py-*" in refused.json()["detail"], refused.text
    # An admin key is no worker's: claiming is given explicitly.
    as_admin = httpx.post(
        f"{server.url}/v1/tasks/claim", json={**claim, "queue": "py-gpu"}, headers={"authorization": f"Bearer {admin}"}
    )
    assert as_admin.status_code == 403
    # A protocol version the server does not speak is refused by name; health says which it speaks.
    newer = httpx.post(
        f"{server.url}/v1/tasks/claim", json={**claim, "queue": "py-gpu"}, headers={**headers, "stepwright-protocol": "9"}
    )
    assert newer.status_code == 400 and newer.json()["code"] == "protocol_unsupported", newer.text
    assert httpx.get(f"{server.url}/v1/health").json()["protocols"] == {"worker": [1]}


def test_only_a_key_of_the_tasks_namespace_working_its_queue_answers_it(server: Any, namespace: str) -> None:
    """The answer routes check the task's tenant and queue in the answer's own write: a key
    of another namespace finds no such task, one limited to other queues is forbidden, and
    neither changes the task."""
    key = server.key(namespace)
    c = Client(server.url, key)
    c.workflows.register(workflow("gated", queue="ts-gate", handler="gate"))
    run = c.runs.start("gated", {"text": "x", "sleep": 0})
    protocol = {"stepwright-protocol": "1"}
    claimed: list[Any] = []
    for _ in range(100):
        claimed = httpx.post(
            f"{server.url}/v1/tasks/claim",
            json={"worker": {"id": "w"}, "queue": "ts-gate", "handlers": ["gate"], "wait_seconds": 1},
            headers={"authorization": f"Bearer {key}", **protocol},
        ).json()["tasks"]
        if claimed:
            break
    assert claimed, "the task was dispatched"
    task = claimed[0]
    answer = {"lease": task["lease"], "output": {"by": "intruder"}}
    stranger = server.key(f"{namespace}-other")
    other_queues = server.key(namespace, "worker:py-*")
    for who, status in ((stranger, 404), (other_queues, 403)):
        headers = {"authorization": f"Bearer {who}", **protocol}
        one = httpx.post(f"{server.url}/v1/tasks/{task['id']}/complete", json=answer, headers=headers)
        assert one.status_code == status, one.text
        batch = httpx.post(
            f"{server.url}/v1/tasks/answers",
            json={"answers": [{"id": task["id"], "lease": task["lease"], "outcome": "complete", "output": {}}]},
            headers=headers,
        )
        assert batch.status_code == 200, batch.text
        assert batch.json()["answers"][0]["code"] == ("not_found" if status == 404 else "access_denied"), batch.text
    assert [t["state"] for t in c.tasks.list(run=run["run_id"])] == ["claimed"], "nobody else changed it"
    done = httpx.post(
        f"{server.url}/v1/tasks/{task['id']}/complete",
        json={"lease": task["lease"], "output": {"by": "its worker"}},
        headers={"authorization": f"Bearer {key}", **protocol},
    )
    assert done.status_code == 200 and done.json()["state"] == "completed", done.text
    assert c.runs.wait(run["run_id"], timeout=30)["output"] == {"by": "its worker"}


def test_a_deferred_task_frees_the_worker_and_is_completed_later_from_elsewhere(
    server: Any, client: tuple[Client, str]
) -> None:
    from stepwright import Defer

    c, key = client
    c.workflows.register(workflow("later", queue="defer", handler="hand-off", worker_extra=", heartbeat_timeout: 1s"))
    worker = Worker(server.url, key, queue="defer", slots=1, wait_seconds=2)
    handed: list[tuple[str, int]] = []

    @worker.handler("hand-off")
    def hand_off(ctx: Any, task_input: Any) -> Any:
        handed.append((ctx.task_id, ctx.lease))
        return Defer(seconds=60)  # far past the 1 s heartbeat timeout: no heartbeats needed

    thread = background(worker)
    run = c.runs.start("later", {"text": "x", "sleep": 0})
    wait_for(lambda: bool(handed))
    time.sleep(2.5)  # past the heartbeat timeout: a deferred lease does not lapse
    task_id, lease = handed[0]
    assert [t["state"] for t in c.tasks.list(run=run["run_id"])] == ["claimed"]
    assert c.runs.get(run["run_id"])["status"] in ("running", "suspended")
    c.tasks.complete(task_id, lease, {"done": "elsewhere"})
    done = c.runs.wait(run["run_id"], timeout=30)
    worker.stop()
    thread.join(timeout=10)
    assert done["output"] == {"done": "elsewhere"}


GRADED = """
workflow: graded
input: { type: object, properties: { n: { type: integer } } }
steps:
  - id: label
    set: "n={{ input.n }}"
"""


def test_a_python_handler_scores_an_experiment(server: Any, client: tuple[Client, str]) -> None:
    """A `worker` evaluator: the experiment (run by the server) asks a Python handler about
    each run whose output changed; its score and reason are the report's."""
    c, key = client
    c.workflows.register(GRADED)
    runs = [c.runs.start("graded", {"n": n}, wait_seconds=10)["run_id"] for n in range(4)]
    worker = Worker(server.url, key, queue="grading", wait_seconds=2)
    asked: list[dict[str, Any]] = []

    @worker.handler("grade")
    def grade(ctx: Any, pair: dict[str, Any]) -> dict[str, Any]:
        asked.append(pair)
        worse = pair["new"] == "odd"
        return {"score": -1 if worse else 1, "reason": f"{pair['old']} became {pair['new']}"}

    thread = background(worker)
    changed = GRADED.replace('set: "n={{ input.n }}"', "set: \"{{ 'odd' if input.n % 2 == 1 else 'number ' ~ input.n }}\"")
    started = c.experiments.start({
        "experiment": "graded by python",
        "runs": {"workflow": "graded"},
        "change": {"source": changed},
        "evaluators": [{"name": "python", "worker": {"queue": "grading", "handler": "grade"}}],
    })
    ended = c.experiments.wait(started["id"], timeout=60)
    worker.stop()
    thread.join(timeout=10)
    assert ended["status"] == "completed", ended
    by_run = {r["run"]: r for r in ended["report"]["runs"]}
    assert sorted(by_run) == sorted(runs)
    # Every output changed, and the handler was asked about each: "odd" is worse, "number 0" better.
    assert sorted(json.dumps(p, sort_keys=True) for p in asked) == sorted(
        json.dumps({"input": {"n": n}, "old": f"n={n}", "new": "odd" if n % 2 else f"number {n}"}, sort_keys=True)
        for n in range(4)
    )
    for n, run in enumerate(runs):
        [score] = by_run[run]["scores"]
        assert score["new"] == (-1.0 if n % 2 else 1.0), by_run[run]
        assert score["reason"] == f"n={n} became {'odd' if n % 2 else f'number {n}'}"
        assert by_run[run]["verdict"] == ("regressed" if n % 2 else "improved")
    totals = ended["report"]["totals"]
    assert (totals["improved"], totals["regressed"]) == (2, 2), totals


def test_a_full_worker_claims_again_as_soon_as_a_slot_frees(
    server: Any, client: tuple[Client, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker with every slot busy asks only for cancels, and never in a long poll that
    would keep it from claiming when a slot frees: the threaded worker sends control polls
    that answer at once, the asyncio worker's control poll is cancelled when a slot frees."""
    import asyncio

    from stepwright import AsyncWorker

    from stepwright._lane import H11Lane

    c, key = client
    claims: list[dict[str, Any]] = []
    cancelled_polls: list[dict[str, Any]] = []
    sync_post, lane_post = httpx.Client.post, H11Lane.post

    def recording_post(self: httpx.Client, url: str, **kwargs: Any) -> httpx.Response:
        if str(url).endswith("/v1/tasks/claim"):
            claims.append(kwargs["json"])
        return sync_post(self, url, **kwargs)

    async def recording_lane_post(self: H11Lane, path: str, body: Any, *, timeout: float) -> httpx.Response:
        if path != "/v1/tasks/claim":
            return await lane_post(self, path, body, timeout=timeout)
        claims.append(body)
        try:
            return await lane_post(self, path, body, timeout=timeout)
        except asyncio.CancelledError:
            cancelled_polls.append(body)
            raise

    monkeypatch.setattr(httpx.Client, "post", recording_post)
    monkeypatch.setattr(H11Lane, "post", recording_lane_post)

    for kind in ("threaded", "asyncio"):
        claims.clear()
        queue = f"one-slot-{kind}"
        c.workflows.register(workflow(queue, queue=queue, handler="hold"))
        first_may_finish = threading.Event()
        started: list[str] = []

        def hold(ctx: Any, task_input: dict[str, Any]) -> dict[str, Any]:
            started.append(task_input["text"])
            if len(started) == 1:
                first_may_finish.wait(30)
            return {"text": task_input["text"]}

        if kind == "threaded":
            worker: Any = Worker(server.url, key, queue=queue, slots=1, wait_seconds=2)
            worker.handler("hold")(hold)
            thread = background(worker)
        else:
            worker = AsyncWorker(server.url, key, queue=queue, slots=1, wait_seconds=2)
            worker.handler("hold")(hold)
            thread = threading.Thread(target=lambda: asyncio.run(worker.run()), daemon=True)
            thread.start()
        first = c.runs.start(queue, {"text": "a", "sleep": 0})
        wait_for(lambda: started == ["a"], timeout=20)
        second = c.runs.start(queue, {"text": "b", "sleep": 0})
        wait_for(lambda: any(claim["max"] == 0 for claim in claims), timeout=20)
        first_may_finish.set()
        assert c.runs.wait(second["run_id"], timeout=30)["status"] == "completed"
        assert c.runs.wait(first["run_id"], timeout=30)["status"] == "completed"
        control = [claim for claim in claims if claim["max"] == 0]
        assert control and all(len(claim["holding"]) == 1 for claim in control)
        if kind == "threaded":
            assert all(claim["wait_seconds"] == 0 for claim in control), control
        else:
            assert cancelled_polls, "the asyncio worker's control poll gave way when its slot freed"
        worker.stop()
        thread.join(timeout=40)
        assert started == ["a", "b"]
