//! The one async driver: any protocol's client machine ([`ClientMachine`]) over a [`Session`].
//!
//! ```text
//!   caller ── request(|m| m.execute(..)) ──► machine ──► poll_transmit ──► writer task ──► stdin
//!   reader task: stdout ──► Session::recv ──► machine.handle_frame ──► poll_event
//!        ├─ an event completing a request ──► that request's Pending (or the end of its Stream)
//!        ├─ an event belonging to a streamed request ──► that request's Stream, in order
//!        └─ anything else (the plugin's requests, notifications, progress, hello) ──► next_event
//!   reader task: machine.poll_timeout due ──► machine.handle_timeout(now) ──► the same routing
//!   plugin gone / bad frame / fatal refusal ──► Stopped ──► machine.fail_pending ──► every Pending
//!                                                                            and every Stream
//! ```
//!
//! A request is answered by one event ([`Driver::request`]) or by a stream of them that the
//! completing event ends ([`Driver::request_stream`]: an ATP run's signals then its result).
//! Which is which is the machine's call ([`ClientMachine::completes`],
//! [`ClientMachine::belongs_to`]).
//!
//! Every protocol's typed client (`protocols/*`, `rpc::JsonRpcPeer`) is a thin layer on this:
//! it makes requests on its machine and turns completion events into typed results. The
//! protocol's rules (what completes what, what a failure answer looks like, timeouts) live in
//! the machine, in `sandpipe-proto`; what "the plugin stopped" means lives here, once.
//!
//! Frames go out through one writer task in the order the machine produced them, so neither
//! the reader (which may queue an acknowledgement) nor a caller ever waits on a plugin that is
//! itself waiting for its stdout to be read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sandpipe_proto::frame::FrameError;
use sandpipe_proto::machine::ClientMachine;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::error::{Exit, SessionError, Stopped};
use crate::session::{Session, SessionControl, SessionReader, SessionWriter};

/// How many events that complete no request (the plugin's own requests and notifications,
/// progress) may wait unread before the reader stops reading stdout: backpressure instead of
/// unbounded memory.
const EVENT_QUEUE: usize = 256;

/// How many events of one streamed request may wait unread before the reader stops reading
/// stdout (backpressure, as for the events nobody awaits).
pub const STREAM_QUEUE: usize = 256;

/// A request the machine refused to make.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused<E> {
    /// The machine refused it (wrong state for the protocol, parameters that do not encode).
    Machine(E),
    /// The plugin is gone; nothing more can be asked of it.
    Stopped(Stopped),
}

/// The event that completed a request, and the stop that made it, when the machine made it
/// because the plugin will never answer ([`ClientMachine::fail_pending`]).
#[derive(Debug)]
pub struct Completion<E> {
    /// The machine's event (for a stop, carrying the protocol's own error).
    pub event: E,
    /// Why the plugin will not answer, when that is what completed the request.
    pub stopped: Option<Stopped>,
}

/// Where a request's completion goes: its event, or the stop when the machine no longer knew
/// the request.
type Waiter<E> = oneshot::Sender<Result<Completion<E>, Stopped>>;

/// Where a streamed request's events go, the completing one last.
type StreamTx<E> = mpsc::Sender<Result<Completion<E>, Stopped>>;

/// Where the router sends an event once the lock is released (a send may wait on a full
/// queue).
enum Routed<E> {
    /// Completes no request and belongs to no stream: for `next_event`.
    Rest(Completion<E>),
    /// For a streamed request; the sender is dropped after the completing one.
    Stream(StreamTx<E>, Result<Completion<E>, Stopped>),
}

struct Shared<M: ClientMachine> {
    machine: M,
    waiters: HashMap<M::Key, Waiter<M::Event>>,
    streams: HashMap<M::Key, StreamTx<M::Event>>,
    stopped: Option<Stopped>,
    /// For events a local act makes; dropped at the stop, so `next_event` ends.
    events_tx: Option<mpsc::Sender<Completion<M::Event>>>,
}

enum Out {
    Frame(Vec<u8>),
    Close,
}

/// A running plugin driven through its protocol's client machine. Requests may be made from
/// several tasks at once (`&self`); completions are matched by the machine's keys.
pub struct Driver<M: ClientMachine> {
    shared: Arc<Mutex<Shared<M>>>,
    out: mpsc::UnboundedSender<Out>,
    control: SessionControl,
    events: tokio::sync::Mutex<mpsc::Receiver<Completion<M::Event>>>,
    /// Wakes the reader when a request may have brought the machine's next timeout forward.
    timer: Arc<Notify>,
}

