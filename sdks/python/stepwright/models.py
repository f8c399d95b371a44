"""The API's types, generated from ``docs/openapi.json`` by
``sdks/python/tools/generate_models.py``; do not edit by hand."""

from __future__ import annotations

from typing import Any, Literal, TypedDict, Union

__all__ = [
    "ApproversChecked",
    "Artifact",
    "AttemptView",
    "AuthMethods",
    "AwaitedView",
    "BackfillAccepted",
    "BackfillRequest",
    "BeatAnswer",
    "BeatState",
    "CancelOutcome",
    "CancelRun",
    "Cancelled",
    "Change",
    "CheckApprovers",
    "ChunkItem",
    "ChunkKind",
    "ChunksTaken",
    "ClaimTasks",
    "ClaimedTasks",
    "CompleteTask",
    "ConcurrencyGroup",
    "CreateSchedules",
    "CreateTriggers",
    "DecisionBody",
    "DecisionChange",
    "DecisionKind",
    "DecisionTaken",
    "DeferTask",
    "DeliveryView",
    "ErrorView",
    "Evaluator",
    "EventDetails",
    "EventSent",
    "EventView",
    "ExperimentDetails",
    "ExperimentReport",
    "ExperimentRun",
    "ExperimentSpec",
    "ExperimentStatus",
    "ExperimentSummary",
    "ExperimentTotals",
    "FailTask",
    "FireView",
    "ForkRun",
    "FreshCase",
    "Health",
    "Heartbeat",
    "HeartbeatAnswer",
    "HeldBy",
    "HeldTask",
    "HeldView",
    "InboxItem",
    "InboxMessage",
    "InterruptKind",
    "Judge",
    "LinkMade",
    "LinkView",
    "ModelBinding",
    "NewLink",
    "NewWebhook",
    "Outline",
    "OutlineEdge",
    "OutlineGroup",
    "OutlineLayout",
    "OutlineNode",
    "ParentView",
    "PendingView",
    "Population",
    "Problem",
    "Protocols",
    "QueueList",
    "QueueView",
    "QueuedView",
    "RecomputeRun",
    "RecomputeView",
    "RecomputedStep",
    "RegisterWorkflow",
    "ReplayReport",
    "ResumeRun",
    "RunDefinition",
    "RunDetails",
    "RunMessage",
    "RunPage",
    "RunStatus",
    "RunSummary",
    "ScheduleDetails",
    "ScheduleView",
    "Score",
    "SendEvent",
    "ServedAnswer",
    "Session",
    "SignIn",
    "SpanView",
    "StartRun",
    "StartedBy",
    "StarterKind",
    "StepActivity",
    "StepComparison",
    "StepReplay",
    "StepStatus",
    "StepUsageChange",
    "StepView",
    "Stored",
    "Task",
    "TaskAnswerItem",
    "TaskAnswerTaken",
    "TaskAnswered",
    "TaskAnswers",
    "TaskAnswersTaken",
    "TaskChunks",
    "TaskError",
    "TaskLeaseBody",
    "TaskList",
    "TaskOutcome",
    "TaskRun",
    "TaskStatus",
    "TaskSummary",
    "TaskWaitView",
    "TickView",
    "TimerWoken",
    "Totals",
    "TriggerDetails",
    "TriggerView",
    "Triggered",
    "UsageChange",
    "Verdict",
    "VersionInfo",
    "WakeChannel",
    "WebhookView",
    "WorkerEvaluator",
    "WorkerInfo",
    "WorkerList",
    "WorkerView",
    "WorkflowDetails",
    "WorkflowSummary",
    "WorkflowVersion",
    "WouldExecute",
]



BeatState = Literal["ok", "cancel", "lost"]
"""What a heartbeat says about one task. `ok`: Renewed. `cancel`: Renewed, but the run was cancelled: stop the handler and answer `cancelled`. `lost`: The lease is no longer this worker's: stop the handler and drop its result."""


CancelOutcome = Literal["cancelled", "requested", "finished"]
"""What a cancel did: the values of [`Cancelled::outcome`]. `cancelled`: Nobody executed it: it is cancelled now. `requested`: The process executing it stops it. `finished`: It had ended already; `status` says how."""


ChunkKind = Literal["token", "progress", "log"]
"""What a chunk carries. `token`: Streamed text (a model's tokens): live on the run's stream (`?tokens=true`), not
journaled. `progress`: How far the handler got: a `step.progress` event on the run's stream, journaled. `log`: A line for people: a `step.log` event, journaled.
"""


DecisionKind = Literal["approve", "reject", "modify", "respond"]
"""What is decided. `approve`: Go ahead. `reject`: Do not. `modify`: Go ahead with a corrected payload. `respond`: Answer an input or event request."""


ExperimentStatus = Literal["running", "completed", "budget_spent", "cancelled"]
"""How an experiment stands. `running`: Not ended: a process is at work on it, or it was stopped and goes on when resumed. `completed`: Every run of the population was recomputed. `budget_spent`: The budget was spent: the runs left were not recomputed. `cancelled`: A person stopped it: the runs left were not recomputed."""


HeldBy = Literal["debounced", "batched"]
"""How a trigger holds an event. `debounced`: A debounce: a later event of the same key replaces it (recorded `debounced`). `batched`: A batch: it starts with the others when the batch is full or its time is up."""


InterruptKind = Literal["approval", "input", "event", "timer"]
"""What kind of pause an interrupt is. `approval`: Approve, reject or modify. `input`: Provide a value matching a schema. `event`: Wait for an external event. `timer`: Wait until a time."""


RunStatus = Literal["pending", "running", "suspended", "completed", "failed", "cancelled"]
"""Where a run stands. `pending`: Ready to run and not running: created, or stopped at a checkpoint. `running`: Being executed. `suspended`: Waiting on at least one interrupt (approval, input, event or timer). `completed`: Finished with an output. `failed`: Finished with an error. `cancelled`: Cancelled."""


StarterKind = Literal["user", "schedule", "trigger"]
"""What kind of starter: the values of [`StartedBy::kind`]. `user`: A person. `schedule`: A schedule's tick. `trigger`: A trigger's events."""


StepActivity = Literal["executing", "person", "timer", "event", "worker", "retry"]
"""What a step did over a span of its timeline. `executing`: Executing an attempt. `person`: Waiting for a person (an approval, an input). `timer`: Waiting for a durable timer. `event`: Waiting for an event. `worker`: Waiting for a step worker. `retry`: Waiting out a retry's delay."""


StepReplay = Literal["identical", "different", "served", "missing", "added"]
"""How one step compares in a replay. `identical`: Re-executed; the same output as recorded. `different`: Re-executed; a different output. `served`: A `write`/`external` step: its recorded output was served, not re-executed. `missing`: Recorded in the original, not reached by the replay. `added`: Reached by the replay, not recorded in the original."""


StepStatus = Literal["completed", "failed", "skipped", "suspended", "handoff", "cancelled", "retrying", "running", "waiting"]
"""Where a step path stands in a run's timeline. `completed`: It produced its output. `failed`: It failed for good (after its retries and `on_failure`). `skipped`: Its condition was false, or `on_failure: skip` turned a failure into `null`. `suspended`: It waits on an interrupt; the run suspends. `handoff`: It handed control to another node of its graph. `cancelled`: It was stopped: the run was cancelled, or a sibling's failure or a race ended it. `retrying`: This attempt failed and another one follows. `running`: An attempt started and has not ended. `waiting`: It opened an interrupt and waits for the decision."""


