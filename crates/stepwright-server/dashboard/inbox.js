// The approvals inbox, and the page an approval link opens.

import { schemaForm } from './forms.js';
import { refreshInboxCount } from './signin.js';
import { api, at, errorBox, fill, h, has, json, onLeave, problemText, runLink, shortId, show, status, toast, when } from './ui.js';

/** What a decision did, said in a toast. */
const DECIDED = { approve: 'Approved', reject: 'Rejected', modify: 'Approved with changes', respond: 'Answered' };

/** The inbox's keys: j/k move between requests, a approves, r rejects (not while typing). */
function inboxKeys(list) {
  const cards = () => [...list.querySelectorAll('article[data-interrupt]')];
  const current = () => cards().find((c) => c.contains(document.activeElement)) || null;
  return (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement?.tagName || '')) return;
    const all = cards();
    if (!all.length) return;
    const at = all.indexOf(current());
    const focus = (card) => { card.focus(); card.scrollIntoView({ block: 'nearest' }); };
    if (event.key === 'j') focus(all[Math.min(at + 1, all.length - 1)]);
    else if (event.key === 'k') focus(all[Math.max(at - 1, 0)]);
    else if ((event.key === 'a' || event.key === 'r') && at >= 0) {
      const name = event.key === 'a' ? 'Approve' : 'Reject';
      [...all[at].querySelectorAll('button')].find((b) => b.textContent === name)?.click();
    } else return;
    event.preventDefault();
  };
}

export function decisionForm(item, send, onDone) {
  const problem = h('div', { role: 'alert', class: 'error' });
  const submit = async (body) => {
    problem.textContent = '';
    try {
      const taken = await send(body);
      onDone(taken, body);
    } catch (e) {
      problem.textContent = problemText(e);
    }
  };
  const buttons = h('div', { class: 'row' });
  const parts = [];
  if (item.kind === 'approval') {
    const reason = h('input', { id: `reason-${item.id}`, type: 'text' });
    const editor = schemaForm(item.schema || { title: 'Corrected payload' }, item.payload);
    const modify = h('details', {}, h('summary', { text: 'Modify the payload' }), editor,
      h('button', { type: 'button', text: 'Approve with these changes', onclick: () => { const payload = editor.value(); if (payload !== null) submit({ decision: 'modify', payload }); } }));
    buttons.append(
      h('button', { type: 'button', class: 'primary', text: 'Approve', onclick: () => submit({ decision: 'approve' }) }),
      h('button', { type: 'button', class: 'danger', text: 'Reject', onclick: () => submit({ decision: 'reject', reason: reason.value || undefined }) }));
    parts.push(h('label', { for: `reason-${item.id}`, text: 'Reason (for a rejection)' }), reason, buttons, modify);
  } else {
    const form = schemaForm(item.schema || { title: 'Answer' });
    buttons.append(h('button', { type: 'button', class: 'primary', text: 'Send', onclick: () => { const value = form.value(); if (value !== null) submit({ decision: 'respond', value }); } }));
    parts.push(form, buttons);
  }
  return h('div', {}, ...parts, problem);
}

export function interruptCard(item, send, onDone) {
  return h('article', { class: 'card', tabindex: '-1', 'aria-label': `${item.workflow}: ${item.message}`, 'data-interrupt': item.id },
    h('div', { class: 'spread' },
      h('strong', { text: item.message }),
      h('span', { class: 'muted' }, `${item.kind} · `, item.workflow, ' · ', runLink(item.run_id), ` · ${item.step}`)),
    item.deadline ? h('p', { class: 'muted' }, 'Decide by ', at(item.deadline), ' (', when(item.deadline), ')') : null,
    item.payload !== null && item.payload !== undefined ? h('pre', { text: json(item.payload) }) : null,
    decisionForm(item, send, onDone));
}

export async function inboxView() {
  let items;
  try {
    items = await api('GET', '/v1/interrupts');
  } catch (e) {
    return show(h('h1', { text: 'Approvals' }), errorBox(e));
  }
  document.getElementById('inbox-count').textContent = items.length ? String(items.length) : '';
  if (!has('approver')) {
    return show(h('h1', { text: 'Approvals' }), h('p', { class: 'muted', text: 'This key has no approver role: it decides nothing.' }));
  }
  const list = h('div');
  const draw = () => {
    fill(list, ...(items.length ? items.map((item) => {
      const card = interruptCard(item, (body) => api('POST', `/v1/interrupts/${item.id}/decision`, body), (taken, body) => {
        toast(`${DECIDED[body.decision]}: run ${shortId(taken.run_id)} is ${taken.status} now.`);
        items = items.filter((i) => i.id !== item.id);
        draw();
        refreshInboxCount();
      });
      const linkOut = h('div');
      card.append(h('button', {
        type: 'button',
        class: 'ghost',
        text: 'Make an approval link',
        onclick: async () => {
          try {
            const link = await api('POST', `/v1/interrupts/${item.id}/link`, {});
            fill(linkOut, h('p', {}, 'Decides once, as you, until ', at(link.expires_at), ': ', h('input', { type: 'text', readonly: true, value: link.url, 'aria-label': 'Approval link', class: 'mono' })));
          } catch (e) { fill(linkOut, errorBox(e)); }
        },
      }), linkOut);
      return card;
    }) : [h('p', { class: 'muted', text: 'Nothing waits for you.' })]));
  };
  draw();
  show(h('div', { class: 'spread' }, h('h1', { text: 'Approvals' }), h('span', { class: 'muted', text: 'Keys: j / k next and previous, a approve, r reject' })), list);
  const keys = inboxKeys(list);
  document.addEventListener('keydown', keys);
  onLeave(() => document.removeEventListener('keydown', keys));
  const timer = setInterval(async () => {
    if (document.hidden || document.activeElement && document.activeElement.closest && document.activeElement.closest('article')) return;
    try { items = await api('GET', '/v1/interrupts'); draw(); } catch { /* next time */ }
  }, 5000);
  onLeave(() => clearInterval(timer));
}

export async function linkView(secret) {
  document.getElementById('nav').hidden = true;
  let view;
  try {
    view = await api('GET', '/v1/link', undefined, secret);
  } catch (e) {
    return show(h('h1', { text: 'Approval link' }), errorBox(e));
  }
  show(
    h('h1', { text: 'Approval requested' }),
    h('p', { class: 'muted', text: `You decide as ${view.decide_as}. This link works once${view.expires_at ? `, until ${at(view.expires_at)}` : ''}.` }),
    interruptCard(view.interrupt, (body) => api('POST', '/v1/link/decision', body, secret), (taken) => {
      show(h('h1', { text: 'Thank you' }), h('p', { role: 'status', text: `Decided as ${taken.decided_by}. The run continues; this link is now spent.` }));
    }));
}
