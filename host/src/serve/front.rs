//! The endpoint's requests: the checks every request passes before anything reaches an
//! instance, and the routes.
//!
//! ```text
//!  GET /healthz, GET /metrics                     (Host checked)
//!  GET /.well-known/oauth-protected-resource[/mcp]   (with --jwks: RFC 9728 metadata)
//!  /mcp: Host ─► Origin ─► token ─► rate ─► method
//!     POST   body ≤ cap ─► mcp::http::classify ─► Initialize  ─► a new instance, Mcp-Session-Id
//!                                             ├─► InSession   ─► the session's instance (404)
//!                                             └─► Stateless   ─► the principal's instance
//!            a request's answer: SSE (Accept: text/event-stream) or JSON; else 202
//!     GET    the session's stream (2025); 405 without a session
//!     DELETE ends the session (2025); 405 without a session
//! ```

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use sandpipe_proto::jsonrpc::INTERNAL_ERROR;
use sandpipe_proto::mcp::http::{self as rules, Heads, Post, Refusal};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use super::body::{Body, Event};
use super::gate::{Auth, Hosts, Rates};
use super::instance::{Era, Instance};
use super::metrics::{Metrics, Refusal as Why};
use super::{Launch, ServeOptions};

/// The endpoint's path.
pub(super) const ENDPOINT: &str = "/mcp";

