-- redact: removes secrets from every event's payload, metadata and raw before it is stored
-- (and so before it is relayed). Built in and on by default; configure it in config.toml:
--
--   [plugins.lua.redact]
--   replacement = "[REDACTED]"        # what a secret is replaced with
--   extra_patterns = []               # more Lua patterns whose matches are secrets
--   secret_keys = ["password", …]     # object keys whose string values are secrets (any case,
--                                     # matched as a substring of the key)
--
-- It runs after every other filter (priority 1000), so a filter cannot add a secret back.
-- Each redacted event says how many values it changed in metadata.redactions.

local M = { name = "redact", api = 1, priority = 1000 }

local replacement = "[REDACTED]"
local secret_keys = {
  "password", "passwd", "secret", "token", "api_key", "apikey", "api-key",
  "authorization", "credential", "private_key", "access_key", "session_key",
}
local extra = {}

-- Each rule: a literal that must occur (a cheap plain find), then the pattern to replace.
-- With `keep`, the pattern has two captures: a prefix to keep, then the secret.
local rules = {
  -- PEM private keys, whole block.
  { anchor = "PRIVATE KEY-----",
    pattern = "%-%-%-%-%-BEGIN [%u ]*PRIVATE KEY%-%-%-%-%-.-%-%-%-%-%-END [%u ]*PRIVATE KEY%-%-%-%-%-" },
  -- Anthropic, OpenAI and similar "sk-" keys.
  { anchor = "sk-", pattern = "%f[%w_]sk%-[%w_%-]+", min = 20 },
  -- GitHub tokens.
  { anchor = "gh", pattern = "%f[%w_]gh[pousr]_%w+", min = 30 },
  { anchor = "github_pat_", pattern = "%f[%w_]github_pat_[%w_]+" },
  -- AWS access key ids.
  { anchor = "AKIA", pattern = "%f[%w_]AKIA[%u%d]+", min = 20 },
  -- Slack tokens.
  { anchor = "xox", pattern = "%f[%w_]xox[abprs]%-[%w%-]+", min = 15 },
  -- Google API keys.
  { anchor = "AIza", pattern = "%f[%w_]AIza[%w_%-]+", min = 35 },
  -- Bearer tokens in headers or commands.
  { anchor = "earer", pattern = "([Bb]earer%s+)([%w%-%._~%+/]+=*)", keep = true, min = 16 },
  -- .env style assignments whose name says secret: NAME=value, NAME: value, export NAME="value".
  { anchor = "=", pattern = "([%w_]*[Ss][Ee][Cc][Rr][Ee][Tt][%w_]*%s*=%s*)([\"']?[^%s\"']+)", keep = true },
  { anchor = "=", pattern = "([%w_]*[Tt][Oo][Kk][Ee][Nn]%s*=%s*)([\"']?[^%s\"']+)", keep = true },
  { anchor = "=", pattern = "([%w_]*[Pp][Aa][Ss][Ss][Ww]?[Oo]?[Rr]?[Dd][%w_]*%s*=%s*)([\"']?[^%s\"']+)", keep = true },
  { anchor = "=", pattern = "([%w_]*[Aa][Pp][Ii]_?[Kk][Ee][Yy][%w_]*%s*=%s*)([\"']?[^%s\"']+)", keep = true },
}

function M.init(config)
  if type(config.replacement) == "string" then replacement = config.replacement end
  if type(config.secret_keys) == "table" then secret_keys = config.secret_keys end
  if type(config.extra_patterns) == "table" then
    for _, p in ipairs(config.extra_patterns) do
      -- Checked now, so a bad pattern fails the load, not every event.
      string.find("", p)
      extra[#extra + 1] = { pattern = p }
    end
  end
end

local function redact_string(s, count)
  if #s < 8 then return s, count end
  for _, rule in ipairs(rules) do
    if string.find(s, rule.anchor, 1, true) then
      s = string.gsub(s, rule.pattern, function(a, b)
        local secret = rule.keep and b or a
        if rule.min and #secret < rule.min then return nil end
        count = count + 1
        if rule.keep then return a .. replacement end
        return replacement
      end)
    end
  end
  for _, rule in ipairs(extra) do
    local n
    s, n = string.gsub(s, rule.pattern, replacement)
    count = count + n
  end
  return s, count
end

local function is_secret_key(k)
  if type(k) ~= "string" then return false end
  local lower = string.lower(k)
  for _, name in ipairs(secret_keys) do
    if string.find(lower, name, 1, true) then return true end
  end
  return false
end

local function walk(v, count)
  if type(v) == "string" then
    return redact_string(v, count)
  elseif type(v) == "table" then
    for k, x in pairs(v) do
      if type(x) == "string" and is_secret_key(k) and x ~= "" and x ~= replacement then
        v[k] = replacement
        count = count + 1
      else
        local y
        y, count = walk(x, count)
        if y ~= x then v[k] = y end
      end
    end
  end
  return v, count
end

function M.process(event, emit)
  local count = 0
  event.payload, count = walk(event.payload, count)
  event.metadata, count = walk(event.metadata, count)
  event.raw, count = walk(event.raw, count)
  if count > 0 then
    if type(event.metadata) ~= "table" then event.metadata = {} end
    event.metadata.redactions = count
  end
  emit(event)
end

return M
