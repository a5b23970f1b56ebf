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
//! - `@N ` lines are the plugin's network, in order with the frames ([`Recording`]): each
//!   connection the allow-list admitted is numbered `N` from 0 in the order it was opened, and
//!   its lines say what it was and what went over it ([`NetEvent`]):
//!
//! ```text
//! @0 open {"via":"wasi-http","host":"api.test","port":8080,"addr":"127.0.0.1:8080","rule":"api.test:8080"}
//! @0 request {"method":"GET","url":"http://api.test:8080/","headers":[["x-guest","yes"]],"added":[{"name":"authorization","from":"env:TOKEN"}]}
//! @0 >end
//! @0 response {"status":200,"headers":[["content-type","text/plain"]]}
//! @0 < hello from the server
//! @0 <end
//! @0 close
//! ```
//!
//! `@N > ` / `@N >x ` are bytes from the plugin to the server (a request body, a socket's
//! writes), `@N < ` / `@N <x ` bytes from the server to the plugin, in chunks as they passed,
//! verbatim or hex as frames are; `>end` / `<end` end that direction. A reader that wants only
//! the frames ([`Transcript::parse`]) checks the network lines and leaves them out, so a
//! recording with a network still replays as stdio; a recording from before network lines
//! existed is a [`Recording`] with none.
//!
//! ```
//! use sandpipe_proto::transcript::{Direction, Transcript};
//! let t = Transcript::parse("# protocol: oracle\n< {\"a\":1}\n>x f6 ; null\n").unwrap();
//! assert_eq!(t.header("protocol"), Some("oracle"));
//! assert_eq!(t.entries[1].dir, Direction::ToPlugin);
//! assert_eq!(t.entries[1].frame, vec![0xf6]);
//! assert_eq!(Transcript::parse(&t.render()).unwrap(), t);
//!
//! use sandpipe_proto::transcript::{NetEvent, Recording};
//! let r = Recording::parse("< {}\n@0 open {\"via\":\"proxy\",\"host\":\"a.test\",\"port\":80}\n@0 < hi\n").unwrap();
//! assert_eq!(r.net[1].after, 1);
//! assert_eq!(r.net[1].event, NetEvent::Data { dir: sandpipe_proto::transcript::NetDir::In, bytes: b"hi".to_vec() });
//! assert_eq!(Recording::parse(&r.render()).unwrap(), r);
//! ```

use serde::{Deserialize, Serialize};
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
    /// A network line (`@N …`) that is not part of the format.
    #[error("line {line}: network line: {error}")]
    BadNet {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        error: NetLineError,
    },
}

/// What is wrong with a network line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NetLineError {
    /// `@` is not followed by a connection number and a space.
    #[error("expected `@N ` with N a connection number")]
    NoConnection,
    /// The word after `@N ` is none the format has.
    #[error("unknown kind `{kind}`")]
    UnknownKind {
        /// The word, as written (at most 32 characters of it).
        kind: String,
    },
    /// The JSON of an `open`, `request`, `response`, `failed` or `opaque` line does not parse
    /// as that kind's fields.
    #[error("{kind}: {message}")]
    BadJson {
        /// The line's kind.
        kind: &'static str,
        /// serde_json's account of it.
        message: String,
    },
    /// A `>x`/`<x` data line whose hex does not parse.
    #[error("bad hex")]
    BadHex,
    /// A line of a connection before its `open`.
    #[error("connection {conn} was not opened")]
    NotOpen {
        /// The connection.
        conn: u64,
    },
    /// A second `open` of a connection, or one out of order (connections are numbered in the
    /// order they open, from 0).
    #[error("connection {conn} opened out of order (expected {expected})")]
    OutOfOrder {
        /// The connection.
        conn: u64,
        /// The number the next connection must have.
        expected: u64,
    },
    /// A line of a connection after its `close`.
    #[error("connection {conn} has a line after its close")]
    AfterClose {
        /// The connection.
        conn: u64,
    },
    /// A second `request`, `response`, `>end` or `<end` of one connection.
    #[error("connection {conn}: a second {what}")]
    Twice {
        /// The connection.
        conn: u64,
        /// `request`, `response`, `>end`, `<end`.
        what: &'static str,
    },
    /// Data in a direction its connection already ended.
    #[error("connection {conn}: data after {dir}end")]
    AfterEnd {
        /// The connection.
        conn: u64,
        /// The direction (`>` or `<`).
        dir: NetDir,
    },
}

