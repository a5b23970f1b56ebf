//! One sandboxed server instance behind the endpoint: a supervised MCP session (the same
//! [`Supervisor`] that `run --protocol mcp` bridges to stdio) whose engine side is the HTTP
//! requests of one client, and the [`Router`] that pairs its answers with them.
//!
//! ```text
//!  HTTP request ─ message ─► Router::inbound (fresh id) ─► Supervisor ─► the server's stdin
//!  the server's stdout ─► Supervisor ─► pump ─► Router::outbound ─► that request's stream
//!                                                              └─► unrouted: the session's
//!                                                                  GET stream (2025 only)
//!  end() ─► the supervisor's input closes ─► the server's stdin closes ─► it exits
//!           (killed after the grace) ─► gone: every waiting request gets -32603
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use sandpipe_proto::mcp::http::{Routed, Router};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::Launch;
use super::body::Event;
use super::metrics::{Metrics, Outcome};
use crate::net::PrincipalSlot;
use crate::run::session::SessionGroup;
use crate::speak::protocols::Protocol;
use crate::speak::supervise::Supervisor;

/// Which era an instance serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Era {
    /// One 2025-11-25 / 2025-06-18 session.
    Session,
    /// The 2026-07-28 requests of one principal (or one connection).
    Stateless,
}

/// A request stream waiting for its answer.
struct Waiting {
    tx: mpsc::UnboundedSender<Event>,
    method: String,
    /// When it was forwarded, for the latency histogram.
    since: Instant,
}

struct Inner {
    router: Router,
    streams: BTreeMap<u64, Waiting>,
    /// The 2025 session's GET stream.
    listen: Option<mpsc::UnboundedSender<Event>>,
    last_used: Instant,
    /// Why the instance ended, once it has.
    ended: Option<String>,
}

/// One instance; see the module docs.
pub(super) struct Instance {
    /// Its number, from 1, in the order instances started.
    pub(super) number: u64,
    /// The principal it serves; unset while it is warm (started before a client claimed it).
    /// Its audit lines read it from here.
    principal: PrincipalSlot,
    /// The era it serves; unset while it is warm.
    era: OnceLock<Era>,
    input: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    inner: Mutex<Inner>,
    group: SessionGroup,
    supervisor: Mutex<Option<JoinHandle<()>>>,
    metrics: Arc<Metrics>,
    on_gone: Mutex<Option<OnGone>>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("number", &self.number)
            .field("principal", &self.principal.get())
            .field("era", &self.era.get())
            .finish_non_exhaustive()
    }
}

/// Runs once an instance has ended (it takes the instance out of the endpoint's tables).
pub(super) type OnGone = Box<dyn FnOnce(&Instance) + Send>;

