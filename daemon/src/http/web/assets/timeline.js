// A session's timeline: each event becomes a row, or updates one (a tool call's result joins
// its call by tool_use_id, else causation_id; a checkpoint's decision joins its request; a
// message's pieces join by part or message). Rows carry `data-lsn` so replay can hide what
// came after its point. Strings from events only ever become text nodes.
import { h, setText, clock, dollars, duration, firstLine, clip, json, str, num } from './dom.js';
import { editOf, renderDiff } from './diff.js';
import { decisionControls } from './checkpoints.js';

// Types shown small and dim: bookkeeping more than story.
const QUIET = new Set([
  'lifecycle.session.status',
  'lifecycle.session.updated',
  'lifecycle.session.idle',
  'message.updated',
  'message.completed',
  'message.stream_event',
  'execution.step_start',
  'execution.step_finish',
  'execution.tool_state',
  'checkpoint.delivered',
  'unmapped',
]);

// Claude Code's and OpenCode's names for a tool's main argument, in the order they are tried.
const SUBJECT_KEYS = ['command', 'file_path', 'filePath', 'path', 'url', 'pattern', 'query', 'description', 'prompt'];

export class Timeline {
  // `opts`: depth (nesting), seen (the LSN last looked at: later rows are marked new),
  // onChild(childSessionId, container) to nest a subagent's own timeline.
  constructor(root, opts = {}) {
    this.root = root;
    this.depth = opts.depth || 0;
    this.seen = opts.seen ?? Infinity;
    this.onChild = opts.onChild || (() => {});
    this.rows = new Map(); // join key → row state
    this.byEventId = new Map(); // event id → tool row state
  }

  add(events) {
    for (const e of events) {
      try {
        this.one(e);
      } catch (err) {
        // One odd event must not stop the rest.
        this.root.append(this.row(e, 'bad', 'error', `could not show this event: ${err.message}`));
      }
    }
  }

  // A new row for `e`.
  row(e, cls, label, text) {
    const el = h(`div.item.${cls}`, {
      tabindex: '-1',
      dataset: { lsn: e.lsn, type: e.type || '' },
    });
    if (e.lsn > this.seen) el.classList.add('new');
    if (e.metadata && e.metadata.agent_id) el.classList.add('sub');
    el.append(
      h('span.gutter', h('span.lsn', String(e.lsn)), h('span.time', clock(e.timestamp))),
      h('span.label', label),
    );
    if (text !== undefined) el.append(h('span.text', text));
    return el;
  }

  put(el) {
    this.root.append(el);
    return el;
  }

  one(e) {
    const p = e.payload && typeof e.payload === 'object' ? e.payload : {};
    const t = String(e.type || '');
    if (t === 'execution.tool_use') return this.toolUse(e, p);
    if (t === 'execution.tool_result' || t === 'execution.tool_state') return this.toolResult(e, p);
    if (t.startsWith('checkpoint.')) return this.checkpoint(e, p);
    if (t === 'message.chunk') return this.chunk(e, p);
    if (t === 'agent.spawned') return this.spawned(e, p);
    const [cls, label, text] = line(t, p);
    return this.put(this.row(e, cls, label, text));
  }

  chunk(e, p) {
    const text = str(p, 'text', 'textDelta');
    if (text === undefined) {
      return this.put(this.row(e, 'quiet', 'stream', firstLine(str(p, 'type') ?? summaryOf(p))));
    }
    const user = p.role === 'user';
    const key = `msg:${str(p, 'part_id') ?? `${str(p, 'message_id') ?? e.id}:${p.index ?? 0}`}`;
    let r = this.rows.get(key);
    if (!r) {
      const label = user ? 'you' : p.kind === 'reasoning' ? 'thinking' : agentLabel(e.actor);
      const cls = user ? 'you' : p.kind === 'reasoning' ? 'assistant reasoning' : 'assistant';
      const el = this.row(e, cls, label);
      const body = h('div.text.prose');
      el.append(body);
      r = { el, body, text: '' };
      this.rows.set(key, r);
      this.put(el);
    }
    // A later piece of a part already stored carries only the new text (`offset`).
    r.text = typeof p.offset === 'number' || p.type === 'text-delta' ? r.text + text : text;
    setText(r.body, clip(r.text, 20000));
    return r.el;
  }

