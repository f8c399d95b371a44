"""The client for asyncio: the same resources as :class:`stepwright.Client`, awaited, over the
same calls (:mod:`stepwright._calls`)."""

from __future__ import annotations

import asyncio
import builtins
from typing import Any, AsyncIterator, Sequence, TypeVar, cast

import httpx

from . import _calls as calls
from . import models as m
from .client import TERMINAL, SseParser
from .errors import raise_for_problem

T = TypeVar("T")


class _AsyncRuns:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        version: int | None = None,
        idempotency_key: str | None = None,
        wait_seconds: int | None = None,
        tags: Sequence[str] | None = None,
    ) -> m.RunDetails:
        """Starts a run (waiting up to ``wait_seconds`` for it to end, if given), with
        ``tags`` to find it by later (``list(tag=…)``, an experiment's population). The
        idempotency key is made here when none is given and reused on every transport
        retry, so a retried POST never starts two runs."""
        return await self._c._send(calls.start_run(workflow, input, version, idempotency_key, wait_seconds, tags))

    async def get(self, run_id: str) -> m.RunDetails:
        """The run as the API shows it."""
        return await self._c._send(calls.show_run(run_id))

    async def list(self, **filters: Any) -> AsyncIterator[m.RunSummary]:
        """Runs of the namespace, newest first, page after page."""
        params = {k: v for k, v in filters.items() if v is not None}
        while True:
            page = await self._c._send(calls.list_runs(params))
            for run in page["runs"]:
                yield run
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    async def wait(self, run_id: str, *, timeout: float = 60.0, poll: float = 0.05) -> m.RunDetails:
        """Polls until the run has finished (or ``timeout`` seconds pass: ``TimeoutError``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            run = await self.get(run_id)
            if run["status"] in TERMINAL:
                return run
            if loop.time() >= deadline:
                raise TimeoutError(f"run {run_id} is still {run['status']} after {timeout}s")
            await asyncio.sleep(poll)

    async def stream(self, run_id: str, *, tokens: bool = False, after: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """The run's events as they happen; a cut stream resumes with ``Last-Event-ID``; ends
        after the run's final event."""
        last = after
        failures = 0
        while True:
            headers = {"accept": "text/event-stream"}
            if last is not None:
                headers["last-event-id"] = str(last)
            try:
                async with self._c._http.stream(
                    "GET", f"/v1/runs/{run_id}/events", params={"tokens": "true"} if tokens else None,
                    headers=headers, timeout=httpx.Timeout(10.0, read=None),
                ) as response:
                    # The run ended and its last event was read already: nothing more comes.
                    if response.status_code == 204:
                        return
                    if not response.is_success:
                        await response.aread()
                        raise_for_problem(response)
                    parser = SseParser()
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event is None:
                            continue
                        failures = 0
                        if "id" in event:
                            last = event["id"]
                        yield event
            except httpx.TransportError:
                failures += 1
                if failures > 10:
                    raise
                await asyncio.sleep(min(0.05 * 2**failures, 2.0))
                continue
            if (await self.get(run_id))["status"] in TERMINAL:
                return


    async def cancel(self, run_id: str, reason: str | None = None) -> m.Cancelled:
        """Cancels a run wherever it executes."""
        return await self._c._send(calls.cancel_run(run_id, reason))

    async def resume(self, run_id: str, *, wait_seconds: int | None = None) -> m.RunDetails:
        """Continues a run that stopped (failed, or waiting for a timer that is now due)."""
        return await self._c._send(calls.resume_run(run_id, wait_seconds))

    async def replay(self, run_id: str) -> m.ReplayReport:
        """Re-executes the run's code in a sandbox from its journal and compares."""
        return await self._c._send(calls.replay_run(run_id))

    async def recompute(self, run_id: str, **options: Any) -> m.RecomputeView:
        """Recomputes the run with another version or models (``version``, ``models``,
        ``from_`` a step, ``persist``) in a sandbox: writes served from the journal, worker
        steps asked again; nothing registered."""
        body = {("from" if k == "from_" else k): v for k, v in options.items() if v is not None}
        return await self._c._send(calls.recompute_run(run_id, body))

    async def fork(self, run_id: str, at: str, **options: Any) -> m.RunDetails:
        """A new run from before step ``at`` (``input``, ``steps`` outputs patched, ``wait_seconds``)."""
        body = {"at": at, **{k: v for k, v in options.items() if v is not None}}
        return await self._c._send(calls.fork_run(run_id, body))

    async def message(self, run_id: str, inbox: str, message: Any) -> m.Stored:
        """Sends ``message`` to the run's inbox ``inbox`` (what its `wait` steps take)."""
        return await self._c._send(calls.message_run(run_id, {"inbox": inbox, "message": message}))

    async def definition(self, run_id: str) -> m.RunDefinition:
        """The definition the run executes (its file, as registered)."""
        return await self._c._send(calls.run_definition(run_id))

    async def artifact(self, run_id: str, hash: str) -> m.Artifact:
        """An artifact of the run by its content hash."""
        return await self._c._send(calls.run_artifact(run_id, hash))


