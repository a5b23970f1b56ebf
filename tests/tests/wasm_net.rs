//! The network allow-list for wasm components: `wasi:sockets` TCP and name lookup, and
//! `wasi:http` outgoing requests, through sandpipe's resolver, against real servers on
//! 127.0.0.1, through the library and the CLI.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sandpipe::net::{AuditLog, NetPolicy};
use sandpipe::{Exit, Host, Policy};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::{Target, cli, peers};
use serde_json::{Value, json};

mod common;
use common::{host, start};

/// A TCP echo server on 127.0.0.1 (one line back per line read), serving every connection
/// on a thread of its own until the test process ends. Its port.
fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the echo server");
    let port = listener.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut writer = conn.try_clone().expect("clone the connection");
                for line in BufReader::new(conn).lines() {
                    let Ok(line) = line else { break };
                    if writeln!(writer, "{line}").is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// Run `net-client` under `policy` with one command per frame; its answers, in order.
async fn client(host: &Host, policy: &Policy, commands: &[String]) -> Vec<Value> {
    let mut s = start(host, "net-client", Target::Wasm, policy, Framing::JsonLines).await;
    let mut answers = Vec::new();
    for c in commands {
        s.send(json!(c).to_string().as_bytes())
            .await
            .expect("send a command");
        let frame = s.recv().await.expect("recv").expect("an answer");
        answers.push(serde_json::from_slice::<Value>(&frame).expect("a JSON answer"));
    }
    s.close_stdin().await;
    assert_eq!(s.recv().await.expect("eof").as_deref(), None);
    assert_eq!(s.wait().await, Exit::Exited(0));
    answers
}

fn allowed(answer: &Value) -> bool {
    answer["ok"] == json!(true) && answer["reply"] == json!("ping")
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("read the audit log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
        .collect()
}

fn net(rules: &[&str], pins: &[&str]) -> NetPolicy {
    let mut net = NetPolicy::default();
    for r in rules {
        net = net.allow(r).expect("rule");
    }
    net.resolve = pins.iter().map(|p| p.parse().expect("pin")).collect();
    net
}

#[tokio::test]
async fn a_pinned_allowed_name_connects_and_everything_else_is_refused_and_audited() {
    let host = host();
    let port = echo_server();
    let other = echo_server();
    let dir = tempfile::tempdir().expect("tempdir");
    let audit_path = dir.path().join("audit.jsonl");
    let audit = AuditLog::open(&audit_path).expect("open the audit log");
    let rule = format!("api.test:{port}");
    let policy = Policy::default()
        .net(net(&[&rule], &["api.test=127.0.0.1"]))
        .audit(Some(audit));
    let commands = [
        // The literal first: once api.test is pinned to 127.0.0.1, a connect to that address
        // is a connect to api.test (wasi:sockets connects carry no name).
        format!("tcp 127.0.0.1:{port}"),
        format!("tcp api.test:{port}"),
        format!("tcp evil.test:{port}"),
        format!("tcp api.test:{other}"),
        format!("udp 127.0.0.1:{port}"),
        "listen".to_owned(),
    ];
    let answers = client(&host, &policy, &commands).await;
    let [literal, named, off_list, other_port, udp, listen] = &answers[..] else {
        panic!("{answers:?}");
    };
    assert!(allowed(named), "{named}");
    for refused in [literal, off_list, other_port, udp, listen] {
        assert_eq!(refused["ok"], json!(false), "{refused}");
    }
    // The name off the list never got an address: the lookup failed, not the connect.
    assert_eq!(
        client(&host, &policy, &["lookup evil.test".to_owned()]).await[0]["ok"],
        json!(false)
    );

    let lines = audit_lines(&audit_path);
    let has = |decision: &str, want: &dyn Fn(&Value) -> bool| {
        lines.iter().any(|l| {
            l["event"] == "net"
                && l["via"] == "wasi-sockets"
                && l["decision"] == decision
                && want(l)
        })
    };
    assert!(
        has("allow", &|l| l["name"] == "api.test"
            && l["addr"] == "127.0.0.1"
            && l["port"] == port
            && l["rule"] == rule.as_str()),
        "{lines:#?}"
    );
    assert!(has("refuse", &|l| l["name"] == "evil.test"), "{lines:#?}");
    assert!(
        has("refuse", &|l| l["addr"] == "127.0.0.1" && l["port"] == port),
        "{lines:#?}"
    );
    assert!(
        has("refuse", &|l| l["addr"] == "127.0.0.1"
            && l["port"] == other),
        "{lines:#?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l["decision"] == "allow" && l["port"] == other),
        "{lines:#?}"
    );
    // The datagram and the listen are refused with a line each.
    assert!(
        has("refuse", &|l| l["addr"] == "127.0.0.1"
            && l["port"] == port
            && l["reason"] == "UDP is not allowed"),
        "{lines:#?}"
    );
    assert!(
        has("refuse", &|l| l["reason"] == "listening is not allowed"),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn a_name_the_system_resolves_to_loopback_needs_a_rule_naming_the_address() {
    let host = host();
    let port = echo_server();
    let by_name = [format!("tcp localhost:{port}")];
    let refused = client(
        &host,
        &Policy::default().net(net(&["localhost"], &[])),
        &by_name,
    )
    .await;
    assert_eq!(refused[0]["ok"], json!(false), "{}", refused[0]);

    let address = format!("127.0.0.1:{port}");
    let policy = Policy::default().net(net(&["localhost", &address], &[]));
    let answers = client(
        &host,
        &policy,
        &[by_name[0].clone(), format!("tcp {address}")],
    )
    .await;
    assert!(allowed(&answers[0]), "{}", answers[0]);
    assert!(allowed(&answers[1]), "{}", answers[1]);
}

#[tokio::test]
async fn a_closed_policy_gives_no_network_at_all() {
    let host = host();
    let port = echo_server();
    let answers = client(
        &host,
        &Policy::default(),
        &[
            format!("tcp 127.0.0.1:{port}"),
            format!("tcp localhost:{port}"),
            "lookup localhost".to_owned(),
            format!("udp 127.0.0.1:{port}"),
            "listen".to_owned(),
        ],
    )
    .await;
    for a in &answers {
        assert_eq!(a["ok"], json!(false), "{a}");
    }
}

#[test]
fn the_cli_allows_a_pinned_name_and_refuses_another() {
    let port = echo_server();
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let plugin = cli::path("net-client", Target::Wasm);
    let out = cli::run(
        peers::sandpipe(),
        &[
            "run",
            "--allow-net",
            &format!("api.test:{port}"),
            "--resolve",
            "api.test=127.0.0.1",
            "--audit",
            &audit.display().to_string(),
            &plugin,
        ],
        format!("\"tcp api.test:{port}\"\n\"tcp evil.test:{port}\"\n").as_bytes(),
    );
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let answers: Vec<Value> = cli::text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON answer"))
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(allowed(&answers[0]), "{}", answers[0]);
    assert_eq!(answers[1]["ok"], json!(false), "{}", answers[1]);
    let lines = audit_lines(&audit);
    assert!(
        lines
            .iter()
            .any(|l| l["decision"] == "allow" && l["name"] == "api.test"),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["decision"] == "refuse" && l["name"] == "evil.test"),
        "{lines:#?}"
    );
}

/// One request an HTTP server received: its request line and its headers (names lower case).
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    headers: Vec<(String, String)>,
}

/// A small HTTP/1.1 server on 127.0.0.1: it records each request's head and answers
/// `hello from the server` (never echoing a header back), one request per connection. Its
/// port and what it has seen.
fn http_server() -> (u16, Arc<Mutex<Vec<Seen>>>) {
    serve_http(None)
}

/// [`http_server`] behind TLS with `tls`'s certificate.
fn serve_http(tls: Option<Arc<rustls::ServerConfig>>) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the HTTP server");
    let port = listener.local_addr().expect("local address").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let mut conn: Box<dyn ReadWrite> = match &tls {
                Some(config) => {
                    let Ok(server) = rustls::ServerConnection::new(config.clone()) else {
                        continue;
                    };
                    Box::new(rustls::StreamOwned::new(server, tcp))
                }
                None => Box::new(tcp),
            };
            let mut reader = BufReader::new(&mut conn);
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let mut headers = Vec::new();
            let mut length = 0usize;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).is_err() || h.trim_end().is_empty() {
                    break;
                }
                if let Some((name, value)) = h.trim_end().split_once(':') {
                    let name = name.trim().to_ascii_lowercase();
                    if name == "content-length" {
                        length = value.trim().parse().unwrap_or(0);
                    }
                    headers.push((name, value.trim().to_owned()));
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            drop(reader);
            record.lock().expect("lock").push(Seen {
                line: line.trim_end().to_owned(),
                headers,
            });
            let body = "hello from the server";
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.flush();
        }
    });
    (port, seen)
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Run `http-client` under `policy` with one command per frame; its answers, in order.
async fn http_client(host: &Host, policy: &Policy, commands: &[String]) -> Vec<Value> {
    let mut s = start(
        host,
        "http-client",
        Target::Wasm,
        policy,
        Framing::JsonLines,
    )
    .await;
    let mut answers = Vec::new();
    for c in commands {
        s.send(json!(c).to_string().as_bytes())
            .await
            .expect("send a command");
        let frame = s.recv().await.expect("recv").expect("an answer");
        answers.push(serde_json::from_slice::<Value>(&frame).expect("a JSON answer"));
    }
    s.close_stdin().await;
    assert_eq!(s.recv().await.expect("eof").as_deref(), None);
    assert_eq!(s.wait().await, Exit::Exited(0));
    answers
}

