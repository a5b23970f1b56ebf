//! The disk-write quota of a wasm session (`Policy::max_disk_write`).
//!
//! A plugin granted a read-write `--dir` can fill the host's disk: nothing in wasmtime-wasi
//! counts what a guest writes. So the functions a component writes a file through are shadowed
//! in the linker, as `open_files.rs` shadows `open-at`, and everything else runs untouched:
//!
//! ```text
//!  [method]descriptor.write ─────────────► DiskQuota::charge(len) ─ over ─► error-code
//!                                           │                               `insufficient-space`
//!                                           └ room ─► wasmtime-wasi's own write
//!  [method]descriptor.write-via-stream ─┐
//!  [method]descriptor.append-via-stream ┴► wasmtime-wasi's own stream, wrapped in QuotaStream:
//!                                          each write, zeroes write or blocking write is
//!                                          charged first; over: `last-operation-failed` with
//!                                          ENOSPC, which `filesystem-error-code` reports as
//!                                          `insufficient-space`
//! ```
//!
//! What counts is bytes written through the session's preopens, whatever the offset: an
//! overwrite counts again, and a file grown by `set-size` (sparse, no blocks) does not. A
//! refused write writes nothing, and the session goes on: the plugin sees `ENOSPC`, as on a full
//! disk, and decides. wasi-libc maps `insufficient-space` to `ENOSPC`, and Rust's std to
//! `ErrorKind::StorageFull`.
//!
//! Core modules (WASI p1) write files inside wasmtime-wasi's own p1 implementation, which has
//! no seam to count at; [`super`] refuses a p1 module with a quota and a read-write preopen.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use wasmtime::StoreContextMut;
use wasmtime::component::Resource;
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    ErrorCode, Filesize, Host as _, HostDescriptor as _,
};
use wasmtime_wasi::p2::{DynOutputStream, OutputStream, Pollable, StreamError, StreamResult};

use super::State2;
use super::open_files::P2_FILESYSTEM_TYPES;

/// Bytes a session may still write to files, shared by its wrapped streams.
#[derive(Debug)]
pub(crate) struct DiskQuota {
    /// `None`: nothing is counted.
    limit: Option<u64>,
    used: AtomicU64,
}

impl DiskQuota {
    pub(crate) fn new(limit: Option<u64>) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// Take `n` bytes from the quota, or nothing if they do not all fit.
    fn charge(&self, n: u64) -> bool {
        let Some(limit) = self.limit else {
            return true;
        };
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|total| *total <= limit)
            })
            .is_ok()
    }

    /// Give back `n` bytes charged for a write that did not happen.
    fn refund(&self, n: u64) {
        if self.limit.is_some() {
            self.used.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// Bytes charged so far.
    #[cfg(test)]
    fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }
}

/// The error a write over the quota fails with, as a full disk's.
fn no_space() -> StreamError {
    StreamError::LastOperationFailed(std::io::Error::from_raw_os_error(libc::ENOSPC).into())
}

/// A file's output stream, charged against the session's quota before each write.
struct QuotaStream {
    inner: DynOutputStream,
    quota: Arc<DiskQuota>,
}

#[async_trait::async_trait]
impl Pollable for QuotaStream {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

#[async_trait::async_trait]
impl OutputStream for QuotaStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let len = bytes.len() as u64;
        if !self.quota.charge(len) {
            return Err(no_space());
        }
        self.inner
            .write(bytes)
            .inspect_err(|_| self.quota.refund(len))
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> StreamResult<()> {
        let len = bytes.len() as u64;
        if !self.quota.charge(len) {
            return Err(no_space());
        }
        let written = self.inner.blocking_write_and_flush(bytes).await;
        written.inspect_err(|_| self.quota.refund(len))
    }

    fn write_zeroes(&mut self, nelem: usize) -> StreamResult<()> {
        if !self.quota.charge(nelem as u64) {
            return Err(no_space());
        }
        self.inner
            .write_zeroes(nelem)
            .inspect_err(|_| self.quota.refund(nelem as u64))
    }

