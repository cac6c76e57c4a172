// One call's page (/calls/SID). A stored call: its header and summary, the turns (how long the caller waited
// for each answer and where that time went), the stereo waveform with the recording, the transcript with
// keypresses, confirmations and tool outcomes, tools, the gate's verdicts per answer, errors and its events,
// all on the recording's clock (the API's `lines`, `answers` and per-turn `heard`: voicecore/console/callview.py).
// A call in progress (or ended but not stored yet): the header and transcript grown live from
// /observe?call=SID&since=SEQ, with the event log; once call.ended arrives and the recorder has stored the
// call, the stored view takes over. Everything that seeks is a button or a focusable slider (keyboard).
import {
  $, api, ApiError, EVENT_KINDS, EventLog, el, fmtDateTime, fmtDuration, fmtLatency, fmtMs, fmtOffset, observeUrl, outcomeTone, setStatus,
} from './common.js';

const sid = decodeURIComponent(location.pathname.split('/')[2] || '');
const callPath = `/api/calls/${encodeURIComponent(sid)}`;
const player = $('#player');
const RECONNECT_MS = 1000;
const STORED_POLL_MS = 1000;
const STORED_POLL_TRIES = 60;
const SEEK_STEP_S = 1;
const SEEK_BIG_STEP_S = 5;
// Up to this long the page plays the WAV (sample-exact seeks, 1.9 MB a minute); a longer call plays the Opus
// rendition (a sixth to a ninth of the size; seeking in Ogg is a bisection over byte ranges, a little less exact)
// when the browser can play it. `?audio=wav` or `?audio=opus` in the page's address chooses.
const OPUS_AFTER_MS = 10 * 60 * 1000;
const OPUS_TYPE = 'audio/ogg; codecs=opus';
const PARTS = [['detection_ms', 'detection', 'endpoint'], ['model_ms', 'model', 'model'], ['runtime_ms', 'runtime', 'runtime'],
  ['carrier_ms', 'carrier', 'carrier']];
const known = (v) => v !== null && v !== undefined;

function show(id, visible = true) { $(id).hidden = !visible; }

/** Play the recording from a moment of the call (a line, a turn). The console serves the recording in byte
 * ranges, so the browser fetches from there instead of from the start. */
function seekTo(ms) {
  if (!player.src || !known(ms)) return;
  player.currentTime = Math.max(0, ms) / 1000;
  player.play().catch(() => { /* the browser may refuse to play without a gesture: the position stays */ });
  $('#audio-panel').scrollIntoView({ block: 'nearest', behavior: 'smooth' });
}

/** Which rendition the player gets: 'wav' or 'opus' (the rule above). */
function recordingFormat(durationMs, chosen = new URLSearchParams(location.search).get('audio')) {
  const opusPlays = player.canPlayType(OPUS_TYPE) !== '';
  if (chosen === 'wav' || (chosen === 'opus' && opusPlays)) return chosen;
  return opusPlays && (durationMs || 0) > OPUS_AFTER_MS ? 'opus' : 'wav';
}

function showRecording(call) {
  const format = recordingFormat(call.duration_ms);
  player.src = `${callPath}/audio.${format}`;
  player.dataset.format = format;
  $('#audio-files').replaceChildren('Download: ',
    el('a', { href: `${callPath}/audio.wav`, download: `${sid}.wav` }, 'WAV'), ' · ',
    el('a', { href: `${callPath}/audio.opus`, download: `${sid}.opus` }, 'Opus'),
    ` (playing the ${format === 'opus' ? 'Opus' : 'WAV'} file)`);
}

// --- the header and the summary ---------------------------------------------------------------------------
function showFacts(facts) {
  $('#facts').replaceChildren(...Object.entries(facts).filter(([, value]) => value !== '' && known(value))
    .map(([name, value]) => el('div', {}, el('dt', {}, name), el('dd', {}, value))));
}

