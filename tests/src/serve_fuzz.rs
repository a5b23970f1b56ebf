//! A black-box fuzzer for `sandpipe serve`, driven as HTTP clients drive it: the built binary
//! as a separate process in front of the project's wasm MCP server (examples/mcp-tools), and
//! generated clients on raw TCP connections, each request written in random chunks, some of
//! them damaged the ways the spec names (a header that disagrees with the body, no version, a
//! foreign Host or Origin, no token or a wrong one, a body over `--max-body`, malformed JSON,
//! an unknown session or another principal's), some cut off (half a head, half a body, a
//! client that hangs up before its answer).
//!
//! ```text
//!  seed ─► Case { principal, era, requests: [Request { call, fault, chunks, .. }] }
//!            │
//!  threads ──┴─► TCP ─► sandpipe serve --auth-token-file … mcp-tools.wasm
//!  each answer ─► expected(call, fault): status, JSON-RPC error code, the call's result
//!  at the end: /metrics (nothing refused started an instance), SIGTERM ─► exit 0
//! ```
//!
//! The oracle is the spec's table of statuses (docs/serve.md) and the tools' own arithmetic:
//! `add` answers `a + b`, a 2025 session's `count` answers 1, 2, 3, … (its instance is its
//! own: a count from anyone else's would break the run), and a refused request gets its status
//! and error code with the request's id. A request cut off gets no answer, or an error, never
//! a result; the endpoint stays up for the next one. A case is made from its seed alone, so a
//! failure is replayed with that seed (`cargo run -p sandpipe-tests --example serve_fuzz --
//! --seed S --cases 1`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// A read that has waited this long is a hang (a bound, never a measure).
pub const HANG_BOUND: Duration = Duration::from_secs(120);
/// The principals with a token (`token-NAME`).
pub const PRINCIPALS: [&str; 3] = ["alice", "bob", "carol"];
/// `--max-body` of the endpoint under test.
const MAX_BODY: usize = 16 * 1024;
/// The 2026-07-28 revision.
const MODERN: &str = "2026-07-28";
/// The 2025 revision of a session.
const LEGACY: &str = "2025-11-25";

/// Which era a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: no `initialize`, the version in `_meta` and the headers.
    Modern,
    /// 2025-11-25: `initialize`, `Mcp-Session-Id`, DELETE at the end.
    Legacy,
}

/// What a request asks of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `tools/call add {a, b}`.
    Add(i64, i64),
    /// `tools/call count` (a 2025 session's own counter).
    Count,
    /// `tools/call greet {name}`.
    Greet(String),
    /// `tools/list`.
    List,
}

/// How a request is damaged, if it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Not damaged.
    None,
    /// The body is not JSON.
    MalformedJson,
    /// The body is a JSON-RPC batch.
    Batch,
    /// The body is larger than `--max-body`.
    OverCap,
    /// No `MCP-Protocol-Version` (2026-07-28).
    NoVersion,
    /// `MCP-Protocol-Version` names another revision than the body (2026-07-28).
    WrongVersionHeader,
    /// `Mcp-Method` is not the body's method (2026-07-28).
    WrongMethodHeader,
    /// `Mcp-Name` is not the body's tool (2026-07-28).
    WrongNameHeader,
    /// A revision nobody speaks, in the body and the header (2026-07-28).
    UnsupportedRevision,
    /// An `Mcp-Session-Id` nobody was given (2025).
    UnknownSession,
    /// The session of another principal, still live (2025).
    StolenSession,
    /// An `Origin` not allowed.
    ForeignOrigin,
    /// A `Host` not allowed.
    ForeignHost,
    /// No `Authorization`.
    NoToken,
    /// A token nobody has.
    WrongToken,
    /// Half the head, then the connection closes.
    HalfHead,
    /// The whole head and half the body, then the client's writing side closes.
    HalfBody,
    /// The whole request, then the connection closes before the answer.
    HangUp,
}