TaskOutcome = Literal["complete", "fail", "cancelled", "release"]
"""What a handler did with a task. `complete`: It returned `output`. `fail`: It failed with `error`. `cancelled`: It stopped on a cancel. `release`: It never started: back to the queue, not counted as an attempt."""


TaskStatus = Literal["pending", "claimed", "completed", "failed", "lapsed", "no_worker", "cancelled"]
"""Where a task is in its life. `pending`: Waiting for a worker. `claimed`: A worker holds it. `completed`: The handler returned an output. `failed`: The handler failed. `lapsed`: The worker's lease ran out. `no_worker`: Nobody claimed it before its `schedule_to_start`. `cancelled`: The handler stopped on a cancel."""


Verdict = Literal["improved", "regressed", "same"]
"""What a run did under the change, judged by the evaluators. `improved`: No evaluator scored it lower, and one higher. `regressed`: An evaluator scored it lower, or the recompute failed where the run had not. `same`: Every evaluator scored it the same (or there are none)."""


class ApproversChecked(TypedDict):
    """Who could meet an approver list: live keys and OIDC group mappings of the namespace that
    hold the approver role and meet the list. None of either: a step naming it waits for
    someone who cannot sign in.
    """
    groups: list[str]
    """The provider groups whose members could decide (for a `user:` entry: those whose
    members may be that user, as only their sign-in says).
    """
    keys: int
    """How many live keys could decide."""


class Artifact(TypedDict):
    """An artifact a step captured (a model call's input or output, a tool call, ...)."""
    content: Any
    """Its content."""
    hash: str
    """Its content hash."""
    kind: str
    """Its kind (`llm-input`, `llm-output`, `tool-call`, ...)."""
    path: str
    """The step that captured it."""


class _AttemptViewRequired(TypedDict):
    at: int
    """When (µs since the epoch)."""


class AttemptView(_AttemptViewRequired, total=False):
    """One attempt."""
    error: str | None
    """Why it failed, if it did."""
    status: int | None
    """The receiver's status, if it answered."""


class AuthMethods(TypedDict):
    """How one may sign in."""
    api_key: bool
    """With an API key (`POST /v1/session`): always."""
    oidc: bool
    """Through the OpenID Connect provider (`GET /v1/auth/oidc/start`), when one is set up."""


class AwaitedView(TypedDict):
    """An event a `wait` step waits for."""
    event: str
    """The event: the name of the run's inbox its message is sent to."""
    step: str
    """The waiting step's path."""
    until: int
    """When the wait fails if no message comes (µs since the epoch)."""


class BackfillAccepted(TypedDict):
    """What a backfill starts."""
    already: int
    """How many ticks of the range had started a run already."""
    ticks: int
    """How many ticks of the range it starts a run for (in the background, at the rate;
    each shows in the schedule's ticks as it starts).
    """


BackfillRequest = TypedDict("BackfillRequest", {"from": str, "rate": int | None, "to": str}, total=False)


class _BeatAnswerRequired(TypedDict):
    id: str
    """The task."""
    state: BeatState
    """What to do."""


class BeatAnswer(_BeatAnswerRequired, total=False):
    """A heartbeat's answer about one task."""
    lease_expires: int | None
    """When the renewed lease runs out (microseconds since the Unix epoch)."""


class CancelRun(TypedDict, total=False):
    """A cancel."""
    reason: str | None
    """Why (kept in the run's error: `cancelled by ann: too slow`)."""


class _CancelledRequired(TypedDict):
    outcome: CancelOutcome
    """`cancelled` (nobody executed it), `requested` (the process executing it stops it),
    or `finished` (it had ended already; `status` says how).
    """
    run_id: str
    """The run."""
    status: RunStatus
    """Where the run stands."""


class Cancelled(_CancelledRequired, total=False):
    """What a cancel did."""
    executed_by: str | None
    """The worker that executes it and stops it, for `requested`."""


Change = TypedDict("Change", {"file": str | None, "files": dict[str, str], "from": str | None, "models": dict[str, str], "rebind": dict[str, str], "source": str | None, "version": int | None}, total=False)


class CheckApprovers(TypedDict):
    """An approver list to check against who can sign in to the namespace."""
    approvers: list[str]
    """The entries, as a file writes them (`role:lead`, `user:ann`, a built-in role)."""


class _ChunkItemRequired(TypedDict):
    kind: ChunkKind
    """What it is."""


class ChunkItem(_ChunkItemRequired, total=False):
    """One item of a chunk."""
    data: Any
    """Its data (progress: `{done, total}` or anything)."""
    text: str | None
    """Its text (tokens, log lines)."""


class ChunksTaken(TypedDict):
    """What a chunk did."""
    accepted: int
    """Items taken (0 for a repeated chunk)."""


class _ClaimTasksRequired(TypedDict):
    handlers: list[str]
    """The handlers it offers: names, and `name@version` for versioned ones."""
    queue: str
    """The queue."""
    worker: WorkerInfo
    """The worker."""


class ClaimTasks(_ClaimTasksRequired, total=False):
    """A long-poll claim: up to `max` tasks of `queue` for the handlers the worker offers."""
    holding: list[str]
    """The tasks it is running: the answer lists those to cancel."""
    max: int
    """Its free slots (0: only cancels for the tasks it holds — a control channel)."""
    wait_seconds: int
    """How long to wait for a task before answering empty, in seconds (at most 60)."""


class ClaimedTasks(TypedDict):
    """What a claim got."""
    cancel: list[str]
    """Tasks it holds whose runs were cancelled: stop them and answer `cancelled`."""
    heartbeat_interval_ms: int
    """How often to heartbeat while holding tasks, in milliseconds."""
    tasks: list[Task]
    """Tasks now leased to the worker."""


class CompleteTask(TypedDict):
    """A handler's output."""
    lease: int
    """The task's lease."""
    output: Any
    """The output (checked against the tool's `output` schema by the engine)."""


class ConcurrencyGroup(TypedDict):
    """A concurrency group a run is started in."""
    key: str
    """The group: runs with the same key share its slots."""
    limit: int
    """How many of its runs may execute at once."""


class _CreateSchedulesRequired(TypedDict):
    workflow: str
    """The registered workflow whose file declares them (`schedules:`)."""


class CreateSchedules(_CreateSchedulesRequired, total=False):
    """The schedules of a registered workflow to keep."""
    only: list[str]
    """Only these schedules of the file (default: all)."""
    paused: bool
    """Keep them paused: their ticks are recorded as skipped until resumed."""
    version: int | None
    """Its version (default: the newest)."""


class _CreateTriggersRequired(TypedDict):
    workflow: str
    """The registered workflow whose file declares them (`triggers:`)."""


class CreateTriggers(_CreateTriggersRequired, total=False):
    """The triggers of a registered workflow to keep."""
    only: list[str]
    """Only these triggers of the file (default: all)."""
    paused: bool
    """Keep them paused: the events they match are recorded as skipped until resumed."""
    version: int | None
    """Its version (default: the newest)."""


class _DecisionBodyRequired(TypedDict):
    decision: DecisionKind
    """`approve`, `reject`, `modify` (an approval with a corrected `payload`) or `respond`
    (the `value` an input or event request asks for).
    """


