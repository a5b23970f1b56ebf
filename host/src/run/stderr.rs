//! Draining a plugin's stderr: continuously (so the plugin never blocks on a full pipe),
//! into the log or the host's own stderr, keeping the last lines for error reports.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Where a plugin's stderr goes besides the tail kept for error reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StderrMode {
    /// Each line is logged with `tracing` at `INFO`, target `sandpipe::plugin`.
    #[default]
    Log,
    /// Copied to the host process's stderr as the plugin writes it (what a plugin binary run
    /// directly would do), a whole line at a time, so lines from the plugin's other streams
    /// never land inside one another. Used by `sandpipe run`.
    Inherit,
    /// Only the tail is kept.
    Discard,
}

/// The last lines a plugin wrote to stderr.
#[derive(Debug, Clone, Default)]
pub struct StderrTail {
    inner: Arc<Mutex<TailInner>>,
}

#[derive(Debug, Default)]
struct TailInner {
    lines: VecDeque<String>,
    partial: Vec<u8>,
    max_lines: usize,
    total_bytes: u64,
}

/// Longest line kept; longer lines are cut (a flood of one endless line stays bounded).
const MAX_LINE_BYTES: usize = 1024;

impl StderrTail {
    /// A tail that keeps `max_lines` lines.
    pub fn new(max_lines: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(TailInner {
                max_lines,
                ..TailInner::default()
            })),
        }
    }

    /// The kept lines, oldest first, including an unterminated last line.
    pub fn lines(&self) -> Vec<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<String> = inner.lines.iter().cloned().collect();
        if !inner.partial.is_empty() {
            out.push(String::from_utf8_lossy(&inner.partial).into_owned());
        }
        out
    }

    /// Bytes seen in all.
    pub fn total_bytes(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .total_bytes
    }

    /// Feed bytes, keeping the tail.
    pub(crate) fn push(&self, bytes: &[u8]) {
        self.feed(bytes, None);
    }

    /// [`push`](Self::push), also returning the lines the bytes completed (for logging).
    fn push_lines(&self, bytes: &[u8]) -> Vec<String> {
        let mut done = Vec::new();
        self.feed(bytes, Some(&mut done));
        done
    }

    fn feed(&self, mut bytes: &[u8], mut done: Option<&mut Vec<String>>) {
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let TailInner {
            lines,
            partial,
            max_lines,
            total_bytes,
        } = &mut *guard;
        *total_bytes += bytes.len() as u64;
        while !bytes.is_empty() {
            let end = memchr_nl(bytes);
            let piece = &bytes[..end.unwrap_or(bytes.len())];
            let room = MAX_LINE_BYTES.saturating_sub(partial.len());
            partial.extend_from_slice(&piece[..piece.len().min(room)]);
            let Some(end) = end else {
                break;
            };
            bytes = &bytes[end + 1..];
            // A line becomes a string only if it is kept or logged (a drain with no tail and
            // no log, such as a guest's stdout, makes none).
            if *max_lines > 0 || done.is_some() {
                let text = partial.strip_suffix(b"\r").unwrap_or(partial);
                let line = String::from_utf8_lossy(text).into_owned();
                match (done.as_deref_mut(), *max_lines > 0) {
                    (Some(done), true) => {
                        done.push(line.clone());
                        lines.push_back(line);
                    }
                    (Some(done), false) => done.push(line),
                    (None, _) => lines.push_back(line),
                }
                while lines.len() > *max_lines {
                    lines.pop_front();
                }
            }
            partial.clear();
        }
    }

    /// Read `stream` to EOF, keeping the tail and sending the bytes where `mode` says.
    pub(crate) async fn drain(
        self,
        stream: impl AsyncRead + Unpin,
        mode: StderrMode,
        plugin: String,
    ) {
        match mode {
            // The host's stderr going away must not stop the drain: the plugin would then
            // block on a full pipe. So write errors are ignored.
            // On a terminal, the plugin's escape sequences would be the terminal's commands
            // (a window title, OSC 52 writing the clipboard): they are shown quoted.
            StderrMode::Inherit => {
                let quote = std::io::IsTerminal::is_terminal(&std::io::stderr());
                self.forward(stream, HostStderr::default(), quote).await;
            }
            StderrMode::Log | StderrMode::Discard => {
                let mut stream = stream;
                let mut buf = vec![0u8; 8 * 1024];
                loop {
                    let n = match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let lines = self.push_lines(&buf[..n]);
                    if mode == StderrMode::Log {
                        for line in lines {
                            tracing::info!(target: "sandpipe::plugin", plugin = %plugin, "{line}");
                        }
                    }
                }
            }
        }
    }

    /// Copy `stream` to `sink` a whole line at a time, keeping the tail.
    ///
    /// A guest's stdout and stderr (and every plugin of a session) share sandpipe's stderr,
    /// and a program's unbuffered stderr arrives in pieces: Rust's `eprintln!("x: {v}")` is
    /// three writes. Forwarding each piece as it came would splice another stream's line into
    /// the middle of this one's. So only complete lines are written, each batch with one
    /// write; an unterminated last line is written once no more bytes come for
    /// [`PARTIAL_LINE_WAIT`] (a prompt or a progress line still shows), at [`MAX_HELD_BYTES`],
    /// or at EOF.
    async fn forward(
        &self,
        mut stream: impl AsyncRead + Unpin,
        mut sink: impl AsyncWrite + Unpin,
        quote: bool,
    ) {
        let mut buf = vec![0u8; 8 * 1024];
        let mut held: Vec<u8> = Vec::new();
        loop {
            let read = if held.is_empty() {
                stream.read(&mut buf).await
            } else {
                // Both readers sandpipe drains (its own pipe, a child's stderr) are
                // cancel-safe: a read that times out has taken nothing.
                match tokio::time::timeout(PARTIAL_LINE_WAIT, stream.read(&mut buf)).await {
                    Ok(read) => read,
                    Err(_) => {
                        emit(&mut sink, &held, quote).await;
                        let _ = sink.flush().await;
                        held.clear();
                        continue;
                    }
                }
            };
            let n = match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let bytes = &buf[..n];
            self.push(bytes);
            match bytes.iter().rposition(|&b| b == b'\n') {
                // The usual case, nothing held: the complete lines go out as they were read.
                Some(last) if held.is_empty() => {
                    emit(&mut sink, &bytes[..=last], quote).await;
                    held.extend_from_slice(&bytes[last + 1..]);
                }
                Some(last) => {
                    held.extend_from_slice(&bytes[..=last]);
                    emit(&mut sink, &held, quote).await;
                    held.clear();
                    held.extend_from_slice(&bytes[last + 1..]);
                }
                None => held.extend_from_slice(bytes),
            }
            if held.len() >= MAX_HELD_BYTES {
                emit(&mut sink, &held, quote).await;
                held.clear();
            }
        }
        emit(&mut sink, &held, quote).await;
        let _ = sink.flush().await;
    }
}

