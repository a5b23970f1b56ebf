//! `--tls-intercept`: a native plugin's TLS tunnel read as the HTTP/1.1 it carries.
//!
//! ```text
//!  plugin ─ CONNECT api.test:443 ─► proxy: allow-list, TCP to the pinned address, 200
//!         ─ TLS (session CA's certificate for api.test) ─► hyper server ─┐  each request:
//!                                                                       │  recorded (open,
//!   live:   --http-header set ─► hyper client ─ TLS (verified: webpki   │  request, bodies,
//!           roots + $SSL_CERT_FILE) ─► the server ─► the response ──────┘  response), then
//!   replay: no server: the request claims the next recorded exchange and gets its response
//! ```
//!
//! Each request in the tunnel is one exchange in the recording (`open` with kind `http`, the
//! request as the plugin made it, the response as the server gave it), so a replay serves it
//! as it serves a `wasi:http` request: by host, port and order, then method, URL and body.
//! The tunnel's far end is verified as a `wasi:http` request's is; when it cannot be, every
//! request in the tunnel is answered `502` with why. A plugin that refuses the session CA's
//! certificate (it pins its server's, or reads no CA variable) ends the tunnel, and sandpipe's
//! log says so, naming `--tls-intercept`.
//!
//! What it does not do: HTTP/2 (the plugin is offered HTTP/1.1 alone, over ALPN), protocol
//! upgrades (WebSocket) inside a tunnel, or client certificates.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use sandpipe_proto::transcript::{
    AddedHeader, HttpRequest, HttpResponse, NetDir, NetEvent, NetKind, NetNote, NetOpen, NetVia,
};

use super::tape::NetSink;
use super::{Admitted, AuditEvent, NetTape, Resolver, Via};

/// The error of every body here: a concrete type (a boxed `dyn Error` trips the compiler's
/// proof that the hyper futures are `Send`).
type BodyError = std::io::Error;
type Body = UnsyncBoxBody<Bytes, BodyError>;
type Reply = http::Response<Body>;

/// A stream as hyper's IO.
#[derive(Debug)]
pub(crate) struct HyperIo<S>(pub(crate) S);

