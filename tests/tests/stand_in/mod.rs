//! Plays the engine against a real peer, run directly or behind `sandpipe run`, and keeps the
//! byte transcript: every byte the engine read from the process it spawned, and how that
//! process ended.
//!
//! ```text
//!   test (engine) ── script: send / await a frame / signal / close stdin ──► spawned process
//!        ▲                                                                     │
//!        └──────── stdout bytes (the transcript) + exit status ◄───────────────┘
//!   spawned process = the peer itself (Direct) or `sandpipe run [--framing F] PEER` (Behind)
//! ```
//!
//! The engine waits on events (a frame the peer wrote, or its end), never on time. A bound of
//! `STEP` per wait turns a hang into a failure with the transcript so far; it asserts nothing
//! about speed.

#![allow(dead_code)] // each test file uses the part it needs

pub mod atp;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use sandpipe_proto::frame::{BytesMut, FrameLimits, Framer, Framing};

/// How long one wait may take before the test fails as hung.
pub const STEP: Duration = Duration::from_secs(180);

/// How long [`Session::finish`] waits, after a signal, for the peer to end before the EOF.
pub const AFTER_SIGNAL: Duration = Duration::from_secs(3);

/// A real peer: the command line an engine's configuration holds for it.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The program (for a Python peer, the venv's `bin/python`).
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Environment the engine gives it (the direct run gets exactly this; behind sandpipe each
    /// one is granted with `--env NAME=VALUE`).
    pub env: Vec<(String, OsString)>,
    /// Directories of the peer's own data it writes (granted with `--dir`; never the
    /// interpreter: sandpipe grants that by itself).
    pub data_dirs: Vec<PathBuf>,
    /// How the peer frames its stdout (the engine splits frames with it to await them).
    pub framing: Framing,
}

/// How the engine starts the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The peer's own command.
    Direct,
    /// `sandpipe run [--framing F] PEER...` in its place, default limits.
    Behind(Option<Framing>),
}

impl std::fmt::Display for Way {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Way::Direct => write!(f, "direct"),
            Way::Behind(None) => write!(f, "sandpipe run"),
            Way::Behind(Some(fr)) => write!(f, "sandpipe run --framing {}", fr.name()),
        }
    }
}

impl Way {
    /// Direct, then behind sandpipe with raw framing and with the peer's own framing.
    pub fn all(framing: Framing) -> [Way; 3] {
        [Way::Direct, Way::Behind(None), Way::Behind(Some(framing))]
    }
}

/// What the engine saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    /// Every byte read from the spawned process's stdout.
    pub stdout: Vec<u8>,
    /// How it ended: `exit N` or `signal N`.
    pub status: String,
}

fn status_text(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        (None, None) => format!("{status:?}"),
    }
}

#[derive(Default)]
struct Seen {
    bytes: Vec<u8>,
    eof: bool,
}

/// One running session: the engine's side of the pipes.
pub struct Session {
    way: Way,
    child: Child,
    stdin: Option<ChildStdin>,
    out: Arc<(Mutex<Seen>, Condvar)>,
    err: Arc<Mutex<Vec<u8>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
    framer: sandpipe_proto::frame::AnyFramer,
    pending: BytesMut,
    taken: usize,
    /// Frames the engine has examined, in order.
    pub frames: Vec<Vec<u8>>,
    /// A signal was sent: [`Session::finish`] gives the peer a moment to act on it before the
    /// stdin EOF (see there).
    signalled: bool,
}

/// The command line the engine runs for `peer` started `way`.
pub fn command(peer: &Peer, way: Way) -> Command {
    match way {
        Way::Direct => {
            let mut cmd = Command::new(&peer.program);
            cmd.args(&peer.args).env_clear();
            for (k, v) in &peer.env {
                cmd.env(k, v);
            }
            cmd
        }
        Way::Behind(framing) => {
            let mut cmd = Command::new(sandpipe_tests::peers::sandpipe());
            cmd.arg("run").env_clear();
            if let Some(f) = framing {
                cmd.args(["--framing", f.name()]);
            }
            for (k, v) in &peer.env {
                let mut grant = OsString::from(format!("{k}="));
                grant.push(v);
                cmd.arg("--env").arg(grant);
            }
            for d in &peer.data_dirs {
                cmd.arg("--dir").arg(d);
            }
            cmd.arg(&peer.program).args(&peer.args);
            cmd
        }
    }
}

