//! The one async driver: any protocol's client machine ([`ClientMachine`]) over a [`Session`].
//!
//! ```text
//!   caller ── request(|m| m.execute(..)) ──► machine ──► poll_transmit ──► writer task ──► stdin
//!   reader task: stdout ──► Session::recv ──► machine.handle_frame ──► poll_event
//!        ├─ an event completing a request ──► that request's Pending (or the end of its Stream)
//!        ├─ an event belonging to a streamed request ──► that request's Stream, in order
//!        └─ anything else ──► the driver's one handler, in order, in its own task:
//!             the plugin's request (Serves::take_request) ──► PluginRequests::request
//!                 ──► machine.answer ──► writer task                       (Driver::serving)
//!             (without one serving: machine.refuse_request, -32601, in the reader)
//!             a notification, a hello, unclaimed progress ──► Handler / PluginRequests::notice
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
//! Everything else goes to one handler, given when the driver is made ([`Driver::new`] with a
//! [`Handler`], [`Driver::serving`] with a [`PluginRequests`]), so an event nobody asked for
//! can never fill a queue nobody reads. For a protocol whose plugin makes requests of the host
//! ([`Serves`]: FineCode, MCP, bare JSON-RPC), the handler answers them, one at a time, in
//! arrival order; without one serving, the machine answers each as not served. Every request
//! of the plugin's gets an answer: a handler that panics gets the protocol's internal error
//! sent for it and for every later request.
//!
//! Backpressure: at most [`EVENT_QUEUE`] events wait for the handler; beyond that the reader
//! stops reading the plugin until the handler takes one (its memory stays bounded). Meanwhile
//! no answer or stream event is read either, so a handler that awaits the plugin's answer to a
//! request of its own, while the plugin sends that many events or a second request of its own
//! first, waits until the plugin ends. The plugin's end always gets through: the reader stops
//! waiting for the handler then, and every request in flight gets the stop.
//!
//! Every protocol's typed client (`protocols/*`, `protocols::jsonrpc::JsonRpcPeer`) is a thin layer on this:
//! it makes requests on its machine and turns completion events into typed results. The
//! protocol's rules (what completes what, what a failure answer looks like, timeouts) live in
//! the machine, in `sandpipe-proto`; what "the plugin stopped" means lives here, once.
//!
//! Frames go out through one writer task in the order the machine produced them, so neither
//! the reader (which may queue an acknowledgement) nor a caller ever waits on a plugin that is
//! itself waiting for its stdout to be read.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sandpipe_proto::frame::FrameError;
use sandpipe_proto::machine::{ClientMachine, Serves};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::AbortHandle;

use crate::error::{Exit, SessionError, Stopped};
use crate::run::session::{Session, SessionControl, SessionReader, SessionWriter};

/// How many events that complete no request (the plugin's own requests and notifications,
/// progress no request claims) may wait for the handler before the reader stops reading
/// stdout: backpressure instead of unbounded memory.
pub const EVENT_QUEUE: usize = 256;

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
    /// Completes no request and belongs to no stream: for the handler.
    Rest(Completion<E>),
    /// For a streamed request; the sender is dropped after the completing one.
    Stream(StreamTx<E>, Result<Completion<E>, Stopped>),
}

struct Shared<M: ClientMachine> {
    machine: M,
    waiters: HashMap<M::Key, Waiter<M::Event>>,
    streams: HashMap<M::Key, StreamTx<M::Event>>,
    stopped: Option<Stopped>,
    /// Whether a [`PluginRequests`] serves the plugin's requests; without one the machine
    /// refuses them ([`ClientMachine::refuse_request`]), so each still gets an answer.
    serving: bool,
    /// For events a local act makes; dropped at the stop, so the handler's task ends.
    events_tx: Option<mpsc::Sender<Completion<M::Event>>>,
}

/// The one handler on a [`Driver::new`]: it hears every event that completes no request of
/// the host's and belongs to no stream (a notification, a handshake, progress no request
/// claims), in order, in a task of the driver's own. A closure
/// `FnMut(Completion<M::Event>)` is one; [`Unasked`] logs each at debug level.
pub trait Handler<M: ClientMachine>: Send + 'static {
    /// Hear `event`. It runs in the handler's task: keep it short (hand work elsewhere);
    /// meanwhile later events wait, up to [`EVENT_QUEUE`] of them. A panic is logged, and
    /// every later event is dropped (logged at debug level).
    fn notice(&mut self, event: Completion<M::Event>);
}

