//! The one shape every protocol's client (host-role) machine has, so the host runs all of
//! them with one driver.
//!
//! ```text
//!   driver ── frame from the plugin ──► handle_frame ──► poll_event ──► the call it completes
//!          ◄─ poll_transmit ◄── requests made on the machine (invoke, execute, start, …)
//!          ── now ──► handle_timeout   (poll_timeout says when)
//!          ── Stopped ──► fail_pending ──► one event per request in flight, the protocol's error
//! ```
//!
//! A machine never reads a clock or a pipe: the driver passes frames, time and the plugin's end
//! in, and takes frames and events out. Which event answers which request is the machine's
//! call ([`ClientMachine::completes`]); everything else (the plugin's own requests and
//! notifications, progress, a handshake) is for the caller to read in order.
//!
//! [`ServerMachine`] is the plugin side's shape: frames in, frames and events out, no clock.

use std::fmt::{Debug, Display};
use std::hash::Hash;
use std::time::Instant;

use crate::jsonrpc::{self, Event, Id, Peer, ProtocolError};
use crate::stopped::Stopped;
use crate::{atp, denobridge, finecode, oracle, orchard};

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

    /// The plugin will never answer: complete every request in flight with the protocol's
    /// own error for `stopped`, and accept nothing more.
    fn fail_pending(&mut self, stopped: &Stopped);

    /// Add what the machine knows about why the plugin stopped to `stopped`, before
    /// [`fail_pending`](Self::fail_pending) (ATP: the plugin's own last error). Default:
    /// nothing.
    fn explain(&self, _stopped: &mut Stopped) {}
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
        let error = jsonrpc::stopped_error(self.dialect(), stopped);
        Peer::fail_pending(self, error);
    }
}

/// A result that is not an array of felts completes its invoke with an error; anything else
/// refused is the plugin breaking the protocol (a first byte other than `{` included).
impl ClientMachine for oracle::OracleClient {
    type Key = Id;
    type Event = oracle::ClientEvent;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        oracle::OracleClient::handle_frame(self, frame)
    }
    fn is_fatal(error: &ProtocolError) -> bool {
        !matches!(error, ProtocolError::BadPayload { .. })
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        oracle::OracleClient::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<oracle::ClientEvent> {
        oracle::OracleClient::poll_event(self)
    }
    fn completes(event: &oracle::ClientEvent) -> Option<&Id> {
        match event {
            oracle::ClientEvent::Invoked { id, .. } => Some(id),
            _ => None,
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        oracle::OracleClient::fail_pending(self, stopped);
    }
}

/// An answer that does not fit (an execute result without `outputs`, a schema of another
/// protocol version) completes its call with `CallError::Protocol`; the provider runs on.
impl ClientMachine for orchard::Client {
    type Key = Id;
    type Event = orchard::ClientEvent;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        orchard::Client::handle_frame(self, frame)
    }
    fn is_fatal(error: &ProtocolError) -> bool {
        !matches!(error, ProtocolError::BadPayload { .. })
    }
    fn handle_timeout(&mut self, now: Instant) {
        orchard::Client::handle_timeout(self, now);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        orchard::Client::poll_timeout(self)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        orchard::Client::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<orchard::ClientEvent> {
        orchard::Client::poll_event(self)
    }
    fn completes(event: &orchard::ClientEvent) -> Option<&Id> {
        use orchard::ClientEvent as E;
        match event {
            E::Described { id, .. }
            | E::Configured { id, .. }
            | E::Executed { id, .. }
            | E::ShutDown { id, .. } => Some(id),
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        orchard::Client::fail_pending(self, stopped);
    }
}

/// A response of the wrong shape completes its request with an error; progress and the
/// plugin's own requests are the caller's.
impl ClientMachine for denobridge::Client {
    type Key = Id;
    type Event = denobridge::ClientEvent;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        denobridge::Client::handle_frame(self, frame)
    }
    fn is_fatal(error: &ProtocolError) -> bool {
        !matches!(error, ProtocolError::BadPayload { .. })
    }
    fn handle_timeout(&mut self, now: Instant) {
        denobridge::Client::handle_timeout(self, now);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        denobridge::Client::poll_timeout(self)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        denobridge::Client::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<denobridge::ClientEvent> {
        denobridge::Client::poll_event(self)
    }
    fn completes(event: &denobridge::ClientEvent) -> Option<&Id> {
        match event {
            denobridge::ClientEvent::Response { id, .. } => Some(id),
            _ => None,
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        denobridge::Client::fail_pending(self, stopped);
    }
}

/// A run is complete at its output, or at an error that ends it; signals and the hello are
/// the caller's.
impl ClientMachine for atp::AtpClient {
    type Key = String;
    type Event = atp::ClientEvent;
    type Error = atp::AtpError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), atp::AtpError> {
        atp::AtpClient::handle_frame(self, frame)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        atp::AtpClient::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<atp::ClientEvent> {
        atp::AtpClient::poll_event(self)
    }
    fn completes(event: &atp::ClientEvent) -> Option<&String> {
        match event {
            atp::ClientEvent::WorkDone { run_id, .. } => Some(run_id),
            atp::ClientEvent::Error {
                run_id,
                step_fatal,
                server_fatal,
                ..
            } if !run_id.is_empty() && (*step_fatal || *server_fatal) => Some(run_id),
            _ => None,
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        atp::AtpClient::fail_pending(self, stopped);
    }
    /// A plugin that reported an error about itself before it ended is quoted:
    /// `plugin exited with code 1 (the plugin reported: …)`.
    fn explain(&self, stopped: &mut Stopped) {
        if let (Some(said), false) = (self.plugin_error(), stopped.violation) {
            stopped.reason = format!("{} (the plugin reported: {said})", stopped.reason);
        }
    }
}

/// A reply (or `initialize`'s, or `shutdown`'s answer) completes its call; progress and the
/// runner's own requests are the caller's.
impl ClientMachine for finecode::Client {
    type Key = Id;
    type Event = finecode::ClientEvent;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        finecode::Client::handle_frame(self, frame)
    }
    /// A `$/progress` (or answer) the machine cannot place is not a violation: it may have
    /// crossed a cancellation on the wire.
    fn is_fatal(error: &ProtocolError) -> bool {
        !matches!(error, ProtocolError::BadPayload { .. })
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        finecode::Client::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<finecode::ClientEvent> {
        finecode::Client::poll_event(self)
    }
    fn completes(event: &finecode::ClientEvent) -> Option<&Id> {
        use finecode::ClientEvent as E;
        match event {
            E::Initialize { id, .. } | E::Reply { id, .. } | E::Shutdown { id, .. } => Some(id),
            _ => None,
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        finecode::Client::fail_pending(self, stopped);
    }
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

/// Each server machine's inherent `handle_frame`, `poll_transmit` and `poll_event` are the
/// trait's.
macro_rules! server_machines {
    ($($machine:ty => $event:ty, $error:ty;)*) => {$(
        impl ServerMachine for $machine {
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
    )*};
}

server_machines! {
    oracle::OracleServer => oracle::ServerEvent, ProtocolError;
    orchard::Server => orchard::ServerEvent, ProtocolError;
    denobridge::Server => denobridge::ServerEvent, ProtocolError;
    finecode::Server => finecode::ServerEvent, ProtocolError;
    atp::AtpServer => atp::ServerEvent, atp::AtpError;
}
