//! `sandpipe serve`: one MCP Streamable HTTP endpoint (`/mcp`) in front of sandboxed
//! instances of one MCP server, none of them ever serving two clients.
//!
//! ```text
//!  TCP ─► hyper (HTTP/1.1) ─► front: Host, Origin, token, rate, body cap ─► mcp::http rules
//!     2025 session (initialize, Mcp-Session-Id)  ─► its own instance
//!     2026-07-28 request (_meta envelope)        ─► the instance of its principal
//!                                                   (without tokens: of its connection)
//!  instance = Supervisor (as `run --protocol mcp`: budgets, restarts, tool filter, audit,
//!             recording) over the server, with the HTTP requests as its engine
//!  idle (--idle-timeout), DELETE, the connection's end (2026 without tokens), a stop:
//!     the instance's stdin closes, it is killed after the grace, its processes reaped
//! ```
//!
//! The MCP rules of the transport (what a POST is, the mirrored headers, the ids) are
//! `sandpipe_proto::mcp::http`'s; this module moves bytes, keeps the instances and counts.
//! It does not do TLS (put a proxy in front), HTTP/2, or resumable streams (`Last-Event-ID`).

mod body;
mod front;
pub mod gate;
mod instance;
pub mod jwt;
pub mod metrics;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use gate::{Auth, Tokens};
pub use jwt::AccessTokens;

use crate::error::ServeError;
use crate::run::record::{RecordHeader, Recorder};
use crate::speak::supervise::Budgets;
use crate::{Host, Plugin, Policy, SessionOptions};

/// The largest request body taken unless [`ServeOptions::max_body`] says otherwise: 4 MiB.
pub const DEFAULT_MAX_BODY: usize = 4 << 20;
/// How long an instance may sit idle unless [`ServeOptions::idle_timeout`] says otherwise.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a request head may take to arrive unless [`ServeOptions::header_timeout`] says
/// otherwise: 10 s.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How many instances a principal may hold at once unless [`ServeOptions::max_instances`]
/// says otherwise.
pub const DEFAULT_MAX_INSTANCES: usize = 16;

/// How the endpoint listens and whom it lets in. [`ServeOptions::new`]'s defaults:
/// - no authentication: every client is `anonymous`, and only a loopback address may be bound;
/// - `Host` must be the bound address (or, on loopback, `localhost`), `Origin` absent or the
///   endpoint's own;
/// - bodies up to [`DEFAULT_MAX_BODY`], no request rate limit, [`DEFAULT_MAX_INSTANCES`]
///   instances a principal, [`DEFAULT_IDLE_TIMEOUT`], [`DEFAULT_HEADER_TIMEOUT`], a 2 s grace,
///   no recordings.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeOptions {
    /// The address to bind (port 0: any free port; [`Server::local_addr`] says which).
    pub listen: SocketAddr,
    /// More `Host` names the endpoint answers to (`NAME` or `NAME:PORT`).
    pub allow_hosts: Vec<String>,
    /// More `Origin`s allowed (`scheme://host[:port]`).
    pub allow_origins: Vec<String>,
    /// Who a request is from: nobody asked (loopback only), bearer tokens, or JWTs.
    pub auth: Auth,
    /// The largest request body, in bytes (413 past it).
    pub max_body: usize,
    /// Requests per minute per principal (429 with `Retry-After` past it).
    pub rate_per_minute: Option<u32>,
    /// Instances per principal at once (429 past it).
    pub max_instances: usize,
    /// One instance for every 2026-07-28 request of every client (`--share`), for a server
    /// that keeps no state between requests; 2025 sessions keep their own.
    pub share: bool,
    /// How long an instance may sit with no request before it is ended.
    pub idle_timeout: Duration,
    /// How long a connection may take to send a whole request head (the request line and
    /// headers) once the endpoint waits for one, a kept-alive connection's next one included;
    /// past it the connection is closed.
    pub header_timeout: Duration,
    /// How long an ending instance has to exit after its stdin closes, and how long a stop
    /// waits for requests in flight.
    pub grace: Duration,
    /// How many instances wait started for nobody (`--warm`): a new client's first request
    /// (a 2025 `initialize`, a principal's first 2026-07-28 request) takes one instead of
    /// waiting for a server to start, and another is started in its place. 0: none.
    pub warm: usize,
}

