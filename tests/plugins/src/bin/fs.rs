//! Probe the filesystem the host grants: each argument is one operation, `read:PATH`,
//! `write:PATH` (writes `sandpipe`, creating or truncating), `mkdir:PATH`, `list:PATH` or
//! `env:NAME` (reports the variable's value, or fails with NotFound when it is not set),
//! answered in order by one JSON Lines frame, `{"op","path","ok":true,…}` or
//! `{"op","path","ok":false,"error","kind"}`. Failures are data: it never panics on them.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/fs.wasm read:/etc/hostname list:/ </dev/null
//!        (with no directories granted, both fail; natively, `target/release/fs …` succeeds)

use std::fs;
use std::io;

use sandpipe_guest::{Framing, Stdio};
use serde_json::{Value, json};

fn main() {
    let mut io = Stdio::new(Framing::JsonLines);
    for arg in std::env::args_os().skip(1) {
        let arg = arg.to_string_lossy();
        let (op, path) = arg.split_once(':').unwrap_or((&arg, ""));
        let reply = match run(op, path) {
            Ok(extra) => {
                let mut reply = json!({"op": op, "path": path, "ok": true});
                if let Some((key, value)) = extra {
                    reply[key] = value;
                }
                reply
            }
            Err(err) => json!({
                "op": op,
                "path": path,
                "ok": false,
                "error": err.to_string(),
                "kind": format!("{:?}", err.kind()),
            }),
        };
        let frame = serde_json::to_vec(&reply).expect("a serde_json::Value always serializes");
        if let Err(err) = io.send(&frame) {
            eprintln!("fs: {err}");
            sandpipe_guest::exit(2);
        }
    }
}

/// Perform one operation; the field it reports on success, if any.
fn run(op: &str, path: &str) -> io::Result<Option<(&'static str, Value)>> {
    match op {
        "read" => Ok(Some(("bytes", fs::read(path)?.len().into()))),
        "write" => fs::write(path, b"sandpipe").map(|()| Some(("bytes", 8.into()))),
        "mkdir" => fs::create_dir(path).map(|()| None),
        "env" => match std::env::var(path) {
            Ok(value) => Ok(Some(("value", value.into()))),
            Err(e) => Err(io::Error::new(io::ErrorKind::NotFound, e.to_string())),
        },
        "list" => {
            let entries = fs::read_dir(path)?.collect::<io::Result<Vec<_>>>()?;
            Ok(Some(("entries", entries.len().into())))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unknown operation {op:?} (expected read, write, mkdir, list or env)"),
        )),
    }
}
