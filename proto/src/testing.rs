//! The protocol machines' in-memory test harness: one client machine wired to one server
//! machine, and a virtual clock that moves only when a test says so.
//!
//! ```text
//!   client ── poll_transmit ──► deliver_to_server ──► handle_frame ──► server
//!          ◄─ handle_frame ◄── deliver_to_client ◄── poll_transmit ──
//!          ◄─ handle_timeout(now) ◄── advance(d)
//! ```

use std::time::{Duration, Instant};

use crate::machine::{ClientMachine, ServerMachine};

/// A client and a server back to back. Frames move only when a test calls [`Pair::deliver_to_server`],
/// [`Pair::deliver_to_client`] or [`Pair::pump`]; events wait in each machine until read.
#[derive(Debug)]
pub(crate) struct Pair<C, S> {
    /// The host side.
    pub(crate) client: C,
    /// The plugin side.
    pub(crate) server: S,
    /// The time both sides see; [`Pair::advance`] moves it.
    pub(crate) now: Instant,
}

impl<C: ClientMachine, S: ServerMachine> Pair<C, S> {
    /// The two machines, at an arbitrary epoch (every deadline is an offset from it).
    pub(crate) fn new(client: C, server: S) -> Self {
        Self {
            client,
            server,
            now: Instant::now(),
        }
    }

    /// Deliver every frame the client has queued; the server must accept each. Returns them.
    pub(crate) fn deliver_to_server(&mut self) -> Vec<Vec<u8>> {
        let (client, server) = (&mut self.client, &mut self.server);
        deliver(
            "server",
            || client.poll_transmit(),
            |f| server.handle_frame(f),
        )
    }

    /// Deliver every frame the server has queued; the client must accept each. Returns them.
    pub(crate) fn deliver_to_client(&mut self) -> Vec<Vec<u8>> {
        let (client, server) = (&mut self.client, &mut self.server);
        deliver(
            "client",
            || server.poll_transmit(),
            |f| client.handle_frame(f),
        )
    }

    /// Deliver the client's frames; return the server's events.
    pub(crate) fn server_receives(&mut self) -> Vec<S::Event> {
        self.deliver_to_server();
        self.server_events()
    }

    /// Deliver the server's frames; return the client's events.
    pub(crate) fn client_receives(&mut self) -> Vec<C::Event> {
        self.deliver_to_client();
        self.client_events()
    }

    /// Move frames both ways until neither side has anything to send.
    pub(crate) fn pump(&mut self) {
        loop {
            let to_server = self.deliver_to_server();
            let to_client = self.deliver_to_client();
            if to_server.is_empty() && to_client.is_empty() {
                return;
            }
        }
    }

    /// The client's events so far.
    pub(crate) fn client_events(&mut self) -> Vec<C::Event> {
        std::iter::from_fn(|| self.client.poll_event()).collect()
    }

    /// The server's events so far.
    pub(crate) fn server_events(&mut self) -> Vec<S::Event> {
        std::iter::from_fn(|| self.server.poll_event()).collect()
    }

    /// Let `d` pass and tell the client.
    pub(crate) fn advance(&mut self, d: Duration) {
        self.now += d;
        self.client.handle_timeout(self.now);
    }
}

/// Move frames from `poll` into `handle` until `poll` has none; panic at a refused one.
fn deliver<E: std::fmt::Display>(
    to: &str,
    mut poll: impl FnMut() -> Option<Vec<u8>>,
    mut handle: impl FnMut(&[u8]) -> Result<(), E>,
) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    while let Some(frame) = poll() {
        if let Err(e) = handle(&frame) {
            panic!(
                "the {to} refused {:?}: {e}",
                String::from_utf8_lossy(&frame)
            );
        }
        frames.push(frame);
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchard::{self, CallError, Client, ClientEvent, Server, ServerEvent};

    #[test]
    fn pump_moves_both_ways_and_advance_fires_deadlines() {
        let mut p = Pair::new(Client::new(), Server::new());
        let id = p
            .client
            .describe(p.now, orchard::DESCRIBE_TIMEOUT)
            .expect("new");
        p.pump();
        assert_eq!(
            p.server_events(),
            [ServerEvent::Describe { id: id.clone() }]
        );
        p.advance(orchard::DESCRIBE_TIMEOUT - Duration::from_millis(1));
        assert!(p.client_events().is_empty());
        p.advance(Duration::from_millis(1));
        assert_eq!(
            p.client_events(),
            [ClientEvent::Described {
                id,
                result: Err(CallError::TimedOut {
                    method: orchard::Method::Describe,
                    timeout: orchard::DESCRIBE_TIMEOUT
                })
            }]
        );
        p.client.shutdown().expect_err("closed");
        assert_eq!(
            (p.deliver_to_server(), p.deliver_to_client()),
            (vec![], vec![])
        );
    }
}
