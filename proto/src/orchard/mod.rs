//! The Orchard provider protocol: `describe`, `configure`, `execute`, `shutdown` over JSON
//! Lines, plus the plan-mode `schema` subcommand.
//!
//! Two sans-IO machines share the message types, both built on the Orchard dialect of
//! [`Peer`](crate::jsonrpc::Peer) (no `jsonrpc` member, string error codes, `detail` on errors):
//! - [`Client`] (the host, Orchard's role) sends requests, checks the lifecycle, checks the
//!   schema's `protocol` is `"1"` at the handshake, matches answers by id in any order, and
//!   turns a missed `describe` deadline, or the provider dying, into typed results.
//! - [`Server`] (the provider) decodes requests into [`ServerEvent`]s and encodes the answers;
//!   malformed requests and unknown methods are answered for it (`invalid_request`,
//!   `unknown_method`).
//!
//! ```text
//!   Client (host)                                 Server (provider)
//!   Start ── describe {} ───────────────────────►  Describe
//!   Described ◄── {schema: {protocol: "1", ..}} ─
//!          ── configure {config} ───────────────►  Configure      (run mode only)
//!   Configured ◄── {} ───────────────────────────
//!          ── execute {action, attrs} (id 3) ───►  Execute
//!          ── execute {action, attrs} (id 4) ───►  Execute
//!          ◄── {outputs} (id 4) ──────────────────  answers in any order
//!          ◄── {outputs} (id 3) ──────────────────
//!   ShuttingDown ── shutdown {} ────────────────►  Shutdown
//!   Closed ◄── {} ───────────────────────────────
//!
//!   plan mode:  `<binary> schema`  ──►  one JSON line on stdout: the ProviderSchema
//! ```
//!
//! What it does not do: IO, clocks (deadlines take `now`), framing (frames are one line
//! without the newline), or validating `attrs` against the schema (that is the provider's job;
//! the guest SDK rejects unknown actions).
//!
//! The seed does not spell out the schema beyond `name` and `protocol`; [`ProviderSchema`]
//! types `actions` as a map from action name to [`ActionSchema`] (whose `attributes` map
//! names to [`AttributeSchema`]) and keeps every other member in `extra`, so nothing a
//! provider sends is lost.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use sandpipe_proto::orchard::{Client, ClientEvent, ProviderSchema, Server, ServerEvent};
//! use serde_json::json;
//!
//! let mut host = Client::new();
//! let mut provider = Server::new();
//! let now = Instant::now();
//! host.describe(now, Duration::from_secs(5)).unwrap();
//! provider.handle_frame(&host.poll_transmit().unwrap()).unwrap();
//! let Some(ServerEvent::Describe { id }) = provider.poll_event() else { panic!() };
//! provider.respond_describe(id, &ProviderSchema::new("demo")).unwrap();
//! host.handle_frame(&provider.poll_transmit().unwrap()).unwrap();
//! match host.poll_event() {
//!     Some(ClientEvent::Described { result: Ok(schema), .. }) => assert_eq!(schema.name, "demo"),
//!     other => panic!("{other:?}"),
//! }
//! host.configure(json!({})).unwrap();
//! assert_eq!(host.poll_transmit().unwrap(), br#"{"id":2,"method":"configure","params":{"config":{}}}"#);
//! ```

mod fuzz;
mod types;

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

pub use fuzz::{fuzz, fuzz_pair};
pub use serde_json;
pub use serde_json::Value;
use serde_json::{Map, json};
pub use types::*;

use crate::jsonrpc::{Dialect, ErrorCode, ErrorObject, Event, Id, Message, Peer, ProtocolError};
use crate::machine::ClientMachine;
use crate::stopped::Stopped;

/// The only protocol version there is; a schema advertising anything else is refused.
pub const PROTOCOL_VERSION: &str = "1";

/// How long real Orchard waits for the answer to `describe` before killing the provider.
pub const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The argument that selects plan mode: `<binary> schema`.
pub const SCHEMA_SUBCOMMAND: &str = "schema";
/// Where the host is in the lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientState {
    /// Nothing sent yet; only `describe` is allowed.
    Start,
    /// `describe` is in flight.
    Describing,
    /// The schema is known; `configure` (or `shutdown`) is next. A failed `configure` returns
    /// here.
    Described,
    /// `configure` is in flight.
    Configuring,
    /// `execute` may be sent, any number in flight.
    Configured,
    /// `shutdown` is in flight; outstanding executes may still complete.
    ShuttingDown,
    /// `shutdown` was answered, `describe` failed, or the provider is gone.
    Closed,
}

