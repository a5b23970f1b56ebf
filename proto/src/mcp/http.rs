//! MCP over Streamable HTTP, sans-IO: the rules a server's front applies to each POST before
//! any byte reaches a server ([`classify`]), and the [`Router`] that carries one client's
//! messages to a shared stdio connection and the server's messages back to the HTTP request
//! that is waiting for them, with ids that never cross between requests.
//!
//! ```text
//!  POST /mcp  heads + body ──► classify ──► Post::Initialize          (2025: a new session)
//!                                       ├─► Post::InSession { .. }     (2025: Mcp-Session-Id)
//!                                       ├─► Post::Stateless { .. }     (2026-07-28 envelope)
//!                                       └─► Refusal { status, code }   (400 with the error)
//!  Router::inbound(stream, message)  ──► frame for the server, id = a fresh number
//!  Router::outbound(frame)           ──► Routed::To { stream, message (the client's id), done }
//!                                    └─► Routed::Unrouted (no request it belongs to)
//!  Router::abandon(stream)           ──► notifications/cancelled for what it still waits for
//! ```
//!
//! Both eras share one endpoint, as the spec allows: a request carrying the 2026-07-28 envelope
//! (`params._meta["io.modelcontextprotocol/protocolVersion"]`) is stateless, and its mirrored
//! headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) must agree with its body (else
//! 400 with [`HEADER_MISMATCH`]); `initialize` opens a 2025-11-25 or 2025-06-18 session, and
//! every later message of that session names it in `Mcp-Session-Id`.
//!
//! What it does not do: HTTP itself (the host's front parses requests and writes responses),
//! sessions' lifetimes, authentication, or anything a server decides (an unknown method is
//! the server's to answer).
//!
//! ```
//! use sandpipe_proto::mcp::http::{Heads, Post, Router, Routed, classify};
//! use serde_json::json;
//!
//! let body = br#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{}}"#;
//! let (post, message) = classify(&Heads::default(), body).unwrap();
//! assert_eq!(post, Post::Initialize);
//! let mut router = Router::default();
//! let frame = router.inbound(1, message);
//! let sent: serde_json::Value = serde_json::from_slice(&frame).unwrap();
//! let answer = json!({"jsonrpc": "2.0", "id": sent["id"], "result": {}});
//! let Routed::To { stream, message, done } = router.outbound(&serde_json::to_vec(&answer).unwrap())
//! else { panic!() };
//! assert_eq!((stream, message["id"].clone(), done), (1, json!(7), true));
//! ```

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    INITIALIZE, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSION,
    UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::jsonrpc::{INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR};

/// The revisions a session's `MCP-Protocol-Version` may name: those sandpipe speaks, and
/// 2025-03-26, which defined Streamable HTTP and which the SDKs' servers still speak (the
/// official conformance suite sends it). Which one a session uses is its server's to decide
/// at `initialize`; the endpoint refuses only what no server speaks.
pub const SESSION_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The header naming a 2025 session.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// The header mirroring the revision (2026-07-28: the envelope's; 2025: the session's).
pub const VERSION_HEADER: &str = "mcp-protocol-version";
/// The header mirroring a 2026-07-28 request's method.
pub const METHOD_HEADER: &str = "mcp-method";
/// The header mirroring a 2026-07-28 request's tool or prompt name, or resource URI.
pub const NAME_HEADER: &str = "mcp-name";
/// The error a mirrored header that disagrees with the body gets (HeaderMismatch).
pub const HEADER_MISMATCH: i64 = -32020;

/// The methods whose params name what `Mcp-Name` mirrors, and the key that names it.
const NAME_BEARING: [(&str, &str); 3] = [
    ("tools/call", "name"),
    ("prompts/get", "name"),
    ("resources/read", "uri"),
];

/// The MCP headers of one request, as the front read them (a `Mcp-Name` already decoded from
/// its `=?base64?…?=` form).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heads<'a> {
    /// `MCP-Protocol-Version`.
    pub version: Option<&'a str>,
    /// `Mcp-Method`.
    pub method: Option<&'a str>,
    /// `Mcp-Name`, decoded.
    pub name: Option<&'a str>,
    /// `Mcp-Session-Id`.
    pub session: Option<&'a str>,
}

