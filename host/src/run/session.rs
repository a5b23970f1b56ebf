//! One session with one running plugin, the same for wasm and native.
//!
//! ```text
//!   send(frame) ─► Framer::encode ─► plugin stdin          (bounded pipe: backpressure)
//!   recv()      ◄─ Framer::decode ◄─ plugin stdout         (buffer ≤ max_frame_bytes + 64 KiB)
//!   wait()      ◄─ Exit, published after stdout and stderr are closed
//! ```
//!
//! Ordering guarantee: `recv` reads stdout until EOF before it reports anything else, and a
//! plugin's stdout only reaches EOF once the plugin is gone, so every frame the plugin
//! completed before it failed is delivered before the failure is seen.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sandpipe_proto::frame::{AnyFramer, FrameLimits, Framer, Framing};
use tokio::sync::watch;

use crate::error::{Exit, SessionError};
pub use crate::run::native::NativeStdio;
use crate::run::read_room::start_on_boundary;
use crate::run::record::Recorder;
use crate::run::stderr::{StderrMode, StderrTail};
use crate::run::transport::{KillSwitch, Meter, PluginStdin, PluginStdout, Transport};
use sandpipe_proto::transcript::Direction;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// How stdout is first read.
const READ_CHUNK: usize = 64 * 1024;
/// The largest read of stdout: a plugin pipe's capacity (`native::PIPE_BYTES`,
/// `sandbox::PIPE_BYTES`), so a large frame the plugin wrote at once is taken at once.
const MAX_READ_CHUNK: usize = 1 << 20;
/// Grow the read buffer only when less than this is free. Frames are split off the buffer
/// without copying and share its allocation, so reserving a whole `READ_CHUNK` before every
/// read would allocate a fresh 64 KiB for every small frame while the last one is alive.
const MIN_SPARE: usize = 8 * 1024;

/// How long [`Session::shutdown`] waits after SIGTERM before killing a native plugin.
pub const TERM_GRACE: Duration = Duration::from_secs(2);

/// `drain` never completes (it ends in `pending`); this satisfies the type checker.
fn unreachable_exit() -> Exit {
    Exit::Killed { signal: None }
}

/// Options for one session. Defaults:
/// - `framing`: `None`, raw bytes (no frame validation);
/// - `frame_limits`: [`FrameLimits::default`] (16 MiB frames);
/// - `stderr`: [`StderrMode::Log`];
/// - `stderr_tail_lines`: 20;
/// - `record`: `None`;
/// - `native_stdio`: [`NativeStdio::Piped`];
/// - `group`: `None`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SessionOptions {
    /// Framing of both directions; `None` passes bytes through unchecked.
    pub framing: Option<Framing>,
    /// Frame limits for both directions.
    pub frame_limits: FrameLimits,
    /// Where the plugin's stderr goes.
    pub stderr: StderrMode,
    /// How many stderr lines to keep for error reports.
    pub stderr_tail_lines: usize,
    /// Record every frame both ways, and the outcome, as a transcript.
    pub record: Option<Arc<Recorder>>,
    /// How a native plugin's stdin and stdout are connected (ignored for wasm).
    pub native_stdio: NativeStdio,
    /// Join every session started with these options to this group, for a caller that does
    /// not hold the sessions but must still signal them (`sandpipe run --protocol`, whose
    /// supervisor starts, restarts and retires them).
    pub group: Option<SessionGroup>,
}

/// The sessions started with one [`SessionOptions`], as far as signalling them goes. It holds
/// no session alive: a session dropped by its owner is killed as always, and leaves the group.
#[derive(Debug, Clone, Default)]
pub struct SessionGroup(Arc<std::sync::Mutex<Members>>);

#[derive(Debug, Default)]
struct Members {
    /// The sessions that may still run.
    running: Vec<Member>,
    /// The one started last, running or not.
    last: Option<Member>,
}

#[derive(Debug, Clone)]
struct Member {
    pid: Option<u32>,
    exit: watch::Receiver<Option<Exit>>,
    kill: crate::run::transport::WeakKillSwitch,
    stderr: StderrTail,
}

impl Member {
    fn running(&self) -> bool {
        self.exit.borrow().is_none()
    }
}

impl SessionGroup {
    /// An empty group.
    pub fn new() -> Self {
        Self::default()
    }

