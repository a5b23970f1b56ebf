//! A purpose-built in-memory pipe between the host and a guest's stdin, stdout or stderr.
//!
//! ```text
//!   host  PipeWriter (AsyncWrite) ─► [ VecDeque<Bytes> ≤ capacity ] ─► GuestInput  (p2 InputStream)
//!   guest GuestOutput (p2 OutputStream) ─► [ VecDeque<Bytes> ≤ capacity ] ─► PipeReader (AsyncRead)
//! ```
//!
//! Why not wasmtime-wasi's `AsyncStdinStream`/`AsyncStdoutStream` over a tokio duplex: those
//! spawn one tokio task per stream and copy every byte twice more (into the task's buffer, then
//! into the duplex). Here a guest write hands its `Bytes` over as they are, a guest read takes
//! a slice of what the host wrote, no task is spawned, and a waker is only woken when someone
//! is waiting. The buffer is bounded by `capacity` both ways (backpressure), so a flooding guest
//! cannot grow host memory.
//!
//! Blocking writes complete in full, as on a Linux pipe. wasi-libc's `write()` (CPython,
//! C guests) asks `check-write` for a permit, writes at most that much, and returns the count;
//! much code written for blocking pipes (cbor2, for one) never retries a short write. So while
//! the pipe holds less than `capacity`, a guest may write up to [`WRITE_PERMIT`] bytes in one
//! call; the pipe then holds more than `capacity` until the host reads, and the guest's next
//! `blocking-flush` (which wasi-libc calls after every write) or `check-write` waits until it is
//! back under `capacity`. The guest, not the host's buffer, absorbs the wait: what the pipe
//! holds stays below `capacity + WRITE_PERMIT`, and those bytes were already in the guest's
//! own (capped) linear memory.
//!
//! Closing: the host closes its end by dropping it (or `poll_shutdown` on the writer); the
//! guest's end closes when the store drops its last handle. A reader sees EOF once the writer
//! is closed and the buffer is empty, so bytes written before a guest trapped still arrive.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use wasmtime_wasi::cli::{IsTerminal, StdinStream, StdoutStream};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamError, StreamResult};

use crate::run::transport::{BytesSink, BytesSource};

/// The most one guest write to stdout or stderr may hand over while the pipe is under its
/// capacity: the default `max_frame_bytes`, so a frame written with one `write()` arrives whole.
/// A larger write is short (the guest's libc returns the count, as POSIX allows).
pub(crate) const WRITE_PERMIT: usize = 16 << 20;

/// Make a pipe holding at most `capacity` unread bytes (a guest output pipe: at most
/// `capacity - 1 + WRITE_PERMIT`, see the module docs).
fn shared(capacity: usize) -> Arc<Shared> {
    Arc::new(Shared {
        state: Mutex::new(State {
            chunks: VecDeque::new(),
            len: 0,
            capacity: capacity.max(1),
            writers: 1,
            readers: 1,
            write_closed: false,
            reader_waker: None,
            writer_waker: None,
        }),
    })
}

/// The guest's stdin: the host writes, the guest reads.
pub(crate) fn stdin_pipe(capacity: usize) -> (PipeWriter, GuestStdin) {
    let shared = shared(capacity);
    (
        PipeWriter {
            shared: shared.clone(),
        },
        GuestStdin(GuestInput { shared }),
    )
}

/// The guest's stdout (or stderr): the guest writes, the host reads.
pub(crate) fn stdout_pipe(capacity: usize) -> (GuestStdout, PipeReader) {
    let shared = shared(capacity);
    (
        GuestStdout(GuestOutput {
            shared: shared.clone(),
        }),
        PipeReader { shared },
    )
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Unread bytes, oldest first, each chunk non-empty.
    chunks: VecDeque<Bytes>,
    /// Sum of the chunks' lengths.
    len: usize,
    capacity: usize,
    /// Live writing handles; 0 means the writer is gone.
    writers: usize,
    /// Live reading handles; 0 means nobody will ever read again.
    readers: usize,
    /// The writer shut down while handles remain.
    write_closed: bool,
    reader_waker: Option<Waker>,
    writer_waker: Option<Waker>,
}