  toolUse(e, p) {
    const id = str(p, 'tool_use_id') ?? e.id;
    let r = this.rows.get(`tool:${id}`);
    if (!r) {
      const el = this.row(e, 'tool', str(p, 'tool') ?? 'tool');
      const subject = h('span.text.subject');
      const state = h('span.state.quiet', '…');
      const body = h('div.body');
      el.append(subject, state, body);
      const tool = str(p, 'tool') ?? '';
      r = { el, subject, state, body, tool, lsn: e.lsn, ts: e.timestamp, input: null, done: false };
      this.rows.set(`tool:${id}`, r);
      this.put(el);
    }
    this.byEventId.set(e.id, r);
    if (p.input !== undefined && r.input === null) {
      r.input = p.input;
      setText(r.subject, subject(r.tool, p.input));
      const edit = editOf(r.tool, p.input);
      if (edit) {
        r.body.prepend(h('div.edit-file.quiet', edit.file ? String(edit.file) : ''), renderDiff(edit));
      }
      else if (p.input && typeof p.input === 'object' && Object.keys(p.input).length > 1) {
        r.body.prepend(h('details.input', h('summary', 'input'), h('pre', json(p.input))));
      }
    }
    const decision = e.metadata && e.metadata.decision;
    if (!r.done) {
      if (decision && decision.action === 'deny') {
        setState(r, 'bad', `denied by ${decision.decided_by ?? 'policy'}`);
      }
      else if (decision && decision.action === 'ask') setState(r, 'ask', 'held for a decision');
      else if (p.phase && p.phase !== 'requested') setState(r, 'quiet', p.phase);
    }
    return r.el;
  }

  toolResult(e, p) {
    const id = str(p, 'tool_use_id');
    let r = (id && this.rows.get(`tool:${id}`)) || (e.causation_id && this.byEventId.get(e.causation_id));
    if (!r) {
      this.toolUse({ ...e, type: 'execution.tool_use' }, { tool: p.tool, tool_use_id: id });
      r = this.rows.get(`tool:${id ?? e.id}`);
    }
    if (e.type === 'execution.tool_state') {
      if (!r.done && p.phase) setState(r, 'quiet', p.phase);
      return r.el;
    }
    r.done = true;
    const took = num(p, 'duration_ms') ?? (r.ts && e.timestamp ? e.timestamp - r.ts : undefined);
    const out = p.output;
    const err = str(p, 'error');
    let exit = num(p, 'exit', 'exit_code');
    if (exit === undefined && err) {
      const m = /^Exit code (\d+)/.exec(err);
      if (m) exit = Number(m[1]);
    }
    const ok = p.ok === true || (p.ok === undefined && exit === 0);
    const failed = p.interrupted ? 'interrupted' : 'failed';
    const words = [ok ? 'ok' : p.ok === false ? failed : p.phase ?? 'done'];
    if (exit !== undefined) words.push(`exit ${exit}`);
    if (took !== undefined) words.push(duration(took));
    setState(r, ok ? 'good' : p.ok === false ? 'bad' : 'quiet', words.join(' · '));
    const result = h('div.result', { dataset: { lsn: e.lsn } });
    if (e.lsn > this.seen) result.classList.add('new');
    const text = outputText(out, err);
    if (text) {
      const pre = h('pre.output', clip(text, 50000));
      const lines = text.split('\n').length;
      result.append(lines > 12 ? h('details.output', h('summary', `output (${lines} lines)`), pre) : pre);
    }
    r.body.append(result);
    return r.el;
  }

