-- opencode: maps OpenCode events (what the dstream OpenCode plugin sends) to the dstream
-- taxonomy. Built in; an opencode.lua in the plugin folder replaces it.
--
-- Input, one of:
--   * a bus event as the plugin's `event` hook receives it: {id, type, properties}
--     (also accepted wrapped as {hook = "event", event = {...}}, the capture format of
--     tests/fixtures/opencode);
--   * a tool hook call: {hook = "tool.execute.before" | "tool.execute.after", input, output}.
-- Shapes follow the payloads captured from OpenCode 1.18 (tests/fixtures/opencode).
--
-- Every raw event becomes at least one event, and the pipeline keeps it in `raw`, with two
-- exceptions, both streams of snapshots whose final state is stored:
--   * text and reasoning streaming (`[plugins.lua.opencode] coalesce_text = true`, the
--     default): the `message.part.delta` events and the intermediate `message.part.updated`
--     of a text/reasoning part are folded into ONE `message.chunk` per part, whose
--     payload.text is the part's complete text (payload.coalesced = how many source events it
--     stands for). The chunk is stored when the part ends (`time.end` set; that event is its
--     raw), or, failing that, when the next part or message of the session starts, the step
--     or message finishes, or the session goes idle, errs or is deleted (then
--     metadata.flushed_by names the trigger and raw is the part's last source event). A
--     later update of a part already stored adds a chunk with only the new text
--     (payload.offset); an update that adds nothing is not stored again.
--   * tool progress (`coalesce_tool_progress = true`, the default): a tool part's repeated
--     `running` updates (each carries the whole output so far) are stored once, at the
--     first; the completed state holds the final output.
-- With either option false, every such event is stored (message.chunk with the event's delta
-- and/or full text, `final` when the part ended; execution.tool_use phase "running").
--
-- Usage: each `step-finish` part (one model call) is execution.step_finish and usage.request
-- {model, provider, input_tokens, output_tokens, reasoning_tokens, cache_read_input_tokens,
-- cache_creation_input_tokens, cost_usd}, which `dstream usage` sums.
--
-- Lineage: a child session (session.created with `parentID`, e.g. a `task` subagent) has
-- stream_id = the root of its parent's lineage; the parent's log gets agent.spawned, and
-- agent.completed / agent.aborted when the task tool call finishes. correlation_id is the
-- turn: the id of the user message the work answers.
--
-- Tool calls, by callID (= payload.tool_use_id): the bus part's `pending` state is
-- execution.tool_use phase "pending"; the `tool.execute.before` hook (which waits for the
-- daemon's decision) is phase "requested", the only phase policy decides on; the first
-- `running` state is phase "running". The first report of the outcome (`tool.execute.after`
-- or the part's completed/error state, whichever comes first) is the execution.tool_result;
-- the other report of the same outcome is stored as execution.tool_state. Events of one call
-- point at each other through causation_id (the result at the request).
--
-- Per-session state (open text parts, tool calls, permissions) is dropped when the session
-- goes idle or is deleted, and each of its tables is bounded in between (MAX_CALLS and the
-- like); at most MAX_SESSIONS sessions (and MAX_ROOTS lineage entries) are
-- remembered, the least recently created generation going first.

local M = { name = "opencode", api = 1, sources = { "opencode" } }

local ACTOR = "opencode"
local MAX_SESSIONS = 1024 -- per generation (two generations are kept)
local MAX_ROOTS = 8192 -- per generation
local MAX_CALLS = 1024 -- tool calls remembered per session between two idles
local MAX_PARTS = 4096 -- parts (stored text, kind) remembered per session between two idles
local MAX_MSGS = 4096 -- messages remembered per session between two idles
local MAX_PERMS = 1024 -- permission requests awaiting a reply, per session between two idles
local MAX_TEXT_BYTES = 8 * 1024 * 1024 -- stored part text remembered per session
local MAX_BUF = 4096 -- deltas buffered per part before they are joined

local coalesce_text = true
local coalesce_tools = true

function M.init(config)
  if type(config) == "table" then
    if config.coalesce_text == false then coalesce_text = false end
    if config.coalesce_tool_progress == false then coalesce_tools = false end
  end
end

local EMPTY = setmetatable({}, { __newindex = function() error("internal: EMPTY is read-only") end })
-- An empty list that serializes as [] (an empty Lua table would become {}).
local EMPTY_LIST = host.json_decode("[]")

local function str(v)
  if type(v) == "string" then return v end
end

local function tbl(v)
  if type(v) == "table" then return v end
  return EMPTY
end

local function num(v)
  if type(v) == "number" then return v end
end

local function valid_id(s)
  return type(s) == "string" and #s > 0 and #s <= 128 and not string.find(s, "[^%w%-_%.]")
    and string.byte(s, 1) ~= 46 -- '.'
    and s or nil
end

-- Lineage: child session -> root session. Two generations bound the memory.
local roots, old_roots, nroots = {}, {}, 0

local function root_of(sid)
  return roots[sid] or old_roots[sid]
end

local function set_root(sid, root)
  if roots[sid] == nil then
    if nroots >= MAX_ROOTS then
      old_roots, roots, nroots = roots, {}, 0
    end
    nroots = nroots + 1
  end
  roots[sid] = root
end

-- Per-session state, two generations as well.
local sessions, old_sessions, nsessions = {}, {}, 0

local function fresh(s)
  s.open = {} -- text/reasoning parts being coalesced, in order
  s.flushed = {} -- part id -> text already stored
  s.kinds = {} -- part id -> "text" | "reasoning"
  s.msgs = {} -- message id -> { role, turn, completed }
  s.calls = {} -- callID -> { tool, pending_id, req_id, status, result_id, child }
  s.ncalls = 0
  s.perms = {} -- permission id -> { id = event id, call = callID }
  s.counts = { flushed = 0, kinds = 0, msgs = 0, perms = 0 }
  s.text_bytes = 0 -- of the texts in s.flushed
  return s
end

-- Sets t[key] in one of a session's tables, bounded as its calls are: a new key past `max`
-- forgets every key held so far (returns true then). What is forgotten costs a later event
-- a link (its turn, its cause) or makes a part's next chunk its whole text again.
local function remember(s, name, key, value, max)
  local t = s[name]
  if t[key] == nil then
    local n, forgot = s.counts[name], false
    if n >= max then
      t, n, forgot = {}, 0, true
      s[name] = t
    end
    s.counts[name] = n + 1
    t[key] = value
    return forgot
  end
  t[key] = value
  return false
end

local function unremember(s, name, key)
  if s[name][key] ~= nil then
    s[name][key] = nil
    s.counts[name] = s.counts[name] - 1
  end
end

-- What is stored of part `pid` now; past MAX_TEXT_BYTES every other part's text goes first.
local function remember_text(s, pid, text)
  local prev = s.flushed[pid]
  local bytes = s.text_bytes - (prev and #prev or 0) + #text
  if bytes > MAX_TEXT_BYTES then
    s.flushed, s.counts.flushed, bytes = {}, 0, #text
  end
  if remember(s, "flushed", pid, text, MAX_PARTS) then bytes = #text end
  s.text_bytes = bytes
end

local function state(sid)
  local s = sessions[sid]
  if s then return s end
  s = old_sessions[sid]
  if s then
    old_sessions[sid] = nil
  else
    s = fresh({})
  end
  if nsessions >= MAX_SESSIONS then
    old_sessions, sessions, nsessions = sessions, {}, 0
  end
  sessions[sid] = s
  nsessions = nsessions + 1
  return s
end

local function forget(sid)
  sessions[sid] = nil
  old_sessions[sid] = nil
end

-- The current call: set by M.map.
local EMIT, HOOK, EID

-- Emits one event of session `sid` (nil: the pipeline's fallback session). `o` may set id,
-- causation_id, correlation_id, actor, raw and extra metadata (`meta`).
local function out(sid, s, type, payload, o)
  local meta = { hook = HOOK, event_id = EID }
  local e = { type = type, payload = payload, actor = ACTOR, metadata = meta }
  if sid then
    e.session_id = sid
    e.stream_id = root_of(sid)
    if s then e.correlation_id = s.turn end
  end
  if o then
    if o.id then e.id = o.id end
    if o.causation_id then e.causation_id = o.causation_id end
    if o.correlation_id then e.correlation_id = o.correlation_id end
    if o.actor then e.actor = o.actor end
    if o.raw then e.raw = o.raw end
    if o.meta then
      for k, v in pairs(o.meta) do meta[k] = v end
    end
  end
  EMIT(e)
end

local function unmapped(sid, s, event_type, hint)
  out(sid, s, "unmapped", { source = "opencode", event_type = event_type, hint = hint })
end

------------------------------------------------------------------------------------------
-- Text and reasoning parts

local function find_open(s, pid)
  for i = 1, #s.open do
    if s.open[i].id == pid then return s.open[i], i end
  end
end

local function open_part(s, pid, kind, mid, role, turn)
  local p = {
    id = pid, kind = kind, message_id = mid, role = role, turn = turn,
    base = s.flushed[pid] or "", buf = {}, n = 0,
  }
  s.open[#s.open + 1] = p
  return p
end

local function part_text(p)
  if #p.buf > 0 then
    p.base = p.base .. table.concat(p.buf)
    p.buf = {}
  end
  return p.base
end

-- Stores one coalesced part. `why` is "end" when the part's own final event triggers it.
local function store_part(sid, s, p, why)
  local text = part_text(p)
  local prev = s.flushed[p.id]
  remember_text(s, p.id, text)
  local payload = {
    role = p.role, kind = p.kind, message_id = p.message_id, part_id = p.id,
    final = true, coalesced = p.n,
  }
  if prev then
    if string.sub(text, 1, #prev) == prev then
      if #text == #prev then return end -- nothing new: already stored
      payload.text = string.sub(text, #prev + 1)
      payload.offset = #prev
    else
      payload.text = text
      payload.replaces = true
    end
  else
    payload.text = text
  end
  local o = { correlation_id = p.turn }
  if why ~= "end" then
    o.raw = p.raw
    o.meta = { flushed_by = why }
  end
  out(sid, s, "message.chunk", payload, o)
end

local function close_part(sid, s, p, why)
  local _, i = find_open(s, p.id)
  if i then table.remove(s.open, i) end
  store_part(sid, s, p, why)
end

-- Stores the open parts of a session (of one message, if `mid` is given).
local function flush(sid, s, why, mid)
  if #s.open == 0 then return end
  local keep = {}
  for _, p in ipairs(s.open) do
    if mid == nil or p.message_id == mid then
      store_part(sid, s, p, why)
    else
      keep[#keep + 1] = p
    end
  end
  s.open = keep
end

local function msg_role(s, mid, part)
  local m = mid and s.msgs[mid]
  if m then return m.role, m.turn end
  -- Unknown message (its message.updated was missed): OpenCode gives assistant text parts
  -- a `time`, user prompt parts none.
  if type(part.time) == "table" then return "assistant", s.turn end
  return "user", mid
end

local function text_part(sid, s, part, props, raw)
  local pid = str(part.id)
  local mid = str(part.messageID)
  local kind = part.type
  local role, turn = msg_role(s, mid, part)
  local text = str(part.text)
  if role == "user" then
    out(sid, s, "user.input", {
      text = text, message_id = mid, part_id = pid, synthetic = part.synthetic,
    }, { actor = "user", correlation_id = turn })
    return
  end
  local ended = tbl(part.time)["end"] ~= nil
  if pid then remember(s, "kinds", pid, kind, MAX_PARTS) end
  if not coalesce_text or pid == nil then
    out(sid, s, "message.chunk", {
      role = role, kind = kind, message_id = mid, part_id = pid, text = text,
      delta = str(props.delta), final = ended,
    }, { correlation_id = turn })
    return
  end
  local p = find_open(s, pid)
  if not p then
    flush(sid, s, "next part")
    p = open_part(s, pid, kind, mid, role, turn)
  end
  if text then
    p.base, p.buf = text, {}
  end
  p.n = p.n + 1
  p.raw = raw
  if ended then close_part(sid, s, p, "end") end
  -- else: folded into the part's chunk, stored when it ends
end

local function part_delta(sid, s, props, raw)
  local pid = str(props.partID)
  local mid = str(props.messageID)
  local delta = str(props.delta)
  local field = str(props.field) or "text"
  local p = pid and find_open(s, pid)
  local kind = (p and p.kind) or (pid and s.kinds[pid])
  local turn = (p and p.turn) or (mid and s.msgs[mid] and s.msgs[mid].turn) or s.turn
  if not coalesce_text or field ~= "text" or delta == nil or pid == nil then
    out(sid, s, "message.chunk", {
      role = p and p.role or "assistant", kind = kind, field = field,
      message_id = mid, part_id = pid, delta = delta, final = false,
    }, { correlation_id = turn })
    return
  end
  if not p then
    flush(sid, s, "next part")
    p = open_part(s, pid, kind or "text", mid, "assistant", turn)
  end
  local buf = p.buf
  buf[#buf + 1] = delta
  if #buf >= MAX_BUF then part_text(p) end
  p.n = p.n + 1
  p.raw = raw
end

------------------------------------------------------------------------------------------
-- Tool calls

local function call(s, id)
  if s == nil or id == nil then return nil end
  local c = s.calls[id]
  if not c then
    if s.ncalls >= MAX_CALLS then
      s.calls, s.ncalls = {}, 0
    end
    c = {}
    s.calls[id] = c
    s.ncalls = s.ncalls + 1
  end
  return c
end

local function duration(t)
  local a, b = t.start, t["end"]
  if type(a) == "number" and type(b) == "number" then return b - a end
end

-- The outcome of a tool call, reported by the after hook or the part's final state.
local function finished(sid, s, c, call_id, tool, ok_state, fields)
  if c and c.result_id then
    out(sid, s, "execution.tool_state", {
      phase = fields.phase, tool = tool, tool_use_id = call_id, duration_ms = fields.duration_ms,
    }, { causation_id = c.result_id })
    return
  end
  local id = host.ulid()
  fields.tool = tool
  fields.tool_use_id = call_id
  out(sid, s, "execution.tool_result", fields, {
    id = id, causation_id = c and (c.req_id or c.pending_id or c.running_id),
  })
  if not c then return end
  c.result_id = id
  c.status = fields.phase
  -- A task tool's subagent is done.
  local child = c.child
  if tool == "task" and child then
    if ok_state then
      out(sid, s, "agent.completed", {
        child_session_id = child, tool_use_id = call_id, agent = c.agent, output = fields.output,
      }, { causation_id = id })
    else
      out(sid, s, "agent.aborted", {
        child_session_id = child, tool_use_id = call_id, agent = c.agent, reason = "error",
        error = fields.error,
      }, { causation_id = id })
    end
  end
end

local function note_child(c, input, metadata)
  if not c then return end
  local child = valid_id(metadata.sessionId)
  if child then c.child = child end
  if c.agent == nil then c.agent = str(input.subagent_type) end
end

local function tool_part(sid, s, part)
  local st = tbl(part.state)
  local status = str(st.status)
  local call_id = str(part.callID)
  local tool = str(part.tool)
  local known = call_id and s.calls[call_id]
  if not known then flush(sid, s, "next part") end
  local c = call(s, call_id)
  local mid, pid = str(part.messageID), str(part.id)
  local turn = (mid and s.msgs[mid] and s.msgs[mid].turn) or s.turn
  local o = { correlation_id = turn }
  if c then c.tool = c.tool or tool end
  local md = tbl(st.metadata)
  local input = tbl(st.input)
  if status == "pending" then
    if c and c.status ~= nil and coalesce_tools then return end -- a repeat
    local id = host.ulid()
    o.id = id
    out(sid, s, "execution.tool_use", {
      phase = "pending", tool = tool, tool_use_id = call_id, message_id = mid, part_id = pid,
    }, o)
    if c then
      c.pending_id = c.pending_id or id
      c.status = c.status or "pending"
    end
  elseif status == "running" then
    note_child(c, input, md)
    local first = not (c and (c.status == "running" or c.result_id))
    if not first and coalesce_tools then return end -- progress: the final state has it all
    local id = host.ulid()
    o.id = id
    o.causation_id = c and (c.req_id or c.pending_id)
    out(sid, s, "execution.tool_use", {
      phase = "running", tool = tool, tool_use_id = call_id, input = st.input, title = st.title,
      child_session_id = c and c.child or valid_id(md.sessionId), message_id = mid, part_id = pid,
      update = (not first) or nil, output = (not first) and str(md.output) or nil,
    }, o)
    if c and first then
      c.running_id = id
      c.status = "running"
    end
  elseif status == "completed" then
    note_child(c, input, md)
    local exit = md.exit
    finished(sid, s, c, call_id, tool, true, {
      phase = "completed", ok = not (type(exit) == "number" and exit ~= 0), exit = exit,
      output = st.output, title = st.title, truncated = md.truncated,
      duration_ms = duration(tbl(st.time)), child_session_id = c and c.child,
      message_id = mid, part_id = pid,
    })
  elseif status == "error" then
    note_child(c, input, md)
    finished(sid, s, c, call_id, tool, false, {
      phase = "failed", ok = false, error = st.error, duration_ms = duration(tbl(st.time)),
      message_id = mid, part_id = pid,
    })
  else
    unmapped(sid, s, "message.part.updated", "tool part with an unknown state")
  end
end

local function tool_hook(raw, hook)
  local input, output = tbl(raw.input), tbl(raw.output)
  local sid = valid_id(input.sessionID)
  local s = sid and state(sid)
  if s then s.idle = false end
  local call_id = str(input.callID)
  local tool = str(input.tool)
  local c = call(s, call_id)
  if c then c.tool = c.tool or tool end
  if hook == "tool.execute.before" then
    local id = host.ulid()
    out(sid, s, "execution.tool_use", {
      phase = "requested", tool = tool, tool_use_id = call_id, input = output.args,
    }, { id = id, causation_id = c and c.pending_id })
    if c then
      c.req_id = id
      if tool == "task" and c.agent == nil then c.agent = str(tbl(output.args).subagent_type) end
    end
  else
    local md = tbl(output.metadata)
    note_child(c, tbl(input.args), md)
    local exit = md.exit
    finished(sid, s, c, call_id, tool, true, {
      phase = "completed", ok = not (type(exit) == "number" and exit ~= 0), exit = exit,
      output = output.output, title = output.title, truncated = md.truncated,
      child_session_id = c and c.child,
    })
  end
end

------------------------------------------------------------------------------------------
-- Bus events

local function went_idle(sid, s, why)
  flush(sid, s, why)
  if s.idle then
    out(sid, s, "lifecycle.session.status", { status = "idle" })
  else
    out(sid, s, "lifecycle.session.idle", { status = "idle" })
    s.idle = true
  end
  -- The turn is over: drop what only a turn needs (the turn id stays for late events).
  local turn, idle = s.turn, s.idle
  fresh(s)
  s.turn, s.idle = turn, idle
end

local function error_fields(err)
  err = tbl(err)
  local data = tbl(err.data)
  return str(err.name), str(data.message) or str(err.message)
end

local function session_info(info)
  local model = tbl(info.model)
  local summary = info.summary
  return {
    title = info.title, agent = info.agent, parent_id = info.parentID,
    model = model.id or model.modelID, provider = model.providerID,
    cost = info.cost, tokens = info.tokens, summary = summary,
    archived = tbl(info.time).archived,
  }
end

local bus = {}

bus["session.created"] = function(p, t)
  local info = tbl(p.info)
  local sid = valid_id(info.id) or valid_id(p.sessionID)
  local parent = valid_id(info.parentID)
  if sid and parent then set_root(sid, root_of(parent) or parent) end
  local s = sid and state(sid)
  out(sid, s, "lifecycle.session.created", {
    title = info.title, slug = info.slug, directory = info.directory,
    project_id = info.projectID, version = info.version, parent_id = parent, agent = info.agent,
  })
  if sid and parent then
    local ps = state(parent)
    -- The task call that made it, when there is exactly one candidate.
    local call_id, only = nil, 0
    for id, c in pairs(ps.calls) do
      if c.tool == "task" and c.child == nil and c.result_id == nil then
        call_id, only = id, only + 1
      end
    end
    if only ~= 1 then call_id = nil end
    if call_id then ps.calls[call_id].child = sid end
    out(parent, ps, "agent.spawned", {
      child_session_id = sid, agent = info.agent, title = info.title, tool_use_id = call_id,
    })
  end
end

bus["session.updated"] = function(p, t)
  local info = tbl(p.info)
  local sid = valid_id(info.id) or valid_id(p.sessionID)
  local s = sid and state(sid)
  out(sid, s, "lifecycle.session.updated", session_info(info))
end

bus["session.deleted"] = function(p, t)
  local info = tbl(p.info)
  local sid = valid_id(info.id) or valid_id(p.sessionID)
  local s = sid and state(sid)
  if s then flush(sid, s, t) end
  out(sid, s, "lifecycle.session.ended", { reason = "deleted", title = info.title })
  if sid then forget(sid) end
end

bus["session.status"] = function(p, t)
  local sid = valid_id(p.sessionID)
  local s = sid and state(sid)
  local status = tbl(p.status)
  local kind = str(status.type)
  if s and kind == "idle" then return went_idle(sid, s, t) end
  if s then s.idle = false end
  if kind == "retry" then
    out(sid, s, "session.retry", {
      attempt = status.attempt, message = status.message, next = status.next,
    })
  else
    out(sid, s, "lifecycle.session.status", { status = kind })
  end
end

bus["session.idle"] = function(p, t)
  local sid = valid_id(p.sessionID)
  if not sid then return out(nil, nil, "lifecycle.session.idle", { status = "idle" }) end
  went_idle(sid, state(sid), t)
end

bus["session.compacted"] = function(p, t)
  local sid = valid_id(p.sessionID)
  local s = sid and state(sid)
  if s then flush(sid, s, t) end
  out(sid, s, "lifecycle.session.compacted", {})
end

bus["session.error"] = function(p, t)
  local sid = valid_id(p.sessionID)
  local s = sid and state(sid)
  if s then flush(sid, s, t) end
  local name, message = error_fields(p.error)
  -- An abort also marks the assistant message (message.updated with `error`): agent.aborted
  -- is stored from there, once.
  out(sid, s, "session.error", { error = name, message = message })
end

bus["session.diff"] = function(p, t)
  local sid = valid_id(p.sessionID)
  local files = {}
  for i, d in ipairs(tbl(p.diff)) do
    d = tbl(d)
    files[i] = { file = d.file, additions = d.additions, deletions = d.deletions, status = d.status }
  end
  out(sid, sid and state(sid), "files.diff", { files = #files > 0 and files or EMPTY_LIST })
end

bus["message.updated"] = function(p, t)
  local info = tbl(p.info)
  local sid = valid_id(info.sessionID) or valid_id(p.sessionID)
  local s = sid and state(sid)
  local mid, role = str(info.id), str(info.role)
  local m = s and mid and s.msgs[mid]
  if s then s.idle = false end
  local model = tbl(info.model)
  local payload = {
    role = role, message_id = mid, parent_id = info.parentID, agent = info.agent,
    model = info.modelID or model.modelID, provider = info.providerID or model.providerID,
  }
  if role == "user" then
    if s and mid then
      s.turn = mid
      if not m then remember(s, "msgs", mid, { role = "user", turn = mid }, MAX_MSGS) end
    end
    out(sid, s, "message.updated", payload)
    return
  end
  local turn = str(info.parentID) or (s and s.turn)
  if s and mid and not m then
    flush(sid, s, "next message")
    m = { role = role or "assistant", turn = turn }
    remember(s, "msgs", mid, m, MAX_MSGS)
  end
  if m then m.model, m.provider = payload.model, payload.provider end
  payload.finish, payload.cost, payload.tokens = info.finish, info.cost, info.tokens
  local err = info.error
  if err ~= nil then
    local name, message = error_fields(err)
    payload.error, payload.error_message = name, message
  end
  local done = tbl(info.time).completed ~= nil
  if done and not (m and m.completed) then
    if s then flush(sid, s, "message completed", mid) end
    if m then m.completed = true end
    out(sid, s, "message.completed", payload, { correlation_id = turn })
    if payload.error == "MessageAbortedError" then
      out(sid, s, "agent.aborted", { reason = "aborted", message_id = mid }, { correlation_id = turn })
    end
  else
    out(sid, s, "message.updated", payload, { correlation_id = turn })
  end
end

bus["message.removed"] = function(p, t)
  local sid = valid_id(p.sessionID)
  out(sid, sid and state(sid), "message.removed", { message_id = p.messageID })
end

bus["message.part.removed"] = function(p, t)
  local sid = valid_id(p.sessionID)
  out(sid, sid and state(sid), "message.part_removed", {
    message_id = p.messageID, part_id = p.partID,
  })
end

-- Parts of one step kept as they are, with the fields their payload carries.
local simple_parts = {
  ["step-start"] = { "execution.step_start", { "snapshot" } },
  ["patch"] = { "files.patched", { "hash", "files" } },
  ["compaction"] = { "lifecycle.session.compacting", { "auto" } },
  ["agent"] = { "message.agent", { "name" } },
  ["subtask"] = { "agent.handoff", { "agent", "description", "prompt", "command" } },
  ["snapshot"] = { "files.snapshot", { "snapshot" } },
  ["retry"] = { "session.retry", { "attempt", "error" } },
}

bus["message.part.updated"] = function(p, t, raw)
  local part = tbl(p.part)
  local sid = valid_id(part.sessionID) or valid_id(p.sessionID)
  if not sid then return unmapped(nil, nil, t, "part without a valid session id") end
  local s = state(sid)
  s.idle = false
  local kind = part.type
  if kind == "text" or kind == "reasoning" then return text_part(sid, s, part, p, raw) end
  if kind == "tool" then return tool_part(sid, s, part) end
  local mid = str(part.messageID)
  local role, turn = msg_role(s, mid, part)
  local o = { correlation_id = turn }
  if kind == "step-finish" then
    flush(sid, s, "step finish", mid)
    out(sid, s, "execution.step_finish", {
      reason = part.reason, cost = part.cost, tokens = part.tokens, snapshot = part.snapshot,
      message_id = mid, part_id = part.id,
    }, o)
    -- One model call: what `dstream usage` sums (the same fields as the other agents').
    local tk, m = tbl(part.tokens), s.msgs[mid] or EMPTY
    local cache = tbl(tk.cache)
    out(sid, s, "usage.request", {
      model = m.model, provider = m.provider, input_tokens = num(tk.input),
      output_tokens = num(tk.output), reasoning_tokens = num(tk.reasoning),
      cache_read_input_tokens = num(cache.read), cache_creation_input_tokens = num(cache.write),
      cost_usd = num(part.cost), message_id = mid, part_id = part.id,
    }, o)
    return
  end
  flush(sid, s, "next part")
  if kind == "file" then
    local url = str(part.url)
    if url and string.sub(url, 1, 5) == "data:" then url = nil end -- the content stays in raw
    out(sid, s, "message.file", {
      role = role, mime = part.mime, filename = part.filename, url = url,
      message_id = mid, part_id = part.id,
    }, o)
    return
  end
  local simple = simple_parts[kind]
  if not simple then return unmapped(sid, s, t, "part type not known to this mapping") end
  local payload = { message_id = mid, part_id = part.id }
  for _, k in ipairs(simple[2]) do payload[k] = part[k] end
  out(sid, s, simple[1], payload, o)
end

bus["message.part.delta"] = function(p, t, raw)
  local sid = valid_id(p.sessionID)
  if not sid then return unmapped(nil, nil, t, "delta without a valid session id") end
  local s = state(sid)
  s.idle = false
  part_delta(sid, s, p, raw)
end

local function permission_asked(p, t)
  local sid = valid_id(p.sessionID)
  local s = sid and state(sid)
  local tool = tbl(p.tool)
  local call_id = str(tool.callID) or str(p.callID)
  local c = s and call_id and s.calls[call_id]
  local id = host.ulid()
  local pid = str(p.id)
  out(sid, s, "execution.permission_requested", {
    permission_id = pid, permission = p.permission or p.type,
    patterns = p.patterns or p.pattern, always = p.always, title = p.title, metadata = p.metadata,
    tool_use_id = call_id, message_id = tool.messageID or p.messageID,
  }, { id = id, causation_id = c and (c.req_id or c.pending_id) })
  if s and pid then remember(s, "perms", pid, { id = id, call = call_id }, MAX_PERMS) end
end
bus["permission.asked"] = permission_asked
bus["permission.updated"] = permission_asked -- OpenCode before 1.x

bus["permission.replied"] = function(p, t)
  local sid = valid_id(p.sessionID)
  local s = sid and state(sid)
  local pid = str(p.requestID) or str(p.permissionID)
  local asked = s and pid and s.perms[pid]
  if asked then unremember(s, "perms", pid) end
  out(sid, s, "execution.permission_replied", {
    permission_id = pid, reply = p.reply or p.response, tool_use_id = asked and asked.call,
  }, { causation_id = asked and asked.id })
end

bus["file.edited"] = function(p, t)
  local sid = valid_id(p.sessionID)
  out(sid, sid and state(sid), "files.changed", { file = p.file, change = "edited" })
end

bus["file.watcher.updated"] = function(p, t)
  local sid = valid_id(p.sessionID)
  out(sid, sid and state(sid), "files.changed", { file = p.file, change = p.event, watcher = true })
end

bus["todo.updated"] = function(p, t)
  local sid = valid_id(p.sessionID)
  out(sid, sid and state(sid), "todo.updated", { todos = p.todos })
end

bus["command.executed"] = function(p, t)
  local sid = valid_id(p.sessionID)
  out(sid, sid and state(sid), "user.command", {
    name = p.name, arguments = p.arguments, message_id = p.messageID,
  }, { actor = "user" })
end

-- Sent by the dstream OpenCode plugin itself when its queue overflowed.
bus["dstream.plugin.dropped"] = function(p, t)
  local sid = valid_id(p.sessionID)
  out(sid, nil, "log.dropped", { count = p.count, by = "opencode plugin" })
end

-- Families of OpenCode events about the server, the UI or the project rather than a
-- session's work: kept as unmapped, with the reason.
local server_level = {
  plugin = true, catalog = true, reference = true, integration = true, lsp = true,
  server = true, installation = true, ide = true, tui = true, mcp = true, pty = true,
  project = true, vcs = true, storage = true, workspace = true, config = true, global = true,
}

local function bus_event(e, raw)
  local t = str(e.type)
  local p = tbl(e.properties)
  EID = str(e.id)
  HOOK = t or "event"
  local handler = t and bus[t]
  if handler then return handler(p, t, raw) end
  local sid = valid_id(p.sessionID)
  local family = t and string.match(t, "^[^.]+")
  if family and server_level[family] then
    return unmapped(sid, nil, t, "OpenCode " .. family .. " event: not part of the taxonomy")
  end
  unmapped(sid, nil, t, t and "OpenCode event type not known to this mapping"
    or "bus event without a string type")
end

function M.map(raw, emit, ctx)
  EMIT, HOOK, EID = emit, nil, nil
  if type(raw) ~= "table" then
    return unmapped(nil, nil, nil, "not an OpenCode event object")
  end
  local hook = raw.hook
  if hook == "tool.execute.before" or hook == "tool.execute.after" then
    HOOK = hook
    return tool_hook(raw, hook)
  end
  if hook == "event" then
    if type(raw.event) == "table" then return bus_event(raw.event, raw) end
    HOOK = hook
    return unmapped(nil, nil, nil, "event hook call without an event object")
  end
  if hook == nil and type(raw.type) == "string" then return bus_event(raw, raw) end
  HOOK = str(hook)
  unmapped(nil, nil, nil, hook ~= nil and "OpenCode hook not known to this mapping"
    or "neither a bus event nor a tool hook call")
end

return M
