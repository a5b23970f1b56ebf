//! Per-request budgets and instance renewal: a protocol-aware supervisor between an engine and
//! a plugin.
//!
//! ```text
//!   engine ─ frames ─► Supervisor ─► current instance (a Session)
//!                        │ request starts: SessionControl::begin_request (fuel re-armed when the
//!                        │   guest next runs), its timer starts
//!                        │ its response: timer stopped; recycle the instance if due
//!   engine ◄─ frames ◄───┘ instance stopped with requests pending: each gets the protocol's error;
//!                          with `restart`, the next request gets a fresh instance, after the
//!                          protocol's handshake has been replayed to it
//! ```
//!
//! What counts as a request (its budget runs from when it is forwarded to its response):
//!
//! | protocol | request | handshake replayed to a fresh instance |
//! |---|---|---|
//! | jsonrpc | any request | none |
//! | oracle | `invoke` | the plugin's `ready` is answered with the engine's recorded answer |
//! | denobridge | any request but `health` | `health` |
//! | orchard | any request but `describe`, `configure` | `describe`, `configure` |
//! | finecode | any request but `initialize` | `initialize`, `initialized` |
//! | atp (v3) | a run: work start to its work done or error | the start item; the new hello is swallowed |
//!
//! Decisions, written down:
//! - The fuel budget ([`Fuel::PerRequest`]) re-arms at the guest's first step after a
//!   request is forwarded. With several requests in flight it re-arms at each arrival, so each
//!   request gets at least its budget. Time the guest spends blocked on input is not billed,
//!   and neither is wall-clock time between requests ([`Budgets::request_timeout`] runs only
//!   while a request is pending).
//! - A timed-out request stops the whole instance (a plugin busy in one request cannot be
//!   interrupted selectively); every request pending on it gets the protocol's error.
//! - Restarts are lazy: the next frame from the engine starts the fresh instance, so a plugin
//!   that dies at start-up is not restarted in a loop. A fresh instance that dies during the
//!   handshake replay ends the session.
//! - Recycling ([`Budgets::recycle_after`], [`Budgets::recycle_memory`]) happens only between
//!   requests, with none pending: the old instance gets stdin closed and `grace` to exit (as in
//!   [`Session::shutdown`](crate::Session::shutdown)), and a fresh one takes over at once.
//! - Output an instance writes after it was retired or stopped is dropped.
//! - ATP v1 has one run per plugin process; its runs are not budgeted (frames pass through).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sandpipe_proto::atp;
use sandpipe_proto::jsonrpc::{Dialect, ErrorObject, Id, Message};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::error::{Exit, HostError, SessionError, Stopped};
use crate::protocols::Protocol;
use crate::session::{SessionControl, SessionOptions, SessionWriter};
use crate::{Fuel, Host, Plugin, Policy};

/// Per-request limits and renewal. Defaults: no per-request limits, no restart, no recycling,
/// a 2 s grace for recycled instances.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Budgets {
    /// Fuel for each request (wasm only); becomes the policy's [`Fuel::PerRequest`].
    pub fuel_per_request: Option<u64>,
    /// Wall-clock time from forwarding a request to its response.
    pub request_timeout: Option<Duration>,
    /// After an instance stopped with requests pending (or ended on its own while the engine
    /// still talks), start a fresh one for the next request instead of ending the session.
    pub restart: bool,
    /// Start a fresh instance, between requests, after this many answered requests.
    pub recycle_after: Option<u64>,
    /// Start a fresh instance, between requests, once the plugin holds more than this many
    /// bytes of memory (linear memory for wasm, resident set for native).
    pub recycle_memory: Option<u64>,
    /// Start a fresh instance, between requests, once the plugin has used half of its
    /// headroom below this cap (normally the memory cap): once it holds more than
    /// `base + (cap - base) / 2` bytes, where `base` is what it held after its first answered
    /// request. A wasm guest's linear memory never shrinks, so one that grows per request (a
    /// Python or JS heap) would otherwise meet the cap in the middle of a request; recycling
    /// it between requests costs a handshake instead of a failed request. Relative to `base`,
    /// so a guest that starts large is not recycled after every request.
    pub recycle_before_cap: Option<u64>,
    /// How long a recycled instance gets to exit after its stdin closes.
    pub grace: Duration,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            fuel_per_request: None,
            request_timeout: None,
            restart: false,
            recycle_after: None,
            recycle_memory: None,
            recycle_before_cap: None,
            grace: Duration::from_secs(2),
        }
    }
}

