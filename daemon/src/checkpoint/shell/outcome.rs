//! What the analysis of a line answers: each simple command it runs, seen through its wrappers
//! ([`Invocation`]), or why it could not be analysed ([`ShellError`]). Apart from the walk so
//! that `policy` reads one small file to know what it gets.

use super::bounds::{MAX_DEPTH, MAX_LEN, MAX_WORK};

/// Why a line could not be analysed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShellError {
    #[error("it is longer than {MAX_LEN} bytes")]
    TooLong,
    #[error("it nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("its nested strings add up to more than {MAX_WORK} bytes")]
    TooMuch,
    #[error("{0}")]
    Syntax(String),
    #[error("`{0}` reads the program it runs from its input, which cannot be seen")]
    Hidden(String),
}

/// One simple command as it runs, seen through its wrappers: `views[0]` as written, then each
/// command a wrapper runs (`sudo env A=1 rm -rf x`, `env A=1 rm -rf x`, `rm -rf x`). In each
/// view the first word is the program's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub views: Vec<Vec<String>>,
}

impl Invocation {
    /// The command finally run, past every wrapper.
    pub fn innermost(&self) -> &[String] {
        self.views.last().map(Vec::as_slice).unwrap_or_default()
    }
}
