//! Hermetic replay: a plugin's network recorded with `--record` and served back by `sandpipe
//! replay --plugin` with no network. Real plugins (the `wasi:http` component `http-client`;
//! Python's `urllib` natively, through sandpipe's proxy) against real HTTP servers on
//! 127.0.0.1, each recorded, then stopped, its port closed, before the replay, so a replay
//! that reached anything would fail. No test waits on a clock: every server serves a known
//! number of connections and is joined before the replay starts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::thread::JoinHandle;

use sandpipe_tests::web::{SENTENCE, TestCa, WebServer};
use sandpipe_tests::{Target, cli, peers};
use serde_json::Value;

/// An HTTP/1.1 server on 127.0.0.1 that serves exactly `n` connections, one request each,
/// answering each with `answer(request line)`, then closes its port.
struct Loopback {
    port: u16,
    thread: Option<JoinHandle<Vec<String>>>,
}

impl Loopback {
    fn serve(n: usize, answer: impl Fn(&str) -> Vec<u8> + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the server");
        let port = listener.local_addr().expect("local address").port();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..n {
                let Ok((conn, _)) = listener.accept() else {
                    break;
                };
                let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                let mut length = 0usize;
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h.trim_end().is_empty() {
                        break;
                    }
                    if let Some((name, value)) = h.trim_end().split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let request = line.trim_end().to_owned();
                let body = answer(&request);
                let mut conn = conn;
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(&body);
                let _ = conn.flush();
                seen.push(request);
            }
            seen
        });
        Self {
            port,
            thread: Some(thread),
        }
    }

    /// Wait until every connection was served and the port is closed; the request lines.
    fn finish(mut self) -> Vec<String> {
        let seen = self
            .thread
            .take()
            .expect("the server thread")
            .join()
            .expect("the server ran");
        assert!(
            TcpStream::connect(("127.0.0.1", self.port)).is_err(),
            "the server's port is still open"
        );
        seen
    }
}

/// `sandpipe ARGS` with `env`, the commands on stdin.
fn sandpipe(args: &[String], env: &[(&str, &str)], stdin: &str) -> Output {
    let mut cmd = Command::new(peers::sandpipe());
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cli::run_command(cmd, stdin.as_bytes())
}

/// `run --record FILE` of `http-client` allowed `api.test:PORT`, pinned to 127.0.0.1.
fn record_args(file: &Path, port: u16, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--framing",
        "lines",
        "--record",
        &file.display().to_string(),
        "--allow-net",
        &format!("api.test:{port}"),
        "--resolve",
        "api.test=127.0.0.1",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args.push(cli::path("http-client", Target::Wasm));
    args
}

