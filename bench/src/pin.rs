//! CPU placement for the pinned phase.

/// Pin the calling thread to CPU 0. Call it before any other thread exists: threads and child
/// processes created later inherit the mask, so the tokio runtime, wasmtime's epoch ticker and
/// every plugin child all share CPU 0.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn to_cpu0() -> std::io::Result<()> {
    // SAFETY: `cpu_set_t` is a plain bit array for which all zeroes is a valid (empty) set;
    // `CPU_SET(0, ..)` sets a bit inside it; `sched_setaffinity` reads exactly
    // `size_of::<cpu_set_t>()` bytes from a pointer to a live local, and pid 0 names the
    // calling thread only.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
pub fn to_cpu0() -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "pinning needs sched_setaffinity (Linux)",
    ))
}
