-- claude-agent-sdk: maps the messages yielded by the Claude Agent SDK's `query()` (with
-- `includePartialMessages: true`) to the dstream taxonomy. Built in; a claude-agent-sdk.lua
-- in the plugin folder replaces it. Shapes follow tests/fixtures/claude-agent-sdk (SDK 0.3).
--
-- Streaming content becomes `message.chunk` events whose payload IS the stream chunk of the
-- conversion table in SEEDS.md §A (a client materializes a message from them in LSN order):
--   content_block_start tool_use          -> {type="tool-call-streaming-start", toolCallId, toolName}
--   content_block_delta text_delta        -> {type="text-delta", textDelta}
--   content_block_delta input_json_delta  -> {type="tool-call-delta", toolCallId, argsTextDelta}
--   content_block_stop of a tool_use      -> {type="tool-call", toolCallId, toolName, args}
--                                            (args decoded from the accumulated JSON; if it
--                                            is not valid JSON, args is the text and
--                                            metadata.args_error says why)
--   content_block_delta thinking_delta    -> {type="reasoning", textDelta}
--   user message, each tool_result block  -> {type="tool-result", toolCallId, result}
--                                            (+ isError = true for an error result)
--   result                                -> {type="done", finishReason, cost, usage,
--                                            durationMs, numTurns}, and usage.session
--                                            {total_cost_usd, tokens by kind, model_usage}
-- A chunk of a tool call points at the call's previous chunk through causation_id, and the
-- tool-result at the tool-call, so a call and its result are joined without extra events.
--
-- The table's "none" rows still store one compact event each (the raw message must not be
-- lost; the pipeline keeps it in `raw`):
--   system init     -> lifecycle.session.created (lifecycle.session.resumed for a session
--                      this daemon has seen before: the SDK session id is remembered)
--   assistant       -> message.completed {message_id, blocks, ...}: compact when the stream
--                      events carried the content; when they did not (a message that was
--                      not streamed), its content becomes the chunks above, as if streamed
--   content_block_start/stop of a text or thinking block, message_stop, signature deltas
--                   -> message.stream_event {event, index, block_type}
--   message_start   -> execution.step_start {message_id, model, usage}
--   message_delta   -> execution.step_finish {message_id, stop_reason, usage}
-- Other messages: system status -> lifecycle.session.status, compact_boundary ->
-- lifecycle.session.compacted, a user message's text -> user.input, a failed result ->
-- session.error too; anything else -> unmapped with a hint.
--
-- Lineage: messages of a subagent (parent_tool_use_id set) go to the session
-- "<session>.agent-<parent_tool_use_id>" whose stream_id is the parent session; the parent's
-- log gets agent.spawned at the subagent's first message and agent.completed when the tool
-- call's result arrives. correlation_id is the turn: the uuid of the turn's first message.
--
-- State per session: the turn, the content blocks of the message being streamed (index ->
-- type, tool call id and name, accumulated JSON), the tool calls' chunk ids. A turn's state
-- is dropped at its `result`; at most MAX_SESSIONS sessions are remembered (two generations).

local M = { name = "claude-agent-sdk", api = 1, sources = { "claude-agent-sdk" } }

local ACTOR = "claude-agent-sdk"
local MAX_SESSIONS = 1024 -- per generation
local MAX_KNOWN = 8192 -- session ids remembered for created/resumed, per generation
local MAX_CALLS = 1024 -- tool calls remembered per session within a turn

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

local function valid_id(s)
  return type(s) == "string" and #s > 0 and #s <= 128 and not string.find(s, "[^%w%-_%.]")
    and string.byte(s, 1) ~= 46 -- '.'
    and s or nil
end

local known, old_known, nknown = {}, {}, 0

local function seen_before(sid)
  if known[sid] or old_known[sid] then return true end
  if nknown >= MAX_KNOWN then
    old_known, known, nknown = known, {}, 0
  end
  known[sid] = true
  nknown = nknown + 1
  return false
end

local sessions, old_sessions, nsessions = {}, {}, 0

local function fresh(s)
  s.turn = nil
  s.blocks = {} -- content block index -> { type, id, name, json = {parts}, chunk = event id }
  s.message_id = nil
  s.streamed = {} -- message ids whose stream events were seen
  s.calls = {} -- toolCallId -> id of its last chunk
  s.ncalls = 0
  return s
end

local function state(sid)
  local s = sessions[sid]
  if s then return s end
  s = old_sessions[sid]
  if s then
    old_sessions[sid] = nil
  else
    s = fresh({ children = {} })
  end
  if nsessions >= MAX_SESSIONS then
    old_sessions, sessions, nsessions = sessions, {}, 0
  end
  sessions[sid] = s
  nsessions = nsessions + 1
  return s
end

-- The current call, set by M.map.
local EMIT, RAW, SID, STREAM, S

