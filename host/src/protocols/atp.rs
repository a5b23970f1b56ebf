//! Arcaflow ATP (versions 1 and 3), host side: send the start item, read hello, start runs
//! (several in flight under v3, results in any order), exchange signals, end with client done.
//!
//! ```text
//!  connect(session) ── start item `null` ──► plugin      ◄── hello ── Hello (v1 or v3)
//!  start(run, step, config) ── work start ──► plugin     ──► Run
//!  signal(run, id, data)    ── signal ──────► plugin
//!  driver task: SessionReader::recv ──► machine::AtpClient::handle_frame ──► event
//!     work done / fatal error ──► that Run's result()
//!     signal / non-fatal error ──► that Run's next_event()
//!  plugin gone / bad frame ──► fail_pending(reason, stderr tail) ──► every Run in flight
//!  done(grace): client done ──► close stdin ──► grace ──► (native: SIGTERM ──►) kill
//! ```
//!
//! Protocol-correct failure: when the sandbox stops the plugin (fuel, memory, deadline, a
//! crash) or the plugin breaks the framing or the protocol, every run in flight completes
//! with an ATP error `{error, step_fatal: true, server_fatal: true}` whose text is the reason
//! and the plugin's last stderr lines ([`AtpRunError`]), never a hang. A step's declared error
//! output is not a failure: it is an ordinary [`WorkDone`].
//!
//! What it does not do: validate configs or outputs against the schema, or time runs out
//! (use the policy's deadline, or drop the [`Run`] and call [`AtpClient::done`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandpipe_proto::atp::{self as machine, AtpError, ClientEvent};
pub use sandpipe_proto::atp::{Hello, Value, Version};
use sandpipe_proto::frame::FrameError;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::{Exit, SessionError};
use crate::session::{Session, SessionControl, SessionReader, SessionWriter, TERM_GRACE};

/// How many signals and non-fatal errors of one run may wait unread before the driver stops
/// reading the plugin's stdout (backpressure instead of unbounded memory). [`Run::result`]
/// drops the queue, so a caller that only wants the result never blocks the driver.
pub const RUN_EVENT_QUEUE: usize = 256;

/// A run's result: one of the step's declared outputs (a declared error output too).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkDone {
    /// The declared output's id (`success`, `error`, ...).
    pub output_id: String,
    /// The output's data.
    pub output_data: Value,
    /// The plugin's logs for the run.
    pub debug_logs: String,
}

/// Who made an [`AtpRunError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorOrigin {
    /// The plugin sent an ATP error message.
    Plugin,
    /// The host: the plugin was stopped, exited, or broke the framing or the protocol.
    Host,
}

/// A run that ended without a declared output: an ATP error message, in the protocol's form
/// (`error`, `step_fatal`, `server_fatal`), plus what the host knows about why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("run {run_id:?} failed: {error}")]
#[non_exhaustive]
pub struct AtpRunError {
    /// The run.
    pub run_id: String,
    /// The error text. For a plugin the host stopped: the reason, then `stderr:` and the
    /// plugin's last stderr lines.
    pub error: String,
    /// The run cannot continue. A run error is step or server fatal (or both); an error that
    /// is neither does not end the run and arrives as a [`RunEvent::Error`].
    pub step_fatal: bool,
    /// The plugin cannot continue.
    pub server_fatal: bool,
    /// Who made the error.
    pub origin: ErrorOrigin,
    /// How the plugin ended, when the host made the error.
    pub exit: Option<Exit>,
    /// The plugin's last stderr lines, when the host made the error.
    pub stderr_tail: Vec<String>,
}

/// Why a call on the client failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AtpFailure {
    /// The protocol does not allow the call now: an unknown step, a run id already in flight,
    /// a signal for a run not in flight, a signal or second run under v1. Nothing was sent.
    #[error("refused: {0}")]
    Refused(AtpError),
    /// The plugin is gone: it was stopped, exited, or broke the framing or the protocol.
    #[error("{reason}")]
    Stopped {
        /// What happened, as the run errors say it (without the stderr tail).
        reason: String,
        /// How the plugin ended.
        exit: Option<Exit>,
        /// The plugin's last stderr lines.
        stderr_tail: Vec<String>,
        /// True when the plugin broke the framing or the protocol (rather than being stopped
        /// or exiting).
        violation: bool,
    },
}

/// Something a run in flight reported besides its result.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RunEvent {
    /// The run sent a signal.
    Signal {
        /// The signal's id.
        signal_id: String,
        /// Its data.
        data: Value,
    },
    /// The plugin reported an error that does not end the run (neither step nor server fatal).
    Error {
        /// The error text.
        error: String,
    },
}

