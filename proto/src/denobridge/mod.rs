//! terraform-provider-denobridge: JSON-RPC 2.0 over JSON Lines between the Go Terraform
//! provider (host, [`Client`]) and a provider process (plugin, [`Server`]).
//!
//! Both machines are built on [`Peer`]; they add the denobridge rules on top:
//! - The host calls `health` first; every other call before it is [`ProtocolError::Unexpected`].
//! - Method names collide across provider kinds (`read` is a resource read or a data source
//!   read), so each machine is created for one [`ProviderKind`] and types params and results
//!   for that kind. A call the kind does not have is refused locally (client) or answered
//!   `-32601 Method not found` (server).
//! - `shutdown` is a request in the guide but a notification from the real Go host: the
//!   server accepts both (answers `{}` to the request form), the client offers both
//!   ([`Client::shutdown_request`], [`Client::shutdown_notify`]). Like the Go host, the client
//!   numbers requests from 0 and omits `params` when a call has none.
//! - Several requests may be in flight; answers are matched by id, in any order.
//! - `invokeProgress` notifications flow plugin → host while an `invoke` is pending.
//! - There is no cancel message on the wire: [`Client::cancel`] completes the request locally
//!   with `-32800 request cancelled` and drops the late answer.
//! - A plugin may answer a bare `-32603 Internal error` with the detail only on stderr:
//!   [`with_stderr`] attaches a stderr tail to such an error, [`Client::fail_pending`] fails
//!   every in-flight request with `data: {"reason", "stderr"}` when the plugin is gone.
//!
//! Deadlines are optional: [`Client::set_deadline`] plus [`Client::handle_timeout`] with the
//! caller's `now`. [`fuzz`] is the fuzz body for both machines.
//!
//! The server answers `health` and `shutdown` itself; every other call becomes a
//! [`ServerEvent::Request`] for the plugin's handler.
//!
//! ```text
//!   host (Client)                                   plugin (Server)
//!   health()            ── {"id":0,"method":"health"} ──►   answers {"ok":true} itself
//!   create(props)       ── {"id":1,"method":"create"} ──►   ServerEvent::Request → handler
//!   invoke(props)       ── {"id":2,"method":"invoke"} ──►   ServerEvent::Request → handler
//!   ClientEvent::Progress ◄── {"method":"invokeProgress"} ─   progress(&id, ..)
//!   ClientEvent::Response ◄── {"id":2,"result":..} ────────   respond(id 2, ..)
//!   ClientEvent::Response ◄── {"id":1,"result":..} ────────   respond(id 1, ..)  (any order)
//!   shutdown_notify()   ── {"method":"shutdown"} ──────►   ServerEvent::Shutdown
//! ```
//!
//! What it does not do: IO, framing (JSON Lines is the caller's framer), timers, or check
//! that a plugin's state values are the objects the schema asks for (they stay `Value`).
//!
//! ```
//! use sandpipe_proto::denobridge::*;
//! use serde_json::json;
//!
//! let mut host = Client::new(ProviderKind::Resource);
//! let mut plugin = Server::new(ProviderKind::Resource);
//! host.health().unwrap();
//! let id = host.create(PropsParams::new(json!({"name": "a"}))).unwrap();
//! while let Some(f) = host.poll_transmit() { plugin.handle_frame(&f).unwrap(); }
//! // The server answered health itself; create goes to the handler.
//! let Some(ServerEvent::Request { id: got, request: Request::Create(p) }) = plugin.poll_event()
//! else { panic!() };
//! assert_eq!(p.props, json!({"name": "a"}));
//! let result = CreateResult { id: "r1".into(), state: json!({}), ..Default::default() };
//! plugin.respond(got, Ok(Response::Create(result))).unwrap();
//! while let Some(f) = plugin.poll_transmit() { host.handle_frame(&f).unwrap(); }
//! assert!(matches!(host.poll_event(), Some(ClientEvent::Response { method: Method::Health, .. })));
//! let Some(ClientEvent::Response { id: done, result: Ok(Response::Create(r)), .. }) = host.poll_event()
//! else { panic!() };
//! assert_eq!((done, r.id.as_str()), (id, "r1"));
//! ```

