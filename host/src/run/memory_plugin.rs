//! An in-memory plugin behind a real [`Session`]: the test seam for everything above the
//! session (the driver, every protocol client, the supervisor) without building or starting a
//! plugin, in the spirit of lsp-server's `Connection::memory()`.
//!
//! ```text
//!   Session::send ─► framer ─► duplex pipe ─► plugin task: decode ─► MemoryPlugin::handle
//!   Session::recv ◄─ framer ◄─ duplex pipe ◄─ plugin task: encode ◄─┘ (frames to write)
//!   Session::wait ◄─ Exit::Exited(0) at stdin EOF, Exited(1) when handle fails (its message
//!                    on the stderr tail), Killed by the kill switch
//! ```
//!
//! The same loop, with an asynchronous handler whose stop is any [`Exit`] (crate-private
//! `InProcess`), presents a component that exports functions as a session
//! (`crate::exports::session`): the supervisor sees no difference.
//!
//! The pipes are bounded (64 KiB), so backpressure behaves as with a real plugin, and frames go
//! through the session's framer both ways, so a frame a plugin writes is checked as any
//! plugin's is.

use std::sync::Arc;

use bytes::BytesMut;
use sandpipe_proto::frame::{AnyFramer, Framer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::error::Exit;
use crate::run::session::{Session, SessionOptions};
use crate::run::stderr::StderrTail;
use crate::run::transport::{KillSwitch, Meter, PluginStdin, PluginStdout, Transport, killed};

/// How much each direction's pipe holds before a writer waits.
const PIPE: usize = 64 * 1024;

/// What runs behind [`Session::memory`]: frames in, frames out.
pub trait MemoryPlugin: Send + 'static {
    /// What the plugin writes as it starts, before reading anything (an oracle's `ready`, an
    /// ATP plugin's nothing-until-the-start-item). Default: nothing.
    fn start(&mut self) -> Vec<Vec<u8>> {
        Vec::new()
    }

    /// Answer one frame from the host with the frames to write (unframed: the session's
    /// framing is added). `Err(message)` ends the plugin with exit code 1 and `message` as its
    /// last stderr line, as a crashing plugin would.
    fn handle(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, String>;
}

/// A closure is a plugin that never fails: frame in, frames out.
impl<F> MemoryPlugin for F
where
    F: FnMut(&[u8]) -> Vec<Vec<u8>> + Send + 'static,
{
    fn handle(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        Ok(self(frame))
    }
}

/// What runs behind an in-process session, inside the crate: like [`MemoryPlugin`], but a
/// frame's handling may wait (an export call runs wasm), and a stop is any [`Exit`] (a trap,
/// fuel, a deadline, the memory cap), not only a failure message. [`Session::memory`] and
/// [`Host::start_speaking`](crate::Host::start_speaking) both run on it, so an export component
/// and a test closure are the same kind of transport.
pub(crate) trait InProcess: Send + 'static {
    /// What the plugin writes as it starts.
    fn start(&mut self) -> Vec<Vec<u8>>;

    /// Answer one frame: the frames to write, or how the plugin stopped (it wrote nothing
    /// more; by then its stderr is drained into the session's tail).
    fn handle(
        &mut self,
        frame: &[u8],
    ) -> impl std::future::Future<Output = Result<Vec<Vec<u8>>, Exit>> + Send;

    /// True once the plugin is done (an oracle's `shutdown`): it exits with 0 after writing
    /// what it has.
    fn finished(&self) -> bool {
        false
    }

    /// The plugin's end, when its stdin closed or it finished (let its output drain).
    fn close(self) -> impl std::future::Future<Output = ()> + Send;
}

/// A [`MemoryPlugin`] as an in-process plugin: a failure is exit 1 with its message on stderr.
struct Sync<P> {
    plugin: P,
    stderr: StderrTail,
}

impl<P: MemoryPlugin> InProcess for Sync<P> {
    fn start(&mut self) -> Vec<Vec<u8>> {
        self.plugin.start()
    }

