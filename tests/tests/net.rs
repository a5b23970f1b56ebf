//! Native plugins on the network by allow-list: real client programs (Python's `urllib`, Deno's
//! `fetch`, the PyPI server `mcp-server-fetch` driven by the official MCP SDK client) behind
//! `sandpipe run --allow-net`, against real HTTP and HTTPS servers on 127.0.0.1
//! (`tests/peers/net/serve.py`), names pinned with `--resolve`, TLS checked against a test CA
//! the plugin is given. Each plugin runs in its own network namespace; its only way out is
//! sandpipe's proxy, which admits what the allow-list names and refuses the rest with a 403
//! and a one-line reason.

use std::path::Path;
use std::process::{Command, Output};

use sandpipe_tests::peers;
use sandpipe_tests::web::{SENTENCE, TestCa, WebServer};
use serde_json::Value;

/// `sandpipe run FLAGS... PLUGIN ARGS...`; its output, which must be a success.
fn sandpipe_run(flags: &[String], plugin: &Path, args: &[String]) -> Output {
    let out = Command::new(peers::sandpipe())
        .arg("run")
        .args(flags)
        .arg(plugin)
        .args(args)
        .output()
        .expect("running sandpipe");
    assert!(
        out.status.success(),
        "sandpipe run {flags:?} {} {args:?}: {}\n{}",
        plugin.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("the audit log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit line is JSON"))
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// Flags for a plugin that may reach `api.test` on `ports`, pinned to loopback, and nothing
/// else; `--audit` into `audit`.
fn allow_api(ports: &[u16], audit: &Path) -> Vec<String> {
    let mut flags = Vec::new();
    for p in ports {
        flags.push("--allow-net".to_owned());
        flags.push(format!("api.test:{p}"));
    }
    flags.extend(strings(&["--resolve", "api.test=127.0.0.1", "--audit"]));
    flags.push(audit.display().to_string());
    flags
}

fn ca_flags(ca: &TestCa, var: &str) -> Vec<String> {
    vec![
        "--dir".into(),
        format!("{}:ro", ca.path().display()),
        "--env".into(),
        format!("{var}={}", ca.ca.display()),
    ]
}

#[test]
fn python_urllib_reaches_the_allowed_host_over_http_and_https_and_nothing_else() {
    let ca = TestCa::new(&["api.test"]);
    let http = WebServer::http();
    let https = WebServer::https(&ca);
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let mut flags = allow_api(&[http.port, https.port], &audit);
    flags.extend(ca_flags(&ca, "SSL_CERT_FILE"));
    // An allowed name the system resolver maps to loopback, with no address on the list.
    flags.extend(["--allow-net".to_owned(), format!("localhost:{}", http.port)]);
    let urls = [
        format!("http://api.test:{}/text", http.port),
        format!("https://api.test:{}/text", https.port),
        format!("http://evil.test:{}/text", http.port),
        format!("http://127.0.0.1:{}/text", http.port),
        format!("http://localhost:{}/text", http.port),
    ];
    let mut args = vec![peers::source("net/fetch.py").display().to_string()];
    args.extend(urls.iter().cloned());
    let out = sandpipe_run(&flags, &peers::mcp_python(), &args);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), urls.len(), "{lines:?}");
    for allowed in &lines[..2] {
        assert_eq!(allowed["status"], 200, "{allowed}");
        assert_eq!(allowed["body"], format!("{SENTENCE}\n"), "{allowed}");
    }
    for refused in &lines[2..] {
        assert_eq!(refused["status"], 403, "{refused}");
        assert!(
            refused["refused"].as_str().is_some_and(|r| !r.is_empty()),
            "the reason in X-Sandpipe-Refused: {refused}"
        );
        let body = refused["body"].as_str().expect("body");
        assert!(
            body.starts_with("sandpipe: ") && body.contains(" refused: "),
            "{refused}"
        );
    }
    assert!(
        lines[4]["refused"]
            .as_str()
            .is_some_and(|r| r.contains("not public")),
        "localhost resolves to loopback, which no rule names: {}",
        lines[4]
    );
    let log = audit_lines(&audit);
    let allowed: Vec<&Value> = log
        .iter()
        .filter(|l| l["event"] == "net" && l["decision"] == "allow")
        .collect();
    assert!(allowed.len() >= 2, "{log:?}");
    assert!(allowed.iter().all(|l| l["name"] == "api.test"));
    assert!(
        log.iter()
            .any(|l| l["event"] == "net" && l["decision"] == "refuse" && l["name"] == "evil.test"),
        "{log:?}"
    );
    let closed: u64 = log
        .iter()
        .filter(|l| l["event"] == "net-close")
        .map(|l| l["bytes_in"].as_u64().expect("bytes_in"))
        .sum();
    assert!(closed > 2 * SENTENCE.len() as u64, "{log:?}");
}

