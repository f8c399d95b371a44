// Stepwright for JavaScript and TypeScript: drive runs over the HTTP API (`Client`) and
// write steps that run in this process (`Worker`). `fetch` only: Node ≥ 20, Bun, Deno.

const PROTOCOL = "1";
const SDK = "ts/0.1.0";
const TERMINAL = new Set(["completed", "failed", "cancelled"]);

/** A problem+json answer: `status`, the stable `code`, and the `detail`. */
export class StepwrightError extends Error {
  constructor(status, code, detail, body) {
    super(`${status} ${code}: ${detail}`);
    this.name = "StepwrightError";
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.body = body ?? {};
  }
}

async function problem(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    body = {};
  }
  return new StepwrightError(response.status, body.code ?? "http_error", body.detail ?? response.statusText, body);
}

async function call(base, headers, method, path, body, signal) {
  const response = await fetch(base + path, {
    method,
    headers: body === undefined ? headers : { ...headers, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (!response.ok) throw await problem(response);
  const text = await response.text();
  return text ? JSON.parse(text) : {};
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function parseEvent(block) {
  const event = {};
  const data = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") data.push(value);
    else if (name === "id") event.id = Number(value);
    else if (name === "event") event.event = value;
  }
  if (data.length === 0) return undefined;
  event.data = JSON.parse(data.join("\n"));
  event.event ??= "message";
  return event;
}

/** `new Client(baseUrl, apiKey)`: every resource a key works with, as methods returning the
 * API's JSON answers (typed by `api.d.ts`, generated from the document). */
export class Client {
  constructor(baseUrl, apiKey) {
    this.base = baseUrl.replace(/\/$/, "");
    this.headers = { authorization: `Bearer ${apiKey}`, "user-agent": `stepwright-${SDK}` };
    const request = (method, path, body, retries = 0) => this.request(method, path, body, retries);
    this.runs = {
      /** Starts a run; the idempotency key is made here when none is given and reused on
       * every transport retry, so a retried POST never starts two runs. */
      start: (workflow, input = null, options = {}) =>
        request(
          "POST",
          "/v1/runs",
          { workflow, input, ...options, idempotency_key: options.idempotency_key ?? `ts-${crypto.randomUUID()}` },
          3,
        ),
      get: (runId) => request("GET", `/v1/runs/${encodeURIComponent(runId)}`, undefined, 3),
      cancel: (runId, reason) => request("POST", `/v1/runs/${runId}/cancel`, reason ? { reason } : {}),
      stream: (runId, options = {}) => this.stream(runId, options),
      /** Polls until the run has finished (or `timeoutMs` passes). */
      wait: async (runId, { timeoutMs = 60_000, pollMs = 50 } = {}) => {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const run = await request("GET", `/v1/runs/${runId}`);
          if (TERMINAL.has(run.status)) return run;
          if (Date.now() >= deadline) throw new Error(`run ${runId} is still ${run.status} after ${timeoutMs} ms`);
          await sleep(pollMs);
        }
      },
    };
    const seg = encodeURIComponent;
    const given = (fields) => Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined && v !== null));
    const query = (fields) => {
      const text = new URLSearchParams(Object.entries(given(fields)).map(([k, v]) => [k, String(v)])).toString();
      return text ? `?${text}` : "";
    };
    Object.assign(this.runs, {
      /** Runs of the namespace, newest first, page after page. */
      list: async function* (filters = {}) {
        let cursor;
        for (;;) {
          const page = await request("GET", `/v1/runs${query({ ...filters, cursor })}`, undefined, 3);
          yield* page.runs;
          if (!page.next_cursor) return;
          cursor = page.next_cursor;
        }
      },
      resume: (runId, options = {}) => request("POST", `/v1/runs/${seg(runId)}/resume`, given(options)),
      replay: (runId) => request("POST", `/v1/runs/${seg(runId)}/replay`, {}),
      /** In a sandbox, with another version or models (`version`, `models`, `from`, `persist`). */
      recompute: (runId, options = {}) => request("POST", `/v1/runs/${seg(runId)}/recompute`, given(options)),
      fork: (runId, at, options = {}) => request("POST", `/v1/runs/${seg(runId)}/fork`, { at, ...given(options) }),
      message: (runId, inbox, message) => request("POST", `/v1/runs/${seg(runId)}/messages`, { inbox, message }),
      definition: (runId) => request("GET", `/v1/runs/${seg(runId)}/definition`, undefined, 3),
      artifact: (runId, hash) => request("GET", `/v1/runs/${seg(runId)}/artifacts/${seg(hash)}`, undefined, 3),
    });
    this.workflows = {
      register: (source, files = {}) => request("POST", "/v1/workflows", { source, files }),
      list: () => request("GET", "/v1/workflows", undefined, 3),
      get: (name) => request("GET", `/v1/workflows/${seg(name)}`, undefined, 3),
    };
    this.interrupts = {
      /** The decisions the key may take (the approvals inbox); `kind` lists that kind instead. */
      list: ({ status = "open", kind } = {}) => request("GET", `/v1/interrupts${query({ status, kind })}`, undefined, 3),
      /** Wakes a durable timer now, as an operator (only timers are woken). */
      wake: (interruptId) => request("POST", `/v1/interrupts/${seg(interruptId)}/wake`, {}),
      /** Who in the key's namespace could meet an approver list (`["role:lead"]`). */
      checkApprovers: (approvers) => request("POST", "/v1/approvers/check", { approvers }),
      /** `approve`, `reject` (`reason`), `modify` (`payload`) or `respond` (`value`). */
      decide: (interruptId, decision, fields = {}) =>
        request("POST", `/v1/interrupts/${seg(interruptId)}/decision`, { decision, ...fields }),
      link: (interruptId, { expiresInSeconds } = {}) =>
        request("POST", `/v1/interrupts/${seg(interruptId)}/link`, given({ expires_in_seconds: expiresInSeconds })),
    };
    this.events = {
      send: (name, payload = null, { idempotencyKey } = {}) =>
        request("POST", "/v1/events", { name, payload, ...given({ idempotency_key: idempotencyKey }) }, idempotencyKey ? 3 : 0),
      list: (filters = {}) => request("GET", `/v1/events${query(filters)}`, undefined, 3),
      get: (seq) => request("GET", `/v1/events/${seq}`, undefined, 3),
    };
    // Schedules and triggers are kept from a registered workflow's file, and act alike.
    const kept = (kind) => ({
      create: (workflow, { version, only = [], paused } = {}) =>
        request("POST", `/v1/${kind}`, { workflow, only, ...given({ version, paused }) }),
      list: () => request("GET", `/v1/${kind}`, undefined, 3),
      get: (workflow, name) => request("GET", `/v1/${kind}/${seg(workflow)}/${seg(name)}`, undefined, 3),
      delete: (workflow, name) => request("DELETE", `/v1/${kind}/${seg(workflow)}/${seg(name)}`),
      pause: (workflow, name) => request("POST", `/v1/${kind}/${seg(workflow)}/${seg(name)}/pause`),
      resume: (workflow, name) => request("POST", `/v1/${kind}/${seg(workflow)}/${seg(name)}/resume`),
    });
    this.schedules = {
      ...kept("schedules"),
      /** Starts one run of the schedule now. */
      trigger: (workflow, name) => request("POST", `/v1/schedules/${seg(workflow)}/${seg(name)}/trigger`),
      /** Runs the schedule's ticks between `from` and `to` (µs since the epoch). */
      backfill: (workflow, name, from, to, { rate } = {}) =>
        request("POST", `/v1/schedules/${seg(workflow)}/${seg(name)}/backfill`, { from, to, ...given({ rate }) }),
    };
    this.triggers = kept("triggers");
    this.webhooks = {
      create: (url, events, secret) => request("POST", "/v1/webhooks", { url, events, secret }),
      list: () => request("GET", "/v1/webhooks", undefined, 3),
      delete: (webhookId) => request("DELETE", `/v1/webhooks/${seg(webhookId)}`),
      deliveries: (webhookId) => request("GET", `/v1/webhooks/${seg(webhookId)}/deliveries`, undefined, 3),
    };
    const worker = { ...this.headers, "stepwright-protocol": PROTOCOL };
    const answer = (taskId, verb, body) => call(this.base, worker, "POST", `/v1/tasks/${seg(taskId)}/${verb}`, body);
    this.tasks = {
      /** Completes a task under its lease (a deferred or pushed one, from anywhere; a worker key). */
      complete: (taskId, lease, output) => answer(taskId, "complete", { lease, output }),
      /** Fails a task under its lease. */
      fail: (taskId, lease, code, message, { retryable = false } = {}) =>
        answer(taskId, "fail", { lease, error: { code, message, retryable } }),
      /** Keeps a deferred or pushed task's lease for `ms` from now (its heartbeat). */
      defer: (taskId, lease, ms) => answer(taskId, "defer", { lease, for_ms: Math.max(1, Math.round(ms)) }),
      /** Hands a task back unstarted (to the queue, not counted as an attempt). */
      release: (taskId, lease) => answer(taskId, "release", { lease }),
      /** Many answers in one request, each under its own lease. */
      answer: (answers) => call(this.base, worker, "POST", "/v1/tasks/answers", { answers }),
      list: async (filters = {}) => (await request("GET", `/v1/tasks${query(filters)}`, undefined, 3)).tasks,
    };
    this.queues = { list: () => request("GET", "/v1/queues", undefined, 3) };
    this.workers = { list: () => request("GET", "/v1/workers", undefined, 3) };
    const experiment = (id, verb) => request("POST", `/v1/experiments/${seg(id)}/${verb}`);
    this.experiments = {
      /** Starts an experiment (DESIGN §18): the server recomputes its runs in the background. */
      start: (spec) => request("POST", "/v1/experiments", spec),
      list: () => request("GET", "/v1/experiments", undefined, 3),
      /** The experiment and its report (of the runs recomputed so far while it runs). */
      get: (id) => request("GET", `/v1/experiments/${seg(id)}`, undefined, 3),
      cancel: (id) => experiment(id, "cancel"),
      resume: (id) => experiment(id, "resume"),
      /** Polls until the experiment has ended. */
      wait: async (id, { timeoutMs = 600_000, pollMs = 250 } = {}) => {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const details = await this.experiments.get(id);
          if (details.status !== "running") return details;
          if (Date.now() > deadline) throw new Error(`experiment ${id} is still running after ${timeoutMs} ms`);
          await new Promise((resolve) => setTimeout(resolve, pollMs));
        }
      },
    };
  }

  health() {
    return this.request("GET", "/v1/health", undefined, 3);
  }

  /**
   * The run's events as they happen (`{id, event, data}`, and with `tokens` the live
   * `{event: "token", data}` between them). A cut connection resumes with `Last-Event-ID`:
   * nothing lost, nothing repeated. Ends after the run's final event.
   */
  async *stream(runId, { tokens = false, after } = {}) {
    let last = after;
    let failures = 0;
    for (;;) {
      const headers = { ...this.headers, accept: "text/event-stream" };
      if (last !== undefined) headers["last-event-id"] = String(last);
      const query = tokens ? "?tokens=true" : "";
      try {
        const response = await fetch(`${this.base}/v1/runs/${runId}/events${query}`, { headers });
        // The run ended and its last event was read already: nothing more comes.
        if (response.status === 204) return;
        if (!response.ok) throw await problem(response);
        const decoder = new TextDecoder();
        let buffer = "";
        for await (const bytes of response.body) {
          buffer += decoder.decode(bytes, { stream: true });
          let end;
          // Only whole events (a blank line ends one): an event cut mid-way is never yielded.
          while ((end = buffer.indexOf("\n\n")) !== -1) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const event = parseEvent(block);
            if (!event) continue;
            failures = 0;
            if (event.id !== undefined) last = event.id;
            yield event;
          }
        }
      } catch (error) {
        if (error instanceof StepwrightError || ++failures > 10) throw error;
        await sleep(Math.min(50 * 2 ** failures, 2000));
        continue;
      }
      // A clean end: the run finished, or the server is going away (then resume).
      if (TERMINAL.has((await this.runs.get(runId)).status)) return;
    }
  }

  async request(method, path, body, retries = 0) {
    for (let attempt = 0; ; attempt++) {
      try {
        return await call(this.base, this.headers, method, path, body);
      } catch (error) {
        if (error instanceof StepwrightError || attempt >= retries) throw error;
        await sleep(100 * 2 ** attempt);
      }
    }
  }
}

