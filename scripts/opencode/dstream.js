// dstream plugin for OpenCode (@dstream-opencode-plugin; `dstream uninstall opencode` removes it)
//
// Records every OpenCode event in the local dstream daemon, and lets dstream's policy allow,
// deny or edit tool calls before they run.
//
// Install:  dstream install opencode                 (this user: ~/.config/opencode/plugins/)
//           dstream install opencode --project DIR   (one project: DIR/.opencode/plugins/)
// It is plain JavaScript with no npm dependency: only node:net, node:fs, node:path and
// node:child_process, which Bun (OpenCode's runtime) provides. The install writes the path of
// the dstream program that installed it into DSTREAM_BIN below (DSTREAM_BIN in the environment
// overrides it).
//
// What it does:
// - Every hook call goes to the daemon as `ingest` with source "opencode" and the event
//   {hook: "event", event} for a bus event, or {hook: "tool.execute.before"|"…after", input,
//   output} for a tool call: one shape for all, the one the opencode mapping plugin reads.
// - The socket is DSTREAM_SOCKET, else $XDG_RUNTIME_DIR/dstream/dstream.sock, else
//   ~/.dstream/dstream.sock (as the dstream CLI decides). When the daemon restarts, the plugin
//   reconnects, backing off up to 5 s between attempts.
// - When no daemon answers, the plugin runs `dstream start --auto --json` in the background
//   (at most once a second at first, backing off to once a minute): it starts a daemon unless
//   autostart is off (daemon.autostart, DSTREAM_AUTOSTART=0), and says which socket and spool
//   folder to use. Once a daemon is up the plugin connects at once. If none can be started
//   (autostart off, no dstream program, a failure), the daemon counts as unreachable until a
//   connection succeeds: tool calls stop waiting for it (see below) and events stay queued.
// - Bus events are sent without waiting for the answer. While the daemon is away they wait in
//   a queue of at most 4 MiB; past that the oldest are written to the spool, the folder the
//   daemon drains when it starts (<data dir>/spool: from `dstream start`, else
//   $DSTREAM_DATA_DIR, $XDG_DATA_HOME/dstream or ~/.dstream/data; daemon/src/spool/mod.rs has
//   the format). When OpenCode exits, every event still queued is spooled the same way (an
//   "exit" listener with synchronous file calls; a process killed by a signal loses them, as
//   the plugin installs no signal handler, which would change how OpenCode exits). Events the
//   daemon had not answered when a connection broke are sent again on the next one; events
//   written to a live connection are never spooled, so none is stored twice. Past the spool's
//   bound (daemon.spool_max_bytes) an event is only counted in spool/overflow.jsonl. Events
//   lost that way or by a file error are counted, and the count is stored as
//   {hook: "dstream.dropped", count, sessionID} once the daemon is back (or spooled at exit).
// - For `tool.execute.before` and `tool.execute.after` the plugin waits for the answer (at most
//   DSTREAM_HOOK_TIMEOUT_MS, default 30000 ms; while the daemon is unreachable, only for one
//   immediate connection attempt). A "deny" decision throws, which makes OpenCode refuse the
//   tool call with the reason; an allow with `updated_input` replaces the tool's arguments.
//   No answer (daemon down, an error, the deadline) lets the call run, unless
//   DSTREAM_HOOK_FAIL_CLOSED=1, which refuses it instead (a refused call, if spooled, says so:
//   "answered": "deny").
// - When policy holds the call for a person (decision "ask" with a checkpoint), the plugin
//   waits with `checkpoint.await` until someone decides (`dstream approve|reject|inbox`), up to
//   the checkpoint's own deadline plus 5 s, sent again on a new connection if the daemon
//   restarts meanwhile. A rejection throws; an approval with an edited input replaces the
//   arguments; if no verdict arrives by then, the checkpoint's default (on_timeout) applies.
// - Socket, process and file trouble never reaches OpenCode, and the plugin never keeps
//   OpenCode from exiting.

import { execFile } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";

// The dstream program the plugin runs to start a daemon (`dstream start --auto --json`).
// `dstream install opencode` writes its own absolute path here; DSTREAM_BIN overrides it.
const DSTREAM_BIN = process.env.DSTREAM_BIN || "dstream"; // @dstream-bin

