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

use std::collections::{BTreeSet, VecDeque};

pub use ciborium::Value;
use thiserror::Error;

use crate::frame::{BytesMut, CborSeq, FrameLimits, Framer};
use crate::stopped::Stopped;

/// The start item the host sends first (`null`, as the Go engine does).
pub const START_ITEM: [u8; 1] = [0xf6];

/// Message kind 1: work start (host → plugin).
pub const KIND_WORK_START: u64 = 1;
/// Message kind 2: work done (plugin → host).
pub const KIND_WORK_DONE: u64 = 2;
/// Message kind 3: signal (both ways).
pub const KIND_SIGNAL: u64 = 3;
/// Message kind 4: client done (host → plugin).
pub const KIND_CLIENT_DONE: u64 = 4;
/// Message kind 5: error (plugin → host).
pub const KIND_ERROR: u64 = 5;

/// Why a frame or a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AtpError {
    /// The frame is not exactly one well-formed CBOR item.
    #[error("invalid cbor: {reason}")]
    InvalidCbor {
        /// What the decoder said.
        reason: String,
    },
    /// A CBOR item that is not the message expected here.
    #[error("bad message: {reason}")]
    BadMessage {
        /// What is wrong with it.
        reason: String,
    },
    /// A hello of a protocol version other than 1 or 3.
    #[error("unsupported atp version {got} (supported: 1, 3)")]
    UnsupportedVersion {
        /// The version the plugin announced.
        got: i128,
    },
    /// A message or call names a run that is not in flight.
    #[error("unknown run {run_id:?}")]
    UnknownRun {
        /// The run id.
        run_id: String,
    },
    /// A work start reuses the id of a run in flight.
    #[error("run {run_id:?} is already in flight")]
    DuplicateRun {
        /// The run id.
        run_id: String,
    },
    /// A work start names a step the plugin's schema does not declare.
    #[error("unknown step {step_id:?}")]
    UnknownStep {
        /// The step id.
        step_id: String,
    },
    /// A message or call that the protocol does not allow in this state.
    #[error("unexpected {got} while {state}")]
    Unexpected {
        /// The machine's state.
        state: &'static str,
        /// What arrived or was called.
        got: String,
    },
    /// A feature the negotiated version lacks (signals, errors and client done in v1).
    #[error("{what} is not part of atp version {version}")]
    Unsupported {
        /// The feature.
        what: &'static str,
        /// The negotiated version.
        version: u64,
    },
}

/// A protocol version this crate speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// The original protocol: one run, acknowledged, no run ids.
    V1,
    /// What current SDKs speak: runs with ids, signals, errors, client done.
    V3,
}

impl Version {
    /// The number on the wire.
    pub fn number(self) -> u64 {
        match self {
            Version::V1 => 1,
            Version::V3 => 3,
        }
    }
}

/// The plugin's introduction.
#[derive(Debug, Clone, PartialEq)]
pub struct Hello {
    /// The version the plugin speaks; the client follows it.
    pub version: Version,
    /// The schema: a map with a `steps` member. v1 sends its members at the top level of the
    /// hello, beside `version`; they are gathered here so both versions look alike.
    pub schema: Value,
    /// Other top-level members of a v3 hello, in order (always empty for v1).
    pub extra: Vec<(Value, Value)>,
}

impl Hello {
    /// Encode as the version's hello item.
    pub fn encode(&self) -> Vec<u8> {
        let mut members = vec![(text("version"), Value::from(self.version.number()))];
        match self.version {
            Version::V3 => members.push((text("schema"), self.schema.clone())),
            Version::V1 => match &self.schema {
                Value::Map(m) => members.extend(m.iter().cloned()),
                other => members.push((text("steps"), other.clone())),
            },
        }
        members.extend(self.extra.iter().cloned());
        encode(&Value::Map(members))
    }

    /// Decode a hello item of version 1 or 3.
    pub fn decode(frame: &[u8]) -> Result<Self, AtpError> {
        let value = decode(frame)?;
        let Value::Map(members) = value else {
            return Err(bad("hello is not a map"));
        };
        let got = match get(&members, "version") {
            Some(Value::Integer(n)) => i128::from(*n),
            _ => return Err(bad("hello has no integer version")),
        };
        let rest = members.into_iter().filter(|(k, _)| !is_key(k, "version"));
        match got {
            1 => Ok(Hello {
                version: Version::V1,
                schema: Value::Map(rest.collect()),
                extra: Vec::new(),
            }),
            3 => {
                let (schema, extra): (Vec<_>, Vec<_>) =
                    rest.partition(|(k, _)| is_key(k, "schema"));
                let schema = schema.into_iter().next().map(|(_, v)| v);
                match schema {
                    Some(schema @ Value::Map(_)) => Ok(Hello {
                        version: Version::V3,
                        schema,
                        extra,
                    }),
                    _ => Err(bad("v3 hello has no schema map")),
                }
            }
            got => Err(AtpError::UnsupportedVersion { got }),
        }
    }