/// What the endpoint holds: its options, its instances, its counters.
pub(super) struct State {
    pub(super) options: ServeOptions,
    pub(super) launch: Arc<Launch>,
    hosts: Hosts,
    pub(super) metrics: Arc<Metrics>,
    /// 2025 sessions by id.
    sessions: Mutex<HashMap<String, Arc<Instance>>>,
    /// 2026-07-28 instances by owner: the principal, or the connection without tokens.
    pools: Mutex<HashMap<String, Arc<Instance>>>,
    /// Instances started for nobody yet (`--warm`), the next client's first request's.
    warm: Mutex<Vec<Arc<Instance>>>,
    /// Warm instances that ended unclaimed since a client last started or claimed one.
    warm_deaths: AtomicUsize,
    rates: Option<Mutex<Rates>>,
    next_instance: AtomicU64,
    next_stream: AtomicU64,
    in_flight: AtomicUsize,
    drained: Notify,
    stopping: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl State {
    pub(super) fn new(options: ServeOptions, launch: Launch, bound: std::net::SocketAddr) -> Self {
        let hosts = Hosts::new(bound, &options.allow_hosts, &options.allow_origins);
        let rates = options.rate_per_minute.map(|n| Mutex::new(Rates::new(n)));
        State {
            options,
            launch: Arc::new(launch),
            hosts,
            metrics: Arc::default(),
            sessions: Mutex::default(),
            pools: Mutex::default(),
            warm: Mutex::default(),
            warm_deaths: AtomicUsize::new(0),
            rates,
            next_instance: AtomicU64::new(0),
            next_stream: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            drained: Notify::new(),
            stopping: AtomicBool::new(false),
        }
    }

    /// Refuse new requests from now on (503).
    pub(super) fn stop_accepting(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Resolves once no request waits for an answer.
    pub(super) async fn drained(&self) {
        loop {
            let notified = self.drained.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    fn request_done(&self) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.drained.notify_waiters();
        }
    }

    /// Every instance, taken out of the tables.
    pub(super) fn take_all(&self) -> Vec<Arc<Instance>> {
        let mut all: Vec<Arc<Instance>> = lock(&self.sessions).drain().map(|(_, i)| i).collect();
        all.extend(lock(&self.pools).drain().map(|(_, i)| i));
        all.append(&mut lock(&self.warm));
        all
    }

    /// Start warm instances until `--warm` of them wait (none once stopping). A warm instance
    /// counts against nobody's `--max-instances`, and is not idle before it is claimed.
    pub(super) fn refill(self: &Arc<Self>) {
        loop {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            {
                let mut warm = lock(&self.warm);
                warm.retain(|i| !i.has_ended());
                if warm.len() >= self.options.warm {
                    return;
                }
            }
            let instance = self.instance(None);
            lock(&self.warm).push(instance);
        }
    }

    /// The instances idle for longer than the idle timeout, taken out of the tables.
    pub(super) fn take_idle(&self, now: Instant) -> Vec<Arc<Instance>> {
        let limit = self.options.idle_timeout;
        let idle = |i: &Arc<Instance>| {
            i.has_ended()
                || i.idle_since()
                    .is_some_and(|t| now.saturating_duration_since(t) >= limit)
        };
        let mut out = Vec::new();
        lock(&self.sessions).retain(|_, i| {
            let keep = !idle(i);
            if !keep {
                out.push(i.clone());
            }
            keep
        });
        lock(&self.pools).retain(|_, i| {
            let keep = !idle(i);
            if !keep {
                out.push(i.clone());
            }
            keep
        });
        out
    }

    /// The connection `conn` closed: without tokens its 2026-07-28 instance was its own.
    pub(super) fn connection_closed(&self, conn: u64) -> Option<Arc<Instance>> {
        if self.options.auth.identifies() || self.options.share {
            return None;
        }
        lock(&self.pools).remove(&connection_key(conn))
    }

    fn instances_of(&self, principal: &str) -> usize {
        let live = |i: &&Arc<Instance>| i.serves(principal) && !i.has_ended();
        lock(&self.sessions).values().filter(live).count()
            + lock(&self.pools).values().filter(live).count()
    }

    /// An instance for `principal`, unless it already has its most (`None`; see
    /// [`State::too_many`]): a warm one if one waits (and another is started in its place),
    /// else a new one.
    fn start(self: &Arc<Self>, principal: &str, era: Era) -> Option<Arc<Instance>> {
        if self.instances_of(principal) >= self.options.max_instances {
            return None;
        }
        loop {
            let Some(warm) = lock(&self.warm).pop() else {
                break;
            };
            if !warm.has_ended() && warm.claim(principal, era) {
                self.warm_deaths.store(0, Ordering::SeqCst);
                self.refill();
                return Some(warm);
            }
        }
        let instance = self.instance(Some((principal, era)));
        // A client's request started a server: a pool that stopped being refilled (below)
        // gets its chances again.
        if self.options.warm > 0 && self.warm_deaths.swap(0, Ordering::SeqCst) > MAX_WARM_DEATHS {
            self.refill();
        }
        Some(instance)
    }

    /// Warm instance `number` ended before any client claimed it (`why`): another starts in
    /// its place, so the pool keeps `--warm` instances; but not after [`MAX_WARM_DEATHS`] of
    /// them in a row, so a server that cannot stay up is not restarted in a loop. Then none
    /// is kept warm until a client's request starts an instance.
    fn warm_died(self: &Arc<Self>, number: u64, why: &str) {
        let deaths = self.warm_deaths.fetch_add(1, Ordering::SeqCst) + 1;
        if deaths > MAX_WARM_DEATHS {
            if deaths == MAX_WARM_DEATHS + 1 {
                tracing::warn!(
                    instance = number,
                    "warm instance ended before any client claimed it ({why}); {MAX_WARM_DEATHS} \
                     in a row did, so none is kept warm until a client's request starts an instance"
                );
            }
            return;
        }
        tracing::warn!(
            instance = number,
            "warm instance ended before any client claimed it ({why}); another starts in its place"
        );
        self.refill();
    }

    /// A new instance for `owner`, or warm.
    fn instance(self: &Arc<Self>, owner: Option<(&str, Era)>) -> Arc<Instance> {
        let number = self.next_instance.fetch_add(1, Ordering::SeqCst) + 1;
        let weak = Arc::downgrade(self);
        let on_gone = Box::new(move |i: &Instance| {
            // An instance that ended by itself (a crash without --restart) leaves its table,
            // so the client's next request gets a fresh one (2026) or a 404 (2025).
            if let Some(state) = weak.upgrade() {
                let number = i.number;
                lock(&state.sessions).retain(|_, s| s.number != number);
                lock(&state.pools).retain(|_, s| s.number != number);
                let was_warm = {
                    let mut warm = lock(&state.warm);
                    let before = warm.len();
                    warm.retain(|s| s.number != number);
                    warm.len() < before
                };
                if was_warm {
                    state.warm_died(number, &i.why_ended());
                }
            }
        });
        Instance::start(&self.launch, number, owner, self.metrics.clone(), on_gone)
    }

    /// The answer when `principal` already holds its most instances.
    fn too_many(&self, principal: &str) -> Response<Body> {
        self.metrics.refused(Why::Instances);
        let refusal = Refusal::new(
            429,
            INTERNAL_ERROR,
            format!(
                "{principal} already has {} instances, the most --max-instances allows",
                self.options.max_instances
            ),
        );
        rpc_refusal(&refusal)
    }

    /// How many instances have started since start-up.
    pub(super) fn instances_started(&self) -> u64 {
        self.next_instance.load(Ordering::SeqCst)
    }

    fn refuse(&self, why: Why, status: StatusCode, text: &str) -> Response<Body> {
        self.metrics.refused(why);
        plain(status, text)
    }
}

/// How many warm instances may end unclaimed in a row before the pool stops replacing them.
const MAX_WARM_DEATHS: usize = 3;

/// The owner, and the pool's key, of the one instance `--share` serves every 2026-07-28
/// request with (what audit lines name; a token file's principal cannot be it: it has a space).
const SHARED: &str = "(every principal)";

fn connection_key(conn: u64) -> String {
    format!("connection {conn}")
}

/// A plain-text response.
fn plain(status: StatusCode, text: &str) -> Response<Body> {
    let mut r = Response::new(Body::full(format!("{text}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A JSON response.
fn json_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Body::full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// The MCP rules' refusal as its status and JSON-RPC error.
fn rpc_refusal(refusal: &Refusal) -> Response<Body> {
    let status = StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::BAD_REQUEST);
    json_response(status, refusal.body())
}

fn text_header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `Mcp-Name` as sent: printable ASCII verbatim, anything else as `=?base64?…?=`.
fn decode_name(value: &str) -> Option<String> {
    let Some(payload) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Some(value.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// A session id nobody can guess: 128 bits from the kernel.
fn session_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Answer one request on connection `conn`.
pub(super) async fn handle<B>(state: Arc<State>, conn: u64, req: Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let headers = req.headers();
    if !state.hosts.host_allowed(text_header(headers, "host")) {
        return state.refuse(
            Why::Host,
            StatusCode::FORBIDDEN,
            "forbidden: this Host is not the endpoint's",
        );
    }
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => return plain(StatusCode::OK, "ok"),
        (&Method::GET, "/metrics") => {
            let mut r = Response::new(Body::full(state.metrics.render(lock(&state.warm).len())));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            return r;
        }
        (&Method::GET, path) if path.starts_with(super::jwt::METADATA_PATH) => {
            return match &state.options.auth {
                Auth::Jwt(jwt) => {
                    let mut r = Response::new(Body::full(jwt.metadata().to_string()));
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        header::HeaderValue::from_static("application/json"),
                    );
                    r
                }
                _ => state.refuse(
                    Why::Route,
                    StatusCode::NOT_FOUND,
                    "not found: no --jwks, so no protected resource metadata",
                ),
            };
        }
        (_, ENDPOINT) => {}
        _ => {
            return state.refuse(
                Why::Route,
                StatusCode::NOT_FOUND,
                "not found: the endpoint is /mcp",
            );
        }
    }
    if !state.hosts.origin_allowed(text_header(headers, "origin")) {
        return state.refuse(
            Why::Origin,
            StatusCode::FORBIDDEN,
            "forbidden: this Origin may not use the endpoint",
        );
    }
    let principal = match state
        .options
        .auth
        .principal(text_header(headers, "authorization"))
    {
        Ok(p) => p,
        Err(refused) => {
            let mut r = state.refuse(
                Why::Auth,
                StatusCode::UNAUTHORIZED,
                "unauthorized: a bearer token is needed",
            );
            if let Ok(v) = header::HeaderValue::from_str(&state.options.auth.challenge(&refused)) {
                r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
            return r;
        }
    };
    if state.stopping.load(Ordering::SeqCst) {
        return state.refuse(
            Why::Stopping,
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down",
        );
    }
    if let Some(rates) = &state.rates
        && let Err(wait) = lock(rates).take(&principal, Instant::now())
    {
        let mut r = state.refuse(
            Why::Rate,
            StatusCode::TOO_MANY_REQUESTS,
            "too many requests: over --rate-limit for this principal",
        );
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        if let Ok(v) = header::HeaderValue::from_str(&secs.max(1).to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return r;
    }
    let session = text_header(headers, rules::SESSION_HEADER).map(str::to_owned);
    match req.method().clone() {
        Method::POST => post(&state, conn, &principal, req).await,
        Method::GET | Method::DELETE if session.is_none() => {
            let mut r = state.refuse(
                Why::Route,
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed: without Mcp-Session-Id the endpoint takes POST only",
            );
            r.headers_mut()
                .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
            r
        }
        Method::GET => {
            let Some(instance) = session_of(&state, session.as_deref(), &principal) else {
                return state.refuse(Why::Session, StatusCode::NOT_FOUND, "no such session");
            };
            let (tx, rx) = mpsc::unbounded_channel::<Event>();
            if instance.listen(tx).is_err() {
                return state.refuse(Why::Session, StatusCode::NOT_FOUND, "the session has ended");
            }
            event_stream(Body::events(rx, Box::new(|_| {})))
        }
        Method::DELETE => {
            let Some(id) = session else {
                return plain(StatusCode::NOT_FOUND, "no such session");
            };
            let removed = {
                let mut sessions = lock(&state.sessions);
                match sessions.get(&id) {
                    Some(i) if i.serves(&principal) => sessions.remove(&id),
                    _ => None,
                }
            };
            let Some(instance) = removed else {
                return state.refuse(Why::Session, StatusCode::NOT_FOUND, "no such session");
            };
            instance
                .end("the client deleted its session", state.options.grace)
                .await;
            plain(StatusCode::OK, "session ended")
        }
        _ => {
            let mut r = state.refuse(
                Why::Route,
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed",
            );
            r.headers_mut().insert(
                header::ALLOW,
                header::HeaderValue::from_static("POST, GET, DELETE"),
            );
            r
        }
    }
}

/// The live session `id`, if `principal` holds it (another principal's is as unknown).
fn session_of(state: &State, id: Option<&str>, principal: &str) -> Option<Arc<Instance>> {
    let sessions = lock(&state.sessions);
    sessions
        .get(id?)
        .filter(|i| i.serves(principal) && !i.has_ended())
        .cloned()
}

fn event_stream(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    r
}

async fn post<B>(state: &Arc<State>, conn: u64, principal: &str, req: Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let max = state.options.max_body;
    let too_large = || {
        let text = format!("payload too large: the body exceeds --max-body {max} bytes");
        state.refuse(Why::BodySize, StatusCode::PAYLOAD_TOO_LARGE, &text)
    };
    let declared = text_header(req.headers(), "content-length").and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return too_large();
    }
    let sse = text_header(req.headers(), "accept").is_some_and(|a| a.contains("text/event-stream"));
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, max).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(e) => {
            return state.refuse(
                Why::Protocol,
                StatusCode::BAD_REQUEST,
                &format!("reading the body: {e}"),
            );
        }
    };
    let name = text_header(&parts.headers, rules::NAME_HEADER).and_then(decode_name);
    let heads = Heads {
        version: text_header(&parts.headers, rules::VERSION_HEADER),
        method: text_header(&parts.headers, rules::METHOD_HEADER),
        name: name.as_deref(),
        session: text_header(&parts.headers, rules::SESSION_HEADER),
    };
    let (post, message) = match rules::classify(&heads, &body) {
        Ok(c) => c,
        Err(refusal) => {
            state.metrics.refused(Why::Protocol);
            return rpc_refusal(&refusal);
        }
    };
    match post {
        Post::Initialize => {
            let Ok(id) = session_id() else {
                return plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "no random session id to be had",
                );
            };
            let Some(instance) = state.start(principal, Era::Session) else {
                return state.too_many(principal);
            };
            lock(&state.sessions).insert(id.clone(), instance.clone());
            let mut r = forward(state, &instance, message, true, sse).await;
            if let Ok(v) = header::HeaderValue::from_str(&id) {
                r.headers_mut().insert(rules::SESSION_HEADER, v);
            }
            r
        }
        Post::InSession { session, request } => {
            let Some(instance) = session_of(state, Some(&session), principal) else {
                return state.refuse(Why::Session, StatusCode::NOT_FOUND, "no such session");
            };
            forward(state, &instance, message, request, sse).await
        }
        Post::Stateless { request, .. } => {
            let (key, owner) = if state.options.share {
                (SHARED.to_owned(), SHARED)
            } else if state.options.auth.identifies() {
                (principal.to_owned(), principal)
            } else {
                (connection_key(conn), principal)
            };
            let existing = lock(&state.pools)
                .get(&key)
                .filter(|i| !i.has_ended())
                .cloned();
            let instance = match existing {
                Some(i) => i,
                None => match state.start(owner, Era::Stateless) {
                    Some(i) => {
                        lock(&state.pools).insert(key, i.clone());
                        i
                    }
                    None => return state.too_many(owner),
                },
            };
            forward(state, &instance, message, request, sse).await
        }
    }
}

/// Send `message` to `instance`; a request's answer as an event stream (`sse`) or JSON.
async fn forward(
    state: &Arc<State>,
    instance: &Arc<Instance>,
    message: Value,
    request: bool,
    sse: bool,
) -> Response<Body> {
    let stream = state.next_stream.fetch_add(1, Ordering::SeqCst) + 1;
    let method = message["method"].as_str().unwrap_or("response").to_owned();
    if !request {
        return match instance.send(stream, message, None).await {
            Ok(()) => {
                state.metrics.forwarded(&method);
                let mut r = Response::new(Body::empty());
                *r.status_mut() = StatusCode::ACCEPTED;
                r
            }
            Err(_) => state.refuse(Why::Session, StatusCode::NOT_FOUND, "the session has ended"),
        };
    }
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    state.in_flight.fetch_add(1, Ordering::SeqCst);
    let done = InFlight {
        state: state.clone(),
        instance: instance.clone(),
        stream,
        finished: false,
    };
    if let Err(ended) = instance.send(stream, message, Some(tx)).await {
        drop(done);
        let refusal = Refusal {
            id,
            ..Refusal::new(
                500,
                INTERNAL_ERROR,
                format!("the server instance ended: {}", ended.0),
            )
        };
        return rpc_refusal(&refusal);
    }
    if sse {
        let mut done = done;
        let on_end = Box::new(move |finished: bool| {
            done.finished = finished;
            drop(done);
        });
        return event_stream(Body::events(rx, on_end));
    }
    // JSON: the answer alone; what the server sends about the request on the way is left out,
    // as a client that asked for JSON cannot take it.
    let mut done = done;
    while let Some((message, last)) = rx.recv().await {
        if last {
            done.finished = true;
            return json_response(
                StatusCode::OK,
                serde_json::to_vec(&message).unwrap_or_default(),
            );
        }
    }
    let error = json!({"jsonrpc": "2.0", "id": id,
        "error": {"code": INTERNAL_ERROR, "message": "the server instance ended before answering"}});
    json_response(
        StatusCode::OK,
        serde_json::to_vec(&error).unwrap_or_default(),
    )
}

/// A request waiting for its answer: counted for the drain, and abandoned (the server told to
/// cancel it) if it goes away unanswered.
struct InFlight {
    state: Arc<State>,
    instance: Arc<Instance>,
    stream: u64,
    finished: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.finished {
            self.instance.abandon(self.stream);
        }
        self.state.request_done();
    }
}

/// How long an idle instance is kept: checked this often.
pub(super) fn idle_tick(idle: Duration) -> Duration {
    (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5))
}
