"""A client for Stepwright's HTTP API: every resource a key works with (runs, workflows,
interrupts, events, schedules, triggers, webhooks, step tasks, queues, workers), its answers
typed by :mod:`stepwright.models`."""

from __future__ import annotations

import builtins
import json
import time
from typing import Any, Iterator, Sequence, TypeVar, cast

import httpx

from . import _calls as calls
from . import models as m
from .errors import raise_for_problem

TERMINAL = ("completed", "failed", "cancelled")

T = TypeVar("T")


class _Runs:
    def __init__(self, client: Client) -> None:
        self._c = client

    def start(
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
        return self._c._send(calls.start_run(workflow, input, version, idempotency_key, wait_seconds, tags))

    def get(self, run_id: str) -> m.RunDetails:
        """The run as the API shows it."""
        return self._c._send(calls.show_run(run_id))

    def list(self, **filters: Any) -> Iterator[m.RunSummary]:
        """Runs of the namespace, newest first, page after page (``workflow``, ``status``,
        ``limit`` per page, ``input_contains``, ``created_after``, …)."""
        params = {k: v for k, v in filters.items() if v is not None}
        while True:
            page = self._c._send(calls.list_runs(params))
            yield from page["runs"]
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    def wait(self, run_id: str, *, timeout: float = 60.0, poll: float = 0.05) -> m.RunDetails:
        """Polls until the run has finished (or ``timeout`` seconds pass: ``TimeoutError``)."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.get(run_id)
            if run["status"] in TERMINAL:
                return run
            if time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} is still {run['status']} after {timeout}s")
            time.sleep(poll)

    def stream(self, run_id: str, *, tokens: bool = False, after: int | None = None) -> Iterator[dict[str, Any]]:
        """Yields the run's events as they happen, from the start (or after event ``after``):
        ``{"id": n, "event": name, "data": {...}}``, and with ``tokens`` the live
        ``{"event": "token", "data": {"path", "text"}}`` between them. A cut connection is
        resumed with ``Last-Event-ID`` — nothing lost, nothing repeated — and the iterator ends
        after the run's final event."""
        last = after
        failures = 0
        while True:
            headers = {"accept": "text/event-stream"}
            if last is not None:
                headers["last-event-id"] = str(last)
            params = {"tokens": "true"} if tokens else None
            try:
                with self._c._http.stream(
                    "GET", f"/v1/runs/{run_id}/events", params=params, headers=headers,
                    timeout=httpx.Timeout(10.0, read=None),
                ) as response:
                    # The run ended and its last event was read already: nothing more comes.
                    if response.status_code == 204:
                        return
                    if not response.is_success:
                        response.read()
                        raise_for_problem(response)
                    for event in _events(response.iter_lines()):
                        failures = 0
                        if "id" in event:
                            last = event["id"]
                        yield event
            except httpx.TransportError:
                failures += 1
                if failures > 10:
                    raise
                time.sleep(min(0.05 * 2**failures, 2.0))
                continue
            # A clean end: the run finished, or the server is going away (then resume).
            if self.get(run_id)["status"] in TERMINAL:
                return

    def cancel(self, run_id: str, reason: str | None = None) -> m.Cancelled:
        """Cancels a run wherever it executes."""
        return self._c._send(calls.cancel_run(run_id, reason))

    def resume(self, run_id: str, *, wait_seconds: int | None = None) -> m.RunDetails:
        """Continues a run that stopped (failed, or waiting for a timer that is now due)."""
        return self._c._send(calls.resume_run(run_id, wait_seconds))

    def replay(self, run_id: str) -> m.ReplayReport:
        """Re-executes the run's code in a sandbox from its journal and compares."""
        return self._c._send(calls.replay_run(run_id))

    def recompute(self, run_id: str, **options: Any) -> m.RecomputeView:
        """Recomputes the run with another version or models (``version``, ``models``,
        ``from_`` a step, ``persist``) in a sandbox: writes served from the journal, worker
        steps asked again; nothing registered."""
        body = {("from" if k == "from_" else k): v for k, v in options.items() if v is not None}
        return self._c._send(calls.recompute_run(run_id, body))

    def fork(self, run_id: str, at: str, **options: Any) -> m.RunDetails:
        """A new run from before step ``at`` (``input``, ``steps`` outputs patched, ``wait_seconds``)."""
        body = {"at": at, **{k: v for k, v in options.items() if v is not None}}
        return self._c._send(calls.fork_run(run_id, body))

    def message(self, run_id: str, inbox: str, message: Any) -> m.Stored:
        """Sends ``message`` to the run's inbox ``inbox`` (what its `wait` steps take)."""
        return self._c._send(calls.message_run(run_id, {"inbox": inbox, "message": message}))

    def definition(self, run_id: str) -> m.RunDefinition:
        """The definition the run executes (its file, as registered)."""
        return self._c._send(calls.run_definition(run_id))

    def artifact(self, run_id: str, hash: str) -> m.Artifact:
        """An artifact of the run by its content hash."""
        return self._c._send(calls.run_artifact(run_id, hash))


class SseParser:
    """Server-Sent Events from a stream's lines, one line at a time: ``feed`` returns an
    event once a blank line ends it, so an event cut mid-way is never returned."""

    def __init__(self) -> None:
        self._event: dict[str, Any] = {}
        self._data: list[str] = []

    def feed(self, line: str) -> dict[str, Any] | None:
        if line == "":
            event, data = self._event, self._data
            self._event, self._data = {}, []
            if not data:
                return None
            event["data"] = json.loads("\n".join(data))
            event.setdefault("event", "message")
            return event
        if not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                self._data.append(value)
            elif name == "id":
                self._event["id"] = int(value)
            elif name == "event":
                self._event["event"] = value
        return None


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Whole Server-Sent Events from a stream's lines."""
    parser = SseParser()
    for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event

class _Workflows:
    def __init__(self, client: Client) -> None:
        self._c = client

    def register(self, source: str, files: dict[str, str] | None = None) -> m.WorkflowVersion:
        """Registers a workflow file's text as the workflow's newest version."""
        return self._c._send(calls.register_workflow(source, files))

    def list(self) -> list[m.WorkflowSummary]:
        return self._c._send(calls.list_workflows())

    def get(self, name: str) -> m.WorkflowDetails:
        return self._c._send(calls.show_workflow(name))


class _Interrupts:
    def __init__(self, client: Client) -> None:
        self._c = client

    def list(self, *, status: str = "open", kind: str | None = None) -> list[m.InboxItem]:
        """The decisions the key may take (the approvals inbox), oldest run first; ``kind``
        (``timer``, ``event``, ``approval``, ``input``) lists that kind instead."""
        return self._c._send(calls.inbox(status, kind))

    def check_approvers(self, approvers: builtins.list[str]) -> m.ApproversChecked:
        """Who in the key's namespace could meet an approver list (``["role:lead"]``): live
        keys and OIDC groups with the approver role that meet it. None of either: a step
        naming it would wait for someone who cannot sign in."""
        return self._c._send(calls.check_approvers(approvers))

    def wake(self, interrupt_id: str) -> m.TimerWoken:
        """Wakes a durable timer (``<run id>.<interrupt id>``) now, as an operator: its step
        goes on as if the time had come. Only timers are woken."""
        return self._c._send(calls.wake(interrupt_id))

    def decide(self, interrupt_id: str, decision: str, **fields: Any) -> m.DecisionTaken:
        """Decides an interrupt (``<run id>.<interrupt id>``) as the key's user: ``approve``,
        ``reject`` (``reason=``), ``modify`` (``payload=``) or ``respond`` (``value=``)."""
        return self._c._send(calls.decide(interrupt_id, decision, fields))

    def link(self, interrupt_id: str, *, expires_in_seconds: int | None = None) -> m.LinkMade:
        """A signed link a person without a key decides the interrupt with."""
        return self._c._send(calls.create_link(interrupt_id, expires_in_seconds))


class _Events:
    def __init__(self, client: Client) -> None:
        self._c = client

    def send(self, name: str, payload: Any = None, *, idempotency_key: str | None = None) -> m.EventSent:
        """Stores an event in the namespace's log: triggers start runs on it, `wait` steps take it."""
        return self._c._send(calls.send_event(name, payload, idempotency_key))

    def list(self, *, name: str | None = None, before: int | None = None, limit: int | None = None) -> list[m.EventView]:
        return self._c._send(calls.list_events(name, before, limit))

    def get(self, seq: int) -> m.EventDetails:
        return self._c._send(calls.show_event(seq))


class _Schedules:
    def __init__(self, client: Client) -> None:
        self._c = client

    def create(
        self, workflow: str, *, version: int | None = None, only: list[str] | None = None, paused: bool | None = None
    ) -> list[m.ScheduleView]:
        """Keeps the schedules a registered workflow's file declares."""
        return self._c._send(calls.create_schedules(workflow, version, only, paused))

    def list(self) -> list[m.ScheduleView]:
        return self._c._send(calls.list_schedules())

    def get(self, workflow: str, schedule: str) -> m.ScheduleDetails:
        return self._c._send(calls.show_schedule(workflow, schedule))

    def delete(self, workflow: str, schedule: str) -> None:
        self._c._send(calls.delete_schedule(workflow, schedule))

    def pause(self, workflow: str, schedule: str) -> m.ScheduleView:
        return self._c._send(calls.schedule_action(workflow, schedule, "pause"))

    def resume(self, workflow: str, schedule: str) -> m.ScheduleView:
        return self._c._send(calls.schedule_action(workflow, schedule, "resume"))

    def trigger(self, workflow: str, schedule: str) -> m.Triggered:
        """Starts one run of the schedule now."""
        return self._c._send(calls.trigger_schedule(workflow, schedule))

    def backfill(self, workflow: str, schedule: str, start: int, end: int, *, rate: Any = None) -> m.BackfillAccepted:
        """Runs the schedule's ticks between ``start`` and ``end`` (µs since the epoch)."""
        body = {"from": start, "to": end, **({"rate": rate} if rate is not None else {})}
        return self._c._send(calls.backfill_schedule(workflow, schedule, body))


class _Triggers:
    def __init__(self, client: Client) -> None:
        self._c = client

    def create(
        self, workflow: str, *, version: int | None = None, only: list[str] | None = None, paused: bool | None = None
    ) -> list[m.TriggerView]:
        """Keeps the triggers a registered workflow's file declares."""
        return self._c._send(calls.create_triggers(workflow, version, only, paused))

    def list(self) -> list[m.TriggerView]:
        return self._c._send(calls.list_triggers())

    def get(self, workflow: str, trigger: str) -> m.TriggerDetails:
        return self._c._send(calls.show_trigger(workflow, trigger))

    def delete(self, workflow: str, trigger: str) -> None:
        self._c._send(calls.delete_trigger(workflow, trigger))

    def pause(self, workflow: str, trigger: str) -> m.TriggerView:
        return self._c._send(calls.trigger_action(workflow, trigger, "pause"))

    def resume(self, workflow: str, trigger: str) -> m.TriggerView:
        return self._c._send(calls.trigger_action(workflow, trigger, "resume"))


class _Webhooks:
    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, url: str, events: list[str], secret: str) -> m.WebhookView:
        return self._c._send(calls.create_webhook(url, events, secret))

    def list(self) -> list[m.WebhookView]:
        return self._c._send(calls.list_webhooks())

    def delete(self, webhook_id: str) -> None:
        self._c._send(calls.delete_webhook(webhook_id))

    def deliveries(self, webhook_id: str) -> builtins.list[m.DeliveryView]:
        return self._c._send(calls.webhook_deliveries(webhook_id))


