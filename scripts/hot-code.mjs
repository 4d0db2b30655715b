#!/usr/bin/env node
// Writes daemon/hot-code.order: the functions the release daemon runs once it has started,
// hottest first. The release build hands the file to the linker (daemon/build.rs), which puts
// those functions next to each other at the start of .text. The kernel maps code in 64 KiB
// runs around each page touched, so scattered hot functions keep most of the 14 MB of code
// resident under load; packed together they fit in about 2 MB.
//
// Run it again when the hot paths change (a new dependency, a renamed module, a new toolchain:
// the names carry hashes that change with them). Names the binary no longer has are skipped
// by the linker, so a stale file costs memory, never correctness.
//
//   cargo build --release -p dstream-daemon --bin dstream
//   node scripts/hot-code.mjs            # needs valgrind (Debian package valgrind)
//
// How: the daemon runs under callgrind; its counters are dumped once it answers `hello`
// (start-up), after it has settled (the search index opened on its own thread, start-up's code
// given back, the `hello` connection closed), after a quiet spell with no client, after each
// of three loads in turn (appends from 16 connections over 16 sessions and pipelined; ingests
// of the captured agent payloads; then every common request at once: appends, ingests, reads,
// a live subscriber), after an idle spell (the search index catching up, timers), and at exit.
// Functions of the binary with any cost after start-up are listed phase by phase, each by cost:
// the quiet spell's first, so that an idle daemon touches few pages; then the appends', so that
// an append load touches only the pages after those; then the ingests', the mixed load's, the
// idle spell's (the index catching up), the settling's (run once, then given back) and exit's.

import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = path.resolve(process.env.DSTREAM_BIN ?? path.join(repo, "target/release/dstream"));
const out = path.join(repo, "daemon/hot-code.order");
const LOAD_SECONDS = Number(process.env.HOT_CODE_LOAD_SECONDS ?? 60);
const QUIET_SECONDS = 5;
const IDLE_SECONDS = 15;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function need(cmd) {
  if (spawnSync(cmd, ["--version"]).error) {
    console.error(`hot-code: ${cmd} not found (Debian package valgrind)`);
    process.exit(2);
  }
}

/** One connection speaking line-delimited JSON-RPC: `call` waits for the reply. */
function connect(socket) {
  return new Promise((resolve, reject) => {
    const s = net.connect(socket);
    let buf = "";
    const waiting = [];
    const lines = [];
    s.on("data", (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        const w = waiting.shift();
        if (w) w(line);
        else lines.push(line);
      }
    });
    s.on("error", reject);
    s.on("connect", () =>
      resolve({
        socket: s,
        lines,
        send(method, params, id = 1) {
          s.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
        },
        next() {
          return lines.length ? Promise.resolve(lines.shift()) : new Promise((r) => waiting.push(r));
        },
        async call(method, params, id = 1) {
          this.send(method, params, id);
          return this.next();
        },
      }),
    );
  });
}

function fixtures(dir) {
  const root = path.join(repo, "tests/fixtures", dir);
  return fs
    .readdirSync(root)
    .filter((f) => f.endsWith(".jsonl"))
    .sort()
    .flatMap((f) => fs.readFileSync(path.join(root, f), "utf8").split("\n"))
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l));
}

/** Runs the load `kinds` names ("appends", "ingests", "reads") for `seconds`. */
async function load(socket, seconds, kinds) {
  const end = Date.now() + seconds * 1000;
  const pad = "x".repeat(200);
  const appender = async (k) => {
    const c = await connect(socket);
    for (let n = 0; Date.now() < end; n++) {
      await c.call("append", {
        session_id: `bench-${k % 16}`,
        event: { type: "bench.event", payload: { seq: n, pad } },
      }, n);
    }
    c.socket.end();
  };
  const pipelined = async (k) => {
    const c = await connect(socket);
    while (Date.now() < end) {
      for (let i = 0; i < 64; i++) {
        c.send("append", { session_id: `pipelined-${k}`, event: { type: "bench.event", payload: { seq: i } } }, i);
      }
      for (let i = 0; i < 64; i++) await c.next();
    }
    c.socket.end();
  };
  const ingester = async (k, source, events) => {
    const c = await connect(socket);
    const session = `ingest-${source}-${k}`;
    for (let n = 0; Date.now() < end; n++) {
      const e = { ...events[n % events.length] };
      for (const key of ["session_id", "sessionID"]) if (key in e) e[key] = session;
      await c.call("ingest", { source, event: e, session_id: session }, n);
    }
    c.socket.end();
  };
  const reader = async (k) => {
    const c = await connect(socket);
    while (Date.now() < end) {
      await c.call("read", { session_id: `bench-${k}`, from_lsn: 1, limit: 100 });
      await c.call("sessions.list", {});
      await c.call("stats", {});
      await sleep(50);
    }
    c.socket.end();
  };
  const subscriber = async () => {
    const c = await connect(socket);
    c.send("subscribe", { session_id: "bench-1", from_lsn: 1 });
    while (Date.now() < end) {
      await sleep(100);
      c.lines.length = 0;
    }
    c.socket.end();
  };
  // Each source's captured payloads are in tests/fixtures/<source>/.
  const sources = ["claude-code", "opencode", "claude-agent-sdk"];
  const tasks = [];
  if (kinds.includes("appends")) {
    for (let k = 0; k < 16; k++) tasks.push(appender(k));
    for (let k = 0; k < 2; k++) tasks.push(pipelined(k));
  }
  if (kinds.includes("ingests")) {
    for (const source of sources) {
      const events = fixtures(source);
      for (let k = 0; k < 2; k++) tasks.push(ingester(k, source, events));
    }
  }
  if (kinds.includes("reads")) {
    for (let k = 0; k < 2; k++) tasks.push(reader(k));
    tasks.push(subscriber());
  }
  await Promise.all(tasks);
}

