//! A `wasi:http` client driven by stdin: one command per line (a JSON string, or the bare
//! text), one JSON line back, so a test can see what the sandbox let through and what the
//! guest can see of its own request.
//!
//! - `get URL`: a GET through `wasi:http/outgoing-handler` with the guest's own
//!   `authorization: guest-value` and `x-guest: yes` headers:
//!   `{"ok":true,"status":200,"body":"…","sent_headers":[…],"env":[…]}`, or
//!   `{"ok":false,"error":"…"}` with the `error-code` the host gave.
//!
//! - `bench N URL`: N GETs one after another, each timed by the guest from its request to the
//!   end of its body (`wasi:clocks`); the median in microseconds goes to stderr as
//!   `net-record-client: {"median_us":…}`, the line `sandpipe-bench --net-record` reads, and the
//!   answer is `{"ok":true,"n":N,"bytes":…}`, the same every run, so a recording of it replays.
//!
//! `sent_headers` are the request's headers as the guest can read them; `env` is every
//! environment variable the guest sees. Only a `wasm32-wasip2` build has `wasi:http`: the
//! others answer every command with an error.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   echo '"get http://api.test:8080/"' | sandpipe run --allow-net api.test:8080 \
//!          --resolve api.test=127.0.0.1 target/wasm32-wasip2/release/http-client.wasm

use std::io::{BufRead, Write};

use serde_json::{Value, json};

#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn get(url: &str) -> Result<Value, String> {
    let (status, body, sent_headers) = fetch(url)?;
    let env: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    Ok(json!({
        "status": status,
        "body": String::from_utf8_lossy(&body),
        "sent_headers": sent_headers,
        "env": env,
    }))
}

/// A GET of `url`: the status, the whole body, and the headers the guest sent.
#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn fetch(url: &str) -> Result<(u16, Vec<u8>, Vec<String>), String> {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{Fields, OutgoingRequest, Scheme};
    use wasip2::io::streams::StreamError;

    let (scheme, rest) = url.split_once("://").ok_or("no scheme")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let headers = Fields::new();
    for (name, value) in [("authorization", "guest-value"), ("x-guest", "yes")] {
        headers
            .append(name, value.as_bytes())
            .map_err(|e| format!("header {name}: {e:?}"))?;
    }
    let sent_headers: Vec<String> = headers
        .entries()
        .into_iter()
        .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(&v)))
        .collect();
    let request = OutgoingRequest::new(headers);
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_owned()),
    };
    request.set_scheme(Some(&scheme)).map_err(|()| "scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "authority")?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "path")?;
    let body = request.body().map_err(|()| "request body")?;
    wasip2::http::types::OutgoingBody::finish(body, None).map_err(|e| format!("{e:?}"))?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no response after the pollable was ready")?
        .map_err(|()| "response taken twice")?
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let incoming = response.consume().map_err(|()| "response body")?;
    let stream = incoming.stream().map_err(|()| "response stream")?;
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => body.extend_from_slice(&chunk),
            Err(StreamError::Closed) => break,
            Err(e) => return Err(format!("reading the body: {e:?}")),
        }
    }
    Ok((status, body, sent_headers))
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
fn get(_url: &str) -> Result<Value, String> {
    Err("wasi:http needs a wasm32-wasip2 build".to_owned())
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
fn fetch(_url: &str) -> Result<(u16, Vec<u8>, Vec<String>), String> {
    Err("wasi:http needs a wasm32-wasip2 build".to_owned())
}

/// `bench N URL` (see the top).
fn bench(args: &str) -> Result<Value, String> {
    let (n, url) = args.split_once(' ').ok_or("bench N URL")?;
    let n: usize = n.parse().map_err(|e| format!("N: {e}"))?;
    let mut times = Vec::with_capacity(n);
    let mut bytes = 0;
    for _ in 0..n {
        let start = std::time::Instant::now();
        let (status, body, _) = fetch(url)?;
        times.push(start.elapsed().as_secs_f64() * 1e6);
        if status != 200 {
            return Err(format!("status {status}"));
        }
        bytes += body.len();
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(n / 2).copied().unwrap_or(0.0);
    eprintln!("net-record-client: {{\"median_us\":{median:.1}}}");
    Ok(json!({ "n": n, "bytes": bytes }))
}

fn main() {
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let cmd = match serde_json::from_str::<Value>(&line) {
            Ok(Value::String(s)) => s,
            _ => line.trim().to_owned(),
        };
        let mut answer = match cmd.split_once(' ') {
            Some(("get", url)) => match get(url) {
                Ok(v) => v,
                Err(e) => json!({ "ok": false, "error": e }),
            },
            Some(("bench", args)) => match bench(args) {
                Ok(v) => v,
                Err(e) => json!({ "ok": false, "error": e }),
            },
            _ => json!({ "ok": false, "error": format!("unknown command {cmd}") }),
        };
        if answer.get("ok").is_none() {
            answer["ok"] = json!(true);
        }
        answer["cmd"] = json!(cmd);
        let mut out = stdout.lock();
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
}