class DecisionBody(_DecisionBodyRequired, total=False):
    """A decision."""
    payload: Any
    """For `modify`: the corrected value."""
    reason: str | None
    """For `reject`: why."""
    value: Any
    """For `respond`: the answer."""


class _DecisionChangeRequired(TypedDict):
    path: str
    """Where."""


class DecisionChange(_DecisionChangeRequired, total=False):
    """A decision (branch arm, map items, loop verdict, graph edge) that came out differently."""
    after: Any
    """What the recompute decided."""
    before: Any
    """What the original decided."""


class DecisionTaken(TypedDict):
    """What a decision did."""
    decided_by: str
    """Who decided (the key's user)."""
    interrupt_id: str
    """The interrupt decided."""
    run_id: str
    """The run."""
    status: RunStatus
    """Where the run stands: it continues on a worker."""


class DeferTask(TypedDict):
    """Async completion: the handler hands the work to something that answers later (a job
    queue, a person, a serverless function), and the worker frees its slot.
    """
    for_ms: int
    """How long the lease lasts from now without heartbeats, in milliseconds (at most 7 days);
    whoever holds the task's id and lease answers it (`complete`, `fail`) before then.
    """
    lease: int
    """The task's lease."""


class _DeliveryViewRequired(TypedDict):
    attempts: list[AttemptView]
    """Every attempt, oldest first."""
    body: Any
    """The body posted."""
    event: str
    """The event."""
    id: int
    """Its id (also sent as `Stepwright-Delivery`)."""
    state: str
    """`pending`, `delivered` or `failed`."""


class DeliveryView(_DeliveryViewRequired, total=False):
    """One delivery with its attempts."""
    next_attempt_at: int | None
    """When the next attempt is due, for a pending one (µs since the epoch)."""


class ErrorView(TypedDict):
    """A run's error."""
    code: str
    """The stable error code."""
    message: str
    """What happened."""


class _EvaluatorRequired(TypedDict):
    name: str
    """What the report calls its score."""


class Evaluator(_EvaluatorRequired, total=False):
    """One evaluator: a name and exactly one of `schema`, `check`, `compare`, `judge`, `worker`."""
    check: str | None
    """An expression over `output` and `input`, scored on the old and on the new output: true
    is 1, false 0, a number itself (`output.score`, `output.items | length`).
    """
    compare: str | None
    """An expression over `old`, `new` and `input`: true is no worse, false a regression; a
    number above 0 an improvement, below 0 a regression (`new.category == old.category`).
    """
    judge: Judge | None
    """A model compares the outputs by a rubric: better is 1, same 0, worse −1."""
    schema: Any
    """A JSON Schema the output must meet: scores 1 when it does, 0 when not (old and new)."""
    worker: WorkerEvaluator | None
    """A step worker's handler compares the outputs (code of your own, in Python or
    TypeScript): given `{input, old, new}`, it answers as a `compare` does — true (no
    worse), false (a regression), a number — or `{"score": …, "reason": "…"}`.
    """


class _EventDetailsRequired(TypedDict):
    fires: list[FireView]
    """What each trigger did with it: the run it started, or why none."""
    name: str
    """Its name."""
    payload: Any
    """What it carries."""
    received_at: int
    """When it was received (µs since the epoch)."""
    seq: int
    """Its place in the log."""


class EventDetails(_EventDetailsRequired, total=False):
    """An event with its history."""
    held: list[HeldView]
    """The triggers that hold it still (a debounce waiting for its key to be quiet, a batch
    being collected): what it will do is not decided yet.
    """
    idempotency_key: str | None
    """Its idempotency key."""


class EventSent(TypedDict):
    """What storing an event did."""
    created: bool
    """Whether this call stored it."""
    event: EventView
    """The event (the first one, when its idempotency key was sent before)."""


class _EventViewRequired(TypedDict):
    name: str
    """Its name."""
    payload: Any
    """What it carries."""
    received_at: int
    """When it was received (µs since the epoch)."""
    seq: int
    """Its place in the log."""


class EventView(_EventViewRequired, total=False):
    """An event as the API shows it."""
    idempotency_key: str | None
    """Its idempotency key."""


class ExperimentDetails(TypedDict):
    """One experiment: what it was started with and its report (while it runs, of the runs
    recomputed so far).
    """
    created_at: int
    """When it started (microseconds since the Unix epoch)."""
    id: str
    """Its id."""
    recomputed: int
    """Of them, recomputed so far."""
    report: ExperimentReport
    """What it found."""
    runs: int
    """The runs of its population."""
    spec: ExperimentSpec
    """The spec it runs, its population fixed by id when it began."""
    status: ExperimentStatus
    """How it stands."""


class ExperimentReport(TypedDict):
    """What an experiment found."""
    experiment: str
    """Its name."""
    look_first: list[str]
    """The runs to look at first: regressions, then the largest diffs (at most 10)."""
    runs: list[ExperimentRun]
    """Every run recomputed, in the population's order."""
    status: ExperimentStatus
    """How it stands (while `running`, the report is of the runs recomputed so far)."""
    totals: ExperimentTotals
    """The totals."""
    workflow: str
    """The workflow."""


class _ExperimentRunRequired(TypedDict):
    changed: bool
    """Whether what the run did changed: its output, a step's value (a model call's own record
    aside: it names the model), a decision, how it ended.
    """
    changed_steps: list[str]
    """The steps whose value changed, failed or broke their schema, by path (model call
    records aside).
    """
    diff: list[str]
    """The output's differences, as `pointer: before → after` lines."""
    elapsed_ms: float
    """How long the recompute took, in milliseconds."""
    run: str
    """The run."""
    scores: list[Score]
    """Each evaluator's score."""
    status: RunStatus
    """How the recompute ended."""
    usage: UsageChange
    """Model usage and cost, then and now."""
    verdict: Verdict
    """The judgement."""


class ExperimentRun(_ExperimentRunRequired, total=False):
    """One run of the population, recomputed."""
    decisions: list[DecisionChange]
    """The decisions (branch arms, map items, loop verdicts, graph edges) that came out
    differently.
    """
    error: ErrorView | None
    """Why it failed, if it did."""
    evaluation_cost_usd: float
    """What the judges' model calls cost (US dollars)."""
    fresh: FreshCase | None
    """For a population of new inputs: which input this was, and which past runs' answers
    its effects were served. `run` is then the case's id in this experiment (no run of
    the store), "then" the workflow as its newest recorded run ran it.
    """
    step_changes: list[RecomputedStep]
    """Those steps, each with its structural diff (`pointer: before → after` lines), the
    schema it broke or why it failed: what `recompute` of the run shows, kept here.
    """
    would_execute: list[WouldExecute]
    """The writes (and unsafe external steps) served, not executed, whose input changed:
    what each would have been given. A change that reaches them is a change in what the
    run does outside.
    """


class _ExperimentSpecRequired(TypedDict):
    experiment: str
    """Its name (what reports and listings call it)."""
    runs: Population
    """The past runs to recompute."""


class ExperimentSpec(_ExperimentSpecRequired, total=False):
    """An experiment: which runs, what change, how each is scored."""
    budget_usd: float | None
    """Stop starting recomputes once their model calls cost this many US dollars; the report
    then says `budget_spent` and how many runs it left.
    """
    change: Change
    """What is tried on them (nothing: each run's own definition, again — a determinism check)."""
    concurrency: int | None
    """How many runs are recomputed at once (1–64; default 4)."""
    evaluators: list[Evaluator]
    """How each run's output is scored, old against new."""