/// One request of a case.
#[derive(Debug, Clone)]
pub struct Request {
    /// What it asks.
    pub call: Call,
    /// How it is damaged.
    pub fault: Fault,
    /// `Accept: application/json` only (otherwise an event stream is welcome too).
    pub json_only: bool,
    /// On a new connection (otherwise on the case's kept-alive one).
    pub fresh: bool,
    /// Where its bytes are split into writes, as fractions of 1,000.
    pub splits: Vec<u16>,
}

/// One generated client.
#[derive(Debug, Clone)]
pub struct Case {
    /// The seed it was made from.
    pub seed: u64,
    /// Its principal (an index into [`PRINCIPALS`]).
    pub principal: usize,
    /// Its era.
    pub era: Era,
    /// Its requests, after `initialize` for a 2025 session.
    pub requests: Vec<Request>,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} ({}, {:?}, {} requests)",
            self.seed,
            PRINCIPALS[self.principal],
            self.era,
            self.requests.len()
        )
    }
}

/// The case of `seed`.
pub fn generate(seed: u64) -> Case {
    let mut rng = fastrand::Rng::with_seed(seed);
    let era = if rng.bool() { Era::Modern } else { Era::Legacy };
    let faults: &[Fault] = match era {
        Era::Modern => &[
            Fault::MalformedJson,
            Fault::Batch,
            Fault::OverCap,
            Fault::NoVersion,
            Fault::WrongVersionHeader,
            Fault::WrongMethodHeader,
            Fault::WrongNameHeader,
            Fault::UnsupportedRevision,
            Fault::ForeignOrigin,
            Fault::ForeignHost,
            Fault::NoToken,
            Fault::WrongToken,
            Fault::HalfHead,
            Fault::HalfBody,
            Fault::HangUp,
        ],
        Era::Legacy => &[
            Fault::MalformedJson,
            Fault::OverCap,
            Fault::UnknownSession,
            Fault::StolenSession,
            Fault::ForeignOrigin,
            Fault::ForeignHost,
            Fault::NoToken,
            Fault::WrongToken,
            Fault::HalfHead,
            Fault::HalfBody,
        ],
    };
    let n = rng.usize(1..12);
    let mut requests: Vec<Request> = (0..n)
        .map(|_| {
            let call = match rng.u8(..8) {
                0..=3 => Call::Add(rng.i64(..), rng.i64(..)),
                4 | 5 => Call::Count,
                6 => Call::Greet((0..rng.usize(1..40)).map(|_| rng.alphanumeric()).collect()),
                _ => Call::List,
            };
            let fault = if rng.u8(..3) == 0 {
                faults[rng.usize(..faults.len())]
            } else {
                Fault::None
            };
            // `Mcp-Name` belongs to a call (a `tools/list` has none to disagree with).
            let call = match (call, fault) {
                (Call::List, Fault::WrongNameHeader) => Call::Add(1, 2),
                (call, _) => call,
            };
            Request {
                call,
                fault,
                json_only: rng.bool(),
                fresh: rng.u8(..4) == 0,
                splits: (0..rng.usize(..4)).map(|_| rng.u16(..1000)).collect(),
            }
        })
        .collect();
    // A 2025 session may end with a client that hangs up mid-call: its answer and any count
    // after it are unknown, so it is the session's last request before DELETE.
    if era == Era::Legacy && rng.u8(..6) == 0 {
        requests.push(Request {
            call: Call::Count,
            fault: Fault::HangUp,
            json_only: rng.bool(),
            fresh: false,
            splits: Vec::new(),
        });
    }
    Case {
        seed,
        principal: rng.usize(..PRINCIPALS.len()),
        era,
        requests,
    }
}

/// A `sandpipe serve` under test, and what its clients opened.
#[derive(Debug)]
pub struct Endpoint {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    /// The live 2025 sessions, by principal (for [`Fault::StolenSession`]).
    sessions: Mutex<Vec<(usize, String)>>,
    /// Instances the clients made it start: 2025 sessions opened, and a first 2026-07-28
    /// request answered per principal (an upper bound: a hang-up may recycle one).
    started: Mutex<(u64, [bool; PRINCIPALS.len()], u64)>,
    _dir: tempfile::TempDir,
}