    fn join(&self, control: &SessionControl) {
        let member = Member {
            pid: control.pid,
            exit: control.exit.clone(),
            kill: control.kill.downgrade(),
            stderr: control.stderr.clone(),
        };
        let mut members = self.members();
        members.running.retain(Member::running);
        members.running.push(member.clone());
        members.last = Some(member);
    }

    fn members(&self) -> std::sync::MutexGuard<'_, Members> {
        // A panic while the list was held leaves it whole: the guard is still good.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How the session started last ended (`None` while it runs, or if none started), with
    /// its last stderr lines: what `run`, `call` and `inspect` explain a failed start from.
    pub fn last_ended(&self) -> Option<(Exit, Vec<String>)> {
        let members = self.members();
        let last = members.last.as_ref()?;
        let exit = last.exit.borrow().clone()?;
        Some((exit, last.stderr.lines()))
    }

    /// Send `signal` to the process group of each native session still running; returns how
    /// many got it. Wasm sessions cannot receive signals ([`SessionGroup::kill_after`]).
    pub fn signal(&self, signal: i32) -> usize {
        let members = self.members();
        let mut sent = 0;
        for m in members.running.iter().filter(|m| m.running()) {
            if let Some(pid) = m.pid {
                crate::run::native::signal_group(pid, signal);
                sent += 1;
            }
        }
        sent
    }

    /// How many sessions of the group still run.
    pub fn running(&self) -> usize {
        self.members()
            .running
            .iter()
            .filter(|m| m.running())
            .count()
    }

    /// Kill every session still running, wasm or native, at once; returns how many.
    pub fn kill_running(&self) -> usize {
        let running: Vec<Member> = self
            .members()
            .running
            .iter()
            .filter(|m| m.running())
            .cloned()
            .collect();
        for m in &running {
            m.kill.kill();
        }
        running.len()
    }

    /// Resolves once every session that joined the group so far has ended (its process
    /// reaped, for a native one).
    pub async fn ended(&self) {
        let exits: Vec<watch::Receiver<Option<Exit>>> = self
            .members()
            .running
            .iter()
            .map(|m| m.exit.clone())
            .collect();
        for mut exit in exits {
            // A sender dropped without an exit is a session gone as well.
            let _ = exit.wait_for(Option::is_some).await.map(|_| ());
        }
    }

    /// Kill each wasm session still running once `grace` has passed: the SIGTERM emulation's
    /// second half, for sessions whose stdin is already closed. Needs a tokio runtime.
    pub fn kill_after(&self, grace: Duration) {
        let wasm: Vec<Member> = self
            .members()
            .running
            .iter()
            .filter(|m| m.pid.is_none() && m.running())
            .cloned()
            .collect();
        if wasm.is_empty() {
            return;
        }
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            for m in wasm {
                m.kill.kill();
            }
        });
    }
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            framing: None,
            frame_limits: FrameLimits::default(),
            stderr: StderrMode::Log,
            stderr_tail_lines: 20,
            record: None,
            native_stdio: NativeStdio::Piped,
            group: None,
        }
    }
}

impl SessionOptions {
    /// Options with the given framing.
    pub fn framed(framing: Framing) -> Self {
        Self {
            framing: Some(framing),
            ..Self::default()
        }
    }
    /// Set the frame limits.
    pub fn frame_limits(mut self, limits: FrameLimits) -> Self {
        self.frame_limits = limits;
        self
    }
    /// Set where stderr goes.
    pub fn stderr(mut self, mode: StderrMode) -> Self {
        self.stderr = mode;
        self
    }
}

/// A running plugin. Dropping it kills the plugin.
#[derive(Debug)]
pub struct Session {
    writer: SessionWriter,
    reader: SessionReader,
    control: SessionControl,
}

/// The sending half: frames to the plugin's stdin.
pub struct SessionWriter {
    record: Option<Arc<Recorder>>,
    stdin: Option<PluginStdin>,
    framer: Option<AnyFramer>,
    buf: BytesMut,
    _kill: KillSwitch,
}

/// The receiving half: frames from the plugin's stdout.
pub struct SessionReader {
    record: Option<Arc<Recorder>>,
    stdout: PluginStdout,
    framer: Option<AnyFramer>,
    buf: BytesMut,
    /// What a read reserves when the buffer runs low: doubled up to [`MAX_READ_CHUNK`] each
    /// time a read fills the buffer, so a large frame takes one or two reads, not one per 64 KiB.
    chunk: usize,
    eof: bool,
    failed: Option<sandpipe_proto::frame::FrameError>,
    stderr: StderrTail,
    _kill: KillSwitch,
}

