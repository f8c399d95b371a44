// Every resource of the API through the TypeScript client, against a real `stepwright serve`:
// each method reaches its operation and its answer has the documented shape.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, StepwrightError } from "../index.js";
import { startServer } from "./server.mjs";

let server;
before(async () => {
  server = await startServer();
});
after(() => server.stop());

const SOURCE = `
workflow: everything
schedules:
  hourly: { every: 1h, input: {} }
triggers:
  on-ping: { event: ping }
steps:
  - id: ok
    approval: { message: "Go?" }
  - id: nap
    sleep: 6h
  - id: shaped
    set: { seen: "{{ input.n }}" }
`;

test("every resource answers through the client", async () => {
  const c = new Client(server.url, server.key("admin", "approver", "operator", "worker"));
  assert.equal((await c.health()).status, "ok");
  await c.workflows.register(SOURCE);
  assert.deepEqual((await c.workflows.list()).map((w) => w.name), ["everything"]);
  assert.equal((await c.workflows.get("everything")).name, "everything");

  const run = await c.runs.start("everything", { n: 1 });
  let inbox = [];
  for (const deadline = Date.now() + 20_000; inbox.length === 0 && Date.now() < deadline; ) {
    inbox = await c.interrupts.list();
    if (inbox.length === 0) await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok((await c.interrupts.link(inbox[0].id, { expiresInSeconds: 600 })).url);
  await c.interrupts.decide(inbox[0].id, "approve");
  assert.deepEqual(await c.interrupts.checkApprovers(["role:nobody"]), { keys: 0, groups: [] });
  assert.ok((await c.interrupts.checkApprovers(["role:approver"])).keys >= 1);
  let timers = [];
  for (const deadline = Date.now() + 20_000; timers.length === 0 && Date.now() < deadline; ) {
    timers = await c.interrupts.list({ kind: "timer" });
    if (timers.length === 0) await new Promise((r) => setTimeout(r, 50));
  }
  assert.deepEqual(await c.interrupts.list(), [], "a timer is not a decision");
  assert.equal((await c.interrupts.wake(timers[0].id)).interrupt_id, timers[0].interrupt_id);
  assert.equal((await c.runs.wait(run.run_id, { timeoutMs: 30_000 })).status, "completed");
  const listed = [];
  for await (const summary of c.runs.list({ workflow: "everything", limit: 1 })) listed.push(summary.run_id);
  assert.deepEqual(listed, [run.run_id]);
  const tagged = await c.runs.start("everything", { n: 3 }, { tags: ["vip", "env:prod"] });
  assert.deepEqual(tagged.tags, ["vip", "env:prod"]);
  const byTag = [];
  for await (const summary of c.runs.list({ tag: "vip" })) byTag.push(summary.run_id);
  assert.deepEqual(byTag, [tagged.run_id]);
  await c.runs.cancel(tagged.run_id);
  assert.equal((await c.runs.definition(run.run_id)).run_id, run.run_id);
  assert.equal((await c.runs.replay(run.run_id)).identical, true);
  assert.equal((await c.runs.recompute(run.run_id)).run, run.run_id);
  const forked = await c.runs.fork(run.run_id, "shaped", { input: { n: 2 } });
  assert.equal(forked.parent.run_id, run.run_id);
  assert.equal((await c.runs.cancel(forked.run_id)).run_id, forked.run_id);

  const sent = await c.events.send("ping", { x: 1 }, { idempotencyKey: "ping-1" });
  assert.equal((await c.events.get(sent.event.seq)).name, "ping");
  assert.deepEqual((await c.events.list({ name: "ping" })).map((e) => e.name), ["ping"]);

  assert.deepEqual((await c.schedules.create("everything", { paused: true })).map((s) => s.schedule), ["hourly"]);
  assert.equal((await c.schedules.get("everything", "hourly")).schedule, "hourly");
  assert.equal((await c.schedules.resume("everything", "hourly")).paused, false);
  assert.equal((await c.schedules.pause("everything", "hourly")).paused, true);
  await c.schedules.delete("everything", "hourly");
  assert.deepEqual(await c.schedules.list(), []);

  assert.deepEqual((await c.triggers.create("everything", { paused: true })).map((t) => t.trigger), ["on-ping"]);
  assert.equal((await c.triggers.get("everything", "on-ping")).trigger, "on-ping");
  await c.triggers.delete("everything", "on-ping");
  assert.deepEqual(await c.triggers.list(), []);

  const hook = await c.webhooks.create("http://127.0.0.1:9/hook", ["run.failed"], "s3cret-s3cret-s3cret");
  assert.deepEqual((await c.webhooks.list()).map((h) => h.id), [hook.id]);
  assert.deepEqual(await c.webhooks.deliveries(hook.id), []);
  await c.webhooks.delete(hook.id);
  await assert.rejects(c.webhooks.deliveries(hook.id), (e) => e instanceof StepwrightError && e.status === 404);

  assert.deepEqual((await c.queues.list()).queues, []);
  assert.deepEqual((await c.workers.list()).workers, []);
  assert.deepEqual(await c.tasks.list(), []);

  const started = await c.experiments.start({ experiment: "again", runs: { workflow: "everything", ids: [run.run_id] }, evaluators: [{ name: "same", compare: "new == old" }] });
  assert.deepEqual([started.experiment, started.runs], ["again", 1]);
  const ended = await c.experiments.wait(started.id, { timeoutMs: 30_000 });
  assert.deepEqual(ended.spec.runs.ids, [run.run_id]);
  assert.deepEqual([ended.status, ended.report.totals.unchanged, ended.report.totals.regressed], ["completed", 1, 0]);
  assert.deepEqual((await c.experiments.list()).map((e) => e.id), [started.id]);
  await assert.rejects(c.experiments.cancel(started.id), (e) => e instanceof StepwrightError && e.status === 409 && e.code === "experiment_ended");
  await assert.rejects(c.experiments.resume(started.id), (e) => e instanceof StepwrightError && e.status === 409);
});