/// What a POST is, once its body and headers agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Post {
    /// `initialize` without a session: a new 2025 session.
    Initialize,
    /// A message of the 2025 session `session`.
    InSession {
        /// The session it names.
        session: String,
        /// Whether it expects an answer on this POST (a request, not a notification or a
        /// response to the server).
        request: bool,
    },
    /// A 2026-07-28 request, or a notification (`request: false`), carrying the envelope.
    Stateless {
        /// Its method.
        method: String,
        /// Whether it expects an answer.
        request: bool,
    },
}

/// A POST refused before it reached a server: the HTTP status and the JSON-RPC error its body
/// carries ([`Refusal::body`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The JSON-RPC error code.
    pub code: i64,
    /// The error's message.
    pub message: String,
    /// The error's data.
    pub data: Option<Value>,
    /// The request's id, when it could be read.
    pub id: Value,
}

impl Refusal {
    /// A refusal with `status`, `code` and `message`, no data and a `null` id.
    pub fn new(status: u16, code: i64, message: impl Into<String>) -> Self {
        Refusal {
            status,
            code,
            message: message.into(),
            data: None,
            id: Value::Null,
        }
    }

    /// The JSON-RPC error response the refusal's HTTP body carries.
    pub fn body(&self) -> Vec<u8> {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        let v = json!({"jsonrpc": "2.0", "id": self.id, "error": error});
        serde_json::to_vec(&v).unwrap_or_default()
    }
}

/// Read a POST's body and headers: what it is and the message, or why it is refused. The
/// checks, in order: the body is one JSON-RPC 2.0 message (`-32700`, `-32600`; batches were
/// removed in 2025-06-18); an enveloped request names `clientCapabilities` (`-32602`), its
/// `MCP-Protocol-Version`, `Mcp-Method` and (for `tools/call`, `prompts/get`,
/// `resources/read`) `Mcp-Name` equal the body's ([`HEADER_MISMATCH`]), and its revision is
/// 2026-07-28 (`-32022` with `data.supported`); a message without the envelope is
/// `initialize` (no session) or names its session, whose `MCP-Protocol-Version`, when given,
/// is a 2025 revision (`-32022`). Every refusal is a 400.
pub fn classify(heads: &Heads<'_>, body: &[u8]) -> Result<(Post, Value), Box<Refusal>> {
    let message: Value = serde_json::from_slice(body)
        .map_err(|e| Box::new(Refusal::new(400, PARSE_ERROR, format!("parse error: {e}"))))?;
    let Some(object) = message.as_object() else {
        let what = if message.is_array() {
            "JSON-RPC batches are not supported"
        } else {
            "the body is not a JSON-RPC message"
        };
        return Err(Box::new(Refusal::new(400, INVALID_REQUEST, what)));
    };
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    let refuse = |code: i64, text: String| Refusal {
        id: id.clone(),
        ..Refusal::new(400, code, text)
    };
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(Box::new(refuse(
            INVALID_REQUEST,
            "jsonrpc must be \"2.0\"".into(),
        )));
    }
    let method = object.get("method").and_then(Value::as_str);
    let has_id = object
        .get("id")
        .is_some_and(|i| i.is_string() || i.is_i64() || i.is_u64());
    let is_answer =
        method.is_none() && (object.contains_key("result") || object.contains_key("error"));
    if method.is_none() && !is_answer {
        return Err(Box::new(refuse(
            INVALID_REQUEST,
            "a message needs a method, or a result or an error".into(),
        )));
    }
    if object.contains_key("id") && !has_id {
        return Err(Box::new(refuse(
            INVALID_REQUEST,
            "an id must be a string or an integer".into(),
        )));
    }
    let params = object.get("params");
    if let Some(method) = method
        && super::has_envelope(params)
    {
        let meta = &params
            .and_then(|p| p.get("_meta"))
            .cloned()
            .unwrap_or_default();
        if meta.get(META_CLIENT_CAPABILITIES).is_none() {
            let text = format!(
                "params._meta is missing the required envelope key {META_CLIENT_CAPABILITIES}"
            );
            return Err(Box::new(refuse(INVALID_PARAMS, text)));
        }
        let version = &meta[META_PROTOCOL_VERSION];
        if heads.version.is_none_or(|h| version.as_str() != Some(h)) {
            let text = format!(
                "{VERSION_HEADER} header does not match the request envelope's protocol version"
            );
            return Err(Box::new(refuse(HEADER_MISMATCH, text)));
        }
        if heads.method != Some(method) {
            let text = format!("{METHOD_HEADER} header does not match the request body's method");
            return Err(Box::new(refuse(HEADER_MISMATCH, text)));
        }
        if let Some((_, key)) = NAME_BEARING.iter().find(|(m, _)| *m == method)
            && let Some(named) = params.and_then(|p| p.get(*key))
            && heads.name != named.as_str()
        {
            let text =
                format!("{NAME_HEADER} header does not match the request body's {key:?} parameter");
            return Err(Box::new(refuse(HEADER_MISMATCH, text)));
        }
        if version.as_str() != Some(MODERN_VERSION) {
            return Err(Box::new(Refusal {
                data: Some(json!({"supported": supported(), "requested": version})),
                ..refuse(
                    UNSUPPORTED_PROTOCOL_VERSION,
                    format!("unsupported protocol version {version}"),
                )
            }));
        }
        let request = has_id;
        return Ok((
            Post::Stateless {
                method: method.to_owned(),
                request,
            },
            message,
        ));
    }
    if let Some(v) = heads.version
        && !SESSION_VERSIONS.contains(&v)
        && !(v == MODERN_VERSION && method == Some(INITIALIZE))
    {
        return Err(Box::new(Refusal {
            data: Some(json!({"supported": supported(), "requested": v})),
            ..refuse(
                UNSUPPORTED_PROTOCOL_VERSION,
                format!("unsupported {VERSION_HEADER} {v}"),
            )
        }));
    }
    match (heads.session, method) {
        (None, Some(INITIALIZE)) if has_id => Ok((Post::Initialize, message)),
        (Some(_), Some(INITIALIZE)) => Err(Box::new(refuse(
            INVALID_REQUEST,
            "initialize opens a session: it carries no Mcp-Session-Id".into(),
        ))),
        (Some(session), _) => {
            let request = method.is_some() && has_id;
            Ok((Post::InSession { session: session.to_owned(), request }, message))
        }
        (None, _) => Err(Box::new(refuse(
            INVALID_REQUEST,
            "Bad Request: missing Mcp-Session-Id (send initialize, or a 2026-07-28 request with its _meta envelope)".into(),
        ))),
    }
}

