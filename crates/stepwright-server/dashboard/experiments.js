// Experiments (DESIGN §18): the namespace's list, and one experiment's report — a summary bar
// of what the change did, each evaluator's scores old against new as histograms, and the
// runs with regressions first, each opening its diff; a run recomputed again as a fork opens
// the compare view step by step.

import { PAGE_ROWS, api, errorBox, fill, h, has, ms, onLeave, problemText, runLink, show, status, toast, usd, when } from './ui.js';

const SVG = 'http://www.w3.org/2000/svg';

export async function experimentsView() {
  let list;
  try { list = await api('GET', '/v1/experiments'); } catch (e) { return show(h('h1', { text: 'Experiments' }), errorBox(e)); }
  const table = list.length ? h('table', { 'aria-label': 'Experiments' },
    h('thead', {}, h('tr', {}, ['Experiment', 'Workflow', 'Status', 'Runs', 'Started'].map((t) => h('th', { scope: 'col', text: t })))),
    h('tbody', {}, list.map((e) => h('tr', { 'data-experiment': e.id },
      h('td', {}, h('a', { href: `#/experiments/${e.id}`, text: e.experiment })),
      h('td', { class: 'mono', text: e.workflow }),
      h('td', {}, status(e.status)),
      h('td', { text: String(e.runs) }),
      h('td', {}, when(e.created_at))))))
    : h('p', { class: 'muted' }, 'No experiment yet. Try a change on past runs with ',
      h('code', { text: 'stepwright experiments run FILE' }), ' or ', h('code', { text: 'POST /v1/experiments' }), '.');
  show(h('h1', { text: 'Experiments' }), table);
}

export async function experimentView(id) {
  let details;
  try { details = await api('GET', `/v1/experiments/${id}`); } catch (e) { return show(h('h1', { text: 'Experiment' }), errorBox(e)); }
  const body = h('div');
  const filter = h('select', { id: 'x-filter', 'aria-label': 'Which runs' },
    [['', 'regressions first'], ['regressed', 'regressed'], ['improved', 'improved'], ['changed', 'changed'], ['unchanged', 'unchanged']]
      .map(([value, text]) => h('option', { value, text })));
  let shown = PAGE_ROWS;
  const draw = () => {
    const report = details.report;
    const cancel = details.status === 'running' && has('operator')
      ? h('button', { class: 'danger', text: 'Cancel', onclick: () => cancelExperiment(id) }) : null;
    fill(body,
      h('div', { class: 'spread' },
        h('h1', {}, `${report.experiment} `, h('span', { class: 'muted', text: `on ${report.workflow}` })),
        h('div', { class: 'row' }, status(details.status), cancel)),
      h('div', { class: 'facts' },
        fact('Started', when(details.created_at)),
        fact('Recomputed', `${details.recomputed} of ${details.runs}`),
        fact('Change', describeChange(details.spec.change)),
        fact('Cost per 1,000 runs', `${usd(report.totals.cost_per_1000_before)} → ${usd(report.totals.cost_per_1000_after)}`),
        fact('Model calls', `${report.totals.before.calls} → ${report.totals.after.calls}`),
        fact('Model time per run', `${ms(perRun(report.totals, 'before'))} → ${ms(perRun(report.totals, 'after'))}`),
        report.totals.evaluation_cost_usd ? fact('Judging cost', usd(report.totals.evaluation_cost_usd)) : null),
      summaryBar(report.totals, details.runs),
      histograms(report),
      h('div', { class: 'spread' }, h('h2', { text: 'Runs' }), h('label', { class: 'inline' }, 'Show ', filter)),
      runsTable(details, filter.value, shown, () => { shown += PAGE_ROWS; draw(); }));
  };
  filter.addEventListener('change', () => { shown = PAGE_ROWS; draw(); });
  draw();
  show(body);
  // While it runs, its report grows: read again each second until it ends.
  if (details.status === 'running') {
    const timer = setInterval(async () => {
      try {
        details = await api('GET', `/v1/experiments/${id}`);
        const open = [...body.querySelectorAll('details[open]')].map((d) => d.dataset.run);
        draw();
        for (const run of open) body.querySelector(`details[data-run="${run}"]`)?.setAttribute('open', '');
        if (details.status !== 'running') clearInterval(timer);
      } catch { /* the next tick tries again */ }
    }, 1000);
    onLeave(() => clearInterval(timer));
  }
}