const SECRET: &str = "Bearer s3cret-for-the-server-only";

#[tokio::test]
async fn wasi_http_reaches_an_allowed_host_with_the_secret_header_the_guest_never_sees() {
    let host = host();
    let (port, seen) = http_server();
    let dir = tempfile::tempdir().expect("tempdir");
    let audit_path = dir.path().join("audit.jsonl");
    let rule = format!("api.test:{port}");
    let policy = Policy::default()
        .net(net(&[&rule], &["api.test=127.0.0.1"]).http_header(
            "api.test",
            "Authorization",
            SECRET,
        ))
        .audit(Some(
            AuditLog::open(&audit_path).expect("open the audit log"),
        ))
        .env("VISIBLE", "to the guest");
    let answers = http_client(
        &host,
        &policy,
        &[
            format!("get http://api.test:{port}/hello?x=1"),
            format!("get http://evil.test:{port}/"),
            format!("get http://127.0.0.1:{port}/"),
            format!("get http://api.test:{}/", port.wrapping_add(1).max(1)),
        ],
    )
    .await;
    let [allowed, off_list, literal, other_port] = &answers[..] else {
        panic!("{answers:?}");
    };
    assert_eq!(allowed["ok"], json!(true), "{allowed}");
    assert_eq!(allowed["status"], json!(200), "{allowed}");
    assert_eq!(allowed["body"], json!("hello from the server"), "{allowed}");
    // What the guest can see of its own request is its own header, never the secret.
    assert!(
        allowed["sent_headers"]
            .as_array()
            .is_some_and(|h| h.contains(&json!("authorization: guest-value"))),
        "{allowed}"
    );
    assert!(
        allowed["env"]
            .as_array()
            .is_some_and(|e| e == &[json!("VISIBLE=to the guest")]),
        "{allowed}"
    );
    for a in &answers {
        assert!(!a.to_string().contains("s3cret"), "{a}");
    }
    for refused in [off_list, literal, other_port] {
        assert_eq!(refused["ok"], json!(false), "{refused}");
        assert!(
            refused["error"]
                .as_str()
                .is_some_and(|e| e.contains("HttpRequestDenied")),
            "{refused}"
        );
    }

    // The server saw one request: the allowed one, with the secret in place of the guest's
    // value and the guest's other header unchanged.
    let seen = seen.lock().expect("lock").clone();
    let [request] = &seen[..] else {
        panic!("{seen:?}");
    };
    assert_eq!(request.line, "GET /hello?x=1 HTTP/1.1", "{request:?}");
    let values = |name: &str| -> Vec<&str> {
        request
            .headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(values("authorization"), [SECRET], "{request:?}");
    assert_eq!(values("x-guest"), ["yes"], "{request:?}");
    assert_eq!(values("host"), [rule.as_str()], "{request:?}");

    let lines = audit_lines(&audit_path);
    assert!(
        lines.iter().any(|l| l["via"] == "wasi-http"
            && l["decision"] == "allow"
            && l["name"] == "api.test"
            && l["port"] == port),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l["via"] == "wasi-http"
            && l["decision"] == "refuse"
            && l["name"] == "evil.test"),
        "{lines:#?}"
    );
    // The one request that reached the server: the body it read back.
    let closes: Vec<&Value> = lines.iter().filter(|l| l["event"] == "net-close").collect();
    let [close] = &closes[..] else {
        panic!("{lines:#?}");
    };
    assert_eq!(close["via"], "wasi-http", "{close}");
    assert_eq!(close["name"], "api.test", "{close}");
    assert_eq!(close["port"], port, "{close}");
    assert_eq!(close["bytes_in"], "hello from the server".len(), "{close}");
    assert_eq!(close["bytes_out"], 0, "{close}");
}

