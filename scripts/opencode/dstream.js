// dstream plugin for OpenCode (@dstream-opencode-plugin; `dstream uninstall opencode` removes it)
//
// Records every OpenCode event in the local dstream daemon, and lets dstream's policy allow,
// deny or edit tool calls before they run.
//
// Install:  dstream install opencode                 (this user: ~/.config/opencode/plugins/)
//           dstream install opencode --project DIR   (one project: DIR/.opencode/plugins/)
// It is plain JavaScript with no npm dependency: only node:net, which Bun (OpenCode's runtime)
// provides.
//
// What it does:
// - Every hook call goes to the daemon as `ingest` with source "opencode" and the event
//   {hook: "event", event} for a bus event, or {hook: "tool.execute.before"|"…after", input,
//   output} for a tool call: one shape for all, the one the opencode mapping plugin reads.
// - Bus events are sent without waiting for the answer. While the daemon is away they wait in
//   a queue of at most 4 MiB; past that the oldest are dropped and counted, and the count is
//   stored as {hook: "dstream.dropped", count, sessionID} once the daemon is back. Events the
//   daemon had not answered when a connection broke are sent again on the next one.
// - For `tool.execute.before` and `tool.execute.after` the plugin waits for the answer (at most
//   DSTREAM_HOOK_TIMEOUT_MS, default 30000 ms). A "deny" decision throws, which makes OpenCode
//   refuse the tool call with the reason; an allow with `updated_input` replaces the tool's
//   arguments. No answer (daemon down, an error, the deadline) lets the call run, unless
//   DSTREAM_HOOK_FAIL_CLOSED=1, which refuses it instead.
// - When policy holds the call for a person (decision "ask" with a checkpoint), the plugin
//   waits with `checkpoint.await` until someone decides (`dstream approve|reject|inbox`), up to
//   the checkpoint's own deadline plus 5 s, sent again on a new connection if the daemon
//   restarts meanwhile. A rejection throws; an approval with an edited input replaces the
//   arguments; if no verdict arrives by then, the checkpoint's default (on_timeout) applies.
// - The socket is DSTREAM_SOCKET, else $XDG_RUNTIME_DIR/dstream/dstream.sock, else
//   ~/.dstream/dstream.sock (as the dstream CLI decides). When the daemon restarts, the plugin
//   reconnects, backing off up to 5 s between attempts.
// - Socket trouble never reaches OpenCode, and the plugin never keeps OpenCode from exiting.

import net from "node:net";

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

function socketPath(env) {
  if (env.DSTREAM_SOCKET) return env.DSTREAM_SOCKET;
  if (env.XDG_RUNTIME_DIR) return `${env.XDG_RUNTIME_DIR}/dstream/dstream.sock`;
  return `${env.HOME || "."}/.dstream/dstream.sock`;
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

// One connection to the daemon that comes back by itself.
class Link {
  constructor(path) {
    this.path = path;
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
  }

  // Sends without waiting for the answer.
  notify(params) {
    this.send(this.message(params));
  }

  // Sends and resolves with {result} or {error}, or null when no answer came in time.
  request(params, timeoutMs, method = "ingest") {
    return new Promise((resolve) => {
      const msg = this.message(params, method);
      const timer = setTimeout(() => this.settle(msg, null), timeoutMs);
      timer.unref?.();
      msg.waiter = { resolve, timer };
      this.send(msg);
    });
  }

  message(params, method = "ingest") {
    if (typeof params.session_id === "string") this.lastSession = params.session_id;
    const id = this.nextId++;
    const line = toJson({ jsonrpc: "2.0", id, method, params }) + "\n";
    return { id, line, size: Buffer.byteLength(line), waiter: null };
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
    // Room is made by dropping the oldest waiting messages; a message that cannot fit (or
    // arrives while the daemon has not answered a full budget's worth) is itself dropped.
    while (this.bytes + msg.size > MAX_QUEUE_BYTES && this.queue.length > 0) {
      const old = this.queue.shift();
      this.bytes -= old.size;
      this.drop(old);
    }
    if (this.bytes + msg.size > MAX_QUEUE_BYTES) {
      this.drop(msg);
      return;
    }
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
      const count = this.dropped;
      this.dropped = 0;
      const notice = this.message({
        source: "opencode",
        event: { hook: "dstream.dropped", count, sessionID: this.lastSession },
        ...(this.lastSession ? { session_id: this.lastSession } : {}),
      });
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
    }
    if (this.queue.length > 0) this.ensureConnected();
  }
}

export const DstreamPlugin = async () => {
  const env = process.env;
  const link = new Link(socketPath(env));
  const timeoutMs = positiveInt(env.DSTREAM_HOOK_TIMEOUT_MS, 30000);
  const failClosed = flag(env.DSTREAM_HOOK_FAIL_CLOSED);

  const ingest = (event, sessionID) => ({
    source: "opencode",
    event,
    ...(typeof sessionID === "string" && SESSION_ID.test(sessionID) ? { session_id: sessionID } : {}),
  });

  // Sends a tool hook and waits: the decision, or null without one.
  const gate = async (hook, input, output) => {
    let reply = null;
    try {
      reply = await link.request(ingest({ hook, input, output }, input?.sessionID), timeoutMs);
    } catch {
      reply = null;
    }
    if (!reply || reply.error) {
      if (failClosed && hook === "tool.execute.before") {
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
