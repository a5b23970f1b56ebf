//! The Model Context Protocol (MCP) over stdio: a client (the host, an agent or editor: [`Client`])
//! and a server (the plugin: [`Server`]) speaking JSON-RPC 2.0, one message per line.
//!
//! Both machines are built on [`Peer`]; they add MCP's rules on top:
//! - **Lifecycle.** `initialize {protocolVersion, capabilities, clientInfo}` → `{protocolVersion,
//!   capabilities, serverInfo}`, then the `notifications/initialized` notification, then
//!   anything. Revisions [`SUPPORTED_VERSIONS`] (2025-11-25 and 2025-06-18) are spoken: a server
//!   answers the revision the client asked for when it supports it, else its latest; a client
//!   whose server answers a revision it does not speak completes `initialize` with an error
//!   ([`ClientEvent::Initialized`]). Shutdown has no message: the client closes the server's
//!   stdin, then SIGTERM, then SIGKILL (the host's business).
//! - **2026-07-28** ([`MODERN_VERSION`]), stateless: no `initialize`; every request carries the
//!   revision, client info and capabilities in `params._meta`; results carry `resultType`.
//!   [`Client::discover`] probes `server/discover` as the official SDK's auto mode does and
//!   falls back to `initialize` by itself when the server does not speak it;
//!   [`Client::pin_modern`] skips the probe. [`Server`] settles the revision on the client's
//!   first request (an enveloped one, or `initialize`), answers `server/discover`
//!   ([`ServerEvent::Discover`]), refuses the other era's requests as the SDK's servers do,
//!   and adds the members a 2026-07-28 result must have ([`Server::respond`]).
//! - **Requests** (`tools/list`, `tools/call`, `resources/list`, `resources/read`,
//!   `resources/templates/list`, `prompts/list`, `prompts/get`, `completion/complete`, …) are
//!   JSON-RPC requests with their params and results kept as JSON ([`Client::request`]);
//!   [`Client::list_tools`] and [`Client::call_tool`] name the common two, and [`Tool`] types
//!   a listed tool.
//! - **Progress** (`notifications/progress {progressToken, progress, total?, message?}`) for a
//!   request made with `_meta.progressToken` comes out as [`ClientEvent::Progress`];
//!   **cancellation** is `notifications/cancelled {requestId, reason?}` ([`Client::cancel`]
//!   completes the request locally with `-32800` and tells the server; the server's late
//!   answer is dropped); **`ping`** is answered `{}` by either machine by itself.
//! - **Requests from the server** (`sampling/createMessage`, `elicitation/create`,
//!   `roots/list`, anything else) reach the client as [`ClientEvent::Request`], untouched,
//!   for the caller to answer with [`Client::respond`].
//! - [`Client::fail_pending`] completes every request in flight with [`stopped_error`]:
//!   `-32603`, message = the reason, `data: {"reason", "exit", "stderr"}`, the form every
//!   JSON-RPC protocol here uses.
//!
//! Under the supervisor ([`Supervised`]): `initialize` and `notifications/initialized` are the
//! handshake replayed to a fresh instance; every other request is budgeted, and a cancelled
//! one stops being. A [`ToolFilter`] hides tools: `tools/list` answers lose them, and a
//! `tools/call` of one is answered by the supervisor, never forwarded.
//!
//! Decision, written down: **a `tools/call` the server will never answer** (its instance ran
//! out of its per-request budget, died, or could not be restarted) **gets a tool result with
//! `isError: true`**, not a JSON-RPC error ([`stopped_tool_result`]): the revisions spoken here
//! say a tool's failure is reported in its result so that the model sees it and can adapt (a
//! client SDK raises on a JSON-RPC error and hides it from the model), and a request that ran
//! over its budget is the tool failing, not the protocol. The text is the reason and the
//! server's last stderr lines; `_meta.sandpipe` carries [`Stopped::to_json`]. Every other
//! request gets [`stopped_error`]. **A filtered tool is absent**: a `tools/call` of it gets
//! `-32602` "unknown tool: NAME", what the spec's servers answer for a tool they do not have,
//! so a server behind a filter looks like a server without the tool.
//!
//! ```text
//!   client (host)                                        server (plugin)
//!   initialize(params)  ── initialize ───────────────►   Initialize → respond_initialize
//!   Initialized ◄─────────── {protocolVersion, …} ─────
//!   initialized()       ── notifications/initialized ►   Initialized
//!   call_tool(…, token) ── tools/call {_meta} ───────►   Request → progress(token, …)
//!   Progress ◄────────────── notifications/progress ───
//!   Request ◄─────────────── sampling/createMessage ───   request(…)
//!   respond(id, …)      ── result ───────────────────►   Response
//!   Response ◄────────────── {content, isError} ───────   respond(id, …)
//!   cancel(id)          ── notifications/cancelled ──►   Cancelled
//! ```
//!
//! The Streamable HTTP transport's rules (what a POST is, its mirrored headers, ids that never
//! cross between requests sharing one server) are [`http`]'s.
//!
//! What it does not do: IO, framing (the caller's JSON Lines framer adds the newline), clocks,
//! JSON-RPC batches (removed in 2025-06-18), or checking tool
//! arguments against their input schemas (the server's business).
//!
//! ```
//! use sandpipe_proto::mcp::*;
//! use serde_json::json;
//!
//! let mut client = Client::new();
//! let mut server = Server::new();
//! fn pump(from: &mut Client, to: &mut Server) {
//!     while let Some(f) = from.poll_transmit() { to.handle_frame(&f).unwrap(); }
//! }
//! client.initialize(json!({"name": "agent", "version": "1"}), json!({})).unwrap();
//! pump(&mut client, &mut server);
//! let Some(ServerEvent::Initialize { id, .. }) = server.poll_event() else { panic!() };
//! server.respond_initialize(id, json!({"tools": {}}), json!({"name": "s", "version": "1"})).unwrap();
//! client.handle_frame(&server.poll_transmit().unwrap()).unwrap();
//! let Some(ClientEvent::Initialized { result: Ok(init), .. }) = client.poll_event() else { panic!() };
//! assert_eq!(init["protocolVersion"], LATEST_VERSION);
//! client.initialized().unwrap();
//! let call = client.call_tool("add", json!({"a": 1, "b": 2}), None).unwrap();
//! pump(&mut client, &mut server);
//! assert_eq!(server.poll_event(), Some(ServerEvent::Initialized));
//! let Some(ServerEvent::Request { id, method, .. }) = server.poll_event() else { panic!() };
//! assert_eq!(method, "tools/call");
//! server.respond(id, Ok(json!({"content": [{"type": "text", "text": "3"}]}))).unwrap();
//! client.handle_frame(&server.poll_transmit().unwrap()).unwrap();
//! let Some(ClientEvent::Response { id, result: Ok(r), .. }) = client.poll_event() else { panic!() };
//! assert_eq!((id, r["content"][0]["text"].as_str()), (call, Some("3")));
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use serde_json::{Value, json};

