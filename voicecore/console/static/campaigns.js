// The campaigns page: every campaign in the store (GET /api/campaigns) with its progress, read again every few
// seconds. Everything printed goes in as text (el), never as HTML.
import { $, api, el, fmtDateTime } from './common.js';

const REFRESH_MS = 3000;

/** "completed 3, busy 1" */
export function outcomeCounts(outcomes) {
  const parts = Object.entries(outcomes || {}).map(([kind, count]) => `${kind} ${count}`);
  return parts.length ? parts.join(', ') : '—';
}

function campaignRow(campaign) {
  return el('tr', { data: { campaignId: campaign.id } },
    el('td', {}, el('a', { href: `/campaigns/${encodeURIComponent(campaign.id)}` }, campaign.name)),
    el('td', {}, el('span', { class: 'badge', data: { state: campaign.state } }, campaign.state)),
    el('td', {}, fmtDateTime(campaign.created_at)),
    el('td', { class: 'num' }, campaign.numbers),
    el('td', { class: 'num' }, campaign.dialled),
    el('td', { class: 'num' }, campaign.in_progress),
    el('td', { class: 'num' }, `${campaign.done}${campaign.finished ? ' (finished)' : ''}`),
    el('td', {}, outcomeCounts(campaign.outcomes)));
}

async function load() {
  const error = $('#campaigns-error');
  try {
    const { campaigns } = await api('/api/campaigns');
    error.hidden = true;
    $('#campaigns').replaceChildren(...(campaigns.length ? campaigns.map(campaignRow)
      : [el('tr', {}, el('td', { colspan: 8, class: 'empty' }, 'No campaign yet.'))]));
    document.body.dataset.listed = String(campaigns.length);
  } catch (exc) {
    error.textContent = `The campaigns could not be loaded: ${exc.message}`;
    error.hidden = false;
  }
}

load();
setInterval(load, REFRESH_MS);
