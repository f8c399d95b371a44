// Signing in and out, and who is signed in.

import { route } from './app.js';
import { api, h, has, problemText, session, show, when } from './ui.js';

export function signInView(error) {
  document.getElementById('nav').hidden = true;
  document.getElementById('who').replaceChildren();
  const key = h('input', { id: 'api-key', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'key-hint' });
  const problem = h('div', { role: 'alert', class: 'error' });
  if (error) problem.textContent = error;
  const form = h('form', {
    class: 'card signin',
    'aria-labelledby': 'signin-title',
    onsubmit: async (event) => {
      event.preventDefault();
      problem.textContent = '';
      try {
        session.me = await api('POST', '/v1/session', { api_key: key.value.trim() });
        key.value = '';
        location.hash = '#/runs';
        route();
      } catch (e) {
        problem.textContent = problemText(e);
        key.focus();
      }
    },
  },
  h('h1', { id: 'signin-title', text: 'Sign in' }),
  h('label', { for: 'api-key', text: 'API key' }),
  key,
  h('p', { id: 'key-hint', class: 'muted', text: 'A key from `stepwright keys create`. It is exchanged for a session; the page never keeps it.' }),
  problem,
  h('button', { class: 'primary', type: 'submit', text: 'Sign in' }));
  show(form);
  key.focus();
  // A provider, when the server has one: a plain link, so the browser itself goes there.
  api('GET', '/v1/auth').then((methods) => {
    if (methods.oidc) form.append(h('p', {}, 'or ', h('a', { class: 'button', href: '/v1/auth/oidc/start', text: 'Sign in with single sign-on' })));
  }).catch(() => {});
}

export function showWho() {
  document.getElementById('nav').hidden = false;
  const out = h('button', {
    type: 'button',
    class: 'ghost',
    text: 'Sign out',
    onclick: async () => {
      await api('DELETE', '/v1/session').catch(() => {});
      session.me = null;
      signInView();
    },
  });
  document.getElementById('who').replaceChildren(
    h('span', { text: `${session.me.user} · ${session.me.namespace} · ${session.me.roles.join(', ')}`, 'data-testid': 'who' }), out);
}

export async function refreshInboxCount() {
  if (!session.me) return;
  try {
    const items = await api('GET', '/v1/interrupts');
    document.getElementById('inbox-count').textContent = items.length ? String(items.length) : '';
  } catch { /* the count is a hint */ }
}
