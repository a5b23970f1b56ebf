//! What a running plugin looks like to a session, whichever way it runs.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::error::Exit;
use crate::run::stderr::StderrTail;

/// A running plugin: its stdio, how it ended, and a way to stop it.
pub(crate) struct Transport {
    pub(crate) stdin: PluginStdin,
    pub(crate) stdout: PluginStdout,
    /// `None` while running; the exit once the plugin is gone.
    pub(crate) exit: watch::Receiver<Option<Exit>>,
    pub(crate) kill: KillSwitch,
    pub(crate) stderr: StderrTail,
    /// The child's process id (native plugins only).
    pub(crate) pid: Option<u32>,
    /// How many of sandpipe's own processes stand between `pid` and the plugin (a namespaced
    /// native plugin's monitor and PID 1: 2), left out when its memory is measured.
    pub(crate) plugin_depth: u8,
}

/// A plugin's stdout, as a session reads it.
pub(crate) enum PluginStdout {
    /// A pipe from a process, or an in-memory plugin's duplex: bytes are copied out.
    Stream(Pin<Box<dyn AsyncRead + Send>>),
    /// A wasm guest's stdout: what each guest write lifted out of the guest's memory is handed
    /// over as it lies.
    Guest(Pin<Box<dyn BytesSource>>),
}

/// A stdout that can hand over what was written as `Bytes`: a wasm guest's pipe
/// (`sandbox::stdio::PipeReader`).
pub(crate) trait BytesSource: AsyncRead + Send {
    /// Once there is something to read: `Some` of the one write waiting, as it lies (empty at
    /// the end), or `None` when several writes wait, to be read with `poll_read` instead.
    fn poll_one_write(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Bytes>>;
}

impl PluginStdout {
    /// Read into an empty `buf` when the plugin hands over its writes: once something arrives,
    /// if it is one guest write, it becomes `buf` as it lies and its length is returned (0 at
    /// the end). `None` when it is several writes, when `buf` holds bytes, or for a stream:
    /// then reserve room and [`Self::read_into`] it. Gathering several writes into a new
    /// buffer instead cost more than copying them into the session's buffer, which is reused
    /// (a stream of 64 KiB frames ran at half the speed).
    pub(crate) async fn take_one_write(&mut self, buf: &mut BytesMut) -> Option<usize> {
        match self {
            PluginStdout::Guest(pipe) if buf.is_empty() => {
                let bytes = std::future::poll_fn(|cx| pipe.as_mut().poll_one_write(cx)).await?;
                let n = bytes.len();
                *buf = BytesMut::from(bytes);
                Some(n)
            }
            _ => None,
        }
    }

    /// Either kind, as the byte stream it also is.
    fn stream(&mut self) -> Pin<&mut (dyn AsyncRead + Send)> {
        match self {
            PluginStdout::Stream(stream) => stream.as_mut(),
            PluginStdout::Guest(pipe) => pipe.as_mut(),
        }
    }

    /// Read into the room reserved in `buf`, as [`AsyncReadExt::read_buf`].
    pub(crate) async fn read_into(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        self.stream().read_buf(buf).await
    }

    /// Read into `scratch`, as [`AsyncReadExt::read`].
    pub(crate) async fn read(&mut self, scratch: &mut [u8]) -> std::io::Result<usize> {
        self.stream().read(scratch).await
    }
}

/// A plugin's stdin, as a session writes to it.
pub(crate) enum PluginStdin {
    /// A pipe to a process, or an in-memory plugin's duplex: bytes are copied in.
    Stream(Pin<Box<dyn AsyncWrite + Send>>),
    /// A wasm guest's stdin: a frame held as `Bytes` is handed over without a copy.
    Guest(Pin<Box<dyn BytesSink>>),
}

/// A stdin that takes a frame's `Bytes` as they are: a wasm guest's pipe
/// (`sandbox::stdio::PipeWriter`).
pub(crate) trait BytesSink: AsyncWrite + Send {
    /// Take as much of `bytes` as there is room for off its front, without copying it;
    /// `Pending` while there is no room.
    fn poll_write_bytes(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &mut Bytes,
    ) -> Poll<std::io::Result<()>>;
}

impl PluginStdin {
    /// Either kind, as the byte stream it also is.
    fn stream(&mut self) -> Pin<&mut (dyn AsyncWrite + Send)> {
        match self {
            PluginStdin::Stream(stream) => stream.as_mut(),
            PluginStdin::Guest(pipe) => pipe.as_mut(),
        }
    }

