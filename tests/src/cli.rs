//! Running the `sandpipe` binary the way an engine or a person does, for the CLI tests of the
//! host crate (`host/tests/*.rs`, which pass `env!("CARGO_BIN_EXE_sandpipe")`).

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use crate::{Target, plugin};

/// Run `exe` with `args`, writing `stdin` to it (from a thread, so a large input cannot
/// deadlock against a full stdout pipe), and collect its output. `SANDPIPE_LOG` is removed,
/// so what it prints does not depend on the developer's environment.
pub fn run(exe: impl AsRef<Path>, args: &[&str], stdin: &[u8]) -> Output {
    let mut cmd = Command::new(exe.as_ref());
    cmd.args(args);
    run_command(cmd, stdin)
}

/// [`run`] for a command the caller set up (its environment, say): `SANDPIPE_LOG` removed,
/// `stdin` written from a thread, the output collected.
pub fn run_command(mut cmd: Command, stdin: &[u8]) -> Output {
    let mut child = spawn(&mut cmd);
    let mut input = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait");
    let _ = writer.join();
    out
}

/// Start `cmd` as the CLI tests do: `SANDPIPE_LOG` removed, stdin, stdout and stderr piped.
pub fn spawn(cmd: &mut Command) -> Child {
    cmd.env_remove("SANDPIPE_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"))
}

/// The path of plugin `bin` built for `target`, as a command-line argument.
pub fn path(bin: &str, target: Target) -> String {
    plugin(bin, target).display().to_string()
}

/// Bytes a process printed, as text (lossy).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A `sandpipe serve` started from `cmd` (its stdin and stdout null, its stderr read here):
/// the child, the address its start-up line names, and its stderr so far, kept growing by a
/// thread. Panics if it ends before the start-up line.
pub fn serving(
    mut cmd: Command,
) -> (
    Child,
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting sandpipe serve");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr"));
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let addr = loop {
        let mut line = String::new();
        let n = lines.read_line(&mut line).expect("reading serve's stderr");
        stderr.lock().expect("lock").push_str(&line);
        assert!(
            n > 0,
            "serve ended before its start-up line:\n{}",
            stderr.lock().expect("lock")
        );
        if let Some(rest) = line.split("serving MCP at http://").nth(1) {
            let addr = rest.split('/').next().expect("address");
            break addr.parse().expect("a socket address");
        }
    };
    let sink = stderr.clone();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            sink.lock().expect("lock").push_str(&(line + "\n"));
        }
    });
    (child, addr, stderr)
}