const carrierName = (c) => (c ? c.charAt(0).toUpperCase() + c.slice(1) : 'carrier unknown');

function storedFacts(call) {
  return {
    started: fmtDateTime(call.started_at),
    duration: fmtDuration(call.duration_ms),
    outcome: el('span', { class: 'badge', data: { outcome: call.outcome, tone: outcomeTone(call.outcome) }, title: call.outcome },
      call.outcome_text + (call.complete ? '' : ' (incomplete record)')),
    agent: call.agent,
    call: `${call.direction} · ${carrierName(call.carrier)}`,
    latency: call.latency.p50_ms === null ? '' : `${fmtLatency(call.latency.p50_ms)} median · ${fmtLatency(call.latency.max_ms)} max`,
    control: call.control,
  };
}

const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

function showSummary(call) {
  const s = call.summary;
  const sentences = [`${s.outcome_text} after ${fmtDuration(call.duration_ms)}.`];
  if (s.turns) {
    let turns = `The caller spoke ${plural(s.turns, 'time')}; the agent's answer was heard ${plural(s.answered_turns, 'time')}`;
    if (s.latency_p50_ms !== null) turns += `, ${fmtLatency(s.latency_p50_ms)} after the caller stopped at the median (${fmtLatency(s.latency_max_ms)} at most)`;
    sentences.push(`${turns}.`);
  } else {
    sentences.push('The caller never spoke.');
  }
  if (s.bargeins) sentences.push(`The caller talked over the agent ${plural(s.bargeins, 'time')}.`);
  if (s.keypresses) sentences.push(`The caller pressed ${plural(s.keypresses, 'key')}.`);
  for (const tool of call.tool_calls) sentences.push(`${tool.name}: ${tool.status_text}.`);
  if (s.answers_rejected) sentences.push(`The validation gate rejected ${plural(s.answers_rejected, 'answer')}.`);
  if (s.model_errors) sentences.push(`${plural(s.model_errors, 'model error')}.`);
  $('#summary-text').textContent = sentences.join(' ');
  const figures = {
    'median latency': fmtLatency(s.latency_p50_ms), 'slowest answer': fmtLatency(s.latency_max_ms), turns: s.turns,
    'barge-ins': s.bargeins, 'answers approved': s.answers_approved, 'answers rejected': s.answers_rejected,
    errors: s.model_errors + call.tool_calls.filter((t) => t.status === 'failed').length,
  };
  $('#summary-figures').replaceChildren(...Object.entries(figures).map(([name, value]) => el('div', {}, el('dt', {}, name), el('dd', {}, value))));
  show('#summary-panel');
}

// --- the turns --------------------------------------------------------------------------------------------------
/** Every row from the moment the caller stopped speaking, all at one scale, so the waits compare at a glance;
 * the parts are written out beside the bar (no hovering needed). */
