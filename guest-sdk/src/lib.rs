//! Write sandpipe plugins: a blocking stdin → framer → handler → stdout loop.
//!
//! The same plugin source builds for `wasm32-wasip2` (and `wasm32-wasip1`) and natively: it
//! only uses stdin and stdout (std's, except that on `wasm32-wasip2` frames go straight to the
//! `wasi:cli/stdout` stream, see [`PluginStdout`]), so the plugin behaves the same whether
//! sandpipe runs it inside wasmtime or as a native child process, and it also runs under any
//! other host that speaks the same framing.
//!
//! ```text
//!   stdin ──read──► BytesMut ──Framer::decode──► frame ──► your handler
//!                                                              │
//!   stdout ◄──write + flush per frame── Framer::encode ◄───────┘
//! ```
//!
//! What it does not do: threads, async, or protocol logic (that lives in `sandpipe-proto`).
//!
//! No cargo features.
//!
//! ## WebAssembly SIMD
//!
//! Build plugins with `-C target-feature=+simd128` (this workspace's `.cargo/config.toml` does,
//! for `wasm32-wasip2` and `wasm32-wasip1`): the JSON Lines newline search (`memchr`) then
//! takes 16 bytes a step instead of one word. Every engine sandpipe runs
//! on compiles such a plugin: wasmtime 48's Cranelift lowers all of `simd128` on the x86-64
//! baseline (SSE2; SSE4.1 and later instructions are used only where the CPU has them) and on
//! aarch64 (NEON), and sandpipe leaves `Config::wasm_simd` at its default, on. Another host
//! whose engine lacks SIMD (an interpreter without it, some embedded runtimes) refuses such a
//! plugin at load time, so a plugin meant for those is built without the flag; it then runs
//! the same code one word at a time. The framers do not walk JSON (see [`Framed::recv`]); a
//! handler's own parse is scalar either way.
//!
//! ```no_run
//! use sandpipe_guest::{Framing, Stdio};
//!
//! fn main() -> Result<(), sandpipe_guest::GuestError> {
//!     let mut io = Stdio::new(Framing::JsonLines);
//!     while let Some(frame) = io.recv()? {
//!         io.send(&frame)?; // echo
//!     }
//!     Ok(())
//! }
//! ```

use std::io::{self, Read, Write};

use bytes::{Buf, BytesMut};
/// The protocol types and machines, for handlers that name them.
pub use sandpipe_proto as proto;
use sandpipe_proto::frame::AnyFramer;
pub use sandpipe_proto::frame::{Bytes, FrameError, FrameLimits, Framer, Framing};
pub mod atp;
pub mod denobridge;
pub mod finecode;
pub mod oracle;
pub mod orchard;

/// What can go wrong in the plugin's own loop.
#[derive(Debug)]
#[non_exhaustive]
pub enum GuestError {
    /// Reading stdin or writing stdout failed.
    Io(io::Error),
    /// The host sent bytes that are not a valid frame, or a frame given to `send` breaks the
    /// framing (see [`Framed::send`]).
    Frame(FrameError),
}

impl std::fmt::Display for GuestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GuestError::Io(e) => write!(f, "stdio: {e}"),
            GuestError::Frame(e) => write!(f, "framing: {e}"),
        }
    }
}

impl std::error::Error for GuestError {}

impl From<io::Error> for GuestError {
    fn from(e: io::Error) -> Self {
        GuestError::Io(e)
    }
}

impl From<FrameError> for GuestError {
    fn from(e: FrameError) -> Self {
        GuestError::Frame(e)
    }
}

/// Size of the first reads from stdin: std's own stdin buffer size, so a read of this size
/// bypasses that buffer instead of being copied through it.
const FIRST_READ: usize = 8 * 1024;
/// Largest read from stdin: the capacity of the pipe sandpipe gives a plugin's stdin (1 MiB, wasm
/// or native), so a large frame the host wrote at once is read at once. The read buffer doubles
/// up to this whenever a read fills it, so an idle plugin keeps only a few KiB resident while one
/// fed large frames reads them in big steps.
const MAX_READ: usize = 1 << 20;

