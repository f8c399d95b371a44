// Stepwright's dashboard: plain JavaScript, no build step, no dependency. It uses the HTTP
// API under /v1 and nothing else; every change it makes is a request a script could make.
// Signed in by the session cookie (HttpOnly: this script never sees a secret), it sends
// X-Stepwright-Csrf on every change, which the server requires of cookie-authenticated
// requests. Text from runs is only ever set as text, never as HTML.

const CSRF = { 'X-Stepwright-Csrf': '1' };
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const STATUSES = ['pending', 'running', 'suspended', 'completed', 'failed', 'cancelled'];
const PAGE_ROWS = 200;

let me = null;
let leaving = [];

// ---------------------------------------------------------------------------------------
// Small helpers

class ApiError extends Error {
  constructor(status, problem) {
    super((problem && problem.detail) || `HTTP ${status}`);
    this.status = status;
    this.code = problem && problem.code;
    this.problem = problem;
  }
}

async function api(method, path, body, token) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET') Object.assign(headers, CSRF);
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
  });
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

/** An element: h('button', {class: 'x', onclick}, 'text', child…). Text is text, never HTML. */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key in el && typeof value !== 'string') el[key] = value;
    else el.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const has = (role) => {
  if (!me) return false;
  const roles = me.roles || [];
  if (role === 'operator') return roles.includes('operator') || roles.includes('admin');
  return roles.includes(role);
};
const json = (value) => JSON.stringify(value, null, 2);
const when = (micros) => (micros ? new Date(micros / 1000).toLocaleString() : '—');
const ms = (value) => (value === undefined || value === null ? '—' : value < 1000 ? `${value.toFixed(1)} ms` : `${(value / 1000).toFixed(2)} s`);
const usd = (value) => (value ? `$${value.toFixed(5)}` : '$0');
const status = (name) => h('span', { class: `status s-${name}`, text: name.replace('_', ' ') });
const shortId = (id) => id.slice(0, 8) + '…' + id.slice(-4);
const runLink = (id, text) => h('a', { href: `#/runs/${id}`, class: 'mono', title: id }, text || shortId(id));

function toast(text) {
  const box = document.getElementById('toast');
  box.textContent = text;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (box.textContent = ''), 5000);
}

function problemText(error) {
  if (error instanceof ApiError) {
    if (error.status === 409 && error.code === 'already_resolved') return 'Someone else decided this already.';
    const where = error.problem && error.problem.problems && error.problem.problems.length
      ? `\n${error.problem.problems.join('\n')}` : '';
    return `${error.message}${where}`;
  }
  return String(error.message || error);
}

function errorBox(error) {
  return h('p', { class: 'error', role: 'alert', text: problemText(error) });
}

/** Replaces an element's children, leaving out the absent (`null`, `undefined`, `false`). */
function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

/** Replaces the page's content and moves focus to it (for keyboard and screen reader users). */
function show(...children) {
  const main = document.getElementById('main');
  fill(main, ...children);
  // Not on the first page: there a keyboard starts at the top, with the skip link.
  if (show.navigated) main.focus({ preventScroll: true });
}

/** Work that stops when the page changes: streams, timers. */
function onLeave(stop) {
  leaving.push(stop);
}

// ---------------------------------------------------------------------------------------
// JSON Schema forms: a field per property, checked before anything is sent.

function schemaForm(schema, initial) {
  schema = schema || {};
  const isObject = schema.type === 'object' && schema.properties;
  const fields = [];
  const root = h('div', { class: 'schema-form' });
  let counter = schemaForm.counter = (schemaForm.counter || 0) + 1;
  const add = (name, prop, value, required) => {
    const id = `f${counter}-${name || 'value'}`.replace(/[^a-zA-Z0-9_-]/g, '_');
    const errorId = `${id}-error`;
    const label = h('label', { for: id, text: `${prop.title || name || 'Value'}${required ? ' *' : ''}` });
    let input;
    let read;
    const kind = Array.isArray(prop.type) ? prop.type.find((t) => t !== 'null') : prop.type;
    if (prop.enum) {
      input = h('select', { id }, prop.enum.map((option) => h('option', { value: JSON.stringify(option), text: String(option) })));
      if (value !== undefined) input.value = JSON.stringify(value);
      read = () => JSON.parse(input.value);
    } else if (kind === 'boolean') {
      input = h('input', { id, type: 'checkbox', checked: value === true });
      read = () => input.checked;
    } else if (kind === 'integer' || kind === 'number') {
      input = h('input', { id, type: 'number', step: kind === 'integer' ? '1' : 'any', value: value ?? '' });
      read = () => (input.value.trim() === '' ? undefined : Number(input.value));
    } else if (kind === 'string') {
      const long = (prop.maxLength || 0) > 200 || prop.format === 'textarea';
      input = long ? h('textarea', { id }) : h('input', { id, type: 'text' });
      input.value = value ?? '';
      read = () => (input.value === '' && !required ? undefined : input.value);
    } else {
      input = h('textarea', { id, 'aria-describedby': `${id}-hint` });
      input.value = value === undefined ? '' : json(value);
      read = () => {
        if (input.value.trim() === '') return undefined;
        try { return JSON.parse(input.value); } catch (e) { throw new Error(`not JSON: ${e.message}`); }
      };
    }
    input.setAttribute('aria-describedby', [input.getAttribute('aria-describedby'), errorId].filter(Boolean).join(' '));
    if (required) input.setAttribute('aria-required', 'true');
    const message = h('div', { class: 'field-error', id: errorId });
    const hint = prop.description ? h('div', { class: 'muted', id: `${id}-hint`, text: prop.description }) : null;
    const wrap = h('div', { class: 'field' }, label, input, hint, message);
    root.append(wrap);
    fields.push({ name, prop, required, input, message, read });
  };
  if (isObject) {
    const required = new Set(schema.required || []);
    for (const [name, prop] of Object.entries(schema.properties)) {
      add(name, prop, initial && initial[name], required.has(name));
    }
  } else {
    add(null, schema, initial, true);
  }
  /** The value, or null after marking every field in error. */
  root.value = () => {
    let ok = true;
    const out = {};
    let single;
    for (const field of fields) {
      field.message.textContent = '';
      field.input.removeAttribute('aria-invalid');
      let value;
      try {
        value = field.read();
        const problem = checkValue(value, field.prop, field.required);
        if (problem) throw new Error(problem);
      } catch (e) {
        ok = false;
        field.message.textContent = e.message;
        field.input.setAttribute('aria-invalid', 'true');
        continue;
      }
      if (field.name === null) single = value;
      else if (value !== undefined) out[field.name] = value;
    }
    if (!ok) {
      const first = fields.find((f) => f.input.getAttribute('aria-invalid'));
      if (first) first.input.focus();
      return null;
    }
    return isObject ? out : single;
  };
  return root;
}

