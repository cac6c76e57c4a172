// The live page: /observe without a call (every live call's events, live only), a card per call with its
// latest events. Calls already in progress when the page opens come from /api/live, their events as
// they arrive.
import { $, api, describe, el, fmtDateTime, fmtOffset, observeUrl, setStatus } from './common.js';

const EVENTS_PER_CARD = 12;
const ENDED_KEPT_MS = 60_000;
const RECONNECT_MS = 1000;
const cards = new Map(); // call sid -> {root, events, count}

function card(callSid, startedAt) {
  let entry = cards.get(callSid);
  if (!entry) {
    const count = el('span', { class: 'muted' });
    const state = el('span', { class: 'badge' }, 'live');
    const events = el('ol', { class: 'events' });
    const root = el('section', { class: 'panel call-card', data: { callSid } },
      el('div', { class: 'head' }, el('a', { href: `/calls/${encodeURIComponent(callSid)}` }, callSid), state),
      el('div', { class: 'muted' }, startedAt ? `started ${fmtDateTime(startedAt).slice(11)} · ` : '', count),
      events);
    entry = { root, events, count, state, seen: 0 };
    cards.set(callSid, entry);
    $('#live-calls').prepend(root);
    $('#no-calls').hidden = true;
  }
  return entry;
}

function add(event) {
  const entry = card(event.call_sid, event.type === 'call.started' ? event.at : null);
  entry.seen += 1;
  entry.count.textContent = `${entry.seen} events seen`;
  entry.events.append(el('li', { class: 'event', data: { seq: event.seq, type: event.type } },
    el('span', { class: 't' }, fmtOffset(event.t_ms)),
    el('span', { class: 'type' }, event.type),
    el('span', { class: 'what', title: describe(event) }, describe(event))));
  while (entry.events.children.length > EVENTS_PER_CARD) entry.events.firstElementChild.remove();
  if (event.type === 'call.ended') {
    entry.root.classList.add('ended');
    entry.state.textContent = event.data.outcome;
    setTimeout(() => {
      entry.root.remove();
      cards.delete(event.call_sid);
      $('#no-calls').hidden = cards.size > 0;
    }, ENDED_KEPT_MS);
  }
}

function connect() {
  const socket = new WebSocket(observeUrl());
  socket.addEventListener('open', () => setStatus('connected'));
  socket.addEventListener('message', (message) => add(JSON.parse(message.data)));
  socket.addEventListener('close', () => {
    setStatus('reconnecting');
    setTimeout(connect, RECONNECT_MS);
  });
}

async function main() {
  const { calls } = await api('/api/live'); // also: no session -> /login, before the socket is refused
  for (const call of calls) card(call.call_sid, call.started_at);
  connect();
}

main();