/**
 * Return it from a handler to complete later (asynchronous completion): the task's lease
 * lasts `ms` without heartbeats, the worker's slot is freed, and whoever holds the task's id
 * and lease answers it with `client.tasks.complete` or `fail`.
 */
export class Defer {
  constructor(ms) {
    this.ms = ms;
  }
}

/** Raise it from a handler to fail the attempt with your own `code` and retryability. */
export class HandlerError extends Error {
  constructor(code, message, { retryable = false } = {}) {
    super(message);
    this.name = "HandlerError";
    this.code = code;
    this.retryable = retryable;
  }
}

/**
 * A step worker: long-polls one queue for tasks, runs each handler with an `AbortSignal`
 * that fires when the run is cancelled or the lease is lost, renews every lease it holds in
 * one heartbeat on its own timer, and answers each task under its lease.
 */
export class Worker {
  constructor(baseUrl, apiKey, { queue = "default", slots = 4, name, waitSeconds = 30 } = {}) {
    this.base = baseUrl.replace(/\/$/, "");
    this.headers = {
      authorization: `Bearer ${apiKey}`,
      "stepwright-protocol": PROTOCOL,
      "user-agent": `stepwright-${SDK}`,
    };
    this.queue = queue;
    this.slots = slots;
    this.waitSeconds = waitSeconds;
    this.id = `${name ?? "ts"}-${process.pid}-${crypto.randomUUID().slice(0, 8)}`;
    this.name = name;
    this.handlers = new Map();
    this.running = new Map();
    this.stopping = new AbortController();
    this.unsent = [];
    this.sending = 0;
  }

