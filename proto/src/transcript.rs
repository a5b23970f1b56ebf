//! The transcript format: a plugin session as readable text, one frame per line.
//!
//! ```text
//! # sandpipe transcript 1
//! # protocol: oracle
//! # framing: lines
//! < {"jsonrpc":"2.0","id":0,"method":"ready"}
//! > {"jsonrpc":"2.0","id":0,"result":{}}
//! > {"jsonrpc":"2.0","id":1,"method":"invoke","params":{"selector":"sqrt","calldata":["0x10"]}}
//! < {"jsonrpc":"2.0","id":1,"result":["0x4"]}
//! ```
//!
//! - `# key: value` lines before the first frame are headers; other `#` lines and blank lines
//!   are comments.
//! - `> ` is a frame from the host to the plugin, `< ` one from the plugin to the host; the
//!   frame follows verbatim when it is UTF-8 without line breaks.
//! - `>x ` / `<x ` carry any other frame (CBOR, bodies with newlines) as lowercase hex, with
//!   an optional readable rendering after ` ; `, which is ignored when reading.
//!
//! ```
//! use sandpipe_proto::transcript::{Direction, Transcript};
//! let t = Transcript::parse("# protocol: oracle\n< {\"a\":1}\n>x f6 ; null\n").unwrap();
//! assert_eq!(t.header("protocol"), Some("oracle"));
//! assert_eq!(t.entries[1].dir, Direction::ToPlugin);
//! assert_eq!(t.entries[1].frame, vec![0xf6]);
//! assert_eq!(Transcript::parse(&t.render()).unwrap(), t);
//! ```

use thiserror::Error;

/// Which way a frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Host → plugin (`>`).
    ToPlugin,
    /// Plugin → host (`<`).
    FromPlugin,
}

/// One frame of a transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its direction.
    pub dir: Direction,
    /// The frame, without framing.
    pub frame: Vec<u8>,
    /// A readable rendering for binary frames (written after ` ; `).
    pub note: Option<String>,
}

/// A whole transcript.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transcript {
    /// `# key: value` headers, in order.
    pub headers: Vec<(String, String)>,
    /// The frames, in order.
    pub entries: Vec<Entry>,
}

/// A line that is not part of the format.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TranscriptError {
    /// The line starts with neither `#`, `>` nor `<`.
    #[error("line {line}: expected '#', '>' or '<'")]
    BadLine {
        /// 1-based line number.
        line: usize,
    },
    /// A `>x`/`<x` line whose hex does not parse.
    #[error("line {line}: bad hex")]
    BadHex {
        /// 1-based line number.
        line: usize,
    },
}

impl Entry {
    /// One line of the text format, with its newline.
    pub fn render(&self) -> String {
        render_line(self.dir, &self.frame, self.note.as_deref())
    }
}

/// One line of the text format for a frame, without building an [`Entry`] (no copy of the
/// frame: recorders call this once per frame).
pub fn render_line(dir: Direction, frame: &[u8], note: Option<&str>) -> String {
    let arrow = match dir {
        Direction::ToPlugin => '>',
        Direction::FromPlugin => '<',
    };
    match std::str::from_utf8(frame) {
        Ok(s)
            if !s.is_empty()
                && !s.contains(['\n', '\r'])
                && note.is_none()
                && !s.starts_with("x ") =>
        {
            format!("{arrow} {s}\n")
        }
        _ => {
            let mut line = format!("{arrow}x {}", to_hex(frame));
            if let Some(note) = note {
                line.push_str(&format!(" ; {}", note.replace(['\n', '\r'], " ")));
            }
            line.push('\n');
            line
        }
    }
}

impl Transcript {
    /// Parse the text format.
    pub fn parse(text: &str) -> Result<Self, TranscriptError> {
        let mut t = Transcript::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            let n = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                if t.entries.is_empty()
                    && let Some((k, v)) = comment.trim().split_once(':')
                    && !k.trim().is_empty()
                    && !k.contains(' ')
                {
                    t.headers.push((k.trim().to_owned(), v.trim().to_owned()));
                }
                continue;
            }
            let (dir, rest) = match line.as_bytes()[0] {
                b'>' => (Direction::ToPlugin, &line[1..]),
                b'<' => (Direction::FromPlugin, &line[1..]),
                _ => return Err(TranscriptError::BadLine { line: n }),
            };
            let entry = if let Some(hex) = rest.strip_prefix("x ") {
                let (hex, note) = match hex.split_once(" ; ") {
                    Some((h, note)) => (h, Some(note.to_owned())),
                    None => (hex, None),
                };
                let frame = from_hex(hex.trim()).ok_or(TranscriptError::BadHex { line: n })?;
                Entry { dir, frame, note }
            } else if let Some(text) = rest.strip_prefix(' ') {
                Entry {
                    dir,
                    frame: text.as_bytes().to_vec(),
                    note: None,
                }
            } else {
                return Err(TranscriptError::BadLine { line: n });
            };
            t.entries.push(entry);
        }
        Ok(t)
    }

    /// Render the text format (parses back to an equal transcript).
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.headers {
            out.push_str(&format!("# {k}: {v}\n"));
        }
        for e in &self.entries {
            out.push_str(&e.render());
        }
        out
    }

    /// A header's value.
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Frames in one direction.
    pub fn frames(&self, dir: Direction) -> impl Iterator<Item = &[u8]> {
        self.entries
            .iter()
            .filter(move |e| e.dir == dir)
            .map(|e| e.frame.as_slice())
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_render_round_trip() {
        let text = "# sandpipe transcript 1\n# protocol: atp\n\n# a comment: not a header? it is, before frames\n>x f6 ; null\n< {\"a\":1}\n# trailing: comment\n";
        let t = Transcript::parse(text).expect("parse");
        assert_eq!(t.header("protocol"), Some("atp"));
        assert_eq!(t.entries.len(), 2);
        assert_eq!(t.header("trailing"), None);
        assert_eq!(Transcript::parse(&t.render()).expect("reparse"), t);
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(
            Transcript::parse("# h: 1\nhello\n"),
            Err(TranscriptError::BadLine { line: 2 })
        );
        assert_eq!(
            Transcript::parse(">x f\n"),
            Err(TranscriptError::BadHex { line: 1 })
        );
        assert_eq!(
            Transcript::parse(">nospace\n"),
            Err(TranscriptError::BadLine { line: 1 })
        );
    }
}
