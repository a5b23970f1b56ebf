//! The Cairo oracle `stdio:` protocol: a strict subset of JSON-RPC 2.0 over one line per
//! message, as sans-IO state machines for both ends.
//!
//! [`OracleClient`] is the host (the Cairo executor's role); [`OracleServer`] is the plugin (the
//! oracle's role). Both are built on [`Peer`] with [`Dialect::JsonRpc2`].
//!
//! ```text
//!   host (OracleClient)                               plugin (OracleServer)
//!        │ ◄──── {"id":0,"method":"ready"} ─────────────── │  the plugin speaks first; the
//!        │ ───── {"id":0,"result":{}} ───────────────────► │  first byte it writes must be `{`
//!        │ ───── {"id":0,"method":"invoke",                │
//!        │         "params":{"selector":"f",               │
//!        │                   "calldata":["0x2710"]}} ────► │
//!        │ ◄──── {"id":0,"result":["0x5f5e100"]} ───────── │  or {"id":0,"error":{...}}
//!        │        … one invoke at a time …                 │
//!        │ ───── {"method":"shutdown"} ──────────────────► │  a notification; the client is
//!        ▼                                                 ▼  closed afterwards
//! ```
//!
//! Rules the machines enforce:
//! - The plugin announces itself with a `ready` request (any valid id; the plugin machine uses
//!   0, like the Rust SDK `cairo-oracle-server`) and the host acknowledges it with `{}`. The
//!   host sends nothing before `ready`: [`OracleClient::invoke`] before it is
//!   [`ProtocolError::Unexpected`]. If the host answers `ready` with an error, the plugin
//!   machine reports [`ServerEvent::Rejected`] and the plugin must terminate.
//! - The first byte the plugin writes must be `{` ([`check_first_byte`]); the client checks
//!   the first frame it is given. A driver that sees the raw byte stream should also call
//!   [`check_first_byte`] on the very first byte it reads, because a line framer skips blank
//!   lines before the first frame.
//! - Calldata and results are arrays of [`Felt`]s: lowercase `0x` hex without leading zeros
//!   (`"0x0"` for zero), below the Stark prime. A result with anything else completes the
//!   invoke with an [`OracleError`] of origin [`ErrorOrigin::BadResult`] and `handle_frame`
//!   returns [`ProtocolError::BadPayload`].
//! - One invoke at a time: [`OracleClient::invoke`] while one is in flight is
//!   [`ProtocolError::Unexpected`]. There are therefore no out-of-order responses and no
//!   cancellation in this protocol: a host that gives up on an invoke ends the process
//!   ([`OracleClient::fail_pending`]) and starts a new one.
//! - A failing invoke is data, never a crash: the plugin's JSON-RPC error (`-32603` and a
//!   message, by convention) arrives as an [`OracleError`] of origin [`ErrorOrigin::Plugin`].
//!
//! What it does not do: spawn processes, read stderr (what the plugin logs there is the
//! driver's business and never reaches these machines), or time invokes out (the driver calls
//! [`OracleClient::fail_pending`] with its reason).
//!
//! Lenient in: `ready` may carry params and any id; the plugin's notifications are ignored; a
//! request from the plugin other than `ready` after the handshake is answered with "method
//! not found"; on the plugin side, an `invoke` with unreadable params is answered with
//! "invalid params" and the plugin keeps serving.
//!
//! ```
//! use sandpipe_proto::oracle::{ClientEvent, Felt, OracleClient, OracleServer, ServerEvent};
//!
//! let mut host = OracleClient::new();
//! let mut plugin = OracleServer::new();
//! let pump = |from: &mut dyn FnMut() -> Option<Vec<u8>>, to: &mut dyn FnMut(&[u8])| {
//!     while let Some(frame) = from() { to(&frame) }
//! };
//! pump(&mut || plugin.poll_transmit(), &mut |f| host.handle_frame(f).unwrap());
//! assert_eq!(host.poll_event(), Some(ClientEvent::Ready));
//! pump(&mut || host.poll_transmit(), &mut |f| plugin.handle_frame(f).unwrap());
//! assert_eq!(plugin.poll_event(), Some(ServerEvent::Ready));
//!
//! host.invoke("sqrt", &[Felt::from(16u128)]).unwrap();
//! pump(&mut || host.poll_transmit(), &mut |f| plugin.handle_frame(f).unwrap());
//! let Some(ServerEvent::Invoke { id, selector, calldata }) = plugin.poll_event() else { panic!() };
//! assert_eq!((selector.as_str(), calldata), ("sqrt", vec![Felt::from(16u128)]));
//! plugin.respond(id, Ok(vec![Felt::from(4u128)])).unwrap();
//! pump(&mut || plugin.poll_transmit(), &mut |f| host.handle_frame(f).unwrap());
//! let Some(ClientEvent::Invoked { result, .. }) = host.poll_event() else { panic!() };
//! assert_eq!(result.unwrap()[0].as_str(), "0x4");
//!
//! host.shutdown().unwrap();
//! assert_eq!(host.poll_transmit().unwrap(), br#"{"jsonrpc":"2.0","method":"shutdown"}"#);
//! ```

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};
use thiserror::Error;

use crate::jsonrpc::{Dialect, ErrorCode, ErrorObject, Event, Id, Message, Peer, ProtocolError};
use crate::stopped::Stopped;

pub mod wasm;

/// The JSON-RPC dialect of this protocol.
pub const DIALECT: Dialect = Dialect::JsonRpc2;

/// The largest felt252, `P - 1` with `P = 2^251 + 17 * 2^192 + 1`, as the canonical 63 hex
/// digits after `0x`.
const FELT_MAX_DIGITS: &str = "800000000000011000000000000000000000000000000000000000000000000";

/// Every plugin's output must start with this byte.
pub const FIRST_BYTE: u8 = b'{';

/// Check the first byte a plugin writes: it must be `{` (`0x7b`), as the Cairo executor
/// requires before it reads anything else.
pub fn check_first_byte(first: u8) -> Result<(), ProtocolError> {
    if first == FIRST_BYTE {
        Ok(())
    } else {
        Err(ProtocolError::BadPayload {
            what: "first byte of oracle output",
            reason: format!("expected '{{' (0x7b), got 0x{first:02x}"),
        })
    }
}

/// Why a string is not a felt.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FeltError {
    /// It does not start with `0x`.
    #[error("felt {got:?} does not start with 0x")]
    MissingPrefix {
        /// The text (at most 80 characters of it).
        got: String,
    },
    /// Nothing follows `0x`.
    #[error("felt has no digits after 0x")]
    NoDigits,
    /// A character that is not a lowercase hex digit.
    #[error("felt {got:?} has {bad:?} at {index}, expected a lowercase hex digit")]
    BadDigit {
        /// The text (at most 80 characters of it).
        got: String,
        /// The offending character.
        bad: char,
        /// Its byte offset.
        index: usize,
    },
    /// A leading zero (only `0x0` itself may start with 0).
    #[error("felt {got:?} has a leading zero")]
    LeadingZero {
        /// The text (at most 80 characters of it).
        got: String,
    },
    /// The value is not below the Stark prime.
    #[error(
        "felt of {digits} hex digits is not below the field prime (at most 63 digits, below 0x800000000000011 followed by 48 zeros plus one)"
    )]
    OutOfRange {
        /// How many hex digits it had.
        digits: usize,
    },
}

