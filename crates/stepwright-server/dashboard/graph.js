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

export function graphView(describe, statusOf, onPick) {
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
const ACTIVITIES = {
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
export function waterfallView(details, page) {
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
        h('div', { class: 'name', role: 'cell', title: row.path, text: `${row.path}${row.attempts > 1 ? ` (${row.attempts} attempts)` : ''}` }),
        track,
        h('div', { class: 'ms', role: 'cell', text: ms(total / 1000) }));
    }));
  const used = new Set(rows.flatMap((r) => r.spans.map((s) => s.activity)));
  return h('div', {},
    h('div', { class: 'legend' }, Object.entries(ACTIVITIES).filter(([k]) => used.has(k)).map(([k, text]) => h('span', {}, h('i', { class: `bar-${k}` }), text))),
    list,
    rows.length > shown.length ? h('p', { class: 'muted', text: `${shown.length} of ${rows.length} steps shown.` }) : null);
}