/// Write `bytes` to `sink`, quoted for a terminal when `quote`; a failed write is ignored (the
/// drain must go on, or the plugin would block on a full pipe).
async fn emit(sink: &mut (impl AsyncWrite + Unpin), bytes: &[u8], quote: bool) {
    let out = if quote {
        quote_controls(bytes)
    } else {
        std::borrow::Cow::Borrowed(bytes)
    };
    let _ = sink.write_all(&out).await;
}

/// `bytes` with every control character but newline, carriage return and tab written as
/// `\xNN` (C0 and DEL) or `\u{NN}` (the C1 controls, U+0080 to U+009F, which a UTF-8 terminal
/// also obeys), and bytes that are not UTF-8 as `\xNN`: what is left cannot move the cursor
/// beyond its line, set a title, or reach the clipboard. Text without them is not copied.
pub(crate) fn quote_controls(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    use std::io::Write;
    let plain = |c: char| matches!(c, '\n' | '\r' | '\t') || !(c.is_control());
    let clean = std::str::from_utf8(bytes).is_ok_and(|t| t.chars().all(plain));
    if clean {
        return std::borrow::Cow::Borrowed(bytes);
    }
    let mut out = Vec::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                c if plain(c) => {
                    let mut utf8 = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                }
                c if (c as u32) < 0x80 => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    std::borrow::Cow::Owned(out)
}

/// sandpipe's own stderr as the sink of forwarded lines.
///
/// `tokio::io::stderr()` hands every write to the blocking pool: a thread wake-up there and a
/// task wake-up back, about 7 µs per round trip for an oracle that logs two lines per call.
/// Here a write is one system call on the runtime's thread when it cannot block:
/// `pwritev2(RWF_NOWAIT)` on a pipe or socket with room (or `/dev/null`), a plain `write` on a
/// regular file or a character device that is not a terminal. Only when that would wait (a full
/// pipe: the engine is not reading our stderr) or is unsupported (a terminal, an older kernel)
/// does the write go through tokio's blocking path, so a stalled stderr still stalls only the
/// drain, never the runtime; the next write waits for that one, keeping the order.
#[derive(Debug, Default)]
pub(crate) struct HostStderr {
    slow: Option<tokio::io::Stderr>,
    /// A write handed to the blocking path may not have reached the descriptor yet.
    in_flight: bool,
}

impl HostStderr {
    fn slow(&mut self) -> Pin<&mut tokio::io::Stderr> {
        Pin::new(self.slow.get_or_insert_with(tokio::io::stderr))
    }
}