impl ServeOptions {
    /// The defaults above, listening on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        ServeOptions {
            listen,
            allow_hosts: Vec::new(),
            allow_origins: Vec::new(),
            auth: Auth::None,
            max_body: DEFAULT_MAX_BODY,
            rate_per_minute: None,
            max_instances: DEFAULT_MAX_INSTANCES,
            share: false,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            grace: Duration::from_secs(2),
            warm: 0,
        }
    }

    /// Why an endpoint with these options, and principals with these tool filters of their
    /// own, must not start: an address off loopback that asks nobody who they are, or one
    /// instance (`--share`) or warm instances (`--warm`) that cannot know a principal's
    /// filter. [`Server::bind`] checks this; `inspect` shows it.
    pub fn refusal(
        &self,
        principal_tools: &std::collections::BTreeMap<String, sandpipe_proto::mcp::ToolFilter>,
    ) -> Result<(), ServeError> {
        if !self.listen.ip().is_loopback() && !self.auth.identifies() {
            return Err(ServeError::OpenWithoutAuth { addr: self.listen });
        }
        if principal_tools.is_empty() {
            return Ok(());
        }
        if self.share {
            return Err(ServeError::Conflict(
                "--share and [principals.NAME.tools]: a shared instance serves every principal, so it cannot hide a tool from one of them".into(),
            ));
        }
        if self.warm > 0 {
            return Err(ServeError::Conflict(
                "--warm and [principals.NAME.tools]: a warm instance starts before its principal is known, so it cannot start with that principal's tools".into(),
            ));
        }
        Ok(())
    }
}

/// What each instance is: the server, its policy and session options (as `run --protocol mcp`
/// starts it), the supervisor's budgets, and where its transcript goes.
#[derive(Debug)]
#[non_exhaustive]
pub struct Launch {
    /// The host that starts instances.
    pub host: Arc<Host>,
    /// The MCP server.
    pub plugin: Plugin,
    /// Its policy (each instance's audit lines name its principal).
    pub policy: Policy,
    /// Its session options (the framing is MCP's).
    pub options: SessionOptions,
    /// The supervisor's budgets.
    pub budgets: Budgets,
    /// Write one transcript per instance here (`instance-N.transcript`).
    pub record_dir: Option<PathBuf>,
    /// The largest frame, for the transcripts' headers.
    pub max_frame: u64,
    /// The largest transcript (`--max-record`), in bytes [default: `DEFAULT_MAX_RECORD`].
    pub max_record: Option<u64>,
    /// Each principal's own tool filter, narrowing the policy's for its instances.
    pub principal_tools: std::collections::BTreeMap<String, sandpipe_proto::mcp::ToolFilter>,
}

impl Launch {
    /// What an instance is.
    pub fn new(
        host: Arc<Host>,
        plugin: Plugin,
        policy: Policy,
        options: SessionOptions,
        budgets: Budgets,
    ) -> Self {
        Launch {
            host,
            plugin,
            policy,
            options,
            budgets,
            record_dir: None,
            max_frame: crate::policy::sections::DEFAULT_MAX_FRAME,
            max_record: None,
            principal_tools: std::collections::BTreeMap::new(),
        }
    }

    /// Give principals their own tool filters (a policy file's `[principals.NAME.tools]`): a
    /// principal's instances see only what both its filter and the policy's let through.
    pub fn principal_tools(
        mut self,
        filters: std::collections::BTreeMap<String, sandpipe_proto::mcp::ToolFilter>,
    ) -> Self {
        self.principal_tools = filters;
        self
    }

    /// The tool filter of `principal`'s instances.
    fn tool_filter(&self, principal: &str) -> sandpipe_proto::mcp::ToolFilter {
        let endpoint = self.policy.tools.filter();
        match self.principal_tools.get(principal) {
            Some(own) => endpoint.narrowed(own),
            None => endpoint,
        }
    }

    /// Record each instance in `dir`, its frames no larger than `max_frame`, each transcript
    /// no larger than `max_record` bytes (`--max-record`).
    pub fn record_dir(mut self, dir: PathBuf, max_frame: u64, max_record: u64) -> Self {
        self.record_dir = Some(dir);
        self.max_frame = max_frame;
        self.max_record = Some(max_record);
        self
    }

    /// Instance `number`'s recorder, if recording.
    fn recorder(&self, number: u64, policy: &Policy) -> Option<Arc<Recorder>> {
        let dir = self.record_dir.as_ref()?;
        let path = dir.join(format!("instance-{number}.transcript"));
        let name = self
            .plugin
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let header = RecordHeader {
            plugin: &name,
            sha256: self.plugin.sha256(),
            framing: sandpipe_proto::frame::Framing::JsonLines,
            protocol: Some("mcp"),
            policy,
            max_frame: Some(self.max_frame),
            max_record: self.max_record,
        };
        match Recorder::create(&path, &header) {
            Ok(r) => Some(Arc::new(r)),
            Err(e) => {
                tracing::warn!("recording instance {number} in {}: {e}", path.display());
                None
            }
        }
    }
}

/// How a run of the endpoint ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeReport {
    /// Instances started in all.
    pub instances: u64,
    /// Instances still running when the stop came (each then ended).
    pub ended_at_stop: usize,
}

/// A bound endpoint.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    options: ServeOptions,
    launch: Launch,
}

