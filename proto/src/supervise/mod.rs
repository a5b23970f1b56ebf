//! The supervisor between an engine and a plugin, without IO: per-request budgets, requests
//! in flight, the handshake to replay to a fresh instance, recycling, and the protocol's error
//! for a request the plugin will never answer.
//!
//! ```text
//!   engine frame ──► handle_engine_frame ─┐                 ┌─► poll_action:
//!   plugin frame ──► handle_plugin_frame ─┤                 │     Start / Retire / Kill / CloseStdin
//!   plugin ended ──► handle_plugin_stopped┼─► Supervisor ───┤     ToPlugin / BeginRequest
//!   memory read  ──► handle_memory ───────┤  (time passed   │     ToEngine / Incident
//!   now ──────────► handle_timeout ───────┘   in, never     │     MeasureMemory
//!                    (poll_timeout says when)  read)        └─► is_done, report
//! ```
//!
//! The host's loop (`sandpipe::supervise`) spawns and kills instances, moves frames and reads
//! memory; every decision is made here. Each protocol's rules (what is a request, what is
//! handshake, its error answer) live next to that protocol, as a [`SupervisedProtocol`]:
//! `jsonrpc::Supervised`, `oracle::Supervised`, `orchard::Supervised`,
//! `denobridge::Supervised`, `atp::Supervised`, `finecode::Supervised`, `mcp::Supervised` (which
//! also answers some engine frames itself and rewrites some answers: its tool filter).
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
//! | mcp | any request but `initialize` (a cancelled one stops counting) | `initialize`, `notifications/initialized` |
//! | atp (v3) | a run: work start to its work done or error | the start item; the new hello is swallowed |
//!
//! Decisions, written down:
//! - Wall-clock time between requests is not billed: [`Budgets::request_timeout`] runs only
//!   while a request is pending, from when it is forwarded, and the oldest pending request
//!   decides.
//! - A timed-out request stops the whole instance (a plugin busy in one request cannot be
//!   interrupted selectively); every request pending on it gets the protocol's error, once,
//!   in the order they arrived.
//! - Restarts are lazy: the next frame from the engine starts the fresh instance, so a plugin
//!   that dies at start-up is not restarted in a loop. The handshake is replayed one frame at a
//!   time, each after the previous one's answer; those answers, the fresh instance's oracle
//!   `ready` and its ATP hello are the supervisor's, never the engine's. A fresh instance that
//!   dies during the handshake replay fails the frames held for it, and the next request gets
//!   another one (a kill from outside is not the plugin's fault); after
//!   [`MAX_FAILED_RESTORES`] in a row the plugin is taken to be unable to start, and the
//!   session ends.
//! - Recycling ([`Budgets::recycle`], one [`Recycle`] rule shared with the host's
//!   `WasmOracle`) happens only between requests, with none pending, right
//!   after an answer: the old instance is retired (stdin closed, `grace` to exit) and a fresh
//!   one takes over at once.
//! - **Poisoning lives here**, as a budget flag beside restart and recycling
//!   ([`Budgets::poison`]), not in the transport: an instance that stopped (a trap, fuel, a
//!   deadline, the memory cap, an exit) is gone either way, and what the *next* request meets
//!   is a session decision. With `restart` a fresh instance serves it; with `poison` (Scarb's
//!   default for a `wasm:` oracle) it gets the protocol's stopped answer, worded by
//!   [`poisoned`] from the first stop's reason, and the session lives on until the engine
//!   closes it (then it ended cleanly: every request was answered in-band); with neither the
//!   session ends with the stop. Only requests are failed: the engine's notifications and
//!   answers after the stop go nowhere. The host decides nothing about it, so the same rule
//!   holds for any transport and is tested here on the virtual clock.
//! - Output an instance writes after it was retired or stopped is dropped.
//! - ATP v1 has one run per plugin process; its runs are not budgeted (frames pass through).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use sandpipe_proto::jsonrpc;
//! use sandpipe_proto::supervise::{Action, Budgets, Supervisor};
//!
//! let budgets = Budgets {
//!     request_timeout: Some(Duration::from_secs(1)),
//!     ..Budgets::default()
//! };
//! let mut sup = Supervisor::new(Box::new(jsonrpc::Supervised), budgets);
//! let t0 = Instant::now(); // the caller's clock; the machine never reads one
//! let Some(Action::Start { instance, .. }) = sup.poll_action() else { panic!() };
//! sup.handle_engine_frame(br#"{"jsonrpc":"2.0","id":1,"method":"spin"}"#.to_vec(), t0);
//! assert_eq!(sup.poll_action(), Some(Action::BeginRequest { instance }));
//! assert!(matches!(sup.poll_action(), Some(Action::ToPlugin { .. })));
//! assert_eq!(sup.poll_timeout(), Some(t0 + Duration::from_secs(1)));
//! sup.handle_timeout(t0 + Duration::from_secs(1));
//! assert_eq!(sup.poll_action(), Some(Action::Kill { instance }));
//! ```

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::stopped::{Exit, Stopped};

#[cfg(test)]
mod tests;

/// Per-request limits and renewal. Defaults: no per-request limits, no restart, no poisoning,
/// no recycling, a 2 s grace for recycled instances. Build one with `..Budgets::default()`.
#[derive(Debug, Clone)]
pub struct Budgets {
    /// Fuel for each request (wasm only), for the wording of a request that ran out of it. The
    /// host arms the policy's per-request fuel and sets this from it; it arms nothing itself.
    pub fuel_per_request: Option<u64>,
    /// Wall-clock time from forwarding a request to its response.
    pub request_timeout: Option<Duration>,
    /// After an instance stopped with requests pending (or ended on its own while the engine
    /// still talks), start a fresh one for the next request instead of ending the session.
    pub restart: bool,
    /// After an instance stopped, and `restart` is off, keep the session instead of ending
    /// it: every later request gets the protocol's stopped answer, its reason
    /// [`poisoned`] by the first stop's; the session ends cleanly when the engine closes
    /// its side. Scarb's semantics for a `wasm:` oracle (an export component).
    pub poison: bool,
    /// When to start a fresh instance, between requests, for a healthy one.
    pub recycle: Recycle,
    /// How long a fresh instance gets to answer its handshake (or the supervisor's probe),
    /// from when the first frame of it was written. Start-up is never billed to a request:
    /// this bounds it instead.
    pub start_timeout: Option<Duration>,
    /// How long a recycled instance gets to exit after its stdin closes, and how long an
    /// instance whose request was cancelled for its timeout gets to answer a probe before it
    /// is replaced.
    pub grace: Duration,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            fuel_per_request: None,
            request_timeout: None,
            restart: false,
            poison: false,
            recycle: Recycle::default(),
            start_timeout: None,
            grace: Duration::from_secs(2),
        }
    }
}

