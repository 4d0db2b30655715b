//! Why a pattern match did not finish: a malformed pattern (Lua's message, raised where Lua
//! raises it) or a spent budget. One type for the compiler, the matcher and the functions.

/// Why a match did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// The pattern (or a replacement string) is malformed; the text is Lua's message.
    Malformed(String),
    /// `tick` said the call's budget is spent.
    Budget(String),
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatternError::Malformed(m) | PatternError::Budget(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PatternError {}

impl From<PatternError> for mlua::Error {
    fn from(e: PatternError) -> Self {
        mlua::Error::runtime(e.to_string())
    }
}

pub(super) type R<T> = Result<T, PatternError>;

pub(super) fn malformed(m: impl Into<String>) -> PatternError {
    PatternError::Malformed(m.into())
}
