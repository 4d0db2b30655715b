//! The agents' own processes, so that an agent cannot release its own brake: a checkpoint
//! decision from a process that descends from a running agent (its Bash tool running
//! `dstream approve`, say) is refused.
//!
//! The daemon learns agents from the clients that send their events: a `dstream hook` (or
//! `dstream-hook`) process stands for the agent that ran it (its nearest ancestor that is not
//! a shell), any other ingesting client is the agent itself (OpenCode's plugin runs inside OpenCode). A
//! process is named by its pid and its start time, so a reused pid is not mistaken for it.
//! Linux only (it reads /proc); elsewhere nothing is known and nothing is refused.

use std::collections::HashMap;
use std::sync::Mutex;

/// Most agents remembered; past it, the ones no longer running are forgotten first.
const MAX_AGENTS: usize = 4096;
/// Ancestors walked at most (a loop in /proc cannot happen, a deep tree can).
const MAX_DEPTH: usize = 64;
/// Programs that only pass a command on: the agent is above them. `dstream-hook` is the lean
/// hook binary (`dstream hook` without the rest of dstream).
#[rustfmt::skip]
const WRAPPERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "fish", "ksh", "env", "timeout", "nice", "nohup", "dstream",
    "dstream-hook",
];

/// A process as /proc shows it: parent, start time (clock ticks since boot), command name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    ppid: i32,
    start: u64,
    comm: String,
}

fn read_proc(pid: i32) -> Option<Proc> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so split at the last ')'.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    // After comm: state(0) ppid(1) … starttime is field 22 of the line, index 19 here.
    Some(Proc {
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
        comm,
    })
}

#[derive(Default)]
pub struct AgentProcs {
    known: Mutex<HashMap<i32, u64>>,
}

impl AgentProcs {
    /// An ingesting client `peer` sent an agent's event: remember the agent it stands for.
    pub fn note_client(&self, peer: Option<i32>) {
        let Some(agent) = peer.and_then(agent_of) else {
            return;
        };
        let mut known = self.known.lock().unwrap();
        if known.len() >= MAX_AGENTS && !known.contains_key(&agent.0) {
            known.retain(|&pid, &mut start| read_proc(pid).is_some_and(|p| p.start == start));
            if known.len() >= MAX_AGENTS {
                return;
            }
        }
        known.insert(agent.0, agent.1);
    }

    /// The running agent `pid` descends from, if any. The agent process itself is not its
    /// own descendant: what it runs (its Bash tool's commands) is what this stops; a client
    /// built into the agent (an SDK app's own approval prompt) still decides.
    pub fn agent_above(&self, pid: Option<i32>) -> Option<i32> {
        let known = self.known.lock().unwrap().clone();
        if known.is_empty() {
            return None;
        }
        let mut at = read_proc(pid?)?.ppid;
        for _ in 0..MAX_DEPTH {
            let p = read_proc(at)?;
            if known.get(&at) == Some(&p.start) {
                return Some(at);
            }
            at = p.ppid;
        }
        None
    }
}

/// The agent a client process stands for: `dstream` and `dstream-hook` (the hook) and shells
/// pass a command on, so it is their nearest ancestor that is none of them; any other client
/// is the agent itself.
fn agent_of(peer: i32) -> Option<(i32, u64)> {
    let mut at = peer;
    for _ in 0..MAX_DEPTH {
        let p = read_proc(at)?;
        if !WRAPPERS.contains(&p.comm.as_str()) {
            return Some((at, p.start));
        }
        at = p.ppid;
    }
    None
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_child_of_a_known_agent_is_found_and_a_stranger_is_not() {
        let me = std::process::id() as i32;
        let agents = AgentProcs::default();
        // A shell started by this process stands for it (the test binary is the "agent").
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30"])
            .spawn()
            .unwrap();
        let child_pid = child.id() as i32;
        assert_eq!(agents.agent_above(Some(child_pid)), None);
        agents.note_client(Some(child_pid));
        // The agent itself is not its own descendant; what it started is.
        assert_eq!(agents.agent_above(Some(me)), None);
        assert_eq!(agents.agent_above(Some(child_pid)), Some(me));
        // init is nobody's descendant.
        assert_eq!(agents.agent_above(Some(1)), None);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
