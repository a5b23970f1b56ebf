//! Arcaflow ATP (versions 1 and 3), host side: send the start item, read hello, start runs
//! (several in flight under v3, results in any order), exchange signals, end with client done.
//!
//! ```text
//!  connect(session) ── start item `null` ──► plugin      ◄── hello ── Hello (v1 or v3)
//!  start(run, step, config) ── work start ──► plugin     ──► Run
//!  signal(run, id, data)    ── signal ──────► plugin
//!  Driver<machine::AtpClient>:
//!     a run is one streamed request (Driver::request_stream, keyed by run id):
//!       signal / non-fatal error ──► that Run's next_event()
//!       work done / fatal error  ──► that Run's result(), the stream's end
//!     the driver's handler: hello ──► connect; errors about the plugin ──► log
//!  plugin gone / bad frame ──► Stopped ──► machine fail_pending ──► the driver ends every Run
//!  done(grace): client done ──► close stdin ──► grace ──► (native: SIGTERM ──►) kill
//! ```
//!
//! Protocol-correct failure: when the sandbox stops the plugin (fuel, memory, deadline, a
//! crash) or the plugin breaks the framing or the protocol, every run in flight completes
//! with the ATP error `atp::stopped_error` makes, `{error, step_fatal: true, server_fatal:
//! true}` whose text is the reason and the plugin's last stderr lines ([`AtpRunError`]),
//! never a hang. A step's declared error output is not a failure: it is an ordinary
//! [`WorkDone`].
//!
//! What it does not do: validate configs or outputs against the schema, or time runs out
//! (use the policy's deadline, or drop the [`Run`] and call [`AtpClient::done`]).

use std::time::Duration;

use sandpipe_proto::atp::{self as machine, AtpError, ClientEvent};
pub use sandpipe_proto::atp::{Hello, Value, Version};
use tokio::sync::oneshot;

use crate::error::{Exit, Stopped};
use crate::run::session::{Session, SessionControl, TERM_GRACE};
use crate::speak::driver::{Completion, Driver, Refused, STREAM_QUEUE, Stream};
use crate::speak::protocols::hooks::{
    CallError, CallRequest, DESCRIBE_GRACE, DescribeError, Failure, Launch,
};

/// How many signals and non-fatal errors of one run may wait unread before the driver stops
/// reading the plugin's stdout (backpressure instead of unbounded memory). [`Run::result`]
/// reads past them, so a caller that only wants the result never blocks the driver.
pub const RUN_EVENT_QUEUE: usize = STREAM_QUEUE;

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
    /// Why the plugin will never finish the run, when the host made the error.
    pub stopped: Option<Stopped>,
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
    #[error("{}", .0.reason)]
    Stopped(Stopped),
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

type RunResult = Result<WorkDone, AtpRunError>;

/// An ATP connection to a plugin, after hello. Calls take `&self`: runs may be started and
/// signalled from several tasks, and their results come back in any order.
///
/// Dropping the client kills the plugin (as dropping a [`Session`] does); end it with
/// [`AtpClient::done`].
pub struct AtpClient {
    driver: Driver<machine::AtpClient>,
    version: Version,
}

impl std::fmt::Debug for AtpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtpClient")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// A run in flight. Read its signals with [`next_event`](Self::next_event) or
/// [`next_signal`](Self::next_signal), then its outcome with [`result`](Self::result).
#[derive(Debug)]
pub struct Run {
    run_id: String,
    stream: Stream<ClientEvent>,
    /// The outcome, once `next_event` read it.
    outcome: Option<RunResult>,
}

/// One item of a run's stream, in the client's terms.
enum Item {
    Event(RunEvent),
    Done(RunResult),
}

impl Run {
    /// The run id.
    pub fn id(&self) -> &str {
        &self.run_id
    }

    /// The next signal or non-fatal error of this run; `None` once the run has ended and
    /// everything it reported before was read.
    pub async fn next_event(&mut self) -> Option<RunEvent> {
        if self.outcome.is_some() {
            return None;
        }
        match self.next_item().await {
            Item::Event(event) => Some(event),
            Item::Done(outcome) => {
                self.outcome = Some(outcome);
                None
            }
        }
    }

    /// The next signal of this run as `(signal_id, data)`, skipping non-fatal errors (they are
    /// logged); `None` once the run has ended.
    pub async fn next_signal(&mut self) -> Option<(String, Value)> {
        loop {
            match self.next_event().await? {
                RunEvent::Signal { signal_id, data } => return Some((signal_id, data)),
                RunEvent::Error { error } => {
                    tracing::warn!(run_id = %self.run_id, "plugin reported a non-fatal error: {error}");
                }
            }
        }
    }

