//! The open-file cap of a wasm session (`Policy::max_open_files`).
//!
//! Every file or directory a guest opens is a host descriptor that wasmtime-wasi holds for it,
//! and nothing in wasmtime-wasi bounds how many: a guest that opens the same file in a loop
//! takes descriptors until the whole host process has none left, starving every other session.
//! `ResourceTable::set_max_capacity` is no answer: it counts every resource (streams,
//! pollables) and a full table makes `open-at` trap instead of failing.
//!
//! So the two functions that open a host file are shadowed in the linkers, and everything else
//! runs untouched:
//!
//! ```text
//!  p2 [method]descriptor.open-at ─┐                ┌─ full ─► error-code `quota` (errno EDQUOT)
//!  p1 path_open ──────────────────┴► OpenFiles ────┤          errno `mfile` (EMFILE)
//!                                    has_room()    └─ room ─► wasmtime-wasi's own open,
//!                                                             then track() the new file
//! ```
//!
//! A session holds its preopened directories plus the files it opened that are still alive.
//! "Alive" is what the host holds, not what the guest can name: wasmtime-wasi shares one
//! `Arc<std::fs::File>` between a descriptor and the streams made from it, and a p2 guest can
//! drop the descriptor and keep a `read-via-stream` open, which still holds the descriptor on
//! the host. `OpenFiles` therefore keeps a `Weak` to each file it let through, and a file
//! counts until its last strong reference, descriptor or stream, is gone.
//!
//! The guest sees an error, never a trap, and can go on: once it closes one, the next open
//! succeeds. WASI p2 has no `EMFILE`; the nearest code is `quota` (a per-principal limit on a
//! resource, lifted by releasing some), which wasi-libc turns into `EDQUOT` and Rust's std
//! into `ErrorKind::QuotaExceeded`. `insufficient-memory` (`ENOMEM`) would read as memory
//! exhaustion, which many programs treat as fatal, and `busy` invites a retry that cannot
//! succeed. WASI p1 has `mfile`, which wasi-libc turns into `EMFILE`, as natively.

use std::future::Future;
use std::sync::{Arc, Weak};

use wasmtime::component::Resource;
use wasmtime::{AsContextMut, Caller, Extern, StoreContextMut};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView};
use wasmtime_wasi::p1::types::Errno;
use wasmtime_wasi::p1::wasi_snapshot_preview1::{self as p1, WasiSnapshotPreview1 as _};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, ErrorCode, Host as _, HostDescriptor as _, OpenFlags, PathFlags,
};
use wasmtime_wasi::{ResourceTable, WasiView as _};

use super::{State1, State2};

/// The WASI p2 interface whose `open-at` is shadowed: the version wasmtime-wasi links (a
/// guest importing any 0.2.x reaches it through the linker's semver matching).
pub(super) const P2_FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// The host files one session holds, against its cap.
#[derive(Debug)]
pub(crate) struct OpenFiles {
    /// Most host descriptors the session may hold at once; `None` tracks nothing.
    limit: Option<usize>,
    /// Preopened directories: each holds a descriptor for the whole session.
    preopens: usize,
    /// One entry per file the guest opened; dead ones are pruned before each open.
    opened: Vec<Weak<std::fs::File>>,
}

impl OpenFiles {
    pub(crate) fn new(limit: Option<u64>, preopens: usize) -> Self {
        Self {
            limit: limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            preopens,
            opened: Vec::new(),
        }
    }

    /// Whether one more file may be opened now.
    fn has_room(&mut self) -> bool {
        let Some(limit) = self.limit else {
            return true;
        };
        self.opened.retain(|f| f.strong_count() > 0);
        self.preopens.saturating_add(self.opened.len()) < limit
    }

    /// Count `file` until the host lets go of it.
    fn track(&mut self, file: &Arc<std::fs::File>) {
        if self.limit.is_some() {
            self.opened.push(Arc::downgrade(file));
        }
    }

    /// Host descriptors the session holds now: preopens and the live files it opened.
    #[cfg(test)]
    fn in_use(&mut self) -> usize {
        self.opened.retain(|f| f.strong_count() > 0);
        self.preopens + self.opened.len()
    }
}

/// The host file behind a WASI descriptor.
fn host_file(d: &Descriptor) -> &Arc<std::fs::File> {
    match d {
        Descriptor::File(f) => &f.file,
        Descriptor::Dir(d) => &d.dir,
    }
}

/// Shadow p2's `open-at` with the capped one.
pub(crate) fn link_p2(linker: &mut wasmtime::component::Linker<State2>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = linker
        .instance(P2_FILESYSTEM_TYPES)
        .and_then(|mut types| types.func_wrap_async("[method]descriptor.open-at", open_at));
    linker.allow_shadowing(false);
    linked
}

type OpenAtParams = (
    Resource<Descriptor>,
    PathFlags,
    String,
    OpenFlags,
    DescriptorFlags,
);
type OpenAtResult = (Result<Resource<Descriptor>, ErrorCode>,);

/// `[method]descriptor.open-at`: refused with `quota` at the cap, else wasmtime-wasi's own.
fn open_at(
    mut store: StoreContextMut<'_, State2>,
    (dir, path_flags, path, open_flags, flags): OpenAtParams,
) -> Box<dyn Future<Output = wasmtime::Result<OpenAtResult>> + Send + '_> {
    Box::new(async move {
        let state = store.data_mut();
        if !state.open_files.has_room() {
            return Ok((Err(ErrorCode::Quota),));
        }
        let mut fs = WasiFilesystemCtxView {
            ctx: state.ctx.filesystem(),
            table: &mut state.table,
        };
        match fs.open_at(dir, path_flags, path, open_flags, flags).await {
            Ok(opened) => {
                state.open_files.track(host_file(state.table.get(&opened)?));
                Ok((Ok(opened),))
            }
            Err(e) => Ok((Err(fs.convert_error_code(e)?),)),
        }
    })
}

