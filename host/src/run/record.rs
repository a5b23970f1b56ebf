//! Recording a session as a transcript (`--record FILE`), in the format of
//! `tests/transcripts` (see `sandpipe_proto::transcript`).
//!
//! Frames are appended as they pass, each written (with every line before it) before the
//! call returns, so a session that dies still leaves everything up to its last frame; the
//! outcome is appended as a `# outcome:` comment
//! once the plugin has ended. Network lines are rendered into a buffer ([`BUFFER`]) and
//! written when it fills or with the next frame: a body of a MiB is a handful of writes, and
//! a request's lines cost no write of their own.
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
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use sandpipe_proto::frame::Framing;
use sandpipe_proto::transcript::{
    Direction, NetDir, NetEvent, NetOpen, push_line, push_net_data, render_net,
};

use crate::error::{Exit, RecordError};
use crate::net::NetSink;
use crate::policy::Policy;
use crate::policy::sections::DEFAULT_MAX_RECORD;

/// The most bytes one data line holds (8 KiB of hex).
pub const DATA_CHUNK: usize = 4096;

/// How much of the recording waits in memory before it is written.
const BUFFER: usize = 64 * 1024;

/// Writes one session's transcript.
#[derive(Debug)]
pub struct Recorder {
    inner: Mutex<Inner>,
    framing: Framing,
}

#[derive(Debug)]
struct Inner {
    out: Out,
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
                self.data(conn, dir, chunk)?;
                bytes = rest;
                continue;
            }
            let take = (DATA_CHUNK - buf.len()).min(bytes.len());
            buf.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if buf.len() == DATA_CHUNK {
                self.data(conn, dir, &buf)?;
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
            Some((dir, buf)) => self.data(conn, dir, &buf),
            None => Ok(()),
        }
    }

    /// One data line, in the buffer.
    fn data(&mut self, conn: u64, dir: NetDir, bytes: &[u8]) -> Result<(), RecordError> {
        self.put(false, |buf| push_net_data(buf, conn, dir, bytes))
    }

    /// Append `line` whole, in the buffer (a network line).
    fn line(&mut self, line: &str) -> Result<(), RecordError> {
        self.put(false, |buf| buf.push_str(line))
    }

    /// Append the line `render` adds to the buffer, and write it (`sync`) or leave it there
    /// until the buffer is full; or, past the cap or after a write error, nothing: the
    /// recording then ends with a `# stopped:` line, and this and every later line is refused.
    fn put(&mut self, sync: bool, render: impl FnOnce(&mut String)) -> Result<(), RecordError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let start = self.out.buf.len();
        render(&mut self.out.buf);
        let got = self.written + (self.out.buf.len() - start) as u64;
        let result = if got > self.limit {
            self.out.buf.truncate(start);
            Err(RecordError::TooLarge {
                limit: self.limit,
                got,
            })
        } else if sync {
            self.out.sync()
        } else {
            self.out.write_if_full()
        };
        match result {
            Ok(()) => {
                self.written = got;
                Ok(())
            }
            Err(e) => Err(self.stop(e)),
        }
    }

    /// Write what waits; a write error stops the recording.
    fn sync(&mut self) {
        if self.failed.is_none()
            && let Err(e) = self.out.sync()
        {
            self.stop(e);
        }
    }

    /// The recording stops with `e`: a `# stopped:` line says why (as far as the file takes
    /// it), and every later line is refused with `e`.
    fn stop(&mut self, e: RecordError) -> RecordError {
        tracing::error!("{e}; the recording stops here");
        let _ = writeln!(self.out.buf, "# stopped: {e}");
        let _ = self.out.sync();
        self.failed = Some(e.clone());
        e
    }
}

/// Where a recording's lines go: a buffer, written to the file when it is full or when a line
/// must be in the file before the call returns. It is one buffer for the whole recording,
/// reallocated only for a line longer than a chunk's hex (a request's headers can be).
#[derive(Debug)]
struct Out {
    file: File,
    /// Lines not yet written.
    buf: String,
}

impl Out {
    fn new(file: File) -> Self {
        Self {
            file,
            buf: String::with_capacity(BUFFER + 2 * DATA_CHUNK + 64),
        }
    }

    /// Write the buffer once it is full.
    fn write_if_full(&mut self) -> Result<(), RecordError> {
        match self.buf.len() < BUFFER {
            true => Ok(()),
            false => self.sync(),
        }
    }

    /// Every line so far in the file.
    fn sync(&mut self) -> Result<(), RecordError> {
        let result = self.file.write_all(self.buf.as_bytes());
        self.buf.clear();
        result.map_err(|e| RecordError::Write {
            message: e.to_string(),
        })
    }
}

