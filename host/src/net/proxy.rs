//! The outbound proxy of a native plugin: the plugin's only way out of its network namespace.
//!
//! ```text
//!   plugin (own netns, loopback only)          sandpipe (host netns)
//!   HTTP_PROXY / ALL_PROXY ─► 127.0.0.1:PORT ══► accept ─► peek 1 byte
//!                                                  0x05 ─► SOCKS5 CONNECT ──┐
//!                                                  else ─► HTTP CONNECT ────┼─► Resolver::targets
//!                                                          GET http://… ────┘     (allow-list, pin,
//!                                                                                 audit "net")
//!                                              connect to the first admitted address that accepts
//!                                              relay both ways ─► audit "net-close" (bytes each way)
//! ```
//!
//! One listening socket serves both protocols. Every destination goes through the session's
//! [`Resolver`], so the proxy admits exactly what `wasi:sockets` would admit a wasm plugin, and
//! names are resolved by sandpipe, never by the plugin.
//!
//! What a plugin can make sandpipe hold is bounded: a request head of at most
//! [`MAX_HEAD_BYTES`] (larger gets `431`), at most [`MAX_HEADERS`] header fields, at most
//! [`MAX_CONNECTIONS`] connections at once (past it a new connection is closed unanswered),
//! and two fixed relay buffers per connection.
//!
//! Under `--record` each admitted connection is written into the recording: a plain request
//! as its `request` (method, URL, headers as the plugin sent them), its body, the server's
//! answer head as its `response` (status, headers, and the reason phrase when it is not the
//! usual one) and the answer's body as the bytes that came (a chunked body with its chunks'
//! framing; an answer whose head is not a final response's, such as a `101` switch, stays
//! bytes, head and all); a tunnel as its bytes each way, in order, except a
//! TLS one (its first byte a TLS handshake record), whose bytes are useless to a replay (its
//! keys are fresh each run): it is marked `opaque`, with why. In a replay nothing is
//! connected: a plain request is answered from the recording when its method, URL and body
//! are the recorded ones (the head rebuilt from the `response` line as HTTP/1.1); a recorded
//! tunnel is played back as its bytes (the plugin's checked against the recording, the
//! server's sent in their order, by [`ByteTape`]); everything else (an `opaque` tunnel, a
//! connection the recording lacks) is refused (`403`, SOCKS5 "not allowed") and reported.
//!
//! What it does not do: `https://` in a plain request (clients tunnel https with CONNECT),
//! keep-alive across requests (each plain request gets `Connection: close`, because the next
//! request on the connection may name another host), SOCKS4, SOCKS5 authentication, BIND or
//! UDP ASSOCIATE, or any filtering by path or method.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use sandpipe_proto::transcript::{
    HttpRequest, NetDir, NetEvent, NetKind, NetNote, NetOpen, NetVia,
};

use super::intercept;
use super::tape::{self, AnswerHead, ByteRead, ByteTape, NetSink, PlayedBytes, tape_host};
use super::{Admitted, AuditEvent, NetReplay, NetTape, Refused, Resolver, Via};

/// The largest request head (request line and header fields) the proxy reads; past it the
/// answer is `431 Request Header Fields Too Large`.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The most header fields one request head may have (`431` past it).
pub const MAX_HEADERS: usize = 100;

/// The most connections the proxy serves at once; a connection past it is closed unanswered.
pub const MAX_CONNECTIONS: usize = 256;

/// How much of a refused request's remaining input is read and dropped before the connection
/// closes: closing a socket with unread input makes the kernel send a reset, which can destroy
/// the error response before the client reads it.
const DRAIN_BYTES: u64 = 64 * 1024;

/// How long the accept loop pauses after an error that is not one connection's (out of
/// descriptors or memory) before accepting again.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// The running proxy. Dropping it aborts the accept loop and every relay at once;
/// [`ProxyHandle::close`] stops accepting and waits for the open connections to end.
#[derive(Debug)]
pub struct ProxyHandle {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl ProxyHandle {
    /// The address the proxy listens on (inside the plugin's namespace).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting, then wait until every open connection has ended and its `net-close`
    /// audit line is written. A plugin's exit closes its sockets, so after the plugin is gone
    /// this returns once the servers' side is done too.
    pub async fn close(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.as_mut() {
            // The handle stays in `self` while waiting: if this future is dropped, `Drop`
            // still aborts the loop instead of leaving it detached.
            let _ = task.await;
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // The loop owns the relays' `JoinSet`; aborting it drops the set, which aborts
            // every relay.
            task.abort();
        }
    }
}

/// Serve the plugin's connections on `listener`, checking every destination with `resolver`,
/// until the returned handle is dropped (or closed). Must be called inside a tokio runtime.
pub fn spawn(listener: std::net::TcpListener, resolver: Arc<Resolver>) -> io::Result<ProxyHandle> {
    let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let listener = {
        let _entered = runtime.enter();
        TcpListener::from_std(listener)?
    };
    let (stop, stopped) = oneshot::channel();
    let task = runtime.spawn(accept_loop(listener, resolver, stopped));
    Ok(ProxyHandle {
        addr,
        stop: Some(stop),
        task: Some(task),
    })
}

async fn accept_loop(
    listener: TcpListener,
    resolver: Arc<Resolver>,
    mut stopped: oneshot::Receiver<()>,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut relays = JoinSet::new();
    // Whether the limit was reported since it was last not reached: one line per episode,
    // not one per refused connection, so a plugin cannot flood sandpipe's log.
    let mut at_limit = false;
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            Some(_) = relays.join_next(), if !relays.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    // Past the limit the connection is dropped at once: the client sees it
                    // closed instead of waiting in the backlog.
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        if !std::mem::replace(&mut at_limit, true) {
                            tracing::warn!(
                                "proxy: closing new connections past the limit of {MAX_CONNECTIONS} at once"
                            );
                        }
                        continue;
                    };
                    at_limit = false;
                    let resolver = resolver.clone();
                    relays.spawn(async move {
                        serve(client, &resolver).await;
                        drop(permit);
                    });
                }
                Err(e) if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::Interrupted
                ) => {}
                Err(e) => {
                    // Out of descriptors or memory: retrying at once would spin on the same
                    // error, so pause before accepting again (as hyper's and axum's servers do).
                    tracing::warn!("proxy: accepting a connection: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }
    drop(listener);
    while relays.join_next().await.is_some() {}
}

async fn serve(client: TcpStream, resolver: &Arc<Resolver>) {
    let _ = client.set_nodelay(true);
    let mut first = [0u8; 1];
    match client.peek(&mut first).await {
        Ok(1) if first[0] == socks::VERSION => socks::serve(client, resolver).await,
        Ok(1) => http::serve(client, resolver).await,
        _ => {}
    }
}

/// Connect to the first of `targets` that accepts; the last error if none does.
async fn connect(targets: &[Admitted]) -> Result<(TcpStream, &Admitted), (SocketAddr, io::Error)> {
    let mut last = None;
    for target in targets {
        match TcpStream::connect(target.addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok((stream, target));
            }
            Err(e) => last = Some((target.addr, e)),
        }
    }
    // `targets` returns at least one address or a refusal, so `last` is set; an empty list
    // still needs an answer.
    Err(last.unwrap_or_else(|| {
        (
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            io::Error::new(io::ErrorKind::NotFound, "no address to connect to"),
        )
    }))
}

/// A connection being recorded: the recording, its number there, and whether its bytes
/// stopped being written (a TLS tunnel).
#[derive(Clone)]
struct Taped {
    sink: Arc<dyn NetSink>,
    conn: u64,
    opaque: Arc<std::sync::atomic::AtomicBool>,
    /// Whether the first byte out was seen (it tells a TLS tunnel).
    seen_out: Arc<std::sync::atomic::AtomicBool>,
    /// Whether this is a tunnel, whose first byte out tells TLS.
    tunnel: bool,
}

/// The largest answer head a plain request's recording reads into a `response` line; past
/// it, the answer is recorded as its bytes.
const MAX_ANSWER_HEAD: usize = 64 * 1024;

/// Why a TLS tunnel's bytes are not in the recording.
const TLS_TUNNEL: &str = "a TLS tunnel: its keys are fresh each run, so its bytes cannot be \
    replayed (sandpipe does not terminate TLS for native plugins)";