type ResultTx = oneshot::Sender<Result<WorkDone, AtpRunError>>;

struct Slot {
    result: ResultTx,
    events: mpsc::Sender<RunEvent>,
}

struct Shared {
    machine: machine::AtpClient,
    runs: HashMap<String, Slot>,
    hello: Option<oneshot::Sender<Result<Hello, AtpFailure>>>,
    /// The last error the plugin reported about no run in particular (run id `""`).
    plugin_error: Option<String>,
    /// Set once the plugin is gone: later calls fail at once with it.
    failed: Option<AtpFailure>,
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// An ATP connection to a plugin, after hello. Calls take `&self`: runs may be started and
/// signalled from several tasks, and their results come back in any order.
///
/// Dropping the client kills the plugin (as dropping a [`Session`] does); end it with
/// [`AtpClient::done`].
pub struct AtpClient {
    shared: Arc<Mutex<Shared>>,
    writer: tokio::sync::Mutex<SessionWriter>,
    control: SessionControl,
    version: Version,
    driver: JoinHandle<()>,
}

impl std::fmt::Debug for AtpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtpClient")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl Drop for AtpClient {
    fn drop(&mut self) {
        self.control.kill();
    }
}

/// A run in flight. Read its signals with [`next_event`](Self::next_event) or
/// [`next_signal`](Self::next_signal), then its outcome with [`result`](Self::result).
#[derive(Debug)]
pub struct Run {
    run_id: String,
    result: oneshot::Receiver<Result<WorkDone, AtpRunError>>,
    events: mpsc::Receiver<RunEvent>,
}

impl Run {
    /// The run id.
    pub fn id(&self) -> &str {
        &self.run_id
    }

    /// The next signal or non-fatal error of this run; `None` once the run has ended and
    /// everything it reported before was read.
    pub async fn next_event(&mut self) -> Option<RunEvent> {
        self.events.recv().await
    }

    /// The next signal of this run as `(signal_id, data)`, skipping non-fatal errors (they are
    /// logged); `None` once the run has ended.
    pub async fn next_signal(&mut self) -> Option<(String, Value)> {
        loop {
            match self.events.recv().await? {
                RunEvent::Signal { signal_id, data } => return Some((signal_id, data)),
                RunEvent::Error { error } => {
                    tracing::warn!(run_id = %self.run_id, "plugin reported a non-fatal error: {error}");
                }
            }
        }
    }

    /// Wait for the run's outcome: a declared output (error outputs included) or an
    /// [`AtpRunError`]. Unread signals are dropped.
    pub async fn result(self) -> Result<WorkDone, AtpRunError> {
        let Run {
            run_id,
            result,
            events,
        } = self;
        drop(events);
        result.await.unwrap_or_else(|_| {
            Err(AtpRunError {
                run_id,
                error: "the atp driver ended without an outcome".into(),
                step_fatal: true,
                server_fatal: true,
                origin: ErrorOrigin::Host,
                exit: None,
                stderr_tail: Vec::new(),
            })
        })
    }
}

impl AtpClient {
    /// Take over `session` (framing [`CborSeq`](sandpipe_proto::frame::Framing::CborSeq)):
    /// send the start item and wait for the plugin's hello, version 1 or 3. A plugin that
    /// never sends hello is stopped by its policy's deadline.
    pub async fn connect(session: Session) -> Result<(AtpClient, Hello), AtpFailure> {
        let (writer, reader, control) = session.into_split();
        let (hello_tx, hello_rx) = oneshot::channel();
        let shared = Arc::new(Mutex::new(Shared {
            machine: machine::AtpClient::new(),
            runs: HashMap::new(),
            hello: Some(hello_tx),
            plugin_error: None,
            failed: None,
        }));
        let driver = tokio::spawn(drive(reader, control.clone(), shared.clone()));
        let mut client = AtpClient {
            shared,
            writer: tokio::sync::Mutex::new(writer),
            control,
            // Replaced below, once hello told.
            version: Version::V3,
            driver,
        };
        client.flush().await;
        let hello = match hello_rx.await {
            Ok(result) => result?,
            Err(_) => return Err(client.failure()),
        };
        client.version = hello.version;
        Ok((client, hello))
    }

    /// The version the plugin speaks.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The session's control half (exit, kill, stderr tail).
    pub fn control(&self) -> &SessionControl {
        &self.control
    }

    /// Run ids in flight, sorted.
    pub fn in_flight(&self) -> Vec<String> {
        lock(&self.shared)
            .machine
            .in_flight()
            .map(str::to_owned)
            .collect()
    }