function showTimeline(turns) {
  const heard = turns.map((t) => t.heard).filter(Boolean);
  const span = Math.max(1000, ...heard.map((h) => h.total_ms)) + 800; // the slowest wait and a little of its answer
  const rows = turns.map((turn) => {
    const h = turn.heard;
    const origin = h ? h.ended_ms : (turn.speech_stopped_ms ?? turn.speech_started_ms ?? 0);
    const at = (ms) => `${Math.min(100, Math.max(0, ((ms - origin) / span) * 100))}%`;
    const track = el('div', { class: 'track', 'aria-hidden': 'true' });
    const segment = (kind, from, to) => {
      if (!known(from) || !known(to) || to < from || from - origin > span) return;
      const seg = el('div', { class: `seg ${kind}` });
      seg.style.left = at(from);
      seg.style.width = `${(Math.min(to - origin, span) - (from - origin)) / span * 100}%`;
      track.append(seg);
    };
    let parts = 'no answer heard';
    if (h) {
      let from = h.ended_ms;
      for (const [key, , kind] of PARTS) {
        if (known(h[key])) { segment(kind, from, from + h[key]); from += h[key]; }
      }
      const heardEnd = known(turn.played_ms) ? h.heard_ms + turn.played_ms : h.heard_ms + span;
      segment('heard', h.heard_ms, heardEnd);
      parts = PARTS.filter(([key]) => known(h[key])).map(([key, name]) => `${name} ${Math.round(h[key])}`).join(' · ') + ' ms';
      if (h.ended_by === 'vad') parts += ' (from the model\'s speech end)';
    }
    if (known(turn.barged_in_ms)) {
      const marker = el('div', { class: 'bargein' });
      marker.style.left = at(turn.barged_in_ms);
      track.append(marker);
    }
    const said = [turn.transcript && `caller: ${turn.transcript}`, turn.agent_text && `agent: ${turn.agent_text}`].filter(Boolean).join('  →  ');
    const start = turn.speech_began_ms ?? turn.speech_started_ms ?? origin;
    const total = h ? fmtLatency(h.total_ms) : '—';
    return el('button', {
      type: 'button', class: 'turn', data: { index: turn.index, seekMs: start },
      'aria-label': `Turn ${turn.index + 1} at ${fmtOffset(start)}: heard the answer after ${total}; ${parts}. Play from here.`,
      on: { click: () => seekTo(start) },
    },
    el('span', { class: 'label' }, `Turn ${turn.index + 1}`, el('br'), fmtOffset(start)),
    track,
    el('span', { class: 'latency' }, el('span', { class: 'total' }, total), el('span', { class: 'parts' }, parts),
      known(turn.barged_in_ms) ? el('span', { class: 'parts' }, `barge-in at ${fmtOffset(turn.barged_in_ms)}`) : null),
    said ? el('span', { class: 'said' }, said) : null);
  });
  $('#timeline-scale').textContent = `each row: ${fmtMs(span)} from the caller's speech end`;
  $('#timeline').replaceChildren(...(rows.length ? rows : [el('p', { class: 'empty' }, 'No turns: the caller never spoke.')]));
  show('#timeline-panel');
}

// --- the waveform ----------------------------------------------------------------------------------------------
/** Caller (upper lane) and agent (lower lane) peaks, a playhead following the player; click to seek, or focus
 * it (a slider) and use the arrow keys, Home and End, and Space or Enter to play or pause. */
class Waveform {
  constructor(canvas, audio) {
    this.canvas = canvas;
    this.audio = audio;
    this.data = null;
    canvas.addEventListener('click', (event) => {
      if (!this.data) return;
      this.seek((event.offsetX / canvas.clientWidth) * (this.data.duration_ms / 1000));
    });
    canvas.addEventListener('keydown', (event) => this.key(event));
    const follow = () => { this.draw(); if (!audio.paused) requestAnimationFrame(follow); };
    audio.addEventListener('play', () => requestAnimationFrame(follow));
    audio.addEventListener('seeked', () => this.draw());
    audio.addEventListener('timeupdate', () => this.label());
    window.addEventListener('resize', () => this.draw());
  }

  get seconds() { return this.data ? this.data.duration_ms / 1000 : 0; }

  seek(seconds) {
    this.audio.currentTime = Math.min(Math.max(0, seconds), this.seconds);
    this.draw();
  }

  key(event) {
    if (!this.data) return;
    const step = event.shiftKey ? SEEK_BIG_STEP_S : SEEK_STEP_S;
    const now = this.audio.currentTime;
    const moves = { ArrowRight: now + step, ArrowUp: now + step, ArrowLeft: now - step, ArrowDown: now - step,
      PageUp: now + 10, PageDown: now - 10, Home: 0, End: this.seconds };
    if (event.key in moves) {
      this.seek(moves[event.key]);
    } else if (event.key === ' ' || event.key === 'Enter') {
      if (this.audio.paused) this.audio.play().catch(() => {}); else this.audio.pause();
    } else {
      return;
    }
    event.preventDefault();
  }

