// Runs one Claude Agent SDK query() with dstream's SessionStore (the Node package at
// $DSTREAM_NODE_PACKAGE, connected to $DSTREAM_SOCKET) and prints every message as one JSON line.
// Driven by tests/tests/ffi_node.rs. $DSTREAM_SDK_RESUME resumes that session from the store.
import { query } from "@anthropic-ai/claude-agent-sdk";

const pkg = await import(process.env.DSTREAM_NODE_PACKAGE);
const client = pkg.connect(process.env.DSTREAM_SOCKET);
const sessionStore = new pkg.DstreamSessionStore(client);
const options = {
  cwd: process.cwd(),
  allowedTools: [],
  settingSources: [],
  env: { ...process.env },
  stderr: (data) => process.stderr.write(data),
  sessionStore,
  ...(process.env.DSTREAM_SDK_RESUME ? { resume: process.env.DSTREAM_SDK_RESUME } : {}),
};
for await (const message of query({ prompt: process.env.DSTREAM_SDK_PROMPT, options })) {
  process.stdout.write(JSON.stringify(message) + "\n");
}
client.close();