mod fuzz;
mod types;

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

pub use fuzz::fuzz;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
pub use types::*;

use crate::jsonrpc::{
    Dialect, ErrorObject, Event, INTERNAL_ERROR, INVALID_PARAMS, Id, METHOD_NOT_FOUND, Peer,
    ProtocolError,
};
use crate::machine::ClientMachine;
use crate::stopped::Stopped;

/// Which set of methods a provider process implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProviderKind {
    /// create / read / update / delete / modifyPlan.
    Resource,
    /// read.
    DataSource,
    /// open / renew / close.
    Ephemeral,
    /// invoke (+ invokeProgress notifications).
    Action,
}

impl ProviderKind {
    /// The kind as a phrase: "resource", "data source", ….
    pub fn describe(self) -> &'static str {
        match self {
            ProviderKind::Resource => "resource provider",
            ProviderKind::DataSource => "data source provider",
            ProviderKind::Ephemeral => "ephemeral resource provider",
            ProviderKind::Action => "action provider",
        }
    }
}

/// A denobridge method. `Read` means the resource read or the data source read, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Method {
    /// `health` (all kinds).
    Health,
    /// `shutdown` (all kinds).
    Shutdown,
    /// `create` (resource).
    Create,
    /// `read` (resource, data source).
    Read,
    /// `update` (resource).
    Update,
    /// `delete` (resource).
    Delete,
    /// `modifyPlan` (resource, optional).
    ModifyPlan,
    /// `open` (ephemeral).
    Open,
    /// `renew` (ephemeral, optional).
    Renew,
    /// `close` (ephemeral, optional).
    Close,
    /// `invoke` (action).
    Invoke,
}

impl Method {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Health => "health",
            Method::Shutdown => "shutdown",
            Method::Create => "create",
            Method::Read => "read",
            Method::Update => "update",
            Method::Delete => "delete",
            Method::ModifyPlan => "modifyPlan",
            Method::Open => "open",
            Method::Renew => "renew",
            Method::Close => "close",
            Method::Invoke => "invoke",
        }
    }

    /// The method called `name` if a provider of `kind` has it.
    pub fn parse(kind: ProviderKind, name: &str) -> Option<Method> {
        use Method::*;
        let m = match name {
            "health" => Health,
            "shutdown" => Shutdown,
            "create" => Create,
            "read" => Read,
            "update" => Update,
            "delete" => Delete,
            "modifyPlan" => ModifyPlan,
            "open" => Open,
            "renew" => Renew,
            "close" => Close,
            "invoke" => Invoke,
            _ => return None,
        };
        m.belongs_to(kind).then_some(m)
    }

    /// Whether a provider of `kind` has this method.
    pub fn belongs_to(self, kind: ProviderKind) -> bool {
        use Method::*;
        match self {
            Health | Shutdown => true,
            Create | Update | Delete | ModifyPlan => kind == ProviderKind::Resource,
            Read => matches!(kind, ProviderKind::Resource | ProviderKind::DataSource),
            Open | Renew | Close => kind == ProviderKind::Ephemeral,
            Invoke => kind == ProviderKind::Action,
        }
    }
}

/// The notification a plugin sends during `invoke`.
pub const INVOKE_PROGRESS: &str = "invokeProgress";

/// A call from the host, with typed params (what the plugin's handler implements).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Request {
    /// Resource `create`.
    Create(PropsParams),
    /// Resource `read`.
    ReadResource(ReadParams),
    /// Resource `update`.
    Update(UpdateParams),
    /// Resource `delete`.
    Delete(DeleteParams),
    /// Resource `modifyPlan`.
    ModifyPlan(ModifyPlanParams),
    /// Data source `read`.
    ReadData(PropsParams),
    /// Ephemeral `open`.
    Open(PropsParams),
    /// Ephemeral `renew`.
    Renew(PrivateParams),
    /// Ephemeral `close`.
    Close(PrivateParams),
    /// Action `invoke`.
    Invoke(PropsParams),
}

