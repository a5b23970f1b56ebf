//! Counts the large user-space copies of a process, for `sandpipe-bench --profile-frames`.
//!
//! Loaded with `LD_PRELOAD`, it puts its own `memcpy` and `memmove` in front of the C
//! library's: each call of at least [`LARGE`] bytes is counted (calls and bytes, apart for each
//! function), then the C library's function does the copy. When the process exits, the counts
//! go to `$SANDPIPE_COPY_COUNT_DIR/<pid>`, as two lines: the executable's file name, then
//! `memcpy_calls memcpy_bytes memmove_calls memmove_bytes`.
//!
//! What it sees: every copy that goes through the C library's symbols, as Rust's `copy_from_slice`,
//! `to_vec` and `copy_within` of a large slice do, and wasmtime's `memory.copy` (a call into
//! the host). What it does not: copies the compiler inlined (small or fixed sizes), and the
//! kernel's copies into and out of pipes, which `strace`'s rows count as system calls.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// The smallest copy counted: large enough to leave out the bookkeeping copies of small
/// structures, small enough to catch a frame copied in pieces of a page.
pub const LARGE: usize = 4096;

type CopyFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;

/// Set while `dlsym` runs, which may itself copy: those copies take the byte loop.
static RESOLVING: AtomicBool = AtomicBool::new(false);

/// One interposed function: the C library's, looked up once, and what was counted.
struct Interposed {
    name: &'static CStr,
    real: AtomicPtr<c_void>,
    calls: AtomicU64,
    bytes: AtomicU64,
}

static MEMCPY: Interposed = Interposed::new(c"memcpy");
static MEMMOVE: Interposed = Interposed::new(c"memmove");

impl Interposed {
    const fn new(name: &'static CStr) -> Self {
        Self {
            name,
            real: AtomicPtr::new(std::ptr::null_mut()),
            calls: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// The C library's function, looked up once; `None` while a lookup is under way.
    fn real(&self) -> Option<CopyFn> {
        let mut found = self.real.load(Ordering::Acquire);
        if found.is_null() {
            if RESOLVING.swap(true, Ordering::Acquire) {
                return None;
            }
            // SAFETY: `name` is a NUL-terminated string; RTLD_NEXT asks for the next object's
            // definition after this library, the C library's.
            found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
            self.real.store(found, Ordering::Release);
            RESOLVING.store(false, Ordering::Release);
        }
        // SAFETY: `memcpy` and `memmove` have this signature in every C library.
        (!found.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, CopyFn>(found) })
    }

    /// Count a copy of `n` bytes if it is large, then make it with the C library's function
    /// (or the byte loop while that is looked up).
    ///
    /// # Safety
    /// As the interposed function (for `memcpy`, non-overlapping ranges, a case of `memmove`'s
    /// contract, which the byte loop needs).
    unsafe fn copy(&self, dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
        if n >= LARGE {
            self.calls.fetch_add(1, Ordering::Relaxed);
            self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
        match self.real() {
            // SAFETY: the caller's contract, passed on unchanged.
            Some(copy) => unsafe { copy(dst, src, n) },
            // SAFETY: the caller's contract.
            None => unsafe { byte_copy(dst, src, n) },
        }
    }

    /// Calls and bytes counted so far.
    fn counts(&self) -> (u64, u64) {
        (
            self.calls.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// A copy without the C library, for the calls made while it is looked up: one byte at a
/// time, backwards when the destination lies after an overlapping source. Volatile, so the
/// compiler cannot turn the loop back into a call to `memcpy`.
///
/// # Safety
/// As `memmove`.
unsafe fn byte_copy(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    let (d, s) = (dst.cast::<u8>(), src.cast::<u8>());
    // SAFETY: the caller's `memmove` contract: both ranges are valid for `n` bytes.
    unsafe {
        if (d as usize) > (s as usize) {
            for i in (0..n).rev() {
                d.add(i).write_volatile(s.add(i).read_volatile());
            }
        } else {
            for i in 0..n {
                d.add(i).write_volatile(s.add(i).read_volatile());
            }
        }
    }
    dst
}

/// # Safety
/// As the C library's `memcpy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    // SAFETY: the caller's contract, passed on unchanged.
    unsafe { MEMCPY.copy(dst, src, n) }
}

/// # Safety
/// As the C library's `memmove`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dst: *mut c_void, src: *const c_void, n: usize) -> *mut c_void {
    // SAFETY: the caller's contract, passed on unchanged.
    unsafe { MEMMOVE.copy(dst, src, n) }
}

/// At exit: the counts as they stand, to `$SANDPIPE_COPY_COUNT_DIR/<pid>`. Writing the file
/// copies too, after the counts are read.
extern "C" fn report() {
    let ((mc, mb), (vc, vb)) = (MEMCPY.counts(), MEMMOVE.counts());
    let Some(dir) = std::env::var_os("SANDPIPE_COPY_COUNT_DIR") else {
        return;
    };
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let path = std::path::Path::new(&dir).join(std::process::id().to_string());
    // Nothing to report a failure to: the bench finds the file missing and says so.
    let _ = std::fs::write(path, format!("{exe}\n{mc} {mb} {vc} {vb}\n"));
}

extern "C" fn init() {
    // Look both up before the process has threads, so the byte loop is for `dlsym` alone.
    let _ = MEMCPY.real();
    let _ = MEMMOVE.real();
    // SAFETY: `report` is an `extern "C" fn()` that lives as long as the process.
    unsafe {
        libc::atexit(report);
    }
}

/// Run [`init`] when the library is loaded, before `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;
