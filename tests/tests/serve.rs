//! `sandpipe serve`: MCP over Streamable HTTP, a sandboxed instance per client.
//!
//! The official Python SDK's `Client` (PyPI `mcp` 2.3.0, `tests/peers/mcp/drive_http.py`) over
//! `streamable_http_client`, in its `legacy` (2025 session), `auto` and pinned `2026-07-28`
//! modes, against examples/mcp-tools and PyPI `mcp-server-time` behind `serve`, reports what it
//! reports over stdio behind `run --protocol mcp`, and so does the official TypeScript SDK's
//! `StreamableHTTPClientTransport` (`tests/peers/mcp/drive_http.mjs`) against npm
//! `server-everything` and `mcp-server-time`; two clients at once keep their own counters and their own answers to
//! the same JSON-RPC ids; bad requests get their status and error and start nothing; a client
//! that goes away mid-call and a SIGTERM under load leave no process behind (counted in /proc),
//! and so do a server that crashes mid-call, one that never answers, a SIGKILL of `serve` and
//! an idle session whose client left.
//! The raw requests are written by hand on a TCP stream, so each status and header is seen as
//! sent. Every wait is on something observable (a line, a response, a counter in /metrics).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandpipe_tests::peers;
use serde_json::{Value, json};

/// A `sandpipe serve` running for one test, its address read from its start-up line.
struct Serve {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Serve {
    fn start(args: &[&str], server: &[PathBuf]) -> Serve {
        let mut cmd = Command::new(peers::sandpipe());
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .args(server);
        let (child, addr, stderr) = sandpipe_tests::cli::serving(cmd);
        Serve {
            child,
            addr,
            stderr,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }

    /// A counter of /metrics (`name{labels}`), 0 when absent.
    fn metric(&self, series: &str) -> u64 {
        let r = http(self.addr, "GET", "/metrics", &[], "");
        r.body
            .lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0)
    }

    /// Send `signal` to `sandpipe serve`.
    fn signal(&self, signal: libc::c_int) {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) on our own child's pid.
        #[allow(unsafe_code)]
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "signal {signal}");
    }

    /// Its exit status, once it has ended.
    fn wait(mut self) -> std::process::ExitStatus {
        let status = self.child.wait().expect("wait");
        std::mem::forget(self);
        status
    }

    /// SIGTERM, and the exit status.
    fn terminate(self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until `ok` holds (checked every 20 ms, for at most 30 s).
fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A response as read off the wire.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of the body: one JSON value, or each SSE `data:` line.
    fn messages(&self) -> Vec<Value> {
        if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"))
        {
            self.body
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .map(|d| serde_json::from_str(d).expect("an event's JSON"))
                .collect()
        } else {
            serde_json::from_str(&self.body).into_iter().collect()
        }
    }

    fn json(&self) -> Value {
        self.messages().pop().unwrap_or(Value::Null)
    }
}

/// Write a request to `stream` (`Host` is the endpoint's unless given).
fn send(
    stream: &mut TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) {
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes()).expect("write head");
    stream.write_all(body.as_bytes()).expect("write body");
}

/// Read a response's status line and headers.
fn read_head(stream: &mut TcpStream) -> (u16, Vec<(String, String)>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = stream.read(&mut byte).expect("read head");
        assert!(
            n > 0,
            "the connection closed in the head: {}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    let text = String::from_utf8(head).expect("utf-8 head");
    let mut lines = text.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    (status, headers)
}

/// One request on its own connection (`Connection: close`), read to the end.
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let mut all: Vec<(&str, &str)> = vec![("Connection", "close")];
    all.extend_from_slice(headers);
    send(&mut stream, addr, method, path, &all, body);
    let (status, headers) = read_head(&mut stream);
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read body");
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked { dechunk(&raw) } else { raw };
    Reply {
        status,
        headers,
        body: String::from_utf8(body).expect("utf-8 body"),
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..end]).expect("size"), 16)
            .expect("hex size");
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 2 + size + 2..];
    }
    out
}

const MODERN: &str = "2026-07-28";

/// A 2026-07-28 request's body.
fn modern(id: u64, method: &str, params: Value) -> String {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {}});
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// The headers of a 2026-07-28 `tools/call` of `name`, with `token`.
fn modern_heads<'a>(
    name: &'a str,
    token: Option<&'a str>,
    auth: &'a mut String,
) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", name),
    ];
    if let Some(t) = token {
        *auth = format!("Bearer {t}");
        h.push(("Authorization", auth.as_str()));
    }
    h
}

/// The driver's report of `cases` in `mode` against `target` (a URL and a token, or
/// `stdio COMMAND...`).
fn drive(mode: &str, cases: &[&str], target: &[String]) -> Value {
    peers::report(
        Command::new(peers::mcp_python())
            .arg(peers::source("mcp/drive_http.py"))
            .arg(mode)
            .args(cases)
            .arg("--")
            .args(target),
        &format!("{mode} {cases:?} on {target:?}"),
    )
}

fn tools_server() -> Vec<PathBuf> {
    vec![sandpipe_tests::mcp_tools()]
}

/// A token file of `principals`, each token `token-NAME`.
fn token_file(dir: &Path, principals: &[&str]) -> PathBuf {
    let path = dir.join("tokens");
    let mut text = String::from("# principal token\n");
    for p in principals {
        text.push_str(&format!("{p} token-{p}\n"));
    }
    std::fs::write(&path, text).expect("token file");
    path
}