impl Server {
    /// Bind `options.listen` (a non-loopback address only with tokens) and make the record
    /// directory.
    pub async fn bind(options: ServeOptions, launch: Launch) -> Result<Server, ServeError> {
        let addr = options.listen;
        options.refusal(&launch.principal_tools)?;
        if let Some(dir) = &launch.record_dir {
            std::fs::create_dir_all(dir).map_err(|source| ServeError::RecordDir {
                path: dir.clone(),
                source,
            })?;
        }
        let listener = listen(addr).map_err(|source| ServeError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServeError::Bind { addr, source })?;
        if let Auth::Jwt(jwt) = &options.auth {
            jwt.bound(addr)?;
        }
        Ok(Server {
            listener,
            addr,
            options,
            launch,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// How requests are authenticated.
    pub fn auth(&self) -> &Auth {
        &self.options.auth
    }

    /// Serve until `stop` resolves; then stop accepting, give requests in flight the grace to
    /// be answered, end every instance (stdin closed, killed after the grace) and return once
    /// each is gone.
    pub async fn run(self, stop: impl Future<Output = ()>) -> ServeReport {
        let grace = self.options.grace;
        let idle = self.options.idle_timeout;
        let state = Arc::new(front::State::new(self.options, self.launch, self.addr));
        let (closing, closing_rx) = watch::channel(false);
        let mut connections = tokio::task::JoinSet::new();
        let reaper = tokio::spawn(reap_idle(state.clone(), idle));
        state.refill();
        let mut next_conn = 0u64;
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                accepted = self.listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!("accepting a connection: {e}");
                            continue;
                        }
                    };
                    next_conn += 1;
                    tracing::debug!(conn = next_conn, %peer, "connection");
                    // A response goes out as a head and then its body (or its events): with
                    // Nagle's algorithm on, the second write waits for the client's delayed
                    // ACK, 40 ms a request (`sandpipe-bench --serve` found it).
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(conn = next_conn, "TCP_NODELAY: {e}");
                    }
                    connections.spawn(connection(state.clone(), next_conn, stream, closing_rx.clone()));
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(self.listener);
        state.stop_accepting();
        tracing::info!("stopping: no new requests; waiting up to {grace:?} for those in flight");
        let _ = tokio::time::timeout(grace, state.drained()).await;
        reaper.abort();
        let all = state.take_all();
        let ended_at_stop = all.iter().filter(|i| !i.has_ended()).count();
        let ends = all
            .iter()
            .map(|i| i.end("sandpipe is shutting down", grace));
        futures_join(ends).await;
        let _ = closing.send(true);
        let _ = tokio::time::timeout(grace, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        connections.abort_all();
        ServeReport {
            instances: state.instances_started(),
            ended_at_stop,
        }
    }
}

/// How many connections the kernel holds for `accept` (it caps this at `net.core.somaxconn`).
/// Tokio's `TcpListener::bind` asks for 1,024: 1,000 clients connecting at once overflowed
/// that queue, and a connection the kernel dropped from it was later reset (`sandpipe-bench
/// --serve` at 1,000 sessions lost some at their first request).
const BACKLOG: u32 = 4096;

/// A listener on `addr`, as `TcpListener::bind` makes one (`SO_REUSEADDR`) but with [`BACKLOG`].
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Await every future of `ends`, concurrently.
async fn futures_join<F: Future<Output = ()>>(ends: impl Iterator<Item = F>) {
    let mut set: Vec<std::pin::Pin<Box<F>>> = ends.map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        set.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if set.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

/// Serve one connection until it closes (or, once `closing`, finish what it does and close).
async fn connection(
    state: Arc<front::State>,
    conn: u64,
    stream: tokio::net::TcpStream,
    mut closing: watch::Receiver<bool>,
) {
    let service_state = state.clone();
    let service = hyper::service::service_fn(move |req| {
        let state = service_state.clone();
        let req = req.map(body::Lingering::new);
        async move { Ok::<_, Infallible>(front::handle(state, conn, req).await) }
    });
    // The connection (and with it a response still streaming, whose request is then
    // abandoned: the server told to cancel it) is dropped before its instance is ended.
    {
        // A client that sends half a request head (slowloris) is cut off: no instance is
        // reached before the head is whole, and the connection goes too.
        let served = hyper::server::conn::http1::Builder::new()
            .timer(body::Timer)
            .header_read_timeout(state.options.header_timeout)
            .keep_alive(true)
            .serve_connection(crate::net::HyperIo(stream), service);
        tokio::pin!(served);
        let mut shutting = false;
        loop {
            tokio::select! {
                result = served.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(conn, "connection ended: {e}");
                    }
                    break;
                }
                changed = closing.changed(), if !shutting => {
                    if changed.is_err() || *closing.borrow() {
                        shutting = true;
                        served.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
    if let Some(instance) = state.connection_closed(conn) {
        instance
            .end("its connection closed", state.options.grace)
            .await;
    }
}

/// End the instances idle past `idle`, every so often.
async fn reap_idle(state: Arc<front::State>, idle: Duration) {
    let mut tick = tokio::time::interval(front::idle_tick(idle));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for instance in state.take_idle(std::time::Instant::now()) {
            let grace = state.options.grace;
            tokio::spawn(async move { instance.end("idle past --idle-timeout", grace).await });
        }
    }
}
