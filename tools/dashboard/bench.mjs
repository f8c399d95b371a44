// The dashboard's page weights, how long a 10,000-step run's page takes to show its first
// view (header, graph, timeline and the first page of steps), and how long the runs list
// takes with 10,000 runs in the store, in Debian's chromium, against a real
// `stepwright serve` (release build) over SQLite on loopback.
//
//   node tools/dashboard/bench.mjs target/release/stepwright
//
// Prints one JSON object; BENCHMARKS.md records the numbers with the command and machine.

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const binary = resolve(process.argv[2] || 'target/release/stepwright');
const STEPS = Number(process.env.STEPS || 10000);
const RUNS = Number(process.env.RUNS || 10000);
const dir = mkdtempSync(join(tmpdir(), 'stepwright-dashboard-bench-'));
const db = `sqlite://${join(dir, 'bench.db')}`;
const key = (user, role) => JSON.parse(execFileSync(binary, ['keys', 'create', '--db', db, '--namespace', 'bench', '--user', user, '--role', role, '--json'])).secret;
const port = await new Promise((ok) => { const s = createServer(); s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => ok(port)); }); });
const base = `http://127.0.0.1:${port}`;

/** Bytes on the wire for a path, with and without gzip. */
function weight(path, secret) {
  const get = (encoding) => new Promise((ok, fail) => {
    const headers = { ...(encoding ? { 'Accept-Encoding': encoding } : {}), ...(secret ? { Authorization: `Bearer ${secret}` } : {}) };
    request(`${base}${path}`, { headers }, (response) => {
      let bytes = 0;
      response.on('data', (chunk) => { bytes += chunk.length; });
      response.on('end', () => ok(bytes));
    }).on('error', fail).end();
  });
  return Promise.all([get(null), get('gzip')]).then(([plain, gzip]) => ({ plain, gzip }));
}

const serve = spawn(binary, ['serve', '--db', db, '--listen', `127.0.0.1:${port}`], { stdio: ['ignore', 'ignore', 'inherit'] });
let browser;
try {
  const admin = key('root', 'admin');
  const viewer = key('vic', 'viewer');
  for (let i = 0; i < 100; i++) {
    try { if ((await fetch(`${base}/v1/health`)).ok) break; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  const call = async (secret, method, path, body) => {
    const response = await fetch(`${base}${path}`, { method, headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) });
    return response.json();
  };
  const source = 'workflow: wide\nsteps:\n  - id: each\n    map:\n      items: input\n      as: n\n      steps:\n        - id: double\n          set: "{{ n * 2 }}"\n';
  await call(admin, 'POST', '/v1/workflows', { source });
  let run = await call(admin, 'POST', '/v1/runs', { workflow: 'wide', input: Array.from({ length: STEPS }, (_, i) => i), wait_seconds: 60 });
  while (run.status !== 'completed') {
    await new Promise((r) => setTimeout(r, 500));
    run = await call(admin, 'GET', `/v1/runs/${run.run_id}`);
  }
  // The store holds RUNS runs besides (a one-step workflow, started eight at a time).
  await call(admin, 'POST', '/v1/workflows', { source: 'workflow: tiny\nsteps:\n  - id: one\n    set: 1\n' });
  let started = 0;
  await Promise.all(Array.from({ length: 8 }, async () => {
    while (started < RUNS) {
      started++;
      await call(admin, 'POST', '/v1/runs', { workflow: 'tiny', input: started, wait_seconds: 10 });
    }
  }));
  const details = await weight(`/v1/runs/${run.run_id}`, viewer);
  const pages = { page: await weight('/'), script: await weight('/assets/app.js'), styles: await weight('/assets/app.css') };

  browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ['--no-sandbox'] });
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  await page.goto(`${base}/`);
  await page.getByLabel('API key').fill(viewer);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByTestId('who').waitFor();
  const firstView = [];
  for (let i = 0; i < 5; i++) {
    await page.goto(`${base}/#/runs`);
    await page.locator('tbody tr').first().waitFor();
    const started = Date.now();
    await page.goto(`${base}/#/runs/${run.run_id}`);
    await page.locator('details.step').nth(199).waitFor();
    await page.locator('[data-node="each/double"].st-completed').waitFor();
    firstView.push(Date.now() - started);
  }
  firstView.sort((a, b) => a - b);
  const stepRows = await page.locator('details.step').count();
  // The runs list: from navigating to it to its first page (50 rows, with duration, cost and
  // who started each) drawn.
  const listView = [];
  for (let i = 0; i < 5; i++) {
    await page.goto(`${base}/#/workers`);
    await page.locator('main h1', { hasText: 'Workers' }).waitFor();
    const began = Date.now();
    await page.goto(`${base}/#/runs`);
    await page.locator('tbody tr').nth(49).waitFor();
    listView.push(Date.now() - began);
  }
  listView.sort((a, b) => a - b);
  console.log(JSON.stringify({
    steps_in_run: run.steps ? run.steps.length : null,
    first_view_ms: { min: firstView[0], median: firstView[2], max: firstView[4], runs: firstView },
    step_rows_drawn: stepRows,
    runs_in_store: RUNS + 1,
    runs_list_first_view_ms: { min: listView[0], median: listView[2], max: listView[4], runs: listView },
    run_details_bytes: details.plain,
    page_weight_bytes: pages,
    first_load_gzip_bytes: pages.page.gzip + pages.script.gzip + pages.styles.gzip,
    chromium: browser.version(),
  }, null, 2));
} finally {
  if (browser) await browser.close();
  serve.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}
