// Type-checked (`npm run check`), never run: the package's types as a user's code meets them.
import { Client, HandlerError, Worker, type RunDetails, type TaskContext } from "../index.js";

async function usage(): Promise<string> {
  const client = new Client("http://127.0.0.1:8080", "sw_key");
  const run: RunDetails = await client.runs.start("summarise", { doc: "text" });
  const done = await client.runs.wait(run.run_id, { timeoutMs: 10_000 });
  const worker = new Worker("http://127.0.0.1:8080", "sw_key", { queue: "ts", slots: 2 });
  worker.handler("summarise", async (ctx: TaskContext, input: { doc: string }) => {
    if (ctx.signal.aborted) throw new HandlerError("stopped", "cancelled", { retryable: false });
    ctx.heartbeat({ seen: input.doc.length });
    return { summary: input.doc.slice(0, 10), key: ctx.idempotencyKey };
  });
  const tasks = await client.tasks.list({ state: "completed" });
  const report = await client.runs.recompute(run.run_id, { persist: false });
  const changed: boolean = report.changed;
  for await (const summary of client.runs.list({ workflow: "summarise" })) void summary.run_id;
  const [item] = await client.interrupts.list();
  if (item) await client.interrupts.decide(item.id, "approve");
  const schedules = await client.schedules.create("summarise", { paused: true });
  const queues = (await client.queues.list()).queues.map((q) => q.queue);
  return `${done.status} ${tasks.length} ${changed} ${schedules.length} ${queues.join()}`;
}

void usage;