use crate::jsonrpc::{
    Dialect, ErrorCode, ErrorObject, Event, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Id,
    Message, Peer, ProtocolError,
};
use crate::machine::{ClientMachine, ServerMachine, Serves};
use crate::stopped::Stopped;
use crate::supervise::SupervisedProtocol;

pub mod exports;
mod fuzz;
pub mod http;
mod http_fuzz;
mod supervised;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_2026;
mod types;

pub use fuzz::fuzz;
pub use http_fuzz::fuzz as fuzz_http;
pub use supervised::{Supervised, ToolFilter, stopped_error, stopped_tool_result, unknown_tool};
pub use types::*;

/// The client's (host's) side.
#[derive(Debug)]
pub struct Client {
    peer: Peer,
    state: ClientState,
    initialize_id: Option<Id>,
    /// The revision the session speaks, once settled.
    revision: Option<Revision>,
    /// A `server/discover` probe in flight, and what to fall back to `initialize` with.
    probe: Option<Probe>,
    /// The 2026-07-28 envelope every request carries once the session speaks that revision.
    envelope: Option<Value>,
    /// Progress tokens of requests in flight (their JSON text), by request.
    tokens: BTreeMap<String, Id>,
    events: VecDeque<ClientEvent>,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    /// A client whose request ids count from 0.
    pub fn new() -> Self {
        Self {
            peer: Peer::new(Dialect::JsonRpc2),
            state: ClientState::Start,
            initialize_id: None,
            revision: None,
            probe: None,
            envelope: None,
            tokens: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    /// The lifecycle state.
    pub fn state(&self) -> ClientState {
        self.state
    }

    /// The revision the session speaks: `None` until `initialize` or `server/discover` was
    /// answered.
    pub fn revision(&self) -> Option<Revision> {
        self.revision
    }

    /// Probe the server with `server/discover` as `client_info` (`{name, version}`) with
    /// `capabilities`, the way the official SDK's client connects: a server that answers it
    /// and lists [`MODERN_VERSION`] makes a 2026-07-28 session; any other answer (a
    /// `-32601`, a result without the revision, a `-32022` that still names a handshake
    /// revision) makes the machine send `initialize` itself. Either way the connection
    /// completes with one [`ClientEvent::Initialized`] under the probe's id: the discover
    /// result, or the `initialize` result (then send [`Client::initialized`]). Only a
    /// `-32022` naming no revision this client speaks fails it. A probe still unanswered at
    /// `deadline` counts as refused, as in the SDK (whose bound is 10 s): a server of an
    /// older SDK may leave a request before `initialize` unanswered.
    pub fn discover(
        &mut self,
        client_info: Value,
        capabilities: Value,
        deadline: Option<Instant>,
    ) -> Result<Id, ProtocolError> {
        self.expect(&[ClientState::Start], DISCOVER)?;
        let envelope = envelope(&client_info, &capabilities);
        let params = json!({"_meta": envelope});
        let id = self
            .peer
            .request_with_deadline(DISCOVER, Some(params), deadline);
        self.probe = Some(Probe {
            id: id.clone(),
            client_info,
            capabilities,
        });
        self.envelope = Some(envelope);
        self.state = ClientState::Initializing;
        Ok(id)
    }

    /// Start a 2026-07-28 session without probing (the SDK's pinned mode): every request
    /// carries the envelope, and nothing is sent until the first of them.
    pub fn pin_modern(
        &mut self,
        client_info: Value,
        capabilities: Value,
    ) -> Result<(), ProtocolError> {
        self.expect(&[ClientState::Start], DISCOVER)?;
        self.envelope = Some(envelope(&client_info, &capabilities));
        self.revision = Some(Revision::Modern);
        self.state = ClientState::Ready;
        Ok(())
    }

    fn expect(&self, ok: &[ClientState], got: &str) -> Result<(), ProtocolError> {
        if ok.contains(&self.state) {
            return Ok(());
        }
        Err(ProtocolError::Unexpected {
            state: self.state.name(),
            got: got.to_owned(),
        })
    }

    /// Send `initialize` asking for [`LATEST_VERSION`], as `client_info` (`{name, version}`)
    /// with `capabilities`.
    pub fn initialize(
        &mut self,
        client_info: Value,
        capabilities: Value,
    ) -> Result<Id, ProtocolError> {
        self.expect(&[ClientState::Start], INITIALIZE)?;
        let params = json!({
            "protocolVersion": LATEST_VERSION,
            "capabilities": capabilities,
            "clientInfo": client_info,
        });
        let id = self.peer.request(INITIALIZE, Some(params));
        self.initialize_id = Some(id.clone());
        self.state = ClientState::Initializing;
        Ok(id)
    }

    /// Send `notifications/initialized` once `initialize` was answered; nothing in a
    /// 2026-07-28 session, which has no handshake to end.
    pub fn initialized(&mut self) -> Result<(), ProtocolError> {
        if self.revision == Some(Revision::Modern) && self.state == ClientState::Ready {
            return Ok(());
        }
        self.expect(&[ClientState::Initialized], INITIALIZED)?;
        self.peer.notify(INITIALIZED, None);
        self.state = ClientState::Ready;
        Ok(())
    }

    /// Make any request (`resources/read`, `prompts/get`, …) once ready; `ping` at any time.
    /// A `_meta.progressToken` in `params` routes the server's progress to this request.
    pub fn request(&mut self, method: &str, params: Option<Value>) -> Result<Id, ProtocolError> {
        if method != PING {
            self.expect(&[ClientState::Ready], method)?;
        } else if self.state == ClientState::Closed {
            return Err(ProtocolError::Unexpected {
                state: self.state.name(),
                got: method.to_owned(),
            });
        }
        let token = params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("progressToken"))
            .map(Value::to_string);
        if let Some(t) = &token
            && self.tokens.contains_key(t)
        {
            return Err(ProtocolError::BadPayload {
                what: "progressToken",
                reason: format!("token {t} is already used by a request in flight"),
            });
        }
        let params = self.wire_params(params);
        let id = self.peer.request(method, params);
        if let Some(t) = token {
            self.tokens.insert(t, id.clone());
        }
        Ok(id)
    }

    /// `params` as a request of this session carries them: with the 2026-07-28 envelope in
    /// `_meta` in such a session, as given otherwise.
    pub fn wire_params(&self, params: Option<Value>) -> Option<Value> {
        match (&self.envelope, self.revision) {
            (Some(envelope), Some(Revision::Modern)) => Some(enveloped(params, envelope)),
            _ => params,
        }
    }

    /// `tools/list`, from `cursor` (`None`: the first page).
    pub fn list_tools(&mut self, cursor: Option<&str>) -> Result<Id, ProtocolError> {
        let params = cursor.map(|c| json!({"cursor": c}));
        self.request(TOOLS_LIST, params)
    }

    /// `tools/call` of `name` with `arguments`; with `progress_token`, the server may report
    /// progress ([`ClientEvent::Progress`]).
    pub fn call_tool(
        &mut self,
        name: &str,
        arguments: Value,
        progress_token: Option<Value>,
    ) -> Result<Id, ProtocolError> {
        let mut params = json!({"name": name, "arguments": arguments});
        if let Some(t) = progress_token {
            params["_meta"] = json!({"progressToken": t});
        }
        self.request(TOOLS_CALL, Some(params))
    }

    /// Give up on request `id`: it completes at once with `-32800`, the server is told with
    /// `notifications/cancelled`, and its late answer is dropped. False if `id` is not in
    /// flight (`initialize` cannot be cancelled).
    pub fn cancel(&mut self, id: &Id, reason: Option<&str>) -> bool {
        let probing = self.probe.as_ref().is_some_and(|p| p.id == *id);
        if self.initialize_id.as_ref() == Some(id) || probing || !self.peer.cancel(id) {
            return false;
        }
        let mut params = json!({"requestId": id_value(id)});
        if let Some(r) = reason {
            params["reason"] = Value::from(r);
        }
        self.peer.notify(CANCELLED, Some(params));
        self.drain_local();
        true
    }

    /// Answer a [`ClientEvent::Request`] from the server.
    pub fn respond(
        &mut self,
        id: Id,
        result: Result<Value, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        self.peer.respond(id, result)
    }

    /// Send a notification (`notifications/roots/list_changed`, …) once ready.
    pub fn notify(&mut self, method: &str, params: Option<Value>) -> Result<(), ProtocolError> {
        self.expect(&[ClientState::Ready, ClientState::Initialized], method)?;
        self.peer.notify(method, params);
        Ok(())
    }

    /// Feed one frame (one line, without its newline).
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        self.peer.handle_frame(frame)?;
        let mut first_error = None;
        while let Some(ev) = self.peer.poll_event() {
            if let Err(e) = self.on_event(ev) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The server is gone: every request in flight completes with [`stopped_error`].
    pub fn fail_pending(&mut self, stopped: &Stopped) {
        // Closed first, so that a probe failed here completes instead of falling back.
        self.state = ClientState::Closed;
        self.peer.fail_pending(stopped_error(stopped));
        self.drain_local();
    }

    /// Route completions the machine made itself (a cancel, a stop): they are responses to
    /// our own requests, so routing them cannot fail.
    fn drain_local(&mut self) {
        while let Some(ev) = self.peer.poll_event() {
            let _ = self.on_event(ev);
        }
    }

    /// The next frame to send.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.peer.poll_transmit()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// The probe's answer: a 2026-07-28 session, the `initialize` fallback, or (a server
    /// that speaks only revisions this client does not) the connection's failure.
    fn on_discovered(&mut self, id: Id, result: Result<Value, ErrorObject>) {
        match probe_verdict(&result) {
            Verdict::Modern => {
                self.probe = None;
                self.revision = Some(Revision::Modern);
                if self.state == ClientState::Initializing {
                    self.state = ClientState::Ready;
                }
                self.events
                    .push_back(ClientEvent::Initialized { id, result });
            }
            Verdict::Fail(error) => {
                self.probe = None;
                self.envelope = None;
                self.state = ClientState::Start;
                self.events.push_back(ClientEvent::Initialized {
                    id,
                    result: Err(error),
                });
            }
            Verdict::FallBack => {
                let Some(probe) = &self.probe else { return };
                if self.state != ClientState::Initializing {
                    // The server is gone (the answer is the stopped error): nothing to fall
                    // back to, so the probe completes with it.
                    self.probe = None;
                    self.events
                        .push_back(ClientEvent::Initialized { id, result });
                    return;
                }
                let params = json!({
                    "protocolVersion": LATEST_VERSION,
                    "capabilities": probe.capabilities,
                    "clientInfo": probe.client_info,
                });
                self.envelope = None;
                let init = self.peer.request(INITIALIZE, Some(params));
                self.initialize_id = Some(init);
            }
        }
    }

    fn on_event(&mut self, ev: Event) -> Result<(), ProtocolError> {
        match ev {
            Event::Response { id, method, result } => {
                self.tokens.retain(|_, v| *v != id);
                if self.probe.as_ref().is_some_and(|p| p.id == id) && method == DISCOVER {
                    self.on_discovered(id, result);
                } else if self.initialize_id.as_ref() == Some(&id) {
                    self.initialize_id = None;
                    let result = result.and_then(check_version);
                    if self.state == ClientState::Initializing {
                        self.state = if result.is_ok() {
                            self.revision = Some(Revision::Handshake);
                            ClientState::Initialized
                        } else {
                            ClientState::Start
                        };
                    }
                    // A fallback after a probe completes under the probe's id: that is the
                    // request the caller is waiting on.
                    let id = match self.probe.take() {
                        Some(probe) => probe.id,
                        None => id,
                    };
                    self.events
                        .push_back(ClientEvent::Initialized { id, result });
                } else {
                    self.events
                        .push_back(ClientEvent::Response { id, method, result });
                }
            }
            Event::Request { id, method, .. } if method == PING => {
                self.peer.respond(id, Ok(json!({})))?;
            }
            Event::Request { id, method, params } => {
                self.events
                    .push_back(ClientEvent::Request { id, method, params });
            }
            Event::Notification { method, params } if method == PROGRESS => {
                let progress = parse_progress(params.as_ref())?;
                let id = self.tokens.get(&progress.token.to_string()).cloned();
                self.events
                    .push_back(ClientEvent::Progress { id, progress });
            }
            Event::Notification { method, params } => {
                self.events
                    .push_back(ClientEvent::Notification { method, params });
            }
        }
        Ok(())
    }
}

/// An `initialize` result whose `protocolVersion` the client speaks.
fn check_version(result: Value) -> Result<Value, ErrorObject> {
    match result.get("protocolVersion").and_then(Value::as_str) {
        Some(v) if SUPPORTED_VERSIONS.contains(&v) => Ok(result),
        Some(v) => Err(ErrorObject::new(
            INTERNAL_ERROR,
            format!(
                "the server speaks MCP revision {v}; this client speaks {}",
                SUPPORTED_VERSIONS.join(" and ")
            ),
        )),
        None => Err(ErrorObject::new(
            INTERNAL_ERROR,
            "bad initialize result: no protocolVersion",
        )),
    }
}

/// A request the server has not answered yet.
#[derive(Debug)]
struct Open {
    /// Its `_meta.progressToken`.
    token: Option<Value>,
    /// Its method, which decides the members a 2026-07-28 result must have.
    method: String,
}

fn progress_token(params: Option<&Value>) -> Option<Value> {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("progressToken"))
        .cloned()
}

/// `-32022` for a revision this server does not speak, naming the one it does.
fn unsupported_version(requested: Value) -> ErrorObject {
    ErrorObject::new(
        UNSUPPORTED_PROTOCOL_VERSION,
        format!("unsupported protocol version; this connection speaks {MODERN_VERSION}"),
    )
    .with_data(json!({"supported": [MODERN_VERSION], "requested": requested}))
}

/// An enveloped request's `_meta`, checked as the official SDK's servers check it: the
/// revision and the client capabilities are required, and the revision must be
/// [`MODERN_VERSION`].
fn check_envelope(params: Option<&Value>) -> Result<(), ErrorObject> {
    let meta = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object);
    let missing: Vec<&str> = [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES]
        .into_iter()
        .filter(|k| !meta.is_some_and(|m| m.contains_key(*k)))
        .collect();
    if !missing.is_empty() {
        return Err(ErrorObject::new(
            INVALID_PARAMS,
            format!(
                "params._meta is missing the required envelope key(s): {}",
                missing.join(", ")
            ),
        ));
    }
    match meta.and_then(|m| m.get(META_PROTOCOL_VERSION)) {
        Some(Value::String(v)) if v == MODERN_VERSION => Ok(()),
        Some(v @ Value::String(_)) => Err(unsupported_version(v.clone())),
        _ => Err(ErrorObject::new(
            INVALID_PARAMS,
            format!("{META_PROTOCOL_VERSION} is not a string"),
        )),
    }
}