impl Endpoint {
    /// Start `sandpipe serve` in front of `server` (the mcp-tools component), with tokens for
    /// [`PRINCIPALS`], `--max-body` 16 KiB and room for every session a run opens.
    pub fn start(sandpipe: &Path, server: &Path, cache_dir: &Path) -> Endpoint {
        let dir = tempfile::tempdir().expect("tempdir");
        let tokens = dir.path().join("tokens");
        let text: String = PRINCIPALS
            .iter()
            .map(|p| format!("{p} token-{p}\n"))
            .collect();
        std::fs::write(&tokens, text).expect("token file");
        let mut cmd = Command::new(sandpipe);
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0", "--max-body", "16KiB"])
            .args(["--max-instances", "10000", "--header-timeout", "5s"])
            .arg("--auth-token-file")
            .arg(&tokens)
            .arg("--cache-dir")
            .arg(cache_dir)
            .arg(server);
        let (child, addr, stderr) = crate::cli::serving(cmd);
        Endpoint {
            child,
            addr,
            stderr,
            sessions: Mutex::new(Vec::new()),
            started: Mutex::new((0, [false; PRINCIPALS.len()], 0)),
            _dir: dir,
        }
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// Check what the run left, then stop the endpoint: every instance it started was one a
    /// client asked for (`/metrics`), SIGTERM ends it with 0, and it never panicked.
    pub fn finish(mut self) -> Result<(), String> {
        let metrics = get(self.addr, "/metrics")?;
        let instances: u64 = metrics
            .lines()
            .filter(|l| {
                l.starts_with("sandpipe_serve_instances{state=\"running\"}")
                    || l.starts_with("sandpipe_serve_instances{state=\"ended\"}")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        let (sessions, modern, hangups) = *self.started.lock().expect("lock");
        let most = sessions + modern.iter().filter(|m| **m).count() as u64 + hangups;
        let mut problems = Vec::new();
        if instances > most {
            problems.push(format!(
                "{instances} instances started where clients asked for at most {most}:\n{metrics}"
            ));
        }
        // SAFETY: kill(2) on our own child's pid.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let status = self
            .child
            .wait()
            .map_err(|e| format!("waiting for serve: {e}"))?;
        if status.code() != Some(0) {
            problems.push(format!("SIGTERM ended serve with {status}"));
        }
        let stderr = self.stderr();
        if stderr.contains("panicked") {
            problems.push("serve panicked".to_owned());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{}\nserve's stderr:\n{stderr}",
                problems.join("\n")
            ))
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path`'s body.
fn get(addr: SocketAddr, path: &str) -> Result<String, String> {
    let mut c = Conn::open(addr)?;
    c.write(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        &[],
    )?;
    let reply = c.read()?.ok_or("no answer to GET")?;
    Ok(reply.body)
}

/// An answer as read off the wire.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC answer in it: the JSON body, or the last `data:` event that has an id.
    fn answer(&self) -> Result<Value, String> {
        let event_stream = self
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let parse = |t: &str| serde_json::from_str::<Value>(t).map_err(|e| format!("{e}: {t}"));
        if event_stream {
            let mut last = None;
            for data in self.body.lines().filter_map(|l| l.strip_prefix("data:")) {
                let v = parse(data.trim_start())?;
                if v.get("id").is_some() {
                    last = Some(v);
                }
            }
            last.ok_or_else(|| format!("an event stream with no answer: {}", self.body))
        } else {
            parse(&self.body)
        }
    }
}

/// A client connection.
struct Conn {
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
        stream
            .set_read_timeout(Some(HANG_BOUND))
            .map_err(|e| format!("{e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            reader: BufReader::new(stream),
        })
    }

    /// Write `bytes` in pieces split at `splits` (fractions of 1,000 of its length), with a
    /// short pause before each piece but the first.
    fn write(&mut self, bytes: &[u8], splits: &[u16]) -> Result<(), String> {
        let mut at: Vec<usize> = splits
            .iter()
            .map(|s| bytes.len() * usize::from(*s) / 1000)
            .collect();
        at.push(bytes.len());
        at.sort_unstable();
        let mut from = 0;
        for to in at {
            if to > from {
                if from > 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                self.reader
                    .get_mut()
                    .write_all(&bytes[from..to])
                    .map_err(|e| format!("writing the request: {e}"))?;
                from = to;
            }
        }
        Ok(())
    }

    /// The next answer, or `None` if the endpoint closed the connection before one.
    fn read(&mut self) -> Result<Option<Reply>, String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
            Err(e) => return Err(format!("reading a status line: {e}")),
        }
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("not a status line: {line:?}"))?;
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            self.reader
                .read_line(&mut h)
                .map_err(|e| format!("reading a header: {e}"))?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (n, v) = h
                .split_once(':')
                .ok_or_else(|| format!("not a header: {h:?}"))?;
            headers.push((n.trim().to_owned(), v.trim().to_owned()));
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(n, _): &&(String, String)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        if find("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            loop {
                let mut size = String::new();
                self.reader
                    .read_line(&mut size)
                    .map_err(|e| format!("reading a chunk size: {e}"))?;
                let n = usize::from_str_radix(size.trim(), 16)
                    .map_err(|_| format!("not a chunk size: {size:?}"))?;
                let mut chunk = vec![0; n + 2];
                self.reader
                    .read_exact(&mut chunk)
                    .map_err(|e| format!("reading a chunk: {e}"))?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else if let Some(n) = find("content-length") {
            let n: usize = n.parse().map_err(|_| format!("Content-Length {n:?}"))?;
            body.resize(n, 0);
            self.reader
                .read_exact(&mut body)
                .map_err(|e| format!("reading a body: {e}"))?;
        } else {
            self.reader
                .read_to_end(&mut body)
                .map_err(|e| format!("reading a body: {e}"))?;
        }
        Ok(Some(Reply {
            status,
            headers,
            body: String::from_utf8(body).map_err(|_| "a body not in UTF-8".to_owned())?,
        }))
    }
}

/// The JSON-RPC request of `call`, with id `id`, in `era`; and its tool's name, if a call.
fn request_body(call: &Call, id: u64, era: Era, revision: &str) -> (Value, Option<&'static str>) {
    let (method, mut params, name) = match call {
        Call::Add(a, b) => (
            "tools/call",
            json!({"name": "add", "arguments": {"a": a, "b": b}}),
            Some("add"),
        ),
        Call::Count => (
            "tools/call",
            json!({"name": "count", "arguments": {}}),
            Some("count"),
        ),
        Call::Greet(n) => (
            "tools/call",
            json!({"name": "greet", "arguments": {"name": n}}),
            Some("greet"),
        ),
        Call::List => ("tools/list", json!({}), None),
    };
    if era == Era::Modern {
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": revision,
            "io.modelcontextprotocol/clientCapabilities": {}});
    }
    (
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        name,
    )
}

/// What a request must get: a status, and for a 4xx with a JSON-RPC body its error code.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    /// 200 and the call's result.
    Result,
    /// This status, with this JSON-RPC error code (and the request's id) when given.
    Refused(u16, Option<i64>),
    /// Cut off by the client: no answer, or an error status; never a result.
    CutOff,
}

fn expected(fault: Fault) -> Expect {
    match fault {
        Fault::None => Expect::Result,
        Fault::MalformedJson => Expect::Refused(400, Some(-32700)),
        Fault::Batch => Expect::Refused(400, Some(-32600)),
        Fault::OverCap => Expect::Refused(413, None),
        Fault::NoVersion
        | Fault::WrongVersionHeader
        | Fault::WrongMethodHeader
        | Fault::WrongNameHeader => Expect::Refused(400, Some(-32020)),
        Fault::UnsupportedRevision => Expect::Refused(400, Some(-32022)),
        Fault::UnknownSession | Fault::StolenSession => Expect::Refused(404, None),
        Fault::ForeignOrigin | Fault::ForeignHost => Expect::Refused(403, None),
        Fault::NoToken | Fault::WrongToken => Expect::Refused(401, None),
        Fault::HalfHead | Fault::HalfBody | Fault::HangUp => Expect::CutOff,
    }
}

/// Check a result against the call: `add`'s sum, `greet`'s greeting, a session's next count.
fn check_result(call: &Call, answer: &Value, next_count: &mut u64) -> Result<(), String> {
    let result = answer
        .get("result")
        .ok_or_else(|| format!("not a result: {answer}"))?;
    let text = result["content"][0]["text"].as_str();
    let want = match call {
        Call::Add(a, b) => Some(a.wrapping_add(*b).to_string()),
        Call::Greet(n) => Some(format!("Hello, {n}!")),
        Call::Count => None,
        Call::List => {
            let names: Vec<&str> = result["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str())
                .collect();
            return if names.contains(&"add") && names.contains(&"count") {
                Ok(())
            } else {
                Err(format!("tools/list without add and count: {answer}"))
            };
        }
    };
    match (call, want) {
        (Call::Count, _) => {
            let got: u64 = text
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| format!("count answered {answer}"))?;
            if *next_count > 0 {
                if got != *next_count {
                    return Err(format!(
                        "the session's count answered {got} where its own counter is at {next_count}: another client's instance?"
                    ));
                }
                *next_count += 1;
            }
            Ok(())
        }
        (_, Some(w)) if text == Some(w.as_str()) => Ok(()),
        (_, w) => Err(format!("wanted {w:?}, got {answer}")),
    }
}

/// Run `case` against `endpoint`; `Err` says which request broke which rule.
pub fn run_case(endpoint: &Endpoint, case: &Case) -> Result<(), String> {
    let addr = endpoint.addr;
    let principal = PRINCIPALS[case.principal];
    let token = format!("Bearer token-{principal}");
    let mut conn = Conn::open(addr)?;
    let mut session = None;
    // A 2025 session's counter is its own: its first count is 1.
    let mut next_count = 0;
    if case.era == Era::Legacy {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {},
                "clientInfo": {"name": "serve-fuzz", "version": "1"}}})
        .to_string();
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {token}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\n\r\n{init}",
            init.len()
        );
        conn.write(head.as_bytes(), &[])?;
        let reply = conn.read()?.ok_or("no answer to initialize")?;
        let id = reply
            .header("mcp-session-id")
            .ok_or_else(|| format!("initialize without a session: {reply:?}"))?
            .to_owned();
        endpoint.started.lock().expect("lock").0 += 1;
        let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {token}\r\n\
             Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: {LEGACY}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {}\r\n\r\n{note}",
            note.len()
        );
        conn.write(head.as_bytes(), &[])?;
        let reply = conn
            .read()?
            .ok_or("no answer to notifications/initialized")?;
        if reply.status != 202 {
            return Err(format!("notifications/initialized got {reply:?}"));
        }
        endpoint
            .sessions
            .lock()
            .expect("lock")
            .push((case.principal, id.clone()));
        session = Some(id);
        next_count = 1;
    }
    let mut result = Ok(());
    for (i, r) in case.requests.iter().enumerate() {
        if r.fresh {
            conn = Conn::open(addr)?;
        }
        let id = i as u64 + 1;
        if let Err(e) = one_request(
            endpoint,
            case,
            r,
            id,
            session.as_deref(),
            &mut conn,
            &mut next_count,
        ) {
            result = Err(format!("request {id} ({:?}, {:?}): {e}", r.call, r.fault));
            break;
        }
        if matches!(r.fault, Fault::HalfHead | Fault::HalfBody | Fault::HangUp) {
            // That connection is done with.
            conn = Conn::open(addr)?;
        }
    }
    if let Some(id) = session {
        endpoint
            .sessions
            .lock()
            .expect("lock")
            .retain(|(_, s)| *s != id);
        let mut c = Conn::open(addr)?;
        let head = format!(
            "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {token}\r\n\
             Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: {LEGACY}\r\nConnection: close\r\n\r\n"
        );
        c.write(head.as_bytes(), &[])?;
        let reply = c.read()?.ok_or("no answer to DELETE")?;
        if reply.status != 200 && result.is_ok() {
            result = Err(format!("DELETE of its session got {reply:?}"));
        }
    }
    result
}

fn one_request(
    endpoint: &Endpoint,
    case: &Case,
    r: &Request,
    id: u64,
    session: Option<&str>,
    conn: &mut Conn,
    next_count: &mut u64,
) -> Result<(), String> {
    let addr = endpoint.addr;
    let principal = PRINCIPALS[case.principal];
    let revision = match (case.era, r.fault) {
        (Era::Legacy, _) => LEGACY,
        (_, Fault::UnsupportedRevision) => "2099-01-01",
        _ => MODERN,
    };
    let (mut body, name) = request_body(&r.call, id, case.era, revision);
    if r.fault == Fault::OverCap {
        body["params"]["pad"] = Value::from("x".repeat(MAX_BODY));
    }
    let method = body["method"].as_str().unwrap_or_default().to_owned();
    let body = match r.fault {
        Fault::MalformedJson => format!("{{\"jsonrpc\": \"2.0\", \"id\": {id}, "),
        Fault::Batch => format!("[{body}]"),
        _ => body.to_string(),
    };
    let mut heads: Vec<(String, String)> = vec![
        ("Host".into(), addr.to_string()),
        ("Content-Type".into(), "application/json".into()),
        (
            "Accept".into(),
            if r.json_only {
                "application/json".into()
            } else {
                "application/json, text/event-stream".into()
            },
        ),
        ("Authorization".into(), format!("Bearer token-{principal}")),
    ];
    let mut push = |n: &str, v: &str| heads.push((n.into(), v.into()));
    match case.era {
        Era::Modern => {
            if r.fault != Fault::NoVersion {
                let v = if r.fault == Fault::WrongVersionHeader {
                    LEGACY
                } else {
                    revision
                };
                push("MCP-Protocol-Version", v);
            }
            let m = if r.fault == Fault::WrongMethodHeader {
                if method == "tools/list" {
                    "tools/call"
                } else {
                    "tools/list"
                }
            } else {
                &method
            };
            push("Mcp-Method", m);
            if let Some(n) = name {
                push(
                    "Mcp-Name",
                    if r.fault == Fault::WrongNameHeader {
                        "divide"
                    } else {
                        n
                    },
                );
            }
        }
        Era::Legacy => {
            push("MCP-Protocol-Version", LEGACY);
            let stolen = (r.fault == Fault::StolenSession)
                .then(|| {
                    let live = endpoint.sessions.lock().expect("lock");
                    live.iter()
                        .find(|(p, _)| *p != case.principal)
                        .map(|(_, s)| s.clone())
                })
                .flatten();
            let sid = match r.fault {
                Fault::UnknownSession | Fault::StolenSession => {
                    stolen.unwrap_or_else(|| "00000000000000000000000000000000".into())
                }
                _ => session.unwrap_or_default().to_owned(),
            };
            push("Mcp-Session-Id", &sid);
        }
    }
    match r.fault {
        Fault::ForeignOrigin => push("Origin", "http://evil.test"),
        Fault::ForeignHost => heads[0].1 = "evil.test".into(),
        Fault::NoToken => heads.retain(|(n, _)| n != "Authorization"),
        Fault::WrongToken => heads[3].1 = "Bearer token-mallory".into(),
        _ => {}
    }
    let mut head = String::from("POST /mcp HTTP/1.1\r\n");
    for (n, v) in &heads {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = head.into_bytes();
    let head_len = bytes.len();
    bytes.extend_from_slice(body.as_bytes());
    match r.fault {
        Fault::HalfHead => {
            conn.write(&bytes[..head_len / 2], &r.splits)?;
            let _ = conn.reader.get_mut().shutdown(Shutdown::Both);
            return Ok(());
        }
        Fault::HalfBody => {
            conn.write(&bytes[..head_len + body.len() / 2], &r.splits)?;
            let _ = conn.reader.get_mut().shutdown(Shutdown::Write);
        }
        _ => conn.write(&bytes, &r.splits)?,
    }
    if r.fault == Fault::HangUp {
        let _ = conn.reader.get_mut().shutdown(Shutdown::Both);
        endpoint.started.lock().expect("lock").2 += 1;
        return Ok(());
    }
    let reply = conn.read()?;
    match (expected(r.fault), reply) {
        (Expect::CutOff, None) => Ok(()),
        (Expect::CutOff, Some(reply)) if reply.status >= 400 => Ok(()),
        (Expect::CutOff, Some(reply)) => Err(format!("a cut-off request was answered: {reply:?}")),
        (_, None) => Err("the endpoint closed the connection without an answer".into()),
        (Expect::Result, Some(reply)) => {
            if reply.status != 200 {
                return Err(format!("wanted 200, got {reply:?}"));
            }
            let answer = reply.answer()?;
            if answer["id"] != id {
                return Err(format!("the answer has another id: {answer}"));
            }
            if case.era == Era::Modern {
                endpoint.started.lock().expect("lock").1[case.principal] = true;
            }
            check_result(&r.call, &answer, next_count)
        }
        (Expect::Refused(status, code), Some(reply)) => {
            if reply.status != status {
                return Err(format!("wanted {status}, got {reply:?}"));
            }
            if let Some(code) = code {
                let answer = reply.answer()?;
                if answer["error"]["code"] != code {
                    return Err(format!("wanted error {code}, got {answer}"));
                }
                // A body that parsed names its id; one that did not has a null id.
                let want_id = if r.fault == Fault::MalformedJson || r.fault == Fault::Batch {
                    Value::Null
                } else {
                    Value::from(id)
                };
                if answer["id"] != want_id {
                    return Err(format!(
                        "the error names id {} where {want_id} was due",
                        answer["id"]
                    ));
                }
            }
            Ok(())
        }
    }
}

/// Tallies of a run.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Cases run.
    pub cases: usize,
    /// Requests sent, by fault.
    pub faults: std::collections::BTreeMap<String, usize>,
    /// Failures, each with its case.
    pub failures: Vec<String>,
}

/// Run the cases of `seeds` against one endpoint on `jobs` threads until `keep_going` says
/// stop (checked before each case); then [`Endpoint::finish`], whose failure is the last.
pub fn run_many(
    sandpipe: &Path,
    server: &Path,
    cache_dir: &Path,
    seeds: impl Iterator<Item = u64> + Send,
    jobs: usize,
    keep_going: &(dyn Fn() -> bool + Sync),
) -> Tally {
    let endpoint = Endpoint::start(sandpipe, server, cache_dir);
    let seeds = Mutex::new(seeds);
    let tally = Mutex::new(Tally::default());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| {
                while keep_going() {
                    let Some(seed) = seeds.lock().expect("seeds").next() else {
                        return;
                    };
                    let case = generate(seed);
                    let result = run_case(&endpoint, &case);
                    let mut t = tally.lock().expect("tally");
                    t.cases += 1;
                    for r in &case.requests {
                        *t.faults.entry(format!("{:?}", r.fault)).or_default() += 1;
                    }
                    if let Err(e) = result {
                        let line = format!("{case}: {e}");
                        eprintln!("FAIL {line}");
                        t.failures.push(line);
                    }
                }
            });
        }
    });
    let mut tally = tally.into_inner().expect("tally");
    if let Err(e) = endpoint.finish() {
        tally.failures.push(format!("at the end: {e}"));
    }
    tally
}

/// The programs a run needs: this workspace's `sandpipe` and the mcp-tools component.
pub fn bins() -> (PathBuf, PathBuf) {
    (crate::peers::sandpipe(), crate::mcp_tools())
}