/** What is wrong with a value against a (flat) schema, or null. */
function checkValue(value, schema, required) {
  if (value === undefined) return required ? 'required' : null;
  const types = Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [];
  const typeOf = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : Number.isInteger(v) ? 'integer' : typeof v);
  if (types.length) {
    const actual = typeOf(value);
    const fits = types.some((t) => t === actual || (t === 'number' && actual === 'integer'));
    if (!fits || (typeof value === 'number' && Number.isNaN(value))) return `must be ${types.join(' or ')}`;
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) return `must be one of ${schema.enum.join(', ')}`;
  if (typeof value === 'string') {
    if (schema.minLength !== undefined && value.length < schema.minLength) return `at least ${schema.minLength} characters`;
    if (schema.maxLength !== undefined && value.length > schema.maxLength) return `at most ${schema.maxLength} characters`;
    if (schema.pattern && !new RegExp(schema.pattern, 'u').test(value)) return `must match ${schema.pattern}`;
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) return `at least ${schema.minimum}`;
    if (schema.maximum !== undefined && value > schema.maximum) return `at most ${schema.maximum}`;
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) return `at least ${schema.minItems} items`;
    if (schema.maxItems !== undefined && value.length > schema.maxItems) return `at most ${schema.maxItems} items`;
  }
  if (schema.type === 'object' && schema.required && value && typeof value === 'object') {
    const missing = schema.required.filter((k) => !(k in value));
    if (missing.length) return `missing ${missing.join(', ')}`;
  }
  return null;
}

// ---------------------------------------------------------------------------------------
// Structural diff of two JSON values: `pointer: before → after` lines.

function jsonDiff(before, after, at = '', out = []) {
  const kind = (v) => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);
  if (kind(before) === 'object' && kind(after) === 'object') {
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
    for (const key of keys) {
      const here = `${at}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
      if (!(key in before) || !(key in after)) out.push([here, before[key], after[key]]);
      else jsonDiff(before[key], after[key], here, out);
    }
  } else if (kind(before) === 'array' && kind(after) === 'array') {
    for (let i = 0; i < Math.max(before.length, after.length); i++) {
      if (i >= before.length || i >= after.length) out.push([`${at}/${i}`, before[i], after[i]]);
      else jsonDiff(before[i], after[i], `${at}/${i}`, out);
    }
  } else if (JSON.stringify(before) !== JSON.stringify(after)) {
    out.push([at || '/', before, after]);
  }
  return out;
}

function diffLines(pairs) {
  if (!pairs.length) return h('p', { class: 'muted', text: 'No differences.' });
  const shown = (v) => (v === undefined ? '(absent)' : JSON.stringify(v));
  return h('div', {}, pairs.map(([at, a, b]) => h('div', {},
    h('div', { class: 'mono muted', text: at }),
    h('div', { class: 'diff-line before', text: `− ${shown(a)}` }),
    h('div', { class: 'diff-line after', text: `+ ${shown(b)}` }))));
}

// ---------------------------------------------------------------------------------------
// Sign-in

function signInView(error) {
  document.getElementById('nav').hidden = true;
  document.getElementById('who').replaceChildren();
  const key = h('input', { id: 'api-key', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'key-hint' });
  const problem = h('div', { role: 'alert', class: 'error' });
  if (error) problem.textContent = error;
  const form = h('form', {
    class: 'card signin',
    'aria-labelledby': 'signin-title',
    onsubmit: async (event) => {
      event.preventDefault();
      problem.textContent = '';
      try {
        me = await api('POST', '/v1/session', { api_key: key.value.trim() });
        key.value = '';
        location.hash = '#/runs';
        route();
      } catch (e) {
        problem.textContent = problemText(e);
        key.focus();
      }
    },
  },
  h('h1', { id: 'signin-title', text: 'Sign in' }),
  h('label', { for: 'api-key', text: 'API key' }),
  key,
  h('p', { id: 'key-hint', class: 'muted', text: 'A key from `stepwright keys create`. It is exchanged for a session; the page never keeps it.' }),
  problem,
  h('button', { class: 'primary', type: 'submit', text: 'Sign in' }));
  show(form);
  key.focus();
  // A provider, when the server has one: a plain link, so the browser itself goes there.
  api('GET', '/v1/auth').then((methods) => {
    if (methods.oidc) form.append(h('p', {}, 'or ', h('a', { class: 'button', href: '/v1/auth/oidc/start', text: 'Sign in with single sign-on' })));
  }).catch(() => {});
}

function showWho() {
  document.getElementById('nav').hidden = false;
  const out = h('button', {
    type: 'button',
    class: 'ghost',
    text: 'Sign out',
    onclick: async () => {
      await api('DELETE', '/v1/session').catch(() => {});
      me = null;
      signInView();
    },
  });
  document.getElementById('who').replaceChildren(
    h('span', { text: `${me.user} · ${me.namespace} · ${me.roles.join(', ')}`, 'data-testid': 'who' }), out);
}

async function refreshInboxCount() {
  if (!me) return;
  try {
    const items = await api('GET', '/v1/interrupts');
    document.getElementById('inbox-count').textContent = items.length ? String(items.length) : '';
  } catch { /* the count is a hint */ }
}

// ---------------------------------------------------------------------------------------
// Runs

async function runsView(params) {
  const filters = {
    status: params.get('status') || '',
    workflow: params.get('workflow') || '',
    input_contains: params.get('q') || '',
    after: params.get('after') || '',
    before: params.get('before') || '',
  };
  const cursors = [];
  let cursor = null;
  let page = null;
  const selected = new Set();
  const statusSelect = h('select', { id: 'f-status' }, h('option', { value: '', text: 'any' }), STATUSES.map((s) => h('option', { value: s, text: s })));
  statusSelect.value = filters.status;
  const workflowSelect = h('select', { id: 'f-workflow' }, h('option', { value: '', text: 'any' }));
  const text = h('input', { id: 'f-text', type: 'search', value: filters.input_contains, placeholder: 'text in the input' });
  const after = h('input', { id: 'f-after', type: 'datetime-local', value: filters.after });
  const before = h('input', { id: 'f-before', type: 'datetime-local', value: filters.before });
  api('GET', '/v1/workflows').then((list) => {
    for (const w of list) workflowSelect.append(h('option', { value: w.name, text: w.name }));
    workflowSelect.value = filters.workflow;
  }).catch(() => {});
  const apply = (event) => {
    event.preventDefault();
    const query = new URLSearchParams();
    if (statusSelect.value) query.set('status', statusSelect.value);
    if (workflowSelect.value) query.set('workflow', workflowSelect.value);
    if (text.value.trim()) query.set('q', text.value.trim());
    if (after.value) query.set('after', after.value);
    if (before.value) query.set('before', before.value);
    location.hash = `#/runs?${query}`;
  };
  const form = h('form', { class: 'filters', onsubmit: apply, 'aria-label': 'Filter runs' },
    h('div', {}, h('label', { for: 'f-status', text: 'Status' }), statusSelect),
    h('div', {}, h('label', { for: 'f-workflow', text: 'Workflow' }), workflowSelect),
    h('div', {}, h('label', { for: 'f-after', text: 'Created after' }), after),
    h('div', {}, h('label', { for: 'f-before', text: 'Created before' }), before),
    h('div', {}, h('label', { for: 'f-text', text: 'Input contains' }), text),
    h('button', { type: 'submit', text: 'Apply' }));
  const table = h('div', { 'aria-live': 'polite' });
  const bulk = h('div', { class: 'row' });
  const pager = h('div', { class: 'pager' });
  show(h('div', { class: 'spread' }, h('h1', { text: 'Runs' }), bulk), form, table, pager);

  const query = () => {
    const q = new URLSearchParams({ limit: '50' });
    if (filters.status) q.set('status', filters.status);
    if (filters.workflow) q.set('workflow', filters.workflow);
    if (filters.input_contains) q.set('input_contains', filters.input_contains);
    if (filters.after) q.set('created_after', String(new Date(filters.after).getTime() * 1000));
    if (filters.before) q.set('created_before', String(new Date(filters.before).getTime() * 1000));
    if (cursor) q.set('cursor', cursor);
    return q;
  };
  const drawBulk = () => {
    if (!has('operator')) return fill(bulk);
    const count = selected.size;
    fill(bulk, h('button', {
      type: 'button',
      class: 'danger',
      disabled: count === 0,
      text: `Cancel selected (${count})`,
      onclick: () => bulkCancel([...selected], load),
    }));
  };
  const draw = () => {
    if (!page.runs.length) {
      fill(table, h('p', { class: 'muted', text: 'No runs match.' }));
    } else {
      const rows = page.runs.map((run) => {
        const live = !TERMINAL.has(run.status);
        const box = h('input', {
          type: 'checkbox',
          'aria-label': `Select run ${run.run_id}`,
          checked: selected.has(run.run_id),
          disabled: !live || !has('operator'),
          onchange: (e) => {
            if (e.target.checked) selected.add(run.run_id); else selected.delete(run.run_id);
            e.target.closest('tr').classList.toggle('selected', e.target.checked);
            drawBulk();
          },
        });
        return h('tr', { class: selected.has(run.run_id) ? 'selected' : '' },
          h('td', {}, box),
          h('td', {}, runLink(run.run_id)),
          h('td', { text: run.workflow }),
          h('td', {}, status(run.status)),
          h('td', { text: when(run.created_at) }),
          h('td', { class: 'muted', text: run.owner || '' }));
      });
      fill(table, h('table', { 'aria-label': 'Runs' },
        h('thead', {}, h('tr', {}, h('th', { text: '' }), ['Run', 'Workflow', 'Status', 'Created', 'Worker'].map((t) => h('th', { scope: 'col', text: t })))),
        h('tbody', {}, rows)));
    }
    fill(pager,
      h('button', { type: 'button', text: '← Newer', disabled: !cursors.length, onclick: () => { cursor = cursors.pop(); load(); } }),
      h('button', { type: 'button', text: 'Older →', disabled: !page.next_cursor, onclick: () => { cursors.push(cursor); cursor = page.next_cursor; load(); } }));
    drawBulk();
  };
  const load = async () => {
    try {
      page = await api('GET', `/v1/runs?${query()}`);
      for (const id of [...selected]) {
        const run = page.runs.find((r) => r.run_id === id);
        if (run && TERMINAL.has(run.status)) selected.delete(id);
      }
      draw();
    } catch (e) {
      fill(table, errorBox(e));
    }
  };
  await load();
  // Live: the page is read again every two seconds while it is visible.
  const timer = setInterval(() => { if (!document.hidden) load(); }, 2000);
  onLeave(() => clearInterval(timer));
}