#[test]
fn the_sdk_client_over_http_sees_what_it_sees_over_stdio_in_each_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = token_file(dir.path(), &["legacy", "auto", "pinned"]);
    let records = dir.path().join("records");
    let serve = Serve::start(
        &[
            "--auth-token-file",
            tokens.to_str().expect("utf-8"),
            "--record-dir",
            records.to_str().expect("utf-8"),
        ],
        &tools_server(),
    );
    assert!(
        serve
            .stderr()
            .contains("isolation: an instance per 2025 session and per 2026-07-28 principal"),
        "{}",
        serve.stderr()
    );
    let cases = ["tools", "basic", "count"];
    for (mode, principal, version) in [
        ("legacy", "legacy", "2025-11-25"),
        ("auto", "auto", MODERN),
        (MODERN, "pinned", MODERN),
    ] {
        let stdio: Vec<String> = [
            "stdio".into(),
            peers::sandpipe().display().to_string(),
            "run".into(),
            "--protocol".into(),
            "mcp".into(),
            sandpipe_tests::mcp_tools().display().to_string(),
        ]
        .to_vec();
        let direct = drive(mode, &cases, &stdio);
        let over_http = drive(mode, &cases, &[serve.url(), format!("token-{principal}")]);
        assert_eq!(over_http["version"], version, "{over_http}");
        assert_eq!(
            over_http["count"]["counts"],
            json!([["1"], ["2"], ["3"]]),
            "{over_http}"
        );
        assert_eq!(direct, over_http, "mode {mode}");
    }
    // The legacy session's instance was recorded, and replays against the component.
    let transcript = records.join("instance-1.transcript");
    let status = Command::new(peers::sandpipe())
        .arg("replay")
        .arg(&transcript)
        .arg("--plugin")
        .arg(sandpipe_tests::mcp_tools())
        .status()
        .expect("replay");
    assert!(status.success(), "replaying {}", transcript.display());
    // No token reached an instance: none is in what the instances saw.
    for entry in std::fs::read_dir(&records).expect("records") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("transcript");
        assert!(!text.contains("token-"), "a token in a transcript:\n{text}");
    }
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn two_clients_at_once_keep_their_own_state_and_their_own_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = token_file(dir.path(), &["alice", "bob"]);
    let serve = Serve::start(
        &["--auth-token-file", tokens.to_str().expect("utf-8")],
        &tools_server(),
    );
    // Two SDK clients per mode at once: each count starts at 1 (its own instance), and each
    // sees only its own answers although both number their requests alike.
    for mode in ["legacy", MODERN] {
        let clients: Vec<_> = ["alice", "bob"]
            .into_iter()
            .map(|p| {
                let target = vec![serve.url(), format!("token-{p}")];
                let mode = mode.to_owned();
                std::thread::spawn(move || drive(&mode, &["count", "basic"], &target))
            })
            .collect();
        for c in clients {
            let report = c.join().expect("client");
            if mode == "legacy" {
                assert_eq!(
                    report["count"]["counts"],
                    json!([["1"], ["2"], ["3"]]),
                    "{report}"
                );
            }
            assert_eq!(
                report["basic"]["add"]["result"]["text"],
                json!(["5"]),
                "{report}"
            );
        }
    }
    // 2026-07-28 state belongs to the principal: alice's and bob's counters are apart.
    let mut auth = String::new();
    let count = |token: &str, auth: &mut String| {
        let r = http(
            serve.addr,
            "POST",
            "/mcp",
            &modern_heads("count", Some(token), auth),
            &modern(1, "tools/call", json!({"name": "count", "arguments": {}})),
        );
        r.json()["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let alice_next = count("token-alice", &mut auth);
    let bob_next = count("token-bob", &mut auth);
    assert_eq!(
        (alice_next.as_str(), bob_next.as_str()),
        ("4", "4"),
        "each principal its own counter"
    );
    // The same id on two connections of one principal, in flight together: each answer goes
    // back where its request came from.
    let body = |a: i64| {
        modern(
            1,
            "tools/call",
            json!({"name": "add", "arguments": {"a": a, "b": a}}),
        )
    };
    let mut streams: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(serve.addr).expect("connect"))
        .collect();
    for (i, s) in streams.iter_mut().enumerate() {
        let mut auth = String::new();
        let mut heads = modern_heads("add", Some("token-alice"), &mut auth);
        heads.push(("Connection", "close"));
        send(
            s,
            serve.addr,
            "POST",
            "/mcp",
            &heads,
            &body(i64::try_from(i).expect("small") + 10),
        );
    }
    for (i, s) in streams.iter_mut().enumerate() {
        let (status, _) = read_head(s);
        assert_eq!(status, 200);
        let mut rest = String::new();
        s.read_to_string(&mut rest).expect("body");
        let want = format!("\"text\":\"{}\"", 2 * (i + 10));
        assert!(
            rest.contains(&want) && rest.contains("\"id\":1"),
            "answer {i}: {rest}"
        );
    }
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn share_serves_every_principals_2026_requests_from_one_instance_and_sessions_from_their_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = token_file(dir.path(), &["alice", "bob"]);
    let serve = Serve::start(
        &[
            "--auth-token-file",
            tokens.to_str().expect("utf-8"),
            "--share",
        ],
        &tools_server(),
    );
    assert!(
        serve
            .stderr()
            .contains("every 2026-07-28 request shares one instance (--share"),
        "{}",
        serve.stderr()
    );
    let mut auth = String::new();
    let mut count = |token: &str| {
        let r = http(
            serve.addr,
            "POST",
            "/mcp",
            &modern_heads("count", Some(token), &mut auth),
            &modern(1, "tools/call", json!({"name": "count", "arguments": {}})),
        );
        assert_eq!(r.status, 200, "{r:?}");
        r.json()["result"]["content"][0]["text"].clone()
    };
    // One counter for both principals: the instance is shared.
    assert_eq!(
        [
            count("token-alice"),
            count("token-bob"),
            count("token-alice")
        ],
        ["1", "2", "3"]
    );
    assert_eq!(
        serve.metric("sandpipe_serve_instances{state=\"running\"}"),
        1
    );
    // A 2025 session is still its own instance, counting from 1.
    let report = drive("legacy", &["count"], &[serve.url(), "token-bob".into()]);
    assert_eq!(
        report["count"]["counts"],
        json!([["1"], ["2"], ["3"]]),
        "{report}"
    );
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn a_principals_own_tool_filter_narrows_the_endpoints_and_never_widens_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    token_file(dir.path(), &["alice", "bob", "carol"]);
    let policy = dir.path().join("server.toml");
    std::fs::write(
        &policy,
        format!(
            "protocol = \"mcp\"\n[plugin]\nsource = {:?}\n[tools]\ndeny = [\"greet\"]\n\
             [serve]\nauth-token-file = \"tokens\"\n\
             [principals.alice.tools]\ndeny = [\"divide\"]\n\
             [principals.bob.tools]\nallow = [\"add\", \"greet\"]\n",
            sandpipe_tests::mcp_tools().display().to_string()
        ),
    )
    .expect("policy");
    let serve = Serve::start(&[], &[policy]);
    let names = |who: &str, mode: &str| {
        drive(mode, &["tools"], &[serve.url(), format!("token-{who}")])["tools"]["names"].clone()
    };
    let all = names("carol", "legacy");
    let all: Vec<&str> = all
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        all.contains(&"add") && all.contains(&"divide") && !all.contains(&"greet"),
        "{all:?}"
    );
    let without = |hidden: &str| -> Value {
        all.iter()
            .filter(|n| **n != hidden)
            .map(|n| json!(n))
            .collect()
    };
    for mode in ["legacy", MODERN] {
        assert_eq!(names("alice", mode), without("divide"), "alice, {mode}");
        // bob's allow list names greet, which [tools] denies: it stays hidden.
        assert_eq!(names("bob", mode), json!(["add"]), "bob, {mode}");
    }
    // A call of a tool hidden from its principal is refused as if the server lacked it (in
    // 2026-07-28, as the SDK's own server does: a tool result with isError).
    let mut auth = String::new();
    let r = http(
        serve.addr,
        "POST",
        "/mcp",
        &modern_heads("divide", Some("token-alice"), &mut auth),
        &modern(
            1,
            "tools/call",
            json!({"name": "divide", "arguments": {"a": 1.0, "b": 2.0}}),
        ),
    );
    assert_eq!(r.json()["result"]["isError"], true, "{r:?}");
    assert_eq!(
        r.json()["result"]["content"][0]["text"],
        "Unknown tool: divide",
        "{r:?}"
    );
    let r = http(
        serve.addr,
        "POST",
        "/mcp",
        &modern_heads("divide", Some("token-carol"), &mut auth),
        &modern(
            1,
            "tools/call",
            json!({"name": "divide", "arguments": {"a": 1.0, "b": 2.0}}),
        ),
    );
    assert_eq!(r.json()["result"]["content"][0]["text"], "0.5", "{r:?}");
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn mcp_server_fetch_behind_serve_fetches_the_allowed_site_as_it_does_over_stdio() {
    // PyPI mcp-server-fetch, a native server that needs the network, behind `serve` with the
    // same allow-list as behind `run`: a loopback site it may reach and one it may not.
    let site = sandpipe_tests::web::WebServer::http();
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let net = [
        "--allow-net".to_owned(),
        format!("api.test:{}", site.port),
        "--resolve".to_owned(),
        "api.test=127.0.0.1".to_owned(),
        "--audit".to_owned(),
        audit.display().to_string(),
    ];
    // A text page (an HTML one goes through readabilipy, which tries to run Node's npm).
    let allowed = format!("fetch:http://api.test:{}/text", site.port);
    let refused = format!("fetch:http://evil.test:{}/page", site.port);
    let cases = [allowed.as_str(), refused.as_str()];
    let net_args: Vec<&str> = net.iter().map(String::as_str).collect();
    let serve = Serve::start(&net_args, &[peers::mcp_server_fetch()]);
    let mut stdio: Vec<String> = vec![
        "stdio".into(),
        peers::sandpipe().display().to_string(),
        "run".into(),
        "--protocol".into(),
        "mcp".into(),
    ];
    stdio.extend(net.iter().cloned());
    stdio.push(peers::mcp_server_fetch().display().to_string());
    for mode in ["legacy", "auto"] {
        let over_http = drive(mode, &cases, &[serve.url()]);
        let over_stdio = drive(mode, &cases, &stdio);
        let fetched = &over_http["fetch"];
        assert!(
            fetched[0]["result"]["text"][0]
                .as_str()
                .is_some_and(|t| t.contains(sandpipe_tests::web::SENTENCE))
                && fetched[0]["result"]["isError"] == false,
            "{mode}: {over_http}"
        );
        assert!(
            fetched[1]["result"]["isError"] == true
                && fetched[1]["result"]["text"][0]
                    .as_str()
                    .is_some_and(|t| t.contains("403")),
            "{mode}: {over_http}"
        );
        assert_eq!(over_http["fetch"], over_stdio["fetch"], "{mode}");
    }
    let log = std::fs::read_to_string(&audit).expect("audit log");
    assert!(
        log.lines()
            .any(|l| l.contains("\"refuse\"") && l.contains("evil.test")),
        "{log}"
    );
    let stderr = serve.stderr();
    assert_eq!(serve.terminate().code(), Some(0), "{stderr}");
}

