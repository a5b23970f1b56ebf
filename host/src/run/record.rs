//! Recording a session as a transcript (`--record FILE`), in the format of
//! `tests/transcripts` (see `sandpipe_proto::transcript`).
//!
//! Frames are appended as they pass, one line each and flushed, so a session that dies still
//! leaves everything up to its last frame; the outcome is appended as a `# outcome:` comment
//! once the plugin has ended. Network data lines are buffered ([`BUFFER`]) and written with
//! the next line that is not data (a frame, a connection's `open`, `response`, `close`, …) or
//! when the buffer fills: a body of a MiB is then a handful of writes, not one per line.
//!
//! The recorder is also the session's [`NetSink`]: each admitted `wasi:http` exchange is
//! written among the frames as network lines (`@N …`), its bodies chunk by chunk as they pass,
//! never held whole. A data line holds [`DATA_CHUNK`] bytes, or what came in that direction
//! before the other direction spoke, the connection's next line or the plugin's next frame: where a chunk ends then
//! follows from what the plugin and the server said, not from how the network cut it, so two
//! runs of a deterministic plugin against the same answers write the same lines. The whole file is capped (`--max-record`): a line that would take it past
//! the cap is not written; a `# stopped:` line says why, the session's network gets the
//! [`RecordError`] from then on, and [`Recorder::failure`] has it for the caller to report.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use sandpipe_proto::frame::Framing;
use sandpipe_proto::transcript::{
    Direction, NetDir, NetEvent, NetOpen, render_line, render_net, render_net_data,
};

use crate::error::{Exit, RecordError};
use crate::net::NetSink;
use crate::policy::Policy;
use crate::policy::sections::DEFAULT_MAX_RECORD;

/// The most bytes one data line holds (8 KiB of hex).
pub const DATA_CHUNK: usize = 4096;

/// How much of the recording may wait in memory before it is written (data lines only).
const BUFFER: usize = 64 * 1024;

/// Writes one session's transcript.
#[derive(Debug)]
pub struct Recorder {
    inner: Mutex<Inner>,
    framing: Framing,
}

#[derive(Debug)]
struct Inner {
    out: BufWriter<File>,
    frames: usize,
    finished: bool,
    /// Bytes written so far, the header included.
    written: u64,
    /// The cap on `written`.
    limit: u64,
    /// Connections opened so far (the next one's number).
    conns: u64,
    /// Why the recording stopped, once it has.
    failed: Option<RecordError>,
    /// Each connection's bytes not yet written, under [`DATA_CHUNK`], with their direction.
    pending: HashMap<u64, (NetDir, Vec<u8>)>,
}

impl Inner {
    /// Add `bytes` of `conn` going `dir`: what the other direction had pending is written
    /// first (the order of the two ways is kept), then every full [`DATA_CHUNK`].
    fn pend(&mut self, conn: u64, dir: NetDir, mut bytes: &[u8]) -> Result<(), RecordError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.pending.get(&conn).is_some_and(|(d, _)| *d != dir) {
            self.flush(conn)?;
        }
        let (_, mut buf) = self
            .pending
            .remove(&conn)
            .unwrap_or_else(|| (dir, Vec::with_capacity(DATA_CHUNK)));
        while !bytes.is_empty() {
            if buf.is_empty() && bytes.len() >= DATA_CHUNK {
                // A whole chunk is written from where it lies.
                let (chunk, rest) = bytes.split_at(DATA_CHUNK);
                self.write(&render_net_data(conn, dir, chunk), false)?;
                bytes = rest;
                continue;
            }
            let take = (DATA_CHUNK - buf.len()).min(bytes.len());
            buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if buf.len() == DATA_CHUNK {
                self.write(&render_net_data(conn, dir, &buf), false)?;
                buf.clear();
            }
        }
        if !buf.is_empty() {
            self.pending.insert(conn, (dir, buf));
        }
        Ok(())
    }

    /// Write what `conn` has pending (buffered, as data lines are).
    fn flush(&mut self, conn: u64) -> Result<(), RecordError> {
        match self.pending.remove(&conn) {
            Some((dir, buf)) => self.write(&render_net_data(conn, dir, &buf), false),
            None => Ok(()),
        }
    }

    /// Append `line` whole and flush (with every data line buffered before it).
    fn append(&mut self, line: &str) -> Result<(), RecordError> {
        self.write(line, true)
    }

    /// Append `line` whole, flushed or left in the buffer, or, past the cap or on a write
    /// error, nothing: the recording then ends with a `# stopped:` line, and this and every
    /// later line is refused.
    fn write(&mut self, line: &str, flush: bool) -> Result<(), RecordError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let got = self.written + line.len() as u64;
        let result = if got > self.limit {
            Err(RecordError::TooLarge {
                limit: self.limit,
                got,
            })
        } else {
            self.out
                .write_all(line.as_bytes())
                .and_then(|()| if flush { self.out.flush() } else { Ok(()) })
                .map_err(|e| RecordError::Write {
                    message: e.to_string(),
                })
        };
        match result {
            Ok(()) => {
                self.written = got;
                Ok(())
            }
            Err(e) => {
                tracing::error!("{e}; the recording stops here");
                let _ = writeln!(self.out, "# stopped: {e}").and_then(|()| self.out.flush());
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }
}

