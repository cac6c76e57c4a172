// The login page: the key goes once, in a header, to /api/session, which answers a session cookie;
// then on to where the visitor was sent from (a path on this console only).
import { $ } from './common.js';

function nextPath() {
  const next = new URLSearchParams(location.search).get('next') || '/';
  return next.startsWith('/') && !next.startsWith('//') && !next.startsWith('/login') ? next : '/';
}

$('#login').addEventListener('submit', async (event) => {
  event.preventDefault();
  const error = $('#login-error');
  error.hidden = true;
  const key = $('#key').value.trim();
  try {
    const response = await fetch('/api/session', { credentials: 'same-origin', headers: { Authorization: `Bearer ${key}` } });
    if (response.ok) {
      location.assign(nextPath());
      return;
    }
    error.textContent = response.status === 401 ? 'That key is not valid.' : `The console answered ${response.status}.`;
  } catch {
    error.textContent = 'The console cannot be reached.';
  }
  error.hidden = false;
});