/// Exit status, stderr tail and kill, shareable between tasks.
#[derive(Debug, Clone)]
pub struct SessionControl {
    record: Option<Arc<Recorder>>,
    pid: Option<u32>,
    /// See `Transport::plugin_depth`.
    plugin_depth: u8,
    exit: watch::Receiver<Option<Exit>>,
    kill: KillSwitch,
    stderr: StderrTail,
    meter: Arc<Meter>,
}

impl std::fmt::Debug for SessionWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWriter")
            .field("open", &self.stdin.is_some())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for SessionReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionReader")
            .field("buffered", &self.buf.len())
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(crate) fn new(t: Transport, opts: &SessionOptions, meter: Arc<Meter>) -> Self {
        // Frames from the plugin are validated in full; frames to it are framed and
        // size-checked but not parsed as JSON, since the plugin's side validates what it reads
        // (see `Framing::sender`).
        let sender = opts.framing.map(|f| f.sender(opts.frame_limits));
        let session = Session {
            writer: SessionWriter {
                record: opts.record.clone(),
                stdin: Some(t.stdin),
                framer: sender,
                buf: BytesMut::new(),
                _kill: t.kill.clone(),
            },
            reader: SessionReader {
                record: opts.record.clone(),
                stdout: t.stdout,
                framer: opts.framing.map(|f| f.framer(opts.frame_limits)),
                buf: BytesMut::with_capacity(READ_CHUNK),
                chunk: READ_CHUNK,
                eof: false,
                failed: None,
                stderr: t.stderr.clone(),
                _kill: t.kill.clone(),
            },
            control: SessionControl {
                record: opts.record.clone(),
                pid: t.pid,
                plugin_depth: t.plugin_depth,
                exit: t.exit,
                kill: t.kill,
                stderr: t.stderr,
                meter,
            },
        };
        if let Some(group) = &opts.group {
            group.join(&session.control);
        }
        session
    }

    /// Send one frame, framed per the session's framing. The framing is checked (size; for
    /// JSON Lines no newline and not blank; for CBOR exactly one item) and a violation is
    /// [`SessionError::BadFrameToPlugin`]; a JSON Lines frame is not parsed as JSON here,
    /// since the plugin validates what it reads (the host validates every frame it reads
    /// from the plugin).
    pub async fn send(&mut self, frame: &[u8]) -> Result<(), SessionError> {
        self.writer.send(frame).await
    }

    /// Receive the next frame; `Ok(None)` once the plugin closed stdout cleanly.
    pub async fn recv(&mut self) -> Result<Option<Bytes>, SessionError> {
        self.reader.recv().await
    }

    /// Close the plugin's stdin (it sees EOF).
    pub async fn close_stdin(&mut self) {
        self.writer.close().await;
    }

    /// Wait for the plugin to end. Does not read stdout: read it to the end first, or a
    /// plugin blocked on a full stdout pipe only ends at its deadline.
    pub async fn wait(&self) -> Exit {
        self.control.wait().await
    }

    /// Kill the plugin now.
    pub fn kill(&self) {
        self.control.kill();
    }

    /// The plugin's last stderr lines.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.control.stderr_tail()
    }

    /// Stop the plugin politely, then firmly: close its stdin and give it `grace` to exit;
    /// then a native plugin gets a real SIGTERM (to its process group) and up to
    /// [`TERM_GRACE`] more; then it is killed. A wasm plugin cannot receive signals: stdin
    /// closing is its SIGTERM (the emulation), and after `grace` it is killed. Frames the plugin
    /// writes meanwhile are read and dropped (so it never blocks on stdout), and counted in
    /// the log.
    pub async fn shutdown(mut self, grace: Duration) -> Exit {
        self.writer.close().await;
        let control = self.control.clone();
        let mut reader = self.reader;
        let drain = async move {
            let n = reader.discard_to_eof().await;
            if n > 0 {
                tracing::debug!(bytes = n, "discarded plugin output during shutdown");
            }
            std::future::pending::<()>().await
        };
        let escalate = control.wait_or_stop(grace);
        tokio::select! {
            exit = escalate => exit,
            () = drain => unreachable_exit(),
        }
    }

    /// Split into halves that can live in different tasks. The plugin is killed when all three
    /// are dropped.
    pub fn into_split(self) -> (SessionWriter, SessionReader, SessionControl) {
        (self.writer, self.reader, self.control)
    }

    /// The control half (cheap to clone).
    pub fn control(&self) -> &SessionControl {
        &self.control
    }
}