/// What the header of a recording says.
#[derive(Debug, Clone)]
pub struct RecordHeader<'a> {
    /// The plugin's file name.
    pub plugin: &'a str,
    /// Its sha256.
    pub sha256: &'a str,
    /// The framing.
    pub framing: Framing,
    /// The protocol, for `call`.
    pub protocol: Option<&'a str>,
    /// The policy it ran under.
    pub policy: &'a Policy,
    /// The largest frame either way (`limits.max-frame`), which the session's options hold
    /// rather than the policy.
    pub max_frame: Option<u64>,
    /// The largest recording (`limits.max-record`), [`DEFAULT_MAX_RECORD`] when `None`.
    pub max_record: Option<u64>,
}

impl Recorder {
    /// Create `path` and write the header.
    pub fn create(path: &Path, header: &RecordHeader<'_>) -> std::io::Result<Recorder> {
        let mut out = Vec::new();
        let p = header.policy;
        writeln!(out, "# sandpipe transcript 1")?;
        writeln!(out, "# sandpipe: {}", env!("CARGO_PKG_VERSION"))?;
        writeln!(out, "# plugin: {}", header.plugin)?;
        writeln!(out, "# sha256: {}", header.sha256)?;
        writeln!(out, "# framing: {}", header.framing.name())?;
        if let Some(protocol) = header.protocol {
            writeln!(out, "# protocol: {protocol}")?;
        }
        // The whole policy, as data (environment and header values are never written: they
        // may be secrets, and replay takes them from its own environment).
        let mut doc = p.document();
        doc.limits.max_frame = header.max_frame;
        doc.limits.max_record = header.max_record;
        let policy = serde_json::to_string(&doc).map_err(std::io::Error::other)?;
        writeln!(out, "# policy: {policy}")?;
        let mut file = BufWriter::with_capacity(BUFFER, File::create(path)?);
        file.write_all(&out)?;
        file.flush()?;
        Ok(Recorder {
            inner: Mutex::new(Inner {
                out: file,
                frames: 0,
                finished: false,
                written: out.len() as u64,
                limit: header.max_record.unwrap_or(DEFAULT_MAX_RECORD),
                conns: 0,
                failed: None,
                pending: HashMap::new(),
            }),
            framing: header.framing,
        })
    }

    /// Append one frame.
    pub(crate) fn frame(&self, dir: Direction, frame: &[u8]) {
        let note = match self.framing {
            Framing::CborSeq => Some(crate::run::cbor_note::render(frame)),
            _ => None,
        };
        let line = render_line(dir, frame, note.as_deref());
        let mut inner = self.lock();
        // Bytes that passed before the plugin wrote this frame are written before it, in
        // connection order, so the network lines stay in order with what the plugin did. (An
        // engine's frame is not a cut: when it is forwarded depends on timing.)
        let mut pending: Vec<u64> = match dir {
            Direction::FromPlugin => inner.pending.keys().copied().collect(),
            _ => Vec::new(),
        };
        pending.sort_unstable();
        for conn in pending {
            if inner.flush(conn).is_err() {
                break;
            }
        }
        // A recording that cannot be written does not stop the session's frames: it is
        // logged once (`append`) and reported at the end (`failure`).
        if inner.append(&line).is_ok() {
            inner.frames += 1;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why the recording stopped before its end, if it did: it is then incomplete, and the
    /// caller should say so (the CLI exits with status 125).
    pub fn failure(&self) -> Option<RecordError> {
        self.lock().failed.clone()
    }

    /// Append the outcome (once).
    pub(crate) fn outcome(&self, exit: &Exit) {
        let mut inner = self.lock();
        if inner.finished || inner.failed.is_some() {
            return;
        }
        inner.finished = true;
        let frames = inner.frames;
        let _ = writeln!(inner.out, "# outcome: {exit} ({frames} frames)")
            .and_then(|()| inner.out.flush());
    }
}

impl NetSink for Recorder {
    fn open(&self, open: &NetOpen) -> Result<u64, RecordError> {
        let mut inner = self.lock();
        let conn = inner.conns;
        inner.append(&render_net(conn, &NetEvent::Open(open.clone())))?;
        inner.conns += 1;
        Ok(conn)
    }

    fn event(&self, conn: u64, event: &NetEvent) -> Result<(), RecordError> {
        let mut inner = self.lock();
        inner.flush(conn)?;
        inner.append(&render_net(conn, event))
    }

    fn data(&self, conn: u64, dir: NetDir, bytes: &[u8]) -> Result<(), RecordError> {
        self.lock().pend(conn, dir, bytes)
    }
}
