//! JSON-RPC 2.0 messages, and the Orchard dialect of them, plus a bidirectional [`Peer`].
//!
//! Two dialects share one envelope:
//! - [`Dialect::JsonRpc2`]: `"jsonrpc":"2.0"` on every message, integer error codes. A message
//!   received without the `jsonrpc` member is accepted (lenient in, strict out); a wrong
//!   version is an error.
//! - [`Dialect::Orchard`]: no `jsonrpc` member, string error codes, and an optional `detail`
//!   string on errors (kept in [`ErrorObject::data`]).
//!
//! Batches are not supported: none of the hosted protocols use them.
//!
//! [`Peer`], this file, is a bidirectional JSON-RPC peer as a sans-IO state machine.
//!
//! Inputs: [`Peer::handle_frame`] (a frame from the other side), [`Peer::handle_timeout`]
//! (time, passed in), and the caller's own [`Peer::request`], [`Peer::notify`],
//! [`Peer::respond`] and [`Peer::cancel`]. Outputs: [`Peer::poll_transmit`] (frames to send)
//! and [`Peer::poll_event`] (what happened). It never reads a clock and never does IO.
//!
//! Files: `types.rs` the messages, `supervised.rs` the supervisor's rules for bare JSON-RPC,
//! `fuzz.rs` the fuzz bodies, `tests.rs` the unit tests.

mod fuzz;
mod supervised;
#[cfg(test)]
mod tests;
mod types;

pub use fuzz::{fuzz, fuzz_pair};
pub use supervised::{classify_engine, classify_plugin, error_answer, id_of};
pub use types::*;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use serde_json::Value;

use crate::machine::{ClientMachine, Serves};
use crate::stopped::Stopped;

/// A request the other side made, as [`Serves`] hands it to the host's handler.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The method.
    pub method: String,
    /// Parameters.
    pub params: Option<Value>,
}

/// What the other side did.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The other side asks us something; answer with [`Peer::respond`].
    Request {
        /// Its id.
        id: Id,
        /// The method.
        method: String,
        /// Parameters.
        params: Option<Value>,
    },
    /// The other side tells us something.
    Notification {
        /// The method.
        method: String,
        /// Parameters.
        params: Option<Value>,
    },
    /// The answer to one of our requests (or its local failure: cancelled, timed out, or the
    /// other side gone — see [`Peer::fail_pending`]).
    Response {
        /// Our request's id.
        id: Id,
        /// Our request's method.
        method: String,
        /// The result.
        result: Result<Value, ErrorObject>,
    },
}

#[derive(Debug)]
struct Pending {
    method: String,
    deadline: Option<Instant>,
}

/// Most cancelled ids remembered (so a late answer to them is ignored, not an error).
pub(crate) const MAX_CANCELLED: usize = 1024;

/// One side of a JSON-RPC connection.
#[derive(Debug)]
pub struct Peer {
    dialect: Dialect,
    next_id: i64,
    pending: BTreeMap<Id, Pending>,
    incoming: BTreeSet<Id>,
    cancelled: VecDeque<Id>,
    transmit: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
}

impl Peer {
    /// A peer whose own request ids count up from 0 (what the Go and Rust hosts do).
    pub fn new(dialect: Dialect) -> Self {
        Self::with_first_id(dialect, 0)
    }