/// A request that did not get its answer from the plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Incident {
    /// The request's id (JSON) or ATP run id.
    pub request: String,
    /// The method, for JSON-RPC protocols (`None` for ATP runs).
    pub method: Option<String>,
    /// Why it failed, as sent to the engine.
    pub reason: String,
    /// How the instance ended.
    pub exit: Option<Exit>,
    /// Whether the next request will get a fresh instance.
    pub restarting: bool,
}

/// How a supervised session went.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// How the last instance ended.
    pub exit: Exit,
    /// True if the session ended because an instance stopped (not because the engine closed
    /// its side).
    pub stopped: bool,
    /// Requests forwarded, answered by the plugin, and failed by the supervisor.
    pub requests: u64,
    /// Requests the plugin answered.
    pub answered: u64,
    /// Requests that got the protocol's error from the supervisor.
    pub incidents: Vec<Incident>,
    /// Fresh instances started after a stop.
    pub restarts: u32,
    /// Fresh instances started by recycling.
    pub recycles: u32,
}

/// Runs one supervised session: see the module docs.
pub struct Supervisor<'a> {
    host: &'a Host,
    plugin: &'a Plugin,
    policy: Policy,
    options: SessionOptions,
    protocol: Protocol,
    budgets: Budgets,
    on_incident: Option<IncidentHook<'a>>,
}

/// Called for each request the supervisor fails.
type IncidentHook<'a> = Box<dyn FnMut(&Incident) + Send + 'a>;

impl std::fmt::Debug for Supervisor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("protocol", &self.protocol)
            .field("budgets", &self.budgets)
            .finish_non_exhaustive()
    }
}

/// How the supervisor sees one frame from the engine.
#[derive(Debug, PartialEq)]
enum FromEngine {
    /// A budgeted request.
    Request { key: String, method: Option<String> },
    /// Part of the handshake: replayed to fresh instances; `awaits` is the id of its answer.
    Handshake { awaits: Option<String> },
    /// The engine's answer to a plugin request.
    Answer { key: String },
    /// Anything else: forwarded.
    Other,
}

/// How the supervisor sees one frame from the plugin.
#[derive(Debug, PartialEq)]
enum FromPlugin {
    /// The answer to a request (or to a handshake request).
    Answer { key: String },
    /// A handshake request the plugin makes (oracle `ready`).
    HandshakeRequest { id: Value, method: String },
    /// The plugin's introduction (ATP hello).
    Hello,
    /// Anything else: forwarded.
    Other,
}

/// The two members the supervisor reads from a JSON-RPC frame. Params, results and errors
/// are skipped, not built into `Value`s: classification runs on every frame both ways.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    method: Option<Value>,
    /// `None` for a missing or `null` id.
    #[serde(default)]
    id: Option<Value>,
}

impl Head {
    /// The head of a JSON object frame; `None` for anything else.
    fn of(frame: &[u8]) -> Option<Head> {
        serde_json::from_slice(frame).ok()
    }

    fn method(&self) -> Option<&str> {
        self.method.as_ref().and_then(Value::as_str)
    }
}

/// The protocol-specific part: classification and error frames.
#[derive(Debug, Clone, Copy)]
struct Rules {
    protocol: Protocol,
}

impl Rules {
    fn dialect(self) -> Dialect {
        match self.protocol {
            Protocol::Orchard => Dialect::Orchard,
            _ => Dialect::JsonRpc2,
        }
    }

    fn engine_handshake(self, method: &str) -> bool {
        match self.protocol {
            Protocol::DenoBridge => method == "health",
            Protocol::Orchard => matches!(method, "describe" | "configure"),
            Protocol::FineCode => matches!(method, "initialize" | "initialized"),
            _ => false,
        }
    }

    fn plugin_handshake(self, method: &str) -> bool {
        self.protocol == Protocol::Oracle && method == "ready"
    }

