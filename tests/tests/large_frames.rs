//! How large frames cross `sandpipe run`, and the engine each run compiles for: sandpipe grows
//! its stdin and stdout pipes to a native plugin's 1 MiB, so a 64 KiB frame and its newline go
//! in one write; fuel metering is compiled in only for a run with a fuel budget, and
//! `sandpipe compile` writes the artifact of both engines, so every run starts from the cache.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use sandpipe_tests::Target;
use sandpipe_tests::cli::{path, run_command, text};
use sandpipe_tests::peers::sandpipe;

const FRAME: &[u8] = b"{\"id\":1}\n";

/// `sandpipe -v run --cache-dir CACHE ARGS echo-lines.wasm` with one frame: how it loaded the
/// plugin (`compiled` or `loaded from the disk cache`), from its log.
fn run_logged(cache: &std::path::Path, args: &[&str]) -> String {
    let mut cmd = Command::new(sandpipe());
    cmd.args(["-v", "run", "--cache-dir"])
        .arg(cache)
        .args(args)
        .arg(path("echo-lines", Target::Wasm));
    let out = run_command(cmd, FRAME);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(out.stdout, FRAME, "{stderr}");
    if stderr.contains("loaded from the disk cache") {
        "cache".to_owned()
    } else if stderr.contains(") compiled in") {
        "compiled".to_owned()
    } else {
        panic!("no load line in {stderr}")
    }
}

#[test]
fn a_run_without_a_fuel_budget_has_an_engine_without_fuel_metering() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path();
    assert_eq!(run_logged(cache, &["--framing", "lines"]), "compiled");
    // A fuel budget needs the metered engine: another artifact, compiled now.
    assert_eq!(
        run_logged(cache, &["--framing", "lines", "--fuel", "1000000000"]),
        "compiled"
    );
    assert_eq!(run_logged(cache, &["--framing", "lines"]), "cache");
    assert_eq!(
        run_logged(cache, &["--framing", "lines", "--fuel", "1000000000"]),
        "cache"
    );
}

#[test]
fn compile_prepares_every_run_with_or_without_fuel() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path();
    let out = Command::new(sandpipe())
        .args(["compile", "--cache-dir"])
        .arg(cache)
        .arg(path("echo-lines", Target::Wasm))
        .output()
        .expect("sandpipe compile");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(run_logged(cache, &["--framing", "lines"]), "cache");
    assert_eq!(
        run_logged(cache, &["--framing", "lines", "--fuel", "1000000000"]),
        "cache"
    );
}

/// The capacity of the pipe `fd` is an end of.
#[allow(unsafe_code)]
fn pipe_size(fd: &impl AsRawFd) -> i32 {
    // SAFETY: F_GETPIPE_SZ takes no argument and touches no memory; `fd` is open for the call.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) }
}

#[test]
fn sandpipe_grows_the_engines_pipes_to_a_native_plugins_capacity() {
    for framing in [None, Some("lines")] {
        let mut cmd = Command::new(sandpipe());
        cmd.arg("run");
        if let Some(f) = framing {
            cmd.args(["--framing", f]);
        }
        let mut child = cmd
            .arg(path("echo-lines", Target::Wasm))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sandpipe run");
        let mut stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        assert_eq!(pipe_size(&stdin), 64 << 10, "the kernel's default");
        // One round trip: by its echo, sandpipe has taken both pipes over.
        stdin.write_all(FRAME).expect("write");
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        reader.read_until(b'\n', &mut line).expect("read");
        assert_eq!(line, FRAME);
        assert_eq!(pipe_size(&stdin), 1 << 20, "stdin, {framing:?}");
        assert_eq!(pipe_size(reader.get_ref()), 1 << 20, "stdout, {framing:?}");
        drop(stdin);
        assert!(child.wait().expect("wait").success());
    }
}
