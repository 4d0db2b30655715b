// Throwaway OpenCode capture plugin (tests/tests/agents_capture.rs copies it into a temporary
// project's .opencode/plugins/). Appends every bus event and every tool.execute.before/after
// (input, output) pair, as one JSON line each, to $DSTREAM_CAPTURE_FILE.
import { appendFileSync } from "node:fs";

const file = process.env.DSTREAM_CAPTURE_FILE;

function record(line) {
  if (!file) return;
  appendFileSync(file, JSON.stringify(line) + "\n");
}

export const DstreamCapture = async () => {
  return {
    event: async ({ event }) => {
      record({ hook: "event", event });
    },
    "tool.execute.before": async (input, output) => {
      record({ hook: "tool.execute.before", input, output });
    },
    "tool.execute.after": async (input, output) => {
      record({ hook: "tool.execute.after", input, output });
    },
  };
};