impl<S: AsyncRead + Unpin> hyper::rt::Read for HyperIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        // Read into a buffer of our own and copy: hyper's cursor hands out uninitialised
        // memory only through `unsafe`.
        let mut chunk = [0u8; 8192];
        let n = buf.remaining().min(chunk.len());
        let mut read = ReadBuf::new(&mut chunk[..n]);
        ready!(Pin::new(&mut self.0).poll_read(cx, &mut read))?;
        buf.put_slice(read.filled());
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> hyper::rt::Write for HyperIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A client stream with the bytes already read from it in front (what followed a `CONNECT`
/// head in the same read).
pub(super) struct Rewind<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub(super) fn new(prefix: Vec<u8>, inner: S) -> Self {
        Self {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A stream that adds the bytes written to it to a counter (for the `net-close` line).
struct Metered<S> {
    inner: S,
    written: Arc<AtomicU64>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            this.written.fetch_add(n as u64, Ordering::Relaxed);
        }
        result
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Where a tunnel's requests go: the server it was opened to, or nowhere (why), or the
/// recording (a replay).
enum Upstream {
    Live(tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Body>>),
    Failed(String),
    Replay,
}

/// One intercepted tunnel: what each of its requests needs.
struct Tunnel {
    resolver: Arc<Resolver>,
    /// The host as the recording names it (lower case, an IPv6 literal without brackets).
    host: String,
    /// The URL's authority: the host as asked (an IPv6 literal in brackets) and the port
    /// unless it is 443.
    authority: String,
    port: u16,
    /// The admitted address (not in a replay).
    to: Option<Admitted>,
    upstream: Upstream,
}

/// Read the plugin's TLS tunnel to `host:port` as HTTP/1.1: `server` is the connection to
/// the admitted address `to` (`None` in a replay, which connects nothing). Returns when the
/// plugin ends the tunnel.
pub(super) async fn serve<S>(
    client: S,
    server: Option<(TcpStream, Admitted)>,
    host: &str,
    port: u16,
    resolver: Arc<Resolver>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(ca) = resolver.intercept().cloned() else {
        return;
    };
    let name = super::tape::tape_host(host);
    let config = match ca.server_config(&name) {
        Ok(config) => config,
        Err(e) => {
            tracing::warn!("proxy: {e}");
            return;
        }
    };
    let bytes_in = Arc::new(AtomicU64::new(0));
    let client = Metered {
        inner: client,
        written: bytes_in.clone(),
    };
    let client = match tokio_rustls::TlsAcceptor::from(config).accept(client).await {
        Ok(tls) => tls,
        Err(e) => {
            tracing::warn!(
                "proxy: {host}:{port}: the plugin refused the certificate of sandpipe's session CA ({e}): it reads none of the CA variables --tls-intercept sets (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, DENO_CERT), or it pins its server's certificate; without --tls-intercept its TLS is tunnelled unread"
            );
            return;
        }
    };
    let bytes_out = Arc::new(AtomicU64::new(0));
    let (upstream, conn, to) = match server {
        None => (Upstream::Replay, None, None),
        Some((server, to)) => {
            let server = Metered {
                inner: server,
                written: bytes_out.clone(),
            };
            match connect(server, &name).await {
                Ok((sender, conn)) => (
                    Upstream::Live(tokio::sync::Mutex::new(sender)),
                    Some(conn),
                    Some(to),
                ),
                Err(reason) => {
                    tracing::warn!("proxy: {host}:{port}: {reason}");
                    (Upstream::Failed(reason), None, Some(to))
                }
            }
        }
    };
    let authority = if port == 443 {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    };
    let tunnel = Arc::new(Tunnel {
        resolver: resolver.clone(),
        host: name,
        authority,
        port,
        to: to.clone(),
        upstream,
    });
    let service = hyper::service::service_fn(move |request| {
        let tunnel = tunnel.clone();
        async move { Ok::<_, Infallible>(exchange(&tunnel, request).await) }
    });
    let served =
        hyper::server::conn::http1::Builder::new().serve_connection(HyperIo(client), service);
    let far = async {
        if let Some(conn) = conn
            && let Err(e) = conn.await
        {
            tracing::debug!("proxy: {host}:{port}: the server's connection: {e}");
        }
    };
    let (served, ()) = tokio::join!(served, far);
    if let Err(e) = served {
        tracing::debug!("proxy: {host}:{port}: the plugin's connection: {e}");
    }
    if let (Some(to), Some(audit)) = (to, resolver.audit()) {
        audit.record(&AuditEvent::NetClose {
            via: Via::Proxy,
            name: to.name.clone(),
            addr: to.addr.ip().to_string(),
            port: to.addr.port(),
            bytes_out: bytes_out.load(Ordering::Relaxed),
            bytes_in: bytes_in.load(Ordering::Relaxed),
        });
    }
}

type Connection<S> =
    hyper::client::conn::http1::Connection<HyperIo<tokio_rustls::client::TlsStream<S>>, Body>;

/// TLS to the tunnel's far end, verified for `name`, and HTTP/1.1 over it.
async fn connect<S>(
    server: S,
    name: &str,
) -> Result<(hyper::client::conn::http1::SendRequest<Body>, Connection<S>), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let server_name = rustls::pki_types::ServerName::try_from(name.to_owned())
        .map_err(|e| format!("`{name}` is not a name TLS can verify: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(super::client_config())
        .connect(server_name, server)
        .await
        .map_err(|e| format!("sandpipe could not verify the server: {e}"))?;
    hyper::client::conn::http1::handshake(HyperIo(tls))
        .await
        .map_err(|e| format!("HTTP/1.1 to the server: {e}"))
}

/// The header fields a proxy does not pass on (RFC 9110 §7.6.1), and `Upgrade`, which
/// sandpipe does not serve inside a tunnel.
fn hop_by_hop(headers: &mut http::HeaderMap) {
    let named: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|t| t.trim().to_ascii_lowercase()))
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "upgrade",
        "te",
    ] {
        headers.remove(name);
    }
}

/// Header fields as text pairs, in order (bytes that are not UTF-8 replaced).
pub(crate) fn header_list(headers: &http::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// A whole `text/plain` answer of one line, the reason (if any) in `X-Sandpipe-Refused`.
fn plain(status: http::StatusCode, reason: Option<&str>, line: &str) -> Reply {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    };
    let mut response = http::Response::builder()
        .status(status)
        .header("content-type", "text/plain");
    if let Some(reason) = reason {
        response = response.header("x-sandpipe-refused", clean(reason));
    }
    let body = http_body_util::Full::new(Bytes::from(format!("{}\n", clean(line))))
        .map_err(|never| match never {})
        .boxed_unsync();
    response.body(body).unwrap_or_else(|_| {
        // Every part above is valid; an empty 502 if not.
        let mut r = http::Response::new(Body::default());
        *r.status_mut() = http::StatusCode::BAD_GATEWAY;
        r
    })
}

/// One request in the tunnel: recorded and sent on, or served from the recording.
async fn exchange(tunnel: &Tunnel, request: http::Request<Incoming>) -> Reply {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let seen = HttpRequest {
        method: parts.method.as_str().to_owned(),
        url: format!("https://{}{path}", tunnel.authority),
        headers: header_list(&parts.headers),
        added: Vec::new(),
    };
    let (host, port) = (&tunnel.host, tunnel.port);
    let sender = match &tunnel.upstream {
        Upstream::Replay => return replayed(tunnel, seen, body).await,
        Upstream::Live(sender) => Some(sender),
        Upstream::Failed(_) => None,
    };
    let resolver = &tunnel.resolver;
    let added: Vec<AddedHeader> = resolver
        .policy()
        .headers_for(host)
        .map(|h| AddedHeader {
            name: h.name.clone(),
            from: h
                .var
                .as_ref()
                .map_or_else(|| "<redacted>".to_owned(), |v| format!("env:{v}")),
        })
        .collect();
    let taped = match record(tunnel, HttpRequest { added, ..seen }) {
        Ok(taped) => taped,
        Err(e) => {
            return plain(
                http::StatusCode::BAD_GATEWAY,
                None,
                &format!("sandpipe: --record: {e}"),
            );
        }
    };
    let Some(sender) = sender else {
        let reason = match &tunnel.upstream {
            Upstream::Failed(reason) => reason.clone(),
            _ => String::new(),
        };
        return failed(taped.as_ref(), host, port, reason);
    };
    hop_by_hop(&mut parts.headers);
    for header in resolver.policy().headers_for(host) {
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(header.name.as_bytes()),
            http::HeaderValue::from_str(&header.value),
        ) else {
            return plain(
                http::StatusCode::BAD_GATEWAY,
                None,
                &format!("sandpipe: --http-header {header} is not a valid header"),
            );
        };
        parts.headers.insert(name, value);
    }
    parts.uri = match path.parse() {
        Ok(uri) => uri,
        Err(_) => return plain(http::StatusCode::BAD_REQUEST, None, "sandpipe: a bad path"),
    };
    let ended = Arc::new(AtomicBool::new(false));
    let out = Taped {
        body: body.map_err(std::io::Error::other).boxed_unsync(),
        tape: taped.clone().map(|(sink, conn)| (sink, conn, NetDir::Out)),
        ended: ended.clone(),
    }
    .boxed_unsync();
    let sent = {
        let mut sender = sender.lock().await;
        match sender.ready().await {
            Ok(()) => {
                sender
                    .send_request(http::Request::from_parts(parts, out))
                    .await
            }
            Err(e) => Err(e),
        }
    };
    let response = match sent {
        Ok(response) => response,
        Err(e) => {
            let reason = format!("the server's answer: {e}");
            return failed(taped.as_ref(), host, port, reason);
        }
    };
    ended.store(true, Ordering::Relaxed);
    if let Some((sink, conn)) = &taped {
        let head = HttpResponse {
            status: response.status().as_u16(),
            headers: header_list(response.headers()),
            reason: None,
        };
        let written = sink
            .event(*conn, &NetEvent::End { dir: NetDir::Out })
            .and_then(|()| sink.event(*conn, &NetEvent::Response(head)));
        if let Err(e) = written {
            return plain(
                http::StatusCode::BAD_GATEWAY,
                None,
                &format!("sandpipe: --record: {e}"),
            );
        }
    }
    let (mut parts, body) = response.into_parts();
    hop_by_hop(&mut parts.headers);
    let body = Taped {
        body: body.map_err(std::io::Error::other).boxed_unsync(),
        tape: taped.map(|(sink, conn)| (sink, conn, NetDir::In)),
        ended,
    }
    .boxed_unsync();
    http::Response::from_parts(parts, body)
}