#[test]
fn a_policy_files_limits_refuse_a_principal_past_them_with_429_and_no_one_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    token_file(dir.path(), &["alice", "bob"]);
    let policy = dir.path().join("server.toml");
    let start = |limits: &str| {
        std::fs::write(
            &policy,
            format!(
                "protocol = \"mcp\"\n[plugin]\nsource = {:?}\n\
                 [serve]\nauth-token-file = \"tokens\"\n{limits}",
                sandpipe_tests::mcp_tools().display().to_string()
            ),
        )
        .expect("policy");
        Serve::start(&[], std::slice::from_ref(&policy))
    };
    let add = modern(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
    );
    let call = |serve: &Serve, who: &str| {
        let mut auth = String::new();
        let token = format!("token-{who}");
        http(
            serve.addr,
            "POST",
            "/mcp",
            &modern_heads("add", Some(&token), &mut auth),
            &add,
        )
    };
    // One request a minute per principal (a burst of one): alice's second waits; bob's first
    // does not. The minute is a bound the test stays far inside, not a measure.
    let serve = start("rate-limit = 1\n");
    assert_eq!(
        call(&serve, "alice").json()["result"]["content"][0]["text"],
        "3"
    );
    let over = call(&serve, "alice");
    assert_eq!(over.status, 429, "{over:?}");
    let wait: u64 = over
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=60).contains(&wait), "{over:?}");
    assert_eq!(
        call(&serve, "bob").json()["result"]["content"][0]["text"],
        "3"
    );
    assert_eq!(
        serve.metric("sandpipe_serve_refusals_total{reason=\"rate\"}"),
        1
    );
    assert_eq!(serve.terminate().code(), Some(0));

    // One instance per principal: alice's second session is refused until her first ends.
    let serve = start("max-instances = 1\n");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let open = |who: &str| {
        let auth = format!("Bearer token-{who}");
        http(
            serve.addr,
            "POST",
            "/mcp",
            &[
                LEGACY_ACCEPT,
                ("Content-Type", "application/json"),
                ("Authorization", &auth),
            ],
            &init,
        )
    };
    let first = open("alice");
    assert_eq!(first.status, 200, "{first:?}");
    let session = first
        .header("mcp-session-id")
        .expect("a session")
        .to_owned();
    let refused = open("alice");
    assert_eq!(refused.status, 429, "{refused:?}");
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("--max-instances")),
        "{refused:?}"
    );
    assert_eq!(open("bob").status, 200);
    let mut heads = session_heads(&session).to_vec();
    heads.push(("Authorization", "Bearer token-alice"));
    assert_eq!(http(serve.addr, "DELETE", "/mcp", &heads, "").status, 200);
    assert_eq!(open("alice").status, 200);
    assert_eq!(
        serve.metric("sandpipe_serve_refusals_total{reason=\"instances\"}"),
        1
    );
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn warm_instances_serve_new_clients_and_are_replaced_each_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = token_file(dir.path(), &["alice", "bob"]);
    let serve = Serve::start(
        &[
            "--warm",
            "2",
            "--auth-token-file",
            tokens.to_str().expect("utf-8"),
        ],
        &tools_server(),
    );
    assert!(
        serve.stderr().contains("2 kept warm for new clients"),
        "{}",
        serve.stderr()
    );
    let warm = |n: u64, running: u64| {
        wait_for(&format!("{n} warm of {running} running"), || {
            serve.metric("sandpipe_serve_instances{state=\"warm\"}") == n
                && serve.metric("sandpipe_serve_instances{state=\"running\"}") == running
        });
    };
    warm(2, 2);
    let count = |who: &str| {
        let mut auth = String::new();
        let token = format!("token-{who}");
        let r = http(
            serve.addr,
            "POST",
            "/mcp",
            &modern_heads("count", Some(&token), &mut auth),
            &modern(1, "tools/call", json!({"name": "count", "arguments": {}})),
        );
        r.json()["result"]["content"][0]["text"].clone()
    };
    // alice's first request takes a warm instance; another is started in its place.
    assert_eq!(count("alice"), "1");
    warm(2, 3);
    assert_eq!(count("alice"), "2");
    // bob's takes another: a warm instance is nobody's until claimed, and then only his.
    assert_eq!(count("bob"), "1");
    warm(2, 4);
    assert_eq!(count("alice"), "3");
    assert_eq!(serve.metric("sandpipe_serve_instances{state=\"ended\"}"), 0);
    assert_eq!(serve.terminate().code(), Some(0));
}

/// SIGKILL every process running `script`, but `serve`; how many there were.
fn kill_running(script: &Path, serve: &Serve) -> usize {
    let needle = script.as_os_str().as_encoded_bytes();
    let own = serve.child.id().to_string();
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == own || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.windows(needle.len()).any(|w| w == needle) {
            let pid: i32 = name.parse().expect("a pid");
            // SAFETY: kill(2) of a server process this test's serve started.
            #[allow(unsafe_code)]
            let sent = unsafe { libc::kill(pid, libc::SIGKILL) };
            killed += usize::from(sent == 0);
        }
    }
    killed
}

#[test]
fn a_warm_instance_that_dies_unclaimed_is_replaced_but_not_in_a_loop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = native_server(dir.path());
    let serve = Serve::start(&["--warm", "1"], &server);
    let state = |warm: u64, running: u64, ended: u64| {
        serve.metric("sandpipe_serve_instances{state=\"warm\"}") == warm
            && serve.metric("sandpipe_serve_instances{state=\"running\"}") == running
            && serve.metric("sandpipe_serve_instances{state=\"ended\"}") == ended
    };
    wait_for("a warm instance", || {
        state(1, 1, 0) && processes_running(&server[1], Some(&serve)) > 0
    });
    // Killed unclaimed, a warm server is replaced, three times in a row.
    for ended in 1..=3 {
        assert!(kill_running(&server[1], &serve) > 0, "a server to kill");
        wait_for(&format!("replacement {ended}"), || {
            state(1, 1, ended) && processes_running(&server[1], Some(&serve)) > 0
        });
    }
    assert!(
        serve.stderr().contains("another starts in its place"),
        "{}",
        serve.stderr()
    );
    // The fourth in a row is not: a server that cannot stay up is not restarted in a loop.
    assert!(kill_running(&server[1], &serve) > 0, "a server to kill");
    wait_for("the pool left empty", || state(0, 0, 4));
    wait_for("the warning", || serve.stderr().contains("3 in a row did"));
    // A client's request starts an instance as without --warm, and the pool is refilled.
    let mut auth = String::new();
    let r = http(
        serve.addr,
        "POST",
        "/mcp",
        &modern_heads("add", None, &mut auth),
        &modern(
            1,
            "tools/call",
            json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
        ),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["result"]["content"][0]["text"], "5", "{r:?}");
    wait_for("the pool refilled", || {
        serve.metric("sandpipe_serve_instances{state=\"warm\"}") == 1
    });
    assert_eq!(serve.terminate().code(), Some(0));
    assert_eq!(processes_running(&server[1], None), 0, "no server left");
}