/// One Cairo felt252 in its canonical JSON form: lowercase hex with a `0x` prefix and no
/// leading zeros (`0x0` for zero), below the field prime.
///
/// The only ways to build one validate it, so every `Felt` encodes to a valid string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Felt(String);

impl Felt {
    /// Zero.
    pub fn zero() -> Self {
        Felt("0x0".to_owned())
    }

    /// Parse the canonical form; nothing else is accepted.
    pub fn parse(s: &str) -> Result<Self, FeltError> {
        let short = || s.chars().take(80).collect::<String>();
        let digits = s
            .strip_prefix("0x")
            .ok_or_else(|| FeltError::MissingPrefix { got: short() })?;
        if digits.is_empty() {
            return Err(FeltError::NoDigits);
        }
        if let Some((i, bad)) = digits
            .char_indices()
            .find(|(_, c)| !matches!(c, '0'..='9' | 'a'..='f'))
        {
            return Err(FeltError::BadDigit {
                got: short(),
                bad,
                index: i + 2,
            });
        }
        if digits.len() > 1 && digits.starts_with('0') {
            return Err(FeltError::LeadingZero { got: short() });
        }
        // Same length and only lowercase hex digits: string order is numeric order.
        if digits.len() > FELT_MAX_DIGITS.len()
            || (digits.len() == FELT_MAX_DIGITS.len() && digits > FELT_MAX_DIGITS)
        {
            return Err(FeltError::OutOfRange {
                digits: digits.len(),
            });
        }
        Ok(Felt(s.to_owned()))
    }

    /// The canonical text, `0x…`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value if it fits in 128 bits.
    pub fn to_u128(&self) -> Option<u128> {
        u128::from_str_radix(&self.0[2..], 16).ok()
    }

    /// The value as 32 big-endian bytes.
    pub fn to_be_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        // A valid felt has at most 63 hex digits: fill from the right, two digits a byte.
        let digits = &self.0.as_bytes()[2..];
        for (i, d) in digits.iter().rev().enumerate() {
            let v = match d {
                b'0'..=b'9' => d - b'0',
                _ => d - b'a' + 10,
            };
            out[31 - i / 2] |= if i % 2 == 0 { v } else { v << 4 };
        }
        out
    }

    /// The felt with this big-endian value, if it is below the field prime.
    pub fn from_be_bytes(bytes: &[u8; 32]) -> Result<Self, FeltError> {
        let mut text = String::with_capacity(66);
        text.push_str("0x");
        for b in bytes {
            text.push_str(&format!("{b:02x}"));
        }
        let trimmed = text[2..].trim_start_matches('0');
        let canonical = if trimmed.is_empty() {
            "0x0".to_owned()
        } else {
            format!("0x{trimmed}")
        };
        Felt::parse(&canonical)
    }
}

impl From<u128> for Felt {
    fn from(n: u128) -> Self {
        Felt(format!("{n:#x}"))
    }
}

impl std::str::FromStr for Felt {
    type Err = FeltError;
    fn from_str(s: &str) -> Result<Self, FeltError> {
        Felt::parse(s)
    }
}

impl fmt::Display for Felt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Felt {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Felt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Felt::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Parse a JSON array of felts, naming the first bad element.
pub fn felts_from_value(v: &Value) -> Result<Vec<Felt>, String> {
    let Value::Array(items) = v else {
        return Err(format!("expected an array of felts, got {}", kind(v)));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Felt::parse(s).map_err(|e| format!("element {i}: {e}")),
            other => Err(format!(
                "element {i}: expected a string, got {}",
                kind(other)
            )),
        })
        .collect()
}

fn felts_to_value(felts: &[Felt]) -> Value {
    Value::Array(felts.iter().map(|f| Value::from(f.as_str())).collect())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The params of an `invoke` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvokeParams {
    /// Which oracle function to call.
    pub selector: String,
    /// Its arguments, as serialized by Cairo Serde.
    pub calldata: Vec<Felt>,
}

impl InvokeParams {
    fn from_value(params: Option<Value>) -> Result<Self, String> {
        let Some(Value::Object(mut obj)) = params else {
            return Err("params must be an object with selector and calldata".to_owned());
        };
        let selector = match obj.remove("selector") {
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(format!("selector: expected a string, got {}", kind(&other)));
            }
            None => return Err("missing selector".to_owned()),
        };
        let calldata = match obj.remove("calldata") {
            Some(v) => felts_from_value(&v).map_err(|e| format!("calldata: {e}"))?,
            None => return Err("missing calldata".to_owned()),
        };
        Ok(InvokeParams { selector, calldata })
    }
}

/// Who produced an [`OracleError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorOrigin {
    /// The plugin answered the invoke with a JSON-RPC error.
    Plugin,
    /// The plugin answered with a result that is not an array of valid felts.
    BadResult,
    /// The host gave up: the process failed ([`OracleClient::fail_pending`]) or was shut down.
    Host,
}

/// A failed invoke, as the Cairo program sees it: a value, not a crash.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("oracle error {code}: {message}")]
pub struct OracleError {
    /// Who produced it.
    pub origin: ErrorOrigin,
    /// The JSON-RPC code (the plugin's, or `-32603` for host-made errors).
    pub code: ErrorCode,
    /// The message.
    pub message: String,
    /// JSON-RPC `data`; for host-made errors `{"reason", "exit", "stderr"}`
    /// ([`stopped_error`]).
    pub data: Option<Value>,
    /// Why the plugin will never answer, when that is what this error says ([`stopped_error`]).
    pub stopped: Option<Stopped>,
}

impl OracleError {
    fn from_plugin(e: ErrorObject) -> Self {
        OracleError {
            origin: ErrorOrigin::Plugin,
            code: e.code,
            message: e.message,
            data: e.data,
            stopped: None,
        }
    }

    fn local(origin: ErrorOrigin, message: String, data: Value) -> Self {
        OracleError {
            origin,
            code: DIALECT.internal_error(),
            message,
            data: Some(data),
            stopped: None,
        }
    }

    /// The JSON-RPC error object (for logs or for forwarding).
    pub fn to_error_object(&self) -> ErrorObject {
        ErrorObject {
            code: self.code.clone(),
            message: self.message.clone(),
            data: self.data.clone(),
        }
    }
}

/// The answer to an invoke the plugin will never answer: a host-made [`OracleError`]
/// (`-32603`), message `oracle failed: REASON`, data [`Stopped::to_json`].
pub fn stopped_error(stopped: &Stopped) -> OracleError {
    OracleError {
        stopped: Some(stopped.clone()),
        ..OracleError::local(
            ErrorOrigin::Host,
            format!("oracle failed: {}", stopped.reason),
            stopped.to_json(),
        )
    }
}

/// The Cairo oracle under the supervisor (`crate::supervise`): an `invoke` is a budgeted
/// request; the plugin's `ready` is its handshake, and a fresh instance's `ready` is answered
/// with the engine's recorded answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Supervised;