  checkpoint(e, p) {
    const id = str(p, 'checkpoint_id') ?? e.id;
    const key = `cp:${id}`;
    let r = this.rows.get(key);
    if (!r) {
      const tool = e.causation_id && this.byEventId.get(e.causation_id);
      const el = tool ? h('div.cp', { dataset: { lsn: e.lsn } }) : this.row(e, 'checkpoint', 'checkpoint');
      el.classList.add('checkpoint');
      if (tool && e.lsn > this.seen) el.classList.add('new');
      const head = h('div.cp-head', h('span.ask', 'held: '), h('span.text', str(p, 'summary') ?? id));
      const decided = h('div.cp-decision');
      el.append(head, decided);
      r = { el, decided, tool, controls: null, done: false };
      this.rows.set(key, r);
      if (tool) tool.body.append(el);
      else this.put(el);
    }
    if (e.type === 'checkpoint.requested' && !r.done && !r.controls) {
      const cp = { id, input: p.input, options: p.options, tool: p.tool, summary: p.summary };
      r.controls = decisionControls(cp);
      const deadline = num(p, 'deadline_ms');
      if (deadline) {
        const then = str(p, 'on_timeout');
        r.controls.prepend(h('div.quiet', `undecided at ${clock(deadline)} means ${then ?? 'its default'}`));
      }
      r.el.append(r.controls);
    } else if (['checkpoint.approved', 'checkpoint.rejected', 'checkpoint.expired'].includes(e.type)) {
      r.done = true;
      if (r.controls) {
        r.controls.remove();
        r.controls = null;
      }
      let word = { 'checkpoint.approved': 'approved', 'checkpoint.rejected': 'rejected' }[e.type];
      if (!word) word = 'expired';
      const verb = { approved: '✓ approved', rejected: '✗ rejected' }[word] ?? word;
      const line = h(
        `div.decision.${e.type === 'checkpoint.approved' ? 'good' : 'bad'}`,
        { dataset: { lsn: e.lsn } },
        `${verb}`,
        p.decision && !['approve', 'reject'].includes(p.decision) ? ` (${p.decision})` : '',
        ' by ',
        h('span.who', str(p, 'decided_by') ?? 'someone'),
        p.note ? `: ${p.note}` : '',
        p.input !== undefined ? ' · with an edited input' : '',
      );
      r.decided.append(line);
      if (r.tool && !r.tool.done) setState(r.tool, e.type === 'checkpoint.approved' ? 'good' : 'bad', word);
    } else if (e.type === 'checkpoint.delivered' || e.type === 'checkpoint.bypassed') {
      const text =
        e.type === 'checkpoint.delivered'
          ? `handed to ${str(p, 'delivered_to') ?? 'the agent'}`
          : `ran undecided: ${str(p, 'reason') ?? ''}`;
      r.decided.append(h('div.quiet', { dataset: { lsn: e.lsn } }, text));
    }
    return r.el;
  }

  spawned(e, p) {
    const child = str(p, 'child_session_id');
    const el = this.row(e, 'agent', 'agent', `spawned ${agentName(p)}${child ? ' → ' : ''}`);
    if (child) el.append(h('a.child-link', { href: `#/session/${encodeURIComponent(child)}` }, child));
    this.put(el);
    if (child && this.depth < 4) {
      const box = h('div.children');
      el.append(box);
      this.onChild(child, box, this.depth + 1);
    }
    return el;
  }
}