impl State {
    fn writer_gone(&self) -> bool {
        self.writers == 0 || self.write_closed
    }

    fn room(&self) -> usize {
        self.capacity.saturating_sub(self.len)
    }

    /// What a guest may write to its stdout or stderr now: nothing while the pipe is full,
    /// otherwise one write of up to [`WRITE_PERMIT`] bytes (see the module docs).
    fn guest_permit(&self) -> usize {
        if self.room() > 0 { WRITE_PERMIT } else { 0 }
    }

    fn push(&mut self, bytes: Bytes) -> Option<Waker> {
        if bytes.is_empty() {
            return None;
        }
        self.len += bytes.len();
        self.chunks.push_back(bytes);
        self.reader_waker.take()
    }

    /// Take up to `max` bytes from the front: the front chunk as it is when it alone fills the
    /// read (or is all there is), else several chunks gathered into one buffer, so a guest
    /// reading a stream of small frames makes one host call per read, not one per frame.
    fn pop(&mut self, max: usize) -> (Bytes, Option<Waker>) {
        let Some(front_len) = self.chunks.front().map(Bytes::len) else {
            return (Bytes::new(), None);
        };
        let out = if front_len >= max {
            match self.chunks.front_mut() {
                Some(front) => front.split_to(max),
                None => Bytes::new(),
            }
        } else if front_len == self.len {
            self.chunks.pop_front().unwrap_or_default()
        } else {
            let mut gathered = BytesMut::with_capacity(self.len.min(max));
            while gathered.len() < max {
                let Some(front) = self.chunks.front_mut() else {
                    break;
                };
                let n = front.len().min(max - gathered.len());
                gathered.extend_from_slice(&front[..n]);
                front.advance(n);
                if front.is_empty() {
                    self.chunks.pop_front();
                }
            }
            gathered.freeze()
        };
        if out.is_empty() {
            return (out, None);
        }
        self.len -= out.len();
        (out, self.writer_waker.take())
    }

    /// Copy up to `dst.remaining()` bytes into `dst`.
    fn copy_into(&mut self, dst: &mut ReadBuf<'_>) -> Option<Waker> {
        let mut copied = 0;
        while dst.remaining() > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let n = front.len().min(dst.remaining());
            dst.put_slice(&front[..n]);
            front.advance(n);
            copied += n;
            if front.is_empty() {
                self.chunks.pop_front();
            }
        }
        self.len -= copied;
        if copied > 0 {
            self.writer_waker.take()
        } else {
            None
        }
    }
}

/// Register `cx`'s waker in `slot`, waking a different one it replaces (two guest handles of
/// one stream polled from different tasks must both make progress).
fn register(slot: &mut Option<Waker>, cx: &Context<'_>) -> Option<Waker> {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => None,
        _ => slot.replace(cx.waker().clone()),
    }
}