async function bulkCancel(ids, done) {
  const reason = h('input', { id: 'cancel-reason', type: 'text', value: 'cancelled from the dashboard' });
  const dialog = h('dialog', { 'aria-labelledby': 'bulk-title' },
    h('form', { method: 'dialog' },
      h('h2', { id: 'bulk-title', text: `Cancel ${ids.length} run${ids.length === 1 ? '' : 's'}?` }),
      h('p', { text: 'Each stops where it is, in whichever process executes it. This cannot be undone.' }),
      h('label', { for: 'cancel-reason', text: 'Reason' }), reason,
      h('div', { class: 'row' },
        h('button', { value: 'no', text: 'Keep them' }),
        h('button', { value: 'yes', class: 'primary', text: `Cancel ${ids.length}` }))));
  document.body.append(dialog);
  dialog.showModal();
  dialog.addEventListener('close', async () => {
    dialog.remove();
    if (dialog.returnValue !== 'yes') return;
    const results = await Promise.allSettled(ids.map((id) => api('POST', `/v1/runs/${id}/cancel`, { reason: reason.value })));
    const failed = results.filter((r) => r.status === 'rejected').length;
    toast(`Cancelled ${results.length - failed} of ${ids.length}${failed ? `; ${failed} refused` : ''}.`);
    ids.length = 0;
    done();
  });
}

// ---------------------------------------------------------------------------------------
// A run

/** Step paths without their indices (`answers[2]/answer` → `answers/answer`): graph nodes. */
const nodeKey = (path) => path.replace(/\[\d+\]/g, '');
/** Sub-paths a step records for its effects (`plan/call.0`): not nodes of the graph. */
const isEffect = (path) => /\/(call|tool)\.\d+$|\/[a-z_]+\.\d+$/.test(path);

function rollupStatus(statuses) {
  const order = ['failed', 'running', 'retrying', 'waiting', 'suspended', 'pending', 'handoff', 'completed', 'cancelled', 'skipped'];
  for (const s of order) if (statuses.includes(s)) return s === 'waiting' ? 'suspended' : s === 'retrying' ? 'running' : s === 'handoff' ? 'completed' : s;
  return 'not-reached';
}

function graphView(describe, statusOf, onPick) {
  const node = (n, prefix) => {
    const key = prefix ? `${prefix}/${n.id}` : n.id;
    const st = statusOf(key);
    const box = (label, extra) => h('button', {
      type: 'button',
      class: `node st-${st}`,
      'data-node': key,
      title: `${key}: ${st}`,
      onclick: () => onPick(key),
    }, h('span', { text: n.id }), h('span', { class: 'kind', text: label }), extra || null, h('span', { class: 'sr-only', text: ` ${st}` }));
    switch (n.kind) {
      case 'sequence': return group(`sequence ${n.id}`, seq(n.steps, key), st);
      case 'fork':
      case 'map':
        if (n.paths) return group(`fork ${n.id} (${n.mode || 'all'})`, h('div', { class: 'par' }, n.paths.map((p) => seq(p, key))), st);
        return group(`map ${n.id} over ${n.items || 'items'}${n.concurrency ? ` · ${n.concurrency} at a time` : ''}`, seq(n.steps, key), st);
      case 'loop': return group(`loop ${n.id} · at most ${n.max_iterations}${n.until ? ` · until ${n.until}` : ''}`, seq(n.steps, key), st);
      case 'every': return group(`every ${n.id} · ${ms(n.interval_ms)}`, seq(n.steps, key), st);
      case 'provide': return group(`${n.id} with ${(n.layers || []).join(', ')}`, seq(n.steps, key), st);
      case 'branch': return group(`branch ${n.id}`, h('div', { class: 'par' },
        (n.arms || []).map((arm) => h('div', {}, h('div', { class: 'arm-label', text: `when ${arm.when}` }), seq(arm.steps, key))),
        n.otherwise ? h('div', {}, h('div', { class: 'arm-label', text: 'otherwise' }), seq(n.otherwise, key)) : null), st);
      case 'graph': return group(`graph ${n.id}`, h('div', {},
        h('div', { class: 'par' }, seq(n.nodes, key)),
        h('div', { class: 'arm-label' }, (n.edges || []).map((e) => h('div', { text: `${e.from} → ${e.to}${e.when ? ` when ${e.when}` : ''}` })))), st);
      case 'workflow':
      case 'spawn': return box(`${n.kind} ${n.workflow.name}@${n.workflow.version}`);
      case 'sleep': return box(`sleep ${ms(n.duration_ms)}`);
      default: return box(n.step_type ? n.step_type.split(/[\s:]/)[0] : n.kind, n.requires_approval ? h('span', { class: 'kind', text: '· approval' }) : null);
    }
  };
  const group = (label, body, st) => h('div', { class: `group st-${st}`, role: 'group', 'aria-label': label }, h('div', { class: 'head', text: label }), body);
  const seq = (nodes, prefix) => h('div', { class: 'seq' }, (nodes || []).map((n, i) => [i ? h('div', { class: 'arrow', 'aria-hidden': 'true', text: '↓' }) : null, node(n, prefix)]));
  return h('div', { class: 'graph', 'aria-label': 'Run graph' }, seq(describe.steps || [], ''));
}

