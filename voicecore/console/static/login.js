// The login page: the key goes once, in a header, to POST /api/session, which answers a session cookie;
// then on to where the visitor was sent from (a path on this console only: safeNextPath).
import { $, safeNextPath } from './common.js';

$('#login').addEventListener('submit', async (event) => {
  event.preventDefault();
  const error = $('#login-error');
  error.hidden = true;
  const key = $('#key').value.trim();
  try {
    const response = await fetch('/api/session', {
      method: 'POST', credentials: 'same-origin', headers: { Authorization: `Bearer ${key}` },
    });
    if (response.ok) {
      location.assign(safeNextPath(new URLSearchParams(location.search).get('next')) ?? '/');
      return;
    }
    let message = `The console answered ${response.status}.`;
    if (response.status === 401) message = 'That key is not valid.';
    else {
      try { message = `The console answered ${response.status}: ${(await response.json()).error}`; } catch { /* not JSON */ }
    }
    error.textContent = message;
  } catch {
    error.textContent = 'The console cannot be reached.';
  }
  error.hidden = false;
});