impl Session {
    /// Spawn `peer` the given way, stdin, stdout and stderr piped.
    pub fn start(peer: &Peer, way: Way) -> Session {
        Session::spawn(command(peer, way), peer.framing, way)
    }

    /// Spawn an arbitrary command line (already built with [`command`] or by hand).
    pub fn spawn(mut cmd: Command, framing: Framing, way: Way) -> Session {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
        let stdin = child.stdin.take();
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let out: Arc<(Mutex<Seen>, Condvar)> = Arc::default();
        let err: Arc<Mutex<Vec<u8>>> = Arc::default();
        let o = out.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = stdout.read(&mut buf).unwrap_or(0);
                let (lock, cv) = &*o;
                let mut seen = lock.lock().expect("lock");
                if n == 0 {
                    seen.eof = true;
                    cv.notify_all();
                    return;
                }
                seen.bytes.extend_from_slice(&buf[..n]);
                cv.notify_all();
            }
        });
        let e = err.clone();
        let drain = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    return;
                }
                e.lock().expect("lock").extend_from_slice(&buf[..n]);
            }
        });
        Session {
            way,
            child,
            stdin,
            out,
            err,
            threads: vec![reader, drain],
            framer: framing.framer(FrameLimits::with_max_frame_bytes(64 << 20)),
            pending: BytesMut::new(),
            taken: 0,
            frames: Vec::new(),
            signalled: false,
        }
    }

    /// The pid of the process the engine spawned (the peer, or sandpipe).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the process wrote on stderr so far, as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.err.lock().expect("lock")).into_owned()
    }

    fn context(&self) -> String {
        let bytes = self.out.0.lock().expect("lock").bytes.len();
        format!(
            "{} (pid {}), {} stdout bytes, {} frames; stderr:\n{}",
            self.way,
            self.pid(),
            bytes,
            self.frames.len(),
            tail(&self.stderr(), 4000)
        )
    }

    /// Write `bytes` to the peer's stdin as they are.
    pub fn send(&mut self, bytes: &[u8]) {
        let ctx = self.context();
        let stdin = self.stdin.as_mut().expect("stdin is still open");
        if let Err(e) = stdin.write_all(bytes).and_then(|()| stdin.flush()) {
            panic!("writing {} bytes to the peer: {e}; {ctx}", bytes.len());
        }
    }

    /// Close the peer's stdin (EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Send signal `name` (`INT`, `TERM`, ...) to the spawned process.
    pub fn signal(&mut self, name: &str) {
        self.signalled = true;
        let status = Command::new("kill")
            .args(["-s", name, &self.pid().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -s {name} {}", self.pid());
    }

    /// The next frame the peer writes, or `None` at the end of its stdout.
    pub fn next_frame(&mut self) -> Option<Vec<u8>> {
        loop {
            match self.framer.decode(&mut self.pending) {
                Ok(Some(frame)) => {
                    self.frames.push(frame.to_vec());
                    return Some(frame.to_vec());
                }
                Ok(None) => {}
                Err(e) => panic!("the peer's stdout is not framed: {e}; {}", self.context()),
            }
            let (lock, cv) = &*self.out;
            let seen = lock.lock().expect("lock");
            let (seen, timeout) = cv
                .wait_timeout_while(seen, STEP, |s| s.bytes.len() == self.taken && !s.eof)
                .expect("lock");
            if timeout.timed_out() {
                drop(seen);
                panic!("no frame after {STEP:?}; {}", self.context());
            }
            if seen.bytes.len() > self.taken {
                self.pending.extend_from_slice(&seen.bytes[self.taken..]);
                self.taken = seen.bytes.len();
                continue;
            }
            // End of stdout and nothing new: whatever is left is not a whole frame.
            return None;
        }
    }

    /// Read frames until one satisfies `want`, and return it.
    pub fn await_frame(&mut self, what: &str, want: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        loop {
            match self.next_frame() {
                Some(f) if want(&f) => return f,
                Some(_) => {}
                None => panic!("stdout ended before {what}; {}", self.context()),
            }
        }
    }

    /// Close stdin, read stdout to its end, wait for the process, and give the transcript.
    pub fn finish(mut self) -> (Transcript, String) {
        // After a signal, an engine waits for the plugin to act on it before it ends its
        // input. Behind sandpipe the signal is forwarded while an EOF may go straight to the
        // plugin (inherited stdin), so an EOF sent at once could reach the plugin first and
        // it would end by its EOF path instead of its signal handler: a race the direct run
        // does not have. A plugin that ignores the signal gets its EOF after `AFTER_SIGNAL`.
        if self.signalled {
            let (lock, cv) = &*self.out;
            let seen = lock.lock().expect("lock");
            let _ = cv
                .wait_timeout_while(seen, AFTER_SIGNAL, |s| !s.eof)
                .expect("lock");
        }
        self.stdin = None;
        {
            let (lock, cv) = &*self.out;
            let seen = lock.lock().expect("lock");
            let (_seen, timeout) = cv.wait_timeout_while(seen, STEP, |s| !s.eof).expect("lock");
            if timeout.timed_out() {
                drop(_seen);
                let ctx = self.context();
                let _ = self.child.kill();
                panic!("stdout still open after {STEP:?}; {ctx}");
            }
        }
        let status = self.child.wait().expect("wait");
        for t in self.threads.drain(..) {
            t.join().expect("reader thread");
        }
        let stdout = std::mem::take(&mut self.out.0.lock().expect("lock").bytes);
        let stderr = self.stderr();
        (
            Transcript {
                stdout,
                status: status_text(status),
            },
            stderr,
        )
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A failed test must not leave the peer running.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Bytes as readable text: printable ASCII kept, the rest escaped, long runs of one byte
/// shortened (`x{1048576}`), so a 1 MiB frame fits in a failure message.
pub fn render(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let mut run = 1;
        while i + run < bytes.len() && bytes[i + run] == b {
            run += 1;
        }
        let one = match b {
            b'\\' => "\\\\".to_owned(),
            0x20..=0x7e => (b as char).to_string(),
            b'\n' => "\\n".to_owned(),
            b'\r' => "\\r".to_owned(),
            _ => format!("\\x{b:02x}"),
        };
        if run > 8 {
            out.push_str(&format!("{one}{{{run}}}"));
        } else {
            for _ in 0..run {
                out.push_str(&one);
            }
        }
        i += run;
    }
    out
}

/// Fail unless `got` (behind sandpipe) equals `want` (direct), with both rendered.
pub fn assert_same(case: &str, want: &Transcript, got: &Transcript) {
    if let Err(diff) = compare(case, want, got) {
        panic!("{diff}");
    }
}

/// `Err` with both transcripts rendered around their first difference, unless equal.
pub fn compare(case: &str, want: &Transcript, got: &Transcript) -> Result<(), String> {
    if want == got {
        return Ok(());
    }
    let (w, g) = (render(&want.stdout), render(&got.stdout));
    let common = w.bytes().zip(g.bytes()).take_while(|(a, b)| a == b).count();
    let from = common.saturating_sub(200);
    Err(format!(
        "{case}: transcripts differ\n direct: {} , {} stdout bytes\n behind: {} , {} stdout bytes\n \
         first difference at rendered offset {common}:\n direct: ...{}\n behind: ...{}",
        want.status,
        want.stdout.len(),
        got.status,
        got.stdout.len(),
        &w[from.min(w.len())..(common + 400).min(w.len())],
        &g[from.min(g.len())..(common + 400).min(g.len())],
    ))
}
