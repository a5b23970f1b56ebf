//! The engine's side of `sandpipe run`, built once for every way `run` bridges: sandpipe's
//! stdin split into pieces ([`EngineReader`]) and frames written to its stdout
//! ([`EngineWriter`]). `run` passes the pieces on byte for byte (see `run.rs`); `run --protocol`
//! and an export component's server take frames through channels ([`read_engine`],
//! [`write_engine`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::BytesMut;
use sandpipe_proto::frame::{
    AnyFramer, EngineSplitter, FrameError, FrameLimits, Framer, Framing, Piece,
};
use tokio::sync::mpsc;

use super::stdio::{EngineStdin, EngineStdout};
use crate::run::read_room::reserve_read_room;

/// How much the reader first asks of stdin at a time.
const READ_SIZE: usize = 64 * 1024;
/// The most it asks for: the capacity sandpipe gives its stdin pipe (`stdio::PIPE_BYTES`), so
/// one read takes whatever one engine write put there.
const MAX_READ_SIZE: usize = 1 << 20;

/// sandpipe's stdin as the engine wrote it: split into frames by [`EngineSplitter`] (never
/// judged: a malformed JSON line is a frame like any other) or, without a framing, raw bytes.
#[derive(Debug)]
pub(crate) struct EngineReader {
    stdin: EngineStdin,
    splitter: Option<EngineSplitter>,
    buf: BytesMut,
    /// How much the next read asks for: doubled (up to [`MAX_READ_SIZE`]) whenever a read
    /// fills it, so a large frame is read in one or two reads, not one per 64 KiB.
    read_size: usize,
    eof: bool,
}

impl EngineReader {
    /// Must be called inside the runtime.
    pub(crate) fn open(framing: Option<Framing>, limits: FrameLimits) -> EngineReader {
        EngineReader {
            stdin: EngineStdin::open(),
            splitter: framing.map(|f| EngineSplitter::new(f, limits)),
            buf: BytesMut::with_capacity(READ_SIZE),
            read_size: READ_SIZE,
            eof: false,
        }
    }

    /// The next piece of the engine's stream; `None` once it has ended (a read error ends it as
    /// EOF does). Cancel safe: bytes read are kept for the next call.
    pub(crate) async fn next(&mut self) -> Option<Piece> {
        loop {
            let piece = match &mut self.splitter {
                Some(split) => split.next(&mut self.buf, self.eof),
                None => (!self.buf.is_empty()).then(|| Piece::Raw(self.buf.split().freeze())),
            };
            if piece.is_some() || self.eof {
                return piece;
            }
            reserve_read_room(&mut self.buf, self.read_size);
            let room = self.buf.capacity() - self.buf.len();
            match self.stdin.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => self.eof = true,
                Ok(n) => self.read_size = next_read_size(self.read_size, n, room),
            }
        }
    }
}

/// The size of the next read after one of `n` bytes into `room`: doubled while reads fill the
/// buffer (input arrives faster than it is taken), up to [`MAX_READ_SIZE`].
fn next_read_size(current: usize, n: usize, room: usize) -> usize {
    if n >= room {
        (current * 2).min(MAX_READ_SIZE)
    } else {
        current
    }
}

/// Why a frame did not reach the engine.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// The frame does not fit the framing (or its limits).
    Frame(FrameError),
    /// sandpipe's stdout is gone: the engine closed its end.
    Closed,
}

/// sandpipe's stdout, each frame encoded with the framing (or raw) and flushed.
#[derive(Debug)]
pub(crate) struct EngineWriter {
    stdout: EngineStdout,
    framing: Option<Framing>,
    encoder: Option<AnyFramer>,
    out: BytesMut,
    written: u64,
}

impl EngineWriter {
    /// Must be called inside the runtime.
    pub(crate) fn open(framing: Option<Framing>, limits: FrameLimits) -> EngineWriter {
        EngineWriter {
            stdout: EngineStdout::open(),
            framing,
            // The sender's checks: the engine validates what it reads, as any receiver does.
            encoder: framing.map(|f| f.sender(limits)),
            out: BytesMut::new(),
            written: 0,
        }
    }

