// One campaign's page: its progress, what became of its callees and its attempts (GET /api/campaigns/ID), read
// again every few seconds while it runs. Everything printed goes in as text (el), never as HTML.
import { $, api, ApiError, el, fmtDateTime } from './common.js';

const REFRESH_MS = 3000;
const id = decodeURIComponent(location.pathname.split('/')[2] || '');

function counts(outcomes) {
  const rows = Object.entries(outcomes || {}).map(([kind, count]) => el('tr', {}, el('td', {}, kind), el('td', { class: 'num' }, count)));
  return rows.length ? rows : [el('tr', {}, el('td', { colspan: 2, class: 'empty' }, 'None yet.'))];
}

function attemptRow(attempt) {
  const sid = attempt.record_call_sid || attempt.call_sid;
  return el('tr', {},
    el('td', { class: 'mono' }, attempt.number),
    el('td', { class: 'num' }, attempt.attempt),
    el('td', { class: 'mono' }, attempt.from),
    el('td', {}, fmtDateTime(attempt.dialed_at)),
    el('td', {}, attempt.state === 'dialing' ? 'in the air' : attempt.outcome),
    el('td', {}, sid ? el('a', { class: 'sid', href: `/calls/${encodeURIComponent(sid)}` }, sid) : '—'));
}

let timer = null;
async function load() {
  const error = $('#campaign-error');
  try {
    const campaign = await api(`/api/campaigns/${encodeURIComponent(id)}`);
    error.hidden = true;
    document.title = `${campaign.name} · voicecore console`;
    $('#name').textContent = campaign.name;
    $('#state').textContent = campaign.state;
    $('#progress').textContent = `${campaign.done} of ${campaign.numbers} callee(s) done, ${campaign.dialled} dialled, `
      + `${campaign.in_progress} call(s) in the air, ${campaign.attempts} attempt(s)${campaign.error ? `; stopped: ${campaign.error}` : ''}`;
    $('#outcomes').replaceChildren(...counts(campaign.outcomes));
    $('#attempt-outcomes').replaceChildren(...counts(campaign.attempt_outcomes));
    $('#attempts').replaceChildren(...(campaign.recent_attempts.length ? campaign.recent_attempts.map(attemptRow)
      : [el('tr', {}, el('td', { colspan: 6, class: 'empty' }, 'No dial yet.'))]));
    document.body.dataset.state = campaign.state;
    if (campaign.finished || campaign.state === 'stopped') clearInterval(timer);
  } catch (exc) {
    error.textContent = exc instanceof ApiError && exc.status === 404 ? 'No such campaign.' : `The campaign could not be loaded: ${exc.message}`;
    error.hidden = false;
    if (exc instanceof ApiError && exc.status === 404) clearInterval(timer);
  }
}

load();
timer = setInterval(load, REFRESH_MS);
