// A run's shape and time: its definition's graph with each node's status, and the
// waterfall of its steps (the path grammar: `drafts[1]/write` is node `drafts/write`).

import { PAGE_ROWS, h, has, ms, when } from './ui.js';

export const nodeKey = (path) => path.replace(/\[\d+\]/g, '');
/** Sub-paths a step records for its effects (`plan/call.0`): not nodes of the graph. */
export const isEffect = (path) => /\/(call|tool)\.\d+$|\/[a-z_]+\.\d+$/.test(path);

export function rollupStatus(statuses) {
  const order = ['failed', 'running', 'retrying', 'waiting', 'suspended', 'pending', 'handoff', 'completed', 'cancelled', 'skipped'];
  for (const s of order) if (statuses.includes(s)) return s === 'waiting' ? 'suspended' : s === 'retrying' ? 'running' : s === 'handoff' ? 'completed' : s;
  return 'not-reached';
}

/**
 * A definition's outline (`graph` in the API) with each node's status. Drawn by layout —
 * step, boxed, repeated, choice, parallel, graph — never by operator, so a new operator
 * needs nothing here.
 */
export function graphView(outline, statusOf, onPick) {
  const node = (n, prefix) => {
    const key = prefix ? `${prefix}/${n.id}` : n.id;
    const st = statusOf(key);
    const notes = (n.notes || []).map((note) => ` (${note})`).join('');
    const label = `${n.id}${notes}${n.label ? ` · ${n.label}` : ''}`;
    const layout = n.layout || { type: 'step' };
    const body = (n.groups || [])[0] ? n.groups[0].steps : [];
    let drawn;
    switch (layout.type) {
      case 'step':
        drawn = h('button', {
          type: 'button',
          class: `node st-${st}`,
          'data-node': key,
          title: `${key}: ${st}`,
          onclick: () => onPick(key),
        }, h('span', { text: `${n.id}${notes}` }), h('span', { class: 'kind', text: n.label || n.kind }), h('span', { class: 'sr-only', text: ` ${st}` }));
        break;
      case 'choice':
      case 'parallel':
        drawn = group(`${label}${layout.type === 'parallel' ? ` → ${layout.join}` : ''}`, h('div', { class: 'par' },
          n.groups.map((g) => h('div', {}, g.label ? h('div', { class: 'arm-label', text: layout.type === 'choice' && g.label !== 'otherwise' ? `when ${g.label}` : g.label }) : null, seq(g.steps, key)))), st, key);
        break;
      case 'graph':
        drawn = group(label, h('div', {},
          h('div', { class: 'par' }, seq(body, key)),
          h('div', { class: 'arm-label' }, (layout.edges || []).map((e) => h('div', { text: `${e.from} → ${e.to}${e.when ? ` when ${e.when}` : ''}` })))), st, key);
        break;
      default: // boxed, repeated
        drawn = group(`${label}${layout.type === 'repeated' ? ` ↺ ${layout.again}` : ''}`, seq(body, key), st, key);
    }
    if (!n.fallback) return drawn;
    return h('div', {}, drawn,
      h('div', { class: 'arm-label', text: n.fallback.label || 'on failure' }),
      group(`${n.id} · fallback`, seq(n.fallback.steps, `${key}/@fallback`), statusOf(`${key}/@fallback`), `${key}/@fallback`));
  };
  const group = (label, body, st, key) => h('div', { class: `group st-${st}`, role: 'group', 'aria-label': label, 'data-node': key }, h('div', { class: 'head', text: label }), body);
  const seq = (nodes, prefix) => h('div', { class: 'seq' }, (nodes || []).map((n, i) => [i ? h('div', { class: 'arrow', 'aria-hidden': 'true', text: '↓' }) : null, node(n, prefix)]));
  return h('div', { class: 'graph', 'aria-label': 'Run graph' }, seq(outline.steps || [], ''));
}

/** Attempts per step path from the event stream, and when each step became ready. */
/** Each step path's events as the stream brings them (a step's details list them). */
export class Timeline {
  constructor() {
    this.events = new Map();
  }
  add(event) {
    const list = this.events.get(event.path) || [];
    list.push(event);
    if (list.length > 200) list.shift();
    this.events.set(event.path, list);
  }
}

/** What each span's bar is called, in the legend and its tooltip. */
export const ACTIVITIES = {
  executing: 'executing',
  person: 'waiting for a person',
  timer: 'waiting for a timer',
  event: 'waiting for an event',
  worker: 'waiting for a worker',
  retry: 'waiting to retry',
};

/** The steps that have a timeline, as the waterfall draws them (effects are inside their step). */
export const waterfallRows = (details) => details.steps.filter((s) => s.spans && s.spans.length && !isEffect(s.path));

/**
 * Per step, what it did when — executing, waiting for a person, a timer, an event, a worker,
 * a retry — from the journal's facts the API gives (`steps[].spans`). A finished run's spans
 * are all closed, so its bars never grow; a live run's open spans reach now.
 */
export function waterfallView(details, page, onPick) {
  const rows = waterfallRows(details);
  if (!rows.length) return h('p', { class: 'muted', text: 'No step has started yet.' });
  const now = Date.now() * 1000;
  const start = Math.min(...rows.map((r) => r.spans[0].from));
  const end = Math.max(...rows.flatMap((r) => r.spans.map((s) => s.to || now)));
  const span = Math.max(end - start, 1);
  const pct = (t) => `${(((t - start) / span) * 100).toFixed(3)}%`;
  const width = (a, b) => `${Math.max(((b - a) / span) * 100, 0.15).toFixed(3)}%`;
  const shown = rows.slice(0, (page + 1) * PAGE_ROWS);
  const list = h('div', { class: 'waterfall', role: 'table', 'aria-label': 'Timeline: what each step did when' },
    shown.map((row) => {
      const track = h('div', { class: 'track', role: 'cell' });
      for (const s of row.spans) {
        const failed = s.activity === 'executing' && row.status === 'failed' && s === row.spans[row.spans.length - 1];
        const bar = h('div', {
          class: `span-bar bar-${s.activity}${s.to ? '' : ' live'}${failed ? ' bar-failed' : ''}`,
          'data-activity': s.activity,
          title: `${ACTIVITIES[s.activity]}: ${s.to ? ms((s.to - s.from) / 1000) : `${ms((now - s.from) / 1000)} so far`}`,
        });
        bar.style.left = pct(s.from);
        bar.style.width = width(s.from, s.to || now);
        track.append(bar);
      }
      const total = (row.spans[row.spans.length - 1].to || now) - row.spans[0].from;
      return h('div', { class: 'wf-row', role: 'row', 'data-path': row.path },
        h('div', { class: 'name', role: 'cell', title: row.path },
          h('button', { type: 'button', class: 'linkish', 'aria-label': `Details of ${row.path}`, onclick: () => onPick && onPick(row.path), text: `${row.path}${row.attempts > 1 ? ` (${row.attempts} attempts)` : ''}` })),
        track,
        h('div', { class: 'ms', role: 'cell', text: ms(total / 1000) }));
    }));
  const used = new Set(rows.flatMap((r) => r.spans.map((s) => s.activity)));
  return h('div', {},
    h('div', { class: 'legend' }, Object.entries(ACTIVITIES).filter(([k]) => used.has(k)).map(([k, text]) => h('span', {}, h('i', { class: `bar-${k}` }), text))),
    list,
    rows.length > shown.length ? h('p', { class: 'muted', text: `${shown.length} of ${rows.length} steps shown.` }) : null);
}
