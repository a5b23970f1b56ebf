//! The plugin side of ATP: [`AtpServer`] and its events.

use std::collections::{BTreeSet, VecDeque};

use super::types::{bad, decode, encode_v1_ack, encode_v1_output, get, req_text};
use super::{AtpError, Hello, Message, Output, Value, Version};

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

crate::machine::server_machine!(AtpServer => ServerEvent, AtpError);
