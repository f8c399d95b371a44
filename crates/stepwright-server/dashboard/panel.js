// A step's detail panel: everything known about one step path — where it stands, what it did
// when (the timeline's spans, each with its length), what it waits for, its cost, output,
// errors, live text and events — beside the run page on a wide screen, over it on a phone.

import { ACTIVITIES } from './graph.js';
import { at, fill, h, json, ms, status, usd, valueBox, waitsFor, when } from './ui.js';

/**
 * The panel, closed. `open(path)` shows that step; `redraw()` draws it again from the run's
 * current details (a running step's elapsed time, its new spans); Escape or × closes it.
 * `stepOf(path)` gives the step as the run's details have it now, `eventsOf`/`liveOf` its
 * events and streamed text.
 */
export function stepPanel({ stepOf, eventsOf, liveOf }) {
  let path = null;
  let returnTo = null;
  const el = h('aside', { class: 'step-panel', 'aria-label': 'Step details', 'data-testid': 'step-panel', hidden: true });
  const close = () => {
    path = null;
    el.hidden = true;
    fill(el);
    if (returnTo && document.contains(returnTo)) returnTo.focus();
  };
  const onKey = (event) => { if (event.key === 'Escape' && path !== null) close(); };
  document.addEventListener('keydown', onKey);
  const redraw = () => {
    if (path === null) return;
    const step = stepOf(path);
    const closer = h('button', { type: 'button', class: 'ghost close', 'aria-label': 'Close the step details', text: '×', onclick: close });
    if (!step) {
      fill(el, h('div', { class: 'spread' }, h('h2', { class: 'path', text: path }), closer), h('p', { class: 'muted', text: 'This step has not started.' }));
      return closer;
    }
    const now = Date.now() * 1000;
    const events = eventsOf(path);
    const live = liveOf(path);
    const failures = events.filter((e) => e.kind === 'step.failed').map((e) => e.data && e.data.error).filter(Boolean);
    const lasted = (s) => ((s.to || now) - s.from) / 1000;
    const spent = new Map();
    for (const s of step.spans || []) spent.set(s.activity, (spent.get(s.activity) || 0) + lasted(s));
    fill(el,
      h('div', { class: 'spread' }, h('h2', { class: 'path', text: step.path }), closer),
      h('div', { class: 'row' }, status(step.status), step.waiting_for ? waitsFor(step.waiting_for) : null),
      h('dl', { class: 'facts panel-facts' },
        h('dt', { text: 'attempts' }), h('dd', { 'data-fact': 'attempts', text: String(step.attempts) }),
        h('dt', { text: 'started' }), h('dd', {}, when(step.started_at)),
        h('dt', { text: 'ended' }), h('dd', { title: at(step.ended_at) }, step.ended_at ? when(step.ended_at) : '—'),
        h('dt', { text: step.duration_ms !== undefined ? 'took' : 'so far' }),
        h('dd', { 'data-fact': 'duration', text: step.duration_ms !== undefined ? ms(step.duration_ms) : (step.started_at ? ms((now - step.started_at) / 1000) : '—') }),
        ...[...spent].flatMap(([activity, total]) => [h('dt', { text: ACTIVITIES[activity] || activity }), h('dd', { 'data-activity': activity, text: ms(total) })]),
        step.usage ? [h('dt', { text: 'model calls' }), h('dd', { text: `${step.usage.calls}: ${step.usage.input_tokens} in / ${step.usage.output_tokens} out, ${usd(step.usage.cost_usd)}` })] : null),
      step.spans && step.spans.length ? h('div', {}, h('h3', { text: 'What it did when' }),
        h('ol', { class: 'spans' }, step.spans.map((s) => h('li', { 'data-activity': s.activity },
          h('i', { class: `bar-${s.activity}` }), `${ACTIVITIES[s.activity] || s.activity} `, h('span', { class: 'muted', text: `${ms(lasted(s))}${s.to ? '' : ' so far'} · from ${new Date(s.from / 1000).toLocaleTimeString()}` }))))) : null,
      failures.length ? h('div', {}, h('h3', { text: 'Errors' }), failures.map((e) => h('pre', { class: 'error', text: json(e) }))) : null,
      live ? h('div', {}, h('h3', { text: 'Writing' }), h('div', { class: 'live-text', text: live })) : null,
      step.output !== undefined ? valueBox('Output', step.output, { open: true }) : null,
      events.length ? h('details', {}, h('summary', { text: `Events (${events.length})` }),
        h('pre', { text: events.map((e) => `${new Date(e.at / 1000).toISOString()} ${e.kind} ${JSON.stringify(e.data)}`).join('\n') })) : null);
    return closer;
  };
  const open = (next) => {
    returnTo = document.activeElement;
    path = next;
    el.hidden = false;
    const closer = redraw();
    if (closer) closer.focus();
  };
  return { el, open, redraw, close, isOpen: () => path !== null, dispose: () => document.removeEventListener('keydown', onKey) };
}
