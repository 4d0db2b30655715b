//! Link the `dstream` executable as a position-dependent (non-PIE) binary on Linux.
//!
//! `dstream hook` runs once per agent event, so its start-up is on the agent's path. As a PIE,
//! the dynamic loader must apply thousands of relative relocations at every start, writing
//! (and so copy-on-write faulting) every page of `.data.rel.ro` and the GOT: measured here, a
//! third of the process's page faults and ~0.5 ms of its ~1.9 ms. Linked non-PIE, those
//! addresses are fixed at link time. The cost is that the executable's own image is not
//! address-randomized (libraries, heap, stacks and mmaps still are); the code is Rust plus
//! the vendored Lua, and input never reaches it as code. Set DSTREAM_PIE=1 to keep PIE.
fn main() {
    println!("cargo:rerun-if-env-changed=DSTREAM_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let keep_pie = std::env::var("DSTREAM_PIE").is_ok_and(|v| v == "1");
    if linux && !keep_pie {
        println!("cargo:rustc-link-arg-bin=dstream=-no-pie");
    }
}