    /// The step ids the schema declares, sorted.
    pub fn step_ids(&self) -> BTreeSet<String> {
        step_ids(&self.schema)
    }
}

/// A step's result: which declared output, its data, and free-form logs.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The declared output's id (`success`, `error`, ...).
    pub output_id: String,
    /// The output's data.
    pub output_data: Value,
    /// Unstructured logs for debugging.
    pub debug_logs: String,
}

impl Output {
    /// An output with no debug logs.
    pub fn new(output_id: &str, output_data: Value) -> Self {
        Self {
            output_id: output_id.to_owned(),
            output_data,
            debug_logs: String::new(),
        }
    }
}

/// One v3 message after hello.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Message {
    /// 1, host → plugin: start a run of a step.
    WorkStart {
        /// The run.
        run_id: String,
        /// The step to run.
        step_id: String,
        /// Its input.
        config: Value,
    },
    /// 2, plugin → host: a run finished with one of its declared outputs.
    WorkDone {
        /// The run.
        run_id: String,
        /// The result.
        output: Output,
    },
    /// 3, both ways: a signal to or from a run.
    Signal {
        /// The run.
        run_id: String,
        /// The signal's id.
        signal_id: String,
        /// Its data.
        data: Value,
    },
    /// 4, host → plugin: the host will start nothing more.
    ClientDone,
    /// 5, plugin → host: a run (or the plugin) failed outside its declared outputs.
    Error {
        /// The run (`""` when the failure is not about one run).
        run_id: String,
        /// What went wrong.
        error: String,
        /// The run cannot continue.
        step_fatal: bool,
        /// The plugin cannot continue.
        server_fatal: bool,
    },
}

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

impl Message {
    /// Encode as a v3 `{"id", "run_id", "data"}` item.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, run_id, data) = match self {
            Message::WorkStart {
                run_id,
                step_id,
                config,
            } => (
                KIND_WORK_START,
                run_id.as_str(),
                vec![("id", text(step_id)), ("config", config.clone())],
            ),
            Message::WorkDone { run_id, output } => {
                (KIND_WORK_DONE, run_id.as_str(), output_members(output))
            }
            Message::Signal {
                run_id,
                signal_id,
                data,
            } => (
                KIND_SIGNAL,
                run_id.as_str(),
                vec![("signal_id", text(signal_id)), ("data", data.clone())],
            ),
            Message::ClientDone => (KIND_CLIENT_DONE, "", Vec::new()),
            Message::Error {
                run_id,
                error,
                step_fatal,
                server_fatal,
            } => (
                KIND_ERROR,
                run_id.as_str(),
                vec![
                    ("error", text(error)),
                    ("step_fatal", Value::Bool(*step_fatal)),
                    ("server_fatal", Value::Bool(*server_fatal)),
                ],
            ),
        };
        encode(&Value::Map(vec![
            (text("id"), Value::from(kind)),
            (text("run_id"), text(run_id)),
            (text("data"), map(data)),
        ]))
    }

    /// Decode a v3 message.
    pub fn decode(frame: &[u8]) -> Result<Self, AtpError> {
        let Value::Map(members) = decode(frame)? else {
            return Err(bad("message is not a map"));
        };
        let kind = match get(&members, "id") {
            Some(Value::Integer(n)) => i128::from(*n),
            _ => return Err(bad("message has no integer id")),
        };
        if kind == i128::from(KIND_CLIENT_DONE) {
            return Ok(Message::ClientDone);
        }
        let run_id = req_text(&members, "run_id", "message")?;
        let data = match get(&members, "data") {
            Some(Value::Map(d)) => d.as_slice(),
            _ => return Err(bad("message has no data map")),
        };
        match u64::try_from(kind) {
            Ok(KIND_WORK_START) => Ok(Message::WorkStart {
                run_id,
                step_id: req_text(data, "id", "work start")?,
                config: get(data, "config").cloned().unwrap_or(Value::Null),
            }),
            Ok(KIND_WORK_DONE) => Ok(Message::WorkDone {
                run_id,
                output: decode_output(data)?,
            }),
            Ok(KIND_SIGNAL) => Ok(Message::Signal {
                run_id,
                signal_id: req_text(data, "signal_id", "signal")?,
                data: get(data, "data").cloned().unwrap_or(Value::Null),
            }),
            Ok(KIND_ERROR) => Ok(Message::Error {
                run_id,
                error: opt_text(data, "error", "error")?.unwrap_or_default(),
                step_fatal: opt_bool(data, "step_fatal")?,
                server_fatal: opt_bool(data, "server_fatal")?,
            }),
            _ => Err(bad(&format!("unknown message id {kind}"))),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Message::WorkStart { .. } => "work start",
            Message::WorkDone { .. } => "work done",
            Message::Signal { .. } => "signal",
            Message::ClientDone => "client done",
            Message::Error { .. } => "error",
        }
    }
}