class ExperimentSummary(TypedDict):
    """An experiment as `GET /v1/experiments` lists it."""
    created_at: int
    """When it started (microseconds since the Unix epoch)."""
    experiment: str
    """Its name."""
    id: str
    """Its id."""
    runs: int
    """The runs of its population."""
    status: ExperimentStatus
    """How it stands."""
    workflow: str
    """The workflow whose runs it recomputes."""


class _ExperimentTotalsRequired(TypedDict):
    after: Totals
    """The same, recomputed."""
    before: Totals
    """What the runs' model calls cost then and now, in all."""
    changed: int
    """Of them, changed."""
    cost_per_1000_after: float
    """Cost per 1,000 runs, now."""
    cost_per_1000_before: float
    """Cost per 1,000 runs, then (US dollars)."""
    evaluation_cost_usd: float
    """What the judges' model calls cost, in all (US dollars; counted against the budget)."""
    failed: int
    """Whose recompute failed."""
    improved: int
    """Judged improved."""
    means: list[Score]
    """Per evaluator: the mean score, old and new (over the runs it scored)."""
    regressed: int
    """Judged regressed."""
    runs: int
    """Runs recomputed."""
    skipped: int
    """Runs of the population not recomputed (the budget was spent, it was cancelled, or it
    is still at work).
    """
    unchanged: int
    """Unchanged."""


class ExperimentTotals(_ExperimentTotalsRequired, total=False):
    """The totals of an experiment."""
    would_execute: int
    """In which a served write's input changed (it would execute with another input)."""


class FailTask(TypedDict):
    """A handler failed."""
    error: TaskError
    """Why."""
    lease: int
    """The task's lease."""


class _FireViewRequired(TypedDict):
    event: int
    """The event."""
    trigger: str
    """The trigger (`workflow/trigger`)."""


class FireView(_FireViewRequired, total=False):
    """What one trigger did with one event."""
    run_id: str | None
    """The run it started (a debounced or batched run names every event it stands for)."""
    skipped: str | None
    """Why it started none (`paused`, `debounced: …`, `filter_failed: …`, `start_failed: …`)."""


class _ForkRunRequired(TypedDict):
    at: str
    """The step to fork before: the new run has everything the run recorded before it."""


class ForkRun(_ForkRunRequired, total=False):
    """A fork."""
    input: Any
    """A new input for the new run (default: the run's)."""
    steps: dict[str, Any]
    """Replacement outputs, by step path, for steps that completed before `at`."""
    wait_seconds: float | None
    """Wait up to this long (at most 60) for the new run to finish or stop for a person."""


class _FreshCaseRequired(TypedDict):
    input: Any
    """The input."""
    line: int
    """Its place among the inputs, from 1 (the line of an `inputs_file`)."""


class FreshCase(_FreshCaseRequired, total=False):
    """A new input an experiment tried."""
    served: list[ServedAnswer]
    """The `write` and unsafe `external` steps served a past run's answer for the same
    input (the others were not executed).
    """


class Health(TypedDict):
    """Liveness."""
    protocols: Protocols
    """The protocol versions the server speaks, by protocol: `{"worker": [1]}` (a step
    worker sends its version as `Stepwright-Protocol`).
    """
    status: str
    """`ok`."""


class Heartbeat(TypedDict):
    """One heartbeat for every task a worker holds."""
    tasks: list[HeldTask]
    """Its tasks."""
    worker_id: str
    """The worker."""


class HeartbeatAnswer(TypedDict):
    """A heartbeat's answer."""
    tasks: list[BeatAnswer]
    """One per task, in order."""


class _HeldTaskRequired(TypedDict):
    id: str
    """The task."""
    lease: int
    """Its lease."""


class HeldTask(_HeldTaskRequired, total=False):
    """One lease a heartbeat renews."""
    details: Any
    """Progress to keep for a later attempt (a checkpoint)."""


class _HeldViewRequired(TypedDict):
    by: HeldBy
    """How it holds it."""
    trigger: str
    """The trigger (`workflow/trigger`)."""
    until: int
    """When it starts its run unless something else comes first (µs since the epoch): the
    debounce's quiet period ends, or the batch's `within` runs out.
    """


class HeldView(_HeldViewRequired, total=False):
    """An event a trigger holds before deciding what it starts."""
    key: str | None
    """The debounce's key (its rendered `key`), for a debounce."""


class _InboxItemRequired(TypedDict):
    id: str
    """The id to decide it by: `<run id>.<interrupt id>`."""
    interrupt_id: str
    """The interrupt's id within the run."""
    kind: InterruptKind
    """`approval`, `input`, `event` or `timer`."""
    message: str
    """What the person deciding is shown."""
    payload: Any
    """The value to approve, or what the request carries."""
    run_id: str
    """The run that waits."""
    step: str
    """The step that asked."""
    workflow: str
    """The run's workflow."""


class InboxItem(_InboxItemRequired, total=False):
    """An open interrupt the caller may decide."""
    deadline: int | None
    """When its `on_timeout` applies (µs since the epoch)."""
    schema: Any
    """For `input`: the schema the answer must match; `x-stepwright-order` lists its
    top-level properties in the order the file declares them (what a form follows).
    """


class InboxMessage(TypedDict):
    """A message to a loop's inbox."""
    inbox: str
    """The inbox a loop reads."""
    message: Any
    """The message (any JSON, `null` too)."""


class Judge(TypedDict):
    """An `llm` judge: one of the workflow's model bindings compares the old and new outputs by a
    rubric and answers better, same or worse, with its reason (a run whose output did not change
    is not sent: it is the same).
    """
    model: str
    """The model binding that judges (the workflow's, before the change rebinds any)."""
    rubric: str
    """What "better" means here, for the model."""


class LinkMade(TypedDict):
    """A link made."""
    expires_at: int
    """When it stops working (µs since the epoch)."""
    interrupt: str
    """The interrupt it decides (`<run id>.<interrupt id>`)."""
    path: str
    """The same page relative to the server's root (`/link#…`)."""
    url: str
    """The page to open, on the host the request was made to (behind a proxy, the host it
    forwarded): send this.
    """


class _LinkViewRequired(TypedDict):
    decide_as: str
    """Who the decision is taken as."""
    interrupt: InboxItem
    """The request to decide."""


class LinkView(_LinkViewRequired, total=False):
    """What a link opens."""
    expires_at: int | None
    """When the link stops working (µs since the epoch)."""


class ModelBinding(TypedDict):
    """A model binding a definition has."""
    model: str
    """The provider's model id it sends."""
    name: str
    """The name steps call it by."""


class NewLink(TypedDict, total=False):
    """A link to make."""
    expires_in_seconds: int | None
    """How long it lasts, in seconds (60 to 604800; default 3600)."""


class NewWebhook(TypedDict):
    """A webhook to make."""
    events: list[str]
    """Which: `interrupt.opened`, `run.completed`, `run.failed`, `run.suspended`."""
    secret: str
    """The HMAC key each delivery is signed with (16 characters or more)."""
    url: str
    """Where events are posted (`http://` or `https://`, no user name or password): a public
    address, or one in a network the operator allows (`serve --webhook-allow`).
    """


