// Throughput through one TypeScript worker against a real `stepwright serve` (SQLite):
// `node sdks/typescript/bench.mjs target/release/stepwright [runs]`. Prints JSON.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
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
  let handled = 0;
  let allHandled;
  const finished = new Promise((r) => (allHandled = r));
  const worker = new Worker(url, key, { queue: "bench", slots: 200 }).handler("inc", (ctx, input) => {
    if (++handled === runs) allHandled();
    return { n: input.n + 1 };
  });
  const working = worker.run();
  const begun = performance.now();
  let next = 0;
  const ids = [];
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < runs) {
        next++;
        const run = await client.request("POST", "/v1/runs", { workflow: "via-worker", input: {} });
        ids.push(run.run_id);
      }
    }),
  );
  await finished;
  const seconds = (performance.now() - begun) / 1000;
  await client.runs.wait(ids.at(-1), { timeoutMs: 120_000 });
  worker.stop();
  await working;
  console.log(JSON.stringify({ runs, handled_per_s: Math.round((runs / seconds) * 10) / 10, note: "runs started over HTTP by 16 concurrent callers while one TypeScript worker drains them; the time includes the starts" }, null, 2));
} finally {
  server.kill("SIGTERM");
}
