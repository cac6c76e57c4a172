// One call's page (/calls/SID). A stored call: its header, the turn timeline (where each turn's latency
// went), the stereo waveform with the recording, the transcript, tools, verdicts, errors and its events.
// A call in progress (or ended but not stored yet): the same header and transcript grown live from
// /observe?call=SID&since=SEQ, with the event log; once call.ended arrives and the recorder has stored
// the call, the stored view takes over.
import { $, api, ApiError, describe, el, fmtDateTime, fmtDuration, fmtMs, fmtOffset, observeUrl, setStatus } from './common.js';

const sid = decodeURIComponent(location.pathname.split('/')[2] || '');
const callPath = `/api/calls/${encodeURIComponent(sid)}`;
const player = $('#player');
const RECONNECT_MS = 1000;
const STORED_POLL_MS = 1000;
const STORED_POLL_TRIES = 60;

function show(id, visible = true) { $(id).hidden = !visible; }

/** Play the recording from a moment of the call (a transcript time, a turn). The console serves the WAV in
 * byte ranges, so the browser fetches from there instead of from the start. */
function seekTo(ms) {
  if (!player.src || ms === null || ms === undefined) return;
  player.currentTime = ms / 1000;
  player.play().catch(() => { /* the browser may refuse to play without a gesture: the position stays */ });
  $('#audio-panel').scrollIntoView({ block: 'nearest', behavior: 'smooth' });
}

// --- the header -------------------------------------------------------------------------------------------
function showFacts(facts) {
  $('#facts').replaceChildren(...Object.entries(facts).filter(([, value]) => value !== '' && value !== null && value !== undefined)
    .map(([name, value]) => el('div', {}, el('dt', {}, name), el('dd', {}, value))));
}

function storedFacts(call) {
  return {
    started: fmtDateTime(call.started_at),
    duration: fmtDuration(call.duration_ms),
    outcome: el('span', { class: 'badge', data: { outcome: call.outcome } }, call.outcome + (call.complete ? '' : ' (incomplete record)')),
    agent: call.agent,
    flow: call.flow,
    control: call.control,
    turns: call.turns.length,
  };
}

// --- the turn timeline --------------------------------------------------------------------------------------
/** Every row from its caller's speech start, all at one scale, so the rows' waits compare at a glance. */
function showTimeline(turns) {
  const origin = (t) => t.speech_started_ms ?? t.speech_stopped_ms ?? t.response_requested_ms ?? t.first_audio_ms ?? 0;
  const heardEnd = (t) => (t.first_played_ms ?? null) !== null && (t.played_ms ?? null) !== null ? t.first_played_ms + t.played_ms : null;
  const last = (t) => Math.max(...[t.speech_stopped_ms, t.response_requested_ms, t.first_audio_ms, t.barged_in_ms,
    t.first_played_ms, heardEnd(t)]
    .filter((v) => v !== null && v !== undefined), origin(t));
  const span = Math.max(1, ...turns.map((t) => last(t) - origin(t)));
  const rows = turns.map((turn) => {
    const at = (ms) => `${((ms - origin(turn)) / span) * 100}%`;
    const track = el('div', { class: 'track' });
    const segment = (kind, from, to, title) => {
      if (from === null || from === undefined || to === null || to === undefined || to < from) return;
      const seg = el('div', { class: `seg ${kind}`, title: `${title}: ${fmtMs(to - from)}` });
      seg.style.left = at(from);
      seg.style.width = `${((to - from) / span) * 100}%`;
      track.append(seg);
    };
    segment('speech', turn.speech_started_ms, turn.speech_stopped_ms, 'caller speaking');
    if (turn.response_requested_ms !== null && turn.response_requested_ms !== undefined) {
      segment('endpoint', turn.speech_stopped_ms, turn.response_requested_ms, 'speech end → response requested');
      segment('model', turn.response_requested_ms, turn.first_audio_ms, 'requested → first audio');
    } else {
      segment('model', turn.speech_stopped_ms, turn.first_audio_ms, 'speech end → first audio (the model requested it)');
    }
    // first audio from the model -> its first frame played to the caller: the runtime's own share
    segment('runtime', turn.first_audio_ms, turn.first_played_ms, 'first audio → first frame played (voicecore)');
    segment('heard', turn.first_played_ms, heardEnd(turn), 'the answer played to the caller');
    if (turn.barged_in_ms !== null && turn.barged_in_ms !== undefined) {
      const marker = el('div', { class: 'bargein', title: `barge-in at ${fmtOffset(turn.barged_in_ms)}` });
      marker.style.left = at(turn.barged_in_ms);
      track.append(marker);
    }
    const said = [turn.transcript && `caller: ${turn.transcript}`, turn.agent_text && `agent: ${turn.agent_text}`].filter(Boolean).join('\n');
    return el('div', { class: 'turn', data: { index: turn.index }, title: said || null, on: { click: () => seekTo(turn.speech_started_ms) } },
      el('div', { class: 'label' }, `Turn ${turn.index + 1}`, el('br'), fmtOffset(origin(turn))),
      track,
      el('div', { class: 'latency', title: 'speech end → first audio' }, fmtMs(turn.latency_ms)));
  });
  $('#timeline-scale').textContent = `each row: ${fmtMs(span)} from the caller's first word`;
  $('#timeline').replaceChildren(...(rows.length ? rows : [el('p', { class: 'empty' }, 'No turns: the caller never spoke.')]));
  show('#timeline-panel');
}

