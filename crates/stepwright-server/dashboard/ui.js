// The page's small parts: calling the API, making elements (text only, never HTML), the
// signed-in session, messages, and what stops when the page changes.

const CSRF = { 'X-Stepwright-Csrf': '1' };

/** How many rows a list shows before "Show more". */
export const PAGE_ROWS = 200;

/** Who is signed in (`null`: nobody), and the work to stop when the page changes. */
// `generation` counts navigations (see `api`).
export const session = { me: null, leaving: [], generation: 0 };

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && problem.detail) || `HTTP ${status}`);
    this.status = status;
    this.code = problem && problem.code;
    this.problem = problem;
  }
}

/**
 * A request to the API. A read whose answer comes after the person moved to another view
 * never settles: the view that asked is gone, and must not draw over the one shown now
 * (fast navigation would otherwise leave a stale view on screen).
 */
export async function api(method, path, body, token) {
  const asked = session.generation;
  const stale = () => method === 'GET' && asked !== session.generation;
  try {
    const answer = await request(method, path, body, token);
    return stale() ? new Promise(() => {}) : answer;
  } catch (e) {
    if (stale()) return new Promise(() => {});
    throw e;
  }
}

async function request(method, path, body, token) {
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
export function h(tag, attrs, ...children) {
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

export const has = (role) => {
  if (!session.me) return false;
  const roles = session.me.roles || [];
  if (role === 'operator') return roles.includes('operator') || roles.includes('admin');
  return roles.includes(role);
};
export const json = (value) => JSON.stringify(value, null, 2);
/** How long ago (or ahead) a time is, for people: `3 min ago`, `in 6 h`. */
export function ago(micros) {
  const seconds = Math.round((Date.now() * 1000 - micros) / 1e6);
  const size = Math.abs(seconds);
  const text = size < 60 ? `${size} s` : size < 3600 ? `${Math.round(size / 60)} min` : size < 86400 ? `${Math.round(size / 3600)} h` : `${Math.round(size / 86400)} d`;
  return seconds >= 0 ? `${text} ago` : `in ${text}`;
}
const ZONE = (() => {
  try { return new Intl.DateTimeFormat(undefined, { timeZoneName: 'short' }).formatToParts(new Date()).find((p) => p.type === 'timeZoneName').value; } catch { return ''; }
})();
/** A time as people read it: relative, with the absolute time and its zone on hover. */
export const when = (micros) => (micros ? h('time', { datetime: new Date(micros / 1000).toISOString(), title: `${new Date(micros / 1000).toLocaleString()} ${ZONE}`, text: ago(micros) }) : '—');
/** An absolute time with its zone. */
export const at = (micros) => (micros ? `${new Date(micros / 1000).toLocaleString()} ${ZONE}` : '—');
export const ms = (value) => {
  if (value === undefined || value === null) return '—';
  if (value < 1000) return `${value.toFixed(1)} ms`;
  if (value < 60_000) return `${(value / 1000).toFixed(2)} s`;
  const s = Math.round(value / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
};
/**
 * What a run or step waits for, as the API says it, with each RFC 3339 time in it written as
 * people read it (local time and zone; the exact time on hover).
 */
export function waitsFor(text, tag = 'span') {
  const plain = text.replaceAll('`', '');
  const local = plain.replace(/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z/g, (iso) => {
    const millis = Date.parse(iso);
    return Number.isNaN(millis) ? iso : at(millis * 1000);
  });
  return h(tag, { class: 'waits', title: plain, text: `waits for ${local}` });
}
export const usd = (value) => (value ? `$${value.toFixed(5)}` : '$0');
export const status = (name) => h('span', { class: `status s-${name}`, text: name.replace('_', ' ') });
// A UUIDv7 begins with its time (runs made together look alike): its random end tells them apart.
export const shortId = (id) => `…${id.slice(-8)}`;
export const runLink = (id, text) => h('a', { href: `#/runs/${id}`, class: 'mono', title: id }, text || shortId(id));

export function toast(text) {
  const box = document.getElementById('toast');
  box.textContent = text;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (box.textContent = ''), 5000);
}

export function problemText(error) {
  if (error instanceof ApiError) {
    if (error.status === 409 && error.code === 'already_resolved') return 'Someone else decided this already.';
    const where = error.problem && error.problem.problems && error.problem.problems.length
      ? `\n${error.problem.problems.join('\n')}` : '';
    return `${error.message}${where}`;
  }
  return String(error.message || error);
}

export function errorBox(error) {
  return h('p', { class: 'error', role: 'alert', text: problemText(error) });
}

/** Replaces an element's children, session.leaving out the absent (`null`, `undefined`, `false`). */
export function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return el;
}

/** Replaces the page's content and moves focus to it (for keyboard and screen reader users). */
export function show(...children) {
  const main = document.getElementById('main');
  main.removeAttribute('aria-busy');
  fill(main, ...children);
  // Not on the first page: there a keyboard starts at the top, with the skip link.
  if (show.navigated) main.focus({ preventScroll: true });
}

/** Work that stops when the page changes: streams, timers. */
export function onLeave(stop) {
  session.leaving.push(stop);
}

/** Who started a run: a person, a schedule's tick, a trigger's events. */
export function startedBy(by) {
  if (!by) return '—';
  if (by.kind === 'schedule') return `schedule ${by.id.replace(/^schedule:/, '')}${by.tick ? ` (tick ${by.tick})` : ''}`;
  if (by.kind === 'trigger') return `trigger ${by.id.replace(/^trigger:/, '')}${by.events?.length ? ` (event ${by.events.join(', ')})` : ''}`;
  return by.id;
}

/** A run's tags, each a link to the runs that carry it (nothing when it has none). */
export function tagList(tags) {
  if (!tags || !tags.length) return null;
  return h('span', { class: 'tags' }, tags.map((tag) => h('a', { class: 'tag', href: `#/runs?tag=${encodeURIComponent(tag)}`, text: tag })));
}

/**
 * A value under a summary, as JSON: open at once when it is small; a large one (a 10,000-item
 * map's output) is laid out only when someone opens it.
 */
export function valueBox(title, value, attrs = {}) {
  const text = json(value);
  const small = text.length <= 4000;
  const box = h('details', { class: 'value', ...attrs, open: small && attrs.open }, h('summary', { text: small ? title : `${title} (${Math.round(text.length / 1024)} KB)` }));
  const pre = () => { if (box.childElementCount === 1) box.append(h('pre', { text })); };
  if (box.open) pre(); else box.addEventListener('toggle', pre, { once: true });
  return box;
}