/// On `wasm32-wasip2`, frames up to this size are sent as one write of the framed bytes;
/// larger ones as their framing and the frame itself, uncopied (see [`Framed::send`]).
pub const DIRECT_WRITE: usize = 4096;

/// Whether [`Framed::send`] writes a large frame in place (on `wasm32-wasip2`).
const WRITE_IN_PLACE: bool = cfg!(all(target_os = "wasi", target_env = "p2"));

/// Framed stdin and stdout of this process.
pub type Stdio = Framed<PluginStdin, PluginStdout>;

/// This process's stdin, as [`Stdio`] reads it.
///
/// On `wasm32-wasip2` it holds the `wasi:cli/stdin` stream itself, and a read's bytes, which
/// the host has already written into a buffer of the guest's, become the framer's buffer as
/// they are when that is empty (the common case: one read, one frame), with no copy in the
/// guest. Through std's stdin the same bytes were copied twice more (into the read buffer,
/// then into the framer's), and a copy in a plugin built for wasm is a `memcpy` call that runs
/// about one wasm operator a byte. Elsewhere (native, `wasm32-wasip1`) it is std's stdin.
#[derive(Debug)]
pub struct PluginStdin {
    #[cfg(all(target_os = "wasi", target_env = "p2"))]
    stream: wasip2::io::streams::InputStream,
    #[cfg(not(all(target_os = "wasi", target_env = "p2")))]
    stdin: io::Stdin,
}

impl PluginStdin {
    /// This process's stdin.
    pub fn new() -> Self {
        #[cfg(all(target_os = "wasi", target_env = "p2"))]
        return PluginStdin {
            stream: wasip2::cli::stdin::get_stdin(),
        };
        #[cfg(not(all(target_os = "wasi", target_env = "p2")))]
        PluginStdin { stdin: io::stdin() }
    }
}

impl Default for PluginStdin {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a read into the scratch buffer starts: see [`Input`]'s implementation for `Read`.
const READ_ALIGN: usize = 64;

/// Where [`Framed`] reads frames from: any [`Read`], or [`PluginStdin`].
pub trait Input {
    /// Wait for input and append at most `len` bytes of it to `buf`, returning how many (0 at
    /// the end of input). `scratch` is the caller's reusable buffer, for a reader that needs
    /// one.
    fn read_into(
        &mut self,
        buf: &mut BytesMut,
        len: usize,
        scratch: &mut Vec<u8>,
    ) -> io::Result<usize>;

    /// Wait for input and hand over at most `len` bytes of it in a buffer of their own (empty
    /// at the end of input), or `None` for an input that only appends (the default, and what
    /// every [`Read`] does).
    ///
    /// [`Framed`] takes such a buffer over as its own when it holds no partial frame, and
    /// otherwise copies from it only as far as the partial frame needs: see [`Framed::recv`].
    fn read_chunk(&mut self, len: usize) -> Option<io::Result<Bytes>> {
        let _ = len;
        None
    }
}

impl<R: Read> Input for R {
    fn read_into(
        &mut self,
        buf: &mut BytesMut,
        len: usize,
        scratch: &mut Vec<u8>,
    ) -> io::Result<usize> {
        // Zeroed when it grows, not before every read (zero-filling 64 KiB per read was the top
        // item of the 100 B round-trip profile).
        if scratch.len() < len + READ_ALIGN {
            scratch.resize(len + READ_ALIGN, 0);
        }
        // The read lands on a 64-byte boundary: a large copy whose destination lies 1 to 31
        // bytes past its source (modulo 4096) is many times slower on AMD Zen, and a pipe's
        // pages are filled from their start while a buffer this large comes from `mmap`, 16
        // bytes into a page (sandpipe's host does the same; `sandpipe-bench --profile-frames`
        // measures it).
        let at = scratch.as_ptr().align_offset(READ_ALIGN).min(READ_ALIGN);
        let n = self.read(&mut scratch[at..at + len])?;
        buf.extend_from_slice(&scratch[at..at + n]);
        Ok(n)
    }
}

/// Natively and on `wasm32-wasip1`, std's stdin: the [`Read`] path of [`Input`].
#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
impl Read for PluginStdin {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stdin.read(buf)
    }
}

