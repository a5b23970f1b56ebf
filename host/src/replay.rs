//! Replaying a recorded transcript: check a plugin against it, or stand in for the plugin.
//!
//! - [`check`] feeds the recorded host→plugin frames to a plugin, in order, and compares every
//!   plugin→host frame byte for byte; the first difference is a [`Divergence`] naming its
//!   index. Under `--deterministic` (a `# seed:` header) a wasm plugin reproduces its session
//!   exactly; a native plugin only if it is deterministic by itself.
//! - [`check_recording`] does the same with the plugin's network served from the recording
//!   ([`NetReplay`], put on the policy as [`crate::net::NetTape::Replay`]): nothing reaches a
//!   network, and a connection the recording does not have, a request that differs from the
//!   recorded one, or a recorded connection never opened is a [`Mismatch`] too.
//! - [`StandIn`] acts as the plugin: it answers each incoming frame with the recorded response,
//!   strictly in order ([`MatchMode::Strict`]) or by request key, by the protocol's own rules
//!   ([`MatchMode::ById`], for protocols whose responses may come out of order). It does no IO:
//!   `sandpipe replay --serve` hands it the frames its engine reader splits, under
//!   `--max-frame`, as `run` reads them, and writes what it answers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandpipe_proto::frame::Framing;
use sandpipe_proto::supervise::{FromEngine, FromPlugin, SupervisedProtocol};
use sandpipe_proto::transcript::{Direction, HttpResponse, Recording, Transcript};

use crate::error::Exit;
use crate::net::{AnswerHead, NetProblem, NetReplay};
use crate::policy::document::Dir;
use crate::policy::value::Cap;
use crate::policy::{Policy, PolicyDocument};
use crate::run::session::Session;
use crate::speak::protocols::Protocol;

/// Where a replay first differs from its recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the transcript entry (0-based, counting both directions).
    pub index: usize,
    /// The recorded frame, if the transcript had one there.
    pub expected: Option<Vec<u8>>,
    /// What the plugin sent instead, if anything.
    pub got: Option<Vec<u8>>,
    /// What happened, in words.
    pub reason: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "first divergence at frame {}: {}",
            self.index, self.reason
        )?;
        if let Some(e) = &self.expected {
            writeln!(f, "- {}", show(e))?;
        }
        if let Some(g) = &self.got {
            writeln!(f, "+ {}", show(g))?;
        }
        Ok(())
    }
}

fn show(frame: &[u8]) -> String {
    match std::str::from_utf8(frame) {
        Ok(s) if !s.contains(['\n', '\r']) => s.to_owned(),
        _ => format!(
            "x {} ; {}",
            frame.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            crate::run::cbor_note::render(frame)
        ),
    }
}

/// The framing a transcript declares (`# framing:`; JSON Lines when absent).
pub fn framing_of(t: &Transcript) -> Result<Framing, String> {
    t.header("framing").unwrap_or("lines").parse()
}

/// The protocol from `# protocol:`, when the recording names one sandpipe speaks.
pub fn protocol_of(t: &Transcript) -> Option<Protocol> {
    t.header("protocol")?.parse().ok()
}

/// The policy a transcript was recorded under, as data: its `# policy:` header, or, for a
/// recording written before the header held the whole policy, its `# args:`, `# preopen:`,
/// `# seed:`, `# fuel:`, `# max-memory:` and `# timeout-ms:` lines.
pub fn document_of(t: &Transcript) -> Result<PolicyDocument, String> {
    if let Some(json) = t.header("policy") {
        return PolicyDocument::from_json(json).map_err(|e| format!("header policy: {e}"));
    }
    let mut doc = PolicyDocument::default();
    let num = |key: &str| -> Result<Option<u64>, String> {
        t.header(key)
            .map(|v| v.parse::<u64>().map_err(|e| format!("header {key}: {e}")))
            .transpose()
    };
    doc.seed = num("seed")?;
    doc.limits.fuel = num("fuel")?;
    doc.limits.max_memory = match t.header("max-memory") {
        Some("none") => Some(Cap(None)),
        Some(_) => num("max-memory")?.map(|n| Cap(Some(n))),
        None => None,
    };
    doc.limits.timeout = num("timeout-ms")?.map(Duration::from_millis);
    if let Some(raw) = t.header("args") {
        doc.args = match serde_json::from_str::<Vec<String>>(raw) {
            Ok(v) if raw.starts_with('[') => v,
            _ => raw.split_whitespace().map(str::to_owned).collect(),
        };
    }
    let preopens = t.headers.iter().filter(|(k, _)| k == "preopen");
    for (_, v) in preopens {
        let mut words = v.split_whitespace();
        let guest = words.next().unwrap_or_default().to_owned();
        let read_only = words.next() == Some("ro");
        doc.grants.dirs.push(Dir {
            host: PathBuf::from(&guest),
            guest,
            read_only,
        });
    }
    doc.grants.env = t
        .headers
        .iter()
        .filter(|(k, _)| k == "env")
        .map(|(_, v)| v.clone())
        .collect();
    Ok(doc)
}