class Outline(TypedDict):
    """A workflow as it is drawn: each step and operator with its kind, label and layout, each
    called workflow's steps under its call. A renderer draws the six layouts and needs no
    case per operator; an expression in a label is cut to 48 characters.
    """
    name: str
    """The workflow's name."""
    steps: list[OutlineNode]
    """Its steps, run in order."""
    version: str
    """Its version as written in its definition."""


OutlineEdge = TypedDict("OutlineEdge", {"from": str, "to": str, "when": str | None}, total=False)


class _OutlineGroupRequired(TypedDict):
    steps: list[OutlineNode]
    """Its steps, run in order."""


class OutlineGroup(_OutlineGroupRequired, total=False):
    """Children drawn together."""
    label: str | None
    """What leads to it: a branch arm's condition, `otherwise`, `path 0`, `on failure`."""


class _OutlineNodeRequired(TypedDict):
    groups: list[OutlineGroup]
    """Its children, group by group: a branch's arms, a fork's paths, a body."""
    id: str
    """Its id."""
    kind: str
    """The operator's name (`branch`, `fork`, `map`, `loop`, `graph`, `every`, `workflow`,
    `spawn`, `provide`, `sequence`, `sleep`, `wait`) or a step's kind (`llm`, `agent`,
    `tool`, `set`, `approval`, `input`…; `step` for a step written in Rust).
    """
    label: str
    """What it is in a few words: `map over input.items as item`, `sleep 5m`, `llm`; empty
    for a plain sequence.
    """
    layout: OutlineLayout
    """How its groups are drawn."""
    notes: list[str]
    """What its policies add: `if …`, `approved first`, `cached`."""


class OutlineNode(_OutlineNodeRequired, total=False):
    """A step or an operator, as it is drawn. A child's path is its parent's path, `/`, its id
    (a run's step paths add `[i]` for an item or path and `#n` for an iteration).
    """
    fallback: OutlineGroup | None
    """What runs in its place when it fails for good (drawn on an `on failure` edge)."""


class ParentView(TypedDict):
    """Where a forked run came from."""
    at: str
    """The step before which it was forked."""
    run_id: str
    """The run it was forked from."""


class _PendingViewRequired(TypedDict):
    id: str
    """The interrupt's id."""
    kind: InterruptKind
    """`approval`, `input`, `event` or `timer`."""
    message: str
    """What the person deciding is shown."""
    step: str
    """The step that asked."""


class PendingView(_PendingViewRequired, total=False):
    """An open interrupt of a run."""
    deadline: int | None
    """When its `on_timeout` applies (for a timer: when it fires), µs since the epoch."""


class _PopulationRequired(TypedDict):
    workflow: str
    """The workflow whose runs are taken."""


class Population(_PopulationRequired, total=False):
    """Which past runs: one workflow's, narrowed by status and time, or by id; then a sample."""
    ids: list[str]
    """Exactly these runs (each must be of the workflow); the filters above then do not apply."""
    inputs: list[Any]
    """New inputs instead of past runs (at most 100,000): each is run fresh in a sandbox with
    the workflow as its newest recorded run ran it, then recomputed with the change, and
    the two compared. Their `write` and unsafe `external` steps are served the answer a
    past run recorded for the same step and input, else not executed. With `inputs`, the
    filter above (or `ids`) chooses those past runs (the newest 1,000 it finds), and
    `sample` draws from the inputs.
    """
    inputs_file: str | None
    """A JSON Lines file of inputs, one JSON value per line (relative to the experiment
    file; the CLI reads it into `inputs` — a server reads no file of its callers: send
    `inputs`).
    """
    sample: int | None
    """At most this many of them, drawn at random with `seed` (the same seed, the same runs)."""
    seed: int
    """The sample's seed (default 0)."""
    since: str | None
    """Only runs created at or after this instant (RFC 3339)."""
    started_by: str | None
    """Only runs started by this user (`ann`, `schedule:…`, `trigger:…`)."""
    status: RunStatus | None
    """Only runs that ended so (default: completed)."""
    tag: str | None
    """Only runs with this tag (`runs list --tag`, `GET /v1/runs?tag=`)."""
    until: str | None
    """Only runs created before this instant (RFC 3339)."""


class _ProblemRequired(TypedDict):
    code: str
    """The stable error code (`not_found`, `access_denied`, `invalid_workflow`, …)."""
    detail: str
    """What happened in this case."""
    status: int
    """The HTTP status, repeated."""
    title: str
    """A short summary of the kind of problem."""


class Problem(_ProblemRequired, total=False):
    """The body of an error answer."""
    problems: list[str]
    """For `invalid_workflow`: every problem in the file, at its `file:line:col`."""


class Protocols(TypedDict):
    """The protocol versions a server speaks."""
    worker: list[int]
    """The step-worker protocol's versions."""


class QueueList(TypedDict):
    """The queues with work or workers."""
    queues: list[QueueView]
    """The queues."""


class QueueView(TypedDict):
    """A queue as operators see it."""
    claimed: int
    """Tasks workers hold."""
    handlers: list[str]
    """The handlers workers polling it offer."""
    pending: int
    """Tasks waiting for a worker."""
    pollers: int
    """Workers polling it now."""
    queue: str
    """Its name."""


class _QueuedViewRequired(TypedDict):
    priority: int
    """Its priority among runs waiting for a worker."""
    reason: str
    """In words, for a person."""


class QueuedView(_QueuedViewRequired, total=False):
    """Why a pending run waits, as the store sees it now."""
    concurrency_key: str | None
    """Its concurrency group, if it has one."""
    concurrency_limit: int | None
    """How many of the group's runs may execute at once."""
    held_by: list[str]
    """The group's runs holding its slots now (running or suspended)."""


RecomputeRun = TypedDict("RecomputeRun", {"files": dict[str, str], "from": str | None, "models": dict[str, str], "persist": bool, "source": str | None, "version": int | None}, total=False)


class _RecomputeViewRequired(TypedDict):
    changed: bool
    """Whether anything changed (a value, a schema violation, a decision, the output)."""
    decisions: list[DecisionChange]
    """Decisions that changed."""
    run: str
    """The run recomputed."""
    status: RunStatus
    """How the recompute ended."""
    steps: list[RecomputedStep]
    """Every step, in the order the original run first reached it (steps only the
    recompute reached after them, in its order).
    """
    usage: UsageChange
    """Model usage and cost, original against recomputed."""


class RecomputeView(_RecomputeViewRequired, total=False):
    """What a recompute found (`POST /v1/runs/{id}/recompute`, `recompute --json`): per step
    what changed, decisions, outputs, and what the run's model calls used and cost before
    and after.
    """
    error: ErrorView | None
    """Why it failed, if it did."""
    forked: str | None
    """The new run, if persisted."""
    recomputed_output: Any
    """The recomputed output."""
    recorded_output: Any
    """The original output."""


class _RecomputedStepRequired(TypedDict):
    path: str
    """The step path compared."""


class RecomputedStep(_RecomputedStepRequired, total=False):
    """One step in a recompute."""
    why: str | None
    """Why a step was served or is missing, in words."""
    would_execute_with: Any
    """A served write (or unsafe external step) whose input changed: the input it would be
    given now. It was not executed.
    """


class _RegisterWorkflowRequired(TypedDict):
    source: str
    """The file's YAML text."""


class RegisterWorkflow(_RegisterWorkflowRequired, total=False):
    """A workflow file to register."""
    files: dict[str, str]
    """The files it calls (`workflow: parts/x.yaml`), by path relative to it."""


