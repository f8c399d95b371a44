// Registered workflows and their versions.

import { schemaForm } from './forms.js';
import { graphView } from './graph.js';
import { api, errorBox, h, has, json, problemText, show, when } from './ui.js';

export async function workflowsView() {
  let list;
  try { list = await api('GET', '/v1/workflows'); } catch (e) { return show(h('h1', { text: 'Workflows' }), errorBox(e)); }
  show(h('h1', { text: 'Workflows' }), list.length ? h('table', { 'aria-label': 'Workflows' },
    h('thead', {}, h('tr', {}, ['Workflow', 'Latest version', 'Versions'].map((t) => h('th', { scope: 'col', text: t })))),
    h('tbody', {}, list.map((w) => h('tr', {},
      h('td', {}, h('a', { href: `#/workflows/${encodeURIComponent(w.name)}`, text: w.name })),
      h('td', { text: String(w.latest_version) }), h('td', { text: String(w.versions) })))))
    : h('p', { class: 'muted', text: 'No workflow is registered: `POST /v1/workflows` with an admin key.' }));
}

export async function workflowView(name) {
  let w;
  try { w = await api('GET', `/v1/workflows/${encodeURIComponent(name)}`); } catch (e) { return show(h('h1', { text: name }), errorBox(e)); }
  const start = h('div');
  if (has('operator')) {
    const form = schemaForm(w.input_schema || { title: 'Input (JSON)' });
    const problem = h('div', { role: 'alert', class: 'error' });
    const tags = h('input', { id: 'start-tags', type: 'text', placeholder: 'env:prod customer-42', autocomplete: 'off' });
    start.append(h('form', {
      class: 'card',
      'aria-labelledby': 'start-title',
      onsubmit: async (event) => {
        event.preventDefault();
        problem.textContent = '';
        const input = form.value();
        if (input === null) return;
        try {
          const body = { workflow: w.name, input: input === undefined ? null : input };
          const given = tags.value.split(/[\s,]+/).filter(Boolean);
          if (given.length) body.tags = given;
          const run = await api('POST', '/v1/runs', body);
          location.hash = `#/runs/${run.run_id}`;
        } catch (e) { problem.textContent = problemText(e); }
      },
    }, h('h2', { id: 'start-title', text: 'Start a run' }), form,
    h('div', { class: 'field' }, h('label', { for: 'start-tags', text: 'Tags (optional, space-separated)' }), tags),
    problem, h('button', { type: 'submit', class: 'primary', text: 'Start' })));
  }
  show(
    h('h1', { text: w.name }),
    start,
    h('h2', { text: 'Graph (newest version)' }), h('div', { class: 'card' }, graphView(w.graph, () => 'not-reached', () => {})),
    h('h2', { text: 'Versions' }),
    h('table', { 'aria-label': 'Versions' },
      h('thead', {}, h('tr', {}, ['Version', 'Hash', 'Registered', 'By'].map((t) => h('th', { scope: 'col', text: t })))),
      h('tbody', {}, w.versions.map((v) => h('tr', {}, h('td', { text: String(v.version) }), h('td', { class: 'mono', text: v.hash.slice(0, 16) }), h('td', {}, when(v.registered_at)), h('td', { text: v.registered_by || '' }))))),
    w.input_schema ? h('details', {}, h('summary', { text: 'Input schema' }), h('pre', { text: json(w.input_schema) })) : null);
}
