//! MCP under the supervisor (`crate::supervise`): which frames are handshake and requests, the
//! answers sandpipe gives itself (a request the server will never answer, a tool the filter
//! hides), and the tool filter.

use serde::Deserialize;
use serde_json::{Value, json};

use std::sync::Mutex;

use super::{
    CANCELLED, DISCOVER, INITIALIZE, INITIALIZED, META_CLIENT_CAPABILITIES, META_CLIENT_INFO,
    META_PROTOCOL_VERSION, PING, Revision, SUBSCRIPTIONS_LISTEN, TOOLS_CALL, TOOLS_LIST,
};
use crate::jsonrpc::{Dialect, ErrorObject, INVALID_PARAMS, Id, Message};
use crate::stopped::Stopped;
use crate::supervise::{FromEngine, FromPlugin, SupervisedProtocol};

/// The answer to a request the server will never answer: `-32603`, the reason as message,
/// `data: {"reason", "exit", "stderr"}` ([`jsonrpc::stopped_error`](crate::jsonrpc::stopped_error)).
pub fn stopped_error(stopped: &Stopped) -> ErrorObject {
    crate::jsonrpc::stopped_error(Dialect::JsonRpc2, stopped)
}

/// The result a `tools/call` the server will never answer gets (see the module docs for why a
/// result and not an error): one text item with the reason and the stderr tail, `isError: true`,
/// and [`Stopped::to_json`] under `_meta.sandpipe`.
pub fn stopped_tool_result(stopped: &Stopped) -> Value {
    json!({
        "content": [{"type": "text", "text": stopped.message_with_tail()}],
        "isError": true,
        "_meta": {"sandpipe": stopped.to_json()},
    })
}

/// The `-32602` a `tools/call` of a tool the filter hides gets.
pub fn unknown_tool(name: &str) -> ErrorObject {
    ErrorObject::new(INVALID_PARAMS, format!("unknown tool: {name}"))
}

/// Which tools an engine may see and call: every tool, unless `allow` names some (then only
/// those), minus those `deny` names. Names match exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// When not empty, only these.
    pub allow: Vec<String>,
    /// Never these.
    pub deny: Vec<String>,
}

impl ToolFilter {
    /// Whether the filter lets `name` through.
    pub fn permits(&self, name: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|a| a == name))
            && !self.deny.iter().any(|d| d == name)
    }

    /// True when it hides nothing.
    pub fn is_open(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// This filter narrowed by `other`: a tool passes only when both let it through (the allow
    /// lists intersect, the deny lists add up), so `other` can hide more, never show more.
    pub fn narrowed(&self, other: &ToolFilter) -> ToolFilter {
        let allow = match (self.allow.is_empty(), other.allow.is_empty()) {
            (true, _) => other.allow.clone(),
            (false, true) => self.allow.clone(),
            (false, false) => {
                let both: Vec<String> = self
                    .allow
                    .iter()
                    .filter(|a| other.allow.contains(a))
                    .cloned()
                    .collect();
                if both.is_empty() {
                    // Nothing both allow: an allow list no real tool name matches.
                    vec!["\0(no tool is allowed by both filters)".to_owned()]
                } else {
                    both
                }
            }
        };
        let mut deny = self.deny.clone();
        deny.extend(
            other
                .deny
                .iter()
                .filter(|d| !self.deny.contains(d))
                .cloned(),
        );
        ToolFilter { allow, deny }
    }

    /// A `tools/list` result with the hidden tools removed; `None` when nothing was removed
    /// (or the result is not a tool list), so the server's bytes pass on unchanged.
    pub fn filter_list(&self, result: &mut Value) -> bool {
        let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
            return false;
        };
        let before = tools.len();
        tools.retain(|t| {
            t.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| self.permits(n))
        });
        tools.len() != before
    }
}

/// MCP under the supervisor (`crate::supervise`), in either revision, told apart per session by
/// the engine's first request ([`Revision`]):
/// - **Handshake.** `initialize` and `notifications/initialized` (2025), or `server/discover`
///   (2026-07-28), are the handshake: not billed to any budget, bounded by the start timeout,
///   and replayed to a fresh instance. A 2026 session that never sent `server/discover` (a
///   client pinned to the revision) gets one from the supervisor before its first request
///   reaches a fresh instance ([`SupervisedProtocol::probe`]), built from that request's own
///   `_meta` envelope, so that the server's start-up is not billed to the request either.
/// - **Requests** are budgeted; `subscriptions/listen` is a stream, not timed; a cancelled one
///   is no longer pending.
/// - **A request over its timeout** is cancelled (`notifications/cancelled`) and answered at
///   once; the server is then probed (`ping`, or `server/discover` in 2026) and replaced if it
///   does not answer within the grace.
/// - **Multi round-trip calls**: the `requestState` of an `input_required` result is the
///   sealing instance's; a retry that carries one from an instance that has since stopped is
///   answered by the supervisor (the key that sealed it is process-local in the SDKs, so a
///   fresh instance could not open it).
/// - `filter` hides tools; every answer the supervisor gives is valid in the session's
///   revision (`resultType` on its results in 2026, a hidden tool answered as the SDK's servers
///   answer a tool they do not have).
#[derive(Debug, Default)]
pub struct Supervised {
    /// The tools the engine may see and call.
    pub filter: ToolFilter,
    /// What the session has shown of itself so far.
    session: Mutex<Session>,
}