impl ClientState {
    fn name(self) -> &'static str {
        match self {
            ClientState::Start => "not described",
            ClientState::Describing => "describing",
            ClientState::Described => "described, not configured",
            ClientState::Configuring => "configuring",
            ClientState::Configured => "configured",
            ClientState::ShuttingDown => "shutting down",
            ClientState::Closed => "closed",
        }
    }
}

#[derive(Debug)]
struct Call {
    method: Method,
    action: String,
    timeout: Option<Duration>,
}

/// The host side of the protocol.
#[derive(Debug)]
pub struct Client {
    peer: Peer,
    state: ClientState,
    schema: Option<ProviderSchema>,
    calls: BTreeMap<Id, Call>,
    events: VecDeque<ClientEvent>,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    /// A client whose request ids count up from 1, as in the protocol's examples.
    pub fn new() -> Self {
        Self {
            peer: Peer::with_first_id(Dialect::Orchard, 1),
            state: ClientState::Start,
            schema: None,
            calls: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    /// The lifecycle state.
    pub fn state(&self) -> ClientState {
        self.state
    }

    /// The provider's schema, once `describe` succeeded.
    pub fn schema(&self) -> Option<&ProviderSchema> {
        self.schema.as_ref()
    }

    fn expect_state(&self, allowed: &[ClientState], method: Method) -> Result<(), ProtocolError> {
        if allowed.contains(&self.state) {
            return Ok(());
        }
        Err(ProtocolError::Unexpected {
            state: self.state.name(),
            got: format!("call to {method}"),
        })
    }

    fn send(
        &mut self,
        method: Method,
        params: Value,
        action: String,
        deadline: Option<(Instant, Duration)>,
    ) -> Id {
        let id = self.peer.request_with_deadline(
            method.as_str(),
            Some(params),
            deadline.map(|(at, _)| at),
        );
        self.calls.insert(
            id.clone(),
            Call {
                method,
                action,
                timeout: deadline.map(|(_, t)| t),
            },
        );
        id
    }

    /// Send `describe`; it fails with [`CallError::TimedOut`] unless answered by
    /// `now + timeout` (real Orchard allows [`DESCRIBE_TIMEOUT`]). Only in [`ClientState::Start`].
    pub fn describe(&mut self, now: Instant, timeout: Duration) -> Result<Id, ProtocolError> {
        self.expect_state(&[ClientState::Start], Method::Describe)?;
        self.state = ClientState::Describing;
        let deadline = now.checked_add(timeout).map(|at| (at, timeout));
        Ok(self.send(Method::Describe, json!({}), String::new(), deadline))
    }

    /// Send `configure {config}`. Only once described (again after a failed configure).
    pub fn configure(&mut self, config: Value) -> Result<Id, ProtocolError> {
        self.expect_state(&[ClientState::Described], Method::Configure)?;
        self.state = ClientState::Configuring;
        Ok(self.send(
            Method::Configure,
            json!({ "config": config }),
            String::new(),
            None,
        ))
    }

    /// Send `execute {action, attrs}`. Only once configured; any number may be in flight.
    pub fn execute(&mut self, action: &str, attrs: Value) -> Result<Id, ProtocolError> {
        self.expect_state(&[ClientState::Configured], Method::Execute)?;
        Ok(self.send(
            Method::Execute,
            json!({ "action": action, "attrs": attrs }),
            action.to_owned(),
            None,
        ))
    }

    /// Send `shutdown {}`. Allowed once described, while no describe or configure is in
    /// flight; executes in flight may still complete.
    pub fn shutdown(&mut self) -> Result<Id, ProtocolError> {
        self.expect_state(
            &[ClientState::Described, ClientState::Configured],
            Method::Shutdown,
        )?;
        self.state = ClientState::ShuttingDown;
        Ok(self.send(Method::Shutdown, json!({}), String::new(), None))
    }

    /// Feed one frame (one line, without its newline) from the provider.
    ///
    /// An answer that does not fit its call (a schema for another protocol version, a result
    /// without `outputs`, …) returns [`ProtocolError::BadPayload`] and also completes the call
    /// with [`CallError::Protocol`], so nobody waits for it. A request or notification from
    /// the provider is [`ProtocolError::Unexpected`]: Orchard providers only answer.
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        self.peer.handle_frame(frame)?;
        self.drain_peer(Completion::Answer)
    }

    /// Fail every call whose deadline is at or before `now` (only `describe` has one) with
    /// [`CallError::TimedOut`]; a late answer is then ignored.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.peer.handle_timeout(now);
        // Only responses can come out of a timeout, and they never fail to complete.
        let _ = self.drain_peer(Completion::TimedOut);
    }

