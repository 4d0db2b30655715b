// One session's page: what the daemon knows of it, its timeline (caught up, then live), the
// replay over it, subagents nested, and what is new since the last look (kept per session in
// localStorage).
import * as api from './api.js';
import { h, clear, setText, ago, dateTime, dollars, count } from './dom.js';
import { Timeline } from './timeline.js';
import { Replay } from './replay.js';

const SEEN_KEY = (id) => `dstream.seen.${id}`;

function lastSeen(id) {
  try {
    const v = localStorage.getItem(SEEN_KEY(id));
    return v === null ? Infinity : Number(v) || 0;
  } catch {
    return Infinity;
  }
}

function remember(id, lsn) {
  try {
    localStorage.setItem(SEEN_KEY(id), String(lsn));
  } catch {
    // Private mode: nothing to remember with.
  }
}

export function sessionView(root, id, params) {
  const seen = lastSeen(id);
  const state = h('span.conn.quiet', 'loading…');
  const meta = h('div.meta.quiet');
  const fresh = h('div.fresh', { hidden: true });
  const tlEl = h('div.timeline', { role: 'list', 'aria-label': 'timeline' });
  const timeline = new Timeline(tlEl, {
    seen,
    onChild: (child, box, depth) => nest(child, box, depth),
  });
  const replay = new Replay(tlEl);
  // Bookkeeping events (status changes, message updates, steps) are hidden unless asked for.
  let shown = false;
  try {
    shown = localStorage.getItem('dstream.showQuiet') === '1';
  } catch {
    // No storage: hidden, the default.
  }
  const showQuiet = h('input', { type: 'checkbox', checked: shown });
  const applyQuiet = () => {
    tlEl.classList.toggle('hide-quiet', !showQuiet.checked);
    try {
      localStorage.setItem('dstream.showQuiet', showQuiet.checked ? '1' : '0');
    } catch {
      // Not remembered, then.
    }
  };
  showQuiet.addEventListener('change', applyQuiet);
  applyQuiet();
  clear(root).append(
    h(
      'div.session-head',
      h('h1', h('span.quiet', 'session '), id),
      state,
      h('label.quiet-toggle', showQuiet, ' bookkeeping events'),
    ),
    meta,
    replay.el,
    fresh,
    tlEl,
  );

  const followers = [];
  const waitingChildren = new Map(); // child id → start function, until the child exists
  let newCount = 0;
  let firstNew = null;
  let caughtUp = false;
  let target = params.get('lsn') ? Number(params.get('lsn')) : null;

  function nest(child, box, depth) {
    const childEl = h('div.timeline.nested');
    box.append(childEl);
    const t = new Timeline(childEl, { depth, onChild: (c, b, d) => nest(c, b, d) });
    waitingChildren.set(child, () => {
      const p = new api.Poller(child, (evs) => t.add(evs));
      followers.push(p);
      p.start();
    });
    pollMeta();
  }

  const follower = new api.Follower(
    id,
    (events) => {
      timeline.add(events);
      replay.add(events);
      replay.refreshCut();
      for (const e of events) {
        if (e.lsn > seen) {
          newCount++;
          if (firstNew === null) firstNew = e.lsn;
        }
      }
      showFresh();
      if (document.visibilityState === 'visible') remember(id, follower.lastLsn);
      if (target !== null && follower.lastLsn >= target) {
        goTo(target);
        target = null;
      }
    },
    (s) => {
      if (s === 'live') caughtUp = true;
      setText(state, s);
      state.className = `conn ${s === 'live' ? 'good' : s === 'closed' ? 'quiet' : 'bad'}`;
    },
  );
  followers.push(follower);
  follower.start();

  function goTo(lsn) {
    const row = replay.rowAt(lsn);
    if (!row) return;
    // A hit on a bookkeeping event shows them all rather than nothing.
    if (row.classList.contains('quiet') && !showQuiet.checked) {
      showQuiet.checked = true;
      applyQuiet();
    }
    row.classList.add('hit');
    row.scrollIntoView({ block: 'center' });
    row.focus({ preventScroll: true });
  }

  function showFresh() {
    if (!newCount) return;
    fresh.hidden = false;
    clear(fresh).append(
      `${newCount} new since you last looked `,
      h('button', { type: 'button', onclick: () => goTo(firstNew) }, 'jump to the first'),
    );
  }

  const onVisible = () => {
    if (document.visibilityState === 'visible' && follower.lastLsn) remember(id, follower.lastLsn);
  };
  document.addEventListener('visibilitychange', onVisible);

  let metaTimer = null;
  async function pollMeta() {
    clearTimeout(metaTimer);
    try {
      const wanted = [id, ...waitingChildren.keys()].slice(0, 100);
      const list = ((await api.sessionsNamed(wanted)) || {}).sessions || [];
      const s = list.find((x) => x.id === id);
      if (s) showMeta(s);
      if (s && follower.missing) follower.start();
      for (const x of list) {
        const start = waitingChildren.get(x.id);
        if (start) {
          waitingChildren.delete(x.id);
          start();
        }
      }
    } catch (e) {
      if (e instanceof api.AuthError) return;
    }
    metaTimer = setTimeout(pollMeta, 2000);
  }
  pollMeta();

  function showMeta(s) {
    const bits = [
      s.agent,
      s.project_dir,
      s.started_ms ? `started ${dateTime(s.started_ms)}` : null,
      s.last_event_ms ? `last event ${ago(s.last_event_ms)}` : null,
      `${count(s.events)} events`,
      s.cost_usd !== null && s.cost_usd !== undefined ? dollars(s.cost_usd) : null,
      s.pending ? `${s.pending} pending` : null,
      s.relay ? `relay ${typeof s.relay === 'string' ? s.relay : JSON.stringify(s.relay)}` : null,
      s.ended ? 'ended' : null,
      s.quarantined ? 'quarantined' : null,
    ].filter(Boolean);
    clear(meta).append(bits.join(' · '));
    const link = (label, to) =>
      meta.append(` · ${label} `, h('a', { href: `#/session/${encodeURIComponent(to)}` }, to));
    if (s.parent) link('in the lineage of', s.parent);
    if (s.forked_from) link('forked from', s.forked_from);
  }

  return {
    onKey: (e) => replay.onKey(e),
    stop() {
      clearTimeout(metaTimer);
      document.removeEventListener('visibilitychange', onVisible);
      for (const f of followers) f.stop();
      if (caughtUp && follower.lastLsn) remember(id, follower.lastLsn);
    },
  };
}