#[tokio::test]
async fn wasi_http_is_linked_but_refused_under_a_closed_policy() {
    let host = host();
    let (port, seen) = http_server();
    let answers = http_client(
        &host,
        &Policy::default(),
        &[
            format!("get http://127.0.0.1:{port}/"),
            format!("get http://localhost:{port}/"),
        ],
    )
    .await;
    for a in &answers {
        assert_eq!(a["ok"], json!(false), "{a}");
        assert!(
            a["error"]
                .as_str()
                .is_some_and(|e| e.contains("HttpRequestDenied")),
            "{a}"
        );
    }
    assert!(seen.lock().expect("lock").is_empty());
}

#[test]
fn the_cli_sets_an_http_header_from_its_own_environment() {
    let (port, seen) = http_server();
    let plugin = cli::path("http-client", Target::Wasm);
    let mut cmd = std::process::Command::new(peers::sandpipe());
    cmd.args([
        "run",
        "--allow-net",
        &format!("api.test:{port}"),
        "--resolve",
        "api.test=127.0.0.1",
        "--http-header",
        "api.test:Authorization=env:TOKEN",
        &plugin,
    ])
    .env("TOKEN", SECRET);
    let out = cli::run_command(cmd, format!("\"get http://api.test:{port}/\"\n").as_bytes());
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let stdout = cli::text(&out.stdout);
    let answer: Value = serde_json::from_str(stdout.trim()).expect("a JSON answer");
    assert_eq!(answer["body"], json!("hello from the server"), "{answer}");
    assert!(!stdout.contains("s3cret"), "{stdout}");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0]
            .headers
            .contains(&("authorization".to_owned(), SECRET.to_owned())),
        "{seen:?}"
    );
}

