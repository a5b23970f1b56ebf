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

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
pub use serde_json;
pub use serde_json::Value;
use serde_json::{Map, json};
use thiserror::Error;

use crate::jsonrpc::{Dialect, ErrorCode, ErrorObject, Event, Id, Message, Peer, ProtocolError};
use crate::stopped::Stopped;

/// The only protocol version there is; a schema advertising anything else is refused.
pub const PROTOCOL_VERSION: &str = "1";

/// How long real Orchard waits for the answer to `describe` before killing the provider.
pub const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The argument that selects plan mode: `<binary> schema`.
pub const SCHEMA_SUBCOMMAND: &str = "schema";

/// The well-known error codes. Providers may send others; Orchard treats those as generic
/// failures.
pub mod codes {
    /// The request is malformed or cannot be decoded.
    pub const INVALID_REQUEST: &str = "invalid_request";
    /// The provider does not recognize the method.
    pub const UNKNOWN_METHOD: &str = "unknown_method";
    /// `execute` named an action that is not in the schema.
    pub const UNKNOWN_ACTION: &str = "unknown_action";
    /// Action attributes failed the provider's validation.
    pub const VALIDATION_FAILED: &str = "validation_failed";
    /// `configure` failed.
    pub const CONFIGURE_FAILED: &str = "configure_failed";
    /// `execute` failed while running the action.
    pub const EXECUTE_FAILED: &str = "execute_failed";
    /// A provider-side bug or unexpected condition.
    pub const INTERNAL_ERROR: &str = "internal_error";
}

/// What a provider declares about itself: the answer to `describe` and the output of
/// `<binary> schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderSchema {
    /// The provider's name.
    pub name: String,
    /// The protocol version; must be [`PROTOCOL_VERSION`].
    pub protocol: String,
    /// The actions `execute` accepts, by name (sorted, like Go's map encoding). Read from
    /// an object keyed by name or from a list of objects with a `name` member; written as an
    /// object.
    #[serde(default, deserialize_with = "actions_map_or_list")]
    pub actions: BTreeMap<String, ActionSchema>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ProviderSchema {
    /// A schema for protocol [`PROTOCOL_VERSION`] with no actions.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            protocol: PROTOCOL_VERSION.to_owned(),
            actions: BTreeMap::new(),
            extra: Map::new(),
        }
    }

    /// Add an action.
    pub fn with_action(mut self, name: impl Into<String>, action: ActionSchema) -> Self {
        self.actions.insert(name.into(), action);
        self
    }

    /// [`ProtocolError::BadPayload`] unless `protocol` is [`PROTOCOL_VERSION`].
    pub fn check_protocol(&self) -> Result<(), ProtocolError> {
        if self.protocol == PROTOCOL_VERSION {
            return Ok(());
        }
        Err(ProtocolError::BadPayload {
            what: "schema.protocol",
            reason: format!("expected {PROTOCOL_VERSION:?}, got {:?}", self.protocol),
        })
    }
}

fn actions_map_or_list<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, ActionSchema>, D::Error> {
    use serde::de::Error;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Actions {
        Map(BTreeMap<String, ActionSchema>),
        List(Vec<Map<String, Value>>),
    }
    match Actions::deserialize(d)? {
        Actions::Map(m) => Ok(m),
        Actions::List(list) => {
            let mut out = BTreeMap::new();
            for mut item in list {
                let Some(Value::String(name)) = item.remove("name") else {
                    return Err(D::Error::custom("an action in the list has no string name"));
                };
                let action =
                    serde_json::from_value(Value::Object(item)).map_err(D::Error::custom)?;
                if out.insert(name.clone(), action).is_some() {
                    return Err(D::Error::custom(format!("action {name:?} is listed twice")));
                }
            }
            Ok(out)
        }
    }
}

/// One action of a [`ProviderSchema`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ActionSchema {
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its attributes, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, AttributeSchema>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ActionSchema {
    /// An action with a description and no attributes.
    pub fn new(description: impl Into<String>) -> Self {
        Self {
            description: Some(description.into()),
            ..Self::default()
        }
    }

    /// Add an attribute.
    pub fn with_attribute(mut self, name: impl Into<String>, attr: AttributeSchema) -> Self {
        self.attributes.insert(name.into(), attr);
        self
    }
}

/// One attribute of an [`ActionSchema`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttributeSchema {
    /// Its type, as the provider names it (`"string"`, `"list(number)"`, …).
    #[serde(rename = "type")]
    pub ty: String,
    /// Whether `execute` must carry it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Every other member, kept as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AttributeSchema {
    /// An attribute of type `ty`.
    pub fn new(ty: impl Into<String>, required: bool) -> Self {
        Self {
            ty: ty.into(),
            required,
            description: None,
            extra: Map::new(),
        }
    }
}

/// An Orchard error object `{code, message, detail?}`, as a provider reports it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{code}: {message}")]
pub struct ProviderError {
    /// A well-known code from [`codes`] or a provider-specific one.
    pub code: String,
    /// A short human-readable message.
    pub message: String,
    /// A longer detail string.
    pub detail: Option<String>,
}

impl ProviderError {
    /// An error with `code` and `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            detail: None,
        }
    }

    /// Attach a detail string.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// `validation_failed`.
    pub fn validation_failed(message: impl Into<String>) -> Self {
        Self::new(codes::VALIDATION_FAILED, message)
    }

    /// `configure_failed`.
    pub fn configure_failed(message: impl Into<String>) -> Self {
        Self::new(codes::CONFIGURE_FAILED, message)
    }

    /// `execute_failed`.
    pub fn execute_failed(message: impl Into<String>) -> Self {
        Self::new(codes::EXECUTE_FAILED, message)
    }

    /// `internal_error`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, message)
    }
}

impl From<ProviderError> for ErrorObject {
    fn from(e: ProviderError) -> Self {
        ErrorObject {
            code: ErrorCode::Str(e.code),
            message: e.message,
            data: e.detail.map(Value::String),
        }
    }
}

impl From<ErrorObject> for ProviderError {
    /// Lenient: an integer code becomes its decimal text, a non-string detail its JSON text.
    fn from(e: ErrorObject) -> Self {
        ProviderError {
            code: match e.code {
                ErrorCode::Str(s) => s,
                ErrorCode::Int(n) => n.to_string(),
            },
            message: e.message,
            detail: e.data.map(|d| match d {
                Value::String(s) => s,
                other => other.to_string(),
            }),
        }
    }
}

/// The four methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method {
    /// `describe`.
    Describe,
    /// `configure`.
    Configure,
    /// `execute`.
    Execute,
    /// `shutdown`.
    Shutdown,
}

