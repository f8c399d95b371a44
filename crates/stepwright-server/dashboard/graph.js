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
export class Timeline {
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

export function waterfallView(timeline, details, page) {
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
