-- claude-code-otel: maps the OpenTelemetry log records Claude Code exports (OTLP to the
-- daemon's HTTP listener, source "otlp") to events of the session their `session.id` names.
-- Built in; a claude-code-otel.lua in the plugin folder replaces it. Shapes follow Claude Code
-- 2.1.330 (`CLAUDE_CODE_ENABLE_TELEMETRY=1`, `OTEL_LOGS_EXPORTER=otlp`).
--
-- What arrives (one ingest per log record, flattened by the receiver):
--   { resource = {attrs}, scope = {name, version}, event_name, time_unix_nano,
--     observed_time_unix_nano, severity_number, severity_text, body, attributes = {attrs} }
--
-- Mapping, by event name (`event_name`, else the `event.name` attribute, else the body):
--   claude_code.api_request  -> usage.request {model, input_tokens, output_tokens,
--                               cache_read_input_tokens, cache_creation_input_tokens, cost_usd,
--                               cost_usd_micros (an integer: sums are exact), request_id,
--                               prompt_id, duration_ms, speed}
--   claude_code.tool_decision -> execution.permission {tool, tool_use_id, decision, source}
--                               (decisions made in the terminal, which no hook sees)
--   claude_code.api_error    -> session.error {error, model, status_code, attempt, duration_ms}
--   other claude_code.<name> -> telemetry.<name> with the record's attributes
--   a record without a name  -> unmapped
-- Every event gets metadata.otel = {sequence, timestamp, prompt_id}. A record is stored once:
-- the same (session.id, event.sequence, event.timestamp) again (an exporter's retry) is
-- dropped. The sequence starts at 0 again when a session is resumed in a new process, hence
-- the timestamp in the key. Remembered per session for the last MAX_SEEN records, for at most
-- MAX_SESSIONS sessions per generation (two generations).

local M = { name = "claude-code-otel", api = 1, sources = { "otlp" } }

local ACTOR = "claude-code"
local MAX_SESSIONS = 1024
local MAX_SEEN = 4096

local EMPTY = setmetatable({}, { __newindex = function() error("internal: EMPTY is read-only") end })

local function tbl(v)
  if type(v) == "table" then return v end
  return EMPTY
end

local function str(v)
  if type(v) == "string" then return v end
  if type(v) == "number" then return tostring(v) end
end

-- Numbers may come as numbers or strings (OTLP JSON writes 64-bit ints as strings).
local function num(v)
  if type(v) == "number" then return v end
  if type(v) == "string" then return tonumber(v) end
end

local function int(v)
  local n = num(v)
  if n and n == n and n > -2^53 and n < 2^53 then return math.floor(n) end
end

local function valid_id(s)
  return type(s) == "string" and #s > 0 and #s <= 128 and not string.find(s, "[^%w%-_%.]")
    and string.byte(s, 1) ~= 46 -- '.'
    and s or nil
end

-- Seen record keys per session, two generations.
local seen, old_seen, nseen = {}, {}, 0

local function first_time(sid, key)
  local s = seen[sid]
  if not s then
    s = old_seen[sid]
    if s then old_seen[sid] = nil else s = { keys = {}, order = {}, n = 0 } end
    if nseen >= MAX_SESSIONS then
      old_seen, seen, nseen = seen, {}, 0
    end
    seen[sid] = s
    nseen = nseen + 1
  end
  if s.keys[key] then return false end
  s.n = s.n + 1
  s.keys[key] = true
  s.order[s.n] = key
  if s.n > MAX_SEEN then
    -- Forget the older half.
    local keep = {}
    local kept = 0
    for i = s.n - MAX_SEEN // 2 + 1, s.n do
      kept = kept + 1
      keep[kept] = s.order[i]
    end
    s.keys, s.order, s.n = {}, keep, kept
    for _, k in ipairs(keep) do s.keys[k] = true end
  end
  return true
end

local function micros(usd)
  local n = num(usd)
  if n and n == n and n >= 0 and n < 1e12 then return math.floor(n * 1e6 + 0.5) end
end

function M.map(raw, emit, ctx)
  raw = tbl(raw)
  local a = tbl(raw.attributes)
  local name = str(raw.event_name) or str(a["event.name"]) or str(raw.body)
  local sid = valid_id(a["session.id"])
  local meta = { otel = { sequence = int(a["event.sequence"]), timestamp = str(a["event.timestamp"]),
    prompt_id = str(a["prompt.id"]) } }
  local function out(type, payload)
    emit({ type = type, payload = payload, actor = ACTOR, session_id = sid, metadata = meta })
  end
  if not name or #name > 128 then
    return out("unmapped", { source = ctx.source, hint = "a log record without an event name" })
  end
  local short = string.match(name, "^claude_code%.([%w_%-]+)$") or name
  if sid and (a["event.sequence"] ~= nil or a["event.timestamp"] ~= nil) then
    local key = tostring(a["event.sequence"]) .. "|" .. tostring(a["event.timestamp"])
    if not first_time(sid, key) then return end
  end
  if short == "api_request" then
    out("usage.request", {
      model = str(a.model), input_tokens = int(a.input_tokens), output_tokens = int(a.output_tokens),
      cache_read_input_tokens = int(a.cache_read_tokens),
      cache_creation_input_tokens = int(a.cache_creation_tokens),
      cost_usd = num(a.cost_usd), cost_usd_micros = micros(a.cost_usd),
      request_id = str(a.request_id), prompt_id = str(a["prompt.id"]),
      duration_ms = int(a.duration_ms), speed = str(a.speed), source = "otel",
    })
  elseif short == "tool_decision" then
    out("execution.permission", {
      tool = str(a.tool_name), tool_use_id = str(a.tool_use_id), decision = str(a.decision),
      source = str(a.source), phase = "decided",
    })
  elseif short == "api_error" then
    out("session.error", {
      error = str(a.error), model = str(a.model), status_code = int(a.status_code),
      attempt = int(a.attempt), duration_ms = int(a.duration_ms), source = "otel",
    })
  elseif not string.find(short, "[^%w_%-]") then
    out("telemetry." .. short, a)
  else
    out("unmapped", { source = ctx.source, hint = "an event name that is not a plain word" })
  end
end

return M