impl SessionWriter {
    /// Send one frame.
    pub async fn send(&mut self, frame: &[u8]) -> Result<(), SessionError> {
        let stdin = self.stdin.as_mut().ok_or(SessionError::AlreadyClosed)?;
        let bytes: &[u8] = match &mut self.framer {
            Some(framer) => {
                self.buf.clear();
                framer
                    .encode(frame, &mut self.buf)
                    .map_err(SessionError::BadFrameToPlugin)?;
                &self.buf
            }
            None => frame,
        };
        // Record before writing: the plugin may answer before write_all returns, and the
        // transcript must keep cause before effect.
        if let Some(r) = &self.record {
            r.frame(Direction::ToPlugin, frame);
        }
        stdin.write(bytes).await.map_err(stdin_error)
    }

    /// Send `frame`, already framed by the caller as `wire` (for `Content-Length`, the engine's
    /// own header block and the body): `frame` is what is recorded, `wire` what the plugin
    /// reads. A proxy uses it to pass headers it does not interpret (`Content-Type`) through.
    pub async fn send_wire(&mut self, frame: &[u8], wire: Bytes) -> Result<(), SessionError> {
        if let Some(r) = &self.record {
            r.frame(Direction::ToPlugin, frame);
        }
        self.send_raw(wire).await
    }

    /// Write `bytes` to the plugin's stdin as they are, outside the framing: for a stream
    /// passed through after its framing was lost (`sandpipe run` forwards what the engine
    /// writes and lets the plugin judge it). Not recorded. A wasm plugin reads `bytes` where
    /// they lie, not a copy.
    pub async fn send_raw(&mut self, bytes: Bytes) -> Result<(), SessionError> {
        let stdin = self.stdin.as_mut().ok_or(SessionError::AlreadyClosed)?;
        stdin.write_bytes(bytes).await.map_err(stdin_error)
    }

    /// Close the plugin's stdin; later sends fail with [`SessionError::AlreadyClosed`].
    pub async fn close(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.shutdown().await;
        }
    }
}

/// A failed write to the plugin's stdin: a closed pipe means the plugin stopped reading.
fn stdin_error(e: std::io::Error) -> SessionError {
    match e.kind() {
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
            SessionError::StdinClosed
        }
        _ => SessionError::Io(e),
    }
}

impl SessionReader {
    /// With `Content-Length` framing, the header block of the frame `recv` returned last,
    /// exactly as the plugin wrote it (a proxy forwards it so headers such as `Content-Type`
    /// reach the other side unchanged); `None` for the other framings and raw bytes.
    pub fn last_headers(&self) -> Option<&[u8]> {
        self.framer.as_ref().and_then(AnyFramer::last_headers)
    }

    /// Receive the next frame; `Ok(None)` once stdout closed at a frame boundary. A frame cut
    /// off by the plugin's end is [`SessionError::BadFrameFromPlugin`] with
    /// `FrameError::Truncated`; check [`SessionControl::wait`] for why it ended.
    pub async fn recv(&mut self) -> Result<Option<Bytes>, SessionError> {
        if let Some(error) = &self.failed {
            return Err(SessionError::BadFrameFromPlugin {
                error: error.clone(),
                stderr_tail: self.stderr.lines(),
            });
        }
        loop {
            let decoded = match &mut self.framer {
                Some(framer) if self.eof => framer.decode_eof(&mut self.buf),
                Some(framer) => framer.decode(&mut self.buf),
                None if !self.buf.is_empty() => Ok(Some(self.buf.split().freeze())),
                None if self.eof => Ok(None),
                None => Ok(None),
            };
            match decoded {
                Ok(Some(frame)) => {
                    if let Some(r) = &self.record {
                        r.frame(Direction::FromPlugin, &frame);
                    }
                    return Ok(Some(frame));
                }
                Ok(None) if self.eof => return Ok(None),
                Ok(None) => {}
                Err(error) => {
                    self.failed = Some(error.clone());
                    return Err(SessionError::BadFrameFromPlugin {
                        error,
                        stderr_tail: self.stderr.lines(),
                    });
                }
            }
            // One write of a wasm guest becomes an empty buffer as it lies.
            let n = match self.stdout.take_one_write(&mut self.buf).await {
                Some(n) => n,
                None => {
                    if self.buf.capacity() - self.buf.len() < MIN_SPARE {
                        self.buf.reserve(self.chunk);
                    }
                    start_on_boundary(&mut self.buf);
                    let room = self.buf.capacity() - self.buf.len();
                    let n = self
                        .stdout
                        .read_into(&mut self.buf)
                        .await
                        .map_err(SessionError::Io)?;
                    if n == room {
                        // The plugin writes faster than this buffer takes it: read more at a
                        // time.
                        self.chunk = (self.chunk * 2).min(MAX_READ_CHUNK);
                    }
                    n
                }
            };
            if n == 0 {
                self.eof = true;
            }
        }
    }