/// The session's revision and the envelope of its latest 2026 request.
#[derive(Debug, Default)]
struct Session {
    revision: Option<Revision>,
    envelope: Option<Value>,
}

impl Supervised {
    /// The rules with `filter`.
    pub fn new(filter: ToolFilter) -> Self {
        Supervised {
            filter,
            session: Mutex::default(),
        }
    }

    /// The revision the engine's frames have shown so far (`None` before its first request).
    pub fn revision(&self) -> Option<Revision> {
        self.session().revision
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        // Nothing panics while holding it; a poisoned lock still holds a valid session.
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn modern(&self) -> bool {
        self.revision() == Some(Revision::Modern)
    }

    /// Note what `head` (an engine request) says of the session's revision.
    fn observe(&self, head: &EngineHead) {
        let envelope = head
            .params
            .as_ref()
            .and_then(|p| p.meta.as_ref())
            .filter(|m| m.get(META_PROTOCOL_VERSION).is_some());
        let mut s = self.session();
        match (head.method.as_deref(), envelope) {
            (Some(INITIALIZE), _) => s.revision = Some(Revision::Handshake),
            (Some(_), Some(meta)) => {
                s.revision = Some(Revision::Modern);
                // Kept for the liveness probe; rebuilt only when the client's envelope changed,
                // not on every request.
                let same = s
                    .envelope
                    .as_ref()
                    .is_some_and(|e| ENVELOPE_KEYS.iter().all(|k| e.get(k) == meta.get(k)));
                if !same {
                    s.envelope = Some(envelope_of(meta));
                }
            }
            _ => {}
        }
    }
}

/// The reserved `_meta` members a 2026-07-28 request carries: its envelope.
const ENVELOPE_KEYS: [&str; 3] = [
    META_PROTOCOL_VERSION,
    META_CLIENT_INFO,
    META_CLIENT_CAPABILITIES,
];

/// The reserved members of a request's `_meta`: what the revision carries per request.
fn envelope_of(meta: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in ENVELOPE_KEYS {
        if let Some(v) = meta.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    Value::Object(out)
}

/// The members of an engine frame the rules read.
#[derive(Deserialize)]
struct EngineHead {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<EngineParams>,
}

#[derive(Deserialize)]
struct EngineParams {
    #[serde(default)]
    name: Option<Value>,
    #[serde(default, rename = "requestId")]
    request_id: Option<Value>,
    #[serde(default, rename = "requestState")]
    request_state: Option<Value>,
    #[serde(default, rename = "_meta")]
    meta: Option<Value>,
}

/// The members of a plugin's answer that multi round-trip calls need.
#[derive(Deserialize)]
struct AnswerHead {
    #[serde(default)]
    result: Option<AnswerResult>,
}

#[derive(Deserialize)]
struct AnswerResult {
    #[serde(default, rename = "resultType")]
    result_type: Option<Value>,
    #[serde(default, rename = "requestState")]
    request_state: Option<Value>,
}

/// `resultType` of a result that asks the client for input before the request can finish.
const INPUT_REQUIRED: &str = "input_required";

/// A 2026-07-28 result: `resultType: "complete"` added.
fn complete(mut result: Value) -> Value {
    if let Some(o) = result.as_object_mut() {
        o.insert("resultType".into(), json!("complete"));
    }
    result
}

impl SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> FromEngine {
        let Ok(head) = serde_json::from_slice::<EngineHead>(frame) else {
            return FromEngine::Other;
        };
        self.observe(&head);
        let key = head.id.as_ref().map(crate::supervise::key_of);
        match (head.method.as_deref(), key) {
            (Some(INITIALIZE | INITIALIZED | DISCOVER), awaits) => FromEngine::Handshake { awaits },
            (Some(SUBSCRIPTIONS_LISTEN), Some(key)) => FromEngine::Stream {
                key,
                method: Some(SUBSCRIPTIONS_LISTEN.to_owned()),
            },
            (Some(CANCELLED), None) => match head.params.and_then(|p| p.request_id) {
                Some(id) => FromEngine::Cancelled {
                    key: crate::supervise::key_of(&id),
                },
                None => FromEngine::Other,
            },
            (Some(method), Some(key)) => FromEngine::Request {
                key,
                method: Some(method.to_owned()),
            },
            (None, Some(key)) => FromEngine::Answer { key },
            (Some(_), None) | (None, None) => FromEngine::Other,
        }
    }
    fn classify_plugin(&self, frame: &[u8]) -> FromPlugin {
        crate::jsonrpc::classify_plugin(frame, &[])
    }
    fn engine_speaks_first(&self) -> bool {
        true
    }
    fn stopped_answer(&self, key: &str, method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        if method == Some(TOOLS_CALL) {
            let id = crate::jsonrpc::id_of(key);
            let mut result = stopped_tool_result(stopped);
            if self.modern() {
                result = complete(result);
            }
            return Message::response(id, Ok(result)).encode(Dialect::JsonRpc2);
        }
        crate::jsonrpc::error_answer(key, Dialect::JsonRpc2, stopped_error(stopped))
    }
    fn answer_engine(&self, frame: &[u8]) -> Option<Vec<u8>> {
        if self.filter.is_open() {
            return None;
        }
        let head: EngineHead = serde_json::from_slice(frame).ok()?;
        let id = head.id?;
        if head.method.as_deref() != Some(TOOLS_CALL) {
            return None;
        }
        // A call without a string name is the server's to refuse.
        let params = head.params?;
        let name = params.name?;
        let name = name.as_str()?;
        if self.filter.permits(name) {
            return None;
        }
        let id = crate::jsonrpc::id_of(&crate::supervise::key_of(&id));
        let modern = params
            .meta
            .as_ref()
            .is_some_and(|m| m.get(META_PROTOCOL_VERSION).is_some());
        let answer = if modern {
            Ok(unknown_tool_result(name))
        } else {
            Err(unknown_tool(name))
        };
        Some(Message::response(id, answer).encode(Dialect::JsonRpc2))
    }
    fn refused_name(&self, frame: &[u8]) -> Option<String> {
        let head: EngineHead = serde_json::from_slice(frame).ok()?;
        Some(head.params?.name?.as_str()?.to_owned())
    }
    fn rewrite_answer(&self, method: Option<&str>, frame: &[u8]) -> Option<Vec<u8>> {
        if self.filter.is_open() || method != Some(TOOLS_LIST) {
            return None;
        }
        let mut v: Value = serde_json::from_slice(frame).ok()?;
        if !self.filter.filter_list(v.get_mut("result")?) {
            return None;
        }
        serde_json::to_vec(&v).ok()
    }
    fn probe(&self, before: Option<&[u8]>, n: u64) -> Option<(Vec<u8>, String)> {
        let id = Id::Str(format!("sandpipe-probe-{n}"));
        let key = crate::supervise::key_of(&json!(format!("sandpipe-probe-{n}")));
        if let Some(request) = before {
            // Only a 2026 request needs one: a 2025 session's `initialize` is its probe.
            let head: EngineHead = serde_json::from_slice(request).ok()?;
            let meta = head
                .params?
                .meta
                .filter(|m| m.get(META_PROTOCOL_VERSION).is_some())?;
            let params = json!({"_meta": envelope_of(&meta)});
            let frame = Message::request(id, DISCOVER, Some(params)).encode(Dialect::JsonRpc2);
            return Some((frame, key));
        }
        let s = self.session();
        let frame = match (s.revision?, &s.envelope) {
            (Revision::Modern, Some(envelope)) => {
                Message::request(id, DISCOVER, Some(json!({"_meta": envelope})))
            }
            (Revision::Modern, None) => return None,
            (Revision::Handshake, _) => Message::request(id, PING, None),
        };
        Some((frame.encode(Dialect::JsonRpc2), key))
    }
    fn cancel(&self, key: &str, reason: &str) -> Option<Vec<u8>> {
        let id: Value = serde_json::from_str(key).ok()?;
        let params = json!({"requestId": id, "reason": reason});
        Some(Message::notification(CANCELLED, Some(params)).encode(Dialect::JsonRpc2))
    }
    fn issued_token(&self, answer: &[u8]) -> Option<String> {
        // Most answers are not multi round-trip: skip the parse for them.
        memchr::memmem::find(answer, INPUT_REQUIRED.as_bytes())?;
        let head: AnswerHead = serde_json::from_slice(answer).ok()?;
        let result = head.result?;
        if result.result_type?.as_str()? != INPUT_REQUIRED {
            return None;
        }
        Some(result.request_state?.as_str()?.to_owned())
    }
    fn carried_token(&self, request: &[u8]) -> Option<String> {
        memchr::memmem::find(request, b"requestState")?;
        let head: EngineHead = serde_json::from_slice(request).ok()?;
        Some(head.params?.request_state?.as_str()?.to_owned())
    }
    fn stale_token_reason(&self) -> &'static str {
        "the requestState of this retry was sealed by an instance of the server that has since \
         stopped, and its key (process-local in the MCP SDKs) went with it: call again without \
         inputResponses and requestState"
    }
}

/// The result a 2026-07-28 `tools/call` of a hidden tool gets: what the SDK's servers answer
/// for a tool they do not have.
pub fn unknown_tool_result(name: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": format!("Unknown tool: {name}")}],
        "isError": true,
        "resultType": "complete",
    })
}
