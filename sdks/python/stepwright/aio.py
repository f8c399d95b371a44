"""An asyncio step worker: every task a coroutine on one event loop (sync handlers in the
loop's thread pool), the claims and answers on lanes of their own (``_lane``: one keep-alive
connection each, lighter than ``httpx`` on the hot path), everything else on one
``httpx.AsyncClient``, and the heartbeat on a thread of its own — so a handler that blocks
the loop never starves it."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import httpx

from ._lane import Lane, open_lane
from .errors import Conflict, StepwrightError, raise_for_problem
from .worker import (
    BATCH,
    PROTOCOL,
    SDK,
    Handler,
    TaskContext,
    answer_for,
    batched_item,
    context_of,
    heartbeat_body,
    heartbeat_interval,
    report_refusals,
    to_stop,
)

log = logging.getLogger("stepwright.worker")


class AsyncWorker:
    """``AsyncWorker(base_url, api_key, queue="default", slots=100)``; register handlers with
    :meth:`handler` (``async def`` or plain functions), then ``await worker.run()`` until
    :meth:`stop`. A cancelled run cancels its handler's coroutine (``CancelledError`` inside
    it); a sync handler sees ``ctx.is_cancelled``."""

    def __init__(
        self, base_url: str, api_key: str, *, queue: str = "default", slots: int = 100, wait_seconds: int = 30
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.queue = queue
        self.slots = slots
        self.wait_seconds = wait_seconds
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.headers = {
            "authorization": f"Bearer {api_key}",
            "stepwright-protocol": PROTOCOL,
            "user-agent": f"stepwright-{SDK}",
        }
        self._handlers: dict[str, Handler] = {}
        self._running: dict[str, tuple[TaskContext, asyncio.Task[None]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def handler(self, name: str) -> Any:
        """Registers a handler (``name`` or ``name@version``)."""

        def register(fn: Handler) -> Handler:
            self._handlers[name] = fn
            return fn

        return register

    def stop(self) -> None:
        """Stops claiming; running tasks finish and are answered, then :meth:`run` returns."""
        self._stop.set()

    async def run(self) -> None:
        if not self._handlers:
            raise ValueError("register at least one handler with @worker.handler(name)")
        self._loop = asyncio.get_running_loop()
        self._slot_freed = asyncio.Event()
        beat = threading.Thread(target=self._heartbeat_loop, name="stepwright-heartbeat", daemon=True)
        beat.start()
        timeout = httpx.Timeout(10.0, read=self.wait_seconds + 10.0)
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=timeout, limits=limits) as http:
            self._http = http
            claims = open_lane(self.base_url, self.headers, http)
            self._answers: asyncio.Queue[tuple[dict[str, Any], asyncio.Future[None]]] = asyncio.Queue()
            self._unsent: set[asyncio.Future[None]] = set()
            # Two senders: one batch goes out while the next gathers.
            lanes = [open_lane(self.base_url, self.headers, http) for _ in range(2)]
            answering = [asyncio.ensure_future(self._answer_loop(lane)) for lane in lanes]
            while not self._stop.is_set():
                self._slot_freed.clear()
                with self._lock:
                    free = self.slots - len(self._running)
                    holding = list(self._running)
                body = {
                    "worker": {"id": self.id, "sdk": SDK},
                    "queue": self.queue,
                    "handlers": sorted(self._handlers),
                    "max": min(max(free, 0), 100),  # the most one claim takes
                    "wait_seconds": self.wait_seconds if free > 0 else 1,
                    "holding": holding,
                }
                try:
                    claiming = asyncio.ensure_future(claims.post("/v1/tasks/claim", body, timeout=self.wait_seconds + 10.0))
                    if free <= 0:
                        # A full worker's control poll (cancels only, no task can come with
                        # it) gives way as soon as a slot frees: the next claim takes work.
                        freed = asyncio.ensure_future(self._slot_freed.wait())
                        await asyncio.wait({claiming, freed}, return_when=asyncio.FIRST_COMPLETED)
                        freed.cancel()
                        if not claiming.done():
                            claiming.cancel()
                            # Its lane is free again (its connection dropped) only once the
                            # cancel has landed.
                            await asyncio.gather(claiming, return_exceptions=True)
                            continue
                    response = await claiming
                    raise_for_problem(response)
                    answer = response.json()
                except (httpx.TransportError, StepwrightError) as error:
                    log.warning("claim failed: %s", error)
                    await asyncio.sleep(1.0)
                    continue
                for task_id in answer.get("cancel", []):
                    self._cancel(task_id)
                for task in answer.get("tasks", []):
                    ctx = context_of(task)
                    job = asyncio.ensure_future(self._execute(ctx, task["input"]))
                    with self._lock:
                        self._running[ctx.task_id] = (ctx, job)
                    job.add_done_callback(self._forgetter(ctx.task_id))
                # The handlers just scheduled start before the next claim is sent, and the
                # answers of those that returned at once go out first (the handler's
                # answer wakes a sender, which writes its request on the loop's next turn):
                # a run waits for the answer, not for this worker's next claim.
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            with self._lock:
                jobs = [job for _, job in self._running.values()]
            await asyncio.gather(*jobs, return_exceptions=True)
            await asyncio.gather(*list(self._unsent), return_exceptions=True)
            for sender in answering:
                sender.cancel()
            for lane in [claims, *lanes]:
                await lane.aclose()

    def _forgetter(self, task_id: str) -> Any:
        def forget(_: object) -> None:
            with self._lock:
                self._running.pop(task_id, None)
            self._slot_freed.set()

        return forget

    def _cancel(self, task_id: str) -> None:
        with self._lock:
            held = self._running.get(task_id)
        if held is None:
            return
        ctx, job = held
        ctx.cancelled.set()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(job.cancel)

    async def _execute(self, ctx: TaskContext, task_input: Any) -> None:
        fn = self._handlers.get(ctx.handler) or self._handlers.get(ctx.handler.split("@")[0])
        if fn is None:
            await self._answer(ctx, "release", {})
            return
        try:
            if inspect.iscoroutinefunction(fn):
                output = await fn(ctx, task_input)
            else:
                output = await asyncio.get_running_loop().run_in_executor(None, fn, ctx, task_input)
        except (asyncio.CancelledError, Exception) as error:  # noqa: BLE001 - any failure fails the attempt
            verb, body = answer_for(ctx, error=error)
        else:
            verb, body = answer_for(ctx, output)
        await self._answer(ctx, verb, body)

    async def _answer(self, ctx: TaskContext, verb: str, body: dict[str, Any]) -> None:
        """Answers a task: a deferral on its own, every other answer through the answer
        coroutines, which send what the handlers answered meanwhile in one request. Returns
        once it is sent."""
        # What the handler emitted goes before its answer.
        await self._flush(ctx)
        if verb == "defer":
            await self._send_one(ctx, verb, body)
            return
        sent = asyncio.get_running_loop().create_future()
        self._unsent.add(sent)
        sent.add_done_callback(self._unsent.discard)
        self._answers.put_nowait((batched_item(ctx.task_id, ctx.lease, verb, body), sent))
        # Shielded: a cancel arriving now does not take back an answer already given.
        await asyncio.shield(sent)

    async def _send_one(self, ctx: TaskContext, verb: str, body: dict[str, Any]) -> None:
        for attempt in range(5):
            try:
                response = await self._http.post(f"/v1/tasks/{ctx.task_id}/{verb}", json={"lease": ctx.lease, **body})
                raise_for_problem(response)
                return
            except Conflict as error:
                log.warning("task %s: %s refused (%s); the result is dropped", ctx.task_id, verb, error.code)
                return
            except (httpx.TransportError, StepwrightError) as error:
                log.warning("task %s: %s failed (%s); retrying", ctx.task_id, verb, error)
                await asyncio.sleep(0.2 * 2**attempt)

    async def _answer_loop(self, lane: Lane) -> None:
        """Sends the handlers' answers: whatever is waiting, up to :data:`BATCH`, in one request."""
        while True:
            batch = [await self._answers.get()]
            while len(batch) < BATCH and not self._answers.empty():
                batch.append(self._answers.get_nowait())
            items = [item for item, _ in batch]
            for attempt in range(5):
                try:
                    response = await lane.post("/v1/tasks/answers", {"answers": items}, timeout=10.0)
                    raise_for_problem(response)
                    report_refusals(items, response.json())
                    break
                except (httpx.TransportError, StepwrightError) as error:
                    log.warning("%d answers not sent (%s); retrying", len(items), error)
                    await asyncio.sleep(0.2 * 2**attempt)
            for _, sent in batch:
                if not sent.done():
                    sent.set_result(None)

    async def _flush(self, ctx: TaskContext) -> None:
        with ctx._chunk_lock:
            if not ctx._chunks:
                return
            items, ctx._chunks = ctx._chunks, []
            seq = ctx._chunk_seq
            ctx._chunk_seq += 1
        try:
            response = await self._http.post(f"/v1/tasks/{ctx.task_id}/chunks", json={"lease": ctx.lease, "seq": seq, "items": items})
            raise_for_problem(response)
        except (httpx.TransportError, StepwrightError) as error:
            log.warning("task %s: chunks not sent (%s)", ctx.task_id, error)

    def _flush_from_thread(self, http: httpx.Client, ctx: TaskContext) -> None:
        with ctx._chunk_lock:
            if not ctx._chunks:
                return
            items, ctx._chunks = ctx._chunks, []
            seq = ctx._chunk_seq
            ctx._chunk_seq += 1
            try:
                response = http.post(f"/v1/tasks/{ctx.task_id}/chunks", json={"lease": ctx.lease, "seq": seq, "items": items})
                raise_for_problem(response)
            except (httpx.TransportError, StepwrightError) as error:
                log.warning("task %s: chunks not sent (%s)", ctx.task_id, error)

    def _heartbeat_loop(self) -> None:
        last = time.monotonic()
        with httpx.Client(base_url=self.base_url, headers=self.headers, timeout=10.0) as http:
            while True:
                time.sleep(0.02)
                with self._lock:
                    held = [ctx for ctx, _ in self._running.values()]
                if not held:
                    if self._stop.is_set():
                        return
                    last = time.monotonic()
                    continue
                # What handlers emit goes out every tick, from this thread (the answer
                # sends what is left first).
                for ctx in held:
                    if ctx._chunks:
                        self._flush_from_thread(http, ctx)
                if time.monotonic() - last < heartbeat_interval(held):
                    continue
                last = time.monotonic()
                try:
                    response = http.post("/v1/tasks/heartbeat", json=heartbeat_body(self.id, held))
                    raise_for_problem(response)
                except (httpx.TransportError, StepwrightError) as error:
                    log.warning("heartbeat failed: %s", error)
                    continue
                for task_id in to_stop(response.json()):
                    self._cancel(task_id)
