/** A stored event. */
export interface DstreamEvent {
  lsn: number;
  id: string;
  type: string;
  session_id: string;
  stream_id: string;
  timestamp: number;
  actor?: string;
  causation_id?: string;
  correlation_id?: string;
  payload?: unknown;
  metadata?: Record<string, unknown>;
  raw?: unknown;
}

/** An event to append. */
export interface NewEvent {
  type: string;
  actor?: string;
  payload?: unknown;
  stream_id?: string;
  causation_id?: string;
  correlation_id?: string;
  metadata?: Record<string, unknown>;
  raw?: unknown;
}

export interface CheckpointOption {
  id: string;
  label?: string;
  action: "allow" | "deny";
  scope?: "session" | "project";
}

export interface Checkpoint {
  id: string;
  session_id: string;
  key: string;
  state: "recording" | "pending" | "approved" | "rejected" | "expired";
  tool?: string;
  input?: unknown;
  summary: string;
  options: CheckpointOption[];
  created_ms: number;
  deadline_ms: number;
  on_timeout: "allow" | "deny";
  lsn: number;
  decision?: {
    decision: string;
    action: "allow" | "deny";
    note?: string;
    input?: unknown;
    decided_by: string;
    decided_ms: number;
  };
  delivered: boolean;
}

export interface CheckpointRequest {
  session_id: string;
  key: string;
  tool?: string;
  input?: unknown;
  summary?: string;
  options?: Array<string | CheckpointOption>;
  timeout_ms?: number;
  on_timeout?: "allow" | "deny";
}

export interface IngestResult {
  events: Array<{ lsn: number; id: string; type: string; session_id: string }>;
  decision?: { action: string; reason?: string; decided_by?: string; checkpoint?: Checkpoint };
}

export class DstreamError extends Error {
  /** The library's ds_result: "null", "utf8", "json", "connect", "rpc", "timeout", "closed", "panic", "internal". */
  code: string;
}

export interface Client {
  call(method: string, params?: Record<string, unknown>): unknown;
  append(sessionId: string, event: NewEvent): number;
  ingest(source: string, raw: unknown): IngestResult;
  read(sessionId: string, options?: { fromLsn?: number; limit?: number }): DstreamEvent[];
  subscribe(sessionId: string, fromLsn?: number): AsyncIterableIterator<DstreamEvent>;
  checkpoint: {
    request(params: CheckpointRequest): Checkpoint;
    await(id: string, timeoutMs?: number): Promise<Checkpoint>;
    resolve(id: string, decision: string, note?: string | null): Checkpoint;
  };
  close(): void;
}

/** Options of `connect`. */
export interface ConnectOptions {
  /** Start a daemon (`dstream start --auto`) when none answers. */
  autostart?: boolean;
  /** The dstream program to start it with (default: $DSTREAM_BIN, else `dstream` on PATH). */
  program?: string | null;
}
export function connect(socketPath?: string | null, options?: ConnectOptions): Client;
export function version(): string;

/** A Claude Agent SDK session key (`SessionStore`'s addressing). */
export interface SessionKey {
  projectKey: string;
  sessionId: string;
  subpath?: string;
}

/**
 * A `SessionStore` for the Claude Agent SDK: each transcript is a dstream session
 * (`<sessionId>.transcript`), idempotent on each entry's `uuid`.
 */
export class DstreamSessionStore {
  constructor(client: Client);
  static sessionFor(key: SessionKey): string;
  append(key: SessionKey, entries: Array<{ type: string; uuid?: string; [k: string]: unknown }>): Promise<void>;
  load(key: SessionKey): Promise<Array<{ type: string; [k: string]: unknown }> | null>;
  listSessions(projectKey: string): Promise<Array<{ sessionId: string; mtime: number }>>;
  listSubkeys(key: { projectKey: string; sessionId: string }): Promise<string[]>;
}