/// Open connection `to` in the recording, if the session records its network: its `open`
/// line (the host as asked, lower case, an IPv6 literal without brackets) and, for a plain
/// request, its `request`.
fn record_open(
    resolver: &Resolver,
    host: &str,
    to: &Admitted,
    request: Option<HttpRequest>,
) -> Result<Option<Taped>, crate::error::RecordError> {
    let Some(NetTape::Record(sink)) = resolver.tape() else {
        return Ok(None);
    };
    let open = NetOpen {
        via: NetVia::Proxy,
        host: tape_host(host),
        port: to.addr.port(),
        kind: Some(if request.is_some() {
            NetKind::Http
        } else {
            NetKind::Bytes
        }),
        addr: Some(to.addr.to_string()),
        rule: Some(to.rule.clone()),
    };
    let tunnel = request.is_none();
    let conn = sink.open(&open)?;
    if let Some(request) = request {
        sink.event(conn, &NetEvent::Request(request))?;
    }
    Ok(Some(Taped {
        sink: sink.clone(),
        conn,
        opaque: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        seen_out: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        tunnel,
    }))
}

/// Send `head` (not recorded: a plain request's head is its `request` line) and `first` to
/// the server, then relay both ways until both sides are done, and write the `net-close`
/// audit line with the bytes each way (and, when recorded, the connection's end).
async fn relay(
    client: TcpStream,
    server: TcpStream,
    to: &Admitted,
    (head, first): (&[u8], &[u8]),
    resolver: &Resolver,
    taped: Option<Taped>,
) {
    let mut client = Counted::new(client, taped.clone().map(|t| (t, NetDir::In)));
    // A plain request's answer is read for its head on its way to the plugin.
    client.answer = taped.as_ref().filter(|t| !t.tunnel).map(|_| Vec::new());
    let mut server = Counted::new(server, taped.clone().map(|t| (t, NetDir::Out)));
    let result = match server.inner.write_all(head).await {
        Ok(()) => {
            server.written += head.len() as u64;
            match server.write_all(first).await {
                Ok(()) => tokio::io::copy_bidirectional(&mut client, &mut server)
                    .await
                    .map(drop),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    let (bytes_out, bytes_in) = (server.written, client.written);
    match result {
        Ok(()) => tracing::debug!(
            "proxy: closed {} ({bytes_out} bytes out, {bytes_in} in)",
            to.addr
        ),
        Err(e) => tracing::debug!(
            "proxy: {} ended with {e} ({bytes_out} bytes out, {bytes_in} in)",
            to.addr
        ),
    }
    if let Some(t) = taped {
        // An answer that ended inside its head is kept as the bytes that came.
        let partial = client.answer.take().filter(|head| !head.is_empty());
        let _ = partial
            .map_or(Ok(()), |head| t.sink.data(t.conn, NetDir::In, &head))
            .and_then(|()| t.sink.event(t.conn, &NetEvent::End { dir: NetDir::Out }))
            .and_then(|()| t.sink.event(t.conn, &NetEvent::End { dir: NetDir::In }))
            .and_then(|()| t.sink.event(t.conn, &NetEvent::Close));
    }
    if let Some(audit) = resolver.audit() {
        audit.record(&AuditEvent::NetClose {
            via: Via::Proxy,
            name: to.name.clone(),
            addr: to.addr.ip().to_string(),
            port: to.addr.port(),
            bytes_out,
            bytes_in,
        });
    }
}

/// Whether the plugin's first byte in a tunnel opens a TLS handshake: the byte already read
/// after the `CONNECT` head, or the first to arrive. A server that speaks first (`server`
/// has bytes before the plugin sent any) makes it not TLS.
async fn first_is_tls(client: &TcpStream, rest: &[u8], server: Option<&TcpStream>) -> bool {
    const HANDSHAKE: u8 = 0x16;
    if let Some(first) = rest.first() {
        return *first == HANDSHAKE;
    }
    let mut byte = [0u8; 1];
    let mut theirs = [0u8; 1];
    match server {
        Some(server) => tokio::select! {
            peeked = client.peek(&mut byte) => matches!(peeked, Ok(1)) && byte[0] == HANDSHAKE,
            _ = server.peek(&mut theirs) => false,
        },
        None => matches!(client.peek(&mut byte).await, Ok(1)) && byte[0] == HANDSHAKE,
    }
}

/// An open tunnel under `--tls-intercept`, the plugin told it is open: TLS read as HTTP
/// ([`intercept::serve`]), anything else relayed as bytes (and recorded as a tunnel).
async fn tunnel(
    client: TcpStream,
    rest: Vec<u8>,
    (server, to): (TcpStream, Admitted),
    host: &str,
    port: u16,
    resolver: &Arc<Resolver>,
) {
    if first_is_tls(&client, &rest, Some(&server)).await {
        let client = intercept::Rewind::new(rest, client);
        return intercept::serve(client, Some((server, to)), host, port, resolver.clone()).await;
    }
    // A recording that stopped (`--max-record`) ends the tunnel before its first byte.
    if let Ok(taped) = record_open(resolver, host, &to, None) {
        relay(client, server, &to, (&[], &rest), resolver, taped).await;
    }
}

/// How a replayed tunnel starts: its recorded bytes, or why there are none to play.
enum Claimed {
    /// The recorded tunnel, played as the plugin reads and writes.
    Play(ByteTape),
    /// The connection failed when recorded, with why.
    Failed(String),
    /// The recording has no more tunnels there, or cannot play this one back (a TLS tunnel
    /// recorded without `--tls-intercept`): the problem is kept for the replay's report.
    Refused,
}

/// Claim the next recorded tunnel to `host:port` in the replay `replay`.
fn claim_tunnel(replay: &Arc<NetReplay>, host: &str, port: u16) -> Claimed {
    let Some(conn) = replay.claim(NetVia::Proxy, &tape_host(host), port) else {
        return Claimed::Refused;
    };
    match replay.play_bytes(conn) {
        Some(PlayedBytes::Connected(tape)) => Claimed::Play(tape),
        Some(PlayedBytes::Failed(why)) => Claimed::Failed(why),
        None => Claimed::Refused,
    }
}

/// A recorded tunnel played back with nothing connected: `first` (what came with the
/// request head) and everything the plugin writes after it must be the bytes it wrote when
/// recorded, and the server's recorded bytes are written to it in their order, each once the
/// plugin has sent what it had sent before the server spoke. It ends once the server's side
/// has ended and the plugin's too, or at the first difference (the plugin's connection
/// closes; the replay reports the divergence).
async fn play_tunnel(mut client: TcpStream, first: &[u8], mut tape: ByteTape) {
    if !first.is_empty() && tape.write(first).is_err() {
        return;
    }
    let mut buf = vec![0u8; 16 * 1024];
    let (mut theirs_ended, mut ours_ended) = (false, false);
    loop {
        if !theirs_ended {
            match tape.read(buf.len()) {
                ByteRead::Data(bytes) => {
                    if client.write_all(&bytes).await.is_err() {
                        tape.end_writing();
                        return;
                    }
                    continue;
                }
                ByteRead::End => {
                    theirs_ended = true;
                    let _ = client.shutdown().await;
                }
                ByteRead::Failed(why) => {
                    tracing::debug!(
                        "replay: tunnel {} failed here when recorded: {why}",
                        tape.conn()
                    );
                    return;
                }
                // The server answered only after bytes the plugin has yet to send.
                ByteRead::Wait => {}
            }
        }
        // The plugin sends no more: nothing else can come of the recording.
        if ours_ended {
            return;
        }
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => {
                tape.end_writing();
                ours_ended = true;
            }
            Ok(n) => {
                if tape.write(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// A stream that counts the bytes written to it (what was delivered, not merely read) and,
/// when the connection is recorded, writes them into the recording, `dir` being which way
/// they go.
struct Counted<S> {
    inner: S,
    written: u64,
    taped: Option<(Taped, NetDir)>,
    /// A plain request's answer while its head is read, on the plugin's side (`None` once it
    /// is written as the `response` line, or as bytes when it is not a head one can hold).
    answer: Option<Vec<u8>>,
}

impl<S> Counted<S> {
    fn new(inner: S, taped: Option<(Taped, NetDir)>) -> Self {
        Self {
            inner,
            written: 0,
            taped,
            answer: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

/// Record `bytes`, written `dir`'s way on `t`; a tunnel whose first byte out opens a TLS
/// handshake is marked opaque instead, and nothing more of it is written. While `answer`
/// holds a plain request's answer whose head is not whole yet, `bytes` join it: the head
/// becomes the `response` line, and what follows it the body's data.
fn tape_bytes(
    t: &Taped,
    dir: NetDir,
    answer: &mut Option<Vec<u8>>,
    bytes: &[u8],
) -> io::Result<()> {
    use std::sync::atomic::Ordering;
    if t.opaque.load(Ordering::Relaxed) || bytes.is_empty() {
        return Ok(());
    }
    if let Some(head) = answer {
        head.extend_from_slice(bytes);
        let written = match tape::answer_head(head, MAX_ANSWER_HEAD) {
            AnswerHead::Partial => return Ok(()),
            AnswerHead::Head(response, len) => t
                .sink
                .event(t.conn, &NetEvent::Response(response))
                .and_then(|()| match head.len() > len {
                    true => t.sink.data(t.conn, dir, &head[len..]),
                    false => Ok(()),
                }),
            AnswerHead::Bytes => t.sink.data(t.conn, dir, head),
        };
        *answer = None;
        return written.map_err(io::Error::other);
    }
    let first_out = dir == NetDir::Out && t.tunnel && !t.seen_out.swap(true, Ordering::Relaxed);
    let result = if first_out && bytes[0] == 0x16 {
        t.opaque.store(true, Ordering::Relaxed);
        t.sink.event(
            t.conn,
            &NetEvent::Opaque(NetNote {
                reason: TLS_TUNNEL.to_owned(),
            }),
        )
    } else {
        t.sink.data(t.conn, dir, bytes)
    };
    result.map_err(io::Error::other)
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            this.written += n as u64;
            if let Some((t, dir)) = &this.taped
                && let Err(e) = tape_bytes(t, *dir, &mut this.answer, &buf[..n])
            {
                // The recording stopped (`--max-record`): so does the connection.
                return Poll::Ready(Err(e));
            }
        }
        result
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Close after an error answer: end our side, then read and drop what the client still sends
/// (bounded), so the close is not a reset that could lose the answer.
async fn close_after_answer(mut client: TcpStream) {
    let _ = client.shutdown().await;
    let _ = tokio::io::copy(&mut (&mut client).take(DRAIN_BYTES), &mut tokio::io::sink()).await;
}

/// `host` as the resolver and `Refused` print it: an IPv6 literal in brackets.
fn host_of(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// Audit a request the proxy refused before asking the allow-list (a malformed request, a
/// SOCKS5 command or method it does not serve): the resolver audits the refusals it decides
/// itself, so every refusal has its line.
fn audit_refused(resolver: &Resolver, name: Option<String>, port: u16, reason: String) {
    resolver.audit_refusal(Via::Proxy, name, None, port, reason);
}

mod http {
    //! HTTP/1.x proxy requests: `CONNECT host:port` and absolute-form `http://` requests.

    use super::*;

    /// Why a plugin's request was answered with an error before anything was connected.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    pub(super) enum RequestError {
        #[error("the request head exceeds {limit} bytes")]
        HeadTooLarge { limit: usize },
        #[error("the request head has more than {limit} header fields")]
        TooManyHeaders { limit: usize },
        #[error("the request head is malformed ({0})")]
        Malformed(httparse::Error),
        #[error("the connection closed inside the request head")]
        Truncated,
        #[error("`{target}` is not HOST:PORT")]
        BadAuthority { target: String },
        #[error("https:// URLs go through CONNECT, not a plain request")]
        Https,
        #[error("`{target}` is not an http:// URL (a proxy request names its server)")]
        NotAbsolute { target: String },
        #[error("a URL with user information (`user@host`) is refused")]
        UserInfo,
    }

    impl RequestError {
        fn status(&self) -> &'static str {
            match self {
                RequestError::HeadTooLarge { .. } | RequestError::TooManyHeaders { .. } => {
                    "431 Request Header Fields Too Large"
                }
                _ => "400 Bad Request",
            }
        }
    }

    /// A parsed request head, owned so the read buffer can be reused.
    #[derive(Debug)]
    pub(super) struct Head {
        pub method: String,
        pub target: String,
        pub headers: Vec<(String, Vec<u8>)>,
    }

    pub(super) async fn serve(mut client: TcpStream, resolver: &Arc<Resolver>) {
        let mut buf = vec![0u8; MAX_HEAD_BYTES];
        let (head, head_len, filled) = match read_head(&mut client, &mut buf).await {
            Ok(Some(read)) => read,
            Ok(None) => return,
            Err(e) => return answer_error(client, &e, resolver).await,
        };
        // What followed the head goes to the server first; the head buffer is freed before the
        // relay, which may last as long as the plugin wants.
        let rest = buf[head_len..filled].to_vec();
        drop(buf);
        if head.method.eq_ignore_ascii_case("CONNECT") {
            let (host, port) = match authority(&head.target, None) {
                Ok(hp) => hp,
                Err(e) => return answer_error(client, &e, resolver).await,
            };
            const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";
            if let Some(replay) = resolver.replaying() {
                // With --tls-intercept a TLS tunnel is played back request by request.
                if resolver.intercept().is_some() {
                    if client.write_all(ESTABLISHED).await.is_err() {
                        return;
                    }
                    if first_is_tls(&client, &rest, None).await {
                        let client = intercept::Rewind::new(rest, client);
                        return intercept::serve(client, None, &host, port, resolver.clone()).await;
                    }
                    return match claim_tunnel(replay, &host, port) {
                        Claimed::Play(tape) => play_tunnel(client, &rest, tape).await,
                        Claimed::Failed(_) | Claimed::Refused => close_after_answer(client).await,
                    };
                }
                // A tunnel played back as its bytes; a TLS one without the intercept cannot be.
                let answer = match claim_tunnel(replay, &host, port) {
                    Claimed::Play(tape) => {
                        if client.write_all(ESTABLISHED).await.is_ok() {
                            play_tunnel(client, &rest, tape).await;
                        }
                        return;
                    }
                    Claimed::Failed(why) => response(
                        "502 Bad Gateway",
                        None,
                        &format!("sandpipe: {host}:{port}: {why} (when recorded)"),
                    ),
                    Claimed::Refused => refusal(&Refused {
                        host: host.clone(),
                        port: Some(port),
                        reason: "replay: the recording cannot play this tunnel back".into(),
                    }),
                };
                let _ = client.write_all(&answer).await;
                return close_after_answer(client).await;
            }
            let Some((server, to)) = open(&mut client, &host, port, resolver).await else {
                return close_after_answer(client).await;
            };
            if resolver.intercept().is_some() {
                if client.write_all(ESTABLISHED).await.is_err() {
                    return;
                }
                return tunnel(client, rest, (server, to), &host, port, resolver).await;
            }
            let taped = match record_open(resolver, &host, &to, None) {
                Ok(taped) => taped,
                Err(e) => return answer_recording_error(client, &e).await,
            };
            if client.write_all(ESTABLISHED).await.is_err() {
                return;
            }
            relay(client, server, &to, (&[], &rest), resolver, taped).await;
        } else {
            let (url, host, port) = match absolute(&head.target) {
                Ok(parts) => parts,
                Err(e) => return answer_error(client, &e, resolver).await,
            };
            let request = HttpRequest {
                method: head.method.clone(),
                url: head.target.clone(),
                headers: head
                    .headers
                    .iter()
                    .map(|(n, v)| (n.clone(), String::from_utf8_lossy(v).into_owned()))
                    .collect(),
                added: Vec::new(),
            };
            if let Some(replay) = resolver.replaying() {
                return replayed(client, replay, &head, request, &host, port, rest).await;
            }
            let Some((server, to)) = open(&mut client, &host, port, resolver).await else {
                return close_after_answer(client).await;
            };
            let taped = match record_open(resolver, &host, &to, Some(request)) {
                Ok(taped) => taped,
                Err(e) => return answer_recording_error(client, &e).await,
            };
            let first = origin_form(&head, &url);
            relay(client, server, &to, (&first, &rest), resolver, taped).await;
        }
    }

    /// A plain request in a replay: the recorded answer when its method, URL and body (by
    /// its `Content-Length`, read no further than could still match) are the recorded
    /// ones; otherwise a `403` and the replay's report.
    async fn replayed(
        mut client: TcpStream,
        replay: &NetReplay,
        head: &Head,
        request: HttpRequest,
        host: &str,
        port: u16,
        mut body: Vec<u8>,
    ) {
        let refuse = |reason: &str| {
            refusal(&Refused {
                host: host.to_owned(),
                port: Some(port),
                reason: format!("replay: {reason}"),
            })
        };
        let Some(conn) = replay.claim(NetVia::Proxy, &tape_host(host), port) else {
            let _ = client
                .write_all(&refuse("the recording has no more connections there"))
                .await;
            return close_after_answer(client).await;
        };
        let length = head
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let want = length.min(replay.body_cap(conn));
        let mut chunk = [0u8; 8192];
        while body.len() < want {
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n.min(want - body.len())]),
            }
        }
        body.truncate(want);
        match replay.http(conn, &request, &body) {
            Some(played) if played.failed.is_none() => {
                // The head as recorded (`response`); a recording made before heads were read
                // holds the whole answer as its bytes.
                if let Some(head) = &played.response
                    && client
                        .write_all(&tape::render_answer_head(head))
                        .await
                        .is_err()
                {
                    return;
                }
                for chunk in &played.body {
                    if client.write_all(chunk).await.is_err() {
                        return;
                    }
                }
                let _ = client.shutdown().await;
            }
            Some(_) => {
                let line = format!("sandpipe: {host}:{port}: replay: the recorded request failed");
                let _ = client
                    .write_all(&response("502 Bad Gateway", None, &line))
                    .await;
                close_after_answer(client).await;
            }
            None => {
                let _ = client
                    .write_all(&refuse("the request differs from the recording"))
                    .await;
                close_after_answer(client).await;
            }
        }
    }

    /// The recording stopped (`--max-record`): the connection is answered `502` with why.
    async fn answer_recording_error(mut client: TcpStream, e: &crate::error::RecordError) {
        let line = format!("sandpipe: --record: {e}");
        let _ = client
            .write_all(&response("502 Bad Gateway", None, &line))
            .await;
        close_after_answer(client).await;
    }

    /// Read until a whole head has arrived: the head, its length, and how much of `buf` was
    /// filled (what follows the head is the start of a body or of tunnelled bytes).
    /// `None`: the client closed before sending anything.
    pub(super) async fn read_head(
        client: &mut TcpStream,
        buf: &mut [u8],
    ) -> Result<Option<(Head, usize, usize)>, RequestError> {
        let mut filled = 0;
        loop {
            let n = client
                .read(&mut buf[filled..])
                .await
                .map_err(|_| RequestError::Truncated)?;
            if n == 0 {
                return match filled {
                    0 => Ok(None),
                    _ => Err(RequestError::Truncated),
                };
            }
            filled += n;
            let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut fields);
            match req.parse(&buf[..filled]) {
                Ok(httparse::Status::Complete(len)) => {
                    let head = Head {
                        method: req.method.unwrap_or_default().to_owned(),
                        target: req.path.unwrap_or_default().to_owned(),
                        headers: req
                            .headers
                            .iter()
                            .map(|h| (h.name.to_owned(), h.value.to_owned()))
                            .collect(),
                    };
                    return Ok(Some((head, len, filled)));
                }
                Ok(httparse::Status::Partial) if filled == buf.len() => {
                    return Err(RequestError::HeadTooLarge { limit: buf.len() });
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(RequestError::TooManyHeaders { limit: MAX_HEADERS });
                }
                Err(e) => return Err(RequestError::Malformed(e)),
            }
        }
    }

    /// `host:port` (`[v6]:port`), with `default` when the port is left out. The host comes
    /// back as written, an IPv6 literal in brackets.
    pub(super) fn authority(
        text: &str,
        default: Option<u16>,
    ) -> Result<(String, u16), RequestError> {
        let bad = || RequestError::BadAuthority {
            target: text.to_owned(),
        };
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or_else(bad)?;
            inside.parse::<Ipv6Addr>().map_err(|_| bad())?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(bad)?),
            };
            (&text[..inside.len() + 2], port)
        } else {
            match text.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (text, None),
            }
        };
        if host.is_empty() || host.contains(':') && !host.starts_with('[') {
            return Err(bad());
        }
        let port = match port {
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?
            }
            Some(_) => return Err(bad()),
            None => default.ok_or_else(bad)?,
        };
        Ok((host.to_owned(), port))
    }

    /// The parts of an absolute-form `http://` target: its authority and origin-form path,
    /// the host and the port (80 when left out).
    pub(super) struct Url {
        pub authority: String,
        pub path: String,
    }

    pub(super) fn absolute(target: &str) -> Result<(Url, String, u16), RequestError> {
        let not_absolute = || RequestError::NotAbsolute {
            target: target.to_owned(),
        };
        let (scheme, rest) = target.split_once("://").ok_or_else(not_absolute)?;
        if scheme.eq_ignore_ascii_case("https") {
            return Err(RequestError::Https);
        }
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(not_absolute());
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority_text, tail) = rest.split_at(end);
        if authority_text.contains('@') {
            return Err(RequestError::UserInfo);
        }
        let (host, port) = authority(authority_text, Some(80))?;
        // A fragment never goes on the wire.
        let tail = tail.split_once('#').map_or(tail, |(before, _)| before);
        let path = match tail {
            "" => "/".to_owned(),
            t if t.starts_with('?') => format!("/{t}"),
            t => t.to_owned(),
        };
        let url = Url {
            authority: authority_text.to_owned(),
            path,
        };
        Ok((url, host, port))
    }

    /// The head sent to the server: origin-form request line, `Host` from the URL (RFC 9112
    /// §3.2.2: a proxy replaces the client's), hop-by-hop fields dropped (`Connection`, the
    /// fields it names, `Keep-Alive`, `Proxy-Connection`, `Proxy-Authorization`), and
    /// `Connection: close`.
    pub(super) fn origin_form(head: &Head, url: &Url) -> Vec<u8> {
        let named: Vec<String> = head
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
            .flat_map(|(_, v)| {
                String::from_utf8_lossy(v)
                    .split(',')
                    .map(|t| t.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .collect();
        let dropped = |name: &str| {
            let name = name.to_ascii_lowercase();
            matches!(
                name.as_str(),
                "host" | "connection" | "keep-alive" | "proxy-connection" | "proxy-authorization"
            ) || named.contains(&name)
        };
        let mut out = Vec::with_capacity(MAX_HEAD_BYTES / 4);
        out.extend_from_slice(
            format!(
                "{} {} HTTP/1.1\r\nHost: {}\r\n",
                head.method, url.path, url.authority
            )
            .as_bytes(),
        );
        for (name, value) in head.headers.iter().filter(|(n, _)| !dropped(n)) {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        out
    }

    /// Check `host:port` and connect; on failure the client has its answer (403 or 502).
    async fn open(
        client: &mut TcpStream,
        host: &str,
        port: u16,
        resolver: &Resolver,
    ) -> Option<(TcpStream, Admitted)> {
        let targets = match resolver.targets(host, port, Via::Proxy).await {
            Ok(t) => t,
            Err(refused) => {
                let _ = client.write_all(&refusal(&refused)).await;
                return None;
            }
        };
        match connect(&targets).await {
            Ok((server, to)) => Some((server, to.clone())),
            Err((addr, e)) => {
                let line = format!("sandpipe: {host}:{port}: connecting to {addr} failed: {e}");
                let _ = client
                    .write_all(&response("502 Bad Gateway", None, &line))
                    .await;
                None
            }
        }
    }

    async fn answer_error(mut client: TcpStream, e: &RequestError, resolver: &Resolver) {
        audit_refused(resolver, None, 0, format!("HTTP proxy request: {e}"));
        let line = format!("sandpipe: {e}");
        let _ = client.write_all(&response(e.status(), None, &line)).await;
        close_after_answer(client).await;
    }

    /// The `403` for a refusal: the `Refused` line as the body, the reason in
    /// `X-Sandpipe-Refused`.
    pub(super) fn refusal(refused: &Refused) -> Vec<u8> {
        response(
            "403 Forbidden",
            Some(&refused.reason),
            &format!("sandpipe: {refused}"),
        )
    }

    /// A complete `text/plain` answer of one line, then the connection closes. Control
    /// characters in the texts (a reason can quote a resolver's error) become spaces, so
    /// nothing can end a header early.
    fn response(status: &str, reason: Option<&str>, line: &str) -> Vec<u8> {
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect()
        };
        let body = format!("{}\n", clean(line));
        let mut out = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        if let Some(reason) = reason {
            out.push_str(&format!("X-Sandpipe-Refused: {}\r\n", clean(reason)));
        }
        out.push_str("\r\n");
        out.push_str(&body);
        out.into_bytes()
    }
}

mod socks {
    //! SOCKS5 (RFC 1928): no authentication, CONNECT only.

    use super::*;

    pub(super) const VERSION: u8 = 0x05;
    const NO_AUTH: u8 = 0x00;
    const NO_ACCEPTABLE_METHOD: u8 = 0xFF;
    const CMD_CONNECT: u8 = 0x01;
    const ATYP_V4: u8 = 0x01;
    const ATYP_DOMAIN: u8 = 0x03;
    const ATYP_V6: u8 = 0x04;

    /// The reply codes of RFC 1928 §6.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(u8)]
    pub(super) enum Reply {
        Succeeded = 0x00,
        GeneralFailure = 0x01,
        NotAllowed = 0x02,
        NetworkUnreachable = 0x03,
        HostUnreachable = 0x04,
        ConnectionRefused = 0x05,
        CommandNotSupported = 0x07,
        AddressTypeNotSupported = 0x08,
    }

    impl Reply {
        fn for_connect_error(e: &io::Error) -> Reply {
            match e.kind() {
                io::ErrorKind::ConnectionRefused => Reply::ConnectionRefused,
                io::ErrorKind::NetworkUnreachable => Reply::NetworkUnreachable,
                io::ErrorKind::HostUnreachable => Reply::HostUnreachable,
                _ => Reply::GeneralFailure,
            }
        }
    }

    /// What a SOCKS5 request came to, once the client was told it succeeded.
    pub(super) enum Negotiated {
        /// Connected to an admitted address.
        Connected(TcpStream, Admitted),
        /// A replay under `--tls-intercept`: nothing connected, the tunnel served from the
        /// recording.
        Replayed { host: String, port: u16 },
        /// A replay: nothing connected, the recorded tunnel played back as its bytes.
        Played(ByteTape),
    }

    pub(super) async fn serve(mut client: TcpStream, resolver: &Arc<Resolver>) {
        // A read error or an early close ends the connection: there is no one to answer.
        match negotiate(&mut client, resolver).await {
            Ok(Some(Negotiated::Connected(server, to))) => {
                let host = to.name.clone().unwrap_or_else(|| to.addr.ip().to_string());
                let port = to.addr.port();
                if resolver.intercept().is_some() {
                    return tunnel(client, Vec::new(), (server, to), &host, port, resolver).await;
                }
                // A recording that stopped (`--max-record`) ends the tunnel before its first
                // byte.
                if let Ok(taped) = record_open(resolver, &host, &to, None) {
                    relay(client, server, &to, (&[], &[]), resolver, taped).await;
                }
            }
            Ok(Some(Negotiated::Replayed { host, port })) => {
                if first_is_tls(&client, &[], None).await {
                    intercept::serve(client, None, &host, port, resolver.clone()).await;
                } else if let Some(replay) = resolver.replaying() {
                    match claim_tunnel(replay, &host, port) {
                        Claimed::Play(tape) => play_tunnel(client, &[], tape).await,
                        Claimed::Failed(_) | Claimed::Refused => close_after_answer(client).await,
                    }
                }
            }
            Ok(Some(Negotiated::Played(tape))) => play_tunnel(client, &[], tape).await,
            _ => {}
        }
    }

    /// The greeting and the request; `Some` once the server is connected and the client
    /// told so, `None` once the client has its failure reply.
    async fn negotiate(
        client: &mut TcpStream,
        resolver: &Resolver,
    ) -> io::Result<Option<Negotiated>> {
        let mut greeting = [0u8; 2];
        client.read_exact(&mut greeting).await?;
        let mut methods = [0u8; 255];
        let methods = &mut methods[..usize::from(greeting[1])];
        client.read_exact(methods).await?;
        if !methods.contains(&NO_AUTH) {
            audit_refused(
                resolver,
                None,
                0,
                "SOCKS5: no method sandpipe serves was offered (only no authentication)".into(),
            );
            client.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await?;
            client.shutdown().await?;
            return Ok(None);
        }
        client.write_all(&[VERSION, NO_AUTH]).await?;

        let mut request = [0u8; 4];
        client.read_exact(&mut request).await?;
        let [version, command, _reserved, atyp] = request;
        if version != VERSION {
            audit_refused(
                resolver,
                None,
                0,
                format!("SOCKS5: request version {version}"),
            );
            return Ok(None);
        }
        let host = match atyp {
            ATYP_V4 => {
                let mut octets = [0u8; 4];
                client.read_exact(&mut octets).await?;
                host_of(IpAddr::from(octets))
            }
            ATYP_V6 => {
                let mut octets = [0u8; 16];
                client.read_exact(&mut octets).await?;
                host_of(IpAddr::from(octets))
            }
            ATYP_DOMAIN => {
                let mut len = [0u8; 1];
                client.read_exact(&mut len).await?;
                let mut name = [0u8; 255];
                let name = &mut name[..usize::from(len[0])];
                client.read_exact(name).await?;
                // A name that is not text matches no rule; the resolver refuses it and
                // audits the refusal like any other.
                String::from_utf8_lossy(name).into_owned()
            }
            _ => {
                audit_refused(resolver, None, 0, format!("SOCKS5: address type {atyp}"));
                return answer(client, Reply::AddressTypeNotSupported).await;
            }
        };
        let mut port = [0u8; 2];
        client.read_exact(&mut port).await?;
        let port = u16::from_be_bytes(port);
        if command != CMD_CONNECT {
            let what = match command {
                0x02 => "BIND".to_owned(),
                0x03 => "UDP ASSOCIATE".to_owned(),
                other => format!("command {other}"),
            };
            audit_refused(
                resolver,
                Some(host),
                port,
                format!("SOCKS5: {what} is not served (only CONNECT)"),
            );
            return answer(client, Reply::CommandNotSupported).await;
        }
        if let Some(replay) = resolver.replaying() {
            // With --tls-intercept a TLS tunnel is played back request by request.
            if resolver.intercept().is_some() {
                reply(client, Reply::Succeeded, None).await?;
                return Ok(Some(Negotiated::Replayed { host, port }));
            }
            // A tunnel played back as its bytes; a TLS one without the intercept cannot be.
            return match claim_tunnel(replay, &host, port) {
                Claimed::Play(tape) => {
                    reply(client, Reply::Succeeded, None).await?;
                    Ok(Some(Negotiated::Played(tape)))
                }
                Claimed::Failed(_) => answer(client, Reply::GeneralFailure).await,
                Claimed::Refused => answer(client, Reply::NotAllowed).await,
            };
        }
        let targets = match resolver.targets(&host, port, Via::Proxy).await {
            Ok(t) => t,
            Err(_) => return answer(client, Reply::NotAllowed).await,
        };
        let (server, to) = match connect(&targets).await {
            Ok(connected) => connected,
            Err((addr, e)) => {
                tracing::debug!("proxy: {host}:{port}: connecting to {addr} failed: {e}");
                return answer(client, Reply::for_connect_error(&e)).await;
            }
        };
        let bound = server.local_addr().ok();
        reply(client, Reply::Succeeded, bound).await?;
        Ok(Some(Negotiated::Connected(server, to.clone())))
    }

    /// A failure reply, then the end of the connection.
    async fn answer(client: &mut TcpStream, code: Reply) -> io::Result<Option<Negotiated>> {
        reply(client, code, None).await?;
        client.shutdown().await?;
        Ok(None)
    }

    async fn reply(
        client: &mut TcpStream,
        code: Reply,
        bound: Option<SocketAddr>,
    ) -> io::Result<()> {
        let bound = bound.unwrap_or_else(|| SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
        let mut out = vec![VERSION, code as u8, 0x00];
        match bound.ip() {
            IpAddr::V4(v4) => {
                out.push(ATYP_V4);
                out.extend_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                out.push(ATYP_V6);
                out.extend_from_slice(&v6.octets());
            }
        }
        out.extend_from_slice(&bound.port().to_be_bytes());
        client.write_all(&out).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{AuditLog, NetPolicy, NetProblem};

    /// A proxy on 127.0.0.1 for `rules`, with `api.test` pinned to 127.0.0.1, writing its
    /// audit lines to a file in the returned directory.
    fn proxy(rules: &[String]) -> (ProxyHandle, tempfile::TempDir) {
        let mut policy = NetPolicy::default()
            .resolve("api.test", &[IpAddr::V4(Ipv4Addr::LOCALHOST)])
            .expect("pin");
        for rule in rules {
            policy = policy.allow(rule).expect("rule");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = AuditLog::open(&dir.path().join("audit.jsonl")).expect("audit log");
        let resolver = Arc::new(Resolver::new(policy, Some(audit)));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        (spawn(listener, resolver).expect("spawn"), dir)
    }

    fn audit_lines(dir: &tempfile::TempDir) -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.path().join("audit.jsonl"))
            .expect("audit file")
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect()
    }

    /// A server that sends back what it reads, on each connection, until the client closes.
    async fn echo_server() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = conn.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        port
    }

    /// An HTTP server that reads one request head and answers `body`, then closes.
    async fn http_server(body: &'static str) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    read_head(&mut conn).await;
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(answer.as_bytes()).await;
                });
            }
        });
        port
    }

    /// An HTTP server that reads everything until the client's end and answers it back as
    /// the body: what the proxy sent, byte for byte.
    async fn recording_server() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let _ = (&mut conn).take(1 << 20).read_to_end(&mut got).await;
                    let mut answer =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", got.len())
                            .into_bytes();
                    answer.extend_from_slice(&got);
                    let _ = conn.write_all(&answer).await;
                });
            }
        });
        port
    }

    /// A port on 127.0.0.1 that nothing listens on: bound, then closed.
    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    }

    /// Read up to the end of a head, one byte at a time so nothing after it is consumed.
    async fn read_head(conn: &mut TcpStream) -> String {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if conn.read(&mut byte).await.expect("read") == 0 {
                break;
            }
            head.push(byte[0]);
        }
        String::from_utf8(head).expect("text")
    }

    async fn send(proxy: &ProxyHandle, bytes: &[u8]) -> TcpStream {
        let mut conn = TcpStream::connect(proxy.local_addr())
            .await
            .expect("connect");
        conn.write_all(bytes).await.expect("write");
        conn
    }

    async fn read_all(conn: &mut TcpStream) -> String {
        let mut out = Vec::new();
        conn.read_to_end(&mut out).await.expect("read");
        String::from_utf8(out).expect("text")
    }

    #[tokio::test]
    async fn connect_is_admitted_relayed_and_audited_with_byte_counts() {
        let echo = echo_server().await;
        let (proxy, dir) = proxy(&[format!("api.test:{echo}")]);
        // The first tunnelled bytes arrive with the head, as eager clients send them.
        let request =
            format!("CONNECT api.test:{echo} HTTP/1.1\r\nHost: api.test:{echo}\r\n\r\nping");
        let mut conn = send(&proxy, request.as_bytes()).await;
        assert_eq!(
            read_head(&mut conn).await,
            "HTTP/1.1 200 Connection established\r\n\r\n"
        );
        let mut back = [0u8; 4];
        conn.read_exact(&mut back).await.expect("echo");
        assert_eq!(&back, b"ping");
        conn.write_all(b"pong!").await.expect("write");
        conn.shutdown().await.expect("shutdown");
        assert_eq!(read_all(&mut conn).await, "pong!");
        drop(conn);
        proxy.close().await;

        let lines = audit_lines(&dir);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0]["event"], "net");
        assert_eq!(lines[0]["decision"], "allow");
        assert_eq!(lines[0]["via"], "proxy");
        assert_eq!(lines[0]["name"], "api.test");
        assert_eq!(lines[0]["addr"], "127.0.0.1");
        assert_eq!(lines[0]["port"], echo);
        assert_eq!(lines[0]["rule"], format!("api.test:{echo}"));
        assert_eq!(lines[1]["event"], "net-close");
        assert_eq!(lines[1]["name"], "api.test");
        assert_eq!(lines[1]["port"], echo);
        assert_eq!(lines[1]["bytes_out"], 9);
        assert_eq!(lines[1]["bytes_in"], 9);
    }

    #[tokio::test]
    async fn connects_off_the_list_are_refused_with_403_and_the_reason() {
        let echo = echo_server().await;
        let other = echo_server().await;
        let (proxy, dir) = proxy(&[format!("api.test:{echo}"), "localhost".into()]);
        let cases = [
            (
                "evil.test:443".to_owned(),
                "no --allow-net rule matches this name",
            ),
            (
                format!("api.test:{other}"),
                "no --allow-net rule matches this name",
            ),
            (
                "127.0.0.1:80".to_owned(),
                "no --allow-net rule names this address",
            ),
            (
                format!("127.0.0.1:{echo}"),
                "no --allow-net rule names this address",
            ),
            // The system resolver maps `localhost` to loopback, which is not public.
            (
                "localhost:80".to_owned(),
                "it resolves only to addresses that are not public",
            ),
        ];
        for (target, reason) in &cases {
            let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
            let mut conn = send(&proxy, request.as_bytes()).await;
            let answer = read_all(&mut conn).await;
            let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
            assert!(
                head.starts_with("HTTP/1.1 403 Forbidden\r\n"),
                "{target}: {answer}"
            );
            assert!(
                head.contains("\r\nContent-Type: text/plain\r\n"),
                "{answer}"
            );
            assert!(head.contains("\r\nConnection: close\r\n"), "{answer}");
            let header = head
                .lines()
                .find_map(|l| l.strip_prefix("X-Sandpipe-Refused: "))
                .expect("the reason header");
            assert!(header.starts_with(reason), "{target}: {header}");
            assert!(
                body.starts_with(&format!("sandpipe: {target} refused: {reason}")),
                "{body}"
            );
            assert!(
                body.ends_with('\n') && body.lines().count() == 1,
                "{body:?}"
            );
        }
        proxy.close().await;
        let lines = audit_lines(&dir);
        assert_eq!(lines.len(), cases.len(), "{lines:?}");
        for line in &lines {
            assert_eq!(line["decision"], "refuse", "{line}");
            assert_eq!(line["via"], "proxy", "{line}");
        }
        assert_eq!(lines[0]["name"], "evil.test");
        assert_eq!(lines[0]["port"], 443);
    }

    /// A plain request's answer is recorded as its head (`response`, with the reason phrase
    /// the server gave) and its body as it came (chunked); the replay sends the plugin the
    /// very bytes the live answer had, with nothing connected.
    #[tokio::test]
    async fn a_plain_answer_is_recorded_as_its_head_and_body_and_replayed_byte_for_byte() {
        const ANSWER: &str = "HTTP/1.1 200 Fine\r\nTransfer-Encoding: chunked\r\nX-Kind: test\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.expect("accept");
            read_head(&mut conn).await;
            // The head arrives in pieces, cut inside its status line and inside the body.
            for piece in [&ANSWER[..12], &ANSWER[12..60], &ANSWER[60..]] {
                conn.write_all(piece.as_bytes()).await.expect("answer");
                conn.flush().await.expect("flush");
            }
        });
        let policy = NetPolicy::default()
            .resolve("api.test", &[IpAddr::V4(Ipv4Addr::LOCALHOST)])
            .expect("pin")
            .allow(&format!("api.test:{port}"))
            .expect("rule");
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("plain.transcript");
        let header = crate::run::record::RecordHeader {
            plugin: "plugin",
            sha256: "",
            framing: sandpipe_proto::frame::Framing::JsonLines,
            protocol: None,
            policy: &crate::policy::Policy::default(),
            max_frame: None,
            max_record: None,
        };
        let recorder = crate::run::record::Recorder::create(&file, &header).expect("recorder");
        let resolver = Arc::new(
            Resolver::new(policy.clone(), None)
                .with_tape(Some(NetTape::Record(Arc::new(recorder)))),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let proxy = spawn(listener, resolver).expect("spawn");
        let request = format!("GET http://api.test:{port}/a HTTP/1.1\r\nHost: api.test\r\n\r\n");
        let mut conn = send(&proxy, request.as_bytes()).await;
        let live = read_all(&mut conn).await;
        assert_eq!(live, ANSWER);
        // Every relay has ended, and written its lines, once the plugin's side is closed; the
        // recorder (held by the proxy's resolver) is then dropped, its file whole.
        drop(conn);
        proxy.close().await;

        let text = std::fs::read_to_string(&file).expect("the recording");
        let recording = sandpipe_proto::transcript::Recording::parse(&text).expect(&text);
        let events: Vec<&NetEvent> = recording.connection(0).collect();
        assert!(
            events.contains(&&NetEvent::Response(
                sandpipe_proto::transcript::HttpResponse {
                    status: 200,
                    headers: vec![
                        ("Transfer-Encoding".into(), "chunked".into()),
                        ("X-Kind".into(), "test".into())
                    ],
                    reason: Some("Fine".into()),
                }
            )),
            "{text}"
        );
        let body: Vec<u8> = events
            .iter()
            .filter_map(|e| match e {
                NetEvent::Data {
                    dir: NetDir::In,
                    bytes,
                } => Some(bytes.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(body, b"5\r\nhello\r\n0\r\n\r\n", "{text}");

        let replay = Arc::new(NetReplay::new(&recording));
        let resolver =
            Arc::new(Resolver::new(policy, None).with_tape(Some(NetTape::Replay(replay.clone()))));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let proxy = spawn(listener, resolver).expect("spawn");
        let mut conn = send(&proxy, request.as_bytes()).await;
        assert_eq!(read_all(&mut conn).await, ANSWER);
        assert!(replay.problems().is_empty(), "{:?}", replay.problems());
    }

    #[tokio::test]
    async fn a_plain_request_is_forwarded_in_origin_form_with_connection_close() {
        let server = recording_server().await;
        let (proxy, dir) = proxy(&[format!("api.test:{server}")]);
        let request = format!(
            "POST http://API.test:{server}/path?q=1 HTTP/1.1\r\n\
             Host: elsewhere.test\r\n\
             Proxy-Connection: keep-alive\r\n\
             Proxy-Authorization: Basic cGx1Z2luOnNlY3JldA==\r\n\
             Connection: keep-alive, X-Hop\r\n\
             X-Hop: 1\r\n\
             X-Kept: yes\r\n\
             Content-Length: 4\r\n\
             \r\n\
             body"
        );
        let mut conn = send(&proxy, request.as_bytes()).await;
        // The recording server answers at the end of what it reads: end the request.
        conn.shutdown().await.expect("shutdown");
        let answer = read_all(&mut conn).await;
        let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert_eq!(
            body,
            format!(
                "POST /path?q=1 HTTP/1.1\r\n\
                 Host: API.test:{server}\r\n\
                 X-Kept: yes\r\n\
                 Content-Length: 4\r\n\
                 Connection: close\r\n\
                 \r\n\
                 body"
            )
        );
        drop(conn);
        proxy.close().await;
        let lines = audit_lines(&dir);
        assert_eq!(lines[0]["decision"], "allow", "{lines:?}");
        assert_eq!(lines[1]["event"], "net-close", "{lines:?}");
        assert_eq!(lines[1]["bytes_in"], answer.len());
    }

    #[tokio::test]
    async fn bad_heads_get_400_and_oversized_ones_431() {
        let (proxy, _dir) = proxy(&["api.test".into()]);
        let huge = format!(
            "GET http://api.test/ HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        let many = format!(
            "GET http://api.test/ HTTP/1.1\r\n{}\r\n",
            "X-A: 1\r\n".repeat(MAX_HEADERS + 1)
        );
        let cases = [
            (
                huge.as_str(),
                "431 Request Header Fields Too Large",
                "exceeds 16384 bytes",
            ),
            (
                many.as_str(),
                "431 Request Header Fields Too Large",
                "more than 100 header",
            ),
            (
                "GET https://api.test/ HTTP/1.1\r\n\r\n",
                "400 Bad Request",
                "CONNECT",
            ),
            (
                "GET /x HTTP/1.1\r\nHost: api.test\r\n\r\n",
                "400 Bad Request",
                "not an http:// URL",
            ),
            (
                "GET http://u@api.test/ HTTP/1.1\r\n\r\n",
                "400 Bad Request",
                "user information",
            ),
            (
                "CONNECT api.test HTTP/1.1\r\n\r\n",
                "400 Bad Request",
                "not HOST:PORT",
            ),
            (
                "CONNECT api.test:0 HTTP/1.1\r\n\r\n",
                "400 Bad Request",
                "not HOST:PORT",
            ),
            (
                "CONNECT [::1 HTTP/1.1\r\n\r\n",
                "400 Bad Request",
                "not HOST:PORT",
            ),
            ("GET\0 / HTTP/1.1\r\n\r\n", "400 Bad Request", "malformed"),
            (
                "GET http://api.test/ HTTP/1.1\r\nX",
                "400 Bad Request",
                "closed inside",
            ),
        ];
        for (request, status, why) in cases {
            let mut conn = send(&proxy, request.as_bytes()).await;
            // Half-closing ends the truncated head; the others are answered before it.
            conn.shutdown().await.expect("shutdown");
            let answer = read_all(&mut conn).await;
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{request:.60}: {answer}"
            );
            assert!(answer.contains(why), "{request:.60}: {answer}");
        }
    }

    #[tokio::test]
    async fn an_upstream_that_refuses_gets_502() {
        let port = closed_port();
        let (proxy, _dir) = proxy(&[format!("api.test:{port}")]);
        let mut conn = send(
            &proxy,
            format!("CONNECT api.test:{port} HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
        let answer = read_all(&mut conn).await;
        assert!(
            answer.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
            "{answer}"
        );
        assert!(
            answer.contains(&format!("connecting to 127.0.0.1:{port} failed")),
            "{answer}"
        );
    }

    /// The SOCKS5 greeting offering only "no authentication", answered with it.
    async fn socks_greet(proxy: &ProxyHandle) -> TcpStream {
        let mut conn = send(proxy, &[0x05, 0x01, 0x00]).await;
        let mut choice = [0u8; 2];
        conn.read_exact(&mut choice).await.expect("method");
        assert_eq!(choice, [0x05, 0x00]);
        conn
    }

    fn socks_domain(command: u8, name: &str, port: u16) -> Vec<u8> {
        let mut out = vec![0x05, command, 0x00, 0x03, name.len() as u8];
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&port.to_be_bytes());
        out
    }

    async fn socks_reply(conn: &mut TcpStream) -> [u8; 10] {
        let mut reply = [0u8; 10];
        conn.read_exact(&mut reply).await.expect("reply");
        reply
    }

    /// TLS to the proxy's tunnel as a client that trusts `ca` alone, then one request, and the
    /// whole answer.
    async fn through_intercept(conn: TcpStream, ca: &crate::net::SessionCa, path: &str) -> String {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(
                rustls::pki_types::CertificateDer::from_pem_slice(ca.pem().as_bytes())
                    .expect("PEM"),
            )
            .expect("root");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from("api.test").expect("name");
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, conn)
            .await
            .expect("the session CA's certificate for api.test is trusted");
        let request = format!("GET {path} HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n");
        tls.write_all(request.as_bytes()).await.expect("request");
        let mut answer = Vec::new();
        let _ = tls.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// In a replay under `--tls-intercept` nothing is connected: a SOCKS5 and a `CONNECT`
    /// tunnel to `api.test:443` are answered with the session CA's certificate, and each
    /// request in them from the recording, or refused when it differs.
    #[tokio::test]
    async fn a_replayed_tls_tunnel_is_served_from_the_recording_over_socks5_and_connect() {
        let recording = sandpipe_proto::transcript::Recording::parse(concat!(
            "@0 open {\"via\":\"proxy\",\"host\":\"api.test\",\"port\":443,\"kind\":\"http\"}\n",
            "@0 request {\"method\":\"GET\",\"url\":\"https://api.test/a\"}\n@0 >end\n",
            "@0 response {\"status\":200,\"headers\":[[\"content-length\",\"5\"]]}\n",
            "@0 < hello\n@0 <end\n@0 close\n",
            "@1 open {\"via\":\"proxy\",\"host\":\"api.test\",\"port\":443,\"kind\":\"http\"}\n",
            "@1 request {\"method\":\"GET\",\"url\":\"https://api.test/b\"}\n@1 >end\n",
            "@1 response {\"status\":200,\"headers\":[[\"content-length\",\"0\"]]}\n@1 close\n",
        ))
        .expect("a recording");
        let replay = Arc::new(NetReplay::new(&recording));
        let ca = Arc::new(crate::net::SessionCa::new().expect("a CA"));
        let policy = NetPolicy::default().allow("api.test:443").expect("rule");
        let resolver = Arc::new(
            Resolver::new(policy, None)
                .with_tape(Some(NetTape::Replay(replay.clone())))
                .with_intercept(Some(ca.clone())),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let proxy = spawn(listener, resolver).expect("spawn");

        let mut conn = socks_greet(&proxy).await;
        conn.write_all(&socks_domain(0x01, "api.test", 443))
            .await
            .expect("request");
        assert_eq!(socks_reply(&mut conn).await[1], 0x00, "succeeded");
        let answer = through_intercept(conn, &ca, "/a").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nhello"), "{answer}");

        let mut conn = send(
            &proxy,
            b"CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n\r\n",
        )
        .await;
        let head = read_head(&mut conn).await;
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        let answer = through_intercept(conn, &ca, "/c").await;
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        assert!(
            answer.contains("replay: the request differs from the recording"),
            "{answer}"
        );
        let problems = replay.problems();
        assert!(
            matches!(&problems[..], [NetProblem::Diverged { conn: 1, .. }]),
            "{problems:?}"
        );
        proxy.close().await;
    }

    #[tokio::test]
    async fn socks5_connect_by_name_is_relayed_and_audited() {
        let echo = echo_server().await;
        let (proxy, dir) = proxy(&[format!("api.test:{echo}")]);
        let mut conn = socks_greet(&proxy).await;
        conn.write_all(&socks_domain(0x01, "api.test", echo))
            .await
            .expect("request");
        let reply = socks_reply(&mut conn).await;
        assert_eq!(reply[..4], [0x05, 0x00, 0x00, 0x01], "{reply:?}");
        assert_eq!(reply[4..8], [127, 0, 0, 1]);
        conn.write_all(b"hello").await.expect("write");
        conn.shutdown().await.expect("shutdown");
        assert_eq!(read_all(&mut conn).await, "hello");
        drop(conn);
        proxy.close().await;
        let lines = audit_lines(&dir);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(
            (&lines[0]["decision"], &lines[0]["name"]),
            (&"allow".into(), &"api.test".into())
        );
        assert_eq!(lines[1]["event"], "net-close");
        assert_eq!(
            (&lines[1]["bytes_out"], &lines[1]["bytes_in"]),
            (&5.into(), &5.into())
        );
    }

    #[tokio::test]
    async fn socks5_refusals_have_their_reply_codes() {
        let echo = echo_server().await;
        let closed = closed_port();
        let (proxy, dir) = proxy(&[format!("api.test:{echo}"), format!("127.0.0.1:{closed}")]);

        // An IPv4 literal no rule names: not allowed by the ruleset.
        let mut conn = socks_greet(&proxy).await;
        let mut request = vec![0x05, 0x01, 0x00, 0x01, 127, 0, 0, 2];
        request.extend_from_slice(&echo.to_be_bytes());
        conn.write_all(&request).await.expect("request");
        assert_eq!(socks_reply(&mut conn).await[1], 0x02);

        // A name off the list, and an allowed name on another port.
        for (name, port) in [("evil.test", 443), ("api.test", closed)] {
            let mut conn = socks_greet(&proxy).await;
            conn.write_all(&socks_domain(0x01, name, port))
                .await
                .expect("request");
            assert_eq!(socks_reply(&mut conn).await[1], 0x02, "{name}:{port}");
        }

        // BIND and UDP ASSOCIATE: command not supported.
        for command in [0x02, 0x03] {
            let mut conn = socks_greet(&proxy).await;
            conn.write_all(&socks_domain(command, "api.test", echo))
                .await
                .expect("request");
            assert_eq!(socks_reply(&mut conn).await[1], 0x07, "command {command}");
        }

        // An allowed address where nothing listens: connection refused.
        let mut conn = socks_greet(&proxy).await;
        let mut request = vec![0x05, 0x01, 0x00, 0x01, 127, 0, 0, 1];
        request.extend_from_slice(&closed.to_be_bytes());
        conn.write_all(&request).await.expect("request");
        assert_eq!(socks_reply(&mut conn).await[1], 0x05);

        // A greeting without "no authentication": no acceptable method, then the end.
        let mut conn = send(&proxy, &[0x05, 0x01, 0x02]).await;
        let mut answer = Vec::new();
        conn.read_to_end(&mut answer).await.expect("read");
        assert_eq!(answer, [0x05, 0xFF]);

        drop(conn);
        proxy.close().await;
        // Every refusal has its line: the three the allow-list decided, and BIND, UDP
        // ASSOCIATE and the greeting, which the proxy refused before asking it.
        let refusals: Vec<_> = audit_lines(&dir)
            .into_iter()
            .filter(|l| l["decision"] == "refuse")
            .collect();
        assert_eq!(refusals.len(), 6, "{refusals:?}");
        let reasons: Vec<_> = refusals
            .iter()
            .filter_map(|l| l["reason"].as_str())
            .filter(|r| r.starts_with("SOCKS5: "))
            .collect();
        assert_eq!(
            reasons,
            [
                "SOCKS5: BIND is not served (only CONNECT)",
                "SOCKS5: UDP ASSOCIATE is not served (only CONNECT)",
                "SOCKS5: no method sandpipe serves was offered (only no authentication)",
            ]
        );
        assert_eq!(refusals[3]["name"], "api.test");
        assert_eq!(refusals[3]["port"], echo);
    }

    #[tokio::test]
    async fn a_malformed_request_is_answered_and_audited() {
        let (proxy, dir) = proxy(&["api.test".into()]);
        let mut conn = send(&proxy, b"CONNECT not-an-authority HTTP/1.1\r\n\r\n").await;
        assert!(read_head(&mut conn).await.starts_with("HTTP/1.1 400 "));
        drop(conn);
        proxy.close().await;
        let lines = audit_lines(&dir);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["decision"], "refuse");
        assert_eq!(
            lines[0]["reason"],
            "HTTP proxy request: `not-an-authority` is not HOST:PORT"
        );
    }

    #[tokio::test]
    async fn connections_past_the_limit_are_closed() {
        let (proxy, _dir) = proxy(&["api.test".into()]);
        // Each greeting answered proves its connection is accepted and held.
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(socks_greet(&proxy).await);
        }
        // Served, it would be answered; closed, it reads its end (or a reset).
        let mut past = send(&proxy, &[0x05, 0x01, 0x00]).await;
        let mut byte = [0u8; 1];
        assert!(
            !matches!(past.read(&mut byte).await, Ok(1..)),
            "served past the limit"
        );
        drop(held);
    }

    #[tokio::test]
    async fn dropping_the_handle_ends_every_relay() {
        let echo = echo_server().await;
        let (proxy, _dir) = proxy(&[format!("api.test:{echo}")]);
        let mut conn = send(
            &proxy,
            format!("CONNECT api.test:{echo} HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
        assert!(read_head(&mut conn).await.starts_with("HTTP/1.1 200 "));
        let addr = proxy.local_addr();
        drop(proxy);
        // A live tunnel would echo this byte back.
        let _ = conn.write_all(b"x").await;
        let mut byte = [0u8; 1];
        assert!(
            !matches!(conn.read(&mut byte).await, Ok(1..)),
            "the tunnel outlived the proxy"
        );
        assert!(TcpStream::connect(addr).await.is_err(), "still listening");
    }

    /// A real client: Python's `urllib.request` honouring `HTTP_PROXY`.
    #[tokio::test]
    async fn python_urllib_through_the_proxy() {
        let server = http_server("hello through sandpipe").await;
        let (proxy, dir) = proxy(&[format!("api.test:{server}")]);
        let script = r#"
import sys, urllib.request, urllib.error
print(urllib.request.urlopen(sys.argv[1]).read().decode())
try:
    urllib.request.urlopen(sys.argv[2])
    print("not refused")
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("X-Sandpipe-Refused"), e.read().decode().strip(), sep="|")
"#;
        let url = format!("http://127.0.0.1:{}", proxy.local_addr().port());
        let out = tokio::process::Command::new("python3")
            .args([
                "-c",
                script,
                &format!("http://api.test:{server}/"),
                "http://evil.test/",
            ])
            .env("HTTP_PROXY", &url)
            .env("http_proxy", &url)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .output()
            .await
            .expect("python3 runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines,
            [
                "hello through sandpipe",
                "403|no --allow-net rule matches this name|sandpipe: evil.test:80 refused: no --allow-net rule matches this name",
            ]
        );
        proxy.close().await;
        let events: Vec<String> = audit_lines(&dir)
            .iter()
            .map(|l| format!("{} {}", l["event"], l["decision"]))
            .collect();
        assert_eq!(
            events,
            [
                "\"net\" \"allow\"",
                "\"net-close\" null",
                "\"net\" \"refuse\""
            ]
        );
    }
}