/** Attempts per step path from the event stream, and when each step became ready. */
class Timeline {
  constructor(createdAt) {
    this.created = createdAt || null;
    this.paths = new Map();
    this.ends = [];
    this.events = new Map();
  }
  row(path) {
    let row = this.paths.get(path);
    if (!row) { row = { path, attempts: [] }; this.paths.set(path, row); }
    return row;
  }
  add(event) {
    const list = this.events.get(event.path) || [];
    list.push(event);
    if (list.length > 200) list.shift();
    this.events.set(event.path, list);
    if (!this.created || event.at < this.created) this.created = Math.min(this.created || event.at, event.at);
    const attempt = event.data && event.data.attempt;
    if (event.kind === 'step.started') {
      const row = this.row(event.path);
      row.attempts.push({ attempt, start: event.at, end: null, failed: false });
    } else if (event.kind === 'step.completed' || event.kind === 'step.failed') {
      const row = this.row(event.path);
      const open = row.attempts.find((a) => a.end === null && (attempt === undefined || a.attempt === attempt));
      if (open) { open.end = event.at; open.failed = event.kind === 'step.failed'; }
      this.ends.push(event.at);
    } else if (event.kind === 'interrupt.resolved') {
      this.ends.push(event.at);
    }
  }
  /** When the step became ready to run: the latest end of anything before it started. */
  readyAt(start) {
    let ready = this.created || start;
    for (const end of this.ends) if (end <= start && end > ready) ready = end;
    return Math.min(ready, start);
  }
}

function waterfallView(timeline, details, page) {
  const rows = [...timeline.paths.values()].filter((r) => r.attempts.length && !isEffect(r.path));
  if (!rows.length) return h('p', { class: 'muted', text: 'No step has started yet.' });
  const now = Date.now() * 1000;
  const start = Math.min(...rows.map((r) => timeline.readyAt(r.attempts[0].start)));
  const end = Math.max(...rows.flatMap((r) => r.attempts.map((a) => a.end || now)));
  const span = Math.max(end - start, 1);
  const pct = (t) => `${(((t - start) / span) * 100).toFixed(3)}%`;
  const width = (a, b) => `${Math.max(((b - a) / span) * 100, 0.15).toFixed(3)}%`;
  const shown = rows.slice(0, (page + 1) * PAGE_ROWS);
  const list = h('div', { class: 'waterfall', role: 'table', 'aria-label': 'Waterfall: wait and execution per step' },
    shown.map((row) => {
      const first = row.attempts[0];
      const ready = timeline.readyAt(first.start);
      const track = h('div', { class: 'track', role: 'cell' });
      const wait = h('div', { class: 'bar-wait', title: `waited ${ms((first.start - ready) / 1000)} before it started` });
      wait.style.left = pct(ready);
      wait.style.width = width(ready, first.start);
      track.append(wait);
      for (const a of row.attempts) {
        const bar = h('div', {
          class: a.failed ? 'bar-fail' : a.end ? 'bar-run' : 'bar-run live',
          title: `attempt ${a.attempt || 1}: ${a.end ? ms((a.end - a.start) / 1000) : 'running'}${a.failed ? ', failed' : ''}`,
        });
        bar.style.left = pct(a.start);
        bar.style.width = width(a.start, a.end || now);
        track.append(bar);
      }
      const last = row.attempts[row.attempts.length - 1];
      const total = (last.end || now) - first.start;
      return h('div', { class: 'wf-row', role: 'row' },
        h('div', { class: 'name', role: 'cell', title: row.path, text: `${row.path}${row.attempts.length > 1 ? ` ×${row.attempts.length}` : ''}` }),
        track,
        h('div', { class: 'ms', role: 'cell', text: ms(total / 1000) }));
    }));
  return h('div', {},
    h('div', { class: 'legend' }, h('span', {}, h('i', { class: 'l-wait' }), 'waiting to start'), h('span', {}, h('i', { class: 'l-run' }), 'executing'), h('span', {}, h('i', { class: 'l-fail' }), 'failed attempt')),
    list,
    rows.length > shown.length ? h('p', { class: 'muted', text: `${shown.length} of ${rows.length} steps shown.` }) : null);
}