// An event that is one line of its own: [row class, label, text].
function line(t, p) {
  const paren = (s) => (s ? ` (${s})` : '');
  switch (t) {
    case 'user.input':
      return ['you', 'you', str(p, 'text') ?? ''];
    case 'user.command': {
      const name = str(p, 'command_name');
      return ['you', 'you', name ? `/${name} ${str(p, 'command_args') ?? ''}` : str(p, 'prompt') ?? ''];
    }
    case 'usage.request': {
      const cost = usd(p);
      const tokens = `${num(p, 'input_tokens') ?? 0} in / ${num(p, 'output_tokens') ?? 0} out`;
      return ['usage', cost === undefined ? '$?' : dollars(cost), `${str(p, 'model') ?? 'model'} ${tokens}`];
    }
    case 'agent.completed': {
      const said = str(p, 'last_assistant_message', 'output');
      return ['agent', 'agent', `${agentName(p)} finished${said ? ': ' + firstLine(said) : ''}`];
    }
    case 'agent.aborted': {
      const by = str(p, 'decided_by');
      return ['bad', 'agent', `stopped${by ? ' by ' + by : ''}: ${str(p, 'reason', 'error') ?? ''}`];
    }
    case 'files.diff': {
      const files = (Array.isArray(p.files) ? p.files : []).map((f) =>
        typeof f === 'string' ? f : str(f, 'file') ?? '?',
      );
      if (!files.length) return ['files quiet', 'files', 'no changes'];
      return ['files', 'files', `${files.length} changed: ${files.join(', ')}`];
    }
    case 'session.error':
    case 'plugin.error':
    case 'log.recovered':
      return ['bad', t, firstLine(str(p, 'message', 'error', 'detail', 'reason') ?? json(p, 300))];
  }
  if (t.startsWith('lifecycle.session.')) {
    const what = t.slice('lifecycle.session.'.length);
    if (what === 'created' || what === 'resumed') {
      const where = str(p, 'cwd', 'directory');
      const model = str(p, 'model');
      const title = str(p, 'title');
      const verb = what === 'created' ? 'started' : 'resumed';
      const text = [verb, where && ` in ${where}`, model && `, ${model}`, title && `: ${title}`];
      return ['session', 'session', text.filter(Boolean).join('')];
    }
    if (what === 'ended') return ['session', 'session', `ended${paren(str(p, 'reason'))}`];
    const cls = QUIET.has(t) ? 'quiet' : 'session';
    return [cls, 'session', `${what} ${str(p, 'status', 'title') ?? ''}`.trim()];
  }
  return [QUIET.has(t) ? 'quiet' : 'other', t, firstLine(summaryOf(p), 200)];
}

function setState(r, tone, text) {
  r.state.className = `state ${tone}`;
  setText(r.state, text);
}

function usd(p) {
  const micros = num(p, 'cost_usd_micros');
  return micros !== undefined ? micros / 1e6 : num(p, 'cost_usd');
}

function agentLabel(actor) {
  return actor && actor !== 'user' ? String(actor) : 'assistant';
}

function agentName(p) {
  return str(p, 'agent_type', 'agent', 'title', 'agent_id') ?? 'a subagent';
}

// What a person reads first of a tool's input: the command, the file, the pattern.
export function subject(tool, input) {
  if (input === null || input === undefined) return '';
  if (typeof input === 'string') return firstLine(input);
  const t = String(tool).toLowerCase();
  if ((t === 'grep' || t === 'glob') && str(input, 'pattern')) {
    return str(input, 'path') ? `${input.pattern} in ${input.path}` : input.pattern;
  }
  if (t === 'task' || t === 'agent') return firstLine(str(input, 'description', 'subagent_type') ?? '');
  const s = str(input, ...SUBJECT_KEYS);
  return firstLine(s ?? json(input, 160).replace(/\s+/g, ' '));
}

function outputText(out, err) {
  const parts = [];
  if (typeof out === 'string') parts.push(out);
  else if (out && typeof out === 'object') {
    if (typeof out.stdout === 'string' || typeof out.stderr === 'string') {
      if (out.stdout) parts.push(out.stdout);
      if (out.stderr) parts.push(out.stderr);
    } else if (Object.keys(out).length) parts.push(json(out));
  }
  if (err && !parts.includes(err)) parts.push(err);
  return parts.join('\n');
}

function summaryOf(p) {
  if (!p || typeof p !== 'object') return String(p ?? '');
  const s = str(p, 'text', 'message', 'title', 'status', 'reason');
  return s ?? json(p, 300).replace(/\s+/g, ' ');
}

export { usd };