/// v1's start work item `{"id", "config"}`.
pub fn encode_v1_start(step_id: &str, config: &Value) -> Vec<u8> {
    encode(&map(vec![
        ("id", text(step_id)),
        ("config", config.clone()),
    ]))
}

/// v1's acknowledgement `{"status": "started"}`.
pub fn encode_v1_ack() -> Vec<u8> {
    encode(&map(vec![("status", text("started"))]))
}

/// v1's output item `{"output_id", "output_data", "debug_logs"}`.
pub fn encode_v1_output(output: &Output) -> Vec<u8> {
    encode(&map(output_members(output)))
}

/// Something the host learned from the plugin.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ClientEvent {
    /// The plugin introduced itself; [`AtpClient::start`] is allowed from now on.
    Hello(Hello),
    /// A run finished with one of its declared outputs (error outputs included).
    WorkDone {
        /// The run.
        run_id: String,
        /// The declared output's id.
        output_id: String,
        /// Its data.
        output_data: Value,
        /// The plugin's logs for the run.
        debug_logs: String,
    },
    /// A run sent a signal.
    Signal {
        /// The run.
        run_id: String,
        /// The signal's id.
        signal_id: String,
        /// Its data.
        data: Value,
    },
    /// A run failed outside its outputs (or `run_id` is `""`: the plugin did), or
    /// [`AtpClient::fail_pending`] ended it.
    Error {
        /// The run.
        run_id: String,
        /// What went wrong.
        error: String,
        /// The run cannot continue (it is no longer in flight).
        step_fatal: bool,
        /// The plugin cannot continue.
        server_fatal: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum ClientState {
    AwaitHello,
    Ready {
        version: Version,
        steps: BTreeSet<String>,
    },
    /// v1: the start is sent, its acknowledgement not yet seen.
    V1AwaitAck,
    /// v1: acknowledged, output outstanding.
    V1Running,
    Done {
        version: Version,
    },
    Failed,
}

impl ClientState {
    fn name(&self) -> &'static str {
        match self {
            ClientState::AwaitHello => "awaiting hello",
            ClientState::Ready { .. } => "ready",
            ClientState::V1AwaitAck => "awaiting v1 acknowledgement",
            ClientState::V1Running => "running v1 step",
            ClientState::Done { .. } => "client done",
            ClientState::Failed => "failed",
        }
    }
}

/// The host side of ATP.
///
/// `new` queues the start item; feed each plugin frame to [`handle_frame`](Self::handle_frame),
/// send what [`poll_transmit`](Self::poll_transmit) returns and read
/// [`poll_event`](Self::poll_event). The machine follows the version the hello announces.
#[derive(Debug)]
pub struct AtpClient {
    state: ClientState,
    /// Runs in flight, by id (sorted, so `fail_pending` reports them in a stable order).
    runs: BTreeSet<String>,
    /// v1's single run label (never on the wire).
    v1_run: Option<String>,
    transmit: VecDeque<Vec<u8>>,
    events: VecDeque<ClientEvent>,
    /// The last error the plugin reported about no run in particular (run id `""`).
    plugin_error: Option<String>,
}

impl Default for AtpClient {
    fn default() -> Self {
        Self::new()
    }
}

impl AtpClient {
    /// A client with the start item queued.
    pub fn new() -> Self {
        Self {
            state: ClientState::AwaitHello,
            runs: BTreeSet::new(),
            v1_run: None,
            transmit: VecDeque::from([START_ITEM.to_vec()]),
            events: VecDeque::new(),
            plugin_error: None,
        }
    }

    /// The last error the plugin reported about no run in particular (run id `""`), for the
    /// reason a stop is given: a plugin that said why before it ended is quoted.
    pub fn plugin_error(&self) -> Option<&str> {
        self.plugin_error.as_deref()
    }

    /// The negotiated version, once hello arrived.
    pub fn version(&self) -> Option<Version> {
        match &self.state {
            ClientState::Ready { version, .. } | ClientState::Done { version } => Some(*version),
            ClientState::V1AwaitAck | ClientState::V1Running => Some(Version::V1),
            ClientState::AwaitHello | ClientState::Failed => None,
        }
    }

    /// Runs in flight, sorted by id.
    pub fn in_flight(&self) -> impl Iterator<Item = &str> {
        self.runs.iter().map(String::as_str)
    }

