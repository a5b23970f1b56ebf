//! Real web servers on loopback for the network tests: Python's `http.server` over HTTP or
//! HTTPS (`tests/peers/net/serve.py`), and a test certificate authority made with `openssl`.
//! Nothing here reaches beyond 127.0.0.1.
//!
//! ```no_run
//! let ca = sandpipe_tests::web::TestCa::new(&["api.test"]);
//! let server = sandpipe_tests::web::WebServer::https(&ca);
//! assert!(server.port > 0);
//! ```

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::peers;

/// The sentence every page of the server carries.
pub const SENTENCE: &str = "hello from the allowed host";

/// A running server; it ends when this is dropped (its stdin closes).
#[derive(Debug)]
pub struct WebServer {
    /// The port on 127.0.0.1.
    pub port: u16,
    child: Child,
    _stdin: ChildStdin,
}

impl WebServer {
    /// A plain HTTP server.
    pub fn http() -> Self {
        Self::start(&[])
    }

    /// An HTTPS server whose certificate `ca` signed.
    pub fn https(ca: &TestCa) -> Self {
        Self::start(&["--tls".as_ref(), ca.cert.as_os_str(), ca.key.as_os_str()])
    }

    fn start(args: &[&std::ffi::OsStr]) -> Self {
        let mut child = Command::new("python3")
            .arg(peers::source("net/serve.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting tests/peers/net/serve.py with python3");
        let stdin = child.stdin.take().expect("stdin");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the server's port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("serve.py printed {line:?}, not a port"));
        Self {
            port,
            child,
            _stdin: stdin,
        }
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A certificate authority and one server certificate it signed for `names`, in a temporary
/// directory (`ca.pem`, `server.pem`, `server.key`).
#[derive(Debug)]
pub struct TestCa {
    /// The directory holding the three files.
    pub dir: tempfile::TempDir,
    /// The CA certificate, to hand to a client (`SSL_CERT_FILE`, `DENO_CERT`).
    pub ca: PathBuf,
    /// The server's certificate.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

impl TestCa {
    /// Make the CA and a certificate for `names` (DNS subject alternative names).
    pub fn new(names: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(d)
                .output()
                .expect("running openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        let mut ca = vec!["req", "-x509", "-nodes", "-days", "2"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=sandpipe test CA",
        ]);
        openssl(&ca);
        let mut csr = vec!["req", "-new", "-nodes"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=sandpipe test server",
        ]);
        openssl(&csr);
        let san: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
        std::fs::write(
            d.join("ext.cnf"),
            format!("subjectAltName={}\n", san.join(",")),
        )
        .expect("ext.cnf");
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.pem",
        ]);
        Self {
            ca: d.join("ca.pem"),
            cert: d.join("server.pem"),
            key: d.join("server.key"),
            dir,
        }
    }

    /// The directory to grant a plugin that must read the CA.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}
