// Follow a session live: node examples/tail.mjs SESSION [FROM_LSN]
import { connect } from "../index.js";

const [session, from = "1"] = process.argv.slice(2);
const c = connect();
for await (const e of c.subscribe(session, Number(from))) {
  console.log(`#${e.lsn} ${e.type} ${JSON.stringify(e.payload ?? null)}`);
}