#[test]
fn a_warm_native_instance_audits_for_the_principal_that_claimed_it() {
    // mcp-server-fetch started warm, before anyone asked: the network decisions it makes for
    // alice name alice.
    let site = sandpipe_tests::web::WebServer::http();
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = token_file(dir.path(), &["alice"]);
    let audit = dir.path().join("audit.jsonl");
    let allow = format!("api.test:{}", site.port);
    let serve = Serve::start(
        &[
            "--warm",
            "1",
            "--auth-token-file",
            tokens.to_str().expect("utf-8"),
            "--allow-net",
            &allow,
            "--resolve",
            "api.test=127.0.0.1",
            "--audit",
            audit.to_str().expect("utf-8"),
        ],
        &[peers::mcp_server_fetch()],
    );
    wait_for("a warm instance", || {
        serve.metric("sandpipe_serve_instances{state=\"warm\"}") == 1
    });
    let refused = format!("fetch:http://evil.test:{}/page", site.port);
    let report = drive(
        "2026-07-28",
        &[&refused],
        &[serve.url(), "token-alice".into()],
    );
    assert_eq!(report["fetch"][0]["result"]["isError"], true, "{report}");
    assert_eq!(
        serve.metric("sandpipe_serve_instances{state=\"running\"}"),
        2,
        "the claimed instance and its replacement"
    );
    let log = std::fs::read_to_string(&audit).expect("audit log");
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line"))
        .collect();
    let evil = lines
        .iter()
        .find(|l| l["name"] == "evil.test")
        .unwrap_or_else(|| panic!("no line for evil.test: {log}"));
    assert_eq!(evil["principal"], "alice", "{log}");
    assert_eq!(evil["decision"], "refuse", "{log}");
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn inspect_shows_what_serve_makes_of_a_policy_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    token_file(dir.path(), &["alice", "bob"]);
    let policy = dir.path().join("server.toml");
    let write = |listen: &str, auth: &str| {
        std::fs::write(
            &policy,
            format!(
                "protocol = \"mcp\"\n[plugin]\nsource = {:?}\n[tools]\ndeny = [\"greet\"]\n\
                 [serve]\nlisten = \"{listen}\"\n{auth}max-instances = 3\nrate-limit = 60\n\
                 max-body = \"1MiB\"\nidle-timeout = \"90s\"\n\
                 [principals.alice.tools]\ndeny = [\"divide\"]\n",
                sandpipe_tests::mcp_tools().display().to_string()
            ),
        )
        .expect("policy");
    };
    let inspect = |json: bool| {
        let mut cmd = Command::new(peers::sandpipe());
        cmd.arg("inspect").arg(&policy);
        if json {
            cmd.arg("--json");
        }
        cmd.output().expect("sandpipe inspect")
    };
    write("127.0.0.1:8931", "auth-token-file = \"tokens\"\n");
    let out = inspect(true);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let serve = &report["serve"];
    assert_eq!(serve["endpoint"], "http://127.0.0.1:8931/mcp", "{serve}");
    assert_eq!(
        serve["isolation"],
        "an instance per 2025 session and per 2026-07-28 principal"
    );
    assert_eq!(serve["auth"], "bearer tokens (2 principals)");
    assert_eq!(
        (
            &serve["max_instances"],
            &serve["rate_per_minute"],
            &serve["max_body"],
            &serve["idle_timeout"]
        ),
        (&json!(3), &json!(60), &json!("1.0 MiB"), &json!("1m 30s"))
    );
    assert_eq!(serve["tools"], "all but greet");
    // alice's own filter narrows the file's; bob has none of his own.
    assert_eq!(
        serve["principals"],
        json!({"alice": "all but greet, divide"})
    );
    // No token is shown, only how many principals have one.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("token-alice"));
    let out = inspect(false);
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        format!(
            "serve:     http://127.0.0.1:8931/mcp (sandpipe serve {})",
            policy.display()
        ),
        "  limits   per principal: 3 instances, 60 requests a minute; bodies up to 1.0 MiB".into(),
        "  alice    tools: all but greet, divide".into(),
    ] {
        assert!(text.contains(&line), "{line:?} not in:\n{text}");
    }
    // An address anyone can reach, with nobody asked who they are: serve would refuse it, and
    // inspect says so (exit 1) before anyone tries.
    write("0.0.0.0:8931", "");
    let out = inspect(false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("  error    serve would not start: listening on 0.0.0.0:8931 (not a loopback address) needs --auth-token-file or --jwks"),
        "{text}"
    );
}

/// A bad request: what it is, its headers and body, the status it gets and its error code.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u16, Option<i64>);

#[test]
fn bad_requests_get_their_status_and_start_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = token_file(dir.path(), &["alice"]);
    let records = dir.path().join("records");
    let serve = Serve::start(
        &[
            "--auth-token-file",
            tokens.to_str().expect("utf-8"),
            "--max-body",
            "2KiB",
            "--record-dir",
            records.to_str().expect("utf-8"),
        ],
        &tools_server(),
    );
    let call = modern(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
    );
    let mut auth = String::new();
    let good = modern_heads("add", Some("token-alice"), &mut auth);
    let with = |replace: &[(&'static str, &'static str)]| -> Vec<(&str, &str)> {
        let mut h: Vec<(&str, &str)> = good
            .iter()
            .filter(|(n, _)| !replace.iter().any(|(r, _)| r.eq_ignore_ascii_case(n)))
            .copied()
            .collect();
        h.extend(replace.iter().filter(|(_, v)| !v.is_empty()).copied());
        h
    };
    let big = modern(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 2, "pad": "x".repeat(4096)}}),
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "malformed JSON",
            with(&[]),
            "{\"jsonrpc\": \"2.0\", ".into(),
            400,
            Some(-32700),
        ),
        ("a batch", with(&[]), "[]".into(), 400, Some(-32600)),
        ("a body over --max-body", with(&[]), big, 413, None),
        (
            "no MCP-Protocol-Version",
            with(&[("MCP-Protocol-Version", "")]),
            call.clone(),
            400,
            Some(-32020),
        ),
        (
            "a version header that is not the body's",
            with(&[("MCP-Protocol-Version", "2025-11-25")]),
            call.clone(),
            400,
            Some(-32020),
        ),
        (
            "an Mcp-Method that is not the body's",
            with(&[("Mcp-Method", "tools/list")]),
            call.clone(),
            400,
            Some(-32020),
        ),
        (
            "an Mcp-Name that is not the body's",
            with(&[("Mcp-Name", "divide")]),
            call.clone(),
            400,
            Some(-32020),
        ),
        (
            "an unsupported revision",
            with(&[("MCP-Protocol-Version", "2099-01-01")]),
            call.replace(MODERN, "2099-01-01"),
            400,
            Some(-32022),
        ),
        (
            "an unknown session",
            with(&[
                ("Mcp-Session-Id", "0123456789abcdef"),
                ("MCP-Protocol-Version", "2025-11-25"),
            ]),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string(),
            404,
            None,
        ),
        (
            "no session and no envelope",
            with(&[("MCP-Protocol-Version", "")]),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string(),
            400,
            Some(-32600),
        ),
        (
            "a foreign Origin",
            with(&[("Origin", "http://evil.test")]),
            call.clone(),
            403,
            None,
        ),
        (
            "a foreign Host",
            with(&[("Host", "evil.test")]),
            call.clone(),
            403,
            None,
        ),
        (
            "no token",
            with(&[("Authorization", "")]),
            call.clone(),
            401,
            None,
        ),
        (
            "a wrong token",
            with(&[("Authorization", "Bearer token-mallory")]),
            call.clone(),
            401,
            None,
        ),
    ];
    for (what, heads, body, status, code) in &cases {
        let r = http(serve.addr, "POST", "/mcp", heads, body);
        assert_eq!(r.status, *status, "{what}: {r:?}");
        if let Some(code) = code {
            assert_eq!(r.json()["error"]["code"], *code, "{what}: {r:?}");
        }
        if *status == 401 {
            assert!(
                r.header("www-authenticate")
                    .is_some_and(|v| v.starts_with("Bearer")),
                "{what}: {r:?}"
            );
        }
    }
    // GET and DELETE without a session: 405; with an unknown one: 404.
    let mut auth = String::new();
    let bearer: Vec<(&str, &str)> = modern_heads("add", Some("token-alice"), &mut auth)
        .into_iter()
        .filter(|(n, _)| *n == "Authorization")
        .collect();
    assert_eq!(http(serve.addr, "GET", "/mcp", &bearer, "").status, 405);
    assert_eq!(http(serve.addr, "DELETE", "/mcp", &bearer, "").status, 405);
    let mut unknown = bearer.clone();
    unknown.push(("Mcp-Session-Id", "nope"));
    assert_eq!(http(serve.addr, "DELETE", "/mcp", &unknown, "").status, 404);
    // Nothing reached a server: no instance started, no transcript written.
    assert_eq!(
        serve.metric("sandpipe_serve_instances{state=\"running\"}"),
        0
    );
    assert_eq!(serve.metric("sandpipe_serve_instances{state=\"ended\"}"), 0);
    assert_eq!(std::fs::read_dir(&records).expect("records").count(), 0);
    assert!(serve.metric("sandpipe_serve_refusals_total{reason=\"auth\"}") >= 2);
    // And the good request is served.
    let r = http(serve.addr, "POST", "/mcp", &good, &call);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["result"]["content"][0]["text"], "3", "{r:?}");
    // Its time is in the histogram, and only its: nothing refused was timed.
    for series in [
        "sandpipe_serve_request_duration_seconds_count{method=\"tools/call\"}",
        "sandpipe_serve_request_duration_seconds_bucket{method=\"tools/call\",le=\"+Inf\"}",
    ] {
        assert_eq!(serve.metric(series), 1, "{series}");
    }
    assert_eq!(http(serve.addr, "GET", "/healthz", &[], "").status, 200);
    assert_eq!(serve.terminate().code(), Some(0));
}

