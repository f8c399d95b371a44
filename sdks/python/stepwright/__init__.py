"""Stepwright for Python: drive runs over the HTTP API (:class:`Client`) and write steps
that run in this process (:class:`Worker`)."""

from .aclient import AsyncClient
from .aio import AsyncWorker
from .client import Client
from .errors import BadRequest, Conflict, Forbidden, NotFound, StepwrightError
from .signature import sign, verify_signature
from .worker import Defer, HandlerError, TaskCancelled, TaskContext, Worker

__all__ = [
    "AsyncClient",
    "AsyncWorker",
    "BadRequest",
    "Client",
    "Conflict",
    "Defer",
    "Forbidden",
    "HandlerError",
    "NotFound",
    "StepwrightError",
    "TaskCancelled",
    "TaskContext",
    "Worker",
    "sign",
    "verify_signature",
]
__version__ = "0.1.0"