/// The policy a transcript was recorded under (see [`document_of`]). `host_dir(guest)` gives
/// the host directory for each recorded preopen (replay uses fresh directories unless told
/// otherwise). A native plugin sees a preopen at its host path (Landlock grants it there), so
/// an argument equal to a guest path becomes the host directory.
///
/// Environment variables and HTTP header values are taken from the replaying process's own
/// environment, by the names recorded, as `--env NAME` does. A `--http-header` whose variable
/// is not set there is left out: a replay from the recording sends no request anywhere, so it
/// needs no secret (a caller giving the plugin the live network checks
/// [`recorded_headers`] against the policy's). The recording's audit log is not appended to: a
/// replay writes no audit trail unless its caller sets one.
pub fn recorded_policy(
    t: &Transcript,
    native: bool,
    host_dir: &dyn Fn(&str) -> PathBuf,
) -> Result<Policy, String> {
    let mut doc = document_of(t)?;
    doc.audit = None;
    doc.net.http_headers.retain(|spec| {
        let var = spec.rsplit_once("=env:").map(|(_, var)| var);
        var.is_none_or(|var| std::env::var_os(var).is_some())
    });
    let guests: Vec<String> = doc.grants.dirs.iter().map(|d| d.guest.clone()).collect();
    for d in &mut doc.grants.dirs {
        d.host = host_dir(&d.guest);
        if native {
            d.guest = d.host.display().to_string();
        }
    }
    if native {
        for arg in &mut doc.args {
            if guests.contains(arg) {
                *arg = host_dir(arg).display().to_string();
            }
        }
    }
    Policy::from_document(&doc, &|name| std::env::var(name).ok()).map_err(|e| e.to_string())
}

/// How many `--http-header`s `t` was recorded with (their values are not in it).
pub fn recorded_headers(t: &Transcript) -> Result<usize, String> {
    Ok(document_of(t)?.net.http_headers.len())
}

/// Replay `t` against a running session: send each recorded `>` frame, expect each `<` frame
/// (each within `wait`: a plugin waiting for something the recording does not send is a
/// divergence, not a hang). Then close stdin: the plugin must send nothing more. Returns how
/// the plugin ended.
///
/// Each `>` frame begins a request ([`crate::SessionControl::begin_request`]), so per-request
/// fuel is re-armed for it as the supervisor re-armed it for each request it forwarded (a
/// notification re-arms it too: replay does not speak the protocol).
pub async fn check(
    session: &mut Session,
    t: &Transcript,
    wait: Duration,
) -> Result<Exit, Divergence> {
    for (index, entry) in t.entries.iter().enumerate() {
        match entry.dir {
            Direction::ToPlugin => {
                session.control().begin_request();
                if let Err(e) = session.send(&entry.frame).await {
                    return Err(Divergence {
                        index,
                        expected: Some(entry.frame.clone()),
                        got: None,
                        reason: format!(
                            "the plugin stopped reading: {e} ({})",
                            session.wait().await
                        ),
                    });
                }
            }
            Direction::FromPlugin => match recv_within(session, wait, |d| {
                format!("no frame from the plugin within {d}")
            })
            .await
            {
                Ok(Some(got)) if got[..] == entry.frame[..] => {}
                Ok(Some(got)) => {
                    return Err(Divergence {
                        index,
                        expected: Some(entry.frame.clone()),
                        got: Some(got.to_vec()),
                        reason: "the plugin sent a different frame".into(),
                    });
                }
                Ok(None) => {
                    let exit = session.wait().await;
                    return Err(Divergence {
                        index,
                        expected: Some(entry.frame.clone()),
                        got: None,
                        reason: format!("the plugin ended first ({exit})"),
                    });
                }
                Err(e) => {
                    return Err(Divergence {
                        index,
                        expected: Some(entry.frame.clone()),
                        got: None,
                        reason: e.to_string(),
                    });
                }
            },
        }
    }
    session.close_stdin().await;
    let index = t.entries.len();
    let last = recv_within(session, wait, |d| {
        format!("the plugin did not end within {d} of its stdin closing")
    })
    .await;
    match last {
        Ok(None) => Ok(session.wait().await),
        Ok(Some(extra)) => Err(Divergence {
            index,
            expected: None,
            got: Some(extra.to_vec()),
            reason: "the plugin sent a frame the recording does not have".into(),
        }),
        Err(e) => Err(Divergence {
            index,
            expected: None,
            got: None,
            reason: e.to_string(),
        }),
    }
}

