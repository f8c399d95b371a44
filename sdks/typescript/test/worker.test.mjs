// The TypeScript package against a real `stepwright serve`: steps written in JavaScript,
// with the engine's guarantees (retries, leases, cancellation, concurrency).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, Defer, HandlerError, StepwrightError, Worker } from "../index.js";
import { startServer, workflow } from "./server.mjs";

let server;
before(async () => {
  server = await startServer();
});
after(() => server.stop());

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("a handler runs a step and the run completes", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(workflow("shout", { queue: "ts", handler: "shout" }));
  const worker = new Worker(server.url, key, { queue: "ts", waitSeconds: 2 });
  worker.handler("shout", async (ctx, input) => ({ text: input.text.toUpperCase(), attempt: ctx.attempt, step: ctx.step }));
  const running = worker.run();
  const run = await client.runs.start("shout", { text: "hello" });
  const done = await client.runs.wait(run.run_id, { timeoutMs: 30_000 });
  worker.stop();
  await running;
  assert.equal(done.status, "completed");
  assert.deepEqual(done.output, { text: "HELLO", attempt: 1, step: "call" });
  assert.deepEqual((await client.tasks.list({ run: run.run_id })).map((t) => t.state), ["completed"]);
});

test("a handler error fails the step with its code", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(workflow("picky", { queue: "ts", handler: "picky" }));
  const worker = new Worker(server.url, key, { queue: "ts", waitSeconds: 2 });
  worker.handler("picky", () => {
    throw new HandlerError("not_allowed", "refused");
  });
  const running = worker.run();
  const done = await client.runs.wait((await client.runs.start("picky", { text: "x" })).run_id, { timeoutMs: 30_000 });
  worker.stop();
  await running;
  assert.equal(done.status, "failed");
  assert.equal(done.error.code, "not_allowed");
});

test("cancel reaches a running handler through its AbortSignal", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(workflow("long", { queue: "cancel", handler: "wait" }));
  const worker = new Worker(server.url, key, { queue: "cancel", waitSeconds: 2 });
  let started;
  const begun = new Promise((r) => (started = r));
  let abortedAt;
  worker.handler("wait", (ctx) => {
    started();
    return new Promise((resolve, reject) => {
      const giveUp = setTimeout(() => resolve({ never: "cancelled" }), 20_000);
      ctx.signal.addEventListener("abort", () => {
        abortedAt = Date.now();
        clearTimeout(giveUp);
        reject(new Error("aborted"));
      });
    });
  });
  const running = worker.run();
  const run = await client.runs.start("long", { text: "x" });
  await begun;
  const asked = Date.now();
  await client.runs.cancel(run.run_id);
  for (let i = 0; i < 300 && abortedAt === undefined; i++) await sleep(50);
  worker.stop();
  await running;
  assert.ok(abortedAt !== undefined, "the handler's signal fired");
  assert.ok(abortedAt - asked < 5000, `cancel reached the handler in ${abortedAt - asked} ms`);
  assert.equal((await client.runs.get(run.run_id)).status, "cancelled");
  assert.deepEqual((await client.tasks.list({ run: run.run_id })).map((t) => t.state), ["cancelled"]);
});