  label() {
    const now = this.audio.currentTime || 0;
    this.canvas.setAttribute('aria-valuemax', String(Math.round(this.seconds)));
    this.canvas.setAttribute('aria-valuenow', String(Math.round(now)));
    this.canvas.setAttribute('aria-valuetext', `${fmtOffset(now * 1000)} of ${fmtOffset(this.seconds * 1000)}`);
  }

  async load(url) {
    const points = Math.min(2000, Math.max(200, Math.round(this.canvas.clientWidth || 800)));
    this.data = await api(`${url}?points=${points}`);
    this.draw();
    this.canvas.dataset.drawn = 'true';
  }

  draw() {
    if (!this.data) return;
    this.label();
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
    const x = this.seconds > 0 ? Math.min(1, this.audio.currentTime / this.seconds) * width : 0;
    g.fillStyle = color('--ink');
    g.fillRect(x - ratio, 0, 2 * ratio, height);
  }
}

// --- transcript, tools, verdicts, errors ------------------------------------------------------------------------
const WHO = { caller: 'caller', agent: 'agent', keypad: 'keypad', confirmation: 'confirm', tool: 'tool' };

function transcriptLine(line) {
  const note = line.kind === 'agent' && !line.heard ? el('span', { class: 'note' }, ' (never played)') : null;
  return el('div', { class: `line${line.pending ? ' pending' : ''}`, data: { speaker: line.speaker, kind: line.kind, status: line.status || '', atMs: line.at_ms } },
    el('button', { class: 'at', type: 'button', 'aria-label': `play from ${fmtOffset(line.at_ms)}`, on: { click: () => seekTo(line.at_ms) } },
      fmtOffset(line.at_ms)),
    el('span', { class: 'who' }, WHO[line.kind] || line.speaker),
    el('span', { class: 'text' }, line.text, note));
}

function showTranscript(call) {
  const lines = call.lines.map(transcriptLine);
  $('#transcript').replaceChildren(...(lines.length ? lines : [el('p', { class: 'empty' }, 'Nothing was said.')]));
  show('#transcript-panel');
}

function showTable(panel, body, rows) {
  $(body).replaceChildren(...rows);
  show(panel, rows.length > 0);
}

const pre = (value) => el('pre', {}, typeof value === 'string' ? value : JSON.stringify(value, null, 1));
const TOOL_BADGE = { failed: 'bad', refused: 'bad', declined: 'warn', unanswered: 'warn', superseded: 'warn', 'no result': 'warn' };

function citation(c) {
  const where = `${c.file ?? '?'}${known(c.line) ? `:${c.line}` : ''}`;
  return el('li', {}, c.number ? `${c.number} — ` : '', el('span', { class: 'mono' }, where), c.snippet ? el('span', { class: 'muted' }, ` “${c.snippet}”`) : null);
}