    fn classify_engine(self, frame: &[u8]) -> FromEngine {
        if self.protocol == Protocol::Atp {
            if frame == atp::START_ITEM {
                return FromEngine::Handshake { awaits: None };
            }
            return match atp::Message::decode(frame) {
                Ok(atp::Message::WorkStart { run_id, .. }) => FromEngine::Request {
                    key: run_id,
                    method: None,
                },
                _ => FromEngine::Other,
            };
        }
        let Some(head) = Head::of(frame) else {
            return FromEngine::Other;
        };
        let id = head.id.as_ref().map(key_of);
        match (head.method(), id) {
            (Some(method), id) if self.engine_handshake(method) => {
                FromEngine::Handshake { awaits: id }
            }
            (Some(method), Some(key)) => FromEngine::Request {
                key,
                method: Some(method.to_owned()),
            },
            (Some(_), None) => FromEngine::Other,
            (None, Some(key)) => FromEngine::Answer { key },
            (None, None) => FromEngine::Other,
        }
    }

    fn classify_plugin(self, frame: &[u8]) -> FromPlugin {
        if self.protocol == Protocol::Atp {
            return match atp::Message::decode(frame) {
                Ok(atp::Message::WorkDone { run_id, .. } | atp::Message::Error { run_id, .. })
                    if !run_id.is_empty() =>
                {
                    FromPlugin::Answer { key: run_id }
                }
                Ok(_) => FromPlugin::Other,
                Err(_) if atp::Hello::decode(frame).is_ok() => FromPlugin::Hello,
                Err(_) => FromPlugin::Other,
            };
        }
        let Some(head) = Head::of(frame) else {
            return FromPlugin::Other;
        };
        let id = head.id.as_ref();
        match (head.method(), id) {
            (Some(method), Some(id)) if self.plugin_handshake(method) => {
                FromPlugin::HandshakeRequest {
                    id: id.clone(),
                    method: method.to_owned(),
                }
            }
            (None, Some(id)) => FromPlugin::Answer { key: key_of(id) },
            _ => FromPlugin::Other,
        }
    }

    /// The protocol's error for a request the plugin will not answer: each protocol's own
    /// `stopped_error` in `sandpipe-proto`, with the engine's request id. An ATP run's error is
    /// not server fatal: the engine's plugin lives on in a fresh instance.
    fn error_frame(self, key: &str, method: Option<&str>, stopped: &Stopped) -> Vec<u8> {
        use sandpipe_proto::{denobridge, finecode, jsonrpc, oracle, orchard};
        let error: ErrorObject = match self.protocol {
            Protocol::Atp => return atp::stopped_error(key, stopped, false).encode(),
            Protocol::Orchard => {
                orchard::stopped_error(method.and_then(orchard::Method::from_name), stopped).into()
            }
            Protocol::Oracle => oracle::stopped_error(stopped).to_error_object(),
            Protocol::DenoBridge => denobridge::stopped_error(stopped),
            Protocol::FineCode => finecode::stopped_error(stopped),
            Protocol::JsonRpc => jsonrpc::stopped_error(Dialect::JsonRpc2, stopped),
        };
        let id = serde_json::from_str::<Value>(key)
            .ok()
            .and_then(|v| match v {
                Value::Number(n) => n.as_i64().map(Id::Num),
                Value::String(s) => Some(Id::Str(s)),
                _ => None,
            })
            .unwrap_or(Id::Null);
        Message::response(id, Err(error)).encode(self.dialect())
    }
}

/// A request id as a map key: its JSON text (so `1` and `"1"` differ).
fn key_of(id: &Value) -> String {
    id.to_string()
}

/// Replace the id of a recorded answer with `id`.
fn with_id(answer: &[u8], id: &Value) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(answer).ok()?;
    v.as_object_mut()?.insert("id".into(), id.clone());
    serde_json::to_vec(&v).ok()
}

/// A running instance.
struct Instance {
    generation: u64,
    writer: SessionWriter,
    control: SessionControl,
    /// Requests this instance answered.
    answered: u64,
    /// The memory it held after its first answered request (for `recycle_before_cap`).
    baseline: Option<u64>,
    /// Set when the supervisor stopped the instance for a request's timeout.
    timed_out: Option<(String, Duration)>,
}

/// An instance being brought up to where the engine's view of the session is.
struct Restoring {
    /// Handshake frames still to send; each is sent once the previous one's answer came.
    to_send: VecDeque<(Vec<u8>, Option<String>)>,
    /// The answer being waited for.
    awaiting: Option<String>,
    /// Plugin-initiated handshake items still expected (oracle `ready`, ATP hello).
    plugin_items: usize,
    /// The engine frame that triggered a lazy restart.
    held: Option<Vec<u8>>,
}

enum PluginEvent {
    Frame(Bytes),
    End(Option<SessionError>),
}