    /// The earliest deadline, for the driver's timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.peer.poll_timeout()
    }

    /// The provider is gone (crashed, killed, out of fuel): complete every call in flight with
    /// [`stopped_error`].
    pub fn fail_pending(&mut self, stopped: &Stopped) {
        self.peer.fail_pending(ErrorObject::new(
            codes::INTERNAL_ERROR,
            stopped.reason.clone(),
        ));
        while let Some(ev) = self.peer.poll_event() {
            let Event::Response { id, .. } = ev else {
                continue;
            };
            let Some(call) = self.calls.remove(&id) else {
                continue;
            };
            let error = CallError::Provider(stopped_error(Some(call.method), stopped));
            // An error answer always fits.
            let _ = self.complete(id, call, Err(error));
        }
        self.state = ClientState::Closed;
    }

    /// The next frame to send (one line without its newline).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.peer.poll_transmit()
    }

    /// The next completed call.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    fn drain_peer(&mut self, how: Completion) -> Result<(), ProtocolError> {
        let mut first_error = None;
        while let Some(ev) = self.peer.poll_event() {
            let outcome = match ev {
                Event::Response { id, result, .. } => self.on_response(id, result, how),
                Event::Request { id, method, .. } => {
                    let error = ErrorObject::new(
                        codes::UNKNOWN_METHOD,
                        "orchard hosts do not answer requests",
                    );
                    let _ = self.peer.respond(id.clone(), Err(error));
                    Err(ProtocolError::Unexpected {
                        state: self.state.name(),
                        got: format!("request {method:?} (id {id}) from the provider"),
                    })
                }
                Event::Notification { method, .. } => Err(ProtocolError::Unexpected {
                    state: self.state.name(),
                    got: format!("notification {method:?} from the provider"),
                }),
            };
            if let Err(e) = outcome {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn on_response(
        &mut self,
        id: Id,
        result: Result<Value, ErrorObject>,
        how: Completion,
    ) -> Result<(), ProtocolError> {
        let Some(call) = self.calls.remove(&id) else {
            // Every peer request is recorded in `calls`; nothing else can answer.
            return Err(ProtocolError::UnknownResponseId { id: id.to_string() });
        };
        let answer = match how {
            Completion::TimedOut => Err(CallError::TimedOut {
                method: call.method,
                timeout: call.timeout.unwrap_or_default(),
            }),
            Completion::Answer => result.map_err(|e| CallError::Provider(e.into())),
        };
        self.complete(id, call, answer).map_or(Ok(()), Err)
    }

    /// Turn an answer into its event and advance the state; returns the protocol error of an
    /// answer that did not fit.
    fn complete(
        &mut self,
        id: Id,
        call: Call,
        answer: Result<Value, CallError>,
    ) -> Option<ProtocolError> {
        let mut bad = None;
        let event = match call.method {
            Method::Describe => {
                let result = answer.and_then(|v| checked(parse_describe(v), &mut bad));
                match &result {
                    Ok(schema) => {
                        self.schema = Some(schema.clone());
                        self.advance(ClientState::Describing, ClientState::Described);
                    }
                    Err(_) => self.state = ClientState::Closed,
                }
                ClientEvent::Described { id, result }
            }
            Method::Configure => {
                let result =
                    answer.and_then(|v| checked(parse_empty("configure result", v), &mut bad));
                let next = if result.is_ok() {
                    ClientState::Configured
                } else {
                    ClientState::Described
                };
                self.advance(ClientState::Configuring, next);
                ClientEvent::Configured { id, result }
            }
            Method::Execute => ClientEvent::Executed {
                id,
                action: call.action,
                result: answer.and_then(|v| checked(parse_execute(v), &mut bad)),
            },
            Method::Shutdown => {
                self.state = ClientState::Closed;
                let result =
                    answer.and_then(|v| checked(parse_empty("shutdown result", v), &mut bad));
                ClientEvent::ShutDown { id, result }
            }
        };
        self.events.push_back(event);
        bad
    }

    fn advance(&mut self, from: ClientState, to: ClientState) {
        if self.state == from {
            self.state = to;
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Completion {
    Answer,
    TimedOut,
}

/// Keep a copy of a payload error for `handle_frame` to return.
fn checked<T>(
    r: Result<T, ProtocolError>,
    bad: &mut Option<ProtocolError>,
) -> Result<T, CallError> {
    r.map_err(|e| {
        *bad = Some(e.clone());
        CallError::Protocol(e)
    })
}

fn result_object(what: &'static str, result: Value) -> Result<Map<String, Value>, ProtocolError> {
    match result {
        Value::Object(obj) => Ok(obj),
        other => Err(ProtocolError::BadPayload {
            what,
            reason: format!("expected an object, got {other}"),
        }),
    }
}

fn parse_describe(result: Value) -> Result<ProviderSchema, ProtocolError> {
    let schema = result_object("describe result", result)?
        .remove("schema")
        .ok_or(ProtocolError::BadPayload {
            what: "describe result",
            reason: "no schema member".into(),
        })?;
    parse_schema(schema)
}

fn parse_execute(result: Value) -> Result<Value, ProtocolError> {
    result_object("execute result", result)?
        .remove("outputs")
        .ok_or(ProtocolError::BadPayload {
            what: "execute result",
            reason: "no outputs member".into(),
        })
}

/// `configure` and `shutdown` answer `{}`; extra members are tolerated.
fn parse_empty(what: &'static str, result: Value) -> Result<(), ProtocolError> {
    result_object(what, result).map(drop)
}

fn parse_schema(value: Value) -> Result<ProviderSchema, ProtocolError> {
    let schema: ProviderSchema =
        serde_json::from_value(value).map_err(|e| ProtocolError::BadPayload {
            what: "schema",
            reason: e.to_string(),
        })?;
    schema.check_protocol()?;
    Ok(schema)
}

/// Plan mode: parse what `<binary> schema` printed. It must be exactly one line of JSON (a
/// final `\n` or `\r\n` is optional) holding a [`ProviderSchema`] for protocol `"1"`.
pub fn parse_schema_output(stdout: &[u8]) -> Result<ProviderSchema, ProtocolError> {
    let line = stdout.strip_suffix(b"\n").unwrap_or(stdout);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Err(ProtocolError::BadPayload {
            what: "schema output",
            reason: "empty".into(),
        });
    }
    if let Some(n) = line.iter().position(|&b| b == b'\n') {
        return Err(ProtocolError::BadPayload {
            what: "schema output",
            reason: format!("expected one line, found a line break at byte {n}"),
        });
    }
    let value: Value = serde_json::from_slice(line).map_err(|e| ProtocolError::BadPayload {
        what: "schema output",
        reason: format!("not JSON: {e}"),
    })?;
    parse_schema(value)
}

/// Plan mode: the bytes `<binary> schema` prints — the schema as one JSON line with `\n`.
pub fn encode_schema_output(schema: &ProviderSchema) -> Vec<u8> {
    // A struct of strings, maps and JSON values always serializes.
    let mut out = serde_json::to_vec(schema).unwrap_or_default();
    out.push(b'\n');
    out
}

/// The provider side of the protocol.
#[derive(Debug)]
pub struct Server {
    peer: Peer,
    requests: BTreeMap<Id, Method>,
    shutdown: ShutdownState,
    events: VecDeque<ServerEvent>,
    /// Frames to send, in order: the peer's answers and this machine's own error replies.
    raw: VecDeque<Vec<u8>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShutdownState {
    Running,
    Requested,
    Answered,
}

impl Default for Server {
    fn default() -> Self {
        Self::new()
    }
}

impl Server {
    /// A provider waiting for `describe`.
    pub fn new() -> Self {
        Self {
            peer: Peer::new(Dialect::Orchard),
            requests: BTreeMap::new(),
            shutdown: ShutdownState::Running,
            events: VecDeque::new(),
            raw: VecDeque::new(),
        }
    }

    /// True once `shutdown` has been answered: the provider should exit.
    pub fn is_shut_down(&self) -> bool {
        self.shutdown == ShutdownState::Answered
    }

    /// Requests received and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.requests.len()
    }

    /// Feed one frame (one line, without its newline) from the host.
    ///
    /// Frames that are not requests of the protocol are answered here: undecodable or with
    /// bad params → `invalid_request`, an unknown method → `unknown_method`, anything after
    /// `shutdown` → `invalid_request`. Undecodable frames and notifications also return the
    /// [`ProtocolError`] so the caller can log it.
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        let msg = match Message::decode(frame, Dialect::Orchard) {
            Ok(msg) => msg,
            Err(e) => {
                let reason = match &e {
                    ProtocolError::NotJson { .. } => "not JSON",
                    ProtocolError::Invalid { reason, .. } => reason,
                    _ => "cannot be decoded",
                };
                let error =
                    ErrorObject::new(codes::INVALID_REQUEST, format!("invalid request: {reason}"));
                let reply = Message::response(salvage_id(frame), Err(error));
                // Bypasses the peer: it only answers requests it has decoded.
                self.queue_raw(reply);
                return Err(e);
            }
        };
        self.peer.handle_message(msg)?;
        let mut first_error = None;
        while let Some(ev) = self.peer.poll_event() {
            if let Err(e) = self.on_peer_event(ev) {
                first_error.get_or_insert(e);
            }
        }
        self.flush_peer();
        first_error.map_or(Ok(()), Err)
    }

    /// Answer a frame the framer could not deliver (not JSON, too large) with
    /// `invalid_request` and id `null`; the caller then usually stops, as the stream is lost.
    pub fn reject_frame(&mut self, reason: &str) {
        let error = ErrorObject::new(codes::INVALID_REQUEST, format!("invalid request: {reason}"));
        self.queue_raw(Message::response(Id::Null, Err(error)));
    }

    fn queue_raw(&mut self, msg: Message) {
        self.raw.push_back(msg.encode(Dialect::Orchard));
    }

    fn on_peer_event(&mut self, ev: Event) -> Result<(), ProtocolError> {
        match ev {
            Event::Request { id, method, params } => {
                self.on_request(id, &method, params);
                Ok(())
            }
            Event::Notification { method, .. } => Err(ProtocolError::Unexpected {
                state: "serving",
                got: format!("notification {method:?}"),
            }),
            Event::Response { id, .. } => {
                Err(ProtocolError::UnknownResponseId { id: id.to_string() })
            }
        }
    }

    fn on_request(&mut self, id: Id, method: &str, params: Option<Value>) {
        let reject = |this: &mut Self, code: &str, message: String| {
            // The id came from this request, so the peer awaits an answer to it.
            let _ = this
                .peer
                .respond(id.clone(), Err(ErrorObject::new(code, message)));
        };
        if self.shutdown != ShutdownState::Running {
            return reject(
                self,
                codes::INVALID_REQUEST,
                format!("{method} after shutdown"),
            );
        }
        let Some(m) = Method::from_name(method) else {
            return reject(
                self,
                codes::UNKNOWN_METHOD,
                format!("unknown method: {method}"),
            );
        };
        let params = match params {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p,
            Some(_) => {
                return reject(
                    self,
                    codes::INVALID_REQUEST,
                    format!("{method} params must be an object"),
                );
            }
        };
        let event = match m {
            Method::Describe => ServerEvent::Describe { id: id.clone() },
            Method::Configure => ServerEvent::Configure {
                id: id.clone(),
                config: params.get("config").cloned().unwrap_or(json!({})),
            },
            Method::Execute => {
                let Some(Value::String(action)) = params.get("action") else {
                    return reject(
                        self,
                        codes::INVALID_REQUEST,
                        "execute needs a string action".into(),
                    );
                };
                ServerEvent::Execute {
                    id: id.clone(),
                    action: action.clone(),
                    attrs: params.get("attrs").cloned().unwrap_or(json!({})),
                }
            }
            Method::Shutdown => {
                self.shutdown = ShutdownState::Requested;
                ServerEvent::Shutdown { id: id.clone() }
            }
        };
        self.requests.insert(id, m);
        self.events.push_back(event);
    }

    fn respond(
        &mut self,
        id: Id,
        method: Method,
        result: Result<Value, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        match self.requests.get(&id) {
            Some(m) if *m == method => {}
            Some(m) => {
                return Err(ProtocolError::Unexpected {
                    state: "answering",
                    got: format!("{method} answer to {m} request (id {id})"),
                });
            }
            None => return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() }),
        }
        self.requests.remove(&id);
        self.peer.respond(id, result)?;
        self.flush_peer();
        Ok(())
    }

    /// Answer `describe` with `{schema}`.
    pub fn respond_describe(
        &mut self,
        id: Id,
        schema: &ProviderSchema,
    ) -> Result<(), ProtocolError> {
        let schema = serde_json::to_value(schema).map_err(|e| ProtocolError::BadPayload {
            what: "schema",
            reason: e.to_string(),
        })?;
        self.respond(id, Method::Describe, Ok(json!({ "schema": schema })))
    }

    /// Answer `configure` with `{}` or an error.
    pub fn respond_configure(
        &mut self,
        id: Id,
        result: Result<(), ProviderError>,
    ) -> Result<(), ProtocolError> {
        let result = result.map(|()| json!({})).map_err(ErrorObject::from);
        self.respond(id, Method::Configure, result)
    }

    /// Answer `execute` with `{outputs}` or an error.
    pub fn respond_execute(
        &mut self,
        id: Id,
        result: Result<Value, ProviderError>,
    ) -> Result<(), ProtocolError> {
        let result = result
            .map(|outputs| json!({ "outputs": outputs }))
            .map_err(ErrorObject::from);
        self.respond(id, Method::Execute, result)
    }

    /// Answer `shutdown` with `{}`; afterwards [`Server::is_shut_down`] is true.
    pub fn respond_shutdown(&mut self, id: Id) -> Result<(), ProtocolError> {
        self.respond(id, Method::Shutdown, Ok(json!({})))?;
        self.shutdown = ShutdownState::Answered;
        Ok(())
    }

    /// Answer any request with an error.
    pub fn respond_error(&mut self, id: Id, error: ProviderError) -> Result<(), ProtocolError> {
        let method = self
            .requests
            .get(&id)
            .copied()
            .ok_or_else(|| ProtocolError::NotAwaitingResponse { id: id.to_string() })?;
        self.respond(id, method, Err(error.into()))?;
        if method == Method::Shutdown {
            self.shutdown = ShutdownState::Answered;
        }
        Ok(())
    }

    fn flush_peer(&mut self) {
        while let Some(frame) = self.peer.poll_transmit() {
            self.raw.push_back(frame);
        }
    }

    /// The next frame to send (one line without its newline).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.flush_peer();
        self.raw.pop_front()
    }

    /// The next request to answer.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }
}

