//! A session's network on tape: every admitted connection written into its recording
//! (`--record`), or, in a replay, served from the recording instead of the network.
//!
//! ```text
//!   record:  wasi:http hook, proxy, ─► NetSink::open / event / data ─► the recording (@N lines)
//!            wasi:sockets streams
//!   replay:  wasi:http hook, proxy ─► NetReplay::claim (via, host, port, order)
//!            wasi:sockets connect      ├─ none recorded ─► refused, as the allow-list refuses
//!                                      ├─ http: check (method, URL, body) ─► the recorded response
//!                                      │                                 └─ differs ─► a divergence
//!                                      └─ bytes: ByteTape (play_bytes): writes compared with `>`,
//!                                         reads given `<` after the `>` recorded before them
//! ```
//!
//! [`ByteTape`] is the one player of a bytes connection, with no IO: the sandbox's
//! `wasi:sockets` streams and the proxy's tunnels drive it.
//!
//! What a replay saw go wrong is kept as [`NetProblem`]s, in order, for `replay` to report
//! like a frame divergence; nothing here reaches the network.

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use sandpipe_proto::transcript::{
    HttpRequest, HttpResponse, NetDir, NetEvent, NetKind, NetOpen, NetVia, Recording,
};

use crate::error::RecordError;

/// Where a recorder writes a session's network lines (the session's recording). Lines of one
/// connection are written in the order they are given; connections are numbered as they open.
pub trait NetSink: Send + Sync {
    /// Number a new connection and write its `open` line, at once (so the numbers are in the
    /// order of the lines).
    fn open(&self, open: &NetOpen) -> Result<u64, RecordError>;
    /// Write one line of connection `conn`.
    fn event(&self, conn: u64, event: &NetEvent) -> Result<(), RecordError>;
    /// Write a chunk of bytes of connection `conn`, as they passed.
    fn data(&self, conn: u64, dir: NetDir, bytes: &[u8]) -> Result<(), RecordError>;
}

/// What a session's network is, besides the allow-list: recorded, or replayed.
#[derive(Clone)]
#[non_exhaustive]
pub enum NetTape {
    /// Live connections, each written into this recording as it goes.
    Record(Arc<dyn NetSink>),
    /// No network: each connection is served from this recording.
    Replay(Arc<NetReplay>),
}

impl fmt::Debug for NetTape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetTape::Record(_) => f.write_str("NetTape::Record"),
            NetTape::Replay(r) => write!(f, "NetTape::Replay({} connections)", r.conns.len()),
        }
    }
}