/// Every revision spoken on the endpoint, newest first.
fn supported() -> Vec<&'static str> {
    std::iter::once(MODERN_VERSION)
        .chain(SESSION_VERSIONS)
        .collect()
}

/// A request waiting for its answer.
#[derive(Debug, Clone)]
struct Waiting {
    stream: u64,
    id: Value,
    token: Option<Value>,
}

/// Where a frame from the server goes ([`Router::outbound`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Routed {
    /// To the HTTP request `stream`, with the client's own id (or progress token, or
    /// subscription id) back in place; `done` when it is the request's answer.
    To {
        /// The HTTP request it belongs to.
        stream: u64,
        /// The message as the client sees it.
        message: Value,
        /// Whether it answers the request (its stream ends with it).
        done: bool,
    },
    /// A message that belongs to no waiting request (a request of the server's, a log line, a
    /// list change), as the server sent it.
    Unrouted(Value),
    /// An answer to no waiting request (one that was abandoned), or not JSON: dropped.
    Dropped,
}

/// One stdio connection shared by the requests of one client: every request's id (and its
/// `_meta.progressToken`) is replaced by a number of the router's own on the way in and put
/// back on the way out, so two requests with the same id (two clients of one principal, or one
/// client's retries) never take each other's answers.
#[derive(Debug, Default)]
pub struct Router {
    next: u64,
    waiting: BTreeMap<u64, Waiting>,
}

impl Router {
    /// The frame for the server of `message`, a message of the HTTP request `stream`. A request
    /// gets a fresh id, and its progress token the same number; the client's
    /// `notifications/cancelled` names the fresh id; anything else passes as it is.
    pub fn inbound(&mut self, stream: u64, mut message: Value) -> Vec<u8> {
        let is_request =
            message.get("method").is_some() && message.get("id").is_some_and(|i| !i.is_null());
        if is_request {
            self.next += 1;
            let n = self.next;
            let id = std::mem::replace(&mut message["id"], json!(n));
            let token = message
                .get_mut("params")
                .and_then(|p| p.get_mut("_meta"))
                .and_then(|m| m.get_mut("progressToken"))
                .map(|t| std::mem::replace(t, json!(n)));
            self.waiting.insert(n, Waiting { stream, id, token });
        } else if message["method"] == super::CANCELLED
            && let Some(n) = self.find(stream, &message["params"]["requestId"])
        {
            message["params"]["requestId"] = json!(n);
        }
        serde_json::to_vec(&message).unwrap_or_default()
    }