fn replay_args(file: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "replay".to_owned(),
        file.display().to_string(),
        "--plugin".to_owned(),
        cli::path("http-client", Target::Wasm),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

fn answers(out: &Output) -> Vec<Value> {
    cli::text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

const SECRET: &str = "Bearer s3cret-that-stays-in-the-environment";

#[test]
fn a_wasi_http_recording_replays_offline_and_a_changed_or_extra_request_is_reported() {
    let server = Loopback::serve(2, |line| format!("answer to {line}").into_bytes());
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("http.transcript");
    let commands =
        format!("\"get http://api.test:{port}/a\"\n\"get http://api.test:{port}/b?q=1\"\n");
    let env = [("TOKEN", SECRET)];
    let out = sandpipe(
        &record_args(
            &file,
            port,
            &["--http-header", "api.test:Authorization=env:TOKEN"],
        ),
        &env,
        &commands,
    );
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let got = answers(&out);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["body"], format!("answer to GET /a HTTP/1.1"));
    let seen = server.finish();
    assert_eq!(seen, ["GET /a HTTP/1.1", "GET /b?q=1 HTTP/1.1"]);

    let text = std::fs::read_to_string(&file).expect("the recording");
    assert!(
        !text.contains("s3cret"),
        "the secret is in the recording:\n{text}"
    );
    assert!(
        text.contains(r#""added":[{"name":"Authorization","from":"env:TOKEN"}]"#),
        "{text}"
    );
    for line in [
        format!(
            r#"@0 open {{"via":"wasi-http","host":"api.test","port":{port},"addr":"127.0.0.1:{port}","rule":"api.test:{port}"}}"#
        ),
        "@0 < answer to GET /a HTTP/1.1".to_owned(),
        "@1 <end".to_owned(),
        "@1 close".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "no line {line} in\n{text}");
    }
    // In order with the frames: each exchange before the answer it gave (the engine wrote
    // both commands at once).
    let mut kinds: Vec<char> = text
        .lines()
        .filter_map(|l| match l.get(..3) {
            Some("@0 ") => Some('0'),
            Some("@1 ") => Some('1'),
            _ => l.chars().next().filter(|c| matches!(c, '>' | '<')),
        })
        .collect();
    kinds.dedup();
    assert_eq!(kinds.iter().collect::<String>(), ">0<1<", "{text}");

    // Offline: the server is gone, and the replay is green.
    let out = sandpipe(&replay_args(&file, &[]), &env, "");
    let stderr = cli::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("replay matched all 4 frames and 2 network exchanges"),
        "{stderr}"
    );

    // The exchanges as HAR 1.2, without running anything.
    let har = dir.path().join("http.har");
    let out = sandpipe(
        &[
            "replay".to_owned(),
            file.display().to_string(),
            "--har".to_owned(),
            har.display().to_string(),
        ],
        &[],
        "",
    );
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let har: Value = serde_json::from_slice(&std::fs::read(&har).expect("the HAR")).expect("JSON");
    assert_eq!(har["log"]["version"], "1.2");
    let entries = har["log"]["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 2, "{har}");
    assert_eq!(
        entries[1]["request"]["url"],
        format!("http://api.test:{port}/b?q=1")
    );
    assert_eq!(entries[1]["response"]["status"], 200);
    assert_eq!(
        entries[1]["response"]["content"]["text"],
        "answer to GET /b?q=1 HTTP/1.1"
    );
    assert!(!har.to_string().contains("s3cret"));

    // The second request changed (the engine asks for another URL): it diverges at that
    // exchange, with the request's diff.
    let changed = dir.path().join("changed.transcript");
    std::fs::write(
        &changed,
        text.replace(
            &format!("> \"get http://api.test:{port}/b?q=1\""),
            &format!("> \"get http://api.test:{port}/c\""),
        ),
    )
    .expect("write");
    let out = sandpipe(&replay_args(&changed, &[]), &env, "");
    let stderr = cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "first divergence at network exchange 1 (wasi:http api.test:{port}): the plugin sent a different request\n- GET http://api.test:{port}/b?q=1\n+ GET http://api.test:{port}/c\n"
        )),
        "{stderr}"
    );

    // The recording without its second exchange: the plugin's second request is a
    // connection it does not have, refused and reported.
    let fewer = dir.path().join("fewer.transcript");
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with("@1 "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&fewer, kept).expect("write");
    let out = sandpipe(&replay_args(&fewer, &[]), &env, "");
    let stderr = cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the plugin opened a connection the recording does not have (wasi:http api.test:{port}); it was refused"
        )),
        "{stderr}"
    );

    // `--network live` goes to the network as the recording did: the server is gone.
    let out = sandpipe(&replay_args(&file, &["--network", "live"]), &env, "");
    let stderr = cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("first divergence at frame 2"), "{stderr}");
}

#[test]
fn deterministic_recordings_against_the_same_answers_are_byte_identical() {
    let server = Loopback::serve(2, |_| b"the same answer\n".to_vec());
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let files = [
        dir.path().join("one.transcript"),
        dir.path().join("two.transcript"),
    ];
    for file in &files {
        let out = sandpipe(
            &record_args(file, port, &["--deterministic", "--seed", "3"]),
            &[],
            &format!("\"get http://api.test:{port}/price\"\n"),
        );
        assert!(out.status.success(), "{}", cli::text(&out.stderr));
    }
    server.finish();
    let one = std::fs::read(&files[0]).expect("one");
    let two = std::fs::read(&files[1]).expect("two");
    assert!(
        one == two,
        "the recordings differ:\n{}\n---\n{}",
        cli::text(&one),
        cli::text(&two)
    );
    assert!(cli::text(&one).contains("@0 <x 7468652073616d6520616e737765720a"));
    let out = sandpipe(&replay_args(&files[0], &[]), &[], "");
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
}

