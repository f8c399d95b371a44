"""A client for Stepwright's HTTP API (runs, workflows, interrupts, tasks)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Iterator

import httpx

from .errors import raise_for_problem

TERMINAL = ("completed", "failed", "cancelled")


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


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Server-Sent Events from a stream's lines: only whole events (a blank line ends one),
    so an event cut mid-way is never yielded."""
    event: dict[str, Any] = {}
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                event["data"] = json.loads("\n".join(data))
                event.setdefault("event", "message")
                yield event
            event, data = {}, []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                data.append(value)
            elif name == "id":
                event["id"] = int(value)
            elif name == "event":
                event["event"] = value


class _Workflows:
    def __init__(self, client: Client) -> None:
        self._c = client

    def register(self, source: str, files: dict[str, str] | None = None) -> dict[str, Any]:
        """Registers a workflow file's text as the workflow's newest version."""
        return self._c._request("POST", "/v1/workflows", json={"source": source, "files": files or {}})


class _Tasks:
    def __init__(self, client: Client) -> None:
        self._c = client

    def list(self, **filters: Any) -> list[dict[str, Any]]:
        """Step tasks of the namespace, newest first (``queue``, ``state``, ``run``, ``limit``)."""
        params = {k: v for k, v in filters.items() if v is not None}
        return list(self._c._request("GET", "/v1/tasks", params=params)["tasks"])


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
        self.tasks = _Tasks(self)

    def _request(self, method: str, path: str, *, retries: int = 0, **kwargs: Any) -> dict[str, Any]:
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
            answer: dict[str, Any] = response.json() if response.content else {}
            return answer

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
