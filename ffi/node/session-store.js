// A SessionStore for the Claude Agent SDK (`query({ options: { sessionStore } })`): the SDK
// mirrors each session's transcript entries into dstream, and resumes a session from dstream
// (on this machine, or on another that reads the same daemon or its relay).
//
//   import { DstreamSessionStore } from "@dstream/client";
//   const sessionStore = new DstreamSessionStore();          // $DSTREAM_SOCKET, else the default
//   for await (const m of query({ prompt, options: { sessionStore } })) { ... }
//   // later, anywhere:  query({ prompt, options: { sessionStore, resume: sessionId } })
//
// Each transcript (a SessionKey: projectKey, sessionId, and a subpath for subagents) is one
// dstream session, `<sessionId>.transcript` (subagents: `<sessionId>.transcript.<subpath>`),
// one `transcript.entry` event per entry, the entry as the payload. Entries with a `uuid` are
// stored once per session whatever the retries and replays (the SDK's idempotency key);
// entries without one are appended as they come. Like every event, entries are redacted before
// they are stored: a secret in a transcript comes back as `[REDACTED:…]`. `delete` is not
// offered: dstream's retention (`[retention]`) decides what goes.

import { createHash } from "node:crypto";

const ENTRY = "transcript.entry";
const SUFFIX = ".transcript";
const SESSION_ID = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;

/** A session id's readable form of a subpath, unique by a short hash of the whole. */
function subSession(base, subpath) {
  const readable = subpath.replace(/[^A-Za-z0-9_-]+/g, "-").slice(0, 40);
  const hash = createHash("sha256").update(subpath).digest("hex").slice(0, 12);
  return `${base}.${readable}-${hash}`;
}

export class DstreamSessionStore {
  #client;
  #seen = new Map(); // session -> Set of stored uuids

  /** `client`: a connected client from `connect()` (the store does not close it). */
  constructor(client) {
    this.#client = client;
  }

  /** The dstream session that holds `key`'s transcript. */
  static sessionFor(key) {
    if (!SESSION_ID.test(String(key?.sessionId)) || key.sessionId.length > 64) {
      throw new Error(`not a session id dstream can store: ${JSON.stringify(key?.sessionId)}`);
    }
    const base = `${key.sessionId}${SUFFIX}`;
    return key.subpath ? subSession(base, key.subpath) : base;
  }

  /** Every event of `session`, or null when it does not exist. */
  #events(session) {
    const out = [];
    let from = 1;
    for (;;) {
      let page;
      try {
        page = this.#client.call("read", { session_id: session, from_lsn: from });
      } catch (e) {
        if (e.code === "rpc" && /-32002/.test(e.message)) return out.length ? out : null;
        throw e;
      }
      out.push(...page.events);
      if (page.up_to_date || page.events.length === 0) return out;
      from = page.next_lsn;
    }
  }

  #uuids(session) {
    let seen = this.#seen.get(session);
    if (!seen) {
      seen = new Set();
      for (const e of this.#events(session) ?? []) {
        if (typeof e.payload?.uuid === "string") seen.add(e.payload.uuid);
      }
      this.#seen.set(session, seen);
    }
    return seen;
  }

  async append(key, entries) {
    const session = DstreamSessionStore.sessionFor(key);
    const seen = this.#uuids(session);
    for (const entry of entries) {
      const uuid = typeof entry?.uuid === "string" ? entry.uuid : null;
      if (uuid && seen.has(uuid)) continue;
      this.#client.append(session, {
        type: ENTRY,
        actor: "claude-agent-sdk",
        payload: entry,
        metadata: {
          project_key: key.projectKey,
          sdk_session_id: key.sessionId,
          ...(key.subpath ? { subpath: key.subpath } : {}),
        },
      });
      if (uuid) seen.add(uuid);
    }
  }

  async load(key) {
    const events = this.#events(DstreamSessionStore.sessionFor(key));
    if (events === null) return null;
    return events.filter((e) => e.type === ENTRY).map((e) => e.payload);
  }

  /** Sessions of `projectKey`, with the time of their last entry. */
  async listSessions(projectKey) {
    const out = [];
    for (const s of this.#client.call("sessions.list", {}).sessions) {
      if (!s.session_id.endsWith(SUFFIX)) continue;
      const first = this.#client.read(s.session_id, { limit: 1 })[0];
      if (first?.metadata?.project_key !== projectKey || first.metadata.subpath) continue;
      out.push({ sessionId: first.metadata.sdk_session_id, mtime: Math.floor(Number(s.last_ts)) });
    }
    return out;
  }

  /** The subpaths (subagent transcripts) stored under a session. */
  async listSubkeys({ projectKey, sessionId }) {
    const prefix = `${DstreamSessionStore.sessionFor({ sessionId })}.`;
    const out = [];
    for (const s of this.#client.call("sessions.list", {}).sessions) {
      if (!s.session_id.startsWith(prefix)) continue;
      const first = this.#client.read(s.session_id, { limit: 1 })[0];
      if (first?.metadata?.project_key === projectKey && first.metadata.subpath) {
        out.push(first.metadata.subpath);
      }
    }
    return out;
  }
}