const MAX_QUEUE_BYTES = 4 * 1024 * 1024;
const MAX_REPLY_BYTES = 64 * 1024 * 1024;
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 5000;
const SESSION_ID = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;
// How long past a checkpoint's deadline the plugin waits for the daemon's verdict before it
// applies the checkpoint's default itself (the daemon may be restarting).
const CHECKPOINT_GRACE_MS = 5000;
// `dstream start` is given this long; it is tried again after 1 s, then 2 s, … up to 60 s.
const START_TIMEOUT_MS = 5000;
const START_BACKOFF_MIN_MS = 1000;
const START_BACKOFF_MAX_MS = 60000;
// The spool's bound when `dstream start` did not say (daemon.spool_max_bytes' default).
const DEFAULT_SPOOL_MAX_BYTES = 268435456;
// overflow.jsonl is not written past this size (as the dstream hook does).
const MAX_OVERFLOW_FILE_BYTES = 1 << 20;

function socketPath(env) {
  if (env.DSTREAM_SOCKET) return env.DSTREAM_SOCKET;
  if (env.XDG_RUNTIME_DIR) return `${env.XDG_RUNTIME_DIR}/dstream/dstream.sock`;
  return `${env.HOME || "."}/.dstream/dstream.sock`;
}

// The spool folder when `dstream start` has not told: <data dir>/spool, the data dir chosen
// as the dstream CLI does without a config file.
function spoolDir(env) {
  let data = `${env.HOME || "."}/.dstream/data`;
  if (env.DSTREAM_DATA_DIR) data = env.DSTREAM_DATA_DIR;
  else if (env.XDG_DATA_HOME) data = `${env.XDG_DATA_HOME}/dstream`;
  return path.join(data, "spool");
}

function flag(value) {
  return value !== undefined && !["", "0", "false", "no"].includes(value.trim());
}

function positiveInt(value, fallback) {
  const n = Number.parseInt(value ?? "", 10);
  return Number.isFinite(n) && n > 0 ? n : fallback;
}