local function out(type, payload, o)
  local meta = { hook = str(RAW.type), uuid = str(RAW.uuid) }
  local e = {
    type = type, payload = payload, actor = ACTOR, metadata = meta,
    session_id = SID, stream_id = STREAM, correlation_id = S and S.turn,
  }
  if o then
    if o.id then e.id = o.id end
    if o.causation_id then e.causation_id = o.causation_id end
    if o.actor then e.actor = o.actor end
    if o.meta then
      for k, v in pairs(o.meta) do meta[k] = v end
    end
  end
  EMIT(e)
end

local function chunk(c, o)
  out("message.chunk", c, o)
end

local function unmapped(hint)
  out("unmapped", { source = ACTOR, message_type = RAW.type, subtype = RAW.subtype, hint = hint })
end

local function remember_call(id, event_id)
  if not (S and id) then return end
  if S.calls[id] == nil then
    if S.ncalls >= MAX_CALLS then
      S.calls, S.ncalls = {}, 0
    end
    S.ncalls = S.ncalls + 1
  end
  S.calls[id] = event_id
end

local TOOL_BLOCKS = { tool_use = true, server_tool_use = true, mcp_tool_use = true }

-- The tool-call chunk of a complete tool_use block.
local function tool_call(id, name, args, cause, meta)
  local event_id = host.ulid()
  chunk({ type = "tool-call", toolCallId = id, toolName = name, args = args },
    { id = event_id, causation_id = cause, meta = meta })
  remember_call(id, event_id)
end

------------------------------------------------------------------------------------------
-- stream_event

