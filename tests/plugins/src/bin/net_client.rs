//! A network client driven by stdin: one command per line (a JSON string, or the bare text),
//! one JSON line back with the outcome, so a test can see what the sandbox let through.
//!
//! - `tcp HOST:PORT [TEXT]`: connect (a name is looked up first, through `wasi:sockets` on
//!   wasm), send `TEXT\n` (`ping\n` by default), read one line back:
//!   `{"cmd":…,"ok":true,"reply":"…"}`;
//! - `tcp-all HOST:PORT [TEXT]`: the same, then shut its sending side down and read until the
//!   server closes: `{"reply":"…"}` is all the server sent;
//! - `udp ADDR:PORT`: bind a UDP socket and send one datagram;
//! - `listen`: bind and listen on a TCP port;
//! - `lookup NAME`: resolve a name, without connecting: `{"ok":true,"addrs":[…]}`.
//!
//! Any failure is `{"cmd":…,"ok":false,"error":"…"}`; the plugin runs on to stdin's end.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   echo '"tcp api.test:8080"' | sandpipe run --allow-net api.test:8080 \
//!          --resolve api.test=127.0.0.1 target/wasm32-wasip2/release/net-client.wasm

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs, UdpSocket};

use serde_json::{Value, json};

fn tcp(arg: &str) -> std::io::Result<Value> {
    let (target, text) = arg.split_once(' ').unwrap_or((arg, "ping"));
    let mut stream = TcpStream::connect(target)?;
    stream.write_all(format!("{text}\n").as_bytes())?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    Ok(json!({ "reply": reply.trim_end() }))
}

fn tcp_all(arg: &str) -> std::io::Result<Value> {
    let (target, text) = arg.split_once(' ').unwrap_or((arg, "ping"));
    let mut stream = TcpStream::connect(target)?;
    stream.write_all(format!("{text}\n").as_bytes())?;
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(json!({ "reply": reply }))
}

fn udp(target: &str) -> std::io::Result<Value> {
    let socket = UdpSocket::bind("0.0.0.0:0")?;
    let sent = socket.send_to(b"ping\n", target)?;
    Ok(json!({ "sent": sent }))
}

fn listen() -> std::io::Result<Value> {
    let listener = TcpListener::bind("0.0.0.0:0")?;
    Ok(json!({ "port": listener.local_addr()?.port() }))
}

fn lookup(name: &str) -> std::io::Result<Value> {
    let addrs: Vec<String> = (name, 0)
        .to_socket_addrs()?
        .map(|a| a.ip().to_string())
        .collect();
    Ok(json!({ "addrs": addrs }))
}

fn main() {
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let cmd = match serde_json::from_str::<Value>(&line) {
            Ok(Value::String(s)) => s,
            _ => line.trim().to_owned(),
        };
        let (verb, arg) = cmd.split_once(' ').unwrap_or((cmd.as_str(), ""));
        let outcome = match verb {
            "tcp" => tcp(arg),
            "tcp-all" => tcp_all(arg),
            "udp" => udp(arg),
            "listen" => listen(),
            "lookup" => lookup(arg),
            _ => Err(std::io::Error::other(format!("unknown command {verb}"))),
        };
        let mut answer = match outcome {
            Ok(Value::Object(fields)) => Value::Object(fields),
            Ok(other) => json!({ "value": other }),
            Err(e) => json!({ "ok": false, "error": e.to_string() }),
        };
        answer["cmd"] = json!(cmd);
        if answer.get("ok").is_none() {
            answer["ok"] = json!(true);
        }
        let mut out = stdout.lock();
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
}
