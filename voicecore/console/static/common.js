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

/** m:ss.s (h:mm:ss.s from an hour) of a number of tenths of a second: rounded first, so 119.97 s is 2:00.0. */
function clock(tenths) {
  const minutes = Math.floor(tenths / 600);
  const seconds = pad(((tenths % 600) / 10).toFixed(1), 4);
  if (minutes < 60) return `${minutes}:${seconds}`;
  return `${Math.floor(minutes / 60)}:${pad(minutes % 60)}:${seconds}`;
}

/** A length in ms as 1:04.2 (or 8.3 s under a minute). */
export function fmtDuration(ms) {
  if (ms === null || ms === undefined) return '—';
  const tenths = Math.round(Math.max(0, ms) / 100);
  return tenths < 600 ? `${(tenths / 10).toFixed(1)} s` : clock(tenths);
}

/** A moment of the call (ms from its start) as m:ss.s. */
export function fmtOffset(ms) {
  if (ms === null || ms === undefined) return '';
  return clock(Math.round(Math.max(0, ms) / 100));
}

export const fmtMs = (ms) => (ms === null || ms === undefined ? '—' : `${Math.round(ms)} ms`);

/** A latency: 840 ms, or 1.25 s from a second on. */
export function fmtLatency(ms) {
  if (ms === null || ms === undefined) return '—';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

/** Elapsed seconds as m:ss (h:mm:ss from an hour): the live cards' clock. */
export function fmtElapsed(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const m = Math.floor(s / 60);
  return m < 60 ? `${m}:${pad(s % 60)}` : `${Math.floor(m / 60)}:${pad(m % 60)}:${pad(s % 60)}`;
}

const OUTCOME_WORDS = {
  caller_hangup: 'The caller hung up',
  transfer: 'Transferred to a person',
  ended: 'Ended without a hang-up in the record',
  'hangup:completed': 'The agent said goodbye and hung up',
  'hangup:vendor_failures': 'The agent gave up: the model kept failing',
  'hangup:model_unreachable': 'The agent gave up: the model could not be reached',
};

/** How an outcome reads at a glance: the agent finished (good), handed over (neutral), the caller left (neutral),
 * the agent gave up (bad), the record holds no end (warn). */
export function outcomeTone(outcome) {
  if (outcome === 'hangup:vendor_failures' || outcome === 'hangup:model_unreachable' || outcome.endsWith('_gave_up')) return 'bad';
  if (outcome.startsWith('hangup')) return 'good';
  if (outcome === 'ended' || !outcome) return 'warn';
  return 'neutral';
}

/** How a call ended, for a person: the same words as the store's (voicecore/store/figures.py outcome_words). */
export function outcomeWords(outcome) {
  if (outcome in OUTCOME_WORDS) return OUTCOME_WORDS[outcome];
  if (outcome.startsWith('transfer')) return 'Transferred to a person';
  if (outcome.startsWith('hangup:')) {
    const reason = outcome.slice('hangup:'.length);
    if (reason.endsWith('_gave_up')) return 'The agent hung up: its last line could not be spoken';
    return reason ? `The agent hung up (${reason.replaceAll('_', ' ')})` : 'The agent hung up';
  }
  return outcome || 'Unknown';
}

/** How long ago an epoch second was, roughly: "12 s ago", "3 min ago". */
export function fmtAgo(epochS) {
  const s = Math.max(0, Date.now() / 1000 - epochS);
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

/** An observer event in a few words for a person (no internal ids: responses, items and tags stay out). */
export function describe(event) {
  const d = event.data || {};
  switch (event.type) {
    case 'call.started': return ['call started', d.agent, d.flow, d.control].filter(Boolean).join(' · ') + (d.resumed ? ' (taken over)' : '');
    case 'turn.caller_started': return 'the caller started speaking';
    case 'turn.caller_ended': return 'the caller stopped speaking';
    case 'transcript.delta': return `${d.role}${d.final ? '' : ' (so far)'}: ${d.text}`;
    case 'response.started': return 'the agent is preparing an answer';
    case 'response.audio': return 'the agent started speaking';
    case 'response.done': return `the answer is complete${d.status && d.status !== 'completed' ? ` (${d.status})` : ''}`;
    case 'bargein': return 'the caller talked over the agent: the agent stopped';
    case 'response.cancelled': return d.cause === 'gate' ? 'the validation gate stopped an answer' : 'a newer answer replaced this one';
    case 'dtmf': return `the caller pressed ${d.digit}`;
    case 'tool.called': return `the agent called ${d.name}(${d.arguments ?? ''})`;
    case 'tool.result': return `${d.ok ? 'result' : 'failed'}: ${d.output ?? ''}`;
    case 'gate.verdict': return `${d.rejected ? 'rejected' : 'approved'}${d.reason ? `: ${d.reason}` : ''}`;
    case 'model.error': return `${d.code}: ${d.message}`;
    case 'model.lost': return `the model connection was lost${d.fatal ? ' for good' : ''}: ${d.reason}`;
    case 'fallback.line': return `a shipped line played (${d.kind})`;
    case 'call.ended': return outcomeWords(d.outcome || '');
    default: return '';
  }
}

/** The event log's kinds: what each filter shows. */
export const EVENT_KINDS = {
  words: { label: 'Words', types: ['transcript.delta', 'dtmf'] },
  turns: { label: 'Turns', types: ['turn.caller_started', 'turn.caller_ended', 'bargein'] },
  answers: { label: 'Answers', types: ['response.started', 'response.audio', 'response.done', 'response.cancelled', 'fallback.line'] },
  tools: { label: 'Tools', types: ['tool.called', 'tool.result'] },
  gate: { label: 'Gate', types: ['gate.verdict'] },
  problems: { label: 'Problems', types: ['model.error', 'model.lost'] },
  call: { label: 'Call', types: ['call.started', 'call.ended'] },
};

/** The kind of an event type (a key of EVENT_KINDS). */
export function eventKind(type) {
  for (const [kind, { types }] of Object.entries(EVENT_KINDS)) if (types.includes(type)) return kind;
  return 'call';
}

/** The row key an event folds into (the words of one utterance, the approvals of one answer), or ''. */
function foldKey(event) {
  const d = event.data || {};
  if (event.type === 'transcript.delta') return `${d.role}:${d.response_id || d.item_id || ''}`;
  if (event.type === 'gate.verdict' && !d.rejected) return `gate:${d.tag}`;
  return '';
}

/**
 * An event log whose transcript deltas fold into one growing line per utterance (the final text replaces
 * them) and whose gate approvals of one answer fold into one row (the gate releases an answer a few words at
 * a time), filterable by kind. `root` is an <ol>; `withSeq` shows each row's first event number.
 */
export class EventLog {
  constructor(root, { withSeq = true, limit = 0 } = {}) {
    this.root = root;
    this.withSeq = withSeq;
    this.limit = limit;
    this.hidden = new Set();
    this.open = new Map(); // role:response_id|item_id -> the row of its words so far
  }

  setHidden(kinds) {
    this.hidden = new Set(kinds);
    for (const row of this.root.children) row.hidden = this.hidden.has(row.dataset.kind);
  }

  add(event) {
    const atBottom = this.root.scrollHeight - this.root.scrollTop - this.root.clientHeight < 40;
    const d = event.data || {};
    const kind = eventKind(event.type);
    const key = foldKey(event);
    const open = key ? this.open.get(key) : null;
    if (open) {
      const what = open.querySelector('.what');
      open.dataset.seqs += ` ${event.seq}`; // every event a row holds: a folded row holds several
      if (event.type === 'gate.verdict') {
        const count = open.dataset.seqs.split(' ').length;
        what.textContent = `approved up to frame ${d.frames} (${count} verdicts)${d.reason ? `: ${d.reason}` : ''}`;
      } else {
        what.textContent = d.final ? `${d.role}: ${d.text}` : what.textContent + d.text;
        open.dataset.final = d.final ? 'true' : 'false';
        if (d.final) this.open.delete(key);
      }
      return open;
    }
    const row = el('li', { class: 'event', data: { seq: event.seq, seqs: String(event.seq), type: event.type, kind, final: d.final ? 'true' : 'false' } },
      this.withSeq ? el('span', { class: 'seq' }, `#${event.seq}`) : null,
      el('span', { class: 't' }, fmtOffset(event.t_ms)),
      el('span', { class: 'type' }, event.type),
      el('span', { class: `what${event.type === 'transcript.delta' ? ' text' : ''}` }, describe(event)));
    row.hidden = this.hidden.has(kind);
    if (key && !(event.type === 'transcript.delta' && d.final)) this.open.set(key, row);
    this.root.append(row);
    while (this.limit && this.root.children.length > this.limit) this.root.firstElementChild.remove();
    if (atBottom) this.root.scrollTop = this.root.scrollHeight;
    return row;
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