  /** Registers `fn(ctx, input)` for handler `name` (or `name@version`). */
  handler(name, fn) {
    this.handlers.set(name, fn);
    return this;
  }

  /** Stops claiming; tasks running finish and are answered, then `run()` resolves. */
  stop() {
    this.stopping.abort();
    this.fullPoll?.abort();
  }

  /** Claims and runs tasks until `stop()`. */
  async run() {
    if (this.handlers.size === 0) throw new Error("register at least one handler with worker.handler(name, fn)");
    try {
      while (!this.stopping.signal.aborted) {
        const free = this.slots - this.running.size;
        // A full worker's control poll (cancels only: no task comes with it) gives way as
        // soon as a slot frees, so the next claim takes work at once.
        this.fullPoll = free > 0 ? undefined : new AbortController();
        let answer;
        try {
          answer = await call(
            this.base,
            this.headers,
            "POST",
            "/v1/tasks/claim",
            {
              worker: { id: this.id, name: this.name, sdk: SDK },
              queue: this.queue,
              handlers: [...this.handlers.keys()].sort(),
              max: Math.min(Math.max(free, 0), 100), // the most one claim takes
              wait_seconds: free > 0 ? this.waitSeconds : Math.min(this.waitSeconds, 1),
              holding: [...this.running.keys()],
            },
            this.fullPoll?.signal ?? this.stopping.signal,
          );
        } catch (error) {
          if (this.stopping.signal.aborted) break;
          if (this.fullPoll?.signal.aborted) continue;
          await sleep(1000);
          continue;
        }
        for (const id of answer.cancel ?? []) this.running.get(id)?.controller.abort();
        for (const task of answer.tasks ?? []) this.start(task);
      }
    } finally {
      await Promise.allSettled([...this.running.values()].map((r) => r.done));
      clearInterval(this.beatTimer);
    }
  }

