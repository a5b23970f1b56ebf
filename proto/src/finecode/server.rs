//! The runner's (plugin's) side of FineCode: [`Server`] and its events.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};

use super::calls::{from_value, id_from_value, to_value};
use super::types::*;
use super::{
    Call, CallForm, EXECUTE_COMMAND, FineCodeError, Method, Reply, RunnerRequest,
    SERVER_NOT_INITIALIZED,
};
use crate::jsonrpc::{
    Dialect, ErrorObject, Event, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Id,
    METHOD_NOT_FOUND, Peer, ProtocolError, REQUEST_CANCELLED,
};

/// Where the runner's side of the lifecycle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerState {
    /// Waiting for `initialize`.
    Start,
    /// `initialize` received, not yet answered.
    Initializing,
    /// Serving calls.
    Running,
    /// `shutdown` received: only `exit` is expected.
    ShutDown,
    /// `exit` received.
    Exited,
}

impl ServerState {
    fn name(self) -> &'static str {
        match self {
            ServerState::Start => "not initialized",
            ServerState::Initializing => "initializing",
            ServerState::Running => "running",
            ServerState::ShutDown => "shut down",
            ServerState::Exited => "exited",
        }
    }
}

/// What the runner is asked or told.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// `initialize`: answer with [`Server::respond_initialize`].
    Initialize {
        /// The request's id.
        id: Id,
        /// Its params.
        params: InitializeParams,
    },
    /// The `initialized` notification.
    Initialized,
    /// A FineCode call: answer with [`Server::respond`].
    Call {
        /// The request's id.
        id: Id,
        /// The call.
        call: Call,
        /// The form it came in (answers use its spelling).
        form: CallForm,
    },
    /// `$/cancelRequest` for a call not yet answered: answer it with
    /// [`Server::respond_cancelled`].
    Cancel {
        /// The call's id.
        id: Id,
    },
    /// Any other notification (`textDocument/didOpen`, …).
    Notification {
        /// The method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// The manager answered one of the runner's requests (or it was abandoned locally).
    Response {
        /// The request's id.
        id: Id,
        /// Its method.
        method: String,
        /// The answer.
        result: Result<Value, ErrorObject>,
    },
    /// `shutdown`: answer with [`Server::respond_shutdown`].
    Shutdown {
        /// The request's id.
        id: Id,
    },
    /// `exit`: stop serving.
    Exit,
}

#[derive(Debug)]
struct ServerCall {
    method: Method,
    form: CallForm,
    token: Option<ProgressToken>,
    cancelled: bool,
}

/// The runner's (plugin's) side.
#[derive(Debug)]
pub struct Server {
    peer: Peer,
    state: ServerState,
    calls: BTreeMap<Id, ServerCall>,
    initialize_id: Option<Id>,
    shutdown_id: Option<Id>,
    events: VecDeque<ServerEvent>,
    /// Frames the peer cannot make (answers to unreadable bodies), in send order.
    raw: VecDeque<Vec<u8>>,
}

impl Default for Server {
    fn default() -> Self {
        Self::new()
    }
}

impl Server {
    /// A runner waiting for `initialize`; its own requests' ids count from 1.
    pub fn new() -> Self {
        Self {
            peer: Peer::with_first_id(Dialect::JsonRpc2, 1),
            state: ServerState::Start,
            calls: BTreeMap::new(),
            initialize_id: None,
            shutdown_id: None,
            events: VecDeque::new(),
            raw: VecDeque::new(),
        }
    }

    /// The lifecycle state.
    pub fn state(&self) -> ServerState {
        self.state
    }

    /// Whether call `id` was cancelled by `$/cancelRequest`.
    pub fn is_cancelled(&self, id: &Id) -> bool {
        self.calls.get(id).is_some_and(|c| c.cancelled)
    }

