// The page's small parts: calling the API, making elements (text only, never HTML), the
// signed-in session, messages, and what stops when the page changes.

const CSRF = { 'X-Stepwright-Csrf': '1' };

/** How many rows a list shows before "Show more". */
export const PAGE_ROWS = 200;

/** Who is signed in (`null`: nobody), and the work to stop when the page changes. */
export const session = { me: null, leaving: [] };

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && problem.detail) || `HTTP ${status}`);
    this.status = status;
    this.code = problem && problem.code;
    this.problem = problem;
  }
}

export async function api(method, path, body, token) {
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
export const when = (micros) => (micros ? new Date(micros / 1000).toLocaleString() : '—');
export const ms = (value) => (value === undefined || value === null ? '—' : value < 1000 ? `${value.toFixed(1)} ms` : `${(value / 1000).toFixed(2)} s`);
export const usd = (value) => (value ? `$${value.toFixed(5)}` : '$0');
export const status = (name) => h('span', { class: `status s-${name}`, text: name.replace('_', ' ') });
export const shortId = (id) => id.slice(0, 8) + '…' + id.slice(-4);
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
  fill(main, ...children);
  // Not on the first page: there a keyboard starts at the top, with the skip link.
  if (show.navigated) main.focus({ preventScroll: true });
}

/** Work that stops when the page changes: streams, timers. */
export function onLeave(stop) {
  session.leaving.push(stop);
}