/// On `wasm32-wasip2`, the stream's own buffer becomes the framer's (see [`PluginStdin`]).
#[cfg(all(target_os = "wasi", target_env = "p2"))]
impl Input for PluginStdin {
    fn read_into(&mut self, buf: &mut BytesMut, len: usize, _: &mut Vec<u8>) -> io::Result<usize> {
        let chunk = self.read_chunk(len).unwrap_or_else(|| Ok(Bytes::new()))?;
        let n = chunk.len();
        if buf.is_empty() {
            *buf = BytesMut::from(chunk);
        } else {
            buf.extend_from_slice(&chunk);
        }
        Ok(n)
    }

    /// The list the host wrote into this guest's memory, as it lies: `Bytes::from(Vec)` takes
    /// the allocation over, and so does `BytesMut::from` a unique `Bytes`.
    fn read_chunk(&mut self, len: usize) -> Option<io::Result<Bytes>> {
        use wasip2::io::streams::StreamError;
        let len = u64::try_from(len).unwrap_or(u64::MAX);
        Some(match self.stream.blocking_read(len) {
            Ok(chunk) => Ok(Bytes::from(chunk)),
            Err(StreamError::Closed) => Ok(Bytes::new()),
            Err(e) => Err(stream_error(e)),
        })
    }
}

/// This process's stdout, as [`Stdio`] writes it.
///
/// On `wasm32-wasip2` it holds the `wasi:cli/stdout` stream itself and writes a frame of up to
/// 4 KiB with one `blocking-write-and-flush` call; std's stdout takes three host calls for the
/// same (`check-write`, `write`, `blocking-flush`), which was most of the guest's share of a
/// 100 B round trip. Larger frames go out in `check-write`-sized writes and one flush. Bytes
/// written through std's own stdout (`print!`) are buffered separately by std: a plugin that
/// mixes the two should flush std's stdout first. Elsewhere (native, `wasm32-wasip1`) it is
/// std's stdout.
#[derive(Debug)]
pub struct PluginStdout {
    #[cfg(all(target_os = "wasi", target_env = "p2"))]
    stream: wasip2::io::streams::OutputStream,
    /// Bytes written with `write` and not yet flushed.
    #[cfg(all(target_os = "wasi", target_env = "p2"))]
    unflushed: bool,
    #[cfg(not(all(target_os = "wasi", target_env = "p2")))]
    stdout: io::Stdout,
}

impl PluginStdout {
    /// This process's stdout.
    pub fn new() -> Self {
        #[cfg(all(target_os = "wasi", target_env = "p2"))]
        return PluginStdout {
            stream: wasip2::cli::stdout::get_stdout(),
            unflushed: false,
        };
        #[cfg(not(all(target_os = "wasi", target_env = "p2")))]
        PluginStdout {
            stdout: io::stdout(),
        }
    }
}

impl Default for PluginStdout {
    fn default() -> Self {
        Self::new()
    }
}

/// Largest `blocking-write-and-flush` the WASI spec allows.
#[cfg(all(target_os = "wasi", target_env = "p2"))]
const ONE_CALL_WRITE: usize = 4096;

#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn stream_error(e: wasip2::io::streams::StreamError) -> io::Error {
    match e {
        wasip2::io::streams::StreamError::Closed => io::ErrorKind::BrokenPipe.into(),
        wasip2::io::streams::StreamError::LastOperationFailed(e) => {
            io::Error::other(e.to_debug_string())
        }
    }
}