/// Which way a connection's bytes went. The plugin is the client: `>` is what it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetDir {
    /// Plugin → server (`>`): a request body, a socket's writes.
    Out,
    /// Server → plugin (`<`): a response body, a socket's reads.
    In,
}

impl std::fmt::Display for NetDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NetDir::Out => ">",
            NetDir::In => "<",
        })
    }
}

/// Which of sandpipe's ways out a connection took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetVia {
    /// A component's outgoing `wasi:http` request (sandpipe makes the connection and the TLS).
    WasiHttp,
    /// A component's `wasi:sockets` TCP connection.
    WasiSockets,
    /// A native plugin's connection through sandpipe's proxy.
    Proxy,
}

/// What kind of exchange a proxied connection is: a plain `http://` request the proxy
/// forwarded, or a tunnel (`CONNECT`, SOCKS5) whose bytes it relayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetKind {
    /// An HTTP exchange: a `request`, a `response`, and the bodies as data.
    Http,
    /// Bytes each way, in order.
    Bytes,
}

/// An admitted connection, and the decision that admitted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetOpen {
    /// Which way out.
    pub via: NetVia,
    /// The host the plugin asked for (a name, lower case, or an address).
    pub host: String,
    /// The port.
    pub port: u16,
    /// HTTP or bytes (`http` when left out for `wasi-http`, else `bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<NetKind>,
    /// The pinned address it went to (`127.0.0.1:8080`), when it got one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// The `--allow-net` rule that admitted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl NetOpen {
    /// HTTP or bytes, with the default of its `via` filled in.
    pub fn kind(&self) -> NetKind {
        self.kind.unwrap_or(match self.via {
            NetVia::WasiHttp => NetKind::Http,
            _ => NetKind::Bytes,
        })
    }
}

/// A header sandpipe added to a request whose value is never written: its name and where its
/// value came from (`env:VAR`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddedHeader {
    /// The header's name.
    pub name: String,
    /// Where the value came from: `env:VAR`, or `<redacted>` for a value given directly.
    pub from: String,
}

/// An HTTP request as the plugin made it (before sandpipe added its headers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    /// The method.
    pub method: String,
    /// The whole URL (`http://api.test:8080/path?q`).
    pub url: String,
    /// The plugin's headers, in order (values as text; bytes that are not UTF-8 replaced).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Headers sandpipe added (`--http-header`), named but never with their values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<AddedHeader>,
}

/// An HTTP response's head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Its headers, in order.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The reason phrase of a response read off the wire (a plain request through the proxy),
    /// when it is not the status code's usual one; a replay sends the usual one otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why a connection ended without its exchange, or cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetNote {
    /// In words.
    pub reason: String,
}

/// One line of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetEvent {
    /// `open {…}`: the connection was admitted.
    Open(NetOpen),
    /// `request {…}`: the plugin's HTTP request head.
    Request(HttpRequest),
    /// `response {…}`: the server's HTTP response head.
    Response(HttpResponse),
    /// `> …`, `>x …`, `< …`, `<x …`: bytes one way.
    Data {
        /// Which way.
        dir: NetDir,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// `>end`, `<end`: no more bytes that way.
    End {
        /// Which way.
        dir: NetDir,
    },
    /// `failed {"reason":…}`: the connection or the exchange failed (the plugin got an error).
    Failed(NetNote),
    /// `opaque {"reason":…}`: what went over it cannot be replayed (a TLS tunnel).
    Opaque(NetNote),
    /// `close`: the connection is over.
    Close,
}

/// A network line and where it lies among the frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetEntry {
    /// How many frames come before it.
    pub after: usize,
    /// The connection.
    pub conn: u64,
    /// What happened.
    pub event: NetEvent,
}

/// A whole recording: the stdio frames ([`Transcript`]) and the network lines among them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recording {
    /// Headers and frames.
    pub transcript: Transcript,
    /// The network lines, in order.
    pub net: Vec<NetEntry>,
}

