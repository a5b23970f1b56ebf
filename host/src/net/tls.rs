//! TLS as sandpipe speaks it on a plugin's behalf: the client side every server is verified
//! with, and the session CA of `--tls-intercept`.
//!
//! ```text
//!   client_config()   webpki roots + $SSL_CERT_FILE of sandpipe's own environment
//!                     (wasi:http requests, and the server side of an intercepted tunnel)
//!   SessionCa::new()  a fresh P-256 CA, its key only in sandpipe's memory
//!     .pem()            the certificate the plugin is told to trust (SSL_CERT_FILE, ...)
//!     .server_config(h) a certificate for host h it signed, made once per host
//! ```
//!
//! The session CA is made when a native plugin with `--tls-intercept` starts, and dies with
//! it: its private key is never written anywhere, so a recording, a core dump of the plugin
//! or the CA file in the sandbox gives nobody a key that another session trusts. Its
//! certificates are valid from an hour before it was made (clocks a little behind) to
//! [`VALIDITY`] after.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

/// How long the session CA and its certificates are valid, from when the CA is made.
pub const VALIDITY: Duration = Duration::from_secs(30 * 24 * 3600);

/// The TLS client configuration, built once per process: the roots wasmtime's own sender
/// trusts (webpki's), plus the certificates in `$SSL_CERT_FILE` when sandpipe's environment
/// names one (a private or test CA). Every server sandpipe talks TLS to on a plugin's behalf
/// is verified with it: a wasm plugin's `https://` requests and an intercepted tunnel's far
/// end. HTTP/1.1 only, as sandpipe's client speaks.
pub fn client_config() -> Arc<rustls::ClientConfig> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.into(),
            };
            if let Some(path) = std::env::var_os("SSL_CERT_FILE") {
                use rustls::pki_types::pem::PemObject;
                match CertificateDer::pem_file_iter(&path) {
                    Ok(certs) => {
                        let (added, ignored) =
                            roots.add_parsable_certificates(certs.filter_map(Result::ok));
                        tracing::debug!(
                            "sandpipe trusts {added} certificates from SSL_CERT_FILE ({ignored} unusable)"
                        );
                    }
                    Err(e) => tracing::warn!(
                        "reading SSL_CERT_FILE {}: {e}; sandpipe trusts the built-in roots only",
                        std::path::Path::new(&path).display()
                    ),
                }
            }
            // Fails only for a provider without TLS 1.2 and 1.3; ring has both, and nothing a
            // plugin does reaches this.
            let config = rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            Arc::new(config)
        })
        .clone()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why the session CA or one of its certificates could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionCaError {
    /// rcgen refused the parameters or the key (for a host: a name that is not a DNS name).
    #[error("making the --tls-intercept certificate for {subject}: {message}")]
    Certificate { subject: String, message: String },
}

/// The certificate authority of one session's `--tls-intercept`: it signs a certificate for
/// each host the plugin tunnels TLS to, so sandpipe can read and record what the plugin sends.
pub struct SessionCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
    /// The certificate made for each host, made once.
    hosts: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for SessionCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCa").finish_non_exhaustive()
    }
}