fn wake(w: Option<Waker>) {
    if let Some(w) = w {
        w.wake();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; recover the state if something ever did.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ready when a read would not return "nothing yet".
    fn poll_readable(&self, cx: &Context<'_>) -> Poll<()> {
        let mut s = self.lock();
        if s.len > 0 || s.writer_gone() {
            return Poll::Ready(());
        }
        let old = register(&mut s.reader_waker, cx);
        drop(s);
        wake(old);
        Poll::Pending
    }

    /// Ready when a write would be accepted (or fail for good).
    fn poll_writable(&self, cx: &Context<'_>) -> Poll<()> {
        let mut s = self.lock();
        if s.room() > 0 || s.readers == 0 {
            return Poll::Ready(());
        }
        let old = register(&mut s.writer_waker, cx);
        drop(s);
        wake(old);
        Poll::Pending
    }

    fn add_writer(self: &Arc<Self>) -> Arc<Self> {
        self.lock().writers += 1;
        self.clone()
    }

    fn add_reader(self: &Arc<Self>) -> Arc<Self> {
        self.lock().readers += 1;
        self.clone()
    }

    /// Push what `take(n)` gives for the `n` of `len` bytes the pipe has room for; `Pending`
    /// (the writer's waker kept) while it has none. Every host-side writer goes through it.
    fn poll_push(
        &self,
        cx: &mut Context<'_>,
        len: usize,
        take: impl FnOnce(usize) -> Bytes,
    ) -> Poll<io::Result<usize>> {
        let mut s = self.lock();
        if s.readers == 0 {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if s.write_closed {
            return Poll::Ready(Err(io::Error::other("write after shutdown")));
        }
        let n = s.room().min(len);
        if n == 0 {
            let old = register(&mut s.writer_waker, cx);
            drop(s);
            wake(old);
            return Poll::Pending;
        }
        let w = s.push(take(n));
        drop(s);
        wake(w);
        Poll::Ready(Ok(n))
    }

    /// The host's read: what `take` takes while the pipe holds bytes, `end()` once it is empty
    /// and the writer is gone, else wait for the writer.
    fn poll_take<T>(
        &self,
        cx: &Context<'_>,
        take: impl FnOnce(&mut State) -> (T, Option<Waker>),
        end: impl FnOnce() -> T,
    ) -> Poll<T> {
        let mut s = self.lock();
        if s.len > 0 {
            let (taken, w) = take(&mut s);
            drop(s);
            wake(w);
            return Poll::Ready(taken);
        }
        if s.writer_gone() {
            return Poll::Ready(end());
        }
        let old = register(&mut s.reader_waker, cx);
        drop(s);
        wake(old);
        Poll::Pending
    }

    fn close_write(&self) {
        let mut s = self.lock();
        s.write_closed = true;
        let w = s.reader_waker.take();
        drop(s);
        wake(w);
    }

    fn drop_writer(&self) {
        let mut s = self.lock();
        s.writers -= 1;
        let w = if s.writers == 0 {
            s.reader_waker.take()
        } else {
            None
        };
        drop(s);
        wake(w);
    }

    fn drop_reader(&self) {
        let mut s = self.lock();
        s.readers -= 1;
        let w = if s.readers == 0 {
            // Nobody reads any more: free what is buffered and release a blocked writer.
            s.chunks.clear();
            s.len = 0;
            s.writer_waker.take()
        } else {
            None
        };
        drop(s);
        wake(w);
    }
}

/// The host's end of the guest's stdin.
#[derive(Debug)]
pub(crate) struct PipeWriter {
    shared: Arc<Shared>,
}

impl Drop for PipeWriter {
    fn drop(&mut self) {
        self.shared.drop_writer();
    }
}

impl BytesSink for PipeWriter {
    /// The guest reads `bytes` where they lie: a frame the host already holds as `Bytes` is
    /// not copied (split only where the pipe's capacity makes the writer wait).
    fn poll_write_bytes(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &mut Bytes,
    ) -> Poll<io::Result<()>> {
        let len = bytes.len();
        self.shared
            .poll_push(cx, len, |n| bytes.split_to(n))
            .map_ok(|_| ())
    }
}

impl AsyncWrite for PipeWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.shared
            .poll_push(cx, buf.len(), |n| Bytes::copy_from_slice(&buf[..n]))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Written bytes are visible to the guest at once.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shared.close_write();
        Poll::Ready(Ok(()))
    }
}

/// The host's end of the guest's stdout or stderr.
#[derive(Debug)]
pub(crate) struct PipeReader {
    shared: Arc<Shared>,
}

impl Drop for PipeReader {
    fn drop(&mut self) {
        self.shared.drop_reader();
    }
}

impl AsyncRead for PipeReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        // Nothing read at the end: EOF.
        self.shared
            .poll_take(cx, |s| ((), s.copy_into(buf)), || ())
            .map(Ok)
    }
}

impl BytesSource for PipeReader {
    fn poll_one_write(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.shared.poll_take(
            cx,
            |s| match s.chunks.len() {
                1 => {
                    let (bytes, w) = s.pop(usize::MAX);
                    (Some(bytes), w)
                }
                _ => (None, None),
            },
            || Some(Bytes::new()),
        )
    }
}

/// What the `WasiCtx` holds for stdin; every `get-stdin` gets a handle on the same pipe.
#[derive(Debug)]
pub(crate) struct GuestStdin(GuestInput);