#[test]
fn wasi_https_verifies_the_name_against_ssl_cert_file_and_reaches_the_pinned_address() {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "sandpipe test CA");
    let ca_key = KeyPair::generate().expect("ca key");
    let ca = ca_params.self_signed(&ca_key).expect("ca certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf = CertificateParams::new(vec!["api.test".to_owned()])
        .expect("leaf params")
        .signed_by(&leaf_key, &issuer)
        .expect("leaf certificate");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write the CA");

    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("tls versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .expect("server certificate");
    let (port, seen) = serve_http(Some(Arc::new(config)));

    let plugin = cli::path("http-client", Target::Wasm);
    let run = |ca: Option<&Path>| {
        let mut cmd = std::process::Command::new(peers::sandpipe());
        cmd.args([
            "run",
            "--allow-net",
            &format!("api.test:{port}"),
            "--resolve",
            "api.test=127.0.0.1",
            &plugin,
        ]);
        match ca {
            Some(ca) => cmd.env("SSL_CERT_FILE", ca),
            None => cmd.env_remove("SSL_CERT_FILE"),
        };
        let out = cli::run_command(
            cmd,
            format!("\"get https://api.test:{port}/tls\"\n").as_bytes(),
        );
        assert!(out.status.success(), "{}", cli::text(&out.stderr));
        serde_json::from_str::<Value>(cli::text(&out.stdout).trim()).expect("a JSON answer")
    };
    // Without the test CA the server's certificate is not trusted.
    let untrusted = run(None);
    assert_eq!(untrusted["ok"], json!(false), "{untrusted}");
    let trusted = run(Some(&ca_file));
    assert_eq!(trusted["body"], json!("hello from the server"), "{trusted}");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].line, "GET /tls HTTP/1.1", "{seen:?}");
}
