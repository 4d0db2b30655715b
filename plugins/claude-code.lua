-- claude-code: maps Claude Code hook events (what `dstream hook claude-code` sends) to the
-- dstream taxonomy. Built in; a claude-code.lua in the plugin folder replaces it.
--
-- Every hook event becomes at least one event, and the pipeline keeps the hook's JSON in
-- `raw`, so nothing is lost when a field here is not picked up. Shapes follow the payloads
-- captured from the real CLI (tests/fixtures/claude-code).
--
-- Lineage: a subagent's own hook events (they carry `agent_id`) go to a session of their
-- own, "<session>.agent-<agent_id>", whose stream_id is the parent session; the parent's
-- log gets agent.spawned / agent.completed. The turn (`prompt_id`) is the correlation id.
-- A tool result names its request through payload.tool_use_id; the pipeline turns that
-- into the result's causation_id.

local M = { name = "claude-code", api = 1, sources = { "claude-code" } }

local ACTOR = "claude-code"

-- Hook events that map to one event type, with the fields kept in the payload.
local simple = {
  InstructionsLoaded = { "context.instructions_loaded", { "file_path", "memory_type", "load_reason" } },
  CwdChanged = { "lifecycle.session.cwd_changed", { "old_cwd", "new_cwd" } },
  ConfigChange = { "lifecycle.session.config_changed", { "source", "file_path" } },
  Setup = { "lifecycle.session.setup", { "trigger" } },
  PreModelSwitch = { "lifecycle.session.model_switching", { "from_model", "to_model", "requested_model", "source" } },
  PostModelSwitch = { "lifecycle.session.model_changed", { "from_model", "to_model", "requested_model", "source" } },
  WorktreeCreate = { "files.worktree_created", { "name", "worktree_path", "path" } },
  WorktreeRemove = { "files.worktree_removed", { "name", "worktree_path", "path" } },
  Notification = { "agent.notification", { "message", "title", "notification_type" } },
  TeammateIdle = { "agent.idle", { "teammate_name", "team_name" } },
  TaskCompleted = { "agent.task_completed", { "task_id", "task_subject", "task_description", "teammate_name", "team_name" } },
  PreCompact = { "lifecycle.session.compacting", { "trigger", "custom_instructions" } },
  PostCompact = { "lifecycle.session.compacted", { "trigger", "compact_summary" } },
  SessionEnd = { "lifecycle.session.ended", { "reason" } },
  UserPromptExpansion = { "user.command", { "command_name", "command_args", "command_source", "expansion_type", "prompt" } },
}

local function pick(raw, fields)
  local out = {}
  for _, k in ipairs(fields) do
    if raw[k] ~= nil then out[k] = raw[k] end
  end
  return out
end

local function valid_id(s)
  return type(s) == "string" and #s > 0 and #s <= 200 and not string.find(s, "[^%w%-_%.]")
    and string.sub(s, 1, 1) ~= "."
end

function M.map(raw, emit, ctx)
  local hook = raw.hook_event_name
  local session = raw.session_id
  if not valid_id(session) then session = nil end -- the pipeline's fallback applies
  local base = {
    session_id = session,
    correlation_id = raw.prompt_id,
    actor = ACTOR,
    metadata = { hook = hook },
  }
  if raw.permission_mode ~= nil then base.metadata.permission_mode = raw.permission_mode end
  -- A subagent's own events live in its session, in the parent's lineage.
  if session and valid_id(raw.agent_id) and hook ~= "SubagentStart" and hook ~= "SubagentStop" then
    base.session_id = session .. ".agent-" .. raw.agent_id
    base.stream_id = session
    base.metadata.agent_id = raw.agent_id
    base.metadata.agent_type = raw.agent_type
  end
  local function out(type, payload)
    local e = { type = type, payload = payload }
    for k, v in pairs(base) do e[k] = v end
    emit(e)
  end

  if hook == "SessionStart" then
    local created = raw.source == "startup" or raw.source == "clear" or raw.source == nil
    out(created and "lifecycle.session.created" or "lifecycle.session.resumed", {
      source = raw.source, model = raw.model, cwd = raw.cwd, transcript_path = raw.transcript_path,
    })
  elseif hook == "UserPromptSubmit" then
    base.actor = "user"
    out("user.input", { text = raw.prompt, prompt_id = raw.prompt_id })
  elseif hook == "PreToolUse" then
    out("execution.tool_use", {
      phase = "requested", tool = raw.tool_name, input = raw.tool_input, tool_use_id = raw.tool_use_id,
    })
  elseif hook == "PermissionRequest" then
    out("execution.permission_requested", {
      tool = raw.tool_name, input = raw.tool_input, suggestions = raw.permission_suggestions,
      awaited = true, -- Claude Code waits for the hook's answer: policy may decide it
    })
  elseif hook == "PermissionDenied" then
    out("execution.permission_denied", {
      tool = raw.tool_name, input = raw.tool_input, tool_use_id = raw.tool_use_id, reason = raw.reason,
    })
  elseif hook == "PostToolUse" then
    out("execution.tool_result", {
      phase = "completed", ok = true, tool = raw.tool_name, tool_use_id = raw.tool_use_id,
      output = raw.tool_response, duration_ms = raw.duration_ms,
    })
  elseif hook == "PostToolUseFailure" then
    out("execution.tool_result", {
      phase = "failed", ok = false, tool = raw.tool_name, tool_use_id = raw.tool_use_id,
      error = raw.error, interrupted = raw.is_interrupt == true, duration_ms = raw.duration_ms,
    })
    if raw.is_interrupt == true then
      out("agent.aborted", { reason = "interrupted", tool_use_id = raw.tool_use_id })
    end
  elseif hook == "PostToolBatch" then
    local ids = host.array()
    if type(raw.tool_calls) == "table" then
      for _, call in ipairs(raw.tool_calls) do
        if type(call) == "table" then ids[#ids + 1] = call.tool_use_id end
      end
    end
    out("execution.step_finish", { tool_use_ids = ids, tool_calls = #ids })
  elseif hook == "MessageDisplay" then
    out("message.chunk", {
      role = "assistant", text = raw.delta, message_id = raw.message_id, index = raw.index,
      final = raw.final, turn_id = raw.turn_id,
    })
  elseif hook == "Stop" then
    out("lifecycle.session.idle", {
      last_assistant_message = raw.last_assistant_message, background_tasks = raw.background_tasks,
    })
  elseif hook == "StopFailure" then
    out("session.error", { error = raw.error, message = raw.last_assistant_message })
    out("agent.aborted", { reason = "error", error = raw.error })
  elseif hook == "SubagentStart" then
    local child = valid_id(raw.agent_id) and session and (session .. ".agent-" .. raw.agent_id) or nil
    out("agent.spawned", { agent_id = raw.agent_id, agent_type = raw.agent_type, child_session_id = child })
  elseif hook == "SubagentStop" then
    local child = valid_id(raw.agent_id) and session and (session .. ".agent-" .. raw.agent_id) or nil
    out("agent.completed", {
      agent_id = raw.agent_id, agent_type = raw.agent_type, child_session_id = child,
      last_assistant_message = raw.last_assistant_message, transcript_path = raw.agent_transcript_path,
    })
  elseif simple[hook] then
    out(simple[hook][1], pick(raw, simple[hook][2]))
  else
    -- A hook this version does not know: kept whole in raw, typed so it can be found.
    out("unmapped", { source = ctx.source, hook = hook })
  end
end

return M