const ISSUER: &str = "https://issuer.test/realms/mcp";

#[test]
fn jwt_access_tokens_of_the_issuer_for_this_resource_get_in_and_nothing_else_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    peers::issuer(dir.path(), &["keys"]);
    let jwks = dir.path().join("jwks.json");
    let serve = Serve::start(
        &[
            "--jwks",
            jwks.to_str().expect("utf-8"),
            "--jwt-issuer",
            ISSUER,
        ],
        &tools_server(),
    );
    let resource = serve.url();
    assert!(
        serve.stderr().contains(&format!(
            "auth: JWT access tokens of {ISSUER} for {resource} (2 keys"
        )),
        "{}",
        serve.stderr()
    );
    let token = |key: &str, sub: &str, extra: &[&str]| {
        let mut args = vec!["token", key, ISSUER, resource.as_str(), sub];
        args.extend_from_slice(extra);
        peers::issuer(dir.path(), &args)
    };
    // The official SDK client, in each mode, with a token from each key: served, and each
    // principal (`sub`) has its own instance.
    for (mode, key) in [("legacy", "rsa-1"), ("auto", "ec-1"), (MODERN, "rsa-1")] {
        let report = drive(
            mode,
            &["basic"],
            &[resource.clone(), token(key, "alice", &[])],
        );
        assert_eq!(
            report["basic"]["add"]["result"]["text"],
            json!(["5"]),
            "{report}"
        );
    }
    let mut auth = String::new();
    let count = |token: &str, auth: &mut String| {
        let r = http(
            serve.addr,
            "POST",
            "/mcp",
            &modern_heads("count", Some(token), auth),
            &modern(1, "tools/call", json!({"name": "count", "arguments": {}})),
        );
        assert_eq!(r.status, 200, "{r:?}");
        r.json()["result"]["content"][0]["text"].clone()
    };
    // alice's tokens of both keys are one principal; bob is another.
    assert_eq!(count(&token("rsa-1", "alice", &[]), &mut auth), "1");
    assert_eq!(count(&token("ec-1", "alice", &[]), &mut auth), "2");
    assert_eq!(count(&token("ec-1", "bob", &[]), &mut auth), "1");

    // Without a token: 401 naming the metadata, which names the issuer (RFC 9728).
    let call = modern(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
    );
    let r = http(
        serve.addr,
        "POST",
        "/mcp",
        &modern_heads("add", None, &mut auth),
        &call,
    );
    assert_eq!(r.status, 401, "{r:?}");
    let metadata_url = format!(
        "http://{}/.well-known/oauth-protected-resource/mcp",
        serve.addr
    );
    assert_eq!(
        r.header("www-authenticate"),
        Some(format!("Bearer resource_metadata=\"{metadata_url}\"").as_str()),
        "{r:?}"
    );
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let m = http(serve.addr, "GET", path, &[], "");
        assert_eq!(m.status, 200, "{m:?}");
        let doc: Value = serde_json::from_str(&m.body).expect("metadata JSON");
        assert_eq!(doc["resource"], resource.as_str());
        assert_eq!(doc["authorization_servers"], json!([ISSUER]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }

    // Every wrong token: 401 with invalid_token and what is wrong, and no instance started.
    let instances = || {
        serve.metric("sandpipe_serve_instances{state=\"running\"}")
            + serve.metric("sandpipe_serve_instances{state=\"ended\"}")
    };
    let before = instances();
    let elsewhere = format!("http://{}/other", serve.addr);
    let wrong = [
        (
            "expired",
            token("rsa-1", "alice", &["exp=-3600"]),
            "the token has expired",
        ),
        (
            "not yet valid",
            token("ec-1", "alice", &["nbf=3600"]),
            "not valid yet",
        ),
        (
            "another audience",
            peers::issuer(dir.path(), &["token", "rsa-1", ISSUER, &elsewhere, "alice"]),
            "not for this resource",
        ),
        (
            "another issuer",
            peers::issuer(
                dir.path(),
                &["token", "rsa-1", "https://evil.test", &resource, "alice"],
            ),
            "not from the issuer",
        ),
        (
            "no sub",
            token("rsa-1", "alice", &["drop=sub"]),
            "no sub claim",
        ),
        (
            "no exp",
            token("rsa-1", "alice", &["drop=exp"]),
            "no exp claim",
        ),
        (
            "another key with the JWKS's kid",
            token("impostor", "alice", &[]),
            "signature does not verify",
        ),
        (
            "alg none",
            peers::issuer(dir.path(), &["forge", "none", ISSUER, &resource, "alice"]),
            "",
        ),
        (
            "HS256 keyed with the public key",
            peers::issuer(dir.path(), &["forge", "hs256", ISSUER, &resource, "alice"]),
            "not one its key may be used with",
        ),
        ("not a JWT", "token-alice".to_owned(), "not a signed JWT"),
    ];
    for (what, token, why) in &wrong {
        let r = http(
            serve.addr,
            "POST",
            "/mcp",
            &modern_heads("add", Some(token), &mut auth),
            &call,
        );
        assert_eq!(r.status, 401, "{what}: {r:?}");
        let challenge = r.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.starts_with(&format!(
                "Bearer resource_metadata=\"{metadata_url}\", error=\"invalid_token\""
            )) && challenge.contains(why),
            "{what}: {challenge}"
        );
    }
    assert_eq!(instances(), before, "a refused token started an instance");
    assert!(
        serve.metric("sandpipe_serve_refusals_total{reason=\"auth\"}")
            > u64::try_from(wrong.len()).expect("small")
    );
    // A key added to the file (rotation) is taken without a restart, when a token names it.
    let rotated = |serve: &Serve| {
        let mut auth = String::new();
        http(
            serve.addr,
            "POST",
            "/mcp",
            &modern_heads("add", Some(&token("ec-2", "carol", &[])), &mut auth),
            &call,
        )
        .status
    };
    peers::issuer(dir.path(), &["rotate"]);
    assert_eq!(rotated(&serve), 401);
    std::fs::rename(dir.path().join("jwks.next.json"), &jwks).expect("rotate");
    assert_eq!(rotated(&serve), 200);
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn jwks_options_that_cannot_check_a_token_are_refused_at_start_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    peers::issuer(dir.path(), &["keys"]);
    let jwks = dir.path().join("jwks.json");
    let jwks = jwks.to_str().expect("utf-8");
    let tokens = token_file(dir.path(), &["alice"]);
    std::fs::write(
        dir.path().join("oct.json"),
        r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#,
    )
    .expect("write");
    let oct = dir.path().join("oct.json");
    for (args, says) in [
        (vec!["--jwks", jwks], "--jwks needs --jwt-issuer"),
        (vec!["--jwt-issuer", ISSUER], "give --jwks"),
        (
            vec![
                "--jwks",
                jwks,
                "--jwt-issuer",
                ISSUER,
                "--auth-token-file",
                tokens.to_str().expect("utf-8"),
            ],
            "choose one",
        ),
        (
            vec![
                "--jwks",
                oct.to_str().expect("utf-8"),
                "--jwt-issuer",
                ISSUER,
            ],
            "symmetric (oct) key",
        ),
        (
            vec![
                "--jwks",
                jwks,
                "--jwt-issuer",
                ISSUER,
                "--listen",
                "0.0.0.0:0",
            ],
            "needs --resource",
        ),
    ] {
        let out = Command::new(peers::sandpipe())
            .arg("serve")
            .args(&args)
            .arg(sandpipe_tests::mcp_tools())
            .output()
            .expect("serve");
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn a_non_loopback_address_without_tokens_is_refused_at_start_up() {
    let out = Command::new(peers::sandpipe())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .arg(sandpipe_tests::mcp_tools())
        .output()
        .expect("serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs --auth-token-file or --jwks"), "{err}");
}

/// A native MCP server (the SDK 2.3.0 stdio server of the mcp_2026 tests) copied to `dir`, so
/// that its processes can be told from every other one's by their command line.
fn native_server(dir: &Path) -> Vec<PathBuf> {
    let copy = dir.join("server_2026.py");
    std::fs::copy(peers::source("mcp/server_2026.py"), &copy).expect("copy the server");
    vec![peers::mcp_python(), copy]
}

/// How many processes run `script`, but for `serve` (whose own command line names it).
fn processes_running(script: &Path, serve: Option<&Serve>) -> usize {
    let needle = script.as_os_str().as_encoded_bytes();
    let own = serve.map(|s| s.child.id().to_string());
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter(|e| own.as_deref() != Some(&*e.file_name().to_string_lossy()))
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|cmdline| cmdline.windows(needle.len()).any(|w| w == needle))
        .count()
}