struct Pending {
    method: Option<String>,
    since: Instant,
}

/// What the supervisor keeps across instances.
struct Books {
    /// Budgeted requests in flight on the current instance, by key.
    pending: HashMap<String, Pending>,
    /// The handshake as the engine sent it, with the id of each frame's answer.
    replay: Vec<(Vec<u8>, Option<String>)>,
    /// The engine's answers to the plugin's handshake requests, by method.
    answers: HashMap<String, Vec<u8>>,
    /// Plugin handshake requests (by id) still waiting for the engine's answer.
    asked: HashMap<String, String>,
    /// Engine answers that matched no plugin request yet (a few, for scripted engines).
    early: HashMap<String, Vec<u8>>,
    /// The first instance introduced itself (ATP).
    hello_seen: bool,
    /// Answers to replayed handshake requests: the engine already has them.
    swallow: HashSet<String>,
    report: Report,
}

impl Default for Books {
    fn default() -> Self {
        Self {
            pending: HashMap::new(),
            replay: Vec::new(),
            answers: HashMap::new(),
            asked: HashMap::new(),
            early: HashMap::new(),
            hello_seen: false,
            swallow: HashSet::new(),
            report: Report {
                exit: Exit::Exited(0),
                stopped: false,
                requests: 0,
                answered: 0,
                incidents: Vec::new(),
                restarts: 0,
                recycles: 0,
            },
        }
    }
}

impl Books {
    /// What a fresh instance must be told and must say before it serves the engine.
    fn restoring(&self) -> Restoring {
        Restoring {
            to_send: self.replay.iter().cloned().collect(),
            awaiting: None,
            plugin_items: self.answers.len() + usize::from(self.hello_seen),
            held: None,
        }
    }
}

impl<'a> Supervisor<'a> {
    /// A supervisor for `plugin` speaking `protocol`, each instance started with `policy` and
    /// `options` (whose framing is replaced by the protocol's).
    pub fn new(
        host: &'a Host,
        plugin: &'a Plugin,
        policy: Policy,
        options: SessionOptions,
        protocol: Protocol,
        budgets: Budgets,
    ) -> Self {
        let mut policy = policy;
        if let Some(f) = budgets.fuel_per_request {
            policy.fuel = Fuel::PerRequest(f);
        }
        let mut options = options;
        options.framing = Some(protocol.framing());
        Self {
            host,
            plugin,
            policy,
            options,
            protocol,
            budgets,
            on_incident: None,
        }
    }

    /// Call `f` for each request the supervisor fails, as it happens.
    pub fn on_incident(mut self, f: impl FnMut(&Incident) + Send + 'a) -> Self {
        self.on_incident = Some(Box::new(f));
        self
    }

    async fn spawn(
        &self,
        generation: u64,
        events: &mpsc::Sender<(u64, PluginEvent)>,
    ) -> Result<Instance, HostError> {
        let session = self
            .host
            .start(self.plugin, &self.policy, &self.options)
            .await?;
        let (writer, mut reader, control) = session.into_split();
        let tx = events.clone();
        tokio::spawn(async move {
            loop {
                let event = match reader.recv().await {
                    Ok(Some(frame)) => PluginEvent::Frame(frame),
                    Ok(None) => PluginEvent::End(None),
                    Err(e) => PluginEvent::End(Some(e)),
                };
                let end = matches!(event, PluginEvent::End(_));
                if tx.send((generation, event)).await.is_err() || end {
                    return;
                }
            }
        });
        Ok(Instance {
            generation,
            writer,
            control,
            answered: 0,
            baseline: None,
            timed_out: None,
        })
    }

