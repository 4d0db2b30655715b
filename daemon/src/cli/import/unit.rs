//! What every agent's import is made of: the mapping its lines go through, and its sessions,
//! each read only when its turn comes.

use super::lines::Line;
use super::problem::Problem;

/// Which mapping an agent's lines go through, and the source live capture of it uses.
pub struct Mapping {
    /// The ingest source of the import mapping.
    pub source: &'static str,
    /// A session with events from this source was captured live.
    pub live_source: &'static str,
}

/// One session to import, read only when its turn comes (one session in memory at a time).
pub struct Unit {
    pub session_id: String,
    /// The dstream sessions its lines go to: the session and its subagents'.
    pub sessions: Vec<String>,
    /// Its lines in order; what cannot be read goes to the problems.
    pub load: LoadLines,
}

/// Reads one session's lines, reporting what it cannot read.
pub type LoadLines = Box<dyn FnOnce(&mut Vec<Problem>) -> Vec<Line>>;
