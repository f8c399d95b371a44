// Runs the example end to end, offline: a `stepwright serve` on a fresh SQLite store that
// answers model calls from the recorded cassette, a key for this example, the workflow
// registered, the TypeScript worker in this process, one run started and waited for.
//
//   cargo build -p stepwright-cli && npm install ./sdks/typescript
//   node examples/typescript-worker/main.mjs
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Client } from "@stepwright/sdk";
import { makeWorker } from "./worker.mjs";

const here = import.meta.dirname;
const bin = process.env.STEPWRIGHT_BIN ?? join(here, "..", "..", "target", "debug", "stepwright");
const question = "What does the document say a journal is for?";
const document =
  "A durable engine journals every step of a run. The journal is what lets a run survive a crash, " +
  "wait days for a person, and resume on any machine. Steps written in TypeScript run in step workers; " +
  "the engine keeps their retries, timeouts and the effect fence.";

const port = await new Promise((done) => {
  const probe = createServer().listen(0, "127.0.0.1", () => {
    const { port } = probe.address();
    probe.close(() => done(port));
  });
});
const url = `http://127.0.0.1:${port}`;
const db = `sqlite://${join(mkdtempSync(join(tmpdir(), "stepwright-example-")), "example.db")}`;
const created = execFileSync(
  bin,
  ["--db", db, "keys", "create", "--namespace", "example", "--user", "you", "--role", "admin", "--role", "worker", "--json"],
  { encoding: "utf8" },
);
const key = JSON.parse(created).secret;
const extra = (process.env.STEPWRIGHT_EXAMPLE_MODEL_ARGS ?? "").split(" ").filter(Boolean);
const server = spawn(
  bin,
  ["--db", db, "serve", "--listen", `127.0.0.1:${port}`, "--cassette", join(here, "research.cassette.json"),
    "--cassette-mode", process.env.CASSETTE_MODE ?? "replay", ...extra],
  { stdio: "ignore" },
);
try {
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`${url}/v1/health`)).ok) break;
    } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  const worker = makeWorker(url, key);
  const working = worker.run();
  const client = new Client(url, key);
  await client.workflows.register(readFileSync(join(here, "research.yaml"), "utf8"));
  const run = await client.runs.start("research-notes", { question, document });
  const done = await client.runs.wait(run.run_id, { timeoutMs: 60_000 });
  worker.stop();
  await working;
  console.log(`run ${done.run_id}: ${done.status}`);
  console.log(JSON.stringify(done.output, null, 2));
  const calls = await client.tasks.list({ run: run.run_id });
  console.log(`${calls.length} call(s) of a TypeScript tool: ${calls.map((t) => `${t.handler} at ${t.step} (${t.state})`).join(", ")}`);
  if (done.status !== "completed") process.exitCode = 1;
} finally {
  server.kill("SIGTERM");
}