    /// The fresh id of the request `id` that `stream` is waiting for.
    fn find(&self, stream: u64, id: &Value) -> Option<u64> {
        self.waiting
            .iter()
            .find(|(_, w)| w.stream == stream && w.id == *id)
            .map(|(n, _)| *n)
    }

    /// Where the server's `frame` goes, with the client's ids put back.
    pub fn outbound(&mut self, frame: &[u8]) -> Routed {
        let Ok(mut message) = serde_json::from_slice::<Value>(frame) else {
            return Routed::Dropped;
        };
        let number = |v: &Value| v.as_u64();
        if message.get("method").is_none() {
            let Some(w) = message
                .get("id")
                .and_then(number)
                .and_then(|n| self.waiting.remove(&n))
            else {
                return Routed::Dropped;
            };
            message["id"] = w.id;
            return Routed::To {
                stream: w.stream,
                message,
                done: true,
            };
        }
        if message.get("id").is_some() {
            return Routed::Unrouted(message);
        }
        // A notification tied to a request: its progress token, its subscription, its cancel.
        let params = &message["params"];
        let meta_sub = "io.modelcontextprotocol/subscriptionId";
        let tied = [
            (
                "progressToken",
                params.get("progressToken").and_then(number),
            ),
            ("requestId", params.get("requestId").and_then(number)),
            (
                "subscription",
                params
                    .get("_meta")
                    .and_then(|m| m.get(meta_sub))
                    .and_then(number),
            ),
        ];
        for (kind, value) in tied {
            let Some(n) = value else { continue };
            let Some(w) = self.waiting.get(&n) else {
                continue;
            };
            let (stream, back) = match kind {
                "progressToken" => (w.stream, w.token.clone().unwrap_or_else(|| w.id.clone())),
                _ => (w.stream, w.id.clone()),
            };
            match kind {
                "progressToken" | "requestId" => message["params"][kind] = back,
                _ => message["params"]["_meta"][meta_sub] = back,
            }
            return Routed::To {
                stream,
                message,
                done: false,
            };
        }
        Routed::Unrouted(message)
    }

