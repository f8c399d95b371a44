"""A step worker: runs the handlers of ``worker:`` tools in this process.

It long-polls ``POST /v1/tasks/claim`` for tasks of one queue, runs each in a slot (a
thread; an ``async def`` handler runs on an event loop of its own in that thread), renews
every lease it holds in one heartbeat from its own thread (so a handler that blocks never
starves it), and answers each task under its lease. Retries, timeouts and the effect fence
stay in the engine: a handler that raises fails the attempt, and a worker that dies lets its
lease run out — the step is tried again, or ends ``outcome_unknown`` for an unsafe write.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from queue import Empty, SimpleQueue
from typing import Any, Awaitable, Callable, Union

import httpx

from .errors import Conflict, StepwrightError, raise_for_problem

log = logging.getLogger("stepwright.worker")

PROTOCOL = "1"
SDK = "py/0.1.0"

Handler = Callable[["TaskContext", Any], Union[Any, Awaitable[Any]]]


@dataclass(frozen=True)
class Defer:
    """Return it from a handler to complete later (asynchronous completion): the task's
    lease lasts ``seconds`` without heartbeats, the worker's slot is freed, and whoever holds
    ``ctx.task_id`` and ``ctx.lease`` answers it with ``Client.tasks.complete`` or ``fail``."""

    seconds: float


class TaskCancelled(Exception):
    """Raised by :meth:`TaskContext.check_cancelled` once the run was cancelled or the lease lost."""


class HandlerError(Exception):
    """Raise it from a handler to fail the attempt with your own ``code`` and retryability."""

    def __init__(self, code: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


@dataclass
class TaskContext:
    """What a handler gets besides its input."""

    task_id: str
    handler: str
    attempt: int
    run_id: str
    workflow: str
    step: str
    idempotency_key: str | None
    details: Any
    lease: int
    lease_ms: int = 10_000
    recompute: bool = False
    """A recompute's task (a what-if over a past run): its answer is compared, never kept
    by the run."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    _details_out: list[Any] = field(default_factory=list)
    _chunks: list[dict[str, Any]] = field(default_factory=list)
    _chunk_seq: int = 0
    _chunk_lock: threading.Lock = field(default_factory=threading.Lock)

    def emit(self, *, token: str | None = None, progress: Any = None, log: str | None = None) -> None:
        """Streams to the run: ``token`` text live on its event stream (not journaled),
        ``progress`` as a journaled ``step.progress`` event, ``log`` as ``step.log``. Sent in
        batches every few tens of milliseconds, and before the task's answer."""
        with self._chunk_lock:
            if token is not None:
                self._chunks.append({"kind": "token", "text": token})
            if progress is not None:
                self._chunks.append({"kind": "progress", "data": progress})
            if log is not None:
                self._chunks.append({"kind": "log", "text": log})

    def heartbeat(self, details: Any = None) -> None:
        """Keeps ``details`` for a later attempt (sent with the next heartbeat)."""
        self._details_out.append(details)

    @property
    def is_cancelled(self) -> bool:
        """Whether the run was cancelled (or this worker lost the lease): stop soon."""
        return self.cancelled.is_set()

    def check_cancelled(self) -> None:
        """Raises :class:`TaskCancelled` once cancelled; call it between pieces of work."""
        if self.cancelled.is_set():
            raise TaskCancelled(self.task_id)


def context_of(task: dict[str, Any]) -> TaskContext:
    """A handler's context for a claimed task."""
    return TaskContext(
        task_id=task["id"],
        handler=task["handler"],
        attempt=task["attempt"],
        run_id=task["run"]["id"],
        workflow=task["run"]["workflow"],
        step=task["step"],
        idempotency_key=task.get("idempotency_key"),
        details=task.get("details"),
        lease=task["lease"],
        lease_ms=task.get("lease_ms", 10_000),
        recompute=task.get("recompute", False),
    )


