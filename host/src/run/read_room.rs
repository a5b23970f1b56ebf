//! Where a read lands in its buffer.
//!
//! A 64 KiB copy whose destination lies 1 to 31 bytes past its source, modulo 4096, runs about
//! 17 times slower than any other on the AMD EPYC machines sandpipe is measured on: `rep
//! movsb`, which both the kernel's `copy_to_user` and glibc 2.36's `memcpy` use for a copy this
//! large, loses its fast path on that 4 KiB aliasing (measured: 22.5 µs against 1.3 µs for a
//! 64 KiB `memcpy`; about 24 µs more for each 64 KiB `read` from a pipe). A pipe's pages are
//! filled from their start, and a buffer as large as a frame comes from `mmap`, 16 bytes into
//! a page: every read of a large frame from a pipe hit it. So an empty buffer starts its next
//! read on a 64-byte boundary, which is never 1 to 31 bytes past the start of a page.

use bytes::{Buf, BufMut, BytesMut};

/// The boundary an empty buffer's next read starts on.
const ALIGN: usize = 64;

/// Reserve room for a read of `additional` bytes ([`BytesMut::reserve`]), starting on a 64-byte
/// boundary when `buf` holds nothing. The engine reader's (`cli/engine.rs`), under feature
/// `cli`; a session's reads go through [`start_on_boundary`].
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub(crate) fn reserve_read_room(buf: &mut BytesMut, additional: usize) {
    let slack = if buf.is_empty() { ALIGN } else { 0 };
    buf.reserve(additional + slack);
    start_on_boundary(buf);
}

/// When `buf` holds nothing, move its start to the next 64-byte boundary its spare room
/// allows. What a buffer holds is never moved, and nothing is allocated.
pub(crate) fn start_on_boundary(buf: &mut BytesMut) {
    if !buf.is_empty() {
        return;
    }
    let gap = buf.as_ptr().align_offset(ALIGN);
    if gap != 0 && gap < buf.capacity() {
        buf.put_bytes(0, gap);
        buf.advance(gap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_buffer_reads_on_a_boundary_and_a_partial_frame_stays_put() {
        let mut buf = BytesMut::with_capacity(16);
        for additional in [1, 100, 64 * 1024, 200 * 1024] {
            buf.clear();
            reserve_read_room(&mut buf, additional);
            assert!(buf.is_empty());
            assert_eq!(buf.as_ptr() as usize % ALIGN, 0);
            assert!(buf.capacity() >= additional);
        }
        buf.extend_from_slice(b"half a frame");
        let start = buf.as_ptr();
        reserve_read_room(&mut buf, 16);
        start_on_boundary(&mut buf);
        assert_eq!(&buf[..], b"half a frame");
        assert_eq!(buf.as_ptr(), start);
        assert!(buf.capacity() - buf.len() >= 16);
        // A frame split off and dropped: the buffer is reused, again from a boundary.
        buf.extend_from_slice(&[7; 1000]);
        drop(buf.split().freeze());
        reserve_read_room(&mut buf, 64 * 1024);
        assert_eq!(buf.as_ptr() as usize % ALIGN, 0);
    }
}
