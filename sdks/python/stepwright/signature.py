"""Checks ``Stepwright-Signature``: what webhooks and pushed tasks (an ``http`` tool with
``signing_secret_env``) carry — ``t=<unix>,v1=<hex hmac-sha256 of "t.body">``."""

from __future__ import annotations

import hashlib
import hmac
import time


def sign(secret: str, body: bytes, *, at: int | None = None) -> str:
    """The header Stepwright sends with ``body`` at ``at`` (now by default)."""
    unix = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{unix}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={unix},v1={digest}"


def verify_signature(
    secret: str, header: str | None, body: bytes, *, tolerance: float = 300.0, now: float | None = None
) -> bool:
    """Whether ``header`` signs exactly ``body`` (the raw bytes received, before parsing)
    with ``secret``, sent within ``tolerance`` seconds of ``now`` (a replayed old request is
    refused)."""
    if not header:
        return False
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        unix = int(fields["t"])
        given = fields["v1"]
    except (KeyError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - unix) > tolerance:
        return False
    expected = sign(secret, body, at=unix).split("v1=", 1)[1]
    return hmac.compare_digest(expected, given)