impl Method {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Describe => "describe",
            Method::Configure => "configure",
            Method::Execute => "execute",
            Method::Shutdown => "shutdown",
        }
    }

    /// The method named `name`, if it is one of the four.
    pub fn from_name(name: &str) -> Option<Method> {
        match name {
            "describe" => Some(Method::Describe),
            "configure" => Some(Method::Configure),
            "execute" => Some(Method::Execute),
            "shutdown" => Some(Method::Shutdown),
            _ => None,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer to a call the provider will never answer: `execute_failed` for an `execute`,
/// `internal_error` otherwise (and when the method is not known), the reason as message and
/// the stderr tail, joined with newlines, as detail.
pub fn stopped_error(method: Option<Method>, stopped: &Stopped) -> ProviderError {
    let code = match method {
        Some(Method::Execute) => codes::EXECUTE_FAILED,
        _ => codes::INTERNAL_ERROR,
    };
    ProviderError::new(code, stopped.reason.clone()).with_detail(stopped.stderr_tail.join("\n"))
}

/// Orchard under the supervisor (`crate::supervise`): `describe` and `configure` are the
/// handshake replayed to a fresh instance; every other request is budgeted, and a runaway
/// `execute` fails with `execute_failed`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Supervised;

impl crate::supervise::SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> crate::supervise::FromEngine {
        crate::supervise::classify_jsonrpc_engine(frame, &["describe", "configure"])
    }
    fn classify_plugin(&self, frame: &[u8]) -> crate::supervise::FromPlugin {
        crate::supervise::classify_jsonrpc_plugin(frame, &[])
    }
    fn stopped_answer(&self, key: &str, method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        let error = stopped_error(method.and_then(Method::from_name), stopped).into();
        crate::supervise::jsonrpc_error_answer(key, Dialect::Orchard, error)
    }
}

/// Why a call did not produce its result.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum CallError {
    /// The provider answered with an error object (or [`Client::fail_pending`] made one).
    #[error("provider error {0}")]
    Provider(ProviderError),
    /// No answer before the deadline (see [`Client::handle_timeout`]).
    #[error("{method} not answered within {timeout:?}")]
    TimedOut {
        /// The method.
        method: Method,
        /// The time allowed.
        timeout: Duration,
    },
    /// The answer does not fit the protocol; [`Client::handle_frame`] returned the same error.
    #[error("{0}")]
    Protocol(ProtocolError),
}

/// A completed call, in the order the answers arrived.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// `describe` finished; on success the schema's protocol is [`PROTOCOL_VERSION`].
    Described {
        /// The request id.
        id: Id,
        /// The schema.
        result: Result<ProviderSchema, CallError>,
    },
    /// `configure` finished.
    Configured {
        /// The request id.
        id: Id,
        /// `Ok` when the provider accepted the config.
        result: Result<(), CallError>,
    },
    /// An `execute` finished.
    Executed {
        /// The request id.
        id: Id,
        /// The action that was executed.
        action: String,
        /// The `outputs` member of the result.
        result: Result<Value, CallError>,
    },
    /// `shutdown` finished; the client is closed.
    ShutDown {
        /// The request id.
        id: Id,
        /// `Ok` when the provider acknowledged it.
        result: Result<(), CallError>,
    },
}

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

/// A request the provider must answer (with the matching `respond_*` call).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// Answer with [`Server::respond_describe`].
    Describe {
        /// The request id.
        id: Id,
    },
    /// Answer with [`Server::respond_configure`].
    Configure {
        /// The request id.
        id: Id,
        /// `params.config` (`{}` when absent).
        config: Value,
    },
    /// Answer with [`Server::respond_execute`].
    Execute {
        /// The request id.
        id: Id,
        /// `params.action`.
        action: String,
        /// `params.attrs` (`{}` when absent).
        attrs: Value,
    },
    /// Answer with [`Server::respond_shutdown`], then stop.
    Shutdown {
        /// The request id.
        id: Id,
    },
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

/// Fuzz body (for the `machine_orchard` cargo-fuzz target and the unit tests). Each line of
/// `data` is one frame; `epoch` is any instant (deadlines are offsets from it, so the outcome
/// does not depend on it).
///
/// Properties, besides never panicking:
/// - plan mode: a line that [`parse_schema_output`] accepts encodes with
///   [`encode_schema_output`] to output that parses to the same schema and re-encodes to the
///   same bytes;
/// - host side: the lines are the provider's answers. The client describes, then configures,
///   executes (up to three at once) and shuts down whenever its state allows; every call
///   completes exactly once, with its own id, method and action, counting a timeout of
///   `describe` and [`Client::fail_pending`] at the end; a described schema is protocol `"1"`
///   and reaches another host unchanged through [`Server::respond_describe`]; every frame sent
///   is an Orchard request;
/// - provider side: the lines are the host's frames. Every request (and every undecodable
///   frame) gets exactly one answer with its id, whether the caller answers the event or the
///   machine answers for it; notifications and responses get none.
pub fn fuzz(epoch: Instant, data: &[u8]) {
    let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    for line in &lines {
        fuzz_schema_output(line);
    }
    fuzz_client(epoch, &lines);
    fuzz_server(&lines);
}

fn fuzz_schema_output(line: &[u8]) {
    let Ok(schema) = parse_schema_output(line) else {
        return;
    };
    let out = encode_schema_output(&schema);
    let again = parse_schema_output(&out).expect("encoded schema output parses");
    assert_eq!(again, schema, "schema output round trip");
    assert_eq!(
        encode_schema_output(&again),
        out,
        "schema output is canonical"
    );
}

/// The schema a provider declares reaches a host unchanged.
fn fuzz_schema_in_transit(epoch: Instant, schema: &ProviderSchema) {
    let mut host = Client::new();
    let mut provider = Server::new();
    host.describe(epoch, DESCRIBE_TIMEOUT)
        .expect("a new client describes");
    let frame = host.poll_transmit().expect("describe is sent");
    provider.handle_frame(&frame).expect("describe is valid");
    let Some(ServerEvent::Describe { id }) = provider.poll_event() else {
        panic!("no describe event");
    };
    provider
        .respond_describe(id, schema)
        .expect("describe is answerable");
    let frame = provider.poll_transmit().expect("the answer is sent");
    host.handle_frame(&frame).expect("the answer is valid");
    match host.poll_event() {
        Some(ClientEvent::Described {
            result: Ok(got), ..
        }) => {
            assert_eq!(&got, schema, "schema in transit")
        }
        other => panic!("describe answer: {other:?}"),
    }
}

/// What the fuzzed client sent and has not seen completed: id → (method, action).
type Calls = BTreeMap<Id, (Method, String)>;

fn client_events(epoch: Instant, client: &mut Client, calls: &mut Calls, completed: &mut usize) {
    while let Some(event) = client.poll_event() {
        let (id, method, action) = match &event {
            ClientEvent::Described { id, result } => {
                if let Ok(schema) = result {
                    assert_eq!(schema.protocol, PROTOCOL_VERSION);
                    fuzz_schema_in_transit(epoch, schema);
                }
                (id, Method::Describe, "")
            }
            ClientEvent::Configured { id, .. } => (id, Method::Configure, ""),
            ClientEvent::Executed { id, action, .. } => (id, Method::Execute, action.as_str()),
            ClientEvent::ShutDown { id, .. } => {
                assert_eq!(client.state(), ClientState::Closed);
                (id, Method::Shutdown, "")
            }
        };
        let sent = calls.remove(id);
        assert_eq!(
            sent.as_ref().map(|(m, a)| (*m, a.as_str())),
            Some((method, action)),
            "outcome of call {id}"
        );
        *completed += 1;
    }
}