#[cfg(all(target_os = "wasi", target_env = "p2"))]
impl Write for PluginStdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if buf.len() <= ONE_CALL_WRITE && !self.unflushed {
            self.stream
                .blocking_write_and_flush(buf)
                .map_err(stream_error)?;
            return Ok(buf.len());
        }
        let mut permit = self.stream.check_write().map_err(stream_error)?;
        if permit == 0 {
            // The host's pipe is full: wait until what is in it has been taken.
            self.stream.blocking_flush().map_err(stream_error)?;
            self.unflushed = false;
            permit = self.stream.check_write().map_err(stream_error)?;
        }
        let permit = usize::try_from(permit).unwrap_or(usize::MAX);
        if permit == 0 {
            // Still no room after a flush: the spec's small blocking write waits for it.
            let n = buf.len().min(ONE_CALL_WRITE);
            self.stream
                .blocking_write_and_flush(&buf[..n])
                .map_err(stream_error)?;
            return Ok(n);
        }
        let n = buf.len().min(permit);
        self.stream.write(&buf[..n]).map_err(stream_error)?;
        self.unflushed = true;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.unflushed {
            self.stream.blocking_flush().map_err(stream_error)?;
            self.unflushed = false;
        }
        Ok(())
    }
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
impl Write for PluginStdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stdout.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.stdout.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stdout.flush()
    }
}

/// A framed byte stream pair: frames in from `R`, frames out to `W`. [`Stdio`] is the one a
/// plugin uses; tests run the same server loops over in-memory streams.
#[derive(Debug)]
pub struct Framed<R, W> {
    reader: R,
    writer: W,
    /// Splits what the host sends into frames: for JSON Lines, lines, not parsed as JSON (see
    /// [`Framed::recv`]).
    framer: AnyFramer,
    /// Frames `send`, with the same limits and framing checks but, for JSON Lines, without
    /// re-validating the JSON: see [`Framed::send`].
    encoder: AnyFramer,
    inbuf: BytesMut,
    /// How much the next read asks for: it starts at [`FIRST_READ`] and doubles, up to
    /// [`MAX_READ`], whenever a read fills it (a fixed 64 KiB was most of an idle session's
    /// memory).
    read_size: usize,
    /// A reader's buffer, for readers that need one (see [`Input`]).
    scratch: Vec<u8>,
    /// The last buffer [`Input::read_chunk`] handed over while `inbuf` held part of a frame,
    /// whole; its first `taken` bytes have been copied to the end of `inbuf`.
    chunk: Bytes,
    taken: usize,
    outbuf: BytesMut,
    eof: bool,
}

impl Stdio {
    /// Framed stdio with the default [`FrameLimits`].
    pub fn new(framing: Framing) -> Self {
        Self::with_limits(framing, FrameLimits::default())
    }

    /// Framed stdio with explicit limits.
    pub fn with_limits(framing: Framing, limits: FrameLimits) -> Self {
        Framed::from_parts(PluginStdin::new(), PluginStdout::new(), framing, limits)
    }
}

impl<R: Input, W: Write> Framed<R, W> {
    /// Frame any reader and writer.
    pub fn from_parts(reader: R, writer: W, framing: Framing, limits: FrameLimits) -> Self {
        Self {
            reader,
            writer,
            framer: framing.splitter(limits),
            encoder: framing.sender(limits),
            inbuf: BytesMut::new(),
            read_size: FIRST_READ,
            scratch: Vec::new(),
            chunk: Bytes::new(),
            taken: 0,
            outbuf: BytesMut::new(),
            eof: false,
        }
    }

    /// The writer, for bytes that bypass the framer (tests of misbehaving plugins).
    pub fn writer(&mut self) -> &mut W {
        &mut self.writer
    }