impl PartialEq for NetTape {
    /// The same tape: the same recorder or the same replay.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (NetTape::Record(a), NetTape::Record(b)) => {
                std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
            }
            (NetTape::Replay(a), NetTape::Replay(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for NetTape {}

/// One recorded connection, gathered from its lines.
#[derive(Debug, Clone, Default)]
struct Recorded {
    open: Option<NetOpen>,
    request: Option<HttpRequest>,
    /// What the plugin sent (a request body, a socket's writes), whole.
    out: Vec<u8>,
    response: Option<HttpResponse>,
    /// What the server sent (an HTTP body), in chunks of up to [`PLAY_CHUNK`].
    inn: Vec<Vec<u8>>,
    failed: Option<String>,
    opaque: Option<String>,
    /// Its bytes, ends and failure in the order they were recorded: what a bytes connection
    /// (a `wasi:sockets` TCP stream) is played back from.
    flow: Vec<Flow>,
}

/// One step of a recorded bytes connection.
#[derive(Debug, Clone)]
enum Flow {
    Data(NetDir, Vec<u8>),
    End(NetDir),
    Failed(String),
}

/// What a replay found that the recording does not say, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetProblem {
    /// The plugin opened a connection the recording does not have (it was refused).
    NotRecorded {
        /// Which way out.
        via: NetVia,
        /// The host asked for.
        host: String,
        /// The port.
        port: u16,
    },
    /// The plugin's request differs from the recorded one at this connection.
    Diverged {
        /// The recorded connection's number.
        conn: u64,
        /// Which way out.
        via: NetVia,
        /// Its host.
        host: String,
        /// Its port.
        port: u16,
        /// The recorded request, as lines (`GET URL`, `body: …`).
        expected: Vec<String>,
        /// The plugin's, in the same shape.
        got: Vec<String>,
    },
    /// The recording has this connection but cannot play it back (a TLS tunnel).
    NotReplayable {
        /// The recorded connection's number.
        conn: u64,
        /// Why, as recorded.
        reason: String,
    },
    /// The recording has a connection the plugin never opened.
    Unused {
        /// The recorded connection's number.
        conn: u64,
        /// Which way out.
        via: NetVia,
        /// Its host.
        host: String,
        /// Its port.
        port: u16,
    },
}

impl fmt::Display for NetProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetProblem::NotRecorded { via, host, port } => write!(
                f,
                "the plugin opened a connection the recording does not have ({} {host}:{port}); it was refused",
                via_name(*via)
            ),
            NetProblem::Diverged {
                conn,
                via,
                host,
                port,
                expected,
                got,
            } => {
                writeln!(
                    f,
                    "first divergence at network exchange {conn} ({} {host}:{port}): the plugin sent a different request",
                    via_name(*via)
                )?;
                for line in expected.iter().filter(|l| !got.contains(l)) {
                    writeln!(f, "- {line}")?;
                }
                for line in got.iter().filter(|l| !expected.contains(l)) {
                    writeln!(f, "+ {line}")?;
                }
                Ok(())
            }
            NetProblem::NotReplayable { conn, reason } => {
                write!(f, "network exchange {conn} cannot be replayed: {reason}")
            }
            NetProblem::Unused {
                conn,
                via,
                host,
                port,
            } => write!(
                f,
                "the plugin did not open recorded network exchange {conn} ({} {host}:{port})",
                via_name(*via)
            ),
        }
    }
}

/// A host as the recording names it: lower case, an IPv6 literal without brackets.
pub(super) fn tape_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// The name sandpipe's audit log and messages give a way out.
fn via_name(via: NetVia) -> &'static str {
    match via {
        NetVia::WasiHttp => "wasi:http",
        NetVia::WasiSockets => "wasi:sockets",
        NetVia::Proxy => "proxy",
    }
}

/// The largest chunk a replayed HTTP body is played in.
const PLAY_CHUNK: usize = 64 * 1024;

/// A recorded HTTP exchange to play back: the response head and its body's chunks.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Played {
    /// The recorded response head, or `None` when the exchange failed (`failed` line).
    pub response: Option<HttpResponse>,
    /// The body, its recorded lines joined into chunks of up to 64 KiB.
    pub body: Vec<Vec<u8>>,
    /// Why the exchange failed, when it did.
    pub failed: Option<String>,
}

/// A recording's network, served in place of the network. Each connection the plugin opens
/// claims the first recorded connection not yet claimed with the same way out, host and
/// port; an HTTP request must then match the recorded method, URL and body.
pub struct NetReplay {
    conns: Vec<Recorded>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    claimed: Vec<bool>,
    problems: Vec<NetProblem>,
}

impl fmt::Debug for NetReplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetReplay")
            .field("connections", &self.conns.len())
            .finish_non_exhaustive()
    }
}

