"""A client for Stepwright's HTTP API (runs, workflows, interrupts, tasks)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator, cast

import httpx

from .errors import raise_for_problem

TERMINAL = ("completed", "failed", "cancelled")

_PROTOCOL = {"stepwright-protocol": "1"}


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
    ) -> dict[str, Any]:
        """Starts a run (it does not wait). The idempotency key is made here when none is
        given and reused on every transport retry, so a retried POST never starts two runs."""
        body: dict[str, Any] = {"workflow": workflow, "input": input}
        if version is not None:
            body["version"] = version
        body["idempotency_key"] = idempotency_key or f"py-{uuid.uuid4()}"
        return self._c._request("POST", "/v1/runs", json=body, retries=3)

    def get(self, run_id: str) -> dict[str, Any]:
        """The run as the API shows it."""
        return self._c._request("GET", f"/v1/runs/{run_id}")

    def list(self, **filters: Any) -> Iterator[dict[str, Any]]:
        """Runs of the namespace, newest first, page after page (``workflow``, ``status``,
        ``limit`` per page, ``input_contains``, ``created_after``, …)."""
        params = {k: v for k, v in filters.items() if v is not None}
        while True:
            page = self._c._request("GET", "/v1/runs", params=params)
            yield from page["runs"]
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    def wait(self, run_id: str, *, timeout: float = 60.0, poll: float = 0.05) -> dict[str, Any]:
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

    def cancel(self, run_id: str, reason: str | None = None) -> dict[str, Any]:
        """Cancels a run wherever it executes."""
        body = {"reason": reason} if reason else {}
        return self._c._request("POST", f"/v1/runs/{run_id}/cancel", json=body)


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

    def register(self, source: str, files: dict[str, str] | None = None) -> dict[str, Any]:
        """Registers a workflow file's text as the workflow's newest version."""
        return self._c._request("POST", "/v1/workflows", json={"source": source, "files": files or {}})


class _Interrupts:
    def __init__(self, client: Client) -> None:
        self._c = client

    def list(self) -> list[dict[str, Any]]:
        """The open interrupts the key may decide (the approvals inbox), oldest run first."""
        return cast("list[dict[str, Any]]", self._c._call("GET", "/v1/interrupts", params={"status": "open"}))

    def decide(self, interrupt_id: str, decision: str, **fields: Any) -> dict[str, Any]:
        """Decides an interrupt (``<run id>.<interrupt id>``) as the key's user: ``approve``,
        ``reject`` (``reason=``), ``modify`` (``payload=``) or ``respond`` (``value=``)."""
        return self._c._request("POST", f"/v1/interrupts/{interrupt_id}/decision", json={"decision": decision, **fields})


class _Events:
    def __init__(self, client: Client) -> None:
        self._c = client

    def send(self, name: str, payload: Any = None, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Stores an event in the namespace's log: triggers start runs on it, `wait` steps take it."""
        body: dict[str, Any] = {"name": name, "payload": payload}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        return self._c._request("POST", "/v1/events", json=body, retries=3 if idempotency_key else 0)


class _Schedules:
    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, workflow: str, *, version: int | None = None, only: list[str] | None = None) -> dict[str, Any]:
        """Keeps the schedules a registered workflow's file declares."""
        body: dict[str, Any] = {"workflow": workflow, "only": only or []}
        if version is not None:
            body["version"] = version
        return self._c._request("POST", "/v1/schedules", json=body)

    def list(self) -> dict[str, Any]:
        """The namespace's schedules."""
        return self._c._request("GET", "/v1/schedules")

    def pause(self, workflow: str, schedule: str) -> dict[str, Any]:
        return self._c._request("POST", f"/v1/schedules/{workflow}/{schedule}/pause")

    def resume(self, workflow: str, schedule: str) -> dict[str, Any]:
        return self._c._request("POST", f"/v1/schedules/{workflow}/{schedule}/resume")

    def trigger(self, workflow: str, schedule: str) -> dict[str, Any]:
        """Starts one run of the schedule now."""
        return self._c._request("POST", f"/v1/schedules/{workflow}/{schedule}/trigger")


class _Tasks:
    def __init__(self, client: Client) -> None:
        self._c = client

    def list(self, **filters: Any) -> list[dict[str, Any]]:
        """Step tasks of the namespace, newest first (``queue``, ``state``, ``run``, ``limit``)."""
        params = {k: v for k, v in filters.items() if v is not None}
        return list(self._c._request("GET", "/v1/tasks", params=params)["tasks"])

    def complete(self, task_id: str, lease: int, output: Any) -> dict[str, Any]:
        """Completes a task under its lease (a deferred one, from anywhere; a worker key)."""
        return self._c._request("POST", f"/v1/tasks/{task_id}/complete", json={"lease": lease, "output": output}, headers=_PROTOCOL)

    def fail(self, task_id: str, lease: int, code: str, message: str, *, retryable: bool = False) -> dict[str, Any]:
        """Fails a task under its lease."""
        body = {"lease": lease, "error": {"code": code, "message": message, "retryable": retryable}}
        return self._c._request("POST", f"/v1/tasks/{task_id}/fail", json=body, headers=_PROTOCOL)


class Client:
    """``Client(base_url, api_key)``: the API's resources as methods that return its JSON
    answers and raise :class:`stepwright.StepwrightError` subclasses for problems."""

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
        self.tasks = _Tasks(self)

    def _request(self, method: str, path: str, *, retries: int = 0, **kwargs: Any) -> dict[str, Any]:
        return cast("dict[str, Any]", self._call(method, path, retries=retries, **kwargs))

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
            return response.json() if response.content else {}

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