impl<M: ClientMachine> std::fmt::Debug for Driver<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("stopped", &self.stopped())
            .finish_non_exhaustive()
    }
}

/// The time machines are given: tokio's clock, so a test with paused time drives a machine's
/// deadlines as it drives the driver's timer.
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// Sleep on tokio's clock until a machine's next timeout (a time from [`now`]); never, without
/// one.
pub(crate) async fn sleep_until(due: Option<std::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// A dropped driver never leaves a plugin running: its tasks hold the session's halves until
/// the plugin ends, so the drop kills it (as dropping a [`Session`] does). A client ends it
/// politely with [`Driver::shutdown`] first.
impl<M: ClientMachine> Drop for Driver<M> {
    fn drop(&mut self) {
        self.control.kill();
    }
}

fn lock<M: ClientMachine>(shared: &Mutex<Shared<M>>) -> MutexGuard<'_, Shared<M>> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Hand the machine's queued frames to the writer, in order (called with the lock held).
fn transmit<M: ClientMachine>(s: &mut Shared<M>, out: &mpsc::UnboundedSender<Out>) {
    while let Some(frame) = s.machine.poll_transmit() {
        // The writer is gone only once the plugin stopped reading: the reader reports it.
        let _ = out.send(Out::Frame(frame));
    }
}

/// Route the machine's events: a completion to its waiter; the rest returned in order, each
/// for its stream or for `next_event`. Each carries `stopped` when the stop made it.
fn route<M: ClientMachine>(s: &mut Shared<M>, stopped: Option<&Stopped>) -> Vec<Routed<M::Event>> {
    let mut rest = Vec::new();
    while let Some(event) = s.machine.poll_event() {
        let completion = Completion {
            event,
            stopped: stopped.cloned(),
        };
        if let Some(key) = M::completes(&completion.event) {
            if let Some(tx) = s.waiters.remove(key) {
                let _ = tx.send(Ok(completion));
                continue;
            }
            if let Some(tx) = s.streams.remove(key) {
                rest.push(Routed::Stream(tx, Ok(completion)));
                continue;
            }
        } else if let Some(tx) = M::belongs_to(&completion.event).and_then(|k| s.streams.get(k)) {
            rest.push(Routed::Stream(tx.clone(), Ok(completion)));
            continue;
        }
        rest.push(Routed::Rest(completion));
    }
    rest
}

/// Send routed events, in order, waiting while a queue is full. A closed queue (a caller no
/// longer reading) drops the event.
async fn deliver<E>(events: &mpsc::Sender<Completion<E>>, routed: Vec<Routed<E>>) {
    for r in routed {
        match r {
            Routed::Rest(c) => {
                let _ = events.send(c).await;
            }
            Routed::Stream(tx, item) => {
                let _ = tx.send(item).await;
            }
        }
    }
}

impl<M: ClientMachine> Driver<M> {
    /// Take over `session` with `machine`, and start reading the plugin's output. Frames the
    /// machine already queued (a protocol where the host speaks first) are sent at once.
    pub fn new(session: Session, machine: M) -> Self {
        let (writer, reader, control) = session.into_split();
        let (out, out_rx) = mpsc::unbounded_channel();
        let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
        let shared = Arc::new(Mutex::new(Shared {
            machine,
            waiters: HashMap::new(),
            streams: HashMap::new(),
            stopped: None,
            events_tx: Some(events_tx.clone()),
        }));
        transmit(&mut lock(&shared), &out);
        let timer = Arc::new(Notify::new());
        tokio::spawn(write_loop(writer, out_rx));
        tokio::spawn(read_loop(
            reader,
            control.clone(),
            shared.clone(),
            out.clone(),
            events_tx.clone(),
            timer.clone(),
        ));
        Driver {
            shared,
            out,
            control,
            events: tokio::sync::Mutex::new(events_rx),
            timer,
        }
    }

    /// Make a request on the machine (`make` returns its key) and send what it queued. Await
    /// the returned [`Pending`] for the event that completes it.
    pub fn request<E>(
        &self,
        make: impl FnOnce(&mut M) -> Result<M::Key, E>,
    ) -> Result<Pending<M::Event>, Refused<E>> {
        let (tx, rx) = oneshot::channel();
        {
            let mut s = lock(&self.shared);
            if let Some(stopped) = &s.stopped {
                return Err(Refused::Stopped(stopped.clone()));
            }
            let key = make(&mut s.machine).map_err(Refused::Machine)?;
            s.waiters.insert(key, tx);
            transmit(&mut s, &self.out);
        }
        self.timer.notify_one();
        Ok(Pending { rx })
    }

    /// Make a request answered by a stream of events (`make` returns its key) and send what
    /// it queued. The returned [`Stream`] yields the events that
    /// [belong to](ClientMachine::belongs_to) the request, in order, and last the one that
    /// [completes](ClientMachine::completes) it (at a stop, the protocol's error from
    /// [`ClientMachine::fail_pending`]).
    pub fn request_stream<E>(
        &self,
        make: impl FnOnce(&mut M) -> Result<M::Key, E>,
    ) -> Result<Stream<M::Event>, Refused<E>> {
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        {
            let mut s = lock(&self.shared);
            if let Some(stopped) = &s.stopped {
                return Err(Refused::Stopped(stopped.clone()));
            }
            let key = make(&mut s.machine).map_err(Refused::Machine)?;
            s.streams.insert(key, tx);
            transmit(&mut s, &self.out);
        }
        self.timer.notify_one();
        Ok(Stream { rx })
    }

    /// Act on the machine without waiting for an answer (a notification, an answer to the
    /// plugin's request, a shutdown notice, giving up a request) and send what it queued.
    /// A request the act completes (a cancel) gets its event.
    pub fn act<R>(&self, f: impl FnOnce(&mut M) -> R) -> R {
        let r = {
            let mut s = lock(&self.shared);
            let r = f(&mut s.machine);
            transmit(&mut s, &self.out);
            for routed in route(&mut s, None) {
                // An act makes completions, not news from the plugin; anything else is kept
                // for its stream or next_event unless the caller has let the queue fill.
                let queued = match routed {
                    Routed::Rest(event) => {
                        matches!(
                            s.events_tx.as_ref().map(|tx| tx.try_send(event)),
                            Some(Ok(()))
                        )
                    }
                    Routed::Stream(tx, item) => tx.try_send(item).is_ok(),
                };
                if !queued {
                    tracing::debug!("event queue full: an event made by a local act was dropped");
                }
            }
            r
        };
        self.timer.notify_one();
        r
    }

    /// Read the machine without acting (its state, a schema it learned).
    pub fn inspect<R>(&self, f: impl FnOnce(&M) -> R) -> R {
        f(&lock(&self.shared).machine)
    }

    /// The next event that completes no waiting request, in order, with the stop that made it
    /// when the machine made it at the stop ([`ClientMachine::fail_pending`] completing a
    /// request nobody awaits through [`Pending`]); `None` once the plugin is gone and every
    /// such event was read.
    pub async fn next_event(&self) -> Option<Completion<M::Event>> {
        self.events.lock().await.recv().await
    }

    /// Why the plugin will never answer again, once that is so.
    pub fn stopped(&self) -> Option<Stopped> {
        lock(&self.shared).stopped.clone()
    }

    /// The session's control half (exit, kill, signals, stderr tail).
    pub fn control(&self) -> &SessionControl {
        &self.control
    }

    /// Close the plugin's stdin after every frame already queued, then as
    /// [`Session::shutdown`]: `grace` to exit, SIGTERM (native), kill. The reader keeps
    /// draining stdout meanwhile.
    pub async fn shutdown(&self, grace: Duration) -> Exit {
        let _ = self.out.send(Out::Close);
        self.control.wait_or_stop(grace).await
    }
}

/// A request in flight whose answer is a stream of events.
pub struct Stream<E> {
    rx: mpsc::Receiver<Result<Completion<E>, Stopped>>,
}

impl<E> std::fmt::Debug for Stream<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").finish_non_exhaustive()
    }
}