/// How a replay with its network differs from its recording: what went wrong on the network
/// (in order; the first is where the plugin first strayed, since its frames follow from what
/// it got), and the first frame that differed, if one did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mismatch {
    /// The network's problems, in order.
    pub network: Vec<NetProblem>,
    /// The first divergent frame.
    pub frames: Option<Divergence>,
}

impl Mismatch {
    /// A frame divergence alone (a replay whose network is live).
    pub fn frames(divergence: Divergence) -> Self {
        Self {
            network: Vec::new(),
            frames: Some(divergence),
        }
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for problem in &self.network {
            let text = problem.to_string();
            f.write_str(&text)?;
            if !text.ends_with('\n') {
                f.write_str("\n")?;
            }
        }
        if let Some(d) = &self.frames {
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// [`check`] the frames of `recording`, then its network: `net` must be the [`NetReplay`] the
/// session's policy serves its connections from (made from the same recording). Exit when
/// every frame matched and every recorded connection was opened and matched, and no other.
pub async fn check_recording(
    session: &mut Session,
    recording: &Recording,
    net: &NetReplay,
    wait: Duration,
) -> Result<Exit, Mismatch> {
    let frames = check(session, &recording.transcript, wait).await;
    let network = net.problems();
    match frames {
        Ok(exit) if network.is_empty() => Ok(exit),
        Ok(_) => Err(Mismatch {
            network,
            frames: None,
        }),
        Err(d) => Err(Mismatch {
            network,
            frames: Some(d),
        }),
    }
}

/// The recording's HTTP exchanges as a HAR 1.2 document (`replay --har`), for the tools that
/// show traffic: one entry per `wasi:http` exchange and plain request through the proxy, in
/// the order they opened. A recording holds no clock, so every entry starts at
/// 2000-01-01T00:00:00Z (deterministic mode's epoch) and takes 0 ms. A body that is not
/// UTF-8 is base64 (`encoding`). Tunnels are left out: they are bytes, not HTTP.
pub fn har(recording: &Recording) -> serde_json::Value {
    use base64::Engine as _;
    use sandpipe_proto::transcript::{NetDir, NetEvent, NetKind, NetVia};
    use serde_json::json;
    let headers = |list: &[(String, String)]| -> Vec<serde_json::Value> {
        list.iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect()
    };
    let content_type = |list: &[(String, String)]| -> String {
        list.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            .map_or_else(String::new, |(_, v)| v.clone())
    };
    let text = |body: &[u8]| -> (String, Option<&'static str>) {
        match std::str::from_utf8(body) {
            Ok(t) => (t.to_owned(), None),
            Err(_) => (
                base64::engine::general_purpose::STANDARD.encode(body),
                Some("base64"),
            ),
        }
    };
    let conns = recording
        .net
        .iter()
        .map(|n| n.conn)
        .max()
        .map_or(0, |m| m + 1);
    let mut entries = Vec::new();
    for conn in 0..conns {
        let (mut open, mut request, mut response) = (None, None, None);
        let (mut out, mut inn) = (Vec::new(), Vec::new());
        for event in recording.connection(conn) {
            match event {
                NetEvent::Open(o) => open = Some(o),
                NetEvent::Request(r) => request = Some(r),
                NetEvent::Response(r) => response = Some(r),
                NetEvent::Data {
                    dir: NetDir::Out,
                    bytes,
                } => out.extend_from_slice(bytes),
                NetEvent::Data {
                    dir: NetDir::In,
                    bytes,
                } => inn.extend_from_slice(bytes),
                _ => {}
            }
        }
        let (Some(open), Some(request)) = (open, request) else {
            continue;
        };
        if open.kind() != NetKind::Http {
            continue;
        }
        // A recording made before the proxy read answers' heads holds the whole answer as
        // bytes: its head is split off here.
        let (head, mut body) = match response {
            Some(r) => (r.clone(), inn),
            None => split_response(&inn),
        };
        // Only a plain request through the proxy keeps its body's transfer coding: wasi:http
        // and --tls-intercept record what hyper decoded.
        let on_the_wire = open.via == NetVia::Proxy && request.url.starts_with("http://");
        let chunked = on_the_wire
            && head.headers.iter().any(|(n, v)| {
                n.eq_ignore_ascii_case("transfer-encoding")
                    && v.to_ascii_lowercase().contains("chunked")
            });
        if chunked && let Some(plain) = unchunk(&body) {
            body = plain;
        }
        let status_text = crate::net::reason_phrase(&head).to_owned();
        let (status, response_headers) = (head.status, head.headers);
        let mut req = json!({
            "method": request.method,
            "url": request.url,
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": headers(&request.headers),
            "queryString": [],
            "headersSize": -1,
            "bodySize": out.len(),
        });
        if !out.is_empty() {
            let (t, _) = text(&out);
            req["postData"] = json!({"mimeType": content_type(&request.headers), "text": t});
        }
        let (body_text, encoding) = text(&body);
        let mut content = json!({
            "size": body.len(),
            "mimeType": content_type(&response_headers),
            "text": body_text,
        });
        if let Some(e) = encoding {
            content["encoding"] = json!(e);
        }
        entries.push(json!({
            "startedDateTime": "2000-01-01T00:00:00.000Z",
            "time": 0,
            "request": req,
            "response": {
                "status": status,
                "statusText": status_text,
                "httpVersion": "HTTP/1.1",
                "cookies": [],
                "headers": headers(&response_headers),
                "content": content,
                "redirectURL": "",
                "headersSize": -1,
                "bodySize": body.len(),
            },
            "cache": {},
            "timings": {"send": 0, "wait": 0, "receive": 0},
            "serverIPAddress": open.addr.as_deref().and_then(|a| a.parse::<std::net::SocketAddr>().ok()).map(|a| a.ip().to_string()),
            "connection": conn.to_string(),
        }));
    }
    json!({
        "log": {
            "version": "1.2",
            "creator": {"name": "sandpipe", "version": env!("CARGO_PKG_VERSION")},
            "entries": entries,
        }
    })
}

/// A raw HTTP/1.x response (what the proxy recorded before it read answers' heads): its
/// head, and the body; status 0 and everything as the body when the head does not parse.
fn split_response(raw: &[u8]) -> (HttpResponse, Vec<u8>) {
    match crate::net::answer_head(raw, raw.len()) {
        AnswerHead::Head(head, len) => (head, raw[len..].to_vec()),
        _ => (
            HttpResponse {
                status: 0,
                headers: Vec::new(),
                reason: None,
            },
            raw.to_vec(),
        ),
    }
}

/// A body sent with `Transfer-Encoding: chunked` (the proxy records it as it came) without
/// its chunks' framing; `None` when it is not well framed.
fn unchunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = raw.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&raw[..line]).ok()?;
        let size = size.split(';').next()?.trim();
        let size = usize::from_str_radix(size, 16).ok()?;
        raw = &raw[line + 2..];
        if size == 0 {
            return Some(out);
        }
        let chunk = raw.get(..size)?;
        out.extend_from_slice(chunk);
        raw = raw.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

/// How [`serve`] matches incoming frames to the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MatchMode {
    /// Each incoming frame must be the next recorded `>` frame, byte for byte; the `<` frames
    /// that follow it are sent back.
    Strict,
    /// A JSON-RPC request is matched to the recorded request with the same id (in any order);
    /// the recorded frames that answered it (notifications in between, then the response with
    /// that id) are sent back. Notifications are matched by bytes, in order.
    ById,
}

/// What [`serve`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServeReport {
    /// Incoming frames that matched.
    pub matched: usize,
    /// Incoming frames that did not (each got the protocol's error).
    pub unexpected: usize,
}

