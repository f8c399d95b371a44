// A real `stepwright serve` on a fresh SQLite store for the tests, and a key of its own
// namespace for each test.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dirname, "..", "..", "..");
export const PUSH_SECRET = "push-secret";
export const BIN = process.env.STEPWRIGHT_BIN ?? join(root, "target", "debug", "stepwright");

function freePort() {
  return new Promise((done) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => done(port));
    });
  });
}

export async function startServer() {
  const dir = mkdtempSync(join(tmpdir(), "stepwright-ts-"));
  const db = `sqlite://${join(dir, "sdk.db")}`;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const env = { ...process.env, STEPWRIGHT_SDK_TEST_PUSH_SECRET: PUSH_SECRET };
  const child = spawn(BIN, ["--db", db, "serve", "--listen", `127.0.0.1:${port}`, "--webhook-allow", "127.0.0.0/8"], { stdio: "ignore", env });
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`${url}/v1/health`)).ok) break;
    } catch {}
    if (Date.now() > deadline || child.exitCode !== null) throw new Error("stepwright serve did not start");
    await new Promise((r) => setTimeout(r, 50));
  }
  let n = 0;
  return {
    url,
    key(...roles) {
      const namespace = `ts-${process.pid}-${++n}`;
      const args = ["--db", db, "keys", "create", "--namespace", namespace, "--user", "tester", "--json"];
      for (const role of roles.length ? roles : ["admin", "worker"]) args.push("--role", role);
      return JSON.parse(execFileSync(BIN, args, { encoding: "utf8" })).secret;
    },
    stop() {
      child.kill("SIGTERM");
    },
  };
}

export function workflow(name, { queue, handler, effect = "read", worker = "", step = "" }) {
  return `
workflow: ${name}
tools:
  ${handler}:
    worker: { queue: ${queue}, handler: ${handler}${worker} }
    effect: ${effect}
steps:
  - id: call
    tool: ${handler}
    with: { text: "{{ input.text }}" }
${step}
`;
}