impl<E> Stream<E> {
    /// The request's next event; the one that completes it comes last, then `None`. `Err`
    /// (then `None`) only for a request the machine no longer knew when the plugin stopped;
    /// `None` without a completion only when the driver was dropped.
    pub async fn next(&mut self) -> Option<Result<Completion<E>, Stopped>> {
        self.rx.recv().await
    }
}

/// A request in flight.
pub struct Pending<E> {
    rx: oneshot::Receiver<Result<Completion<E>, Stopped>>,
}

impl<E> std::fmt::Debug for Pending<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").finish_non_exhaustive()
    }
}

impl<E> Pending<E> {
    /// The event that completes the request. `Err` only for a request the machine no longer
    /// knew when the plugin stopped, or when the driver was dropped with it unanswered; a
    /// plugin that stops completes every request it knows with the protocol's error through
    /// [`ClientMachine::fail_pending`].
    pub async fn wait(self) -> Result<Completion<E>, Stopped> {
        self.rx
            .await
            .unwrap_or_else(|_| Err(Stopped::by_host("the session was dropped", Vec::new())))
    }
}

async fn write_loop(mut writer: SessionWriter, mut out: mpsc::UnboundedReceiver<Out>) {
    while let Some(item) = out.recv().await {
        match item {
            Out::Frame(frame) => {
                if let Err(e) = writer.send(&frame).await {
                    // The plugin stopped reading: the reader reports how it ended. Frames still
                    // queued are dropped; nothing waits on them but their requests, which the
                    // stop completes.
                    tracing::debug!("plugin stopped reading stdin: {e}");
                    if !matches!(e, SessionError::BadFrameToPlugin(_)) {
                        break;
                    }
                }
            }
            Out::Close => break,
        }
    }
    writer.close().await;
}