    /// Client done was sent (or the session failed) and no run is in flight: the plugin
    /// should exit now.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, ClientState::Done { .. } | ClientState::Failed) && self.runs.is_empty()
    }

    /// Feed one frame from the plugin.
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), AtpError> {
        match &self.state {
            ClientState::AwaitHello => {
                let hello = Hello::decode(frame)?;
                self.state = ClientState::Ready {
                    version: hello.version,
                    steps: hello.step_ids(),
                };
                self.events.push_back(ClientEvent::Hello(hello));
                Ok(())
            }
            ClientState::V1AwaitAck => {
                let Value::Map(m) = decode(frame)? else {
                    return Err(bad("v1 acknowledgement is not a map"));
                };
                match get(&m, "status") {
                    Some(Value::Text(s)) if s == "started" => {
                        self.state = ClientState::V1Running;
                        Ok(())
                    }
                    _ => Err(self.unexpected("a frame other than {\"status\": \"started\"}")),
                }
            }
            ClientState::V1Running => {
                let Value::Map(m) = decode(frame)? else {
                    return Err(bad("v1 output is not a map"));
                };
                let output = decode_output(&m)?;
                let run_id = self.v1_run.take().unwrap_or_default();
                self.runs.remove(&run_id);
                // v1 runs one step per plugin: the session ends with its output.
                self.state = ClientState::Done {
                    version: Version::V1,
                };
                self.events.push_back(done_event(run_id, output));
                Ok(())
            }
            ClientState::Ready {
                version: Version::V1,
                ..
            }
            | ClientState::Done {
                version: Version::V1,
            }
            | ClientState::Failed => Err(self.unexpected("a frame")),
            ClientState::Ready {
                version: Version::V3,
                ..
            }
            | ClientState::Done {
                version: Version::V3,
            } => self.handle_v3(Message::decode(frame)?),
        }
    }

    fn handle_v3(&mut self, msg: Message) -> Result<(), AtpError> {
        match msg {
            Message::WorkDone { run_id, output } => {
                if !self.runs.remove(&run_id) {
                    return Err(AtpError::UnknownRun { run_id });
                }
                self.events.push_back(done_event(run_id, output));
            }
            Message::Signal {
                run_id,
                signal_id,
                data,
            } => {
                if !self.runs.contains(&run_id) {
                    return Err(AtpError::UnknownRun { run_id });
                }
                self.events.push_back(ClientEvent::Signal {
                    run_id,
                    signal_id,
                    data,
                });
            }
            Message::Error {
                run_id,
                error,
                step_fatal,
                server_fatal,
            } => {
                // An error about no run in particular ("") is the plugin's own.
                if !run_id.is_empty() && !self.runs.contains(&run_id) {
                    return Err(AtpError::UnknownRun { run_id });
                }
                if run_id.is_empty() {
                    self.plugin_error = Some(error.clone());
                }
                if step_fatal || server_fatal {
                    self.runs.remove(&run_id);
                }
                self.events.push_back(ClientEvent::Error {
                    run_id,
                    error,
                    step_fatal,
                    server_fatal,
                });
            }
            other @ (Message::WorkStart { .. } | Message::ClientDone) => {
                return Err(self.unexpected(&format!("{} from the plugin", other.name())));
            }
        }
        Ok(())
    }

    /// Start a run of `step_id`. Refused before hello, after client done, for a run id in
    /// flight, for a step the hello did not declare, and (v1) for a second run.
    pub fn start(&mut self, run_id: &str, step_id: &str, config: Value) -> Result<(), AtpError> {
        let ClientState::Ready { version, steps } = &self.state else {
            return Err(self.unexpected("start"));
        };
        if !steps.contains(step_id) {
            return Err(AtpError::UnknownStep {
                step_id: step_id.to_owned(),
            });
        }
        if self.runs.contains(run_id) {
            return Err(AtpError::DuplicateRun {
                run_id: run_id.to_owned(),
            });
        }
        match version {
            Version::V1 => {
                self.transmit.push_back(encode_v1_start(step_id, &config));
                self.v1_run = Some(run_id.to_owned());
                self.state = ClientState::V1AwaitAck;
            }
            Version::V3 => self.transmit.push_back(
                Message::WorkStart {
                    run_id: run_id.to_owned(),
                    step_id: step_id.to_owned(),
                    config,
                }
                .encode(),
            ),
        }
        self.runs.insert(run_id.to_owned());
        Ok(())
    }

    /// Send a signal to a run in flight (v3 only, before client done).
    pub fn signal(&mut self, run_id: &str, signal_id: &str, data: Value) -> Result<(), AtpError> {
        match &self.state {
            ClientState::Ready {
                version: Version::V3,
                ..
            } => {}
            ClientState::Ready {
                version: Version::V1,
                ..
            }
            | ClientState::V1AwaitAck
            | ClientState::V1Running => {
                return Err(AtpError::Unsupported {
                    what: "signal",
                    version: 1,
                });
            }
            _ => return Err(self.unexpected("signal")),
        }
        if !self.runs.contains(run_id) {
            return Err(AtpError::UnknownRun {
                run_id: run_id.to_owned(),
            });
        }
        self.transmit.push_back(
            Message::Signal {
                run_id: run_id.to_owned(),
                signal_id: signal_id.to_owned(),
                data,
            }
            .encode(),
        );
        Ok(())
    }

    /// Tell the plugin no more runs will start. Runs in flight still report. v1 has no such
    /// message: nothing is sent, the machine only stops accepting starts.
    pub fn client_done(&mut self) -> Result<(), AtpError> {
        match &self.state {
            ClientState::Ready { version, .. } => {
                if *version == Version::V3 {
                    self.transmit.push_back(Message::ClientDone.encode());
                }
                self.state = ClientState::Done { version: *version };
                Ok(())
            }
            // The v1 run still reports; its output ends the session anyway.
            ClientState::V1AwaitAck | ClientState::V1Running => Ok(()),
            _ => Err(self.unexpected("client done")),
        }
    }

    /// The plugin is gone (crashed, killed, out of limits): every run in flight completes with
    /// an [`ClientEvent::Error`] carrying `reason` and the plugin's last stderr lines, step and
    /// server fatal. The machine accepts no more frames or calls.
    pub fn fail_pending(&mut self, stopped: &Stopped) {
        for run_id in std::mem::take(&mut self.runs) {
            // The plugin is gone for good: server fatal.
            if let Message::Error {
                run_id,
                error,
                step_fatal,
                server_fatal,
            } = stopped_error(&run_id, stopped, true)
            {
                self.events.push_back(ClientEvent::Error {
                    run_id,
                    error,
                    step_fatal,
                    server_fatal,
                });
            }
        }
        self.v1_run = None;
        self.transmit.clear();
        self.state = ClientState::Failed;
    }

    /// The next frame to send to the plugin.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    fn unexpected(&self, got: &str) -> AtpError {
        AtpError::Unexpected {
            state: self.state.name(),
            got: got.to_owned(),
        }
    }
}

