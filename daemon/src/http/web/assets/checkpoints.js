// Pending checkpoints: the controls that decide one (approve, reject, an option, an edited
// input, a note), the panel of every session's pending ones, and the ring when a new one
// arrives (a browser notification if the person allowed them, and the count in the title).
import * as api from './api.js';
import { h, clear, setText, json, ago } from './dom.js';

// The controls for checkpoint `cp` ({id, tool, input, summary, options}). `onDecided(info)`
// runs once this page's decision was taken.
export function decisionControls(cp, onDecided = () => {}) {
  const status = h('div.decide-status', { role: 'status' });
  const note = h('input.note', {
    type: 'text',
    placeholder: 'note for the agent (optional)',
    'aria-label': 'note',
  });
  const edited = h('textarea.edit-input', {
    rows: 6,
    spellcheck: 'false',
    'aria-label': 'edited input (JSON)',
  });
  edited.value = JSON.stringify(cp.input ?? {}, null, 2);
  const editError = h('div.error');
  const buttons = [];
  const root = h('div.decide.pending', { dataset: { checkpoint: cp.id } });

  async function send(decision, input) {
    const body = { decision };
    if (note.value.trim()) body.note = note.value.trim();
    if (input !== undefined) body.input = input;
    buttons.forEach((b) => (b.disabled = true));
    setText(status, 'sending…');
    try {
      const info = await api.decide(cp.id, body);
      const d = (info && info.decision) || {};
      root.classList.remove('pending');
      root.classList.add('decided');
      setText(status, `${info.state || d.decision || decision} by ${d.decided_by || 'you'}`);
      onDecided(info);
    } catch (e) {
      buttons.forEach((b) => (b.disabled = false));
      if (e instanceof api.AuthError) setText(status, 'not logged in: run `dstream open`');
      else {
        setText(status, e.message);
        // Someone else decided first: nothing is left to decide here.
        if (e.status === 409) {
          root.classList.remove('pending');
          buttons.forEach((b) => (b.disabled = true));
        }
      }
    }
  }

  const button = (label, cls, act, onclick) => {
    const b = h(`button.${cls}`, { type: 'button', dataset: { act }, onclick }, label);
    buttons.push(b);
    return b;
  };
  const row = h(
    'div.decide-row',
    button('Approve', 'approve', 'approve', () => send('approve')),
    button('Reject', 'reject', 'reject', () => send('reject')),
  );
  for (const o of cp.options || []) {
    if (o.id === 'approve' || o.id === 'reject') continue;
    const cls = `option.${o.action === 'deny' ? 'deny' : 'allow'}`;
    row.append(button(o.label || o.id, cls, o.id, () => send(o.id)));
  }
  row.append(note);
  const approveEdited = button('Approve with this input', 'approve-edited', 'approve-edited', () => {
    let input;
    try {
      input = JSON.parse(edited.value);
    } catch (e) {
      setText(editError, `not valid JSON: ${e.message}`);
      edited.focus();
      return;
    }
    if (input === null || typeof input !== 'object' || Array.isArray(input)) {
      setText(editError, 'the input must be a JSON object');
      edited.focus();
      return;
    }
    setText(editError, '');
    send('approve', input);
  });
  const edit = h(
    'details.edit',
    h('summary', 'Approve with an edited input'),
    edited,
    h('div.decide-row', approveEdited, editError),
  );
  root.append(row, edit, status);
  root.gone = (why) => {
    root.classList.remove('pending');
    buttons.forEach((b) => (b.disabled = true));
    setText(status, why);
  };
  return root;
}

// The pending checkpoint the keyboard means: the focused one (or the one inside the focused
// item); `act` is `approve` or `reject`.
export function decideFocused(act) {
  const active = document.activeElement;
  if (!active || active === document.body) return false;
  const item = active.closest('.item, .card') || active;
  const box = active.closest('.decide.pending') || item.querySelector('.decide.pending');
  const b = box && box.querySelector(`button[data-act="${act}"]`);
  if (!b || b.disabled) return false;
  b.click();
  return true;
}

// ---- the ring ----

