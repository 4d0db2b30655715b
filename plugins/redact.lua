-- redact: removes secrets from every event's payload, metadata and raw before it is stored
-- (and so before it is relayed). Built in and on by default; configure it in config.toml:
--
--   [plugins.lua.redact]
--   replacement = "[REDACTED]"        # what a secret is replaced with
--   extra_patterns = []               # more Lua patterns whose matches are secrets
--   secret_keys = ["password", …]     # object keys whose string values are secrets: a key
--                                     # that ends with one of these, in any case (so "apiKey"
--                                     # and "client_secret" are, "apiKeySource" is not)
--
-- It runs after every other filter (priority 1000), so a filter cannot add a secret back.
-- Each redacted event says how many values it changed in metadata.redactions.

local M = { name = "redact", api = 1, priority = 1000 }

local replacement = "[REDACTED]"
local secret_keys = {
  "password", "passwd", "secret", "token", "api_key", "apikey", "api-key",
  "authorization", "credential", "credentials", "private_key", "access_key", "session_key",
  "secret_key",
}
local extra = {}

-- Each rule: a literal that must occur (a cheap plain find), then the pattern to replace.
-- With `keep`, the pattern has two captures: a prefix to keep, then the secret.
local rules = {
  -- PEM private keys, whole block.
  { anchor = "PRIVATE KEY-----",
    pattern = "%-%-%-%-%-BEGIN [%u ]*PRIVATE KEY%-%-%-%-%-[^\"]-%-%-%-%-%-END [%u ]*PRIVATE KEY%-%-%-%-%-" },
  -- Anthropic, OpenAI and similar "sk-" keys.
  { anchor = "sk-", pattern = "%f[%w_]sk%-[%w_%-]+", min = 20 },
  -- GitHub tokens.
  { anchor = "gh[pousr]_", anchor_pattern = true, pattern = "%f[%w_]gh[pousr]_%w+", min = 30 },
  { anchor = "github_pat_", pattern = "%f[%w_]github_pat_[%w_]+" },
  -- AWS access key ids.
  { anchor = "AKIA", pattern = "%f[%w_]AKIA[%u%d]+", min = 20 },
  -- Slack tokens.
  { anchor = "xox", pattern = "%f[%w_]xox[abprs]%-[%w%-]+", min = 15 },
  -- Google API keys.
  { anchor = "AIza", pattern = "%f[%w_]AIza[%w_%-]+", min = 35 },
  -- Bearer tokens in headers or commands.
  { anchor = "earer", pattern = "([Bb]earer%s+)([%w%-%._~%+/]+=*)", keep = true, min = 16 },
  -- .env style assignments whose name says secret: NAME=value, export NAME="value".
  { anchor = "=", env = true,
    pattern = "%f[%w_]([%w_]+)(%s*=%s*\\?[\"']?)([^%s\"'\\]+)" },
}

-- The host calls `process` only for events whose JSON contains one of these (any case):
-- every rule's anchor and every secret key name. Without a match nothing here could fire.
local function needles()
  local list = { "private key-----", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "akia", "xox", "aiza", "bearer", "=" }
  for _, k in ipairs(secret_keys) do list[#list + 1] = k end
  return list
end

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
  -- A custom pattern can match anything, so every event must be scanned.
  M.process_if_contains = (#extra == 0) and needles() or nil
end

-- NAME of NAME=value: secret when it ends in TOKEN or KEY, or contains SECRET or PASSWORD
-- (GITHUB_TOKEN, API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD; not max_tokens).
local function secret_name(name)
  local n = string.lower(name)
  return string.find(n, "secret", 1, true) or string.find(n, "passw", 1, true)
    or string.sub(n, -5) == "token" or string.sub(n, -3) == "key"
    or string.find(n, "api_key", 1, true) or string.find(n, "apikey", 1, true)
end

-- The rules run on the event's JSON text, not value by value: a plain `find` of each
-- anchor over one string is far cheaper than walking every table, and most events contain no
-- anchor at all. Patterns never match a quote, so a replacement cannot break the JSON.
local function redact_text(s)
  local count = 0
  for _, rule in ipairs(rules) do
    if string.find(s, rule.anchor, 1, not rule.anchor_pattern) then
      s = string.gsub(s, rule.pattern, function(a, b, c)
        if rule.env then
          if not secret_name(a) then return nil end
          count = count + 1
          return a .. b .. replacement
        end
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
  -- String values of keys that name a secret: "api_key":"…". A value ending in an escaped
  -- backslash is left alone (rare, and never a token).
  local lower = string.lower(s)
  for _, name in ipairs(secret_keys) do
    if string.find(lower, name, 1, true) then
      s = string.gsub(s, '"([%w_%-]+)":"(.-[^\\])"', function(key, value)
        local k = string.lower(key)
        for _, n in ipairs(secret_keys) do
          if #k >= #n and string.sub(k, -#n) == n then
            if value == replacement then return nil end
            count = count + 1
            return '"' .. key .. '":"' .. replacement .. '"'
          end
        end
        return nil
      end)
      break
    end
  end
  return s, count
end

function M.process(event, emit)
  local total = 0
  for _, field in ipairs({ "payload", "metadata", "raw" }) do
    local v = event[field]
    if type(v) == "table" or type(v) == "string" then
      local text = host.json_encode(v)
      local redacted, n = redact_text(text)
      if n > 0 then
        event[field] = host.json_decode(redacted)
        total = total + n
      end
    end
  end
  if total > 0 then
    if type(event.metadata) ~= "table" then event.metadata = {} end
    event.metadata.redactions = total
  end
  emit(event)
end

return M