/// Where the server's `hold` calls and the test meet: each call creates its own `started`
/// file once it runs in the server, and every call returns once the `release` file exists. The
/// directory is granted to the server (`--dir`), so the test knows a call is in flight and
/// decides when it ends, with no clock involved.
struct Gate {
    dir: PathBuf,
}

impl Gate {
    fn new(parent: &Path) -> Gate {
        let dir = parent.join("gate");
        std::fs::create_dir(&dir).expect("the gate directory");
        Gate { dir }
    }

    /// `--dir` for the server.
    fn grant(&self) -> String {
        self.dir.display().to_string()
    }

    fn started(&self, call: &str) -> PathBuf {
        self.dir.join(format!("started-{call}"))
    }

    /// The arguments of a `hold` call named `call`.
    fn hold(&self, call: &str) -> Value {
        json!({"name": "hold", "arguments": {
            "started": self.started(call).display().to_string(),
            "release": self.dir.join("release").display().to_string()}})
    }

    /// Whether the call named `call` runs in the server.
    fn has_started(&self, call: &str) -> bool {
        self.started(call).exists()
    }

    /// Let every held call return.
    fn release(&self) {
        std::fs::write(self.dir.join("release"), "").expect("the release file");
    }
}

/// Read one response of a kept-alive connection (its body by `Content-Length` or chunked).
fn read_reply(stream: &mut TcpStream) -> Reply {
    let (status, headers) = read_head(stream);
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut reader = BufReader::new(stream);
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).expect("a chunk size");
            let size = usize::from_str_radix(size.trim(), 16).expect("hex size");
            let mut chunk = vec![0u8; size + 2];
            reader.read_exact(&mut chunk).expect("a chunk");
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        let length = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        body.resize(length, 0);
        stream.read_exact(&mut body).expect("read body");
    }
    Reply {
        status,
        headers,
        body: String::from_utf8(body).expect("utf-8 body"),
    }
}

#[test]
fn a_client_gone_mid_call_and_a_sigterm_under_load_leave_no_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = native_server(dir.path());
    let script = server[1].clone();
    let gate = Gate::new(dir.path());
    // A grace longer than any test: the calls in flight end when the test releases them.
    let serve = Serve::start(&["--grace", "10m", "--dir", &gate.grant()], &server);
    // Without tokens a connection's 2026-07-28 instance is its own: a client that goes away
    // mid-call takes its instance (and every process of it) with it.
    let mut auth = String::new();
    let heads = modern_heads("hold", None, &mut auth);
    let mut gone = TcpStream::connect(serve.addr).expect("connect");
    let held = modern(1, "tools/call", gate.hold("gone"));
    send(&mut gone, serve.addr, "POST", "/mcp", &heads, &held);
    assert_eq!(read_head(&mut gone).0, 200);
    wait_for("the call to run in the server", || gate.has_started("gone"));
    drop(gone);
    wait_for("the instance to end", || {
        serve.metric("sandpipe_serve_instances{state=\"ended\"}") == 1
    });
    wait_for("its processes to go", || {
        processes_running(&script, Some(&serve)) == 0
    });
    assert_eq!(
        serve.metric("sandpipe_serve_requests_total{method=\"tools/call\",outcome=\"abandoned\"}"),
        1
    );
    // Under load: three clients each with a call running in its server, then SIGTERM. New
    // requests get 503 while the three are still held; once released, each is answered,
    // sandpipe exits 0, and no server process is left.
    let calls = ["a", "b", "c"];
    let mut busy: Vec<TcpStream> = calls
        .iter()
        .map(|_| TcpStream::connect(serve.addr).expect("connect"))
        .collect();
    for (s, call) in busy.iter_mut().zip(calls) {
        let mut auth = String::new();
        let mut heads = modern_heads("hold", None, &mut auth);
        heads.push(("Connection", "close"));
        let body = modern(1, "tools/call", gate.hold(call));
        send(s, serve.addr, "POST", "/mcp", &heads, &body);
        assert_eq!(read_head(s).0, 200);
    }
    wait_for("three calls in their servers", || {
        calls.iter().all(|c| gate.has_started(c))
    });
    assert!(processes_running(&script, Some(&serve)) >= 3);
    let answers: Vec<_> = busy
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || {
                let mut rest = String::new();
                let _ = s.read_to_string(&mut rest);
                rest
            })
        })
        .collect();
    // A kept-alive connection of a client that has no call in flight: its requests are
    // refused as not allowed (405) until the stop begins, then with 503.
    let mut probe = TcpStream::connect(serve.addr).expect("connect");
    send(&mut probe, serve.addr, "GET", "/mcp", &[], "");
    assert_eq!(read_reply(&mut probe).status, 405);
    serve.signal(libc::SIGTERM);
    wait_for("new requests to be refused as the stop begins", || {
        send(&mut probe, serve.addr, "GET", "/mcp", &[], "");
        read_reply(&mut probe).status == 503
    });
    for call in calls {
        assert!(gate.has_started(call));
    }
    gate.release();
    assert_eq!(serve.wait().code(), Some(0));
    for a in answers {
        let rest = a.join().expect("reader");
        assert!(
            rest.contains("\"result\"") && rest.contains("released"),
            "a call in flight at SIGTERM was not answered: {rest}"
        );
    }
    assert_eq!(
        processes_running(&script, None),
        0,
        "server processes outlived sandpipe serve"
    );
}

#[test]
fn a_legacy_session_ends_on_delete_and_its_server_with_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = native_server(dir.path());
    let script = server[1].clone();
    let serve = Serve::start(&[], &server);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let accept = ("Accept", "application/json, text/event-stream");
    let r = http(
        serve.addr,
        "POST",
        "/mcp",
        &[accept, ("Content-Type", "application/json")],
        &init.to_string(),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25", "{r:?}");
    let session = r
        .header("mcp-session-id")
        .expect("Mcp-Session-Id")
        .to_owned();
    let heads = [
        accept,
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    assert_eq!(http(serve.addr, "POST", "/mcp", &heads, &note).status, 202);
    let add = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 2, "b": 2}}});
    let r = http(serve.addr, "POST", "/mcp", &heads, &add.to_string());
    assert_eq!(r.json()["result"]["content"][0]["text"], "4", "{r:?}");
    assert!(processes_running(&script, Some(&serve)) > 0);
    assert_eq!(http(serve.addr, "DELETE", "/mcp", &heads, "").status, 200);
    // DELETE answers once the instance is gone.
    assert_eq!(processes_running(&script, Some(&serve)), 0);
    assert_eq!(
        http(serve.addr, "POST", "/mcp", &heads, &add.to_string()).status,
        404
    );
    assert_eq!(serve.terminate().code(), Some(0));
}

/// A 2025-11-25 session's `initialize` and `notifications/initialized`; its id.
fn initialize(addr: SocketAddr) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = http(
        addr,
        "POST",
        "/mcp",
        &[LEGACY_ACCEPT, ("Content-Type", "application/json")],
        &init.to_string(),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let session = r
        .header("mcp-session-id")
        .expect("Mcp-Session-Id")
        .to_owned();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let heads = session_heads(&session);
    assert_eq!(http(addr, "POST", "/mcp", &heads, &note).status, 202);
    session
}

const LEGACY_ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");

/// The headers of a request in the 2025-11-25 session `session`.
fn session_heads(session: &str) -> [(&str, &str); 3] {
    [
        LEGACY_ACCEPT,
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", "2025-11-25"),
    ]
}

/// A `tools/call` of `name` with `arguments`, as a 2025 session sends it.
fn legacy_call(id: u64, name: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
    .to_string()
}

/// Send a 2026-07-28 `tools/call` on the kept-alive `stream`; its answer.
fn modern_call(stream: &mut TcpStream, addr: SocketAddr, name: &str, arguments: Value) -> Value {
    let mut auth = String::new();
    let heads: Vec<(&str, &str)> = modern_heads(name, None, &mut auth)
        .into_iter()
        .filter(|(n, _)| *n != "Accept")
        .chain([("Accept", "application/json")])
        .collect();
    let body = modern(
        1,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    );
    send(stream, addr, "POST", "/mcp", &heads, &body);
    let r = read_reply(stream);
    assert_eq!(r.status, 200, "{r:?}");
    r.json()
}

