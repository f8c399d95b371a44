// A run: its status, graph, waterfall, steps, and the actions on it.

import { TERMINAL } from './contract.js';
import { Timeline, graphView, nodeKey, rollupStatus, waterfallRows, waterfallView } from './graph.js';
import { forkDialog, recomputeDialog, replay } from './history.js';
import { stepPanel } from './panel.js';
import { bulkCancel } from './runs.js';
import { PAGE_ROWS, api, at, errorBox, fill, h, has, json, ms, onLeave, problemText, runLink, show, startedBy, status, tagList, toast, usd, valueBox, waitsFor, when } from './ui.js';

export async function runView(id) {
  let details;
  try {
    details = await api('GET', `/v1/runs/${id}`);
  } catch (e) {
    return show(h('h1', { text: 'Run' }), errorBox(e));
  }
  const definition = api('GET', `/v1/runs/${id}/definition`).catch(() => null);
  const timeline = new Timeline();
  const liveText = new Map();
  let stepsPage = 0;
  let wfPage = 0;
  let picked = null;
  // The steps' filter: a status and text in the path (a 1,000-item map's one failure).
  const stepFilter = { status: '', text: '' };
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
  const panel = stepPanel({
    stepOf: (path) => details.steps.find((s) => s.path === path),
    eventsOf: (path) => timeline.events.get(path) || [],
    liveOf: (path) => liveText.get(path),
  });
  onLeave(() => panel.dispose());
  show(header, actions, pending, liveBox,
    h('h2', { text: 'Graph' }), graphBox,
    h('h2', { text: 'Timeline' }), waterfallBox,
    h('h2', { text: 'Steps' }), stepsBox, panel.el);

  let describe = null;
  const statusOf = (key) => {
    const statuses = details.steps.filter((s) => nodeKey(s.path) === key).map((s) => s.status);
    // A step whose model is writing has not journaled anything yet.
    if (!TERMINAL.has(details.status) && [...liveText.keys()].some((path) => nodeKey(path) === key)) statuses.push('running');
    return rollupStatus(statuses);
  };
  const drawGraph = () => {
    if (describe) fill(graphBox, graphView(describe, statusOf, (key) => {
      picked = key;
      drawSteps();
      // A node that is one step opens its details; one that is many (a map's body) lists them.
      const its = details.steps.filter((s) => nodeKey(s.path) === key);
      if (its.length === 1) panel.open(its[0].path); else stepsBox.scrollIntoView();
    }));
  };
  definition.then((d) => { describe = d && d.graph; if (describe) drawGraph(); else fill(graphBox, h('p', { class: 'muted', text: 'The definition is not available.' })); });

  const drawHeader = () => {
    const u = details.usage;
    fill(header,
      h('div', { class: 'spread' }, h('h1', {}, `${details.workflow} `, h('span', { class: 'mono muted', text: details.run_id })), status(details.status)),
      h('div', { class: 'facts' },
        h('div', {}, h('span', { text: 'created' }), when(details.created_at)),
        h('div', { 'data-testid': 'started-by' }, h('span', { text: 'started by' }), startedBy(details.started_by)),
        details.tags && details.tags.length ? h('div', { 'data-testid': 'tags' }, h('span', { text: 'tags' }), tagList(details.tags)) : null,
        h('div', {}, h('span', { text: 'worker' }), details.owner || '—'),
        h('div', {}, h('span', { text: 'steps' }), String(details.steps.length)),
        u ? h('div', {}, h('span', { text: 'tokens' }), `${u.input_tokens} in / ${u.output_tokens} out`) : null,
        u ? h('div', {}, h('span', { text: 'cost' }), usd(u.cost_usd)) : null,
        details.parent ? h('div', {}, h('span', { text: 'forked from' }), runLink(details.parent.run_id), ` before ${details.parent.at}`) : null,
        forks.length ? h('div', { 'data-testid': 'forks' }, h('span', { text: `forks (${forks.length}${forksMore ? '+' : ''})` }), forks.map((f, i) => [i ? ', ' : '', runLink(f.run_id)])) : null),
      details.error ? h('p', { class: 'error', role: 'alert', text: `${details.error.code}: ${details.error.message}` }) : null,
      details.output !== null && details.output !== undefined ? valueBox('Output', details.output, { open: true }) : null,
      details.input !== undefined ? valueBox('Input', details.input, { 'data-testid': 'run-input' }) : null);
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
  // What a person is writing to a run's inbox outlives the redraws that events cause.
  const drafts = new Map();
  const drawPending = () => {
    fill(pending, ...details.pending.map((p) => p.kind === 'timer'
      // A durable timer is not a decision: it goes off by itself, or an operator wakes it.
      ? h('div', { class: 'card', 'data-testid': 'timer' },
        h('div', { class: 'spread' }, h('strong', { text: `Sleeping at ${p.step}` }), status('suspended')),
        h('p', {}, 'Until ', at(p.deadline), ' (', when(p.deadline), ').'),
        has('operator') ? h('button', { type: 'button', text: 'Wake now', onclick: () => act(() => api('POST', `/v1/interrupts/${id}.${p.id}/wake`, {}), 'Woken.') }) : null)
      : h('div', { class: 'card' },
        h('div', { class: 'spread' }, h('strong', { text: `Waiting for ${p.kind === 'event' ? 'an event' : 'a person'} at ${p.step}` }), status('suspended')),
        h('p', { text: p.message }),
        has('approver') ? h('a', { href: '#/inbox', text: 'Decide in the approvals inbox' }) : h('p', { class: 'muted', text: 'An approver decides this.' }))),
    // A `wait` step: answered by a message to the run's inbox of that name — from a program,
    // or here by an operator.
    ...(details.awaiting || []).map((a) => h('div', { class: 'card', 'data-testid': 'awaiting' },
      h('div', { class: 'spread' }, h('strong', { text: `Waiting for the event ${a.event} at ${a.step}` }), status('suspended')),
      h('p', { text: `Until ${new Date(a.until / 1000).toLocaleString()}. A message sent to the run's inbox "${a.event}" answers it: stepwright send ${details.run_id} --inbox ${a.event} --message JSON` }),
      has('operator') ? messageForm(a.event, drafts, (message) => act(async () => {
        await api('POST', `/v1/runs/${id}/messages`, { inbox: a.event, message });
        drafts.delete(a.event);
      }, `Sent to ${a.event}.`)) : null)),
    // A step worker's task: which queue and handler, and why it waits.
    ...(details.tasks || []).map((t) => h('div', { class: 'card', 'data-testid': 'task-wait' },
      h('div', { class: 'spread' }, h('strong', { text: `Waiting for a step worker at ${t.step}` }), status(t.state === 'claimed' ? 'running' : 'suspended')),
      h('p', { text: `${t.reason[0].toUpperCase()}${t.reason.slice(1).replaceAll('`', '')}. Task ${t.task_id}, queue ${t.queue}, handler ${t.handler}, attempt ${t.attempt}.` }))),
    // A pending run: why no worker has started it.
    ...(details.queued ? [h('div', { class: 'card', 'data-testid': 'queued' },
      h('div', { class: 'spread' }, h('strong', { text: 'Not started yet' }), status('pending')),
      h('p', { text: `Queued: ${details.queued.reason}.` }))] : []));
  };
  const filterStatus = h('select', { id: 'step-status', onchange: (e) => { stepFilter.status = e.target.value; stepsPage = 0; drawSteps(); } },
    h('option', { value: '', text: 'any' }), ['failed', 'running', 'waiting', 'retrying', 'completed', 'skipped', 'cancelled'].map((v) => h('option', { value: v, text: v })));
  const filterText = h('input', { id: 'step-text', type: 'search', placeholder: 'path contains', oninput: (e) => { stepFilter.text = e.target.value.trim(); stepsPage = 0; drawSteps(); } });
  const stepFilters = h('div', { class: 'filters', role: 'search', 'aria-label': 'Filter steps' },
    h('div', {}, h('label', { for: 'step-status', text: 'Status' }), filterStatus),
    h('div', {}, h('label', { for: 'step-text', text: 'Step' }), filterText));
  const stepList = h('div');
  const drawSteps = () => {
    let rows = picked ? details.steps.filter((s) => nodeKey(s.path) === picked || nodeKey(s.path).startsWith(`${picked}/`)) : details.steps;
    if (stepFilter.status) rows = rows.filter((s) => s.status === stepFilter.status);
    if (stepFilter.text) rows = rows.filter((s) => s.path.includes(stepFilter.text));
    // Failures first: the step to look at is at the top, not on page 4.
    rows = [...rows.filter((s) => s.status === 'failed'), ...rows.filter((s) => s.status !== 'failed')];
    const shown = rows.slice(0, (stepsPage + 1) * PAGE_ROWS);
    if (details.steps.length > 10 && !stepsBox.contains(stepFilters)) fill(stepsBox, stepFilters, stepList);
    else if (!stepsBox.contains(stepList)) fill(stepsBox, stepList);
    fill(stepList,
      picked ? h('p', {}, `Steps of ${picked}. `, h('button', { type: 'button', class: 'ghost', text: 'Show all', onclick: () => { picked = null; drawSteps(); } })) : null,
      rows.length ? null : h('p', { class: 'muted', text: 'No step matches.' }),
      ...shown.map((s) => stepDetails(id, s, () => timeline.events.get(s.path) || [], () => liveText.get(s.path), openSteps, panel.open)),
      rows.length > shown.length ? h('button', { type: 'button', text: `Show more (${rows.length - shown.length} left)`, onclick: () => { stepsPage++; drawSteps(); } }) : null);
  };
  const drawWaterfall = () => {
    fill(waterfallBox, waterfallView(details, wfPage, panel.open));
    const total = waterfallRows(details).length;
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
  const drawAll = () => { drawHeader(); drawActions(); drawPending(); drawGraph(); drawSteps(); drawWaterfall(); drawLive(); panel.redraw(); };
  let reloading = null;
  let gone = false;
  onLeave(() => { gone = true; clearTimeout(reloading); });
  // The details again, once events say they changed: never after leaving the page, and never
  // for a run that had ended when they were read (its stream only replays what they hold).
  const reload = () => {
    if (reloading || gone || TERMINAL.has(details.status)) return;
    reloading = setTimeout(async () => {
      reloading = null;
      if (gone) return;
      try { details = await api('GET', `/v1/runs/${id}`); } catch { return; }
      if (TERMINAL.has(details.status)) liveText.clear();
      drawAll();
      // A large run's details are large: read them less often while it runs.
    }, Math.min(2000, 150 + details.steps.length / 5));
  };
  drawAll();
  // While it runs, running steps' bars and elapsed times move on between events.
  const ticking = setInterval(() => {
    if (document.hidden || TERMINAL.has(details.status)) return;
    drawWaterfall();
    for (const el of stepsBox.querySelectorAll('[data-elapsed-from]')) el.textContent = `${ms((Date.now() * 1000 - Number(el.dataset.elapsedFrom)) / 1000)} so far`;
  }, 1000);
  onLeave(() => clearInterval(ticking));

  // The run's events, live: the whole log first, then as they happen, with streamed text.
  const stream = new EventSource(`/v1/runs/${id}/events?tokens=true`);
  let scheduled = false;
  const redrawSoon = () => {
    if (scheduled) return;
    scheduled = true;
    // The timeline is drawn from the details (reloaded as events come), not from events.
    requestAnimationFrame(() => { scheduled = false; drawLive(); if (liveText.size) drawGraph(); });
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
/** A message for a run's inbox, written as JSON and checked before it is sent; what is
 * written is kept in `drafts` (and the focus kept) when the page draws the form again. */
function messageForm(inbox, drafts, send) {
  const fieldId = `message-${inbox}`.replace(/[^a-zA-Z0-9_-]/g, '_');
  const text = h('textarea', { id: fieldId, rows: 3, placeholder: '{"signed_by": "Ann"}', 'aria-describedby': `${fieldId}-error` });
  text.value = drafts.get(inbox) || '';
  text.addEventListener('input', () => drafts.set(inbox, text.value));
  if (document.activeElement && document.activeElement.id === fieldId) queueMicrotask(() => text.focus());
  const problem = h('div', { class: 'field-error', id: `${fieldId}-error` });
  const button = h('button', { type: 'button', text: 'Send', onclick: () => {
    let message;
    try { message = JSON.parse(text.value); } catch (e) {
      problem.textContent = `not JSON: ${e.message}`;
      text.setAttribute('aria-invalid', 'true');
      return;
    }
    problem.textContent = '';
    text.removeAttribute('aria-invalid');
    send(message);
  } });
  return h('div', { class: 'field' }, h('label', { for: fieldId, text: `Message to ${inbox} (JSON)` }), text, problem, button);
}

export function stepDetails(runId, step, eventsOf, liveOf, openSteps, openPanel) {
  const box = h('details', { class: 'step', 'data-path': step.path });
  const body = h('div');
  box.append(h('summary', {},
    status(step.status),
    h('span', { class: 'path', text: step.path }),
    step.duration_ms !== undefined || !step.started_at
      ? h('span', { class: 'muted', text: ms(step.duration_ms) })
      // Still going: how long so far (the page's ticker keeps it current).
      : h('span', { class: 'muted', 'data-elapsed-from': String(step.started_at), text: `${ms((Date.now() * 1000 - step.started_at) / 1000)} so far` }),
    step.attempts > 1 ? h('span', { class: 'muted', text: `${step.attempts} attempts` }) : null,
    step.waiting_for ? waitsFor(step.waiting_for) : null,
    step.usage ? h('span', { class: 'muted', text: `${step.usage.input_tokens + step.usage.output_tokens} tokens · ${usd(step.usage.cost_usd)}` }) : null,
    openPanel ? h('button', {
      type: 'button',
      class: 'ghost open-panel',
      'aria-label': `Details of ${step.path}`,
      text: 'Details',
      // A button in a summary would also open or close the row: it opens the panel only.
      onclick: (event) => { event.preventDefault(); event.stopPropagation(); openPanel(step.path); },
    }) : null), body);
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
