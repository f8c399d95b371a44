// The runs list: filters, pages, live rows, bulk cancel.

import { RUN_STATUSES, TERMINAL } from './contract.js';
import { api, errorBox, fill, h, has, ms, onLeave, runLink, show, startedBy, status, tagList, toast, usd, waitsFor, when } from './ui.js';

export async function runsView(params) {
  const filters = {
    status: params.get('status') || '',
    workflow: params.get('workflow') || '',
    input_contains: params.get('q') || '',
    after: params.get('after') || '',
    before: params.get('before') || '',
    started_by: params.get('by') || '',
    tag: params.get('tag') || '',
  };
  const cursors = [];
  let cursor = null;
  let page = null;
  const selected = new Set();
  const statusSelect = h('select', { id: 'f-status' }, h('option', { value: '', text: 'any' }), RUN_STATUSES.map((s) => h('option', { value: s, text: s })));
  statusSelect.value = filters.status;
  const workflowSelect = h('select', { id: 'f-workflow' }, h('option', { value: '', text: 'any' }));
  const text = h('input', { id: 'f-text', type: 'search', value: filters.input_contains, placeholder: 'text in the input' });
  const after = h('input', { id: 'f-after', type: 'datetime-local', value: filters.after });
  const before = h('input', { id: 'f-before', type: 'datetime-local', value: filters.before });
  const by = h('input', { id: 'f-by', type: 'search', value: filters.started_by, placeholder: 'a user, schedule:…, trigger:…' });
  const tag = h('input', { id: 'f-tag', type: 'search', value: filters.tag, placeholder: 'env:prod' });
  api('GET', '/v1/workflows').then((list) => {
    for (const w of list) workflowSelect.append(h('option', { value: w.name, text: w.name }));
    workflowSelect.value = filters.workflow;
  }).catch(() => {});
  const apply = (event) => {
    event.preventDefault();
    const query = new URLSearchParams();
    if (statusSelect.value) query.set('status', statusSelect.value);
    if (workflowSelect.value) query.set('workflow', workflowSelect.value);
    if (text.value.trim()) query.set('q', text.value.trim());
    if (after.value) query.set('after', after.value);
    if (before.value) query.set('before', before.value);
    if (by.value.trim()) query.set('by', by.value.trim());
    if (tag.value.trim()) query.set('tag', tag.value.trim());
    location.hash = `#/runs?${query}`;
  };
  const form = h('form', { class: 'filters', onsubmit: apply, 'aria-label': 'Filter runs' },
    h('div', {}, h('label', { for: 'f-status', text: 'Status' }), statusSelect),
    h('div', {}, h('label', { for: 'f-workflow', text: 'Workflow' }), workflowSelect),
    h('div', {}, h('label', { for: 'f-after', text: 'Created after' }), after),
    h('div', {}, h('label', { for: 'f-before', text: 'Created before' }), before),
    h('div', {}, h('label', { for: 'f-text', text: 'Input contains' }), text),
    h('div', {}, h('label', { for: 'f-by', text: 'Started by' }), by),
    h('div', {}, h('label', { for: 'f-tag', text: 'Tag' }), tag),
    h('button', { type: 'submit', text: 'Apply' }));
  const table = h('div', { 'aria-live': 'polite' });
  const bulk = h('div', { class: 'row' });
  const pager = h('div', { class: 'pager' });
  show(h('div', { class: 'spread' }, h('h1', { text: 'Runs' }), bulk), form, table, pager);

  const query = () => {
    const q = new URLSearchParams({ limit: '50', usage: 'true' });
    if (filters.started_by) q.set('started_by', filters.started_by);
    if (filters.tag) q.set('tag', filters.tag);
    if (filters.status) q.set('status', filters.status);
    if (filters.workflow) q.set('workflow', filters.workflow);
    if (filters.input_contains) q.set('input_contains', filters.input_contains);
    if (filters.after) q.set('created_after', String(new Date(filters.after).getTime() * 1000));
    if (filters.before) q.set('created_before', String(new Date(filters.before).getTime() * 1000));
    if (cursor) q.set('cursor', cursor);
    return q;
  };
  const drawBulk = () => {
    if (!has('operator')) return fill(bulk);
    const count = selected.size;
    fill(bulk, h('button', {
      type: 'button',
      class: 'danger',
      disabled: count === 0,
      text: `Cancel selected (${count})`,
      onclick: () => bulkCancel([...selected], load),
    }));
  };
  const draw = () => {
    if (!page.runs.length) {
      fill(table, h('p', { class: 'muted', text: 'No runs match.' }));
    } else {
      const rows = page.runs.map((run) => {
        const live = !TERMINAL.has(run.status);
        const box = h('input', {
          type: 'checkbox',
          'aria-label': `Select run ${run.run_id}`,
          checked: selected.has(run.run_id),
          disabled: !live || !has('operator'),
          onchange: (e) => {
            if (e.target.checked) selected.add(run.run_id); else selected.delete(run.run_id);
            e.target.closest('tr').classList.toggle('selected', e.target.checked);
            drawBulk();
          },
        });
        return h('tr', { class: selected.has(run.run_id) ? 'selected' : '' },
          h('td', {}, box),
          h('td', {}, runLink(run.run_id)),
          h('td', {}, run.workflow, tagList(run.tags)),
          h('td', {}, status(run.status), run.waiting_for ? waitsFor(run.waiting_for, 'div') : null),
          h('td', {}, when(run.created_at)),
          h('td', { class: 'num', text: ms(((TERMINAL.has(run.status) ? run.updated_at : Date.now() * 1000) - run.created_at) / 1000) }),
          h('td', { class: 'num', text: run.usage && run.usage.calls ? usd(run.usage.cost_usd) : '—' }),
          h('td', { text: startedBy(run.started_by) }),
          h('td', { class: 'muted', text: run.owner || '' }));
      });
      fill(table, h('table', { 'aria-label': 'Runs' },
        h('thead', {}, h('tr', {}, h('th', { text: '' }), ['Run', 'Workflow', 'Status', 'Created', 'Duration', 'Cost', 'Started by', 'Worker'].map((t) => h('th', { scope: 'col', text: t })))),
        h('tbody', {}, rows)));
    }
    fill(pager,
      h('button', { type: 'button', text: '← Newer', disabled: !cursors.length, onclick: () => { cursor = cursors.pop(); load(); } }),
      h('button', { type: 'button', text: 'Older →', disabled: !page.next_cursor, onclick: () => { cursors.push(cursor); cursor = page.next_cursor; load(); } }));
    drawBulk();
  };
  const load = async () => {
    try {
      page = await api('GET', `/v1/runs?${query()}`);
      for (const id of [...selected]) {
        const run = page.runs.find((r) => r.run_id === id);
        if (run && TERMINAL.has(run.status)) selected.delete(id);
      }
      draw();
    } catch (e) {
      fill(table, errorBox(e));
    }
  };
  await load();
  // Live: the page is read again every two seconds while it is visible.
  const timer = setInterval(() => { if (!document.hidden) load(); }, 2000);
  onLeave(() => clearInterval(timer));
}