// --- the waveform ----------------------------------------------------------------------------------------------
/** Caller (upper lane) and agent (lower lane) peaks, a playhead following the player, click to seek. */
class Waveform {
  constructor(canvas, audio) {
    this.canvas = canvas;
    this.audio = audio;
    this.data = null;
    canvas.addEventListener('click', (event) => {
      if (!this.data) return;
      const fraction = event.offsetX / canvas.clientWidth;
      audio.currentTime = (fraction * this.data.duration_ms) / 1000;
      this.draw();
    });
    const follow = () => { this.draw(); if (!audio.paused) requestAnimationFrame(follow); };
    audio.addEventListener('play', () => requestAnimationFrame(follow));
    audio.addEventListener('seeked', () => this.draw());
    window.addEventListener('resize', () => this.draw());
  }

  async load(url) {
    const points = Math.min(2000, Math.max(200, Math.round(this.canvas.clientWidth || 800)));
    this.data = await api(`${url}?points=${points}`);
    this.draw();
    this.canvas.dataset.drawn = 'true';
  }

  draw() {
    if (!this.data) return;
    const { canvas } = this;
    const ratio = window.devicePixelRatio || 1;
    const width = Math.max(1, Math.round(canvas.clientWidth * ratio));
    const height = Math.max(1, Math.round(canvas.clientHeight * ratio));
    if (canvas.width !== width || canvas.height !== height) { canvas.width = width; canvas.height = height; }
    const g = canvas.getContext('2d');
    const css = getComputedStyle(document.documentElement);
    const color = (name) => css.getPropertyValue(name).trim();
    g.clearRect(0, 0, width, height);
    const lane = (peaks, middle, half, fill) => {
      g.fillStyle = fill;
      const step = width / peaks.length;
      peaks.forEach((peak, i) => {
        const h = Math.max(ratio * 0.5, peak * half);
        g.fillRect(i * step, middle - h, Math.max(ratio, step - ratio * 0.3), 2 * h);
      });
    };
    lane(this.data.caller, height / 4, height / 4 - 4 * ratio, color('--caller'));
    lane(this.data.agent, (3 * height) / 4, height / 4 - 4 * ratio, color('--agent'));
    g.fillStyle = color('--line');
    g.fillRect(0, height / 2, width, ratio);
    const seconds = this.data.duration_ms / 1000;
    const x = seconds > 0 ? Math.min(1, this.audio.currentTime / seconds) * width : 0;
    g.fillStyle = color('--ink');
    g.fillRect(x - ratio, 0, 2 * ratio, height);
  }
}

