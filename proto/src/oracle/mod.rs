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

mod fuzz;
mod types;

use std::collections::VecDeque;

pub use fuzz::fuzz;
use serde_json::{Value, json};
pub use types::*;

use crate::jsonrpc::{Dialect, ErrorObject, Event, Id, Message, Peer, ProtocolError};
use crate::machine::ClientMachine;
use crate::stopped::Stopped;

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

fn felts_to_value(felts: &[Felt]) -> Value {
    Value::Array(felts.iter().map(|f| Value::from(f.as_str())).collect())
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

/// The Cairo oracle under the supervisor (`crate::supervise`): an `invoke` is a budgeted
/// request; the plugin's `ready` is its handshake, and a fresh instance's `ready` is answered
/// with the engine's recorded answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Supervised;

impl crate::supervise::SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> crate::supervise::FromEngine {
        crate::jsonrpc::classify_engine(frame, &[])
    }
    fn classify_plugin(&self, frame: &[u8]) -> crate::supervise::FromPlugin {
        crate::jsonrpc::classify_plugin(frame, &["ready"])
    }
    fn stopped_answer(&self, key: &str, _method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        let error = stopped_error(stopped).to_error_object();
        crate::jsonrpc::error_answer(key, Dialect::JsonRpc2, error)
    }
}

/// A result that is not an array of felts completes its invoke with an error; anything else
/// refused is the plugin breaking the protocol (a first byte other than `{` included).
impl ClientMachine for OracleClient {
    type Key = Id;
    type Event = ClientEvent;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        OracleClient::handle_frame(self, frame)
    }
    fn is_fatal(error: &ProtocolError) -> bool {
        !matches!(error, ProtocolError::BadPayload { .. })
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        OracleClient::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<ClientEvent> {
        OracleClient::poll_event(self)
    }
    fn completes(event: &ClientEvent) -> Option<&Id> {
        match event {
            ClientEvent::Invoked { id, .. } => Some(id),
            _ => None,
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        OracleClient::fail_pending(self, stopped);
    }
}

crate::machine::server_machine!(OracleServer => ServerEvent, ProtocolError);

#[cfg(test)]
mod tests;
