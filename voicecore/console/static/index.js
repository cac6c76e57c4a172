// The calls list: filters kept in the address (a reload or a shared link shows the same list), the
// stored calls newest first, and the calls in progress (/api/live) every 2 s.
import { $, api, el, fmtAgo, fmtDateTime, fmtDuration } from './common.js';

const form = $('#filters');
const LIVE_EVERY_MS = 2000;
const DAY_MS = 24 * 3600 * 1000;

/** A yyyy-mm-dd of the date input as epoch seconds at local midnight (plus `days`). */
function localMidnight(value, days = 0) {
  const [y, m, d] = value.split('-').map(Number);
  return (new Date(y, m - 1, d).getTime() + days * DAY_MS) / 1000;
}

function filtersFromAddress() {
  const params = new URLSearchParams(location.search);
  for (const name of ['from', 'to', 'outcome', 'agent']) {
    const value = params.get(name);
    if (value === null) continue;
    if (name === 'agent' && value && ![...form.agent.options].some((o) => o.value === value)) {
      form.agent.append(el('option', { value }, value)); // until /api/calls lists the agents
    }
    form.elements[name].value = value;
  }
}

function apiQuery() {
  const query = new URLSearchParams({ limit: '200' });
  if (form.from.value) query.set('since', String(localMidnight(form.from.value)));
  if (form.to.value) query.set('until', String(localMidnight(form.to.value, 1)));
  if (form.outcome.value) query.set('outcome', form.outcome.value);
  if (form.agent.value) query.set('agent', form.agent.value);
  return query;
}

function keepFiltersInAddress() {
  const params = new URLSearchParams();
  for (const name of ['from', 'to', 'outcome', 'agent']) if (form.elements[name].value) params.set(name, form.elements[name].value);
  const query = params.toString();
  history.replaceState(null, '', query ? `/?${query}` : '/');
}

function showAgents(agents) {
  const chosen = form.agent.value;
  const options = agents.filter(Boolean).map((name) => el('option', { value: name }, name));
  form.agent.replaceChildren(el('option', { value: '' }, 'Any agent'), ...options);
  if (chosen && !agents.includes(chosen)) form.agent.append(el('option', { value: chosen }, chosen));
  form.agent.value = chosen;
}

function callRow(call) {
  const href = `/calls/${encodeURIComponent(call.call_sid)}`;
  return el('tr', { data: { callSid: call.call_sid } },
    el('td', {}, fmtDateTime(call.started_at)),
    el('td', { class: 'mono' }, el('a', { href }, call.call_sid)),
    el('td', { class: 'num' }, fmtDuration(call.duration_ms)),
    el('td', { class: 'num' }, call.turns),
    el('td', {}, el('span', { class: 'badge', data: { outcome: call.outcome } }, call.outcome || '—'),
      call.complete ? null : el('span', { class: 'muted', title: 'the record ends early' }, ' incomplete')),
    el('td', {}, call.agent || el('span', { class: 'muted' }, call.control)));
}

let listing = 0; // the newest request wins when filters change quickly
async function loadCalls() {
  const mine = ++listing;
  const error = $('#calls-error');
  try {
    const { calls, agents } = await api(`/api/calls?${apiQuery()}`);
    if (mine !== listing) return;
    error.hidden = true;
    showAgents(agents);
    const rows = calls.map(callRow);
    $('#calls').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 6, class: 'empty' }, 'No calls match.'))]));
    $('#count').textContent = `${calls.length} call${calls.length === 1 ? '' : 's'}${calls.length === 200 ? ' (the newest 200)' : ''}`;
  } catch (exc) {
    error.textContent = `The calls could not be loaded: ${exc.message}`;
    error.hidden = false;
  }
}

let liveBefore = new Set();
async function loadLive() {
  try {
    const { calls } = await api('/api/live');
    $('#live-now').replaceChildren(...calls.map((call) => el('li', {},
      el('a', { href: `/calls/${encodeURIComponent(call.call_sid)}`, class: 'mono' }, call.call_sid),
      el('span', { class: 'muted' }, `started ${fmtAgo(call.started_at)} · ${call.events} events`))));
    $('#live-none').hidden = calls.length > 0;
    const now = new Set(calls.map((c) => c.call_sid));
    if ([...liveBefore].some((sid) => !now.has(sid))) setTimeout(loadCalls, 1500); // a call ended: soon stored
    liveBefore = now;
  } catch { /* the next round tries again */ }
}

filtersFromAddress();
form.addEventListener('change', () => { keepFiltersInAddress(); loadCalls(); });
form.addEventListener('reset', () => setTimeout(() => { keepFiltersInAddress(); loadCalls(); }));
loadCalls();
loadLive();
setInterval(loadLive, LIVE_EVERY_MS);