/// When a healthy instance is renewed, between requests: the one rule for the supervisor
/// ([`Budgets::recycle`]) and for a caller that holds an instance itself (the host's
/// `WasmOracle`). Default: never.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recycle {
    /// Renew after this many answered requests.
    pub after_requests: Option<u64>,
    /// Renew once the instance holds more than this many bytes of memory (linear memory for
    /// wasm, resident set for native).
    pub above_memory: Option<u64>,
    /// Renew once the instance has used half of its headroom below this cap (normally the
    /// memory cap): once it holds more than `base + (cap - base) / 2` bytes, where `base` is
    /// what it held after its first answered request. A wasm guest's linear memory never
    /// shrinks, so one that grows per request (a Python or JS heap) would otherwise meet the
    /// cap in the middle of a request; renewing it between requests costs a handshake instead
    /// of a failed request. Relative to `base`, so a guest that starts large is not renewed
    /// after every request.
    pub before_cap: Option<u64>,
}

impl Recycle {
    /// Whether a memory reading is needed to decide.
    pub fn reads_memory(&self) -> bool {
        self.above_memory.is_some() || self.before_cap.is_some()
    }

    /// Whether `base`, the memory held after the first answered request, is needed.
    pub fn needs_base(&self) -> bool {
        self.before_cap.is_some()
    }

    /// Whether an instance that has answered `answered` requests, holds `used` bytes (`None`:
    /// not read) and held `base` after its first answer is due for renewal.
    pub fn due(&self, answered: u64, used: Option<u64>, base: Option<u64>) -> bool {
        let by_count = self.after_requests.is_some_and(|n| answered >= n);
        let by_memory =
            matches!((self.above_memory, used), (Some(limit), Some(used)) if used > limit);
        let by_headroom = match (self.before_cap, base, used) {
            (Some(cap), Some(base), Some(used)) => used > base + cap.saturating_sub(base) / 2,
            _ => false,
        };
        by_count || by_memory || by_headroom
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

/// How the supervisor sees one frame from the engine.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FromEngine {
    /// A budgeted request, by key (the id's JSON text, or the ATP run id).
    Request {
        /// The key its answer comes back under.
        key: String,
        /// The method, for JSON-RPC protocols.
        method: Option<String>,
    },
    /// A request that stays open until the engine cancels it or the plugin closes it (MCP
    /// `subscriptions/listen`): forwarded, pending, never timed; a stop answers it with the
    /// protocol's error, as any request.
    Stream {
        /// The key its answer comes back under.
        key: String,
        /// The method.
        method: Option<String>,
    },
    /// Part of the handshake: replayed to fresh instances; `awaits` is the key of its answer.
    Handshake {
        /// The key of its answer, for a request.
        awaits: Option<String>,
    },
    /// The engine's answer to a plugin request.
    Answer {
        /// The key of the plugin's request.
        key: String,
    },
    /// The engine gave up on its request `key` (MCP `notifications/cancelled`): forwarded, and
    /// the request is no longer budgeted (the plugin need not answer it).
    Cancelled {
        /// The request's key.
        key: String,
    },
    /// Anything else: forwarded.
    Other,
}

/// How the supervisor sees one frame from the plugin.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FromPlugin {
    /// The answer to a request (or to a handshake request).
    Answer {
        /// The request's key.
        key: String,
    },
    /// A handshake request the plugin makes (oracle `ready`): a fresh instance's is answered
    /// with the engine's recorded answer.
    HandshakeRequest {
        /// Its id.
        id: Value,
        /// Its method.
        method: String,
    },
    /// The plugin's introduction (ATP hello): a fresh instance's is swallowed.
    Hello,
    /// Anything else: forwarded.
    Other,
}

/// One protocol's rules for the supervisor, implemented beside each protocol.
pub trait SupervisedProtocol: Debug + Send + Sync {
    /// How a frame from the engine counts.
    fn classify_engine(&self, frame: &[u8]) -> FromEngine;
    /// How a frame from the plugin counts.
    fn classify_plugin(&self, frame: &[u8]) -> FromPlugin;
    /// The protocol's error answer to the request `key` (with `method`), which the plugin will
    /// never answer: built by the protocol's own `stopped_error`.
    fn stopped_answer(&self, key: &str, method: Option<&str>, stopped: &Stopped) -> Vec<u8>;
    /// The answer to an engine frame that the rules give themselves instead of forwarding it
    /// (MCP: a `tools/call` of a tool the filter hides). Default: none, every frame goes on.
    fn answer_engine(&self, _frame: &[u8]) -> Option<Vec<u8>> {
        None
    }
    /// What an engine frame that [`SupervisedProtocol::answer_engine`] answered asked for, for
    /// the audit trail (MCP: the hidden tool's name). Default: none.
    fn refused_name(&self, _frame: &[u8]) -> Option<String> {
        None
    }
    /// True when the engine speaks first (MCP: `initialize`): a plugin that ends before the
    /// engine's handshake reached it, with no restart to come, leaves the session waiting for
    /// the engine's first request so that it gets the stopped answer, not a closed pipe.
    /// Default: false (the oracle's and ATP's plugins speak first; waiting for the engine then
    /// would wait for ever).
    fn engine_speaks_first(&self) -> bool {
        false
    }
    /// The plugin's answer to a request of `method`, changed before it reaches the engine
    /// (MCP: hidden tools taken out of `tools/list`). Default: none, it goes on as written.
    fn rewrite_answer(&self, _method: Option<&str>, _frame: &[u8]) -> Option<Vec<u8>> {
        None
    }
    /// A request of the supervisor's own, whose answer says the plugin is up and listening,
    /// with the key of that answer (`n` makes its id unique). With `before`, the engine request
    /// about to reach a fresh instance that has answered nothing yet and has no handshake to
    /// replay (MCP 2026: `server/discover`, so the server's start-up is bounded by the start
    /// timeout and not billed to that request). With `None`, a check that an instance whose
    /// request was cancelled still listens (MCP: `ping`, or `server/discover`). Default: none.
    fn probe(&self, _before: Option<&[u8]>, _n: u64) -> Option<(Vec<u8>, String)> {
        None
    }
    /// The frame telling the plugin that the engine no longer waits for request `key` (MCP
    /// `notifications/cancelled`). With one, a request over its timeout is cancelled and
    /// answered at once, and its instance is replaced only if it does not answer a
    /// [`probe`](Self::probe) within the grace. Default: none, the instance is stopped.
    fn cancel(&self, _key: &str, _reason: &str) -> Option<Vec<u8>> {
        None
    }
    /// The token a plugin's answer hands the engine to continue its request with (MCP: the
    /// `requestState` of an `input_required` result). Default: none.
    fn issued_token(&self, _answer: &[u8]) -> Option<String> {
        None
    }
    /// The token an engine request continues with (MCP: its `requestState`). Default: none.
    fn carried_token(&self, _request: &[u8]) -> Option<String> {
        None
    }
    /// Why a request that continues with a token issued by an instance that has since stopped
    /// is answered by the supervisor.
    fn stale_token_reason(&self) -> &'static str {
        "the request continues one that an instance of the plugin began, and that instance has \
         since stopped: send it again from the start"
    }
}

