//! Lua 5.4 patterns (reference manual §6.4.1) and the functions that use them (`string.find`,
//! `match`, `gmatch`, `gsub`, §6.4), written for the plugin sandbox.
//!
//! Why not Lua's own: its matcher backtracks inside one C call that no hook can interrupt, so
//! `string.find(string.rep('a', 1e5), '.-.-.-.-b')` would keep a core busy for hours. This one
//! counts its steps and asks `tick` every [`matcher::TICK_EVERY`] of them whether the plugin
//! call may go on; `tick` fails once the call's budget is spent, and the match ends with that
//! error.
//!
//! The pattern is compiled into a list of [`compile::Node`]s first; a malformed piece becomes
//! an [`compile::Node::Error`] at its place, because Lua reports such an error only when the
//! matcher reaches it (`string.find('b', 'a%')` is nil, not an error), and the sandbox must
//! behave the same as the standard library for every pattern a plugin may already use.
//!
//! The parts: [`compile`] (the pattern compiler and its cache), [`matcher`] (matching, with
//! its steps counted), [`functions`] (`find`, `match`, `gmatch`, and installing them),
//! [`gsub`], [`args`] (Lua's argument conversions), [`error`].

mod args;
mod compile;
mod error;
mod functions;
mod gsub;
mod matcher;
#[cfg(test)]
mod tests;

pub use functions::install;
pub use matcher::Tick;