    async fn handle(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, Exit> {
        self.plugin.handle(frame).map_err(|message| {
            self.stderr.push(format!("{message}\n").as_bytes());
            Exit::Exited(1)
        })
    }

    async fn close(self) {}
}

impl Session {
    /// A session with `plugin` running in this process, in a task of the current runtime,
    /// under `options`' framing (raw bytes: each read chunk is one "frame"). Limits do not
    /// apply (nothing is sandboxed); exits, kills, the stderr tail and the frame checks
    /// behave as with a real plugin.
    pub fn memory(plugin: impl MemoryPlugin, options: &SessionOptions) -> Session {
        let stderr = StderrTail::new(options.stderr_tail_lines);
        let plugin = Sync {
            plugin,
            stderr: stderr.clone(),
        };
        Session::in_process(plugin, options, stderr, Arc::new(Meter::default()))
    }

    /// A session with `plugin` running in a task of the current runtime, whose stderr lines
    /// land in `stderr` and whose memory and request counts are `meter`'s.
    pub(crate) fn in_process(
        plugin: impl InProcess,
        options: &SessionOptions,
        stderr: StderrTail,
        meter: Arc<Meter>,
    ) -> Session {
        let (host_stdin, plugin_stdin) = tokio::io::duplex(PIPE);
        let (plugin_stdout, host_stdout) = tokio::io::duplex(PIPE);
        let (exit_tx, exit) = watch::channel(None);
        let (kill, mut kill_rx) = KillSwitch::new();
        let framers = options.framing.map(|f| {
            (
                f.framer(options.frame_limits),
                f.sender(options.frame_limits),
            )
        });
        let tail = stderr.clone();
        tokio::spawn(async move {
            let run = run(plugin, plugin_stdin, plugin_stdout, framers, tail);
            let exit = tokio::select! {
                exit = run => exit,
                () = killed(&mut kill_rx) => Exit::Killed { signal: None },
            };
            let _ = exit_tx.send(Some(exit));
        });
        let transport = Transport {
            stdin: PluginStdin::Stream(Box::pin(host_stdin)),
            stdout: PluginStdout::Stream(Box::pin(host_stdout)),
            exit,
            kill,
            stderr,
            pid: None,
            plugin_depth: 0,
        };
        Session::new(transport, options, meter)
    }
}

/// The plugin's side: read frames until stdin ends, the plugin finishes, or it stops.
async fn run(
    mut plugin: impl InProcess,
    mut stdin: tokio::io::DuplexStream,
    mut stdout: tokio::io::DuplexStream,
    mut framers: Option<(AnyFramer, AnyFramer)>,
    stderr: StderrTail,
) -> Exit {
    let mut write = async |frames: Vec<Vec<u8>>, framers: &mut Option<(AnyFramer, AnyFramer)>| {
        let mut out = BytesMut::new();
        for frame in frames {
            match framers {
                Some((_, encoder)) => {
                    if let Err(e) = encoder.encode(&frame, &mut out) {
                        return Err(format!("the in-process plugin wrote a bad frame: {e}"));
                    }
                }
                None => out.extend_from_slice(&frame),
            }
        }
        // The host closing stdout is the host's business: the plugin just ends.
        stdout.write_all(&out).await.map_err(|e| e.to_string())
    };
    let greeting = plugin.start();
    if let Err(message) = write(greeting, &mut framers).await {
        return fail(&stderr, &message);
    }
    let mut buf = BytesMut::with_capacity(PIPE);
    loop {
        let n = match stdin.read_buf(&mut buf).await {
            Ok(n) => n,
            Err(e) => return fail(&stderr, &e.to_string()),
        };
        loop {
            let frame = match &mut framers {
                Some((decoder, _)) if n == 0 => decoder.decode_eof(&mut buf),
                Some((decoder, _)) => decoder.decode(&mut buf),
                None if buf.is_empty() => Ok(None),
                None => Ok(Some(buf.split().freeze())),
            };
            let frame = match frame {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => return fail(&stderr, &format!("bad frame from the host: {e}")),
            };
            let frames = match plugin.handle(&frame).await {
                Ok(frames) => frames,
                Err(exit) => return exit,
            };
            if let Err(message) = write(frames, &mut framers).await {
                return fail(&stderr, &message);
            }
            if plugin.finished() {
                plugin.close().await;
                return Exit::Exited(0);
            }
        }
        if n == 0 {
            plugin.close().await;
            return Exit::Exited(0);
        }
    }
}

fn fail(stderr: &StderrTail, message: &str) -> Exit {
    stderr.push(format!("{message}\n").as_bytes());
    Exit::Exited(1)
}