// --- transcript, tools, verdicts, errors ------------------------------------------------------------------------
function transcriptLine(speaker, atMs, text, pending = false) {
  return el('div', { class: `line${pending ? ' pending' : ''}`, data: { speaker } },
    el('button', { class: 'at', type: 'button', title: 'play from here', on: { click: () => seekTo(atMs) } }, fmtOffset(atMs)),
    el('span', { class: 'who' }, speaker),
    el('span', { class: 'text' }, text));
}

/** The stored transcript, with the caller's untranscribed turns shown where they happened. */
function showTranscript(call) {
  const lines = call.transcript.map((line) => ({ ...line, pending: false }));
  for (const turn of call.turns) {
    if (!turn.transcript && turn.speech_started_ms !== null) {
      lines.push({ speaker: 'caller', at_ms: turn.speech_started_ms, text: '(spoke; no transcription)', pending: true });
    }
  }
  lines.sort((a, b) => a.at_ms - b.at_ms);
  $('#transcript').replaceChildren(...lines.map((l) => transcriptLine(l.speaker, l.at_ms, l.text, l.pending)));
  if (!lines.length) $('#transcript').append(el('p', { class: 'empty' }, 'Nothing was said.'));
  show('#transcript-panel');
}

function showTable(panel, body, rows) {
  $(body).replaceChildren(...rows);
  show(panel, rows.length > 0);
}

const pre = (value) => el('pre', {}, typeof value === 'string' ? value : JSON.stringify(value, null, 1));

function showDetails(call) {
  showTable('#tools-panel', '#tools', call.tool_calls.map((tool) => el('tr', {},
    el('td', { class: 'mono' }, fmtOffset(tool.called_ms)),
    el('td', {}, tool.name),
    el('td', {}, pre(tool.arguments ?? '')),
    el('td', {}, tool.ran ? el('span', { class: `badge${tool.ok ? '' : ' bad'}` }, tool.ok ? 'ok' : 'failed') : el('span', { class: 'badge bad' }, 'not run'),
      tool.output ? pre(tool.output) : null),
    el('td', { class: 'num' }, tool.result_ms !== null && tool.result_ms !== undefined ? fmtMs(tool.result_ms - tool.called_ms) : '—'))));
  showTable('#verdicts-panel', '#verdicts', call.verdicts.map((verdict) => el('tr', {},
    el('td', { class: 'mono' }, fmtOffset(verdict.at_ms)),
    el('td', {}, el('span', { class: `badge${verdict.rejected ? ' bad' : ''}` }, verdict.rejected ? 'rejected' : 'passed'), ' ', verdict.tag),
    el('td', {}, verdict.reason || ''),
    el('td', {}, pre(verdict.citations ?? '')))));
  showTable('#errors-panel', '#errors', call.errors.map((error) => el('tr', {},
    el('td', { class: 'mono' }, fmtOffset(error.at_ms)),
    el('td', { class: 'mono' }, error.code),
    el('td', {}, error.message))));
}

// --- the event log --------------------------------------------------------------------------------------------
function logEvent(event) {
  const log = $('#live-events');
  const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  log.append(el('li', { class: 'event', data: { seq: event.seq, type: event.type } },
    el('span', { class: 'seq' }, `#${event.seq}`),
    el('span', { class: 't' }, fmtOffset(event.t_ms)),
    el('span', { class: 'type' }, event.type),
    el('span', { class: 'what', title: describe(event) }, describe(event))));
  if (atBottom) log.scrollTop = log.scrollHeight;
  show('#live-panel');
}

