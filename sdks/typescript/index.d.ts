// The package's types. The API's request and answer shapes are `components["schemas"]` of
// `api.d.ts`, generated from docs/openapi.json by openapi-typescript (see test/api.test.mjs,
// which fails when it is stale).
import type { components } from "./api.js";

export type Schemas = components["schemas"];
export type RunDetails = Schemas["RunDetails"];
export type Task = Schemas["Task"];
export type TaskSummary = Schemas["TaskSummary"];

/** A recorded event as a run's stream carries it (the `data:` of an event with an `id`). */
export interface StreamedEvent {
  run: string;
  path: string;
  at: number;
  tenant: string | null;
  user: string | null;
  kind: string;
  data: unknown;
}

/** A piece of text streamed for a step (a model's tokens, a handler's `emit({ token })`). */
export interface StreamedToken {
  path: string;
  text: string;
}

/** An event of a run's stream: a recorded event (with its `id`), or a live `token`. */
export type StreamEvent =
  | { id: number; event: string; data: StreamedEvent }
  | { id?: undefined; event: "token"; data: StreamedToken };

/** A problem+json answer: `status`, the stable `code` and the `detail`. */
export declare class StepwrightError extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly body: Record<string, unknown>;
}

export interface StartOptions {
  version?: number;
  idempotency_key?: string;
  priority?: number;
  /** Labels to find the run by later (`runs.list({ tag })`, an experiment's population). */
  tags?: string[];
}

type S<Name extends keyof Schemas> = Schemas[Name];

/** Schedules and triggers: kept from a registered workflow's file. */
export interface KeptFromFiles<View, Details> {
  create(workflow: string, options?: { version?: number; only?: string[]; paused?: boolean }): Promise<View[]>;
  list(): Promise<View[]>;
  get(workflow: string, name: string): Promise<Details>;
  delete(workflow: string, name: string): Promise<Record<string, never>>;
  pause(workflow: string, name: string): Promise<View>;
  resume(workflow: string, name: string): Promise<View>;
}

export declare class Client {
  constructor(baseUrl: string, apiKey: string);
  health(): Promise<S<"Health">>;
  readonly runs: {
    start(workflow: string, input?: unknown, options?: StartOptions): Promise<RunDetails>;
    get(runId: string): Promise<RunDetails>;
    list(filters?: { workflow?: string; status?: string; limit?: number; input_contains?: string; parent?: string; started_by?: string; tag?: string }): AsyncGenerator<S<"RunSummary">>;
    cancel(runId: string, reason?: string): Promise<S<"Cancelled">>;
    wait(runId: string, options?: { timeoutMs?: number; pollMs?: number }): Promise<RunDetails>;
    /** The run's events as they happen; resumes by itself after a cut; ends with the run. */
    stream(runId: string, options?: { tokens?: boolean; after?: number }): AsyncGenerator<StreamEvent>;
    resume(runId: string, options?: Partial<S<"ResumeRun">>): Promise<RunDetails>;
    replay(runId: string): Promise<S<"ReplayReport">>;
    recompute(runId: string, options?: Partial<S<"RecomputeRun">>): Promise<S<"RecomputeView">>;
    fork(runId: string, at: string, options?: Partial<Omit<S<"ForkRun">, "at">>): Promise<RunDetails>;
    message(runId: string, inbox: string, message: unknown): Promise<S<"Stored">>;
    definition(runId: string): Promise<S<"RunDefinition">>;
    artifact(runId: string, hash: string): Promise<S<"Artifact">>;
  };
  readonly workflows: {
    register(source: string, files?: Record<string, string>): Promise<S<"WorkflowVersion">>;
    list(): Promise<S<"WorkflowSummary">[]>;
    get(name: string): Promise<S<"WorkflowDetails">>;
  };
  readonly interrupts: {
    list(options?: { status?: string; kind?: S<"InterruptKind"> }): Promise<S<"InboxItem">[]>;
    wake(interruptId: string): Promise<S<"TimerWoken">>;
    /** Who in the key's namespace could meet an approver list (`["role:lead"]`). */
    checkApprovers(approvers: string[]): Promise<S<"ApproversChecked">>;
    decide(interruptId: string, decision: S<"DecisionKind">, fields?: Partial<Omit<S<"DecisionBody">, "decision">>): Promise<S<"DecisionTaken">>;
    link(interruptId: string, options?: { expiresInSeconds?: number }): Promise<S<"LinkMade">>;
  };
  readonly events: {
    send(name: string, payload?: unknown, options?: { idempotencyKey?: string }): Promise<S<"EventSent">>;
    list(filters?: { name?: string; before?: number; limit?: number }): Promise<S<"EventView">[]>;
    get(seq: number): Promise<S<"EventDetails">>;
  };
  readonly schedules: KeptFromFiles<S<"ScheduleView">, S<"ScheduleDetails">> & {
    trigger(workflow: string, name: string): Promise<S<"Triggered">>;
    backfill(workflow: string, name: string, from: number, to: number, options?: { rate?: S<"BackfillRequest">["rate"] }): Promise<S<"BackfillAccepted">>;
  };
  readonly triggers: KeptFromFiles<S<"TriggerView">, S<"TriggerDetails">>;
  readonly webhooks: {
    create(url: string, events: string[], secret: string): Promise<S<"WebhookView">>;
    list(): Promise<S<"WebhookView">[]>;
    delete(webhookId: string): Promise<Record<string, never>>;
    deliveries(webhookId: string): Promise<S<"DeliveryView">[]>;
  };
  readonly tasks: {
    complete(taskId: string, lease: number, output: unknown): Promise<S<"TaskAnswered">>;
    fail(taskId: string, lease: number, code: string, message: string, options?: { retryable?: boolean }): Promise<S<"TaskAnswered">>;
    defer(taskId: string, lease: number, ms: number): Promise<S<"TaskAnswered">>;
    release(taskId: string, lease: number): Promise<S<"TaskAnswered">>;
    answer(answers: S<"TaskAnswerItem">[]): Promise<S<"TaskAnswersTaken">>;
    list(filters?: { queue?: string; state?: S<"TaskStatus">; run?: string; limit?: number }): Promise<TaskSummary[]>;
  };
  readonly queues: { list(): Promise<S<"QueueList">> };
  readonly workers: { list(): Promise<S<"WorkerList">> };
  readonly experiments: {
    start(spec: S<"ExperimentSpec">): Promise<S<"ExperimentSummary">>;
    list(): Promise<S<"ExperimentSummary">[]>;
    get(experimentId: string): Promise<S<"ExperimentDetails">>;
    cancel(experimentId: string): Promise<S<"ExperimentSummary">>;
    resume(experimentId: string): Promise<S<"ExperimentSummary">>;
    wait(experimentId: string, options?: { timeoutMs?: number; pollMs?: number }): Promise<S<"ExperimentDetails">>;
  };
  /** Any other request (an operation this client has no method for yet). */
  request(method: string, path: string, body?: unknown, retries?: number): Promise<any>;
}