/// The plugin's next frame (or its end), or a timed-out error whose message `what` words
/// from `wait`.
async fn recv_within(
    session: &mut Session,
    wait: Duration,
    what: impl FnOnce(humantime::FormattedDuration) -> String,
) -> Result<Option<bytes::Bytes>, crate::SessionError> {
    tokio::time::timeout(wait, session.recv())
        .await
        .unwrap_or_else(|_| {
            Err(crate::SessionError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                what(humantime::format_duration(wait)),
            )))
        })
}

/// The plugin of a recording, without IO: what it says first ([`StandIn::leading`]), then
/// its answer to each frame the engine sends ([`StandIn::answer`]).
#[derive(Debug)]
pub struct StandIn<'t> {
    t: &'t Transcript,
    mode: MatchMode,
    framing: Framing,
    protocol: Protocol,
    plan: Plan,
    cursor: usize,
    used: Vec<bool>,
    report: ServeReport,
}

/// What the stand-in answers one engine frame with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Answer {
    /// The frames to send back, in order: the recorded ones, or the protocol's error.
    pub frames: Vec<Vec<u8>>,
    /// Why the frame did not match the recording, when it did not.
    pub unexpected: Option<String>,
}

impl<'t> StandIn<'t> {
    /// The plugin of `t`, matching by `mode`. An unknown protocol is answered as plain
    /// JSON-RPC, by its rules.
    pub fn new(t: &'t Transcript, mode: MatchMode) -> Result<StandIn<'t>, String> {
        let framing = framing_of(t)?;
        let protocol = protocol_of(t).unwrap_or(Protocol::JsonRpc);
        Ok(StandIn {
            t,
            mode,
            framing,
            protocol,
            plan: Plan::new(t, protocol),
            cursor: 0,
            used: vec![false; t.entries.len()],
            report: ServeReport::default(),
        })
    }

    /// The recording's framing.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// What the plugin said before the host said anything (an oracle's `ready`).
    pub fn leading(&mut self) -> Vec<Vec<u8>> {
        let leading: Vec<Vec<u8>> = self.t.entries[self.cursor..]
            .iter()
            .take_while(|e| e.dir == Direction::FromPlugin)
            .map(|e| e.frame.to_vec())
            .collect();
        self.cursor += leading.len();
        leading
    }

    /// The answer to the engine's `frame`.
    pub fn answer(&mut self, frame: &[u8]) -> Answer {
        let t = self.t;
        let replies: Option<Vec<usize>> = match self.mode {
            MatchMode::Strict => match t.entries.get(self.cursor) {
                Some(e) if e.dir == Direction::ToPlugin && e.frame[..] == frame[..] => {
                    let start = self.cursor + 1;
                    let end = t.entries[start..]
                        .iter()
                        .position(|e| e.dir == Direction::ToPlugin)
                        .map_or(t.entries.len(), |p| start + p);
                    self.cursor = end;
                    Some((start..end).collect())
                }
                _ => None,
            },
            MatchMode::ById => self.plan.replies_for(frame, &mut self.used),
        };
        if let Some(indexes) = replies {
            self.report.matched += 1;
            return Answer {
                frames: indexes
                    .iter()
                    .map(|&i| t.entries[i].frame.to_vec())
                    .collect(),
                unexpected: None,
            };
        }
        self.report.unexpected += 1;
        let expected = match self.mode {
            MatchMode::Strict => t
                .entries
                .get(self.cursor)
                .map(|e| show(&e.frame))
                .unwrap_or_else(|| "nothing more".into()),
            MatchMode::ById => "a recorded request with the same id".into(),
        };
        let message = format!(
            "replay: unexpected frame {}; expected {expected}",
            show(frame)
        );
        Answer {
            frames: protocol_error(self.protocol, frame, &message)
                .into_iter()
                .collect(),
            unexpected: Some(message),
        }
    }

    /// What it saw so far.
    pub fn report(&self) -> ServeReport {
        self.report.clone()
    }
}

/// For [`MatchMode::ById`]: which recorded frames answer which request, by the protocol's own
/// rules ([`SupervisedProtocol`]): a request's key (a JSON-RPC id's text, an ATP run id) and
/// the plugin's answer under that key.
struct Plan {
    rules: Box<dyn SupervisedProtocol>,
    /// Recorded `>` requests by key: the indexes of the frames that answered each.
    by_key: HashMap<String, Vec<usize>>,
    /// Recorded `>` frames without a key (notifications, answers to the plugin's requests),
    /// with the `<` frames that follow them up to the next `>`.
    others: Vec<(usize, Vec<usize>)>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("by_key", &self.by_key)
            .field("others", &self.others)
            .finish_non_exhaustive()
    }
}