// --- the stored view -------------------------------------------------------------------------------------------
async function showStored(call, withEvents) {
  setStatus('ended');
  document.title = `${sid} · voicecore console`;
  showFacts(storedFacts(call));
  showTimeline(call.turns);
  showTranscript(call);
  showDetails(call);
  show('#audio-panel');
  player.src = `${callPath}/audio.wav`;
  const waveform = new Waveform($('#waveform'), player);
  const loads = [waveform.load(`${callPath}/waveform`).catch((exc) => {
    $('#audio-panel').replaceChildren(el('h2', {}, 'Audio'), el('p', { class: 'muted' }, `No audio: ${exc.message}`));
  })];
  if (withEvents) loads.push(api(`${callPath}/events?since=0`).then((events) => events.forEach(logEvent)));
  await Promise.all(loads);
}

// --- the live view ---------------------------------------------------------------------------------------------
/** The transcript as it grows: agent deltas joined per response, a final replacing its deltas. */
class LiveTranscript {
  constructor(root) {
    this.root = root;
    this.lines = new Map(); // role:response_id|item_id -> its .line element
  }

  line(key, speaker, atMs) {
    let line = this.lines.get(key);
    if (!line) {
      line = transcriptLine(speaker, atMs, '', true);
      this.lines.set(key, line);
      this.root.append(line);
    }
    return line;
  }

  add(event) {
    const d = event.data;
    if (event.type === 'turn.caller_started') {
      $('.text', this.line(`caller:${d.item_id}`, 'caller', event.t_ms)).textContent = 'speaking…';
    } else if (event.type === 'turn.caller_ended') {
      const line = this.line(`caller:${d.item_id}`, 'caller', event.t_ms);
      if (line.classList.contains('pending')) $('.text', line).textContent = '(spoke; transcribing…)';
    } else if (event.type === 'transcript.delta') {
      const line = this.line(`${d.role}:${d.response_id || d.item_id || event.seq}`, d.role, event.t_ms);
      const text = $('.text', line);
      text.textContent = d.final || line.classList.contains('pending') && d.role === 'caller' ? d.text : text.textContent + d.text;
      line.classList.toggle('pending', false);
    }
  }
}

function watchLive() {
  setStatus('connecting');
  show('#transcript-panel');
  show('#live-panel');
  const transcript = new LiveTranscript($('#transcript'));
  let lastSeq = 0;
  let ended = false;
  const connect = () => {
    const socket = new WebSocket(observeUrl({ call: sid, since: lastSeq }));
    socket.addEventListener('open', () => { if (!ended) setStatus('live'); });
    socket.addEventListener('message', (message) => {
      const event = JSON.parse(message.data);
      if (event.seq <= lastSeq) return; // a reconnect's replay overlaps what we have
      lastSeq = event.seq;
      logEvent(event);
      transcript.add(event);
      if (event.type === 'call.started') {
        showFacts({ started: fmtDateTime(event.at), control: event.data.control, flow: event.data.flow, agent: event.data.agent });
      } else if (event.type === 'call.ended') {
        ended = true;
        socket.close(1000);
        setStatus('ended');
        awaitStored();
      }
    });
    socket.addEventListener('close', () => {
      if (ended) return;
      setStatus('reconnecting');
      setTimeout(connect, RECONNECT_MS);
    });
  };
  connect();
}

/** After call.ended: the recorder stores the call a moment later; then the stored view replaces the live one. */
async function awaitStored() {
  for (let i = 0; i < STORED_POLL_TRIES; i += 1) {
    const detail = await api(callPath);
    if (detail.stored) {
      await showStored(detail.call, false); // the event log already holds every event
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, STORED_POLL_MS));
  }
  $('#call-error').textContent = 'The call ended but is not in the store yet.';
  show('#call-error');
}

async function main() {
  $('#sid').textContent = sid;
  document.title = `${sid} · voicecore console`;
  try {
    const detail = await api(callPath);
    if (detail.live || !detail.stored) watchLive();
    else await showStored(detail.call, true);
  } catch (exc) {
    setStatus(exc instanceof ApiError && exc.status === 404 ? 'not found' : 'error', 'error');
    $('#call-error').textContent = exc instanceof ApiError && exc.status === 404 ? 'No such call.' : `The call could not be loaded: ${exc.message}`;
    show('#call-error');
  }
}

main();
