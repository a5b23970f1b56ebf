//! sandpipe's own stdin and stdout, the engine's side of the bridge.
//!
//! `tokio::io::stdin`/`stdout` run every read and write on the blocking thread pool, so each
//! frame crossed two thread hand-offs each way; through `sandpipe run` a 100 B round trip cost
//! three times the native plugin's. When stdin or stdout is a pipe or a socket (what an engine
//! gives its plugin), it is switched to non-blocking mode and registered with the reactor
//! (`AsyncFd`): a read or write is one system call on the thread that runs the bridge. The
//! original flags are restored on drop. A terminal or a regular file keeps tokio's blocking
//! path (O_NONBLOCK on a terminal would leak to the shell sharing it, and epoll refuses regular
//! files).

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use bytes::BytesMut;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};

/// Capacity asked for on sandpipe's stdin and stdout when they are pipes: what a native
/// plugin's pipes get (`native::PIPE_BYTES`), so a large frame crosses in one write.
const PIPE_BYTES: libc::c_int = 1 << 20;

/// A standard descriptor in non-blocking mode; its flags are restored on drop.
#[derive(Debug)]
pub(crate) struct NonBlocking {
    fd: RawFd,
    flags: libc::c_int,
}

impl AsRawFd for NonBlocking {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl NonBlocking {
    /// `fd` switched to non-blocking, if it is a pipe or a socket.
    #[allow(unsafe_code)]
    fn new(fd: RawFd) -> Option<NonBlocking> {
        // SAFETY: fstat writes one `stat` into memory we own; fcntl takes plain integers. The
        // standard descriptors stay open for the life of the process.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0 {
                return None;
            }
            let kind = st.st_mode & libc::S_IFMT;
            if kind != libc::S_IFIFO && kind != libc::S_IFSOCK {
                return None;
            }
            if kind == libc::S_IFIFO {
                // A frame of 64 KiB and its newline do not fit the default 64 KiB pipe: the
                // engine's write would stop part-way until sandpipe had read, a switch each way
                // per frame. A refusal (EPERM above /proc/sys/fs/pipe-max-size) keeps the
                // default size.
                libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_BYTES);
            }
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
                return None;
            }
            Some(NonBlocking { fd, flags })
        }
    }

    #[allow(unsafe_code)]
    fn read(&self, buf: &mut BytesMut) -> io::Result<usize> {
        let spare = buf.spare_capacity_mut();
        // SAFETY: read writes at most `spare.len()` bytes into the spare capacity, which we own;
        // exactly the `n` bytes it reports are then marked initialized.
        let n = unsafe { libc::read(self.fd, spare.as_mut_ptr().cast(), spare.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: the kernel initialized `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
        Ok(n)
    }

    #[allow(unsafe_code)]
    fn write_vectored(&self, parts: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let count = libc::c_int::try_from(parts.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `IoSlice` is guaranteed ABI-compatible with `iovec` on Unix; writev reads
        // `count` of them, each describing a slice we borrow for the call.
        let n = unsafe { libc::writev(self.fd, parts.as_ptr().cast(), count) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// Register `fd` with the reactor for `interest`, if it is a pipe or a socket.
#[allow(unsafe_code)]
fn register(fd: RawFd, interest: Interest) -> Option<AsyncFd<NonBlocking>> {
    let nb = NonBlocking::new(fd)?;
    // SAFETY: a standard descriptor stays open, on the same file description, for the life of
    // the process: sandpipe never closes or replaces descriptors 0 and 1.
    unsafe { AsyncFd::register_with_interest(nb, interest) }.ok()
}

impl Drop for NonBlocking {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: fcntl on a standard descriptor with the flags it had.
        unsafe {
            libc::fcntl(self.fd, libc::F_SETFL, self.flags);
        }
    }
}

/// sandpipe's stdin.
#[derive(Debug)]
pub(crate) enum EngineStdin {
    Reactor(AsyncFd<NonBlocking>),
    Blocking(tokio::io::Stdin),
}

impl EngineStdin {
    /// Must be called inside the runtime.
    pub(crate) fn open() -> EngineStdin {
        match register(libc::STDIN_FILENO, Interest::READABLE) {
            Some(fd) => EngineStdin::Reactor(fd),
            None => EngineStdin::Blocking(tokio::io::stdin()),
        }
    }

    /// Read what is available into `buf`'s spare capacity; `Ok(0)` at end of stream.
    pub(crate) async fn read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            EngineStdin::Reactor(fd) => loop {
                let mut ready = fd.readable().await?;
                let room = buf.capacity() - buf.len();
                match ready.try_io(|fd| fd.get_ref().read(buf)) {
                    // A short read emptied the pipe: the next read would only say EAGAIN, so
                    // wait for the reactor's next event instead of asking (tokio's own
                    // readers do the same; an event that came meanwhile is kept).
                    Ok(Ok(n)) if n > 0 && n < room => {
                        ready.clear_ready();
                        return Ok(n);
                    }
                    Ok(result) => return result,
                    Err(_would_block) => continue,
                }
            },
            EngineStdin::Blocking(stdin) => stdin.read_buf(buf).await,
        }
    }
}

/// sandpipe's stdout.
#[derive(Debug)]
pub(crate) enum EngineStdout {
    Reactor(AsyncFd<NonBlocking>),
    Blocking(tokio::io::Stdout),
}

impl EngineStdout {
    /// Must be called inside the runtime.
    pub(crate) fn open() -> EngineStdout {
        match register(libc::STDOUT_FILENO, Interest::WRITABLE) {
            Some(fd) => EngineStdout::Reactor(fd),
            None => EngineStdout::Blocking(tokio::io::stdout()),
        }
    }

    /// Write all of `parts`, in order, as one stream of bytes (and flush): one `writev` where
    /// the pipe has room, so a frame and its delimiter go out without being copied together.
    pub(crate) async fn write_all_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        match self {
            EngineStdout::Reactor(fd) => {
                let mut slices: Vec<io::IoSlice<'_>> = parts
                    .iter()
                    .filter(|p| !p.is_empty())
                    .map(|p| io::IoSlice::new(p))
                    .collect();
                let mut rest = &mut slices[..];
                while !rest.is_empty() {
                    match fd.get_ref().write_vectored(rest) {
                        Ok(n) => io::IoSlice::advance_slices(&mut rest, n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            let mut ready = fd.writable().await?;
                            ready.clear_ready();
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
            EngineStdout::Blocking(stdout) => {
                for part in parts {
                    stdout.write_all(part).await?;
                }
                stdout.flush().await
            }
        }
    }

    /// Write all of `bytes` (and flush).
    pub(crate) async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all_parts(&[bytes]).await
    }
}