    /// Start a run of `step_id` with `config`. Under v3 several runs may be in flight (run ids
    /// must differ); under v1 there is one run per plugin.
    pub async fn start(
        &self,
        run_id: &str,
        step_id: &str,
        config: Value,
    ) -> Result<Run, AtpFailure> {
        // The writer lock is taken first so frames go out in the machine's order.
        let mut writer = self.writer.lock().await;
        let (run, frames) = {
            let mut s = lock(&self.shared);
            if let Some(f) = &s.failed {
                return Err(f.clone());
            }
            s.machine
                .start(run_id, step_id, config)
                .map_err(AtpFailure::Refused)?;
            let (result_tx, result_rx) = oneshot::channel();
            let (events_tx, events_rx) = mpsc::channel(RUN_EVENT_QUEUE);
            s.runs.insert(
                run_id.to_owned(),
                Slot {
                    result: result_tx,
                    events: events_tx,
                },
            );
            let run = Run {
                run_id: run_id.to_owned(),
                result: result_rx,
                events: events_rx,
            };
            (run, transmit(&mut s.machine))
        };
        send_frames(&mut writer, frames).await;
        Ok(run)
    }

    /// Send signal `signal_id` with `data` to a run in flight (v3 only).
    pub async fn signal(
        &self,
        run_id: &str,
        signal_id: &str,
        data: Value,
    ) -> Result<(), AtpFailure> {
        let mut writer = self.writer.lock().await;
        let frames = {
            let mut s = lock(&self.shared);
            if let Some(f) = &s.failed {
                return Err(f.clone());
            }
            s.machine
                .signal(run_id, signal_id, data)
                .map_err(AtpFailure::Refused)?;
            transmit(&mut s.machine)
        };
        send_frames(&mut writer, frames).await;
        Ok(())
    }

    /// End the session, the way the engine sends SIGTERM to a plugin container: client done
    /// (v3), close stdin, give the plugin `grace` to exit; then a native plugin gets a real
    /// SIGTERM and up to [`TERM_GRACE`] (at most `grace`) more; then the plugin is killed.
    ///
    /// Runs still in flight may finish meanwhile (their [`Run`]s get the results); those that
    /// do not get an [`AtpRunError`] naming how the plugin ended.
    pub async fn done(mut self, grace: Duration) -> Exit {
        {
            let mut writer = self.writer.lock().await;
            let frames = {
                let mut s = lock(&self.shared);
                // Refused after a failure or after v1's output: nothing to tell the plugin.
                match s.machine.client_done() {
                    Ok(()) => transmit(&mut s.machine),
                    Err(_) => Vec::new(),
                }
            };
            send_frames(&mut writer, frames).await;
            writer.close().await;
        }
        // The driver keeps reading stdout meanwhile, so the plugin never blocks on a full pipe.
        let exit = self.control.wait_or_stop(grace).await;
        // Every run learns its outcome before `done` returns: the driver ends once stdout
        // closes, which the plugin's end guarantees. A driver blocked on a full run queue
        // (a caller holding a `Run` without reading it) would block here, so stop waiting
        // for it then: that caller reads its queue or drops its run.
        let _ = tokio::time::timeout(TERM_GRACE, &mut self.driver).await;
        exit
    }

    fn failure(&self) -> AtpFailure {
        lock(&self.shared)
            .failed
            .clone()
            .unwrap_or_else(|| AtpFailure::Stopped {
                reason: "the atp driver ended".into(),
                exit: self.control.try_exit(),
                stderr_tail: self.control.stderr_tail(),
                violation: false,
            })
    }

    async fn flush(&self) {
        let mut writer = self.writer.lock().await;
        let frames = transmit(&mut lock(&self.shared).machine);
        send_frames(&mut writer, frames).await;
    }
}

fn transmit(machine: &mut machine::AtpClient) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| machine.poll_transmit()).collect()
}

/// A write failure means the plugin stopped reading; the driver reports how it ended to every
/// run in flight, so the error is not repeated here.
async fn send_frames(writer: &mut SessionWriter, frames: Vec<Vec<u8>>) {
    for frame in frames {
        if let Err(e) = writer.send(&frame).await {
            tracing::debug!("plugin stopped reading stdin: {e}");
            return;
        }
    }
}

