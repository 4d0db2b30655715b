//! What a tail remembers of earlier events to word later ones: a tool call's name and subject
//! for its result (joined by `tool_use_id`, else by `causation_id`), and a checkpoint's call
//! for its decision. Bounded: a session with more calls in flight than this forgets the
//! oldest, and their results are still printed, only without the call's subject.

use std::collections::{HashMap, VecDeque};

/// Calls remembered at most.
const MAX_CALLS: usize = 4096;

/// A tool call as its result line repeats it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Call {
    pub tool: String,
    pub subject: String,
}

#[derive(Default)]
pub struct Joins {
    calls: HashMap<String, Call>,
    /// Keys of `calls` in the order they came, to forget the oldest.
    order: VecDeque<String>,
}

impl Joins {
    /// Remembers `call` under each of `keys` (a tool_use_id, an event id, a checkpoint id).
    pub fn remember(&mut self, keys: &[Option<&str>], call: &Call) {
        for key in keys.iter().flatten().filter(|k| !k.is_empty()) {
            if self
                .calls
                .insert((*key).to_string(), call.clone())
                .is_none()
            {
                self.order.push_back((*key).to_string());
            }
        }
        while self.order.len() > MAX_CALLS {
            if let Some(old) = self.order.pop_front() {
                self.calls.remove(&old);
            }
        }
    }

    /// The first call remembered under any of `keys`.
    pub fn find(&self, keys: &[Option<&str>]) -> Option<&Call> {
        keys.iter().flatten().find_map(|k| self.calls.get(*k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_calls_are_forgotten_past_the_bound() {
        let mut j = Joins::default();
        let call = Call {
            tool: "Bash".into(),
            subject: "ls".into(),
        };
        for i in 0..MAX_CALLS + 10 {
            j.remember(&[Some(&format!("t{i}"))], &call);
        }
        assert!(j.find(&[Some("t0")]).is_none());
        assert_eq!(
            j.find(&[None, Some(&format!("t{}", MAX_CALLS + 9))]),
            Some(&call)
        );
        assert_eq!(j.calls.len(), MAX_CALLS);
    }
}