    /// Read and drop everything up to EOF; returns the byte count.
    pub async fn discard_to_eof(&mut self) -> u64 {
        let mut total = self.buf.len() as u64;
        self.buf.clear();
        let mut scratch = vec![0u8; READ_CHUNK];
        loop {
            match self.stdout.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n as u64,
            }
        }
        self.eof = true;
        total
    }
}

impl SessionControl {
    /// Wait for the plugin to end, recording nothing: for a reader that must still read the
    /// plugin's last frames before a recording gets its outcome (the driver's, waiting on a
    /// full handler queue).
    pub(crate) async fn ended(&self) -> Exit {
        let mut rx = self.exit.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(exit) => exit.clone().unwrap_or(Exit::Killed { signal: None }),
            // The runner is gone without publishing: it was dropped with the runtime.
            Err(_) => Exit::Killed { signal: None },
        }
    }

    /// Wait for the plugin to end.
    pub async fn wait(&self) -> Exit {
        let exit = self.ended().await;
        if let Some(r) = &self.record {
            r.outcome(&exit);
        }
        exit
    }

    /// The exit, if the plugin has ended.
    pub fn try_exit(&self) -> Option<Exit> {
        self.exit.borrow().clone()
    }

    /// Kill the plugin now.
    pub fn kill(&self) {
        self.kill.kill();
    }

    /// The plugin's last stderr lines.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr.lines()
    }

    /// The second half of a shutdown, once the plugin's stdin is closed: give it `grace` to
    /// exit; then SIGTERM a native plugin and wait up to [`TERM_GRACE`] more; then kill. The
    /// caller keeps stdout drained meanwhile, so the plugin never blocks on a full pipe.
    /// [`Session::shutdown`] and every protocol client's shutdown end here.
    pub async fn wait_or_stop(&self, grace: Duration) -> Exit {
        if let Ok(exit) = tokio::time::timeout(grace, self.wait()).await {
            return exit;
        }
        if self.pid.is_some() {
            self.terminate();
            if let Ok(exit) = tokio::time::timeout(TERM_GRACE.min(grace), self.wait()).await {
                return exit;
            }
        }
        self.kill();
        self.wait().await
    }

    /// Send SIGTERM to a native plugin's process group (nothing for wasm: see
    /// [`Session::terminate`]).
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Send `signal` to a native plugin's process group while it runs; nothing for wasm (a wasm
    /// plugin cannot receive signals: close its stdin, which is its SIGTERM). `sandpipe run`
    /// forwards the signals it receives this way.
    pub fn signal(&self, signal: i32) {
        if let (Some(pid), None) = (self.pid, self.try_exit()) {
            crate::run::native::signal_group(pid, signal);
        }
    }

    /// Mark the start of a request: a [`Fuel::PerRequest`](crate::Fuel::PerRequest) budget is
    /// re-armed when the guest next runs (after the read that delivers the request).
    /// Call it just before sending the request's frame. Counts requests for every plugin kind.
    pub fn begin_request(&self) {
        self.meter.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests begun so far with [`SessionControl::begin_request`].
    pub fn requests_begun(&self) -> u64 {
        self.meter.requests.load(Ordering::Relaxed)
    }

    /// Memory the plugin holds now, in bytes: linear memory for wasm (all memories of the
    /// instance), the resident set of a native plugin and the processes it started
    /// (`/proc/<pid>/statm`). `None` when it cannot be read (a native plugin that is gone).
    pub fn memory_in_use(&self) -> Option<u64> {
        match self.pid {
            None => Some(self.meter.memory.load(Ordering::Relaxed)),
            Some(pid) => {
                std::fs::metadata(format!("/proc/{pid}")).ok()?;
                Some(crate::run::native::plugin_resident(pid, self.plugin_depth))
            }
        }
    }

    /// The child's process id, for a native plugin (also its process group id).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }
}