impl Request {
    /// Its method.
    pub fn method(&self) -> Method {
        match self {
            Request::Create(_) => Method::Create,
            Request::ReadResource(_) | Request::ReadData(_) => Method::Read,
            Request::Update(_) => Method::Update,
            Request::Delete(_) => Method::Delete,
            Request::ModifyPlan(_) => Method::ModifyPlan,
            Request::Open(_) => Method::Open,
            Request::Renew(_) => Method::Renew,
            Request::Close(_) => Method::Close,
            Request::Invoke(_) => Method::Invoke,
        }
    }

    /// The typed request for `method` with JSON `params`, as a provider of `kind` reads it.
    pub fn decode(kind: ProviderKind, method: Method, params: Value) -> Result<Request, String> {
        Ok(match (method, kind) {
            (Method::Create, _) => Request::Create(from_value(params)?),
            (Method::Read, ProviderKind::DataSource) => Request::ReadData(from_value(params)?),
            (Method::Read, _) => Request::ReadResource(from_value(params)?),
            (Method::Update, _) => Request::Update(from_value(params)?),
            (Method::Delete, _) => Request::Delete(from_value(params)?),
            (Method::ModifyPlan, _) => Request::ModifyPlan(from_value(params)?),
            (Method::Open, _) => Request::Open(from_value(params)?),
            (Method::Renew, _) => Request::Renew(from_value(params)?),
            (Method::Close, _) => Request::Close(from_value(params)?),
            (Method::Invoke, _) => Request::Invoke(from_value(params)?),
            (Method::Health | Method::Shutdown, _) => {
                return Err(format!("{} has no handler params", method.name()));
            }
        })
    }
}

/// A successful result, typed by method (shared by both machines).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Response {
    /// `health`.
    Health(HealthResult),
    /// `shutdown` (the request form): an object, normally `{}`.
    Shutdown(Value),
    /// Resource `create`.
    Create(CreateResult),
    /// Resource `read`.
    ReadResource(ReadResult),
    /// Resource `update`.
    Update(UpdateResult),
    /// Resource `delete`.
    Delete(DoneResult),
    /// Resource `modifyPlan`.
    ModifyPlan(ModifyPlanResult),
    /// Data source `read`.
    ReadData(DataResult),
    /// Ephemeral `open`.
    Open(OpenResult),
    /// Ephemeral `renew`.
    Renew(RenewResult),
    /// Ephemeral `close`.
    Close(DoneResult),
    /// Action `invoke`.
    Invoke(DoneResult),
}

impl Response {
    /// The method it answers.
    pub fn method(&self) -> Method {
        match self {
            Response::Health(_) => Method::Health,
            Response::Shutdown(_) => Method::Shutdown,
            Response::Create(_) => Method::Create,
            Response::ReadResource(_) | Response::ReadData(_) => Method::Read,
            Response::Update(_) => Method::Update,
            Response::Delete(_) => Method::Delete,
            Response::ModifyPlan(_) => Method::ModifyPlan,
            Response::Open(_) => Method::Open,
            Response::Renew(_) => Method::Renew,
            Response::Close(_) => Method::Close,
            Response::Invoke(_) => Method::Invoke,
        }
    }

    fn decode(kind: ProviderKind, method: Method, v: Value) -> Result<Response, String> {
        Ok(match (method, kind) {
            (Method::Health, _) => Response::Health(from_value(v)?),
            (Method::Shutdown, _) => Response::Shutdown(v),
            (Method::Create, _) => Response::Create(from_value(v)?),
            (Method::Read, ProviderKind::DataSource) => Response::ReadData(from_value(v)?),
            (Method::Read, _) => Response::ReadResource(from_value(v)?),
            (Method::Update, _) => Response::Update(from_value(v)?),
            (Method::Delete, _) => Response::Delete(from_value(v)?),
            (Method::ModifyPlan, _) => Response::ModifyPlan(from_value(v)?),
            (Method::Open, _) => Response::Open(from_value(v)?),
            (Method::Renew, _) => Response::Renew(from_value(v)?),
            (Method::Close, _) => Response::Close(from_value(v)?),
            (Method::Invoke, _) => Response::Invoke(from_value(v)?),
        })
    }

