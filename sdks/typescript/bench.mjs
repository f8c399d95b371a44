// Throughput through one TypeScript worker against a real `stepwright serve` (SQLite):
// `node sdks/typescript/bench.mjs target/release/stepwright [runs]`. Prints JSON.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Client, Worker } from "./index.js";

const [bin, total = "3000"] = process.argv.slice(2);
const runs = Number(total);
const port = await new Promise((done) => {
  const probe = createServer().listen(0, "127.0.0.1", () => {
    const { port } = probe.address();
    probe.close(() => done(port));
  });
});
const url = `http://127.0.0.1:${port}`;
const db = `sqlite://${join(mkdtempSync(join(tmpdir(), "stepwright-bench-")), "bench.db")}`;
const key = JSON.parse(
  execFileSync(bin, ["--db", db, "keys", "create", "--namespace", "bench", "--user", "b", "--role", "admin", "--role", "worker", "--json"], {
    encoding: "utf8",
  }),
).secret;
const server = spawn(bin, ["--db", db, "serve", "--listen", `127.0.0.1:${port}`, "--rate-limit", "1000000"], { stdio: "ignore" });
try {
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`${url}/v1/health`)).ok) break;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  const client = new Client(url, key);
  await client.workflows.register(
    "workflow: via-worker\ntools:\n  inc:\n    worker: { queue: bench }\n    effect: read\nsteps:\n  - id: call\n    tool: inc\n    with: { n: 1 }\n",
  );
  // Starts `count` runs of `workflow` from 16 concurrent callers; their ids.
  const startRuns = async (workflow, count) => {
    let next = 0;
    const ids = [];
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < count) {
          next++;
          ids.push((await client.request("POST", "/v1/runs", { workflow, input: {} })).run_id);
        }
      }),
    );
    return ids;
  };
  // One worker on `queue` until `count` handlers ran: [the worker's run(), a promise of the time].
  const drain = (queue, count) => {
    let handled = 0;
    let allHandled;
    const finished = new Promise((r) => (allHandled = r));
    const worker = new Worker(url, key, { queue, slots: 200 }).handler("inc", (ctx, input) => {
      if (++handled === count) allHandled(performance.now());
      return { n: input.n + 1 };
    });
    return { worker, working: worker.run(), finished };
  };
  const results = { runs };

  // A run of one worker step vs one `http` tool calling the same function (a node HTTP
  // server on loopback), `POST /v1/runs` waiting for the end; paths alternated.
  {
    const echo = createHttpServer((req, res) => {
      const chunks = [];
      req.on("data", (c) => chunks.push(c));
      req.on("end", () => {
        const body = JSON.stringify({ n: JSON.parse(Buffer.concat(chunks)).n + 1 });
        res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) }).end(body);
      });
    });
    await new Promise((r) => echo.listen(0, "127.0.0.1", r));
    const common = "    effect: read\n    input: { type: object }\nsteps:\n  - id: call\n    tool: inc\n    with: { n: 1 }\n";
    await client.workflows.register(`workflow: e2e-worker\ntools:\n  inc:\n    worker: { queue: e2e }\n${common}`);
    await client.workflows.register(
      `workflow: e2e-http\ntools:\n  inc:\n    http: { url: "http://127.0.0.1:${echo.address().port}/echo" }\n${common}`,
    );
    const worker = new Worker(url, key, { queue: "e2e", slots: 4 }).handler("inc", (ctx, input) => ({ n: input.n + 1 }));
    const working = worker.run();
    const timed = async (workflow, rounds) => {
      const times = [];
      for (let i = 0; i < rounds; i++) {
        const begun = performance.now();
        const run = await client.request("POST", "/v1/runs", { workflow, input: {}, wait_seconds: 10 });
        if (run.status !== "completed") throw new Error(JSON.stringify(run));
        times.push(performance.now() - begun);
      }
      return times;
    };
    await timed("e2e-http", 200);
    await timed("e2e-worker", 200);
    const viaWorker = [];
    const viaHttp = [];
    for (let i = 0; i < 2; i++) {
      viaHttp.push(...(await timed("e2e-http", 400)));
      viaWorker.push(...(await timed("e2e-worker", 400)));
    }
    const p = (values, q) => {
      const sorted = [...values].sort((a, b) => a - b);
      return Math.round(sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] * 1000) / 1000;
    };
    results.end_to_end_ms = {
      worker_step: { n: viaWorker.length, p50: p(viaWorker, 0.5), p99: p(viaWorker, 0.99) },
      http_tool_floor: { n: viaHttp.length, p50: p(viaHttp, 0.5), p99: p(viaHttp, 0.99) },
      overhead_p50_ms: Math.round((p(viaWorker, 0.5) - p(viaHttp, 0.5)) * 1000) / 1000,
    };
    worker.stop();
    await working;
    echo.close();
  }

  // Runs arriving while the worker drains them (the starts in this process too).
  {
    const { worker, working, finished } = drain("bench", runs);
    const begun = performance.now();
    const ids = await startRuns("via-worker", runs);
    const seconds = ((await finished) - begun) / 1000;
    await client.runs.wait(ids.at(-1), { timeoutMs: 120_000 });
    worker.stop();
    await working;
    results.while_started_per_s = Math.round((runs / seconds) * 10) / 10;
  }
  // Runs queued first (each suspended, waiting for a worker), then drained by one worker.
  {
    await client.workflows.register(
      "workflow: queued\ntools:\n  inc:\n    worker: { queue: queued }\n    effect: read\nsteps:\n  - id: call\n    tool: inc\n    with: { n: 1 }\n",
    );
    const ids = await startRuns("queued", runs);
    // Until every run has dispatched its task, and the last of them held for it (the
    // engine's 2 s `task_hold`) and suspended.
    const pending = async () => (await client.queues.list()).queues.find((q) => q.queue === "queued")?.pending ?? 0;
    while ((await pending()) < runs) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 2500));
    const begun = performance.now();
    const { worker, working, finished } = drain("queued", runs);
    const seconds = ((await finished) - begun) / 1000;
    await client.runs.wait(ids.at(-1), { timeoutMs: 120_000 });
    worker.stop();
    await working;
    results.queued_then_drained_per_s = Math.round((runs / seconds) * 10) / 10;
  }
  // No worker online: how soon 1,000 runs of a worker tool all wait for one (their tasks
  // queued; a run holding for its task lends its runner slot), and how long a plain run
  // started right after them takes.
  {
    await client.workflows.register(
      "workflow: unserved\ntools:\n  inc:\n    worker: { queue: nobody }\n    effect: read\nsteps:\n  - id: call\n    tool: inc\n    with: { n: 1 }\n",
    );
    await client.workflows.register("workflow: plain\nsteps:\n  - id: a\n    set: 1\n");
    const count = 1000;
    const begun = performance.now();
    await startRuns("unserved", count);
    const plainBegun = performance.now();
    const plain = await client.request("POST", "/v1/runs", { workflow: "plain", input: {} });
    const queued = async () => (await client.queues.list()).queues.find((q) => q.queue === "nobody")?.pending ?? 0;
    let plainMs;
    const plainDone = client.runs.wait(plain.run_id, { timeoutMs: 300_000 }).then(() => (plainMs = performance.now() - plainBegun));
    while ((await queued()) < count) await new Promise((r) => setTimeout(r, 20));
    const allWaitMs = performance.now() - begun;
    await plainDone;
    results.no_worker = {
      runs: count,
      all_waiting_after_ms: Math.round(allWaitMs),
      waiting_per_s: Math.round((count / allWaitMs) * 1000),
      plain_run_meanwhile_ms: Math.round(plainMs),
    };
  }
  results.note = "one TypeScript worker (200 slots); runs started over HTTP by 16 concurrent callers in the same process";
  console.log(JSON.stringify(results, null, 2));
} finally {
  server.kill("SIGTERM");
}