    async fn write_ready(&mut self) -> StreamResult<usize> {
        self.inner.write_ready().await
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

/// Shadow p2's file writes with the charged ones (only when the session could have a quota:
/// the linker is shared, so the functions look at each store's [`DiskQuota`]).
pub(crate) fn link_p2(linker: &mut wasmtime::component::Linker<State2>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = linker.instance(P2_FILESYSTEM_TYPES).and_then(|mut types| {
        types.func_wrap_async("[method]descriptor.write", write)?;
        types.func_wrap("[method]descriptor.write-via-stream", write_via_stream)?;
        types.func_wrap("[method]descriptor.append-via-stream", append_via_stream)
    });
    linker.allow_shadowing(false);
    linked
}

type WriteResult = (Result<Filesize, ErrorCode>,);

/// `[method]descriptor.write`: refused with `insufficient-space` over the quota.
fn write(
    mut store: StoreContextMut<'_, State2>,
    (fd, buffer, offset): (Resource<Descriptor>, Vec<u8>, Filesize),
) -> Box<dyn Future<Output = wasmtime::Result<WriteResult>> + Send + '_> {
    Box::new(async move {
        let state = store.data_mut();
        let len = buffer.len() as u64;
        if !state.disk.charge(len) {
            return Ok((Err(ErrorCode::InsufficientSpace),));
        }
        let mut fs = WasiFilesystemCtxView {
            ctx: state.ctx.filesystem(),
            table: &mut state.table,
        };
        // What was not written (a short write, a read-only descriptor) goes back.
        match fs.write(fd, buffer, offset).await {
            Ok(n) => {
                state.disk.refund(len.saturating_sub(n));
                Ok((Ok(n),))
            }
            Err(e) => {
                state.disk.refund(len);
                Ok((Err(fs.convert_error_code(e)?),))
            }
        }
    })
}

type StreamOut = (Result<Resource<DynOutputStream>, ErrorCode>,);

/// `[method]descriptor.write-via-stream`: wasmtime-wasi's stream, wrapped.
fn write_via_stream(
    mut store: StoreContextMut<'_, State2>,
    (fd, offset): (Resource<Descriptor>, Filesize),
) -> wasmtime::Result<StreamOut> {
    wrap_stream(store.data_mut(), |fs| fs.write_via_stream(fd, offset))
}

/// `[method]descriptor.append-via-stream`: wasmtime-wasi's stream, wrapped.
fn append_via_stream(
    mut store: StoreContextMut<'_, State2>,
    (fd,): (Resource<Descriptor>,),
) -> wasmtime::Result<StreamOut> {
    wrap_stream(store.data_mut(), |fs| fs.append_via_stream(fd))
}

/// Open a stream with `open`, then replace it in the table with a [`QuotaStream`] around it.
fn wrap_stream(
    state: &mut State2,
    open: impl FnOnce(
        &mut WasiFilesystemCtxView<'_>,
    ) -> wasmtime_wasi::p2::FsResult<Resource<DynOutputStream>>,
) -> wasmtime::Result<StreamOut> {
    let mut fs = WasiFilesystemCtxView {
        ctx: state.ctx.filesystem(),
        table: &mut state.table,
    };
    let stream = match open(&mut fs) {
        Ok(stream) => stream,
        Err(e) => return Ok((Err(fs.convert_error_code(e)?),)),
    };
    if state.disk.limit.is_none() {
        return Ok((Ok(stream),));
    }
    let inner = state.table.delete(stream)?;
    let wrapped: DynOutputStream = Box::new(QuotaStream {
        inner,
        quota: state.disk.clone(),
    });
    Ok((Ok(state.table.push(wrapped)?),))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_that_does_not_fit_takes_nothing() {
        let q = DiskQuota::new(Some(10));
        assert!(q.charge(6));
        assert!(!q.charge(5), "6 + 5 is over 10");
        assert_eq!(q.used(), 6, "the refused write took nothing");
        assert!(q.charge(4));
        assert!(!q.charge(1));
        assert!(q.charge(0));
        q.refund(3);
        assert!(q.charge(3), "a refund frees its bytes");
    }

    #[test]
    fn without_a_limit_everything_fits() {
        let q = DiskQuota::new(None);
        assert!(q.charge(u64::MAX));
        assert!(q.charge(u64::MAX));
    }

    #[test]
    fn the_charge_never_overflows() {
        let q = DiskQuota::new(Some(u64::MAX));
        assert!(q.charge(u64::MAX - 1));
        assert!(!q.charge(2));
    }
}
