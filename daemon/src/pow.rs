//! The binary's own `pow`: every caller linked into `dstream` (tokio, Lua's `^`, SQLite)
//! binds to this one, the `libm` crate's, instead of glibc's.
//!
//! Why: tokio's multi-thread scheduler updates a moving average of its poll times with
//! `powf` after every batch of tasks, so every busy worker calls `pow`. glibc's `pow` runs
//! in libm's code and reads libm's tables, and the kernel maps 64 KiB of a file around each
//! page touched: under the C=16 append load that one function kept 380 KiB of libm resident
//! (`/proc/<pid>/smaps`, 5 % of the daemon's RSS), and it came back after every release of
//! unused pages (`util::unused_pages`). This `pow` is code in the binary's own text, next
//! to the scheduler that calls it.
//!
//! The static linker binds a symbol the binary defines before looking in shared libraries,
//! and an executable does not export its symbols, so libm and libc keep their own `pow`.
//! Accuracy: fdlibm's algorithm, within 1 ULP and exact for integer powers of integers;
//! glibc's is within 0.52 ULP.

/// `pow(3)` for this binary.
#[unsafe(no_mangle)]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

#[cfg(test)]
mod tests {
    unsafe extern "C" {
        /// `pow` as C code and other crates of the binary name it.
        #[link_name = "pow"]
        fn linked_pow_symbol(x: f64, y: f64) -> f64;
    }

    fn linked_pow(x: f64, y: f64) -> f64 {
        // SAFETY: `pow` is a pure function of two doubles.
        unsafe { linked_pow_symbol(x, y) }
    }

    /// glibc's `pow`, from libm opened by name (this binary may not load it at all).
    fn glibc_pow() -> extern "C" fn(f64, f64) -> f64 {
        // SAFETY: C strings and symbol lookups; libm's `pow` has this signature, and the
        // library is never closed.
        unsafe {
            let libm = libc::dlopen(c"libm.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            assert!(!libm.is_null(), "cannot open glibc's libm");
            let f = libc::dlsym(libm, c"pow".as_ptr());
            assert!(!f.is_null(), "libm has no pow");
            std::mem::transmute::<*mut libc::c_void, extern "C" fn(f64, f64) -> f64>(f)
        }
    }

    fn ulps_apart(a: f64, b: f64) -> u64 {
        if a == b || (a.is_nan() && b.is_nan()) {
            return 0;
        }
        assert_eq!(a.is_sign_negative(), b.is_sign_negative(), "{a} vs {b}");
        a.to_bits().abs_diff(b.to_bits())
    }

    #[test]
    fn the_binary_calls_its_own_pow_and_it_agrees_with_glibc_within_one_ulp() {
        let ours = super::pow as extern "C" fn(f64, f64) -> f64 as usize;
        let linked = linked_pow_symbol as unsafe extern "C" fn(f64, f64) -> f64 as usize;
        assert_eq!(linked, ours, "the symbol `pow` binds to this binary's");
        let glibc = glibc_pow();
        assert_ne!(glibc as usize, ours, "libm's pow is this binary's");
        // tokio's weights (0.9^polls), Lua's and SQLite's everyday powers, and edge cases.
        let mut cases: Vec<(f64, f64)> = (0..=256).map(|n| (0.9, n as f64)).collect();
        for x in [0.5, 1.5, 2.0, 3.0, 7.25, 10.0, 1e-3, 123.456, 1e10] {
            for y in [-3.5, -1.0, -0.5, 0.25, 0.5, 1.0 / 3.0, 2.0, 10.0, 52.75] {
                cases.push((x, y));
            }
        }
        cases.extend([
            (0.0, 0.0),
            (-2.0, 3.0),
            (-2.0, 0.5),
            (f64::INFINITY, -1.0),
            (0.0, -1.0),
            (1.0, f64::NAN),
        ]);
        for (x, y) in cases {
            let (here, theirs) = (linked_pow(x, y), glibc(x, y));
            let apart = ulps_apart(here, theirs);
            assert!(apart <= 1, "pow({x}, {y}): {here} here, {theirs} in glibc");
        }
        assert_eq!(linked_pow(2.0, 10.0), 1024.0);
        assert_eq!(linked_pow(10.0, 15.0), 1e15);
    }
}