async function runView(id) {
  let details;
  try {
    details = await api('GET', `/v1/runs/${id}`);
  } catch (e) {
    return show(h('h1', { text: 'Run' }), errorBox(e));
  }
  const definition = api('GET', `/v1/runs/${id}/definition`).catch(() => null);
  const timeline = new Timeline(details.created_at);
  const liveText = new Map();
  let stepsPage = 0;
  let wfPage = 0;
  let picked = null;
  const openSteps = new Set();
  let forks = [];
  let forksMore = false;
  api('GET', `/v1/runs?parent=${id}&limit=20`).then((page) => { forks = page.runs; forksMore = Boolean(page.next_cursor); drawHeader(); }).catch(() => {});

  const header = h('div');
  const actions = h('div', { class: 'row' });
  const pending = h('div');
  const graphBox = h('div', { class: 'card' }, h('p', { class: 'muted', text: 'Loading the graph…' }));
  const waterfallBox = h('div', { class: 'card' });
  const stepsBox = h('div', { class: 'card' });
  const liveBox = h('div', { 'aria-live': 'polite' });
  show(header, actions, pending, liveBox,
    h('h2', { text: 'Graph' }), graphBox,
    h('h2', { text: 'Timeline' }), waterfallBox,
    h('h2', { text: 'Steps' }), stepsBox);

  let describe = null;
  const statusOf = (key) => {
    const statuses = details.steps.filter((s) => nodeKey(s.path) === key).map((s) => s.status);
    // A step whose model is writing has not journaled anything yet.
    if (!TERMINAL.has(details.status) && [...liveText.keys()].some((path) => nodeKey(path) === key)) statuses.push('running');
    return rollupStatus(statuses);
  };
  const drawGraph = () => {
    if (describe) fill(graphBox, graphView(describe, statusOf, (key) => { picked = key; drawSteps(); stepsBox.scrollIntoView(); }));
  };
  definition.then((d) => { describe = d && d.graph; if (describe) drawGraph(); else fill(graphBox, h('p', { class: 'muted', text: 'The definition is not available.' })); });

  const drawHeader = () => {
    const u = details.usage;
    fill(header,
      h('div', { class: 'spread' }, h('h1', {}, `${details.workflow} `, h('span', { class: 'mono muted', text: details.run_id })), status(details.status)),
      h('div', { class: 'facts' },
        h('div', {}, h('span', { text: 'created' }), when(details.created_at)),
        h('div', {}, h('span', { text: 'worker' }), details.owner || '—'),
        h('div', {}, h('span', { text: 'steps' }), String(details.steps.length)),
        u ? h('div', {}, h('span', { text: 'tokens' }), `${u.input_tokens} in / ${u.output_tokens} out`) : null,
        u ? h('div', {}, h('span', { text: 'cost' }), usd(u.cost_usd)) : null,
        details.parent ? h('div', {}, h('span', { text: 'forked from' }), runLink(details.parent.run_id), ` before ${details.parent.at}`) : null,
        forks.length ? h('div', { 'data-testid': 'forks' }, h('span', { text: `forks (${forks.length}${forksMore ? '+' : ''})` }), forks.map((f, i) => [i ? ', ' : '', runLink(f.run_id)])) : null),
      details.error ? h('p', { class: 'error', role: 'alert', text: `${details.error.code}: ${details.error.message}` }) : null,
      details.output !== null && details.output !== undefined ? h('details', {}, h('summary', { text: 'Output' }), h('pre', { text: json(details.output) })) : null);
  };
  const drawActions = () => {
    if (!has('operator')) return fill(actions);
    const live = !TERMINAL.has(details.status);
    fill(actions,
      h('button', { type: 'button', class: 'danger', text: 'Cancel', disabled: !live, onclick: () => bulkCancel([id], reload) }),
      h('button', { type: 'button', text: 'Resume', disabled: !live, onclick: () => act(() => api('POST', `/v1/runs/${id}/resume`, { wait_seconds: 0 }), 'Resumed.') }),
      h('button', { type: 'button', text: 'Replay', onclick: () => replay(id) }),
      h('button', { type: 'button', text: 'Recompute…', onclick: () => recomputeDialog(details) }),
      h('button', { type: 'button', text: 'Fork…', onclick: () => forkDialog(details) }));
  };
  const act = async (call, done) => {
    try { await call(); toast(done); reload(); } catch (e) { toast(problemText(e)); }
  };
  const drawPending = () => {
    fill(pending, ...details.pending.map((p) => h('div', { class: 'card' },
      h('div', { class: 'spread' }, h('strong', { text: `Waiting: ${p.kind} at ${p.step}` }), status('suspended')),
      h('p', { text: p.message }),
      has('approver') ? h('a', { href: '#/inbox', text: 'Decide in the approvals inbox' }) : h('p', { class: 'muted', text: 'An approver decides this.' }))),
    // A `wait` step: answered by a message to the run's inbox of that name, from a program.
    ...(details.awaiting || []).map((a) => h('div', { class: 'card', 'data-testid': 'awaiting' },
      h('div', { class: 'spread' }, h('strong', { text: `Waiting for the event ${a.event} at ${a.step}` }), status('suspended')),
      h('p', { text: `Until ${new Date(a.until / 1000).toLocaleString()}. A message sent to the run's inbox "${a.event}" answers it: stepwright send ${details.run_id} --inbox ${a.event} --message JSON` }))),
    // A pending run: why no worker has started it.
    ...(details.queued ? [h('div', { class: 'card', 'data-testid': 'queued' },
      h('div', { class: 'spread' }, h('strong', { text: 'Not started yet' }), status('pending')),
      h('p', { text: `Queued: ${details.queued.reason}.` }))] : []));
  };
  const drawSteps = () => {
    const rows = picked ? details.steps.filter((s) => nodeKey(s.path) === picked || nodeKey(s.path).startsWith(`${picked}/`)) : details.steps;
    const shown = rows.slice(0, (stepsPage + 1) * PAGE_ROWS);
    fill(stepsBox,
      picked ? h('p', {}, `Steps of ${picked}. `, h('button', { type: 'button', class: 'ghost', text: 'Show all', onclick: () => { picked = null; drawSteps(); } })) : null,
      ...shown.map((s) => stepDetails(id, s, () => timeline.events.get(s.path) || [], () => liveText.get(s.path), openSteps)),
      rows.length > shown.length ? h('button', { type: 'button', text: `Show more (${rows.length - shown.length} left)`, onclick: () => { stepsPage++; drawSteps(); } }) : null);
  };
  const drawWaterfall = () => {
    fill(waterfallBox, waterfallView(timeline, details, wfPage));
    const total = [...timeline.paths.values()].filter((r) => r.attempts.length && !isEffect(r.path)).length;
    if (total > (wfPage + 1) * PAGE_ROWS) waterfallBox.append(h('button', { type: 'button', text: 'Show more', onclick: () => { wfPage++; drawWaterfall(); } }));
  };
  const drawLive = () => {
    const running = [...liveText.entries()].filter(([path]) => {
      const step = details.steps.find((s) => s.path === path || path.startsWith(`${s.path}/`));
      return !step || step.status === 'running' || !TERMINAL.has(details.status);
    });
    fill(liveBox, ...running.slice(-3).map(([path, text]) => h('div', { class: 'card' },
      h('div', { class: 'muted', text: `${path} is writing…` }), h('div', { class: 'live-text', 'data-testid': 'live-text', text }))));
  };
  const drawAll = () => { drawHeader(); drawActions(); drawPending(); drawGraph(); drawSteps(); drawWaterfall(); drawLive(); };
  let reloading = null;
  const reload = () => {
    if (reloading) return;
    reloading = setTimeout(async () => {
      reloading = null;
      try { details = await api('GET', `/v1/runs/${id}`); } catch { return; }
      if (TERMINAL.has(details.status)) liveText.clear();
      drawAll();
      // A large run's details are large: read them less often while it runs.
    }, Math.min(2000, 150 + details.steps.length / 5));
  };
  drawAll();

  // The run's events, live: the whole log first, then as they happen, with streamed text.
  const stream = new EventSource(`/v1/runs/${id}/events?tokens=true`);
  let scheduled = false;
  const redrawSoon = () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => { scheduled = false; drawWaterfall(); drawLive(); if (liveText.size) drawGraph(); });
  };
  const onEvent = (message) => {
    const event = JSON.parse(message.data);
    timeline.add(event);
    if (['step.completed', 'step.failed', 'interrupt.opened', 'interrupt.resolved', 'step.started'].includes(event.kind)) reload();
    redrawSoon();
  };
  for (const kind of ['step.started', 'step.completed', 'step.failed', 'step.skipped', 'step.decided', 'step.intent', 'step.artifact', 'step.checkpoint', 'step.handoff', 'step.cancelled', 'interrupt.opened', 'interrupt.resolved', 'model.call', 'tool.call', 'step.event']) {
    stream.addEventListener(kind, onEvent);
  }
  stream.onmessage = onEvent;
  stream.addEventListener('token', (message) => {
    const token = JSON.parse(message.data);
    liveText.set(token.path, (liveText.get(token.path) || '') + token.text);
    redrawSoon();
  });
  for (const end of ['run.completed', 'run.failed', 'run.cancelled']) {
    stream.addEventListener(end, (message) => { onEvent(message); stream.close(); reload(); });
  }
  onLeave(() => stream.close());
}