/// Every frame the client sends is one of the four requests, or the refusal of a request
/// from the provider.
fn client_frames(client: &mut Client) {
    while let Some(frame) = client.poll_transmit() {
        match Message::decode(&frame, Dialect::Orchard).expect("a valid frame") {
            Message::Request { method, .. } if Method::from_name(&method).is_some() => {}
            Message::Response { result: Err(e), .. }
                if e.code == ErrorCode::Str(codes::UNKNOWN_METHOD.into()) => {}
            other => panic!("the host sent {other:?}"),
        }
    }
}

fn fuzz_client(epoch: Instant, lines: &[&[u8]]) {
    let mut client = Client::new();
    let mut calls = Calls::new();
    let (mut issued, mut completed) = (0usize, 0usize);
    let id = client
        .describe(epoch, DESCRIBE_TIMEOUT)
        .expect("a new client describes");
    calls.insert(id, (Method::Describe, String::new()));
    issued += 1;
    for (i, line) in lines.iter().enumerate() {
        let _ = client.handle_frame(line);
        client_frames(&mut client);
        if line.len() % 7 == 3 {
            // Past the describe deadline.
            client.handle_timeout(epoch + DESCRIBE_TIMEOUT);
        }
        client_events(epoch, &mut client, &mut calls, &mut completed);
        let describing = calls.values().any(|(m, _)| *m == Method::Describe);
        let want_timer = describing.then(|| epoch + DESCRIBE_TIMEOUT);
        assert_eq!(
            client.poll_timeout(),
            want_timer,
            "only describe has a deadline"
        );
        let action = String::from_utf8_lossy(&line[..line.len().min(6)]).into_owned();
        let sent = match client.state() {
            ClientState::Described if i % 4 == 3 => {
                client.shutdown().map(|id| (id, Method::Shutdown))
            }
            ClientState::Described => client
                .configure(json!({ "line": i }))
                .map(|id| (id, Method::Configure)),
            ClientState::Configured if i % 6 == 5 => {
                client.shutdown().map(|id| (id, Method::Shutdown))
            }
            ClientState::Configured if calls.len() < 3 => client
                .execute(&action, json!({ "line": i }))
                .map(|id| (id, Method::Execute)),
            ClientState::Closed => {
                assert!(client.execute("a", Value::Null).is_err());
                assert!(client.configure(Value::Null).is_err());
                continue;
            }
            _ => continue,
        };
        let (id, method) = sent.expect("the state allows this call");
        let action = if method == Method::Execute {
            action
        } else {
            String::new()
        };
        assert!(
            calls.insert(id.clone(), (method, action)).is_none(),
            "id {id} reused while in flight"
        );
        issued += 1;
        client_frames(&mut client);
    }
    client.fail_pending(&Stopped::by_host(
        "provider exited",
        vec!["tail".to_owned()],
    ));
    client_events(epoch, &mut client, &mut calls, &mut completed);
    assert!(calls.is_empty(), "calls without an outcome: {calls:?}");
    assert_eq!(issued, completed, "every call completes exactly once");
    assert_eq!(client.state(), ClientState::Closed);
    assert_eq!(client.poll_timeout(), None);
}

fn fuzz_server(lines: &[&[u8]]) {
    let mut server = Server::new();
    for (i, line) in lines.iter().enumerate() {
        let want_reply = match Message::decode(line, Dialect::Orchard) {
            Ok(Message::Request { id, .. }) => Some(id),
            Ok(_) => None,
            Err(_) => Some(salvage_id(line)),
        };
        let _ = server.handle_frame(line);
        while let Some(event) = server.poll_event() {
            let (id, answer) = match event {
                ServerEvent::Describe { id } => {
                    let schema = ProviderSchema::new("fuzz");
                    let r = server.respond_describe(id.clone(), &schema);
                    (id, r)
                }
                ServerEvent::Configure { id, .. } if i % 2 == 0 => {
                    let r = server.respond_configure(id.clone(), Ok(()));
                    (id, r)
                }
                ServerEvent::Configure { id, .. } => {
                    let error = ProviderError::configure_failed("no").with_detail("line");
                    let r = server.respond_configure(id.clone(), Err(error));
                    (id, r)
                }
                ServerEvent::Execute { id, attrs, .. } => {
                    let r = server.respond_execute(id.clone(), Ok(attrs));
                    (id, r)
                }
                ServerEvent::Shutdown { id } => {
                    let r = server.respond_shutdown(id.clone());
                    assert!(server.is_shut_down());
                    (id, r)
                }
            };
            assert_eq!(answer, Ok(()), "answering request {id}");
            let twice = server.respond_error(id.clone(), ProviderError::internal("twice"));
            assert_eq!(
                twice,
                Err(ProtocolError::NotAwaitingResponse { id: id.to_string() })
            );
        }
        assert_eq!(server.in_flight(), 0);
        let replies: Vec<Message> = std::iter::from_fn(|| server.poll_transmit())
            .map(|frame| Message::decode(&frame, Dialect::Orchard).expect("a valid frame"))
            .collect();
        match (&want_reply, &replies[..]) {
            (None, []) => {}
            (Some(want), [Message::Response { id, .. }]) if id == want => {}
            _ => panic!(
                "frame {:?}: replies {replies:?}, want one for {want_reply:?}",
                String::from_utf8_lossy(line)
            ),
        }
    }
}