/// Something the plugin learned from the host.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ServerEvent {
    /// Start a run (v1: `run_id` is `""`). Answer with [`AtpServer::work_done`] or
    /// [`AtpServer::error`], in any order relative to other runs.
    WorkStart {
        /// The run.
        run_id: String,
        /// The step.
        step_id: String,
        /// Its input.
        config: Value,
    },
    /// A signal for a run in flight.
    Signal {
        /// The run.
        run_id: String,
        /// The signal's id.
        signal_id: String,
        /// Its data.
        data: Value,
    },
    /// No more runs will start; finish the ones in flight, then exit.
    ClientDone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerState {
    AwaitStartItem,
    Serving,
    ClientDone,
    /// v1: the output is sent.
    V1Finished,
}

impl ServerState {
    fn name(self) -> &'static str {
        match self {
            ServerState::AwaitStartItem => "awaiting the start item",
            ServerState::Serving => "serving",
            ServerState::ClientDone => "client done",
            ServerState::V1Finished => "v1 output sent",
        }
    }
}

/// The plugin side of ATP.
///
/// A host frame that is refused leaves the machine as it was. A work start for a step the
/// schema does not declare, or for a run id already in flight, is answered by the machine
/// itself with an error message (v3; step fatal) and produces no event.
#[derive(Debug)]
pub struct AtpServer {
    version: Version,
    hello: Hello,
    steps: BTreeSet<String>,
    state: ServerState,
    runs: BTreeSet<String>,
    transmit: VecDeque<Vec<u8>>,
    events: VecDeque<ServerEvent>,
}

