//! The manager's (host's) side of FineCode: [`Client`] and its events.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};

use super::calls::{from_value, id_value, to_value};
use super::types::*;
use super::{
    Call, CallForm, EXECUTE_COMMAND, FineCodeError, Method, Reply, RunnerRequest, stopped_error,
};
use crate::jsonrpc::{
    Dialect, ErrorObject, Event, INTERNAL_ERROR, INVALID_PARAMS, Id, Peer, ProtocolError,
};
use crate::machine::{ClientMachine, Serves};
use crate::stopped::Stopped;

/// Where the manager's side of the lifecycle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientState {
    /// Nothing sent yet (or `initialize` failed).
    Start,
    /// `initialize` sent, not answered.
    Initializing,
    /// `initialize` answered; send `initialized` next.
    Initialized,
    /// Calls may be made.
    Ready,
    /// `shutdown` sent, not answered.
    ShuttingDown,
    /// `shutdown` answered; send `exit`.
    ShutDown,
    /// `exit` sent, or the runner is gone ([`Client::fail_pending`]).
    Closed,
}

impl ClientState {
    fn name(self) -> &'static str {
        match self {
            ClientState::Start => "not initialized",
            ClientState::Initializing => "waiting for the initialize result",
            ClientState::Initialized => "initialized but not yet notified",
            ClientState::Ready => "ready",
            ClientState::ShuttingDown => "shutting down",
            ClientState::ShutDown => "shut down",
            ClientState::Closed => "closed",
        }
    }
}

/// What the manager learns.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// `initialize` was answered.
    Initialize {
        /// The request's id.
        id: Id,
        /// The runner's capabilities and info.
        result: Result<InitializeResult, ErrorObject>,
    },
    /// A FineCode call completed.
    Reply {
        /// The call's id.
        id: Id,
        /// The call.
        method: Method,
        /// Its typed result; command-level failures are [`FineCodeError::Command`].
        result: Result<Reply, FineCodeError>,
    },
    /// A partial result for a call in flight (`$/progress`).
    Progress {
        /// The call the token belongs to.
        id: Id,
        /// The token and the value as sent.
        params: ProgressParams,
    },
    /// The runner asks something; answer with [`Client::respond`].
    Request {
        /// Its id.
        id: Id,
        /// The request.
        request: RunnerRequest,
    },
    /// Any other notification (`window/logMessage`, …).
    Notification {
        /// The method.
        method: String,
        /// Its params.
        params: Option<Value>,
    },
    /// `shutdown` was answered.
    Shutdown {
        /// The request's id.
        id: Id,
        /// `Ok` for the expected `null`.
        result: Result<(), ErrorObject>,
    },
}

#[derive(Debug)]
struct ClientCall {
    method: Method,
    token: Option<ProgressToken>,
}

/// The manager's (host's) side.
#[derive(Debug)]
pub struct Client {
    peer: Peer,
    form: CallForm,
    state: ClientState,
    calls: BTreeMap<Id, ClientCall>,
    tokens: BTreeMap<ProgressToken, Id>,
    initialize_id: Option<Id>,
    shutdown_id: Option<Id>,
    events: VecDeque<ClientEvent>,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    /// A client that makes calls in the direct form; request ids count from 1.
    pub fn new() -> Self {
        Self::with_call_form(CallForm::Direct)
    }

    /// A client that makes calls in `form`.
    pub fn with_call_form(form: CallForm) -> Self {
        Self {
            peer: Peer::with_first_id(Dialect::JsonRpc2, 1),
            form,
            state: ClientState::Start,
            calls: BTreeMap::new(),
            tokens: BTreeMap::new(),
            initialize_id: None,
            shutdown_id: None,
            events: VecDeque::new(),
        }
    }

    /// The call form.
    pub fn call_form(&self) -> CallForm {
        self.form
    }