impl crate::supervise::SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> crate::supervise::FromEngine {
        crate::supervise::classify_jsonrpc_engine(frame, &[])
    }
    fn classify_plugin(&self, frame: &[u8]) -> crate::supervise::FromPlugin {
        crate::supervise::classify_jsonrpc_plugin(frame, &["ready"])
    }
    fn stopped_answer(&self, key: &str, _method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        let error = stopped_error(stopped).to_error_object();
        crate::supervise::jsonrpc_error_answer(key, Dialect::JsonRpc2, error)
    }
}

/// Where the host side of a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientState {
    /// Waiting for the plugin's `ready` request; nothing may be sent yet.
    AwaitingReady,
    /// Ready for an invoke.
    Idle,
    /// One invoke is in flight.
    Invoking,
    /// Shut down, failed, or the plugin broke the protocol; start a new process.
    Closed,
}

impl ClientState {
    fn name(self) -> &'static str {
        match self {
            ClientState::AwaitingReady => "awaiting ready",
            ClientState::Idle => "idle",
            ClientState::Invoking => "an invoke is in flight",
            ClientState::Closed => "closed",
        }
    }
}

/// What happened on the host side.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "events are built once and moved a few times; boxing would burden every match"
)]
pub enum ClientEvent {
    /// The plugin sent `ready`; the ack is queued and invokes may follow.
    Ready,
    /// An invoke completed.
    Invoked {
        /// The request id.
        id: Id,
        /// The selector it called.
        selector: String,
        /// The felts, or the oracle error the Cairo program receives.
        result: Result<Vec<Felt>, OracleError>,
    },
}

/// The host (executor) side of one oracle process.
#[derive(Debug)]
pub struct OracleClient {
    peer: Peer,
    state: ClientState,
    seen_first_frame: bool,
    in_flight: Option<(Id, String)>,
    events: VecDeque<ClientEvent>,
}

impl Default for OracleClient {
    fn default() -> Self {
        Self::new()
    }
}

impl OracleClient {
    /// A client waiting for `ready`; its invoke ids count up from 0.
    pub fn new() -> Self {
        Self {
            peer: Peer::new(DIALECT),
            state: ClientState::AwaitingReady,
            seen_first_frame: false,
            in_flight: None,
            events: VecDeque::new(),
        }
    }

    /// Where the connection is.
    pub fn state(&self) -> ClientState {
        self.state
    }

    /// Feed one frame the plugin wrote.
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        if !self.seen_first_frame {
            self.seen_first_frame = true;
            if let Err(e) = check_first_byte(frame.first().copied().unwrap_or(b'\n')) {
                self.state = ClientState::Closed;
                return Err(e);
            }
        }
        if self.state == ClientState::Closed {
            return Err(ProtocolError::Unexpected {
                state: self.state.name(),
                got: describe(frame),
            });
        }
        let msg = Message::decode(frame, DIALECT)?;
        let got = msg.describe();
        if self.state == ClientState::AwaitingReady
            && !matches!(&msg, Message::Request { method, .. } if method == "ready")
        {
            return Err(ProtocolError::Unexpected {
                state: self.state.name(),
                got,
            });
        }
        self.peer.handle_message(msg)?;
        while let Some(event) = self.peer.poll_event() {
            match event {
                Event::Request { id, method, .. } => {
                    if method == "ready" {
                        if self.state != ClientState::AwaitingReady {
                            return Err(ProtocolError::Unexpected {
                                state: self.state.name(),
                                got,
                            });
                        }
                        // `ready` params are reserved for future options; ignore them.
                        self.peer.respond(id, Ok(json!({})))?;
                        self.state = ClientState::Idle;
                        self.events.push_back(ClientEvent::Ready);
                    } else {
                        let error = ErrorObject::new(
                            DIALECT.method_not_found(),
                            format!("unknown method: {method}"),
                        );
                        self.peer.respond(id, Err(error))?;
                    }
                }
                // The protocol defines no notifications from the plugin; ignore them.
                Event::Notification { .. } => {}
                Event::Response { id, result, .. } => self.complete(id, result)?,
            }
        }
        Ok(())
    }

    fn complete(
        &mut self,
        id: Id,
        result: Result<Value, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        let selector = match self.in_flight.take() {
            Some((_, selector)) => selector,
            None => String::new(),
        };
        self.state = ClientState::Idle;
        match result {
            Ok(value) => match felts_from_value(&value) {
                Ok(felts) => {
                    self.events.push_back(ClientEvent::Invoked {
                        id,
                        selector,
                        result: Ok(felts),
                    });
                    Ok(())
                }
                Err(reason) => {
                    let error = OracleError::local(
                        ErrorOrigin::BadResult,
                        format!("bad invoke result: {reason}"),
                        json!({ "reason": reason }),
                    );
                    self.events.push_back(ClientEvent::Invoked {
                        id,
                        selector,
                        result: Err(error),
                    });
                    Err(ProtocolError::BadPayload {
                        what: "invoke result",
                        reason,
                    })
                }
            },
            Err(e) => {
                self.events.push_back(ClientEvent::Invoked {
                    id,
                    selector,
                    result: Err(OracleError::from_plugin(e)),
                });
                Ok(())
            }
        }
    }

    /// Call `selector` with `calldata`. Only when [`ClientState::Idle`]: before `ready`, while
    /// another invoke is in flight, or after shutdown it is [`ProtocolError::Unexpected`].
    pub fn invoke(&mut self, selector: &str, calldata: &[Felt]) -> Result<Id, ProtocolError> {
        if self.state != ClientState::Idle {
            return Err(ProtocolError::Unexpected {
                state: self.state.name(),
                got: format!("invoke {selector:?}"),
            });
        }
        let params = json!({ "selector": selector, "calldata": felts_to_value(calldata) });
        let id = self.peer.request("invoke", Some(params));
        self.in_flight = Some((id.clone(), selector.to_owned()));
        self.state = ClientState::Invoking;
        Ok(id)
    }

    /// Ask the plugin to exit (the `shutdown` notification) and close the client. Before
    /// `ready` nothing may be sent, so only the client closes. An invoke still in flight
    /// completes with an [`OracleError`] of origin [`ErrorOrigin::Host`].
    pub fn shutdown(&mut self) -> Result<(), ProtocolError> {
        match self.state {
            ClientState::Closed => {
                return Err(ProtocolError::Unexpected {
                    state: self.state.name(),
                    got: "shutdown".to_owned(),
                });
            }
            ClientState::AwaitingReady => {}
            ClientState::Idle | ClientState::Invoking => {
                self.fail_in_flight(&Stopped::by_host(
                    "oracle was shut down before it answered",
                    Vec::new(),
                ));
                self.peer.notify("shutdown", None);
            }
        }
        self.state = ClientState::Closed;
        Ok(())
    }

    /// The plugin is gone (it exited, trapped, ran out of fuel, or missed a deadline):
    /// complete the invoke in flight, if any, with [`stopped_error`], and close the client.
    pub fn fail_pending(&mut self, stopped: &Stopped) {
        self.fail_in_flight(stopped);
        self.state = ClientState::Closed;
    }

    fn fail_in_flight(&mut self, stopped: &Stopped) {
        let Some((id, selector)) = self.in_flight.take() else {
            return;
        };
        let error = stopped_error(stopped);
        // Forget the request in the peer too, so nothing stays pending there.
        self.peer.fail_pending(error.to_error_object());
        while self.peer.poll_event().is_some() {}
        self.events.push_back(ClientEvent::Invoked {
            id,
            selector,
            result: Err(error),
        });
    }

    /// The next frame to write to the plugin (unframed JSON).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.peer.poll_transmit()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }
}