impl NetReplay {
    /// The connections of `recording`, ready to be served.
    pub fn new(recording: &Recording) -> Self {
        let mut conns: Vec<Recorded> = Vec::new();
        for entry in &recording.net {
            let Ok(i) = usize::try_from(entry.conn) else {
                continue;
            };
            if conns.len() <= i {
                conns.resize_with(i + 1, Recorded::default);
            }
            let c = &mut conns[i];
            match &entry.event {
                NetEvent::Open(open) => c.open = Some(open.clone()),
                NetEvent::Request(r) => c.request = Some(r.clone()),
                NetEvent::Response(r) => c.response = Some(r.clone()),
                NetEvent::Data {
                    dir: NetDir::Out,
                    bytes,
                } => {
                    c.out.extend_from_slice(bytes);
                    c.flow.push(Flow::Data(NetDir::Out, bytes.clone()));
                }
                NetEvent::Data {
                    dir: NetDir::In,
                    bytes,
                } => {
                    // An HTTP body is a stream: its recorded lines are played in chunks of
                    // up to PLAY_CHUNK, so a large body is a few writes, not one a line.
                    match c.inn.last_mut() {
                        Some(last) if last.len() + bytes.len() <= PLAY_CHUNK => {
                            last.extend_from_slice(bytes);
                        }
                        _ => c.inn.push(bytes.clone()),
                    }
                    c.flow.push(Flow::Data(NetDir::In, bytes.clone()));
                }
                NetEvent::End { dir } => c.flow.push(Flow::End(*dir)),
                NetEvent::Failed(n) => {
                    c.failed = Some(n.reason.clone());
                    c.flow.push(Flow::Failed(n.reason.clone()));
                }
                NetEvent::Opaque(n) => c.opaque = Some(n.reason.clone()),
                _ => {}
            }
        }
        let claimed = vec![false; conns.len()];
        Self {
            conns,
            state: Mutex::new(State {
                claimed,
                problems: Vec::new(),
            }),
        }
    }

    /// How many connections the recording has.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether the recording has no connection.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claim the next recorded connection by `via` to `host:port` (the host lower case, an
    /// IPv6 literal without brackets). `None`, with a [`NetProblem::NotRecorded`] kept, when
    /// the recording has no more of them.
    pub fn claim(&self, via: NetVia, host: &str, port: u16) -> Option<u64> {
        let mut state = self.state();
        let found = self.conns.iter().enumerate().position(|(i, c)| {
            !state.claimed[i]
                && c.open
                    .as_ref()
                    .is_some_and(|o| o.via == via && o.port == port && o.host == host)
        });
        match found {
            Some(i) => {
                state.claimed[i] = true;
                Some(i as u64)
            }
            None => {
                tracing::warn!(
                    "replay: {host}:{port} refused: the recording has no more connections there ({})",
                    via_name(via)
                );
                state.problems.push(NetProblem::NotRecorded {
                    via,
                    host: host.to_owned(),
                    port,
                });
                None
            }
        }
    }

    /// The most request-body bytes worth reading for claimed connection `conn`: its recorded
    /// body and one more (a longer body differs, whatever follows).
    pub fn body_cap(&self, conn: u64) -> usize {
        self.get(conn).map_or(0, |c| c.out.len()) + 1
    }

    fn get(&self, conn: u64) -> Option<&Recorded> {
        usize::try_from(conn).ok().and_then(|i| self.conns.get(i))
    }

    /// Check the plugin's HTTP request on claimed connection `conn` against the recording:
    /// the same method, URL and body (`body` read up to [`NetReplay::body_cap`]). The
    /// recorded answer when they match; `None`, with the problem kept, when not.
    pub fn http(&self, conn: u64, request: &HttpRequest, body: &[u8]) -> Option<Played> {
        let recorded = self.get(conn)?;
        let open = recorded.open.as_ref()?;
        if let Some(reason) = &recorded.opaque {
            self.state().problems.push(NetProblem::NotReplayable {
                conn,
                reason: reason.clone(),
            });
            return None;
        }
        let expected = recorded
            .request
            .as_ref()
            .map(|r| describe(r, &recorded.out))
            .unwrap_or_else(|| vec!["(no HTTP request: the connection carried bytes)".into()]);
        let got = describe(request, body);
        if expected != got {
            self.state().problems.push(NetProblem::Diverged {
                conn,
                via: open.via,
                host: open.host.clone(),
                port: open.port,
                expected,
                got,
            });
            return None;
        }
        Some(Played {
            response: recorded.response.clone(),
            body: recorded.inn.clone(),
            failed: recorded.failed.clone(),
        })
    }