/** Cost per function of the binary in one callgrind dump (names as in the symbol table). */
function costs(file) {
  const cost = new Map();
  let ob = "";
  let fn = "";
  let callLine = false;
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    if (line.startsWith("ob=")) ob = line.slice(3);
    else if (line.startsWith("fn=")) fn = line.slice(3).replace(/'\d+$/, "");
    else if (line.startsWith("calls=")) callLine = true;
    else if (/^[0-9+*-]/.test(line)) {
      // The line after `calls=` is the callee's inclusive cost, not this function's.
      if (callLine) {
        callLine = false;
        continue;
      }
      if (!(ob === bin || ob.endsWith(`/${path.basename(bin)}`)) || !fn || /^0x[0-9a-f]+$/.test(fn)) continue;
      const ir = Number(line.split(" ")[1] ?? 0);
      cost.set(fn, (cost.get(fn) ?? 0) + ir);
    }
  }
  return cost;
}

async function main() {
  need("valgrind");
  if (!fs.existsSync(bin)) {
    console.error(`hot-code: ${bin} not found; build it first (cargo build --release -p dstream-daemon --bin dstream)`);
    process.exit(2);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "dstream-hot-code-"));
  const socket = path.join(dir, "d.sock");
  // Dumps in a folder of their own: the daemon watches its configuration's and plugins' folders,
  // and would count every dump written next to them as work.
  fs.mkdirSync(path.join(dir, "dumps"));
  const dumps = path.join(dir, "dumps", "cg");
  // The embedded defaults only: no user configuration or plugins.
  fs.mkdirSync(path.join(dir, "config"));
  const config = path.join(dir, "config", "config.toml");
  fs.writeFileSync(config, "");
  fs.mkdirSync(path.join(dir, "plugins"));
  const daemon = spawn(
    "valgrind",
    [
      "--tool=callgrind",
      "--demangle=no",
      "--dump-instr=no",
      "--compress-strings=no",
      "--compress-pos=no",
      `--callgrind-out-file=${dumps}`,
      bin,
      "daemon",
      "--config",
      config,
      "--plugin-dir",
      path.join(dir, "plugins"),
      "--socket",
      socket,
      "--data-dir",
      path.join(dir, "data"),
      "--http-listen",
      "0",
    ],
    { stdio: ["ignore", "ignore", fs.openSync(path.join(dir, "daemon.log"), "w")] },
  );
  const dump = (label) => spawnSync("callgrind_control", ["-d", label, String(daemon.pid)]);
  for (let i = 0; ; i++) {
    try {
      const c = await connect(socket);
      await c.call("hello", {});
      c.socket.end();
      break;
    } catch {
      if (i > 600) throw new Error(`the daemon did not answer; see ${dir}/daemon.log`);
      await sleep(100);
    }
  }
  dump("startup");
  await sleep(QUIET_SECONDS * 1000);
  dump("settled");
  await sleep(QUIET_SECONDS * 1000);
  dump("quiet");
  const part = LOAD_SECONDS / 3;
  console.error(`hot-code: appends, ingests, then both with reads, ${part} s each`);
  await load(socket, part, ["appends"]);
  dump("appends");
  await load(socket, part, ["ingests"]);
  dump("ingests");
  await load(socket, part, ["appends", "ingests", "reads"]);
  dump("load");
  await sleep(IDLE_SECONDS * 1000);
  dump("idle");
  daemon.kill("SIGTERM");
  await new Promise((r) => daemon.on("exit", r));

  const files = fs.readdirSync(path.dirname(dumps));
  const byPart = (n) => files.find((f) => f === `cg.${n}`);
  // Dumps are numbered in order: 1 start-up, 2 settling, 3 quiet, 4 appends, 5 ingests,
  // 6 mixed load, 7 idle; the last (unnumbered) is exit.
  const phases = [byPart(3), byPart(4), byPart(5), byPart(6), byPart(7), byPart(2), "cg"].filter(Boolean).map((f) => costs(path.join(path.dirname(dumps), f)));
  const order = [];
  const seen = new Set();
  for (const phase of phases) {
    for (const [fn] of [...phase].sort((a, b) => b[1] - a[1])) {
      if (!seen.has(fn)) {
        seen.add(fn);
        order.push(fn);
      }
    }
  }
  if (order.length < 100) throw new Error(`only ${order.length} functions found; see ${dir}`);
  fs.writeFileSync(out, order.join("\n") + "\n");
  console.error(`hot-code: ${order.length} functions written to ${path.relative(repo, out)}`);
  fs.rmSync(dir, { recursive: true, force: true });
}

main().catch((e) => {
  console.error(`hot-code: ${e.message}`);
  process.exit(1);
});
