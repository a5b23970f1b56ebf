//! Probe the filesystem the host grants: each argument is one operation, `read:PATH`,
//! `write:PATH` (writes `sandpipe`, creating or truncating), `mkdir:PATH`, `list:PATH`,
//! `env:NAME` (reports the variable's value, or fails with NotFound when it is not set),
//! `connect:ADDR` (a TCP connection to ADDR, e.g. `127.0.0.1:8080`, closed at once) or
//! `open-many:PATH` (opens PATH again and again, keeping every file open, until an open fails;
//! then closes one and opens PATH once more; reports `"result": {"opened": COUNT, "stopped":
//! ERRNO, "error": MESSAGE, "kind": KIND, "reopened": BOOL}`, ERRNO being the failure's OS error
//! number, e.g. 24 for EMFILE, and `reopened` whether the open after the close succeeded) or
//! `open-streams:PATH` (wasm32-wasip2 only: opens PATH, which must lie in a preopen, takes a
//! `read-via-stream` of it and drops the descriptor, keeping only the stream, until an open
//! fails; reports `"result": {"opened": COUNT, "error": WASI-ERROR-CODE-NAME}`) or
//! `fill:PATH` (creates PATH and writes 64 KiB at a time with std's `write_all` until a write
//! fails or 1 GiB is written; reports `"result": {"written": BYTES, "errno": ERRNO, "kind": KIND,
//! "size": PATH's size after}`) or `pwrite:PATH` (wasm32-wasip2 only: creates PATH in a preopen
//! and writes 4 KiB at a time at growing offsets with `descriptor.write` until it fails;
//! reports `"result": {"written": BYTES, "error": WASI-ERROR-CODE-NAME}`) or `stream-fill:PATH`
//! (wasm32-wasip2 only: the same through `write-via-stream` and `blocking-write-and-flush`; the
//! error is the stream error's `filesystem-error-code`),
//! answered in order by one JSON Lines frame, `{"op","path","ok":true,…}` or
//! `{"op","path","ok":false,"error","kind"}`. Failures are data: it never panics on them.
//!
//! Build: cargo build --release -p sandpipe-test-plugins --target wasm32-wasip2
//! Run:   sandpipe run --framing lines target/wasm32-wasip2/release/fs.wasm read:/etc/hostname list:/ </dev/null
//!        (with no directories granted, both fail; natively both fail too under Landlock, and
//!        succeed on a kernel without it)

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
        "connect" => std::net::TcpStream::connect(path).map(|_| None),
        "open-many" => {
            let mut open = Vec::new();
            // Bounded, so a host without a limit gets an answer rather than a hung test.
            let stopped = loop {
                if open.len() == 1 << 20 {
                    break None;
                }
                match fs::File::open(path) {
                    Ok(file) => open.push(file),
                    Err(e) => break Some(e),
                }
            };
            let mut report = json!({"opened": open.len()});
            if let Some(e) = &stopped {
                report["error"] = e.to_string().into();
                report["kind"] = format!("{:?}", e.kind()).into();
                // A cap on open files, not on opens: closing one makes room for the next.
                if open.pop().is_some() {
                    report["reopened"] = fs::File::open(path).is_ok().into();
                }
            }
            report["stopped"] = stopped.and_then(|e| e.raw_os_error()).into();
            Ok(Some(("result", report)))
        }
        "open-streams" => open_streams(path).map(|report| Some(("result", report))),
        "fill" => {
            use std::io::Write as _;
            let chunk = vec![0x5a; 64 << 10];
            let mut file = fs::File::create(path)?;
            let mut written = 0u64;
            let stopped = loop {
                if written >= 1 << 30 {
                    break None;
                }
                match file.write_all(&chunk) {
                    Ok(()) => written += chunk.len() as u64,
                    Err(e) => break Some(e),
                }
            };
            drop(file);
            // The plugin runs on after the failure: the file is still there to look at.
            let size = fs::metadata(path)?.len();
            Ok(Some((
                "result",
                json!({
                    "written": written,
                    "errno": stopped.as_ref().and_then(io::Error::raw_os_error),
                    "kind": stopped.map(|e| format!("{:?}", e.kind())),
                    "size": size,
                }),
            )))
        }
        "pwrite" => pwrite(path, false).map(|report| Some(("result", report))),
        "stream-fill" => pwrite(path, true).map(|report| Some(("result", report))),
        "list" => {
            let entries = fs::read_dir(path)?.collect::<io::Result<Vec<_>>>()?;
            Ok(Some(("entries", entries.len().into())))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "unknown operation {op:?} (expected read, write, mkdir, list, env, connect, open-many, open-streams, fill or pwrite)"
            ),
        )),
    }
}

