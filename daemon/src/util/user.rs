//! Names of users, for who decided a checkpoint.

/// `<kind>:<name>` for `uid` (`user:alice`, `web:alice`), `uid:<n>` when the name is unknown,
/// `<kind>:unknown` without a uid.
pub fn decider(kind: &str, uid: Option<u32>) -> String {
    match uid {
        Some(uid) => match name(uid) {
            Some(name) => format!("{kind}:{name}"),
            None => format!("uid:{uid}"),
        },
        None => format!("{kind}:unknown"),
    }
}

/// The login name of `uid`.
#[cfg(unix)]
pub fn name(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: passwd is plain data; getpwuid_r writes only into `pwd` and `buf` (whose length
    // it is given) and sets `result` to null or to `pwd`.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
            return None;
        }
        Some(
            std::ffi::CStr::from_ptr(pwd.pw_name)
                .to_string_lossy()
                .into_owned(),
        )
    }
}

#[cfg(not(unix))]
pub fn name(_uid: u32) -> Option<String> {
    None
}

/// This process's effective uid.
#[cfg(unix)]
pub fn me() -> Option<u32> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    Some(unsafe { libc::geteuid() })
}

#[cfg(not(unix))]
pub fn me() -> Option<u32> {
    None
}