    /// The result as JSON, as it goes on the wire.
    pub fn encode(&self) -> Result<Value, serde_json::Error> {
        match self {
            Response::Health(r) => serde_json::to_value(r),
            Response::Shutdown(v) => Ok(v.clone()),
            Response::Create(r) => serde_json::to_value(r),
            Response::ReadResource(r) => serde_json::to_value(r),
            Response::Update(r) => serde_json::to_value(r),
            Response::Delete(r) | Response::Close(r) | Response::Invoke(r) => {
                serde_json::to_value(r)
            }
            Response::ModifyPlan(r) => serde_json::to_value(r),
            Response::ReadData(r) => serde_json::to_value(r),
            Response::Open(r) => serde_json::to_value(r),
            Response::Renew(r) => serde_json::to_value(r),
        }
    }
}

fn from_value<T: DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| e.to_string())
}

fn to_params<T: Serialize>(what: &'static str, p: &T) -> Result<Value, ProtocolError> {
    serde_json::to_value(p).map_err(|e| ProtocolError::BadPayload {
        what,
        reason: e.to_string(),
    })
}

/// `-32603 Internal error`, what a failing plugin method answers.
pub fn internal_error() -> ErrorObject {
    ErrorObject::new(INTERNAL_ERROR, "Internal error")
}

/// `-32601 Method not found`, what an optional method that is not implemented answers.
pub fn method_not_found() -> ErrorObject {
    ErrorObject::new(METHOD_NOT_FOUND, "Method not found")
}

/// Attach the plugin's last stderr lines to an error it answered (a bare `-32603` carries its
/// detail only on stderr). `data` becomes an object with a `stderr` array; an existing object
/// keeps its members, any other existing `data` moves under `"data"`.
pub fn with_stderr(mut error: ErrorObject, stderr_tail: &[String]) -> ErrorObject {
    let tail = Value::from(stderr_tail.to_vec());
    error.data = Some(match error.data.take() {
        None => json!({ "stderr": tail }),
        Some(Value::Object(mut m)) => {
            m.insert("stderr".into(), tail);
            Value::Object(m)
        }
        Some(other) => json!({ "data": other, "stderr": tail }),
    });
    error
}

/// The answer to a request the plugin will never answer: `-32603`, the reason as message,
/// data `{"reason", "exit", "stderr"}` ([`jsonrpc::stopped_error`](crate::jsonrpc::stopped_error)).
pub fn stopped_error(stopped: &Stopped) -> ErrorObject {
    crate::jsonrpc::stopped_error(Dialect::JsonRpc2, stopped)
}

/// denobridge under the supervisor (`crate::supervise`): `health` is the handshake replayed to
/// a fresh instance; every other request is budgeted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Supervised;

impl crate::supervise::SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> crate::supervise::FromEngine {
        crate::jsonrpc::classify_engine(frame, &["health"])
    }
    fn classify_plugin(&self, frame: &[u8]) -> crate::supervise::FromPlugin {
        crate::jsonrpc::classify_plugin(frame, &[])
    }
    fn stopped_answer(&self, key: &str, _method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        crate::jsonrpc::error_answer(key, Dialect::JsonRpc2, stopped_error(stopped))
    }
}