/** A step's row; its details are read when it is opened, and it stays open across redraws. */
function stepDetails(runId, step, eventsOf, liveOf, openSteps) {
  const box = h('details', { class: 'step', 'data-path': step.path });
  const body = h('div');
  box.append(h('summary', {},
    status(step.status),
    h('span', { class: 'path', text: step.path }),
    h('span', { class: 'muted', text: ms(step.duration_ms) }),
    step.attempts > 1 ? h('span', { class: 'muted', text: `${step.attempts} attempts` }) : null,
    step.usage ? h('span', { class: 'muted', text: `${step.usage.input_tokens + step.usage.output_tokens} tokens · ${usd(step.usage.cost_usd)}` }) : null), body);
  box.addEventListener('toggle', () => {
    if (!box.open) { openSteps.delete(step.path); fill(body); return; }
    openSteps.add(step.path);
    const events = eventsOf();
    const live = liveOf();
    const failed = events.filter((e) => e.kind === 'step.failed').map((e) => e.data && e.data.error).filter(Boolean);
    const artifacts = events.filter((e) => e.kind === 'step.artifact' && e.data);
    fill(body,

      live ? h('div', { class: 'live-text', text: live }) : null,
      step.output !== undefined ? h('div', {}, h('h3', { text: 'Output' }), h('pre', { text: json(step.output) })) : null,
      failed.length ? h('div', {}, h('h3', { text: 'Errors' }), failed.map((e) => h('pre', { class: 'error', text: json(e) }))) : null,
      step.usage ? h('p', { class: 'muted', text: `${step.usage.calls} model call(s): ${step.usage.input_tokens} input and ${step.usage.output_tokens} output tokens, ${usd(step.usage.cost_usd)}` }) : null,
      artifacts.length ? h('div', {}, h('h3', { text: 'Artifacts' }), artifacts.map((a) => {
        const out = h('div');
        return h('div', {}, h('button', {
          type: 'button',
          class: 'ghost',
          text: `${a.data.kind} ${a.data.hash.slice(0, 12)}…`,
          disabled: !a.data.stored,
          onclick: async () => {
            try { fill(out, h('pre', { text: json((await api('GET', `/v1/runs/${runId}/artifacts/${a.data.hash}`)).content) })); } catch (e) { fill(out, errorBox(e)); }
          },
        }), out);
      })) : null,
      events.length ? h('div', {}, h('h3', { text: 'Events' }), h('pre', { text: events.map((e) => `${new Date(e.at / 1000).toISOString()} ${e.kind} ${JSON.stringify(e.data)}`).join('\n') })) : null);
  });
  if (openSteps.has(step.path)) box.open = true;
  return box;
}

async function replay(id) {
  toast('Replaying…');
  try {
    const report = await api('POST', `/v1/runs/${id}/replay`);
    sessionStorage.setItem(`replay:${id}`, JSON.stringify(report));
    location.hash = `#/diff/${id}?replay=1`;
  } catch (e) { toast(problemText(e)); }
}

async function recomputeDialog(details) {
  const versions = await api('GET', `/v1/workflows/${encodeURIComponent(details.workflow)}`).then((w) => w.versions).catch(() => []);
  const bindings = await api('GET', `/v1/runs/${details.run_id}/definition`).then((d) => d.models).catch(() => []);
  // One choice per binding the definition has: itself, or another of its bindings.
  const rebinds = bindings.length < 2 ? [] : bindings.map((b, i) => ({
    name: b.name,
    select: h('select', { id: `rc-model-${i}` },
      h('option', { value: '', text: `${b.name} (${b.model})` }),
      bindings.filter((o) => o.name !== b.name).map((o) => h('option', { value: o.name, text: `answered by ${o.name} (${o.model})` }))),
  }));
  const version = h('select', { id: 'rc-version' }, h('option', { value: '', text: 'the version the run is pinned to' }), versions.map((v) => h('option', { value: String(v.version), text: `version ${v.version} (${v.hash.slice(0, 10)}…)` })));
  const from = h('select', { id: 'rc-from' }, h('option', { value: '', text: 'the start' }), details.steps.filter((s) => !isEffect(s.path)).map((s) => h('option', { value: s.path, text: s.path })));
  const problem = h('div', { role: 'alert', class: 'error' });
  const dialog = h('dialog', { 'aria-labelledby': 'rc-title' },
    h('form', { method: 'dialog' },
      h('h2', { id: 'rc-title', text: 'Recompute' }),
      h('p', { class: 'muted', text: 'Re-executes the run in a sandbox and keeps the result as a new run forked from it, to compare side by side. A model binding can be answered by another binding the definition has; a new model or endpoint is a new version.' }),
      h('label', { for: 'rc-version', text: 'Definition' }), version,
      rebinds.length ? h('fieldset', {}, h('legend', { text: 'Models' }), rebinds.map((r) => [h('label', { for: r.select.id, text: `Calls to ${r.name}` }), r.select])) : null,
      h('label', { for: 'rc-from', text: 'Re-execute from' }), from,
      problem,
      h('div', { class: 'row' }, h('button', { value: 'no', text: 'Close' }), h('button', { value: 'yes', class: 'primary', text: 'Recompute' }))));
  document.body.append(dialog);
  dialog.showModal();
  dialog.addEventListener('close', async () => {
    dialog.remove();
    if (dialog.returnValue !== 'yes') return;
    const body = { persist: true };
    if (version.value) body.version = Number(version.value);
    if (from.value) body.from = from.value;
    const models = Object.fromEntries(rebinds.filter((r) => r.select.value).map((r) => [r.name, r.select.value]));
    if (Object.keys(models).length) body.models = models;
    toast('Recomputing…');
    try {
      const report = await api('POST', `/v1/runs/${details.run_id}/recompute`, body);
      sessionStorage.setItem(`recompute:${details.run_id}:${report.forked}`, JSON.stringify(report));
      location.hash = `#/diff/${details.run_id}?with=${report.forked}`;
    } catch (e) { toast(problemText(e)); }
  });
}

async function forkDialog(details) {
  const steps = details.steps.filter((s) => !isEffect(s.path));
  const at = h('select', { id: 'fk-at' }, steps.map((s) => h('option', { value: s.path, text: s.path })));
  const input = h('textarea', { id: 'fk-input', placeholder: 'leave empty to keep the run\u2019s input' });
  const outputs = h('textarea', { id: 'fk-steps', placeholder: '{"step-path": new output, …} for steps completed before the fork point' });
  const problem = h('div', { role: 'alert', class: 'error' });
  const dialog = h('dialog', { 'aria-labelledby': 'fk-title' },
    h('form', { method: 'dialog' },
      h('h2', { id: 'fk-title', text: 'Fork' }),
      h('p', { class: 'muted', text: 'A new run with everything this one recorded before the step, optionally with a new input or corrected outputs.' }),
      h('label', { for: 'fk-at', text: 'Fork before' }), at,
      h('label', { for: 'fk-input', text: 'New input (JSON)' }), input,
      h('label', { for: 'fk-steps', text: 'Replaced outputs (JSON)' }), outputs,
      problem,
      h('div', { class: 'row' }, h('button', { value: 'no', text: 'Close' }), h('button', { value: 'yes', class: 'primary', id: 'fk-go', text: 'Fork' }))));
  document.body.append(dialog);
  dialog.querySelector('#fk-go').addEventListener('click', (event) => {
    try {
      if (input.value.trim()) JSON.parse(input.value);
      if (outputs.value.trim()) JSON.parse(outputs.value);
    } catch (e) {
      event.preventDefault();
      problem.textContent = `Not JSON: ${e.message}`;
    }
  });
  dialog.showModal();
  dialog.addEventListener('close', async () => {
    dialog.remove();
    if (dialog.returnValue !== 'yes') return;
    const body = { at: at.value };
    if (input.value.trim()) body.input = JSON.parse(input.value);
    if (outputs.value.trim()) body.steps = JSON.parse(outputs.value);
    try {
      const forked = await api('POST', `/v1/runs/${details.run_id}/fork`, body);
      location.hash = `#/runs/${forked.run_id}`;
    } catch (e) { toast(problemText(e)); }
  });
}

// ---------------------------------------------------------------------------------------
// The diff view: a run beside its recompute (a forked run) or its replay.