class _ReplayReportRequired(TypedDict):
    identical: bool
    """Whether every step and the output are identical (served steps count as identical)."""
    run: str
    """The run replayed."""
    steps: list[StepComparison]
    """Every step, in the order the original run first reached it (steps only the replay
    reached after them, in its order).
    """


class ReplayReport(_ReplayReportRequired, total=False):
    """What a replay found (`POST /v1/runs/{id}/replay`, `replay --json`)."""
    recorded_output: Any
    """The original run's output."""
    replayed_output: Any
    """The replay's output."""


class ResumeRun(TypedDict, total=False):
    """A resume."""
    wait_seconds: float | None
    """Wait up to this long (at most 60) for it to finish or stop again."""


class RunDefinition(TypedDict):
    """The definition a run is pinned to."""
    graph: Outline
    """Its structure, as `stepwright graph` and the dashboard draw it: the version the run
    executes, not necessarily the newest one.
    """
    hash: str
    """Its definition hash."""
    models: list[ModelBinding]
    """Its model bindings: what a recompute's `models` may name."""
    run_id: str
    """The run."""


class _RunDetailsRequired(TypedDict):
    pending: list[PendingView]
    """The interrupts it waits on."""
    run_id: str
    """The run's id (a UUIDv7)."""
    status: RunStatus
    """Where it stands."""
    steps: list[StepView]
    """A row per step path, in the order they first appear."""
    workflow: str
    """Its workflow's name."""


class RunDetails(_RunDetailsRequired, total=False):
    """A run: where it stands, its output or error, what it waits for, and a row per step."""
    awaiting: list[AwaitedView]
    """The events its `wait` steps wait for (each answered by a message sent to the run's
    inbox of that name).
    """
    created_at: int | None
    """When it was created (µs since the epoch), when read from a store."""
    error: ErrorView | None
    """Why it failed or was cancelled."""
    input: Any
    """Its input, when read from a store."""
    lease_expires_at: int | None
    """When that worker's lease lapses unless renewed (µs since the epoch)."""
    output: Any
    """Its output, once completed."""
    owner: str | None
    """The worker executing it now, if one is."""
    parent: ParentView | None
    """The run it was forked from, if it was."""
    queued: QueuedView | None
    """Why a pending run has not started: what it waits for."""
    started_by: StartedBy | None
    """Who started it, when it was started by someone the store knows."""
    tags: list[str]
    """The tags it was started with (a fork keeps its run's)."""
    tasks: list[TaskWaitView]
    """The step workers' tasks it waits on (`worker:` tools), each with why."""
    usage: Totals | None
    """Model usage and cost over the whole run, when it called models."""
    wake_at: int | None
    """When a timer, retry or deadline it waits on is due (µs since the epoch)."""


class _RunPageRequired(TypedDict):
    runs: list[RunSummary]
    """Newest first."""


class RunPage(_RunPageRequired, total=False):
    """A page of runs."""
    next_cursor: str | None
    """Pass as `cursor` for the next page; absent on the last."""


class _RunSummaryRequired(TypedDict):
    created_at: int
    """When it was created (µs since the epoch)."""
    run_id: str
    """The run's id."""
    status: RunStatus
    """Where it stands."""
    updated_at: int
    """When its status last changed (µs since the epoch): for a finished run, when it ended."""
    workflow: str
    """Its workflow."""


class RunSummary(_RunSummaryRequired, total=False):
    """A run in a listing."""
    lease_expires_at: int | None
    """When that worker's lease lapses unless renewed (µs since the epoch)."""
    owner: str | None
    """The worker executing it, if one is."""
    parent_run_id: str | None
    """The run it was forked from, if it was."""
    started_by: StartedBy | None
    """Who started it, when it was started by someone the server knows."""
    tags: list[str]
    """The tags it was started with."""
    usage: Totals | None
    """Its model usage and cost so far, when asked for (`usage=true`)."""
    waiting_for: str | None
    """A suspended run: what it waits for, said for a person (`a person at review: Ship it?`,
    `a timer at nap until …`).
    """


class _ScheduleDetailsRequired(TypedDict):
    created_at: int
    """When it was created (µs since the epoch)."""
    next_fires: list[TickView]
    """Its next ticks (µs since the epoch, and the reading in its zone)."""
    paused: bool
    """Paused: its ticks start nothing."""
    schedule: str
    """Its name in the workflow's file."""
    spec: Any
    """What it says: cadence, bounds, jitter, input, overlap, catch-up window."""
    ticks: list[TickView]
    """Its last ticks, newest first: the run each started, or why it started none."""
    waiting: list[TickView]
    """Ticks waiting for the last run to end (`buffer_one`, `buffer_all`)."""
    workflow: str
    """Its workflow."""


class ScheduleDetails(_ScheduleDetailsRequired, total=False):
    """A schedule with its next fires and its recent ticks."""
    last_run: str | None
    """The run of its last started tick."""
    next_fire_at: int | None
    """When its next tick fires (µs since the epoch; none past its end)."""


class _ScheduleViewRequired(TypedDict):
    created_at: int
    """When it was created (µs since the epoch)."""
    paused: bool
    """Paused: its ticks start nothing."""
    schedule: str
    """Its name in the workflow's file."""
    spec: Any
    """What it says: cadence, bounds, jitter, input, overlap, catch-up window."""
    workflow: str
    """Its workflow."""


class ScheduleView(_ScheduleViewRequired, total=False):
    """A schedule as the API shows it."""
    next_fire_at: int | None
    """When its next tick fires (µs since the epoch; none past its end)."""


class _ScoreRequired(TypedDict):
    name: str
    """The evaluator."""


class Score(_ScoreRequired, total=False):
    """One evaluator's score of one run."""
    error: str | None
    """Why there is no score (the expression failed, there is no output)."""
    new: float | None
    """The recomputed output's score; for `compare` and `judge`, the change judged: 0 no worse
    (true, same), −1 a regression (false, worse), 1 better, or the number a `compare` gave.
    """
    old: float | None
    """The recorded output's score (`compare`: none)."""
    reason: str | None
    """A judge's reason for its verdict."""


class _SendEventRequired(TypedDict):
    name: str
    """Its name (`ticket.created`)."""


class SendEvent(_SendEventRequired, total=False):
    """An event to store."""
    idempotency_key: str | None
    """A key naming one event in the namespace: the same key again stores nothing and
    returns the first event (`200`).
    """
    payload: Any
    """What it carries (default null)."""


class ServedAnswer(TypedDict):
    """An effect served from a past run's journal."""
    run: str
    """The run that recorded the answer served."""
    step: str
    """The step's path."""


class _SessionRequired(TypedDict):
    key_id: str
    """The key in use: the session's own key when signed in by the cookie."""
    namespace: str
    """The namespace every request is confined to."""
    roles: list[str]
    """The roles (`viewer`, `operator`, `approver`, `admin`)."""
    user: str
    """The user decisions are taken as."""


class Session(_SessionRequired, total=False):
    """Who is signed in."""
    expires_at: int | None
    """When it stops being accepted (µs since the epoch), if ever."""


class SignIn(TypedDict):
    """A sign-in."""
    api_key: str
    """The API key to sign in with (`keys create` made it)."""


SpanView = TypedDict("SpanView", {"activity": StepActivity, "from": int, "to": int | None}, total=False)