    /// Write `frame`: under `headers` (a `Content-Length` plugin's own header block, already
    /// checked, `Content-Type` included) when given, else encoded; raw bytes without a framing.
    pub(crate) async fn write(
        &mut self,
        frame: &[u8],
        headers: Option<&[u8]>,
    ) -> Result<(), WriteError> {
        let bytes: &[u8] = match (&mut self.encoder, headers) {
            (Some(_), Some(headers)) => {
                self.out.clear();
                self.out.extend_from_slice(headers);
                self.out.extend_from_slice(frame);
                &self.out
            }
            (Some(encoder), None) => {
                self.out.clear();
                encoder
                    .encode(frame, &mut self.out)
                    .map_err(WriteError::Frame)?;
                &self.out
            }
            (None, _) => frame,
        };
        self.written += bytes.len() as u64;
        self.stdout
            .write_all(bytes)
            .await
            .map_err(|_| WriteError::Closed)
    }

    /// Write `frame`, just decoded from the plugin's stdout with this framing and limits (and,
    /// for `Content-Length`, under the `headers` it came with): it is a valid frame already, so
    /// it is not checked or copied again; it goes out with its delimiter in one `writev`.
    pub(crate) async fn write_decoded(
        &mut self,
        frame: &[u8],
        headers: Option<&[u8]>,
    ) -> Result<(), WriteError> {
        let parts: [&[u8]; 2] = match (self.framing, headers) {
            (Some(Framing::JsonLines), _) => [frame, b"\n"],
            (Some(Framing::CborSeq), _) | (None, _) => [frame, b""],
            (Some(_), Some(headers)) => [headers, frame],
            (Some(_), None) => return self.write(frame, None).await,
        };
        self.written += (parts[0].len() + parts[1].len()) as u64;
        self.stdout
            .write_all_parts(&parts)
            .await
            .map_err(|_| WriteError::Closed)
    }

    /// How many bytes have gone to the engine.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }
}

/// Frames from sandpipe's stdin into `tx` (`run --protocol`, an export component's server). A
/// frame over the cap, or a CBOR or `Content-Length` stream that loses its framing (the
/// supervisor tracks requests, so it needs frames), ends the input like EOF (requests before
/// it are still answered) and is returned. `ended` is set when the input has ended, whichever
/// way.
pub(crate) async fn read_engine(
    tx: mpsc::Sender<Vec<u8>>,
    framing: Framing,
    limits: FrameLimits,
    ended: Arc<AtomicBool>,
) -> Result<(), FrameError> {
    let mut reader = EngineReader::open(Some(framing), limits);
    let result = loop {
        let Some(piece) = reader.next().await else {
            break Ok(());
        };
        match piece {
            Piece::Frame { frame, .. } => {
                if tx.send(frame.to_vec()).await.is_err() {
                    break Ok(());
                }
            }
            // A blank JSON Lines line: no frame, nothing to track.
            Piece::Raw(_) => {}
            Piece::LostFraming(e) | Piece::TooLarge(e) => break Err(e),
        }
    };
    // Set while `tx` still stands: whoever sees the channel close sees this too.
    ended.store(true, Ordering::SeqCst);
    drop(tx);
    result
}

/// Frames from `rx` to sandpipe's stdout, each flushed, until `rx` closes or the engine does.
pub(crate) async fn write_engine(
    mut rx: mpsc::Receiver<Vec<u8>>,
    framing: Framing,
    limits: FrameLimits,
) {
    let mut writer = EngineWriter::open(Some(framing), limits);
    while let Some(frame) = rx.recv().await {
        match writer.write(&frame, None).await {
            Ok(()) => {}
            Err(WriteError::Frame(e)) => tracing::warn!("dropping a frame for the engine: {e}"),
            Err(WriteError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_grow_while_they_fill_the_buffer_up_to_the_pipe_capacity() {
        let mut size = READ_SIZE;
        // A 64 KiB frame and its newline: the first read fills its room, the next one is larger.
        size = next_read_size(size, READ_SIZE, READ_SIZE);
        assert_eq!(size, 2 * READ_SIZE);
        // A short read keeps the size.
        assert_eq!(next_read_size(size, 100, size), size);
        for _ in 0..10 {
            size = next_read_size(size, size, size);
        }
        assert_eq!(size, MAX_READ_SIZE);
    }
}
