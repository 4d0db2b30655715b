// The daemon's HTTP API as the page uses it: JSON reads and the one write (a checkpoint's
// decision), all authenticated by the login cookie; and a session's events through the Durable
// Streams endpoint, caught up then followed live by SSE, resumed from the last offset.

export class AuthError extends Error {
  constructor() {
    super('not logged in');
  }
}

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const authListeners = [];
export function onAuthLost(f) {
  authListeners.push(f);
}
function authLost() {
  for (const f of authListeners) f();
}

async function reply(r) {
  if (r.status === 401) {
    authLost();
    throw new AuthError();
  }
  const text = await r.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!r.ok) {
    const why = (body && body.error) || text || r.statusText;
    throw new HttpError(r.status, `${r.status}: ${why}`);
  }
  return { body, headers: r.headers };
}

export async function get(path) {
  const r = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
  return (await reply(r)).body;
}

export async function post(path, payload) {
  const r = await fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(payload),
  });
  return (await reply(r)).body;
}

export const whoami = () => get('/api/whoami');
export const sessions = () => get('/api/sessions?limit=200');
// Only the named sessions (those that exist): what one session's page follows.
export const sessionsNamed = (ids) =>
  get(`/api/sessions?ids=${ids.map(encodeURIComponent).join(',')}`);
export const pending = () => get('/api/checkpoints?state=pending');
export const decide = (id, body) => post(`/api/checkpoints/${encodeURIComponent(id)}/decide`, body);
export const usage = (by, since) =>
  get(`/api/usage?by=${encodeURIComponent(by)}&since=${encodeURIComponent(since)}`);
export const search = (q) => get(`/api/search?q=${encodeURIComponent(q)}&limit=50`);

function streamUrl(id) {
  return `/v1/stream/${encodeURIComponent(id)}`;
}

// Reads a session's events from the start: catch-up pages, then SSE. `onEvents(array)` gets
// each event once, in LSN order; `onState(text)` says how it is going. A dropped SSE
// connection (the server ends each after a minute, or the daemon restarts) is opened again
// from the last offset, so nothing is missed or repeated.
export class Follower {
  constructor(id, onEvents, onState = () => {}) {
    this.id = id;
    this.onEvents = onEvents;
    this.onState = onState;
    this.offset = '-1';
    this.lastLsn = 0;
    this.es = null;
    this.stopped = false;
    this.retry = 0;
    this.timer = null;
  }

  deliver(events) {
    const fresh = events.filter((e) => typeof e.lsn === 'number' && e.lsn > this.lastLsn);
    if (!fresh.length) return;
    this.lastLsn = fresh[fresh.length - 1].lsn;
    this.onEvents(fresh);
  }

  // Catch-up reads from the offset until the end: 'current', 'closed' or 'stopped'.
  async catchUp() {
    for (;;) {
      const r = await fetch(`${streamUrl(this.id)}?offset=${this.offset}`, {
        credentials: 'same-origin',
        cache: 'no-store',
      });
      const { body, headers } = await reply(r);
      if (this.stopped) return 'stopped';
      this.deliver(Array.isArray(body) ? body : []);
      this.offset = headers.get('Stream-Next-Offset') || this.offset;
      if (headers.get('Stream-Closed') === 'true') return 'closed';
      if (headers.get('Stream-Up-To-Date') === 'true') return 'current';
    }
  }

  async start() {
    this.missing = false;
    try {
      const end = await this.catchUp();
      if (end === 'closed') this.onState('closed');
      if (end !== 'current') return;
      this.live();
    } catch (e) {
      if (e instanceof AuthError) return;
      // No such session (yet): asking again would only fail again; whoever knows it exists
      // (the sessions list) calls start() once it does.
      if (e instanceof HttpError && e.status === 404) {
        this.missing = true;
        this.onState('no such session');
        return;
      }
      this.onState(`error: ${e.message}; retrying`);
      this.again();
    }
  }

  live() {
    if (this.stopped) return;
    const es = new EventSource(`${streamUrl(this.id)}?offset=${this.offset}&live=sse`);
    this.es = es;
    es.addEventListener('open', () => {
      this.retry = 0;
      this.onState('live');
    });
    es.addEventListener('data', (m) => {
      let events = [];
      try {
        events = JSON.parse(m.data);
      } catch {
        return;
      }
      if (Array.isArray(events)) this.deliver(events);
    });
    es.addEventListener('control', (m) => {
      let c = {};
      try {
        c = JSON.parse(m.data);
      } catch {
        return;
      }
      if (typeof c.streamNextOffset === 'string') this.offset = c.streamNextOffset;
      if (c.streamClosed) {
        this.onState('closed');
        this.close();
      }
    });
    // EventSource would reconnect by itself, but to the URL it was opened with (the old
    // offset): close it and open a new one from where this follower is.
    es.addEventListener('error', () => {
      if (this.es !== es) return;
      this.close();
      this.onState('reconnecting');
      this.again();
    });
  }

  again() {
    if (this.stopped) return;
    const wait = Math.min(5000, 250 * 2 ** this.retry++);
    clearTimeout(this.timer);
    this.timer = setTimeout(async () => {
      // An SSE error hides its status: ask once whether the login is still good.
      try {
        await whoami();
      } catch (e) {
        if (e instanceof AuthError) return;
      }
      this.start();
    }, wait);
  }

  close() {
    if (this.es) this.es.close();
    this.es = null;
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    this.close();
  }
}

// Polls one session's catch-up reads (for a subagent's nested timeline: an SSE connection
// each would use up the browser's few connections per host).
export class Poller extends Follower {
  async start() {
    try {
      if ((await this.catchUp()) !== 'current') return;
    } catch (e) {
      if (e instanceof AuthError) return;
    }
    if (!this.stopped) this.timer = setTimeout(() => this.start(), 2000);
  }
}