    /// The next frame from stdin, or `None` once the host closed stdin.
    ///
    /// A JSON Lines frame is one line (without its `\n` or `\r\n`; blank lines are skipped),
    /// **not** checked as JSON: the handler's own parse (`serde_json::from_slice`, or a
    /// protocol machine's `handle_frame`) is that check, and answers a malformed line the way
    /// the protocol does (JSON-RPC's parse error, Orchard's `invalid_request`), after which the
    /// next line is read as usual. Walking the JSON here as well did the same work twice
    /// inside the sandbox, where it is slowest and billed as fuel: for an echo of a 64 KiB
    /// JSON-RPC request, about four fifths of the guest's operators. sandpipe's host passes an
    /// engine's lines on unjudged, as documented for `run --framing`, and validates what the
    /// plugin writes, so a plugin that echoes a malformed line is reported for its output.
    /// CBOR and `Content-Length` frames are walked as before, since that walk finds where a
    /// frame ends; an error there means the stream lost its framing.
    ///
    /// An input that hands over buffers of its own ([`Input::read_chunk`]: `wasm32-wasip2`'s
    /// stdin, whose buffer is the list the host wrote into this guest's memory) is not copied
    /// whole: a buffer that arrives while no frame is pending becomes the framer's buffer as it
    /// is, and one that arrives in the middle of a frame is copied after that frame's start only
    /// in steps that double what is held, until the framer has the frame; what is left then
    /// lies in the new buffer too, and that buffer becomes the framer's from there. A stream of
    /// 64 KiB frames read 1 MiB at a time copied every byte once more before (a 1 MiB
    /// `memory.copy` per read); now it copies about a frame per read.
    pub fn recv(&mut self) -> Result<Option<Bytes>, GuestError> {
        loop {
            if self.eof {
                return Ok(self.framer.decode_eof(&mut self.inbuf)?);
            }
            if let Some(frame) = self.framer.decode(&mut self.inbuf)? {
                return Ok(Some(frame));
            }
            if self.chunk_left() {
                self.feed_from_chunk();
                continue;
            }
            let read = match self.reader.read_chunk(self.read_size) {
                Some(chunk) => chunk.map(|chunk| self.take_chunk(chunk)),
                None => self
                    .reader
                    .read_into(&mut self.inbuf, self.read_size, &mut self.scratch),
            };
            let n = match read {
                Ok(n) => n,
                // A signal is not the end of input: read again.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                self.eof = true;
            } else if n == self.read_size && n < MAX_READ {
                // Input is arriving faster than this buffer takes it.
                self.read_size = n * 2;
            }
        }
    }

    /// Whether the chunk holds bytes not yet in `inbuf`.
    fn chunk_left(&self) -> bool {
        self.taken < self.chunk.len()
    }

    /// Take a buffer [`Input::read_chunk`] handed over, returning its length: it becomes
    /// `inbuf` if that holds nothing, else it is held and fed in by [`Self::feed_from_chunk`].
    fn take_chunk(&mut self, chunk: Bytes) -> usize {
        let n = chunk.len();
        if self.inbuf.is_empty() {
            self.inbuf = BytesMut::from(chunk);
        } else {
            self.chunk = chunk;
            self.taken = 0;
        }
        n
    }

    /// Move bytes of the held chunk into `inbuf`. Once everything `inbuf` holds is a copy of
    /// the chunk's bytes (the framer took what came before them), the chunk's own memory from
    /// there on becomes `inbuf`, with the same bytes first: to the framer that is one more
    /// append. Until then, `inbuf` grows by copying, doubling what it holds at each step.
    fn feed_from_chunk(&mut self) {
        /// The smallest copying step.
        const STEP: usize = 4096;
        let held = self.inbuf.len();
        if held <= self.taken {
            let mut rest = std::mem::take(&mut self.chunk);
            rest.advance(self.taken - held);
            self.taken = 0;
            self.inbuf = BytesMut::from(rest);
        } else {
            let step = held.max(STEP).min(self.chunk.len() - self.taken);
            self.inbuf
                .extend_from_slice(&self.chunk[self.taken..self.taken + step]);
            self.taken += step;
        }
    }