    /// Run until the engine closes `from_engine` and the plugin ends, or until an instance
    /// stops and `restart` is off. Frames for the engine go to `to_engine`.
    pub async fn run(
        mut self,
        mut from_engine: mpsc::Receiver<Vec<u8>>,
        to_engine: mpsc::Sender<Vec<u8>>,
    ) -> Result<Report, HostError> {
        let rules = Rules {
            protocol: self.protocol,
        };
        let (events_tx, mut events) = mpsc::channel::<(u64, PluginEvent)>(64);
        let mut generation = 0u64;
        let mut instance = Some(self.spawn(generation, &events_tx).await?);
        let mut restoring: Option<Restoring> = None;
        let mut b = Books::default();
        let mut engine_open = true;

        loop {
            let timer = next_timeout(&b.pending, self.budgets.request_timeout, instance.is_some());
            tokio::select! {
                frame = from_engine.recv(), if engine_open && restoring.is_none() => {
                    let Some(frame) = frame else {
                        engine_open = false;
                        match &mut instance {
                            Some(inst) => inst.writer.close().await,
                            None => {
                                // Every stop was answered in-band and a restart was due: the
                                // session itself ended cleanly.
                                b.report.exit = Exit::Exited(0);
                                break;
                            }
                        }
                        continue;
                    };
                    if instance.is_none() {
                        // Lazy restart: a fresh instance, the handshake replayed, then this frame.
                        generation += 1;
                        let fresh = match self.spawn(generation, &events_tx).await {
                            Ok(i) => i,
                            Err(e) => {
                                let why = format!("could not restart the plugin: {e}");
                                self.fail_frame(rules, &frame, &why, None, &[], &to_engine, &mut b).await;
                                b.report.stopped = true;
                                break;
                            }
                        };
                        b.report.restarts += 1;
                        let inst = instance.insert(fresh);
                        let mut r = b.restoring();
                        r.held = Some(frame);
                        restoring = Some(r);
                        if let Some(held) = advance(&mut restoring, inst, &mut b.swallow).await {
                            self.forward(rules, held, inst, &mut b).await;
                        }
                        continue;
                    }
                    let inst = instance.as_mut().expect("checked above");
                    self.forward(rules, frame, inst, &mut b).await;
                }
                Some((g, event)) = events.recv() => {
                    let Some(inst) = instance.as_mut().filter(|i| i.generation == g) else {
                        continue; // a retired or stopped instance: its output is dropped
                    };
                    let frame = match event {
                        PluginEvent::Frame(frame) => frame,
                        PluginEvent::End(error) => {
                            let inst = instance.take().expect("matched above");
                            let was_restoring = restoring.take();
                            let go_on = self.ended(rules, inst, error, was_restoring, engine_open, &to_engine, &mut b).await;
                            if !go_on {
                                break;
                            }
                            continue;
                        }
                    };
                    let mut released = None;
                    let mut answered = false;
                    match rules.classify_plugin(&frame) {
                        FromPlugin::Answer { key } if b.swallow.remove(&key) => {
                            if let Some(r) = restoring.as_mut().filter(|r| r.awaiting.as_ref() == Some(&key)) {
                                r.awaiting = None;
                            }
                            if let Some(held) = advance(&mut restoring, inst, &mut b.swallow).await {
                                self.forward(rules, held, inst, &mut b).await;
                            }
                            continue;
                        }
                        FromPlugin::Answer { key } => {
                            if b.pending.remove(&key).is_some() {
                                inst.answered += 1;
                                if inst.answered == 1 && self.budgets.recycle_before_cap.is_some() {
                                    inst.baseline = inst.control.memory_in_use();
                                }
                                b.report.answered += 1;
                                answered = true;
                            }
                        }
                        FromPlugin::HandshakeRequest { id, method } => {
                            let recorded = b.answers.get(&method).and_then(|a| with_id(a, &id));
                            if let (true, Some(answer)) = (g > 0, recorded) {
                                if let Err(e) = inst.writer.send(&answer).await {
                                    tracing::debug!("fresh instance stopped reading: {e}");
                                }
                                if let Some(r) = &mut restoring {
                                    r.plugin_items = r.plugin_items.saturating_sub(1);
                                }
                                released = Some(advance(&mut restoring, inst, &mut b.swallow).await);
                            } else if let Some(answer) = b.early.remove(&key_of(&id)) {
                                // The engine answered before the request reached it (a
                                // scripted engine): record the answer all the same.
                                b.answers.insert(method, answer);
                            } else {
                                b.asked.insert(key_of(&id), method);
                            }
                        }
                        FromPlugin::Hello => {
                            if b.hello_seen {
                                if let Some(r) = &mut restoring {
                                    r.plugin_items = r.plugin_items.saturating_sub(1);
                                }
                                released = Some(advance(&mut restoring, inst, &mut b.swallow).await);
                            } else {
                                b.hello_seen = true;
                            }
                        }
                        FromPlugin::Other => {}
                    }
                    if let Some(held) = released {
                        // A handshake item the supervisor answered itself: not for the engine.
                        if let Some(held) = held {
                            self.forward(rules, held, inst, &mut b).await;
                        }
                        continue;
                    }
                    if to_engine.send(frame.to_vec()).await.is_err() {
                        // The engine is gone: stop the plugin; its end finishes the session.
                        inst.control.kill();
                        engine_open = false;
                        continue;
                    }
                    if answered && b.pending.is_empty() && restoring.is_none() && engine_open && self.recycle_due(inst) {
                        let old = instance.take().expect("present");
                        retire(old, self.budgets.grace);
                        generation += 1;
                        let fresh = self.spawn(generation, &events_tx).await?;
                        b.report.recycles += 1;
                        let inst = instance.insert(fresh);
                        restoring = Some(b.restoring());
                        if let Some(held) = advance(&mut restoring, inst, &mut b.swallow).await {
                            self.forward(rules, held, inst, &mut b).await;
                        }
                    }
                }
                () = timer => {
                    if let Some(inst) = &mut instance
                        && inst.timed_out.is_none()
                        && let Some(limit) = self.budgets.request_timeout
                        && let Some((key, _)) = b.pending.iter().min_by_key(|(_, p)| p.since)
                    {
                        inst.timed_out = Some((key.clone(), limit));
                        inst.control.kill();
                    }
                }
            }
        }
        Ok(b.report)
    }