class _StartRunRequired(TypedDict):
    workflow: str
    """The registered workflow's name."""


class StartRun(_StartRunRequired, total=False):
    """A run to start."""
    concurrency: ConcurrencyGroup | None
    """The run's concurrency group, instead of the one the workflow's `concurrency.key`
    gives: at most `limit` runs with this `key` execute at a time, across all workers.
    """
    idempotency_key: str | None
    """A key that makes the start idempotent: the same key in the namespace always answers
    the first run it started.
    """
    input: Any
    """The workflow's input."""
    priority: int | None
    """The run's priority among runs waiting for a worker, higher first (default: the
    workflow's, else 0).
    """
    tags: list[str]
    """Labels to find the run by later (`GET /v1/runs?tag=…`, an experiment's population):
    at most 16, each 1 to 64 ASCII letters, digits and `_ - . : / =`, none twice.
    """
    version: int | None
    """Its version (default: the newest)."""
    wait_seconds: float | None
    """Wait up to this long (at most 60) for the run to finish or stop for a person."""


class _StartedByRequired(TypedDict):
    id: str
    """As the runs' `started_by` filter takes it: the user's id, `schedule:NAME` or
    `trigger:NAME`.
    """
    kind: StarterKind
    """A person (a key's or a signed-in user), a schedule's tick or a trigger's events."""


class StartedBy(_StartedByRequired, total=False):
    """Who started a run."""
    events: list[int]
    """The trigger's events that started it (their sequence numbers: `GET /v1/events/{seq}`)."""
    tick: str | None
    """The schedule's tick that started it (RFC 3339)."""


class _StepComparisonRequired(TypedDict):
    outcome: StepReplay
    """How it compares."""
    path: str
    """The step path compared."""


class StepComparison(_StepComparisonRequired, total=False):
    """One step's comparison in a replay."""
    diff: list[str]
    """For a different output: the structural differences, as `pointer: before → after`
    lines (arrays matched by the step's `diff_key` when it has one).
    """
    recorded: str | None
    """The recorded output's hash (SHA-256 of its canonical JSON, in hex)."""
    replayed: str | None
    """The replayed output's hash."""


class StepUsageChange(TypedDict):
    """One step's model usage before and after a recompute."""
    after: Totals
    """After."""
    before: Totals
    """Before."""
    path: str
    """The step path (where its model calls were made)."""


class _StepViewRequired(TypedDict):
    attempts: int
    """The highest attempt recorded."""
    path: str
    """The step path (`drafts[1]/write`)."""
    status: StepStatus
    """Where it stands."""


class StepView(_StepViewRequired, total=False):
    """One step path of a run."""
    duration_ms: float | None
    """From its first start to its end, once both are known."""
    ended_at: int | None
    """When it ended (µs since the epoch)."""
    output: Any
    """Its output, once completed."""
    spans: list[SpanView]
    """What it did when, in order, from the journal's facts (the timeline's bars); once the
    run has ended, none is open.
    """
    started_at: int | None
    """When its first attempt started (µs since the epoch): a running step's elapsed time is
    from here.
    """
    usage: Totals | None
    """Its model usage and cost, when it called models."""
    waiting_for: str | None
    """What it waits for now, said for a person: `a person: Ship it?`, `a timer until …`,
    `the event `paid``, `a worker on queue `py` to claim `summarise``.
    """


class Stored(TypedDict):
    """What was stored."""
    run_id: str
    """The run."""
    stored: bool
    """Always true: the answer comes once the message is stored."""


class _TaskRequired(TypedDict):
    attempt: int
    """The attempt (1-based) of the step."""
    handler: str
    """The handler to run (`name` or `name@version`)."""
    id: str
    """The task's id."""
    input: Any
    """The handler's input."""
    lease: int
    """The lease: send it with every answer about the task."""
    lease_expires: int
    """When the lease runs out unless renewed (microseconds since the Unix epoch)."""
    lease_ms: int
    """How long the lease lasts without a heartbeat, in milliseconds."""
    queue: str
    """The queue it came from."""
    run: TaskRun
    """The run."""
    step: str
    """The step's path in the run."""


class Task(_TaskRequired, total=False):
    """A task as a worker gets it."""
    details: Any
    """The last heartbeat's details from an earlier attempt's worker, if any."""
    idempotency_key: str | None
    """The effect fence's key for a fenced tool: pass it to the system the handler changes."""
    recompute: bool
    """A recompute's task (a what-if over a past run): its answer goes to the recompute, not
    to the run. Absent when false.
    """


class _TaskAnswerItemRequired(TypedDict):
    id: str
    """The task."""
    lease: int
    """Its lease."""
    outcome: TaskOutcome
    """What the handler did."""


class TaskAnswerItem(_TaskAnswerItemRequired, total=False):
    """One answer of [`TaskAnswers`]."""
    error: TaskError | None
    """For `fail`: why."""
    output: Any
    """For `complete`: the output (absent is `null`)."""


class _TaskAnswerTakenRequired(TypedDict):
    id: str
    """The task."""


class TaskAnswerTaken(_TaskAnswerTakenRequired, total=False):
    """What became of one answer: the task's state after it, or why it was refused (the codes of
    the single-answer endpoints: `lease_lost`, `not_found`, `forbidden`, `bad_request`).
    """
    code: str | None
    """The refusal's code, when it was refused."""
    detail: str | None
    """The refusal, in words."""
    state: TaskStatus | None
    """Its state after the answer, when it was taken."""


class TaskAnswered(TypedDict):
    """The state a task is in after an answer."""
    id: str
    """The task."""
    state: TaskStatus
    """Its state now."""


class TaskAnswers(TypedDict):
    """Many answers in one request (`POST /v1/tasks/answers`): what a busy worker sends instead
    of one request per task. Each answer is fenced by its own lease and answered on its own.
    """
    answers: list[TaskAnswerItem]
    """The answers (1 to 1000), each about a task the worker holds."""


class TaskAnswersTaken(TypedDict):
    """What became of each answer of a [`TaskAnswers`], in order."""
    answers: list[TaskAnswerTaken]
    """One per answer sent."""


class TaskChunks(TypedDict):
    """What a running handler streams, in order."""
    items: list[ChunkItem]
    """Its items."""
    lease: int
    """The task's lease."""
    seq: int
    """The chunk's number for this task (from 0, one more each time): a repeat is dropped."""


class _TaskErrorRequired(TypedDict):
    code: str
    """A stable lowercase code (`docs/error-codes.md`, or the handler's own)."""
    message: str
    """What went wrong."""


class TaskError(_TaskErrorRequired, total=False):
    """A handler's failure."""
    retryable: bool
    """Whether the step's retry policy may try again."""


class TaskLeaseBody(TypedDict):
    """A lease alone: for `cancelled` (the handler stopped on a cancel) and `release` (the
    handler never started; the task goes back to the queue, not counted as an attempt).
    """
    lease: int
    """The task's lease."""


class TaskList(TypedDict):
    """Tasks, newest first."""
    tasks: list[TaskSummary]
    """The tasks."""


class TaskRun(TypedDict):
    """The run a task belongs to."""
    id: str
    """The run's id."""
    workflow: str
    """Its workflow."""


class _TaskSummaryRequired(TypedDict):
    attempt: int
    """The attempt."""
    created_at: int
    """When it was dispatched (microseconds since the Unix epoch)."""
    handler: str
    """Its handler."""
    id: str
    """The task's id."""
    queue: str
    """Its queue."""
    run_id: str
    """The run."""
    state: TaskStatus
    """Its state."""
    step: str
    """The step's path."""