#[test]
fn a_program_that_ignores_the_proxy_reaches_nothing() {
    let http = WebServer::http();
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let flags = allow_api(&[http.port], &audit);
    let args = vec![
        peers::source("net/fetch.py").display().to_string(),
        "--direct".into(),
        format!("http://127.0.0.1:{}/text", http.port),
    ];
    let out = sandpipe_run(&flags, &peers::mcp_python(), &args);
    let lines = json_lines(&out);
    // The plugin's 127.0.0.1 is its own namespace's loopback, and Landlock refuses every TCP
    // connect but the proxy's: the server on the host's loopback is never reached.
    let error = lines[0]["error"].as_str().expect("an error");
    assert!(
        error.contains("Permission denied") || error.contains("Connection refused"),
        "{}",
        lines[0]
    );
}

#[test]
fn deno_fetch_reaches_the_allowed_host_and_gets_the_reason_for_the_others() {
    let ca = TestCa::new(&["api.test"]);
    let http = WebServer::http();
    let https = WebServer::https(&ca);
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let deno_dir = dir.path().join("deno");
    std::fs::create_dir(&deno_dir).expect("DENO_DIR");
    let mut flags = allow_api(&[http.port, https.port], &audit);
    flags.extend(ca_flags(&ca, "DENO_CERT"));
    flags.extend([
        "--dir".into(),
        deno_dir.display().to_string(),
        "--env".into(),
        format!("DENO_DIR={}", deno_dir.display()),
    ]);
    let mut args = strings(&["run", "-q", "--allow-net", "--allow-env", "--allow-read"]);
    args.push(peers::source("net/fetch.ts").display().to_string());
    args.push(format!("http://api.test:{}/text", http.port));
    args.push(format!("https://api.test:{}/text", https.port));
    args.push(format!("http://evil.test:{}/text", http.port));
    let out = sandpipe_run(&flags, &peers::deno(), &args);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 3, "{lines:?}");
    for allowed in &lines[..2] {
        assert_eq!(allowed["status"], 200, "{allowed}");
        assert_eq!(allowed["body"], format!("{SENTENCE}\n"), "{allowed}");
    }
    // Deno tunnels plain http through CONNECT too, and reports the proxy's 403 as a failed
    // fetch: the ordinary error. The refusal, with its name, is in the audit trail.
    assert!(
        lines[2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("fetch failed"))
            || lines[2]["status"] == 403,
        "{}",
        lines[2]
    );
    let log = audit_lines(&audit);
    assert!(
        log.iter()
            .any(|l| l["decision"] == "refuse" && l["name"] == "evil.test"),
        "{log:?}"
    );
}

/// The official MCP SDK client driving `mcp-server-fetch` behind `sandpipe run --protocol mcp`.
fn drive_fetch(flags: &[String], urls: &[String]) -> Value {
    let mut cmd = Command::new(peers::mcp_python());
    cmd.arg(peers::source("mcp/drive.py"))
        .arg("fetch")
        .args(urls)
        .arg("--")
        .arg(peers::sandpipe())
        .args(["run", "--protocol", "mcp"])
        .args(flags)
        .arg(peers::mcp_server_fetch());
    let out = cmd.output().expect("running the MCP SDK driver");
    assert!(
        out.status.success(),
        "driver: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn tool_text(call: &Value) -> (&str, bool) {
    let result = &call["result"];
    (
        result["content"][0]["text"].as_str().unwrap_or_default(),
        result["isError"] == true,
    )
}

#[test]
fn mcp_server_fetch_fetches_the_allowed_page_and_refuses_the_others_as_its_own_error() {
    let http = WebServer::http();
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let flags = allow_api(&[http.port], &audit);
    let evil = format!("http://evil.test:{}/page", http.port);
    // A text page: an HTML one goes through readabilipy, which tries to run Node's npm.
    let urls = [
        format!("http://api.test:{}/text", http.port),
        evil.clone(),
        format!("http://api.test:{}/redirect?to={evil}", http.port),
    ];
    let report = drive_fetch(&flags, &urls);
    let calls = report["fetch"].as_array().expect("fetch results");
    let (page, failed) = tool_text(&calls[0]);
    assert!(!failed && page.contains(SENTENCE), "{}", calls[0]);
    for refused in &calls[1..] {
        let (text, failed) = tool_text(refused);
        assert!(failed && text.contains("403"), "{refused}");
    }
    let log = audit_lines(&audit);
    assert!(
        log.iter()
            .any(|l| l["decision"] == "refuse" && l["name"] == "evil.test"),
        "{log:?}"
    );
}