impl AtpServer {
    /// A plugin speaking `version` with `schema` (a map with a `steps` member whose keys are
    /// the step ids). Hello waits for the start item.
    pub fn new(version: Version, schema: Value) -> Self {
        let hello = Hello {
            version,
            schema,
            extra: Vec::new(),
        };
        Self {
            version,
            steps: hello.step_ids(),
            hello,
            state: ServerState::AwaitStartItem,
            runs: BTreeSet::new(),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The version this plugin speaks.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Runs in flight, sorted by id.
    pub fn in_flight(&self) -> impl Iterator<Item = &str> {
        self.runs.iter().map(String::as_str)
    }

    /// The session is over: v3 client done arrived and no run is in flight, or v1's output is
    /// sent. The plugin should exit 0.
    pub fn is_finished(&self) -> bool {
        match self.state {
            ServerState::ClientDone => self.runs.is_empty(),
            ServerState::V1Finished => true,
            ServerState::AwaitStartItem | ServerState::Serving => false,
        }
    }

    /// Feed one frame from the host.
    pub fn handle_frame(&mut self, frame: &[u8]) -> Result<(), AtpError> {
        match (self.state, self.version) {
            (ServerState::AwaitStartItem, _) => {
                // Any item starts the session; the Go engine sends null.
                decode(frame)?;
                self.transmit.push_back(self.hello.encode());
                self.state = ServerState::Serving;
                Ok(())
            }
            (ServerState::Serving, Version::V3) => self.handle_v3(Message::decode(frame)?),
            (ServerState::Serving, Version::V1) => {
                if !self.runs.is_empty() {
                    return Err(self.unexpected("a second v1 frame"));
                }
                let Value::Map(m) = decode(frame)? else {
                    return Err(bad("v1 start work is not a map"));
                };
                let step_id = req_text(&m, "id", "v1 start work")?;
                if !self.steps.contains(&step_id) {
                    return Err(AtpError::UnknownStep { step_id });
                }
                let config = get(&m, "config").cloned().unwrap_or(Value::Null);
                self.runs.insert(String::new());
                self.transmit.push_back(encode_v1_ack());
                self.events.push_back(ServerEvent::WorkStart {
                    run_id: String::new(),
                    step_id,
                    config,
                });
                Ok(())
            }
            (ServerState::ClientDone | ServerState::V1Finished, _) => {
                Err(self.unexpected("a frame"))
            }
        }
    }

    fn handle_v3(&mut self, msg: Message) -> Result<(), AtpError> {
        match msg {
            Message::WorkStart {
                run_id,
                step_id,
                config,
            } => {
                let refusal = if self.runs.contains(&run_id) {
                    Some(AtpError::DuplicateRun {
                        run_id: run_id.clone(),
                    })
                } else if !self.steps.contains(&step_id) {
                    Some(AtpError::UnknownStep {
                        step_id: step_id.clone(),
                    })
                } else {
                    None
                };
                if let Some(err) = refusal {
                    self.transmit.push_back(
                        Message::Error {
                            run_id,
                            error: err.to_string(),
                            step_fatal: true,
                            server_fatal: false,
                        }
                        .encode(),
                    );
                    return Ok(());
                }
                self.runs.insert(run_id.clone());
                self.events.push_back(ServerEvent::WorkStart {
                    run_id,
                    step_id,
                    config,
                });
            }
            Message::Signal {
                run_id,
                signal_id,
                data,
            } => {
                if !self.runs.contains(&run_id) {
                    return Err(AtpError::UnknownRun { run_id });
                }
                self.events.push_back(ServerEvent::Signal {
                    run_id,
                    signal_id,
                    data,
                });
            }
            Message::ClientDone => {
                self.state = ServerState::ClientDone;
                self.events.push_back(ServerEvent::ClientDone);
            }
            other @ (Message::WorkDone { .. } | Message::Error { .. }) => {
                return Err(self.unexpected(&format!("{} from the host", other.name())));
            }
        }
        Ok(())
    }

    fn check_run(&self, run_id: &str, what: &str) -> Result<(), AtpError> {
        if matches!(
            self.state,
            ServerState::AwaitStartItem | ServerState::V1Finished
        ) {
            return Err(self.unexpected(what));
        }
        if !self.runs.contains(run_id) {
            return Err(AtpError::UnknownRun {
                run_id: run_id.to_owned(),
            });
        }
        Ok(())
    }

    /// Finish a run in flight with one of its declared outputs (an error output too).
    pub fn work_done(
        &mut self,
        run_id: &str,
        output_id: &str,
        output_data: Value,
        debug_logs: &str,
    ) -> Result<(), AtpError> {
        self.check_run(run_id, "work done")?;
        let output = Output {
            output_id: output_id.to_owned(),
            output_data,
            debug_logs: debug_logs.to_owned(),
        };
        self.runs.remove(run_id);
        match self.version {
            Version::V3 => self.transmit.push_back(
                Message::WorkDone {
                    run_id: run_id.to_owned(),
                    output,
                }
                .encode(),
            ),
            Version::V1 => {
                self.transmit.push_back(encode_v1_output(&output));
                self.state = ServerState::V1Finished;
            }
        }
        Ok(())
    }

    /// Send a signal from a run in flight (v3 only).
    pub fn signal(&mut self, run_id: &str, signal_id: &str, data: Value) -> Result<(), AtpError> {
        self.v3_only("signal")?;
        self.check_run(run_id, "signal")?;
        self.transmit.push_back(
            Message::Signal {
                run_id: run_id.to_owned(),
                signal_id: signal_id.to_owned(),
                data,
            }
            .encode(),
        );
        Ok(())
    }

    /// Report a failure outside the declared outputs (v3 only). A step or server fatal error
    /// ends the run.
    pub fn error(
        &mut self,
        run_id: &str,
        error: &str,
        step_fatal: bool,
        server_fatal: bool,
    ) -> Result<(), AtpError> {
        self.v3_only("error")?;
        self.check_run(run_id, "error")?;
        if step_fatal || server_fatal {
            self.runs.remove(run_id);
        }
        self.transmit.push_back(
            Message::Error {
                run_id: run_id.to_owned(),
                error: error.to_owned(),
                step_fatal,
                server_fatal,
            }
            .encode(),
        );
        Ok(())
    }

    /// The next frame to send to the host.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    fn v3_only(&self, what: &'static str) -> Result<(), AtpError> {
        match self.version {
            Version::V3 => Ok(()),
            Version::V1 => Err(AtpError::Unsupported { what, version: 1 }),
        }
    }

    fn unexpected(&self, got: &str) -> AtpError {
        AtpError::Unexpected {
            state: self.state.name(),
            got: got.to_owned(),
        }
    }
}

/// Decode one frame as exactly one CBOR item.
///
/// The frame is walked by the [`CborSeq`] framer first (depth at most
/// `FrameLimits::default().max_depth`, no length beyond the frame), so the decoder never
/// allocates for lengths the bytes do not hold and never recurses deeper than that.
pub fn decode(frame: &[u8]) -> Result<Value, AtpError> {
    let limits = FrameLimits {
        max_frame_bytes: frame.len(),
        ..FrameLimits::default()
    };
    let mut buf = BytesMut::from(frame);
    match CborSeq::new(limits).decode_eof(&mut buf) {
        Ok(Some(_)) if buf.is_empty() => {}
        Ok(Some(_)) => {
            return Err(AtpError::InvalidCbor {
                reason: format!("{} bytes after the item", buf.len()),
            });
        }
        Ok(None) => {
            return Err(AtpError::InvalidCbor {
                reason: "empty frame".into(),
            });
        }
        Err(e) => {
            return Err(AtpError::InvalidCbor {
                reason: e.to_string(),
            });
        }
    }
    ciborium::from_reader(frame).map_err(|e: ciborium::de::Error<std::io::Error>| {
        AtpError::InvalidCbor {
            reason: e.to_string(),
        }
    })
}

/// Encode one CBOR item.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).expect("writing a Value into a Vec cannot fail");
    out
}