    /// Play claimed connection `conn` back as bytes (a `wasi:sockets` TCP stream, a proxy's
    /// tunnel): `None`, with the problem kept, when the recording cannot (it is `opaque`, or
    /// an HTTP exchange).
    pub fn play_bytes(self: &Arc<Self>, conn: u64) -> Option<PlayedBytes> {
        let recorded = self.get(conn)?;
        let bytes = recorded.request.is_none()
            && recorded
                .open
                .as_ref()
                .is_some_and(|o| o.kind == Some(NetKind::Bytes));
        if recorded.opaque.is_some() || !bytes {
            self.not_replayable(conn);
            return None;
        }
        if let Some(Flow::Failed(reason)) = recorded.flow.first() {
            return Some(PlayedBytes::Failed(reason.clone()));
        }
        Some(PlayedBytes::Connected(ByteTape {
            replay: self.clone(),
            conn,
            sent: 0,
            next: 0,
            offset: 0,
            out_before: 0,
            done_writing: false,
        }))
    }

    /// Keep, for claimed connection `conn`, that it cannot be played back: the recorded reason
    /// (`opaque`), or that only HTTP exchanges and byte streams are played.
    pub fn not_replayable(&self, conn: u64) {
        let reason = self
            .get(conn)
            .and_then(|c| c.opaque.clone())
            .unwrap_or_else(|| "only HTTP exchanges and byte streams are played back".to_owned());
        self.state()
            .problems
            .push(NetProblem::NotReplayable { conn, reason });
    }

    /// The addresses the recording pinned `name` to (lower case), for a lookup in a replay:
    /// what the name resolved to then, without DNS.
    pub fn addresses(&self, name: &str) -> Vec<IpAddr> {
        let mut out = Vec::new();
        for open in self.conns.iter().filter_map(|c| c.open.as_ref()) {
            if open.host == name
                && let Some(ip) = open
                    .addr
                    .as_deref()
                    .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
                    .map(|a| a.ip())
                && !out.contains(&ip)
            {
                out.push(ip);
            }
        }
        out
    }

    /// What went wrong so far, in order, and then each recorded connection the plugin did
    /// not open: the replay matched the recording's network only when this is empty.
    pub fn problems(&self) -> Vec<NetProblem> {
        let state = self.state();
        let mut out = state.problems.clone();
        for (i, c) in self.conns.iter().enumerate() {
            if let (false, Some(open)) = (state.claimed[i], &c.open) {
                out.push(NetProblem::Unused {
                    conn: i as u64,
                    via: open.via,
                    host: open.host.clone(),
                    port: open.port,
                });
            }
        }
        out
    }
}

/// What a claimed bytes connection plays back ([`NetReplay::play_bytes`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum PlayedBytes {
    /// The connection was made: its bytes, played as the plugin reads and writes.
    Connected(ByteTape),
    /// The connection failed when recorded, with why.
    Failed(String),
}

/// What a read of a replayed bytes connection gives ([`ByteTape::read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ByteRead {
    /// Bytes from the server, at most as many as asked for.
    Data(Vec<u8>),
    /// Nothing yet: the server answered only after bytes the plugin has not sent, or the
    /// recording ends without the server's end (it never came).
    Wait,
    /// The server sent no more (`<end`).
    End,
    /// The connection failed here when recorded, with why.
    Failed(String),
}

/// A recorded bytes connection played back, with no IO: what the plugin writes is compared
/// with what it wrote when recorded (the first difference is a [`NetProblem::Diverged`]), and
/// the server's bytes are read in the recorded order, each only once the plugin has sent
/// everything it had sent before the server spoke.
#[derive(Debug)]
pub struct ByteTape {
    replay: Arc<NetReplay>,
    conn: u64,
    /// Bytes of the recorded `out` the plugin has sent, all matching.
    sent: usize,
    /// The next step of the flow that reads play, how far into its bytes, and the plugin's
    /// bytes recorded before it.
    next: usize,
    offset: usize,
    out_before: usize,
    /// The plugin strayed, or said it sends no more: nothing more it writes is taken.
    done_writing: bool,
}

/// A write to a replayed bytes connection that is not what the plugin wrote when recorded
/// (or comes after such a one): the divergence itself is among [`NetReplay::problems`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("replay: the plugin's bytes on network exchange {conn} differ from the recording")]
pub struct Strayed {
    /// The recorded connection's number.
    pub conn: u64,
}

/// How much of a line a divergence shows on each side of the first difference.
const DIFF_WINDOW: usize = 64;