impl SessionCa {
    /// A fresh CA: a new P-256 key, valid from an hour ago for [`VALIDITY`].
    pub fn new() -> Result<Self, SessionCaError> {
        let subject = "sandpipe session CA";
        let fail = |e: rcgen::Error| SessionCaError::Certificate {
            subject: subject.to_owned(),
            message: e.to_string(),
        };
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let at = |secs: u64| {
            time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).unwrap_or(i64::MAX))
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        };
        let not_before = at(now.saturating_sub(3600));
        let not_after = at(now.saturating_add(VALIDITY.as_secs()));
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(
            DnType::CommonName,
            format!("{subject} ({})", std::process::id()),
        );
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = not_before;
        params.not_after = not_after;
        let key = KeyPair::generate().map_err(fail)?;
        let cert = params.self_signed(&key).map_err(fail)?;
        Ok(Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
            not_before,
            not_after,
            hosts: Mutex::new(HashMap::new()),
        })
    }

    /// The CA's certificate, PEM: what the plugin is told to trust.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The certificate for `host` (a name, or an IP address without brackets), made on first
    /// use and kept for the session.
    fn certified(&self, host: &str) -> Result<Arc<CertifiedKey>, SessionCaError> {
        let mut hosts = self.hosts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(done) = hosts.get(host) {
            return Ok(done.clone());
        }
        let fail = |e: &dyn std::fmt::Display| SessionCaError::Certificate {
            subject: host.to_owned(),
            message: e.to_string(),
        };
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(|e| fail(&e))?;
        params.distinguished_name.push(DnType::CommonName, host);
        params.not_before = self.not_before;
        params.not_after = self.not_after;
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(|e| fail(&e))?;
        let cert = params.signed_by(&key, &self.issuer).map_err(|e| fail(&e))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = provider()
            .key_provider
            .load_private_key(der)
            .map_err(|e| fail(&e))?;
        let certified = Arc::new(CertifiedKey::new(vec![cert.der().clone()], signing));
        hosts.insert(host.to_owned(), certified.clone());
        Ok(certified)
    }

    /// The server side of a tunnel to `host`: its certificate, HTTP/1.1 as the one protocol
    /// offered (sandpipe reads HTTP/1.1 inside), whatever name the client's SNI gives (the
    /// certificate names the host the tunnel was opened to; a client asking another name
    /// refuses it, as it should).
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, SessionCaError> {
        let certified = self.certified(host)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(OneCert(certified)));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// One certificate, for every client hello.
#[derive(Debug)]
struct OneCert(Arc<CertifiedKey>);

impl rustls::server::ResolvesServerCert for OneCert {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that trusts the session CA alone accepts its certificate for the host the
    /// tunnel names, and refuses it for another name.
    #[test]
    fn a_client_trusting_the_session_ca_accepts_its_host_and_no_other() {
        use rustls::pki_types::ServerName;
        use rustls::pki_types::pem::PemObject;

        let ca = SessionCa::new().expect("a CA");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).expect("PEM"))
            .expect("a root");
        let client = Arc::new(
            rustls::ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
        );
        let handshake = |asked: &str, tunnel: &str| -> Result<(), rustls::Error> {
            let server = ca.server_config(tunnel).expect("server config");
            let mut s = rustls::ServerConnection::new(server).expect("server");
            let name = ServerName::try_from(asked.to_owned()).expect("a name");
            let mut c = rustls::ClientConnection::new(client.clone(), name).expect("client");
            for _ in 0..10 {
                let mut wire = Vec::new();
                while c.wants_write() {
                    c.write_tls(&mut wire).expect("client writes");
                }
                let mut read = &wire[..];
                while !read.is_empty() {
                    s.read_tls(&mut read).expect("server reads");
                }
                s.process_new_packets()?;
                let mut wire = Vec::new();
                while s.wants_write() {
                    s.write_tls(&mut wire).expect("server writes");
                }
                let mut read = &wire[..];
                while !read.is_empty() {
                    c.read_tls(&mut read).expect("client reads");
                }
                c.process_new_packets()?;
                if !c.is_handshaking() && !s.is_handshaking() {
                    return Ok(());
                }
            }
            panic!("the handshake did not end");
        };
        handshake("api.test", "api.test").expect("the tunnel's host is accepted");
        handshake("127.0.0.1", "127.0.0.1").expect("an address is accepted");
        let refused = handshake("other.test", "api.test").expect_err("another name");
        assert!(
            matches!(refused, rustls::Error::InvalidCertificate(_)),
            "{refused:?}"
        );
        // One certificate per host, made once.
        assert_eq!(
            ca.hosts.lock().expect("lock").len(),
            2,
            "api.test and 127.0.0.1"
        );
    }
}