class _AsyncWorkflows:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def register(self, source: str, files: dict[str, str] | None = None) -> m.WorkflowVersion:
        """Registers a workflow file's text as the workflow's newest version."""
        return await self._c._send(calls.register_workflow(source, files))

    async def list(self) -> list[m.WorkflowSummary]:
        return await self._c._send(calls.list_workflows())

    async def get(self, name: str) -> m.WorkflowDetails:
        return await self._c._send(calls.show_workflow(name))


class _AsyncInterrupts:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def list(self, *, status: str = "open", kind: str | None = None) -> list[m.InboxItem]:
        """The decisions the key may take (the approvals inbox), oldest run first; ``kind``
        (``timer``, ``event``, ``approval``, ``input``) lists that kind instead."""
        return await self._c._send(calls.inbox(status, kind))

    async def check_approvers(self, approvers: builtins.list[str]) -> m.ApproversChecked:
        """Who in the key's namespace could meet an approver list (``["role:lead"]``): live
        keys and OIDC groups with the approver role that meet it. None of either: a step
        naming it would wait for someone who cannot sign in."""
        return await self._c._send(calls.check_approvers(approvers))

    async def wake(self, interrupt_id: str) -> m.TimerWoken:
        """Wakes a durable timer (``<run id>.<interrupt id>``) now, as an operator: its step
        goes on as if the time had come. Only timers are woken."""
        return await self._c._send(calls.wake(interrupt_id))

    async def decide(self, interrupt_id: str, decision: str, **fields: Any) -> m.DecisionTaken:
        """Decides an interrupt (``<run id>.<interrupt id>``) as the key's user: ``approve``,
        ``reject`` (``reason=``), ``modify`` (``payload=``) or ``respond`` (``value=``)."""
        return await self._c._send(calls.decide(interrupt_id, decision, fields))

    async def link(self, interrupt_id: str, *, expires_in_seconds: int | None = None) -> m.LinkMade:
        """A signed link a person without a key decides the interrupt with."""
        return await self._c._send(calls.create_link(interrupt_id, expires_in_seconds))


class _AsyncEvents:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def send(self, name: str, payload: Any = None, *, idempotency_key: str | None = None) -> m.EventSent:
        """Stores an event in the namespace's log: triggers start runs on it, `wait` steps take it."""
        return await self._c._send(calls.send_event(name, payload, idempotency_key))

    async def list(self, *, name: str | None = None, before: int | None = None, limit: int | None = None) -> list[m.EventView]:
        return await self._c._send(calls.list_events(name, before, limit))

    async def get(self, seq: int) -> m.EventDetails:
        return await self._c._send(calls.show_event(seq))