  start(task) {
    const controller = new AbortController();
    const ctx = {
      taskId: task.id,
      handler: task.handler,
      attempt: task.attempt,
      runId: task.run.id,
      workflow: task.run.workflow,
      step: task.step,
      idempotencyKey: task.idempotency_key ?? null,
      lease: task.lease,
      details: task.details ?? null,
      recompute: task.recompute === true,
      signal: controller.signal,
      heartbeat: (details) => {
        entry.details = details;
      },
      // Streams to the run: `token` text live on its event stream (not journaled), `progress`
      // as a journaled `step.progress` event, `log` as `step.log`; sent in batches every
      // 50 ms, and before the task's answer.
      emit: ({ token, progress, log } = {}) => {
        if (token !== undefined) entry.chunks.push({ kind: "token", text: token });
        if (progress !== undefined) entry.chunks.push({ kind: "progress", data: progress });
        if (log !== undefined) entry.chunks.push({ kind: "log", text: log });
        entry.flushTimer ??= setTimeout(() => this.flush(task.id, entry).catch(() => {}), 50);
      },
    };
    const entry = {
      lease: task.lease,
      leaseMs: task.lease_ms ?? 10_000,
      controller,
      details: undefined,
      done: undefined,
      chunks: [],
      seq: 0,
      flushTimer: undefined,
      sending: Promise.resolve(),
    };
    this.running.set(task.id, entry);
    this.keepBeating();
    entry.done = this.execute(task, ctx, entry).finally(() => {
      this.running.delete(task.id);
      this.fullPoll?.abort();
    });
  }

