// The calls list: search and filters kept in the address (a reload or a shared link shows the same list), the
// stored calls newest first a page at a time ("Show more calls" follows the API's page marker), the export of
// everything the filters match, and the calls in progress (/api/live) every 2 s.
import { $, api, el, fmtAgo, fmtDateTime, fmtDuration, fmtElapsed, fmtLatency, outcomeTone, outcomeWords } from './common.js';

const form = $('#filters');
const LIVE_EVERY_MS = 2000;
const DAY_MS = 24 * 3600 * 1000;
const PAGE = 100;
const FILTERS = ['q', 'from', 'to', 'agent', 'outcome', 'carrier', 'direction', 'min_latency_ms', 'errors', 'bargeins'];
const SEARCH_PAUSE_MS = 300;

/** A yyyy-mm-dd of the date input as epoch seconds at local midnight (plus `days`). */
function localMidnight(value, days = 0) {
  const [y, m, d] = value.split('-').map(Number);
  return (new Date(y, m - 1, d).getTime() + days * DAY_MS) / 1000;
}

function value(name) {
  const field = form.elements[name];
  return field.type === 'checkbox' ? (field.checked ? '1' : '') : field.value.trim();
}

function ensureOption(select, wanted) {
  if (wanted && ![...select.options].some((o) => o.value === wanted)) select.append(el('option', { value: wanted }, wanted));
}

function filtersFromAddress() {
  const params = new URLSearchParams(location.search);
  for (const name of FILTERS) {
    const wanted = params.get(name);
    if (wanted === null) continue;
    const field = form.elements[name];
    if (field.type === 'checkbox') field.checked = wanted === '1';
    else {
      if (field.tagName === 'SELECT') ensureOption(field, wanted); // agents and carriers come with the first page
      field.value = wanted;
    }
  }
}

/** The API's filters (the list's and the export's). */
function filterQuery() {
  const query = new URLSearchParams();
  if (value('from')) query.set('since', String(localMidnight(value('from'))));
  if (value('to')) query.set('until', String(localMidnight(value('to'), 1)));
  for (const name of ['q', 'agent', 'outcome', 'carrier', 'direction', 'min_latency_ms', 'errors', 'bargeins']) {
    if (value(name)) query.set(name, value(name));
  }
  return query;
}

function filtered() { return FILTERS.some((name) => value(name)); }

function keepFiltersInAddress() {
  const params = new URLSearchParams();
  for (const name of FILTERS) if (value(name)) params.set(name, value(name));
  const query = params.toString();
  history.replaceState(null, '', query ? `/?${query}` : '/');
  const exportQuery = filterQuery();
  for (const kind of ['csv', 'json']) {
    exportQuery.set('format', kind);
    $(`#export-${kind}`).href = `/api/export?${exportQuery}`;
  }
}

function showChoices(select, values, anyLabel, label = (v) => v) {
  const chosen = select.value;
  const options = values.filter(Boolean).map((v) => el('option', { value: v }, label(v)));
  select.replaceChildren(el('option', { value: '' }, anyLabel), ...options);
  ensureOption(select, chosen);
  select.value = chosen;
}

const carrierName = (c) => c.charAt(0).toUpperCase() + c.slice(1);