/// One network line, with its newline.
pub fn render_net(conn: u64, event: &NetEvent) -> String {
    fn json<T: Serialize>(conn: u64, kind: &str, v: &T) -> String {
        // Serializing these plain structs cannot fail.
        let body = serde_json::to_string(v).unwrap_or_default();
        format!("@{conn} {kind} {body}\n")
    }
    match event {
        NetEvent::Open(o) => json(conn, "open", o),
        NetEvent::Request(r) => json(conn, "request", r),
        NetEvent::Response(r) => json(conn, "response", r),
        NetEvent::Data { dir, bytes } => render_net_data(conn, *dir, bytes),
        NetEvent::End { dir } => format!("@{conn} {dir}end\n"),
        NetEvent::Failed(n) => json(conn, "failed", n),
        NetEvent::Opaque(n) => json(conn, "opaque", n),
        NetEvent::Close => format!("@{conn} close\n"),
    }
}

/// One network data line, without building a [`NetEvent`].
pub fn render_net_data(conn: u64, dir: NetDir, bytes: &[u8]) -> String {
    let mut out = String::new();
    push_net_data(&mut out, conn, dir, bytes);
    out
}

/// Append one network data line to `out` (recorders call this per chunk, on every byte a
/// plugin's connections carry: the line goes straight into the recorder's buffer).
pub fn push_net_data(out: &mut String, conn: u64, dir: NetDir, bytes: &[u8]) {
    use std::fmt::Write as _;
    out.reserve(bytes.len() * 2 + 24);
    // Writing to a String cannot fail.
    let _ = write!(out, "@{conn} {dir}");
    push_payload(out, as_text(bytes), bytes);
    out.push('\n');
}

/// `bytes` as they stand on a line as text: UTF-8, not empty, no line break, and not
/// starting like a hex payload; `None` when they go as hex.
fn as_text(bytes: &[u8]) -> Option<&str> {
    simdutf8::basic::from_utf8(bytes).ok().filter(|s| {
        !s.is_empty() && memchr::memchr2(b'\n', b'\r', bytes).is_none() && !s.starts_with("x ")
    })
}

/// A line's payload after its prefix: ` TEXT`, or `x HEX` of `bytes`.
fn push_payload(out: &mut String, text: Option<&str>, bytes: &[u8]) {
    match text {
        Some(s) => {
            out.push(' ');
            out.push_str(s);
        }
        None => {
            out.push_str("x ");
            push_hex(out, bytes);
        }
    }
}

/// What the reader knows of each connection, to check its lines' order.
#[derive(Debug, Default)]
struct ConnState {
    request: bool,
    response: bool,
    ended_out: bool,
    ended_in: bool,
    closed: bool,
}

/// Parse the part of a network line after `@`, checking it against what came before.
fn parse_net(rest: &str, conns: &mut Vec<ConnState>) -> Result<(u64, NetEvent), NetLineError> {
    let (num, body) = rest.split_once(' ').ok_or(NetLineError::NoConnection)?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NetLineError::NoConnection);
    }
    let conn: u64 = num.parse().map_err(|_| NetLineError::NoConnection)?;
    let (kind, arg) = body.split_once(' ').unwrap_or((body, ""));
    fn from_json<T: for<'de> Deserialize<'de>>(
        kind: &'static str,
        arg: &str,
    ) -> Result<T, NetLineError> {
        serde_json::from_str(arg).map_err(|e| NetLineError::BadJson {
            kind,
            message: e.to_string(),
        })
    }
    let event = match kind {
        "open" => NetEvent::Open(from_json("open", arg)?),
        "request" => NetEvent::Request(from_json("request", arg)?),
        "response" => NetEvent::Response(from_json("response", arg)?),
        "failed" => NetEvent::Failed(from_json("failed", arg)?),
        "opaque" => NetEvent::Opaque(from_json("opaque", arg)?),
        "close" if arg.is_empty() => NetEvent::Close,
        ">end" if arg.is_empty() => NetEvent::End { dir: NetDir::Out },
        "<end" if arg.is_empty() => NetEvent::End { dir: NetDir::In },
        ">" | "<" | ">x" | "<x" => {
            let dir = if kind.starts_with('>') {
                NetDir::Out
            } else {
                NetDir::In
            };
            let bytes = if kind.ends_with('x') {
                from_hex(arg).ok_or(NetLineError::BadHex)?
            } else {
                arg.as_bytes().to_vec()
            };
            NetEvent::Data { dir, bytes }
        }
        other => {
            return Err(NetLineError::UnknownKind {
                kind: other.chars().take(32).collect(),
            });
        }
    };
    let expected = conns.len() as u64;
    if let NetEvent::Open(_) = event {
        if conn != expected {
            return Err(NetLineError::OutOfOrder { conn, expected });
        }
        conns.push(ConnState::default());
        return Ok((conn, event));
    }
    let state = usize::try_from(conn)
        .ok()
        .and_then(|i| conns.get_mut(i))
        .ok_or(NetLineError::NotOpen { conn })?;
    if state.closed {
        return Err(NetLineError::AfterClose { conn });
    }
    let twice = |flag: &mut bool, what| {
        if std::mem::replace(flag, true) {
            Err(NetLineError::Twice { conn, what })
        } else {
            Ok(())
        }
    };
    match &event {
        NetEvent::Request(_) => twice(&mut state.request, "request")?,
        NetEvent::Response(_) => twice(&mut state.response, "response")?,
        NetEvent::End { dir: NetDir::Out } => twice(&mut state.ended_out, ">end")?,
        NetEvent::End { dir: NetDir::In } => twice(&mut state.ended_in, "<end")?,
        NetEvent::Data { dir, .. } => {
            let ended = match dir {
                NetDir::Out => state.ended_out,
                NetDir::In => state.ended_in,
            };
            if ended {
                return Err(NetLineError::AfterEnd { conn, dir: *dir });
            }
        }
        NetEvent::Close => state.closed = true,
        _ => {}
    }
    Ok((conn, event))
}