def heartbeat_interval(held: list[TaskContext]) -> float:
    """A third of the shortest lease held, at most 10 s (as the server advises)."""
    return max(0.05, min(10.0, min(ctx.lease_ms for ctx in held) / 3000))


def heartbeat_body(worker_id: str, held: list[TaskContext]) -> dict[str, Any]:
    """One heartbeat for every lease held, with each task's latest details."""
    tasks: list[dict[str, Any]] = []
    for ctx in held:
        entry: dict[str, Any] = {"id": ctx.task_id, "lease": ctx.lease}
        if ctx._details_out:
            entry["details"] = ctx._details_out[-1]
        tasks.append(entry)
    return {"worker_id": worker_id, "tasks": tasks}


def answer_for(ctx: TaskContext, output: Any = None, error: BaseException | None = None) -> tuple[str, dict[str, Any]]:
    """What a handler's return (``output``) or raise (``error``) answers, as the verb of the
    task endpoints and its body (without the lease): a cancel, a failure (a
    :class:`HandlerError`'s own code, else ``execution_failed``, retryable), a
    :class:`Defer`, or the output. Both workers answer the same way."""
    if isinstance(error, (TaskCancelled, asyncio.CancelledError)) or (error is None and ctx.cancelled.is_set()):
        return "cancelled", {}
    if isinstance(error, HandlerError):
        return "fail", {"error": {"code": error.code, "message": error.message, "retryable": error.retryable}}
    if error is not None:
        return "fail", {"error": {"code": "execution_failed", "message": f"{type(error).__name__}: {error}", "retryable": True}}
    if isinstance(output, Defer):
        return "defer", {"for_ms": max(1, int(output.seconds * 1000))}
    return "complete", {"output": output}


#: The answers one ``POST /v1/tasks/answers`` carries at most.
BATCH = 500

#: How often a worker with every slot busy asks for cancels while it waits for a slot.
FULL_POLL = 0.25