/// What the `WasiCtx` holds for stdout or stderr.
#[derive(Debug)]
pub(crate) struct GuestStdout(GuestOutput);

impl IsTerminal for GuestStdin {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl IsTerminal for GuestStdout {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdinStream for GuestStdin {
    fn async_stream(&self) -> Box<dyn AsyncRead + Send + Sync> {
        Box::new(PipeReaderHandle(self.0.clone()))
    }
    fn p2_stream(&self) -> Box<dyn InputStream> {
        Box::new(self.0.clone())
    }
}

impl StdoutStream for GuestStdout {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(PipeWriterHandle(self.0.clone()))
    }
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.0.clone())
    }
}

/// One guest handle on its stdin.
#[derive(Debug)]
pub(crate) struct GuestInput {
    shared: Arc<Shared>,
}

impl Clone for GuestInput {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.add_reader(),
        }
    }
}

impl Drop for GuestInput {
    fn drop(&mut self) {
        self.shared.drop_reader();
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestInput {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| self.shared.poll_readable(cx)).await
    }
}

impl InputStream for GuestInput {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        let mut s = self.shared.lock();
        if s.len == 0 {
            return if s.writer_gone() {
                Err(StreamError::Closed)
            } else {
                Ok(Bytes::new())
            };
        }
        let (bytes, w) = s.pop(size);
        drop(s);
        wake(w);
        Ok(bytes)
    }
}

/// One guest handle on its stdout or stderr.
#[derive(Debug)]
pub(crate) struct GuestOutput {
    shared: Arc<Shared>,
}

impl Clone for GuestOutput {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.add_writer(),
        }
    }
}

impl Drop for GuestOutput {
    fn drop(&mut self) {
        self.shared.drop_writer();
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {
        std::future::poll_fn(|cx| self.shared.poll_writable(cx)).await
    }
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let mut s = self.shared.lock();
        if s.readers == 0 {
            return Err(StreamError::Closed);
        }
        if bytes.len() > s.guest_permit() {
            return Err(StreamError::Trap(wasmtime::format_err!(
                "write of {} bytes exceeds the permitted {}",
                bytes.len(),
                s.guest_permit()
            )));
        }
        let w = s.push(bytes);
        drop(s);
        wake(w);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        // Written bytes are visible to the host at once: there is nothing to flush.
        if self.shared.lock().readers == 0 {
            return Err(StreamError::Closed);
        }
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        let s = self.shared.lock();
        if s.readers == 0 {
            return Err(StreamError::Closed);
        }
        Ok(s.guest_permit())
    }
}

/// The guest's stdin as a tokio reader (only WASI p3 asks for it).
struct PipeReaderHandle(GuestInput);

impl AsyncRead for PipeReaderHandle {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let shared = &self.0.shared;
        let mut s = shared.lock();
        if s.len > 0 {
            let w = s.copy_into(buf);
            drop(s);
            wake(w);
            return Poll::Ready(Ok(()));
        }
        if s.writer_gone() {
            return Poll::Ready(Ok(()));
        }
        let old = register(&mut s.reader_waker, cx);
        drop(s);
        wake(old);
        Poll::Pending
    }
}

/// The guest's stdout as a tokio writer (only WASI p3 asks for it).
struct PipeWriterHandle(GuestOutput);

impl AsyncWrite for PipeWriterHandle {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.0
            .shared
            .poll_push(cx, buf.len(), |n| Bytes::copy_from_slice(&buf[..n]))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::transport::{PluginStdin, PluginStdout};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn host_to_guest_bytes_arrive_in_order_then_eof() {
        let (mut host, stdin) = stdin_pipe(8);
        let mut guest = stdin.p2_stream();
        assert_eq!(guest.read(4).expect("read"), Bytes::new());
        host.write_all(b"abcdef").await.expect("write");
        assert_eq!(guest.read(4).expect("read"), Bytes::from_static(b"abcd"));
        assert_eq!(guest.read(100).expect("read"), Bytes::from_static(b"ef"));
        host.shutdown().await.expect("shutdown");
        assert!(matches!(guest.read(1), Err(StreamError::Closed)));
    }