/// The id of an undecodable request, if it has a readable one, so the error can name it.
fn salvage_id(frame: &[u8]) -> Id {
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(frame) else {
        return Id::Null;
    };
    match obj.get("id") {
        Some(Value::Number(n)) => n.as_i64().map_or(Id::Null, Id::Num),
        Some(Value::String(s)) => Id::Str(s.clone()),
        _ => Id::Null,
    }
}

/// Orchard under the supervisor (`crate::supervise`): `describe` and `configure` are the
/// handshake replayed to a fresh instance; every other request is budgeted, and a runaway
/// `execute` fails with `execute_failed`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Supervised;

impl crate::supervise::SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> crate::supervise::FromEngine {
        crate::jsonrpc::classify_engine(frame, &["describe", "configure"])
    }
    fn classify_plugin(&self, frame: &[u8]) -> crate::supervise::FromPlugin {
        crate::jsonrpc::classify_plugin(frame, &[])
    }
    fn stopped_answer(&self, key: &str, method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        let error = stopped_error(method.and_then(Method::from_name), stopped).into();
        crate::jsonrpc::error_answer(key, Dialect::Orchard, error)
    }
}

/// An answer that does not fit (an execute result without `outputs`, a schema of another
/// protocol version) completes its call with `CallError::Protocol`; the provider runs on.
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
        Client::handle_timeout(self, now);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Client::poll_timeout(self)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        Client::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<ClientEvent> {
        Client::poll_event(self)
    }
    fn completes(event: &ClientEvent) -> Option<&Id> {
        use ClientEvent as E;
        match event {
            E::Described { id, .. }
            | E::Configured { id, .. }
            | E::Executed { id, .. }
            | E::ShutDown { id, .. } => Some(id),
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        Client::fail_pending(self, stopped);
    }
}

crate::machine::server_machine!(Server => ServerEvent, ProtocolError);

#[cfg(test)]
mod tests;
