// What every console page shares: the JSON API (a 401 sends the browser to /login), a small DOM builder,
// time formats, the page header's log-out link and one-line descriptions of observer events.
// The console's CSP allows no inline script or style: pages load their module from /static/, and set
// sizes through element.style (the CSSOM), never through style="" attributes.

export const $ = (selector, root = document) => root.querySelector(selector);

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const MAX_NEXT_CHARS = 2048;
const DECODE_ROUNDS = 4;

/**
 * Where the login page may send the browser after the login: `raw` when it is a path on this console ('/'
 * for none and for the login page itself), null when it is not one. Refused: another site (`//host`, `/\host`:
 * browsers read a backslash as a slash), a backslash anywhere, a scheme, control characters and spaces, and
 * the same in percent-encoded form. The console refuses the same on its side (voicecore/console/guard.py).
 */
export function safeNextPath(raw) {
  if (raw === null || raw === undefined || raw === '') return '/';
  if (typeof raw !== 'string' || raw.length > MAX_NEXT_CHARS || !/^[\x21-\x7e]*$/.test(raw)) return null;
  let candidate = raw;
  let stable = false;
  for (let round = 0; round < DECODE_ROUNDS && !stable; round += 1) {
    if (!candidate.startsWith('/') || candidate.startsWith('//') || candidate.startsWith('/\\')
      || candidate.includes('\\') || /[\x00-\x1f\x7f]/.test(candidate)) return null;
    let decoded = candidate;
    try { decoded = decodeURIComponent(candidate); } catch { /* a stray %: nothing more to decode */ }
    stable = decoded === candidate;
    candidate = decoded;
  }
  if (!stable) return null;
  if (new URL(raw, location.origin).origin !== location.origin) return null;
  return raw === '/login' || raw.startsWith('/login?') || raw.startsWith('/login/') ? '/' : raw;
}

/** The login page, coming back here once a key is given. */
export function toLogin() {
  location.assign(`/login?next=${encodeURIComponent(location.pathname + location.search)}`);
}

/** GET a JSON API path with the session cookie. A 401 leaves for /login (the promise then never settles). */
export async function api(path) {
  const response = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
  if (response.status === 401) {
    toLogin();
    return new Promise(() => {});
  }
  if (!response.ok) {
    let message = response.statusText;
    try { message = (await response.json()).error || message; } catch { /* not JSON */ }
    throw new ApiError(response.status, message);
  }
  return response.json();
}

/** The WebSocket URL of /observe on this console (the cookie authenticates it). */
export function observeUrl(params = {}) {
  const query = new URLSearchParams(params).toString();
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/observe${query ? `?${query}` : ''}`;
}

/**
 * el('a', {href: '/x', class: 'y', data: {seq: 3}, on: {click: f}}, 'text', child, ...): an element.
 * Children that are null, undefined or false are left out; strings become text (never HTML).
 */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'data') Object.assign(node.dataset, value);
    else if (name === 'on') for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const pad = (n, width = 2) => String(n).padStart(width, '0');

/** Epoch seconds as local date and time: 2025-03-14 09:26:53. */
export function fmtDateTime(epochS) {
  if (epochS === null || epochS === undefined) return '—';
  const d = new Date(epochS * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** A length in ms as 1:04.2 (or 8.3 s under a minute). */
export function fmtDuration(ms) {
  if (ms === null || ms === undefined) return '—';
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  return `${Math.floor(seconds / 60)}:${pad((seconds % 60).toFixed(1), 4)}`;
}

/** A moment of the call (ms from its start) as m:ss.s. */
export function fmtOffset(ms) {
  if (ms === null || ms === undefined) return '';
  const seconds = Math.max(0, ms) / 1000;
  return `${Math.floor(seconds / 60)}:${pad((seconds % 60).toFixed(1), 4)}`;
}

export const fmtMs = (ms) => (ms === null || ms === undefined ? '—' : `${Math.round(ms)} ms`);

/** How long ago an epoch second was, roughly: "12 s ago", "3 min ago". */
export function fmtAgo(epochS) {
  const s = Math.max(0, Date.now() / 1000 - epochS);
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

/** An observer event's data in a few words, for event logs. */
export function describe(event) {
  const d = event.data || {};
  switch (event.type) {
    case 'call.started': return [d.control, d.flow, d.agent].filter(Boolean).join(' · ') + (d.resumed ? ' (resumed)' : '');
    case 'transcript.delta': return `${d.role}${d.final ? ' (final)' : ''}: ${d.text}`;
    case 'response.done': return `${d.response_id} ${d.status || ''}`;
    case 'response.cancelled': return `${d.response_id} (${d.cause})`;
    case 'dtmf': return d.digit;
    case 'tool.called': return `${d.name}(${d.arguments ?? ''})`;
    case 'tool.result': return `${d.ok ? 'ok' : 'failed'}: ${d.output ?? ''}`;
    case 'gate.verdict': return `${d.rejected ? 'rejected' : 'passed'}${d.reason ? `: ${d.reason}` : ''}`;
    case 'model.error': return `${d.code}: ${d.message}`;
    case 'call.ended': return d.outcome;
    default: return d.response_id || d.item_id || d.tag || '';
  }
}

/** The one text that says what a page is doing: "live", "ended", "connecting", ... (#status). */
export function setStatus(text, tone = text) {
  const status = $('#status');
  if (!status) return;
  status.textContent = text;
  status.dataset.tone = tone;
}

// Every page's header has a log-out link.
$('#logout')?.addEventListener('click', async (event) => {
  event.preventDefault();
  await fetch('/api/logout', { method: 'POST', credentials: 'same-origin' });
  location.assign('/login');
});
