// The live page: /observe without a call (every live call's events, live only), a card per call: its agent,
// how long it has been going, what the caller and the agent are doing, and their words (deltas folded into
// one line per utterance). Calls already in progress when the page opens come from /api/live, their events as
// they arrive. No internal ids (responses, items, tags) on a card: the call's own id links to its page.
import { $, api, el, fmtDateTime, fmtElapsed, fmtOffset, observeUrl, outcomeTone, outcomeWords, setStatus } from './common.js';

const LINES_PER_CARD = 8;
const ENDED_KEPT_MS = 60_000;
const RECONNECT_MS = 1000;
const TICK_MS = 1000;
const cards = new Map(); // call sid -> its card's parts

const STATE = {
  'turn.caller_started': 'caller speaking', 'turn.caller_ended': 'listening', 'response.started': 'agent preparing an answer',
  'response.audio': 'agent speaking', 'response.done': 'agent done', bargein: 'caller talked over the agent',
  'tool.called': 'running a tool', dtmf: 'caller pressed a key',
};

function card(callSid, startedAt, agent) {
  let entry = cards.get(callSid);
  if (!entry) {
    const who = el('span', { class: 'who' }, agent || 'Call');
    const state = el('span', { class: 'badge' }, 'live');
    const elapsed = el('span', { class: 'elapsed' }, '0:00');
    const doing = el('span', { class: 'muted' }, '');
    const said = el('ol', { class: 'said' });
    const root = el('section', { class: 'panel call-card', data: { callSid } },
      el('div', { class: 'head' }, who, state),
      el('div', { class: 'meta' }, elapsed, doing,
        el('span', { class: 'muted' }, startedAt ? `since ${fmtDateTime(startedAt).slice(11)}` : ''),
        el('a', { class: 'sid', href: `/calls/${encodeURIComponent(callSid)}` }, callSid)),
      said);
    entry = { root, who, state, elapsed, doing, said, startedAt: startedAt || Date.now() / 1000, ended: false, open: new Map() };
    cards.set(callSid, entry);
    $('#live-calls').prepend(root);
    $('#no-calls').hidden = true;
  }
  if (startedAt) entry.startedAt = startedAt;
  if (agent) entry.who.textContent = agent;
  return entry;
}

function line(entry, speaker, atMs, text) {
  const row = el('li', { data: { speaker } }, el('span', { class: 't' }, fmtOffset(atMs)),
    el('span', { class: 'who' }, speaker === 'event' ? '' : speaker), el('span', { class: 'text' }, text));
  entry.said.append(row);
  while (entry.said.children.length > LINES_PER_CARD) entry.said.firstElementChild.remove();
  entry.said.scrollTop = entry.said.scrollHeight;
  return row;
}

function add(event) {
  const d = event.data || {};
  const entry = card(event.call_sid, event.type === 'call.started' ? event.at : null, event.type === 'call.started' ? d.agent : '');
  if (STATE[event.type]) entry.doing.textContent = STATE[event.type];
  if (event.type === 'transcript.delta') {
    const key = `${d.role}:${d.response_id || d.item_id || ''}`;
    let row = entry.open.get(key);
    if (!row || !row.isConnected) {
      row = line(entry, d.role, event.t_ms, '');
      entry.open.set(key, row);
    }
    const text = row.querySelector('.text');
    text.textContent = d.final ? d.text : text.textContent + d.text;
    if (d.final) entry.open.delete(key);
  } else if (event.type === 'dtmf') {
    line(entry, 'caller', event.t_ms, `pressed ${d.digit}`);
  } else if (event.type === 'tool.called') {
    line(entry, 'event', event.t_ms, `tool ${d.name}`);
  } else if (event.type === 'model.error' || event.type === 'model.lost') {
    line(entry, 'event', event.t_ms, `problem: ${d.message || d.reason || d.code}`);
  } else if (event.type === 'call.ended') {
    entry.ended = true;
    entry.root.classList.add('ended');
    entry.state.textContent = outcomeWords(d.outcome || '');
    entry.state.dataset.tone = outcomeTone(d.outcome || '');
    entry.doing.textContent = 'ended';
    setTimeout(() => {
      entry.root.remove();
      cards.delete(event.call_sid);
      $('#no-calls').hidden = cards.size > 0;
    }, ENDED_KEPT_MS);
  }
}

function tick() {
  const now = Date.now() / 1000;
  for (const entry of cards.values()) if (!entry.ended) entry.elapsed.textContent = fmtElapsed(now - entry.startedAt);
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
  for (const call of calls) card(call.call_sid, call.started_at, call.agent);
  tick();
  setInterval(tick, TICK_MS);
  connect();
}

main();