async function cancelExperiment(id) {
  try {
    await api('POST', `/v1/experiments/${id}/cancel`);
    toast('Cancelled: the runs under way finish; no other starts.');
  } catch (e) { toast(problemText(e)); }
}

const perRun = (totals, when) => (totals.runs ? (totals[when].latency_ms || 0) / totals.runs : 0);
const fact = (name, value) => h('div', {}, h('span', { text: name }), value);

function describeChange(change) {
  const parts = [];
  if (change.version) parts.push(`version ${change.version}`);
  if (change.source || change.file) parts.push(change.file ? `file ${change.file}` : 'an edited file');
  for (const [from, to] of Object.entries(change.rebind || {})) parts.push(`${from} → ${to}`);
  if (change.from) parts.push(`from ${change.from}`);
  return parts.length ? parts.join(', ') : 'none (each run\u2019s own definition)';
}

/** What the change did, as one bar: improved, regressed, the same, not recomputed. */
function summaryBar(totals, population) {
  const same = totals.runs - totals.improved - totals.regressed;
  const parts = [['improved', totals.improved], ['regressed', totals.regressed], ['same', same], ['not recomputed', totals.skipped]];
  const whole = Math.max(population, 1);
  return h('div', { class: 'summary', 'aria-label': 'What the change did' },
    h('div', { class: 'summary-bar', role: 'img', 'aria-label': parts.map(([n, c]) => `${c} ${n}`).join(', ') },
      parts.filter(([, count]) => count > 0).map(([name, count]) => {
        const seg = h('span', { class: `seg seg-${name.replace(' ', '-')}`, title: `${count} ${name}` });
        // Through the CSSOM: the page's policy refuses style attributes.
        seg.style.width = `${(100 * count) / whole}%`;
        return seg;
      })),
    h('div', { class: 'row summary-legend' },
      parts.map(([name, count]) => h('span', { 'data-total': name }, h('span', { class: `dot seg-${name.replace(' ', '-')}` }), `${count} ${name}`)),
      h('span', { class: 'muted', text: `· ${totals.changed} changed, ${totals.unchanged} unchanged, ${totals.failed} failed` }),
      totals.would_execute ? h('span', { class: 'error', 'data-total': 'would execute', text: `${totals.would_execute} would execute a write with another input` }) : null));
}

/** Each evaluator's scores, old against new, as an inline SVG histogram. */
function histograms(report) {
  const means = report.totals.means;
  if (!means.length) return null;
  return h('div', {},
    h('h2', { text: 'Scores' }),
    h('div', { class: 'histograms' }, means.map((mean, i) => {
      const olds = report.runs.map((r) => r.scores[i]?.old).filter((v) => typeof v === 'number');
      const news = report.runs.map((r) => r.scores[i]?.new).filter((v) => typeof v === 'number');
      const fixed = (v) => (v === null || v === undefined ? '—' : v.toFixed(2));
      return h('figure', { class: 'card histogram', 'data-evaluator': mean.name },
        h('figcaption', {}, h('strong', { text: mean.name }), h('span', { class: 'muted', text: olds.length ? ` mean ${fixed(mean.old)} → ${fixed(mean.new)}` : ` mean change ${fixed(mean.new)}` })),
        histogram(olds, news, mean.name));
    })));
}

