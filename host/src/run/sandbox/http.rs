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
//! The interface is linked for every component (toolchains import it unused) and refuses
//! every request when the allow-list is empty. The guest never sees a `--http-header` value:
//! it is set on the request after the guest handed it over.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use http::uri::Scheme;
use http::{HeaderName, HeaderValue};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::net::{AuditEvent, Resolver, Via};

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
    let targets = resolver
        .targets(host, port, Via::WasiHttp)
        .await
        .map_err(|_| Error::HttpRequestDenied)?;
    let name = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
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
    let (tcp, target) = connected.ok_or(failed)?;
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
            _tally: None,
        }
        .boxed_unsync()
    });
    let stream: Box<dyn Stream> = if tls {
        let server = rustls::pki_types::ServerName::try_from(name)
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        let connector = tokio_rustls::TlsConnector::from(tls_config());
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
    Ok((
        response.map(|b| {
            Counted {
                body: b.map_err(Error::from).boxed_unsync(),
                counter: bytes_in,
                _tally: Some(tally),
            }
            .boxed_unsync()
        }),
        Box::new(io),
    ))
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

/// A request or response body whose data bytes are added to `counter`; the response body
/// also holds its request's [`Tally`].
struct Counted {
    body: WasiBody,
    counter: Arc<AtomicU64>,
    // Held only to be dropped with the body (its Drop writes the line).
    _tally: Option<Tally>,
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

/// The TLS client configuration, built once per process: the roots wasmtime's own sender
/// trusts (webpki's), plus the certificates in `$SSL_CERT_FILE` when sandpipe's environment
/// names one (a private or test CA).
fn tls_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            if let Some(path) = std::env::var_os("SSL_CERT_FILE") {
                use rustls::pki_types::CertificateDer;
                use rustls::pki_types::pem::PemObject;
                match CertificateDer::pem_file_iter(&path) {
                    Ok(certs) => {
                        let (added, ignored) =
                            roots.add_parsable_certificates(certs.filter_map(Result::ok));
                        tracing::debug!(
                            "wasi:http trusts {added} certificates from SSL_CERT_FILE ({ignored} unusable)"
                        );
                    }
                    Err(e) => tracing::warn!(
                        "reading SSL_CERT_FILE {}: {e}; wasi:http trusts the built-in roots only",
                        std::path::Path::new(&path).display()
                    ),
                }
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            // Fails only for a provider without TLS 1.2 and 1.3; ring has both, and nothing a
            // plugin does reaches this.
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}