/// Structure-aware fuzz body (for the `pair_orchard` cargo-fuzz target and the unit tests): a
/// [`Client`] wired to a [`Server`] in memory, driven by operations read from `data` — calls
/// in any state (refused unless the lifecycle allows them), delivery of the next frame either
/// way, the provider answering its open requests in any order (results or errors), time
/// passing the `describe` deadline, and the provider dying ([`Client::fail_pending`]).
///
/// Properties: a call is accepted exactly when the lifecycle allows it; every frame one
/// machine sends, the other accepts; each accepted call has exactly one outcome, and it is
/// the one the provider sent (schema, outputs, or error, unchanged) unless it timed out or
/// the provider died; the timer is the pending `describe`'s deadline; and a pair that
/// delivers everything and answers everything ends with no call outstanding.
pub fn fuzz_pair(epoch: Instant, data: &[u8]) {
    let mut input = crate::fuzz::Choices::new(data);
    let mut pair = Pair::new(epoch);
    while !input.is_empty() {
        match input.byte() % 9 {
            0 => {
                let timeout = Duration::from_millis(u64::from(input.byte()) * 20);
                let allowed = pair.host.state() == ClientState::Start;
                let sent = pair.host.describe(pair.now, timeout);
                pair.sent(sent, allowed, Method::Describe, String::new());
            }
            1 => {
                let allowed = pair.host.state() == ClientState::Described;
                let sent = pair.host.configure(json!({ "k": input.byte() }));
                pair.sent(sent, allowed, Method::Configure, String::new());
            }
            2 => {
                let allowed = pair.host.state() == ClientState::Configured;
                let action = ["echo", "", "x"][input.below(3)];
                let sent = pair.host.execute(action, json!([input.byte()]));
                pair.sent(sent, allowed, Method::Execute, action.to_owned());
            }
            3 => {
                let allowed = matches!(
                    pair.host.state(),
                    ClientState::Described | ClientState::Configured
                );
                let sent = pair.host.shutdown();
                pair.sent(sent, allowed, Method::Shutdown, String::new());
            }
            4 => pair.deliver_to_provider(),
            5 => pair.deliver_to_host(),
            6 => {
                let k = input.below(pair.open.len());
                let ok = input.byte() & 1 == 0;
                pair.answer(k, ok);
            }
            7 => {
                pair.now += Duration::from_millis(u64::from(input.byte()) * 20);
                pair.host.handle_timeout(pair.now);
                pair.check();
            }
            _ => {
                pair.dead = true;
                pair.host
                    .fail_pending(&Stopped::by_host("provider exited", Vec::new()));
                pair.check();
                assert!(pair.calls.is_empty(), "fail_pending left calls open");
                assert_eq!(pair.host.state(), ClientState::Closed);
                return;
            }
        }
    }
    // Deliver everything and answer everything until nothing moves.
    loop {
        let before = (
            pair.wire_to_provider.len(),
            pair.wire_to_host.len(),
            pair.open.len(),
        );
        while !pair.wire_to_provider.is_empty() {
            pair.deliver_to_provider();
        }
        while !pair.open.is_empty() {
            pair.answer(0, true);
        }
        while !pair.wire_to_host.is_empty() {
            pair.deliver_to_host();
        }
        if before == (0, 0, 0) {
            break;
        }
    }
    assert!(
        pair.calls.is_empty(),
        "calls left open by a live, answering provider: {:?}",
        pair.calls
    );
    assert_eq!(pair.host.poll_timeout(), None);
}

/// The outcome a call must have, once the provider has answered it.
#[derive(Debug)]
enum Expect {
    Described(ProviderSchema),
    Ok(Value),
    Failed(ProviderError),
}

/// The state of [`fuzz_pair`].
struct Pair {
    host: Client,
    provider: Server,
    now: Instant,
    wire_to_provider: VecDeque<Vec<u8>>,
    wire_to_host: VecDeque<Vec<u8>>,
    /// Requests the provider has received and not answered, in arrival order.
    open: Vec<ServerEvent>,
    /// Calls without an outcome: id → (method, action, deadline).
    calls: BTreeMap<Id, (Method, String, Option<Instant>)>,
    /// What the provider answered, by id, until the host sees it.
    answers: BTreeMap<Id, Expect>,
    /// The provider died: answers still on the wire never arrive.
    dead: bool,
}

impl Pair {
    fn new(now: Instant) -> Self {
        Self {
            host: Client::new(),
            provider: Server::new(),
            now,
            wire_to_provider: VecDeque::new(),
            wire_to_host: VecDeque::new(),
            open: Vec::new(),
            calls: BTreeMap::new(),
            answers: BTreeMap::new(),
            dead: false,
        }
    }

    fn sent(
        &mut self,
        sent: Result<Id, ProtocolError>,
        allowed: bool,
        method: Method,
        action: String,
    ) {
        match sent {
            Ok(id) => {
                assert!(allowed, "{method} accepted in the wrong state");
                let deadline = self
                    .host
                    .poll_timeout()
                    .filter(|_| method == Method::Describe);
                let fresh = self.calls.insert(id.clone(), (method, action, deadline));
                assert!(fresh.is_none(), "id {id} reused while in flight");
            }
            Err(e) => {
                assert!(!allowed, "{method} refused in a state that allows it: {e}");
                assert!(matches!(e, ProtocolError::Unexpected { .. }));
            }
        }
        self.check();
    }

    fn deliver_to_provider(&mut self) {
        let Some(frame) = self.wire_to_provider.pop_front() else {
            return;
        };
        assert_eq!(self.provider.handle_frame(&frame), Ok(()), "a host frame");
        self.open
            .extend(std::iter::from_fn(|| self.provider.poll_event()));
        self.check();
    }

    fn deliver_to_host(&mut self) {
        let Some(frame) = self.wire_to_host.pop_front() else {
            return;
        };
        assert_eq!(self.host.handle_frame(&frame), Ok(()), "a provider frame");
        self.check();
    }

    fn answer(&mut self, k: usize, ok: bool) {
        if self.open.is_empty() {
            return;
        }
        let event = self.open.remove(k);
        let error = ProviderError::new(codes::EXECUTE_FAILED, "no").with_detail("why");
        let (id, result, expect) = match event {
            ServerEvent::Describe { id } => {
                let schema =
                    ProviderSchema::new("fuzz").with_action("echo", ActionSchema::new("echo"));
                let r = self.provider.respond_describe(id.clone(), &schema);
                (id, r, Expect::Described(schema))
            }
            ServerEvent::Configure { id, config } if ok => {
                let r = self.provider.respond_configure(id.clone(), Ok(()));
                assert!(config.get("k").is_some(), "config arrives: {config}");
                (id, r, Expect::Ok(Value::Null))
            }
            ServerEvent::Execute { id, attrs, .. } if ok => {
                let r = self.provider.respond_execute(id.clone(), Ok(attrs.clone()));
                (id, r, Expect::Ok(attrs))
            }
            ServerEvent::Shutdown { id } => {
                let r = self.provider.respond_shutdown(id.clone());
                (id, r, Expect::Ok(Value::Null))
            }
            ServerEvent::Configure { id, .. } | ServerEvent::Execute { id, .. } => {
                let r = self.provider.respond_error(id.clone(), error.clone());
                (id, r, Expect::Failed(error))
            }
        };
        assert_eq!(result, Ok(()), "answering {id}");
        self.answers.insert(id, expect);
        self.check();
    }

