// Structural diff of two JSON values, and the diff view: a run beside its recompute (a
// forked run) or its replay.

import { isEffect } from './graph.js';
import { replay } from './history.js';
import { api, errorBox, h, json, ms, runLink, show, status, usd } from './ui.js';

export function jsonDiff(before, after, at = '', out = []) {
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

export function diffLines(pairs) {
  if (!pairs.length) return h('p', { class: 'muted', text: 'No differences.' });
  const shown = (v) => (v === undefined ? '(absent)' : JSON.stringify(v));
  return h('div', {}, pairs.map(([at, a, b]) => h('div', {},
    h('div', { class: 'mono muted', text: at }),
    h('div', { class: 'diff-line before', text: `− ${shown(a)}` }),
    h('div', { class: 'diff-line after', text: `+ ${shown(b)}` }))));
}


export async function diffView(id, params) {
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
      reported && reported.change === 'failed' ? h('p', { class: 'error', text: `failed in the recompute: ${reported.error.code}: ${reported.error.message}` }) : null,
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