/// The instance ended: nothing more reaches its server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Ended(pub(super) String);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Instance {
    /// Start instance `number` for `owner` (a principal and the era it serves), or warm
    /// (`None`: for [`Instance::claim`] by the first client that needs one): the supervisor
    /// (which starts the server) and the pump that routes what it says. `on_gone` runs once the
    /// instance has ended. A warm instance's server runs with the endpoint's tool filter: the
    /// endpoint keeps none warm when principals have their own.
    pub(super) fn start(
        launch: &Arc<Launch>,
        number: u64,
        owner: Option<(&str, Era)>,
        metrics: Arc<Metrics>,
        on_gone: OnGone,
    ) -> Arc<Self> {
        let (in_tx, in_rx) = mpsc::channel::<Vec<u8>>(64);
        let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(64);
        let group = SessionGroup::new();
        let principal = PrincipalSlot::default();
        let era = OnceLock::new();
        if let Some((p, e)) = owner {
            let _ = principal.set(p.into());
            let _ = era.set(e);
        }
        let mut policy = launch.policy.clone();
        policy.audit = policy.audit.map(|a| a.for_principal_in(principal.clone()));
        let instance = Arc::new(Instance {
            number,
            principal: principal.clone(),
            era,
            input: Mutex::new(Some(in_tx)),
            inner: Mutex::new(Inner {
                router: Router::default(),
                streams: BTreeMap::new(),
                listen: None,
                last_used: Instant::now(),
                ended: None,
            }),
            group: group.clone(),
            supervisor: Mutex::new(None),
            metrics: metrics.clone(),
            on_gone: Mutex::new(Some(on_gone)),
        });
        metrics.started();
        match owner {
            Some((principal, era)) => {
                tracing::info!(instance = number, principal, ?era, "instance starting");
            }
            None => tracing::info!(instance = number, "warm instance starting"),
        }
        let launch = launch.clone();
        let me = Arc::downgrade(&instance);
        let filter = launch.tool_filter(owner.map_or("", |(p, _)| p));
        let unclaimed = principal.clone();
        let supervisor = tokio::spawn(async move {
            let mut options = launch.options.clone();
            options.group = Some(group);
            options.record = launch.recorder(number, &policy);
            let mut sup = Supervisor::new(
                &launch.host,
                &launch.plugin,
                policy,
                options,
                Protocol::Mcp,
                launch.budgets.clone(),
            )
            .on_incident(move |i| {
                tracing::warn!(
                    instance = number,
                    principal = principal.get().map_or("", |p| &**p),
                    "request {} failed: {}",
                    i.request,
                    i.reason
                );
            });
            if !filter.is_open() {
                sup = sup.rules(Box::new(sandpipe_proto::mcp::Supervised::new(filter)));
            }
            // A warm server that stops before a client claims it ends its instance, so the
            // pool replaces it, rather than handing the next client a server already gone.
            let unclaimed = unclaimed.clone();
            sup = sup.end_if_stopped_unused(move || unclaimed.get().is_none());
            let why = match sup.run(in_rx, out_tx).await {
                Ok(report) if report.stopped => format!("the server stopped ({:?})", report.exit),
                Ok(_) => "the instance ended".to_owned(),
                Err(e) => format!("the server could not start: {e}"),
            };
            if let Some(me) = me.upgrade() {
                lock(&me.inner).ended.get_or_insert(why);
            }
        });
        *lock(&instance.supervisor) = Some(supervisor);
        let me: Weak<Instance> = Arc::downgrade(&instance);
        tokio::spawn(async move {
            while let Some(frame) = out_rx.recv().await {
                let Some(me) = me.upgrade() else { return };
                me.deliver(&frame);
            }
            if let Some(me) = me.upgrade() {
                me.gone();
            }
        });
        instance
    }

    /// The principal it serves (empty while warm).
    pub(super) fn principal(&self) -> &str {
        self.principal.get().map_or("", |p| p)
    }

    /// Whether it serves `principal` (a warm instance serves nobody yet).
    pub(super) fn serves(&self, principal: &str) -> bool {
        self.principal.get().is_some_and(|p| **p == *principal)
    }

    /// A client's first request takes this warm instance for `principal` and `era`: its
    /// audit lines name the principal from now on, and its idle time starts now. `false`
    /// (and nothing changed) if it was not warm.
    pub(super) fn claim(&self, principal: &str, era: Era) -> bool {
        if self.principal.set(principal.into()).is_err() {
            return false;
        }
        let _ = self.era.set(era);
        lock(&self.inner).last_used = Instant::now();
        tracing::info!(
            instance = self.number,
            principal,
            ?era,
            "warm instance claimed"
        );
        true
    }

    /// Send `message`, a message of the HTTP request `stream`, to the server; a request's
    /// answer (and what the server sends about it) goes to `tx`.
    pub(super) async fn send(
        &self,
        stream: u64,
        message: Value,
        tx: Option<mpsc::UnboundedSender<Event>>,
    ) -> Result<(), Ended> {
        let frame = {
            let mut inner = lock(&self.inner);
            if let Some(why) = &inner.ended {
                return Err(Ended(why.clone()));
            }
            inner.last_used = Instant::now();
            if let Some(tx) = tx {
                let method = message["method"].as_str().unwrap_or_default().to_owned();
                inner.streams.insert(
                    stream,
                    Waiting {
                        tx,
                        method,
                        since: Instant::now(),
                    },
                );
            }
            inner.router.inbound(stream, message)
        };
        let input = lock(&self.input).clone();
        let sent = match input {
            Some(input) => input.send(frame).await.is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            lock(&self.inner).streams.remove(&stream);
            Err(Ended("the instance is ending".into()))
        }
    }

    /// Where the server's `frame` goes.
    fn deliver(&self, frame: &[u8]) {
        let mut inner = lock(&self.inner);
        inner.last_used = Instant::now();
        match inner.router.outbound(frame) {
            Routed::To {
                stream,
                message,
                done,
            } => {
                let outcome = if message.get("error").is_some() {
                    Outcome::Error
                } else {
                    Outcome::Result
                };
                let waiting = if done {
                    inner.streams.remove(&stream)
                } else {
                    None
                };
                if let Some(w) = waiting.as_ref().or_else(|| inner.streams.get(&stream)) {
                    let _ = w.tx.send((message, done));
                }
                if let Some(w) = waiting {
                    self.metrics.request(&w.method, outcome, w.since.elapsed());
                }
            }
            Routed::Unrouted(message) if self.era.get() == Some(&Era::Session) => {
                // A request of the server's, a log line, a list change: the session's GET
                // stream, else the latest request stream still open.
                let tx = inner
                    .listen
                    .clone()
                    .or_else(|| inner.streams.values().next_back().map(|w| w.tx.clone()));
                match tx {
                    Some(tx) => {
                        let _ = tx.send((message, false));
                    }
                    None => tracing::debug!(instance = self.number, "no stream open for {message}"),
                }
            }
            // 2026-07-28: a request's stream carries only what belongs to that request; what
            // belongs to none would reach whichever client happened to be asking.
            Routed::Unrouted(message) => {
                tracing::debug!(instance = self.number, "dropped unrouted {message}");
            }
            Routed::Dropped => {}
        }
    }

    /// The client of `stream` went away: the server is told to cancel what it still works on.
    pub(super) fn abandon(self: &Arc<Self>, stream: u64) {
        let (cancels, waiting) = {
            let mut inner = lock(&self.inner);
            (inner.router.abandon(stream), inner.streams.remove(&stream))
        };
        if let Some(w) = waiting {
            self.metrics
                .request(&w.method, Outcome::Abandoned, w.since.elapsed());
        }
        let Some(input) = lock(&self.input).clone() else {
            return;
        };
        if cancels.is_empty() {
            return;
        }
        tokio::spawn(async move {
            for frame in cancels {
                let _ = input.send(frame).await;
            }
        });
    }

    /// Open the session's GET stream (replacing an older one, which ends).
    pub(super) fn listen(&self, tx: mpsc::UnboundedSender<Event>) -> Result<(), Ended> {
        let mut inner = lock(&self.inner);
        if let Some(why) = &inner.ended {
            return Err(Ended(why.clone()));
        }
        inner.listen = Some(tx);
        Ok(())
    }

    /// Since when the instance has been idle: `None` while a request waits for its answer.
    pub(super) fn idle_since(&self) -> Option<Instant> {
        let inner = lock(&self.inner);
        inner.streams.is_empty().then_some(inner.last_used)
    }

    /// Whether it has ended.
    pub(super) fn has_ended(&self) -> bool {
        lock(&self.inner).ended.is_some()
    }

    /// Why it ended (empty while it runs).
    pub(super) fn why_ended(&self) -> String {
        lock(&self.inner).ended.clone().unwrap_or_default()
    }

    /// End the instance: its input closes (so the server's stdin does), its GET stream ends,
    /// and the server is killed if it has not exited after `grace`. Resolves once the server
    /// is gone (every process of it reaped).
    pub(super) async fn end(self: &Arc<Self>, why: &str, grace: Duration) {
        {
            let mut inner = lock(&self.inner);
            inner.ended.get_or_insert_with(|| why.to_owned());
            inner.listen = None;
        }
        lock(&self.input).take();
        let task = lock(&self.supervisor).take();
        if let Some(mut task) = task {
            tokio::select! {
                _ = &mut task => {}
                () = tokio::time::sleep(grace) => {
                    let killed = self.group.kill_running();
                    tracing::info!(instance = self.number, killed, "the server outlived its grace");
                    let _ = task.await;
                }
            }
        }
        // A recycled predecessor may still be on its way out.
        tokio::select! {
            () = self.group.ended() => {}
            () = tokio::time::sleep(grace) => {
                self.group.kill_running();
                self.group.ended().await;
            }
        }
        self.gone();
    }

    /// The instance has ended: every request still waiting gets `-32603`, and `on_gone` runs.
    fn gone(&self) {
        let (failed, why) = {
            let mut inner = lock(&self.inner);
            let why = inner
                .ended
                .get_or_insert_with(|| "the instance ended".to_owned())
                .clone();
            let error = json!({"code": sandpipe_proto::jsonrpc::INTERNAL_ERROR,
                "message": format!("the server instance ended before answering: {why}")});
            let failed = inner.router.fail_all(&error);
            let streams = std::mem::take(&mut inner.streams);
            inner.listen = None;
            let failed: Vec<_> = failed
                .into_iter()
                .filter_map(|(stream, message)| {
                    streams
                        .get(&stream)
                        .map(|w| (w.clone_tx(), w.method.clone(), w.since, message))
                })
                .collect();
            (failed, why)
        };
        for (tx, method, since, message) in failed {
            self.metrics
                .request(&method, Outcome::Ended, since.elapsed());
            let _ = tx.send((message, true));
        }
        let on_gone = lock(&self.on_gone).take();
        if let Some(f) = on_gone {
            tracing::info!(
                instance = self.number,
                principal = self.principal(),
                "instance ended: {why}"
            );
            self.metrics.ended();
            f(self);
        }
    }
}

impl Waiting {
    fn clone_tx(&self) -> mpsc::UnboundedSender<Event> {
        self.tx.clone()
    }
}