    /// Move frames onto the wires and check every outcome the host reports.
    fn check(&mut self) {
        self.wire_to_provider
            .extend(std::iter::from_fn(|| self.host.poll_transmit()));
        self.wire_to_host
            .extend(std::iter::from_fn(|| self.provider.poll_transmit()));
        while let Some(event) = self.host.poll_event() {
            let id = match &event {
                ClientEvent::Described { id, .. }
                | ClientEvent::Configured { id, .. }
                | ClientEvent::Executed { id, .. }
                | ClientEvent::ShutDown { id, .. } => id.clone(),
            };
            let (method, action, _) = self
                .calls
                .remove(&id)
                .unwrap_or_else(|| panic!("an outcome for {id}, which has none due: {event:?}"));
            let answer = self.answers.remove(&id).filter(|_| !self.dead);
            match (&event, answer) {
                // Timed out, or the provider died: a local outcome, whatever was answered.
                (
                    ClientEvent::Described {
                        result: Err(CallError::TimedOut { .. }),
                        ..
                    },
                    _,
                ) => assert_eq!(method, Method::Describe),
                (_, None) => {
                    let local = match &event {
                        ClientEvent::Described { result, .. } => result.as_ref().err(),
                        ClientEvent::Configured { result, .. }
                        | ClientEvent::ShutDown { result, .. } => result.as_ref().err(),
                        ClientEvent::Executed { result, .. } => result.as_ref().err(),
                    };
                    assert!(
                        matches!(local, Some(CallError::Provider(e)) if e.message == "provider exited"),
                        "an unanswered call completed with {event:?}"
                    );
                }
                (ClientEvent::Described { result, .. }, Some(Expect::Described(schema))) => {
                    assert_eq!(result.as_ref(), Ok(&schema))
                }
                (ClientEvent::Configured { result, .. }, Some(Expect::Ok(_)))
                | (ClientEvent::ShutDown { result, .. }, Some(Expect::Ok(_))) => {
                    assert_eq!(result, &Ok(()))
                }
                (ClientEvent::Configured { result, .. }, Some(Expect::Failed(e))) => {
                    assert_eq!(result, &Err(CallError::Provider(e)))
                }
                (
                    ClientEvent::Executed {
                        result,
                        action: got,
                        ..
                    },
                    Some(expect),
                ) => {
                    assert_eq!(got, &action);
                    match expect {
                        Expect::Ok(outputs) => assert_eq!(result, &Ok(outputs)),
                        Expect::Failed(e) => assert_eq!(result, &Err(CallError::Provider(e))),
                        Expect::Described(_) => panic!("a schema answered an execute"),
                    }
                }
                (event, answer) => panic!("{method} completed with {event:?}, sent {answer:?}"),
            }
        }
        let want = self.calls.values().filter_map(|(_, _, d)| *d).min();
        assert_eq!(
            self.host.poll_timeout(),
            want,
            "the timer is describe's deadline"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deliver everything the client has to send to the server.
    fn to_server(c: &mut Client, s: &mut Server) {
        while let Some(f) = c.poll_transmit() {
            s.handle_frame(&f).expect("valid request");
        }
    }

    /// Deliver everything the server has to send to the client.
    fn to_client(s: &mut Server, c: &mut Client) {
        while let Some(f) = s.poll_transmit() {
            c.handle_frame(&f).expect("valid answer");
        }
    }

    fn server_events(s: &mut Server) -> Vec<ServerEvent> {
        std::iter::from_fn(|| s.poll_event()).collect()
    }

    fn client_events(c: &mut Client) -> Vec<ClientEvent> {
        std::iter::from_fn(|| c.poll_event()).collect()
    }

    fn schema() -> ProviderSchema {
        ProviderSchema::new("demo").with_action(
            "echo",
            ActionSchema::new("echo attrs")
                .with_attribute("x", AttributeSchema::new("string", true)),
        )
    }

    /// A client and server through describe and configure.
    fn configured(t0: Instant) -> (Client, Server) {
        let mut c = Client::new();
        let mut s = Server::new();
        c.describe(t0, DESCRIBE_TIMEOUT).expect("start");
        to_server(&mut c, &mut s);
        let [ServerEvent::Describe { id }] = &server_events(&mut s)[..] else {
            panic!("no describe")
        };
        s.respond_describe(id.clone(), &schema()).expect("answer");
        to_client(&mut s, &mut c);
        c.configure(json!({"k": 1})).expect("described");
        to_server(&mut c, &mut s);
        let [ServerEvent::Configure { id, config }] = &server_events(&mut s)[..] else {
            panic!("no configure")
        };
        assert_eq!(config, &json!({"k": 1}));
        s.respond_configure(id.clone(), Ok(())).expect("answer");
        to_client(&mut s, &mut c);
        let evs = client_events(&mut c);
        assert!(
            matches!(
                &evs[..],
                [
                    ClientEvent::Described { result: Ok(_), .. },
                    ClientEvent::Configured { result: Ok(()), .. }
                ]
            ),
            "{evs:?}"
        );
        assert_eq!(c.state(), ClientState::Configured);
        (c, s)
    }

    #[test]
    fn full_lifecycle_with_answers_out_of_order() {
        let t0 = Instant::now();
        let mut c = Client::new();
        let mut s = Server::new();
        c.describe(t0, DESCRIBE_TIMEOUT).expect("start");
        assert_eq!(
            c.poll_transmit().expect("frame"),
            br#"{"id":1,"method":"describe","params":{}}"#
        );
        s.handle_frame(br#"{"id":1,"method":"describe","params":{}}"#)
            .expect("request");
        let [ServerEvent::Describe { id }] = &server_events(&mut s)[..] else {
            panic!()
        };
        s.respond_describe(id.clone(), &schema()).expect("answer");
        let answer = s.poll_transmit().expect("frame");
        assert_eq!(
            std::str::from_utf8(&answer).expect("utf8"),
            r#"{"id":1,"result":{"schema":{"name":"demo","protocol":"1","actions":{"echo":{"description":"echo attrs","attributes":{"x":{"type":"string","required":true}}}}}}}"#
        );
        c.handle_frame(&answer).expect("answer");
        assert_eq!(c.schema(), Some(&schema()));
        assert_eq!(c.state(), ClientState::Described);
        c.configure(json!({})).expect("described");
        to_server(&mut c, &mut s);
        let [ServerEvent::Configure { id, .. }] = &server_events(&mut s)[..] else {
            panic!()
        };
        s.respond_configure(id.clone(), Ok(())).expect("answer");
        to_client(&mut s, &mut c);
        let a = c.execute("echo", json!({"x": "a"})).expect("configured");
        let b = c.execute("echo", json!({"x": "b"})).expect("configured");
        to_server(&mut c, &mut s);
        let evs = server_events(&mut s);
        assert_eq!(
            evs,
            vec![
                ServerEvent::Execute {
                    id: a.clone(),
                    action: "echo".into(),
                    attrs: json!({"x": "a"})
                },
                ServerEvent::Execute {
                    id: b.clone(),
                    action: "echo".into(),
                    attrs: json!({"x": "b"})
                },
            ]
        );
        assert_eq!(s.in_flight(), 2);
        s.respond_execute(b.clone(), Ok(json!({"x": "b"})))
            .expect("b");
        s.respond_execute(a.clone(), Ok(json!({"x": "a"})))
            .expect("a");
        to_client(&mut s, &mut c);
        c.shutdown().expect("configured");
        to_server(&mut c, &mut s);
        let [ServerEvent::Shutdown { id }] = &server_events(&mut s)[..] else {
            panic!()
        };
        s.respond_shutdown(id.clone()).expect("answer");
        assert!(s.is_shut_down());
        to_client(&mut s, &mut c);
        let evs = client_events(&mut c);
        let order: Vec<(Id, bool)> = evs
            .iter()
            .map(|e| match e {
                ClientEvent::Described { id, result } => (id.clone(), result.is_ok()),
                ClientEvent::Configured { id, result } => (id.clone(), result.is_ok()),
                ClientEvent::Executed { id, result, .. } => (id.clone(), result.is_ok()),
                ClientEvent::ShutDown { id, result } => (id.clone(), result.is_ok()),
            })
            .collect();
        assert_eq!(order, [1, 2, 4, 3, 5].map(|n| (Id::Num(n), true)).to_vec());
        assert_eq!(
            evs[2],
            ClientEvent::Executed {
                id: b,
                action: "echo".into(),
                result: Ok(json!({"x": "b"}))
            }
        );
        assert_eq!(c.state(), ClientState::Closed);
    }

    #[test]
    fn calls_in_the_wrong_state_are_unexpected() {
        let t0 = Instant::now();
        type Call = fn(&mut Client, Instant) -> Result<Id, ProtocolError>;
        let describe: Call = |c, t| c.describe(t, DESCRIBE_TIMEOUT);
        let configure: Call = |c, _| c.configure(json!({}));
        let execute: Call = |c, _| c.execute("echo", json!({}));
        let shutdown: Call = |c, _| c.shutdown();
        // (calls made first, the call that must be refused, the state it names)
        let cases: &[(&[Call], Call, &str)] = &[
            (&[], configure, "not described"),
            (&[], execute, "not described"),
            (&[], shutdown, "not described"),
            (&[describe], describe, "describing"),
            (&[describe], configure, "describing"),
            (&[describe], shutdown, "describing"),
        ];
        for (i, (before, refused, state)) in cases.iter().enumerate() {
            let mut c = Client::new();
            for call in *before {
                call(&mut c, t0).expect("allowed");
            }
            match refused(&mut c, t0) {
                Err(ProtocolError::Unexpected { state: got, .. }) => {
                    assert_eq!(got, *state, "case {i}")
                }
                other => panic!("case {i}: {other:?}"),
            }
        }
        // Once described: no execute before configure, no second describe.
        let (mut c, _s) = configured(t0);
        assert!(matches!(
            c.describe(t0, DESCRIBE_TIMEOUT),
            Err(ProtocolError::Unexpected { .. })
        ));
        assert!(matches!(
            c.configure(json!({})),
            Err(ProtocolError::Unexpected { .. })
        ));
        c.shutdown().expect("configured");
        assert!(matches!(
            c.execute("echo", json!({})),
            Err(ProtocolError::Unexpected {
                state: "shutting down",
                ..
            })
        ));
        let mut c = Client::new();
        c.describe(t0, DESCRIBE_TIMEOUT).expect("start");
        c.handle_frame(br#"{"id":1,"result":{"schema":{"name":"d","protocol":"1"}}}"#)
            .expect("answer");
        assert_eq!(
            c.execute("echo", json!({})),
            Err(ProtocolError::Unexpected {
                state: "described, not configured",
                got: "call to execute".into()
            })
        );
    }

    #[test]
    fn the_schema_protocol_must_be_1() {
        let cases: &[(&str, ProtocolError)] = &[
            (
                r#"{"id":1,"result":{"schema":{"name":"d","protocol":"2"}}}"#,
                ProtocolError::BadPayload {
                    what: "schema.protocol",
                    reason: "expected \"1\", got \"2\"".into(),
                },
            ),
            (
                r#"{"id":1,"result":{}}"#,
                ProtocolError::BadPayload {
                    what: "describe result",
                    reason: "no schema member".into(),
                },
            ),
            (
                r#"{"id":1,"result":[]}"#,
                ProtocolError::BadPayload {
                    what: "describe result",
                    reason: "expected an object, got []".into(),
                },
            ),
        ];
        for (frame, want) in cases {
            let mut c = Client::new();
            c.describe(Instant::now(), DESCRIBE_TIMEOUT).expect("start");
            assert_eq!(
                c.handle_frame(frame.as_bytes()).as_ref(),
                Err(want),
                "{frame}"
            );
            assert_eq!(
                client_events(&mut c),
                vec![ClientEvent::Described {
                    id: Id::Num(1),
                    result: Err(CallError::Protocol(want.clone()))
                }]
            );
            assert_eq!(c.state(), ClientState::Closed);
        }
        // A schema without a protocol member is refused too.
        let mut c = Client::new();
        c.describe(Instant::now(), DESCRIBE_TIMEOUT).expect("start");
        assert!(matches!(
            c.handle_frame(br#"{"id":1,"result":{"schema":{"name":"d"}}}"#),
            Err(ProtocolError::BadPayload { what: "schema", .. })
        ));
    }

    #[test]
    fn describe_times_out_at_the_deadline() {
        let t0 = Instant::now();
        let mut c = Client::new();
        let id = c.describe(t0, DESCRIBE_TIMEOUT).expect("start");
        assert_eq!(c.poll_timeout(), Some(t0 + DESCRIBE_TIMEOUT));
        c.handle_timeout(t0 + Duration::from_millis(4999));
        assert!(client_events(&mut c).is_empty());
        c.handle_timeout(t0 + DESCRIBE_TIMEOUT);
        assert_eq!(
            client_events(&mut c),
            vec![ClientEvent::Described {
                id,
                result: Err(CallError::TimedOut {
                    method: Method::Describe,
                    timeout: DESCRIBE_TIMEOUT
                })
            }]
        );
        assert_eq!(c.state(), ClientState::Closed);
        // The late answer is ignored.
        c.handle_frame(br#"{"id":1,"result":{"schema":{"name":"d","protocol":"1"}}}"#)
            .expect("ignored");
        assert!(client_events(&mut c).is_empty());
        assert_eq!(c.poll_timeout(), None);
    }

    #[test]
    fn provider_errors_complete_their_call() {
        let t0 = Instant::now();
        let (mut c, mut s) = configured(t0);
        let cases: &[(&str, ProviderError)] = &[
            (
                "nope",
                ProviderError::new(codes::UNKNOWN_ACTION, "unknown action: nope"),
            ),
            (
                "echo",
                ProviderError::validation_failed("x is required").with_detail("attrs: {}"),
            ),
            (
                "echo",
                ProviderError::new("quota_exceeded", "provider-specific"),
            ),
        ];
        for (action, error) in cases {
            let id = c.execute(action, json!({})).expect("configured");
            to_server(&mut c, &mut s);
            let _ = server_events(&mut s);
            s.respond_execute(id.clone(), Err(error.clone()))
                .expect("answer");
            to_client(&mut s, &mut c);
            assert_eq!(
                client_events(&mut c),
                vec![ClientEvent::Executed {
                    id,
                    action: (*action).into(),
                    result: Err(CallError::Provider(error.clone()))
                }]
            );
        }
        // configure_failed returns to Described; a second configure may succeed.
        let mut c = Client::new();
        let mut s = Server::new();
        c.describe(t0, DESCRIBE_TIMEOUT).expect("start");
        to_server(&mut c, &mut s);
        s.respond_describe(Id::Num(1), &schema()).expect("answer");
        to_client(&mut s, &mut c);
        c.configure(json!({"fail": true})).expect("described");
        to_server(&mut c, &mut s);
        s.respond_configure(
            Id::Num(2),
            Err(ProviderError::configure_failed("bad token")),
        )
        .expect("answer");
        assert_eq!(
            s.poll_transmit().expect("frame"),
            br#"{"id":2,"error":{"code":"configure_failed","message":"bad token"}}"#
        );
        c.handle_frame(br#"{"id":2,"error":{"code":"configure_failed","message":"bad token"}}"#)
            .expect("answer");
        assert_eq!(c.state(), ClientState::Described);
        c.configure(json!({})).expect("retry allowed");
    }

    #[test]
    fn bad_execute_answers_are_typed() {
        let (mut c, _s) = configured(Instant::now());
        let id = c.execute("echo", json!({})).expect("configured");
        assert!(c.poll_transmit().is_some());
        let want = ProtocolError::BadPayload {
            what: "execute result",
            reason: "no outputs member".into(),
        };
        let frame = format!(r#"{{"id":{id},"result":{{}}}}"#);
        assert_eq!(c.handle_frame(frame.as_bytes()), Err(want.clone()));
        assert_eq!(
            client_events(&mut c),
            vec![ClientEvent::Executed {
                id,
                action: "echo".into(),
                result: Err(CallError::Protocol(want))
            }]
        );
        // A request from the provider is refused and answered.
        assert!(matches!(
            c.handle_frame(br#"{"id":7,"method":"ask"}"#),
            Err(ProtocolError::Unexpected { .. })
        ));
        assert_eq!(
            c.poll_transmit().expect("frame"),
            br#"{"id":7,"error":{"code":"unknown_method","message":"orchard hosts do not answer requests"}}"#
        );
        assert_eq!(
            c.handle_frame(br#"{"id":99,"result":{}}"#),
            Err(ProtocolError::UnknownResponseId { id: "99".into() })
        );
    }

    #[test]
    fn fail_pending_uses_execute_failed_for_executes() {
        let (mut c, _s) = configured(Instant::now());
        let a = c.execute("echo", json!({})).expect("configured");
        let b = c.shutdown().expect("configured");
        let tail = vec![
            "panicked at src/lib.rs".to_owned(),
            "note: backtrace".to_owned(),
        ];
        c.fail_pending(&Stopped::by_host("plugin trapped", tail));
        let detail = "panicked at src/lib.rs\nnote: backtrace";
        assert_eq!(
            client_events(&mut c),
            vec![
                ClientEvent::Executed {
                    id: a,
                    action: "echo".into(),
                    result: Err(CallError::Provider(
                        ProviderError::execute_failed("plugin trapped").with_detail(detail)
                    ))
                },
                ClientEvent::ShutDown {
                    id: b,
                    result: Err(CallError::Provider(
                        ProviderError::internal("plugin trapped").with_detail(detail)
                    ))
                },
            ]
        );
        assert_eq!(c.state(), ClientState::Closed);
        // A describe in flight gets internal_error.
        let mut c = Client::new();
        c.describe(Instant::now(), DESCRIBE_TIMEOUT).expect("start");
        c.fail_pending(&Stopped::by_host("exited with code 2", Vec::new()));
        assert!(matches!(
            &client_events(&mut c)[..],
            [ClientEvent::Described { result: Err(CallError::Provider(e)), .. }] if e.code == codes::INTERNAL_ERROR && e.detail.as_deref() == Some("")
        ));
    }

    #[test]
    fn server_answers_what_is_not_a_request_of_the_protocol() {
        // (frame, the reply the server sends by itself, whether handle_frame errs)
        let cases: &[(&str, &str, bool)] = &[
            (
                "not json",
                r#"{"id":null,"error":{"code":"invalid_request","message":"invalid request: not JSON"}}"#,
                true,
            ),
            (
                "[1]",
                r#"{"id":null,"error":{"code":"invalid_request","message":"invalid request: not an object"}}"#,
                true,
            ),
            (
                r#"{"id":5,"method":7}"#,
                r#"{"id":5,"error":{"code":"invalid_request","message":"invalid request: method is not a string"}}"#,
                true,
            ),
            (
                r#"{"id":5,"method":"frobnicate"}"#,
                r#"{"id":5,"error":{"code":"unknown_method","message":"unknown method: frobnicate"}}"#,
                false,
            ),
            (
                r#"{"id":5,"method":"execute","params":[]}"#,
                r#"{"id":5,"error":{"code":"invalid_request","message":"execute params must be an object"}}"#,
                false,
            ),
            (
                r#"{"id":5,"method":"execute","params":{"attrs":{}}}"#,
                r#"{"id":5,"error":{"code":"invalid_request","message":"execute needs a string action"}}"#,
                false,
            ),
        ];
        for (frame, reply, errs) in cases {
            let mut s = Server::new();
            assert_eq!(s.handle_frame(frame.as_bytes()).is_err(), *errs, "{frame}");
            assert_eq!(
                s.poll_transmit().as_deref(),
                Some(reply.as_bytes()),
                "{frame}"
            );
            assert!(s.poll_event().is_none(), "{frame}");
        }
    }

    #[test]
    fn server_accepts_omitted_params_and_refuses_after_shutdown() {
        let mut s = Server::new();
        for frame in [
            r#"{"id":1,"method":"describe"}"#,
            r#"{"id":2,"method":"configure"}"#,
            r#"{"id":3,"method":"execute","params":{"action":"echo"}}"#,
            r#"{"id":4,"method":"shutdown"}"#,
            r#"{"id":5,"method":"execute","params":{"action":"echo"}}"#,
        ] {
            s.handle_frame(frame.as_bytes()).expect(frame);
        }
        assert_eq!(
            server_events(&mut s),
            vec![
                ServerEvent::Describe { id: Id::Num(1) },
                ServerEvent::Configure {
                    id: Id::Num(2),
                    config: json!({})
                },
                ServerEvent::Execute {
                    id: Id::Num(3),
                    action: "echo".into(),
                    attrs: json!({})
                },
                ServerEvent::Shutdown { id: Id::Num(4) },
            ]
        );
        assert_eq!(
            s.poll_transmit().expect("frame"),
            br#"{"id":5,"error":{"code":"invalid_request","message":"execute after shutdown"}}"#
        );
        // Answers must match the request's method and id.
        assert!(matches!(
            s.respond_shutdown(Id::Num(3)),
            Err(ProtocolError::Unexpected { .. })
        ));
        assert_eq!(
            s.respond_execute(Id::Num(9), Ok(json!({}))),
            Err(ProtocolError::NotAwaitingResponse { id: "9".into() })
        );
        s.respond_error(
            Id::Num(3),
            ProviderError::execute_failed("boom").with_detail("d"),
        )
        .expect("pending");
        assert_eq!(
            s.poll_transmit().expect("frame"),
            br#"{"id":3,"error":{"code":"execute_failed","message":"boom","detail":"d"}}"#
        );
        assert!(matches!(
            s.handle_frame(br#"{"method":"shutdown"}"#),
            Err(ProtocolError::Unexpected { .. })
        ));
        s.reject_frame("frame too large");
        assert_eq!(
            s.poll_transmit().expect("frame"),
            br#"{"id":null,"error":{"code":"invalid_request","message":"invalid request: frame too large"}}"#
        );
    }

    #[test]
    fn schema_output_is_one_json_line() {
        let ok = encode_schema_output(&schema());
        assert_eq!(ok.iter().filter(|&&b| b == b'\n').count(), 1);
        assert_eq!(parse_schema_output(&ok), Ok(schema()));
        assert_eq!(parse_schema_output(&ok[..ok.len() - 1]), Ok(schema()));
        let cases: &[(&str, &str, &str)] = &[
            ("", "schema output", "empty"),
            ("\n", "schema output", "empty"),
            (
                "{\"name\":\"d\",\"protocol\":\"1\"}\n{}\n",
                "schema output",
                "expected one line, found a line break at byte 27",
            ),
            (
                "{\"name\":\"d\",\"protocol\":\"2\"}\n",
                "schema.protocol",
                "expected \"1\", got \"2\"",
            ),
        ];
        for (out, what, reason) in cases {
            assert_eq!(
                parse_schema_output(out.as_bytes()),
                Err(ProtocolError::BadPayload {
                    what,
                    reason: (*reason).into()
                }),
                "{out:?}"
            );
        }
        assert!(matches!(
            parse_schema_output(b"usage: provider [schema]\n"),
            Err(ProtocolError::BadPayload {
                what: "schema output",
                ..
            })
        ));
    }

    #[test]
    fn unknown_schema_members_are_kept() {
        let text = r#"{"name":"d","protocol":"1","actions":{"a":{"attributes":{"n":{"type":"number","sensitive":true}},"idempotent":true}},"version":"0.3"}"#;
        let s = parse_schema_output(text.as_bytes()).expect("valid");
        assert_eq!(s.extra.get("version"), Some(&json!("0.3")));
        assert_eq!(s.actions["a"].extra.get("idempotent"), Some(&json!(true)));
        assert_eq!(
            s.actions["a"].attributes["n"].extra.get("sensitive"),
            Some(&json!(true))
        );
        assert_eq!(encode_schema_output(&s), format!("{text}\n").into_bytes());
    }

    #[test]
    fn actions_may_be_a_list() {
        let listed = r#"{"name":"d","protocol":"1","actions":[{"name":"echo","description":"echo attrs","attributes":{"x":{"type":"string","required":true}}}]}"#;
        let s = parse_schema_output(listed.as_bytes()).expect("valid");
        assert_eq!(s.actions, schema().actions);
        let cases = [
            r#"{"name":"d","protocol":"1","actions":[{"description":"no name"}]}"#,
            r#"{"name":"d","protocol":"1","actions":[{"name":"a"},{"name":"a"}]}"#,
            r#"{"name":"d","protocol":"1","actions":7}"#,
        ];
        for text in cases {
            assert!(
                matches!(
                    parse_schema_output(text.as_bytes()),
                    Err(ProtocolError::BadPayload { what: "schema", .. })
                ),
                "{text}"
            );
        }
    }

    #[test]
    fn provider_errors_convert_both_ways() {
        let e = ProviderError::validation_failed("x").with_detail("d");
        assert_eq!(ProviderError::from(ErrorObject::from(e.clone())), e);
        let lenient = ProviderError::from(ErrorObject::new(-32603, "m").with_data(json!({"a": 1})));
        assert_eq!(
            lenient,
            ProviderError::new("-32603", "m").with_detail(r#"{"a":1}"#)
        );
    }

    /// The golden transcripts' lines, both directions, and hostile ones: a seed corpus for
    /// [`fuzz`].
    const FUZZ_SEEDS: &[&str] = &[
        r#"{"id":1,"method":"describe","params":{}}"#,
        r#"{"id":1,"result":{"schema":{"name":"example-orchard","protocol":"1","actions":{"echo":{"description":"return the attrs as outputs","attributes":{"defer":{"type":"bool"}}}}}}}"#,
        r#"{"id":1,"result":{"schema":{"name":"l","protocol":"1","actions":[{"name":"a","x":1,"attributes":{"k":{"type":"string","required":true,"y":[]}}}],"z":null}}}"#,
        r#"{"id":1,"result":{"schema":{"name":"old","protocol":"2"}}}"#,
        r#"{"name":"plan","protocol":"1","actions":{"a":{}}}"#,
        r#"{"id":2,"method":"configure","params":{"config":{"fail":true}}}"#,
        r#"{"id":2,"error":{"code":"configure_failed","message":"configuration rejected","detail":"config.fail is true"}}"#,
        r#"{"id":3,"result":{}}"#,
        r#"{"id":4,"method":"execute","params":{"action":"prune","attrs":{}}}"#,
        r#"{"id":4,"result":{"outputs":{"x":1}}}"#,
        r#"{"id":5,"result":{"outputs":null}}"#,
        r#"{"id":5,"error":{"code":"validation_failed","message":"values[1] is not a number","detail":"got \"two\""}}"#,
        r#"{"id":6,"result":[]}"#,
        r#"{"id":100,"method":"harvest","params":{}}"#,
        r#"{"id":101,"method":"execute","params":{"attrs":{}}}"#,
        r#"{"id":7,"method":"shutdown","params":{}}"#,
        r#"{"id":7,"result":{}}"#,
        r#"{"method":"log","params":{}}"#,
        r#"{"id":"s","method":"describe","params":[]}"#,
        r#"{"id":1.5,"method":"describe"}"#,
        r#"{"id":null,"method":"describe"}"#,
        "not json",
        "",
    ];

    #[test]
    fn fuzz_body_over_the_seed_corpus() {
        let epoch = Instant::now();
        fuzz(epoch, FUZZ_SEEDS.join("\n").as_bytes());
        for seed in FUZZ_SEEDS {
            for cut in 0..=seed.len() {
                fuzz(epoch, &seed.as_bytes()[..cut]);
            }
        }
        for a in FUZZ_SEEDS {
            for b in FUZZ_SEEDS {
                fuzz(epoch, format!("{a}\n{b}\n{a}\n{b}").as_bytes());
            }
        }
    }

    #[test]
    fn pair_body_over_scripted_and_pseudo_random_sessions() {
        let epoch = Instant::now();
        // describe, deliver, answer, deliver back, configure (refused: answer not yet
        // delivered), …, execute twice, answer out of order, time passes, shut down.
        let scripts: &[&[u8]] = &[
            &[
                0, 250, 4, 6, 0, 0, 5, 1, 7, 1, 4, 6, 0, 0, 5, 2, 0, 9, 2, 1, 9, 4, 4, 6, 1, 1, 6,
                0, 0, 5, 5, 3, 4, 6, 0, 0, 5,
            ],
            &[0, 1, 4, 7, 5, 5, 6, 0, 0, 5, 0, 0],
            &[0, 0, 7, 0, 4, 6, 0, 0, 5],
            &[
                0, 100, 4, 6, 0, 0, 5, 1, 3, 4, 6, 0, 1, 5, 2, 0, 1, 1, 4, 6, 0, 0, 2, 0, 0, 8,
            ],
            &[],
        ];
        for script in scripts {
            fuzz_pair(epoch, script);
        }
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..2000 {
            let mut next = || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            };
            let len = (next() % 200) as usize;
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            fuzz_pair(epoch, &data);
        }
    }
}
