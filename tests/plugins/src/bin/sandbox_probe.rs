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
//! - `uring-unix:PATH`: connect to the Unix socket PATH through io_uring (`IORING_OP_SOCKET`
//!   and `IORING_OP_CONNECT`, no `socket` system call of its own);
//! - `socket:DOMAIN`: `socket(DOMAIN, SOCK_STREAM or SOCK_DGRAM, 0)` (DOMAIN a number, e.g.
//!   40 for AF_VSOCK, 17 for AF_PACKET);
//! - `vsock-listen:PORT`: listen on vsock PORT of any CID;
//! - `memfd:MIB`: write MIB MiB into a memfd and keep it open (`"bytes"`);
//! - `shm:MIB`: a SysV shared memory segment of MIB MiB, every page touched, then detached and
//!   left (`"id"`, for the caller to remove);
//! - `threads:N`: start up to N threads that wait; `"made"` says how many started;
//! - `procs:N`: fork up to N children that wait; `"made"` says how many started;
//! - `threads-held:N`, `procs-held:N`: the same, but they wait until the probe ends instead
//!   of ending with the answer;
//! - `sleep:SECS`: sleep SECS seconds (for a watch to see what the ops before it hold);
//! - `symlink:LINK=TARGET`: make LINK a symbolic link to TARGET;
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
            "uring-unix" => uring_unix(arg).map(|()| None),
            "socket" => socket(number(arg)?).map(|()| None),
            "vsock-listen" => vsock_listen(number(arg)?).map(|()| None),
            "memfd" => memfd(number(arg)?).map(|b| Some(("bytes", b.into()))),
            "shm" => shm(number(arg)?).map(|id| Some(("id", id.into()))),
            "threads" | "threads-held" => {
                threads(number(arg)?, op == "threads-held").map(|n| Some(("made", n.into())))
            }
            "procs" | "procs-held" => {
                procs(number(arg)?, op == "procs-held").map(|n| Some(("made", n.into())))
            }
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(
                    number(arg)?.try_into().unwrap_or(0),
                ));
                Ok(None)
            }
            "symlink" => {
                let (link, target) = arg.split_once('=').ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "symlink:LINK=TARGET")
                })?;
                std::os::unix::fs::symlink(target, link).map(|()| None)
            }
            _ => Err(io::Error::new(io::ErrorKind::InvalidInput, "unknown op")),
        }
    }

    fn number(arg: &str) -> io::Result<i32> {
        arg.parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }

    fn check(r: libc::c_int) -> io::Result<libc::c_int> {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    /// A Unix socket made and connected by the kernel's io_uring worker, not by a system call
    /// a seccomp filter would see.
    #[allow(unsafe_code)]
    fn uring_unix(path: &str) -> io::Result<()> {
        use io_uring::{IoUring, opcode, types};
        let mut ring = IoUring::new(4)?;
        let mut run = |entry: io_uring::squeue::Entry| -> io::Result<i32> {
            // SAFETY: the entry's pointers (the address below) outlive submit_and_wait.
            unsafe { ring.submission().push(&entry) }
                .map_err(|_| io::Error::other("submission queue full"))?;
            ring.submit_and_wait(1)?;
            let cqe = ring
                .completion()
                .next()
                .ok_or_else(|| io::Error::other("no completion"))?;
            if cqe.result() < 0 {
                return Err(io::Error::from_raw_os_error(-cqe.result()));
            }
            Ok(cqe.result())
        };
        let fd = run(opcode::Socket::new(libc::AF_UNIX, libc::SOCK_STREAM, 0).build())?;
        // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (dst, src) in addr.sun_path.iter_mut().zip(path.as_bytes()) {
            *dst = *src as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        let connected = run(opcode::Connect::new(
            types::Fd(fd),
            (&raw const addr).cast::<libc::sockaddr>(),
            len,
        )
        .build());
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(fd) };
        connected.map(|_| ())
    }

    #[allow(unsafe_code)]
    fn socket(domain: i32) -> io::Result<()> {
        // SAFETY: socket takes integers; the descriptor is ours and closed once.
        unsafe {
            let fd = match libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) {
                fd if fd >= 0 => fd,
                _ => check(libc::socket(
                    domain,
                    libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                    0,
                ))?,
            };
            libc::close(fd);
        }
        Ok(())
    }

    #[allow(unsafe_code)]
    fn vsock_listen(port: i32) -> io::Result<()> {
        // SAFETY: a socket of our own and a sockaddr_vm on our stack for bind.
        unsafe {
            let fd = check(libc::socket(
                libc::AF_VSOCK,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
            ))?;
            let mut addr: libc::sockaddr_vm = std::mem::zeroed();
            addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
            addr.svm_cid = libc::VMADDR_CID_ANY;
            addr.svm_port = port as u32;
            let r = libc::bind(
                fd,
                (&raw const addr).cast(),
                std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t,
            );
            let r = if r == 0 { libc::listen(fd, 1) } else { r };
            let e = io::Error::last_os_error();
            libc::close(fd);
            if r != 0 {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Memory in a memfd, written (not mapped): it belongs to no process's resident set. The
    /// descriptor is left open, so the pages stay until the plugin ends.
    #[allow(unsafe_code)]
    fn memfd(mib: i32) -> io::Result<u64> {
        // SAFETY: memfd_create on a C string literal; write from a buffer we own.
        let fd = check(unsafe { libc::memfd_create(c"probe".as_ptr(), libc::MFD_CLOEXEC) })?;
        let chunk = vec![0x5au8; 1 << 20];
        let mut written = 0u64;
        for _ in 0..mib {
            let mut at = 0;
            while at < chunk.len() {
                // SAFETY: writes from `chunk`, which outlives the call.
                let n = unsafe { libc::write(fd, chunk[at..].as_ptr().cast(), chunk.len() - at) };
                if n < 0 {
                    return Err(io::Error::last_os_error());
                }
                at += n as usize;
                written += n as u64;
            }
        }
        Ok(written)
    }

    /// A SysV segment with every page touched, then detached: it outlives the process.
    #[allow(unsafe_code)]
    fn shm(mib: i32) -> io::Result<i32> {
        let size = (mib as usize) << 20;
        // SAFETY: shmget/shmat/shmdt on a segment of our own; the writes stay inside it.
        unsafe {
            let id = check(libc::shmget(
                libc::IPC_PRIVATE,
                size,
                libc::IPC_CREAT | 0o600,
            ))?;
            let at = libc::shmat(id, std::ptr::null(), 0);
            if at as isize == -1 {
                return Err(io::Error::last_os_error());
            }
            let page = 4096;
            let base = at.cast::<u8>();
            for offset in (0..size).step_by(page) {
                base.add(offset).write_volatile(1);
            }
            libc::shmdt(at);
            Ok(id)
        }
    }

    /// Threads that wait on a channel until all are counted, then end; or, with `hold`, until
    /// the probe ends (the channel's sender is kept open for good).
    fn threads(n: i32, hold: bool) -> io::Result<u64> {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let mut handles = Vec::new();
        for _ in 0..n {
            let rx = rx.clone();
            let started = std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let _ = rx.lock().map(|rx| rx.recv());
                });
            match started {
                Ok(h) => handles.push(h),
                Err(_) => break,
            }
        }
        let made = handles.len() as u64;
        if hold {
            std::mem::forget(tx);
            return Ok(made);
        }
        drop(tx);
        for h in handles {
            let _ = h.join();
        }
        Ok(made)
    }

    /// Children that wait for a pipe to close until all are counted, then are reaped; or, with
    /// `hold`, until the probe ends (its end of the pipe closes with it).
    #[allow(unsafe_code)]
    fn procs(n: i32, hold: bool) -> io::Result<u64> {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into `fds`.
        check(unsafe { libc::pipe(fds.as_mut_ptr()) })?;
        let [read_end, write_end] = fds;
        let mut children = Vec::new();
        for _ in 0..n {
            // SAFETY: the child only reads a pipe and exits (async-signal-safe calls).
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                unsafe {
                    libc::close(write_end);
                    let mut b = 0u8;
                    libc::read(read_end, (&raw mut b).cast(), 1);
                    libc::_exit(0);
                }
            }
            if pid < 0 {
                break;
            }
            children.push(pid);
        }
        if hold {
            return Ok(children.len() as u64);
        }
        // SAFETY: our own descriptors and children.
        unsafe {
            libc::close(write_end);
            libc::close(read_end);
            for pid in &children {
                let mut status = 0;
                libc::waitpid(*pid, &mut status, 0);
            }
        }
        Ok(children.len() as u64)
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
