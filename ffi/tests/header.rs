//! `include/dstream.h` is generated from the exports by cbindgen and committed, so C callers
//! can build without Rust tools. This test regenerates it and fails when the committed file
//! differs: run `DSTREAM_UPDATE_HEADER=1 cargo test -p dstream-ffi --test header` to refresh it.

use std::path::Path;

#[test]
fn the_committed_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not read ffi/src")
        .write(&mut generated);
    let path = crate_dir.join("include/dstream.h");
    if std::env::var_os("DSTREAM_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "ffi/include/dstream.h is out of date with ffi/src/lib.rs; regenerate it with\n  \
         DSTREAM_UPDATE_HEADER=1 cargo test -p dstream-ffi --test header"
    );
}
