// @dstream/client: dstream for Node, through the dstream C library (libdstream_ffi) and koffi.
//
//   import { connect } from "@dstream/client";
//   const c = connect();                        // $DSTREAM_SOCKET, else the default socket
//   const lsn = c.append("demo", { type: "user.input", payload: { text: "hi" } });
//   for await (const event of c.subscribe("demo", 1)) { ... }
//   const cp = c.checkpoint.request({ session_id: "demo", key: "deploy-1" });
//   const decided = await c.checkpoint.await(cp.id, 60000);
//
// The library is found at $DSTREAM_FFI_LIB, else in the repository's target/release or
// target/debug (build it with `cargo build --release -p dstream-ffi`). Every string the
// library returns is freed with ds_string_free.

import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import koffi from "koffi";

const here = dirname(fileURLToPath(import.meta.url));
const LIB_NAME = process.platform === "darwin" ? "libdstream_ffi.dylib"
  : process.platform === "win32" ? "dstream_ffi.dll" : "libdstream_ffi.so";

function libraryPath() {
  if (process.env.DSTREAM_FFI_LIB) return process.env.DSTREAM_FFI_LIB;
  for (const profile of ["release", "debug"]) {
    const p = join(here, "..", "..", "target", profile, LIB_NAME);
    if (existsSync(p)) return p;
  }
  throw new Error(`${LIB_NAME} not found: build it with \`cargo build --release -p dstream-ffi\` or set DSTREAM_FFI_LIB`);
}

const lib = koffi.load(libraryPath());
const Client = koffi.opaque("ds_client");
const EventCb = koffi.proto("void ds_event_cb(void *user_data, const char *event_json, size_t len)");
const ffi = {
  version: lib.func("const char *ds_version(void)"),
  lastError: lib.func("size_t ds_last_error(_Out_ uint8_t *buf, size_t cap)"),
  connect: lib.func("uint32_t ds_client_connect(const char *socket_path, _Out_ ds_client **out)"),
  connectOrStart: lib.func(
    "uint32_t ds_client_connect_or_start(const char *socket_path, const char *dstream_program, _Out_ ds_client **out)",
  ),
  call: lib.func("uint32_t ds_client_call(ds_client *c, const char *method, const char *params, _Out_ void **out)"),
  append: lib.func("uint32_t ds_append(ds_client *c, const char *session, const char *event, _Out_ uint64_t *lsn)"),
  ingest: lib.func("uint32_t ds_ingest(ds_client *c, const char *source, const char *raw, _Out_ void **out)"),
  subscribe: lib.func("uint32_t ds_subscribe(ds_client *c, const char *session, uint64_t from, ds_event_cb *cb, void *user, _Out_ uint64_t *sub)"),
  unsubscribe: lib.func("uint32_t ds_unsubscribe(ds_client *c, uint64_t sub)"),
  cpRequest: lib.func("uint32_t ds_checkpoint_request(ds_client *c, const char *params, _Out_ void **out)"),
  cpAwait: lib.func("uint32_t ds_checkpoint_await(ds_client *c, const char *id, uint64_t timeout_ms, _Out_ void **out)"),
  cpResolve: lib.func("uint32_t ds_checkpoint_resolve(ds_client *c, const char *id, const char *decision, const char *note, _Out_ void **out)"),
  stringFree: lib.func("void ds_string_free(void *s)"),
  clientFree: lib.func("void ds_client_free(ds_client *c)"),
};

const CODES = ["ok", "null", "utf8", "json", "connect", "rpc", "timeout", "closed", "panic", "internal"];

/** A failed call: `code` is the library's ds_result name ("connect", "rpc", ...). */
export class DstreamError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "DstreamError";
    this.code = CODES[code] ?? String(code);
  }
}

function lastError() {
  const size = Number(ffi.lastError(null, 0));
  if (size === 0) return "";
  const buf = Buffer.alloc(size);
  ffi.lastError(buf, size);
  return buf.toString("utf8", 0, size - 1);
}

function check(code) {
  if (code !== 0) throw new DstreamError(code, lastError());
}

/** Takes a string the library returned: parsed, and freed. */
function take(ptr) {
  if (!ptr) return null;
  try {
    return JSON.parse(koffi.decode(ptr, "char", -1));
  } finally {
    ffi.stringFree(ptr);
  }
}

