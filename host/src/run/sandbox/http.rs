//! `wasi:http` outgoing requests for components, sent by sandpipe to what its [`Resolver`]
//! admits.
//!
//! ```text
//!  outgoing-handler.handle (wasmtime-wasi-http) ─► HttpHooks::send_request
//!     authority, port (80/443 by scheme) ─► Resolver::targets ─ refused ─► http-request-denied
//!     --http-header values set, replacing the guest's ─► TCP to the admitted address (no
//!     second lookup) ─► TLS with the name as SNI (webpki roots + $SSL_CERT_FILE) ─► HTTP/1.1
//! ```
//!
//! Each request that reached its server is one `net-close` line in the audit log, with the
//! body bytes it carried each way, once its response body is gone.
//!
//! Under `--record` ([`NetTape::Record`]) each request that got a connection is written into
//! the recording as the guest made it (method, URL, its own headers; a `--http-header` only by
//! name and variable), its body and the response's as they pass, chunk by chunk. In a replay
//! ([`NetTape::Replay`]) nothing is connected: the request claims the next recorded exchange
//! with its host and port, must match its method, URL and body, and gets the recorded
//! response; otherwise it is refused (`http-request-denied`) and the replay reports why.
//!
//! The interface is linked for every component (toolchains import it unused) and refuses
//! every request when the allow-list is empty. The guest never sees a `--http-header` value:
//! it is set on the request after the guest handed it over.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use http::uri::Scheme;
use http::{HeaderName, HeaderValue};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use sandpipe_proto::transcript::{
    AddedHeader, HttpRequest, HttpResponse, NetDir, NetEvent, NetNote, NetOpen, NetVia,
};

use crate::net::{AuditEvent, NetReplay, NetSink, NetTape, Resolver, Via, header_list};

/// What a request's response future resolves to: the response, and the connection's own
/// future (which wasmtime-wasi-http drives until the body is read).
type Sent = Result<
    (
        http::Response<WasiBody>,
        Box<dyn Future<Output = Result<(), Error>> + Send>,
    ),
    Error,
>;

/// The `wasi:http` hooks of one session.
pub(crate) struct HttpHooks {
    resolver: Arc<Resolver>,
}

impl HttpHooks {
    pub(super) fn new(resolver: Arc<Resolver>) -> Self {
        Self { resolver }
    }
}