/// The `method` of a frame that has one (a JSON-RPC request or notification), for the
/// handshake's bookkeeping and the incidents' wording; `None` for any other frame (CBOR ATP).
fn method_of(frame: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        method: Option<Value>,
    }
    let head: Head = serde_json::from_slice(frame).ok()?;
    Some(head.method?.as_str()?.to_owned())
}

/// The reason a request fails with once an earlier stop poisoned the session
/// ([`Budgets::poison`]): the first stop's reason, named as such.
pub fn poisoned(first: &str) -> String {
    format!("the instance is poisoned by an earlier failure: {first}")
}

/// A request id as a key: its JSON text (so `1` and `"1"` differ).
pub fn key_of(id: &Value) -> String {
    id.to_string()
}

/// Names one instance of the plugin; frames and ends are fed back tagged with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(pub u64);

/// Why an instance is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The session's first instance.
    First,
    /// The previous one stopped; an engine frame waits for this one.
    Restart,
    /// The previous one was retired between requests.
    Recycle,
}

/// What the host's loop does next, in order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Action {
    /// Start a fresh instance; its frames and end are fed back tagged with `instance`. A
    /// failure to start goes to [`Supervisor::handle_start_failed`].
    Start {
        /// The new instance.
        instance: InstanceId,
        /// Why.
        cause: Cause,
    },
    /// A request is about to reach the instance: re-arm its per-request budget (fuel).
    BeginRequest {
        /// The instance.
        instance: InstanceId,
    },
    /// Write a frame to the instance.
    ToPlugin {
        /// The instance.
        instance: InstanceId,
        /// The frame.
        frame: Vec<u8>,
    },
    /// Write a frame to the engine.
    ToEngine(Vec<u8>),
    /// A request the plugin will not answer; its error answer follows as [`Action::ToEngine`].
    Incident(Incident),
    /// A request the rules refused without forwarding it (MCP: a hidden tool); the answer
    /// follows as [`Action::ToEngine`]. For the audit trail.
    Refused {
        /// The request's id (JSON).
        request: String,
        /// Its method.
        method: Option<String>,
        /// What it asked for (the tool's name), where the rules know.
        name: Option<String>,
    },
    /// Read how much memory the instance holds, and pass it to
    /// [`Supervisor::handle_memory`] before anything else.
    MeasureMemory {
        /// The instance.
        instance: InstanceId,
    },
    /// Stop the instance now; its end comes back through
    /// [`Supervisor::handle_plugin_stopped`].
    Kill {
        /// The instance.
        instance: InstanceId,
    },
    /// The engine closed its side: close the instance's stdin, so it ends through its protocol.
    CloseStdin {
        /// The instance.
        instance: InstanceId,
    },
    /// Retire the instance: close its stdin and give it `grace` to exit, then stop it. Nothing
    /// more about it is fed back.
    Retire {
        /// The instance.
        instance: InstanceId,
        /// How long it gets to exit.
        grace: Duration,
    },
}

/// How an instance ended, as the host saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// Its exit.
    pub exit: Exit,
    /// Its last stderr lines.
    pub stderr_tail: Vec<String>,
    /// Set when its output broke the framing (the host stopped it): the framer's error.
    pub framing_error: Option<String>,
}

/// The current instance, as far as the supervisor is concerned.
#[derive(Debug)]
struct Live {
    id: InstanceId,
    /// Requests it answered.
    answered: u64,
    /// The memory it held after its first answered request (for [`Recycle::before_cap`]).
    baseline: Option<u64>,
    /// Set when the supervisor stopped it for a request's timeout.
    timed_out: Option<(String, Duration)>,
    /// A memory reading was asked for after this answer (`true`: the first one).
    measuring: Option<bool>,
    /// Why it was started.
    cause: Cause,
    /// It answered something: it is up and listening.
    ready: bool,
    /// When the first frame that waits for its answer was written while it was not ready
    /// (the start timeout runs from there).
    starting_since: Option<Instant>,
    /// Set when the supervisor stopped it for the start timeout.
    start_timed_out: Option<Duration>,
    /// A request of it was cancelled for its timeout: unless it answers the probe by then, it
    /// is replaced.
    draining_until: Option<Instant>,
    /// The supervisor asked for it to be killed: no more timeouts for it.
    killing: bool,
}

/// An instance being brought up to where the engine's view of the session is.
#[derive(Debug)]
struct Restoring {
    /// Handshake frames still to send; each is sent once the previous one's answer came.
    to_send: VecDeque<(Vec<u8>, Option<String>)>,
    /// The answer being waited for.
    awaiting: Option<String>,
    /// Plugin-initiated handshake items still expected (oracle `ready`, ATP hello).
    plugin_items: usize,
    /// Engine frames held back until the instance is restored (the one that triggered a lazy
    /// restart, and any that came after it).
    held: VecDeque<Vec<u8>>,
}