    /// An instance ended: fail what was pending on it. Returns whether the session goes on.
    #[allow(clippy::too_many_arguments)]
    async fn ended(
        &mut self,
        rules: Rules,
        inst: Instance,
        error: Option<SessionError>,
        was_restoring: Option<Restoring>,
        engine_open: bool,
        to_engine: &mpsc::Sender<Vec<u8>>,
        b: &mut Books,
    ) -> bool {
        if error.is_some() {
            inst.control.kill();
        }
        let exit = inst.control.wait().await;
        let tail = inst.control.stderr_tail();
        let reason = match (&inst.timed_out, &error) {
            (Some((key, limit)), _) => {
                format!("request {key} timed out after {limit:?} (request timeout)")
            }
            (None, Some(e)) => format!("plugin broke the framing: {e}"),
            (None, None) => describe(&exit, self.policy.fuel),
        };
        // A request that ran over stopped the plugin: report the deadline, not the kill.
        let exit = match (&inst.timed_out, exit) {
            (Some((_, limit)), Exit::Killed { .. }) => Exit::DeadlineExceeded { limit: *limit },
            (_, exit) => exit,
        };
        b.report.exit = exit.clone();
        b.swallow.clear();
        let restart = self.budgets.restart && engine_open && was_restoring.is_none();
        let mut failed: Vec<(String, Pending)> = b.pending.drain().collect();
        failed.sort_by_key(|(_, p)| p.since);
        for (key, p) in failed {
            let incident = Incident {
                request: key,
                method: p.method,
                reason: reason.clone(),
                exit: Some(exit.clone()),
                restarting: restart,
            };
            self.fail_request(rules, incident, &tail, to_engine, b)
                .await;
        }
        if let Some(held) = was_restoring.and_then(|r| r.held) {
            let why = format!("the restarted plugin stopped during the handshake: {reason}");
            self.fail_frame(rules, &held, &why, Some(&exit), &tail, to_engine, b)
                .await;
            b.report.stopped = true;
            return false;
        }
        if !engine_open {
            return false;
        }
        if !restart {
            b.report.stopped = true;
            return false;
        }
        true
    }

    /// Forward one engine frame to the running instance, noting requests and handshake.
    async fn forward(&self, rules: Rules, frame: Vec<u8>, inst: &mut Instance, b: &mut Books) {
        match rules.classify_engine(&frame) {
            FromEngine::Request { key, method } => {
                b.report.requests += 1;
                b.pending.insert(
                    key,
                    Pending {
                        method,
                        since: Instant::now(),
                    },
                );
                inst.control.begin_request();
            }
            FromEngine::Handshake { awaits } => b.replay.push((frame.clone(), awaits)),
            FromEngine::Answer { key } => match b.asked.remove(&key) {
                Some(method) => {
                    b.answers.insert(method, frame.clone());
                }
                None if b.early.len() < 16 => {
                    b.early.insert(key, frame.clone());
                }
                None => {}
            },
            FromEngine::Other => {}
        }
        if let Err(e) = inst.writer.send(&frame).await {
            // The plugin stopped reading: its end (and the reason) arrives as an event.
            tracing::debug!("plugin stopped reading stdin: {e}");
        }
    }