/// The exchange failed for `reason`: so the recording says (`failed`, `close`), and the
/// plugin gets a `502` saying why.
fn failed(taped: Option<&Exchange>, host: &str, port: u16, reason: String) -> Reply {
    if let Some((sink, conn)) = taped {
        let note = NetNote {
            reason: reason.clone(),
        };
        let _ = sink
            .event(*conn, &NetEvent::Failed(note))
            .and_then(|()| sink.event(*conn, &NetEvent::Close));
    }
    plain(
        http::StatusCode::BAD_GATEWAY,
        None,
        &format!("sandpipe: {host}:{port}: {reason}"),
    )
}

/// An exchange being recorded: the recording, and its number there.
type Exchange = (Arc<dyn NetSink>, u64);

/// The exchange's `open` and `request` lines, when the session records its network.
fn record(
    tunnel: &Tunnel,
    request: HttpRequest,
) -> Result<Option<Exchange>, crate::error::RecordError> {
    let Some(NetTape::Record(sink)) = tunnel.resolver.tape() else {
        return Ok(None);
    };
    let open = NetOpen {
        via: NetVia::Proxy,
        host: tunnel.host.clone(),
        port: tunnel.port,
        kind: Some(NetKind::Http),
        addr: tunnel.to.as_ref().map(|to| to.addr.to_string()),
        rule: tunnel.to.as_ref().map(|to| to.rule.clone()),
    };
    let conn = sink.open(&open)?;
    sink.event(conn, &NetEvent::Request(request))?;
    Ok(Some((sink.clone(), conn)))
}