    /// `stream` is gone (its client closed it): forget what it waits for, and the
    /// `notifications/cancelled` to send the server for each, as the client itself would.
    pub fn abandon(&mut self, stream: u64) -> Vec<Vec<u8>> {
        let gone: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.stream == stream)
            .map(|(n, _)| *n)
            .collect();
        gone.into_iter()
            .map(|n| {
                self.waiting.remove(&n);
                let v = json!({"jsonrpc": "2.0", "method": super::CANCELLED,
                    "params": {"requestId": n, "reason": "the client closed its stream"}});
                serde_json::to_vec(&v).unwrap_or_default()
            })
            .collect()
    }

    /// The server is gone: every waiting request's answer, `error` (a JSON-RPC error object)
    /// with the client's own id, and the stream it goes to.
    pub fn fail_all(&mut self, error: &Value) -> Vec<(u64, Value)> {
        std::mem::take(&mut self.waiting)
            .into_values()
            .map(|w| {
                (
                    w.stream,
                    json!({"jsonrpc": "2.0", "id": w.id, "error": error}),
                )
            })
            .collect()
    }

    /// How many requests wait for an answer.
    pub fn in_flight(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modern(method: &str, extra: Value) -> Vec<u8> {
        let mut params = json!({"_meta": {META_PROTOCOL_VERSION: MODERN_VERSION,
            META_CLIENT_CAPABILITIES: {}}});
        if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .unwrap_or_default()
    }

    fn code(r: Result<(Post, Value), Box<Refusal>>) -> (u16, i64) {
        let e = r.expect_err("refused");
        (e.status, e.code)
    }

    #[test]
    fn a_modern_request_whose_headers_agree_is_stateless() {
        let heads = Heads {
            version: Some(MODERN_VERSION),
            method: Some("tools/call"),
            name: Some("add"),
            session: None,
        };
        let (post, _) =
            classify(&heads, &modern("tools/call", json!({"name": "add"}))).expect("ok");
        assert_eq!(
            post,
            Post::Stateless {
                method: "tools/call".into(),
                request: true
            }
        );
    }

    #[test]
    fn each_check_has_its_status_and_code() {
        let good = Heads {
            version: Some(MODERN_VERSION),
            method: Some("tools/call"),
            name: Some("add"),
            session: None,
        };
        let call = modern("tools/call", json!({"name": "add"}));
        let table: Vec<(Heads<'_>, Vec<u8>, (u16, i64))> = vec![
            (good, b"{not json".to_vec(), (400, PARSE_ERROR)),
            (good, b"[]".to_vec(), (400, INVALID_REQUEST)),
            (
                good,
                br#"{"id":1,"method":"x"}"#.to_vec(),
                (400, INVALID_REQUEST),
            ),
            (
                Heads {
                    version: None,
                    ..good
                },
                call.clone(),
                (400, HEADER_MISMATCH),
            ),
            (
                Heads {
                    version: Some("2025-11-25"),
                    ..good
                },
                call.clone(),
                (400, HEADER_MISMATCH),
            ),
            (
                Heads {
                    method: Some("tools/list"),
                    ..good
                },
                call.clone(),
                (400, HEADER_MISMATCH),
            ),
            (
                Heads {
                    name: Some("other"),
                    ..good
                },
                call.clone(),
                (400, HEADER_MISMATCH),
            ),
            (
                Heads::default(),
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec(),
                (400, INVALID_REQUEST),
            ),
            (
                Heads {
                    version: Some("1999-01-01"),
                    session: Some("s"),
                    ..Heads::default()
                },
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec(),
                (400, UNSUPPORTED_PROTOCOL_VERSION),
            ),
        ];
        for (heads, body, want) in table {
            assert_eq!(
                code(classify(&heads, &body)),
                want,
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
        let old = String::from_utf8_lossy(&call).replace(MODERN_VERSION, "2025-01-01");
        let heads = Heads {
            version: Some("2025-01-01"),
            ..good
        };
        let e = classify(&heads, old.as_bytes()).expect_err("refused");
        assert_eq!((e.status, e.code), (400, UNSUPPORTED_PROTOCOL_VERSION));
        assert_eq!(e.data.expect("data")["supported"][0], MODERN_VERSION);
    }

    #[test]
    fn initialize_opens_a_session_and_later_messages_name_it() {
        let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
        assert_eq!(
            classify(&Heads::default(), init).expect("ok").0,
            Post::Initialize
        );
        let heads = Heads {
            session: Some("abc"),
            version: Some("2025-11-25"),
            ..Heads::default()
        };
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(
            classify(&heads, note).expect("ok").0,
            Post::InSession {
                session: "abc".into(),
                request: false
            }
        );
        assert_eq!(code(classify(&heads, init)), (400, INVALID_REQUEST));
        // A session of 2025-03-26 (the conformance suite's header) is its server's to speak;
        // a revision nobody speaks is refused.
        for (version, passes) in [("2025-03-26", true), ("2024-11-05", false)] {
            let h = Heads {
                version: Some(version),
                ..heads
            };
            assert_eq!(classify(&h, note).is_ok(), passes, "{version}");
        }
    }

    #[test]
    fn the_router_puts_back_each_clients_ids_and_tokens() {
        let mut r = Router::default();
        let a = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "x", "_meta": {"progressToken": "t"}}});
        let b = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}});
        let fa: Value = serde_json::from_slice(&r.inbound(10, a)).expect("json");
        let fb: Value = serde_json::from_slice(&r.inbound(20, b)).expect("json");
        assert_ne!(fa["id"], fb["id"]);
        assert_eq!(fa["params"]["_meta"]["progressToken"], fa["id"]);
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": fa["id"], "progress": 1}});
        let Routed::To {
            stream,
            message,
            done,
        } = r.outbound(&serde_json::to_vec(&progress).expect("json"))
        else {
            panic!("routed");
        };
        assert_eq!(
            (stream, message["params"]["progressToken"].clone(), done),
            (10, json!("t"), false)
        );
        let answer = json!({"jsonrpc": "2.0", "id": fb["id"], "result": {}});
        let routed = r.outbound(&serde_json::to_vec(&answer).expect("json"));
        assert!(
            matches!(
                routed,
                Routed::To {
                    stream: 20,
                    done: true,
                    ..
                }
            ),
            "{routed:?}"
        );
        // Answered once: a second answer with that id reaches no one.
        assert_eq!(
            r.outbound(&serde_json::to_vec(&answer).expect("json")),
            Routed::Dropped
        );
        let cancels = r.abandon(10);
        assert_eq!(cancels.len(), 1);
        assert_eq!(r.in_flight(), 0);
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
        assert!(matches!(
            r.outbound(&serde_json::to_vec(&log).expect("json")),
            Routed::Unrouted(_)
        ));
    }
}