    #[tokio::test]
    async fn one_guest_read_gathers_several_host_writes() {
        let (mut host, stdin) = stdin_pipe(64);
        let mut guest = stdin.p2_stream();
        for piece in [&b"ab"[..], b"cd", b"ef"] {
            host.write_all(piece).await.expect("write");
        }
        assert_eq!(guest.read(5).expect("read"), Bytes::from_static(b"abcde"));
        assert_eq!(guest.read(5).expect("read"), Bytes::from_static(b"f"));
        assert_eq!(guest.read(5).expect("read"), Bytes::new());
        host.write_all(b"0123456789").await.expect("write");
        assert_eq!(guest.read(4).expect("read"), Bytes::from_static(b"0123"));
        assert_eq!(guest.read(0).expect("read"), Bytes::new());
        assert_eq!(guest.read(64).expect("read"), Bytes::from_static(b"456789"));
    }

    #[tokio::test]
    async fn a_full_stdin_blocks_the_host_until_the_guest_reads() {
        let (mut host, stdin) = stdin_pipe(4);
        let mut guest = stdin.p2_stream();
        let writer = tokio::spawn(async move {
            host.write_all(b"0123456789").await.expect("write");
        });
        let mut got = Vec::new();
        while got.len() < 10 {
            got.extend_from_slice(&guest.blocking_read(3).await.expect("read"));
        }
        assert_eq!(got, b"0123456789");
        writer.await.expect("writer");
        // The host end is gone: EOF after the buffer is empty.
        assert!(matches!(guest.read(1), Err(StreamError::Closed)));
    }

    #[tokio::test]
    async fn bytes_handed_over_reach_the_guest_where_they_lie_and_wait_for_room() {
        let (host, stdin) = stdin_pipe(4);
        let mut guest = stdin.p2_stream();
        let frame = Bytes::from_static(b"0123456789");
        let writer = tokio::spawn({
            let frame = frame.clone();
            async move {
                let mut host = PluginStdin::Guest(Box::pin(host));
                host.write_bytes(frame).await.expect("write");
                host
            }
        });
        let mut got = Vec::new();
        let mut first = true;
        while got.len() < 10 {
            let part = guest.blocking_read(16).await.expect("read");
            if first && !part.is_empty() {
                // The first part is the frame's own memory, not a copy of it.
                assert_eq!(part.as_ptr(), frame.as_ptr());
                first = false;
            }
            got.extend_from_slice(&part);
        }
        assert_eq!(got, b"0123456789");
        drop(writer.await.expect("writer"));
        assert!(matches!(guest.read(1), Err(StreamError::Closed)));
    }

    #[tokio::test]
    async fn one_guest_write_reaches_an_empty_host_buffer_where_it_lies() {
        let (stdout, host) = stdout_pipe(1 << 10);
        let mut guest = stdout.p2_stream();
        let mut host = PluginStdout::Guest(Box::pin(host));
        let frame = Bytes::from(vec![7u8; 300]);
        let at = frame.as_ptr();
        guest.write(frame).expect("write");
        let mut buf = BytesMut::new();
        assert_eq!(host.take_one_write(&mut buf).await, Some(300));
        assert_eq!(buf.as_ptr(), at, "the write's own memory, not a copy");
        // Into a buffer that holds bytes, nothing is handed over: the caller reads into it.
        guest.write(Bytes::from_static(b"!")).expect("write");
        assert_eq!(host.take_one_write(&mut buf).await, None);
        buf.reserve(16);
        assert_eq!(host.read_into(&mut buf).await.expect("read"), 1);
        assert_eq!((buf.len(), buf[300]), (301, b'!'));
        // Two writes waiting are read, not gathered into a buffer of their own.
        guest.write(Bytes::from_static(b"{}")).expect("write");
        guest.write(Bytes::from_static(b"\n")).expect("write");
        let mut buf = BytesMut::new();
        assert_eq!(host.take_one_write(&mut buf).await, None);
        buf.reserve(16);
        assert_eq!(host.read_into(&mut buf).await.expect("read"), 3);
        assert_eq!(&buf[..], b"{}\n");
        // The end is an empty write.
        drop(guest);
        drop(stdout);
        assert_eq!(host.take_one_write(&mut BytesMut::new()).await, Some(0));
    }