/// A 2026-07-28 result with the members that revision requires (see [`Server::respond`]).
fn complete(method: &str, mut result: Value) -> Value {
    let Some(members) = result.as_object_mut() else {
        return result;
    };
    members
        .entry("resultType")
        .or_insert_with(|| json!("complete"));
    if method == TOOLS_LIST || method == DISCOVER {
        members.entry("ttlMs").or_insert_with(|| json!(0));
        members
            .entry("cacheScope")
            .or_insert_with(|| json!("private"));
    }
    result
}

/// A `server/discover` in flight: its id, and the `initialize` to send when the server does
/// not speak 2026-07-28.
#[derive(Debug)]
struct Probe {
    id: Id,
    client_info: Value,
    capabilities: Value,
}

/// What a probe's answer means, as the official SDK reads it: only a discover result listing
/// [`MODERN_VERSION`] is a 2026-07-28 server, and only a `-32022` naming no revision this
/// client speaks is a server it cannot talk to; everything else is a server of the handshake
/// revisions.
enum Verdict {
    Modern,
    FallBack,
    Fail(ErrorObject),
}

fn probe_verdict(result: &Result<Value, ErrorObject>) -> Verdict {
    match result {
        Ok(r) => {
            let modern = r
                .get("supportedVersions")
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|v| v == MODERN_VERSION));
            if modern && r.get("capabilities").is_some_and(Value::is_object) {
                Verdict::Modern
            } else {
                Verdict::FallBack
            }
        }
        Err(e) if e.code == ErrorCode::Int(UNSUPPORTED_PROTOCOL_VERSION) => {
            let supported: Option<Vec<&str>> = e
                .data
                .as_ref()
                .and_then(|d| d.get("supported"))
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect());
            match supported {
                Some(s) if !s.iter().any(|v| SUPPORTED_VERSIONS.contains(v)) => {
                    Verdict::Fail(ErrorObject::new(
                        UNSUPPORTED_PROTOCOL_VERSION,
                        format!(
                            "the server speaks MCP revisions {}; this client speaks {}, {}",
                            s.join(", "),
                            MODERN_VERSION,
                            SUPPORTED_VERSIONS.join(" and ")
                        ),
                    ))
                }
                _ => Verdict::FallBack,
            }
        }
        Err(_) => Verdict::FallBack,
    }
}