    /// A peer whose request ids count up from `first`.
    pub fn with_first_id(dialect: Dialect, first: i64) -> Self {
        Self {
            dialect,
            next_id: first,
            pending: BTreeMap::new(),
            incoming: BTreeSet::new(),
            cancelled: VecDeque::new(),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Send a request with the next integer id.
    pub fn request(&mut self, method: &str, params: Option<Value>) -> Id {
        self.request_with_deadline(method, params, None)
    }

    /// Send a request that fails locally with a timeout error once `deadline` passes
    /// (see [`Peer::handle_timeout`]).
    pub fn request_with_deadline(
        &mut self,
        method: &str,
        params: Option<Value>,
        deadline: Option<Instant>,
    ) -> Id {
        loop {
            let id = Id::Num(self.next_id);
            self.next_id = self.next_id.wrapping_add(1);
            if !self.pending.contains_key(&id) && !self.cancelled.contains(&id) {
                // Only fails for a duplicate id, which the check above rules out.
                let _ = self.send_request(id.clone(), method, params, deadline);
                return id;
            }
        }
    }

    /// Send a request with an id of the caller's choosing (string ids, or a protocol that
    /// fixes them). [`ProtocolError::DuplicateId`] if the id is pending, or was cancelled or
    /// timed out and is still remembered (the last 1024 such ids): the other side may yet
    /// answer the old request, and that answer would be taken for the new one.
    pub fn request_with_id(
        &mut self,
        id: Id,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), ProtocolError> {
        self.send_request(id, method, params, None)
    }

    fn send_request(
        &mut self,
        id: Id,
        method: &str,
        params: Option<Value>,
        deadline: Option<Instant>,
    ) -> Result<(), ProtocolError> {
        // A given-up id stays taken while its late answer may still arrive: that answer
        // would otherwise be taken for the new request's.
        if self.pending.contains_key(&id) || self.cancelled.contains(&id) {
            return Err(ProtocolError::DuplicateId { id: id.to_string() });
        }
        let msg = Message::Request {
            id: id.clone(),
            method: method.to_owned(),
            params,
        };
        self.transmit.push_back(msg.encode(self.dialect));
        self.pending.insert(
            id,
            Pending {
                method: method.to_owned(),
                deadline,
            },
        );
        Ok(())
    }

    /// Send a notification.
    pub fn notify(&mut self, method: &str, params: Option<Value>) {
        let msg = Message::Notification {
            method: method.to_owned(),
            params,
        };
        self.transmit.push_back(msg.encode(self.dialect));
    }

    /// Answer a request the other side made.
    pub fn respond(
        &mut self,
        id: Id,
        result: Result<Value, ErrorObject>,
    ) -> Result<(), ProtocolError> {
        if !self.incoming.remove(&id) {
            return Err(ProtocolError::NotAwaitingResponse { id: id.to_string() });
        }
        self.transmit
            .push_back(Message::Response { id, result }.encode(self.dialect));
        Ok(())
    }

    /// Give up on one of our requests: it completes at once with the dialect's "cancelled"
    /// error, and a late answer is ignored. Telling the other side (LSP `$/cancelRequest`) is
    /// the protocol's business: call [`Peer::notify`]. Returns false if `id` was not pending.
    pub fn cancel(&mut self, id: &Id) -> bool {
        let Some(p) = self.pending.remove(id) else {
            return false;
        };
        self.remember_cancelled(id.clone());
        let error = ErrorObject::new(self.dialect.cancelled(), "request cancelled");
        self.events.push_back(Event::Response {
            id: id.clone(),
            method: p.method,
            result: Err(error),
        });
        true
    }

    fn remember_cancelled(&mut self, id: Id) {
        if self.cancelled.len() == MAX_CANCELLED {
            self.cancelled.pop_front();
        }
        self.cancelled.push_back(id);
    }

    /// Feed one frame from the other side.
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        let msg = Message::decode(frame, self.dialect)?;
        self.handle_message(msg)
    }

    /// Feed one decoded message.
    pub fn handle_message(&mut self, msg: Message) -> Result<(), ProtocolError> {
        match msg {
            Message::Request { id, method, params } => {
                if !self.incoming.insert(id.clone()) {
                    return Err(ProtocolError::DuplicateId { id: id.to_string() });
                }
                self.events.push_back(Event::Request { id, method, params });
            }
            Message::Notification { method, params } => self
                .events
                .push_back(Event::Notification { method, params }),
            Message::Response { id, result } => match self.pending.remove(&id) {
                Some(p) => self.events.push_back(Event::Response {
                    id,
                    method: p.method,
                    result,
                }),
                None if self.cancelled.contains(&id) => {}
                None => return Err(ProtocolError::UnknownResponseId { id: id.to_string() }),
            },
        }
        Ok(())
    }

    /// Fail every request whose deadline is at or before `now` with a timeout error.
    pub fn handle_timeout(&mut self, now: Instant) {
        let expired: Vec<Id> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            if let Some(p) = self.pending.remove(&id) {
                self.remember_cancelled(id.clone());
                let error = ErrorObject::new(self.dialect.internal_error(), "request timed out");
                self.events.push_back(Event::Response {
                    id,
                    method: p.method,
                    result: Err(error),
                });
            }
        }
    }

    /// The earliest pending deadline, for the driver's timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending.values().filter_map(|p| p.deadline).min()
    }

    /// Complete every pending request with `error` (the other side is gone). Each gets its own
    /// [`Event::Response`], so every caller learns why.
    pub fn fail_pending(&mut self, error: ErrorObject) {
        for (id, p) in std::mem::take(&mut self.pending) {
            self.events.push_back(Event::Response {
                id,
                method: p.method,
                result: Err(error.clone()),
            });
        }
    }

    /// Our requests still waiting for an answer: (id, method).
    pub fn pending(&self) -> impl Iterator<Item = (&Id, &str)> {
        self.pending.iter().map(|(id, p)| (id, p.method.as_str()))
    }

    /// Requests from the other side we have not answered yet.
    pub fn awaiting_response(&self) -> impl Iterator<Item = &Id> {
        self.incoming.iter()
    }

    /// The next frame to send (without framing: the caller's framer adds it).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

/// Bare JSON-RPC (and the envelope of every JSON-RPC protocol): a response completes its
/// request; the plugin's requests and notifications are the caller's to read.
impl ClientMachine for Peer {
    type Key = Id;
    type Event = Event;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        Peer::handle_frame(self, frame)
    }
    fn handle_timeout(&mut self, now: Instant) {
        Peer::handle_timeout(self, now);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Peer::poll_timeout(self)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        Peer::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<Event> {
        Peer::poll_event(self)
    }
    fn completes(event: &Event) -> Option<&Id> {
        match event {
            Event::Response { id, .. } => Some(id),
            _ => None,
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        let error = crate::jsonrpc::stopped_error(self.dialect(), stopped);
        Peer::fail_pending(self, error);
    }
    fn refuse_request(&mut self, event: Event) -> Option<Event> {
        crate::machine::refuse_request(self, event)
    }
}

/// The other side's requests go to the host's handler; the answer is a result or an error in
/// the peer's dialect.
impl Serves for Peer {
    type RequestId = Id;
    type Request = Request;
    type Answer = Result<Value, ErrorObject>;

    fn take_request(event: Event) -> Result<(Id, Request), Event> {
        match event {
            Event::Request { id, method, params } => Ok((id, Request { method, params })),
            other => Err(other),
        }
    }
    fn method(request: &Request) -> &str {
        &request.method
    }
    fn answer(&mut self, id: Id, answer: Self::Answer) -> Result<(), ProtocolError> {
        self.respond(id, answer)
    }
    fn not_served(&self, method: &str) -> Self::Answer {
        Err(ErrorObject {
            code: self.dialect().method_not_found(),
            message: format!("the host does not serve {method}"),
            data: None,
        })
    }
    fn failed(&self, reason: String) -> Self::Answer {
        Err(ErrorObject {
            code: self.dialect().internal_error(),
            message: reason,
            data: None,
        })
    }
}