impl<M: ClientMachine, F> Handler<M> for F
where
    F: FnMut(Completion<M::Event>) + Send + 'static,
{
    fn notice(&mut self, event: Completion<M::Event>) {
        self(event);
    }
}

/// The handler of a client that expects nothing it has not asked for: each such event is
/// logged at debug level and dropped. As [`PluginRequests`], it serves none of the plugin's
/// requests ([`Serves::not_served`]: JSON-RPC's `-32601`), as [`Driver::new`] does.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unasked;

impl<M: ClientMachine> Handler<M> for Unasked {
    fn notice(&mut self, event: Completion<M::Event>) {
        tracing::debug!(event = ?event.event, "plugin event nobody asked for");
    }
}

impl<M: Serves> PluginRequests<M> for Unasked {
    fn request(&mut self, _: M::Request) -> impl Future<Output = Option<M::Answer>> + Send {
        std::future::ready(None)
    }
}

/// The one handler on a [`Driver::serving`]: it answers the plugin's own requests
/// ([`Serves`]) and hears the rest as a [`Handler`] does. Requests are served one at a time,
/// in arrival order, in the driver's handler task, each in a task of its own (aborted with the
/// driver); later events wait meanwhile, up to [`EVENT_QUEUE`] (see the module docs for what
/// that means for a handler that awaits the plugin). A request that was still waiting when the
/// plugin ended is not served. A handler that calls back on its own client holds it weakly
/// (`std::sync::Weak`): a strong reference would keep the driver, and so the plugin, alive.
pub trait PluginRequests<M: Serves>: Send + 'static {
    /// The answer to `request`, or `None` for a request the host does not serve (the
    /// machine's [`Serves::not_served`] answer goes back). A panic sends the machine's
    /// [`Serves::failed`] answer, for this request and every later one (the panic itself is
    /// logged, not sent to the plugin).
    fn request(&mut self, request: M::Request) -> impl Future<Output = Option<M::Answer>> + Send;

    /// Hear an event that is no request, as [`Handler::notice`] (a panic here ends the
    /// handler too). Default: logged at debug level.
    fn notice(&mut self, event: Completion<M::Event>) {
        tracing::debug!(event = ?event.event, "plugin event nobody asked for");
    }
}

/// What the driver and its handler task act on the machine through.
struct Link<M: ClientMachine> {
    shared: Arc<Mutex<Shared<M>>>,
    out: mpsc::UnboundedSender<Out>,
    /// Wakes the reader when an act may have brought the machine's next timeout forward.
    timer: Arc<Notify>,
}

impl<M: ClientMachine> Clone for Link<M> {
    fn clone(&self) -> Self {
        Link {
            shared: self.shared.clone(),
            out: self.out.clone(),
            timer: self.timer.clone(),
        }
    }
}