#[derive(Debug)]
struct Pending {
    method: Option<String>,
    since: Instant,
    /// Subject to the request timeout (a stream is not).
    timed: bool,
}

/// Tokens from stopped instances remembered, so a retry that carries one is answered instead
/// of reaching an instance that cannot open it; a few, so a plugin cannot grow it.
const MAX_STALE_TOKENS: usize = 1024;

/// Fresh instances in a row that may die during the handshake replay before the session ends
/// (as a service manager's start limit: systemd's `StartLimitBurst`). A restore that completes
/// resets the count.
pub const MAX_FAILED_RESTORES: u32 = 3;

/// Engine answers kept for plugin requests not seen yet (a scripted engine answers `ready`
/// before it reaches it); a few, so an engine cannot grow it.
const MAX_EARLY: usize = 16;

/// The supervisor's state machine: see the module docs.
#[derive(Debug)]
pub struct Supervisor {
    rules: Box<dyn SupervisedProtocol>,
    budgets: Budgets,
    next_id: u64,
    instance: Option<Live>,
    restoring: Option<Restoring>,
    engine_open: bool,
    /// The engine closed while a fresh instance was being restored: close its stdin after.
    close_when_restored: bool,
    /// Fresh instances in a row that died during the handshake replay.
    failed_restores: u32,
    done: bool,
    /// Budgeted requests in flight on the current instance, by key.
    pending: HashMap<String, Pending>,
    /// The handshake as the engine sent it, with the key of each frame's answer.
    replay: Vec<(Vec<u8>, Option<String>)>,
    /// The engine's answers to the plugin's handshake requests, by method.
    answers: HashMap<String, Vec<u8>>,
    /// Plugin handshake requests (by key) still waiting for the engine's answer.
    asked: HashMap<String, String>,
    /// Engine answers that matched no plugin request yet.
    early: HashMap<String, Vec<u8>>,
    /// The first instance introduced itself (ATP).
    hello_seen: bool,
    /// Answers to replayed handshake requests: the engine already has them.
    swallow: HashSet<String>,
    /// Engine handshake requests forwarded and not answered yet (by key): answered with the
    /// stopped answer if the plugin ends first.
    handshake_pending: Vec<(String, Option<String>)>,
    /// The plugin ended before the engine's handshake reached it and the engine speaks first:
    /// the engine's next request gets the stopped answer, then the session ends.
    dead: Option<Stopped>,
    /// An instance stopped under [`Budgets::poison`]: every later request gets the stopped
    /// answer with this stop's reason (as [`poisoned`]), until the engine closes.
    poisoned: Option<Stopped>,
    /// Keys of requests the supervisor answered itself after cancelling them: the plugin's
    /// late answer is dropped.
    answered_here: HashSet<String>,
    /// Continuation tokens the current instance handed out.
    issued: HashSet<String>,
    /// Continuation tokens of instances that stopped, oldest first.
    stale: VecDeque<String>,
    /// Probes sent so far (their ids).
    probes: u64,
    actions: VecDeque<Action>,
    report: Report,
}

impl Supervisor {
    /// A supervisor for a plugin speaking `rules`' protocol. Its first action starts the first
    /// instance.
    pub fn new(rules: Box<dyn SupervisedProtocol>, budgets: Budgets) -> Self {
        let mut sup = Supervisor {
            rules,
            budgets,
            next_id: 0,
            instance: None,
            restoring: None,
            engine_open: true,
            close_when_restored: false,
            failed_restores: 0,
            done: false,
            pending: HashMap::new(),
            replay: Vec::new(),
            answers: HashMap::new(),
            asked: HashMap::new(),
            early: HashMap::new(),
            hello_seen: false,
            swallow: HashSet::new(),
            handshake_pending: Vec::new(),
            dead: None,
            poisoned: None,
            answered_here: HashSet::new(),
            issued: HashSet::new(),
            stale: VecDeque::new(),
            probes: 0,
            actions: VecDeque::new(),
            report: Report {
                exit: Exit::Exited(0),
                stopped: false,
                requests: 0,
                answered: 0,
                incidents: Vec::new(),
                restarts: 0,
                recycles: 0,
            },
        };
        sup.start(Cause::First);
        sup
    }