    /// Wait for the run's outcome: a declared output (error outputs included) or an
    /// [`AtpRunError`]. Unread signals are dropped.
    pub async fn result(mut self) -> RunResult {
        if let Some(outcome) = self.outcome.take() {
            return outcome;
        }
        loop {
            if let Item::Done(outcome) = self.next_item().await {
                return outcome;
            }
        }
    }

    /// The run's next item from the driver's stream.
    async fn next_item(&mut self) -> Item {
        loop {
            let (event, stopped) = match self.stream.next().await {
                Some(Ok(Completion { event, stopped })) => (event, stopped),
                // The machine did not know the run at the stop, or the driver was dropped.
                end => {
                    return Item::Done(Err(AtpRunError {
                        run_id: self.run_id.clone(),
                        error: "the atp driver ended without an outcome".into(),
                        step_fatal: true,
                        server_fatal: true,
                        origin: ErrorOrigin::Host,
                        stopped: end.and_then(Result::err),
                    }));
                }
            };
            return match event {
                ClientEvent::Signal {
                    signal_id, data, ..
                } => Item::Event(RunEvent::Signal { signal_id, data }),
                ClientEvent::WorkDone {
                    output_id,
                    output_data,
                    debug_logs,
                    ..
                } => Item::Done(Ok(WorkDone {
                    output_id,
                    output_data,
                    debug_logs,
                })),
                ClientEvent::Error {
                    run_id,
                    error,
                    step_fatal,
                    server_fatal,
                } if step_fatal || server_fatal => {
                    let origin = match stopped {
                        Some(_) => ErrorOrigin::Host,
                        None => ErrorOrigin::Plugin,
                    };
                    Item::Done(Err(AtpRunError {
                        run_id,
                        error,
                        step_fatal,
                        server_fatal,
                        origin,
                        stopped,
                    }))
                }
                ClientEvent::Error { error, .. } => Item::Event(RunEvent::Error { error }),
                // Nothing else belongs to a run (`ClientEvent` is non-exhaustive).
                _ => continue,
            };
        }
    }
}

impl AtpClient {
    /// Take over `session` (framing [`CborSeq`](sandpipe_proto::frame::Framing::CborSeq)):
    /// send the start item and wait for the plugin's hello, version 1 or 3. A plugin that
    /// never sends hello is stopped by its policy's deadline.
    pub async fn connect(session: Session) -> Result<(AtpClient, Hello), AtpFailure> {
        let (hello_tx, hello_rx) = oneshot::channel();
        let driver = Driver::new(session, machine::AtpClient::new(), handler(hello_tx));
        let mut client = AtpClient {
            driver,
            // Replaced below, once hello told.
            version: Version::V3,
        };
        match hello_rx.await {
            Ok(hello) => {
                client.version = hello.version;
                Ok((client, hello))
            }
            Err(_) => Err(client.failure()),
        }
    }

    /// The version the plugin speaks.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The session's control half (exit, kill, stderr tail).
    pub fn control(&self) -> &SessionControl {
        self.driver.control()
    }

    /// Run ids in flight, sorted.
    pub fn in_flight(&self) -> Vec<String> {
        self.driver
            .inspect(|m| m.in_flight().map(str::to_owned).collect())
    }

    /// Start a run of `step_id` with `config`. Under v3 several runs may be in flight (run ids
    /// must differ); under v1 there is one run per plugin.
    pub async fn start(
        &self,
        run_id: &str,
        step_id: &str,
        config: Value,
    ) -> Result<Run, AtpFailure> {
        // The machine refuses a run id already in flight, so a run's stream is its own.
        let stream = self
            .driver
            .request_stream(|m| m.start(run_id, step_id, config).map(|()| run_id.to_owned()))
            .map_err(|e| match e {
                Refused::Machine(e) => AtpFailure::Refused(e),
                Refused::Stopped(stopped) => AtpFailure::Stopped(stopped),
            })?;
        Ok(Run {
            run_id: run_id.to_owned(),
            stream,
            outcome: None,
        })
    }

    /// Send signal `signal_id` with `data` to a run in flight (v3 only).
    pub async fn signal(
        &self,
        run_id: &str,
        signal_id: &str,
        data: Value,
    ) -> Result<(), AtpFailure> {
        self.act(|m| m.signal(run_id, signal_id, data))
    }

    /// End the session, the way the engine sends SIGTERM to a plugin container: client done
    /// (v3), close stdin, give the plugin `grace` to exit; then a native plugin gets a real
    /// SIGTERM and up to [`TERM_GRACE`] (at most `grace`) more; then the plugin is killed.
    ///
    /// Runs still in flight may finish meanwhile (their [`Run`]s get the results); those that
    /// do not get an [`AtpRunError`] naming how the plugin ended.
    pub async fn done(self, grace: Duration) -> Exit {
        // Refused after a failure or after v1's output: nothing to tell the plugin.
        let _ = self.driver.act(machine::AtpClient::client_done);
        // The driver keeps reading stdout meanwhile, so the plugin never blocks on a full pipe.
        let exit = self.driver.shutdown(grace).await;
        // Every run learns its outcome before `done` returns: the driver hands the runs their
        // last events before its handler's task ends, once stdout closes, which the plugin's end
        // guarantees. A driver blocked on a full run queue (a caller holding a `Run` without
        // reading it) would block here, so stop waiting for it then: that caller reads its
        // run or drops it.
        let _ = tokio::time::timeout(TERM_GRACE, self.driver.finished()).await;
        exit
    }