/// Shadow p1's `path_open` with the capped one.
pub(crate) fn link_p1(linker: &mut wasmtime::Linker<State1>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let linked = linker
        .func_wrap_async("wasi_snapshot_preview1", "path_open", path_open)
        .map(|_| ());
    linker.allow_shadowing(false);
    linked
}

/// `path_open`'s core-wasm signature: dirfd, dirflags, path pointer and length, oflags, base
/// and inheriting rights, fdflags, and where to write the new fd.
type PathOpenParams = (i32, i32, i32, i32, i32, i64, i64, i32, i32);

/// `path_open`: refused with `mfile` at the cap, else wasmtime-wasi's own.
///
/// The p1 descriptor table is private to wasmtime-wasi, so the new file is found as the one
/// host file in the session's resource table that was not there before the call.
fn path_open(
    mut caller: Caller<'_, State1>,
    (fd, dirflags, path, path_len, oflags, base, inheriting, fdflags, fd_out): PathOpenParams,
) -> Box<dyn Future<Output = wasmtime::Result<i32>> + Send + '_> {
    Box::new(async move {
        let state = caller.data_mut();
        if !state.open_files.has_room() {
            return Ok(i32::from(u16::from(Errno::Mfile)));
        }
        let before = state
            .open_files
            .limit
            .map(|_| host_files(state.wasi.ctx().table));
        // What wiggle's own linker entry does: hand the guest's memory and the store's
        // hostcall fuel to the implementation.
        let fuel = caller.as_context_mut().hostcall_fuel();
        let export = caller.get_export("memory");
        let (state, mut mem) = match &export {
            Some(Extern::Memory(m)) => {
                let (mem, state) = m.data_and_store_mut(&mut caller);
                (state, wiggle::GuestMemory::Unshared(mem))
            }
            Some(Extern::SharedMemory(m)) => {
                (caller.data_mut(), wiggle::GuestMemory::Shared(m.data()))
            }
            _ => wasmtime::bail!("missing required memory export"),
        };
        state.wasi.set_hostcall_fuel(fuel);
        let errno = p1::path_open(
            &mut state.wasi,
            &mut mem,
            fd,
            dirflags,
            path,
            path_len,
            oflags,
            base,
            inheriting,
            fdflags,
            fd_out,
        )
        .await?;
        if errno == 0
            && let Some(before) = before
        {
            let state = caller.data_mut();
            let table = state.wasi.ctx().table;
            let new = descriptors(table).find(|f| !before.contains(&addr(f)));
            if let Some(file) = new {
                state.open_files.track(file);
            }
        }
        Ok(errno)
    })
}

/// Every host file a descriptor in `table` holds.
fn descriptors(table: &mut ResourceTable) -> impl Iterator<Item = &Arc<std::fs::File>> {
    table
        .iter_mut()
        .filter_map(|entry| entry.downcast_ref::<Descriptor>())
        .map(host_file)
}

/// The addresses of the host files in `table` (addresses, not pointers, so the future that
/// holds them stays `Send`).
fn host_files(table: &mut ResourceTable) -> Vec<usize> {
    descriptors(table).map(addr).collect()
}

fn addr(f: &Arc<std::fs::File>) -> usize {
    Arc::as_ptr(f) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Arc<std::fs::File> {
        Arc::new(std::fs::File::open("/dev/null").expect("/dev/null"))
    }

    #[test]
    fn preopens_and_live_files_count_and_a_closed_file_frees_its_place() {
        let mut open = OpenFiles::new(Some(4), 1);
        let files: Vec<_> = (0..3)
            .map(|_| {
                assert!(open.has_room());
                let f = file();
                open.track(&f);
                f
            })
            .collect();
        assert_eq!(open.in_use(), 4);
        assert!(!open.has_room(), "1 preopen + 3 files reach a cap of 4");
        let mut files = files;
        files.pop();
        assert!(open.has_room(), "closing one frees its place");
        assert_eq!(open.in_use(), 3);
    }

    #[test]
    fn a_file_counts_until_its_last_holder_lets_go() {
        // A p2 stream keeps the descriptor's file alive after the descriptor is dropped.
        let mut open = OpenFiles::new(Some(1), 0);
        let descriptor = file();
        open.track(&descriptor);
        let stream = descriptor.clone();
        drop(descriptor);
        assert!(!open.has_room());
        drop(stream);
        assert!(open.has_room());
    }

    #[test]
    fn limits_at_the_edges() {
        for (limit, preopens, room) in [
            (Some(0), 0, false),
            (Some(1), 0, true),
            (Some(1), 1, false),
            (Some(2), 5, false),
            (Some(u64::MAX), 3, true),
            (None, 1000, true),
        ] {
            assert_eq!(
                OpenFiles::new(limit, preopens).has_room(),
                room,
                "limit {limit:?}, {preopens} preopens"
            );
        }
    }

    #[test]
    fn without_a_limit_nothing_is_kept() {
        let mut open = OpenFiles::new(None, 2);
        let f = file();
        open.track(&f);
        assert!(open.opened.is_empty());
    }
}