test("a full worker's control poll gives way when a slot frees, and the next claim takes work", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(workflow("one-slot", { queue: "one-slot", handler: "hold" }));
  // Every claim the worker sends, with its body and the signal it can be aborted by.
  const claims = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = (url, init) => {
    if (String(url).endsWith("/v1/tasks/claim")) claims.push({ body: JSON.parse(init.body), signal: init.signal });
    return realFetch(url, init);
  };
  try {
    const worker = new Worker(server.url, key, { queue: "one-slot", slots: 1, waitSeconds: 30 });
    const started = [];
    let finishFirst;
    const firstMayFinish = new Promise((r) => (finishFirst = r));
    worker.handler("hold", async (ctx, input) => {
      started.push(input.text);
      if (started.length === 1) await firstMayFinish;
      return { text: input.text };
    });
    const running = worker.run();
    const first = await client.runs.start("one-slot", { text: "a" });
    for (let i = 0; i < 600 && started.length === 0; i++) await sleep(10);
    const second = await client.runs.start("one-slot", { text: "b" });
    // Its one slot busy, the worker only asks for cancels.
    for (let i = 0; i < 600 && !claims.some((c) => c.body.max === 0); i++) await sleep(10);
    const control = claims.find((c) => c.body.max === 0);
    assert.ok(control, "a full worker sends a control poll (max 0)");
    assert.deepEqual(control.body.holding.length, 1);
    finishFirst();
    await client.runs.wait(second.run_id, { timeoutMs: 30_000 });
    // (Asked before the worker stops, which would abort it too.)
    assert.equal(control.signal.aborted, true, "the control poll gave way when the slot freed");
    worker.stop();
    await running;
    assert.deepEqual(started, ["a", "b"]);
    assert.equal((await client.runs.get(first.run_id)).status, "completed");
  } finally {
    globalThis.fetch = realFetch;
  }
});

test("two workers on one queue with concurrency limit 1 never overlap", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(
    workflow("serial", { queue: "one", handler: "slow", worker: ", concurrency: { limit: 1 }" }),
  );
  let inside = 0;
  let most = 0;
  const make = () =>
    new Worker(server.url, key, { queue: "one", slots: 4, waitSeconds: 1 }).handler("slow", async () => {
      inside++;
      most = Math.max(most, inside);
      await sleep(60);
      inside--;
      return { ok: true };
    });
  const workers = [make(), make()];
  const running = workers.map((w) => w.run());
  const runs = await Promise.all([0, 1, 2, 3, 4, 5].map((n) => client.runs.start("serial", { text: `${n}` })));
  const done = await Promise.all(runs.map((r) => client.runs.wait(r.run_id, { timeoutMs: 60_000 })));
  workers.forEach((w) => w.stop());
  await Promise.all(running);
  assert.ok(done.every((d) => d.status === "completed"), JSON.stringify(done.map((d) => d.status)));
  assert.equal(most, 1, "never two at once across both workers");
});

test("a stale lease's completion is refused with 409 lease_lost", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(
    workflow("stale", {
      queue: "stale",
      handler: "echo",
      worker: ", heartbeat_timeout: 1s",
      step: "    retry: { max_attempts: 2, initial_delay: 10ms }",
    }),
  );
  const run = await client.runs.start("stale", { text: "x" });
  const headers = { authorization: `Bearer ${key}`, "content-type": "application/json", "stepwright-protocol": "1" };
  const claim = (id) =>
    fetch(`${server.url}/v1/tasks/claim`, {
      method: "POST",
      headers,
      body: JSON.stringify({ worker: { id }, queue: "stale", handlers: ["echo"], wait_seconds: 10 }),
    }).then((r) => r.json());
  const first = (await claim("old")).tasks[0];
  const second = (await claim("new")).tasks[0];
  assert.equal(second.attempt, 2);
  const answer = (task, by) =>
    fetch(`${server.url}/v1/tasks/${task.id}/complete`, {
      method: "POST",
      headers,
      body: JSON.stringify({ lease: task.lease, output: { by } }),
    });
  assert.equal((await answer(second, "new")).status, 200);
  const late = await answer(first, "old");
  assert.equal(late.status, 409);
  assert.equal((await late.json()).code, "lease_lost");
  const done = await client.runs.wait(run.run_id, { timeoutMs: 30_000 });
  assert.deepEqual(done.output, { by: "new" });
  await assert.rejects(client.runs.get("01a21ba0-0000-7000-8000-000000000000"), (e) => e instanceof StepwrightError && e.status === 404);
});

