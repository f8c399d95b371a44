// The dashboard in a real browser: Debian's chromium, driven by playwright-core, against a
// real `stepwright serve` on loopback over SQLite, with model calls replayed from a cassette.
//
//   node tools/dashboard/test.mjs <stepwright binary> [screenshot dir]
//
// It signs in with keys, starts a run from its form, watches it reach an approval, approves
// it from the inbox as an approver while a viewer sees no button, opens a recompute's diff,
// uses an approval link twice (refused the second time), cancels runs in bulk after a count,
// and checks the pages' headers; it takes a screenshot of each view on the way.

import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Provider from 'oidc-provider';
import { chromium } from 'playwright-core';
import { lookProblems } from './look.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../..');
const binary = resolve(process.argv[2] || join(repo, 'target/debug/stepwright'));
const shots = resolve(process.argv[3] || join(repo, 'target/dashboard-screenshots'));
const browserPath = process.env.CHROMIUM || '/usr/bin/chromium';
mkdirSync(shots, { recursive: true });

const GREET = `
workflow: greet
input:
  type: object
  required: [name]
  properties:
    name: { type: string, minLength: 2, description: Who to greet }
    excited: { type: boolean }
steps:
  - id: hello
    set: "{{ 'Hello, ' ~ input.name }}"
  - id: ok
    approval:
      message: "Send the greeting?"
      approvers: ["role:approver"]
  - id: shout
    set: "{{ steps.hello.output ~ '!' }}"
`;
// Version 2 changes the first step: a recompute with it changes two steps' outputs.
const GREET_V2 = GREET.replace("'Hello, '", "'Hi there, '");

// A story told slowly by a fake OpenAI-compatible model on loopback, in the real streaming
// wire format (`chat.completion.chunk` events, the usage chunk, `[DONE]`): the run page must
// show the words as they come, while the step runs. It begins with the model id it was
// asked for, so a recompute with another binding changes the story.
const STORY_WORDS = 'Once upon a time a durable workflow waited three days for a person and lost nothing at all .'.split(' ');
const storyAskedFor = [];
function storyModel() {
  return new Promise((ok) => {
    const server = createHttpServer(async (request, response) => {
      let body = '';
      for await (const piece of request) body += piece;
      const asked = JSON.parse(body);
      const chunk = (choices, usage) => `data: ${JSON.stringify({ id: 'chatcmpl-story', object: 'chat.completion.chunk', created: 0, model: asked.model, choices, ...(usage ? { usage } : {}) })}\n\n`;
      response.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
      storyAskedFor.push(asked.model);
      response.write(chunk([{ index: 0, delta: { role: 'assistant', content: `[${asked.model}] ` } }]));
      for (const word of STORY_WORDS) {
        response.write(chunk([{ index: 0, delta: { content: `${word} ` } }]));
        await new Promise((r) => setTimeout(r, 250));
      }
      response.write(chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]));
      response.write(chunk([], { prompt_tokens: 12, completion_tokens: STORY_WORDS.length, total_tokens: 12 + STORY_WORDS.length }));
      response.end('data: [DONE]\n\n');
    });
    server.listen(0, '127.0.0.1', () => ok(server));
  });
}

// A real OpenID provider on loopback (the `oidc-provider` package, certified by the OpenID
// Foundation), with its development login pages: any login signs in as that account. Olga is
// staff and an approver; Sam is only a visitor.
const GROUPS = { olga: ['staff', 'approvers'], sam: ['visitors'] };
async function openIdProvider(port, callback) {
  const provider = new Provider(`http://127.0.0.1:${port}`, {
    clients: [{
      client_id: 'stepwright',
      client_secret: 'client-secret-for-tests',
      redirect_uris: [callback],
      response_types: ['code'],
      grant_types: ['authorization_code'],
    }],
    pkce: { required: () => true },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['teams'] },
    scopes: ['openid', 'email', 'groups'],
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: true } },
    cookies: { keys: ['cookie-key-for-tests'] },
    ttl: { AccessToken: 600, AuthorizationCode: 60, Grant: 600, IdToken: 600, Interaction: 600, Session: 600 },
    findAccount: async (ctx, id) => ({
      accountId: id,
      claims: async () => ({ sub: id, email: `${id}@example.com`, email_verified: true, teams: GROUPS[id] || [] }),
    }),
  });
  const server = createHttpServer(provider.callback());
  await new Promise((ok) => server.listen(port, '127.0.0.1', ok));
  return server;
}

function freePort() {
  return new Promise((ok) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), 'stepwright-dashboard-'));
const db = `sqlite://${join(dir, 'dashboard.db')}`;
const key = (user, ...roles) => {
  const out = execFileSync(binary, ['keys', 'create', '--db', db, '--namespace', 'acme', '--user', user,
    ...roles.flatMap((r) => ['--role', r]), '--json']);
  return JSON.parse(out).secret;
};

let serve;
let model;
let idp;
let browser;
let failed = false;
const step = (text) => console.log(`dashboard: ${text}`);