impl WasiHttpHooks for HttpHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = Sent> + Send> {
        Box::new(send(self.resolver.clone(), request, options))
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

async fn send(
    resolver: Arc<Resolver>,
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Sent {
    let uri = request.uri().clone();
    let tls = uri.scheme() == Some(&Scheme::HTTPS);
    let host = uri.host().ok_or(Error::HttpRequestUriInvalid)?;
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let name = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if let Some(replay) = resolver.replaying() {
        return replayed(replay, &name, port, request).await;
    }
    let targets = resolver
        .targets(host, port, Via::WasiHttp)
        .await
        .map_err(|_| Error::HttpRequestDenied)?;
    // The request as the guest made it, before sandpipe's headers: what a recording holds.
    let sink = match resolver.tape() {
        Some(NetTape::Record(sink)) => Some(sink.clone()),
        _ => None,
    };
    let head = sink
        .as_ref()
        .map(|_| guest_request(&request, &uri, &resolver, &name));
    for header in resolver.policy().headers_for(&name) {
        let (Ok(key), Ok(value)) = (
            HeaderName::from_bytes(header.name.as_bytes()),
            HeaderValue::from_str(&header.value),
        ) else {
            return Err(Error::InternalError(Some(format!(
                "--http-header {header} is not a valid header"
            ))));
        };
        request.headers_mut().insert(key, value);
    }

    let connect_timeout = options.and_then(|o| o.connect_timeout);
    let mut failed = Error::DestinationNotFound;
    let mut connected = None;
    for target in &targets {
        match within(connect_timeout, TcpStream::connect(target.addr)).await {
            Some(Ok(tcp)) => {
                connected = Some((tcp, target));
                break;
            }
            Some(Err(e)) => failed = Error::Connect(e),
            None => failed = Error::ConnectionTimeout,
        }
    }
    let Some((tcp, target)) = connected else {
        if let (Some(sink), Some(head)) = (&sink, head) {
            let open = NetOpen {
                via: NetVia::WasiHttp,
                host: name.clone(),
                port,
                kind: None,
                addr: None,
                rule: targets.first().map(|t| t.rule.clone()),
            };
            let reason = failed.to_string();
            sink.open(&open)
                .and_then(|conn| {
                    sink.event(conn, &NetEvent::Request(head))?;
                    sink.event(conn, &NetEvent::Failed(NetNote { reason }))?;
                    sink.event(conn, &NetEvent::Close)
                })
                .map_err(recording_error)?;
        }
        return Err(failed);
    };
    // The connection's number in the recording, once its `open` and `request` are written.
    let taped = match (&sink, head) {
        (Some(sink), Some(head)) => {
            let open = NetOpen {
                via: NetVia::WasiHttp,
                host: name.clone(),
                port,
                kind: None,
                addr: Some(target.addr.to_string()),
                rule: Some(target.rule.clone()),
            };
            let conn = sink
                .open(&open)
                .and_then(|conn| sink.event(conn, &NetEvent::Request(head)).map(|()| conn))
                .map_err(recording_error)?;
            Some(Tape {
                sink: sink.clone(),
                conn,
                ended: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            })
        }
        _ => None,
    };
    let bytes_out = Arc::new(AtomicU64::new(0));
    let bytes_in = Arc::new(AtomicU64::new(0));
    let tally = Tally {
        resolver: resolver.clone(),
        name: target.name.clone(),
        addr: target.addr,
        bytes_out: bytes_out.clone(),
        bytes_in: bytes_in.clone(),
    };
    let request = request.map(|body| {
        Counted {
            body,
            counter: bytes_out,
            tape: taped.clone().map(|t| (t, NetDir::Out)),
            _tally: None,
        }
        .boxed_unsync()
    });
    let stream: Box<dyn Stream> = if tls {
        let server = rustls::pki_types::ServerName::try_from(name)
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        let connector = tokio_rustls::TlsConnector::from(crate::net::client_config());
        Box::new(connector.connect(server, tcp).await.map_err(Error::Tls)?)
    } else {
        Box::new(tcp)
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let mut request = request;

    // The request line carries only the path: the scheme and authority are for a proxy.
    *request.uri_mut() = http::Uri::builder()
        .path_and_query(uri.path_and_query().map_or("/", |p| p.as_str()))
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    let first_byte_timeout = options.and_then(|o| o.first_byte_timeout);
    let response = async {
        match within(first_byte_timeout, sender.send_request(request)).await {
            Some(r) => r.map_err(Error::from),
            None => Err(Error::ConnectionReadTimeout),
        }
    };
    // The connection must be driven while the response is awaited; whatever is left of it
    // goes back to wasmtime-wasi-http, which drives it while the guest reads the body.
    let mut response = pin!(response);
    let mut conn = Some(conn);
    let response = std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = response.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        let Some(c) = conn.as_mut() else {
            return Poll::Pending;
        };
        let ended = std::task::ready!(Pin::new(c).poll(cx));
        conn = None;
        match ended {
            Ok(()) => response.as_mut().poll(cx),
            Err(e) => Poll::Ready(Err(Error::from(e))),
        }
    })
    .await?;
    let io = async move {
        match conn {
            Some(c) => c.await.map_err(Error::from),
            None => Ok(()),
        }
    };
    if let Some(tape) = &taped {
        // The request's body is done when its answer comes (a server answering before the
        // whole body has arrived gets the rest unrecorded: see `Counted`).
        tape.ended.store(true, Ordering::Relaxed);
        let head = HttpResponse {
            status: response.status().as_u16(),
            headers: header_list(response.headers()),
            reason: None,
        };
        tape.sink
            .event(tape.conn, &NetEvent::End { dir: NetDir::Out })
            .and_then(|()| tape.sink.event(tape.conn, &NetEvent::Response(head)))
            .map_err(recording_error)?;
    }
    Ok((
        response.map(|b| {
            Counted {
                body: b.map_err(Error::from).boxed_unsync(),
                counter: bytes_in,
                tape: taped.map(|t| (t, NetDir::In)),
                _tally: Some(tally),
            }
            .boxed_unsync()
        }),
        Box::new(io),
    ))
}

/// One exchange being recorded: the recording, the connection's number in it, and whether
/// the request's body is over (its answer came).
#[derive(Clone)]
struct Tape {
    sink: Arc<dyn NetSink>,
    conn: u64,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

/// The guest's error for a recording that stopped (`--max-record`): the request fails, and
/// the CLI reports the recording's end.
fn recording_error(e: crate::RecordError) -> Error {
    Error::InternalError(Some(format!("sandpipe: --record: {e}")))
}

/// The request as the guest made it, for the recording: method, URL, the guest's own
/// headers, and sandpipe's `--http-header`s by name and source, never by value.
fn guest_request<B>(
    request: &http::Request<B>,
    uri: &http::Uri,
    resolver: &Resolver,
    name: &str,
) -> HttpRequest {
    HttpRequest {
        method: request.method().as_str().to_owned(),
        url: uri.to_string(),
        headers: header_list(request.headers()),
        added: resolver
            .policy()
            .headers_for(name)
            .map(|h| AddedHeader {
                name: h.name.clone(),
                from: h
                    .var
                    .as_ref()
                    .map_or_else(|| "<redacted>".to_owned(), |v| format!("env:{v}")),
            })
            .collect(),
    }
}

/// A request in a replay: served from the recording, never sent. The request claims the next
/// recorded exchange with its host and port; its method, URL and body must be the recorded
/// ones. A request the recording does not have, or one that differs, is refused as the
/// allow-list refuses (`http-request-denied`), and `replay` reports it.
async fn replayed(
    replay: &NetReplay,
    name: &str,
    port: u16,
    request: http::Request<WasiBody>,
) -> Sent {
    let Some(conn) = replay.claim(NetVia::WasiHttp, name, port) else {
        return Err(Error::HttpRequestDenied);
    };
    let uri = request.uri().clone();
    let head = HttpRequest {
        method: request.method().as_str().to_owned(),
        url: uri.to_string(),
        headers: header_list(request.headers()),
        added: Vec::new(),
    };
    // Read no more of the body than could still match: the recorded one and a byte.
    let cap = replay.body_cap(conn);
    let mut body = request.into_body();
    let mut sent = Vec::new();
    while sent.len() < cap {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = cap - sent.len();
                    sent.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    let Some(played) = replay.http(conn, &head, &sent) else {
        tracing::warn!(
            "replay: {} {} refused: it differs from the recording",
            head.method,
            head.url
        );
        return Err(Error::HttpRequestDenied);
    };
    let Some(recorded) = played.response else {
        // The recorded exchange failed: it fails again.
        return Err(Error::ConnectionRefused);
    };
    let mut response = http::Response::builder().status(recorded.status);
    for (name, value) in &recorded.headers {
        response = response.header(name.as_str(), value.as_str());
    }
    let chunks = played.body.into_iter().map(bytes::Bytes::from).collect();
    let response = response
        .body(Played { chunks }.boxed_unsync())
        .map_err(|e| Error::InternalError(Some(format!("replay: the recorded response: {e}"))))?;
    Ok((response, Box::new(async { Ok::<(), Error>(()) })))
}

/// A recorded response body, played back in the chunks the replay keeps it in.
struct Played {
    chunks: std::collections::VecDeque<bytes::Bytes>,
}

impl http_body::Body for Played {
    type Data = bytes::Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Poll::Ready(
            self.chunks
                .pop_front()
                .map(|c| Ok(http_body::Frame::data(c))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }
}

/// The bytes one request carried, written to the audit log as `net-close` when the response
/// body is gone: read to its end (wasmtime-wasi-http drops it then, before the guest hears of
/// the end) or dropped by the guest. Owned by the response body alone, so the line is written
/// at a point the guest's own actions decide, not when a connection task happens to end.
struct Tally {
    resolver: Arc<Resolver>,
    name: Option<String>,
    addr: std::net::SocketAddr,
    bytes_out: Arc<AtomicU64>,
    bytes_in: Arc<AtomicU64>,
}

impl Drop for Tally {
    fn drop(&mut self) {
        if let Some(audit) = self.resolver.audit() {
            audit.record(&AuditEvent::NetClose {
                via: Via::WasiHttp,
                name: self.name.clone(),
                addr: self.addr.ip().to_string(),
                port: self.addr.port(),
                bytes_out: self.bytes_out.load(Ordering::Relaxed),
                bytes_in: self.bytes_in.load(Ordering::Relaxed),
            });
        }
    }
}

/// A request or response body whose data bytes are added to `counter` and, under
/// `--record`, written into the recording as they pass (`tape`: the exchange and which way);
/// the response body also holds its request's [`Tally`].
struct Counted {
    body: WasiBody,
    counter: Arc<AtomicU64>,
    tape: Option<(Tape, NetDir)>,
    // Held only to be dropped with the body (its Drop writes the line).
    _tally: Option<Tally>,
}

impl Counted {
    /// Record `data` (or the body's end, for `None`): a response's `<end` and `close` once
    /// it ends, and the recording's error as the body's when it has stopped.
    fn tape(&mut self, data: Option<&[u8]>) -> Result<(), Error> {
        let Some((tape, dir)) = self.tape.as_ref().map(|(t, d)| (t.clone(), *d)) else {
            return Ok(());
        };
        let result = match (data, dir) {
            // Bytes sent after the server answered are past the request's `>end`.
            (Some(_), NetDir::Out) if tape.ended.load(Ordering::Relaxed) => {
                tracing::warn!(
                    "--record: request body bytes sent after the response are not recorded"
                );
                Ok(())
            }
            (Some(bytes), _) => tape.sink.data(tape.conn, dir, bytes),
            (None, NetDir::Out) => Ok(()),
            (None, NetDir::In) => {
                // Written once: the body is done with the tape.
                self.tape = None;
                tape.sink
                    .event(tape.conn, &NetEvent::End { dir: NetDir::In })
                    .and_then(|()| tape.sink.event(tape.conn, &NetEvent::Close))
            }
        };
        result.map_err(recording_error)
    }
}

impl Drop for Counted {
    /// A response body the guest dropped before its end closes its exchange in the recording.
    fn drop(&mut self) {
        if let Some((tape, NetDir::In)) = self.tape.take() {
            let _ = tape.sink.event(tape.conn, &NetEvent::Close);
        }
    }
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let frame = std::task::ready!(Pin::new(&mut self.body).poll_frame(cx));
        if let Some(Ok(f)) = &frame
            && let Some(data) = f.data_ref()
        {
            let n = u64::try_from(data.len()).unwrap_or(u64::MAX);
            self.counter.fetch_add(n, Ordering::Relaxed);
            let data = data.clone();
            if let Err(e) = self.tape(Some(&data)) {
                return Poll::Ready(Some(Err(e)));
            }
            // The last data frame of a body whose length is known: its end is not polled.
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

async fn within<T>(limit: Option<Duration>, f: impl Future<Output = T>) -> Option<T> {
    match limit {
        Some(d) => tokio::time::timeout(d, f).await.ok(),
        None => Some(f.await),
    }
}