    #[tokio::test]
    async fn guest_output_is_bounded_and_survives_the_guest() {
        let (stdout, mut host) = stdout_pipe(5);
        let mut guest = stdout.p2_stream();
        assert_eq!(guest.check_write().expect("permit"), WRITE_PERMIT);
        guest.write(Bytes::from_static(b"hel")).expect("write");
        // Under capacity: one more write of any size up to the permit is accepted whole.
        assert_eq!(guest.check_write().expect("permit"), WRITE_PERMIT);
        guest.write(Bytes::from_static(b"lo")).expect("write");
        // At capacity: nothing more until the host reads.
        assert_eq!(guest.check_write().expect("permit"), 0);
        assert!(matches!(
            guest.write(Bytes::from_static(b"!")),
            Err(StreamError::Trap(_))
        ));
        // The guest (and the ctx holding the factory) goes away: what it wrote still arrives.
        drop(guest);
        drop(stdout);
        let mut out = Vec::new();
        host.read_to_end(&mut out).await.expect("read");
        assert_eq!(out, b"hello");
    }

    #[tokio::test]
    async fn a_write_larger_than_the_pipe_completes_whole_and_the_flush_waits_for_the_host() {
        let (stdout, mut host) = stdout_pipe(8);
        let mut guest = stdout.p2_stream();
        let big: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        // What wasi-libc's write() does: one permit, one write, then a blocking flush.
        let permit = guest.check_write().expect("permit");
        assert!(permit >= big.len(), "permit {permit}");
        guest.write(Bytes::from(big.clone())).expect("one write");
        assert_eq!(guest.check_write().expect("permit"), 0, "over capacity now");
        let flusher = tokio::spawn(async move {
            // The host's `blocking-flush`: flush, then wait until writable.
            guest.flush().expect("flush");
            guest.write_ready().await.expect("writable");
            guest
        });
        let mut got = vec![0; big.len() - 4];
        host.read_exact(&mut got).await.expect("read");
        let mut guest = flusher
            .await
            .expect("flush returns once the pipe is under capacity");
        assert_eq!(guest.check_write().expect("permit"), WRITE_PERMIT);
        drop(guest);
        drop(stdout);
        host.read_to_end(&mut got).await.expect("rest");
        assert_eq!(got, big);
        // More than the permit in one call breaks the contract, as with any stream.
        let (stdout, _host) = stdout_pipe(8);
        let mut guest = stdout.p2_stream();
        assert!(matches!(
            guest.write(Bytes::from(vec![0; WRITE_PERMIT + 1])),
            Err(StreamError::Trap(_))
        ));
    }

    #[tokio::test]
    async fn a_dropped_host_reader_closes_the_guest_stdout() {
        let (stdout, host) = stdout_pipe(5);
        let mut guest = stdout.p2_stream();
        guest.write(Bytes::from_static(b"x")).expect("write");
        drop(host);
        assert!(matches!(guest.check_write(), Err(StreamError::Closed)));
        assert!(matches!(
            guest.write(Bytes::from_static(b"y")),
            Err(StreamError::Closed)
        ));
    }

    #[tokio::test]
    async fn a_dropped_guest_stdin_is_a_broken_pipe_for_the_host() {
        let (mut host, stdin) = stdin_pipe(5);
        drop(stdin);
        let err = host.write_all(b"x").await.expect_err("broken pipe");
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }

    #[tokio::test]
    async fn a_waiting_guest_wakes_when_the_host_writes() {
        let (mut host, stdin) = stdin_pipe(64);
        let mut guest = stdin.p2_stream();
        let reader = tokio::spawn(async move { guest.blocking_read(64).await.map(|b| b.len()) });
        tokio::task::yield_now().await;
        host.write_all(b"ping").await.expect("write");
        assert_eq!(reader.await.expect("task").expect("read"), 4);
    }
}