class _AsyncSchedules:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(
        self, workflow: str, *, version: int | None = None, only: list[str] | None = None, paused: bool | None = None
    ) -> list[m.ScheduleView]:
        """Keeps the schedules a registered workflow's file declares."""
        return await self._c._send(calls.create_schedules(workflow, version, only, paused))

    async def list(self) -> list[m.ScheduleView]:
        return await self._c._send(calls.list_schedules())

    async def get(self, workflow: str, schedule: str) -> m.ScheduleDetails:
        return await self._c._send(calls.show_schedule(workflow, schedule))

    async def delete(self, workflow: str, schedule: str) -> None:
        await self._c._send(calls.delete_schedule(workflow, schedule))

    async def pause(self, workflow: str, schedule: str) -> m.ScheduleView:
        return await self._c._send(calls.schedule_action(workflow, schedule, "pause"))

    async def resume(self, workflow: str, schedule: str) -> m.ScheduleView:
        return await self._c._send(calls.schedule_action(workflow, schedule, "resume"))

    async def trigger(self, workflow: str, schedule: str) -> m.Triggered:
        """Starts one run of the schedule now."""
        return await self._c._send(calls.trigger_schedule(workflow, schedule))

    async def backfill(self, workflow: str, schedule: str, start: int, end: int, *, rate: Any = None) -> m.BackfillAccepted:
        """Runs the schedule's ticks between ``start`` and ``end`` (µs since the epoch)."""
        body = {"from": start, "to": end, **({"rate": rate} if rate is not None else {})}
        return await self._c._send(calls.backfill_schedule(workflow, schedule, body))


class _AsyncTriggers:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(
        self, workflow: str, *, version: int | None = None, only: list[str] | None = None, paused: bool | None = None
    ) -> list[m.TriggerView]:
        """Keeps the triggers a registered workflow's file declares."""
        return await self._c._send(calls.create_triggers(workflow, version, only, paused))

    async def list(self) -> list[m.TriggerView]:
        return await self._c._send(calls.list_triggers())

    async def get(self, workflow: str, trigger: str) -> m.TriggerDetails:
        return await self._c._send(calls.show_trigger(workflow, trigger))

    async def delete(self, workflow: str, trigger: str) -> None:
        await self._c._send(calls.delete_trigger(workflow, trigger))

    async def pause(self, workflow: str, trigger: str) -> m.TriggerView:
        return await self._c._send(calls.trigger_action(workflow, trigger, "pause"))

    async def resume(self, workflow: str, trigger: str) -> m.TriggerView:
        return await self._c._send(calls.trigger_action(workflow, trigger, "resume"))


class _AsyncWebhooks:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(self, url: str, events: list[str], secret: str) -> m.WebhookView:
        return await self._c._send(calls.create_webhook(url, events, secret))

    async def list(self) -> list[m.WebhookView]:
        return await self._c._send(calls.list_webhooks())

    async def delete(self, webhook_id: str) -> None:
        await self._c._send(calls.delete_webhook(webhook_id))

    async def deliveries(self, webhook_id: str) -> builtins.list[m.DeliveryView]:
        return await self._c._send(calls.webhook_deliveries(webhook_id))


class _AsyncTasks:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def list(self, **filters: Any) -> list[m.TaskSummary]:
        """Step tasks of the namespace, newest first (``queue``, ``state``, ``run``, ``limit``)."""
        params = {k: v for k, v in filters.items() if v is not None}
        return (await self._c._send(calls.list_tasks(params)))["tasks"]

    async def complete(self, task_id: str, lease: int, output: Any) -> m.TaskAnswered:
        """Completes a task under its lease (a deferred or pushed one, from anywhere; a worker key)."""
        return await self._c._send(calls.answer_task(task_id, "complete", {"lease": lease, "output": output}))

    async def fail(self, task_id: str, lease: int, code: str, message: str, *, retryable: bool = False) -> m.TaskAnswered:
        """Fails a task under its lease."""
        body = {"lease": lease, "error": {"code": code, "message": message, "retryable": retryable}}
        return await self._c._send(calls.answer_task(task_id, "fail", body))

    async def defer(self, task_id: str, lease: int, seconds: float) -> m.TaskAnswered:
        """Keeps a deferred or pushed task's lease for ``seconds`` from now (its heartbeat)."""
        body = {"lease": lease, "for_ms": max(1, int(seconds * 1000))}
        return await self._c._send(calls.answer_task(task_id, "defer", body))

    async def release(self, task_id: str, lease: int) -> m.TaskAnswered:
        """Hands a task back unstarted (to the queue, not counted as an attempt)."""
        return await self._c._send(calls.answer_task(task_id, "release", {"lease": lease}))

    async def answer(self, answers: builtins.list[m.TaskAnswerItem]) -> m.TaskAnswersTaken:
        """Many answers in one request, each under its own lease."""
        return await self._c._send(calls.answer_tasks(answers))