def batched_item(task_id: str, lease: int, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    """One answer of ``POST /v1/tasks/answers``."""
    return {"id": task_id, "lease": lease, "outcome": verb, **body}


def report_refusals(items: list[dict[str, Any]], taken: dict[str, Any]) -> None:
    """Logs each answer the server refused (a lost lease: another worker has the task)."""
    for item, result in zip(items, taken.get("answers", [])):
        if result.get("code"):
            log.warning("task %s: %s refused (%s); the result is dropped", item["id"], item["outcome"], result["code"])


def to_stop(answer: dict[str, Any]) -> list[str]:
    """The tasks a heartbeat's answer says to stop (cancelled runs, lost leases)."""
    return [beat["id"] for beat in answer.get("tasks", []) if beat["state"] in ("cancel", "lost")]


class Worker:
    """``Worker(base_url, api_key, queue="default", slots=4)``; register handlers with
    :meth:`handler`, then :meth:`run` until :meth:`stop`."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        queue: str = "default",
        slots: int = 4,
        name: str | None = None,
        wait_seconds: int = 30,
    ) -> None:
        self.queue = queue
        self.slots = slots
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.name = name or socket.gethostname()
        self.wait_seconds = wait_seconds
        self._handlers: dict[str, Handler] = {}
        headers = {
            "authorization": f"Bearer {api_key}",
            "stepwright-protocol": PROTOCOL,
            "user-agent": f"stepwright-{SDK}",
        }
        # A long poll answers within `wait_seconds`; the read timeout leaves room for it.
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=httpx.Timeout(10.0, read=wait_seconds + 10.0)
        )
        self._beat_http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=10.0)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[str, TaskContext] = {}
        self._slot_freed = threading.Event()
        self._answers: SimpleQueue[tuple[dict[str, Any], threading.Event] | None] = SimpleQueue()

    def handler(self, name: str) -> Callable[[Handler], Handler]:
        """Registers a handler (``name`` or ``name@version``) for the queue's tasks."""

        def register(fn: Handler) -> Handler:
            self._handlers[name] = fn
            return fn

        return register

    def stop(self) -> None:
        """Stops claiming; tasks running finish and are answered, then :meth:`run` returns."""
        self._stop.set()

    def run(self) -> None:
        """Claims and runs tasks until :meth:`stop` (or Ctrl-C)."""
        if not self._handlers:
            raise ValueError("register at least one handler with @worker.handler(name)")
        beat = threading.Thread(target=self._heartbeat_loop, name="stepwright-heartbeat", daemon=True)
        beat.start()
        answering = threading.Thread(target=self._answer_loop, name="stepwright-answers", daemon=True)
        answering.start()
        pool = ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="stepwright-slot")
        try:
            while not self._stop.is_set():
                self._slot_freed.clear()
                with self._lock:
                    free = self.slots - len(self._running)
                    holding = list(self._running)
                # A full worker waits here for a slot, asking only for cancels now and then
                # (a control poll that does not wait): a long poll would keep it from
                # claiming when a slot frees.
                if free <= 0 and self._slot_freed.wait(FULL_POLL):
                    continue
                try:
                    answer = self._claim(free, holding)
                except (httpx.TransportError, StepwrightError) as error:
                    log.warning("claim failed: %s", error)
                    self._stop.wait(1.0)
                    continue
                for task_id in answer.get("cancel", []):
                    self._cancel(task_id)
                for task in answer.get("tasks", []):
                    if self._stop.is_set():
                        self._answer(task["id"], "release", {"lease": task["lease"]})
                        continue
                    ctx = context_of(task)
                    with self._lock:
                        self._running[ctx.task_id] = ctx
                    future = pool.submit(self._execute, ctx, task["input"])
                    future.add_done_callback(self._forget(ctx.task_id))
        except KeyboardInterrupt:
            self._stop.set()
        finally:
            pool.shutdown(wait=True)
            self._answers.put(None)
            answering.join(timeout=30)
            self._http.close()

    def _forget(self, task_id: str) -> Callable[[Future[None]], None]:
        def done(_: Future[None]) -> None:
            with self._lock:
                self._running.pop(task_id, None)
            self._slot_freed.set()

        return done

    def _claim(self, free: int, holding: list[str]) -> dict[str, Any]:
        body = {
            "worker": {"id": self.id, "name": self.name, "sdk": SDK},
            "queue": self.queue,
            "handlers": sorted(self._handlers),
            "max": min(max(free, 0), 100),  # the most one claim takes
            # A full worker's control poll answers at once (it waits for a slot itself).
            "wait_seconds": self.wait_seconds if free > 0 else 0,
            "holding": holding,
        }
        response = self._http.post("/v1/tasks/claim", json=body)
        raise_for_problem(response)
        result: dict[str, Any] = response.json()
        return result

    def _cancel(self, task_id: str) -> None:
        with self._lock:
            ctx = self._running.get(task_id)
        if ctx is not None:
            ctx.cancelled.set()

    def _execute(self, ctx: TaskContext, task_input: Any) -> None:
        fn = self._handlers.get(ctx.handler) or self._handlers.get(ctx.handler.split("@")[0])
        if fn is None:
            self._answer(ctx.task_id, "release", {"lease": ctx.lease})
            return
        try:
            if inspect.iscoroutinefunction(fn):
                output = asyncio.run(self._run_async(fn, ctx, task_input))
            else:
                output = fn(ctx, task_input)
        except Exception as error:  # noqa: BLE001 - any handler failure fails the attempt
            verb, body = answer_for(ctx, error=error)
        else:
            verb, body = answer_for(ctx, output)
        self._answer(ctx.task_id, verb, {"lease": ctx.lease, **body})

    async def _run_async(self, fn: Handler, ctx: TaskContext, task_input: Any) -> Any:
        work = asyncio.ensure_future(fn(ctx, task_input))
        while not work.done():
            await asyncio.wait({work}, timeout=0.02)
            if ctx.cancelled.is_set() and not work.done():
                work.cancel()
                try:
                    await work
                except asyncio.CancelledError:
                    raise TaskCancelled(ctx.task_id) from None
        return work.result()

    def _flush(self, ctx: TaskContext) -> None:
        with ctx._chunk_lock:
            if not ctx._chunks:
                return
            items, ctx._chunks = ctx._chunks, []
            seq = ctx._chunk_seq
            ctx._chunk_seq += 1
            try:
                response = self._beat_http.post(
                    f"/v1/tasks/{ctx.task_id}/chunks", json={"lease": ctx.lease, "seq": seq, "items": items}
                )
                raise_for_problem(response)
            except (httpx.TransportError, StepwrightError) as error:
                log.warning("task %s: chunks not sent (%s)", ctx.task_id, error)

    def _answer(self, task_id: str, verb: str, body: dict[str, Any]) -> None:
        """Answers a task: a deferral on its own, every other answer through the answer
        thread, which sends what the slots answered meanwhile in one request. Returns once
        it is sent."""
        with self._lock:
            ctx = self._running.get(task_id)
        if ctx is not None:
            self._flush(ctx)
        if verb == "defer":
            self._send_one(task_id, verb, body)
            return
        lease = body.pop("lease")
        sent = threading.Event()
        self._answers.put((batched_item(task_id, lease, verb, body), sent))
        sent.wait()

    def _send_one(self, task_id: str, verb: str, body: dict[str, Any]) -> None:
        for attempt in range(5):
            try:
                response = self._beat_http.post(f"/v1/tasks/{task_id}/{verb}", json=body)
                raise_for_problem(response)
                return
            except Conflict as error:
                log.warning("task %s: %s refused (%s); the result is dropped", task_id, verb, error.code)
                return
            except (httpx.TransportError, StepwrightError) as error:
                log.warning("task %s: %s failed (%s); retrying", task_id, verb, error)
                self._stop.wait(0.2 * 2**attempt)

    def _answer_loop(self) -> None:
        """Sends the slots' answers: whatever is waiting, up to :data:`BATCH`, in one request."""
        with httpx.Client(base_url=self._http.base_url, headers=self._http.headers, timeout=10.0) as http:
            while True:
                first = self._answers.get()
                if first is None:
                    return
                batch = [first]
                while len(batch) < BATCH:
                    try:
                        following = self._answers.get_nowait()
                    except Empty:
                        break
                    if following is None:
                        self._answers.put(None)
                        break
                    batch.append(following)
                items = [item for item, _ in batch]
                for attempt in range(5):
                    try:
                        response = http.post("/v1/tasks/answers", json={"answers": items})
                        raise_for_problem(response)
                        report_refusals(items, response.json())
                        break
                    except (httpx.TransportError, StepwrightError) as error:
                        log.warning("%d answers not sent (%s); retrying", len(items), error)
                        time.sleep(0.2 * 2**attempt)
                for _, sent in batch:
                    sent.set()

    def _heartbeat_loop(self) -> None:
        # Ticks often and beats when the advised interval has passed since the last beat, so
        # a shorter interval learned from a claim applies at once.
        last = time.monotonic()
        while True:
            time.sleep(0.02)
            with self._lock:
                held = list(self._running.values())
            if not held:
                if self._stop.is_set():
                    return
                last = time.monotonic()
                continue
            # What handlers emitted goes out every tick (a few tens of milliseconds).
            for ctx in held:
                if ctx._chunks:
                    self._flush(ctx)
            if time.monotonic() - last < heartbeat_interval(held):
                continue
            last = time.monotonic()
            try:
                response = self._beat_http.post("/v1/tasks/heartbeat", json=heartbeat_body(self.id, held))
                raise_for_problem(response)
            except (httpx.TransportError, StepwrightError) as error:
                log.warning("heartbeat failed: %s", error)
                continue
            for task_id in to_stop(response.json()):
                self._cancel(task_id)
