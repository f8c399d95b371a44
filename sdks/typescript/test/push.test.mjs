// Push mode against a real `stepwright serve`: an `http` tool with `async: true` sends each
// call as a signed task to an endpoint (a node HTTP server here), which accepts it (202) and
// completes it later through the task endpoints under its lease.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import { Client, sign, verifySignature } from "../index.js";
import { PUSH_SECRET, startServer } from "./server.mjs";

let server;
before(async () => {
  server = await startServer();
});
after(() => server.stop());

test("a pushed task is signed, accepted and completed later under its lease", async () => {
  const received = [];
  const endpoint = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", async () => {
      const body = Buffer.concat(chunks);
      received.push({ signed: await verifySignature(PUSH_SECRET, req.headers["stepwright-signature"], body), task: JSON.parse(body) });
      res.writeHead(202).end();
    });
  });
  await new Promise((r) => endpoint.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${endpoint.address().port}/summarise`;
  try {
    const client = new Client(server.url, server.key());
    await client.workflows.register(`
workflow: pushed
tools:
  summarise:
    http: { url: "${url}", signing_secret_env: STEPWRIGHT_SDK_TEST_PUSH_SECRET, async: true }
    effect: read
steps:
  - id: call
    tool: summarise
    with: { doc: "{{ input.doc }}" }
`);
    const run = await client.runs.start("pushed", { doc: "long" });
    const deadline = Date.now() + 20_000;
    while (received.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const [{ signed, task }] = received;
    assert.ok(signed);
    assert.deepEqual([task.queue, task.handler, task.lease, task.input], ["push", "summarise", 1, { doc: "long" }]);
    await client.tasks.complete(task.id, task.lease, { summary: "short" });
    const done = await client.runs.wait(run.run_id, { timeoutMs: 30_000 });
    assert.deepEqual(done.output, { summary: "short" });
  } finally {
    endpoint.close();
  }
});

test("a signature holds for the exact body and a recent time only", async () => {
  const body = '{"id":"tsk_1"}';
  const header = await sign("k", body);
  assert.ok(await verifySignature("k", header, body));
  assert.ok(await verifySignature("k", header, new TextEncoder().encode(body)));
  assert.equal(await verifySignature("other", header, body), false);
  assert.equal(await verifySignature("k", header, `${body} `), false);
  assert.equal(await verifySignature("k", await sign("k", body, Math.floor(Date.now() / 1000) - 3600), body), false);
  assert.equal(await verifySignature("k", undefined, body), false);
  // The same header Python's package and the server compute (hmac-sha256 of "t.body").
  assert.equal(
    await sign("Jefe", "{}", 1_700_000_000),
    "t=1700000000,v1=d3793e2b4103edfbd98cc19591832f5fad701d413db9fcae0ae7dab8184ed207",
  );
});