    /// Write all of `bytes` and flush.
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut stream = self.stream();
        stream.write_all(bytes).await?;
        stream.flush().await
    }

    /// Write all of `bytes` and flush; a wasm guest takes them as they are.
    pub(crate) async fn write_bytes(&mut self, mut bytes: Bytes) -> std::io::Result<()> {
        match self {
            PluginStdin::Stream(_) => self.write(&bytes).await,
            PluginStdin::Guest(pipe) => {
                while !bytes.is_empty() {
                    std::future::poll_fn(|cx| pipe.as_mut().poll_write_bytes(cx, &mut bytes))
                        .await?;
                }
                Ok(())
            }
        }
    }

    /// Close it: the plugin reads EOF.
    pub(crate) async fn shutdown(&mut self) -> std::io::Result<()> {
        self.stream().shutdown().await
    }
}

/// Counters a running plugin shares with its session.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    /// Requests begun ([`SessionControl::begin_request`](crate::SessionControl::begin_request));
    /// a per-request fuel budget re-arms when the guest next runs after this changes.
    pub(crate) requests: AtomicU64,
    /// Linear memory in use, in bytes (wasm; native plugins are read from `/proc`).
    pub(crate) memory: AtomicU64,
}

/// Kills the plugin when asked, or when the last clone is dropped (a dropped session never
/// leaves a plugin running).
#[derive(Debug, Clone)]
pub(crate) struct KillSwitch(Arc<KillOnDrop>);

#[derive(Debug)]
struct KillOnDrop(watch::Sender<bool>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(true);
    }
}

impl KillSwitch {
    pub(crate) fn new() -> (Self, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        (Self(Arc::new(KillOnDrop(tx))), rx)
    }

    pub(crate) fn kill(&self) {
        let _ = self.0.0.send(true);
    }

    /// A handle that can throw the switch but does not keep the plugin alive.
    pub(crate) fn downgrade(&self) -> WeakKillSwitch {
        WeakKillSwitch(Arc::downgrade(&self.0))
    }
}

/// A [`KillSwitch`] that does not count as a holder: once every real one is dropped (and the
/// plugin killed for it), it does nothing.
#[derive(Debug, Clone)]
pub(crate) struct WeakKillSwitch(std::sync::Weak<KillOnDrop>);

impl WeakKillSwitch {
    pub(crate) fn kill(&self) {
        if let Some(k) = self.0.upgrade() {
            let _ = k.0.send(true);
        }
    }
}

/// Resolves once the kill switch is thrown or dropped.
pub(crate) async fn killed(rx: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send: drop it here, inside this function.
    let _ = rx.wait_for(|k| *k).await.map(|_| ());
}

/// Publish the exit once stderr is drained, so a trap's tail holds the guest's last words.
pub(crate) async fn finish(
    exit: Exit,
    stderr_task: tokio::task::JoinHandle<()>,
    tail: &StderrTail,
    exit_tx: watch::Sender<Option<Exit>>,
) {
    // The guest's pipe ends are gone, so the drain reaches EOF at once; the timeout only
    // guards against a native grandchild that still holds stderr open.
    let _ = tokio::time::timeout(Duration::from_secs(1), stderr_task).await;
    let exit = match exit {
        Exit::Trap { message, .. } => Exit::Trap {
            message,
            stderr_tail: tail.lines(),
        },
        other => other,
    };
    let _ = exit_tx.send(Some(exit));
}

/// A file name suitable for argv\[0\].
pub(crate) fn argv0_for(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| PathBuf::from(path).display().to_string())
}