impl AsyncWrite for HostStderr {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.in_flight {
            let flushed = ready!(self.slow().poll_flush(cx));
            self.in_flight = false;
            flushed?;
        }
        match write_now(libc::STDERR_FILENO, buf) {
            Some(written) => Poll::Ready(written),
            None => {
                let written = ready!(self.slow().poll_write(cx, buf));
                self.in_flight = written.is_ok();
                Poll::Ready(written)
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.in_flight {
            return Poll::Ready(Ok(()));
        }
        let flushed = ready!(self.slow().poll_flush(cx));
        self.in_flight = false;
        Poll::Ready(flushed)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush(cx)
    }
}

/// How [`write_now`] writes to a descriptor, learnt at its first write.
static WRITE_MODE: AtomicU8 = AtomicU8::new(MODE_UNKNOWN);
const MODE_UNKNOWN: u8 = 0;
const MODE_NOWAIT: u8 = 1;
const MODE_PLAIN: u8 = 2;
const MODE_BLOCKING_POOL: u8 = 3;

/// Write `buf` to `fd` now if that cannot block; `None` if it would (or might) wait.
/// Used for the process's stderr: the learnt mode is one per process (a descriptor that turns
/// out not to do RWF_NOWAIT moves it on at any time).
#[allow(unsafe_code)]
fn write_now(fd: libc::c_int, buf: &[u8]) -> Option<io::Result<usize>> {
    loop {
        let mode = WRITE_MODE.load(Ordering::Relaxed);
        let n = match mode {
            MODE_UNKNOWN | MODE_NOWAIT => {
                let iov = libc::iovec {
                    iov_base: buf.as_ptr().cast_mut().cast(),
                    iov_len: buf.len(),
                };
                // SAFETY: pwritev2 reads `iov_len` bytes from one iovec over a slice we
                // borrow for the call. Offset -1 writes at the current position, as write()
                // does (pipes and sockets have none).
                unsafe {
                    libc::syscall(
                        libc::SYS_pwritev2,
                        libc::c_long::from(fd),
                        &iov as *const libc::iovec,
                        1 as libc::c_long,
                        -1 as libc::c_long,
                        0 as libc::c_long,
                        libc::c_long::from(libc::RWF_NOWAIT),
                    )
                }
            }
            MODE_PLAIN => {
                // SAFETY: write reads `buf.len()` bytes from a slice we borrow for the call.
                unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) as libc::c_long }
            }
            _ => return None,
        };
        if n >= 0 {
            if mode == MODE_UNKNOWN {
                WRITE_MODE.store(MODE_NOWAIT, Ordering::Relaxed);
            }
            return Some(Ok(n as usize));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return None,
            // The descriptor does not do RWF_NOWAIT (regular files, terminals, kernels before
            // 6.5 for pipes): choose once between a plain write and the blocking pool.
            Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS) if mode != MODE_PLAIN => {
                WRITE_MODE.store(plain_or_pool(fd), Ordering::Relaxed);
            }
            _ => return Some(Err(err)),
        }
    }
}

/// A plain write to a regular file, or to a character device that is not a terminal
/// (`/dev/null`), does not wait on a reader; anything else goes through the blocking pool.
#[allow(unsafe_code)]
fn plain_or_pool(fd: libc::c_int) -> u8 {
    // SAFETY: fstat writes one `stat` into memory we own; isatty takes an integer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return MODE_BLOCKING_POOL;
        }
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => MODE_PLAIN,
            libc::S_IFCHR if libc::isatty(fd) == 0 => MODE_PLAIN,
            _ => MODE_BLOCKING_POOL,
        }
    }
}

/// How long an unterminated line waits for the rest of itself before it is forwarded as it is.
const PARTIAL_LINE_WAIT: Duration = Duration::from_millis(100);

/// The most of one unterminated line held back; a longer line is forwarded in pieces.
const MAX_HELD_BYTES: usize = 64 * 1024;

