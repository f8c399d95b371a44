"""Every API call the clients make, once: each function builds the request of one operation
(`docs/openapi.json`) and names the type of its answer. :class:`stepwright.Client` sends
them with ``httpx.Client``, :class:`stepwright.AsyncClient` with ``httpx.AsyncClient``; their
methods are one line each over these."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Generic, Sequence, TypeVar
from urllib.parse import quote

from . import models as m

T = TypeVar("T")

#: The step-worker protocol's version header (the task answers need it).
PROTOCOL = {"stepwright-protocol": "1"}


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request, and (as its type parameter) what its answer is."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Transport retries: only for requests that are safe to repeat.
    retries: int = 0


def _seg(text: str) -> str:
    return quote(text, safe="")


def _given(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


# Runs.
def start_run(
    workflow: str,
    input: Any,
    version: int | None,
    idempotency_key: str | None,
    wait_seconds: int | None,
    tags: Sequence[str] | None = None,
) -> Call[m.RunDetails]:
    # The key is made here when none is given and reused on every transport retry, so a
    # retried POST never starts two runs.
    body = {"workflow": workflow, "input": input, "idempotency_key": idempotency_key or f"py-{uuid.uuid4()}"}
    given = _given(version=version, wait_seconds=wait_seconds, tags=None if tags is None else list(tags))
    return Call("POST", "/v1/runs", json={**body, **given}, retries=3)


def show_run(run_id: str) -> Call[m.RunDetails]:
    return Call("GET", f"/v1/runs/{_seg(run_id)}", retries=3)


def list_runs(params: dict[str, Any]) -> Call[m.RunPage]:
    return Call("GET", "/v1/runs", params=params, retries=3)


def cancel_run(run_id: str, reason: str | None) -> Call[m.Cancelled]:
    return Call("POST", f"/v1/runs/{_seg(run_id)}/cancel", json=_given(reason=reason))


def resume_run(run_id: str, wait_seconds: int | None) -> Call[m.RunDetails]:
    return Call("POST", f"/v1/runs/{_seg(run_id)}/resume", json=_given(wait_seconds=wait_seconds))


def replay_run(run_id: str) -> Call[m.ReplayReport]:
    return Call("POST", f"/v1/runs/{_seg(run_id)}/replay", json={})


def recompute_run(run_id: str, body: dict[str, Any]) -> Call[m.RecomputeView]:
    return Call("POST", f"/v1/runs/{_seg(run_id)}/recompute", json=body)


def fork_run(run_id: str, body: dict[str, Any]) -> Call[m.RunDetails]:
    return Call("POST", f"/v1/runs/{_seg(run_id)}/fork", json=body)


def message_run(run_id: str, body: dict[str, Any]) -> Call[m.Stored]:
    return Call("POST", f"/v1/runs/{_seg(run_id)}/messages", json=body)


def run_definition(run_id: str) -> Call[m.RunDefinition]:
    return Call("GET", f"/v1/runs/{_seg(run_id)}/definition", retries=3)


def run_artifact(run_id: str, hash: str) -> Call[m.Artifact]:
    return Call("GET", f"/v1/runs/{_seg(run_id)}/artifacts/{_seg(hash)}", retries=3)


# Workflows.
def register_workflow(source: str, files: dict[str, str] | None) -> Call[m.WorkflowVersion]:
    return Call("POST", "/v1/workflows", json={"source": source, "files": files or {}})


def list_workflows() -> Call[list[m.WorkflowSummary]]:
    return Call("GET", "/v1/workflows", retries=3)


def show_workflow(name: str) -> Call[m.WorkflowDetails]:
    return Call("GET", f"/v1/workflows/{_seg(name)}", retries=3)


# Interrupts.
def inbox(status: str, kind: str | None) -> Call[list[m.InboxItem]]:
    return Call("GET", "/v1/interrupts", params=_given(status=status, kind=kind), retries=3)


def wake(interrupt_id: str) -> Call[m.TimerWoken]:
    return Call("POST", f"/v1/interrupts/{_seg(interrupt_id)}/wake", json={})


def check_approvers(approvers: list[str]) -> Call[m.ApproversChecked]:
    return Call("POST", "/v1/approvers/check", json={"approvers": approvers}, retries=3)


def decide(interrupt_id: str, decision: str, fields: dict[str, Any]) -> Call[m.DecisionTaken]:
    return Call("POST", f"/v1/interrupts/{_seg(interrupt_id)}/decision", json={"decision": decision, **fields})


def create_link(interrupt_id: str, expires_in_seconds: int | None) -> Call[m.LinkMade]:
    body = _given(expires_in_seconds=expires_in_seconds)
    return Call("POST", f"/v1/interrupts/{_seg(interrupt_id)}/link", json=body)


# Events.
def send_event(name: str, payload: Any, idempotency_key: str | None) -> Call[m.EventSent]:
    body = {"name": name, "payload": payload, **_given(idempotency_key=idempotency_key)}
    return Call("POST", "/v1/events", json=body, retries=3 if idempotency_key else 0)


def list_events(name: str | None, before: int | None, limit: int | None) -> Call[list[m.EventView]]:
    return Call("GET", "/v1/events", params=_given(name=name, before=before, limit=limit), retries=3)


def show_event(seq: int) -> Call[m.EventDetails]:
    return Call("GET", f"/v1/events/{seq}", retries=3)


# Schedules and triggers: both are kept from a registered workflow's file.
def _keep(workflow: str, version: int | None, only: list[str] | None, paused: bool | None) -> dict[str, Any]:
    return {"workflow": workflow, "only": only or [], **_given(version=version, paused=paused)}


def create_schedules(workflow: str, version: int | None, only: list[str] | None, paused: bool | None) -> Call[list[m.ScheduleView]]:
    return Call("POST", "/v1/schedules", json=_keep(workflow, version, only, paused))


def list_schedules() -> Call[list[m.ScheduleView]]:
    return Call("GET", "/v1/schedules", retries=3)


def show_schedule(workflow: str, schedule: str) -> Call[m.ScheduleDetails]:
    return Call("GET", f"/v1/schedules/{_seg(workflow)}/{_seg(schedule)}", retries=3)


def delete_schedule(workflow: str, schedule: str) -> Call[None]:
    return Call("DELETE", f"/v1/schedules/{_seg(workflow)}/{_seg(schedule)}")


def schedule_action(workflow: str, schedule: str, action: str) -> Call[m.ScheduleView]:
    return Call("POST", f"/v1/schedules/{_seg(workflow)}/{_seg(schedule)}/{action}")


def trigger_schedule(workflow: str, schedule: str) -> Call[m.Triggered]:
    return Call("POST", f"/v1/schedules/{_seg(workflow)}/{_seg(schedule)}/trigger")


def backfill_schedule(workflow: str, schedule: str, body: dict[str, Any]) -> Call[m.BackfillAccepted]:
    return Call("POST", f"/v1/schedules/{_seg(workflow)}/{_seg(schedule)}/backfill", json=body)


def create_triggers(workflow: str, version: int | None, only: list[str] | None, paused: bool | None) -> Call[list[m.TriggerView]]:
    return Call("POST", "/v1/triggers", json=_keep(workflow, version, only, paused))


def list_triggers() -> Call[list[m.TriggerView]]:
    return Call("GET", "/v1/triggers", retries=3)


def show_trigger(workflow: str, trigger: str) -> Call[m.TriggerDetails]:
    return Call("GET", f"/v1/triggers/{_seg(workflow)}/{_seg(trigger)}", retries=3)


def delete_trigger(workflow: str, trigger: str) -> Call[None]:
    return Call("DELETE", f"/v1/triggers/{_seg(workflow)}/{_seg(trigger)}")


def trigger_action(workflow: str, trigger: str, action: str) -> Call[m.TriggerView]:
    return Call("POST", f"/v1/triggers/{_seg(workflow)}/{_seg(trigger)}/{action}")


# Webhooks.
def create_webhook(url: str, events: list[str], secret: str) -> Call[m.WebhookView]:
    return Call("POST", "/v1/webhooks", json={"url": url, "events": events, "secret": secret})


def list_webhooks() -> Call[list[m.WebhookView]]:
    return Call("GET", "/v1/webhooks", retries=3)


def delete_webhook(webhook_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/webhooks/{_seg(webhook_id)}")


def webhook_deliveries(webhook_id: str) -> Call[list[m.DeliveryView]]:
    return Call("GET", f"/v1/webhooks/{_seg(webhook_id)}/deliveries", retries=3)


# Step tasks (operators list them; a worker key answers one from anywhere).
def list_tasks(params: dict[str, Any]) -> Call[m.TaskList]:
    return Call("GET", "/v1/tasks", params=params, retries=3)


def answer_task(task_id: str, verb: str, body: dict[str, Any]) -> Call[m.TaskAnswered]:
    # Repeats are answered the same under the same lease: safe to retry.
    return Call("POST", f"/v1/tasks/{_seg(task_id)}/{verb}", json=body, headers=PROTOCOL, retries=3)


def answer_tasks(answers: list[m.TaskAnswerItem]) -> Call[m.TaskAnswersTaken]:
    return Call("POST", "/v1/tasks/answers", json={"answers": answers}, headers=PROTOCOL, retries=3)


def list_queues() -> Call[m.QueueList]:
    return Call("GET", "/v1/queues", retries=3)


def list_workers() -> Call[m.WorkerList]:
    return Call("GET", "/v1/workers", retries=3)


# Experiments.
def start_experiment(spec: dict[str, Any]) -> Call[m.ExperimentSummary]:
    return Call("POST", "/v1/experiments", json=spec)


def list_experiments() -> Call[list[m.ExperimentSummary]]:
    return Call("GET", "/v1/experiments", retries=3)


def show_experiment(experiment_id: str) -> Call[m.ExperimentDetails]:
    return Call("GET", f"/v1/experiments/{_seg(experiment_id)}", retries=3)


def experiment_action(experiment_id: str, action: str) -> Call[m.ExperimentSummary]:
    return Call("POST", f"/v1/experiments/{_seg(experiment_id)}/{action}")


def health() -> Call[m.Health]:
    return Call("GET", "/v1/health", retries=3)