impl Recording {
    /// Parse the text format, network lines included.
    pub fn parse(text: &str) -> Result<Self, TranscriptError> {
        let mut r = Recording::default();
        let t = &mut r.transcript;
        let mut conns = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            let n = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix('#') {
                if t.entries.is_empty()
                    && r.net.is_empty()
                    && let Some((k, v)) = comment.trim().split_once(':')
                    && !k.trim().is_empty()
                    && !k.contains(' ')
                {
                    t.headers.push((k.trim().to_owned(), v.trim().to_owned()));
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix('@') {
                let (conn, event) = parse_net(rest, &mut conns)
                    .map_err(|error| TranscriptError::BadNet { line: n, error })?;
                r.net.push(NetEntry {
                    after: t.entries.len(),
                    conn,
                    event,
                });
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
        Ok(r)
    }

    /// Render the text format (parses back to an equal recording): each network line before
    /// the frame it came before.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.transcript.headers {
            out.push_str(&format!("# {k}: {v}\n"));
        }
        let mut net = self.net.iter().peekable();
        for (i, e) in self.transcript.entries.iter().enumerate() {
            while let Some(n) = net.next_if(|n| n.after <= i) {
                out.push_str(&render_net(n.conn, &n.event));
            }
            out.push_str(&e.render());
        }
        for n in net {
            out.push_str(&render_net(n.conn, &n.event));
        }
        out
    }

    /// The network lines of connection `conn`, in order.
    pub fn connection(&self, conn: u64) -> impl Iterator<Item = &NetEvent> {
        self.net
            .iter()
            .filter(move |n| n.conn == conn)
            .map(|n| &n.event)
    }
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
    let mut line = String::new();
    push_line(&mut line, dir, frame, note);
    line
}

/// Append one frame's line to `out` ([`render_line`] without a `String` of its own: a
/// recorder renders each frame straight into its buffer).
pub fn push_line(out: &mut String, dir: Direction, frame: &[u8], note: Option<&str>) {
    out.reserve(frame.len() * 2 + note.map_or(0, str::len) + 8);
    out.push(match dir {
        Direction::ToPlugin => '>',
        Direction::FromPlugin => '<',
    });
    // A note goes with hex only.
    let text = as_text(frame).filter(|_| note.is_none());
    push_payload(out, text, frame);
    if let (None, Some(note)) = (text, note) {
        out.push_str(" ; ");
        out.push_str(&note.replace(['\n', '\r'], " "));
    }
    out.push('\n');
}

impl Transcript {
    /// Parse the text format. Network lines are checked ([`Recording::parse`]) and left out.
    pub fn parse(text: &str) -> Result<Self, TranscriptError> {
        Recording::parse(text).map(|r| r.transcript)
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

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 256];
    for chunk in bytes.chunks(digits.len() / 2) {
        for (pair, b) in digits.chunks_exact_mut(2).zip(chunk) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 0x0f)];
        }
        // Hex digits are ASCII: this never gives the empty default.
        out.push_str(std::str::from_utf8(&digits[..2 * chunk.len()]).unwrap_or_default());
    }
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

    const OPEN: &str = r#"@0 open {"via":"wasi-http","host":"api.test","port":8080,"addr":"127.0.0.1:8080","rule":"api.test:8080"}"#;

    #[test]
    fn network_lines_keep_their_place_among_the_frames() {
        let text = format!(
            "# framing: lines\n> \"get\"\n{OPEN}\n@0 request {{\"method\":\"GET\",\"url\":\"http://api.test:8080/\",\"headers\":[[\"x-guest\",\"yes\"]],\"added\":[{{\"name\":\"authorization\",\"from\":\"env:TOKEN\"}}]}}\n@0 >end\n@0 response {{\"status\":200,\"headers\":[]}}\n@0 < hello\n@0 <x 0a\n@0 <end\n@0 close\n< {{\"ok\":true}}\n"
        );
        let r = Recording::parse(&text).expect("parse");
        assert_eq!(r.transcript.entries.len(), 2);
        assert_eq!(r.net.len(), 8);
        assert!(r.net.iter().all(|n| n.after == 1 && n.conn == 0));
        let NetEvent::Open(open) = &r.net[0].event else {
            panic!("{:?}", r.net[0]);
        };
        assert_eq!((open.port, open.kind()), (8080, NetKind::Http));
        let NetEvent::Request(req) = &r.net[1].event else {
            panic!("{:?}", r.net[1]);
        };
        assert_eq!(req.added[0].from, "env:TOKEN");
        assert_eq!(
            r.net[5].event,
            NetEvent::Data {
                dir: NetDir::In,
                bytes: b"\n".to_vec()
            }
        );
        assert_eq!(Recording::parse(&r.render()).expect("reparse"), r);
        // The frames alone, as every reader of stdio transcripts sees them.
        assert_eq!(Transcript::parse(&text).expect("frames"), r.transcript);
        assert_eq!(render_net_data(3, NetDir::Out, b"a\nb"), "@3 >x 610a62\n");
        assert_eq!(render_net_data(3, NetDir::Out, b"ab"), "@3 > ab\n");
    }

    #[test]
    fn malformed_network_lines_are_typed_errors_naming_the_line() {
        let bad = |text: &str| match Recording::parse(text) {
            Err(TranscriptError::BadNet { line, error }) => (line, error),
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(bad("@ open {}\n"), (1, NetLineError::NoConnection));
        assert_eq!(bad("@x1 close\n"), (1, NetLineError::NoConnection));
        assert_eq!(bad("@0\n"), (1, NetLineError::NoConnection));
        assert_eq!(
            bad(&format!("{OPEN}\n@0 shout\n")),
            (
                2,
                NetLineError::UnknownKind {
                    kind: "shout".into()
                }
            )
        );
        assert!(matches!(
            bad("@0 open {\"via\":\"carrier-pigeon\",\"host\":\"a\",\"port\":1}\n"),
            (1, NetLineError::BadJson { kind: "open", .. })
        ));
        assert!(matches!(
            bad(&format!("{OPEN}\n@0 request {{\"method\":1}}\n")),
            (
                2,
                NetLineError::BadJson {
                    kind: "request",
                    ..
                }
            )
        ));
        assert_eq!(
            bad(&format!("{OPEN}\n@0 <x zz\n")),
            (2, NetLineError::BadHex)
        );
        assert_eq!(bad("@0 < hi\n"), (1, NetLineError::NotOpen { conn: 0 }));
        assert_eq!(
            bad(&format!("{OPEN}\n{OPEN}\n")),
            (
                2,
                NetLineError::OutOfOrder {
                    conn: 0,
                    expected: 1
                }
            )
        );
        assert_eq!(
            bad(&format!("{OPEN}\n@0 close\n@0 < late\n")),
            (3, NetLineError::AfterClose { conn: 0 })
        );
        assert_eq!(
            bad(&format!("{OPEN}\n@0 <end\n@0 < late\n")),
            (
                3,
                NetLineError::AfterEnd {
                    conn: 0,
                    dir: NetDir::In
                }
            )
        );
        assert_eq!(
            bad(&format!(
                "{OPEN}\n@0 response {{\"status\":200}}\n@0 response {{\"status\":200}}\n"
            )),
            (
                3,
                NetLineError::Twice {
                    conn: 0,
                    what: "response"
                }
            )
        );
        // The stdio reader refuses the same lines.
        assert!(matches!(
            Transcript::parse("@0 < hi\n"),
            Err(TranscriptError::BadNet { line: 1, .. })
        ));
    }
}