impl ByteTape {
    fn recorded(&self) -> Option<&Recorded> {
        self.replay.get(self.conn)
    }

    /// The recorded connection's number.
    pub fn conn(&self) -> u64 {
        self.conn
    }

    /// The plugin writes `bytes`: `Ok` when they are the next ones it wrote when recorded;
    /// otherwise the divergence is kept (for the replay's report) and nothing more it writes
    /// is taken.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), Strayed> {
        let strayed = Strayed { conn: self.conn };
        if self.done_writing {
            return Err(strayed);
        }
        let out = self.recorded().map_or(&[][..], |r| &r.out[..]);
        let rest = out.get(self.sent..).unwrap_or_default();
        let same = bytes.iter().zip(rest).take_while(|(a, b)| a == b).count();
        if same == bytes.len() {
            self.sent += bytes.len();
            return Ok(());
        }
        let mut got = out[..self.sent].to_vec();
        got.extend_from_slice(bytes);
        self.diverge(self.sent + same, &got);
        Err(strayed)
    }

    /// The plugin sends no more (it shut its side down or closed): a divergence when it sent
    /// less than it did when recorded.
    pub fn end_writing(&mut self) {
        if self.done_writing {
            return;
        }
        let recorded = self.recorded().map_or(0, |r| r.out.len());
        if self.sent < recorded {
            let got = self
                .recorded()
                .map(|r| r.out[..self.sent].to_vec())
                .unwrap_or_default();
            self.diverge(self.sent, &got);
        }
        self.done_writing = true;
    }

    fn diverge(&mut self, at: usize, got: &[u8]) {
        self.done_writing = true;
        let Some(recorded) = self.recorded() else {
            return;
        };
        let Some(open) = recorded.open.as_ref() else {
            return;
        };
        let problem = NetProblem::Diverged {
            conn: self.conn,
            via: open.via,
            host: open.host.clone(),
            port: open.port,
            expected: vec![line_at(&recorded.out, at)],
            got: vec![line_at(got, at)],
        };
        self.replay.state().problems.push(problem);
    }

    /// Read at most `max` bytes of the server's.
    pub fn read(&mut self, max: usize) -> ByteRead {
        let Some(recorded) = self.replay.get(self.conn) else {
            return ByteRead::Wait;
        };
        loop {
            match recorded.flow.get(self.next) {
                None => return ByteRead::Wait,
                Some(Flow::Data(NetDir::Out, bytes)) => {
                    self.out_before += bytes.len();
                    self.next += 1;
                }
                Some(Flow::End(NetDir::Out)) => self.next += 1,
                // The server spoke only after the plugin's bytes recorded before this.
                Some(_) if self.sent < self.out_before => return ByteRead::Wait,
                Some(Flow::Data(NetDir::In, bytes)) => {
                    let take = max.min(bytes.len() - self.offset);
                    let chunk = bytes[self.offset..self.offset + take].to_vec();
                    self.offset += take;
                    if self.offset == bytes.len() {
                        self.next += 1;
                        self.offset = 0;
                    }
                    return ByteRead::Data(chunk);
                }
                Some(Flow::End(NetDir::In)) => return ByteRead::End,
                Some(Flow::Failed(reason)) => return ByteRead::Failed(reason.clone()),
            }
        }
    }
}

/// The line of `bytes` holding byte `at` (at most [`DIFF_WINDOW`] bytes each side of it), as
/// a divergence shows it: verbatim when UTF-8 (a CRLF line without its CR), else `x HEX`;
/// `(no more bytes)` past the end.
fn line_at(bytes: &[u8], at: usize) -> String {
    if at >= bytes.len() {
        return "(no more bytes)".to_owned();
    }
    let start = bytes[..at]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1)
        .max(at.saturating_sub(DIFF_WINDOW));
    let end = bytes[at..]
        .iter()
        .position(|b| *b == b'\n')
        .map_or(bytes.len(), |i| at + i)
        .min(at + DIFF_WINDOW);
    let mut line = &bytes[start..end];
    // A CRLF line (HTTP, SMTP, …) is shown without its CR, unless that is where it differs.
    if end < bytes.len() && bytes[end] == b'\n' && at + 1 < end && line.ends_with(b"\r") {
        line = &line[..line.len() - 1];
    }
    let cut = |text: String| {
        format!(
            "{}{text}{}",
            if start > 0 && bytes[start - 1] != b'\n' {
                "…"
            } else {
                ""
            },
            if end < bytes.len() && bytes[end] != b'\n' {
                "…"
            } else {
                ""
            }
        )
    };
    match std::str::from_utf8(line) {
        Ok(text) if !text.contains('\r') => cut(text.to_owned()),
        _ => cut(format!(
            "x {}",
            line.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )),
    }
}