async function main() {
  const admin = key('root', 'admin');
  const ann = key('ann', 'operator');
  const lee = key('lee', 'approver', 'viewer');
  const vic = key('vic', 'viewer');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  model = await storyModel();
  // The research example's calls come from a copy of its cassette; the story's (not in it)
  // go to the fake model.
  // The ticket-triage and order-followup examples' are added to it: they are finished in the
  // browser too.
  const cassette = join(dir, 'research.cassette.json');
  copyFileSync(join(repo, 'examples/research.cassette.json'), cassette);
  const recorded = JSON.parse(readFileSync(cassette, 'utf8'));
  for (const name of ['ticket-triage', 'order-followup']) {
    recorded.interactions.push(...JSON.parse(readFileSync(join(repo, `examples/${name}.cassette.json`), 'utf8')).interactions);
  }
  writeFileSync(cassette, JSON.stringify(recorded));
  const idpPort = await freePort();
  idp = await openIdProvider(idpPort, `${base}/v1/auth/oidc/callback`);
  const oidcFlags = ['--oidc-issuer', `http://127.0.0.1:${idpPort}`, '--oidc-client-id', 'stepwright',
    '--oidc-client-secret-env', 'OIDC_CLIENT_SECRET', '--oidc-scope', 'email', '--oidc-scope', 'groups',
    '--oidc-groups-claim', 'teams', '--oidc-redirect-url', `${base}/v1/auth/oidc/callback`,
    '--oidc-map', 'approvers=acme:approver+viewer', '--oidc-map', 'staff=acme:viewer', '--oidc-allow', 'group:staff'];
  serve = spawn(binary, ['serve', '--db', db, '--listen', `127.0.0.1:${port}`, '--cassette', cassette, '--cassette-mode', 'auto', ...oidcFlags],
    { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, STORY_API_KEY: 'sk-fake', OIDC_CLIENT_SECRET: 'client-secret-for-tests' } });
  for (let i = 0; i < 100; i++) {
    try { if ((await fetch(`${base}/v1/health`)).ok) break; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  const call = async (secret, method, path, body) => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: await response.json().catch(() => null) };
  };
  const story = `
workflow: story
models:
  teller: { provider: openai, model: gpt-4o-mini, base_url: "http://127.0.0.1:${model.address().port}/v1", api_key_env: STORY_API_KEY }
  editor: { provider: openai, model: gpt-4o, base_url: "http://127.0.0.1:${model.address().port}/v1", api_key_env: STORY_API_KEY }
steps:
  - id: tell
    llm: { model: teller, prompt: "Tell a very short story." }
`;
  // A person rates an answer (a form from the request's schema), then a tool times out once
  // (a retryable failure) and succeeds on its retry (two bars on one row of the waterfall).
  const survey = `
workflow: survey
tools:
  flaky:
    command: [sh, -c, 'if [ -f "$1" ]; then echo ok; else touch "$1"; sleep 5; fi', flaky, "${join(dir, 'flaky-marker')}"]
    effect: read
    timeout: 400ms
steps:
  - id: rating
    input:
      message: "Rate the answer"
      schema: { type: object, required: [score], properties: { score: { type: integer, minimum: 1, maximum: 5 }, comment: { type: string } } }
  - id: check
    tool: flaky
    retry: { max_attempts: 2, initial_delay: 50ms }
`;
  const examples = ['research', 'ticket-triage', 'order-followup'].map((name) => readFileSync(join(repo, `examples/${name}.yaml`), 'utf8'));
  for (const source of [GREET, ...examples, story, survey]) {
    const registered = await call(admin, 'POST', '/v1/workflows', { source });
    assert.equal(registered.status, 201, JSON.stringify(registered.body));
  }
  // A workflow that calls another, whose second step waits for a person.
  const outer = 'workflow: outer\nsteps:\n  - id: prep\n    set: "{{ input }}"\n  - id: sub\n    workflow: parts/inner.yaml\n    with: "{{ steps.prep.output }}"\n  - id: after\n    set: "{{ steps.sub.output }}"\n';
  const inner = 'workflow: inner\nsteps:\n  - id: one\n    set: "{{ input ~ \'!\' }}"\n  - id: ask\n    approval: { message: "Go on?" }\n  - id: two\n    set: "{{ steps.one.output ~ \'?\' }}"\n';
  const outerRegistered = await call(admin, 'POST', '/v1/workflows', { source: outer, files: { 'parts/inner.yaml': inner } });
  assert.equal(outerRegistered.status, 201, JSON.stringify(outerRegistered.body));

  step('the page and its files: embedded, fenced in by a Content-Security-Policy, compressed');
  const page0 = await fetch(`${base}/`, { headers: { 'Accept-Encoding': 'gzip' } });
  assert.equal(page0.status, 200);
  assert.match(page0.headers.get('content-security-policy'), /script-src 'self'/);
  assert.equal(page0.headers.get('x-frame-options'), 'DENY');
  const script = await fetch(`${base}/assets/app.js`, { headers: { 'Accept-Encoding': 'gzip' } });
  assert.equal(script.headers.get('content-encoding'), 'gzip');
  const again = await fetch(`${base}/assets/app.js`, { headers: { 'If-None-Match': script.headers.get('etag') } });
  assert.equal(again.status, 304, 'revalidated by its hash');

  browser = await chromium.launch({ executablePath: browserPath, args: ['--no-sandbox'] });
  // A run's page shows it ended — that run's page, not the one before it: a hash change keeps
  // the old view on screen until the new run's details arrive, and the old run may have ended
  // too (a wait on any ended header once raced the page it was meant for).
  const runEnded = (page, runId, options) => page.locator('.spread', { has: page.locator('h1', { hasText: runId }) })
    .locator('.status.s-completed').waitFor(options);
  // A toast with this text; on a timeout, says what the toast and the run said instead.
  const toastSays = async (page, text, runId) => {
    try {
      await page.locator('#toast', { hasText: text }).waitFor();
    } catch (error) {
      const seen = await page.locator('#toast').textContent();
      const run = runId ? JSON.stringify((await call(ann, 'GET', `/v1/runs/${runId}`)).body) : '';
      throw new Error(`no toast "${text}"; the toast says "${seen}"; the run: ${run}`, { cause: error });
    }
  };
  const person = async (secret, options = {}) => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, ...options });
    const page = await context.newPage();
    page.on('pageerror', (error) => { failed = true; console.error(`dashboard: a script error on the page: ${error.message}`); });
    page.on('console', (message) => {
      const ours = (message.location().url || '').startsWith(base);
      if (ours && message.type() === 'error' && !/status of 4\d\d/.test(message.text())) console.error(`dashboard: console: ${message.text()}`);
    });
    await page.goto(`${base}/`);
    if (secret) {
      await page.getByLabel('API key').fill(secret);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByTestId('who').waitFor();
    }
    return page;
  };

  step('sign in with a key: a wrong one is refused, a right one starts a session');
  const operator = await person(null);
  await operator.getByLabel('API key').fill('sw_swk000000000000_wrong');
  await operator.screenshot({ path: join(shots, 'sign-in.png') });
  assert.equal(await operator.getByRole('navigation', { name: 'Main' }).count(), 0, 'no navigation before signing in');
  await operator.getByRole('button', { name: 'Sign in' }).click();
  await operator.getByRole('alert').filter({ hasText: 'unknown API key' }).waitFor();
  await operator.getByLabel('API key').fill(ann);
  await operator.getByRole('button', { name: 'Sign in' }).click();
  await operator.getByTestId('who').filter({ hasText: 'ann · acme · operator' }).waitFor();
  const cookies = await operator.context().cookies();
  const session = cookies.find((c) => c.name === 'stepwright_session');
  assert.ok(session && session.httpOnly && session.sameSite === 'Strict', JSON.stringify(cookies));
  assert.equal(await operator.evaluate(() => document.cookie), '', 'the page cannot read the session');

  step('start a run from the form generated from the input schema; the form checks first');
  await operator.getByRole('link', { name: 'Workflows' }).click();
  await operator.getByRole('link', { name: 'greet' }).click();
  await operator.getByLabel('name *').fill('A');
  await operator.getByRole('button', { name: 'Start' }).click();
  await operator.getByText('at least 2 characters').waitFor();
  assert.equal(await operator.getByLabel('name *').getAttribute('aria-invalid'), 'true');
  await operator.getByLabel('name *').fill('Ada');
  await operator.getByLabel('Tags (optional, space-separated)').fill('vip env:prod');
  await operator.screenshot({ path: join(shots, 'workflow.png'), fullPage: true });
  await operator.getByRole('button', { name: 'Start' }).click();
  await operator.waitForURL(/#\/runs\/[0-9a-f-]{36}$/);
  const runId = operator.url().split('/').pop();

  step('watch it live until it waits for an approval');
  await operator.locator('.status.s-suspended').first().waitFor();
  await operator.getByText('Waiting for a person at ok').waitFor();
  await operator.getByText('An approver decides this.').waitFor();
  await operator.locator('[data-node="hello"].st-completed').waitFor();
  await operator.locator('[data-node="ok"].st-suspended').waitFor();
  await operator.screenshot({ path: join(shots, 'run-waiting.png'), fullPage: true });

  step('a viewer sees the run and no decision button; an approver decides from the inbox');
  const viewer = await person(vic);
  await viewer.goto(`${base}/#/runs/${runId}`);
  await viewer.getByText('Waiting for a person at ok').waitFor();
  assert.equal(await viewer.getByRole('button', { name: 'Approve' }).count(), 0);
  assert.equal(await viewer.getByRole('button', { name: 'Cancel' }).count(), 0, 'a viewer has no actions');
  await viewer.goto(`${base}/#/inbox`);
  await viewer.getByText('This key has no approver role').waitFor();
  assert.equal(await viewer.getByRole('button', { name: 'Approve' }).count(), 0);

  const approver = await person(lee);
  await approver.getByRole('link', { name: /Approvals/ }).click();
  const card = approver.locator(`[data-interrupt^="${runId}."]`);
  await card.getByText('Send the greeting?').waitFor();
  await approver.screenshot({ path: join(shots, 'inbox.png'), fullPage: true });
  await card.getByRole('button', { name: 'Approve' }).click();
  await approver.getByText('Nothing waits for you.').waitFor();

  step('the operator\'s page follows the run to its end');
  await runEnded(operator, runId);
  await operator.locator('[data-node="shout"].st-completed').waitFor();
  const shown = await call(ann, 'GET', `/v1/runs/${runId}`);
  assert.equal(shown.body.output, 'Hello, Ada!');
  await operator.getByTestId('started-by').filter({ hasText: 'ann' }).waitFor();
  assert.deepEqual(shown.body.tags, ['vip', 'env:prod'], 'the form\'s tags are the run\'s');
  assert.deepEqual(await operator.getByTestId('tags').locator('a.tag').allTextContents(), ['vip', 'env:prod']);

  step('a tag links to the runs that carry it, and only those');
  const untagged = await call(ann, 'POST', '/v1/runs', { workflow: 'greet', input: { name: 'Untagged' } });
  assert.equal(untagged.status, 202, JSON.stringify(untagged.body));
  await operator.getByTestId('tags').getByRole('link', { name: 'vip' }).click();
  await operator.waitForURL(/#\/runs\?tag=vip$/);
  await operator.getByRole('table', { name: 'Runs' }).waitFor();
  const listedIds = await operator.locator('table[aria-label="Runs"] tbody tr td:nth-child(2) a').evaluateAll((links) => links.map((a) => a.title));
  assert.deepEqual(listedIds, [runId], 'the tagged run alone');
  assert.equal(await operator.getByLabel('Tag', { exact: true }).inputValue(), 'vip', 'the filter shows the tag');
  assert.equal((await call(ann, 'POST', `/v1/runs/${untagged.body.run_id}/cancel`, {})).status, 200);
  await operator.goto(`${base}/#/runs/${runId}`);
  await operator.locator('.wf-row[data-path="ok"] .span-bar').first().waitFor();

  step('the timeline is what happened: seconds waiting for a person, milliseconds executing, and it stops at the end');
  const okRow = operator.locator('.wf-row[data-path="ok"]');
  const widths = async () => okRow.locator('.span-bar').evaluateAll((bars) => bars.map((b) => [b.dataset.activity, b.getBoundingClientRect().width]));
  const drawn = await widths();
  const waitedBar = drawn.filter(([a]) => a === 'person').reduce((sum, [, w]) => sum + w, 0);
  const executing = drawn.filter(([a]) => a === 'executing').reduce((sum, [, w]) => sum + w, 0);
  const okSpans = shown.body.steps.find((s) => s.path === 'ok').spans;
  const lasted = (a) => okSpans.filter((s) => s.activity === a).reduce((sum, s) => sum + (s.to - s.from), 0);
  assert.ok(lasted('person') > 20 * lasted('executing'), JSON.stringify(okSpans));
  assert.ok(waitedBar > 8 * executing, `bars in proportion: ${JSON.stringify(drawn)}`);
  await new Promise((r) => setTimeout(r, 1500));
  assert.deepEqual(await widths(), drawn, 'a finished run\'s bars do not grow');

  step('a step\'s detail panel: opened from the timeline, true to the API, closed by Escape');
  const stepPanel = operator.getByTestId('step-panel');
  assert.equal(await stepPanel.isVisible(), false, 'closed until asked for');
  await okRow.getByRole('button', { name: 'Details of ok' }).click();
  await stepPanel.getByRole('heading', { name: 'ok' }).waitFor();
  const okStep = shown.body.steps.find((s) => s.path === 'ok');
  assert.equal(await stepPanel.locator('[data-fact="attempts"]').textContent(), String(okStep.attempts));
  const panelWaited = await stepPanel.locator('dd[data-activity="person"]').textContent();
  assert.ok(/s|min/.test(panelWaited) && !/^0\.\d ms$/.test(panelWaited), `the wait for a person is seconds: ${panelWaited}`);
  assert.equal(await stepPanel.locator('.spans li').count(), okStep.spans.length, 'a line per span of the API\'s');
  assert.equal(await operator.evaluate(() => document.activeElement.getAttribute('aria-label')), 'Close the step details', 'focus moves to the panel');
  await operator.keyboard.press('Escape');
  await stepPanel.waitFor({ state: 'hidden' });
  await operator.locator('details.step[data-path="hello"]').getByRole('button', { name: 'Details of hello' }).click();
  await stepPanel.getByRole('heading', { name: 'hello' }).waitFor();
  await stepPanel.getByText('"Hello, Ada"', { exact: true }).waitFor();
  assert.equal(await operator.locator('details.step[data-path="hello"]').evaluate((d) => d.open), false, 'the button opens the panel, not the row');
  await stepPanel.getByRole('button', { name: 'Close the step details' }).click();
  await stepPanel.waitFor({ state: 'hidden' });

  step('someone else deciding first is shown as such');
  const raced = await call(ann, 'POST', '/v1/runs', { workflow: 'greet', input: { name: 'Bo' }, wait_seconds: 10 });
  await approver.reload();
  const racedCard = approver.locator(`[data-interrupt^="${raced.body.run_id}."]`);
  await racedCard.waitFor();
  const decided = await call(lee, 'POST', `/v1/interrupts/${raced.body.run_id}.${(await call(lee, 'GET', '/v1/interrupts')).body[0].interrupt_id}/decision`, { decision: 'reject', reason: 'no' });
  assert.equal(decided.status, 200, JSON.stringify(decided.body));
  await racedCard.getByRole('button', { name: 'Approve' }).click();
  await racedCard.getByText('Someone else decided this already.').waitFor();

  step('an approval link decides once without signing in, and is refused the second time');
  const linked = await call(ann, 'POST', '/v1/runs', { workflow: 'greet', input: { name: 'Cy' }, wait_seconds: 10 });
  await approver.reload();
  const linkCard = approver.locator(`[data-interrupt^="${linked.body.run_id}."]`);
  await linkCard.getByRole('button', { name: 'Make an approval link' }).click();
  const url = await linkCard.getByLabel('Approval link').inputValue();
  assert.match(url, /\/link#sw_/);
  const stranger = await browser.newContext();
  const linkPage = await stranger.newPage();
  await linkPage.goto(url);
  await linkPage.getByText('You decide as lee').waitFor();
  await linkPage.screenshot({ path: join(shots, 'approval-link.png'), fullPage: true });
  await linkPage.getByRole('button', { name: 'Approve' }).click();
  await linkPage.getByText('this link is now spent').waitFor();
  await linkPage.goto('about:blank');
  await linkPage.goto(url);
  await linkPage.getByRole('alert').filter({ hasText: 'was used' }).waitFor();
  assert.equal(await linkPage.getByRole('button', { name: 'Approve' }).count(), 0);

  step('recompute with a new version, and its diff beside the original');
  assert.equal((await call(admin, 'POST', '/v1/workflows', { source: GREET_V2 })).status, 201);
  await operator.goto(`${base}/#/runs/${runId}`);
  await operator.getByRole('button', { name: 'Recompute…' }).click();
  await operator.getByLabel('Definition').selectOption('2');
  await operator.getByRole('button', { name: 'Recompute', exact: true }).click();
  await operator.waitForURL(/#\/diff\//);
  const diffUrl = operator.url();
  await operator.getByTestId('changed-count').waitFor();
  assert.equal(await operator.getByTestId('changed-count').textContent(), '2');
  await operator.locator('[data-path="hello"][data-verdict="changed"]').waitFor();
  await operator.locator('[data-path="ok"][data-verdict="identical"]').waitFor();
  await operator.getByText('+ "Hi there, Ada!"').first().waitFor();
  await operator.screenshot({ path: join(shots, 'diff.png'), fullPage: true });

  step('fork a run before a step with an edited input; the new run names its parent, the parent its fork');
  await operator.goto(`${base}/#/runs/${runId}`);
  await operator.getByRole('button', { name: 'Fork…' }).click();
  await operator.getByLabel('Fork before').selectOption('hello');
  await operator.getByLabel('New input (JSON)').fill('{"name": "Grace"');
  await operator.getByRole('button', { name: 'Fork', exact: true }).click();
  await operator.getByText('Not JSON').waitFor();
  await operator.getByLabel('New input (JSON)').fill('{"name": "Grace"}');
  await operator.getByRole('button', { name: 'Fork', exact: true }).click();
  await operator.waitForURL((url) => !url.href.endsWith(runId) && /#\/runs\/[0-9a-f-]{36}$/.test(url.href));
  const forkId = operator.url().split('/').pop();
  await operator.getByText('forked from').waitFor();
  await operator.getByText('Waiting for a person at ok').waitFor();
  const forkShown = await call(ann, 'GET', `/v1/runs/${forkId}`);
  assert.equal(forkShown.body.parent.run_id, runId);
  assert.equal(forkShown.body.steps.find((s) => s.path === 'hello').output, 'Hello, Grace');
  await operator.goto(`${base}/#/runs/${runId}`);
  await operator.getByTestId('forks').getByRole('link').first().waitFor();

  step('a person answers an input request through its schema form, checked before it is sent; a retry is its own bar');
  const surveyed = await call(ann, 'POST', '/v1/runs', { workflow: 'survey', input: null, wait_seconds: 10 });
  assert.equal(surveyed.body.status, 'suspended', JSON.stringify(surveyed.body));
  await approver.reload();
  const rating = approver.locator(`[data-interrupt^="${surveyed.body.run_id}."]`);
  await rating.getByLabel('score *').waitFor();
  assert.deepEqual(await rating.locator('.field label').allTextContents(), ['score *', 'comment'], 'the fields in the file\'s order, not alphabetical');
  await rating.getByLabel('score *').fill('9');
  await rating.getByRole('button', { name: 'Send' }).click();
  await rating.getByText('at most 5').waitFor();
  assert.equal((await call(ann, 'GET', `/v1/runs/${surveyed.body.run_id}`)).body.status, 'suspended', 'nothing was sent');
  await rating.getByLabel('score *').fill('4');
  await rating.getByLabel('comment').fill('clear enough');
  await rating.getByRole('button', { name: 'Send' }).click();
  await approver.getByText(/Answered: run/).waitFor();
  // From one run's page to another's: the moment the address changes, the page stops showing
  // the run before (its id, its status), rather than keeping it on screen while this one loads.
  const shownAtOnce = await operator.evaluate((hash) => new Promise((resolve) => {
    addEventListener('hashchange', () => resolve(document.getElementById('main').textContent), { once: true });
    location.hash = hash;
  }), `#/runs/${surveyed.body.run_id}`);
  assert.ok(!shownAtOnce.includes(runId), `the run before is still on screen: ${shownAtOnce.slice(0, 200)}`);
  await runEnded(operator, surveyed.body.run_id);
  const checkRow = operator.locator('.wf-row', { has: operator.locator('.name', { hasText: /^check/ }) });
  await checkRow.locator('.bar-retry').waitFor();
  assert.equal(await checkRow.locator('.bar-executing').count(), 2, 'the failed first attempt and the retry that succeeded');
  assert.equal(await checkRow.locator('.bar-retry').count(), 1, 'the delay between them');
  assert.equal(await checkRow.locator('.name').textContent(), 'check (2 attempts)');
  const answered = await call(ann, 'GET', `/v1/runs/${surveyed.body.run_id}`);
  assert.deepEqual(answered.body.steps.find((s) => s.path === 'rating').output, { score: 4, comment: 'clear enough' });

  step('a called workflow\'s steps are drawn with their own statuses, as the run goes on');
  const outerRun = await call(ann, 'POST', '/v1/runs', { workflow: 'outer', input: 'go', wait_seconds: 10 });
  assert.equal(outerRun.body.status, 'suspended', JSON.stringify(outerRun.body));
  await operator.goto(`${base}/#/runs/${outerRun.body.run_id}`);
  const nodeStatus = (key) => operator.locator(`[data-node="${key}"]`).first().getAttribute('class');
  await operator.locator('[data-node="sub/one"].st-completed').waitFor();
  await operator.locator('[data-node="sub/ask"].st-suspended').waitFor();
  assert.match(await nodeStatus('sub/two'), /st-not-reached/, 'not reached yet');
  assert.match(await nodeStatus('after'), /st-not-reached/);
  assert.match(await nodeStatus('prep'), /st-completed/);
  const outerPending = outerRun.body.pending[0].id;
  assert.equal((await call(lee, 'POST', `/v1/interrupts/${outerRun.body.run_id}.${outerPending}/decision`, { decision: 'approve' })).status, 200);
  await operator.locator('[data-node="sub/two"].st-completed').waitFor();
  await operator.locator('[data-node="after"].st-completed').waitFor();
  assert.match(await nodeStatus('sub/ask'), /st-completed/);
  const outerDone = await call(ann, 'GET', `/v1/runs/${outerRun.body.run_id}`);
  assert.equal(outerDone.body.output, 'go!?', JSON.stringify(outerDone.body));

  step('a run with models: its real graph (fork, map), the waterfall, tokens and cost, artifacts');
  const research = await call(ann, 'POST', '/v1/runs', { workflow: 'research', input: { topic: 'durable execution for AI agents' }, wait_seconds: 30 });
  assert.equal(research.body.status, 'completed', JSON.stringify(research.body));
  await operator.goto(`${base}/#/runs/${research.body.run_id}`);
  await operator.locator('[data-node="sides/case-for"].st-completed').waitFor();
  await operator.locator('[data-node="answers/answer"].st-completed').waitFor();
  await operator.getByRole('group', { name: /^sides · fork \(all\)/ }).waitFor();
  await operator.getByRole('group', { name: /^answers · map over / }).waitFor();
  await operator.locator('.wf-row .name', { hasText: 'answers[2]/answer' }).waitFor();
  await operator.getByText(/\d+ in \/ \d+ out/).waitFor();
  const plan = operator.locator('details.step[data-path="plan"]');
  await plan.locator('summary').click();
  await plan.getByRole('button', { name: /llm-output/ }).click();
  await plan.locator('pre', { hasText: 'questions' }).first().waitFor();
  // Every artifact the events mark stored is served, the model's input too.
  await plan.getByRole('button', { name: /llm-input/ }).click();
  await plan.locator('pre', { hasText: '"messages"' }).first().waitFor();
  await operator.screenshot({ path: join(shots, 'run.png'), fullPage: true });

  step('model text streams live into the running step');
  const told = await call(ann, 'POST', '/v1/runs', { workflow: 'story', input: null });
  assert.equal(told.status, 202, JSON.stringify(told.body));
  const toldAt = Date.now();
  await operator.goto(`${base}/#/runs/${told.body.run_id}`);
  await operator.locator('details.step[data-path="tell"] .s-running').waitFor({ timeout: 1500 });
  await operator.locator('details.step[data-path="tell"] [data-elapsed-from]').waitFor();
  await operator.locator('.wf-row[data-path="tell"] .bar-executing.live').waitFor();
  assert.ok(Date.now() - toldAt < 2500, `the running step was on the page ${Date.now() - toldAt} ms after it started`);
  const live = operator.getByTestId('live-text');
  await live.filter({ hasText: 'durable workflow' }).waitFor();
  const early = await live.textContent();
  assert.ok(!early.includes('nothing at all'), `words arrive while the step runs: ${early}`);
  await operator.screenshot({ path: join(shots, 'run-live.png'), fullPage: true });
  await runEnded(operator, told.body.run_id, { timeout: 20000 });
  const finished = await call(ann, 'GET', `/v1/runs/${told.body.run_id}`);
  assert.match(finished.body.output.text || JSON.stringify(finished.body.output), /lost nothing at all/);

  step('recompute with another model binding the definition has; the diff shows what it changed');
  await operator.getByRole('button', { name: 'Recompute…' }).click();
  await operator.getByLabel('Calls to teller').selectOption('editor');
  await operator.getByRole('button', { name: 'Recompute', exact: true }).click();
  await operator.waitForURL(/#\/diff\//);
  await operator.locator('[data-path="tell"][data-verdict="changed"]').waitFor();
  assert.deepEqual(storyAskedFor.slice(-2), ['gpt-4o-mini', 'gpt-4o'], 'the recompute asked the editor binding\'s model');
  await operator.getByText('[gpt-4o]', { exact: false }).first().waitFor();

  step('bulk cancel shows the count first');
  for (const name of ['Di', 'Ed']) await call(ann, 'POST', '/v1/runs', { workflow: 'greet', input: { name }, wait_seconds: 10 });
  await operator.goto(`${base}/#/runs?status=suspended`);
  const boxes = operator.getByRole('checkbox', { name: /^Select run/ });
  await boxes.first().waitFor();
  assert.equal(await boxes.count(), 3, 'Di, Ed and the fork of Ada\'s run wait');
  await operator.getByText('waits for a person at ok: Send the greeting?').first().waitFor();
  await boxes.nth(0).check();
  await boxes.nth(1).check();
  await boxes.nth(2).check();
  await operator.getByRole('button', { name: 'Cancel selected (3)' }).click();
  await operator.getByRole('heading', { name: 'Cancel 3 runs?' }).waitFor();
  await operator.getByRole('button', { name: 'Cancel 3' }).click();
  await operator.getByText('Cancelled 3 of 3.').waitFor();
  await operator.getByText('No runs match.').waitFor();

  step('filters: text in the input, status; light and dark');
  await operator.goto(`${base}/#/runs?q=cy`);
  await operator.locator('tbody tr').first().waitFor();
  assert.equal(await operator.locator('tbody tr').count(), 1, 'one run has "Cy" in its input (any case)');
  await operator.goto(`${base}/#/runs?q=ada&status=completed`);
  await operator.locator('tbody tr').nth(1).waitFor();
  assert.equal(await operator.locator('tbody tr').count(), 2, 'Ada\'s run and its recompute');
  await operator.goto(`${base}/#/runs`);
  await operator.locator('tbody tr').nth(4).waitFor();
  await operator.screenshot({ path: join(shots, 'runs.png'), fullPage: true });
  await operator.getByRole('button', { name: 'Switch between light and dark' }).click();
  await operator.screenshot({ path: join(shots, 'runs-dark.png'), fullPage: true });

  step('keyboard: the skip link first, then the controls, by Tab');
  await operator.reload();
  await operator.locator('tbody tr').first().waitFor();
  await operator.keyboard.press('Tab');
  assert.equal(await operator.evaluate(() => document.activeElement.textContent), 'Skip to content');
  await operator.keyboard.press('Enter');
  assert.equal(await operator.evaluate(() => document.activeElement.id), 'main');
  await operator.keyboard.press('Tab');
  assert.equal(await operator.evaluate(() => document.activeElement.id), 'f-status', 'the first filter');

  step('a run waiting for an event says for which; a queued run says why it has not started');
  const paid = `
workflow: paid
steps:
  - id: payment
    wait: { event: payment, timeout: 1d }
`;
  assert.equal((await call(admin, 'POST', '/v1/workflows', { source: paid })).status, 201);
  const desk = { key: 'desk', limit: 1 };
  const holder = await call(ann, 'POST', '/v1/runs', { workflow: 'paid', input: null, concurrency: desk, wait_seconds: 10 });
  assert.equal(holder.body.status, 'suspended', JSON.stringify(holder.body));
  const queued = await call(ann, 'POST', '/v1/runs', { workflow: 'paid', input: null, concurrency: desk });
  await operator.goto(`${base}/#/runs/${holder.body.run_id}`);
  await operator.getByTestId('awaiting').filter({ hasText: 'Waiting for the event payment at payment' }).waitFor();
  await operator.getByText(`stepwright send ${holder.body.run_id} --inbox payment`, { exact: false }).waitFor();
  await operator.goto(`${base}/#/runs/${queued.body.run_id}`);
  await operator.getByTestId('queued').filter({ hasText: 'concurrency group "desk" is full' }).waitFor();

  step('a run waiting for a step worker says which queue and handler, and that nobody polls it; the Workers page shows the backlog and then the worker');
  const outsourced = `
workflow: outsourced
tools:
  summarise:
    worker: { queue: py, schedule_to_start: 1h }
    effect: read
steps:
  - id: summary
    tool: summarise
`;
  assert.equal((await call(admin, 'POST', '/v1/workflows', { source: outsourced })).status, 201);
  const outsourcedRun = await call(ann, 'POST', '/v1/runs', { workflow: 'outsourced', input: null });
  await operator.goto(`${base}/#/runs/${outsourcedRun.body.run_id}`);
  await operator.getByTestId('task-wait').filter({ hasText: 'No worker polls queue py for summarise' }).waitFor();
  await operator.getByRole('link', { name: 'Workers' }).click();
  await operator.locator('[data-queue="py"] td').nth(1).filter({ hasText: '1' }).waitFor();
  await operator.getByText('No step worker was heard from').waitFor();
  // A worker claims it: the run's page names the worker, the Workers page lists it.
  const workerKey = key('robot', 'worker');
  const claimed = await fetch(`${base}/v1/tasks/claim`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${workerKey}`, 'Content-Type': 'application/json', 'Stepwright-Protocol': '1' },
    body: JSON.stringify({ worker: { id: 'py-7', name: 'box', sdk: 'py/0.1.0' }, queue: 'py', handlers: ['summarise'], wait_seconds: 5 }),
  }).then((r) => r.json());
  assert.equal(claimed.tasks.length, 1, JSON.stringify(claimed));
  await operator.reload();
  await operator.locator('[data-worker="py-7"]').filter({ hasText: 'summarise' }).waitFor();
  await operator.locator('[data-queue="py"] td').nth(2).filter({ hasText: '1' }).waitFor();
  await operator.screenshot({ path: join(shots, 'workers.png'), fullPage: true });
  await operator.goto(`${base}/#/runs/${outsourcedRun.body.run_id}`);
  await operator.getByTestId('task-wait').filter({ hasText: 'Worker py-7 runs summarise' }).waitFor();
  const [task] = claimed.tasks;
  const completed = await fetch(`${base}/v1/tasks/${task.id}/complete`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${workerKey}`, 'Content-Type': 'application/json', 'Stepwright-Protocol': '1' },
    body: JSON.stringify({ lease: task.lease, output: { summary: 'short' } }),
  });
  assert.equal(completed.status, 200);
  await operator.locator('[data-node="summary"].st-completed').waitFor();
  assert.equal(await operator.getByTestId('task-wait').count(), 0, 'a finished run waits on nothing');

  step('sign in through the OpenID provider (code flow with PKCE); a group maps to the approver role');
  const waiting = await call(ann, 'POST', '/v1/runs', { workflow: 'greet', input: { name: 'Flo' }, wait_seconds: 10 });
  const sso = await person(null);
  await sso.getByRole('link', { name: 'Sign in with single sign-on' }).click();
  await sso.locator('input[name="login"]').fill('olga');
  await sso.locator('input[name="password"]').fill('anything');
  await sso.locator('button[type="submit"]').click();
  await sso.locator('button[type="submit"]', { hasText: /continue/i }).click();
  await sso.getByTestId('who').filter({ hasText: 'olga@example.com · acme · viewer, approver' }).waitFor();
  await sso.getByRole('link', { name: /Approvals/ }).click();
  await sso.locator(`[data-interrupt^="${waiting.body.run_id}."]`).getByRole('button', { name: 'Approve' }).click();
  await sso.getByText('Nothing waits for you.').waitFor();
  const audit = await call(lee, 'GET', `/v1/runs/${waiting.body.run_id}`);
  assert.notEqual(audit.body.status, 'suspended', 'the decision took');
  step('someone the allow-list does not name is refused, with the reason');
  const visitor = await person(null);
  await visitor.getByRole('link', { name: 'Sign in with single sign-on' }).click();
  await visitor.locator('input[name="login"]').fill('sam');
  await visitor.locator('input[name="password"]').fill('anything');
  await visitor.locator('button[type="submit"]').click();
  await visitor.locator('button[type="submit"]', { hasText: /continue/i }).click();
  await visitor.getByText("sam@example.com is not on this server's allow-list").waitFor();
  await visitor.goto(`${base}/`);
  await visitor.getByLabel('API key').waitFor();

  step('a durable timer is not a decision: never in the inbox; an operator wakes it from the run\'s page');
  const nap = 'workflow: nap\nsteps:\n  - id: nap\n    sleep: 6h\n  - id: up\n    set: awake\n';
  assert.equal((await call(admin, 'POST', '/v1/workflows', { source: nap })).status, 201);
  const napping = await call(ann, 'POST', '/v1/runs', { workflow: 'nap', input: null, wait_seconds: 10 });
  assert.equal(napping.body.status, 'suspended', JSON.stringify(napping.body));
  const inboxNow = await call(lee, 'GET', '/v1/interrupts');
  assert.ok(!inboxNow.body.some((i) => i.run_id === napping.body.run_id), 'a timer is not in the inbox');
  await approver.goto(`${base}/#/inbox`);
  await approver.locator('h1', { hasText: 'Approvals' }).waitFor();
  assert.equal(await approver.locator(`[data-interrupt^="${napping.body.run_id}."]`).count(), 0);
  await operator.goto(`${base}/#/runs/${napping.body.run_id}`);
  await operator.getByTestId('timer').filter({ hasText: 'Sleeping at nap' }).waitFor();
  await operator.getByRole('button', { name: 'Wake now' }).click();
  await runEnded(operator, napping.body.run_id);

  step('navigation: twenty quick clicks end on the last view clicked');
  const views = ['#/workflows', '#/inbox', '#/workers', '#/runs'];
  await operator.evaluate(async (list) => {
    for (let i = 0; i < 20; i++) {
      location.hash = list[i % list.length];
      await new Promise((r) => setTimeout(r, 15));
    }
  }, views);
  await new Promise((r) => setTimeout(r, 1500));
  assert.equal(await operator.locator('main h1').first().textContent(), 'Runs', 'the last view clicked (Runs) is the one shown');

  step('an experiment: a change tried on four past runs; its report says what improved and regressed, regressions first');
  const greeted = {};
  for (const name of ['Bo', 'Cyd', 'Dominique', 'Evangeline']) {
    const started = await call(ann, 'POST', '/v1/runs', { workflow: 'greet', input: { name }, wait_seconds: 10 });
    assert.equal(started.body.status, 'suspended', JSON.stringify(started.body));
    const decided = await call(lee, 'POST', `/v1/interrupts/${started.body.run_id}.${started.body.pending[0].id}/decision`, { decision: 'approve' });
    assert.equal(decided.status, 200, JSON.stringify(decided.body));
    greeted[name] = started.body.run_id;
  }
  // Dominique is greeted longer than version 2 does (a better `length`), Evangeline shorter
  // (worse); the others alike.
  const reworded = GREET_V2.replace("'Hi there, ' ~ input.name", "('Hi there, dear ' if input.name == 'Dominique' else ('Yo ' if input.name == 'Evangeline' else 'Hi there, ')) ~ input.name");
  let experiment;
  for (let i = 0; i < 100; i++) {
    const states = await Promise.all(Object.values(greeted).map((id) => call(ann, 'GET', `/v1/runs/${id}`)));
    if (states.every((r) => r.body.status === 'completed')) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  experiment = await call(ann, 'POST', '/v1/experiments', {
    experiment: 'friendlier greeting', runs: { workflow: 'greet', ids: Object.values(greeted) }, change: { source: reworded },
    evaluators: [{ name: 'length', check: 'output | length' }, { name: 'a string', schema: { type: 'string' } }],
  });
  assert.equal(experiment.status, 202, JSON.stringify(experiment.body));
  await operator.getByRole('link', { name: 'Experiments' }).click();
  await operator.locator(`[data-experiment="${experiment.body.id}"]`).getByRole('link', { name: 'friendlier greeting' }).click();
  // This experiment's header, ended (not whatever page was on screen before it).
  await operator.locator('.spread', { has: operator.locator('h1', { hasText: 'friendlier greeting' }) }).locator('.status.s-completed').waitFor();
  for (const [total, text] of [['improved', '1 improved'], ['regressed', '1 regressed'], ['same', '2 same'], ['not recomputed', '0 not recomputed']]) {
    assert.equal((await operator.locator(`[data-total="${total}"]`).textContent()).trim(), text);
  }
  const lengths = await operator.locator('[data-evaluator="length"] svg').getAttribute('aria-label');
  const now = [...lengths.matchAll(/(\d+) now/g)].reduce((sum, m) => sum + Number(m[1]), 0);
  const then = [...lengths.matchAll(/(\d+) then/g)].reduce((sum, m) => sum + Number(m[1]), 0);
  assert.deepEqual([then, now], [4, 4], `every run scored then and now: ${lengths}`);
  assert.match(lengths, /25: 0 then, 1 now/, `Dominique's greeting is 25 long now: ${lengths}`);
  const rowOrder = await operator.locator('table[aria-label="Runs recomputed"] tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.run));
  assert.deepEqual(rowOrder.slice(0, 2), [greeted.Evangeline, greeted.Dominique], 'the regression first, then the improvement');
  await operator.screenshot({ path: join(shots, 'experiment.png'), fullPage: true });
  const worse = operator.locator(`tr[data-run="${greeted.Evangeline}"] details`);
  await worse.locator('summary').click();
  await worse.locator('summary', { hasText: '"Yo Evangeline!"' }).waitFor();
  // The step that changed, with its own diff.
  await worse.locator('[data-step="hello"] .diff-line', { hasText: '"Yo Evangeline"' }).waitFor();
  const opened = await worse.textContent();
  assert.ok(!/\[object |null/.test(opened), `nothing is written as text that is not: ${opened}`);
  await worse.getByRole('button', { name: 'Compare step by step' }).click();
  await operator.waitForURL(new RegExp(`#/diff/${greeted.Evangeline}\\?with=`));
  await operator.getByText('Yo Evangeline!').first().waitFor();

  step('an experiment over a new input: its row names the input by its line, and shows what it was given');
  const fresh = await call(ann, 'POST', '/v1/experiments', {
    experiment: 'a new name', runs: { workflow: 'greet', inputs: [{ name: 'Dominique' }] }, change: { source: reworded },
  });
  assert.equal(fresh.status, 202, JSON.stringify(fresh.body));
  await operator.goto(`${base}/#/experiments/${fresh.body.id}`);
  const freshRow = operator.locator('table[aria-label="Runs recomputed"] tbody tr').first();
  await freshRow.locator('td').first().getByText('input line 1').waitFor();
  await freshRow.locator('details summary').click();
  await freshRow.locator('[data-fresh="1"]', { hasText: '"Dominique"' }).waitFor();
  assert.equal(await freshRow.getByRole('button', { name: 'Compare step by step' }).count(), 0, 'a new input is no run to compare');

  step('phones: no view is wider than the screen at 360 and 390 px');
  const waitingForPhone = await call(ann, 'POST', '/v1/runs', { workflow: 'greet', input: { name: 'Gus' }, wait_seconds: 10 });
  // A run waiting for an event: its page has the message form.
  const eventForPhone = await call(ann, 'POST', '/v1/runs', { workflow: 'order-followup', input: { order_id: 'A-1042', customer: 'Ann' }, wait_seconds: 10 });
  assert.equal(eventForPhone.body.status, 'suspended', JSON.stringify(eventForPhone.body));
  const phoneViews = [['runs', '#/runs'], ['run', `#/runs/${research.body.run_id}`], ['run-waiting', `#/runs/${waitingForPhone.body.run_id}`],
    ['inbox', '#/inbox'], ['workflows', '#/workflows'], ['workflow', '#/workflows/greet'], ['workers', '#/workers'], ['diff', diffUrl.slice(diffUrl.indexOf('#'))],
    ['experiments', '#/experiments'], ['experiment', `#/experiments/${experiment.body.id}`],
    ['run-waiting-event', `#/runs/${eventForPhone.body.run_id}`]];
  for (const width of [360, 390]) {
    const phone = await person(admin, { viewport: { width, height: 800 }, isMobile: true, hasTouch: true });
    for (const [name, hash] of phoneViews) {
      await phone.goto(`${base}/${hash}`);
      await phone.locator('main h1').first().waitFor();
      if (name === 'run-waiting-event') await phone.getByLabel('Message to delivered (JSON)').waitFor();
      if (name === 'run') {
        // The step panel open over the page: the whole width, no wider.
        await phone.locator('.wf-row .name button').first().click();
        await phone.getByTestId('step-panel').waitFor();
        const [panelWidth, viewport] = await phone.getByTestId('step-panel').evaluate((p) => [p.getBoundingClientRect().width, document.documentElement.clientWidth]);
        assert.ok(panelWidth <= viewport, `the panel at ${width} px is ${panelWidth} px wide`);
        if (width === 390) await phone.screenshot({ path: join(shots, 'phone-step-panel.png') });
        await phone.keyboard.press('Escape');
      }
      await new Promise((r) => setTimeout(r, 300));
      const [scroll, client] = await phone.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
      assert.ok(scroll <= client, `${name} at ${width} px is ${scroll} px wide`);
      const bar = await phone.locator('header.bar').evaluate((b) => b.scrollWidth <= b.clientWidth);
      assert.ok(bar, `${name} at ${width} px: the header fits (sign-out and theme on screen)`);
      assert.deepEqual(await lookProblems(phone), [], `${name} at ${width} px: the look`);
      if (width === 390) await phone.screenshot({ path: join(shots, `phone-${name}.png`), fullPage: true });
    }
    await phone.context().close();
  }

  step('the look: one type scale, every run status in a colour of its own, status and muted text readable (4.5:1) in light and dark');
  for (const colorScheme of ['light', 'dark']) {
    const desk = await person(admin, { viewport: { width: 1366, height: 860 }, colorScheme });
    for (const [name, hash] of phoneViews) {
      await desk.goto(`${base}/${hash}`);
      await desk.locator('main h1').first().waitFor();
      await new Promise((r) => setTimeout(r, 300));
      assert.deepEqual(await lookProblems(desk), [], `${name} (${colorScheme}): the look`);
    }
    await desk.context().close();
  }

  // The views as docs/dashboard shows them (DASHBOARD_DOCS=docs/dashboard): at 1366 and
  // 390 px, light and dark.
  if (process.env.DASHBOARD_DOCS) {
    step(`screenshots of every view into ${process.env.DASHBOARD_DOCS}`);
    const out = resolve(process.env.DASHBOARD_DOCS);
    mkdirSync(out, { recursive: true });
    const waitingForDocs = await call(ann, 'POST', '/v1/runs', { workflow: 'greet', input: { name: 'Hal' }, wait_seconds: 10 });
    const shown = key('dana', 'admin', 'approver');
    const docViews = [['runs', '#/runs'], ['run', `#/runs/${research.body.run_id}`], ['run-waiting', `#/runs/${waitingForDocs.body.run_id}`],
      ['inbox', '#/inbox'], ['workflows', '#/workflows'], ['workers', '#/workers'], ['diff', diffUrl.slice(diffUrl.indexOf('#'))],
      ['experiment', `#/experiments/${experiment.body.id}`]];
    for (const [width, height] of [[1366, 860], [390, 844]]) {
      for (const colorScheme of ['light', 'dark']) {
        const page = await person(shown, { viewport: { width, height }, colorScheme, isMobile: width < 500 });
        for (const [name, hash] of docViews) {
          await page.goto(`${base}/${hash}`);
          await page.locator('main h1').first().waitFor();
          await new Promise((r) => setTimeout(r, 400));
          await page.screenshot({ path: join(out, `${name}-${width}-${colorScheme}.png`) });
        }
        // The run's step panel, opened from its timeline.
        await page.goto(`${base}/#/runs/${research.body.run_id}`);
        await page.locator('.wf-row .name button').first().click();
        await page.getByTestId('step-panel').waitFor();
        await new Promise((r) => setTimeout(r, 300));
        await page.screenshot({ path: join(out, `step-panel-${width}-${colorScheme}.png`) });
        await page.context().close();
      }
    }
  }

  step('the ticket-triage example is finished in the browser: its reply approved by a lead (a role of its own)');
  const ticket = await call(ann, 'POST', '/v1/runs', { workflow: 'ticket-triage',
    input: { ticket: 'I was charged twice for order A-1042, please refund one of them.' }, wait_seconds: 10 });
  assert.equal(ticket.body.status, 'suspended', JSON.stringify(ticket.body));
  const notLead = await call(lee, 'POST', `/v1/interrupts/${ticket.body.run_id}.${ticket.body.pending[0].id}/decision`, { decision: 'approve' });
  assert.equal(notLead.status, 403, `an approver without role:lead: ${JSON.stringify(notLead.body)}`);
  const lead = await person(key('lena', 'approver', 'viewer', 'role:lead'));
  await lead.getByRole('link', { name: /Approvals/ }).click();
  const ticketCard = lead.locator(`[data-interrupt^="${ticket.body.run_id}."]`);
  await ticketCard.getByText('Send this reply?').waitFor();
  await ticketCard.getByRole('button', { name: 'Approve' }).click();
  await ticketCard.waitFor({ state: 'detached' });
  await lead.goto(`${base}/#/runs/${ticket.body.run_id}`);
  await runEnded(lead, ticket.body.run_id);
  const triaged = await call(ann, 'GET', `/v1/runs/${ticket.body.run_id}`);
  assert.equal(triaged.body.status, 'completed');
  assert.match(triaged.body.output.sent.body, /A-1042/);
  await lead.context().close();

  step('the order-followup example is finished in the browser: its delivery sent to the run\'s inbox from the run\'s page');
  const order = await call(ann, 'POST', '/v1/runs', { workflow: 'order-followup', input: { order_id: 'A-1042', customer: 'Ann' }, wait_seconds: 10 });
  assert.equal(order.body.status, 'suspended', JSON.stringify(order.body));
  await operator.goto(`${base}/#/runs/${order.body.run_id}`);
  const awaiting = operator.getByTestId('awaiting');
  await awaiting.getByText('Waiting for the event delivered at').waitFor();
  await awaiting.getByLabel('Message to delivered (JSON)').fill('{"signed_by": ');
  await awaiting.getByRole('button', { name: 'Send' }).click();
  await awaiting.getByText('not JSON').waitFor();
  await awaiting.getByLabel('Message to delivered (JSON)').fill('{"signed_by": "Ann"}');
  await awaiting.getByRole('button', { name: 'Send' }).click();
  await toastSays(operator, 'Sent to delivered.', order.body.run_id);
  let followed;
  for (let i = 0; i < 100; i++) {
    followed = await call(ann, 'GET', `/v1/runs/${order.body.run_id}`);
    if (followed.body.status === 'completed') break;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(followed.body.status, 'completed', JSON.stringify(followed.body));
  assert.equal(followed.body.output.signed_by, 'Ann', JSON.stringify(followed.body.output));
  await runEnded(operator, order.body.run_id);

  step('signing out ends the session');
  await operator.getByRole('button', { name: 'Sign out' }).click();
  await operator.getByLabel('API key').waitFor();
  await operator.goto(`${base}/#/runs`);
  await operator.getByLabel('API key').waitFor();
}

try {
  await main();
  if (failed) throw new Error('a script error on a page (see above)');
  console.log(`dashboard: passed; screenshots in ${shots}`);
} catch (error) {
  console.error(`dashboard: FAILED: ${error.stack || error}`);
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  if (serve) serve.kill('SIGTERM');
  if (model) model.close();
  if (idp) idp.close();
  rmSync(dir, { recursive: true, force: true });
}