#[test]
fn a_body_past_max_record_stops_the_recording_with_the_error() {
    let server = Loopback::serve(1, |_| vec![b'x'; 256 << 10]);
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big.transcript");
    let out = sandpipe(
        &record_args(&file, port, &["--max-record", "64KiB"]),
        &[],
        &format!("\"get http://api.test:{port}/big\"\n"),
    );
    let stderr = cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("sandpipe: --record: the recording exceeds --max-record 65536 bytes"),
        "{stderr}"
    );
    server.finish();
    let text = std::fs::read_to_string(&file).expect("the recording");
    let last = text.lines().last().expect("a line");
    assert!(
        last.starts_with("# stopped: the recording exceeds --max-record 65536 bytes"),
        "{last}"
    );
    // Everything before the stop fits under the cap: nothing past it was written.
    assert!(text.len() - last.len() - 1 <= 64 << 10, "{}", text.len());
}

#[test]
fn python_urllib_through_the_proxy_replays_offline() {
    let server = WebServer::http();
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("urllib.transcript");
    let python = peers::mcp_python().display().to_string();
    let script = peers::source("net/fetch.py").display().to_string();
    let url = format!("http://api.test:{port}/text");
    let args: Vec<String> = [
        "run",
        "--framing",
        "lines",
        "--record",
        &file.display().to_string(),
        "--allow-net",
        &format!("api.test:{port}"),
        "--resolve",
        "api.test=127.0.0.1",
        &python,
        &script,
        &url,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let out = sandpipe(&args, &[], "");
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let got = answers(&out);
    assert_eq!(got[0]["body"], format!("{SENTENCE}\n"), "{got:?}");
    // The server ends here: its port is closed before the replay.
    drop(server);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    let text = std::fs::read_to_string(&file).expect("the recording");
    assert!(
        text.contains(&format!(
            r#""via":"proxy","host":"api.test","port":{port},"kind":"http""#
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(r#"@0 request {{"method":"GET","url":"{url}""#)),
        "{text}"
    );
    // The answer's head is its `response` line; only the body is bytes.
    assert!(text.contains(r#"@0 response {"status":200,"#), "{text}");
    assert!(!text.contains("HTTP/1."), "{text}");
    let out = sandpipe(
        &[
            "replay".to_owned(),
            file.display().to_string(),
            "--plugin".to_owned(),
            python,
        ],
        &[],
        "",
    );
    let stderr = cli::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("replay matched all 1 frames and 1 network exchanges"),
        "{stderr}"
    );
    // The HAR has the exchange, its head from the `response` line.
    let out = sandpipe(
        &[
            "replay".to_owned(),
            file.display().to_string(),
            "--har".to_owned(),
            "-".to_owned(),
        ],
        &[],
        "",
    );
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let har: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let entry = &har["log"]["entries"][0];
    assert_eq!(entry["response"]["status"], 200, "{har}");
    assert_eq!(
        entry["response"]["content"]["text"],
        format!("{SENTENCE}\n")
    );
}

/// `sandpipe run --tls-intercept` of Python's `urllib` (the real client, natively, through
/// sandpipe's proxy) fetching `urls` from `api.test` on `port` (pinned to 127.0.0.1), with
/// `extra` flags; sandpipe itself trusts `ca` (its `SSL_CERT_FILE`) to verify the server.
fn urllib_args(file: &Path, port: u16, extra: &[String], script_args: &[String]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--framing",
        "lines",
        "--record",
        &file.display().to_string(),
        "--allow-net",
        &format!("api.test:{port}"),
        "--resolve",
        "api.test=127.0.0.1",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().cloned());
    args.push(peers::mcp_python().display().to_string());
    args.push(peers::source("net/fetch.py").display().to_string());
    args.extend(script_args.iter().cloned());
    args
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn https_from_a_native_plugin_with_tls_intercept_is_recorded_in_plaintext_and_replays_offline() {
    let ca = TestCa::new(&["api.test"]);
    let server = WebServer::https(&ca);
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("https.transcript");
    let text_url = format!("https://api.test:{port}/text");
    let auth_url = format!("https://api.test:{port}/auth");
    let flags: Vec<String> = [
        "--tls-intercept",
        "--http-header",
        "api.test:Authorization=env:TOKEN",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let ca_file = ca.ca.display().to_string();
    let args = urllib_args(&file, port, &flags, &[text_url.clone(), auth_url.clone()]);
    let out = sandpipe(&args, &[("SSL_CERT_FILE", &ca_file), ("TOKEN", SECRET)], "");
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let got = answers(&out);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["body"], format!("{SENTENCE}\n"), "{got:?}");
    // The server got sandpipe's header; the plugin never had it.
    assert_eq!(
        got[1]["body"],
        format!("{}\n", sha256_hex(SECRET)),
        "the server did not see the --http-header: {got:?}"
    );
    drop(server);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());

    let text = std::fs::read_to_string(&file).expect("the recording");
    assert!(
        !text.contains("s3cret"),
        "the secret is in the recording:\n{text}"
    );
    for line in [
        format!(r#""via":"proxy","host":"api.test","port":{port},"kind":"http""#),
        format!(r#""method":"GET","url":"{text_url}""#),
        format!(r#""method":"GET","url":"{auth_url}""#),
        r#""added":[{"name":"Authorization","from":"env:TOKEN"}]"#.to_owned(),
        r#""tls-intercept":true"#.to_owned(),
    ] {
        assert!(
            text.contains(&line),
            "{line} is not in the recording:\n{text}"
        );
    }
    // Plaintext: the body the server sent is in the file, as its data line writes it (hex,
    // since it ends with a newline).
    let hex: String = format!("{SENTENCE}\n")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(text.contains(&format!("<x {hex}")), "{text}");

    // Offline: no server, and neither sandpipe nor the plugin is given the test CA (the plugin
    // trusts this replay's own session CA), nor the header's secret (nothing is sent).
    let replay = |extra: &[&str]| {
        let mut args = vec![
            "replay".to_owned(),
            file.display().to_string(),
            "--plugin".to_owned(),
            peers::mcp_python().display().to_string(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        sandpipe(&args, &[], "")
    };
    let out = replay(&[]);
    let stderr = cli::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("replay matched all 2 frames and 2 network exchanges"),
        "{stderr}"
    );
    // Live, the header would be sent: its variable must be set.
    let out = replay(&["--network", "live"]);
    let stderr = cli::text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("set the variables of the recorded --http-headers"),
        "{stderr}"
    );
}

#[test]
fn a_plugin_that_pins_its_ca_refuses_the_session_ca_and_the_message_names_tls_intercept() {
    let ca = TestCa::new(&["api.test"]);
    let server = WebServer::https(&ca);
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("pinned.transcript");
    let url = format!("https://api.test:{port}/text");
    let ca_file = ca.ca.display().to_string();
    // The program trusts the test CA alone (whatever SSL_CERT_FILE says), read from a grant.
    let script_args = vec![format!("--cafile={ca_file}"), url];
    let grant = vec!["--dir".to_owned(), format!("{}:ro", ca.path().display())];
    let run = |intercept: bool| {
        let mut flags = grant.clone();
        if intercept {
            flags.push("--tls-intercept".to_owned());
        }
        let args = urllib_args(&file, port, &flags, &script_args);
        sandpipe(&args, &[("SSL_CERT_FILE", &ca_file)], "")
    };
    // Without --tls-intercept the tunnel is TLS end to end: the pinned CA is the server's.
    let out = run(false);
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    assert_eq!(answers(&out)[0]["body"], format!("{SENTENCE}\n"));
    // With it, the plugin sees the session CA's certificate and refuses it.
    let out = run(true);
    let got = answers(&out);
    let error = got[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("CERTIFICATE_VERIFY_FAILED"), "{got:?}");
    let stderr = cli::text(&out.stderr);
    assert!(
        stderr.contains("the plugin refused the certificate of sandpipe's session CA")
            && stderr.contains("without --tls-intercept"),
        "{stderr}"
    );
}

#[test]
fn deno_fetch_over_https_with_tls_intercept_replays_offline() {
    let ca = TestCa::new(&["api.test"]);
    let server = WebServer::https(&ca);
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("deno.transcript");
    let deno_dir = dir.path().join("deno");
    std::fs::create_dir(&deno_dir).expect("DENO_DIR");
    let url = format!("https://api.test:{port}/text");
    let mut args: Vec<String> = [
        "run",
        "--framing",
        "lines",
        "--record",
        &file.display().to_string(),
        "--allow-net",
        &format!("api.test:{port}"),
        "--resolve",
        "api.test=127.0.0.1",
        "--tls-intercept",
        "--dir",
        &deno_dir.display().to_string(),
        "--env",
        "DENO_DIR",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.push(peers::deno().display().to_string());
    for a in ["run", "-q", "--allow-net", "--allow-env", "--allow-read"] {
        args.push(a.to_owned());
    }
    args.push(peers::source("net/fetch.ts").display().to_string());
    args.push(url.clone());
    let deno_env = deno_dir.display().to_string();
    let ca_file = ca.ca.display().to_string();
    let out = sandpipe(
        &args,
        &[("SSL_CERT_FILE", &ca_file), ("DENO_DIR", &deno_env)],
        "",
    );
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let got = answers(&out);
    assert_eq!(got[0]["status"], 200, "{got:?}");
    assert_eq!(got[0]["body"], format!("{SENTENCE}\n"), "{got:?}");
    drop(server);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    let text = std::fs::read_to_string(&file).expect("the recording");
    assert!(
        text.contains(&format!(r#""method":"GET","url":"{url}""#)),
        "{text}"
    );
    let out = sandpipe(
        &[
            "replay".to_owned(),
            file.display().to_string(),
            "--plugin".to_owned(),
            peers::deno().display().to_string(),
        ],
        &[("DENO_DIR", &deno_env)],
        "",
    );
    let stderr = cli::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("replay matched all 1 frames and 1 network exchanges"),
        "{stderr}"
    );
}

#[test]
fn mcp_server_fetch_over_https_with_tls_intercept_replays_offline() {
    let ca = TestCa::new(&["api.test"]);
    let server = WebServer::https(&ca);
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("fetch.transcript");
    let url = format!("https://api.test:{port}/text");
    // The official MCP SDK client starts `sandpipe run --protocol mcp ... mcp-server-fetch`.
    let out = Command::new(peers::mcp_python())
        .arg(peers::source("mcp/drive.py"))
        .args(["fetch", &url])
        // The SDK gives the server a default environment: sandpipe's SSL_CERT_FILE, to
        // verify the test server, goes through the driver.
        .arg(format!("SSL_CERT_FILE={}", ca.ca.display()))
        .arg("--")
        .arg(peers::sandpipe())
        .args(["run", "--protocol", "mcp", "--record"])
        .arg(&file)
        .args([
            "--allow-net",
            &format!("api.test:{port}"),
            "--resolve",
            "api.test=127.0.0.1",
            "--tls-intercept",
        ])
        .arg(peers::mcp_server_fetch())
        .output()
        .expect("running the MCP SDK driver");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("a report");
    let text = report["fetch"][0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains(SENTENCE),
        "{report}\n{}",
        std::fs::read_to_string(&file).unwrap_or_default()
    );
    drop(server);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    let recorded = std::fs::read_to_string(&file).expect("the recording");
    // The autonomous fetch asks for robots.txt first (a 404 here), then the page.
    for asked in ["/robots.txt", "/text"] {
        assert!(
            recorded.contains(&format!(
                r#""method":"GET","url":"https://api.test:{port}{asked}""#
            )),
            "{recorded}"
        );
    }
    let out = sandpipe(
        &[
            "replay".to_owned(),
            file.display().to_string(),
            "--plugin".to_owned(),
            peers::mcp_server_fetch().display().to_string(),
        ],
        &[],
        "",
    );
    let stderr = cli::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("network exchanges") && stderr.contains("replay matched all"),
        "{stderr}"
    );
}

/// A line server on 127.0.0.1 that serves exactly `n` connections: to each line it reads it
/// answers `answer(line)` and a newline, until the client closes its side; then it closes
/// the connection, and after the last one its port. What a `wasi:sockets` client talks to.
struct LineServer {
    port: u16,
    thread: Option<JoinHandle<Vec<String>>>,
}

impl LineServer {
    fn serve(n: usize, answer: impl Fn(&str) -> String + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the server");
        let port = listener.local_addr().expect("local address").port();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..n {
                let Ok((conn, _)) = listener.accept() else {
                    break;
                };
                let mut writer = conn.try_clone().expect("clone");
                for line in BufReader::new(conn).lines() {
                    let Ok(line) = line else { break };
                    // A client that went away takes the rest of the answer with it.
                    let _ = writeln!(writer, "{}", answer(&line)).and_then(|()| writer.flush());
                    seen.push(line);
                }
            }
            seen
        });
        Self {
            port,
            thread: Some(thread),
        }
    }

    /// Wait until every connection was served and the port is closed; the lines read.
    fn finish(mut self) -> Vec<String> {
        let seen = self
            .thread
            .take()
            .expect("the server thread")
            .join()
            .expect("the server ran");
        assert!(
            TcpStream::connect(("127.0.0.1", self.port)).is_err(),
            "the server's port is still open"
        );
        seen
    }
}

/// `run --record FILE` of the `wasi:sockets` client `net-client` allowed `api.test:PORT`,
/// pinned to 127.0.0.1.
fn sockets_record_args(file: &Path, port: u16, extra: &[&str]) -> Vec<String> {
    let mut args = record_args(file, port, extra);
    args.pop();
    args.push(cli::path("net-client", Target::Wasm));
    args
}

fn sockets_replay_args(file: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "replay".to_owned(),
        file.display().to_string(),
        "--plugin".to_owned(),
        cli::path("net-client", Target::Wasm),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_wasi_sockets_recording_replays_offline_and_a_changed_or_extra_connection_is_reported() {
    let server = LineServer::serve(2, |line| format!("answer to {line}"));
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tcp.transcript");
    // One connection read for one line; one that shuts its side down and reads to the end.
    let commands = format!("\"tcp api.test:{port}\"\n\"tcp-all api.test:{port} hello\"\n");
    let out = sandpipe(&sockets_record_args(&file, port, &[]), &[], &commands);
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let got = answers(&out);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["reply"], "answer to ping", "{got:?}");
    assert_eq!(got[1]["reply"], "answer to hello\n", "{got:?}");
    assert_eq!(server.finish(), ["ping", "hello"]);

    let text = std::fs::read_to_string(&file).expect("the recording");
    for line in [
        format!(
            r#"@0 open {{"via":"wasi-sockets","host":"api.test","port":{port},"kind":"bytes","addr":"127.0.0.1:{port}","rule":"api.test:{port}"}}"#
        ),
        format!("@0 >x {}", hex(b"ping\n")),
        format!("@0 <x {}", hex(b"answer to ping\n")),
        "@0 close".to_owned(),
        format!("@1 >x {}", hex(b"hello\n")),
        "@1 >end".to_owned(),
        format!("@1 <x {}", hex(b"answer to hello\n")),
        "@1 <end".to_owned(),
        "@1 close".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "no line {line} in\n{text}");
    }
    assert!(!text.contains("opaque"), "{text}");
    // Each connection's lines in the order the plugin wrote and read, and each connection
    // before the answer it gave.
    let conn1: Vec<&str> = text.lines().filter(|l| l.starts_with("@1 ")).collect();
    assert_eq!(
        conn1[1..],
        [
            format!("@1 >x {}", hex(b"hello\n")).as_str(),
            "@1 >end",
            format!("@1 <x {}", hex(b"answer to hello\n")).as_str(),
            "@1 <end",
            "@1 close",
        ],
        "{text}"
    );
    let mut kinds: Vec<char> = text
        .lines()
        .filter_map(|l| match l.get(..3) {
            Some("@0 ") => Some('0'),
            Some("@1 ") => Some('1'),
            _ => l.chars().next().filter(|c| matches!(c, '>' | '<')),
        })
        .collect();
    kinds.dedup();
    assert_eq!(kinds.iter().collect::<String>(), ">0<1<", "{text}");

    // Offline: the server is gone, and the replay is green.
    let out = sandpipe(&sockets_replay_args(&file, &[]), &[], "");
    let stderr = cli::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("replay matched all 4 frames and 2 network exchanges"),
        "{stderr}"
    );

    // The second connection sends other bytes (the engine asks for another text): it
    // diverges at that connection, with the line that differs.
    let changed = dir.path().join("changed.transcript");
    std::fs::write(
        &changed,
        text.replace(
            &format!("> \"tcp-all api.test:{port} hello\""),
            &format!("> \"tcp-all api.test:{port} hullo\""),
        ),
    )
    .expect("write");
    let out = sandpipe(&sockets_replay_args(&changed, &[]), &[], "");
    let stderr = cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "first divergence at network exchange 1 (wasi:sockets api.test:{port}): the plugin sent a different request\n- hello\n+ hullo\n"
        )),
        "{stderr}"
    );

    // The recording without its second connection: the plugin's second connect is one it
    // does not have, refused and reported.
    let fewer = dir.path().join("fewer.transcript");
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with("@1 "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&fewer, kept).expect("write");
    let out = sandpipe(&sockets_replay_args(&fewer, &[]), &[], "");
    let stderr = cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the plugin opened a connection the recording does not have (wasi:sockets api.test:{port}); it was refused"
        )),
        "{stderr}"
    );

    // `--network live` connects as the recording did: the server is gone.
    let out = sandpipe(&sockets_replay_args(&file, &["--network", "live"]), &[], "");
    let stderr = cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("first divergence at frame 2"), "{stderr}");
}

