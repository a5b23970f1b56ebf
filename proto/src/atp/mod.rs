//! The Arcaflow plugin protocol (ATP), versions 1 and 3, as two sans-IO machines.
//!
//! Every frame is one CBOR item ([`Framing::CborSeq`](crate::frame::Framing::CborSeq)).
//! [`AtpClient`] plays the engine (host role), [`AtpServer`] the plugin. Both share the typed
//! messages in this module; step configs and outputs stay [`Value`]s (`ciborium::Value`), since
//! CBOR carries what JSON cannot (integer map keys, byte strings, tags).
//!
//! ```text
//!   host (AtpClient)                                   plugin (AtpServer)
//!   new(): queues the start item `null` ──────────────► (sends nothing before it)
//!          ◄──────────── hello v3 {"version": 3, "schema": {"steps": {...}}}
//!                        hello v1 {"version": 1, "steps": {...}}
//!   v3: every later message is {"id": kind, "run_id": text, "data": {...}}
//!   start(run, step, config) ── 1 work start {id, config} ──►   (no acknowledgement)
//!   signal(run, id, data)    ── 3 signal {signal_id, data} ──►
//!          ◄── 3 signal {signal_id, data} ─── signal(run, id, data)
//!          ◄── 2 work done {output_id, output_data, debug_logs} ─── work_done(run, ...)
//!          ◄── 5 error {error, step_fatal, server_fatal} ─── error(run, ...)
//!   client_done()            ── 4 client done, run_id "", data {} ──►
//!          ◄── work done for runs still in flight; then the plugin exits 0
//!   v1: one run per plugin: {id, config} ──► ◄── {"status": "started"} ◄── {output_id, ...}
//! ```
//!
//! Rules the machines enforce (each breach is a typed [`AtpError`]):
//! - nothing but the start item before hello; a hello of a version other than 1 or 3 is refused;
//! - run ids are unique among runs in flight; results may come back in any order; a step's
//!   declared error output is an ordinary work done (its `output_id` names it);
//! - after client done the host sends nothing more; the plugin may still finish its runs;
//! - v1 has a single run, an acknowledgement of it, no signals, no error message and no client
//!   done (the session ends when the output arrives); its run id never goes on the wire, so
//!   the server reports it as `""` and the client keeps the caller's label.
//!
//! What it does not do: read pipes, run steps, validate configs or outputs against the schema,
//! or keep time. Unknown members of a hello are kept ([`Hello::extra`]); unknown members of
//! other messages are ignored.
//!
//! ```
//! use sandpipe_proto::atp::{AtpClient, AtpServer, ClientEvent, ServerEvent, Value, Version};
//!
//! let schema = Value::Map(vec![(
//!     "steps".into(),
//!     Value::Map(vec![("greet".into(), Value::Map(vec![]))]),
//! )]);
//! let mut host = AtpClient::new();
//! let mut plugin = AtpServer::new(Version::V3, schema.clone());
//! let mut pump = |host: &mut AtpClient, plugin: &mut AtpServer| {
//!     while let Some(f) = host.poll_transmit() { plugin.handle_frame(&f).unwrap(); }
//!     while let Some(f) = plugin.poll_transmit() { host.handle_frame(&f).unwrap(); }
//! };
//! pump(&mut host, &mut plugin);
//! assert!(matches!(host.poll_event(), Some(ClientEvent::Hello(h)) if h.schema == schema));
//! host.start("r1", "greet", Value::Text("Ada".into())).unwrap();
//! pump(&mut host, &mut plugin);
//! let Some(ServerEvent::WorkStart { run_id, step_id, config }) = plugin.poll_event() else {
//!     panic!()
//! };
//! assert_eq!((run_id.as_str(), step_id.as_str()), ("r1", "greet"));
//! plugin.work_done("r1", "success", config, "").unwrap();
//! host.client_done().unwrap();
//! pump(&mut host, &mut plugin);
//! let Some(ClientEvent::WorkDone { output_id, .. }) = host.poll_event() else { panic!() };
//! assert_eq!(output_id, "success");
//! assert!(host.is_finished() && plugin.is_finished());
//! ```

mod client;
mod fuzz;
mod server;
mod types;

pub use client::*;
pub use fuzz::fuzz;
pub use server::*;
pub use types::*;
#[cfg(test)]
use types::{bad, map, text};

use crate::stopped::Stopped;

/// The answer to a run the plugin will never finish: an error message for `run_id`, step
/// fatal, whose text is [`Stopped::message_with_tail`]. `server_fatal` says whether the
/// engine's plugin is gone for good (the client machine: true) or lives on in a fresh
/// instance (the supervisor of `run --protocol atp`: false).
pub fn stopped_error(run_id: &str, stopped: &Stopped, server_fatal: bool) -> Message {
    Message::Error {
        run_id: run_id.to_owned(),
        error: stopped.message_with_tail(),
        step_fatal: true,
        server_fatal,
    }
}

/// ATP v3 under the supervisor (`crate::supervise`): a run (work start to its work done or
/// error) is budgeted; the start item is the handshake replayed to a fresh instance, whose
/// hello is swallowed. A stopped run's error is not server fatal: the engine's plugin lives on
/// in a fresh instance.
#[derive(Debug, Clone, Copy, Default)]
pub struct Supervised;

impl crate::supervise::SupervisedProtocol for Supervised {
    fn classify_engine(&self, frame: &[u8]) -> crate::supervise::FromEngine {
        use crate::supervise::FromEngine;
        if frame == START_ITEM {
            return FromEngine::Handshake { awaits: None };
        }
        match Message::decode(frame) {
            Ok(Message::WorkStart { run_id, .. }) => FromEngine::Request {
                key: run_id,
                method: None,
            },
            _ => FromEngine::Other,
        }
    }
    fn classify_plugin(&self, frame: &[u8]) -> crate::supervise::FromPlugin {
        use crate::supervise::FromPlugin;
        match Message::decode(frame) {
            Ok(Message::WorkDone { run_id, .. } | Message::Error { run_id, .. })
                if !run_id.is_empty() =>
            {
                FromPlugin::Answer { key: run_id }
            }
            Ok(_) => FromPlugin::Other,
            Err(_) if Hello::decode(frame).is_ok() => FromPlugin::Hello,
            Err(_) => FromPlugin::Other,
        }
    }
    fn stopped_answer(&self, key: &str, _method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        stopped_error(key, stopped, false).encode()
    }
}

#[cfg(test)]
mod tests;