async fn read_loop<M: ClientMachine>(
    mut reader: SessionReader,
    control: SessionControl,
    shared: Arc<Mutex<Shared<M>>>,
    out: mpsc::UnboundedSender<Out>,
    events: mpsc::Sender<Completion<M::Event>>,
    timer: Arc<Notify>,
) {
    let stopped = loop {
        let sleep = sleep_until(lock(&shared).machine.poll_timeout());
        let frame = tokio::select! {
            r = reader.recv() => r,
            () = sleep => {
                let rest = {
                    let mut s = lock(&shared);
                    s.machine.handle_timeout(now());
                    transmit(&mut s, &out);
                    route(&mut s, None)
                };
                deliver(&events, rest).await;
                continue;
            }
            () = timer.notified() => continue,
        };
        match frame {
            Ok(Some(frame)) => {
                let (rest, refused) = {
                    let mut s = lock(&shared);
                    let refused = s.machine.handle_frame(&frame).err();
                    transmit(&mut s, &out);
                    (route(&mut s, None), refused)
                };
                deliver(&events, rest).await;
                if let Some(e) = refused.filter(M::is_fatal) {
                    control.kill();
                    let exit = control.wait().await;
                    break Stopped::violation(
                        format!("plugin broke the protocol: {e}"),
                        Some(exit),
                        control.stderr_tail(),
                    );
                }
            }
            // Stdout closed at a frame boundary, or inside a frame because the plugin ended:
            // the frame is the end's casualty, so report the end.
            Ok(None)
            | Err(SessionError::BadFrameFromPlugin {
                error: FrameError::Truncated { .. },
                ..
            }) => {
                let exit = control.wait().await;
                break Stopped::ended(exit, control.stderr_tail());
            }
            Err(e) => {
                // The plugin broke the framing (or its stdout failed): stop it.
                control.kill();
                let exit = control.wait().await;
                let reason = match e {
                    SessionError::BadFrameFromPlugin { error, .. } => {
                        format!("bad frame from plugin: {error}")
                    }
                    other => format!("reading plugin output: {other}"),
                };
                break Stopped::violation(reason, Some(exit), control.stderr_tail());
            }
        }
    };
    let rest = {
        let mut s = lock(&shared);
        let mut stopped = stopped;
        s.machine.explain(&mut stopped);
        s.machine.fail_pending(&stopped);
        let mut rest = route(&mut s, Some(&stopped));
        // Requests the machine did not complete (it does not know them any more) still end.
        for (_, tx) in s.waiters.drain() {
            let _ = tx.send(Err(stopped.clone()));
        }
        for (_, tx) in s.streams.drain() {
            rest.push(Routed::Stream(tx, Err(stopped.clone())));
        }
        s.stopped = Some(stopped);
        s.events_tx = None;
        rest
    };
    deliver(&events, rest).await;
    // Dropping `events` ends `next_event`; the writer ends with the last sender.
    drop(out);
}

#[cfg(test)]
mod tests {
    //! The driver and the protocol clients on it, against in-memory plugins
    //! ([`Session::memory`]): no plugin is built or started.