#[test]
fn a_server_that_crashes_mid_call_is_answered_for_and_the_next_request_gets_a_fresh_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = native_server(dir.path());
    let script = server[1].clone();
    let serve = Serve::start(&[], &server);
    // 2026-07-28: the call the crash cut off is answered as failed, and the same client's
    // next request gets a fresh instance, which works.
    let mut client = TcpStream::connect(serve.addr).expect("connect");
    let crashed = modern_call(&mut client, serve.addr, "crash", json!({}));
    assert_eq!(crashed["result"]["isError"], true, "{crashed}");
    let reason = crashed["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("SIGKILL") || reason.contains("signal"),
        "{crashed}"
    );
    wait_for("the crashed instance to end", || {
        serve.metric("sandpipe_serve_instances{state=\"ended\"}") == 1
    });
    let next = modern_call(&mut client, serve.addr, "add", json!({"a": 1, "b": 2}));
    assert_eq!(next["result"]["content"][0]["text"], "3", "{next}");
    assert_eq!(
        serve.metric("sandpipe_serve_instances{state=\"running\"}"),
        1
    );
    drop(client);
    wait_for("the fresh instance to end with its connection", || {
        serve.metric("sandpipe_serve_instances{state=\"ended\"}") == 2
    });
    wait_for("every server process to go", || {
        processes_running(&script, Some(&serve)) == 0
    });
    // A 2025 session: the crash ends it (no --restart), its next request gets 404, and the
    // client's new session is a fresh instance.
    let session = initialize(serve.addr);
    let heads = session_heads(&session);
    let r = http(
        serve.addr,
        "POST",
        "/mcp",
        &heads,
        &legacy_call(1, "crash", json!({})),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["result"]["isError"], true, "{r:?}");
    wait_for("the session to be gone", || {
        let r = http(
            serve.addr,
            "POST",
            "/mcp",
            &heads,
            &legacy_call(2, "add", json!({"a": 1, "b": 1})),
        );
        r.status == 404
    });
    let again = initialize(serve.addr);
    let heads = session_heads(&again);
    let r = http(
        serve.addr,
        "POST",
        "/mcp",
        &heads,
        &legacy_call(3, "add", json!({"a": 2, "b": 2})),
    );
    assert_eq!(r.json()["result"]["content"][0]["text"], "4", "{r:?}");
    assert_eq!(http(serve.addr, "DELETE", "/mcp", &heads, "").status, 200);
    assert_eq!(processes_running(&script, Some(&serve)), 0);
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn a_server_that_never_answers_is_cut_off_by_the_request_timeout_and_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = native_server(dir.path());
    let script = server[1].clone();
    let serve = Serve::start(&["--request-timeout", "1s"], &server);
    let mut client = TcpStream::connect(serve.addr).expect("connect");
    let first = modern_call(&mut client, serve.addr, "add", json!({"a": 1, "b": 2}));
    assert_eq!(first["result"]["content"][0]["text"], "3", "{first}");
    let one_instance = processes_running(&script, Some(&serve));
    assert!(one_instance > 0);
    // `hog` holds the server's event loop: it answers nothing, not even the cancellation.
    let deaf = modern_call(&mut client, serve.addr, "hog", json!({"seconds": 3600}));
    assert_eq!(deaf["result"]["isError"], true, "{deaf}");
    assert!(
        deaf["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("timed out")),
        "{deaf}"
    );
    // The next request is served (by a fresh server), and the deaf one is gone.
    let next = modern_call(&mut client, serve.addr, "add", json!({"a": 2, "b": 3}));
    assert_eq!(next["result"]["content"][0]["text"], "5", "{next}");
    wait_for("the deaf server's processes to go", || {
        processes_running(&script, Some(&serve)) == one_instance
    });
    drop(client);
    wait_for("every server process to go", || {
        processes_running(&script, Some(&serve)) == 0
    });
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn a_sigkill_of_serve_leaves_no_server_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = native_server(dir.path());
    let script = server[1].clone();
    let gate = Gate::new(dir.path());
    let serve = Serve::start(&["--dir", &gate.grant()], &server);
    // A 2025 session, and a 2026-07-28 client with a call running in its server.
    let _session = initialize(serve.addr);
    let mut auth = String::new();
    let heads = modern_heads("hold", None, &mut auth);
    let mut held = TcpStream::connect(serve.addr).expect("connect");
    let body = modern(1, "tools/call", gate.hold("held"));
    send(&mut held, serve.addr, "POST", "/mcp", &heads, &body);
    assert_eq!(read_head(&mut held).0, 200);
    wait_for("the call to run in its server", || gate.has_started("held"));
    assert!(processes_running(&script, Some(&serve)) > 0);
    serve.signal(libc::SIGKILL);
    let status = serve.wait();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    wait_for("every server process to die with serve", || {
        processes_running(&script, None) == 0
    });
}

#[test]
fn an_idle_legacy_session_whose_client_left_is_reaped_with_its_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = native_server(dir.path());
    let script = server[1].clone();
    let serve = Serve::start(&["--idle-timeout", "1s"], &server);
    let session = initialize(serve.addr);
    // The client opens its GET stream and later goes away with no further request. However
    // soon the reaper comes, the stream ends (or, had it come already, it is refused: 404).
    let mut stream = TcpStream::connect(serve.addr).expect("connect");
    let mut heads: Vec<(&str, &str)> = session_heads(&session).to_vec();
    heads[0] = ("Accept", "text/event-stream");
    heads.push(("Connection", "close"));
    send(&mut stream, serve.addr, "GET", "/mcp", &heads, "");
    let (status, _) = read_head(&mut stream);
    assert!(status == 200 || status == 404, "GET: {status}");
    let mut rest = String::new();
    let _ = stream.read_to_string(&mut rest);
    wait_for("the idle session to end", || {
        serve.metric("sandpipe_serve_instances{state=\"ended\"}") == 1
    });
    wait_for("its server's processes to go", || {
        processes_running(&script, Some(&serve)) == 0
    });
    let heads = session_heads(&session);
    let r = http(
        serve.addr,
        "POST",
        "/mcp",
        &heads,
        &legacy_call(1, "add", json!({"a": 1, "b": 1})),
    );
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(serve.terminate().code(), Some(0));
}

/// The TypeScript SDK driver's report (`tests/peers/mcp/drive_http.mjs`) of `scenario` against
/// `target` (a URL, or `stdio COMMAND...`).
fn drive_ts(scenario: &str, target: &[String]) -> Value {
    peers::report(
        Command::new(peers::node())
            .arg(peers::source("mcp/drive_http.mjs"))
            .arg(scenario)
            .arg("--")
            .args(target)
            .env("SANDPIPE_MCP_NPM", peers::mcp_npm()),
        &format!("{scenario} on {target:?}"),
    )
}

/// `stdio sandpipe run --protocol mcp SERVER`: the same server, over stdio, in the same sandbox.
fn over_stdio(server: &Path) -> Vec<String> {
    vec![
        "stdio".into(),
        peers::sandpipe().display().to_string(),
        "run".into(),
        "--protocol".into(),
        "mcp".into(),
        server.display().to_string(),
    ]
}

/// Take `key` out of a report.
fn take(report: &mut Value, key: &str) -> Value {
    report
        .as_object_mut()
        .expect("a report")
        .remove(key)
        .unwrap_or(Value::Null)
}

/// The TypeScript SDK's `StreamableHTTPClientTransport` against `server` behind `serve` sees
/// what its stdio client sees of the same server behind `run --protocol mcp`, but for what the
/// transport itself decides (the session id) and the clock (`clock`); its session ends with
/// DELETE, and the instance with it.
fn typescript_over_http_is_as_over_stdio(scenario: &str, server: &Path) -> Value {
    let serve = Serve::start(&[], &[server.to_path_buf()]);
    let mut over_http = drive_ts(scenario, &[serve.url()]);
    let mut direct = drive_ts(scenario, &over_stdio(server));
    let transport = take(&mut over_http, "transport");
    assert_eq!(take(&mut direct, "transport"), json!({}));
    assert!(
        transport["sessionId"]
            .as_str()
            .is_some_and(|id| id.len() == 32),
        "{transport}"
    );
    assert_eq!(transport["terminated"], true, "{transport}");
    // DELETE answers once the instance is gone.
    assert_eq!(
        (
            serve.metric("sandpipe_serve_instances{state=\"running\"}"),
            serve.metric("sandpipe_serve_instances{state=\"ended\"}")
        ),
        (0, 1)
    );
    let (http_clock, stdio_clock) = (take(&mut over_http, "clock"), take(&mut direct, "clock"));
    if scenario == "time" {
        assert!(http_clock["date"].as_str().is_some_and(|d| d.len() == 10));
        assert!(stdio_clock["day"].is_string());
    }
    assert_eq!(over_http["protocolVersion"], "2025-11-25", "{over_http}");
    assert_eq!(over_http, direct, "{scenario}: over HTTP, then over stdio");
    assert_eq!(serve.terminate().code(), Some(0));
    over_http
}