    /// Frame `frame`, write it to stdout and flush, so the host sees it at once.
    ///
    /// Framing rules are checked (size limit; for JSON Lines no newline, no trailing `\r`, not
    /// blank; for CBOR exactly one item), but a JSON Lines frame is **not** parsed as JSON
    /// here: the receiver validates every frame it reads (sandpipe's host does, and reports a
    /// bad one with this plugin's stderr), so checking it on both sides only doubled the JSON
    /// work inside the sandbox, where it is slowest and billed as fuel. Frames from
    /// `serde_json::to_vec` are valid by construction.
    ///
    /// A CBOR frame is scanned here although the host scans it again, because for CBOR that
    /// scan *is* the framing: a sequence has no delimiter, so a reply that is two items, or
    /// part of one, would not fail on the host but shift every later frame (the host would
    /// read two replies, or join this one to the next). The scan only walks headers and skips
    /// string payloads, so it costs what the host's framer pays for the same bytes (about 7
    /// instructions a byte on dense maps of small values, nothing per payload byte), once per
    /// reply; the JSON Lines equivalent, the newline check, is a `memchr`.
    ///
    /// On `wasm32-wasip2`, a frame over [`DIRECT_WRITE`] bytes is written from where it lies,
    /// between its framing (a header before, a newline after), rather than copied into the send
    /// buffer first: there a copy is a `memcpy` call that runs about one wasm operator a byte,
    /// while the host reads a write straight out of the guest's memory. Natively the copy is
    /// cheap and one write keeps the frame in one piece on the pipe.
    pub fn send(&mut self, frame: &[u8]) -> Result<(), GuestError> {
        self.outbuf.clear();
        if frame.len() <= DIRECT_WRITE || !WRITE_IN_PLACE {
            self.encoder.encode(frame, &mut self.outbuf)?;
            self.writer.write_all(&self.outbuf)?;
        } else {
            let tail = self.encoder.encode_head(frame, &mut self.outbuf)?;
            self.writer.write_all(&self.outbuf)?;
            self.writer.write_all(frame)?;
            self.writer.write_all(tail)?;
        }
        self.writer.flush()?;
        Ok(())
    }
}

/// Answer every frame on stdin with the handler's reply (if any) until stdin closes.
///
/// The reply is anything that holds bytes: a `Vec<u8>` the handler built, or the `Bytes` it
/// was given (an echo sends its frame back without copying it).
pub fn serve<F, Reply>(framing: Framing, mut handler: F) -> Result<(), GuestError>
where
    F: FnMut(Bytes) -> Option<Reply>,
    Reply: AsRef<[u8]>,
{
    let mut io = Stdio::new(framing);
    while let Some(frame) = io.recv()? {
        if let Some(reply) = handler(frame) {
            io.send(reply.as_ref())?;
        }
    }
    Ok(())
}

/// End the plugin with `code`, keeping the code visible to the host.
///
/// Under WASI preview 2, `std::process::exit(n)` reports only success or failure (every
/// non-zero code arrives as 1), so on `wasm32-wasip2` this calls `wasi:cli/exit.exit-with-code`
/// instead. Stdout is flushed first.
pub fn exit(code: u8) -> ! {
    let _ = io::stdout().flush();
    exit_impl(code)
}

