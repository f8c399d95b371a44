// Step workers: the queues with their backlog and pollers, and the workers the server heard
// from — what an operator reads when a run waits for a worker.

import { api, errorBox, h, show, when } from './ui.js';

export async function workersView() {
  let queues, workers;
  try {
    [queues, workers] = await Promise.all([api('GET', '/v1/queues'), api('GET', '/v1/workers')]);
  } catch (e) { return show(h('h1', { text: 'Step workers' }), errorBox(e)); }
  const queueTable = queues.queues.length ? h('table', { 'aria-label': 'Queues' },
    h('thead', {}, h('tr', {}, ['Queue', 'Waiting', 'Running', 'Polling', 'Handlers offered'].map((t) => h('th', { scope: 'col', text: t })))),
    h('tbody', {}, queues.queues.map((q) => h('tr', { 'data-queue': q.queue },
      h('td', { class: 'mono', text: q.queue }),
      h('td', { text: String(q.pending), class: q.pending > 0 && q.pollers === 0 ? 'error' : '' }),
      h('td', { text: String(q.claimed) }),
      h('td', { text: String(q.pollers) }),
      h('td', { class: 'mono', text: q.handlers.join(', ') || '—' })))))
    : h('p', { class: 'muted', text: 'No queue has tasks or workers.' });
  const workerTable = workers.workers.length ? h('table', { 'aria-label': 'Workers' },
    h('thead', {}, h('tr', {}, ['Worker', 'Queue', 'Handlers', 'SDK', 'Last heard from', 'Polling now'].map((t) => h('th', { scope: 'col', text: t })))),
    h('tbody', {}, workers.workers.map((w) => h('tr', { 'data-worker': w.id },
      h('td', { class: 'mono', text: w.name ? `${w.name} (${w.id})` : w.id }),
      h('td', { class: 'mono', text: w.queue }),
      h('td', { class: 'mono', text: w.handlers.join(', ') }),
      h('td', { text: w.sdk || '' }),
      h('td', {}, when(w.last_seen)),
      h('td', { text: w.polling ? 'yes' : 'no' })))))
    : h('p', { class: 'muted', text: 'No step worker was heard from in the last ten minutes.' });
  show(h('h1', { text: 'Step workers' }), h('h2', { text: 'Queues' }), queueTable, h('h2', { text: 'Workers' }), workerTable);
}
