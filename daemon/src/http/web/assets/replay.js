// Step-through replay: a point in the session (an LSN) chosen with a slider or keys, the
// timeline cut at that point, and the state there: files touched, running cost, tool calls.
import { h, clear, setText, dollars, str } from './dom.js';
import { usd } from './timeline.js';

const FILE_TOOLS = {
  read: 'read',
  edit: 'edit',
  multiedit: 'edit',
  write: 'write',
  notebookedit: 'edit',
  patch: 'edit',
};

export class Replay {
  // `timeline`: the root timeline's element (rows with data-lsn); nested timelines are left
  // alone (their LSNs are another session's).
  constructor(timelineEl) {
    this.tl = timelineEl;
    this.events = [];
    this.toolLsns = [];
    this.toolIds = new Set();
    this.at = null; // null: live, following the end
    this.slider = h('input.slider', {
      type: 'range',
      min: '0',
      max: '0',
      value: '0',
      'aria-label': 'replay position (LSN)',
    });
    this.slider.addEventListener('input', () => this.go(Number(this.slider.value)));
    this.where = h('span.where');
    this.files = h('ul.files');
    this.cost = h('span.cost');
    this.calls = h('span.calls');
    const btn = (label, title, f) => h('button', { type: 'button', title, onclick: f }, label);
    this.el = h(
      'div.replay',
      h(
        'div.replay-controls',
        btn('◀◀', 'previous tool call (Shift+← or [)', () => this.stepTool(-1)),
        btn('◀', 'previous event (←)', () => this.step(-1)),
        this.slider,
        btn('▶', 'next event (→)', () => this.step(1)),
        btn('▶▶', 'next tool call (Shift+→ or ])', () => this.stepTool(1)),
        btn('live', 'back to the end, following (End)', () => this.live()),
        this.where,
      ),
      h(
        'div.replay-state',
        h('span', 'cost so far ', this.cost),
        h('span', 'tool calls so far ', this.calls),
        h('details.files-box', { open: true }, h('summary', 'files touched'), this.files),
      ),
    );
    this.render();
  }

  add(events) {
    for (const e of events) {
      this.events.push(e);
      if (e.type === 'execution.tool_use') {
        const id = str(e.payload, 'tool_use_id') ?? e.id;
        if (!this.toolIds.has(id)) {
          this.toolIds.add(id);
          this.toolLsns.push(e.lsn);
        }
      }
    }
    const last = this.last();
    this.slider.max = String(last);
    if (this.at === null) this.slider.value = String(last);
    this.render();
  }

  last() {
    return this.events.length ? this.events[this.events.length - 1].lsn : 0;
  }

  first() {
    return this.events.length ? this.events[0].lsn : 0;
  }

  go(lsn) {
    if (!this.events.length) return;
    lsn = Math.max(this.first(), Math.min(lsn, this.last()));
    this.at = lsn >= this.last() ? null : lsn;
    this.slider.value = String(lsn);
    this.cut();
    this.render();
    const row = this.rowAt(lsn);
    if (row) {
      row.scrollIntoView({ block: 'nearest' });
      row.focus({ preventScroll: true });
    }
  }

  live() {
    this.at = null;
    this.slider.value = String(this.last());
    this.cut();
    this.render();
  }

  position() {
    return this.at === null ? this.last() : this.at;
  }

  // Whether the event at `lsn` is a bookkeeping row the timeline hides now.
  hidden(lsn) {
    if (!this.tl.classList.contains('hide-quiet')) return false;
    const row = this.tl.querySelector(`:scope > .item[data-lsn="${lsn}"]`);
    return !!row && row.classList.contains('quiet');
  }

  // The event before or after the current point (one that is shown).
  step(dir) {
    const here = this.position();
    let i = this.events.findIndex((e) => e.lsn >= here);
    if (i < 0) i = this.events.length;
    if (dir > 0 && i < this.events.length && this.events[i].lsn === here) i++;
    if (dir < 0) i--;
    while (i >= 0 && i < this.events.length && this.hidden(this.events[i].lsn)) i += dir > 0 ? 1 : -1;
    if (i >= 0 && i < this.events.length) this.go(this.events[i].lsn);
  }

