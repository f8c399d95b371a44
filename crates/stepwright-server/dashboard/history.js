// A run's history: replay, recompute and fork, from the run's page.

import { isEffect } from './graph.js';
import { api, h, has, problemText, toast } from './ui.js';

export async function replay(id) {
  toast('Replaying…');
  try {
    const report = await api('POST', `/v1/runs/${id}/replay`);
    sessionStorage.setItem(`replay:${id}`, JSON.stringify(report));
    location.hash = `#/diff/${id}?replay=1`;
  } catch (e) { toast(problemText(e)); }
}

export async function recomputeDialog(details) {
  const versions = await api('GET', `/v1/workflows/${encodeURIComponent(details.workflow)}`).then((w) => w.versions).catch(() => []);
  const bindings = await api('GET', `/v1/runs/${details.run_id}/definition`).then((d) => d.models).catch(() => []);
  // One choice per binding the definition has: itself, or another of its bindings.
  const rebinds = bindings.length < 2 ? [] : bindings.map((b, i) => ({
    name: b.name,
    select: h('select', { id: `rc-model-${i}` },
      h('option', { value: '', text: `${b.name} (${b.model})` }),
      bindings.filter((o) => o.name !== b.name).map((o) => h('option', { value: o.name, text: `answered by ${o.name} (${o.model})` }))),
  }));
  const version = h('select', { id: 'rc-version' }, h('option', { value: '', text: 'the version the run is pinned to' }), versions.map((v) => h('option', { value: String(v.version), text: `version ${v.version} (${v.hash.slice(0, 10)}…)` })));
  const from = h('select', { id: 'rc-from' }, h('option', { value: '', text: 'the start' }), details.steps.filter((s) => !isEffect(s.path)).map((s) => h('option', { value: s.path, text: s.path })));
  const problem = h('div', { role: 'alert', class: 'error' });
  const dialog = h('dialog', { 'aria-labelledby': 'rc-title' },
    h('form', { method: 'dialog' },
      h('h2', { id: 'rc-title', text: 'Recompute' }),
      h('p', { class: 'muted', text: 'Re-executes the run in a sandbox and keeps the result as a new run forked from it, to compare side by side. A model binding can be answered by another binding the definition has; a new model or endpoint is a new version.' }),
      h('label', { for: 'rc-version', text: 'Definition' }), version,
      rebinds.length ? h('fieldset', {}, h('legend', { text: 'Models' }), rebinds.map((r) => [h('label', { for: r.select.id, text: `Calls to ${r.name}` }), r.select])) : null,
      h('label', { for: 'rc-from', text: 'Re-execute from' }), from,
      problem,
      h('div', { class: 'row' }, h('button', { value: 'no', text: 'Close' }), h('button', { value: 'yes', class: 'primary', text: 'Recompute' }))));
  document.body.append(dialog);
  dialog.showModal();
  dialog.addEventListener('close', async () => {
    dialog.remove();
    if (dialog.returnValue !== 'yes') return;
    const body = { persist: true };
    if (version.value) body.version = Number(version.value);
    if (from.value) body.from = from.value;
    const models = Object.fromEntries(rebinds.filter((r) => r.select.value).map((r) => [r.name, r.select.value]));
    if (Object.keys(models).length) body.models = models;
    toast('Recomputing…');
    try {
      const report = await api('POST', `/v1/runs/${details.run_id}/recompute`, body);
      sessionStorage.setItem(`recompute:${details.run_id}:${report.forked}`, JSON.stringify(report));
      location.hash = `#/diff/${details.run_id}?with=${report.forked}`;
    } catch (e) { toast(problemText(e)); }
  });
}

export async function forkDialog(details) {
  const steps = details.steps.filter((s) => !isEffect(s.path));
  const at = h('select', { id: 'fk-at' }, steps.map((s) => h('option', { value: s.path, text: s.path })));
  const input = h('textarea', { id: 'fk-input', placeholder: 'leave empty to keep the run\u2019s input' });
  const outputs = h('textarea', { id: 'fk-steps', placeholder: '{"step-path": new output, …} for steps completed before the fork point' });
  const problem = h('div', { role: 'alert', class: 'error' });
  const dialog = h('dialog', { 'aria-labelledby': 'fk-title' },
    h('form', { method: 'dialog' },
      h('h2', { id: 'fk-title', text: 'Fork' }),
      h('p', { class: 'muted', text: 'A new run with everything this one recorded before the step, optionally with a new input or corrected outputs.' }),
      h('label', { for: 'fk-at', text: 'Fork before' }), at,
      h('label', { for: 'fk-input', text: 'New input (JSON)' }), input,
      h('label', { for: 'fk-steps', text: 'Replaced outputs (JSON)' }), outputs,
      problem,
      h('div', { class: 'row' }, h('button', { value: 'no', text: 'Close' }), h('button', { value: 'yes', class: 'primary', id: 'fk-go', text: 'Fork' }))));
  document.body.append(dialog);
  dialog.querySelector('#fk-go').addEventListener('click', (event) => {
    try {
      if (input.value.trim()) JSON.parse(input.value);
      if (outputs.value.trim()) JSON.parse(outputs.value);
    } catch (e) {
      event.preventDefault();
      problem.textContent = `Not JSON: ${e.message}`;
    }
  });
  dialog.showModal();
  dialog.addEventListener('close', async () => {
    dialog.remove();
    if (dialog.returnValue !== 'yes') return;
    const body = { at: at.value };
    if (input.value.trim()) body.input = JSON.parse(input.value);
    if (outputs.value.trim()) body.steps = JSON.parse(outputs.value);
    try {
      const forked = await api('POST', `/v1/runs/${details.run_id}/fork`, body);
      location.hash = `#/runs/${forked.run_id}`;
    } catch (e) { toast(problemText(e)); }
  });
}
