"""Problems the API answers, as exceptions that carry its stable ``code``."""

from __future__ import annotations

from typing import Any

import httpx


class StepwrightError(Exception):
    """A problem+json answer: ``status``, the stable ``code`` and the ``detail``."""

    def __init__(self, status: int, code: str, detail: str, body: dict[str, Any] | None = None) -> None:
        problems = [str(p) for p in (body or {}).get("problems", [])]
        more = "".join(f"\n  {p}" for p in problems)
        super().__init__(f"{status} {code}: {detail}{more}")
        self.status = status
        self.code = code
        self.detail = detail
        self.body = body or {}


class NotFound(StepwrightError):
    """404: nothing by that name in the key's namespace."""


class Conflict(StepwrightError):
    """409: the state does not allow it (a stale lease: ``code == "lease_lost"``)."""


class Forbidden(StepwrightError):
    """403: the key may not do this."""


class BadRequest(StepwrightError):
    """400 or 422: the request does not parse or does not fit."""


def raise_for_problem(response: httpx.Response) -> None:
    """Raises the typed error of a non-2xx answer."""
    if response.is_success:
        return
    try:
        body = response.json()
    except ValueError:
        body = {}
    code = str(body.get("code", "http_error"))
    detail = str(body.get("detail", response.text))
    kind: type[StepwrightError] = {
        400: BadRequest,
        403: Forbidden,
        404: NotFound,
        409: Conflict,
        422: BadRequest,
    }.get(response.status_code, StepwrightError)
    raise kind(response.status_code, code, detail, body)
