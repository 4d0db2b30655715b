// Test driver for the dstream OpenCode plugin (used by tests/tests/hook.rs; not installed).
//
// Usage: node driver.mjs PATH/TO/dstream.js
// Loads the plugin as OpenCode would (calls every exported function with a context), then
// reads one JSON command per line on stdin and answers each with one JSON line on stdout:
//   {"op":"event","event":{...}}                 -> {"ok":true}
//   {"op":"before","input":{...},"output":{...}} -> {"ok":true,"output":{...}} or {"ok":false,"error":"..."}
//   {"op":"after","input":{...},"output":{...}}  -> {"ok":true}
//   {"op":"sleep","ms":N}                        -> {"ok":true}
// Every answer carries "ms", the time the command took.

import readline from "node:readline";
import { pathToFileURL } from "node:url";

const mod = await import(pathToFileURL(process.argv[2]).href);
const exports = Object.entries(mod);
const context = {
  project: { id: "test-project" },
  client: {},
  $: undefined,
  directory: process.cwd(),
  worktree: process.cwd(),
};
const hooks = [];
for (const [name, fn] of exports) {
  if (typeof fn !== "function") throw new Error(`export ${name} is not a plugin function`);
  hooks.push(await fn(context));
}
console.log(JSON.stringify({ ready: true, exports: exports.map(([name]) => name) }));

const run = async (name, ...args) => {
  for (const h of hooks) if (h[name]) await h[name](...args);
};

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const cmd = JSON.parse(line);
  const started = Date.now();
  let answer;
  try {
    switch (cmd.op) {
      case "event":
        await run("event", { event: cmd.event });
        answer = { ok: true };
        break;
      case "before":
        await run("tool.execute.before", cmd.input, cmd.output);
        answer = { ok: true, output: cmd.output };
        break;
      case "after":
        await run("tool.execute.after", cmd.input, cmd.output);
        answer = { ok: true };
        break;
      case "sleep":
        await new Promise((r) => setTimeout(r, cmd.ms));
        answer = { ok: true };
        break;
      default:
        answer = { ok: false, error: `unknown op ${cmd.op}` };
    }
  } catch (e) {
    answer = { ok: false, error: String(e?.message ?? e) };
  }
  console.log(JSON.stringify({ ...answer, ms: Date.now() - started }));
}