    /// The lifecycle state.
    pub fn state(&self) -> ClientState {
        self.state
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

    /// Send `initialize`.
    pub fn initialize(&mut self, params: &InitializeParams) -> Result<Id, ProtocolError> {
        self.expect(&[ClientState::Start], "initialize")?;
        let id = self.peer.request("initialize", Some(to_value(params)));
        self.initialize_id = Some(id.clone());
        self.state = ClientState::Initializing;
        Ok(id)
    }

    /// Send the `initialized` notification once `initialize` was answered.
    pub fn initialized(&mut self) -> Result<(), ProtocolError> {
        self.expect(&[ClientState::Initialized], "initialized")?;
        self.peer.notify("initialized", Some(json!({})));
        self.state = ClientState::Ready;
        Ok(())
    }

    /// Make a FineCode call in the client's [`CallForm`]. A `partialResultToken` must not be
    /// in use by another call in flight.
    pub fn call(&mut self, call: Call) -> Result<Id, ProtocolError> {
        let method = call.method();
        self.expect(&[ClientState::Ready], method.as_str())?;
        let token = call.token().cloned();
        if let Some(t) = &token
            && self.tokens.contains_key(t)
        {
            return Err(ProtocolError::BadPayload {
                what: "partialResultToken",
                reason: format!("token {t} is already used by a call in flight"),
            });
        }
        let id = match self.form {
            CallForm::Direct => self.peer.request(method.as_str(), Some(call.to_params())),
            CallForm::ExecuteCommand => self.peer.request(
                EXECUTE_COMMAND,
                Some(json!({"command": method.as_str(), "arguments": call.to_arguments()})),
            ),
        };
        if let Some(t) = &token {
            self.tokens.insert(t.clone(), id.clone());
        }
        self.calls.insert(id.clone(), ClientCall { method, token });
        Ok(id)
    }

    /// `finecodeRunner/updateConfig`.
    pub fn update_config(&mut self, params: UpdateConfigParams) -> Result<Id, ProtocolError> {
        self.call(Call::UpdateConfig(params))
    }

    /// `finecodeRunner/resolveActionMeta`.
    pub fn resolve_action_meta(&mut self) -> Result<Id, ProtocolError> {
        self.call(Call::ResolveActionMeta)
    }

    /// `actions/run`.
    pub fn run_action(&mut self, params: RunActionParams) -> Result<Id, ProtocolError> {
        self.call(Call::RunAction(params))
    }

    /// `actions/runHandlers`.
    pub fn run_handlers(&mut self, params: RunHandlersParams) -> Result<Id, ProtocolError> {
        self.call(Call::RunHandlers(params))
    }

    /// `actions/mergeResults`.
    pub fn merge_results(&mut self, params: MergeResultsParams) -> Result<Id, ProtocolError> {
        self.call(Call::MergeResults(params))
    }

    /// `actions/getPayloadSchemas`.
    pub fn get_payload_schemas(&mut self) -> Result<Id, ProtocolError> {
        self.call(Call::GetPayloadSchemas)
    }

    /// Send a notification (`textDocument/didOpen`, …) while ready.
    pub fn notify(&mut self, method: &str, params: Value) -> Result<(), ProtocolError> {
        self.expect(&[ClientState::Ready], method)?;
        self.peer.notify(method, Some(params));
        Ok(())
    }

    /// Give up on call `id`: it completes at once with `-32800` (a late answer is dropped) and
    /// the runner is told with `$/cancelRequest`. False if `id` is not a call in flight.
    pub fn cancel(&mut self, id: &Id) -> bool {
        if !self.calls.contains_key(id) || !self.peer.cancel(id) {
            return false;
        }
        self.peer
            .notify("$/cancelRequest", Some(json!({"id": id_value(id)})));
        // A local completion is always a response to a known call.
        let _ = self.drain();
        true
    }

    /// Answer a [`ClientEvent::Request`] from the runner.
    pub fn respond(
        &mut self,
        id: Id,
        result: Result<Value, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        self.peer.respond(id, result)
    }

    /// Send `shutdown`.
    pub fn shutdown(&mut self) -> Result<Id, ProtocolError> {
        self.expect(&[ClientState::Initialized, ClientState::Ready], "shutdown")?;
        let id = self.peer.request("shutdown", None);
        self.shutdown_id = Some(id.clone());
        self.state = ClientState::ShuttingDown;
        Ok(id)
    }

    /// Send `exit` after `shutdown`. The real runner may take seconds to end its process.
    pub fn exit(&mut self) -> Result<(), ProtocolError> {
        self.expect(&[ClientState::ShuttingDown, ClientState::ShutDown], "exit")?;
        self.peer.notify("exit", None);
        self.state = ClientState::Closed;
        Ok(())
    }

    /// Feed one frame (a body, without its headers).
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        self.peer.handle_frame(frame)?;
        self.drain()
    }

    /// The runner is gone: every call in flight completes with [`stopped_error`].
    pub fn fail_pending(&mut self, stopped: &Stopped) {
        self.peer.fail_pending(stopped_error(stopped));
        // Only responses to our own requests come out of fail_pending.
        let _ = self.drain();
        self.state = ClientState::Closed;
    }

