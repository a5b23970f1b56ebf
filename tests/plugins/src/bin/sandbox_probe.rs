//! Probe what a native plugin's sandbox lets through: each argument is one operation, answered
//! in order by one JSON Lines frame, `{"op","arg","ok":true,…}` or `{"op","arg","ok":false,
//! "error","errno"}` (failures are data: it never panics on them):
//!
//! - `pid`: its own process id (`"pid"`);
//! - `udp:ADDR`: send the datagram `from-the-plugin` to ADDR (e.g. `127.0.0.1:9000`);
//! - `unix:PATH`: connect to the Unix socket PATH, then close it;
//! - `ptrace:PID`: `ptrace(PTRACE_ATTACH)` PID (detached again if it worked);
//! - `signal0:PID`: `kill(PID, 0)`, which tells whether PID exists and may be signalled;
//! - `read:PATH`: read PATH (`"bytes"`, and `"text"`, its first 256 bytes);
//! - `write:PATH`: write `sandpipe` to PATH;
//! - `exit:CODE`: exit with CODE;
//! - `term-exit:CODE`: exit with CODE on SIGTERM; then `wait`;
//! - `wait`: answer `{"op":"ready","pid"}` and block reading stdin until it ends.
//!
//! Native only in substance: built for wasm too (as every test plugin is), where the
//! operations that need Linux answer `Unsupported`.
//!
//! Build: cargo build --release -p sandpipe-test-plugins
//! Run:   sandpipe run --framing lines target/release/sandbox-probe pid udp:127.0.0.1:9 </dev/null

use std::io::{self, Read};

use sandpipe_guest::{Framing, Stdio};
use serde_json::{Value, json};

fn main() {
    let mut io = Stdio::new(Framing::JsonLines);
    for arg in std::env::args().skip(1) {
        let (op, rest) = arg.split_once(':').unwrap_or((&arg, ""));
        if op == "wait" || op == "term-exit" {
            if op == "term-exit"
                && let Err(e) = exit_on_term(rest.parse().unwrap_or(1))
            {
                send(&mut io, failure(op, rest, &e));
                continue;
            }
            send(
                &mut io,
                json!({"op": "ready", "pid": std::process::id(), "ok": true}),
            );
            // Blocks until the host closes stdin (or a signal ends the plugin).
            let _ = io::stdin().read_to_end(&mut Vec::new());
            continue;
        }
        if op == "exit" {
            sandpipe_guest::exit(rest.parse().unwrap_or(1));
        }
        let reply = match run(op, rest) {
            Ok(extra) => {
                let mut reply = json!({"op": op, "arg": rest, "ok": true});
                if let Some((key, value)) = extra {
                    reply[key] = value;
                }
                reply
            }
            Err(err) => failure(op, rest, &err),
        };
        send(&mut io, reply);
    }
}

fn failure(op: &str, arg: &str, err: &io::Error) -> Value {
    json!({
        "op": op,
        "arg": arg,
        "ok": false,
        "error": err.to_string(),
        "errno": err.raw_os_error(),
    })
}

fn send(io: &mut Stdio, reply: Value) {
    let frame = serde_json::to_vec(&reply).expect("a serde_json::Value always serializes");
    if let Err(err) = io.send(&frame) {
        eprintln!("sandbox-probe: {err}");
        sandpipe_guest::exit(2);
    }
}

/// Perform one operation; the field it reports on success, if any.
fn run(op: &str, arg: &str) -> io::Result<Option<(&'static str, Value)>> {
    match op {
        "pid" => Ok(Some(("pid", std::process::id().into()))),
        "read" => {
            let bytes = std::fs::read(arg)?;
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(256)]).into_owned();
            Ok(Some(("text", json!({"bytes": bytes.len(), "start": text}))))
        }
        "write" => std::fs::write(arg, b"sandpipe").map(|()| None),
        "udp" => {
            let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
            socket.send_to(b"from-the-plugin", arg).map(|_| None)
        }
        _ => linux::run(op, arg),
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::io;

    use serde_json::Value;

    pub(crate) fn run(op: &str, arg: &str) -> io::Result<Option<(&'static str, Value)>> {
        let pid = || {
            arg.parse::<libc::pid_t>()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        };
        match op {
            "unix" => std::os::unix::net::UnixStream::connect(arg).map(|_| None),
            "ptrace" => ptrace_attach(pid()?).map(|()| None),
            "signal0" => signal0(pid()?).map(|()| None),
            _ => Err(io::Error::new(io::ErrorKind::InvalidInput, "unknown op")),
        }
    }

    #[allow(unsafe_code)]
    fn ptrace_attach(pid: libc::pid_t) -> io::Result<()> {
        // SAFETY: ptrace with integer arguments and null pointers touches no memory of ours.
        unsafe {
            let null = std::ptr::null_mut::<libc::c_void>();
            if libc::ptrace(libc::PTRACE_ATTACH, pid, null, null) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::ptrace(libc::PTRACE_DETACH, pid, null, null);
        }
        Ok(())
    }

    #[allow(unsafe_code)]
    fn signal0(pid: libc::pid_t) -> io::Result<()> {
        // SAFETY: kill with signal 0 only checks; it takes and returns integers.
        if unsafe { libc::kill(pid, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    static EXIT_CODE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);

    extern "C" fn on_term(_: libc::c_int) {
        // SAFETY: _exit is async-signal-safe.
        #[allow(unsafe_code)]
        unsafe {
            libc::_exit(EXIT_CODE.load(std::sync::atomic::Ordering::Relaxed))
        };
    }

    #[allow(unsafe_code)]
    pub(crate) fn exit_on_term(code: i32) -> io::Result<()> {
        EXIT_CODE.store(code, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: installs a handler that only calls _exit.
        let previous =
            unsafe { libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t) };
        if previous == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
use linux::exit_on_term;

#[cfg(not(target_os = "linux"))]
mod linux {
    use std::io;

    use serde_json::Value;

    pub(crate) fn run(_: &str, _: &str) -> io::Result<Option<(&'static str, Value)>> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "Linux only"))
    }
}

#[cfg(not(target_os = "linux"))]
fn exit_on_term(_: i32) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "Linux only"))
}