export async function bulkCancel(ids, done) {
  const reason = h('input', { id: 'cancel-reason', type: 'text', value: 'cancelled from the dashboard' });
  const dialog = h('dialog', { 'aria-labelledby': 'bulk-title' },
    h('form', { method: 'dialog' },
      h('h2', { id: 'bulk-title', text: `Cancel ${ids.length} run${ids.length === 1 ? '' : 's'}?` }),
      h('p', { text: 'Each stops where it is, in whichever process executes it. This cannot be undone.' }),
      h('label', { for: 'cancel-reason', text: 'Reason' }), reason,
      h('div', { class: 'row' },
        h('button', { value: 'no', text: 'Keep them' }),
        h('button', { value: 'yes', class: 'primary', text: `Cancel ${ids.length}` }))));
  document.body.append(dialog);
  dialog.showModal();
  dialog.addEventListener('close', async () => {
    dialog.remove();
    if (dialog.returnValue !== 'yes') return;
    const results = await Promise.allSettled(ids.map((id) => api('POST', `/v1/runs/${id}/cancel`, { reason: reason.value })));
    const failed = results.filter((r) => r.status === 'rejected').length;
    toast(`Cancelled ${results.length - failed} of ${ids.length}${failed ? `; ${failed} refused` : ''}.`);
    ids.length = 0;
    done();
  });
}