/// The `params._meta` members of a 2026-07-28 request.
fn envelope(client_info: &Value, capabilities: &Value) -> Value {
    json!({
        META_PROTOCOL_VERSION: MODERN_VERSION,
        META_CLIENT_INFO: client_info,
        META_CLIENT_CAPABILITIES: capabilities,
    })
}

/// `params` with the envelope merged into its `_meta` (a `progressToken` there is kept).
fn enveloped(params: Option<Value>, envelope: &Value) -> Value {
    let mut params = match params {
        Some(Value::Object(m)) => Value::Object(m),
        _ => json!({}),
    };
    let meta = &mut params["_meta"];
    if !meta.is_object() {
        *meta = json!({});
    }
    if let (Some(meta), Some(envelope)) = (meta.as_object_mut(), envelope.as_object()) {
        for (k, v) in envelope {
            meta.insert(k.clone(), v.clone());
        }
    }
    params
}

/// Whether a request's params carry the 2026-07-28 envelope: its revision key is the mark
/// (a bare `_meta` is not: 2025 requests put `progressToken` there).
pub fn has_envelope(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .is_some()
}

fn parse_progress(params: Option<&Value>) -> Result<Progress, ProtocolError> {
    let bad = |reason: &str| ProtocolError::BadPayload {
        what: PROGRESS,
        reason: reason.to_owned(),
    };
    let p = params.ok_or_else(|| bad("no params"))?;
    let token = p
        .get("progressToken")
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
        .cloned()
        .ok_or_else(|| bad("progressToken is not a string or an integer"))?;
    let progress = p
        .get("progress")
        .and_then(Value::as_f64)
        .ok_or_else(|| bad("progress is not a number"))?;
    Ok(Progress {
        token,
        progress,
        total: p.get("total").and_then(Value::as_f64),
        message: p.get("message").and_then(Value::as_str).map(str::to_owned),
    })
}

