// Usage: what model calls cost and how many tokens they took, by day and by model, as bar
// charts made of plain elements (a bar's width is set through the CSSOM, which the page's
// Content-Security-Policy allows).
import * as api from './api.js';
import { h, clear, setText, dollars, count } from './dom.js';

let since = '30d';

export function usageView(root) {
  const pick = h(
    'select#u-since',
    { 'aria-label': 'since' },
    ['7d', '30d', '90d', '365d'].map((s) => h('option', { value: s }, `last ${s}`)),
  );
  pick.value = since;
  const total = h('p.total');
  const byDay = h('div.chart-box');
  const byModel = h('div.chart-box');
  clear(root).append(
    h('h1', 'Usage'),
    h('div.filters', pick),
    total,
    h('section', h('h2', 'By day'), byDay),
    h('section', h('h2', 'By model'), byModel),
  );
  const load = async () => {
    since = pick.value;
    if (!total.textContent) setText(total, 'loading…');
    try {
      const [day, model] = await Promise.all([api.usage('day', since), api.usage('model', since)]);
      const t = (day && day.total) || {};
      const cost = dollars((t.cost_usd_micros || 0) / 1e6);
      const calls = `${count(t.requests)} model calls (from ${day.source || '?'})`;
      setText(total, `${cost} · ${count(tokens(t))} tokens · ${calls}`);
      const rows = (r) => ((r && r.rows) || []).slice();
      chart(byDay, rows(day).sort((a, b) => String(a.key).localeCompare(String(b.key))));
      chart(byModel, rows(model).sort((a, b) => b.cost_usd_micros - a.cost_usd_micros));
    } catch (e) {
      if (e instanceof api.AuthError) return;
      setText(total, `could not load usage: ${e.message}`);
    }
  };
  pick.addEventListener('change', load);
  // Kept current while shown: the sums move as agents work.
  let timer = null;
  const again = async () => {
    await load();
    timer = setTimeout(again, 10000);
  };
  again();
  return { stop: () => clearTimeout(timer) };
}

function tokens(r) {
  const n = (k) => r[k] || 0;
  return n('input_tokens') + n('output_tokens') + n('cache_read_tokens') + n('cache_write_tokens');
}

function chart(box, rows) {
  clear(box);
  if (!rows.length) {
    box.append(h('p.empty', 'No model calls recorded in this period.'));
    return;
  }
  const maxCost = Math.max(1, ...rows.map((r) => r.cost_usd_micros || 0));
  const maxTokens = Math.max(1, ...rows.map(tokens));
  const table = h('div.chart', { role: 'table' });
  table.append(
    h('div.chart-row.chart-head', { role: 'row' }, h('span.key', ''), h('span', 'cost'), h('span', 'tokens')),
  );
  for (const r of rows) {
    table.append(
      h(
        'div.chart-row.item',
        { role: 'row', tabindex: '-1' },
        h('span.key', String(r.key)),
        bar('cost', (r.cost_usd_micros || 0) / maxCost, dollars((r.cost_usd_micros || 0) / 1e6)),
        bar(
          'tokens',
          tokens(r) / maxTokens,
          `${count(tokens(r))}`,
          [
            `${count(r.input_tokens)} in`,
            `${count(r.output_tokens)} out`,
            `${count(r.cache_read_tokens)} cache read`,
            `${count(r.cache_write_tokens)} cache write`,
            `${count(r.requests)} calls`,
          ].join(', '),
        ),
      ),
    );
  }
  box.append(table);
}

function bar(kind, fraction, label, title) {
  const fill = h(`span.fill.${kind}`);
  fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  return h('span.bar', { title: title || label }, fill, h('span.value', label));
}