async function diffView(id, params) {
  if (params.get('replay')) {
    const report = JSON.parse(sessionStorage.getItem(`replay:${id}`) || 'null');
    if (!report) return show(h('h1', { text: 'Replay' }), h('p', { text: 'Replay the run from its page to compare.' }));
    return show(
      h('h1', {}, 'Replay of ', runLink(id)),
      h('p', {}, report.identical ? 'Every step came out identical.' : 'Some steps came out differently.'),
      h('table', { 'aria-label': 'Replay, step by step' },
        h('thead', {}, h('tr', {}, ['Step', 'Outcome', 'Recorded', 'Replayed'].map((t) => h('th', { scope: 'col', text: t })))),
        h('tbody', {}, report.steps.map((s) => h('tr', {},
          h('td', { class: 'mono', text: s.path }), h('td', {}, status(s.outcome)),
          h('td', { class: 'mono muted', text: (s.recorded || '').slice(0, 12) }), h('td', { class: 'mono muted', text: (s.replayed || '').slice(0, 12) }))))));
  }
  const other = params.get('with');
  let before;
  let after;
  try {
    [before, after] = await Promise.all([api('GET', `/v1/runs/${id}`), api('GET', `/v1/runs/${other}`)]);
  } catch (e) {
    return show(h('h1', { text: 'Compare' }), errorBox(e));
  }
  const report = JSON.parse(sessionStorage.getItem(`recompute:${id}:${other}`) || 'null');
  const change = new Map((report ? report.steps : []).map((s) => [s.path, s]));
  const byPath = (run) => new Map(run.steps.map((s) => [s.path, s]));
  const a = byPath(before);
  const b = byPath(after);
  const paths = [...new Set([...a.keys(), ...b.keys()])].filter((p) => !isEffect(p));
  const delta = (x, y, fmt) => {
    if (x === undefined && y === undefined) return h('span', { class: 'muted', text: '—' });
    const d = (y || 0) - (x || 0);
    if (!d) return h('span', { class: 'muted', text: '±0' });
    return h('span', { class: d > 0 ? 'delta-up' : 'delta-down', text: `${d > 0 ? '+' : '−'}${fmt(Math.abs(d))}` });
  };
  const tokens = (s) => (s && s.usage ? s.usage.input_tokens + s.usage.output_tokens : undefined);
  const cost = (s) => (s && s.usage ? s.usage.cost_usd : undefined);
  let changedCount = 0;
  const rows = paths.map((path) => {
    const x = a.get(path);
    const y = b.get(path);
    const pairs = jsonDiff(x ? x.output : undefined, y ? y.output : undefined);
    const verdict = !x ? 'added' : !y ? 'missing' : pairs.length ? 'changed' : 'identical';
    const reported = change.get(path);
    const served = reported && reported.change === 'served';
    if (verdict !== 'identical') changedCount++;
    return h('details', { class: 'step', 'data-path': path, 'data-verdict': verdict },
      h('summary', {},
        h('span', { class: `status s-${verdict === 'identical' ? 'completed' : verdict === 'changed' ? 'failed' : 'pending'}`, text: served ? 'served' : verdict }),
        h('span', { class: 'path', text: path }),
        h('span', {}, 'tokens ', delta(tokens(x), tokens(y), String)),
        h('span', {}, 'cost ', delta(cost(x), cost(y), usd)),
        h('span', {}, 'latency ', delta(x && x.duration_ms, y && y.duration_ms, ms))),
      reported && reported.change === 'schema_violation' ? h('p', { class: 'error', text: `schema violation: ${reported.message}` }) : null,
      diffLines(pairs));
  });
  const decisions = report && report.decisions.length
    ? h('div', {}, h('h2', { text: 'Decisions that changed' }), report.decisions.map((d) => h('div', { class: 'card' },
      h('div', { class: 'mono', text: d.path }), diffLines(jsonDiff(d.before, d.after)))))
    : h('p', { class: 'muted', text: report ? 'No decision changed.' : '' });
  const total = (run, f) => (run.usage ? f(run.usage) : 0);
  show(
    h('h1', {}, 'Compare ', runLink(id), ' with ', runLink(other)),
    h('div', { class: 'facts' },
      h('div', {}, h('span', { text: 'steps changed' }), h('strong', { 'data-testid': 'changed-count', text: String(changedCount) })),
      h('div', {}, h('span', { text: 'tokens' }), delta(total(before, (u) => u.input_tokens + u.output_tokens), total(after, (u) => u.input_tokens + u.output_tokens), String)),
      h('div', {}, h('span', { text: 'cost' }), delta(total(before, (u) => u.cost_usd), total(after, (u) => u.cost_usd), usd))),
    h('div', { class: 'grid2' },
      h('div', {}, h('h2', { text: 'Original output' }), h('pre', { text: json(before.output) })),
      h('div', {}, h('h2', { text: 'Recomputed output' }), h('pre', { text: json(after.output) }))),
    h('h2', { text: 'Output difference' }), diffLines(jsonDiff(before.output, after.output)),
    decisions,
    h('h2', { text: 'Steps' }), h('div', { class: 'card' }, rows));
}

// ---------------------------------------------------------------------------------------
// Approvals inbox, and the page an approval link opens

function decisionForm(item, send, onDone) {
  const problem = h('div', { role: 'alert', class: 'error' });
  const submit = async (body) => {
    problem.textContent = '';
    try {
      const taken = await send(body);
      onDone(taken);
    } catch (e) {
      problem.textContent = problemText(e);
    }
  };
  const buttons = h('div', { class: 'row' });
  const parts = [];
  if (item.kind === 'approval') {
    const reason = h('input', { id: `reason-${item.id}`, type: 'text' });
    const editor = schemaForm(item.schema || { title: 'Corrected payload' }, item.payload);
    const modify = h('details', {}, h('summary', { text: 'Modify the payload' }), editor,
      h('button', { type: 'button', text: 'Approve with these changes', onclick: () => { const payload = editor.value(); if (payload !== null) submit({ decision: 'modify', payload }); } }));
    buttons.append(
      h('button', { type: 'button', class: 'primary', text: 'Approve', onclick: () => submit({ decision: 'approve' }) }),
      h('button', { type: 'button', class: 'danger', text: 'Reject', onclick: () => submit({ decision: 'reject', reason: reason.value || undefined }) }));
    parts.push(h('label', { for: `reason-${item.id}`, text: 'Reason (for a rejection)' }), reason, buttons, modify);
  } else {
    const form = schemaForm(item.schema || { title: 'Answer' });
    buttons.append(h('button', { type: 'button', class: 'primary', text: 'Send', onclick: () => { const value = form.value(); if (value !== null) submit({ decision: 'respond', value }); } }));
    parts.push(form, buttons);
  }
  return h('div', {}, ...parts, problem);
}

function interruptCard(item, send, onDone) {
  return h('article', { class: 'card', 'aria-label': `${item.workflow}: ${item.message}`, 'data-interrupt': item.id },
    h('div', { class: 'spread' },
      h('strong', { text: item.message }),
      h('span', { class: 'muted' }, `${item.kind} · `, item.workflow, ' · ', runLink(item.run_id), ` · ${item.step}`)),
    item.deadline ? h('p', { class: 'muted', text: `Decide by ${when(item.deadline)}` }) : null,
    item.payload !== null && item.payload !== undefined ? h('pre', { text: json(item.payload) }) : null,
    decisionForm(item, send, onDone));
}