    /// The next thing for the host to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due: the oldest pending request's
    /// deadline, while an instance runs it.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let inst = self.instance.as_ref()?;
        if inst.killing {
            return None;
        }
        if let Some(until) = inst.draining_until {
            return Some(until);
        }
        let starting = match (self.budgets.start_timeout, inst.ready, inst.starting_since) {
            (Some(limit), false, Some(since)) => Some(since + limit),
            _ => None,
        };
        let request = self.budgets.request_timeout.and_then(|limit| {
            let oldest = self
                .pending
                .values()
                .filter(|p| p.timed)
                .map(|p| p.since)
                .min()?;
            Some(oldest + limit)
        });
        starting.into_iter().chain(request).min()
    }

    /// Whether the host should read the engine now. While a fresh instance is brought up to
    /// date, engine frames wait in the engine's pipe (they would be held here otherwise).
    pub fn accepts_engine_frames(&self) -> bool {
        self.engine_open && !self.done && self.restoring.is_none()
    }

    /// The session is over: the host stops its loop and returns the [`report`](Self::report).
    pub fn is_done(&self) -> bool {
        self.done && self.actions.is_empty()
    }

    /// If the plugin stopped before anything of the engine's reached it (and no restart
    /// follows, so the engine's next request would get the stopped answer), end the session
    /// instead when `end()` says so: the report says the plugin stopped, and the session is
    /// done. For a host whose engine may never ask: a server kept warm for a client yet to
    /// come. Otherwise nothing changes.
    pub fn end_if_stopped_unused(&mut self, end: impl FnOnce() -> bool) {
        if self.dead.is_some() && end() {
            self.dead = None;
            self.report.stopped = true;
            self.done = true;
        }
    }

    /// How the session went so far.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// How the session went.
    pub fn into_report(self) -> Report {
        self.report
    }

    /// One frame from the engine.
    pub fn handle_engine_frame(&mut self, frame: Vec<u8>, now: Instant) {
        if self.done {
            return;
        }
        if let Some(answer) = self.rules.answer_engine(&frame) {
            if let FromEngine::Request { key, method } = self.rules.classify_engine(&frame) {
                self.actions.push_back(Action::Refused {
                    request: key,
                    method,
                    name: self.rules.refused_name(&frame),
                });
            }
            self.actions.push_back(Action::ToEngine(answer));
            return;
        }
        if let Some(first) = self.poisoned.clone() {
            if let Some((key, method)) = request_of(self.rules.classify_engine(&frame)) {
                self.report.requests += 1;
                let incident = Incident {
                    request: key,
                    method,
                    reason: poisoned(&first.reason),
                    exit: first.exit.clone(),
                    restarting: false,
                };
                self.fail(incident, &first.stderr_tail);
            }
            return;
        }
        if let Some(stopped) = self.dead.clone() {
            let request = match self.rules.classify_engine(&frame) {
                FromEngine::Request { key, method } | FromEngine::Stream { key, method } => {
                    Some((key, method))
                }
                FromEngine::Handshake { awaits: Some(key) } => Some((key, method_of(&frame))),
                _ => None,
            };
            if let Some((key, method)) = request {
                self.report.requests += 1;
                let incident = Incident {
                    request: key,
                    method,
                    reason: stopped.reason.clone(),
                    exit: stopped.exit.clone(),
                    restarting: false,
                };
                self.fail(incident, &stopped.stderr_tail);
                self.done = true;
            }
            return;
        }
        if let Some(r) = &mut self.restoring {
            r.held.push_back(frame);
            return;
        }
        if self.instance.is_none() {
            // Lazy restart: a fresh instance, the handshake replayed, then this frame.
            self.report.restarts += 1;
            self.start(Cause::Restart);
            let mut r = self.restoring();
            r.held.push_back(frame);
            self.restoring = Some(r);
            self.advance(now);
            return;
        }
        self.forward(frame, now);
    }

    /// The engine closed its side.
    pub fn handle_engine_closed(&mut self, _now: Instant) {
        self.engine_open = false;
        if self.done {
            return;
        }
        if self.poisoned.is_some() {
            // Every request since the stop was answered in-band: the session ended cleanly.
            self.report.exit = Exit::Exited(0);
            self.done = true;
            return;
        }
        if self.dead.is_some() {
            self.done = true;
            return;
        }
        match &self.instance {
            Some(_) if self.restoring.is_some() => self.close_when_restored = true,
            Some(inst) => {
                let instance = inst.id;
                self.actions.push_back(Action::CloseStdin { instance });
            }
            None => {
                // Every stop was answered in-band and a restart was due: the session itself
                // ended cleanly.
                self.report.exit = Exit::Exited(0);
                self.done = true;
            }
        }
    }

    /// The engine stopped reading: stop the plugin; its end finishes the session.
    pub fn handle_engine_gone(&mut self, _now: Instant) {
        self.engine_open = false;
        if self.done {
            return;
        }
        if self.dead.is_some() || self.poisoned.is_some() {
            self.done = true;
            return;
        }
        match &self.instance {
            Some(inst) => {
                let instance = inst.id;
                self.actions.push_back(Action::Kill { instance });
            }
            None => self.done = true,
        }
    }

    /// One frame from an instance. Frames from a retired or stopped instance are dropped.
    pub fn handle_plugin_frame(&mut self, instance: InstanceId, frame: &[u8], now: Instant) {
        if self.done || self.current() != Some(instance) {
            return;
        }
        let mut answered = false;
        let mut mine = false;
        let mut rewritten = None;
        let class = self.rules.classify_plugin(frame);
        if let FromPlugin::Answer { key } = &class {
            self.instance.as_mut().expect("current").ready = true;
            if self.answered_here.remove(key) {
                // The engine already has the supervisor's answer to it.
                return;
            }
        }
        match class {
            FromPlugin::Answer { key } if self.swallow.remove(&key) => {
                if let Some(r) = self
                    .restoring
                    .as_mut()
                    .filter(|r| r.awaiting.as_ref() == Some(&key))
                {
                    r.awaiting = None;
                }
                mine = true;
            }
            FromPlugin::Answer { key } => {
                self.handshake_pending.retain(|(k, _)| *k != key);
                if let Some(p) = self.pending.remove(&key) {
                    let inst = self.instance.as_mut().expect("current");
                    inst.answered += 1;
                    self.report.answered += 1;
                    answered = true;
                    rewritten = self.rules.rewrite_answer(p.method.as_deref(), frame);
                    if let Some(token) = self.rules.issued_token(frame) {
                        self.issued.insert(token);
                    }
                }
            }
            FromPlugin::HandshakeRequest { id, method } => {
                let recorded = self.answers.get(&method).and_then(|a| with_id(a, &id));
                if let (true, Some(answer)) = (instance.0 > 0, recorded) {
                    self.actions.push_back(Action::ToPlugin {
                        instance,
                        frame: answer,
                    });
                    if let Some(r) = &mut self.restoring {
                        r.plugin_items = r.plugin_items.saturating_sub(1);
                    }
                    mine = true;
                } else if let Some(answer) = self.early.remove(&key_of(&id)) {
                    // The engine answered before the request reached it (a scripted engine):
                    // record the answer all the same.
                    self.answers.insert(method, answer);
                } else {
                    self.asked.insert(key_of(&id), method);
                }
            }
            FromPlugin::Hello if self.hello_seen => {
                if let Some(r) = &mut self.restoring {
                    r.plugin_items = r.plugin_items.saturating_sub(1);
                }
                mine = true;
            }
            FromPlugin::Hello => self.hello_seen = true,
            FromPlugin::Other => {}
        }
        if mine {
            // A handshake item the supervisor answered itself: not for the engine.
            self.advance(now);
            return;
        }
        let frame = rewritten.unwrap_or_else(|| frame.to_vec());
        self.actions.push_back(Action::ToEngine(frame));
        if !answered {
            return;
        }
        let first = self.instance.as_ref().is_some_and(|i| i.answered == 1);
        let baseline_due = first && self.budgets.recycle.needs_base();
        if self.budgets.recycle.reads_memory() && (baseline_due || self.between_requests()) {
            // The recycling decision waits for the reading.
            self.instance.as_mut().expect("current").measuring = Some(first);
            self.actions.push_back(Action::MeasureMemory { instance });
        } else {
            self.maybe_recycle(None, now);
        }
    }

    /// The memory the instance holds, as asked for by [`Action::MeasureMemory`] (`None`: it
    /// could not be read).
    pub fn handle_memory(&mut self, instance: InstanceId, used: Option<u64>, now: Instant) {
        if self.done || self.current() != Some(instance) {
            return;
        }
        let inst = self.instance.as_mut().expect("current");
        let Some(first) = inst.measuring.take() else {
            return;
        };
        if first && self.budgets.recycle.needs_base() {
            inst.baseline = used;
        }
        self.maybe_recycle(used, now);
    }

    /// An instance ended (on its own, by a limit, killed, or for breaking the framing).
    pub fn handle_plugin_stopped(&mut self, instance: InstanceId, ended: Ended, now: Instant) {
        if self.done || self.current() != Some(instance) {
            return;
        }
        let inst = self.instance.take().expect("current");
        let was_restoring = self.restoring.take();
        self.retire_tokens();
        let Ended {
            exit,
            stderr_tail,
            framing_error,
        } = ended;
        let reason = match (&inst.timed_out, &framing_error, inst.start_timed_out) {
            (Some((key, limit)), _, _) if inst.draining_until.is_some() => format!(
                "the plugin did not answer for {:?} after request {key} was cancelled for its \
                 timeout of {limit:?} (request timeout)",
                self.budgets.grace
            ),
            (Some((key, limit)), _, _) => {
                format!("request {key} timed out after {limit:?} (request timeout)")
            }
            (None, _, Some(limit)) => {
                format!("the plugin did not answer its handshake within {limit:?} (start timeout)")
            }
            (None, Some(e), None) => format!("plugin broke the framing: {e}"),
            (None, None, None) => describe(&exit, self.budgets.fuel_per_request),
        };
        // A request that ran over stopped the plugin: report the deadline, not the kill.
        let limit = inst
            .timed_out
            .as_ref()
            .map(|(_, l)| *l)
            .or(inst.start_timed_out);
        let exit = match (limit, exit) {
            (Some(limit), Exit::Killed { .. }) => Exit::DeadlineExceeded { limit },
            (_, exit) => exit,
        };
        // An instance replaced because it stayed deaf after a cancelled request is replaced
        // whatever `restart` says: the timeout was the supervisor's doing, and the session
        // goes on (unless the session is poisoned by design).
        let replace = inst.draining_until.is_some() && !self.budgets.poison;
        self.report.exit = exit.clone();
        self.swallow.clear();
        // A handshake request it never answered (MCP's initialize from a server that died
        // starting) gets the stopped answer, and no restart follows: the engine saw its
        // handshake fail, so there is nothing to restore (and a plugin that dies at start-up
        // is not restarted in a loop).
        let handshake_pending = std::mem::take(&mut self.handshake_pending);
        let restart = (self.budgets.restart || replace)
            && self.engine_open
            && (was_restoring.is_none() || replace)
            && handshake_pending.is_empty();
        let mut failed: Vec<(String, Pending)> = self.pending.drain().collect();
        failed.sort_by_key(|(_, p)| p.since);
        for (key, p) in failed {
            let incident = Incident {
                request: key,
                method: p.method,
                reason: reason.clone(),
                exit: Some(exit.clone()),
                restarting: restart,
            };
            self.fail(incident, &stderr_tail);
        }
        for (key, method) in handshake_pending {
            let incident = Incident {
                request: key,
                method,
                reason: reason.clone(),
                exit: Some(exit.clone()),
                restarting: false,
            };
            self.fail(incident, &stderr_tail);
        }
        if let (true, Some(r)) = (restart && replace, &was_restoring)
            && !r.held.is_empty()
        {
            // Engine frames wait for it: the fresh instance starts now.
            let held = was_restoring.map(|r| r.held).unwrap_or_default();
            self.report.restarts += 1;
            self.start(Cause::Restart);
            let mut r = self.restoring();
            r.held = held;
            self.restoring = Some(r);
            self.advance(now);
            return;
        }
        if let (false, Some(r)) = (replace, was_restoring) {
            self.failed_restores += 1;
            let again = self.budgets.restart
                && self.engine_open
                && self.failed_restores < MAX_FAILED_RESTORES;
            let why = if again {
                format!("the restarted plugin stopped during the handshake: {reason}")
            } else {
                format!(
                    "the restarted plugin stopped during the handshake ({} times in a row): {reason}",
                    self.failed_restores
                )
            };
            for held in r.held {
                self.fail_frame(&held, &why, Some(&exit), &stderr_tail, again);
            }
            if !again {
                self.report.stopped = true;
                self.done = true;
            }
            return;
        }
        if !self.engine_open {
            self.done = true;
        } else if !restart && self.budgets.poison {
            self.poisoned = Some(Stopped {
                reason,
                exit: Some(exit),
                stderr_tail,
                violation: false,
            });
        } else if !restart {
            self.report.stopped = true;
            // Only a plugin that ended before anything of the engine's reached it leaves the
            // session waiting for the engine: once a request was answered (the stopped answer
            // included), the session has nothing more to tell it and ends.
            if self.replay.is_empty()
                && self.report.requests == 0
                && self.rules.engine_speaks_first()
            {
                self.dead = Some(Stopped {
                    reason,
                    exit: Some(exit),
                    stderr_tail,
                    violation: false,
                });
            } else {
                self.done = true;
            }
        }
    }

    /// The instance asked for by [`Action::Start`] could not be started: the requests meant
    /// for it get the protocol's error and the session ends.
    pub fn handle_start_failed(&mut self, instance: InstanceId, error: &str, _now: Instant) {
        if self.done || self.current() != Some(instance) {
            return;
        }
        let cause = self.instance.take().map(|i| i.cause);
        // Its frames were never written: what the host still holds for it is dropped.
        self.actions.retain(|a| !targets(a, instance));
        let why = format!("could not restart the plugin: {error}");
        // A fresh instance that never started is not counted.
        match cause {
            Some(Cause::Restart) => self.report.restarts = self.report.restarts.saturating_sub(1),
            Some(Cause::Recycle) => self.report.recycles = self.report.recycles.saturating_sub(1),
            Some(Cause::First) | None => {}
        }
        // The frames meant for it: forwarded ones (when there was no handshake to replay)
        // and held ones.
        let mut forwarded: Vec<(String, Pending)> = self.pending.drain().collect();
        forwarded.sort_by_key(|(_, p)| p.since);
        for (key, p) in forwarded {
            let incident = Incident {
                request: key,
                method: p.method,
                reason: why.clone(),
                exit: None,
                restarting: false,
            };
            self.fail(incident, &[]);
        }
        if let Some(r) = self.restoring.take() {
            for held in r.held {
                self.fail_frame(&held, &why, None, &[], false);
            }
        }
        self.report.stopped = true;
        self.done = true;
    }

    /// Time passed: a fresh instance over its start timeout is stopped; a request over its
    /// timeout is cancelled and answered (the rules permitting), or stops the instance; an
    /// instance that stayed deaf after such a cancellation is stopped, and replaced.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.done || self.poll_timeout().is_none_or(|due| now < due) {
            return;
        }
        let grace = self.budgets.grace;
        let inst = self.instance.as_mut().expect("poll_timeout saw it");
        let instance = inst.id;
        if inst.draining_until.is_some() {
            inst.killing = true;
            self.actions.push_back(Action::Kill { instance });
            return;
        }
        if let (Some(limit), false, Some(since)) =
            (self.budgets.start_timeout, inst.ready, inst.starting_since)
            && now >= since + limit
        {
            inst.start_timed_out = Some(limit);
            inst.killing = true;
            self.actions.push_back(Action::Kill { instance });
            return;
        }
        let Some(limit) = self.budgets.request_timeout else {
            return;
        };
        let Some((key, _)) = self
            .pending
            .iter()
            .filter(|(_, p)| p.timed)
            .min_by_key(|(_, p)| p.since)
        else {
            return;
        };
        let key = key.clone();
        let reason = format!("request {key} timed out after {limit:?} (request timeout)");
        let cancel = match (self.budgets.poison, &self.restoring) {
            (false, None) => self.rules.cancel(&key, &reason),
            _ => None,
        };
        let probe = cancel
            .as_ref()
            .and_then(|_| self.rules.probe(None, self.probes));
        let (Some(cancel), Some((probe, probe_key))) = (cancel, probe) else {
            let inst = self.instance.as_mut().expect("poll_timeout saw it");
            inst.timed_out = Some((key, limit));
            inst.killing = true;
            self.actions.push_back(Action::Kill { instance });
            return;
        };
        // Tell the plugin, answer the engine now, then make sure the plugin still listens:
        // engine frames wait until it answers the probe, or a fresh instance takes over.
        let p = self
            .pending
            .remove(&key)
            .expect("the oldest pending request");
        self.answered_here.insert(key.clone());
        self.actions.push_back(Action::ToPlugin {
            instance,
            frame: cancel,
        });
        let incident = Incident {
            request: key.clone(),
            method: p.method,
            reason,
            exit: None,
            restarting: false,
        };
        self.fail(incident, &[]);
        self.probe_first((probe, probe_key), VecDeque::new());
        let inst = self.instance.as_mut().expect("poll_timeout saw it");
        inst.timed_out = Some((key, limit));
        inst.draining_until = Some(now + grace);
        self.advance(now);
    }

    /// Before anything else reaches the instance, send it `probe`, whose answer is the
    /// supervisor's; `held` engine frames, and any that come meanwhile, wait for that answer.
    /// The caller then [`advance`](Self::advance)s.
    fn probe_first(&mut self, (probe, key): (Vec<u8>, String), held: VecDeque<Vec<u8>>) {
        self.probes += 1;
        self.restoring = Some(Restoring {
            to_send: VecDeque::from([(probe, Some(key))]),
            awaiting: None,
            plugin_items: 0,
            held,
        });
    }

    /// A request (`timed`) or stream forwarded to the current instance.
    fn add_pending(&mut self, key: String, method: Option<String>, since: Instant, timed: bool) {
        self.report.requests += 1;
        self.pending.insert(
            key,
            Pending {
                method,
                since,
                timed,
            },
        );
    }

    /// The current instance stopped or was retired: the tokens it handed out can no longer be
    /// used.
    fn retire_tokens(&mut self) {
        for token in self.issued.drain() {
            if self.stale.len() == MAX_STALE_TOKENS {
                self.stale.pop_front();
            }
            self.stale.push_back(token);
        }
    }

    fn current(&self) -> Option<InstanceId> {
        self.instance.as_ref().map(|i| i.id)
    }

    fn start(&mut self, cause: Cause) {
        let instance = InstanceId(self.next_id);
        self.next_id += 1;
        self.instance = Some(Live {
            id: instance,
            answered: 0,
            baseline: None,
            timed_out: None,
            measuring: None,
            cause,
            ready: false,
            starting_since: None,
            start_timed_out: None,
            draining_until: None,
            killing: false,
        });
        self.actions.push_back(Action::Start { instance, cause });
    }

    /// What a fresh instance must be told and must say before it serves the engine.
    fn restoring(&self) -> Restoring {
        Restoring {
            to_send: self.replay.iter().cloned().collect(),
            awaiting: None,
            plugin_items: self.answers.len() + usize::from(self.hello_seen),
            held: VecDeque::new(),
        }
    }

    /// Send handshake frames until one needs an answer; once the instance is restored, forward
    /// what was held back.
    fn advance(&mut self, now: Instant) {
        let Some(instance) = self.current() else {
            return;
        };
        let Some(r) = self.restoring.as_mut() else {
            return;
        };
        while r.awaiting.is_none() {
            let Some((frame, awaits)) = r.to_send.pop_front() else {
                break;
            };
            if let Some(key) = &awaits {
                self.swallow.insert(key.clone());
                if let Some(inst) = self.instance.as_mut().filter(|i| !i.ready) {
                    inst.starting_since.get_or_insert(now);
                }
            }
            r.awaiting = awaits;
            self.actions.push_back(Action::ToPlugin { instance, frame });
        }
        if r.awaiting.is_some() || r.plugin_items > 0 {
            return;
        }
        let held = std::mem::take(&mut r.held);
        self.restoring = None;
        self.failed_restores = 0;
        if let Some(inst) = self
            .instance
            .as_mut()
            .filter(|i| i.draining_until.is_some())
        {
            // It answered the probe: it still listens, and keeps serving.
            inst.draining_until = None;
            inst.timed_out = None;
        }
        for frame in held {
            self.forward(frame, now);
        }
        if self.close_when_restored {
            self.close_when_restored = false;
            self.actions.push_back(Action::CloseStdin { instance });
        }
    }

    /// Forward one engine frame to the current instance, noting requests and handshake.
    fn forward(&mut self, frame: Vec<u8>, now: Instant) {
        let Some(instance) = self.current() else {
            return;
        };
        match self.rules.classify_engine(&frame) {
            FromEngine::Request { key, method } => {
                if let Some(token) = self.rules.carried_token(&frame)
                    && self.stale.contains(&token)
                {
                    self.report.requests += 1;
                    let incident = Incident {
                        request: key,
                        method,
                        reason: self.rules.stale_token_reason().to_owned(),
                        exit: None,
                        restarting: false,
                    };
                    self.fail(incident, &[]);
                    return;
                }
                let ready = self.instance.as_ref().is_some_and(|i| i.ready);
                if !ready
                    && self.restoring.is_none()
                    && let Some((probe, probe_key)) = self.rules.probe(Some(&frame), self.probes)
                {
                    // Its start-up is not this request's: the request waits for the probe's
                    // answer, under the start timeout.
                    self.probe_first((probe, probe_key), VecDeque::from([frame]));
                    self.advance(now);
                    return;
                }
                self.add_pending(key, method, now, true);
                self.actions.push_back(Action::BeginRequest { instance });
            }
            FromEngine::Stream { key, method } => self.add_pending(key, method, now, false),
            FromEngine::Handshake { awaits } => {
                let method = method_of(&frame);
                if let Some(key) = &awaits {
                    self.handshake_pending.push((key.clone(), method.clone()));
                    if let Some(inst) = self.instance.as_mut().filter(|i| !i.ready) {
                        inst.starting_since.get_or_insert(now);
                    }
                }
                // A handshake request sent again (a client probing twice) replaces the earlier
                // one: a fresh instance is told the latest.
                if method.is_some() {
                    self.replay.retain(|(f, _)| method_of(f) != method);
                }
                self.replay.push((frame.clone(), awaits));
            }
            FromEngine::Answer { key } => match self.asked.remove(&key) {
                Some(method) => {
                    self.answers.insert(method, frame.clone());
                }
                None if self.early.len() < MAX_EARLY => {
                    self.early.insert(key, frame.clone());
                }
                None => {}
            },
            FromEngine::Cancelled { key } => {
                self.pending.remove(&key);
            }
            FromEngine::Other => {}
        }
        self.actions.push_back(Action::ToPlugin { instance, frame });
    }

    /// Nothing pending, nothing being restored, the engine still there: when recycling may
    /// happen.
    fn between_requests(&self) -> bool {
        self.pending.is_empty() && self.restoring.is_none() && self.engine_open
    }

    /// Retire the instance for a fresh one if one of the recycling rules says so (right after
    /// an answer, with nothing else pending).
    fn maybe_recycle(&mut self, used: Option<u64>, now: Instant) {
        let Some(inst) = &self.instance else {
            return;
        };
        if !self.between_requests() {
            return;
        }
        if !self.budgets.recycle.due(inst.answered, used, inst.baseline) {
            return;
        }
        let old = inst.id;
        self.retire_tokens();
        self.actions.push_back(Action::Retire {
            instance: old,
            grace: self.budgets.grace,
        });
        self.report.recycles += 1;
        self.start(Cause::Recycle);
        self.restoring = Some(self.restoring());
        self.advance(now);
    }

    /// Fail one engine frame that never reached a plugin (if it is a request).
    fn fail_frame(
        &mut self,
        frame: &[u8],
        reason: &str,
        exit: Option<&Exit>,
        tail: &[String],
        restarting: bool,
    ) {
        if let Some((key, method)) = request_of(self.rules.classify_engine(frame)) {
            self.report.requests += 1;
            let incident = Incident {
                request: key,
                method,
                reason: reason.to_owned(),
                exit: exit.cloned(),
                restarting,
            };
            self.fail(incident, tail);
        }
    }

    /// Answer a request the plugin will not answer with the protocol's error, and record it.
    fn fail(&mut self, incident: Incident, tail: &[String]) {
        let stopped = Stopped {
            reason: incident.reason.clone(),
            exit: incident.exit.clone(),
            stderr_tail: tail.to_vec(),
            violation: false,
        };
        let frame =
            self.rules
                .stopped_answer(&incident.request, incident.method.as_deref(), &stopped);
        self.report.incidents.push(incident.clone());
        self.actions.push_back(Action::Incident(incident));
        self.actions.push_back(Action::ToEngine(frame));
    }
}