/// The head of a server's HTTP/1.x answer read off the wire, so far.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AnswerHead {
    /// Not all of it yet.
    Partial,
    /// A final response's head, and how many bytes it took; what follows is the body as it
    /// came (a `Transfer-Encoding` left as it is).
    Head(HttpResponse, usize),
    /// Not a head a recording can hold as a `response` line: not HTTP, an interim `1xx`
    /// answer, a `101` protocol switch, or a head over `max` bytes. It stays bytes.
    Bytes,
}

/// The most header fields an answer head read here may have (past it: bytes).
const ANSWER_HEADERS: usize = 128;

/// Read `raw`, the start of a server's answer, for its head (at most `max` bytes of it, at
/// most [`ANSWER_HEADERS`] fields).
pub(crate) fn answer_head(raw: &[u8], max: usize) -> AnswerHead {
    let mut fields = [httparse::EMPTY_HEADER; ANSWER_HEADERS];
    let mut parsed = httparse::Response::new(&mut fields);
    match parsed.parse(raw) {
        Ok(httparse::Status::Complete(len)) => {
            let status = parsed.code.unwrap_or(0);
            if status < 200 || len > max {
                return AnswerHead::Bytes;
            }
            let reason = parsed
                .reason
                .filter(|r| Some(*r) != usual_reason(status))
                .map(str::to_owned);
            let headers = parsed
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_owned(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            AnswerHead::Head(
                HttpResponse {
                    status,
                    headers,
                    reason,
                },
                len,
            )
        }
        Ok(httparse::Status::Partial) if raw.len() <= max => AnswerHead::Partial,
        _ => AnswerHead::Bytes,
    }
}

/// The reason phrase status code `status` usually has (`OK` for 200), if it has one.
fn usual_reason(status: u16) -> Option<&'static str> {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
}

/// A recorded response head's reason phrase: the one recorded, else the status code's usual
/// one (a recording keeps only a phrase that is not the usual one).
pub(crate) fn reason_phrase(head: &HttpResponse) -> &str {
    head.reason
        .as_deref()
        .or(usual_reason(head.status))
        .unwrap_or("")
}

/// A recorded response head as the HTTP/1.1 bytes a replay sends: the status line, the
/// headers, the blank line.
pub(crate) fn render_answer_head(head: &HttpResponse) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", head.status, reason_phrase(head)).into_bytes();
    for (name, value) in &head.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// A request as the lines a divergence shows: `METHOD URL`, then the body.