#[test]
fn deterministic_wasi_sockets_recordings_against_the_same_answers_are_byte_identical() {
    let server = LineServer::serve(2, |_| "the same answer".to_owned());
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let files = [
        dir.path().join("one.transcript"),
        dir.path().join("two.transcript"),
    ];
    for file in &files {
        let out = sandpipe(
            &sockets_record_args(file, port, &["--deterministic", "--seed", "3"]),
            &[],
            &format!("\"tcp-all api.test:{port}\"\n"),
        );
        assert!(out.status.success(), "{}", cli::text(&out.stderr));
    }
    server.finish();
    let one = std::fs::read(&files[0]).expect("one");
    let two = std::fs::read(&files[1]).expect("two");
    assert!(
        one == two,
        "the recordings differ:\n{}\n---\n{}",
        cli::text(&one),
        cli::text(&two)
    );
    assert!(cli::text(&one).contains(&format!("@0 <x {}", hex(b"the same answer\n"))));
    let out = sandpipe(&sockets_replay_args(&files[0], &[]), &[], "");
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
}

#[test]
fn wasi_sockets_bytes_past_max_record_stop_the_recording_with_the_error() {
    let server = LineServer::serve(1, |_| "x".repeat(256 << 10));
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big.transcript");
    let out = sandpipe(
        &sockets_record_args(&file, port, &["--max-record", "64KiB"]),
        &[],
        &format!("\"tcp api.test:{port}\"\n"),
    );
    let stderr = cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("sandpipe: --record: the recording exceeds --max-record 65536 bytes"),
        "{stderr}"
    );
    // The plugin's read failed: it answered with the error.
    let got = answers(&out);
    assert_eq!(got[0]["ok"], false, "{got:?}");
    server.finish();
    let text = std::fs::read_to_string(&file).expect("the recording");
    let last = text.lines().last().expect("a line");
    assert!(
        last.starts_with("# stopped: the recording exceeds --max-record 65536 bytes"),
        "{last}"
    );
    assert!(text.contains("\n@0 < xxxx"), "{text}");
    // Everything before the stop fits under the cap: nothing past it was written.
    assert!(text.len() - last.len() - 1 <= 64 << 10, "{}", text.len());
}

