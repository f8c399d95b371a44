"""The client for asyncio: the same resources as :class:`stepwright.Client`, awaited."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, AsyncIterator, cast

import httpx

from .client import TERMINAL, SseParser
from .errors import raise_for_problem


class _AsyncRuns:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def start(
        self, workflow: str, input: Any = None, *, version: int | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Starts a run; its idempotency key is reused on every transport retry."""
        body: dict[str, Any] = {"workflow": workflow, "input": input, "idempotency_key": idempotency_key or f"py-{uuid.uuid4()}"}
        if version is not None:
            body["version"] = version
        return await self._c._request("POST", "/v1/runs", json=body, retries=3)

    async def get(self, run_id: str) -> dict[str, Any]:
        return await self._c._request("GET", f"/v1/runs/{run_id}")

    async def wait(self, run_id: str, *, timeout: float = 60.0, poll: float = 0.05) -> dict[str, Any]:
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

    async def cancel(self, run_id: str, reason: str | None = None) -> dict[str, Any]:
        return await self._c._request("POST", f"/v1/runs/{run_id}/cancel", json={"reason": reason} if reason else {})

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


class _AsyncWorkflows:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def register(self, source: str, files: dict[str, str] | None = None) -> dict[str, Any]:
        return await self._c._request("POST", "/v1/workflows", json={"source": source, "files": files or {}})


class _AsyncInterrupts:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def list(self) -> list[dict[str, Any]]:
        return cast("list[dict[str, Any]]", await self._c._call("GET", "/v1/interrupts", params={"status": "open"}))

    async def decide(self, interrupt_id: str, decision: str, **fields: Any) -> dict[str, Any]:
        return await self._c._request("POST", f"/v1/interrupts/{interrupt_id}/decision", json={"decision": decision, **fields})


class _AsyncEvents:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def send(self, name: str, payload: Any = None, *, idempotency_key: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name, "payload": payload}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        return await self._c._request("POST", "/v1/events", json=body, retries=3 if idempotency_key else 0)


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

    async def _request(self, method: str, path: str, *, retries: int = 0, **kwargs: Any) -> dict[str, Any]:
        return cast("dict[str, Any]", await self._call(method, path, retries=retries, **kwargs))

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
            return response.json() if response.content else {}

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
