#!/usr/bin/env node
// Signs a remote decision (or a stop) for a dstream session, in the format the daemon checks
// (README, "Remote approvals"), and prints it; with --post, appends it to the session's control
// stream on the Durable Streams server.
//
//   DSTREAM_APPROVAL_KEY=... node scripts/sign-decision.mjs --session S --approve CHECKPOINT_ID
//   DSTREAM_APPROVAL_KEY=... node scripts/sign-decision.mjs --session S --reject CHECKPOINT_ID --reason "not now"
//   DSTREAM_APPROVAL_KEY=... node scripts/sign-decision.mjs --session S --abort --reason "stop"
//
// Options: --key-id ID (default "remote", the daemon's relay.approval_key_id), --key-env NAME
// (the variable holding the key, default DSTREAM_APPROVAL_KEY), --ts MS and --nonce N (default:
// now and a random nonce), --post CONTROL_STREAM_URL (with $DSTREAM_RELAY_TOKEN as bearer
// token when set). Needs only Node.js.
import { createHmac, randomBytes } from "node:crypto";

const SCHEME = "dstream-control-v1";

function usage(msg) {
  if (msg) console.error(`sign-decision: ${msg}`);
  console.error(
    "usage: sign-decision.mjs --session S (--approve ID | --reject ID | --decision OPTION --checkpoint ID | --abort)\n" +
      "       [--reason TEXT] [--key-id ID] [--key-env NAME] [--ts MS] [--nonce N] [--post URL]",
  );
  process.exit(2);
}

const args = process.argv.slice(2);
const opt = {};
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  const value = () => {
    if (i + 1 >= args.length) usage(`${a} needs a value`);
    return args[++i];
  };
  switch (a) {
    case "--session": opt.session = value(); break;
    case "--approve": opt.type = "decision"; opt.decision = "approve"; opt.checkpoint = value(); break;
    case "--reject": opt.type = "decision"; opt.decision = "reject"; opt.checkpoint = value(); break;
    case "--decision": opt.type = "decision"; opt.decision = value(); break;
    case "--checkpoint": opt.checkpoint = value(); break;
    case "--abort": opt.type = "abort"; break;
    case "--reason": opt.reason = value(); break;
    case "--key-id": opt.keyId = value(); break;
    case "--key-env": opt.keyEnv = value(); break;
    case "--ts": opt.ts = Number(value()); break;
    case "--nonce": opt.nonce = value(); break;
    case "--post": opt.post = value(); break;
    case "-h": case "--help": usage(); break;
    default: usage(`unknown argument ${a}`);
  }
}
if (!opt.session) usage("--session is required");
if (!opt.type) usage("say what to sign: --approve, --reject, --decision or --abort");
if (opt.type === "decision" && !opt.checkpoint) usage("a decision needs the checkpoint id");
const keyEnv = opt.keyEnv ?? "DSTREAM_APPROVAL_KEY";
const key = process.env[keyEnv];
if (!key) usage(`set the approval key in $${keyEnv}`);

const message = {
  type: opt.type,
  session_id: opt.session,
  ...(opt.type === "decision" ? { checkpoint_id: opt.checkpoint, decision: opt.decision } : {}),
  reason: opt.reason ?? "",
  key_id: opt.keyId ?? "remote",
  ts: opt.ts ?? Date.now(),
  nonce: opt.nonce ?? randomBytes(12).toString("hex"),
};
const fields = [
  SCHEME,
  message.type,
  message.session_id,
  message.checkpoint_id ?? "",
  message.decision ?? "",
  message.reason,
  String(message.ts),
  message.nonce,
];
if (fields.some((f) => f.includes("\n"))) usage("no field may contain a newline");
message.sig = createHmac("sha256", key).update(fields.join("\n")).digest("hex");

const text = JSON.stringify(message);
if (!opt.post) {
  console.log(text);
} else {
  const headers = { "content-type": "application/json" };
  if (process.env.DSTREAM_RELAY_TOKEN) headers.authorization = `Bearer ${process.env.DSTREAM_RELAY_TOKEN}`;
  const res = await fetch(opt.post, { method: "POST", headers, body: text });
  if (!res.ok) {
    console.error(`sign-decision: POST ${opt.post}: HTTP ${res.status} ${await res.text()}`);
    process.exit(1);
  }
  console.log(text);
}