function callAsync(fn, ...args) {
  return new Promise((resolve, reject) => {
    fn.async(...args, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

class DstreamClient {
  #c;
  constructor(handle) {
    this.#c = handle;
    const c = () => this.#handle();
    this.checkpoint = {
      /** Opens a checkpoint (or finds the one its key has); resolves once it is durable. */
      request: (params) => {
        const out = [null];
        check(ffi.cpRequest(c(), JSON.stringify(params), out));
        return take(out[0]);
      },
      /** Waits (off the JS thread) until the checkpoint is decided; with a timeout (ms),
       * resolves with it still pending when the time runs out. */
      await: async (id, timeoutMs = 0) => {
        const out = [null];
        const code = await callAsync(ffi.cpAwait, c(), id, timeoutMs, out);
        const cp = take(out[0]);
        if (code === 6 && cp) return cp; // timed out: still pending
        check(code);
        return cp;
      },
      /** Decides: "approve", "reject" or one of its options. */
      resolve: (id, decision, note = null) => {
        const out = [null];
        check(ffi.cpResolve(c(), id, decision, note, out));
        return take(out[0]);
      },
    };
  }

  #handle() {
    if (!this.#c) throw new DstreamError(7, "the client is closed");
    return this.#c;
  }

  /** Any method of the daemon's protocol. */
  call(method, params = {}) {
    const out = [null];
    check(ffi.call(this.#handle(), method, JSON.stringify(params), out));
    return take(out[0]);
  }

  /** Appends an event ({type, payload?, ...}); its LSN once durable. */
  append(sessionId, event) {
    const lsn = [0];
    check(ffi.append(this.#handle(), sessionId, JSON.stringify(event), lsn));
    return Number(lsn[0]);
  }

  /** Hands a raw agent event to the daemon's pipeline, e.g. ingest("claude-agent-sdk", message). */
  ingest(source, raw) {
    const out = [null];
    check(ffi.ingest(this.#handle(), source, JSON.stringify(raw), out));
    return take(out[0]);
  }

  /** Events of a session from `fromLsn` (at most `limit`). */
  read(sessionId, { fromLsn = 1, limit } = {}) {
    const params = { session_id: sessionId, from_lsn: fromLsn };
    if (limit !== undefined) params.limit = limit;
    return this.call("read", params).events;
  }

  /** The session's events from `fromLsn`, then live ones, each once and in order. Ends when
   * the loop breaks (the subscription is then closed). */
  async *subscribe(sessionId, fromLsn = 1) {
    const queue = [];
    let wake = null;
    const cb = koffi.register((_user, json, len) => {
      queue.push(json);
      if (wake) wake();
    }, koffi.pointer(EventCb));
    const sub = [0];
    try {
      check(ffi.subscribe(this.#handle(), sessionId, fromLsn, cb, null, sub));
    } catch (e) {
      koffi.unregister(cb);
      throw e;
    }
    // Events arrive from the library's thread: keep the event loop alive while we wait.
    const alive = setInterval(() => {}, 1 << 30);
    try {
      for (;;) {
        while (queue.length > 0) yield JSON.parse(queue.shift());
        await new Promise((r) => (wake = r));
        wake = null;
      }
    } finally {
      // Off the JS thread: unsubscribing waits for a callback in flight, which needs this
      // thread free to run.
      clearInterval(alive);
      await callAsync(ffi.unsubscribe, this.#handle(), sub[0]);
      koffi.unregister(cb);
    }
  }

  /** Closes the connection. */
  close() {
    if (this.#c) ffi.clientFree(this.#c);
    this.#c = null;
  }
}

/**
 * Connects to the daemon at `socketPath` (default: $DSTREAM_SOCKET, else the usual path).
 * With `{autostart: true}`, a daemon is started first when none answers (`dstream start
 * --auto`, run from `program`, else $DSTREAM_BIN, else `dstream` on PATH); this blocks for a
 * few seconds at most.
 */
export function connect(socketPath = null, { autostart = false, program = null } = {}) {
  const out = [null];
  check(autostart ? ffi.connectOrStart(socketPath, program, out) : ffi.connect(socketPath, out));
  return new DstreamClient(out[0]);
}

/** The library's version. */
export function version() {
  return ffi.version();
}

export { DstreamSessionStore } from "./session-store.js";