const ring = {
  known: null,
  list: [],
  listeners: new Set(),
  timer: null,
};

export function onPending(f) {
  ring.listeners.add(f);
  f(ring.list);
  return () => ring.listeners.delete(f);
}

export function startRing() {
  const poll = async () => {
    try {
      const r = await api.pending();
      const list = (r && r.checkpoints) || [];
      const ids = new Set(list.map((c) => c.id));
      if (ring.known) {
        const fresh = list.filter((c) => !ring.known.has(c.id));
        if (fresh.length) announce(fresh);
      }
      ring.known = ids;
      ring.list = list;
      badge(list.length);
      for (const f of ring.listeners) f(list);
    } catch (e) {
      if (e instanceof api.AuthError) return;
    }
    ring.timer = setTimeout(poll, 2000);
  };
  poll();
}

function badge(n) {
  const base = document.title.replace(/^\(\d+\) /, '');
  document.title = n ? `(${n}) ${base}` : base;
  const el = document.getElementById('pending-count');
  if (el) {
    setText(el, n ? String(n) : '');
    el.classList.toggle('hot', n > 0);
  }
}

function announce(fresh) {
  if (!('Notification' in window) || Notification.permission !== 'granted') return;
  for (const c of fresh.slice(0, 3)) {
    try {
      const n = new Notification('dstream: a tool call waits for you', {
        body: `${c.summary} (${c.session_id})`,
        tag: c.id,
      });
      n.onclick = () => {
        window.focus();
        location.hash = `#/session/${encodeURIComponent(c.session_id)}`;
      };
    } catch {
      // Some browsers only notify from a service worker; the title still shows the count.
    }
  }
}

// Asked only on a click, never at load.
export function notifyButton() {
  if (!('Notification' in window) || Notification.permission !== 'default') return null;
  const b = h('button.notify', { type: 'button', title: 'ring when a tool call waits' }, 'Notify me');
  b.addEventListener('click', async () => {
    try {
      await Notification.requestPermission();
    } finally {
      if (Notification.permission !== 'default') b.remove();
    }
  });
  return b;
}

// ---- the panel ----

export function pendingView(root) {
  const list = h('div.cards');
  const empty = h('p.empty', 'Nothing waits for a decision.');
  clear(root).append(h('h1', 'Pending checkpoints'), empty, list);
  const cards = new Map();
  const stop = onPending((pending) => {
    const ids = new Set(pending.map((c) => c.id));
    // One decided elsewhere (the CLI, the inbox, its deadline) stays until the page is left,
    // so nothing moves under the cursor; it only stops offering decisions.
    for (const [id, card] of cards) {
      const box = card.querySelector('.decide.pending');
      if (!ids.has(id) && box) box.gone('decided elsewhere (see the session for how)');
    }
    for (const c of pending) {
      if (cards.has(c.id)) {
        setText(cards.get(c.id).querySelector('.deadline'), deadline(c));
        continue;
      }
      const card = pendingCard(c);
      cards.set(c.id, card);
      list.append(card);
    }
    empty.hidden = pending.length > 0;
  });
  return () => stop();
}

function deadline(c) {
  if (!c.deadline_ms) return '';
  const left = Math.round((c.deadline_ms - Date.now()) / 1000);
  const then = c.on_timeout ? ` (then: ${c.on_timeout})` : '';
  return left > 0 ? `${left}s left${then}` : `deadline passed${then}`;
}

function pendingCard(c) {
  return h(
    'div.card.item',
    { tabindex: '-1', dataset: { checkpointCard: c.id } },
    h(
      'div.card-head',
      h('span.label.tool-name', c.tool || 'tool'),
      h('span.summary', c.summary || ''),
      h('span.deadline.quiet', deadline(c)),
    ),
    h(
      'div.quiet',
      'session ',
      h('a', { href: `#/session/${encodeURIComponent(c.session_id)}` }, c.session_id),
      c.created_ms ? ` · asked ${ago(c.created_ms)}` : '',
      c.rule ? ` · rule ${c.rule}` : '',
    ),
    h('pre.input', json(c.input ?? {})),
    decisionControls(c),
  );
}