class TaskSummary(_TaskSummaryRequired, total=False):
    """A task as operators see it."""
    finished_at: int | None
    """When it ended, if it did."""
    recompute: bool
    """A recompute's task (a what-if over a past run): its answer goes to the recompute, not
    to the run. Absent when false.
    """
    worker: str | None
    """The worker that holds (or last held) it."""


class _TaskWaitViewRequired(TypedDict):
    attempt: int
    """The step's attempt."""
    handler: str
    """The handler that runs it."""
    queue: str
    """The queue it waits in."""
    reason: str
    """Why the run waits, in words: "no worker polls queue `py` for `summarise`"."""
    state: TaskStatus
    """`pending` (no worker has it) or `claimed` (a worker runs it)."""
    step: str
    """The step (or an agent's tool call) whose task it is."""
    task_id: str
    """The task's id."""


class TaskWaitView(_TaskWaitViewRequired, total=False):
    """A step worker's task a run waits on."""
    worker: str | None
    """The worker that runs it, once claimed."""


class _TickViewRequired(TypedDict):
    at: int
    """Its time (µs since the epoch)."""
    local: str
    """Its reading in the schedule's zone."""


class TickView(_TickViewRequired, total=False):
    """A tick."""
    run_id: str | None
    """The run it started."""
    skipped: str | None
    """Why it started none (`overlap`, `buffer_full`, `outside_catchup_window`, `paused`,
    `dst_gap`, `start_failed: why`).
    """


class TimerWoken(TypedDict):
    """A durable timer woken before it was due."""
    interrupt_id: str
    """The timer's interrupt."""
    run_id: str
    """The run."""
    status: RunStatus
    """Where the run stands: it continues on a worker."""
    woken_by: str
    """Who woke it (the key's user)."""


class _TotalsRequired(TypedDict):
    calls: int
    """Calls made or played back."""
    cost_usd: float
    """Cost in US dollars (calls without prices count zero)."""
    input_tokens: int
    """Prompt tokens."""
    output_tokens: int
    """Generated tokens."""


class Totals(_TotalsRequired, total=False):
    """Usage and cost summed over calls."""
    calls_without_usage: int
    """Calls whose provider reported no usage: their tokens and cost are unknown (not zero)."""
    latency_ms: float
    """The calls' time, in all: from each request to its whole answer, in milliseconds."""


class TriggerDetails(TypedDict):
    """A trigger with what it holds and its recent fires."""
    batch: list[int]
    """Events of the batch being collected."""
    created_at: int
    """When it was created (µs since the epoch)."""
    fires: list[FireView]
    """Its last fires, newest event first."""
    held: list[Any]
    """Events a debounce holds (by key) until their key is quiet."""
    paused: bool
    """Paused: the events it matches start nothing."""
    read_through: int
    """The last event of the log it has read."""
    spec: Any
    """What it says: event pattern, filter, input, debounce, batch, concurrency."""
    trigger: str
    """Its name in the workflow's file."""
    workflow: str
    """Its workflow."""


class TriggerView(TypedDict):
    """A trigger as the API shows it."""
    created_at: int
    """When it was created (µs since the epoch)."""
    paused: bool
    """Paused: the events it matches start nothing."""
    spec: Any
    """What it says: event pattern, filter, input, debounce, batch, concurrency."""
    trigger: str
    """Its name in the workflow's file."""
    workflow: str
    """Its workflow."""


class Triggered(TypedDict):
    """What `trigger` started."""
    run_id: str
    """The run."""
    tick_at: int
    """Its tick (µs since the epoch)."""


class UsageChange(TypedDict):
    """Model usage and cost of a run against its recompute."""
    after: Totals
    """The recompute's, in all (a step served from the journal counts what it cost then)."""
    before: Totals
    """The original run's, in all."""
    steps: list[StepUsageChange]
    """Per step path whose usage differs, in the report's step order."""


class _VersionInfoRequired(TypedDict):
    hash: str
    """Its definition hash."""
    registered_at: int
    """When it was registered (µs since the epoch)."""
    version: int
    """The version."""


class VersionInfo(_VersionInfoRequired, total=False):
    """One version of a workflow."""
    registered_by: str | None
    """Who registered it."""


class WakeChannel(TypedDict):
    """A wake-up of an `every` channel."""
    wake: str
    """The channel."""


class WebhookView(TypedDict):
    """A webhook as the API shows it (never its secret)."""
    created_at: int
    """When it was made (µs since the epoch)."""
    events: list[str]
    """Which."""
    id: str
    """Its id."""
    url: str
    """Where events are posted."""


class WorkerEvaluator(TypedDict):
    """Where a `worker` evaluator's handler is served."""
    handler: str
    """The handler's name (`name@2` for a version)."""
    queue: str
    """The queue its workers poll."""


class _WorkerInfoRequired(TypedDict):
    id: str
    """A stable id for the worker process's life (the SDKs make one)."""


class WorkerInfo(_WorkerInfoRequired, total=False):
    """Who is claiming."""
    name: str | None
    """A name for people (a host name, a deployment)."""
    sdk: str | None
    """The SDK and its version: `py/0.1.0`."""


class WorkerList(TypedDict):
    """The workers this server heard from in the last ten minutes."""
    workers: list[WorkerView]
    """The workers."""


class _WorkerViewRequired(TypedDict):
    handlers: list[str]
    """The handlers it offers."""
    id: str
    """Its id."""
    last_seen: int
    """When it last claimed or heartbeat (microseconds since the Unix epoch)."""
    polling: bool
    """Whether a claim of it is parked now."""
    queue: str
    """The queue it polls."""


class WorkerView(_WorkerViewRequired, total=False):
    """A worker the server has heard from."""
    name: str | None
    """Its name."""
    sdk: str | None
    """Its SDK."""


class _WorkflowDetailsRequired(TypedDict):
    graph: Outline
    """The newest version's structure, as `stepwright graph` and the dashboard draw it."""
    name: str
    """The workflow's name."""
    versions: list[VersionInfo]
    """Its versions, newest first."""


class WorkflowDetails(_WorkflowDetailsRequired, total=False):
    """A registered workflow with its versions, input schema and graph."""
    input_schema: Any
    """The newest version's input schema, if it declares one; `x-stepwright-order` lists its
    top-level properties in the order the file declares them (what a form follows).
    """


class WorkflowSummary(TypedDict):
    """A registered workflow in a listing."""
    latest_version: int
    """Its newest version (what a run started by name gets)."""
    name: str
    """The workflow's name."""
    versions: int
    """How many versions it has."""


class WorkflowVersion(TypedDict):
    """A registered version."""
    hash: str
    """The definition hash its runs are pinned to."""
    name: str
    """The workflow's name."""
    version: int
    """Its version: 1 for the first source of the name, one more for each new source."""


class WouldExecute(TypedDict):
    """A write an experiment did not execute, whose input the change changed."""
    input: Any
    """The input it would be given now."""
    step: str
    """The step's path."""


OutlineLayout = Union[dict[str, Any]]
"""How a node's groups are drawn."""


RunMessage = Union[InboxMessage, WakeChannel]
"""A message's two shapes, for the document: either an inbox and its message, or a
channel to wake (the handler says which was meant when a body has parts of both).
"""