    /// Feed one frame (a body, without its headers). Malformed calls, unknown methods and
    /// calls in the wrong state are answered here; the last also return
    /// [`ProtocolError::Unexpected`] (after the answer was queued).
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        match self.peer.handle_frame(frame) {
            Ok(()) => {}
            Err(e @ (ProtocolError::NotJson { .. } | ProtocolError::Invalid { .. })) => {
                // LSP answers a body it cannot read with a parse error to id null.
                let msg = crate::jsonrpc::Message::response(
                    Id::Null,
                    Err(ErrorObject::new(
                        crate::jsonrpc::PARSE_ERROR,
                        "invalid message",
                    )),
                );
                self.peer_transmit_raw(msg);
                return Err(e);
            }
            Err(e) => return Err(e),
        }
        let mut first_error = None;
        while let Some(ev) = self.peer.poll_event() {
            if let Err(e) = self.on_event(ev) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn peer_transmit_raw(&mut self, msg: crate::jsonrpc::Message) {
        // Keep send order: whatever the peer queued first goes first.
        while let Some(frame) = self.peer.poll_transmit() {
            self.raw.push_back(frame);
        }
        self.raw.push_back(msg.encode(Dialect::JsonRpc2));
    }

    fn refuse(&mut self, id: Id, code: i64, message: String) -> Result<(), ProtocolError> {
        self.peer.respond(id, Err(ErrorObject::new(code, message)))
    }

    fn on_event(&mut self, ev: Event) -> Result<(), ProtocolError> {
        match ev {
            Event::Request { id, method, params } => self.on_request(id, method, params)?,
            Event::Notification { method, params } => match method.as_str() {
                "initialized" => self.events.push_back(ServerEvent::Initialized),
                "exit" => {
                    self.state = ServerState::Exited;
                    self.events.push_back(ServerEvent::Exit);
                }
                "$/cancelRequest" => {
                    let id = params
                        .as_ref()
                        .and_then(|p| p.get("id"))
                        .and_then(id_from_value);
                    // A cancel for a call already answered (or never made) is ignored: it
                    // crossed the answer on the wire.
                    if let Some(id) = id
                        && let Some(call) = self.calls.get_mut(&id)
                        && !call.cancelled
                    {
                        call.cancelled = true;
                        self.events.push_back(ServerEvent::Cancel { id });
                    }
                }
                _ => self
                    .events
                    .push_back(ServerEvent::Notification { method, params }),
            },
            Event::Response { id, method, result } => {
                self.events
                    .push_back(ServerEvent::Response { id, method, result });
            }
        }
        Ok(())
    }

    fn on_request(
        &mut self,
        id: Id,
        method: String,
        params: Option<Value>,
    ) -> Result<(), ProtocolError> {
        let unexpected = |state: ServerState| ProtocolError::Unexpected {
            state: state.name(),
            got: format!("request {method:?}"),
        };
        match (self.state, method.as_str()) {
            (ServerState::Start, "initialize") => {
                let params = params.unwrap_or_else(|| json!({}));
                match from_value(params) {
                    Ok(params) => {
                        self.state = ServerState::Initializing;
                        self.initialize_id = Some(id.clone());
                        self.events
                            .push_back(ServerEvent::Initialize { id, params });
                    }
                    Err(reason) => {
                        self.refuse(id, INVALID_PARAMS, format!("invalid params: {reason}"))?
                    }
                }
                Ok(())
            }
            (ServerState::Start | ServerState::Initializing, _) => {
                let e = unexpected(self.state);
                self.refuse(id, SERVER_NOT_INITIALIZED, "server not initialized".into())?;
                Err(e)
            }
            (ServerState::Running, "shutdown") => {
                self.state = ServerState::ShutDown;
                self.shutdown_id = Some(id.clone());
                self.events.push_back(ServerEvent::Shutdown { id });
                Ok(())
            }
            (ServerState::Running, _) => self.on_call(id, &method, params),
            (state, _) => {
                let e = unexpected(state);
                let message = match method.as_str() {
                    "initialize" => "initialize was already received".to_owned(),
                    _ => "server is shutting down".to_owned(),
                };
                self.refuse(id, INVALID_REQUEST, message)?;
                Err(e)
            }
        }
    }

    fn on_call(
        &mut self,
        id: Id,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), ProtocolError> {
        let (form, name, decoded) = if method == EXECUTE_COMMAND {
            let command = params
                .as_ref()
                .and_then(|p| p.get("command"))
                .and_then(Value::as_str);
            let Some(command) = command.map(str::to_owned) else {
                return self.refuse(id, INVALID_PARAMS, "invalid params: missing command".into());
            };
            let args = match params.as_ref().and_then(|p| p.get("arguments")) {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a.clone(),
                Some(_) => {
                    return self.refuse(
                        id,
                        INVALID_PARAMS,
                        "invalid params: arguments is not an array".into(),
                    );
                }
            };
            let decoded = Method::from_name(&command).map(|m| Call::from_arguments(m, &args));
            (CallForm::ExecuteCommand, command, decoded)
        } else {
            let decoded = Method::from_name(method).map(|m| Call::from_params(m, params));
            (CallForm::Direct, method.to_owned(), decoded)
        };
        match decoded {
            None => {
                let what = match form {
                    CallForm::Direct => "method",
                    CallForm::ExecuteCommand => "command",
                };
                self.refuse(id, METHOD_NOT_FOUND, format!("unknown {what}: {name}"))
            }
            Some(Err(reason)) => {
                self.refuse(id, INVALID_PARAMS, format!("invalid params: {reason}"))
            }
            Some(Ok(call)) => {
                let entry = ServerCall {
                    method: call.method(),
                    form,
                    token: call.token().cloned(),
                    cancelled: false,
                };
                self.calls.insert(id.clone(), entry);
                self.events.push_back(ServerEvent::Call { id, call, form });
                Ok(())
            }
        }
    }

    /// Answer `initialize`; calls are served from now on.
    pub fn respond_initialize(
        &mut self,
        id: Id,
        result: &InitializeResult,
    ) -> Result<(), ProtocolError> {
        if self.initialize_id.as_ref() != Some(&id) {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        }
        self.peer.respond(id, Ok(to_value(result)))?;
        self.initialize_id = None;
        self.state = ServerState::Running;
        Ok(())
    }

    /// Answer call `id`. A [`FineCodeError::Command`] goes out as the successful result
    /// `{"error": message}`, [`FineCodeError::Rpc`] as a JSON-RPC error, and
    /// [`FineCodeError::BadResult`] as `-32603`. A reply for another method is
    /// [`ProtocolError::BadPayload`] and sends nothing.
    pub fn respond(
        &mut self,
        id: Id,
        result: Result<Reply, FineCodeError>,
    ) -> Result<(), ProtocolError> {
        let Some(call) = self.calls.get(&id) else {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        };
        let result = match result {
            Ok(reply) if reply.method() != call.method => {
                return Err(ProtocolError::BadPayload {
                    what: "reply",
                    reason: format!("{} answers {}, not {}", reply.method(), id, call.method),
                });
            }
            Ok(reply) => Ok(reply.to_value(call.form)),
            Err(FineCodeError::Command { message }) => Ok(json!({"error": message})),
            Err(FineCodeError::Rpc(e)) => Err(e),
            Err(e @ FineCodeError::BadResult { .. }) => {
                Err(ErrorObject::new(INTERNAL_ERROR, e.to_string()))
            }
        };
        self.calls.remove(&id);
        self.peer.respond(id, result)
    }

    /// Answer call `id` with LSP's `-32800 request cancelled`.
    pub fn respond_cancelled(&mut self, id: Id) -> Result<(), ProtocolError> {
        let error = ErrorObject::new(REQUEST_CANCELLED, "request cancelled");
        self.respond(id, Err(FineCodeError::Rpc(error)))
    }

    /// Send a partial result for call `id` as `$/progress {token, value: "<JSON>"}`. Returns
    /// false (and sends nothing) when the call passed no `partialResultToken`.
    pub fn progress(&mut self, id: &Id, value: &Value) -> Result<bool, ProtocolError> {
        let Some(call) = self.calls.get(id) else {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        };
        let Some(token) = call.token.clone() else {
            return Ok(false);
        };
        let params = ProgressParams {
            token,
            value: Value::String(value.to_string()),
        };
        self.peer.notify("$/progress", Some(to_value(&params)));
        Ok(true)
    }

    /// Ask the manager something; the answer arrives as [`ServerEvent::Response`].
    pub fn request(&mut self, request: &RunnerRequest) -> Result<Id, ProtocolError> {
        if self.state != ServerState::Running {
            return Err(ProtocolError::Unexpected {
                state: self.state.name(),
                got: format!("runner request {:?}", request.method()),
            });
        }
        Ok(self.peer.request(request.method(), request.params()))
    }

    /// Stop waiting for the answer to our request `id`: a [`ServerEvent::Response`] with
    /// `-32800` follows at once and a late answer is dropped. Nothing is sent.
    pub fn abandon(&mut self, id: &Id) -> bool {
        let abandoned = self.peer.cancel(id);
        while let Some(ev) = self.peer.poll_event() {
            // Only the local completion comes out of cancel.
            let _ = self.on_event(ev);
        }
        abandoned
    }

    /// Answer `shutdown` with `null`.
    pub fn respond_shutdown(&mut self, id: Id) -> Result<(), ProtocolError> {
        if self.shutdown_id.as_ref() != Some(&id) {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        }
        self.shutdown_id = None;
        self.peer.respond(id, Ok(Value::Null))
    }

    /// The next body to send.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.raw.pop_front().or_else(|| self.peer.poll_transmit())
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }
}

crate::machine::server_machine!(Server => ServerEvent, ProtocolError);
