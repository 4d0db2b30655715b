// The sessions list (polled every 2 s), its filters, and search across every session's events
// (each hit opens its session at the hit's LSN).
import * as api from './api.js';
import { h, clear, setText, ago, dateTime, dollars, count } from './dom.js';

const filters = { agent: '', text: '', pending: false };
const COLUMNS = ['session', 'agent', 'project', 'started', 'last event', 'events', 'cost', 'pending', 'relay'];

export function sessionsView(root, params) {
  const agent = h('select#f-agent', { 'aria-label': 'agent' }, h('option', { value: '' }, 'every agent'));
  const text = h('input#f-text', {
    type: 'search',
    placeholder: 'filter by project or id',
    'aria-label': 'filter by project or id',
    value: filters.text,
  });
  const pendingOnly = h('input#f-pending', { type: 'checkbox', checked: filters.pending });
  const q = h('input#search', {
    type: 'search',
    placeholder: 'search events (/)',
    'aria-label': 'search events',
    value: params.get('q') || '',
  });
  const hits = h('div.hits');
  const form = h('form.search', { role: 'search' }, q, h('button', { type: 'submit' }, 'Search'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    runSearch(q.value, hits);
  });
  const body = h('tbody');
  const table = h(
    'table.sessions',
    h(
      'thead',
      h(
        'tr',
        COLUMNS.map((c) => h(['events', 'cost', 'pending'].includes(c) ? 'th.num' : 'th', c)),
      ),
    ),
    body,
  );
  const empty = h('p.empty', { hidden: true }, 'No sessions match.');
  const more = h('p.quiet', { hidden: true });
  clear(root).append(
    h('h1', 'Sessions'),
    form,
    hits,
    h(
      'div.filters',
      agent,
      text,
      h('label', pendingOnly, ' pending only'),
    ),
    table,
    empty,
    more,
  );

  let list = [];
  const render = () => {
    filters.agent = agent.value;
    filters.text = text.value.trim().toLowerCase();
    filters.pending = pendingOnly.checked;
    const active = document.activeElement;
    const focused = active && active.dataset && active.dataset.session;
    clear(body);
    const shown = list.filter(
      (s) =>
        (!filters.agent || s.agent === filters.agent) &&
        (!filters.pending || s.pending > 0) &&
        (!filters.text || `${s.id} ${s.project_dir ?? ''}`.toLowerCase().includes(filters.text)),
    );
    for (const s of shown) body.append(row(s));
    empty.hidden = shown.length > 0;
    if (focused) {
      const again = body.querySelector(`tr[data-session="${CSS.escape(focused)}"]`);
      if (again) again.focus();
    }
  };
  agent.addEventListener('change', render);
  text.addEventListener('input', render);
  pendingOnly.addEventListener('change', render);

  let timer = null;
  const poll = async () => {
    try {
      const r = (await api.sessions()) || {};
      list = r.sessions || [];
      more.hidden = !(r.total > list.length);
      setText(more, `The ${list.length} most recently active of ${r.total} sessions.`);
      const agents = [...new Set(list.map((s) => s.agent).filter(Boolean))].sort();
      const have = new Set([...agent.options].map((o) => o.value));
      for (const a of agents) if (!have.has(a)) agent.append(h('option', { value: a }, a));
      agent.value = filters.agent;
      render();
    } catch (e) {
      if (e instanceof api.AuthError) return;
    }
    timer = setTimeout(poll, 2000);
  };
  poll();
  if (q.value) runSearch(q.value, hits);
  return { stop: () => clearTimeout(timer) };
}

function row(s) {
  const href = `#/session/${encodeURIComponent(s.id)}`;
  const tr = h(
    'tr.item',
    { tabindex: '-1', dataset: { session: s.id, href } },
    h(
      'td.id',
      h('a', { href }, s.id),
      s.parent ? h('span.quiet', ' (subagent)') : null,
      s.forked_from ? h('span.quiet', ' (fork)') : null,
      s.quarantined ? h('span.bad', ' quarantined') : null,
    ),
    h('td', s.agent ?? ''),
    h('td.project', s.project_dir ?? ''),
    h('td', { title: dateTime(s.started_ms) }, ago(s.started_ms)),
    h('td', { title: dateTime(s.last_event_ms) }, ago(s.last_event_ms)),
    h('td.num', count(s.events)),
    h('td.num', s.cost_usd === null || s.cost_usd === undefined ? '' : dollars(s.cost_usd)),
    h('td.num', s.pending ? h('span.pending-badge', String(s.pending)) : ''),
    h('td', relayText(s.relay), s.ended ? h('span.quiet', ' ended') : null),
  );
  tr.addEventListener('click', (e) => {
    if (!e.target.closest('a')) location.hash = href;
  });
  return tr;
}

function relayText(r) {
  if (r === null || r === undefined) return '';
  if (typeof r === 'string') return r;
  if (typeof r === 'object') return r.state ?? r.status ?? JSON.stringify(r);
  return String(r);
}

async function runSearch(query, out) {
  clear(out);
  query = query.trim();
  if (!query) return;
  setText(out, 'searching…');
  try {
    const r = (await api.search(query)) || {};
    clear(out);
    const hits = r.hits || [];
    out.append(
      h(
        'p.quiet',
        `${hits.length} hit${hits.length === 1 ? '' : 's'}`,
        r.behind_by ? ` (the index is ${count(r.behind_by)} events behind)` : '',
      ),
    );
    const ul = h('ul.hit-list');
    for (const hit of hits) {
      const href = `#/session/${encodeURIComponent(hit.session_id)}?lsn=${Number(hit.lsn)}`;
      ul.append(
        h(
          'li.item',
          { tabindex: '-1', dataset: { href } },
          h('a', { href }, `${hit.session_id} @ ${hit.lsn}`),
          h('span.quiet', ` ${hit.type} `),
          snippet(hit.snippet, hit.highlights),
        ),
      );
    }
    out.append(ul);
  } catch (e) {
    if (e instanceof api.AuthError) return;
    clear(out).append(h('p.error', `search failed: ${e.message}`));
  }
}

// The snippet with its matched words marked; `highlights` are byte ranges of its UTF-8.
function snippet(text, highlights) {
  const el = h('span.snippet');
  const bytes = new TextEncoder().encode(String(text ?? ''));
  const dec = new TextDecoder();
  let at = 0;
  const ranges = (Array.isArray(highlights) ? highlights : []).slice().sort((a, b) => a[0] - b[0]);
  for (const [start, end] of ranges) {
    if (!(start >= at && end > start && end <= bytes.length)) continue;
    el.append(dec.decode(bytes.slice(at, start)), h('mark', dec.decode(bytes.slice(start, end))));
    at = end;
  }
  el.append(dec.decode(bytes.slice(at)));
  return el;
}
