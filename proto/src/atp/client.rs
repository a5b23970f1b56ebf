//! The host side of ATP: [`AtpClient`] and its events.

use std::collections::{BTreeSet, VecDeque};

use super::types::{bad, decode, decode_output, encode_v1_start, get};
use super::{AtpError, Hello, Message, Output, START_ITEM, Value, Version, stopped_error};
use crate::machine::ClientMachine;
use crate::stopped::Stopped;

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

fn done_event(run_id: String, output: Output) -> ClientEvent {
    ClientEvent::WorkDone {
        run_id,
        output_id: output.output_id,
        output_data: output.output_data,
        debug_logs: output.debug_logs,
    }
}

/// A run is complete at its output, or at an error that ends it; its signals and errors
/// that end nothing belong to it before that. The hello and errors about the plugin itself
/// are the caller's.
impl ClientMachine for AtpClient {
    type Key = String;
    type Event = ClientEvent;
    type Error = AtpError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), AtpError> {
        AtpClient::handle_frame(self, frame)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        AtpClient::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<ClientEvent> {
        AtpClient::poll_event(self)
    }
    fn completes(event: &ClientEvent) -> Option<&String> {
        match event {
            ClientEvent::WorkDone { run_id, .. } => Some(run_id),
            ClientEvent::Error {
                run_id,
                step_fatal,
                server_fatal,
                ..
            } if !run_id.is_empty() && (*step_fatal || *server_fatal) => Some(run_id),
            _ => None,
        }
    }
    /// A run's signals and its errors that end nothing come before its result.
    fn belongs_to(event: &ClientEvent) -> Option<&String> {
        match event {
            ClientEvent::Signal { run_id, .. } => Some(run_id),
            ClientEvent::Error { run_id, .. } if !run_id.is_empty() => Some(run_id),
            _ => None,
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        AtpClient::fail_pending(self, stopped);
    }
    /// A plugin that reported an error about itself before it ended is quoted:
    /// `plugin exited with code 1 (the plugin reported: …)`.
    fn explain(&self, stopped: &mut Stopped) {
        if let (Some(said), false) = (self.plugin_error(), stopped.violation) {
            stopped.reason = format!("{} (the plugin reported: {said})", stopped.reason);
        }
    }
}