fn describe(frame: &[u8]) -> String {
    match Message::decode(frame, DIALECT) {
        Ok(m) => m.describe(),
        Err(_) => format!("{} byte frame", frame.len()),
    }
}

/// Where the plugin side of a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerState {
    /// `ready` is sent; waiting for the host's ack.
    AwaitingAck,
    /// Serving invokes.
    Serving,
    /// The host sent `shutdown`; exit.
    ShutDown,
    /// The host answered `ready` with an error; exit.
    Rejected,
}

impl ServerState {
    fn name(self) -> &'static str {
        match self {
            ServerState::AwaitingAck => "awaiting the ready ack",
            ServerState::Serving => "serving",
            ServerState::ShutDown => "shut down",
            ServerState::Rejected => "rejected by the host",
        }
    }
}

/// What happened on the plugin side.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// The host acknowledged `ready`.
    Ready,
    /// Answer with [`OracleServer::respond`] before anything else arrives.
    Invoke {
        /// The request id.
        id: Id,
        /// Which function.
        selector: String,
        /// Its arguments.
        calldata: Vec<Felt>,
    },
    /// The host asked the plugin to exit.
    Shutdown,
    /// The host answered `ready` with an error: the plugin must terminate.
    Rejected {
        /// The host's error.
        error: ErrorObject,
    },
}

/// The plugin (oracle) side of the protocol.
#[derive(Debug)]
pub struct OracleServer {
    peer: Peer,
    state: ServerState,
    serving: Option<Id>,
    events: VecDeque<ServerEvent>,
}

impl Default for OracleServer {
    fn default() -> Self {
        Self::new()
    }
}

impl OracleServer {
    /// A server whose `ready` (id 0) is already queued for [`OracleServer::poll_transmit`].
    pub fn new() -> Self {
        Self::with_ready_id(Id::Num(0))
    }

    /// A server announcing itself with `ready` under `id`.
    pub fn with_ready_id(id: Id) -> Self {
        let mut peer = Peer::new(DIALECT);
        // A fresh peer has nothing pending, so the id cannot be a duplicate.
        let _ = peer.request_with_id(id, "ready", None);
        Self {
            peer,
            state: ServerState::AwaitingAck,
            serving: None,
            events: VecDeque::new(),
        }
    }

    /// Where the connection is.
    pub fn state(&self) -> ServerState {
        self.state
    }

    /// True once the plugin must exit (shut down, or `ready` rejected).
    pub fn must_terminate(&self) -> bool {
        matches!(self.state, ServerState::ShutDown | ServerState::Rejected)
    }

    /// Feed one frame the host wrote.
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        let msg = Message::decode(frame, DIALECT)?;
        let got = msg.describe();
        let unexpected = |state: ServerState| ProtocolError::Unexpected {
            state: state.name(),
            got: got.clone(),
        };
        if self.must_terminate() {
            return Err(unexpected(self.state));
        }
        match (&msg, self.state) {
            (Message::Request { .. }, ServerState::AwaitingAck) => {
                return Err(unexpected(self.state));
            }
            (Message::Request { .. }, _) if self.serving.is_some() => {
                return Err(ProtocolError::Unexpected {
                    state: "answering an invoke",
                    got,
                });
            }
            _ => {}
        }
        self.peer.handle_message(msg)?;
        while let Some(event) = self.peer.poll_event() {
            match event {
                Event::Response { result, .. } => match result {
                    Ok(_) => {
                        self.state = ServerState::Serving;
                        self.events.push_back(ServerEvent::Ready);
                    }
                    Err(error) => {
                        self.state = ServerState::Rejected;
                        self.events.push_back(ServerEvent::Rejected { error });
                    }
                },
                Event::Request { id, method, params } if method == "invoke" => {
                    match InvokeParams::from_value(params) {
                        Ok(p) => {
                            self.serving = Some(id.clone());
                            self.events.push_back(ServerEvent::Invoke {
                                id,
                                selector: p.selector,
                                calldata: p.calldata,
                            });
                        }
                        Err(reason) => {
                            let error = ErrorObject::new(
                                DIALECT.invalid_params(),
                                format!("invalid invoke params: {reason}"),
                            );
                            self.peer.respond(id, Err(error))?;
                        }
                    }
                }
                Event::Request { id, method, .. } => {
                    let error = ErrorObject::new(
                        DIALECT.method_not_found(),
                        format!("unknown method: {method}"),
                    );
                    self.peer.respond(id, Err(error))?;
                }
                Event::Notification { method, .. } if method == "shutdown" => {
                    self.state = ServerState::ShutDown;
                    self.events.push_back(ServerEvent::Shutdown);
                }
                // No other notifications exist; ignore them.
                Event::Notification { .. } => {}
            }
        }
        Ok(())
    }

    /// Answer the invoke `id`: felts, or an error (by convention code `-32603`).
    pub fn respond(
        &mut self,
        id: Id,
        result: Result<Vec<Felt>, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        if self.serving.as_ref() != Some(&id) {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        }
        self.peer.respond(id, result.map(|f| felts_to_value(&f)))?;
        self.serving = None;
        Ok(())
    }

    /// The next frame to write to the host (unframed JSON).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.peer.poll_transmit()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }
}

/// Fuzz body (for the `machine_oracle` cargo-fuzz target and the unit tests). Each line of
/// `data` is one frame.
///
/// Properties, besides never panicking:
/// - every line that parses as a [`Felt`] is its own canonical text, and one that fits in
///   128 bits round-trips through `u128`;
/// - host side: the lines are the plugin's frames. A first frame not starting with `{` closes
///   the client; `Ready` comes only out of the handshake; whenever the client is idle it
///   invokes again, and every invoke completes exactly once (with the id and selector it was
///   sent with, and only canonical felts on success), counting [`OracleClient::fail_pending`]
///   at the end; every frame it sends is valid JSON-RPC;
/// - plugin side: the lines are the host's frames. `ready` goes out first; each `Invoke` is
///   answered exactly once (a second answer is refused); after `shutdown` or a rejected
///   `ready` every frame is refused; every frame it sends starts with `{` and is valid
///   JSON-RPC.
pub fn fuzz(data: &[u8]) {
    let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
    for line in &lines {
        if let Ok(text) = std::str::from_utf8(line) {
            fuzz_felt(text);
        }
        if let Ok(bytes) = <[u8; 16]>::try_from(&line[..line.len().min(16)]) {
            let felt = Felt::from(u128::from_le_bytes(bytes));
            assert_eq!(Felt::parse(felt.as_str()), Ok(felt.clone()));
            fuzz_felt(felt.as_str());
        }
    }
    fuzz_client(&lines);
    fuzz_server(&lines);
}

fn fuzz_felt(text: &str) {
    let Ok(felt) = Felt::parse(text) else {
        return;
    };
    assert_eq!(felt.as_str(), text, "a parsed felt is its canonical text");
    let digits = text.len() - 2;
    match felt.to_u128() {
        Some(n) => assert_eq!(Felt::from(n), felt, "felt {text} round-trips through u128"),
        None => assert!(digits > 32, "felt {text} fits in 128 bits"),
    }
}