fn memchr_nl(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_quoted_and_plain_text_is_not_copied() {
        let plain = "héllo\tworld\r\n".as_bytes();
        assert!(matches!(
            quote_controls(plain),
            std::borrow::Cow::Borrowed(_)
        ));
        let osc = b"a\x1b]52;c;eA==\x07 \xc2\x9b2J \xff\n";
        assert_eq!(
            quote_controls(osc).as_ref(),
            br"a\x1b]52;c;eA==\x07 \u{9b}2J \xff"
                .iter()
                .chain(b"\n")
                .copied()
                .collect::<Vec<u8>>()
        );
    }

    #[test]
    fn keeps_last_lines_and_partial() {
        let tail = StderrTail::new(2);
        tail.push(b"one\ntwo\r\nthr");
        tail.push(b"ee\nfour");
        assert_eq!(tail.lines(), vec!["two", "three", "four"]);
        assert_eq!(tail.total_bytes(), 19);
    }

    #[test]
    fn long_lines_are_cut() {
        let tail = StderrTail::new(4);
        tail.push(&vec![b'x'; 10_000]);
        tail.push(b"\n");
        assert_eq!(tail.lines()[0].len(), MAX_LINE_BYTES);
    }

    /// A sink that records each write it is given.
    #[derive(Clone, Default)]
    struct Writes(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Writes {
        fn taken(&self) -> Vec<String> {
            let w = self.0.lock().unwrap_or_else(|p| p.into_inner());
            w.iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect()
        }
    }

    impl AsyncWrite for Writes {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(buf.to_vec());
            std::task::Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn spawn_forward(
        tail: StderrTail,
        stream: tokio::io::DuplexStream,
        sink: Writes,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move { tail.forward(stream, sink, false).await })
    }

    #[tokio::test]
    async fn a_line_written_in_pieces_is_forwarded_whole() {
        let (mut plugin, host) = tokio::io::duplex(1024);
        let sink = Writes::default();
        let tail = StderrTail::new(4);
        let forward = spawn_forward(tail.clone(), host, sink.clone());
        // As `eprintln!("stderr: {msg}")` writes: three pieces.
        for piece in ["stderr: ", "hi", "\n", "two\nthr", "ee\n"] {
            plugin
                .write_all(piece.as_bytes())
                .await
                .expect("in-memory io");
            tokio::task::yield_now().await;
        }
        drop(plugin);
        forward.await.expect("in-memory io");
        let writes = sink.taken();
        assert_eq!(writes.concat(), "stderr: hi\ntwo\nthree\n");
        assert!(writes.iter().all(|w| w.ends_with('\n')), "{writes:?}");
        assert_eq!(tail.lines(), vec!["stderr: hi", "two", "three"]);
    }

    #[tokio::test]
    async fn lines_of_two_streams_sharing_a_sink_stay_whole() {
        let sink = Writes::default();
        let (mut out, out_host) = tokio::io::duplex(1024);
        let (mut err, err_host) = tokio::io::duplex(1024);
        let drains = [
            spawn_forward(StderrTail::new(0), out_host, sink.clone()),
            spawn_forward(StderrTail::new(0), err_host, sink.clone()),
        ];
        for i in 0..50 {
            err.write_all(b"stderr: ").await.expect("in-memory io");
            tokio::task::yield_now().await;
            out.write_all(format!("stdout: {i}\n").as_bytes())
                .await
                .expect("in-memory io");
            tokio::task::yield_now().await;
            err.write_all(format!("{i}\n").as_bytes())
                .await
                .expect("in-memory io");
            tokio::task::yield_now().await;
        }
        drop((out, err));
        for d in drains {
            d.await.expect("in-memory io");
        }
        let text = sink.taken().concat();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 100);
        for i in 0..50 {
            assert!(lines.contains(&format!("stdout: {i}").as_str()), "{text}");
            assert!(lines.contains(&format!("stderr: {i}").as_str()), "{text}");
        }
    }

    /// A pipe nobody reads: writes go in while it has room, then `write_now` declines instead of
    /// blocking (the blocking pool takes over), and takes writes again once it is read.
    #[test]
    #[allow(unsafe_code)]
    fn write_now_never_waits_on_a_full_pipe() {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array we own; both are closed below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let [r, w] = fds;
        let line = [b'x'; 4096];
        let mut written = 0usize;
        while let Some(n) = write_now(w, &line) {
            written += n.expect("writing to a pipe");
            assert!(written <= 16 << 20, "a pipe took 16 MiB without a reader");
        }
        assert!(written >= 4096, "the empty pipe took nothing");
        let mut sink = vec![0u8; written];
        // SAFETY: read writes at most `sink.len()` bytes into a buffer we own.
        let got = unsafe { libc::read(r, sink.as_mut_ptr().cast(), sink.len()) };
        assert!(got > 0);
        assert!(matches!(write_now(w, b"more\n"), Some(Ok(5))));
        // SAFETY: both descriptors are ours and closed once.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
    }

    #[tokio::test]
    async fn an_unterminated_line_is_forwarded_when_nothing_more_comes() {
        let (mut plugin, host) = tokio::io::duplex(1024);
        let sink = Writes::default();
        let forward = spawn_forward(StderrTail::new(1), host, sink.clone());
        plugin.write_all(b"password: ").await.expect("in-memory io");
        // The plugin stays open and silent: the prompt still shows.
        let shown = async {
            while sink.taken().concat() != "password: " {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), shown)
            .await
            .expect("the prompt was forwarded");
        drop(plugin);
        forward.await.expect("in-memory io");
        assert_eq!(sink.taken().concat(), "password: ");
    }
}