    /// The next body to send.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.peer.poll_transmit()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    fn drain(&mut self) -> Result<(), ProtocolError> {
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
            Event::Response { id, result, .. } => {
                if self.initialize_id.as_ref() == Some(&id) {
                    self.initialize_id = None;
                    let result = result.and_then(|v| {
                        from_value(v).map_err(|e| {
                            ErrorObject::new(INTERNAL_ERROR, format!("bad initialize result: {e}"))
                        })
                    });
                    if self.state == ClientState::Initializing {
                        self.state = if result.is_ok() {
                            ClientState::Initialized
                        } else {
                            ClientState::Start
                        };
                    }
                    self.events
                        .push_back(ClientEvent::Initialize { id, result });
                } else if self.shutdown_id.as_ref() == Some(&id) {
                    self.shutdown_id = None;
                    if self.state == ClientState::ShuttingDown {
                        self.state = ClientState::ShutDown;
                    }
                    self.events.push_back(ClientEvent::Shutdown {
                        id,
                        result: result.map(drop),
                    });
                } else if let Some(call) = self.calls.remove(&id) {
                    if let Some(t) = &call.token {
                        self.tokens.remove(t);
                    }
                    let result = result
                        .map_err(FineCodeError::Rpc)
                        .and_then(|v| Reply::from_value(call.method, v, call.token.is_some()));
                    self.events.push_back(ClientEvent::Reply {
                        id,
                        method: call.method,
                        result,
                    });
                }
            }
            Event::Request { id, method, params } => match RunnerRequest::decode(&method, params) {
                Ok(request) => self.events.push_back(ClientEvent::Request { id, request }),
                Err(reason) => {
                    let error =
                        ErrorObject::new(INVALID_PARAMS, format!("invalid params: {reason}"));
                    self.peer.respond(id, Err(error))?;
                }
            },
            Event::Notification { method, params } if method == "$/progress" => {
                let params: ProgressParams =
                    from_value(params.unwrap_or(Value::Null)).map_err(|reason| {
                        ProtocolError::BadPayload {
                            what: "$/progress",
                            reason,
                        }
                    })?;
                let Some(id) = self.tokens.get(&params.token).cloned() else {
                    return Err(ProtocolError::BadPayload {
                        what: "$/progress",
                        reason: format!("token {} matches no call in flight", params.token),
                    });
                };
                self.events.push_back(ClientEvent::Progress { id, params });
            }
            Event::Notification { method, params } => {
                self.events
                    .push_back(ClientEvent::Notification { method, params });
            }
        }
        Ok(())
    }
}

/// A reply (or `initialize`'s, or `shutdown`'s answer) completes its call; progress belongs to
/// its call; the runner's own requests are the driver's handler's ([`Serves`]).
impl ClientMachine for Client {
    type Key = Id;
    type Event = ClientEvent;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        Client::handle_frame(self, frame)
    }
    /// A `$/progress` (or answer) the machine cannot place is not a violation: it may have
    /// crossed a cancellation on the wire.
    fn is_fatal(error: &ProtocolError) -> bool {
        !matches!(error, ProtocolError::BadPayload { .. })
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
            E::Initialize { id, .. } | E::Reply { id, .. } | E::Shutdown { id, .. } => Some(id),
            _ => None,
        }
    }
    /// A call's `$/progress` values come before its answer.
    fn belongs_to(event: &ClientEvent) -> Option<&Id> {
        match event {
            ClientEvent::Progress { id, .. } => Some(id),
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

/// The runner's requests to the manager (`projects/getRawConfig`, `workspace/applyEdit`, …),
/// decoded; the manager answers each with a result or a JSON-RPC error.
impl Serves for Client {
    type RequestId = Id;
    type Request = RunnerRequest;
    type Answer = Result<Value, ErrorObject>;

    fn take_request(event: ClientEvent) -> Result<(Id, RunnerRequest), ClientEvent> {
        match event {
            ClientEvent::Request { id, request } => Ok((id, request)),
            other => Err(other),
        }
    }
    fn method(request: &RunnerRequest) -> &str {
        request.method()
    }
    fn answer(&mut self, id: Id, answer: Self::Answer) -> Result<(), ProtocolError> {
        self.respond(id, answer)
    }
    fn not_served(&self, method: &str) -> Self::Answer {
        Err(ErrorObject::new(
            crate::jsonrpc::METHOD_NOT_FOUND,
            format!("the manager does not serve {method}"),
        ))
    }
    fn failed(&self, reason: String) -> Self::Answer {
        Err(ErrorObject::new(INTERNAL_ERROR, reason))
    }
}