    use std::time::Duration;

    use sandpipe_proto::frame::Framing;
    use sandpipe_proto::jsonrpc::{Dialect, ErrorCode, INTERNAL_ERROR};
    use sandpipe_proto::oracle::Felt;
    use serde_json::{Value, json};

    use sandpipe_proto::atp::{AtpServer, ServerEvent, Value as AtpValue, Version};

    use crate::error::Exit;
    use crate::memory::MemoryPlugin;
    use crate::protocols::atp::{AtpClient, AtpFailure, ErrorOrigin, RunEvent};
    use crate::protocols::oracle::OracleClient;
    use crate::protocols::orchard::OrchardClient;
    use crate::rpc::{JsonRpcPeer, RpcError};
    use crate::session::{Session, SessionOptions};

    fn json_lines() -> SessionOptions {
        SessionOptions::framed(Framing::JsonLines)
    }

    fn request(frame: &[u8]) -> (Value, String) {
        let v: Value = serde_json::from_slice(frame).expect("json");
        (
            v["id"].clone(),
            v["method"].as_str().unwrap_or("").to_owned(),
        )
    }

    fn answer(id: &Value, result: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).expect("json")
    }

    /// An oracle that greets with `ready`, answers `sqrt` and crashes on `crash`.
    struct Oracle;

    impl MemoryPlugin for Oracle {
        fn start(&mut self) -> Vec<Vec<u8>> {
            vec![br#"{"jsonrpc":"2.0","id":0,"method":"ready","params":{}}"#.to_vec()]
        }
        fn handle(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, String> {
            let v: Value = serde_json::from_slice(frame).map_err(|e| e.to_string())?;
            match v["params"]["selector"].as_str() {
                Some("sqrt") => Ok(vec![answer(&v["id"], json!(["0x2"]))]),
                Some("crash") => Err("panicked at 'crash requested'".into()),
                // The ready ack, shutdown: nothing to say.
                _ => Ok(Vec::new()),
            }
        }
    }

    #[tokio::test]
    async fn an_oracle_answers_then_a_crash_fails_the_invoke_with_the_stop() {
        let session = Session::memory(Oracle, &json_lines());
        let mut client = OracleClient::connect(session).await.expect("ready");
        let got = client
            .invoke("sqrt", &[Felt::from(4)])
            .await
            .expect("answer");
        assert_eq!(got, vec![Felt::from(2)]);
        let err = client.invoke("crash", &[]).await.expect_err("crash");
        let stopped = err.stopped.clone().expect("a stop");
        assert_eq!(stopped.exit, Some(Exit::Exited(1)));
        assert_eq!(stopped.stderr_tail, vec!["panicked at 'crash requested'"]);
        assert!(!stopped.violation);
        assert_eq!(err.message, "oracle failed: plugin exited with code 1");
        // The session is over: the next invoke gets the same stop at once.
        let again = client.invoke("sqrt", &[]).await.expect_err("gone");
        assert_eq!(again.stopped, Some(stopped));
    }

    #[tokio::test]
    async fn a_dropped_client_kills_its_plugin() {
        let session = Session::memory(Oracle, &json_lines());
        let control = session.control().clone();
        let client = OracleClient::connect(session).await.expect("ready");
        drop(client);
        assert_eq!(control.wait().await, Exit::Killed { signal: None });
    }

    #[tokio::test]
    async fn concurrent_calls_are_matched_by_id_whatever_the_order() {
        let mut held: Option<Value> = None;
        // The first call is held until the second arrives; the second is answered first.
        let plugin = move |frame: &[u8]| {
            let (id, method) = request(frame);
            match (method.as_str(), held.take()) {
                ("first", _) => {
                    held = Some(id);
                    Vec::new()
                }
                (_, Some(first)) => vec![answer(&id, json!(2)), answer(&first, json!(1))],
                _ => vec![answer(&id, json!(0))],
            }
        };
        let rpc = JsonRpcPeer::new(Session::memory(plugin, &json_lines()), Dialect::JsonRpc2);
        let (a, b) = tokio::join!(rpc.call("first", None), async {
            tokio::task::yield_now().await;
            rpc.call("second", None).await
        });
        assert_eq!((a, b), (Ok(json!(1)), Ok(json!(2))));
        assert_eq!(rpc.shutdown(Duration::from_secs(1)).await, Exit::Exited(0));
    }

    #[tokio::test]
    async fn a_plugin_breaking_the_protocol_is_stopped_and_every_call_learns_why() {
        let plugin = |frame: &[u8]| {
            let (id, _) = request(frame);
            // An answer to a request never made: a protocol violation.
            vec![answer(&json!(99), json!(null)), answer(&id, json!(1))]
        };
        let rpc = JsonRpcPeer::new(Session::memory(plugin, &json_lines()), Dialect::JsonRpc2);
        let Err(RpcError::Failed { error, stopped }) = rpc.call("m", None).await else {
            panic!("expected the violation to fail the call");
        };
        assert!(stopped.violation, "{stopped:?}");
        assert_eq!(stopped.exit, Some(Exit::Killed { signal: None }));
        assert!(
            stopped.reason.starts_with("plugin broke the protocol"),
            "{}",
            stopped.reason
        );
        assert_eq!(error.code, ErrorCode::Int(INTERNAL_ERROR));
        assert_eq!(
            error.data.as_ref().map(|d| &d["reason"]),
            Some(&json!(stopped.reason))
        );
        assert!(matches!(
            rpc.call("m", None).await,
            Err(RpcError::Failed { .. })
        ));
    }

    #[tokio::test]
    async fn an_orchard_provider_missing_its_describe_deadline_is_refused_by_the_machine() {
        // A provider that never answers; the machine's describe deadline ends it.
        let plugin = |_: &[u8]| Vec::new();
        let session = Session::memory(plugin, &json_lines());
        let started = tokio::time::Instant::now();
        let err = OrchardClient::connect(session, Duration::from_millis(100))
            .await
            .expect_err("no describe");
        assert_eq!(err.code, "internal_error");
        assert_eq!(err.message, "describe got no answer within 100ms");
        assert!(started.elapsed() >= Duration::from_millis(100));
    }

    #[tokio::test]
    async fn an_orchard_execute_without_outputs_is_execute_failed_and_the_provider_runs_on() {
        let plugin = |frame: &[u8]| {
            let v: Value = serde_json::from_slice(frame).expect("json");
            let id = v["id"].clone();
            let result = match (v["method"].as_str(), v["params"]["action"].as_str()) {
                (Some("describe"), _) => {
                    json!({"schema": {"name": "p", "protocol": "1", "actions": {"a": {"description": "", "attributes": {}}}}})
                }
                (Some("execute"), Some("bare")) => json!({}),
                (Some("execute"), _) => json!({"outputs": {"ok": true}}),
                _ => json!({}),
            };
            vec![serde_json::to_vec(&json!({"id": id, "result": result})).expect("json")]
        };
        let client = OrchardClient::connect(
            Session::memory(plugin, &json_lines()),
            Duration::from_secs(5),
        )
        .await
        .expect("described");
        client.configure(json!({})).await.expect("configured");
        let err = client
            .execute("bare", json!({}))
            .await
            .expect_err("no outputs");
        assert_eq!(err.code, "execute_failed");
        assert!(
            !err.from_provider && err.stopped.is_none() && err.violation,
            "{err:?}"
        );
        let ok = client.execute("a", json!({})).await.expect("runs on");
        assert_eq!(ok, json!({"ok": true}));
    }

    /// An ATP plugin on the protocol's own server machine. Step `talk` signals `tick` 0, 1, 2
    /// and returns its config; a run of step `hold` waits for signals: `go` makes it say
    /// `ready` to every held run in start order, then finish each (last started first);
    /// `crash` crashes the plugin after a held run said `ready`.
    struct AtpPlugin {
        server: AtpServer,
        held: Vec<String>,
    }

    fn text(s: &str) -> AtpValue {
        AtpValue::Text(s.into())
    }

    impl AtpPlugin {
        fn new() -> Self {
            let steps = AtpValue::Map(vec![
                (text("talk"), AtpValue::Map(Vec::new())),
                (text("hold"), AtpValue::Map(Vec::new())),
            ]);
            AtpPlugin {
                server: AtpServer::new(Version::V3, AtpValue::Map(vec![(text("steps"), steps)])),
                held: Vec::new(),
            }
        }
    }

    impl MemoryPlugin for AtpPlugin {
        fn handle(&mut self, frame: &[u8]) -> Result<Vec<Vec<u8>>, String> {
            let s = &mut self.server;
            s.handle_frame(frame).map_err(|e| e.to_string())?;
            while let Some(event) = s.poll_event() {
                match event {
                    ServerEvent::WorkStart {
                        run_id,
                        step_id,
                        config,
                    } if step_id == "talk" => {
                        for i in 0..3 {
                            s.signal(&run_id, "tick", AtpValue::from(i))
                                .expect("signal");
                        }
                        s.work_done(&run_id, "success", config, "").expect("done");
                    }
                    ServerEvent::WorkStart { run_id, .. } => {
                        s.signal(&run_id, "ready", AtpValue::Null).expect("signal");
                        self.held.push(run_id);
                    }
                    ServerEvent::Signal { signal_id, .. } if signal_id == "crash" => {
                        return Err("panicked at 'crash requested'".into());
                    }
                    ServerEvent::Signal { .. } => {
                        for run in &self.held {
                            s.signal(run, "go", text(run)).expect("signal");
                        }
                        while let Some(run) = self.held.pop() {
                            s.work_done(&run, "success", text(&run), "").expect("done");
                        }
                    }
                    _ => {}
                }
            }
            Ok(std::iter::from_fn(|| s.poll_transmit()).collect())
        }
    }

    async fn atp() -> AtpClient {
        let session = Session::memory(AtpPlugin::new(), &SessionOptions::framed(Framing::CborSeq));
        AtpClient::connect(session).await.expect("hello").0
    }

    #[tokio::test(start_paused = true)]
    async fn a_streamed_request_yields_its_events_in_order_then_its_completion() {
        let client = atp().await;
        let mut run = client
            .start("r1", "talk", text("cfg"))
            .await
            .expect("start");
        for i in 0..3 {
            assert_eq!(
                run.next_event().await,
                Some(RunEvent::Signal {
                    signal_id: "tick".into(),
                    data: AtpValue::from(i)
                })
            );
        }
        assert_eq!(run.next_event().await, None);
        let done = run.result().await.expect("output");
        assert_eq!(
            (done.output_id.as_str(), done.output_data),
            ("success", text("cfg"))
        );
        assert!(client.in_flight().is_empty());
        assert_eq!(client.done(Duration::from_secs(1)).await, Exit::Exited(0));
    }

    #[tokio::test(start_paused = true)]
    async fn two_concurrent_streams_each_get_their_own_events() {
        let client = atp().await;
        let mut a = client.start("a", "hold", AtpValue::Null).await.expect("a");
        let mut b = client.start("b", "hold", AtpValue::Null).await.expect("b");
        for run in [&mut a, &mut b] {
            assert_eq!(
                run.next_signal().await,
                Some(("ready".into(), AtpValue::Null))
            );
        }
        // One signal to b makes the plugin interleave both runs' events; b finishes first.
        client.signal("b", "go", AtpValue::Null).await.expect("go");
        let b_result = b.result().await.expect("b done");
        assert_eq!(a.next_signal().await, Some(("go".into(), text("a"))));
        assert_eq!(a.next_signal().await, None);
        assert_eq!(b_result.output_data, text("b"));
        assert_eq!(a.result().await.expect("a done").output_data, text("a"));
        assert_eq!(client.done(Duration::from_secs(1)).await, Exit::Exited(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_mid_stream_ends_it_with_the_protocols_stopped_error() {
        let client = atp().await;
        let mut run = client.start("x", "hold", AtpValue::Null).await.expect("x");
        assert_eq!(
            run.next_signal().await,
            Some(("ready".into(), AtpValue::Null))
        );
        client
            .signal("x", "crash", AtpValue::Null)
            .await
            .expect("sent");
        assert_eq!(run.next_event().await, None);
        let err = run.result().await.expect_err("stopped");
        let stopped = err.stopped.clone().expect("the stop");
        assert_eq!(stopped.exit, Some(Exit::Exited(1)));
        assert_eq!(stopped.stderr_tail, vec!["panicked at 'crash requested'"]);
        assert_eq!(err.origin, ErrorOrigin::Host);
        assert!(err.step_fatal && err.server_fatal, "{err:?}");
        assert!(err.error.starts_with(&stopped.reason), "{}", err.error);
        // The driver refuses new streams with the same stop.
        let again = client
            .start("y", "talk", AtpValue::Null)
            .await
            .expect_err("gone");
        assert_eq!(again, AtpFailure::Stopped(stopped));
    }
}