fn id_value(id: &Id) -> Value {
    match id {
        Id::Num(n) => json!(n),
        Id::Str(s) => json!(s),
        Id::Null => Value::Null,
    }
}

fn id_from_value(v: &Value) -> Option<Id> {
    match v {
        Value::Number(n) => n.as_i64().map(Id::Num),
        Value::String(s) => Some(Id::Str(s.clone())),
        _ => None,
    }
}

/// A request completes at its response (or `initialize`'s); progress, the server's requests
/// and notifications are the caller's. A progress notification for no request in flight may
/// have crossed a cancellation: not fatal.
impl ClientMachine for Client {
    type Key = Id;
    type Event = ClientEvent;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        Client::handle_frame(self, frame)
    }
    fn is_fatal(error: &ProtocolError) -> bool {
        !matches!(error, ProtocolError::BadPayload { .. })
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.peer.handle_timeout(now);
        self.drain_local();
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.peer.poll_timeout()
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        Client::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<ClientEvent> {
        Client::poll_event(self)
    }
    fn completes(event: &ClientEvent) -> Option<&Id> {
        match event {
            ClientEvent::Initialized { id, .. } | ClientEvent::Response { id, .. } => Some(id),
            _ => None,
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        Client::fail_pending(self, stopped);
    }
    fn refuse_request(&mut self, event: ClientEvent) -> Option<ClientEvent> {
        crate::machine::refuse_request(self, event)
    }
}

/// The server's requests (sampling, elicitation, roots, …) go to the host's handler; `ping`
/// the machine answers itself.
impl Serves for Client {
    type RequestId = Id;
    type Request = crate::jsonrpc::Request;
    type Answer = Result<Value, ErrorObject>;

    fn take_request(event: ClientEvent) -> Result<(Id, crate::jsonrpc::Request), ClientEvent> {
        match event {
            ClientEvent::Request { id, method, params } => {
                Ok((id, crate::jsonrpc::Request { method, params }))
            }
            other => Err(other),
        }
    }
    fn method(request: &crate::jsonrpc::Request) -> &str {
        &request.method
    }
    fn answer(&mut self, id: Id, answer: Self::Answer) -> Result<(), ProtocolError> {
        self.respond(id, answer)
    }
    fn not_served(&self, method: &str) -> Self::Answer {
        Err(ErrorObject::new(
            crate::jsonrpc::METHOD_NOT_FOUND,
            format!("this client does not serve {method}"),
        ))
    }
    fn failed(&self, reason: String) -> Self::Answer {
        Err(ErrorObject::new(crate::jsonrpc::INTERNAL_ERROR, reason))
    }
}

/// The server's (plugin's) side.
#[derive(Debug)]
pub struct Server {
    peer: Peer,
    state: ServerState,
    initialize: Option<(Id, String)>,
    /// The revision the client's first request chose.
    revision: Option<Revision>,
    /// Requests received and not yet answered.
    open: BTreeMap<Id, Open>,
    events: VecDeque<ServerEvent>,
    /// Frames sent outside the peer (a parse error to id `null`), in order.
    raw: VecDeque<Vec<u8>>,
}

impl Default for Server {
    fn default() -> Self {
        Self::new()
    }
}

impl Server {
    /// A server waiting for `initialize`.
    pub fn new() -> Self {
        Self {
            peer: Peer::new(Dialect::JsonRpc2),
            state: ServerState::Start,
            initialize: None,
            revision: None,
            open: BTreeMap::new(),
            events: VecDeque::new(),
            raw: VecDeque::new(),
        }
    }

    /// The lifecycle state.
    pub fn state(&self) -> ServerState {
        self.state
    }

    /// The revision the client's first request chose: `initialize` for the handshake
    /// revisions, a request carrying the 2026-07-28 envelope for that one.
    pub fn revision(&self) -> Option<Revision> {
        self.revision
    }

    /// Feed one frame. `ping` is answered here, a request before `initialize` is refused
    /// with `-32600` (and [`ProtocolError::Unexpected`]) unless it carries the 2026-07-28
    /// envelope, a line that is not a message gets JSON-RPC's `-32700` to id `null`.
    ///
    /// The client's first request settles the revision, as the official SDK's servers do:
    /// after `initialize`, an enveloped request is refused with `-32600`; after an enveloped
    /// one, `initialize` gets `-32022` naming [`MODERN_VERSION`], as does an envelope naming
    /// another revision, and a request without the envelope gets `-32602`.
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        if let Err(e) = self.peer.handle_frame(frame) {
            if matches!(
                e,
                ProtocolError::NotJson { .. } | ProtocolError::Invalid { .. }
            ) {
                // Keep send order: whatever the peer queued first goes first.
                while let Some(frame) = self.peer.poll_transmit() {
                    self.raw.push_back(frame);
                }
                let error = ErrorObject::new(crate::jsonrpc::PARSE_ERROR, "parse error");
                self.raw
                    .push_back(Message::response(Id::Null, Err(error)).encode(Dialect::JsonRpc2));
            }
            return Err(e);
        }
        let mut first_error = None;
        while let Some(ev) = self.peer.poll_event() {
            if let Err(e) = self.on_event(ev) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn on_event(&mut self, ev: Event) -> Result<(), ProtocolError> {
        match ev {
            Event::Request { id, method, .. } if method == PING => {
                self.peer.respond(id, Ok(json!({})))
            }
            Event::Request { id, method, params } if method == INITIALIZE => {
                if self.revision == Some(Revision::Modern) {
                    let requested = params
                        .as_ref()
                        .and_then(|p| p.get("protocolVersion"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    let error = unsupported_version(requested);
                    self.peer.respond(id, Err(error))?;
                    return Err(ProtocolError::Unexpected {
                        state: "serving 2026-07-28",
                        got: "request \"initialize\"".into(),
                    });
                }
                if self.state != ServerState::Start {
                    let error =
                        ErrorObject::new(INVALID_REQUEST, "initialize was already received");
                    self.peer.respond(id, Err(error))?;
                    return Err(ProtocolError::Unexpected {
                        state: "initialized",
                        got: "request \"initialize\"".into(),
                    });
                }
                let asked = params
                    .as_ref()
                    .and_then(|p| p.get("protocolVersion"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let version = SUPPORTED_VERSIONS
                    .into_iter()
                    .find(|v| *v == asked)
                    .unwrap_or(LATEST_VERSION);
                self.state = ServerState::Initializing;
                self.revision = Some(Revision::Handshake);
                self.initialize = Some((id.clone(), version.to_owned()));
                self.events.push_back(ServerEvent::Initialize {
                    id,
                    params: params.unwrap_or(Value::Null),
                });
                Ok(())
            }
            Event::Request { id, method, params }
                if self.revision != Some(Revision::Handshake) && has_envelope(params.as_ref()) =>
            {
                if let Err(error) = check_envelope(params.as_ref()) {
                    self.peer.respond(id, Err(error))?;
                    return Err(ProtocolError::BadPayload {
                        what: "params._meta",
                        reason: format!("a {method:?} request's envelope is not one served"),
                    });
                }
                self.revision = Some(Revision::Modern);
                self.state = ServerState::Running;
                let token = progress_token(params.as_ref());
                self.open.insert(
                    id.clone(),
                    Open {
                        token,
                        method: method.clone(),
                    },
                );
                let params = params.unwrap_or(Value::Null);
                self.events.push_back(if method == DISCOVER {
                    ServerEvent::Discover { id, params }
                } else {
                    ServerEvent::Request {
                        id,
                        method,
                        params: Some(params),
                    }
                });
                Ok(())
            }
            Event::Request { id, method, .. } if self.revision == Some(Revision::Modern) => {
                let error = ErrorObject::new(
                    INVALID_PARAMS,
                    format!(
                        "params._meta must carry {META_PROTOCOL_VERSION:?} and \
                         {META_CLIENT_CAPABILITIES:?}: this server speaks {MODERN_VERSION} \
                         on this connection"
                    ),
                );
                self.peer.respond(id, Err(error))?;
                Err(ProtocolError::BadPayload {
                    what: "params._meta",
                    reason: format!("a {method:?} request without the 2026-07-28 envelope"),
                })
            }
            Event::Request { id, method, params }
                if self.revision == Some(Revision::Handshake) && has_envelope(params.as_ref()) =>
            {
                let error = ErrorObject::new(
                    INVALID_REQUEST,
                    "this connection speaks the initialize handshake; requests carrying the \
                     2026-07-28 envelope are not accepted on it",
                );
                self.peer.respond(id, Err(error))?;
                Err(ProtocolError::Unexpected {
                    state: "initialized",
                    got: format!("enveloped request {method:?}"),
                })
            }
            Event::Request { id, method, .. } if self.state == ServerState::Start => {
                let error = ErrorObject::new(INVALID_REQUEST, "server not initialized");
                self.peer.respond(id, Err(error))?;
                Err(ProtocolError::Unexpected {
                    state: "not initialized",
                    got: format!("request {method:?}"),
                })
            }
            Event::Request { id, method, params } => {
                let token = progress_token(params.as_ref());
                self.open.insert(
                    id.clone(),
                    Open {
                        token,
                        method: method.clone(),
                    },
                );
                self.events
                    .push_back(ServerEvent::Request { id, method, params });
                Ok(())
            }
            Event::Notification { method, .. } if method == INITIALIZED => {
                self.events.push_back(ServerEvent::Initialized);
                Ok(())
            }
            Event::Notification { method, params } if method == CANCELLED => {
                let id = params
                    .as_ref()
                    .and_then(|p| p.get("requestId"))
                    .and_then(id_from_value);
                // A cancel for a request already answered crossed the answer on the wire.
                if let Some(id) = id
                    && self.open.remove(&id).is_some()
                {
                    self.events.push_back(ServerEvent::Cancelled { id });
                }
                Ok(())
            }
            Event::Notification { method, params } => {
                self.events
                    .push_back(ServerEvent::Notification { method, params });
                Ok(())
            }
            Event::Response { id, method, result } => {
                self.events
                    .push_back(ServerEvent::Response { id, method, result });
                Ok(())
            }
        }
    }

    /// Answer `initialize` with the negotiated revision, `capabilities` and `server_info`.
    pub fn respond_initialize(
        &mut self,
        id: Id,
        capabilities: Value,
        server_info: Value,
    ) -> Result<(), ProtocolError> {
        let Some((_, version)) = self.initialize.take_if(|(i, _)| *i == id) else {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        };
        let result = json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": server_info,
        });
        self.peer.respond(id, Ok(result))?;
        self.state = ServerState::Running;
        Ok(())
    }

    /// Answer `server/discover` with `capabilities` and `server_info`: the revisions spoken
    /// ([`MODERN_VERSION`] and the handshake ones, so a client may choose either), and the
    /// cache hints 2026-07-28 asks of it (stale at once, private).
    pub fn respond_discover(
        &mut self,
        id: Id,
        capabilities: Value,
        server_info: Value,
    ) -> Result<(), ProtocolError> {
        let mut versions = vec![MODERN_VERSION];
        versions.extend(SUPPORTED_VERSIONS);
        let result = json!({
            "supportedVersions": versions,
            "capabilities": capabilities,
            "_meta": {META_SERVER_INFO: server_info},
        });
        self.respond(id, Ok(result))
    }

    /// Answer request `id` (not one that was cancelled). In a 2026-07-28 session a result
    /// gets the members that revision requires when the caller left them out: `resultType`
    /// `"complete"` on every result, and `ttlMs` 0 and `cacheScope` `"private"` on a
    /// `tools/list` or `server/discover` one.
    pub fn respond(
        &mut self,
        id: Id,
        result: Result<Value, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        let Some(open) = self.open.remove(&id) else {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        };
        let result = match (self.revision, result) {
            (Some(Revision::Modern), Ok(r)) => Ok(complete(&open.method, r)),
            (_, result) => result,
        };
        self.peer.respond(id, result)
    }

    /// Report progress on request `id`; false (nothing sent) when it gave no progress token.
    pub fn progress(
        &mut self,
        id: &Id,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<bool, ProtocolError> {
        let Some(open) = self.open.get(id) else {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        };
        let Some(token) = open.token.clone() else {
            return Ok(false);
        };
        let mut params = json!({"progressToken": token, "progress": progress});
        if let Some(t) = total {
            params["total"] = json!(t);
        }
        if let Some(m) = message {
            params["message"] = json!(m);
        }
        self.peer.notify(PROGRESS, Some(params));
        Ok(true)
    }

    /// Ask the client something (`sampling/createMessage`, `roots/list`, …); the answer
    /// arrives as [`ServerEvent::Response`].
    /// A 2026-07-28 session has no server requests (a tool asks through an `input_required`
    /// result instead): refused there.
    pub fn request(&mut self, method: &str, params: Option<Value>) -> Result<Id, ProtocolError> {
        if self.revision == Some(Revision::Modern) {
            return Err(ProtocolError::Unexpected {
                state: "serving 2026-07-28",
                got: format!("server request {method:?}"),
            });
        }
        if self.state != ServerState::Running {
            return Err(ProtocolError::Unexpected {
                state: "not initialized",
                got: format!("server request {method:?}"),
            });
        }
        Ok(self.peer.request(method, params))
    }

    /// Send a notification (logging, list changed, …).
    pub fn notify(&mut self, method: &str, params: Option<Value>) {
        self.peer.notify(method, params);
    }

    /// The next frame to send.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.raw.pop_front().or_else(|| self.peer.poll_transmit())
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }
}

impl ServerMachine for Server {
    type Event = ServerEvent;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        Server::handle_frame(self, frame)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        Server::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<ServerEvent> {
        Server::poll_event(self)
    }
}
