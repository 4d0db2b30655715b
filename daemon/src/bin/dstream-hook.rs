//! `dstream-hook`: the lean hook binary, `dstream hook` without the rest of `dstream`.
//!
//! Claude Code runs a process per hook event, so the hook's start-up is on every tool call's
//! path. This binary links only what the hook uses (`dstream_daemon::hook`: stdin, the socket,
//! the reply; the config, autostart and spool writer for when no daemon answers), so it maps a
//! fraction of `dstream`'s pages and applies a fraction of its relocations. It stays a
//! position-independent executable (ASLR), like `dstream`. `dstream install claude-code` points
//! hooks at it when it sits beside `dstream`.

use std::process::ExitCode;

// The unwinder linked in, not loaded: without this, std's link asks for libgcc_s.so, whose
// loading and start-up (its CPU feature probe, a VM exit per `cpuid`) cost the hook about
// 70 µs of every call. Static PIC archive; the binary stays a position-independent
// executable, and a panic still unwinds.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[link(name = "gcc_eh", kind = "static")]
unsafe extern "C" {}

#[link(name = "gcc_eh", kind = "static")]
unsafe extern "C" {}

fn main() -> ExitCode {
    dstream_daemon::hook::lean::main()
}