async function inboxView() {
  let items;
  try {
    items = await api('GET', '/v1/interrupts');
  } catch (e) {
    return show(h('h1', { text: 'Approvals' }), errorBox(e));
  }
  document.getElementById('inbox-count').textContent = items.length ? String(items.length) : '';
  if (!has('approver')) {
    return show(h('h1', { text: 'Approvals' }), h('p', { class: 'muted', text: 'This key has no approver role: it decides nothing.' }));
  }
  const list = h('div');
  const draw = () => {
    fill(list, ...(items.length ? items.map((item) => {
      const card = interruptCard(item, (body) => api('POST', `/v1/interrupts/${item.id}/decision`, body), (taken) => {
        toast(`Decided: run ${shortId(taken.run_id)} continues.`);
        items = items.filter((i) => i.id !== item.id);
        draw();
        refreshInboxCount();
      });
      const linkOut = h('div');
      card.append(h('button', {
        type: 'button',
        class: 'ghost',
        text: 'Make an approval link',
        onclick: async () => {
          try {
            const link = await api('POST', `/v1/interrupts/${item.id}/link`, {});
            fill(linkOut, h('p', {}, 'Decides once, as you, until ', when(link.expires_at), ': ', h('input', { type: 'text', readonly: true, value: link.url, 'aria-label': 'Approval link', class: 'mono' })));
          } catch (e) { fill(linkOut, errorBox(e)); }
        },
      }), linkOut);
      return card;
    }) : [h('p', { class: 'muted', text: 'Nothing waits for you.' })]));
  };
  draw();
  show(h('h1', { text: 'Approvals' }), list);
  const timer = setInterval(async () => {
    if (document.hidden || document.activeElement && document.activeElement.closest && document.activeElement.closest('article')) return;
    try { items = await api('GET', '/v1/interrupts'); draw(); } catch { /* next time */ }
  }, 5000);
  onLeave(() => clearInterval(timer));
}

async function linkView(secret) {
  document.getElementById('nav').hidden = true;
  let view;
  try {
    view = await api('GET', '/v1/link', undefined, secret);
  } catch (e) {
    return show(h('h1', { text: 'Approval link' }), errorBox(e));
  }
  show(
    h('h1', { text: 'Approval requested' }),
    h('p', { class: 'muted', text: `You decide as ${view.decide_as}. This link works once${view.expires_at ? `, until ${when(view.expires_at)}` : ''}.` }),
    interruptCard(view.interrupt, (body) => api('POST', '/v1/link/decision', body, secret), (taken) => {
      show(h('h1', { text: 'Thank you' }), h('p', { role: 'status', text: `Decided as ${taken.decided_by}. The run continues; this link is now spent.` }));
    }));
}

// ---------------------------------------------------------------------------------------
// Workflows

async function workflowsView() {
  let list;
  try { list = await api('GET', '/v1/workflows'); } catch (e) { return show(h('h1', { text: 'Workflows' }), errorBox(e)); }
  show(h('h1', { text: 'Workflows' }), list.length ? h('table', { 'aria-label': 'Workflows' },
    h('thead', {}, h('tr', {}, ['Workflow', 'Latest version', 'Versions'].map((t) => h('th', { scope: 'col', text: t })))),
    h('tbody', {}, list.map((w) => h('tr', {},
      h('td', {}, h('a', { href: `#/workflows/${encodeURIComponent(w.name)}`, text: w.name })),
      h('td', { text: String(w.latest_version) }), h('td', { text: String(w.versions) })))))
    : h('p', { class: 'muted', text: 'No workflow is registered: `POST /v1/workflows` with an admin key.' }));
}

async function workflowView(name) {
  let w;
  try { w = await api('GET', `/v1/workflows/${encodeURIComponent(name)}`); } catch (e) { return show(h('h1', { text: name }), errorBox(e)); }
  const start = h('div');
  if (has('operator')) {
    const form = schemaForm(w.input_schema || { title: 'Input (JSON)' });
    const problem = h('div', { role: 'alert', class: 'error' });
    start.append(h('form', {
      class: 'card',
      'aria-labelledby': 'start-title',
      onsubmit: async (event) => {
        event.preventDefault();
        problem.textContent = '';
        const input = form.value();
        if (input === null) return;
        try {
          const run = await api('POST', '/v1/runs', { workflow: w.name, input: input === undefined ? null : input });
          location.hash = `#/runs/${run.run_id}`;
        } catch (e) { problem.textContent = problemText(e); }
      },
    }, h('h2', { id: 'start-title', text: 'Start a run' }), form, problem, h('button', { type: 'submit', class: 'primary', text: 'Start' })));
  }
  show(
    h('h1', { text: w.name }),
    start,
    h('h2', { text: 'Graph (newest version)' }), h('div', { class: 'card' }, graphView(w.graph, () => 'not-reached', () => {})),
    h('h2', { text: 'Versions' }),
    h('table', { 'aria-label': 'Versions' },
      h('thead', {}, h('tr', {}, ['Version', 'Hash', 'Registered', 'By'].map((t) => h('th', { scope: 'col', text: t })))),
      h('tbody', {}, w.versions.map((v) => h('tr', {}, h('td', { text: String(v.version) }), h('td', { class: 'mono', text: v.hash.slice(0, 16) }), h('td', { text: when(v.registered_at) }), h('td', { text: v.registered_by || '' }))))),
    w.input_schema ? h('details', {}, h('summary', { text: 'Input schema' }), h('pre', { text: json(w.input_schema) })) : null);
}

// ---------------------------------------------------------------------------------------
// Routing

async function route() {
  for (const stop of leaving) stop();
  leaving = [];
  if (location.pathname === '/link') {
    const secret = location.hash.slice(1);
    return secret ? linkView(secret) : show(h('h1', { text: 'Approval link' }), h('p', { class: 'error', text: 'This link is incomplete.' }));
  }
  if (!me) {
    try { me = await api('GET', '/v1/session'); } catch (e) { return signInView(e.status === 401 ? '' : problemText(e)); }
  }
  showWho();
  const [path, query] = (location.hash.slice(1) || '/runs').split('?');
  const params = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  for (const link of document.querySelectorAll('[data-nav]')) {
    if (link.dataset.nav === parts[0]) link.setAttribute('aria-current', 'page'); else link.removeAttribute('aria-current');
  }
  refreshInboxCount();
  try {
    if (parts[0] === 'runs' && parts[1]) return await runView(parts[1]);
    if (parts[0] === 'inbox') return await inboxView();
    if (parts[0] === 'workflows' && parts[1]) return await workflowView(parts[1]);
    if (parts[0] === 'workflows') return await workflowsView();
    if (parts[0] === 'diff' && parts[1]) return await diffView(parts[1], params);
    return await runsView(params);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) { me = null; return signInView('Your session ended: sign in again.'); }
    show(errorBox(e));
  }
}

function setUpTheme() {
  const saved = localStorage.getItem('theme');
  if (saved) document.documentElement.dataset.theme = saved;
  document.getElementById('theme').addEventListener('click', () => {
    const dark = document.documentElement.dataset.theme
      ? document.documentElement.dataset.theme === 'dark'
      : matchMedia('(prefers-color-scheme: dark)').matches;
    document.documentElement.dataset.theme = dark ? 'light' : 'dark';
    localStorage.setItem('theme', document.documentElement.dataset.theme);
  });
}

setUpTheme();
// The skip link moves focus without touching the address: `#main` would be a route here.
document.querySelector('.skip').addEventListener('click', (event) => {
  event.preventDefault();
  document.getElementById('main').focus();
});
window.addEventListener('hashchange', () => { show.navigated = true; route(); });
route();