#[test]
fn the_typescript_sdks_http_client_sees_server_everything_as_over_stdio() {
    let report = typescript_over_http_is_as_over_stdio(
        "everything",
        &peers::mcp_npm_server("mcp-server-everything"),
    );
    assert_eq!(report["serverInfo"]["name"], "mcp-servers/everything");
    assert_eq!(
        report["echo"]["result"]["content"][0]["text"],
        "Echo: hello"
    );
    assert_eq!(report["own_error"]["result"]["isError"], true);
    // Progress reached the client on the call's SSE stream.
    assert_eq!(
        report["progress_before_the_answer"],
        json!([[1, 3], [2, 3]])
    );
    assert!(report["tools"].as_array().is_some_and(|t| t.len() > 5));
}

#[test]
fn the_typescript_sdks_http_client_sees_mcp_server_time_as_over_stdio() {
    let report = typescript_over_http_is_as_over_stdio("time", &peers::mcp_server_time());
    assert_eq!(report["serverInfo"]["name"], "mcp-time");
    let convert = &report["convert"]["result"]["structuredContent"];
    assert_eq!(
        convert["target"]["datetime"], "DATET21:00:00+09:00",
        "{report}"
    );
    assert_eq!(convert["time_difference"], "+9.0h", "{report}");
    assert_eq!(report["current"]["timezone"], "UTC");
    assert_eq!(report["bad_zone"]["result"]["isError"], true);
}

#[test]
fn the_python_sdk_client_sees_mcp_server_time_over_http_as_over_stdio_in_each_mode() {
    let server = peers::mcp_server_time();
    let serve = Serve::start(&[], std::slice::from_ref(&server));
    for (mode, version) in [("legacy", "2025-11-25"), ("auto", MODERN), (MODERN, MODERN)] {
        let over_http = drive(mode, &["tools", "time"], &[serve.url()]);
        let direct = drive(mode, &["tools", "time"], &over_stdio(&server));
        assert_eq!(over_http["version"], version, "{over_http}");
        assert_eq!(
            over_http["tools"]["names"],
            json!(["convert_time", "get_current_time"])
        );
        assert!(
            over_http["time"]["convert"]["result"]["text"][0]
                .as_str()
                .is_some_and(|t| t.contains("DATET21:00:00+09:00")),
            "{over_http}"
        );
        assert_eq!(direct, over_http, "mode {mode}");
    }
    assert_eq!(serve.terminate().code(), Some(0));
}

#[test]
fn a_client_that_sends_half_a_request_head_is_cut_off_and_others_are_served_meanwhile() {
    let serve = Serve::start(&["--header-timeout", "1s"], &tools_server());
    // Half a head (slowloris): the request line and some headers, never the blank line.
    let mut slow = TcpStream::connect(serve.addr).expect("connect");
    let half = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nMcp-Met",
        serve.addr
    );
    slow.write_all(half.as_bytes()).expect("half a head");
    // Meanwhile another client is served, its request reaching an instance.
    let mut auth = String::new();
    let heads = modern_heads("add", None, &mut auth);
    let call = modern(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
    );
    let r = http(serve.addr, "POST", "/mcp", &heads, &call);
    assert_eq!(r.json()["result"]["content"][0]["text"], "3", "{r:?}");
    // Its time is in the histogram, and only its: nothing refused was timed.
    for series in [
        "sandpipe_serve_request_duration_seconds_count{method=\"tools/call\"}",
        "sandpipe_serve_request_duration_seconds_bucket{method=\"tools/call\",le=\"+Inf\"}",
    ] {
        assert_eq!(serve.metric(series), 1, "{series}");
    }
    assert_eq!(http(serve.addr, "GET", "/healthz", &[], "").status, 200);
    // The half-sent head is cut off: its connection closes (EOF or a reset), however long
    // that takes; a read that waits past a minute fails the test instead.
    slow.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("a read timeout");
    let mut rest = Vec::new();
    match slow.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) => assert_eq!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset,
            "the half-sent head's connection stayed open: {e}"
        ),
    }
    // It reached nothing: the one instance is the other client's (ended with its connection).
    wait_for("the other client's instance to end", || {
        serve.metric("sandpipe_serve_instances{state=\"ended\"}") == 1
    });
    assert_eq!(
        serve.metric("sandpipe_serve_instances{state=\"running\"}"),
        0
    );
    assert_eq!(serve.terminate().code(), Some(0));
}

/// Each check of one run of the official conformance suite against `url`: `(scenario/check,
/// passed)`, from the `checks.json` files it writes.
fn conformance(url: &str, out: &Path) -> BTreeMap<String, bool> {
    let run = peers::mcp_conformance()
        .args(["server", "--suite", "all", "--url", url, "--output-dir"])
        .arg(out)
        .output()
        .expect("the conformance suite");
    let mut checks = BTreeMap::new();
    for entry in std::fs::read_dir(out).expect("the suite's results") {
        let dir = entry.expect("entry").path();
        let name = dir
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        // `server-SCENARIO-2026-12-04T01-32-30-896Z`
        let scenario = name
            .strip_prefix("server-")
            .and_then(|n| n.rsplitn(7, '-').nth(6))
            .unwrap_or(&name)
            .to_owned();
        let text = std::fs::read_to_string(dir.join("checks.json")).expect("checks.json");
        let list: Vec<Value> = serde_json::from_str(&text).expect("checks JSON");
        for c in list {
            let id = c["id"].as_str().unwrap_or("?");
            checks.insert(format!("{scenario}/{id}"), c["status"] == "SUCCESS");
        }
    }
    assert!(
        !checks.is_empty(),
        "the suite ran no scenario against {url}:\n{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    checks
}

/// server-everything's own Streamable HTTP mode on a free port (it takes `PORT`; a port taken
/// meanwhile is tried again with another).
fn everything_over_its_own_http() -> (Child, String) {
    let script = peers::mcp_npm_server("mcp-server-everything");
    for _ in 0..5 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut child = Command::new(peers::node())
            .arg(&script)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("server-everything");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr"));
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if lines.read_line(&mut line).expect("its stderr") == 0 {
                break;
            }
            seen.push_str(&line);
            if line.contains("listening on port") {
                std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
                return (child, format!("http://127.0.0.1:{port}/mcp"));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            seen.contains("already in use"),
            "server-everything did not start:\n{seen}"
        );
    }
    panic!("no free port for server-everything in five tries");
}

#[test]
fn the_conformance_suite_passes_behind_serve_every_check_it_passes_against_the_servers_own_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut own, own_url) = everything_over_its_own_http();
    let baseline = conformance(&own_url, &dir.path().join("own"));
    let _ = own.kill();
    let _ = own.wait();
    // The suite opens a session per scenario and leaves it: room for all of them.
    let serve = Serve::start(
        &["--max-instances", "64"],
        &[peers::mcp_npm_server("mcp-server-everything")],
    );
    let behind = conformance(&serve.url(), &dir.path().join("serve"));
    let score = |c: &BTreeMap<String, bool>| c.values().filter(|p| **p).count();
    println!(
        "conformance 0.1.16 --suite all, server-everything 2026.8.31: its own HTTP mode passes {} of {} checks, behind sandpipe serve {} of {}",
        score(&baseline),
        baseline.len(),
        score(&behind),
        behind.len()
    );
    let lost: Vec<&String> = baseline
        .iter()
        .filter(|(check, passed)| **passed && behind.get(*check) != Some(&true))
        .map(|(check, _)| check)
        .collect();
    assert!(
        lost.is_empty(),
        "passed against the server's own HTTP mode, not behind serve: {lost:?}"
    );
    // serve checks Host and Origin, which the server's own mode does not.
    assert_eq!(
        behind.get("dns-rebinding-protection/localhost-host-rebinding-rejected"),
        Some(&true),
        "{behind:?}"
    );
    assert_eq!(serve.terminate().code(), Some(0));
}