function isPlainObject(v) {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

// JSON text of a value; cycles and BigInts (which JSON.stringify refuses) become strings.
function toJson(value) {
  try {
    return JSON.stringify(value);
  } catch {
    const seen = new WeakSet();
    return JSON.stringify(value, (_key, v) => {
      if (typeof v === "bigint") return v.toString();
      if (typeof v === "object" && v !== null) {
        if (seen.has(v)) return "[circular]";
        seen.add(v);
      }
      return v;
    });
  }
}

// The session an OpenCode bus event belongs to, if it names one.
function sessionOf(event) {
  const p = event?.properties;
  const id =
    p?.sessionID ??
    p?.info?.sessionID ??
    p?.part?.sessionID ??
    (String(event?.type).startsWith("session.") ? p?.info?.id : undefined);
  return typeof id === "string" ? id : undefined;
}

// The first JSON object `dstream start --json` printed, or null.
function parseStart(stdout) {
  for (const line of String(stdout ?? "").split("\n")) {
    try {
      const v = JSON.parse(line);
      if (isPlainObject(v)) return v;
    } catch {
      // not this line
    }
  }
  return null;
}

// Wall-clock nanoseconds that never go backwards in this process: spool file names start
// with them, so that sorting the names sorts the writes.
const CLOCK_BASE = BigInt(Date.now()) * 1000000n - process.hrtime.bigint();
let lastStamp = 0n;
function stamp() {
  let ns = CLOCK_BASE + process.hrtime.bigint();
  if (ns <= lastStamp) ns = lastStamp + 1n;
  lastStamp = ns;
  return ns.toString().padStart(20, "0");
}

let spoolFiles = 0;

function writeAll(fd, text) {
  const buf = Buffer.from(text);
  let at = 0;
  while (at < buf.length) at += fs.writeSync(fd, buf, at, buf.length - at);
}

// The spool of dstream's data directory (see daemon/src/spool/mod.rs for the layout), written
// with synchronous calls only, so that it also works while the process exits.
class Spool {
  constructor(dir) {
    this.dir = dir;
    this.maxBytes = DEFAULT_SPOOL_MAX_BYTES;
  }

  // Writes `items` ({line, at, session}: a record line, when the event came, its session) as
  // one spool file, durably. Returns how many events are lost: 0 when written; all of them
  // when the spool is full (then noted in overflow.jsonl) or a file call failed.
  write(items) {
    if (items.length === 0) return 0;
    let part = null;
    try {
      this.prepare();
      const body = items.map((i) => i.line).join("");
      if (this.used() + Buffer.byteLength(body) > this.maxBytes) {
        this.overflow(items);
        return items.length;
      }
      const name = `${stamp()}-opencode-${process.pid}-${spoolFiles++}.jsonl`;
      part = path.join(this.dir, `.${name}.part`);
      const fd = fs.openSync(part, "wx", 0o600);
      try {
        writeAll(fd, body);
        fs.fsyncSync(fd);
      } finally {
        fs.closeSync(fd);
      }
      fs.renameSync(part, path.join(this.dir, name));
      part = null;
      try {
        const dir = fs.openSync(this.dir, "r");
        try {
          fs.fsyncSync(dir);
        } finally {
          fs.closeSync(dir);
        }
      } catch {
        // The file is in place; only its durability across a power loss is less sure.
      }
      return 0;
    } catch {
      if (part) {
        try {
          fs.unlinkSync(part);
        } catch {
          // nothing more to do
        }
      }
      return items.length;
    }
  }

  // The folder, created owner-only, and only if it is this user's own folder (a folder
  // someone else controls could read the events, or feed the daemon events of its own).
  prepare() {
    fs.mkdirSync(path.dirname(this.dir), { recursive: true, mode: 0o700 });
    try {
      fs.mkdirSync(this.dir, { mode: 0o700 });
    } catch (e) {
      if (e?.code !== "EEXIST") throw e;
    }
    const st = fs.lstatSync(this.dir);
    if (!st.isDirectory()) throw new Error(`${this.dir} is not a folder`);
    if (typeof process.getuid === "function" && st.uid !== process.getuid()) {
      throw new Error(`${this.dir} belongs to another user`);
    }
    if ((st.mode & 0o077) !== 0) fs.chmodSync(this.dir, 0o700);
  }

  // Bytes the spool holds: pending files, files being written, overflow.jsonl.
  used() {
    let total = 0;
    for (const name of fs.readdirSync(this.dir)) {
      const pending = name.endsWith(".jsonl") && !name.startsWith(".");
      const part = name.startsWith(".") && name.endsWith(".jsonl.part");
      if (!pending && !part) continue;
      try {
        total += fs.statSync(path.join(this.dir, name)).size;
      } catch {
        // gone meanwhile (a daemon drained it)
      }
    }
    return total;
  }

  // One line per lost event, where the daemon and `dstream doctor` find them.
  overflow(items) {
    const file = path.join(this.dir, "overflow.jsonl");
    try {
      if (fs.statSync(file).size > MAX_OVERFLOW_FILE_BYTES) return;
    } catch {
      // no such file yet
    }
    const text = items
      .map(
        (i) =>
          toJson({ at_ms: i.at, source: "opencode", session_id: i.session ?? null, bytes: Buffer.byteLength(i.line) }) +
          "\n",
      )
      .join("");
    const fd = fs.openSync(file, "a", 0o600);
    try {
      writeAll(fd, text);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  }
}

// The links to spool from when the process exits (one "exit" listener for all of them).
const exiting = new Set();
let exitListener = false;
function spoolAtExit(link) {
  exiting.add(link);
  if (exitListener) return;
  exitListener = true;
  process.on("exit", () => {
    for (const l of exiting) {
      try {
        l.spoolAll();
      } catch {
        // never disturb the exit
      }
    }
  });
}

// One connection to the daemon that comes back by itself.
class Link {
  constructor(env) {
    this.path = socketPath(env);
    this.spool = new Spool(spoolDir(env));
    this.socket = null;
    this.connecting = false;
    this.queue = []; // messages waiting for a connection
    this.inFlight = new Map(); // id -> message sent and not yet answered
    this.bytes = 0; // held by queue and inFlight
    this.nextId = 1;
    this.dropped = 0;
    this.lastSession = undefined;
    this.backoff = BACKOFF_MIN_MS;
    this.nextAttempt = 0;
    this.timer = null;
    this.buffer = "";
    // `dstream start`: running now; not again before nextStart; the daemon is unreachable
    // (no program, autostart off, or it failed) until a connection or a start succeeds.
    this.starting = false;
    this.nextStart = 0;
    this.startBackoff = START_BACKOFF_MIN_MS;
    this.unreachable = false;
  }

  // Sends without waiting for the answer.
  notify(params) {
    this.send(this.message(params));
  }

  // Sends and resolves with {result} or {error}, or null when no answer came in time. While
  // the daemon is unreachable an ingest does not wait for it: one connection attempt is made
  // at once, and if it fails the answer is null (the message stays queued). `prepare` sees
  // the message before it is sent.
  request(params, timeoutMs, method = "ingest", prepare = undefined) {
    return new Promise((resolve) => {
      const msg = this.message(params, method);
      prepare?.(msg);
      const timer = setTimeout(() => this.settle(msg, null), timeoutMs);
      timer.unref?.();
      msg.waiter = { resolve, timer };
      if (this.unreachable && method === "ingest" && !this.socket && !this.connecting) {
        if (this.timer) clearTimeout(this.timer);
        this.timer = null;
        this.nextAttempt = 0;
      }
      this.send(msg);
    });
  }

  message(params, method = "ingest") {
    if (typeof params.session_id === "string") this.lastSession = params.session_id;
    const id = this.nextId++;
    const head = `{"jsonrpc":"2.0","id":${id},"method":${JSON.stringify(method)},"params":`;
    const line = head + toJson(params) + "}\n";
    return {
      id,
      method,
      line,
      size: Buffer.byteLength(line),
      waiter: null,
      paramsAt: head.length, // the params' JSON is line.slice(paramsAt, -2)
      at: Date.now(),
      session: typeof params.session_id === "string" ? params.session_id : undefined,
      answered: undefined, // "deny" once a fail-closed tool call was refused without an answer
      denyIfUnanswered: false, // a fail-closed tool.execute.before, refused if no answer comes
    };
  }

  // The spool record of an ingest message: its params (source, session_id, event), as sent,
  // with the record's own fields.
  record(msg) {
    const params = msg.line.slice(msg.paramsAt, -2);
    const answered = msg.answered ?? (msg.waiter && msg.denyIfUnanswered ? "deny" : undefined);
    const extra = answered ? `,"answered":${JSON.stringify(answered)}` : "";
    const line = `{"v":1,"received_ms":${msg.at},${params.slice(1, -1)}${extra}}\n`;
    return { line, at: msg.at, session: msg.session };
  }

  // Writes these messages (never sent) to the spool instead of holding them; only events are
  // spooled, anything else is dropped. What cannot be written is counted as dropped.
  spill(msgs) {
    const events = msgs.filter((m) => m.method === "ingest");
    let lost = 0;
    try {
      lost = this.spool.write(events.map((m) => this.record(m)));
    } catch {
      lost = events.length;
    }
    this.dropped += lost;
    for (const m of events) this.settle(m, null);
    for (const m of msgs) if (m.method !== "ingest") this.drop(m);
  }

  // At exit: every event still waiting (never sent) goes to the spool, after a notice of
  // what was lost, if anything was.
  spoolAll() {
    const waiting = this.queue.filter((m) => m.method === "ingest");
    this.queue = [];
    if (this.dropped > 0) {
      const notice = this.droppedNotice();
      if (notice) waiting.unshift(notice);
    }
    if (waiting.length === 0) return;
    this.spool.write(waiting.map((m) => this.record(m)));
  }

  droppedNotice() {
    const count = this.dropped;
    this.dropped = 0;
    return this.message({
      source: "opencode",
      ...(this.lastSession ? { session_id: this.lastSession } : {}),
      event: { hook: "dstream.dropped", count, sessionID: this.lastSession },
    });
  }

  settle(msg, value) {
    const waiter = msg.waiter;
    if (!waiter) return;
    msg.waiter = null;
    clearTimeout(waiter.timer);
    waiter.resolve(value);
  }

  drop(msg) {
    this.dropped += 1;
    this.settle(msg, null);
  }

  send(msg) {
    // Room is made by moving the oldest waiting messages to the spool; a message that cannot
    // fit (or arrives while the daemon has not answered a full budget's worth) goes there too.
    const spilled = [];
    while (this.bytes + msg.size > MAX_QUEUE_BYTES && this.queue.length > 0) {
      const old = this.queue.shift();
      this.bytes -= old.size;
      spilled.push(old);
    }
    const fits = this.bytes + msg.size <= MAX_QUEUE_BYTES;
    if (!fits) spilled.push(msg);
    if (spilled.length > 0) this.spill(spilled);
    if (!fits) return;
    this.bytes += msg.size;
    this.queue.push(msg);
    this.flush();
  }

  flush() {
    if (!this.socket) {
      this.ensureConnected();
      return;
    }
    if (this.dropped > 0) {
      const notice = this.droppedNotice();
      this.bytes += notice.size;
      this.queue.unshift(notice);
    }
    while (this.queue.length > 0) {
      const msg = this.queue.shift();
      this.inFlight.set(msg.id, msg);
      this.socket.write(msg.line);
    }
  }

  ensureConnected() {
    if (this.socket || this.connecting || this.timer) return;
    const wait = this.nextAttempt - Date.now();
    if (wait > 0) {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.ensureConnected();
      }, wait);
      this.timer.unref?.();
      return;
    }
    this.connecting = true;
    let connected = false;
    const socket = net.createConnection(this.path);
    socket.setEncoding("utf8");
    socket.unref?.();
    socket.on("connect", () => {
      connected = true;
      this.connecting = false;
      this.socket = socket;
      this.backoff = BACKOFF_MIN_MS;
      this.startBackoff = START_BACKOFF_MIN_MS;
      this.nextStart = 0;
      this.unreachable = false;
      this.buffer = "";
      this.flush();
    });
    socket.on("data", (chunk) => this.receive(socket, chunk));
    socket.on("error", () => {}); // "close" follows and handles it
    socket.on("close", () => this.closed(socket, connected));
  }

  receive(socket, chunk) {
    this.buffer += chunk;
    let nl;
    while ((nl = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, nl);
      this.buffer = this.buffer.slice(nl + 1);
      let frame;
      try {
        frame = JSON.parse(line);
      } catch {
        continue;
      }
      const msg = this.inFlight.get(frame?.id);
      if (!msg) continue;
      this.inFlight.delete(frame.id);
      this.bytes -= msg.size;
      this.settle(msg, frame.error ? { error: frame.error } : { result: frame.result });
    }
    if (this.buffer.length > MAX_REPLY_BYTES) socket.destroy();
  }

  closed(socket, wasConnected) {
    if (this.socket === socket) this.socket = null;
    this.connecting = false;
    // Whatever the daemon did not answer may not have reached it: send it again, in order.
    const unanswered = [...this.inFlight.values()];
    this.inFlight.clear();
    this.queue.unshift(...unanswered);
    if (wasConnected) {
      this.nextAttempt = 0;
    } else {
      const jitter = Math.random() * this.backoff * 0.2;
      this.nextAttempt = Date.now() + this.backoff + jitter;
      this.backoff = Math.min(this.backoff * 2, BACKOFF_MAX_MS);
      this.autostart();
      // No daemon to wait for: the tool calls waiting for one get "no answer" now.
      if (this.unreachable) this.giveUp();
    }
    if (this.queue.length > 0) this.ensureConnected();
  }

  // Answers every waiting ingest (never sent) with "no answer"; the messages stay queued.
  giveUp() {
    for (const m of this.queue) if (m.method === "ingest") this.settle(m, null);
  }

  // No daemon answered: `dstream start --auto --json`, in the background, at most once per
  // start backoff. It starts a daemon if autostart is on, and says where the spool is.
  autostart() {
    if (this.starting || Date.now() < this.nextStart) return;
    this.starting = true;
    this.nextStart = Date.now() + this.startBackoff;
    this.startBackoff = Math.min(this.startBackoff * 2, START_BACKOFF_MAX_MS);
    let done = false;
    const finish = (stdout) => {
      if (done) return;
      done = true;
      try {
        this.started(parseStart(stdout));
      } catch {
        // never disturb OpenCode
      }
    };
    try {
      const child = execFile(
        DSTREAM_BIN,
        ["start", "--auto", "--json"],
        { timeout: START_TIMEOUT_MS, maxBuffer: 1 << 20, windowsHide: true },
        (_error, stdout) => finish(stdout),
      );
      child.on?.("error", () => {}); // the callback gets it
      child.unref?.();
      for (const s of [child.stdin, child.stdout, child.stderr]) s?.unref?.();
    } catch {
      finish("");
    }
  }

  // What `dstream start` said (null: it could not run, or printed nothing readable).
  started(info) {
    this.starting = false;
    if (typeof info?.spool_dir === "string" && info.spool_dir) this.spool.dir = info.spool_dir;
    if (Number.isSafeInteger(info?.spool_max_bytes) && info.spool_max_bytes > 0) {
      this.spool.maxBytes = info.spool_max_bytes;
    }
    if (typeof info?.socket === "string" && info.socket) this.path = info.socket;
    if (["now", "already", "other"].includes(info?.started)) {
      this.unreachable = false;
      this.nextAttempt = 0;
      this.backoff = BACKOFF_MIN_MS;
      if (this.timer) {
        clearTimeout(this.timer);
        this.timer = null;
      }
      this.ensureConnected();
      return;
    }
    this.unreachable = true;
    this.giveUp();
  }
}