class _Tasks:
    def __init__(self, client: Client) -> None:
        self._c = client

    def list(self, **filters: Any) -> list[m.TaskSummary]:
        """Step tasks of the namespace, newest first (``queue``, ``state``, ``run``, ``limit``)."""
        params = {k: v for k, v in filters.items() if v is not None}
        return self._c._send(calls.list_tasks(params))["tasks"]

    def complete(self, task_id: str, lease: int, output: Any) -> m.TaskAnswered:
        """Completes a task under its lease (a deferred or pushed one, from anywhere; a worker key)."""
        return self._c._send(calls.answer_task(task_id, "complete", {"lease": lease, "output": output}))

    def fail(self, task_id: str, lease: int, code: str, message: str, *, retryable: bool = False) -> m.TaskAnswered:
        """Fails a task under its lease."""
        body = {"lease": lease, "error": {"code": code, "message": message, "retryable": retryable}}
        return self._c._send(calls.answer_task(task_id, "fail", body))

    def defer(self, task_id: str, lease: int, seconds: float) -> m.TaskAnswered:
        """Keeps a deferred or pushed task's lease for ``seconds`` from now (its heartbeat)."""
        body = {"lease": lease, "for_ms": max(1, int(seconds * 1000))}
        return self._c._send(calls.answer_task(task_id, "defer", body))

    def release(self, task_id: str, lease: int) -> m.TaskAnswered:
        """Hands a task back unstarted (to the queue, not counted as an attempt)."""
        return self._c._send(calls.answer_task(task_id, "release", {"lease": lease}))

    def answer(self, answers: builtins.list[m.TaskAnswerItem]) -> m.TaskAnswersTaken:
        """Many answers in one request, each under its own lease."""
        return self._c._send(calls.answer_tasks(answers))