/// The preopened directory holding `path`, and `path` relative to it.
#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn in_preopen(path: &str) -> io::Result<(wasip2::filesystem::types::Descriptor, String)> {
    wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .find_map(|(dir, guest)| {
            let rel = path.strip_prefix(guest.as_str())?.trim_start_matches('/');
            Some((dir, rel.to_owned()))
        })
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not in a preopen"))
}

/// Keep streams, not descriptors, until an open fails: a stream holds the host file open after
/// its descriptor is dropped.
#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn open_streams(path: &str) -> io::Result<Value> {
    use wasip2::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags};

    let (dir, rel) = in_preopen(path)?;
    let mut streams = Vec::new();
    let error = loop {
        if streams.len() == 1 << 20 {
            break None;
        }
        let file = match dir.open_at(
            PathFlags::empty(),
            &rel,
            OpenFlags::empty(),
            DescriptorFlags::READ,
        ) {
            Ok(file) => file,
            Err(code) => break Some(code),
        };
        let stream = file
            .read_via_stream(0)
            .map_err(|code| io::Error::other(format!("read-via-stream: {code:?}")))?;
        drop(file);
        streams.push(stream);
    };
    Ok(json!({"opened": streams.len(), "error": error.map(|e| e.name())}))
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
fn open_streams(_path: &str) -> io::Result<Value> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "open-streams needs WASI p2",
    ))
}

/// Write 4 KiB at a time at growing offsets with p2's `descriptor.write` (a positioned write,
/// no stream), or through one `write-via-stream` (`stream`), until it fails.
#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn pwrite(path: &str, stream: bool) -> io::Result<Value> {
    use wasip2::filesystem::types::{DescriptorFlags, OpenFlags, PathFlags, filesystem_error_code};
    use wasip2::io::streams::StreamError;

    let (dir, rel) = in_preopen(path)?;
    let file = dir
        .open_at(
            PathFlags::empty(),
            &rel,
            OpenFlags::CREATE,
            DescriptorFlags::WRITE,
        )
        .map_err(|code| io::Error::other(format!("open-at: {code:?}")))?;
    let chunk = [0x5a; 4096];
    let mut written = 0u64;
    if stream {
        let out = file
            .write_via_stream(0)
            .map_err(|code| io::Error::other(format!("write-via-stream: {code:?}")))?;
        let error = loop {
            if written >= 1 << 30 {
                break None;
            }
            match out.blocking_write_and_flush(&chunk) {
                Ok(()) => written += chunk.len() as u64,
                Err(StreamError::LastOperationFailed(e)) => {
                    break Some(filesystem_error_code(&e).map_or("none", |c| c.name()));
                }
                Err(StreamError::Closed) => break Some("closed"),
            }
        };
        return Ok(json!({"written": written, "error": error}));
    }
    let error = loop {
        if written >= 1 << 30 {
            break None;
        }
        match file.write(&chunk, written) {
            Ok(n) => written += n,
            Err(code) => break Some(code),
        }
    };
    Ok(json!({"written": written, "error": error.map(|e| e.name())}))
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
fn pwrite(_path: &str, _stream: bool) -> io::Result<Value> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "pwrite needs WASI p2",
    ))
}