class _AsyncListing:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client


class _AsyncQueues(_AsyncListing):
    async def list(self) -> m.QueueList:
        """Every queue with waiting or held tasks or a worker polling it."""
        return await self._c._send(calls.list_queues())


class _AsyncWorkers(_AsyncListing):
    async def list(self) -> m.WorkerList:
        """The step workers seen recently, with what they hold."""
        return await self._c._send(calls.list_workers())


class _AsyncExperiments:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def start(self, spec: dict[str, Any]) -> m.ExperimentSummary:
        """Starts an experiment (DESIGN §18): the server recomputes its runs in the background."""
        return await self._c._send(calls.start_experiment(spec))

    async def list(self) -> list[m.ExperimentSummary]:
        return await self._c._send(calls.list_experiments())

    async def get(self, experiment_id: str) -> m.ExperimentDetails:
        """The experiment and its report (of the runs recomputed so far while it runs)."""
        return await self._c._send(calls.show_experiment(experiment_id))

    async def cancel(self, experiment_id: str) -> m.ExperimentSummary:
        return await self._c._send(calls.experiment_action(experiment_id, "cancel"))

    async def resume(self, experiment_id: str) -> m.ExperimentSummary:
        return await self._c._send(calls.experiment_action(experiment_id, "resume"))

    async def wait(self, experiment_id: str, *, timeout: float = 600.0, poll: float = 0.25) -> m.ExperimentDetails:
        """Polls until the experiment has ended (or ``timeout`` seconds pass: ``TimeoutError``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            details = await self.get(experiment_id)
            if details["status"] != "running":
                return details
            if loop.time() > deadline:
                raise TimeoutError(f"experiment {experiment_id} is still running after {timeout} s")
            await asyncio.sleep(poll)


class AsyncClient:
    """``AsyncClient(base_url, api_key)``: :class:`stepwright.Client` for asyncio."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"authorization": f"Bearer {api_key}", "user-agent": "stepwright-py/0.1.0"},
            timeout=timeout,
        )
        self.runs = _AsyncRuns(self)
        self.workflows = _AsyncWorkflows(self)
        self.interrupts = _AsyncInterrupts(self)
        self.events = _AsyncEvents(self)
        self.schedules = _AsyncSchedules(self)
        self.triggers = _AsyncTriggers(self)
        self.webhooks = _AsyncWebhooks(self)
        self.tasks = _AsyncTasks(self)
        self.queues = _AsyncQueues(self)
        self.workers = _AsyncWorkers(self)
        self.experiments = _AsyncExperiments(self)

    async def health(self) -> m.Health:
        return await self._send(calls.health())

    async def _send(self, call: calls.Call[T]) -> T:
        answer = await self._call(call.method, call.path, retries=call.retries, params=call.params, json=call.json, headers=call.headers)
        return cast(T, answer)

    async def _request(self, method: str, path: str, *, retries: int = 0, **kwargs: Any) -> dict[str, Any]:
        """Any other request (an operation this client has no method for yet)."""
        return cast("dict[str, Any]", await self._call(method, path, retries=retries, **kwargs) or {})

    async def _call(self, method: str, path: str, *, retries: int = 0, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.TransportError:
                if attempt >= retries:
                    raise
                attempt += 1
                await asyncio.sleep(0.1 * 2**attempt)
                continue
            raise_for_problem(response)
            return response.json() if response.content else None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