function showDetails(call) {
  showTable('#tools-panel', '#tools', call.tool_calls.map((tool) => el('tr', { data: { status: tool.status } },
    el('td', { class: 'mono' }, el('button', { class: 'at', type: 'button', on: { click: () => seekTo(tool.called_ms) } }, fmtOffset(tool.called_ms))),
    el('td', {}, tool.name),
    el('td', {}, pre(tool.arguments ?? '')),
    el('td', {}, el('span', { class: `badge ${TOOL_BADGE[tool.status] || 'good'}` }, tool.status), ' ', tool.status_text,
      tool.output ? pre(tool.output) : (tool.reply && !tool.ran ? pre(tool.reply) : null)),
    el('td', { class: 'num' }, fmtMs(tool.tool_ms)),
    el('td', { class: 'num' }, fmtMs(tool.consent_wait_ms)))));
  showTable('#verdicts-panel', '#verdicts', call.answers.map((answer) => el('tr', { data: { verdict: answer.verdict, tag: answer.tag } },
    el('td', { class: 'mono' }, el('button', { class: 'at', type: 'button', on: { click: () => seekTo(answer.spoken_ms ?? answer.at_ms) } },
      fmtOffset(answer.spoken_ms ?? answer.at_ms))),
    el('td', { class: 'answer-text' }, answer.text || el('span', { class: 'muted' }, '(no words)')),
    el('td', {}, el('span', { class: `badge ${answer.verdict === 'rejected' ? 'bad' : 'good'}` }, answer.verdict)),
    el('td', {}, answer.reason ? el('div', {}, answer.reason) : null,
      answer.citations.length ? el('ul', {}, ...answer.citations.map(citation)) : (answer.reason ? null : el('span', { class: 'muted' }, 'nothing to cite')),
      el('details', { class: 'steps' }, el('summary', {}, `${plural(answer.steps.length, 'verdict')} (the words released step by step)`),
        el('ol', {}, ...answer.steps.map((step) => el('li', {}, `${fmtOffset(step.at_ms)} ${step.rejected ? 'rejected' : 'approved'}`
          + `${known(step.frames) ? ` up to frame ${step.frames}` : ''}${step.reason ? `: ${step.reason}` : ''}`))))))));
  showTable('#errors-panel', '#errors', call.errors.map((error) => el('tr', {},
    el('td', { class: 'mono' }, fmtOffset(error.at_ms)),
    el('td', { class: 'mono' }, error.code),
    el('td', {}, error.message))));
}

// --- the event log --------------------------------------------------------------------------------------------
const eventLog = new EventLog($('#live-events'));

function eventFilter() {
  const boxes = Object.entries(EVENT_KINDS).map(([kind, { label }]) => el('label', {},
    el('input', { type: 'checkbox', name: kind, checked: true, on: { change: () => {
      eventLog.setHidden([...$('#event-filter').querySelectorAll('input')].filter((b) => !b.checked).map((b) => b.name));
    } } }), label));
  $('#event-filter').append(...boxes);
}

function logEvent(event) {
  eventLog.add(event);
  show('#live-panel');
}

// --- the stored view -------------------------------------------------------------------------------------------
async function showStored(call, withEvents) {
  setStatus('ended');
  document.title = `${sid} · voicecore console`;
  showFacts(storedFacts(call));
  showSummary(call);
  showTimeline(call.turns);
  showTranscript(call);
  showDetails(call);
  show('#audio-panel');
  showRecording(call);
  const waveform = new Waveform($('#waveform'), player);
  const loads = [waveform.load(`${callPath}/waveform`).catch((exc) => {
    $('#audio-panel').replaceChildren(el('h2', {}, 'Audio'), el('p', { class: 'muted' }, `No audio: ${exc.message}`));
  })];
  if (withEvents) loads.push(api(`${callPath}/events?since=0`).then((events) => events.forEach(logEvent)));
  await Promise.all(loads);
  document.body.dataset.ready = 'true';
  document.body.dataset.readyMs = String(Math.round(performance.now()));
}

// --- the live view ---------------------------------------------------------------------------------------------
/** The transcript as it grows: words joined per utterance, a final replacing its deltas. */
class LiveTranscript {
  constructor(root) {
    this.root = root;
    this.lines = new Map(); // role:response_id|item_id -> its .line element
  }

  line(key, speaker, atMs) {
    let line = this.lines.get(key);
    if (!line) {
      line = transcriptLine({ kind: speaker, speaker, at_ms: atMs, text: '', heard: true, pending: true });
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
      text.textContent = d.final || (line.classList.contains('pending') && d.role === 'caller') ? d.text : text.textContent + d.text;
      line.classList.toggle('pending', false);
    } else if (event.type === 'dtmf') {
      this.root.append(transcriptLine({ kind: 'keypad', speaker: 'caller', at_ms: event.t_ms, text: `pressed ${d.digit}`, heard: true }));
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
        showFacts({ started: fmtDateTime(event.at), agent: event.data.agent, flow: event.data.flow, control: event.data.control });
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
      $('#transcript').replaceChildren();
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
  eventFilter();
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
