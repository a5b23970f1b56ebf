//! What one 64 KiB copy costs on this machine by where its destination lies from its source,
//! modulo 4096: the measurement behind `host/src/run/read_room.rs` (reads of a large frame
//! start on a 64-byte boundary).
//!
//! On AMD Zen, `rep movsb`, which both the kernel's `copy_to_user` and glibc 2.36's `memcpy`
//! use for a copy this large, is many times slower when the destination lies 1 to 31 bytes past
//! the source modulo 4096. A pipe's pages are filled from their start, and a buffer as large as
//! a frame comes from `mmap` 16 bytes into a page. Elsewhere the rows come out alike, and then
//! the alignment costs nothing either.

use std::hint::black_box;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const KIB64: usize = 64 * 1024;
const PAGE: usize = 4096;
/// Copies a batch times; the median of [`BATCHES`] batches is printed.
const BATCH: u32 = 200;
pub const BATCHES: usize = 9;

/// One row: what was copied, where the destination lay, and the median time a copy.
pub struct Row {
    pub what: &'static str,
    pub distance: usize,
    pub per_copy: Duration,
}

/// `len` bytes of `v` starting `offset` bytes past the first page boundary in it.
fn at_page_offset(v: &mut [u8], offset: usize, len: usize) -> &mut [u8] {
    let base = v.as_ptr().align_offset(PAGE);
    &mut v[base + offset..base + offset + len]
}

/// The median over [`BATCHES`] batches of one `copy` of 64 KiB from a page boundary to
/// `distance` bytes past one.
fn time_copies(
    distance: usize,
    mut copy: impl FnMut(&[u8], &mut [u8]) -> std::io::Result<()>,
) -> anyhow::Result<Duration> {
    let mut src = vec![7u8; KIB64 + PAGE];
    let mut dst = vec![0u8; KIB64 + 2 * PAGE];
    let src = at_page_offset(&mut src, 0, KIB64);
    let dst = at_page_offset(&mut dst, distance, KIB64);
    let mut batches = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let start = Instant::now();
        for _ in 0..BATCH {
            copy(src, dst)?;
        }
        batches.push(start.elapsed() / BATCH);
    }
    batches.sort_unstable();
    Ok(batches[BATCHES / 2])
}

/// A `copy_from_slice` (glibc's `memcpy`).
fn memcpy(distance: usize) -> anyhow::Result<Duration> {
    time_copies(distance, |src, dst| {
        black_box(dst).copy_from_slice(black_box(src));
        Ok(())
    })
}

/// A write into an empty pipe, then one read of it (the kernel's `copy_to_user` from the
/// pipe's pages). 64 KiB is the default pipe's capacity: the write completes without a reader.
fn pipe_read(distance: usize) -> anyhow::Result<Duration> {
    let (mut rx, mut tx) = std::io::pipe()?;
    time_copies(distance, |src, dst| {
        tx.write_all(src)?;
        rx.read_exact(dst)
    })
}

/// Every row, the aligned case of each copy first.
pub fn measure() -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for distance in [0, 16, 64] {
        rows.push(Row {
            what: "`memcpy` (user space)",
            distance,
            per_copy: memcpy(distance)?,
        });
    }
    for distance in [0, 16, 64] {
        rows.push(Row {
            what: "pipe `write` then `read` (kernel)",
            distance,
            per_copy: pipe_read(distance)?,
        });
    }
    Ok(rows)
}
