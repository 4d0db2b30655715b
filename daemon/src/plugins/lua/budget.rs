//! What a running Lua call may still spend, and the count hook that charges it: an
//! instruction budget and a wall-clock deadline per call, checked every [`CHECK_EVERY`]
//! instructions. Once either is spent it stays spent until the call ends, so a script that
//! catches the error meets it again at the next check.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Instant;

use mlua::{HookTriggers, Lua, VmState};

use crate::plugins::contract::Limits;

/// Instructions between two checks of the budget and the deadline.
const CHECK_EVERY: u32 = 1000;
const INSTRUCTIONS: u8 = 1;
const DEADLINE: u8 = 2;

/// What a running call may still spend; shared with the count hook.
pub(super) struct Budget {
    /// The call's deadline, in nanoseconds after `base`; 0 when no call runs.
    deadline_ns: AtomicU64,
    instructions_left: AtomicU64,
    /// Set once the call overspent: every later check fails too, until the call ends.
    spent: AtomicBool,
    /// Which limit it overspent: [`INSTRUCTIONS`] or [`DEADLINE`].
    overspent: AtomicU8,
    base: Instant,
}

impl Budget {
    /// A budget for one state, its count hook set: global, not per thread, since a coroutine
    /// the script creates inherits the C hook, and mlua's per-thread hook removes itself from
    /// threads it was not set for.
    pub(super) fn install(lua: &Lua) -> mlua::Result<Arc<Budget>> {
        let budget = Arc::new(Budget {
            deadline_ns: AtomicU64::new(0),
            instructions_left: AtomicU64::new(0),
            spent: AtomicBool::new(false),
            overspent: AtomicU8::new(DEADLINE),
            base: Instant::now(),
        });
        let hook = budget.clone();
        lua.set_global_hook(
            HookTriggers::new().every_nth_instruction(CHECK_EVERY),
            move |_, _| match hook.check() {
                Ok(()) => Ok(VmState::Continue),
                Err(m) => Err(mlua::Error::runtime(m)),
            },
        )?;
        Ok(budget)
    }

    pub(super) fn start(&self, limits: &Limits) {
        let deadline = self.base.elapsed() + limits.call_timeout;
        self.deadline_ns
            .store(deadline.as_nanos() as u64, Ordering::Relaxed);
        self.instructions_left
            .store(limits.instructions, Ordering::Relaxed);
        self.spent.store(false, Ordering::Relaxed);
    }

    pub(super) fn end(&self) {
        self.deadline_ns.store(0, Ordering::Relaxed);
    }

    /// Spent for good: nothing runs in the state any more (it is being closed).
    pub(super) fn close(&self) {
        self.deadline_ns.store(1, Ordering::Relaxed);
        self.spent.store(true, Ordering::Relaxed);
    }

    /// Why the running call may not go on, once it overspent.
    pub(super) fn spent(&self) -> Option<&'static str> {
        let running = self.deadline_ns.load(Ordering::Relaxed) != 0;
        (running && self.spent.load(Ordering::Relaxed))
            .then(|| Self::reason(self.overspent.load(Ordering::Relaxed)))
    }

    /// Called every [`CHECK_EVERY`] instructions.
    pub(super) fn check(&self) -> Result<(), String> {
        let deadline = self.deadline_ns.load(Ordering::Relaxed);
        if deadline == 0 {
            return Ok(()); // loading the script: limited by the load deadline below
        }
        if let Some(why) = self.spent() {
            return Err(why.into());
        }
        let left = self.instructions_left.load(Ordering::Relaxed);
        if left < CHECK_EVERY as u64 {
            return Err(self.overspend(INSTRUCTIONS).into());
        }
        self.instructions_left
            .store(left - CHECK_EVERY as u64, Ordering::Relaxed);
        if self.base.elapsed().as_nanos() as u64 > deadline {
            return Err(self.overspend(DEADLINE).into());
        }
        Ok(())
    }

    fn overspend(&self, which: u8) -> &'static str {
        self.overspent.store(which, Ordering::Relaxed);
        self.spent.store(true, Ordering::Relaxed);
        Self::reason(which)
    }

    fn reason(which: u8) -> &'static str {
        if which == INSTRUCTIONS {
            "plugin call exceeded its instruction budget"
        } else {
            "plugin call exceeded its deadline"
        }
    }
}