    /// Act on the machine unless the plugin is gone.
    fn act(
        &self,
        f: impl FnOnce(&mut machine::AtpClient) -> Result<(), AtpError>,
    ) -> Result<(), AtpFailure> {
        if let Some(stopped) = self.driver.stopped() {
            return Err(AtpFailure::Stopped(stopped));
        }
        self.driver.act(f).map_err(AtpFailure::Refused)
    }

    fn failure(&self) -> AtpFailure {
        AtpFailure::Stopped(self.driver.stopped().unwrap_or_else(|| {
            Stopped::by_host("the atp driver ended", self.control().stderr_tail())
        }))
    }
}

/// The driver's handler: the events that belong to no run, until the plugin is gone. Hello to
/// `connect`, an error about the plugin itself to the log (runs in flight end when the plugin
/// does; the machine quotes the error in the stop's reason).
fn handler(hello: oneshot::Sender<Hello>) -> impl FnMut(Completion<ClientEvent>) + Send {
    let mut hello = Some(hello);
    move |Completion { event, .. }| match event {
        ClientEvent::Hello(h) => {
            if let Some(tx) = hello.take() {
                let _ = tx.send(h);
            }
        }
        ClientEvent::Error {
            error,
            server_fatal,
            ..
        } => tracing::warn!(server_fatal, "plugin reported an error: {error}"),
        // `ClientEvent` is non-exhaustive.
        _ => {}
    }
}

// `sandpipe call` and `inspect --protocol` (the hooks in this protocol's line of
// `protocols::PROTOCOLS`); `Value` here is CBOR's, JSON's is `serde_json::Value`.

/// `sandpipe call --protocol atp`: METHOD is the step id, PARAMS its config; the result is
/// `{"output_id", "output_data"}`.
pub(crate) async fn one_call(
    launch: Launch<'_>,
    request: CallRequest,
) -> Result<serde_json::Value, CallError> {
    let config =
        Value::serialized(&request.params.unwrap_or(serde_json::Value::Null)).map_err(|e| {
            CallError::failed(
                Failure::Host,
                [format!("converting PARAMS_JSON to CBOR: {e}")],
            )
        })?;
    let session = launch.start().await.map_err(CallError::Start)?;
    let (client, _hello) = AtpClient::connect(session)
        .await
        .map_err(|e| CallError::failed(Failure::Violation, [format!("atp error: {e}")]))?;
    // The error, and whose doing it is when that is clear by itself (else how the plugin
    // ended decides).
    let result = match client.start("run-1", &request.method, config).await {
        Ok(run) => run.result().await.map_err(|e| {
            let failure = match (e.origin, &e.stopped) {
                (ErrorOrigin::Plugin, _) => Some(Failure::Plugin),
                (_, Some(s)) if s.violation => Some(Failure::Violation),
                _ => None,
            };
            (e.to_string(), failure)
        }),
        Err(AtpFailure::Stopped(s)) if s.violation => {
            Err((s.reason.clone(), Some(Failure::Violation)))
        }
        Err(e) => Err((e.to_string(), None)),
    };
    let exit = client.done(request.grace).await;
    match result {
        Ok(done) => {
            let data = done
                .output_data
                .deserialized::<serde_json::Value>()
                .unwrap_or_else(|_| {
                    serde_json::Value::from(crate::run::cbor_note::render_value(&done.output_data))
                });
            Ok(serde_json::json!({"output_id": done.output_id, "output_data": data}))
        }
        Err((e, failure)) => Err(CallError::failed(
            failure.unwrap_or_else(|| Failure::ended(Some(exit), Failure::Plugin)),
            [format!("atp error: {e}")],
        )),
    }
}

/// `sandpipe inspect --protocol atp`: the hello's version and schema.
pub(crate) async fn describe(launch: Launch<'_>) -> Result<serde_json::Value, DescribeError> {
    let session = launch.start().await?;
    let (client, hello) = AtpClient::connect(session)
        .await
        .map_err(|e| DescribeError::Failed(e.to_string()))?;
    let _ = client.done(DESCRIBE_GRACE).await;
    let schema = hello
        .schema
        .deserialized::<serde_json::Value>()
        .unwrap_or(serde_json::Value::Null);
    Ok(serde_json::json!({"version": hello.version.number(), "schema": schema}))
}
