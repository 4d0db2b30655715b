// Follows a Durable Stream with the official client (@durable-streams/client) and prints one
// JSON line per batch (one for a catch-up read, live=false), {"ids": [...], "lsns": [...], "offset", "upToDate", "closed"}, until it
// has `want` messages or the stream closes:
//   node follow-local.mjs <stream-url> <bearer-token> <live: false|sse|long-poll> <offset> <want>
import { stream } from "@durable-streams/client";

const [url, token, live, offset, want] = process.argv.slice(2);
const res = await stream({
  url,
  offset,
  live: live === "false" ? false : live,
  json: true,
  warnOnHttp: false,
  headers: { Authorization: `Bearer ${token}` },
});
// Written at the end in one go: process.exit cuts short what is still queued for a pipe.
const out = [];
const done = () => process.stdout.write(out.join(""), () => process.exit(0));
const line = (items, offset, upToDate, closed) =>
  out.push(JSON.stringify({
    ids: items.map((e) => e.id),
    lsns: items.map((e) => e.lsn),
    offset,
    upToDate,
    closed: closed ?? false,
  }) + "\n");
if (live === "false") {
  // Catch-up only: every message up to the end, as one batch.
  const items = await res.json();
  line(items, res.offset, res.upToDate, res.streamClosed);
  done();
} else {
  let seen = 0;
  await new Promise((resolve) => {
    res.subscribeJson((batch) => {
      seen += batch.items.length;
      line(batch.items, batch.offset, batch.upToDate, batch.streamClosed);
      if (seen >= Number(want) || batch.streamClosed) {
        res.cancel();
        resolve();
      }
    });
    // The client may deliver the last batch just after `closed` settles: let it run first.
    res.closed.then(() => setImmediate(resolve), (e) => {
      out.push(JSON.stringify({ error: String(e) }) + "\n");
      resolve();
    });
  });
  done();
}