class _Listing:
    def __init__(self, client: Client) -> None:
        self._c = client


class _Queues(_Listing):
    def list(self) -> m.QueueList:
        """Every queue with waiting or held tasks or a worker polling it."""
        return self._c._send(calls.list_queues())


class _Workers(_Listing):
    def list(self) -> m.WorkerList:
        """The step workers seen recently, with what they hold."""
        return self._c._send(calls.list_workers())


class _Experiments:
    def __init__(self, client: Client) -> None:
        self._c = client

    def start(self, spec: dict[str, Any]) -> m.ExperimentSummary:
        """Starts an experiment (DESIGN §18): the server recomputes its runs in the background."""
        return self._c._send(calls.start_experiment(spec))

    def list(self) -> list[m.ExperimentSummary]:
        return self._c._send(calls.list_experiments())

    def get(self, experiment_id: str) -> m.ExperimentDetails:
        """The experiment and its report (of the runs recomputed so far while it runs)."""
        return self._c._send(calls.show_experiment(experiment_id))

    def cancel(self, experiment_id: str) -> m.ExperimentSummary:
        return self._c._send(calls.experiment_action(experiment_id, "cancel"))

    def resume(self, experiment_id: str) -> m.ExperimentSummary:
        return self._c._send(calls.experiment_action(experiment_id, "resume"))

    def wait(self, experiment_id: str, *, timeout: float = 600.0, poll: float = 0.25) -> m.ExperimentDetails:
        """Polls until the experiment has ended (or ``timeout`` seconds pass: ``TimeoutError``)."""
        deadline = time.monotonic() + timeout
        while True:
            details = self.get(experiment_id)
            if details["status"] != "running":
                return details
            if time.monotonic() > deadline:
                raise TimeoutError(f"experiment {experiment_id} is still running after {timeout} s")
            time.sleep(poll)