fn describe(request: &HttpRequest, body: &[u8]) -> Vec<String> {
    let mut lines = vec![format!("{} {}", request.method, request.url)];
    if !body.is_empty() {
        lines.push(match std::str::from_utf8(body) {
            Ok(text) if !text.contains(['\n', '\r']) => format!("body: {text}"),
            _ => format!(
                "body: x {}",
                body.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
        });
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording() -> Recording {
        Recording::parse(concat!(
            "@0 open {\"via\":\"wasi-http\",\"host\":\"api.test\",\"port\":80,\"addr\":\"127.0.0.1:80\"}\n",
            "@0 request {\"method\":\"POST\",\"url\":\"http://api.test/a\"}\n",
            "@0 > hi\n@0 >end\n",
            "@0 response {\"status\":201}\n@0 < one\n@0 < two\n@0 <end\n@0 close\n",
            "@1 open {\"via\":\"wasi-http\",\"host\":\"api.test\",\"port\":80}\n",
            "@1 request {\"method\":\"GET\",\"url\":\"http://api.test/b\"}\n@1 close\n",
        ))
        .expect("a recording")
    }

    fn request(method: &str, url: &str) -> HttpRequest {
        HttpRequest {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            added: Vec::new(),
        }
    }

    #[test]
    fn connections_are_served_in_order_and_a_changed_request_diverges() {
        let replay = NetReplay::new(&recording());
        assert_eq!(
            replay.addresses("api.test"),
            ["127.0.0.1".parse::<IpAddr>().expect("ip")]
        );
        let conn = replay
            .claim(NetVia::WasiHttp, "api.test", 80)
            .expect("claimed");
        assert_eq!((conn, replay.body_cap(conn)), (0, 3));
        let played = replay
            .http(conn, &request("POST", "http://api.test/a"), b"hi")
            .expect("matched");
        assert_eq!(played.response.expect("a response").status, 201);
        assert_eq!(played.body, [b"onetwo".to_vec()], "the lines joined");
        assert!(
            replay
                .problems()
                .iter()
                .all(|p| matches!(p, NetProblem::Unused { conn: 1, .. }))
        );

        let conn = replay
            .claim(NetVia::WasiHttp, "api.test", 80)
            .expect("claimed");
        assert!(
            replay
                .http(conn, &request("GET", "http://api.test/c"), b"")
                .is_none()
        );
        assert_eq!(replay.claim(NetVia::WasiHttp, "api.test", 80), None);
        assert_eq!(replay.claim(NetVia::WasiHttp, "other.test", 80), None);
        let problems = replay.problems();
        assert_eq!(problems.len(), 3, "{problems:?}");
        let shown = problems[0].to_string();
        assert!(
            shown.starts_with("first divergence at network exchange 1 (wasi:http api.test:80)"),
            "{shown}"
        );
        assert!(
            shown.contains("\n- GET http://api.test/b\n+ GET http://api.test/c\n"),
            "{shown}"
        );
        assert!(matches!(
            &problems[1],
            NetProblem::NotRecorded { port: 80, .. }
        ));
    }

    #[test]
    fn an_answer_head_is_read_whole_and_what_is_not_a_final_head_stays_bytes() {
        let raw = b"HTTP/1.1 404 Gone Fishing\r\nContent-Length: 2\r\n\r\nno";
        for cut in 0..raw.len() - 2 {
            assert_eq!(answer_head(&raw[..cut], 1024), AnswerHead::Partial, "{cut}");
        }
        let AnswerHead::Head(head, len) = answer_head(raw, 1024) else {
            panic!("a head");
        };
        assert_eq!(&raw[len..], b"no");
        assert_eq!(head.reason.as_deref(), Some("Gone Fishing"));
        assert_eq!(render_answer_head(&head), &raw[..len]);
        // The usual reason phrase is not kept, and comes back in the replay.
        let AnswerHead::Head(head, _) = answer_head(b"HTTP/1.1 200 OK\r\n\r\n", 1024) else {
            panic!("a head");
        };
        assert_eq!(head.reason, None);
        assert_eq!(render_answer_head(&head), b"HTTP/1.1 200 OK\r\n\r\n");
        for bytes in [
            &b"HTTP/1.1 100 Continue\r\n\r\n"[..],
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
            b"SSH-2.0-OpenSSH\r\n",
        ] {
            assert_eq!(answer_head(bytes, 1024), AnswerHead::Bytes);
        }
        assert_eq!(
            answer_head(b"HTTP/1.1 200 OK\r\nA: b", 8),
            AnswerHead::Bytes
        );
    }

    fn bytes_recording() -> Arc<NetReplay> {
        Arc::new(NetReplay::new(
            &Recording::parse(concat!(
                "@0 open {\"via\":\"wasi-sockets\",\"host\":\"db.test\",\"port\":5432,\"kind\":\"bytes\"}\n",
                "@0 < hello\n",
                "@0 >x 70696e670a\n",
                "@0 < pong\n@0 >end\n@0 < bye\n@0 <end\n@0 close\n",
                "@1 open {\"via\":\"wasi-sockets\",\"host\":\"db.test\",\"port\":5432,\"kind\":\"bytes\"}\n",
                "@1 failed {\"reason\":\"refused\"}\n@1 close\n",
            ))
            .expect("a recording"),
        ))
    }

    fn connected(replay: &Arc<NetReplay>) -> ByteTape {
        let conn = replay
            .claim(NetVia::WasiSockets, "db.test", 5432)
            .expect("claimed");
        match replay.play_bytes(conn) {
            Some(PlayedBytes::Connected(tape)) => tape,
            other => panic!("not connected: {other:?}"),
        }
    }

    #[test]
    fn a_bytes_connection_plays_the_servers_bytes_after_the_plugins_that_came_first() {
        let replay = bytes_recording();
        let mut tape = connected(&replay);
        // The server spoke first; its next bytes wait for the plugin's.
        assert_eq!(tape.read(3), ByteRead::Data(b"hel".to_vec()));
        assert_eq!(tape.read(64), ByteRead::Data(b"lo".to_vec()));
        assert_eq!(tape.read(64), ByteRead::Wait);
        assert_eq!(tape.write(b"pi"), Ok(()));
        assert_eq!(tape.read(64), ByteRead::Wait);
        assert_eq!(tape.write(b"ng\n"), Ok(()));
        assert_eq!(tape.read(64), ByteRead::Data(b"pong".to_vec()));
        assert_eq!(tape.read(64), ByteRead::Data(b"bye".to_vec()));
        assert_eq!(tape.read(64), ByteRead::End);
        tape.end_writing();
        // The second connection failed when recorded, and fails again.
        let conn = replay
            .claim(NetVia::WasiSockets, "db.test", 5432)
            .expect("claimed");
        assert!(matches!(
            replay.play_bytes(conn),
            Some(PlayedBytes::Failed(reason)) if reason == "refused"
        ));
        assert_eq!(replay.problems(), []);
    }

    #[test]
    fn different_fewer_or_more_bytes_diverge_at_the_first_difference() {
        let cases: [(&[u8], bool, &str, &str); 4] = [
            (b"pong\n", false, "ping", "pong"),
            (b"pi", true, "ping", "(no more bytes)"),
            (b"ping\nmore", false, "(no more bytes)", "more"),
            (b"p\xff", false, "ping", "x 70ff"),
        ];
        for (sent, ends, expected, got) in cases {
            let replay = bytes_recording();
            let mut tape = connected(&replay);
            let written = tape.write(sent);
            if ends {
                assert_eq!(written, Ok(()));
                tape.end_writing();
            } else {
                assert_eq!(written, Err(Strayed { conn: 0 }));
                // Nothing more is taken once it strayed, and it is reported once.
                assert_eq!(tape.write(b"x"), Err(Strayed { conn: 0 }));
                tape.end_writing();
            }
            let problems = replay.problems();
            assert_eq!(
                problems[0],
                NetProblem::Diverged {
                    conn: 0,
                    via: NetVia::WasiSockets,
                    host: "db.test".into(),
                    port: 5432,
                    expected: vec![expected.into()],
                    got: vec![got.into()],
                },
                "{sent:?}"
            );
            assert!(
                problems[1..]
                    .iter()
                    .all(|p| matches!(p, NetProblem::Unused { conn: 1, .. })),
                "{problems:?}"
            );
        }
    }

    #[test]
    fn a_diverging_line_is_shown_around_the_difference() {
        let long = format!("{}A{}", "a".repeat(100), "b".repeat(100));
        let shown = line_at(long.as_bytes(), 100);
        assert_eq!(
            shown,
            format!(
                "…{}A{}…",
                "a".repeat(DIFF_WINDOW),
                "b".repeat(DIFF_WINDOW - 1)
            )
        );
        assert_eq!(line_at(b"one\ntwo\nthree", 5), "two");
        // A CRLF line without its CR; with it (in hex) when the CR is what differs.
        let head = b"GET /a HTTP/1.1\r\nHost: x\r\n";
        assert_eq!(line_at(head, 5), "GET /a HTTP/1.1");
        assert_eq!(line_at(head, 15), "x 474554202f6120485454502f312e310d");
    }
}
