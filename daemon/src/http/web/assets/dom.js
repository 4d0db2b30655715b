// DOM building without innerHTML: every string an event carries is attacker-controlled, so it
// only ever becomes a text node. `h('div#id.row', {onclick}, 'text', child)`.

export function h(spec, attrs, ...children) {
  const [head, ...classes] = spec.split('.');
  const [tag, id] = head.split('#');
  const el = document.createElement(tag || 'div');
  if (id) el.id = id;
  if (classes.length) el.className = classes.join(' ');
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className += (el.className ? ' ' : '') + v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value' || k === 'checked' || k === 'disabled') el[k] = v;
    else if (k === 'href') el.setAttribute('href', safeHref(v));
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// Only in-page links: a hash route or a path on this origin.
function safeHref(v) {
  const s = String(v);
  return s.startsWith('#') || (s.startsWith('/') && !s.startsWith('//')) ? s : '#';
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function setText(el, s) {
  el.textContent = s === undefined || s === null ? '' : String(s);
  return el;
}

// ---- formatting ----

export function ago(ms) {
  if (!ms) return '';
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 0) return 'now';
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function clock(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  const pad = (n) => String(n).padStart(2, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function dateTime(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  return `${d.toISOString().slice(0, 10)} ${clock(ms)}`;
}

export function dollars(usd) {
  if (usd === null || usd === undefined || Number.isNaN(usd)) return '';
  return Math.abs(usd) < 1 ? `$${usd.toFixed(4)}` : `$${usd.toFixed(2)}`;
}

export function duration(ms) {
  if (ms === null || ms === undefined) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)}m ${Math.round((ms % 60000) / 1000)}s`;
}

export function count(n) {
  return (n || 0).toLocaleString('en-US');
}

export function firstLine(s, max = 200) {
  const line = String(s ?? '').split('\n', 1)[0];
  return line.length > max ? line.slice(0, max) + '…' : line;
}

export function clip(s, max) {
  s = String(s ?? '');
  return s.length > max ? s.slice(0, max) + `… (${count(s.length - max)} more characters)` : s;
}

export function json(v, max = 20000) {
  let s;
  try {
    s = typeof v === 'string' ? v : JSON.stringify(v, null, 2);
  } catch {
    s = String(v);
  }
  return clip(s, max);
}

// A string field of an object, or undefined.
export function str(o, ...keys) {
  for (const k of keys) {
    const v = o && o[k];
    if (typeof v === 'string' && v !== '') return v;
  }
  return undefined;
}

export function num(o, ...keys) {
  for (const k of keys) {
    const v = o && o[k];
    if (typeof v === 'number' && Number.isFinite(v)) return v;
  }
  return undefined;
}