  // One heartbeat timer for every task held, at a third of the shortest lease (at most 10 s,
  // as the server advises); re-armed when a task with a shorter lease arrives.
  keepBeating() {
    const interval = Math.max(50, Math.min(10_000, ...[...this.running.values()].map((r) => r.leaseMs / 3)));
    if (this.beatTimer && this.beatEvery <= interval) return;
    clearInterval(this.beatTimer);
    this.beatEvery = interval;
    this.beatTimer = setInterval(() => {
      if (this.running.size === 0) {
        clearInterval(this.beatTimer);
        this.beatTimer = undefined;
        return;
      }
      this.heartbeat().catch(() => {});
    }, interval);
  }

  async execute(task, ctx, entry) {
    const fn = this.handlers.get(task.handler) ?? this.handlers.get(task.handler.split("@")[0]);
    if (!fn) return this.answer(task.id, "release", { lease: entry.lease });
    let output;
    try {
      output = await fn(ctx, task.input);
    } catch (error) {
      if (entry.controller.signal.aborted) return this.answer(task.id, "cancelled", { lease: entry.lease });
      const failure =
        error instanceof HandlerError
          ? { code: error.code, message: error.message, retryable: error.retryable }
          : { code: "execution_failed", message: `${error?.name ?? "Error"}: ${error?.message ?? error}`, retryable: true };
      return this.answer(task.id, "fail", { lease: entry.lease, error: failure });
    }
    if (entry.controller.signal.aborted) return this.answer(task.id, "cancelled", { lease: entry.lease });
    if (output instanceof Defer) return this.answer(task.id, "defer", { lease: entry.lease, for_ms: Math.max(1, Math.round(output.ms)) });
    return this.answer(task.id, "complete", { lease: entry.lease, output: output ?? null });
  }

  // Sends what a handler emitted, in order (one request at a time per task).
  flush(taskId, entry) {
    clearTimeout(entry.flushTimer);
    entry.flushTimer = undefined;
    if (entry.chunks.length === 0) return entry.sending;
    const items = entry.chunks.splice(0);
    const seq = entry.seq++;
    entry.sending = entry.sending.then(() =>
      call(this.base, this.headers, "POST", `/v1/tasks/${taskId}/chunks`, { lease: entry.lease, seq, items }).catch(() => {}),
    );
    return entry.sending;
  }

