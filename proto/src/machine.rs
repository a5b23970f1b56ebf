//! The one shape every protocol's client (host-role) machine has, so the host runs all of
//! them with one driver.
//!
//! ```text
//!   driver ── frame from the plugin ──► handle_frame ──► poll_event ──► the call it completes
//!          ◄─ poll_transmit ◄── requests made on the machine (invoke, execute, start, …)
//!                                                  └─ belongs_to ──► that request's stream
//!          ── now ──► handle_timeout   (poll_timeout says when)
//!          ── Stopped ──► fail_pending ──► one event per request in flight, the protocol's error
//!   the plugin's own request ──► take_request ──► the driver's handler ──► answer   (Serves)
//! ```
//!
//! A machine never reads a clock or a pipe: the driver passes frames, time and the plugin's end
//! in, and takes frames and events out. Which event answers which request is the machine's
//! call ([`ClientMachine::completes`], and [`ClientMachine::belongs_to`] for a request
//! answered by a stream of events that the completing one ends); the plugin's own requests
//! are the driver's one handler's to answer ([`Serves`]); everything else (notifications, a
//! handshake) is that handler's to hear, in order.
//!
//! [`ServerMachine`] is the plugin side's shape: frames in, frames and events out, no clock.
//!
//! Only the traits live here: each protocol implements them beside its machines (bare
//! JSON-RPC's in `jsonrpc::peer`, the others in their own module), so a protocol is one
//! module.

use std::fmt::{Debug, Display};
use std::hash::Hash;
use std::time::Instant;

use crate::stopped::Stopped;

/// A protocol's client machine, as the host's driver runs it.
pub trait ClientMachine: Send + 'static {
    /// What names a request in flight (a JSON-RPC id, an ATP run id).
    type Key: Clone + Eq + Hash + Debug + Send + 'static;
    /// What the machine reports.
    type Event: Debug + Send + 'static;
    /// Why a frame was refused.
    type Error: Display + Send + 'static;

    /// Feed one frame from the plugin.
    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), Self::Error>;

    /// Whether a refused frame means the plugin broke the protocol (the driver stops it and
    /// fails everything pending), rather than one bad answer that the machine already turned
    /// into that request's error event. Default: every refusal is fatal.
    fn is_fatal(_error: &Self::Error) -> bool {
        true
    }

    /// Time passed: fail what ran out of time.
    fn handle_timeout(&mut self, _now: Instant) {}

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// The next frame to write to the plugin.
    fn poll_transmit(&mut self) -> Option<Vec<u8>>;

    /// The next event.
    fn poll_event(&mut self) -> Option<Self::Event>;

    /// The request `event` completes, if it completes one.
    fn completes(event: &Self::Event) -> Option<&Self::Key>;

    /// The request `event` belongs to without completing it (an ATP run's signal, a partial
    /// result): more of that request's events follow, and one that
    /// [`completes`](Self::completes) it ends them. The driver hands such events to the
    /// request's stream; an event that belongs to no streamed request is the caller's, in
    /// order, like any other. Default: none belongs to a request.
    fn belongs_to(_event: &Self::Event) -> Option<&Self::Key> {
        None
    }

    /// The plugin will never answer: complete every request in flight with the protocol's
    /// own error for `stopped`, and accept nothing more.
    fn fail_pending(&mut self, stopped: &Stopped);

    /// Add what the machine knows about why the plugin stopped to `stopped`, before
    /// [`fail_pending`](Self::fail_pending) (ATP: the plugin's own last error). Default:
    /// nothing.
    fn explain(&self, _stopped: &mut Stopped) {}

    /// `event` when nobody serves the plugin's requests: a request is answered as not served
    /// (`None`: it is done with), anything else is given back. A [`Serves`] machine
    /// implements it with [`refuse_request`], so a plugin's request always gets an answer,
    /// whatever the driver was given to hear it. Default: no event is a request.
    fn refuse_request(&mut self, event: Self::Event) -> Option<Self::Event> {
        Some(event)
    }
}

/// [`ClientMachine::refuse_request`] for a [`Serves`] machine: the plugin's request is
/// answered [`not_served`](Serves::not_served).
pub fn refuse_request<M: Serves>(machine: &mut M, event: M::Event) -> Option<M::Event> {
    match M::take_request(event) {
        Ok((id, request)) => {
            let answer = machine.not_served(M::method(&request));
            // Refused only once the machine takes no more answers (the plugin is gone).
            let _ = machine.answer(id, answer);
            None
        }
        Err(event) => Some(event),
    }
}

/// A client machine whose plugin also makes requests of the host: FineCode's runner asks for
/// its project's config, an MCP server for sampling or roots, a JSON-RPC peer anything. The
/// driver hands each such event to its one handler, in arrival order, and answers through
/// [`answer`](Self::answer); the machine knows which events they are and what an answer
/// the host cannot give looks like, so the driver needs no protocol of its own.
pub trait Serves: ClientMachine {
    /// What names the plugin's request, for its answer.
    type RequestId: Debug + Send + 'static;
    /// The plugin's request, as the machine decoded it.
    type Request: Debug + Send + 'static;
    /// The host's answer to one.
    type Answer: Send + 'static;

    /// `event` as the plugin's request, or the event back when it is not one.
    fn take_request(event: Self::Event) -> Result<(Self::RequestId, Self::Request), Self::Event>;

    /// The request's method, for logs and refusals.
    fn method(request: &Self::Request) -> &str;

    /// Answer the plugin's request `id`.
    fn answer(&mut self, id: Self::RequestId, answer: Self::Answer) -> Result<(), Self::Error>;

    /// The answer to a request for `method` that the host does not serve (JSON-RPC:
    /// `-32601`).
    fn not_served(&self, method: &str) -> Self::Answer;

    /// The answer to a request the host meant to serve but could not (its handler
    /// panicked): JSON-RPC's `-32603` with `reason` as the message.
    fn failed(&self, reason: String) -> Self::Answer;
}

/// A protocol's server (plugin-role) machine: frames from the host in, frames and events
/// out. It has no deadlines, so no clock; the guest SDK and the in-memory test pair run it.
pub trait ServerMachine {
    /// What the machine reports (mostly requests for the plugin to answer).
    type Event: Debug;
    /// Why a frame was refused.
    type Error: Display;

    /// Feed one frame from the host.
    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), Self::Error>;

    /// The next frame to write to the host.
    fn poll_transmit(&mut self) -> Option<Vec<u8>>;

    /// The next event.
    fn poll_event(&mut self) -> Option<Self::Event>;
}

/// `ServerMachine` for a machine whose inherent `handle_frame`, `poll_transmit` and
/// `poll_event` are the trait's: `server_machine!(Server => ServerEvent, ProtocolError);`
/// beside the machine.
macro_rules! server_machine {
    ($machine:ty => $event:ty, $error:ty) => {
        impl $crate::machine::ServerMachine for $machine {
            type Event = $event;
            type Error = $error;

            fn handle_frame(&mut self, frame: &[u8]) -> Result<(), $error> {
                <$machine>::handle_frame(self, frame)
            }
            fn poll_transmit(&mut self) -> Option<Vec<u8>> {
                <$machine>::poll_transmit(self)
            }
            fn poll_event(&mut self) -> Option<$event> {
                <$machine>::poll_event(self)
            }
        }
    };
}
pub(crate) use server_machine;