/// A one-line rendering of a frame in CBOR diagnostic notation (RFC 8949 §8), for transcript
/// notes and logs: `{"id": 1, "run_id": "r1", "data": {...}}`, `h'00ff'` for bytes.
pub fn diagnostic_frame(frame: &[u8]) -> String {
    match decode(frame) {
        Ok(v) => diagnostic(&v),
        Err(e) => format!("<{e}>"),
    }
}

/// A one-line rendering of `value` in CBOR diagnostic notation (RFC 8949 §8).
pub fn diagnostic(value: &Value) -> String {
    let mut out = String::new();
    diag(value, &mut out);
    out
}

fn diag(value: &Value, out: &mut String) {
    match value {
        Value::Integer(n) => out.push_str(&i128::from(*n).to_string()),
        Value::Bytes(b) => {
            out.push_str("h'");
            for byte in b {
                out.push_str(&format!("{byte:02x}"));
            }
            out.push('\'');
        }
        Value::Float(f) if f.is_nan() => out.push_str("NaN"),
        Value::Float(f) if f.is_infinite() => {
            out.push_str(if *f > 0.0 { "Infinity" } else { "-Infinity" });
        }
        Value::Float(f) => out.push_str(&format!("{f:?}")),
        Value::Text(s) => {
            out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}")));
        }
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null"),
        Value::Tag(t, v) => {
            out.push_str(&format!("{t}("));
            diag(v, out);
            out.push(')');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                diag(item, out);
            }
            out.push(']');
        }
        Value::Map(members) => {
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                diag(k, out);
                out.push_str(": ");
                diag(v, out);
            }
            out.push('}');
        }
        // `Value` is non-exhaustive.
        _ => out.push_str("undefined"),
    }
}