class Client:
    """``Client(base_url, api_key)``: the API's resources as methods that return its typed
    JSON answers and raise :class:`stepwright.StepwrightError` subclasses for problems."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"authorization": f"Bearer {api_key}", "user-agent": "stepwright-py/0.1.0"},
            timeout=timeout,
        )
        self.runs = _Runs(self)
        self.workflows = _Workflows(self)
        self.interrupts = _Interrupts(self)
        self.events = _Events(self)
        self.schedules = _Schedules(self)
        self.triggers = _Triggers(self)
        self.webhooks = _Webhooks(self)
        self.tasks = _Tasks(self)
        self.queues = _Queues(self)
        self.workers = _Workers(self)
        self.experiments = _Experiments(self)

    def health(self) -> m.Health:
        return self._send(calls.health())

    def _send(self, call: calls.Call[T]) -> T:
        return cast(T, self._call(call.method, call.path, retries=call.retries, params=call.params, json=call.json, headers=call.headers))

    def _request(self, method: str, path: str, *, retries: int = 0, **kwargs: Any) -> dict[str, Any]:
        """Any other request (an operation this client has no method for yet)."""
        return cast("dict[str, Any]", self._call(method, path, retries=retries, **kwargs) or {})

    def _call(self, method: str, path: str, *, retries: int = 0, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError:
                if attempt >= retries:
                    raise
                attempt += 1
                time.sleep(0.1 * 2**attempt)
                continue
            raise_for_problem(response)
            return response.json() if response.content else None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