fn sent_frames(frames: impl Iterator<Item = Vec<u8>>) -> Vec<Message> {
    frames
        .map(|frame| {
            assert_eq!(frame.first(), Some(&FIRST_BYTE), "frames start with '{{'");
            Message::decode(&frame, DIALECT).unwrap_or_else(|e| {
                panic!(
                    "sent an invalid frame ({e}): {}",
                    String::from_utf8_lossy(&frame)
                )
            })
        })
        .collect()
}

/// Drain the client's events: `Ready` only out of the handshake; each outcome matches the
/// invoke in flight.
fn client_events(
    client: &mut OracleClient,
    before: ClientState,
    in_flight: &mut Option<(Id, String)>,
    completed: &mut usize,
) {
    while let Some(event) = client.poll_event() {
        match event {
            ClientEvent::Ready => assert_eq!(before, ClientState::AwaitingReady),
            ClientEvent::Invoked {
                id,
                selector,
                result,
            } => {
                assert_eq!(in_flight.take(), Some((id, selector)), "invoke outcome");
                *completed += 1;
                if let Ok(felts) = result {
                    felts.iter().for_each(|f| fuzz_felt(f.as_str()));
                }
            }
        }
    }
}

fn fuzz_client(lines: &[&[u8]]) {
    let mut client = OracleClient::new();
    let mut in_flight: Option<(Id, String)> = None;
    let (mut issued, mut completed) = (0usize, 0usize);
    for (i, line) in lines.iter().enumerate() {
        let before = client.state();
        let got = client.handle_frame(line);
        if i == 0 && line.first() != Some(&FIRST_BYTE) {
            assert!(got.is_err(), "a first frame without '{{' is refused");
            assert_eq!(client.state(), ClientState::Closed);
        }
        client_events(&mut client, before, &mut in_flight, &mut completed);
        let sent = sent_frames(std::iter::from_fn(|| client.poll_transmit()));
        if before == ClientState::Closed {
            assert!(
                got.is_err() && sent.is_empty(),
                "a closed client takes nothing"
            );
        }
        let selector = String::from_utf8_lossy(&line[..line.len().min(8)]).into_owned();
        let calldata = [Felt::from(i as u128), Felt::zero()];
        match client.invoke(&selector, &calldata) {
            Ok(id) => {
                assert_eq!(client.state(), ClientState::Invoking);
                assert!(in_flight.is_none(), "invoke while another is in flight");
                in_flight = Some((id, selector));
                issued += 1;
            }
            Err(_) => assert_ne!(client.state(), ClientState::Idle, "an idle client invokes"),
        }
        for msg in sent_frames(std::iter::from_fn(|| client.poll_transmit())) {
            assert!(matches!(msg, Message::Request { ref method, .. } if method == "invoke"));
        }
    }
    let before = client.state();
    client.fail_pending(&Stopped::by_host("plugin exited", vec!["tail".to_owned()]));
    client_events(&mut client, before, &mut in_flight, &mut completed);
    assert_eq!(client.state(), ClientState::Closed);
    assert_eq!(issued, completed, "every invoke completes exactly once");
    assert!(client.invoke("f", &[]).is_err());
    assert!(client.shutdown().is_err());
}

