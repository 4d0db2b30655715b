// Runs one Claude Agent SDK query() and prints every message it yields as one JSON line on
// stdout. Driven by tests/src/agents.rs (run_sdk_query), which copies this file next to a
// node_modules link to the agent cache and points ANTHROPIC_BASE_URL at a mock model.
//
// DSTREAM_SDK_PROMPT   the prompt (required)
// DSTREAM_SDK_OPTIONS  JSON merged over the default query() options (optional)
import { query } from "@anthropic-ai/claude-agent-sdk";

const prompt = process.env.DSTREAM_SDK_PROMPT;
if (!prompt) {
  console.error("DSTREAM_SDK_PROMPT is not set");
  process.exit(2);
}
const extra = process.env.DSTREAM_SDK_OPTIONS ? JSON.parse(process.env.DSTREAM_SDK_OPTIONS) : {};

const options = {
  cwd: process.cwd(),
  includePartialMessages: true,
  allowedTools: ["Bash"],
  // Read the project's .claude/settings.json (hooks) like the CLI does.
  settingSources: ["project"],
  env: { ...process.env },
  stderr: (data) => process.stderr.write(data),
  ...extra,
};

let count = 0;
for await (const message of query({ prompt, options })) {
  process.stdout.write(JSON.stringify(message) + "\n");
  count += 1;
}
console.error(`sdk-query: ${count} messages`);