/// What the plugin did, as the host sees it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "messages are built once and moved a few times; boxing would burden every match"
)]
pub enum ClientEvent {
    /// The answer to one of our requests, or its local completion (cancelled, plugin gone).
    Response {
        /// Our request's id.
        id: Id,
        /// Our request's method.
        method: Method,
        /// The typed result or the error.
        result: Result<Response, ErrorObject>,
        /// Set when the plugin's answer does not fit the method's schema: `result` is then the
        /// `-32603` the machine made of it, and this the violation
        /// [`Client::handle_frame`] returns, so a caller can tell the two apart.
        refused: Option<ProtocolError>,
    },
    /// An `invokeProgress` notification.
    Progress {
        /// The pending `invoke` it belongs to, when exactly one is pending (the wire does not
        /// say).
        invoke: Option<Id>,
        /// The notification's params.
        progress: InvokeProgress,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientState {
    AwaitingHealth,
    Ready,
    ShutdownRequested,
    Closed,
}

impl ClientState {
    fn describe(self) -> &'static str {
        match self {
            ClientState::AwaitingHealth => "awaiting health",
            ClientState::Ready => "ready",
            ClientState::ShutdownRequested => "shutting down",
            ClientState::Closed => "shut down",
        }
    }
}

/// The host side of a denobridge connection (what the Go Terraform provider does).
#[derive(Debug)]
pub struct Client {
    kind: ProviderKind,
    peer: Peer,
    state: ClientState,
    methods: BTreeMap<Id, Method>,
    events: VecDeque<ClientEvent>,
    deadline: Option<Instant>,
}

impl Client {
    /// A client for a provider of `kind`; request ids count from 0.
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            peer: Peer::new(Dialect::JsonRpc2),
            state: ClientState::AwaitingHealth,
            methods: BTreeMap::new(),
            events: VecDeque::new(),
            deadline: None,
        }
    }

    /// Give every request sent from now on this deadline (`None`: no deadline, the default).
    /// A request still pending at [`Client::handle_timeout`] with `now >= deadline` completes
    /// with `-32603 request timed out`; its late answer is ignored.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }

    /// Time has passed (the caller's clock): fail requests whose deadline is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.peer.handle_timeout(now);
        // Only local completions are queued here; they cannot violate the protocol.
        let _ = self.drain();
    }

    /// The earliest pending deadline, for the driver's timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.peer.poll_timeout()
    }

    /// The provider kind this client talks to.
    pub fn kind(&self) -> ProviderKind {
        self.kind
    }

    /// Whether shutdown was sent (notification) or answered (request).
    pub fn is_closed(&self) -> bool {
        self.state == ClientState::Closed
    }

    /// Send `health` (no params, like the Go host). Must be the first call.
    pub fn health(&mut self) -> Result<Id, ProtocolError> {
        match self.state {
            ClientState::AwaitingHealth | ClientState::Ready => {
                self.state = ClientState::Ready;
                Ok(self.send(Method::Health, None))
            }
            s => Err(unexpected(s.describe(), Method::Health)),
        }
    }

    /// Resource `create`.
    pub fn create(&mut self, params: PropsParams) -> Result<Id, ProtocolError> {
        self.call(Method::Create, &params)
    }

    /// Resource `read` (the answer may be [`ReadResult::Gone`]).
    pub fn read(&mut self, params: ReadParams) -> Result<Id, ProtocolError> {
        self.require(ProviderKind::Resource, Method::Read)?;
        self.call(Method::Read, &params)
    }

    /// Resource `update`.
    pub fn update(&mut self, params: UpdateParams) -> Result<Id, ProtocolError> {
        self.call(Method::Update, &params)
    }

    /// Resource `delete`.
    pub fn delete(&mut self, params: DeleteParams) -> Result<Id, ProtocolError> {
        self.call(Method::Delete, &params)
    }

    /// Resource `modifyPlan` (optional: the plugin may answer `-32601`).
    pub fn modify_plan(&mut self, params: ModifyPlanParams) -> Result<Id, ProtocolError> {
        self.call(Method::ModifyPlan, &params)
    }

    /// Data source `read`.
    pub fn read_data(&mut self, params: PropsParams) -> Result<Id, ProtocolError> {
        self.require(ProviderKind::DataSource, Method::Read)?;
        self.call(Method::Read, &params)
    }

    /// Ephemeral `open`.
    pub fn open(&mut self, params: PropsParams) -> Result<Id, ProtocolError> {
        self.call(Method::Open, &params)
    }

    /// Ephemeral `renew`.
    pub fn renew(&mut self, params: PrivateParams) -> Result<Id, ProtocolError> {
        self.call(Method::Renew, &params)
    }

    /// Ephemeral `close`.
    pub fn close(&mut self, params: PrivateParams) -> Result<Id, ProtocolError> {
        self.call(Method::Close, &params)
    }

    /// Any handler call, typed by [`Request`] (for a caller holding a method name and JSON
    /// params: `sandpipe call`).
    pub fn request(&mut self, request: Request) -> Result<Id, ProtocolError> {
        match request {
            Request::Create(p) => self.create(p),
            Request::ReadResource(p) => self.read(p),
            Request::Update(p) => self.update(p),
            Request::Delete(p) => self.delete(p),
            Request::ModifyPlan(p) => self.modify_plan(p),
            Request::ReadData(p) => self.read_data(p),
            Request::Open(p) => self.open(p),
            Request::Renew(p) => self.renew(p),
            Request::Close(p) => self.close(p),
            Request::Invoke(p) => self.invoke(p),
        }
    }

    /// Action `invoke`; `invokeProgress` notifications may arrive before its answer.
    pub fn invoke(&mut self, params: PropsParams) -> Result<Id, ProtocolError> {
        self.call(Method::Invoke, &params)
    }

    /// `shutdown` as the guide shows it: a request, answered `{}`.
    pub fn shutdown_request(&mut self) -> Result<Id, ProtocolError> {
        self.check_ready(Method::Shutdown)?;
        self.state = ClientState::ShutdownRequested;
        Ok(self.send(Method::Shutdown, None))
    }

    /// `shutdown` as the real Go host sends it: a notification; nothing comes back.
    pub fn shutdown_notify(&mut self) -> Result<(), ProtocolError> {
        self.check_ready(Method::Shutdown)?;
        self.state = ClientState::Closed;
        self.peer.notify(Method::Shutdown.name(), None);
        Ok(())
    }

    /// Give up on request `id`: it completes now with `-32800 request cancelled` and its late
    /// answer is ignored. Nothing goes on the wire (denobridge has no cancel message). Returns
    /// false if `id` was not pending.
    pub fn cancel(&mut self, id: &Id) -> bool {
        let cancelled = self.peer.cancel(id);
        // Only local completions are queued here; they cannot violate the protocol.
        let _ = self.drain();
        cancelled
    }

    /// The plugin is gone (exit, trap, deadline): complete every in-flight request with
    /// [`stopped_error`].
    pub fn fail_pending(&mut self, stopped: &Stopped) {
        self.peer.fail_pending(stopped_error(stopped));
        // Only local completions are queued here; they cannot violate the protocol.
        let _ = self.drain();
    }

    /// Requests still waiting for an answer.
    pub fn pending(&self) -> impl Iterator<Item = (&Id, Method)> {
        self.methods.iter().map(|(id, m)| (id, *m))
    }

    /// Feed one frame from the plugin.
    ///
    /// A result that does not match the method's schema still completes its request (with a
    /// `-32603` error event) and is then reported as [`ProtocolError::BadPayload`].
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        let handled = self.peer.handle_frame(frame);
        let drained = self.drain();
        handled?;
        drained
    }

    /// The next frame to send (unframed JSON).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.peer.poll_transmit()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    fn require(&self, kind: ProviderKind, method: Method) -> Result<(), ProtocolError> {
        if self.kind == kind {
            Ok(())
        } else {
            Err(unexpected(self.kind.describe(), method))
        }
    }

    fn check_ready(&self, method: Method) -> Result<(), ProtocolError> {
        if !method.belongs_to(self.kind) {
            return Err(unexpected(self.kind.describe(), method));
        }
        match self.state {
            ClientState::Ready => Ok(()),
            s => Err(unexpected(s.describe(), method)),
        }
    }

    fn call<T: Serialize>(&mut self, method: Method, params: &T) -> Result<Id, ProtocolError> {
        self.check_ready(method)?;
        let params = to_params("params", params)?;
        Ok(self.send(method, Some(params)))
    }

    fn send(&mut self, method: Method, params: Option<Value>) -> Id {
        let id = self
            .peer
            .request_with_deadline(method.name(), params, self.deadline);
        self.methods.insert(id.clone(), method);
        id
    }

    /// Turn the peer's events into typed ones; the first protocol violation is returned after
    /// every event has been handled.
    fn drain(&mut self) -> Result<(), ProtocolError> {
        let mut first_err = None;
        while let Some(ev) = self.peer.poll_event() {
            if let Err(e) = self.handle_event(ev) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn handle_event(&mut self, ev: Event) -> Result<(), ProtocolError> {
        match ev {
            Event::Response { id, result, .. } => {
                let Some(method) = self.methods.remove(&id) else {
                    return Err(ProtocolError::UnknownResponseId { id: id.to_string() });
                };
                if method == Method::Shutdown {
                    self.state = ClientState::Closed;
                }
                let (result, err) = match result {
                    Err(e) => (Err(e), None),
                    Ok(v) => match Response::decode(self.kind, method, v) {
                        Ok(r) => (Ok(r), None),
                        Err(reason) => (
                            Err(ErrorObject::new(
                                INTERNAL_ERROR,
                                format!("invalid {} result: {reason}", method.name()),
                            )),
                            Some(ProtocolError::BadPayload {
                                what: "result",
                                reason: format!("{}: {reason}", method.name()),
                            }),
                        ),
                    },
                };
                self.events.push_back(ClientEvent::Response {
                    id,
                    method,
                    result,
                    refused: err.clone(),
                });
                err.map_or(Ok(()), Err)
            }
            Event::Notification { method, params } if method == INVOKE_PROGRESS => {
                let invokes: Vec<&Id> = self
                    .methods
                    .iter()
                    .filter(|(_, m)| **m == Method::Invoke)
                    .map(|(id, _)| id)
                    .collect();
                if invokes.is_empty() {
                    return Err(ProtocolError::Unexpected {
                        state: "no invoke pending",
                        got: format!("notification {INVOKE_PROGRESS:?}"),
                    });
                }
                let invoke = match invokes[..] {
                    [one] => Some(one.clone()),
                    _ => None,
                };
                let progress = from_value(params.unwrap_or(Value::Null)).map_err(|reason| {
                    ProtocolError::BadPayload {
                        what: "invokeProgress params",
                        reason,
                    }
                })?;
                self.events
                    .push_back(ClientEvent::Progress { invoke, progress });
                Ok(())
            }
            Event::Notification { method, .. } => Err(ProtocolError::Unexpected {
                state: self.state.describe(),
                got: format!("notification {method:?}"),
            }),
            Event::Request { id, method, .. } => {
                // The host serves nothing; say so rather than leave the plugin waiting.
                let _ = self.peer.respond(id.clone(), Err(method_not_found()));
                Err(ProtocolError::Unexpected {
                    state: self.state.describe(),
                    got: format!("request {method:?} (id {id})"),
                })
            }
        }
    }
}

fn unexpected(state: &'static str, method: Method) -> ProtocolError {
    ProtocolError::Unexpected {
        state,
        got: format!("call {:?}", method.name()),
    }
}

/// What the host asked the plugin.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "messages are built once and moved a few times; boxing would burden every match"
)]
pub enum ServerEvent {
    /// Answer with [`Server::respond`] (in any order).
    Request {
        /// The request's id.
        id: Id,
        /// The typed call.
        request: Request,
    },
    /// `shutdown` arrived: `id` is `Some` for the request form (already answered `{}`),
    /// `None` for the notification form. Stop reading after this.
    Shutdown {
        /// The request's id, if it was a request.
        id: Option<Id>,
    },
}