fn fuzz_server(lines: &[&[u8]]) {
    let mut server = OracleServer::new();
    let ready = sent_frames(std::iter::from_fn(|| server.poll_transmit()));
    assert_eq!(ready, vec![Message::request(0, "ready", None)]);
    for (i, line) in lines.iter().enumerate() {
        let terminated = server.must_terminate();
        let got = server.handle_frame(line);
        if terminated {
            assert!(got.is_err(), "a plugin that must exit takes nothing");
        }
        while let Some(event) = server.poll_event() {
            match event {
                ServerEvent::Ready => assert_eq!(server.state(), ServerState::Serving),
                ServerEvent::Invoke { id, calldata, .. } => {
                    calldata.iter().for_each(|f| fuzz_felt(f.as_str()));
                    let answer = if i % 2 == 0 {
                        Ok(calldata.into_iter().rev().collect())
                    } else {
                        Err(ErrorObject::new(DIALECT.internal_error(), "no"))
                    };
                    assert_eq!(server.respond(id.clone(), answer), Ok(()));
                    assert_eq!(
                        server.respond(id.clone(), Ok(Vec::new())),
                        Err(ProtocolError::NotAwaitingResponse { id: id.to_string() })
                    );
                    let sent = sent_frames(std::iter::from_fn(|| server.poll_transmit()));
                    assert!(
                        matches!(&sent[..], [Message::Response { id: got, .. }] if *got == id),
                        "one answer per invoke: {sent:?}"
                    );
                }
                ServerEvent::Shutdown | ServerEvent::Rejected { .. } => {
                    assert!(server.must_terminate());
                }
            }
        }
        sent_frames(std::iter::from_fn(|| server.poll_transmit()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn felt(n: u128) -> Felt {
        Felt::from(n)
    }

    /// A connected pair after the handshake.
    struct Pair {
        host: OracleClient,
        plugin: OracleServer,
    }

    impl Pair {
        fn new() -> Self {
            Self {
                host: OracleClient::new(),
                plugin: OracleServer::new(),
            }
        }

        fn ready() -> Self {
            let mut p = Self::new();
            p.pump_to_host().expect("ready");
            p.pump_to_plugin().expect("ack");
            assert_eq!(p.host_events(), vec![ClientEvent::Ready]);
            assert_eq!(p.plugin_events(), vec![ServerEvent::Ready]);
            p
        }

        fn pump_to_host(&mut self) -> Result<Vec<Vec<u8>>, ProtocolError> {
            let mut sent = Vec::new();
            while let Some(f) = self.plugin.poll_transmit() {
                self.host.handle_frame(&f)?;
                sent.push(f);
            }
            Ok(sent)
        }

        fn pump_to_plugin(&mut self) -> Result<Vec<Vec<u8>>, ProtocolError> {
            let mut sent = Vec::new();
            while let Some(f) = self.host.poll_transmit() {
                self.plugin.handle_frame(&f)?;
                sent.push(f);
            }
            Ok(sent)
        }

        fn host_events(&mut self) -> Vec<ClientEvent> {
            std::iter::from_fn(|| self.host.poll_event()).collect()
        }

        fn plugin_events(&mut self) -> Vec<ServerEvent> {
            std::iter::from_fn(|| self.plugin.poll_event()).collect()
        }

        /// One invoke round trip; the plugin answers with `answer`.
        #[allow(clippy::result_large_err)]
        fn invoke(
            &mut self,
            selector: &str,
            calldata: &[Felt],
            answer: Result<Vec<Felt>, ErrorObject>,
        ) -> Result<Vec<Felt>, OracleError> {
            let id = self.host.invoke(selector, calldata).expect("idle");
            self.pump_to_plugin().expect("invoke frame");
            assert_eq!(
                self.plugin_events(),
                vec![ServerEvent::Invoke {
                    id: id.clone(),
                    selector: selector.into(),
                    calldata: calldata.to_vec()
                }]
            );
            self.plugin.respond(id.clone(), answer).expect("serving");
            self.pump_to_host().expect("response frame");
            match &self.host_events()[..] {
                [
                    ClientEvent::Invoked {
                        id: got,
                        selector: s,
                        result,
                    },
                ] if *got == id && s == selector => result.clone(),
                other => panic!("{other:?}"),
            }
        }
    }

    fn text(frames: &[Vec<u8>]) -> Vec<String> {
        frames
            .iter()
            .map(|f| String::from_utf8_lossy(f).into_owned())
            .collect()
    }

    #[test]
    fn felts_parse_only_the_canonical_form() {
        let max = format!("0x{FELT_MAX_DIGITS}");
        let ok: &[&str] = &["0x0", "0x1", "0x2710", "0xabcdef", &max];
        for s in ok {
            assert_eq!(Felt::parse(s).expect(s).as_str(), *s);
        }
        let over = format!("0x{}1", &FELT_MAX_DIGITS[..62]);
        let too_long = format!("0x1{}", "0".repeat(63));
        let bad: &[(&str, FeltError)] = &[
            ("", FeltError::MissingPrefix { got: "".into() }),
            ("10", FeltError::MissingPrefix { got: "10".into() }),
            ("0X1", FeltError::MissingPrefix { got: "0X1".into() }),
            ("0x", FeltError::NoDigits),
            (
                "0xA",
                FeltError::BadDigit {
                    got: "0xA".into(),
                    bad: 'A',
                    index: 2,
                },
            ),
            (
                "0x1g",
                FeltError::BadDigit {
                    got: "0x1g".into(),
                    bad: 'g',
                    index: 3,
                },
            ),
            (
                "0x-1",
                FeltError::BadDigit {
                    got: "0x-1".into(),
                    bad: '-',
                    index: 2,
                },
            ),
            ("0x00", FeltError::LeadingZero { got: "0x00".into() }),
            ("0x01", FeltError::LeadingZero { got: "0x01".into() }),
            (&over, FeltError::OutOfRange { digits: 63 }),
            (&too_long, FeltError::OutOfRange { digits: 64 }),
        ];
        for (s, want) in bad {
            assert_eq!(Felt::parse(s).as_ref(), Err(want), "{s:?}");
        }
    }

    #[test]
    fn felts_convert_from_and_to_u128() {
        for n in [0u128, 1, 0x10, 0x2710, u64::MAX as u128, u128::MAX] {
            let f = felt(n);
            assert_eq!(Felt::parse(f.as_str()).as_ref(), Ok(&f));
            assert_eq!(f.to_u128(), Some(n));
        }
        assert_eq!(felt(0).as_str(), "0x0");
        assert_eq!(felt(255).as_str(), "0xff");
        assert_eq!(Felt::zero(), felt(0));
        let big = Felt::parse(&format!("0x1{}", "0".repeat(32))).expect("2^128");
        assert_eq!(big.to_u128(), None);
        assert_eq!(
            serde_json::from_str::<Felt>("\"0x01\"").map_err(|e| e.to_string()),
            Err("felt \"0x01\" has a leading zero".to_owned())
        );
        assert_eq!(
            serde_json::to_string(&InvokeParams {
                selector: "f".into(),
                calldata: vec![felt(1)]
            })
            .expect("serialize"),
            r#"{"selector":"f","calldata":["0x1"]}"#
        );
    }

    #[test]
    fn first_byte_must_be_a_brace() {
        assert_eq!(check_first_byte(b'{'), Ok(()));
        for b in [b' ', b'\n', b'[', b'x', 0xef] {
            assert!(matches!(
                check_first_byte(b),
                Err(ProtocolError::BadPayload {
                    what: "first byte of oracle output",
                    ..
                })
            ));
        }
        let cases: &[&[u8]] = &[
            b" {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ready\"}",
            b"\xef\xbb\xbf{\"id\":0,\"method\":\"ready\"}",
            b"hello",
            b"",
        ];
        for frame in cases {
            let mut host = OracleClient::new();
            assert!(
                matches!(
                    host.handle_frame(frame),
                    Err(ProtocolError::BadPayload { .. })
                ),
                "{frame:?}"
            );
            assert_eq!(host.state(), ClientState::Closed);
            assert!(host.poll_transmit().is_none());
        }
    }

    #[test]
    fn handshake_exact_bytes_and_any_ready_id() {
        let mut p = Pair::new();
        assert_eq!(
            text(&p.pump_to_host().expect("ready")),
            [r#"{"jsonrpc":"2.0","id":0,"method":"ready"}"#]
        );
        assert_eq!(
            text(&p.pump_to_plugin().expect("ack")),
            [r#"{"jsonrpc":"2.0","id":0,"result":{}}"#]
        );
        assert_eq!(p.plugin.state(), ServerState::Serving);
        assert_eq!(p.host.state(), ClientState::Idle);

        // Any id, params and a missing `jsonrpc` member are fine.
        let readies: &[(&str, &str)] = &[
            (
                r#"{"jsonrpc":"2.0","id":"r-1","method":"ready"}"#,
                r#"{"jsonrpc":"2.0","id":"r-1","result":{}}"#,
            ),
            (
                r#"{"id":7,"method":"ready","params":{"version":2}}"#,
                r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
            ),
        ];
        for (ready, ack) in readies {
            let mut host = OracleClient::new();
            host.handle_frame(ready.as_bytes()).expect(ready);
            assert_eq!(host.poll_event(), Some(ClientEvent::Ready));
            assert_eq!(host.poll_transmit().as_deref(), Some(ack.as_bytes()));
        }
        let mut plugin = OracleServer::with_ready_id(Id::from("hello"));
        assert_eq!(
            plugin.poll_transmit().as_deref(),
            Some(&br#"{"jsonrpc":"2.0","id":"hello","method":"ready"}"#[..])
        );
    }

    #[test]
    fn invokes_results_and_plugin_errors() {
        let mut p = Pair::ready();
        type Case = (&'static str, Vec<Felt>, Result<Vec<Felt>, ErrorObject>);
        let cases: Vec<Case> = vec![
            ("f", vec![felt(0x2710)], Ok(vec![felt(0x5f5e100)])),
            ("empty", vec![], Ok(vec![])),
            (
                "many",
                vec![felt(1), felt(2), felt(3)],
                Ok(vec![felt(6), Felt::zero()]),
            ),
            (
                "f",
                vec![felt(0x2711)],
                Err(ErrorObject::new(-32603, "error message")),
            ),
            (
                "g",
                vec![],
                Err(ErrorObject::new(-32000, "custom").with_data(json!({"x": 1}))),
            ),
        ];
        for (selector, calldata, answer) in cases {
            let got = p.invoke(selector, &calldata, answer.clone());
            match answer {
                Ok(felts) => assert_eq!(got, Ok(felts)),
                Err(e) => assert_eq!(
                    got,
                    Err(OracleError {
                        origin: ErrorOrigin::Plugin,
                        code: e.code,
                        message: e.message,
                        data: e.data,
                        stopped: None,
                    })
                ),
            }
            assert_eq!(p.host.state(), ClientState::Idle);
        }
    }

    #[test]
    fn invoke_wire_format_matches_the_seed() {
        let mut p = Pair::ready();
        p.host.invoke("f", &[felt(0x2710)]).expect("idle");
        assert_eq!(
            text(&p.pump_to_plugin().expect("invoke")),
            [
                r#"{"jsonrpc":"2.0","id":0,"method":"invoke","params":{"selector":"f","calldata":["0x2710"]}}"#
            ]
        );
        let Some(ServerEvent::Invoke { id, .. }) = p.plugin.poll_event() else {
            panic!("no invoke")
        };
        p.plugin
            .respond(id, Ok(vec![felt(0x5f5e100)]))
            .expect("serving");
        assert_eq!(
            text(&p.pump_to_host().expect("result")),
            [r#"{"jsonrpc":"2.0","id":0,"result":["0x5f5e100"]}"#]
        );
        p.host_events();
        p.host.invoke("f", &[felt(0x2711)]).expect("idle");
        p.pump_to_plugin().expect("invoke");
        let Some(ServerEvent::Invoke { id, .. }) = p.plugin.poll_event() else {
            panic!("no invoke")
        };
        p.plugin
            .respond(id, Err(ErrorObject::new(-32603, "error message")))
            .expect("serving");
        assert_eq!(
            text(&p.pump_to_host().expect("error")),
            [r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"error message"}}"#]
        );
    }

    #[test]
    fn calls_in_the_wrong_state_are_unexpected() {
        let mut host = OracleClient::new();
        assert_eq!(
            host.invoke("f", &[]),
            Err(ProtocolError::Unexpected {
                state: "awaiting ready",
                got: "invoke \"f\"".into()
            })
        );
        assert!(host.poll_transmit().is_none(), "nothing before ready");

        let mut p = Pair::ready();
        p.host.invoke("a", &[]).expect("idle");
        assert_eq!(
            p.host.invoke("b", &[]),
            Err(ProtocolError::Unexpected {
                state: "an invoke is in flight",
                got: "invoke \"b\"".into()
            })
        );
        assert_eq!(p.pump_to_plugin().expect("one frame").len(), 1);
        // A response the host did not ask for.
        assert_eq!(
            p.host
                .handle_frame(br#"{"jsonrpc":"2.0","id":5,"result":[]}"#),
            Err(ProtocolError::UnknownResponseId { id: "5".into() })
        );
        // A second ready.
        assert!(matches!(
            p.host
                .handle_frame(br#"{"jsonrpc":"2.0","id":9,"method":"ready"}"#),
            Err(ProtocolError::Unexpected { .. })
        ));
        // The plugin may not answer twice or answer something it was not asked.
        assert_eq!(
            p.plugin.respond(Id::Num(3), Ok(vec![])),
            Err(ProtocolError::NotAwaitingResponse { id: "3".into() })
        );
        // A host that sends a second invoke anyway breaks the protocol.
        assert!(matches!(
            p.plugin.handle_frame(
                br#"{"jsonrpc":"2.0","id":8,"method":"invoke","params":{"selector":"x","calldata":[]}}"#
            ),
            Err(ProtocolError::Unexpected {
                state: "answering an invoke",
                ..
            })
        ));
    }

    #[test]
    fn plugin_output_before_ready_must_be_ready() {
        let cases: &[&str] = &[
            r#"{"jsonrpc":"2.0","id":0,"result":[]}"#,
            r#"{"jsonrpc":"2.0","method":"log","params":["hi"]}"#,
            r#"{"jsonrpc":"2.0","id":0,"method":"invoke"}"#,
        ];
        for frame in cases {
            let mut host = OracleClient::new();
            assert!(
                matches!(
                    host.handle_frame(frame.as_bytes()),
                    Err(ProtocolError::Unexpected {
                        state: "awaiting ready",
                        ..
                    })
                ),
                "{frame}"
            );
            assert!(host.poll_transmit().is_none());
        }
    }

    #[test]
    fn lenient_with_plugin_notifications_and_requests() {
        let mut p = Pair::ready();
        p.host
            .handle_frame(br#"{"jsonrpc":"2.0","method":"log","params":["hi"]}"#)
            .expect("ignored");
        p.host
            .handle_frame(br#"{"jsonrpc":"2.0","id":"q","method":"what"}"#)
            .expect("answered");
        assert_eq!(
            text(&[p.host.poll_transmit().expect("reply")]),
            [
                r#"{"jsonrpc":"2.0","id":"q","error":{"code":-32601,"message":"unknown method: what"}}"#
            ]
        );
        assert!(p.host_events().is_empty());
        assert_eq!(p.invoke("f", &[], Ok(vec![felt(1)])), Ok(vec![felt(1)]));
    }

    #[test]
    fn bad_results_are_bad_payload_and_complete_the_invoke() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"jsonrpc":"2.0","id":0,"result":{}}"#,
                "expected an array of felts, got an object",
            ),
            (
                r#"{"jsonrpc":"2.0","id":0,"result":["0x01"]}"#,
                "element 0: felt \"0x01\" has a leading zero",
            ),
            (
                r#"{"jsonrpc":"2.0","id":0,"result":["0x1","0xA"]}"#,
                "element 1: felt \"0xA\" has 'A' at 2, expected a lowercase hex digit",
            ),
            (
                r#"{"jsonrpc":"2.0","id":0,"result":[1]}"#,
                "element 0: expected a string, got a number",
            ),
            (
                r#"{"jsonrpc":"2.0","id":0,"result":["12"]}"#,
                "element 0: felt \"12\" does not start with 0x",
            ),
        ];
        for (frame, reason) in cases {
            let mut p = Pair::ready();
            p.host.invoke("f", &[]).expect("idle");
            assert_eq!(
                p.host.handle_frame(frame.as_bytes()),
                Err(ProtocolError::BadPayload {
                    what: "invoke result",
                    reason: (*reason).into()
                }),
                "{frame}"
            );
            match &p.host_events()[..] {
                [ClientEvent::Invoked { result: Err(e), .. }] => {
                    assert_eq!(e.origin, ErrorOrigin::BadResult);
                    assert_eq!(e.message, format!("bad invoke result: {reason}"));
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn server_answers_bad_invokes_and_unknown_methods_itself() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"selector":"f","calldata":["0x01"]}}"#,
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"invalid invoke params: calldata: element 0: felt \"0x01\" has a leading zero"}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"invoke","params":{"calldata":[]}}"#,
                r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"invalid invoke params: missing selector"}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"invoke","params":{"selector":1,"calldata":[]}}"#,
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"invalid invoke params: selector: expected a string, got a number"}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"invoke","params":{"selector":"f"}}"#,
                r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"invalid invoke params: missing calldata"}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"invoke"}"#,
                r#"{"jsonrpc":"2.0","id":5,"error":{"code":-32602,"message":"invalid invoke params: params must be an object with selector and calldata"}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":6,"method":"describe"}"#,
                r#"{"jsonrpc":"2.0","id":6,"error":{"code":-32601,"message":"unknown method: describe"}}"#,
            ),
        ];
        let mut p = Pair::ready();
        for (frame, reply) in cases {
            p.plugin.handle_frame(frame.as_bytes()).expect(frame);
            assert_eq!(text(&[p.plugin.poll_transmit().expect("reply")]), [*reply]);
            assert!(p.plugin_events().is_empty());
        }
        // Unknown notifications are ignored, and the plugin still serves.
        p.plugin
            .handle_frame(br#"{"jsonrpc":"2.0","method":"$/progress"}"#)
            .expect("ignored");
        assert!(p.plugin.poll_transmit().is_none());
        assert_eq!(p.invoke("f", &[], Ok(vec![])), Ok(vec![]));
    }

    #[test]
    fn server_waits_for_the_ack() {
        let mut plugin = OracleServer::new();
        plugin.poll_transmit();
        assert!(matches!(
            plugin.handle_frame(
                br#"{"jsonrpc":"2.0","id":0,"method":"invoke","params":{"selector":"f","calldata":[]}}"#
            ),
            Err(ProtocolError::Unexpected {
                state: "awaiting the ready ack",
                ..
            })
        ));
        assert_eq!(
            plugin.handle_frame(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Err(ProtocolError::UnknownResponseId { id: "1".into() })
        );
        plugin
            .handle_frame(br#"{"jsonrpc":"2.0","id":0,"result":{}}"#)
            .expect("ack");
        assert_eq!(plugin.poll_event(), Some(ServerEvent::Ready));
    }

    #[test]
    fn a_rejected_ready_terminates_the_plugin() {
        let mut plugin = OracleServer::new();
        plugin.poll_transmit();
        plugin
            .handle_frame(
                br#"{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"go away"}}"#,
            )
            .expect("error ack");
        assert_eq!(
            plugin.poll_event(),
            Some(ServerEvent::Rejected {
                error: ErrorObject::new(-32603, "go away")
            })
        );
        assert_eq!(plugin.state(), ServerState::Rejected);
        assert!(plugin.must_terminate());
        assert!(matches!(
            plugin.handle_frame(br#"{"jsonrpc":"2.0","method":"shutdown"}"#),
            Err(ProtocolError::Unexpected { .. })
        ));
    }

    #[test]
    fn shutdown_is_a_notification_and_closes_both_sides() {
        let mut p = Pair::ready();
        p.host.shutdown().expect("idle");
        assert_eq!(
            text(&p.pump_to_plugin().expect("shutdown")),
            [r#"{"jsonrpc":"2.0","method":"shutdown"}"#]
        );
        assert_eq!(p.plugin_events(), vec![ServerEvent::Shutdown]);
        assert!(p.plugin.must_terminate());
        assert_eq!(p.host.state(), ClientState::Closed);
        assert!(matches!(
            p.host.invoke("f", &[]),
            Err(ProtocolError::Unexpected {
                state: "closed",
                ..
            })
        ));
        assert!(matches!(
            p.host.shutdown(),
            Err(ProtocolError::Unexpected { .. })
        ));
        // Late plugin output is refused.
        assert!(matches!(
            p.host
                .handle_frame(br#"{"jsonrpc":"2.0","id":0,"result":[]}"#),
            Err(ProtocolError::Unexpected {
                state: "closed",
                ..
            })
        ));

        // Before ready nothing is sent.
        let mut host = OracleClient::new();
        host.shutdown().expect("closes");
        assert!(host.poll_transmit().is_none());
        assert_eq!(host.state(), ClientState::Closed);
    }

    #[test]
    fn shutdown_with_an_invoke_in_flight_completes_it() {
        let mut p = Pair::ready();
        p.host.invoke("slow", &[]).expect("idle");
        p.pump_to_plugin().expect("invoke");
        p.host.shutdown().expect("invoking");
        match &p.host_events()[..] {
            [
                ClientEvent::Invoked {
                    selector,
                    result: Err(e),
                    ..
                },
            ] => {
                assert_eq!(selector, "slow");
                assert_eq!(e.origin, ErrorOrigin::Host);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fail_pending_carries_reason_and_stderr() {
        let mut p = Pair::ready();
        let id = p.host.invoke("sqrt", &[felt(4)]).expect("idle");
        p.host.fail_pending(&Stopped::ended(
            crate::stopped::Exit::OutOfFuel { limit: 9 },
            vec!["line 1".to_owned(), "line 2".to_owned()],
        ));
        assert_eq!(
            p.host_events(),
            vec![ClientEvent::Invoked {
                id,
                selector: "sqrt".into(),
                result: Err(OracleError {
                    origin: ErrorOrigin::Host,
                    code: ErrorCode::Int(-32603),
                    message: "oracle failed: plugin ran out of fuel (limit 9)".into(),
                    data: Some(json!({
                        "reason": "plugin ran out of fuel (limit 9)",
                        "exit": {"kind": "out_of_fuel", "limit": 9},
                        "stderr": ["line 1", "line 2"]
                    })),
                    stopped: Some(Stopped::ended(
                        crate::stopped::Exit::OutOfFuel { limit: 9 },
                        vec!["line 1".to_owned(), "line 2".to_owned()],
                    )),
                })
            }]
        );
        assert_eq!(p.host.state(), ClientState::Closed);
        // Nothing in flight: no event, still closed.
        p.host.fail_pending(&Stopped::by_host("again", Vec::new()));
        assert!(p.host_events().is_empty());
    }

    #[test]
    fn garbage_from_either_side_is_a_typed_error() {
        let mut p = Pair::ready();
        assert!(matches!(
            p.host.handle_frame(b"{not json"),
            Err(ProtocolError::NotJson { .. })
        ));
        assert!(matches!(
            p.plugin
                .handle_frame(b"{\"jsonrpc\":\"1.0\",\"method\":\"shutdown\"}"),
            Err(ProtocolError::WrongVersion { .. })
        ));
    }

    /// Every golden transcript line, both directions, as one input: a seed corpus for
    /// [`fuzz`], with each line's truncations and some hostile lines.
    const FUZZ_SEEDS: &[&str] = &[
        r#"{"jsonrpc":"2.0","id":0,"method":"ready"}"#,
        r#"{"jsonrpc":"2.0","id":0,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":0,"method":"invoke","params":{"selector":"sqrt","calldata":["0x10"]}}"#,
        r#"{"jsonrpc":"2.0","id":0,"result":["0x4"]}"#,
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"sqrt: expected exactly one argument"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":["0x0","0x800000000000011000000000000000000000000000000000000000000000000"]}"#,
        r#"{"jsonrpc":"2.0","id":2,"result":["0x800000000000011000000000000000000000000000000000000000000000001"]}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":["0x01","0xA",7]}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"ready"}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"other"}"#,
        r#"{"jsonrpc":"2.0","method":"shutdown"}"#,
        r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"not today"}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"invoke","params":{"selector":1,"calldata":[]}}"#,
        "0xffffffffffffffffffffffffffffffff",
        "0x100000000000000000000000000000000",
        "0x0",
        "[]",
        " {}",
    ];

    #[test]
    fn fuzz_body_over_the_seed_corpus() {
        fuzz(FUZZ_SEEDS.join("\n").as_bytes());
        for seed in FUZZ_SEEDS {
            for cut in 0..=seed.len() {
                fuzz(&seed.as_bytes()[..cut]);
            }
        }
        // Shuffled sessions: each seed followed by every other.
        for a in FUZZ_SEEDS {
            for b in FUZZ_SEEDS {
                fuzz(format!("{a}\n{b}\n{a}").as_bytes());
            }
        }
    }
}
