-- opencode-export: maps OpenCode's stored sessions (its SQLite database, or the JSON
-- `opencode export <session>` prints) to the dstream taxonomy, the same types live capture
-- (opencode.lua) gives. Built in; an opencode-export.lua in the plugin folder replaces it.
-- `dstream import opencode` sends one ingest per stored part, plus one per session; shapes
-- follow what OpenCode 1.18 stores.
--
-- What arrives:
--   { export = { file, session_id, root_id, import_id, timestamp },
--     session = <the session's info> }                       -- first, once per session
--   { export = {...}, message = <the message's info>, part = <one of its parts> }
--   { export = {...}, message = <info> }                      -- a message without parts
-- `import_id` goes into every event's metadata: the importer reads it back to skip what it
-- already stored. `timestamp` is when OpenCode wrote the part (ISO 8601). The pipeline keeps
-- the whole input in `raw` (plugins.keep_raw).
--
-- Mapping:
--   session info                     -> lifecycle.session.created {title, directory, version,
--                                       project_id, parent_id, agent, model}; a child session
--                                       (parent_id) also puts agent.spawned in its parent's log
--   user message, text part          -> user.input {text, message_id}       (actor "user")
--   assistant text part              -> message.chunk {role, text, message_id, part_id, final}
--   assistant reasoning part         -> message.chunk {type = "reasoning", ...}
--   tool part                        -> execution.tool_use {phase = "called", tool, input,
--                                       tool_use_id, title}, then, when it finished,
--                                       execution.tool_result {phase = "completed" | "failed",
--                                       ok, tool, tool_use_id, output, error}; the pipeline
--                                       joins the two through tool_use_id (causation_id). Not
--                                       "requested": the call ran long ago, so policy must not
--                                       hold it.
--   step-start / step-finish         -> execution.step_start / execution.step_finish
--                                       {reason, tokens, cost}; step-finish also gives
--                                       usage.request {model, provider, input_tokens,
--                                       output_tokens, reasoning_tokens,
--                                       cache_read_input_tokens, cache_creation_input_tokens,
--                                       cost_usd, message_id}
--   other parts (file, patch, agent, subtask, compaction, retry, snapshot, ...)
--                                    -> opencode.part.<type> with a few small fields
--   anything else                    -> unmapped
--
-- Lineage: a session's stream_id is the root of its parent chain (root_id, which the importer
-- works out), as live capture does. The turn (the user message a reply answers) is the
-- correlation id.

local M = { name = "opencode-export", api = 1, sources = { "opencode-export" } }

local ACTOR = "opencode"

local EMPTY = setmetatable({}, { __newindex = function() error("internal: EMPTY is read-only") end })

local function str(v)
  if type(v) == "string" then return v end
end

local function num(v)
  if type(v) == "number" then return v end
end

local function tbl(v)
  if type(v) == "table" then return v end
  return EMPTY
end

local function valid_id(s)
  return type(s) == "string" and #s > 0 and #s <= 128 and not string.find(s, "[^%w%-_%.]")
    and string.byte(s, 1) ~= 46 -- '.'
    and s or nil
end

-- The current ingest, set by M.map.
local EMIT, X, SID, STREAM, TURN, CTX

local function out(type, payload, o)
  local meta = { import_id = str(X.import_id), timestamp = str(X.timestamp) }
  local e = {
    type = type, payload = payload, actor = ACTOR, metadata = meta,
    session_id = SID, stream_id = STREAM, correlation_id = TURN,
  }
  if o then
    if o.actor then e.actor = o.actor end
    if o.session_id then e.session_id, e.stream_id = o.session_id, o.stream_id end
  end
  EMIT(e)
end

local function session(info)
  local parent = valid_id(info.parentID)
  local model = info.model
  if type(model) == "table" then model = str(model.id) end
  out("lifecycle.session.created", {
    title = str(info.title), directory = str(info.directory), version = str(info.version),
    project_id = str(info.projectID), parent_id = parent, agent = str(info.agent),
    model = str(model), slug = str(info.slug),
  })
  if parent and SID then
    out("agent.spawned", { child_session_id = SID, agent = str(info.agent), title = str(info.title) },
      { session_id = parent, stream_id = STREAM ~= parent and STREAM or nil })
  end
end

local function usage(msg, p)
  local t, cache = tbl(p.tokens), tbl(tbl(p.tokens).cache)
  out("usage.request", {
    model = str(msg.modelID), provider = str(msg.providerID), input_tokens = num(t.input),
    output_tokens = num(t.output), reasoning_tokens = num(t.reasoning),
    cache_read_input_tokens = num(cache.read), cache_creation_input_tokens = num(cache.write),
    cost_usd = num(p.cost), message_id = str(msg.id),
  })
end

local function tool(p)
  local st = tbl(p.state)
  local id, name = str(p.callID), str(p.tool)
  out("execution.tool_use", {
    phase = "called", tool = name, input = st.input, tool_use_id = id, title = str(st.title),
  })
  if st.status == "completed" or st.status == "error" then
    local failed = st.status == "error"
    local time = tbl(st.time)
    local ms
    if num(time["end"]) and num(time.start) then ms = time["end"] - time.start end
    out("execution.tool_result", {
      phase = failed and "failed" or "completed", ok = not failed, tool = name,
      tool_use_id = id, output = str(st.output), error = str(st.error), duration_ms = ms,
    })
  end
end

-- Fields worth a look without opening raw, for the parts kept as opencode.part.<type>.
local small = {
  file = function(p) return { mime = str(p.mime), filename = str(p.filename), url = str(p.url) } end,
  patch = function(p) return { hash = str(p.hash), files = p.files } end,
  agent = function(p) return { name = str(p.name) } end,
  subtask = function(p) return { agent = str(p.agent), description = str(p.description) } end,
  compaction = function(p) return { auto = p.auto } end,
  retry = function(p) return { attempt = num(p.attempt) } end,
  snapshot = function(p) return { snapshot = str(p.snapshot) } end,
}

local function part(msg, p)
  local kind = str(p.type)
  local role = str(msg.role)
  local mid = str(msg.id)
  if kind == "text" then
    if role == "user" then
      if p.synthetic == true then
        return out("context.message", { role = "user", text = str(p.text), message_id = mid })
      end
      return out("user.input", { text = str(p.text), message_id = mid }, { actor = "user" })
    end
    return out("message.chunk", { role = role or "assistant", text = str(p.text), message_id = mid,
      part_id = str(p.id), final = true })
  elseif kind == "reasoning" then
    return out("message.chunk", { role = role or "assistant", type = "reasoning", text = str(p.text),
      message_id = mid, part_id = str(p.id), final = true })
  elseif kind == "tool" then
    return tool(p)
  elseif kind == "step-start" then
    return out("execution.step_start", { message_id = mid, snapshot = str(p.snapshot) })
  elseif kind == "step-finish" then
    out("execution.step_finish", { message_id = mid, reason = str(p.reason), tokens = p.tokens,
      cost = num(p.cost) })
    return usage(msg, p)
  elseif kind ~= nil and #kind <= 64 and not string.find(kind, "[^%w%-_]") then
    local f = small[kind]
    return out("opencode.part." .. kind, f and f(p) or {})
  end
  out("unmapped", { source = CTX.source, hint = "an OpenCode part without a known type" })
end

function M.map(raw, emit, ctx)
  EMIT, CTX, TURN = emit, ctx, nil
  raw = tbl(raw)
  X = tbl(raw.export)
  SID = valid_id(X.session_id) or valid_id(ctx.session_id)
  local root = valid_id(X.root_id)
  STREAM = root ~= SID and root or nil
  if type(raw.session) == "table" then return session(raw.session) end
  local msg = raw.message
  if type(msg) ~= "table" then
    return out("unmapped", { source = ctx.source, hint = "neither a session nor a message" })
  end
  TURN = msg.role == "user" and str(msg.id) or str(msg.parentID)
  if raw.part == nil then
    return out("opencode.message", { role = str(msg.role), message_id = str(msg.id),
      error = msg.error })
  end
  if type(raw.part) ~= "table" then
    return out("unmapped", { source = ctx.source, text = raw.part, error = str(raw.error) })
  end
  part(msg, raw.part)
end

return M