impl<M: ClientMachine> Link<M> {
    /// See [`Driver::act`].
    fn act<R>(&self, f: impl FnOnce(&mut M) -> R) -> R {
        let r = {
            let mut s = lock(&self.shared);
            let r = f(&mut s.machine);
            let routed = route(&mut s, None);
            transmit(&mut s, &self.out);
            for routed in routed {
                // An act makes completions, not news from the plugin; anything else is kept
                // for its stream or the handler unless the queue is full.
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
}

enum Out {
    Frame(Vec<u8>),
    Close,
}

/// A running plugin driven through its protocol's client machine. Requests may be made from
/// several tasks at once (`&self`); completions are matched by the machine's keys.
pub struct Driver<M: ClientMachine> {
    link: Link<M>,
    control: SessionControl,
    /// The handler's task, aborted with the driver (a handler awaiting forever), and with it
    /// the task of a request being served.
    handler: AbortHandle,
    /// True once the handler's task ended: the plugin is gone and every event was handed on.
    finished: watch::Receiver<bool>,
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
        self.handler.abort();
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
/// for its stream or for the handler. Each carries `stopped` when the stop made it.
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
        let completion = if s.serving {
            completion
        } else {
            let Completion { event, stopped } = completion;
            match s.machine.refuse_request(event) {
                Some(event) => Completion { event, stopped },
                None => continue,
            }
        };
        rest.push(Routed::Rest(completion));
    }
    rest
}

/// Send routed events, in order, waiting while a queue is full: the backpressure that stops
/// the reader reading a plugin whose events are not taken. A stream's caller holds its own
/// queue, so its events are always waited for. The handler's queue is waited for only while
/// the plugin runs: once it has ended (a kill, a crash, its deadline) an event that does not
/// fit is dropped, so the reader always goes on to the stop and every request in flight
/// learns it. A closed queue (nobody reading) drops the event.
async fn deliver<E: std::fmt::Debug>(
    events: &mpsc::Sender<Completion<E>>,
    routed: Vec<Routed<E>>,
    control: &SessionControl,
) {
    for r in routed {
        match r {
            Routed::Rest(c) => {
                let permit = tokio::select! {
                    biased;
                    permit = events.reserve() => permit.ok(),
                    _ = control.ended() => events.try_reserve().ok(),
                };
                match permit {
                    Some(permit) => permit.send(c),
                    None => tracing::debug!(
                        event = ?c.event,
                        "the plugin ended with the handler's queue full: event dropped"
                    ),
                }
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
    /// Every event that completes no request and belongs to no stream goes to `handler`.
    /// The plugin's requests, for a machine that has them ([`Serves`]), are answered as not
    /// served; [`Driver::serving`] serves them.
    pub fn new(session: Session, machine: M, handler: impl Handler<M>) -> Self {
        Self::launch(session, machine, false, |mut events, _| async move {
            let mut handler = Some(handler);
            while let Some(event) = events.recv().await {
                hear(&mut handler, event, |h, e| h.notice(e));
            }
        })
    }

    /// Start the reader and writer, and the handler's task made by `handle` from the queue
    /// of events for it and the link to act on the machine with.
    fn launch<F>(
        session: Session,
        machine: M,
        serving: bool,
        handle: impl FnOnce(mpsc::Receiver<Completion<M::Event>>, Link<M>) -> F,
    ) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (writer, reader, control) = session.into_split();
        let (out, out_rx) = mpsc::unbounded_channel();
        let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
        let shared = Arc::new(Mutex::new(Shared {
            machine,
            waiters: HashMap::new(),
            streams: HashMap::new(),
            stopped: None,
            serving,
            events_tx: Some(events_tx.clone()),
        }));
        transmit(&mut lock(&shared), &out);
        let link = Link {
            shared,
            out,
            timer: Arc::new(Notify::new()),
        };
        tokio::spawn(write_loop(writer, out_rx));
        tokio::spawn(read_loop(reader, control.clone(), link.clone(), events_tx));
        let (done, finished) = watch::channel(false);
        let task = handle(events_rx, link.clone());
        let handler = tokio::spawn(async move {
            task.await;
            let _ = done.send(true);
        })
        .abort_handle();
        Driver {
            link,
            control,
            handler,
            finished,
        }
    }

    /// Make a request on the machine (`make` returns its key) and send what it queued. Await
    /// the returned [`Pending`] for the event that completes it.
    pub fn request<E>(
        &self,
        make: impl FnOnce(&mut M) -> Result<M::Key, E>,
    ) -> Result<Pending<M::Event>, Refused<E>> {
        let (tx, rx) = oneshot::channel();
        self.register(make, |s, key| s.waiters.insert(key, tx))?;
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
        self.register(make, |s, key| s.streams.insert(key, tx))?;
        Ok(Stream { rx })
    }

    /// Make a request on the machine unless the plugin is gone, `keep` where its completion
    /// goes under its key, and send what the machine queued.
    fn register<E, R>(
        &self,
        make: impl FnOnce(&mut M) -> Result<M::Key, E>,
        keep: impl FnOnce(&mut Shared<M>, M::Key) -> R,
    ) -> Result<(), Refused<E>> {
        {
            let mut s = lock(&self.link.shared);
            if let Some(stopped) = &s.stopped {
                return Err(Refused::Stopped(stopped.clone()));
            }
            let key = make(&mut s.machine).map_err(Refused::Machine)?;
            keep(&mut s, key);
            transmit(&mut s, &self.link.out);
        }
        self.link.timer.notify_one();
        Ok(())
    }

    /// Act on the machine without waiting for an answer (a notification, an answer to the
    /// plugin's request, a shutdown notice, giving up a request) and send what it queued.
    /// A request the act completes (a cancel) gets its event.
    pub fn act<R>(&self, f: impl FnOnce(&mut M) -> R) -> R {
        self.link.act(f)
    }

    /// Read the machine without acting (its state, a schema it learned).
    pub fn inspect<R>(&self, f: impl FnOnce(&M) -> R) -> R {
        f(&lock(&self.link.shared).machine)
    }

    /// Wait until the plugin is gone and the handler has had every event: by then every
    /// [`Pending`] and [`Stream`] has had its last event too (ATP's `done` waits for this).
    pub async fn finished(&self) {
        let _ = self.finished.clone().wait_for(|done| *done).await;
    }

    /// Why the plugin will never answer again, once that is so.
    pub fn stopped(&self) -> Option<Stopped> {
        lock(&self.link.shared).stopped.clone()
    }

    /// The session's control half (exit, kill, signals, stderr tail).
    pub fn control(&self) -> &SessionControl {
        &self.control
    }

    /// Close the plugin's stdin after every frame already queued, then as
    /// [`Session::shutdown`]: `grace` to exit, SIGTERM (native), kill. The reader keeps
    /// draining stdout meanwhile.
    pub async fn shutdown(&self, grace: Duration) -> Exit {
        let _ = self.link.out.send(Out::Close);
        self.control.wait_or_stop(grace).await
    }
}

impl<M: Serves> Driver<M> {
    /// [`Driver::new`] for a protocol whose plugin makes requests of the host: `handler`
    /// answers them (see [`PluginRequests`]) and hears every other event nobody asked for.
    pub fn serving(session: Session, machine: M, handler: impl PluginRequests<M>) -> Self {
        Self::launch(session, machine, true, |events, link| {
            serve(events, link, handler)
        })
    }
}

/// The serving driver's handler task: each of the plugin's requests to the handler, in order,
/// its answer back through the machine; every other event to the handler's `notice`.
async fn serve<M: Serves, H: PluginRequests<M>>(
    mut events: mpsc::Receiver<Completion<M::Event>>,
    link: Link<M>,
    handler: H,
) {
    // `None` once the handler panicked.
    let mut handler = Some(handler);
    while let Some(Completion { event, stopped }) = events.recv().await {
        let (id, request) = match M::take_request(event) {
            Ok(request) => request,
            Err(event) => {
                hear(&mut handler, Completion { event, stopped }, |h, e| {
                    h.notice(e)
                });
                continue;
            }
        };
        let method = M::method(&request).to_owned();
        if lock(&link.shared).stopped.is_some() {
            tracing::debug!(%method, "the plugin ended before its request was served");
            continue;
        }
        let answer = match handler.take() {
            Some(mut h) => {
                // A task of its own, so a panic is a JoinError here, not the end of serving;
                // aborted with this one (the driver dropped).
                let task = tokio::spawn(async move {
                    let answer = h.request(request).await;
                    (h, answer)
                });
                let _abort = AbortOnDrop(task.abort_handle());
                match task.await {
                    Ok((h, answer)) => {
                        handler = Some(h);
                        Answer::Given(answer)
                    }
                    Err(e) => {
                        tracing::error!(%method, "the handler of the plugin's requests failed: {e}");
                        Answer::Failed(format!("the host's handler failed on {method}"))
                    }
                }
            }
            None => Answer::Failed(format!(
                "the host's handler failed earlier; {method} not served"
            )),
        };
        let answered = link.act(|m| {
            let answer = match answer {
                Answer::Given(Some(answer)) => answer,
                Answer::Given(None) => m.not_served(&method),
                Answer::Failed(reason) => m.failed(reason),
            };
            m.answer(id, answer)
        });
        if let Err(e) = answered {
            // The plugin stopped meanwhile, or the machine no longer takes answers.
            tracing::debug!(%method, "answering the plugin's request: {e}");
        }
    }
}

/// Give `event` to the handler unless an earlier one panicked; a panic is logged and ends
/// the handler (later events are dropped, and a serving driver's later requests get the
/// machine's `failed` answer).
fn hear<H, E: std::fmt::Debug>(
    handler: &mut Option<H>,
    event: Completion<E>,
    f: impl FnOnce(&mut H, Completion<E>),
) {
    let Some(h) = handler else {
        tracing::debug!(event = ?event.event, "the handler failed earlier: event dropped");
        return;
    };
    let heard = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(h, event)));
    if heard.is_err() {
        tracing::error!("the driver's handler panicked on an event; later events are dropped");
        *handler = None;
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What goes back for one of the plugin's requests.
enum Answer<A> {
    Given(Option<A>),
    Failed(String),
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
    link: Link<M>,
    events: mpsc::Sender<Completion<M::Event>>,
) {
    let Link { shared, out, timer } = link;
    let stopped = loop {
        let sleep = sleep_until(lock(&shared).machine.poll_timeout());
        let frame = tokio::select! {
            r = reader.recv() => r,
            () = sleep => {
                let rest = {
                    let mut s = lock(&shared);
                    s.machine.handle_timeout(now());
                    let rest = route(&mut s, None);
                    transmit(&mut s, &out);
                    rest
                };
                deliver(&events, rest, &control).await;
                continue;
            }
            () = timer.notified() => continue,
        };
        match frame {
            Ok(Some(frame)) => {
                let (rest, refused) = {
                    let mut s = lock(&shared);
                    let refused = s.machine.handle_frame(&frame).err();
                    // Routing may answer the plugin (a request nobody serves): then send.
                    let rest = route(&mut s, None);
                    transmit(&mut s, &out);
                    (rest, refused)
                };
                deliver(&events, rest, &control).await;
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
    deliver(&events, rest, &control).await;
    // Dropping `events` ends the handler's task; the writer ends with the last sender.
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

    use std::sync::{Arc, Mutex};

    use sandpipe_proto::jsonrpc::{self, ErrorObject, Peer};

    use super::{Completion, Driver, PluginRequests, Unasked};
    use crate::error::Exit;
    use crate::run::memory_plugin::MemoryPlugin;
    use crate::run::session::{Session, SessionOptions};
    use crate::speak::protocols::atp::{AtpClient, AtpFailure, ErrorOrigin, RunEvent};
    use crate::speak::protocols::jsonrpc::{JsonRpcPeer, RpcError};
    use crate::speak::protocols::oracle::OracleClient;
    use crate::speak::protocols::orchard::OrchardClient;

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
        let rpc = JsonRpcPeer::new(
            Session::memory(plugin, &json_lines()),
            Dialect::JsonRpc2,
            Unasked,
        );
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
        let rpc = JsonRpcPeer::new(
            Session::memory(plugin, &json_lines()),
            Dialect::JsonRpc2,
            Unasked,
        );
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

    /// A plugin that asks the host things while the host's own call waits. On the host's
    /// `go` it sends its requests `asks` (each `{"id": 100 + i, "method", "params"}`), answers
    /// `ping` at once, and answers `go` with every answer it got, in the order they came,
    /// once it has them all.
    fn asking_plugin(asks: Vec<(&'static str, Value)>) -> impl MemoryPlugin {
        let mut go: Option<Value> = None;
        let mut answers = Vec::new();
        move |frame: &[u8]| {
            let v: Value = serde_json::from_slice(frame).expect("json");
            if v.get("method").is_none() {
                // An answer to one of our requests.
                answers.push(v);
                if answers.len() < asks.len() {
                    return Vec::new();
                }
                let id = go.take().expect("go came first");
                return vec![answer(&id, Value::Array(std::mem::take(&mut answers)))];
            }
            let (id, method) = request(frame);
            match method.as_str() {
                "go" => {
                    go = Some(id);
                    asks.iter()
                        .enumerate()
                        .map(|(i, (method, params))| {
                            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 100 + i,
                                "method": method, "params": params}))
                            .expect("json")
                        })
                        .collect()
                }
                _ => vec![answer(&id, json!("pong"))],
            }
        }
    }

    /// Serves `times`: params × 10 after `params` seconds (tokio's clock); panics on `boom`;
    /// never answers `hang` (and says when that wait is dropped); serves nothing else.
    /// Records what it was asked, in order.
    #[derive(Clone, Default)]
    struct Times(Arc<Mutex<Vec<String>>>);

    /// Sets its flag when dropped.
    struct Dropped(Arc<std::sync::atomic::AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    impl PluginRequests<Peer> for Times {
        async fn request(&mut self, r: jsonrpc::Request) -> Option<Result<Value, ErrorObject>> {
            self.0
                .lock()
                .expect("log")
                .push(format!("{} {:?}", r.method, r.params));
            match r.method.as_str() {
                "times" => {
                    let n = r.params.and_then(|p| p.as_i64()).expect("a number");
                    tokio::time::sleep(Duration::from_secs(n.unsigned_abs())).await;
                    Some(Ok(json!(n * 10)))
                }
                "boom" => panic!("the handler broke on boom"),
                "hang" => {
                    let _flag = Dropped(HANG_DROPPED.with(|f| f.clone()));
                    std::future::pending().await
                }
                _ => None,
            }
        }
    }

    thread_local! {
        /// Set when a `hang` request's wait is dropped (tests run on one thread each).
        static HANG_DROPPED: Arc<std::sync::atomic::AtomicBool> = Arc::default();
    }

    /// `fut`, or a failure instead of a hang (tokio's paused clock jumps to the limit when
    /// nothing else can run).
    async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(3600), fut)
            .await
            .expect("no hang")
    }

    #[tokio::test(start_paused = true)]
    async fn the_plugins_requests_go_to_the_one_handler_in_order_and_its_answers_go_back() {
        let times = Times::default();
        let plugin = asking_plugin(vec![
            ("times", json!(2)),
            ("times", json!(1)),
            ("sampling/createMessage", json!({})),
        ]);
        let rpc = JsonRpcPeer::new(
            Session::memory(plugin, &json_lines()),
            Dialect::JsonRpc2,
            times.clone(),
        );
        let got = within(rpc.call("go", None)).await.expect("answered");
        // One at a time, in arrival order: the slower first answer still comes first.
        assert_eq!(got[0], json!({"jsonrpc": "2.0", "id": 100, "result": 20}));
        assert_eq!(got[1], json!({"jsonrpc": "2.0", "id": 101, "result": 10}));
        assert_eq!(got[2]["id"], json!(102));
        assert_eq!(got[2]["error"]["code"], json!(-32601));
        assert_eq!(
            got[2]["error"]["message"],
            json!("the host does not serve sampling/createMessage")
        );
        assert_eq!(
            *times.0.lock().expect("log"),
            [
                "times Some(Number(2))",
                "times Some(Number(1))",
                "sampling/createMessage Some(Object {})"
            ]
        );
        assert_eq!(rpc.shutdown(Duration::from_secs(1)).await, Exit::Exited(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_handler_holds_back_no_answer_to_the_hosts_own_calls() {
        let plugin = asking_plugin(vec![("times", json!(60))]);
        let rpc = JsonRpcPeer::new(
            Session::memory(plugin, &json_lines()),
            Dialect::JsonRpc2,
            Times::default(),
        );
        let started = tokio::time::Instant::now();
        let go = rpc.start_call("go", None).expect("sent");
        // The handler sleeps 60 s on `times`; `ping` is answered meanwhile.
        assert_eq!(rpc.call("ping", None).await, Ok(json!("pong")));
        assert!(started.elapsed() < Duration::from_secs(60));
        let got = within(go).await.expect("answered");
        assert_eq!(got[0]["result"], json!(600));
        assert!(started.elapsed() >= Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_handler_gets_the_internal_error_sent_for_it_and_for_every_later_request() {
        let plugin = asking_plugin(vec![("boom", Value::Null), ("times", json!(1))]);
        let rpc = JsonRpcPeer::new(
            Session::memory(plugin, &json_lines()),
            Dialect::JsonRpc2,
            Times::default(),
        );
        let got = within(rpc.call("go", None)).await.expect("answered");
        // The panic is logged, not sent to the plugin.
        assert_eq!(
            got[0]["error"],
            json!({"code": -32603, "message": "the host's handler failed on boom"})
        );
        assert_eq!(
            got[1]["error"],
            json!({"code": -32603, "message": "the host's handler failed earlier; times not served"})
        );
        // The session is unharmed.
        assert_eq!(rpc.call("ping", None).await, Ok(json!("pong")));
    }

    #[tokio::test(start_paused = true)]
    async fn events_nobody_asked_for_never_stop_the_reader() {
        // Far more notifications than the handler's queue holds, before the answer.
        let plugin = |frame: &[u8]| {
            let (id, _) = request(frame);
            let mut out: Vec<Vec<u8>> = (0..4 * super::EVENT_QUEUE)
                .map(|i| {
                    serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "log", "params": i}))
                        .expect("json")
                })
                .collect();
            out.push(answer(&id, json!("done")));
            out
        };
        let rpc = JsonRpcPeer::new(
            Session::memory(plugin, &json_lines()),
            Dialect::JsonRpc2,
            Unasked,
        );
        assert_eq!(within(rpc.call("m", None)).await, Ok(json!("done")));
    }

    #[tokio::test(start_paused = true)]
    async fn the_plugins_end_gets_through_a_full_handler_queue_and_the_dropped_driver_ends_the_handler()
     {
        // The handler hangs on the plugin's `hang`; the plugin then sends more notifications
        // than the queue holds, so the reader waits for the handler, which never comes.
        let plugin = |frame: &[u8]| {
            let (_, method) = request(frame);
            assert_eq!(method, "go");
            let mut out = vec![
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 100, "method": "hang"}))
                    .expect("json"),
            ];
            out.extend((0..4 * super::EVENT_QUEUE).map(|i| {
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "log", "params": i}))
                    .expect("json")
            }));
            out
        };
        let rpc = JsonRpcPeer::new(
            Session::memory(plugin, &json_lines()),
            Dialect::JsonRpc2,
            Times::default(),
        );
        let go = rpc.start_call("go", None).expect("sent");
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Its policy ends the plugin: the call in flight learns it.
        rpc.control().kill();
        let Err(RpcError::Failed { stopped, .. }) = within(go).await else {
            panic!("expected the kill to fail the call");
        };
        assert_eq!(stopped.exit, Some(Exit::Killed { signal: None }));
        // The handler still waits on `hang`; dropping the driver ends that wait.
        assert!(!HANG_DROPPED.with(|f| f.load(std::sync::atomic::Ordering::SeqCst)));
        drop(rpc);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(HANG_DROPPED.with(|f| f.load(std::sync::atomic::Ordering::SeqCst)));
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_server_the_plugins_requests_are_answered_as_not_served() {
        // Driver::new on a machine whose plugin makes requests, with a handler that only hears.
        let heard = Arc::new(Mutex::new(Vec::new()));
        let log = heard.clone();
        let plugin = asking_plugin(vec![("sampling/createMessage", json!({}))]);
        let driver = Driver::new(
            Session::memory(plugin, &json_lines()),
            Peer::new(Dialect::JsonRpc2),
            move |c: Completion<jsonrpc::Event>| log.lock().expect("log").push(c.event),
        );
        let pending = driver
            .request(|p| Ok::<_, ()>(p.request("go", None)))
            .expect("sent");
        let c = within(pending.wait()).await.expect("answered");
        let jsonrpc::Event::Response { result, .. } = c.event else {
            panic!("a response: {:?}", c.event)
        };
        let got = result.expect("a result");
        assert_eq!(got[0]["error"]["code"], json!(-32601), "{got}");
        // The request never reached the handler.
        assert!(heard.lock().expect("log").is_empty());
    }

    /// Serves every request, panics on every notice.
    struct PanicsOnNotice;

    impl PluginRequests<Peer> for PanicsOnNotice {
        async fn request(&mut self, _: jsonrpc::Request) -> Option<Result<Value, ErrorObject>> {
            Some(Ok(json!("served")))
        }
        fn notice(&mut self, _: Completion<jsonrpc::Event>) {
            panic!("the handler broke on a notice");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_that_panics_on_a_notice_leaves_no_request_unanswered() {
        // On `go`: a notification, then a request of the plugin's; `go` is answered with the
        // host's answer to that request.
        let mut go = None;
        let plugin = move |frame: &[u8]| {
            let v: Value = serde_json::from_slice(frame).expect("json");
            if v.get("method").is_none() {
                return vec![answer(&go.take().expect("go first"), v)];
            }
            go = Some(v["id"].clone());
            vec![
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "log"})).expect("json"),
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 100, "method": "ask"}))
                    .expect("json"),
            ]
        };
        let rpc = JsonRpcPeer::new(
            Session::memory(plugin, &json_lines()),
            Dialect::JsonRpc2,
            PanicsOnNotice,
        );
        let got = within(rpc.call("go", None)).await.expect("answered");
        assert_eq!(
            got["error"],
            json!({"code": -32603, "message": "the host's handler failed earlier; ask not served"})
        );
        assert_eq!(
            within(rpc.shutdown(Duration::from_secs(1))).await,
            Exit::Exited(0)
        );
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