/// A request in a replayed tunnel: the recorded answer when its method, URL and body are
/// the recorded ones (the body read no further than could still match); otherwise `403` and
/// the replay's report, as for a plain request.
async fn replayed(tunnel: &Tunnel, seen: HttpRequest, mut body: Incoming) -> Reply {
    let (host, port) = (&tunnel.host, tunnel.port);
    let refuse = |reason: &str| {
        let reason = format!("replay: {reason}");
        plain(
            http::StatusCode::FORBIDDEN,
            Some(&reason),
            &format!("sandpipe: {host}:{port} refused: {reason}"),
        )
    };
    let Some(replay) = tunnel.resolver.replaying() else {
        return refuse("no recording");
    };
    let Some(conn) = replay.claim(NetVia::Proxy, host, port) else {
        return refuse("the recording has no more connections there");
    };
    let cap = replay.body_cap(conn);
    let mut sent = Vec::new();
    while sent.len() < cap {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = cap - sent.len();
                    sent.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            Some(Err(_)) | None => break,
        }
    }
    let Some(played) = replay.http(conn, &seen, &sent) else {
        tracing::warn!(
            "replay: {} {} refused: it differs from the recording",
            seen.method,
            seen.url
        );
        return refuse("the request differs from the recording");
    };
    let Some(recorded) = played.response.filter(|_| played.failed.is_none()) else {
        return plain(
            http::StatusCode::BAD_GATEWAY,
            None,
            &format!("sandpipe: {host}:{port}: replay: the recorded request failed"),
        );
    };
    let mut response = http::Response::builder().status(recorded.status);
    for (name, value) in &recorded.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    let chunks = played.body.into_iter().map(Bytes::from).collect();
    let body = Recorded(chunks).boxed_unsync();
    let mut response = match response.body(body) {
        Ok(r) => r,
        Err(e) => {
            return plain(
                http::StatusCode::BAD_GATEWAY,
                None,
                &format!("sandpipe: replay: the recorded response: {e}"),
            );
        }
    };
    hop_by_hop(response.headers_mut());
    response
}

/// A recorded response body, played back in the chunks the replay keeps it in.
struct Recorded(std::collections::VecDeque<Bytes>);

impl http_body::Body for Recorded {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        Poll::Ready(self.0.pop_front().map(|c| Ok(http_body::Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }
}

/// A body whose data is written into the recording as it passes (`tape`: the recording, the
/// exchange and which way). A response body's end writes `<end` and `close`; a request body's
/// bytes after the response came (`ended`) are not recorded.
struct Taped {
    body: Body,
    tape: Option<(Arc<dyn NetSink>, u64, NetDir)>,
    ended: Arc<AtomicBool>,
}

impl Taped {
    fn tape(&mut self, data: Option<&[u8]>) -> Result<(), BodyError> {
        let Some((sink, conn, dir)) = self.tape.clone() else {
            return Ok(());
        };
        let result = match (data, dir) {
            (Some(_), NetDir::Out) if self.ended.load(Ordering::Relaxed) => Ok(()),
            (Some(bytes), _) => sink.data(conn, dir, bytes),
            (None, NetDir::Out) => Ok(()),
            (None, NetDir::In) => {
                self.tape = None;
                sink.event(conn, &NetEvent::End { dir: NetDir::In })
                    .and_then(|()| sink.event(conn, &NetEvent::Close))
            }
        };
        result.map_err(|e| std::io::Error::other(format!("sandpipe: --record: {e}")))
    }
}

impl Drop for Taped {
    /// A response body the plugin left before its end closes its exchange in the recording.
    fn drop(&mut self) {
        if let Some((sink, conn, NetDir::In)) = self.tape.take() {
            let _ = sink.event(conn, &NetEvent::Close);
        }
    }
}

impl http_body::Body for Taped {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BodyError>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if let Some(Ok(f)) = &frame
            && let Some(data) = f.data_ref()
        {
            let data = data.clone();
            if let Err(e) = self.tape(Some(&data)) {
                return Poll::Ready(Some(Err(e)));
            }
            if self.body.is_end_stream()
                && let Err(e) = self.tape(None)
            {
                return Poll::Ready(Some(Err(e)));
            }
        }
        if frame.is_none()
            && let Err(e) = self.tape(None)
        {
            return Poll::Ready(Some(Err(e)));
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