/// The key an engine frame's answer comes back under, by `rules`, for a request.
fn request_key(rules: &dyn SupervisedProtocol, frame: &[u8]) -> Option<String> {
    match rules.classify_engine(frame) {
        FromEngine::Request { key, .. }
        | FromEngine::Stream { key, .. }
        | FromEngine::Handshake { awaits: Some(key) } => Some(key),
        _ => None,
    }
}

impl Plan {
    fn new(t: &Transcript, protocol: Protocol) -> Self {
        let rules = protocol.supervised();
        let mut by_key = HashMap::new();
        let mut others = Vec::new();
        for (i, e) in t.entries.iter().enumerate() {
            if e.dir != Direction::ToPlugin {
                continue;
            }
            match request_key(rules.as_ref(), &e.frame) {
                Some(key) => {
                    // The answer under this key, and the plugin's other frames sent after the
                    // request and before that answer (not the answers to other requests).
                    let mut replies = Vec::new();
                    for (j, r) in t.entries.iter().enumerate().skip(i + 1) {
                        if r.dir != Direction::FromPlugin {
                            continue;
                        }
                        match rules.classify_plugin(&r.frame) {
                            FromPlugin::Answer { key: k } if k == key => {
                                replies.push(j);
                                break;
                            }
                            FromPlugin::Answer { .. } => {}
                            _ => replies.push(j),
                        }
                    }
                    by_key.insert(key, replies);
                }
                None => {
                    let replies = t.entries[i + 1..]
                        .iter()
                        .take_while(|r| r.dir == Direction::FromPlugin)
                        .enumerate()
                        .map(|(k, _)| i + 1 + k)
                        .collect();
                    others.push((i, replies));
                }
            }
        }
        Plan {
            rules,
            by_key,
            others,
        }
    }

