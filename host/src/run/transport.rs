//! What a running plugin looks like to a session, whichever way it runs.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Poll};

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

/// A stdout that hands over what was written as `Bytes`: a wasm guest's pipe
/// (`sandbox::stdio::PipeReader`).
pub(crate) trait BytesSource: AsyncRead + Send {
    /// What was written and not yet read, as it lies when it is one write (several writes are
    /// gathered into one buffer); empty at the end.
    fn poll_read_bytes(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<Bytes>>;
}

impl PluginStdout {
    /// Read what comes next into `buf`, returning how many bytes (0 at the end). Into an empty
    /// `buf`, a guest's bytes become `buf` itself, without a copy; otherwise they are appended
    /// into the room the caller reserved, as a stream's are.
    pub(crate) async fn read_into(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        match self {
            PluginStdout::Guest(pipe) if buf.is_empty() => {
                let bytes = std::future::poll_fn(|cx| pipe.as_mut().poll_read_bytes(cx)).await?;
                let n = bytes.len();
                *buf = BytesMut::from(bytes);
                Ok(n)
            }
            PluginStdout::Guest(pipe) => pipe.read_buf(buf).await,
            PluginStdout::Stream(stream) => stream.read_buf(buf).await,
        }
    }

    /// Whether [`Self::read_into`] makes an empty buffer of the bytes it reads, so the caller
    /// need not reserve room.
    pub(crate) fn hands_over_bytes(&self) -> bool {
        matches!(self, PluginStdout::Guest(_))
    }

    /// Read into `scratch`, as [`AsyncReadExt::read`].
    pub(crate) async fn read(&mut self, scratch: &mut [u8]) -> std::io::Result<usize> {
        match self {
            PluginStdout::Guest(pipe) => pipe.read(scratch).await,
            PluginStdout::Stream(stream) => stream.read(scratch).await,
        }
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
    /// Write all of `bytes` and flush.
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            PluginStdin::Stream(w) => {
                w.write_all(bytes).await?;
                w.flush().await
            }
            PluginStdin::Guest(pipe) => pipe.write_all(bytes).await,
        }
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
        match self {
            PluginStdin::Stream(w) => w.shutdown().await,
            PluginStdin::Guest(pipe) => pipe.shutdown().await,
        }
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
