//! Recording a session as a transcript (`--record FILE`), in the format of
//! `tests/transcripts` (see `sandpipe_proto::transcript`).
//!
//! Frames are appended as they pass, one line each and flushed, so a session that dies still
//! leaves everything up to its last frame; the outcome is appended as a `# outcome:` comment
//! once the plugin has ended.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use sandpipe_proto::frame::Framing;
use sandpipe_proto::transcript::{Direction, render_line};

use crate::error::Exit;
use crate::policy::Policy;

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
}

impl Recorder {
    /// Create `path` and write the header.
    pub fn create(path: &Path, header: &RecordHeader<'_>) -> std::io::Result<Recorder> {
        let mut out = BufWriter::new(File::create(path)?);
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
        let policy = serde_json::to_string(&doc).map_err(std::io::Error::other)?;
        writeln!(out, "# policy: {policy}")?;
        out.flush()?;
        Ok(Recorder {
            inner: Mutex::new(Inner {
                out,
                frames: 0,
                finished: false,
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
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.frames += 1;
        // A recording that cannot be written must not stop the session; it is logged.
        if let Err(e) = inner
            .out
            .write_all(line.as_bytes())
            .and_then(|()| inner.out.flush())
        {
            tracing::warn!("writing the recording: {e}");
        }
    }

    /// Append the outcome (once).
    pub(crate) fn outcome(&self, exit: &Exit) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.finished {
            return;
        }
        inner.finished = true;
        let frames = inner.frames;
        let _ = writeln!(inner.out, "# outcome: {exit} ({frames} frames)")
            .and_then(|()| inner.out.flush());
    }
}
