// Reads a whole Durable Stream with the official client (@durable-streams/client) and prints
// {"messages": [...], "closed": bool} on one line: node read-stream.mjs <stream-url>
import { stream } from "@durable-streams/client";

const [url] = process.argv.slice(2);
const res = await stream({ url, offset: "-1", live: false, json: true, warnOnHttp: false });
const messages = await res.json();
console.log(JSON.stringify({ messages, closed: res.streamClosed, offset: res.offset }));
