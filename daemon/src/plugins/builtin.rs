//! The Lua plugins compiled into the binary, from the repository's `plugins/` folder. A file of
//! the same name in the plugin folder replaces one of these.

/// `(file name, source)` of every built-in plugin.
pub const FILES: &[(&str, &str)] = &[
    (
        "claude-code.lua",
        include_str!("../../../plugins/claude-code.lua"),
    ),
    (
        "opencode.lua",
        include_str!("../../../plugins/opencode.lua"),
    ),
    (
        "claude-agent-sdk.lua",
        include_str!("../../../plugins/claude-agent-sdk.lua"),
    ),
    (
        "claude-code-transcript.lua",
        include_str!("../../../plugins/claude-code-transcript.lua"),
    ),
    (
        "opencode-export.lua",
        include_str!("../../../plugins/opencode-export.lua"),
    ),
    (
        "claude-code-otel.lua",
        include_str!("../../../plugins/claude-code-otel.lua"),
    ),
];