test("heartbeats keep a handler's lease while it runs longer than the lease", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(workflow("steady", { queue: "beat", handler: "slow", worker: ", heartbeat_timeout: 1s" }));
  const worker = new Worker(server.url, key, { queue: "beat", waitSeconds: 2 });
  worker.handler("slow", async (ctx) => {
    await sleep(2500);
    return { attempt: ctx.attempt };
  });
  const running = worker.run();
  const done = await client.runs.wait((await client.runs.start("steady", { text: "x" })).run_id, { timeoutMs: 30_000 });
  worker.stop();
  await running;
  assert.equal(done.status, "completed");
  assert.deepEqual(done.output, { attempt: 1 }, "one attempt: the lease never lapsed");
});

test("what a handler emits reaches the run's stream, which ends with the run", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(workflow("chatty", { queue: "chatty", handler: "talk" }));
  let go;
  const ready = new Promise((r) => (go = r));
  const worker = new Worker(server.url, key, { queue: "chatty", waitSeconds: 2 }).handler("talk", async (ctx) => {
    await ready;
    for (const word of ["durable", " steps", " in", " TypeScript"]) {
      ctx.emit({ token: word });
      await sleep(30);
    }
    ctx.emit({ progress: { done: 1, total: 1 }, log: "done" });
    return { said: 4 };
  });
  const running = worker.run();
  const run = await client.runs.start("chatty", { text: "x" });
  const seen = [];
  const following = (async () => {
    for await (const event of client.runs.stream(run.run_id, { tokens: true })) seen.push(event);
  })();
  await sleep(500);
  go();
  await following;
  worker.stop();
  await running;
  assert.equal(seen.filter((e) => e.event === "token").map((e) => e.data.text).join(""), "durable steps in TypeScript");
  assert.deepEqual(seen.filter((e) => e.event === "step.progress").map((e) => e.data.data.data), [{ done: 1, total: 1 }]);
  assert.equal(seen.at(-1).event, "run.completed");
  const ids = seen.filter((e) => e.id !== undefined).map((e) => e.id);
  assert.deepEqual(ids, ids.map((_, i) => i), "every recorded event once, in order");
});

test("a deferred task frees the worker and is completed later from elsewhere", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(workflow("later", { queue: "defer", handler: "handoff", worker: ", heartbeat_timeout: 1s" }));
  const handed = [];
  const worker = new Worker(server.url, key, { queue: "defer", slots: 1, waitSeconds: 2 }).handler("handoff", (ctx) => {
    handed.push(ctx);
    return new Defer(60_000);
  });
  const running = worker.run();
  const run = await client.runs.start("later", { text: "x" });
  while (handed.length === 0) await sleep(20);
  await sleep(2500); // past the heartbeat timeout: a deferred lease does not lapse
  worker.stop();
  await running;
  assert.deepEqual((await client.tasks.list({ run: run.run_id })).map((t) => t.state), ["claimed"]);
  const [ctx] = handed;
  await client.tasks.complete(ctx.taskId, ctx.lease, { done: "elsewhere" });
  const done = await client.runs.wait(run.run_id, { timeoutMs: 30_000 });
  assert.deepEqual(done.output, { done: "elsewhere" });
});

test("a recompute hands a read step to the worker again, marked as a recompute", async () => {
  const key = server.key();
  const client = new Client(server.url, key);
  await client.workflows.register(workflow("requoted", { queue: "requote", handler: "quote" }));
  const worker = new Worker(server.url, key, { queue: "requote", waitSeconds: 2 });
  const seen = [];
  worker.handler("quote", async (ctx) => {
    seen.push(ctx.recompute);
    return { price: 10 * seen.length };
  });
  const running = worker.run();
  try {
    const run = await client.runs.start("requoted", { text: "x" });
    const done = await client.runs.wait(run.run_id, { timeoutMs: 30_000 });
    assert.deepEqual(done.output, { price: 10 });
    const report = await client.request("POST", `/v1/runs/${run.run_id}/recompute`, {});
    assert.deepEqual(seen, [false, true]);
    assert.deepEqual(report.recomputed_output, { price: 20 });
    assert.equal(report.steps.find((s) => s.path === "call").change, "value_changed");
    assert.deepEqual((await client.runs.get(run.run_id)).output, { price: 10 }, "the run itself is unchanged");
  } finally {
    worker.stop();
    await running;
  }
});