/** Return it from a handler to complete later: the lease lasts `ms` without heartbeats. */
export declare class Defer {
  constructor(ms: number);
  readonly ms: number;
}

/** Raise it from a handler to fail the attempt with your own `code` and retryability. */
export declare class HandlerError extends Error {
  constructor(code: string, message: string, options?: { retryable?: boolean });
  readonly code: string;
  readonly retryable: boolean;
}

/** What a handler gets besides its input. */
export interface TaskContext {
  readonly taskId: string;
  readonly handler: string;
  readonly attempt: number;
  readonly runId: string;
  readonly workflow: string;
  readonly step: string;
  /** The effect fence's key for a fenced tool: pass it to the system the handler changes. */
  readonly idempotencyKey: string | null;
  /** The task's lease: with `taskId`, what completes it from elsewhere after a `Defer`. */
  readonly lease: number;
  /** The last heartbeat's details from an earlier attempt, if any. */
  readonly details: unknown;
  /** A recompute's task (a what-if over a past run): its answer is compared, never kept by the run. */
  readonly recompute: boolean;
  /** Fires when the run is cancelled or this worker lost the lease. */
  readonly signal: AbortSignal;
  /** Keeps `details` for a later attempt (sent with the next heartbeat). */
  heartbeat(details: unknown): void;
  /** Streams to the run: `token` live (not journaled), `progress` and `log` as journaled events. */
  emit(chunk: { token?: string; progress?: unknown; log?: string }): void;
}

export type Handler<I = any, O = unknown> = (ctx: TaskContext, input: I) => O | Promise<O>;

export interface WorkerOptions {
  queue?: string;
  slots?: number;
  name?: string;
  waitSeconds?: number;
}

export declare class Worker {
  constructor(baseUrl: string, apiKey: string, options?: WorkerOptions);
  readonly id: string;
  handler<I = any, O = unknown>(name: string, fn: Handler<I, O>): this;
  run(): Promise<void>;
  stop(): void;
}

/** The `Stepwright-Signature` header Stepwright sends with `body` (webhooks, pushed tasks). */
export declare function sign(secret: string, body: string | Uint8Array, at?: number): Promise<string>;

/**
 * Whether `header` signs exactly `body` (the raw bytes received, before parsing) with
 * `secret`, sent within `toleranceSeconds` (default 300) of now.
 */
export declare function verifySignature(
  secret: string,
  header: string | null | undefined,
  body: string | Uint8Array,
  options?: { toleranceSeconds?: number; now?: number },
): Promise<boolean>;