#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn exit_impl(code: u8) -> ! {
    wasip2::cli::exit::exit_with_code(code);
    // exit-with-code does not return; if a host lacks it the trap above ends the plugin.
    #[allow(clippy::empty_loop)]
    loop {}
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
fn exit_impl(code: u8) -> ! {
    std::process::exit(i32::from(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Returns `Interrupted` before each chunk, then the chunks, then EOF.
    struct Jumpy {
        chunks: Vec<&'static [u8]>,
        interrupt: bool,
    }

    impl Read for Jumpy {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.interrupt = !self.interrupt;
            if self.interrupt {
                return Err(io::ErrorKind::Interrupted.into());
            }
            if self.chunks.is_empty() {
                return Ok(0);
            }
            let c = self.chunks.remove(0);
            buf[..c.len()].copy_from_slice(c);
            Ok(c.len())
        }
    }

    #[test]
    fn an_interrupted_read_is_retried_not_taken_for_eof() {
        let reader = Jumpy {
            chunks: vec![b"{\"a\":", b"1}\n{\"b\"", b":2}\n"],
            interrupt: false,
        };
        let mut f = Framed::from_parts(
            reader,
            Vec::new(),
            Framing::JsonLines,
            FrameLimits::default(),
        );
        let mut got = Vec::new();
        while let Some(frame) = f.recv().expect("no error") {
            got.push(frame.to_vec());
        }
        assert_eq!(got, vec![b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()]);
    }

    /// Hands out as much as the caller's buffer holds and records each buffer's size.
    struct Greedy {
        data: io::Cursor<Vec<u8>>,
        sizes: Vec<usize>,
    }

    impl Read for Greedy {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.sizes.push(buf.len());
            self.data.read(buf)
        }
    }

    #[test]
    fn the_read_buffer_starts_small_and_grows_while_reads_fill_it() {
        // Two small frames, then one of 3 MiB, then a small one again.
        let big = format!("[\"{}\"]", "x".repeat(3 << 20));
        let input = format!("[1]\n[2]\n{big}\n[3]\n");
        let reader = Greedy {
            data: io::Cursor::new(input.into_bytes()),
            sizes: Vec::new(),
        };
        let mut f = Framed::from_parts(
            reader,
            Vec::new(),
            Framing::JsonLines,
            FrameLimits::default(),
        );
        let mut got = Vec::new();
        while let Some(frame) = f.recv().expect("no error") {
            got.push(frame.to_vec());
        }
        let want = [&b"[1]"[..], b"[2]", big.as_bytes(), b"[3]"];
        assert_eq!(got, want.map(<[u8]>::to_vec));
        let sizes = &f.reader.sizes;
        assert_eq!(sizes[0], FIRST_READ, "an idle plugin holds a small buffer");
        assert_eq!(
            sizes.iter().max(),
            Some(&(1 << 20)),
            "big input is read in steps of the host pipe's capacity"
        );
        // Doubling from FIRST_READ, never past MAX_READ.
        assert!(sizes.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] * 2));
    }

    /// Hands the input over in buffers of its own, as `wasm32-wasip2`'s stdin does: each a
    /// fresh allocation of the next size in `sizes` (cycled), at most what was asked for.
    struct Chunks {
        data: Bytes,
        sizes: Vec<usize>,
        next: usize,
        /// Where each buffer handed over lies: start address and length.
        handed: Vec<(usize, usize)>,
    }

    impl Chunks {
        fn new(data: &[u8], sizes: &[usize]) -> Self {
            Chunks {
                data: Bytes::copy_from_slice(data),
                sizes: sizes.to_vec(),
                next: 0,
                handed: Vec::new(),
            }
        }

        fn lies_in_a_chunk(&self, frame: &[u8]) -> bool {
            let at = frame.as_ptr() as usize;
            self.handed
                .iter()
                .any(|&(start, len)| at >= start && at + frame.len() <= start + len)
        }
    }

    impl Input for Chunks {
        fn read_into(&mut self, _: &mut BytesMut, _: usize, _: &mut Vec<u8>) -> io::Result<usize> {
            unreachable!("Framed takes the chunks")
        }

        fn read_chunk(&mut self, len: usize) -> Option<io::Result<Bytes>> {
            let size = self.sizes[self.next % self.sizes.len()];
            self.next += 1;
            let n = size.min(len).min(self.data.len());
            let chunk = Bytes::from(self.data.split_to(n).to_vec());
            self.handed.push((chunk.as_ptr() as usize, chunk.len()));
            Some(Ok(chunk))
        }
    }

    /// Frames of `len` bytes each (all framings' bodies), `count` of them, with their wire.
    fn frames_of(framing: Framing, len: usize, count: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
        let mut encoder = framing.sender(FrameLimits::default());
        let mut wire = BytesMut::new();
        let frames: Vec<Vec<u8>> = (0..count)
            .map(|i| match framing {
                // A CBOR byte string: a two-byte-length header, then the bytes.
                Framing::CborSeq => {
                    let body = len - 3;
                    let mut f = vec![0x59, (body >> 8) as u8, body as u8];
                    f.extend((0..body).map(|j| (i + j) as u8));
                    f
                }
                _ => {
                    let digits = format!("{i:0w$}", w = len - 2);
                    format!("[{digits}]").into_bytes()
                }
            })
            .collect();
        for f in &frames {
            encoder.encode(f, &mut wire).expect("a valid frame");
        }
        (frames, wire.to_vec())
    }

    #[test]
    fn handed_over_buffers_give_the_same_frames_under_any_split() {
        for framing in [Framing::JsonLines, Framing::CborSeq, Framing::ContentLength] {
            let (want, wire) = frames_of(framing, 300, 40);
            for sizes in [
                &[1][..],
                &[7, 1, 4096],
                &[299, 301],
                &[1000, 3],
                &[5000],
                &[1 << 20],
            ] {
                let mut f = Framed::from_parts(
                    Chunks::new(&wire, sizes),
                    Vec::new(),
                    framing,
                    FrameLimits::default(),
                );
                let mut got = Vec::new();
                while let Some(frame) = f.recv().expect("no error") {
                    got.push(frame.to_vec());
                }
                assert_eq!(got, want, "{framing:?} in chunks of {sizes:?}");
            }
        }
    }

    #[test]
    fn a_buffer_that_arrives_mid_frame_is_copied_only_as_far_as_that_frame_needs() {
        // 10 KiB frames in 100 KiB chunks: nearly every chunk arrives in the middle of a frame.
        const FRAME: usize = 10 << 10;
        const CHUNK: usize = 100 << 10;
        let (want, wire) = frames_of(Framing::JsonLines, FRAME, 60);
        let mut f = Framed::from_parts(
            Chunks::new(&wire, &[CHUNK]),
            Vec::new(),
            Framing::JsonLines,
            FrameLimits::default(),
        );
        let mut got = Vec::new();
        while let Some(frame) = f.recv().expect("no error") {
            got.push(frame);
        }
        assert_eq!(got.len(), want.len());
        assert!(got.iter().zip(&want).all(|(g, w)| g[..] == w[..]));
        // A frame that is not the chunk's own memory was copied; before, everything after a
        // chunk's first partial frame was. Now: the frame that straddles the boundary, and
        // what a copying step (doubling what is held, at least 4 KiB) took beyond it.
        let copied: usize = got
            .iter()
            .filter(|frame| !f.reader.lies_in_a_chunk(frame))
            .map(Bytes::len)
            .sum();
        let boundaries = f.reader.handed.len() - 1;
        assert!(
            copied <= boundaries * (3 * FRAME + 4096),
            "{copied} bytes of frames copied over {boundaries} chunk boundaries"
        );
        assert!(
            copied < wire.len() / 2,
            "{copied} of {} bytes copied",
            wire.len()
        );
    }

    #[test]
    fn json_lines_are_framed_both_ways_and_the_json_is_left_to_the_handler() {
        let mut f = Framed::from_parts(
            io::empty(),
            Vec::new(),
            Framing::JsonLines,
            FrameLimits::with_max_frame_bytes(16),
        );
        f.send(b"not json")
            .expect("framing is fine: the receiver judges the JSON");
        assert!(matches!(
            f.send(b"two\nlines"),
            Err(GuestError::Frame(FrameError::EmbeddedNewline { .. }))
        ));
        assert!(matches!(
            f.send(b"   "),
            Err(GuestError::Frame(FrameError::BlankFrame))
        ));
        assert!(matches!(
            f.send(&[b'1'; 17]),
            Err(GuestError::Frame(FrameError::TooLarge { .. }))
        ));
        assert_eq!(f.writer(), b"not json\n");
        // Reading splits lines and leaves the JSON to the handler's parse, which is where a
        // malformed line is answered; the next line is read as usual.
        let mut r = Framed::from_parts(
            &b"not json\n\n[1]\r\n"[..],
            Vec::new(),
            Framing::JsonLines,
            FrameLimits::with_max_frame_bytes(16),
        );
        assert_eq!(r.recv().expect("a line").as_deref(), Some(&b"not json"[..]));
        assert_eq!(r.recv().expect("a line").as_deref(), Some(&b"[1]"[..]));
        assert!(r.recv().expect("the end").is_none());
        // The size limit still holds.
        let mut r = Framed::from_parts(
            &b"[11111111111111111]\n"[..],
            Vec::new(),
            Framing::JsonLines,
            FrameLimits::with_max_frame_bytes(16),
        );
        assert!(matches!(
            r.recv(),
            Err(GuestError::Frame(FrameError::TooLarge { .. }))
        ));
    }
}
