//! Embeds the web view's files (`src/http/web/assets/`) in the binary: a table of
//! `(name, bytes)` the listener serves, so the page needs no files and no network at run time.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/web/assets");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut table = String::from("pub static ASSETS: &[(&str, &[u8])] = &[\n");
    for name in &names {
        let path = dir.join(name);
        writeln!(
            table,
            "    ({name:?}, include_bytes!({:?})),",
            path.display()
        )
        .unwrap();
    }
    table.push_str("];\n");
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("web_assets.rs");
    std::fs::write(out, table).unwrap();
    pack_hot_code();
}

/// In release builds, has the linker put the functions the daemon runs after start-up
/// (`hot-code.order`, written by `scripts/hot-code.mjs`) together at the start of its code:
/// the kernel maps code in 64 KiB runs around each page touched, so scattered hot functions
/// kept most of the binary resident under load. Names the linker does not find (a stale list)
/// are skipped without a warning.
fn pack_hot_code() {
    let order = Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-code.order");
    println!("cargo:rerun-if-changed={}", order.display());
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    if release && linker_is_lld() && order.exists() {
        println!(
            "cargo:rustc-link-arg-bin=dstream=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bin=dstream=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether the release binary is linked by LLD, the only linker here that takes the list (GNU
/// ld refuses the option): Rust's default on x86_64 Linux since 1.90, unless the build picks
/// another linker.
fn linker_is_lld() -> bool {
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let target = std::env::var("TARGET").unwrap_or_default();
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let other_linker = [
        "fuse-ld",
        "linker=",
        "link-self-contained=-",
        "linker-features=-",
    ]
    .iter()
    .any(|f| flags.contains(f));
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let minor = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.split(['.', ' ']).nth(2)?.parse::<u32>().ok());
    target == "x86_64-unknown-linux-gnu" && !other_linker && minor.is_some_and(|m| m >= 90)
}