export const DstreamPlugin = async () => {
  const env = process.env;
  const link = new Link(env);
  spoolAtExit(link);
  const timeoutMs = positiveInt(env.DSTREAM_HOOK_TIMEOUT_MS, 30000);
  const failClosed = flag(env.DSTREAM_HOOK_FAIL_CLOSED);

  const ingest = (event, sessionID) => ({
    source: "opencode",
    ...(typeof sessionID === "string" && SESSION_ID.test(sessionID) ? { session_id: sessionID } : {}),
    event,
  });

  // Sends a tool hook and waits: the decision, or null without one.
  const gate = async (hook, input, output) => {
    const refusable = failClosed && hook === "tool.execute.before";
    let reply = null;
    let sent = null;
    try {
      const params = ingest({ hook, input, output }, input?.sessionID);
      reply = await link.request(params, timeoutMs, "ingest", (msg) => {
        sent = msg;
        msg.denyIfUnanswered = refusable;
      });
    } catch {
      reply = null;
    }
    if (!reply || reply.error) {
      if (refusable) {
        if (sent && !reply) sent.answered = "deny";
        const why = reply ? `the daemon refused it: ${reply.error?.message}` : "no answer from the daemon";
        throw new Error(`dstream could not check this tool call (${why}); denied because DSTREAM_HOOK_FAIL_CLOSED is set`);
      }
      return null;
    }
    return isPlainObject(reply.result?.decision) ? reply.result.decision : null;
  };

  // Waits for a person's decision on a checkpoint; the verdict, as a decision.
  const awaitCheckpoint = async (checkpoint) => {
    const deadline = Number(checkpoint.deadline_ms) || Date.now();
    const waitMs = Math.max(0, deadline - Date.now()) + CHECKPOINT_GRACE_MS;
    let reply = null;
    try {
      reply = await link.request(
        { id: checkpoint.id, session_id: checkpoint.session_id },
        waitMs,
        "checkpoint.await",
      );
    } catch {
      reply = null;
    }
    const decided = reply?.result?.decision;
    if (isPlainObject(decided)) {
      const state = reply.result.state;
      let reason =
        state === "expired"
          ? `nobody decided before the deadline; dstream applied the default (${decided.action})`
          : `${state} by ${decided.decided_by} (dstream checkpoint ${checkpoint.id})`;
      if (decided.note) reason += `: ${decided.note}`;
      return { action: decided.action, reason, decided_by: decided.decided_by, updated_input: decided.input };
    }
    // No verdict reached us in time: the default the daemon would have applied.
    const why = reply?.error ? `the daemon answered: ${reply.error.message}` : "no decision reached the plugin by its deadline";
    return {
      action: checkpoint.on_timeout === "allow" ? "allow" : "deny",
      reason: `checkpoint ${checkpoint.id}: ${why}; its default (${checkpoint.on_timeout}) applies`,
    };
  };

  return {
    event: async ({ event }) => {
      try {
        link.notify(ingest({ hook: "event", event }, sessionOf(event)));
      } catch {
        // Recording must never disturb OpenCode.
      }
    },

    "tool.execute.before": async (input, output) => {
      let decision = await gate("tool.execute.before", input, output);
      if (decision?.action === "ask" && isPlainObject(decision.checkpoint) && !decision.checkpoint.decision) {
        decision = await awaitCheckpoint(decision.checkpoint);
      }
      if (decision?.action === "deny") {
        const by = decision.decided_by || "dstream policy";
        throw new Error(decision.reason || `denied by ${by} (dstream)`);
      }
      if (decision?.action === "allow" && isPlainObject(decision.updated_input) && isPlainObject(output)) {
        if (!isPlainObject(output.args)) output.args = {};
        for (const key of Object.keys(output.args)) {
          if (!(key in decision.updated_input)) delete output.args[key];
        }
        Object.assign(output.args, decision.updated_input);
      }
    },

    "tool.execute.after": async (input, output) => {
      await gate("tool.execute.after", input, output);
    },
  };
};
