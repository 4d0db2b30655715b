// Round trips through the C library against a real daemon. Run by tests/tests/ffi_node.rs,
// which starts the daemon and sets DSTREAM_SOCKET (and DSTREAM_FFI_LIB).
import assert from "node:assert/strict";
import { test } from "node:test";
import { connect, DstreamError, version } from "../index.js";

const socket = process.env.DSTREAM_SOCKET;

test("version", () => {
  assert.match(version(), /^\d+\.\d+\.\d+/);
});

test("append, then read back", () => {
  const c = connect(socket);
  assert.equal(c.append("node-rt", { type: "user.input", payload: { text: "one" } }), 1);
  assert.equal(c.append("node-rt", { type: "user.input", payload: { text: "two" } }), 2);
  const events = c.read("node-rt");
  assert.deepEqual(events.map((e) => e.payload.text), ["one", "two"]);
  assert.equal(events[1].lsn, 2);
  c.close();
});

test("ingest runs the pipeline: an Agent SDK message becomes stream chunks", () => {
  const c = connect(socket);
  const r = c.ingest("claude-agent-sdk", {
    type: "system", subtype: "init", session_id: "node-sdk", cwd: "/tmp", tools: [],
  });
  assert.ok(r.events.length >= 1, JSON.stringify(r));
  assert.equal(r.events[0].session_id, "node-sdk");
  c.close();
});

test("a subscription is an async iterator: history, then live events, each once", async () => {
  const c = connect(socket);
  c.append("node-sub", { type: "t", payload: { n: 1 } });
  const seen = [];
  const writer = connect(socket);
  for await (const e of c.subscribe("node-sub", 1)) {
    seen.push(e.lsn);
    if (e.lsn === 1) for (let n = 2; n <= 20; n++) writer.append("node-sub", { type: "t", payload: { n } });
    if (e.lsn === 20) break;
  }
  assert.deepEqual(seen, Array.from({ length: 20 }, (_, i) => i + 1));
  writer.close();
  c.close();
});

test("a checkpoint round trip: request, await, resolve from another client", async () => {
  const c = connect(socket);
  const cp = c.checkpoint.request({
    session_id: "node-cp", key: "deploy-7", summary: "deploy 7",
    options: ["approve", "reject", { id: "later", action: "deny", label: "Not now" }],
  });
  assert.equal(cp.state, "pending");
  const pending = await c.checkpoint.await(cp.id, 50);
  assert.equal(pending.state, "pending", "a short await returns it still pending");
  const waiting = c.checkpoint.await(cp.id);
  const decider = connect(socket);
  const decided = decider.checkpoint.resolve(cp.id, "later", "after the freeze");
  assert.equal(decided.state, "rejected");
  const got = await waiting;
  assert.equal(got.decision.decision, "later");
  assert.equal(got.decision.note, "after the freeze");
  assert.throws(() => decider.checkpoint.resolve(cp.id, "approve"), (e) => e instanceof DstreamError && e.code === "rpc" && /already decided/.test(e.message));
  decider.close();
  c.close();
});

test("errors carry the library's code and message", () => {
  assert.throws(() => connect("/nonexistent/dstream.sock"), (e) => e.code === "connect" && /no dstream daemon/.test(e.message));
  const c = connect(socket);
  assert.throws(() => c.append("../bad", { type: "t" }), (e) => e.code === "rpc" && /-32001/.test(e.message));
  assert.throws(() => c.call("no.such.method"), (e) => e.code === "rpc" && /-32601/.test(e.message));
  c.close();
  assert.throws(() => c.append("s", { type: "t" }), (e) => e.code === "closed");
});

test("with autostart, connect starts a daemon when none answers", async () => {
  const { mkdtempSync, readFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const dir = mkdtempSync(join(tmpdir(), "dstream-node-autostart-"));
  const lonely = join(dir, "run", "dstream.sock");
  // The started daemon's own data directory (the test's daemon holds the usual one).
  process.env.DSTREAM_DATA_DIR = join(dir, "data");
  delete process.env.DSTREAM_AUTOSTART;
  assert.throws(() => connect(lonely), (e) => e.code === "connect");
  process.env.DSTREAM_AUTOSTART = "0";
  assert.throws(() => connect(lonely, { autostart: true }), (e) => e.code === "connect" && /autostart is off/.test(e.message));
  delete process.env.DSTREAM_AUTOSTART;
  const c = connect(lonely, { autostart: true, program: process.env.DSTREAM_BIN });
  try {
    assert.equal(c.append("node-autostart", { type: "t" }), 1);
  } finally {
    c.close();
    process.kill(Number(readFileSync(join(dir, "data", "LOCK"), "utf8")), "SIGTERM");
  }
});