/// The plugin side of a denobridge connection.
#[derive(Debug)]
pub struct Server {
    kind: ProviderKind,
    peer: Peer,
    shut_down: bool,
    awaiting: BTreeMap<Id, Method>,
    events: VecDeque<ServerEvent>,
}

impl Server {
    /// A server for a provider of `kind`.
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            peer: Peer::new(Dialect::JsonRpc2),
            shut_down: false,
            awaiting: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    /// The provider kind this server implements.
    pub fn kind(&self) -> ProviderKind {
        self.kind
    }

    /// Whether `shutdown` arrived.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }

    /// Feed one frame from the host. `health`, `shutdown`, unknown methods (`-32601`) and bad
    /// params (`-32602`) are answered here; other calls become [`ServerEvent::Request`].
    /// Unknown notifications are ignored, as JSON-RPC servers do.
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        if self.shut_down {
            return Err(ProtocolError::Unexpected {
                state: "shut down",
                got: crate::frame::escape_snippet(frame, 80),
            });
        }
        self.peer.handle_frame(frame)?;
        while let Some(ev) = self.peer.poll_event() {
            self.handle_event(ev)?;
        }
        Ok(())
    }

    fn handle_event(&mut self, ev: Event) -> Result<(), ProtocolError> {
        match ev {
            Event::Request { id, method, params } => {
                if self.shut_down {
                    return Err(ProtocolError::Unexpected {
                        state: "shut down",
                        got: format!("request {method:?} (id {id})"),
                    });
                }
                let answer = match Method::parse(self.kind, &method) {
                    None => Err(method_not_found()),
                    Some(Method::Health) => Ok(json!({"ok": true})),
                    Some(Method::Shutdown) => {
                        self.shut_down = true;
                        self.events.push_back(ServerEvent::Shutdown {
                            id: Some(id.clone()),
                        });
                        Ok(json!({}))
                    }
                    Some(m) => match Request::decode(self.kind, m, params.unwrap_or(Value::Null)) {
                        Ok(request) => {
                            self.awaiting.insert(id.clone(), m);
                            self.events.push_back(ServerEvent::Request { id, request });
                            return Ok(());
                        }
                        Err(reason) => Err(ErrorObject::new(INVALID_PARAMS, "Invalid params")
                            .with_data(Value::from(reason))),
                    },
                };
                self.peer.respond(id, answer)
            }
            Event::Notification { method, .. } if method == Method::Shutdown.name() => {
                self.shut_down = true;
                self.events.push_back(ServerEvent::Shutdown { id: None });
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Answer request `id`; `result` must answer the request's method.
    pub fn respond(
        &mut self,
        id: Id,
        result: Result<Response, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        let Some(&method) = self.awaiting.get(&id) else {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        };
        let value = match result {
            Err(e) => Err(e),
            Ok(r) if r.method() != method => {
                return Err(ProtocolError::BadPayload {
                    what: "response",
                    reason: format!(
                        "a {} result cannot answer {} (id {id})",
                        r.method().name(),
                        method.name()
                    ),
                });
            }
            Ok(r) => Ok(r.encode().map_err(|e| ProtocolError::BadPayload {
                what: "response",
                reason: e.to_string(),
            })?),
        };
        self.awaiting.remove(&id);
        self.peer.respond(id, value)
    }

    /// Send an `invokeProgress` notification for the pending `invoke` request `id`.
    pub fn progress(&mut self, id: &Id, progress: InvokeProgress) -> Result<(), ProtocolError> {
        if self.awaiting.get(id) != Some(&Method::Invoke) {
            return Err(ProtocolError::Unexpected {
                state: "no such invoke pending",
                got: format!("{INVOKE_PROGRESS} for id {id}"),
            });
        }
        let params = to_params("invokeProgress params", &progress)?;
        self.peer.notify(INVOKE_PROGRESS, Some(params));
        Ok(())
    }

    /// Requests not answered yet.
    pub fn awaiting(&self) -> impl Iterator<Item = (&Id, Method)> {
        self.awaiting.iter().map(|(id, m)| (id, *m))
    }

    /// The next frame to send (unframed JSON).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.peer.poll_transmit()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests;