#[test]
fn a_refused_wasi_sockets_connect_is_recorded_as_failed_and_fails_the_same_in_the_replay() {
    // A port nothing listens on: bound, then closed.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("local address").port()
    };
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("refused.transcript");
    let out = sandpipe(
        &sockets_record_args(&file, port, &[]),
        &[],
        &format!("\"tcp api.test:{port}\"\n"),
    );
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let got = answers(&out);
    assert_eq!(got[0]["ok"], false, "{got:?}");
    let text = std::fs::read_to_string(&file).expect("the recording");
    let conn0: Vec<&str> = text.lines().filter(|l| l.starts_with("@0 ")).collect();
    assert_eq!(conn0.len(), 3, "{text}");
    assert!(conn0[0].starts_with("@0 open "), "{text}");
    assert!(
        conn0[1].starts_with(r#"@0 failed {"reason":"the connection failed"#),
        "{text}"
    );
    assert_eq!(conn0[2], "@0 close", "{text}");
    // The replay's connect fails as the live one did: the plugin's answer is the same frame.
    let out = sandpipe(&sockets_replay_args(&file, &[]), &[], "");
    let stderr = cli::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("replay matched all 2 frames and 1 network exchanges"),
        "{stderr}"
    );
}

/// curl through both kinds of tunnel of the native plugin's proxy (`tests/peers/net/tunnel.sh`:
/// HTTP `CONNECT` with `--proxytunnel`, then SOCKS5 with the name left to the proxy), each
/// carrying plain HTTP: recorded as the bytes each way, then played back as those bytes with
/// the server gone; a tunnel whose plugin bytes differ from the recording's diverges there.
#[test]
fn curl_through_connect_and_socks5_tunnels_replays_offline_as_the_tunnels_bytes() {
    let server = WebServer::http();
    let port = server.port;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tunnels.transcript");
    let url = format!("http://api.test:{port}/text");
    let script = peers::source("net/tunnel.sh").display().to_string();
    let args: Vec<String> = [
        "run",
        "--framing",
        "lines",
        "--record",
        &file.display().to_string(),
        "--allow-net",
        &format!("api.test:{port}"),
        "--resolve",
        "api.test=127.0.0.1",
        &script,
        &url,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let out = sandpipe(&args, &[], "");
    assert!(out.status.success(), "{}", cli::text(&out.stderr));
    let got = answers(&out);
    assert_eq!(
        got,
        [
            serde_json::json!({"connect": SENTENCE}),
            serde_json::json!({"socks5": SENTENCE})
        ],
        "{}",
        cli::text(&out.stderr)
    );
    drop(server);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());

    let text = std::fs::read_to_string(&file).expect("the recording");
    let request = hex(format!("GET /text HTTP/1.1\r\nHost: api.test:{port}\r\n").as_bytes());
    for conn in 0..2 {
        let open = format!(
            r#"@{conn} open {{"via":"proxy","host":"api.test","port":{port},"kind":"bytes","addr":"127.0.0.1:{port}","rule":"api.test:{port}"}}"#
        );
        assert!(text.lines().any(|l| l == open), "no line {open} in\n{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("@{conn} >x {request}"))),
            "tunnel {conn}'s request is not its first bytes out in\n{text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with(&format!("@{conn} <x ")))
                && text.contains(&hex(SENTENCE.as_bytes())),
            "tunnel {conn}'s answer is not in\n{text}"
        );
    }
    assert!(!text.contains("opaque"), "{text}");

    // Offline: the proxy answers that each tunnel is open and plays its bytes back.
    let replay = |file: &Path| {
        sandpipe(
            &[
                "replay".to_owned(),
                file.display().to_string(),
                "--plugin".to_owned(),
                script.clone(),
            ],
            &[],
            "",
        )
    };
    let out = replay(&file);
    let stderr = cli::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("replay matched all 2 frames and 2 network exchanges"),
        "{stderr}"
    );

    // The recording's second tunnel asked for another path: curl's bytes differ there.
    let changed = dir.path().join("changed.transcript");
    let other = hex(format!("GET /tex2 HTTP/1.1\r\nHost: api.test:{port}\r\n").as_bytes());
    let edited: String = text
        .lines()
        .map(|l| match l.strip_prefix("@1 >x ") {
            Some(bytes) => format!("@1 >x {}\n", bytes.replacen(&request, &other, 1)),
            None => format!("{l}\n"),
        })
        .collect();
    assert_ne!(edited, text);
    std::fs::write(&changed, edited).expect("write");
    let out = replay(&changed);
    let stderr = cli::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "first divergence at network exchange 1 (proxy api.test:{port}): the plugin sent a different request"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("\n- GET /tex2 HTTP/1.1\n+ GET /text HTTP/1.1\n"),
        "{stderr}"
    );
}