/// The key and method of a frame that expects an answer: a request or a stream.
fn request_of(class: FromEngine) -> Option<(String, Option<String>)> {
    match class {
        FromEngine::Request { key, method } | FromEngine::Stream { key, method } => {
            Some((key, method))
        }
        _ => None,
    }
}

/// Whether `action` is about `instance`.
fn targets(action: &Action, instance: InstanceId) -> bool {
    match action {
        Action::Start { instance: i, .. }
        | Action::BeginRequest { instance: i }
        | Action::ToPlugin { instance: i, .. }
        | Action::MeasureMemory { instance: i }
        | Action::Kill { instance: i }
        | Action::CloseStdin { instance: i }
        | Action::Retire { instance: i, .. } => *i == instance,
        Action::ToEngine(_) | Action::Incident(_) | Action::Refused { .. } => false,
    }
}

/// Replace the id of a recorded answer with `id`.
fn with_id(answer: &[u8], id: &Value) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(answer).ok()?;
    v.as_object_mut()?.insert("id".into(), id.clone());
    serde_json::to_vec(&v).ok()
}

/// The reason a request failed, from how its instance ended.
fn describe(exit: &Exit, fuel_per_request: Option<u64>) -> String {
    match (exit, fuel_per_request) {
        (Exit::OutOfFuel { limit }, Some(_)) => {
            format!("request ran out of fuel (limit {limit} per request)")
        }
        (Exit::Exited(code), _) => format!("plugin exited with status {code} before answering"),
        (other, _) => other.to_string(),
    }
}