function callRow(call) {
  const href = `/calls/${encodeURIComponent(call.call_sid)}`;
  const problems = call.error_count + (call.complete ? 0 : 1);
  return el('tr', { data: { callSid: call.call_sid } },
    el('td', { class: 'nowrap' }, fmtDateTime(call.started_at)),
    el('td', { class: 'mono nowrap' }, el('a', { href }, call.call_sid),
      problems ? el('span', { class: 'flag', title: 'this call had errors' }, ' ⚠') : null),
    el('td', {}, call.agent || el('span', { class: 'muted' }, call.control)),
    el('td', { class: 'nowrap' }, [call.direction, call.carrier ? carrierName(call.carrier) : 'carrier unknown'].join(' · ')),
    el('td', { class: 'num' }, fmtDuration(call.duration_ms)),
    el('td', { class: 'num' }, call.turns),
    el('td', { class: 'num latency-cell' }, fmtLatency(call.latency_p50_ms),
      call.latency_max_ms !== null && call.latency_max_ms !== undefined ? el('span', { class: 'max' }, ` · ${fmtLatency(call.latency_max_ms)}`) : null),
    el('td', { class: 'num' }, call.bargeins),
    el('td', { class: 'num' }, call.error_count ? el('span', { class: 'flag' }, `⚠ ${call.error_count}`) : '0',
      call.complete ? null : el('span', { class: 'muted', title: 'the record ends early' }, ' (incomplete)')),
    el('td', {}, el('span', { class: 'badge', data: { outcome: call.outcome, tone: outcomeTone(call.outcome) }, title: call.outcome }, call.outcome_text || outcomeWords(call.outcome))));
}

let listing = 0; // the newest request wins when filters change quickly
let nextPage = null;
let shown = 0;
async function loadCalls(more = false) {
  const mine = ++listing;
  const error = $('#calls-error');
  const query = filterQuery();
  query.set('limit', String(PAGE));
  if (more && nextPage) query.set('cursor', nextPage);
  try {
    const page = await api(`/api/calls?${query}`);
    if (mine !== listing) return;
    error.hidden = true;
    showChoices(form.agent, page.agents, 'Any agent');
    showChoices(form.carrier, page.carriers, 'Any carrier', carrierName);
    const rows = page.calls.map(callRow);
    if (more) $('#calls').append(...rows);
    else {
      shown = 0;
      const empty = filtered() ? 'No calls match these filters.' : 'No calls are stored yet.';
      $('#calls').replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: 10, class: 'empty' }, empty))]));
    }
    shown += page.calls.length;
    nextPage = page.next;
    $('#more').hidden = !nextPage;
    $('#count').textContent = `${shown.toLocaleString()} of ${page.total.toLocaleString()} call${page.total === 1 ? '' : 's'}, newest first`;
    document.body.dataset.listed = String(shown);
  } catch (exc) {
    error.textContent = `The calls could not be loaded: ${exc.message}`;
    error.hidden = false;
  }
}

let liveBefore = new Set();
async function loadLive() {
  try {
    const { calls } = await api('/api/live');
    const now = Date.now() / 1000;
    $('#live-now').replaceChildren(...calls.map((call) => el('li', {},
      el('a', { href: `/calls/${encodeURIComponent(call.call_sid)}` }, call.agent || 'Call', ' · ', fmtElapsed(now - call.started_at)),
      el('span', { class: 'muted mono' }, call.call_sid),
      el('span', { class: 'muted' }, `started ${fmtAgo(call.started_at)}`))));
    $('#live-none').hidden = calls.length > 0;
    const live = new Set(calls.map((c) => c.call_sid));
    if ([...liveBefore].some((sid) => !live.has(sid))) setTimeout(() => loadCalls(), 1500); // a call ended: soon stored
    liveBefore = live;
  } catch { /* the next round tries again */ }
}

let typing = 0;
filtersFromAddress();
keepFiltersInAddress();
form.addEventListener('submit', (event) => { event.preventDefault(); keepFiltersInAddress(); loadCalls(); });
form.addEventListener('change', () => { keepFiltersInAddress(); loadCalls(); });
form.q.addEventListener('input', () => {
  clearTimeout(typing);
  typing = setTimeout(() => { keepFiltersInAddress(); loadCalls(); }, SEARCH_PAUSE_MS);
});
form.addEventListener('reset', () => setTimeout(() => { keepFiltersInAddress(); loadCalls(); }));
$('#more').addEventListener('click', () => loadCalls(true));
loadCalls();
loadLive();
setInterval(loadLive, LIVE_EVERY_MS);