local function stream_event(ev)
  local et = str(ev.type)
  local s = S or fresh({})
  local meta = { event = et, message_id = RAW.api_message_id }
  local o = { meta = meta }
  if et == "content_block_delta" then
    local d = tbl(ev.delta)
    local dt = d.type
    if dt == "text_delta" then return chunk({ type = "text-delta", textDelta = d.text }, o) end
    if dt == "thinking_delta" then return chunk({ type = "reasoning", textDelta = d.thinking }, o) end
    if dt == "input_json_delta" then
      local b = s.blocks[ev.index]
      local part = str(d.partial_json)
      if b and b.json and part then b.json[#b.json + 1] = part end
      local event_id = host.ulid()
      o.id, o.causation_id = event_id, b and b.chunk
      chunk({ type = "tool-call-delta", toolCallId = b and b.id, argsTextDelta = d.partial_json }, o)
      if b then b.chunk = event_id end
      return
    end
    return out("message.stream_event", { event = et, index = ev.index, delta_type = dt }, o)
  elseif et == "content_block_start" then
    local cb = tbl(ev.content_block)
    local bt = str(cb.type)
    if TOOL_BLOCKS[bt] then
      local event_id = host.ulid()
      local id, name = str(cb.id), str(cb.name)
      if ev.index ~= nil then
        s.blocks[ev.index] = { type = bt, id = id, name = name, json = {}, chunk = event_id }
      end
      o.id = event_id
      return chunk({ type = "tool-call-streaming-start", toolCallId = id, toolName = name }, o)
    end
    if ev.index ~= nil then s.blocks[ev.index] = { type = bt } end
    return out("message.stream_event", { event = et, index = ev.index, block_type = bt }, o)
  elseif et == "content_block_stop" then
    local b = ev.index ~= nil and s.blocks[ev.index] or nil
    if b then s.blocks[ev.index] = nil end
    if b and b.json then
      local text = table.concat(b.json)
      local args
      if text == "" then
        args = {}
      else
        local ok, v = pcall(host.json_decode, text)
        if ok then
          args = v
        else
          args = text
          meta.args_error = string.match(tostring(v), "^[^\n]*")
        end
      end
      return tool_call(b.id, b.name, args, b.chunk, meta)
    end
    return out("message.stream_event", {
      event = et, index = ev.index, block_type = b and b.type,
    }, o)
  elseif et == "message_start" then
    local msg = tbl(ev.message)
    local mid = str(msg.id) or str(RAW.api_message_id)
    s.blocks = {}
    s.message_id = mid
    if mid then s.streamed[mid] = true end
    return out("execution.step_start", { message_id = mid, model = msg.model, usage = msg.usage }, o)
  elseif et == "message_delta" then
    local d = tbl(ev.delta)
    return out("execution.step_finish", {
      message_id = s.message_id or RAW.api_message_id, stop_reason = d.stop_reason,
      usage = ev.usage,
    }, o)
  elseif et == "message_stop" then
    s.blocks = {}
    return out("message.stream_event", { event = et }, o)
  elseif et == "error" then
    local err = tbl(ev.error)
    return out("session.error", { error = err.type, message = err.message }, o)
  end
  out("message.stream_event", { event = et }, o)
end

------------------------------------------------------------------------------------------
-- Whole messages

local function assistant(msg)
  local mid = str(msg.id)
  local content = msg.content
  local blocks = {}
  for i, b in ipairs(tbl(content)) do
    b = tbl(b)
    blocks[i] = { type = b.type, id = b.id, name = b.name }
  end
  local streamed = S and mid and S.streamed[mid]
  out("message.completed", {
    role = "assistant", message_id = mid, model = msg.model, stop_reason = msg.stop_reason,
    usage = msg.usage, blocks = #blocks > 0 and blocks or EMPTY_LIST, streamed = streamed == true,
  })
  if streamed then return end
  -- Not streamed (no stream events for it, e.g. without includePartialMessages): its
  -- content as the chunks streaming would have given.
  for _, b in ipairs(tbl(content)) do
    b = tbl(b)
    if b.type == "text" then
      chunk({ type = "text-delta", textDelta = b.text })
    elseif b.type == "thinking" then
      chunk({ type = "reasoning", textDelta = b.thinking })
    elseif TOOL_BLOCKS[b.type] then
      tool_call(str(b.id), str(b.name), b.input, nil, nil)
    end
  end
end

local function user(msg)
  local content = msg.content
  if type(content) == "string" then
    return out("user.input", { text = content }, { actor = "user" })
  end
  local texts, emitted = {}, false
  for _, b in ipairs(tbl(content)) do
    b = tbl(b)
    if b.type == "tool_result" then
      local id = str(b.tool_use_id)
      chunk({
        type = "tool-result", toolCallId = id, result = b.content,
        isError = b.is_error == true or nil,
      }, { causation_id = S and id and S.calls[id] })
      emitted = true
      local child = S and id and S.children[id]
      if child then
        out("agent.completed", {
          child_session_id = child, tool_use_id = id, is_error = b.is_error == true,
        })
        S.children[id] = nil
      end
    elseif b.type == "text" then
      texts[#texts + 1] = str(b.text)
    end
  end
  if #texts > 0 then
    out("user.input", { text = table.concat(texts, "\n") }, { actor = "user" })
    emitted = true
  end
  if not emitted then unmapped("user message without text or tool results") end
end

local FINISH = {
  end_turn = "stop", stop_sequence = "stop", max_tokens = "length", tool_use = "tool-calls",
  refusal = "content-filter", pause_turn = "other",
}

local function result(raw)
  local failed = raw.is_error == true or (raw.subtype ~= nil and raw.subtype ~= "success")
  local u = tbl(raw.usage)
  chunk({
    type = "done",
    finishReason = failed and "error" or FINISH[raw.stop_reason] or "unknown",
    cost = raw.total_cost_usd,
    usage = {
      inputTokens = u.input_tokens, outputTokens = u.output_tokens,
      cacheReadInputTokens = u.cache_read_input_tokens,
      cacheCreationInputTokens = u.cache_creation_input_tokens,
    },
    durationMs = raw.duration_ms, numTurns = raw.num_turns,
  })
  -- The session's totals as the SDK counted them: `dstream usage` shows a sum that differs.
  out("usage.session", {
    total_cost_usd = raw.total_cost_usd, input_tokens = u.input_tokens,
    output_tokens = u.output_tokens, cache_read_input_tokens = u.cache_read_input_tokens,
    cache_creation_input_tokens = u.cache_creation_input_tokens, model_usage = raw.modelUsage,
    num_turns = raw.num_turns, duration_ms = raw.duration_ms,
  })
  if failed then
    out("session.error", {
      error = raw.subtype, message = str(raw.result), errors = raw.errors,
      stop_reason = raw.stop_reason,
    })
  end
end

function M.map(raw, emit, ctx)
  EMIT, S, SID, STREAM = emit, nil, nil, nil
  if type(raw) ~= "table" then
    RAW = EMPTY
    return unmapped("not an SDK message object")
  end
  RAW = raw
  local sid = valid_id(raw.session_id)
  if sid then
    local parent_tool = str(raw.parent_tool_use_id)
    local child = parent_tool and valid_id(sid .. ".agent-" .. parent_tool)
    if child then
      local ps = state(sid)
      if ps.children[parent_tool] == nil then
        ps.children[parent_tool] = child
        SID, S = sid, ps
        out("agent.spawned", { child_session_id = child, tool_use_id = parent_tool })
      end
      SID, STREAM = child, sid
    else
      SID = sid
    end
    S = state(SID)
    if S.turn == nil then S.turn = str(raw.uuid) end
  end
  local t = raw.type
  if t == "stream_event" then
    stream_event(tbl(raw.event))
  elseif t == "assistant" then
    assistant(tbl(raw.message))
  elseif t == "user" then
    user(tbl(raw.message))
  elseif t == "result" then
    result(raw)
    if S then fresh(S) end -- the turn is over
  elseif t == "system" then
    local st = raw.subtype
    if st == "init" then
      local again = sid and seen_before(sid)
      out(again and "lifecycle.session.resumed" or "lifecycle.session.created", {
        model = raw.model, cwd = raw.cwd, permission_mode = raw.permissionMode,
        claude_code_version = raw.claude_code_version, output_style = raw.output_style,
      })
    elseif st == "status" then
      out("lifecycle.session.status", { status = raw.status })
    elseif st == "compact_boundary" then
      local cm = tbl(raw.compact_metadata)
      out("lifecycle.session.compacted", { trigger = cm.trigger, pre_tokens = cm.pre_tokens })
    else
      unmapped("system message subtype not known to this mapping")
    end
  else
    unmapped(t == nil and "message without a type" or "SDK message type not known to this mapping")
  end
end

return M