/// Fuzz body (for a cargo-fuzz target and the unit tests): split `data` into frames at each
/// `0xff 0xfe` pair; for each version, feed every frame to a fresh server and to a client that
/// already has hello and one run in flight, answering work starts and draining both machines
/// as it goes; then end both sessions. Also decode `data` whole as hello, message and
/// diagnostic text. Refusals are expected; a panic is a bug.
pub fn fuzz(data: &[u8]) {
    let frames: Vec<&[u8]> = split_frames(data);
    let schema = Value::Map(vec![(
        text("steps"),
        Value::Map(vec![(text("s"), Value::Map(Vec::new()))]),
    )]);
    for version in [Version::V1, Version::V3] {
        let mut server = AtpServer::new(version, schema.clone());
        let mut client = AtpClient::new();
        let _ = client.handle_frame(&server_hello(version, &schema));
        let _ = client.start("r", "s", Value::Null);
        for frame in &frames {
            let _ = server.handle_frame(frame);
            let _ = client.handle_frame(frame);
            while let Some(ServerEvent::WorkStart { run_id, .. }) = server.poll_event() {
                let _ = server.signal(&run_id, "x", Value::Null);
                let _ = server.work_done(&run_id, "success", Value::Null, "");
            }
            let _ = client.signal("r", "x", Value::Null);
            while server.poll_transmit().is_some() {}
            while client.poll_event().is_some() {}
        }
        let _ = client.client_done();
        client.fail_pending(&Stopped::by_host("gone", vec!["tail".into()]));
        let _ = server.error("r", "e", true, true);
    }
    let _ = diagnostic_frame(data);
    for frame in frames.iter().copied().chain([data]) {
        fuzz_round_trips(frame);
    }
}

/// What decodes re-encodes canonically: the encoding of a decoded item, hello or message
/// decodes again, and encoding that gives the same bytes. (Bytes, not values, are compared:
/// a NaN in a config is not equal to itself.)
fn fuzz_round_trips(frame: &[u8]) {
    if let Ok(value) = decode(frame) {
        let wire = encode(&value);
        let again = decode(&wire).expect("an encoded item decodes");
        assert_eq!(encode(&again), wire, "item encoding is not a fixed point");
    }
    if let Ok(hello) = Hello::decode(frame) {
        let wire = hello.encode();
        let again = Hello::decode(&wire).expect("an encoded hello decodes");
        assert_eq!(again.version, hello.version);
        assert_eq!(again.encode(), wire, "hello encoding is not a fixed point");
    }
    if let Ok(msg) = Message::decode(frame) {
        let wire = msg.encode();
        let again = Message::decode(&wire).expect("an encoded message decodes");
        assert_eq!(again.name(), msg.name());
        assert_eq!(
            again.encode(),
            wire,
            "message encoding is not a fixed point"
        );
    }
}

fn server_hello(version: Version, schema: &Value) -> Vec<u8> {
    Hello {
        version,
        schema: schema.clone(),
        extra: Vec::new(),
    }
    .encode()
}

fn split_frames(data: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < data.len() {
        if data[i] == 0xff && data[i + 1] == 0xfe {
            frames.push(&data[start..i]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    frames.push(&data[start..]);
    frames
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

fn map(members: Vec<(&str, Value)>) -> Value {
    Value::Map(members.into_iter().map(|(k, v)| (text(k), v)).collect())
}

fn output_members(output: &Output) -> Vec<(&'static str, Value)> {
    vec![
        ("output_id", text(&output.output_id)),
        ("output_data", output.output_data.clone()),
        ("debug_logs", text(&output.debug_logs)),
    ]
}

fn done_event(run_id: String, output: Output) -> ClientEvent {
    ClientEvent::WorkDone {
        run_id,
        output_id: output.output_id,
        output_data: output.output_data,
        debug_logs: output.debug_logs,
    }
}

fn decode_output(members: &[(Value, Value)]) -> Result<Output, AtpError> {
    Ok(Output {
        output_id: req_text(members, "output_id", "output")?,
        output_data: get(members, "output_data").cloned().unwrap_or(Value::Null),
        debug_logs: opt_text(members, "debug_logs", "output")?.unwrap_or_default(),
    })
}

fn step_ids(schema: &Value) -> BTreeSet<String> {
    let Value::Map(members) = schema else {
        return BTreeSet::new();
    };
    match get(members, "steps") {
        Some(Value::Map(steps)) => steps
            .iter()
            .filter_map(|(k, _)| k.as_text().map(str::to_owned))
            .collect(),
        _ => BTreeSet::new(),
    }
}

fn is_key(k: &Value, key: &str) -> bool {
    matches!(k, Value::Text(s) if s == key)
}

fn get<'a>(members: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    members.iter().find(|(k, _)| is_key(k, key)).map(|(_, v)| v)
}

fn req_text(members: &[(Value, Value)], key: &str, what: &str) -> Result<String, AtpError> {
    opt_text(members, key, what)?.ok_or_else(|| bad(&format!("{what} has no {key}")))
}

fn opt_text(members: &[(Value, Value)], key: &str, what: &str) -> Result<Option<String>, AtpError> {
    match get(members, key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Text(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(&format!("{what}: {key} is not text"))),
    }
}

fn opt_bool(members: &[(Value, Value)], key: &str) -> Result<bool, AtpError> {
    match get(members, key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(&format!("error: {key} is not a bool"))),
    }
}

fn bad(reason: &str) -> AtpError {
    AtpError::BadMessage {
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests;
