// An Agent SDK app's message loop feeding dstream: every message goes to `ingest` with the
// source "claude-agent-sdk", and the claude-agent-sdk mapping turns it into stream chunks.
//
//   import { query } from "@anthropic-ai/claude-agent-sdk";
//   for await (const message of query({ prompt, options: { includePartialMessages: true } })) {
//     dstream.ingest("claude-agent-sdk", message);
//   }
//
// Here the messages come from a file of captured SDK messages (one JSON per line), so the
// example runs without a model: node examples/agent-sdk.mjs tests/fixtures/claude-agent-sdk/run-basic.jsonl
import { readFileSync } from "node:fs";
import { connect } from "../index.js";

const dstream = connect();
let session;
for (const line of readFileSync(process.argv[2], "utf8").split("\n")) {
  if (!line.trim()) continue;
  const message = JSON.parse(line);
  const r = dstream.ingest("claude-agent-sdk", message);
  for (const e of r.events) {
    session = e.session_id;
    console.log(`${e.session_id} #${e.lsn} ${e.type}`);
  }
}
console.log(`dstream tail ${session} shows the run`);
dstream.close();