  stepTool(dir) {
    const here = this.position();
    const next =
      dir > 0 ? this.toolLsns.find((l) => l > here) : [...this.toolLsns].reverse().find((l) => l < here);
    if (next !== undefined) this.go(next);
  }

  rowsOfRoot() {
    return [...this.tl.querySelectorAll('[data-lsn]')].filter((el) => el.closest('.timeline') === this.tl);
  }

  rowAt(lsn) {
    let best = null;
    for (const el of this.rowsOfRoot()) {
      if (!el.classList.contains('item')) continue;
      const l = Number(el.dataset.lsn);
      if (l <= lsn) best = el;
    }
    return best;
  }

  // Hides what came after the point (whole rows, and later parts of earlier rows).
  cut() {
    const at = this.position();
    for (const el of this.rowsOfRoot()) {
      const l = Number(el.dataset.lsn);
      el.classList.toggle('future', this.at !== null && l > at);
      el.classList.toggle('cursor', this.at !== null && l === at);
    }
  }

  // Newly added rows after the point start hidden too.
  refreshCut() {
    if (this.at !== null) this.cut();
  }

  render() {
    const at = this.position();
    let cost = 0;
    let priced = false;
    let calls = 0;
    const files = new Map();
    const ids = new Set();
    for (const e of this.events) {
      if (e.lsn > at) break;
      const p = e.payload && typeof e.payload === 'object' ? e.payload : {};
      if (e.type === 'usage.request') {
        const c = usd(p);
        if (c !== undefined) {
          cost += c;
          priced = true;
        }
      } else if (e.type === 'execution.tool_use') {
        const id = str(p, 'tool_use_id') ?? e.id;
        if (!ids.has(id)) {
          ids.add(id);
          calls++;
        }
        const verb = FILE_TOOLS[String(p.tool || '').toLowerCase()];
        const input = p.input && typeof p.input === 'object' ? p.input : {};
        const file = str(input, 'file_path', 'filePath', 'notebook_path');
        if (verb && file) touch(files, file, verb);
      } else if (e.type === 'files.diff' && Array.isArray(p.files)) {
        for (const f of p.files) {
          const file = typeof f === 'string' ? f : str(f, 'file');
          if (file) touch(files, file, 'changed');
        }
      }
    }
    setText(this.cost, priced ? dollars(cost) : '—');
    setText(this.calls, String(calls));
    clear(this.files);
    for (const [file, verbs] of [...files.entries()].sort()) {
      this.files.append(h('li', h('span.file', file), h('span.quiet', ` ${[...verbs].join(', ')}`)));
    }
    if (!files.size) this.files.append(h('li.quiet', 'none yet'));
    setText(
      this.where,
      this.at === null ? `live · at ${this.last()}` : `at ${this.at} of ${this.last()}`,
    );
    this.el.classList.toggle('replaying', this.at !== null);
  }

  // ←/→ an event, Shift+←/→ or [/] a tool call, Home the start, End live.
  onKey(e) {
    if (e.key === 'ArrowLeft' || e.key === 'ArrowRight') {
      const dir = e.key === 'ArrowRight' ? 1 : -1;
      if (e.shiftKey) this.stepTool(dir);
      else this.step(dir);
      return true;
    }
    if (e.key === '[' || e.key === ']') {
      this.stepTool(e.key === ']' ? 1 : -1);
      return true;
    }
    if (e.key === 'Home') {
      this.go(this.first());
      return true;
    }
    if (e.key === 'End') {
      this.live();
      return true;
    }
    return false;
  }
}

function touch(files, file, verb) {
  if (!files.has(file)) files.set(file, new Set());
  files.get(file).add(verb);
}