    fn replies_for(&self, frame: &[u8], used: &mut [bool]) -> Option<Vec<usize>> {
        if let Some(key) = request_key(self.rules.as_ref(), frame) {
            let replies = self.by_key.get(&key)?;
            // Notifications are sent only once, whichever request claims them first.
            let out: Vec<usize> = replies
                .iter()
                .copied()
                .filter(|&i| !std::mem::replace(&mut used[i], true))
                .collect();
            return Some(out);
        }
        let (i, replies) = self.others.iter().find(|(i, _)| !used[*i])?;
        used[*i] = true;
        Some(
            replies
                .iter()
                .copied()
                .filter(|&r| !std::mem::replace(&mut used[r], true))
                .collect(),
        )
    }
}

/// The protocol's error answer to an unexpected request, when the frame is one: the
/// recording will never answer it ([`Protocol::stopped_answer`]).
fn protocol_error(protocol: Protocol, frame: &[u8], message: &str) -> Option<Vec<u8>> {
    protocol.stopped_answer(frame, &crate::Stopped::by_host(message, Vec::new()))
}

/// Fresh directories for a transcript's preopens, removed when dropped.
#[derive(Debug)]
pub struct ScratchDirs {
    root: PathBuf,
}

impl ScratchDirs {
    /// Create a scratch root under the system temp dir.
    pub fn new() -> std::io::Result<Self> {
        let root = std::env::temp_dir().join(format!(
            "sandpipe-replay-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&root)?;
        Ok(Self { root })
    }

    /// The (created) directory standing in for `guest`.
    pub fn dir_for(&self, guest: &str) -> PathBuf {
        let name: String = guest
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let dir = self.root.join(name);
        let _ = std::fs::create_dir_all(&dir);
        dir
    }

    /// The root.
    pub fn path(&self) -> &Path {
        &self.root
    }
}

impl Drop for ScratchDirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proxied exchange in HAR: from an older recording (the answer's bytes, head and all)
    /// and from one whose head is a `response` line with a chunked body as it came.
    #[test]
    fn har_holds_a_proxied_answer_recorded_either_way() {
        let open = |n: u8| {
            format!(
                "@{n} open {{\"via\":\"proxy\",\"host\":\"api.test\",\"port\":80,\"kind\":\"http\"}}\n\
                 @{n} request {{\"method\":\"GET\",\"url\":\"http://api.test/\"}}\n"
            )
        };
        let text = format!(
            "{}@0 <x {}\n@0 <end\n@0 close\n{}{}",
            open(0),
            "485454502f312e3120323030204f4b0d0a436f6e74656e742d4c656e6774683a20320d0a0d0a6869",
            open(1),
            "@1 response {\"status\":418,\"headers\":[[\"transfer-encoding\",\"chunked\"]],\"reason\":\"Teapot\"}\n\
             @1 <x 320d0a68690d0a300d0a0d0a\n@1 <end\n@1 close\n"
        );
        let recording = Recording::parse(&text).expect("a recording");
        let har = har(&recording);
        let entries = &har["log"]["entries"];
        assert_eq!(entries[0]["response"]["status"], 200, "{har}");
        assert_eq!(entries[0]["response"]["statusText"], "OK");
        assert_eq!(entries[0]["response"]["content"]["text"], "hi");
        assert_eq!(entries[1]["response"]["status"], 418, "{har}");
        assert_eq!(entries[1]["response"]["statusText"], "Teapot");
        assert_eq!(entries[1]["response"]["content"]["text"], "hi");
    }

    fn transcript(protocol: &str, lines: &[&str]) -> Transcript {
        let text = format!(
            "# sandpipe transcript 1\n# protocol: {protocol}\n# framing: lines\n{}\n",
            lines.join("\n")
        );
        Transcript::parse(&text).expect("transcript")
    }

    fn frames(answer: &Answer) -> Vec<String> {
        answer
            .frames
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    }

    /// By id, each request gets the recorded frames that answered it, whatever the engine's
    /// order: the notification sent before its answer, then the answer with its id (keys by
    /// the protocol's rules, so `1` and `"1"` are two requests).
    #[test]
    fn by_id_answers_each_request_with_its_recorded_answer_in_the_engines_order() {
        let t = transcript(
            "jsonrpc",
            &[
                r#"> {"jsonrpc":"2.0","id":1,"method":"a"}"#,
                r#"< {"jsonrpc":"2.0","method":"progress"}"#,
                r#"< {"jsonrpc":"2.0","id":1,"result":"one"}"#,
                r#"> {"jsonrpc":"2.0","id":"1","method":"b"}"#,
                r#"< {"jsonrpc":"2.0","id":"1","result":"string one"}"#,
            ],
        );
        let mut stand_in = StandIn::new(&t, MatchMode::ById).expect("stand-in");
        assert!(stand_in.leading().is_empty());
        let b = stand_in.answer(br#"{"jsonrpc":"2.0","id":"1","method":"b"}"#);
        assert_eq!(
            frames(&b),
            [r#"{"jsonrpc":"2.0","id":"1","result":"string one"}"#]
        );
        let a = stand_in.answer(br#"{"jsonrpc":"2.0","id":1,"method":"a"}"#);
        assert_eq!(
            frames(&a),
            [
                r#"{"jsonrpc":"2.0","method":"progress"}"#,
                r#"{"jsonrpc":"2.0","id":1,"result":"one"}"#
            ]
        );
        // An id the recording never saw gets the protocol's error, under that id.
        let other = stand_in.answer(br#"{"jsonrpc":"2.0","id":9,"method":"a"}"#);
        assert!(other.unexpected.is_some());
        assert!(frames(&other)[0].contains(r#""id":9"#), "{other:?}");
        assert_eq!(
            stand_in.report(),
            ServeReport {
                matched: 2,
                unexpected: 1
            }
        );
    }
}
