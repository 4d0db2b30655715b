// The Node reference server of Durable Streams (@durable-streams/server), file-backed, for the
// relay tests: node node-server.mjs <port> <data-dir>. Prints "listening <url>" when ready and
// stops cleanly on SIGTERM.
import { DurableStreamTestServer } from "@durable-streams/server";

const [port, dataDir] = process.argv.slice(2);
const server = new DurableStreamTestServer({
  host: "127.0.0.1",
  port: Number(port),
  dataDir,
  longPollTimeout: 2000,
});
const url = await server.start();
console.log(`listening ${url}`);
const stop = async () => {
  await server.stop();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