    /// Fail one engine frame that never reached a plugin (if it is a request).
    #[allow(clippy::too_many_arguments)]
    async fn fail_frame(
        &mut self,
        rules: Rules,
        frame: &[u8],
        reason: &str,
        exit: Option<&Exit>,
        tail: &[String],
        to_engine: &mpsc::Sender<Vec<u8>>,
        b: &mut Books,
    ) {
        if let FromEngine::Request { key, method } = rules.classify_engine(frame) {
            b.report.requests += 1;
            let incident = Incident {
                request: key,
                method,
                reason: reason.to_owned(),
                exit: exit.cloned(),
                restarting: false,
            };
            self.fail_request(rules, incident, tail, to_engine, b).await;
        }
    }

    /// Answer a request the plugin will not answer with the protocol's error, and record it.
    async fn fail_request(
        &mut self,
        rules: Rules,
        incident: Incident,
        tail: &[String],
        to_engine: &mpsc::Sender<Vec<u8>>,
        b: &mut Books,
    ) {
        let stopped = Stopped {
            reason: incident.reason.clone(),
            exit: incident.exit.clone(),
            stderr_tail: tail.to_vec(),
            violation: false,
        };
        let frame = rules.error_frame(&incident.request, incident.method.as_deref(), &stopped);
        tracing::debug!(request = %incident.request, reason = %incident.reason, "request failed");
        if let Some(f) = &mut self.on_incident {
            f(&incident);
        }
        b.report.incidents.push(incident);
        let _ = to_engine.send(frame).await;
    }

    fn recycle_due(&self, inst: &Instance) -> bool {
        let by_count = self
            .budgets
            .recycle_after
            .is_some_and(|n| inst.answered >= n);
        let by_memory = self.budgets.recycle_memory.is_some_and(|limit| {
            inst.control
                .memory_in_use()
                .is_some_and(|used| used > limit)
        });
        let by_headroom = match (self.budgets.recycle_before_cap, inst.baseline) {
            (Some(cap), Some(base)) => inst
                .control
                .memory_in_use()
                .is_some_and(|used| used > base + cap.saturating_sub(base) / 2),
            _ => false,
        };
        by_count || by_memory || by_headroom
    }
}

/// Send handshake frames until one needs an answer. Once the instance is restored, returns the
/// engine frame held back by a lazy restart (for the caller to forward).
async fn advance(
    restoring: &mut Option<Restoring>,
    inst: &mut Instance,
    swallow: &mut HashSet<String>,
) -> Option<Vec<u8>> {
    let r = restoring.as_mut()?;
    while r.awaiting.is_none() {
        let Some((frame, awaits)) = r.to_send.pop_front() else {
            break;
        };
        if let Some(key) = &awaits {
            swallow.insert(key.clone());
        }
        r.awaiting = awaits;
        if let Err(e) = inst.writer.send(&frame).await {
            tracing::debug!("fresh instance stopped reading during the handshake: {e}");
        }
    }
    if r.awaiting.is_none() && r.plugin_items == 0 {
        let held = r.held.take();
        *restoring = None;
        return held;
    }
    None
}

/// Close a retired instance's stdin and give it `grace` to exit, in the background.
fn retire(inst: Instance, grace: Duration) {
    tokio::spawn(async move {
        let Instance {
            mut writer,
            control,
            ..
        } = inst;
        writer.close().await;
        let exit = control.wait_or_stop(grace).await;
        tracing::debug!(?exit, "recycled instance ended");
    });
}

/// When the oldest pending request times out (never, without a timeout or pending requests).
async fn next_timeout(
    pending: &HashMap<String, Pending>,
    timeout: Option<Duration>,
    running: bool,
) {
    let oldest = pending.values().map(|p| p.since).min();
    match (timeout, oldest, running) {
        (Some(t), Some(since), true) => tokio::time::sleep_until((since + t).into()).await,
        _ => std::future::pending().await,
    }
}

/// The reason a request failed, from how its instance ended.
fn describe(exit: &Exit, fuel: Fuel) -> String {
    match (exit, fuel) {
        (Exit::OutOfFuel { limit }, Fuel::PerRequest(_)) => {
            format!("request ran out of fuel (limit {limit} per request)")
        }
        (Exit::Exited(code), _) => format!("plugin exited with status {code} before answering"),
        (other, _) => other.to_string(),
    }
}
