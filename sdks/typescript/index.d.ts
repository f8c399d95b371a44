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
}

export declare class Client {
  constructor(baseUrl: string, apiKey: string);
  readonly runs: {
    start(workflow: string, input?: unknown, options?: StartOptions): Promise<RunDetails>;
    get(runId: string): Promise<RunDetails>;
    cancel(runId: string, reason?: string): Promise<Schemas["Cancelled"]>;
    wait(runId: string, options?: { timeoutMs?: number; pollMs?: number }): Promise<RunDetails>;
    /** The run's events as they happen; resumes by itself after a cut; ends with the run. */
    stream(runId: string, options?: { tokens?: boolean; after?: number }): AsyncGenerator<StreamEvent>;
  };
  readonly workflows: {
    register(source: string, files?: Record<string, string>): Promise<Schemas["WorkflowVersion"]>;
  };
  readonly tasks: {
    complete(taskId: string, lease: number, output: unknown): Promise<Schemas["TaskAnswered"]>;
    fail(taskId: string, lease: number, code: string, message: string, options?: { retryable?: boolean }): Promise<Schemas["TaskAnswered"]>;
    list(filters?: { queue?: string; state?: Schemas["TaskStatus"]; run?: string; limit?: number }): Promise<TaskSummary[]>;
  };
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