  // Answers a task: a deferral on its own request, every other answer through the batcher,
  // which sends what the handlers answered meanwhile in one request (two in flight at most).
  // Resolves once it is sent.
  async answer(taskId, verb, body) {
    const entry = this.running.get(taskId);
    if (entry) await this.flush(taskId, entry);
    if (verb === "defer") return this.sendOne(taskId, verb, body);
    const { lease, ...rest } = body;
    return new Promise((sent) => {
      this.unsent.push({ item: { id: taskId, lease, outcome: verb, ...rest }, sent });
      if (this.sending < 2) this.sendAnswers();
    });
  }

  async sendAnswers() {
    this.sending++;
    try {
      while (this.unsent.length > 0) {
        const batch = this.unsent.splice(0, 500);
        const items = batch.map((b) => b.item);
        for (let attempt = 0; attempt < 5; attempt++) {
          try {
            // Refused answers (a lost lease: another worker has the task) are dropped.
            await call(this.base, this.headers, "POST", "/v1/tasks/answers", { answers: items });
            break;
          } catch {
            await sleep(200 * 2 ** attempt);
          }
        }
        for (const { sent } of batch) sent();
      }
    } finally {
      this.sending--;
    }
  }

  async sendOne(taskId, verb, body) {
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        await call(this.base, this.headers, "POST", `/v1/tasks/${taskId}/${verb}`, body);
        return;
      } catch (error) {
        // A stale lease: the result is dropped (the engine has moved on).
        if (error instanceof StepwrightError && error.status === 409) return;
        await sleep(200 * 2 ** attempt);
      }
    }
  }

  async heartbeat() {
    if (this.running.size === 0) return;
    const tasks = [...this.running.entries()].map(([id, r]) =>
      r.details === undefined ? { id, lease: r.lease } : { id, lease: r.lease, details: r.details },
    );
    const answer = await call(this.base, this.headers, "POST", "/v1/tasks/heartbeat", { worker_id: this.id, tasks });
    for (const beat of answer.tasks ?? []) {
      if (beat.state === "cancel" || beat.state === "lost") this.running.get(beat.id)?.controller.abort();
    }
  }
}

const encoder = new TextEncoder();

async function hmacHex(secret, bytes) {
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, bytes));
  return Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
}

function asBytes(body) {
  return typeof body === "string" ? encoder.encode(body) : new Uint8Array(body);
}

// The `Stepwright-Signature` header Stepwright sends with `body` (webhooks, pushed tasks):
// `t=<unix>,v1=<hex hmac-sha256 of "t.body">`.
export async function sign(secret, body, at = Math.floor(Date.now() / 1000)) {
  const bytes = asBytes(body);
  const message = new Uint8Array([...encoder.encode(`${at}.`), ...bytes]);
  return `t=${at},v1=${await hmacHex(secret, message)}`;
}

// Whether `header` signs exactly `body` (the raw bytes received) with `secret`, sent within
// `toleranceSeconds` of now (a replayed old request is refused).
export async function verifySignature(secret, header, body, { toleranceSeconds = 300, now = Date.now() / 1000 } = {}) {
  if (!header) return false;
  const fields = Object.fromEntries(
    header
      .split(",")
      .filter((part) => part.includes("="))
      .map((part) => [part.slice(0, part.indexOf("=")), part.slice(part.indexOf("=") + 1)]),
  );
  const at = Number.parseInt(fields.t ?? "", 10);
  if (!Number.isFinite(at) || typeof fields.v1 !== "string" || Math.abs(now - at) > toleranceSeconds) return false;
  const expected = (await sign(secret, body, at)).split("v1=")[1];
  if (expected.length !== fields.v1.length) return false;
  let differ = 0;
  for (let i = 0; i < expected.length; i++) differ |= expected.charCodeAt(i) ^ fields.v1.charCodeAt(i);
  return differ === 0;
}