impl Drop for Out {
    /// What is left is written.
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            let _ = self.sync();
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
        let file = File::create(path)?;
        (&file).write_all(&out)?;
        Ok(Recorder {
            inner: Mutex::new(Inner {
                out: Out::new(file),
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
        // logged once (`stop`) and reported at the end (`failure`). The line is rendered
        // straight into the buffer, and written with what waits before it.
        let line = |buf: &mut String| push_line(buf, dir, frame, note.as_deref());
        if inner.put(true, line).is_ok() {
            inner.frames += 1;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why the recording stopped before its end, if it did: it is then incomplete, and the
    /// caller should say so (the CLI exits with status 125).
    pub fn failure(&self) -> Option<RecordError> {
        let mut inner = self.lock();
        inner.sync();
        inner.failed.clone()
    }

    /// Append the outcome (once).
    pub(crate) fn outcome(&self, exit: &Exit) {
        let mut inner = self.lock();
        if inner.finished || inner.failed.is_some() {
            return;
        }
        inner.finished = true;
        let frames = inner.frames;
        // Not counted against the cap: the outcome is always written.
        let _ = writeln!(inner.out.buf, "# outcome: {exit} ({frames} frames)");
        inner.sync();
    }
}

impl NetSink for Recorder {
    fn open(&self, open: &NetOpen) -> Result<u64, RecordError> {
        let mut inner = self.lock();
        let conn = inner.conns;
        inner.line(&render_net(conn, &NetEvent::Open(open.clone())))?;
        inner.conns += 1;
        Ok(conn)
    }

    fn event(&self, conn: u64, event: &NetEvent) -> Result<(), RecordError> {
        let mut inner = self.lock();
        inner.flush(conn)?;
        inner.line(&render_net(conn, event))
    }

    fn data(&self, conn: u64, dir: NetDir, bytes: &[u8]) -> Result<(), RecordError> {
        self.lock().pend(conn, dir, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandpipe_proto::transcript::{NetVia, Recording};

    fn recorder(file: &Path, max_record: Option<u64>) -> Recorder {
        let header = RecordHeader {
            plugin: "plugin",
            sha256: "",
            framing: Framing::JsonLines,
            protocol: None,
            policy: &Policy::default(),
            max_frame: None,
            max_record,
        };
        Recorder::create(file, &header).expect("recorder")
    }

    fn open(r: &Recorder) -> u64 {
        r.open(&NetOpen {
            via: NetVia::WasiSockets,
            host: "api.test".into(),
            port: 80,
            kind: None,
            addr: None,
            rule: None,
        })
        .expect("open")
    }

    /// A body of many buffers, then a frame: the frame is in the file, after every line of
    /// the body, when `frame` returns (the recorder still alive), and the file reads back as
    /// the bytes that passed.
    #[test]
    fn a_frame_after_a_body_is_in_the_file_after_all_of_it_when_it_returns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("t");
        let r = recorder(&file, None);
        let conn = open(&r);
        // Not text (it has newlines): hex, 2 bytes a byte, so 3 MiB of lines.
        let body: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
        for piece in body.chunks(8192) {
            r.data(conn, NetDir::In, piece).expect("data");
        }
        r.frame(Direction::FromPlugin, b"{\"done\":true}");
        let text = std::fs::read_to_string(&file).expect("read");
        assert!(
            text.ends_with("{\"done\":true}\n"),
            "{}",
            &text[text.len() - 200..]
        );
        let recording = Recording::parse(&text).expect("parse");
        let got: Vec<u8> = recording
            .net
            .iter()
            .filter_map(|e| match &e.event {
                NetEvent::Data { bytes, .. } => Some(bytes.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(got.len(), body.len());
        assert!(got == body, "the recorded bytes differ from the body");
        assert_eq!(r.failure(), None);
    }

    /// A network line waits in the buffer; the next frame writes it, before itself.
    #[test]
    fn network_lines_wait_for_the_next_frame_which_writes_them_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("t");
        let r = recorder(&file, None);
        let size = std::fs::metadata(&file).expect("stat").len();
        let conn = open(&r);
        r.data(conn, NetDir::Out, b"GET").expect("data");
        r.event(conn, &NetEvent::Close).expect("close");
        assert_eq!(std::fs::metadata(&file).expect("stat").len(), size);
        r.frame(Direction::FromPlugin, b"{}");
        let text = std::fs::read_to_string(&file).expect("read");
        assert!(text.ends_with("@0 > GET\n@0 close\n< {}\n"), "{text}");
    }

    /// Past the cap, the line is not written, the data call fails with the cap, and the file
    /// ends with every line before it and the `# stopped:` line.
    #[test]
    fn a_body_past_the_cap_stops_the_recording_with_the_lines_before_it_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("t");
        let r = recorder(&file, Some(300_000));
        let conn = open(&r);
        let chunk = vec![b'a'; DATA_CHUNK];
        let err = (0..1000)
            .find_map(|_| r.data(conn, NetDir::In, &chunk).err())
            .expect("the cap is reached");
        assert!(
            matches!(err, RecordError::TooLarge { limit: 300_000, .. }),
            "{err}"
        );
        assert_eq!(r.failure(), Some(err.clone()));
        let text = std::fs::read_to_string(&file).expect("read");
        let stopped = format!("# stopped: {err}\n");
        assert!(text.ends_with(&stopped), "{}", &text[text.len() - 200..]);
        let lines = text.lines().filter(|l| l.starts_with("@0 < ")).count();
        let written = (text.len() - stopped.len()) as u64;
        assert!(written <= 300_000 && written + DATA_CHUNK as u64 + 10 > 300_000);
        assert!(lines > 60, "{lines} data lines");
        // Every later line is refused with the same error.
        assert_eq!(r.data(conn, NetDir::In, b"more"), Err(err));
    }

    /// A write error stops the recording: its answer, and every later line's.
    #[test]
    fn a_write_error_stops_the_recording() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = recorder(&dir.path().join("t"), None);
        r.lock().out.file = File::options()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let conn = open(&r);
        let err = (0..100)
            .find_map(|_| r.data(conn, NetDir::In, &[b'a'; DATA_CHUNK]).err())
            .expect("ENOSPC once the buffer is written");
        assert!(
            matches!(&err, RecordError::Write { message } if message.contains("No space left")),
            "{err}"
        );
        assert_eq!(r.failure(), Some(err.clone()));
        assert_eq!(r.data(conn, NetDir::In, b"more"), Err(err));
    }
}