function histogram(olds, news, name) {
  const values = [...olds, ...news];
  if (!values.length) return h('p', { class: 'muted', text: 'No scores.' });
  const distinct = [...new Set(values)].sort((a, b) => a - b);
  // Few values (pass/fail, −1/0/1): a bar each; else eight equal bins.
  let buckets;
  if (distinct.length <= 8) {
    buckets = distinct.map((v) => ({ label: String(Number(v.toFixed(2))), has: (x) => x === v }));
  } else {
    const [lo, hi] = [distinct[0], distinct[distinct.length - 1]];
    const width = (hi - lo) / 8;
    buckets = Array.from({ length: 8 }, (_, b) => ({
      label: (lo + b * width).toFixed(1),
      has: (x) => Math.min(7, Math.floor((x - lo) / width)) === b,
    }));
  }
  const counts = buckets.map((b) => [olds.filter(b.has).length, news.filter(b.has).length]);
  const top = Math.max(1, ...counts.flat());
  const [W, H, pad] = [Math.max(240, buckets.length * 44), 110, 18];
  const slot = W / buckets.length;
  // Bars no wider than a few buckets' would be: one pass/fail bucket is not a wall.
  const barWidth = Math.min(slot * 0.34, 26);
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H + pad}`);
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `${name}: ${buckets.map((b, i) => `${b.label}: ${counts[i][0]} then, ${counts[i][1]} now`).join('; ')}`);
  const el = (tag, attrs, text) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  buckets.forEach((b, i) => {
    const [old, now] = counts[i];
    const bar = (count, x, cls) => {
      const height = (H - 14) * (count / top);
      const rect = el('rect', { x, y: H - height, width: barWidth, height, class: cls });
      rect.append(Object.assign(document.createElementNS(SVG, 'title'), { textContent: `${b.label}: ${count}` }));
      if (count) el('text', { x: x + barWidth / 2, y: H - height - 3, 'text-anchor': 'middle', class: 'hist-count' }, String(count));
    };
    const middle = i * slot + slot / 2;
    if (olds.length) bar(old, middle - barWidth - 1, 'hist-old');
    bar(now, olds.length ? middle + 1 : middle - barWidth / 2, 'hist-new');
    el('text', { x: i * slot + slot / 2, y: H + 13, 'text-anchor': 'middle', class: 'hist-label' }, b.label);
  });
  return h('div', {}, svg, olds.length ? h('div', { class: 'row muted hist-key' },
    h('span', {}, h('span', { class: 'dot hist-old' }), 'then'), h('span', {}, h('span', { class: 'dot hist-new' }), 'now')) : null);
}

const ORDER = { regressed: 0, improved: 1, same: 2 };

function runsTable(details, which, limit, more) {
  const runs = details.report.runs
    .filter((r) => !which || (which === 'changed' ? r.changed : which === 'unchanged' ? !r.changed : r.verdict === which))
    .sort((a, b) => (ORDER[a.verdict] - ORDER[b.verdict]) || (b.changed - a.changed)
      || ((b.diff.length + b.changed_steps.length) - (a.diff.length + a.changed_steps.length)));
  if (!runs.length) return h('p', { class: 'muted', text: details.recomputed ? 'No run is so.' : 'No run recomputed yet.' });
  const names = details.report.totals.means.map((m) => m.name);
  return h('div', {},
    h('table', { 'aria-label': 'Runs recomputed' },
      h('thead', {}, h('tr', {}, ['Run', 'Verdict', 'What changed', ...names, 'Cost', 'Took'].map((t) => h('th', { scope: 'col', text: t })))),
      h('tbody', {}, runs.slice(0, limit).map((r) => h('tr', { 'data-run': r.run },
        h('td', {}, r.fresh ? freshName(r.fresh) : runLink(r.run)),
        h('td', {}, status(r.verdict === 'same' && !r.changed ? 'unchanged' : r.verdict)),
        h('td', {}, whatChanged(details, r)),
        r.scores.map((s) => h('td', { class: 'mono', title: s.error || s.reason || '', text: score(s) })),
        h('td', { class: 'mono', text: `${usd(r.usage.before.cost_usd)} → ${usd(r.usage.after.cost_usd)}` }),
        h('td', { class: 'mono', text: ms(r.elapsed_ms) }))))),
    runs.length > limit ? h('button', { text: `Show more (${runs.length - limit} left)`, onclick: more }) : null);
}

function score(s) {
  if (s.error) return 'error';
  const fixed = (v) => (v === null || v === undefined ? '—' : String(Number(v.toFixed(2))));
  return s.old === null || s.old === undefined ? fixed(s.new) : `${fixed(s.old)} → ${fixed(s.new)}`;
}

/** A run's changes: its output's diff and the steps that changed, opened on demand. */
function whatChanged(details, r) {
  if (r.error) return h('span', { class: 'error', text: `failed: ${r.error.message}` });
  if (!r.changed) return h('span', { class: 'muted', text: 'nothing' });
  const writes = (r.would_execute || []).map((w) => `would execute a write at ${w.step}`);
  const first = writes[0] || r.diff[0] || (r.changed_steps.length ? `steps: ${r.changed_steps.join(', ')}` : 'how it ended');
  const more = writes.length + r.diff.length - 1;
  const box = h('details', { 'data-run': r.run },
    h('summary', { class: `mono${writes.length ? ' error' : ''}`, text: more > 0 ? `${first} (+${more} more)` : first }));
  box.addEventListener('toggle', () => {
    if (!box.open || box.childElementCount > 1) return;
    // One element: `append` itself would write an array or a null as text.
    box.append(h('div', {},
      // A write served, not executed, with the input it would get now.
      (r.would_execute || []).map((w) => h('div', { 'data-would-execute': w.step },
        h('p', { class: 'error', text: `Not executed: the write at ${w.step} would get another input now.` }),
        h('pre', { text: JSON.stringify(w.input, null, 2) }))),
      // The summary shows the first difference; the rest below it.
      r.diff.length > (writes.length ? 0 : 1)
        ? h('div', {}, r.diff.slice(writes.length ? 0 : 1).map((line) => h('div', { class: 'mono diff-line', text: line }))) : null,
      // Each changed step with its own diff, and the decisions that came out differently.
      (r.step_changes || []).map((s) => h('div', { 'data-step': s.path },
        h('p', { class: 'muted', text: `Step ${s.path}${s.change === 'value_changed' ? '' : s.change === 'failed' ? ' failed' : ' broke its schema'}` }),
        (s.diff || []).map((line) => h('div', { class: 'mono diff-line', text: line })),
        s.error ? h('div', { class: 'mono error', text: s.error.message }) : null,
        s.message ? h('div', { class: 'mono error', text: s.message }) : null)),
      (r.decisions || []).map((d) => h('div', { class: 'mono diff-line', 'data-decision': d.path,
        text: `${d.path} decided ${JSON.stringify(d.before ?? null)} → ${JSON.stringify(d.after ?? null)}` })),
      r.scores.filter((s) => s.reason).map((s) => h('p', {}, h('strong', { text: `${s.name}: ` }), s.reason)),
      // A new input is no run of the store: what it was given and served is shown instead.
      r.fresh ? freshFacts(r.fresh)
        : has('operator') ? h('button', { text: 'Compare step by step', onclick: () => compare(details.spec.change, r.run) }) : null));
  });
  return box;
}

/** A new input's name in the table: its line, the input itself on hover. */
function freshName(fresh) {
  return h('span', { class: 'mono', title: JSON.stringify(fresh.input), text: `input line ${fresh.line}` });
}

/** A new input's input, and the past runs whose recorded answers its writes were served. */
function freshFacts(fresh) {
  return h('div', { 'data-fresh': String(fresh.line) },
    h('p', { class: 'muted', text: `Input line ${fresh.line}, run fresh then and now:` }),
    h('pre', { text: JSON.stringify(fresh.input, null, 2) }),
    (fresh.served || []).map((s) => h('p', { 'data-served': s.step },
      `The write at ${s.step} was served what `, runLink(s.run), ' recorded for the same input.')));
}

/** Recomputes the run again with the experiment's change, kept as a fork, and opens the compare view. */
async function compare(change, run) {
  const body = { persist: true };
  if (change.version) body.version = change.version;
  if (change.source) { body.source = change.source; body.files = change.files || {}; }
  if (change.rebind && Object.keys(change.rebind).length) body.models = change.rebind;
  if (change.from) body.from = change.from;
  if (change.file && !change.source) return toast('This experiment\u2019s change is a file on the machine that ran it: recompute from the CLI.');
  toast('Recomputing…');
  try {
    const report = await api('POST', `/v1/runs/${run}/recompute`, body);
    sessionStorage.setItem(`recompute:${run}:${report.forked}`, JSON.stringify(report));
    location.hash = `#/diff/${run}?with=${report.forked}`;
  } catch (e) { toast(problemText(e)); }
}