/// Read the plugin's frames into the machine until it is gone; then fail what is in flight.
async fn drive(mut reader: SessionReader, control: SessionControl, shared: Arc<Mutex<Shared>>) {
    let (reason, exit, violation) = loop {
        match reader.recv().await {
            Ok(Some(frame)) => {
                let (events, refused) = {
                    let mut s = lock(&shared);
                    let refused = s.machine.handle_frame(&frame).err();
                    (
                        std::iter::from_fn(|| s.machine.poll_event()).collect::<Vec<_>>(),
                        refused,
                    )
                };
                for event in events {
                    dispatch(&shared, event, None).await;
                }
                if let Some(e) = refused {
                    control.kill();
                    break (format!("plugin broke the protocol: {e}"), None, true);
                }
            }
            Ok(None) => {
                let exit = control.wait().await;
                break (exit.to_string(), Some(exit), false);
            }
            // A frame cut off by the plugin's end is that end's casualty: stdout is closed,
            // so report how the plugin ended.
            Err(SessionError::BadFrameFromPlugin {
                error: FrameError::Truncated { .. },
                ..
            }) => {
                let exit = control.wait().await;
                break (exit.to_string(), Some(exit), false);
            }
            Err(SessionError::BadFrameFromPlugin { error, .. }) => {
                control.kill();
                break (format!("bad frame from plugin: {error}"), None, true);
            }
            Err(e) => {
                control.kill();
                break (format!("reading plugin output: {e}"), None, true);
            }
        }
    };
    let exit = match exit {
        Some(exit) => exit,
        None => control.wait().await,
    };
    let stderr_tail = control.stderr_tail();
    let (events, failure) = {
        let mut s = lock(&shared);
        let reason = match &s.plugin_error {
            Some(said) if !violation => format!("{reason} (the plugin reported: {said})"),
            _ => reason,
        };
        let failure = AtpFailure::Stopped {
            reason: reason.clone(),
            exit: Some(exit.clone()),
            stderr_tail: stderr_tail.clone(),
            violation,
        };
        s.failed = Some(failure.clone());
        s.machine.fail_pending(&crate::error::Stopped {
            reason: reason.clone(),
            exit: Some(exit.clone()),
            stderr_tail: stderr_tail.clone(),
            violation,
        });
        if let Some(hello) = s.hello.take() {
            let _ = hello.send(Err(failure.clone()));
        }
        (
            std::iter::from_fn(|| s.machine.poll_event()).collect::<Vec<_>>(),
            (exit, stderr_tail),
        )
    };
    for event in events {
        dispatch(&shared, event, Some(&failure)).await;
    }
}

/// Hand one machine event to whoever waits for it. `stopped` is set for the errors
/// `fail_pending` made: the exit and stderr tail they carry.
async fn dispatch(
    shared: &Mutex<Shared>,
    event: ClientEvent,
    stopped: Option<&(Exit, Vec<String>)>,
) {
    let queued = {
        let mut s = lock(shared);
        match event {
            ClientEvent::Hello(hello) => {
                if let Some(tx) = s.hello.take() {
                    let _ = tx.send(Ok(hello));
                }
                None
            }
            ClientEvent::WorkDone {
                run_id,
                output_id,
                output_data,
                debug_logs,
            } => {
                if let Some(slot) = s.runs.remove(&run_id) {
                    let _ = slot.result.send(Ok(WorkDone {
                        output_id,
                        output_data,
                        debug_logs,
                    }));
                }
                None
            }
            ClientEvent::Signal {
                run_id,
                signal_id,
                data,
            } => s
                .runs
                .get(&run_id)
                .map(|slot| (slot.events.clone(), RunEvent::Signal { signal_id, data })),
            ClientEvent::Error {
                run_id,
                error,
                step_fatal,
                server_fatal,
            } => {
                if run_id.is_empty() {
                    // About the plugin, not a run: runs in flight end when the plugin does.
                    tracing::warn!(server_fatal, "plugin reported an error: {error}");
                    s.plugin_error = Some(error);
                    None
                } else if step_fatal || server_fatal {
                    if let Some(slot) = s.runs.remove(&run_id) {
                        let (origin, exit, stderr_tail) = match stopped {
                            Some((exit, tail)) => {
                                (ErrorOrigin::Host, Some(exit.clone()), tail.clone())
                            }
                            None => (ErrorOrigin::Plugin, None, Vec::new()),
                        };
                        let _ = slot.result.send(Err(AtpRunError {
                            run_id,
                            error,
                            step_fatal,
                            server_fatal,
                            origin,
                            exit,
                            stderr_tail,
                        }));
                    }
                    None
                } else {
                    s.runs
                        .get(&run_id)
                        .map(|slot| (slot.events.clone(), RunEvent::Error { error }))
                }
            }
            // `ClientEvent` is non-exhaustive.
            _ => None,
        }
    };
    if let Some((tx, event)) = queued {
        // A closed queue means the caller no longer reads this run's events.
        let _ = tx.send(event).await;
    }
}
