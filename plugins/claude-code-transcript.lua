-- claude-code-transcript: maps the lines of Claude Code's transcripts
-- (~/.claude/projects/<project>/<session>.jsonl, and <session>/subagents/agent-<id>.jsonl)
-- to the dstream taxonomy, the same types live capture (claude-code.lua) gives. Built in; a
-- claude-code-transcript.lua in the plugin folder replaces it. `dstream import claude-code`
-- sends each line here; shapes follow what Claude Code 2.1.330 writes.
--
-- What arrives (one ingest per transcript line):
--   { transcript = { file, line, import_id, session_id, agent_id }, entry = <the line>,
--     error = <why the line is not JSON, when it is not; entry is then its text> }
-- `import_id` goes into every event's metadata: the importer reads it back to skip lines it
-- already stored. The pipeline keeps the whole input in `raw` (plugins.keep_raw).
--
-- Mapping:
--   user, text content               -> user.input {text, prompt_id}      (actor "user")
--   user, tool_result blocks         -> execution.tool_result {phase = "completed" | "failed",
--                                       ok, tool, tool_use_id, output, result}; the pipeline
--                                       joins it to its call through tool_use_id
--                                       (causation_id); a subagent's result -> agent.completed
--   assistant, text block            -> message.chunk {role, text, message_id, index, final}
--   assistant, thinking block        -> message.chunk {role, type = "reasoning", text, ...}
--   assistant, tool_use block        -> execution.tool_use {phase = "called", tool, input,
--                                       tool_use_id}. Not "requested": the call ran long ago,
--                                       so policy must not hold it (only "requested" calls and
--                                       calls without a phase are decided).
--   assistant, first line of a model message -> usage.request {model, input_tokens,
--                                       output_tokens, cache_creation_input_tokens,
--                                       cache_read_input_tokens, request_id, message_id}
--                                       (Claude Code writes a line per content block, each
--                                       with the message's usage: counted once)
--   system compact_boundary          -> lifecycle.session.compacted; api_error -> session.error;
--                                       other system lines -> agent.notification
--   summary                          -> lifecycle.session.summary
--   attachment, queue-operation, api-request*, cost-state, ... -> transcript.<type> with a
--                                       few small fields (the line itself stays in raw)
--   a line that is not JSON          -> unmapped {text, error}
--
-- Lineage: a subagent's lines (agentId) go to "<session>.agent-<agentId>" whose stream_id is
-- the session, as live capture does; its first line puts agent.spawned in the parent's log.
-- The turn (promptId) is the correlation id.

local M = { name = "claude-code-transcript", api = 1, sources = { "claude-code-transcript" } }

local ACTOR = "claude-code"
local MAX_SESSIONS = 1024 -- per generation
local MAX_IDS = 4096 -- tool names remembered per session

local EMPTY = setmetatable({}, { __newindex = function() error("internal: EMPTY is read-only") end })

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

-- Per dstream session: the turn, the last model message counted, tool names by call id,
-- whether agent.spawned was written (for a child). Two generations bound the memory.
local sessions, old_sessions, nsessions = {}, {}, 0

local function state(sid)
  local s = sessions[sid]
  if s then return s end
  s = old_sessions[sid]
  if s then
    old_sessions[sid] = nil
  else
    s = { tools = {}, ntools = 0 }
  end
  if nsessions >= MAX_SESSIONS then
    old_sessions, sessions, nsessions = sessions, {}, 0
  end
  sessions[sid] = s
  nsessions = nsessions + 1
  return s
end

-- The current line, set by M.map.
local EMIT, T, ENTRY, SID, STREAM, S

local function out(type, payload, o)
  local meta = { import_id = str(T.import_id), line = T.line, uuid = str(ENTRY.uuid),
    entry_type = str(ENTRY.type), timestamp = str(ENTRY.timestamp) }
  local e = {
    type = type, payload = payload, actor = ACTOR, metadata = meta,
    session_id = SID, stream_id = STREAM, correlation_id = S and S.turn,
  }
  if o then
    if o.actor then e.actor = o.actor end
    if o.session_id then e.session_id, e.stream_id = o.session_id, o.stream_id end
  end
  EMIT(e)
end

local function text_of(content)
  if type(content) == "string" then return content end
  local parts = {}
  for _, b in ipairs(tbl(content)) do
    b = tbl(b)
    if b.type == "text" and type(b.text) == "string" then parts[#parts + 1] = b.text end
  end
  if #parts > 0 then return table.concat(parts, "\n") end
end

local function remember_tool(id, name)
  if not (S and id) then return end
  if S.tools[id] == nil then
    if S.ntools >= MAX_IDS then S.tools, S.ntools = {}, 0 end
    S.ntools = S.ntools + 1
  end
  S.tools[id] = name or false
end

local function user(msg)
  if ENTRY.promptId ~= nil and S then S.turn = str(ENTRY.promptId) end
  local content = msg.content
  local results = false
  for _, b in ipairs(tbl(content)) do
    b = tbl(b)
    if b.type == "tool_result" then
      results = true
      local id = str(b.tool_use_id)
      local failed = b.is_error == true
      local detail = tbl(ENTRY.toolUseResult)
      out("execution.tool_result", {
        phase = failed and "failed" or "completed", ok = not failed,
        tool = S and id and S.tools[id] or nil, tool_use_id = id, output = b.content,
        result = ENTRY.toolUseResult,
      })
      local agent = valid_id(detail.agentId)
      if agent and SID and STREAM == nil then
        out("agent.completed", {
          agent_id = agent, agent_type = detail.agentType, tool_use_id = id,
          child_session_id = SID .. ".agent-" .. agent, status = detail.status,
          total_tokens = detail.totalTokens, duration_ms = detail.totalDurationMs,
        })
      end
    end
  end
  if results then return end
  local text = text_of(content)
  if ENTRY.isCompactSummary == true then
    return out("lifecycle.session.compacted", { summary = text })
  end
  if ENTRY.isMeta == true then
    return out("context.message", { role = "user", text = text })
  end
  out("user.input", { text = text, prompt_id = str(ENTRY.promptId) }, { actor = "user" })
end

local function assistant(msg)
  local mid = str(msg.id)
  if S and mid and S.usage_for ~= mid and type(msg.usage) == "table" then
    S.usage_for = mid
    local u = msg.usage
    out("usage.request", {
      model = msg.model, input_tokens = u.input_tokens, output_tokens = u.output_tokens,
      cache_creation_input_tokens = u.cache_creation_input_tokens,
      cache_read_input_tokens = u.cache_read_input_tokens, service_tier = u.service_tier,
      request_id = str(ENTRY.requestId), message_id = mid,
    })
  end
  local n = 0
  for _, b in ipairs(tbl(msg.content)) do
    b = tbl(b)
    n = n + 1
    local index = ENTRY.apiBlockIndex
    if b.type == "text" then
      out("message.chunk", { role = "assistant", text = b.text, message_id = mid, index = index,
        final = true, stop_reason = msg.stop_reason })
    elseif b.type == "thinking" or b.type == "redacted_thinking" then
      out("message.chunk", { role = "assistant", type = "reasoning", text = str(b.thinking),
        message_id = mid, index = index, final = true })
    elseif b.type == "tool_use" or b.type == "server_tool_use" or b.type == "mcp_tool_use" then
      local id = str(b.id)
      remember_tool(id, str(b.name))
      out("execution.tool_use", { phase = "called", tool = b.name, input = b.input, tool_use_id = id })
    else
      out("message.chunk", { role = "assistant", type = b.type, message_id = mid, index = index })
    end
  end
  if n == 0 then out("message.chunk", { role = "assistant", message_id = mid, text = text_of(msg.content) }) end
end

local function system(entry)
  local st = str(entry.subtype)
  if st == "compact_boundary" then
    local cm = tbl(entry.compactMetadata)
    return out("lifecycle.session.compacted", { trigger = cm.trigger, pre_tokens = cm.preTokens })
  elseif st == "api_error" then
    return out("session.error", { error = st, message = str(entry.content), level = entry.level })
  end
  out("agent.notification", { subtype = st, message = str(entry.content), level = entry.level })
end

-- Fields worth a look without opening raw, for the line types kept as transcript.<type>.
local small = {
  attachment = function(e) return { attachment_type = tbl(e.attachment).type } end,
  ["queue-operation"] = function(e) return { operation = e.operation, content = str(e.content) } end,
  ["cost-state"] = function(e)
    return { total_cost_usd = e.totalCostUSD, total_duration_ms = e.totalDuration,
      api_duration_ms = e.totalAPIDuration, model_usage = e.modelUsage }
  end,
  ["last-prompt"] = function(e) return { last_prompt = str(e.lastPrompt) } end,
  ["api-request"] = function(e) return { request = str(e.id), model = tbl(e.params).model } end,
}

function M.map(raw, emit, ctx)
  EMIT, S, SID, STREAM = emit, nil, nil, nil
  raw = tbl(raw)
  T = tbl(raw.transcript)
  ENTRY = tbl(raw.entry)
  local sid = valid_id(T.session_id) or valid_id(ENTRY.sessionId) or valid_id(ctx.session_id)
  local agent = valid_id(T.agent_id) or valid_id(ENTRY.agentId)
  if sid and agent and valid_id(sid .. ".agent-" .. agent) then
    SID, STREAM = sid .. ".agent-" .. agent, sid
    S = state(SID)
    if not S.spawned then
      S.spawned = true
      out("agent.spawned", { agent_id = agent, child_session_id = SID }, { session_id = sid })
    end
  else
    SID = sid
    S = sid and state(sid)
  end

  if raw.error ~= nil or type(raw.entry) ~= "table" then
    return out("unmapped", { source = ctx.source, text = raw.entry, error = raw.error })
  end
  local t = str(ENTRY.type)
  if t == "user" then
    user(tbl(ENTRY.message))
  elseif t == "assistant" then
    assistant(tbl(ENTRY.message))
  elseif t == "system" then
    system(ENTRY)
  elseif t == "summary" then
    out("lifecycle.session.summary", { summary = str(ENTRY.summary), leaf_uuid = str(ENTRY.leafUuid) })
  elseif t ~= nil and #t <= 64 and not string.find(t, "[^%w%-_]") then
    local f = small[t]
    out("transcript." .. t, f and f(ENTRY) or {})
  else
    out("unmapped", { source = ctx.source, hint = "a transcript line without a known type" })
  end
end

return M
