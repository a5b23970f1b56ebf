//! How `sandpipe run` ends when it is abused, driven as a separate process as an
//! engine drives it: it never ends by a SIGKILL it sent itself, a signal it did not send is
//! mirrored, its log lines are plain text unless stderr is a terminal, and an engine that
//! goes away passes the broken pipe on to the plugin, wasm and native alike.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

use sandpipe_tests::Target;
use sandpipe_tests::bridge_fuzz::Status;
use sandpipe_tests::cli::{path, run_command, text};
use sandpipe_tests::peers::sandpipe;

/// `sandpipe run ARGS` with `stdin`, its status, stdout and stderr.
fn run(args: &[&str], stdin: &[u8]) -> (Status, Vec<u8>, String) {
    let mut cmd = Command::new(sandpipe());
    cmd.arg("run").args(args);
    let out = run_command(cmd, stdin);
    (Status::of(out.status), out.stdout, text(&out.stderr))
}

/// A native plugin that writes a frame and half of another, closes its stdout and stays
/// alive: sandpipe finds the cut frame at the end and kills the plugin itself. Its SIGKILL must
/// not come back onto sandpipe: 123, as for any bad frame from the plugin.
#[test]
fn sandpipe_never_ends_by_a_sigkill_it_sent() {
    let script = r#"printf '{"a":1}\n{"b"'; exec >&-; exec sleep 60"#;
    let (status, stdout, stderr) = run(&["--framing", "lines", "/bin/sh", "-c", script], b"");
    assert_eq!(status, Status::Code(123), "{stderr}");
    assert_eq!(stdout, b"{\"a\":1}\n");
    assert!(
        stderr.contains("sandpipe: bad frame from plugin"),
        "{stderr}"
    );
    // The same with the plugin's stdin held open: nothing changes.
    let mut cmd = Command::new(sandpipe());
    cmd.args(["run", "--framing", "lines", "/bin/sh", "-c", script]);
    let mut child = sandpipe_tests::cli::spawn(&mut cmd);
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut out)
        .expect("read");
    let status = Status::of(child.wait().expect("wait"));
    assert_eq!(status, Status::Code(123));
}

/// The echo plugin given a stream whose last frame is cut (JSON Lines, CBOR): sandpipe passes
/// the rest on as bytes, the plugin echoes them and exits, and the incomplete frame at the end
/// of its output is a bad frame (123), however its exit and sandpipe's kill race.
#[test]
fn an_incomplete_last_frame_is_123_wasm_and_native() {
    let lines: &[u8] = b"{\"a\":1}\n{\"b\"";
    let cbor: &[u8] = &[0xa1, 0x61, b'a', 0x01, 0xa1, 0x61];
    for target in [Target::Wasm, Target::Native] {
        let cat = path("cat", target);
        for (framing, input, first) in [("lines", lines, 8), ("cbor", cbor, 4)] {
            for _ in 0..10 {
                let (status, stdout, stderr) = run(&["--framing", framing, &cat], input);
                assert_eq!(status, Status::Code(123), "{target:?} {framing}: {stderr}");
                assert_eq!(stdout, &input[..first], "{target:?} {framing}");
            }
        }
    }
}

/// A native plugin killed by a signal sandpipe did not send: sandpipe ends by that signal,
/// as the plugin run directly would (a SIGKILL from elsewhere included), through every bridge:
/// raw, framed, and supervised (one exit mapping).
#[test]
fn a_signal_sandpipe_did_not_send_is_mirrored() {
    let note = r#"{"jsonrpc":"2.0","method":"ready"}"#;
    for bridge in [
        &[][..],
        &["--framing", "lines"][..],
        &["--protocol", "jsonrpc"][..],
    ] {
        for sig in ["KILL", "TERM"] {
            let script = format!("echo '{note}'; kill -{sig} $$");
            let args = [bridge, &["/bin/sh", "-c", &script]].concat();
            let (status, stdout, stderr) = run(&args, b"");
            let want = if sig == "KILL" { 9 } else { 15 };
            assert_eq!(status, Status::Signal(want), "{bridge:?} {sig}: {stderr}");
            assert_eq!(stdout, format!("{note}\n").as_bytes(), "{bridge:?} {sig}");
        }
    }
}

/// A pseudo-terminal: (the side a program writes to, the side that reads what it wrote).
#[allow(unsafe_code)]
fn pty() -> (OwnedFd, OwnedFd) {
    let (mut controller, mut terminal) = (0, 0);
    // SAFETY: openpty writes two descriptors into our integers (name, termios and window size
    // are optional); each is owned once, by the OwnedFd made from it.
    let r = unsafe {
        libc::openpty(
            &mut controller,
            &mut terminal,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    unsafe {
        (
            OwnedFd::from_raw_fd(terminal),
            OwnedFd::from_raw_fd(controller),
        )
    }
}

/// `sandpipe -v run cat.wasm` with stderr on a terminal, `NO_COLOR` as given: what it wrote.
fn logged_on_a_terminal(no_color: Option<&str>) -> String {
    let (terminal, controller) = pty();
    let mut cmd = Command::new(sandpipe());
    cmd.args(["-v", "run", &path("cat", Target::Wasm)])
        .env_remove("SANDPIPE_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(terminal));
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    let mut child = cmd.spawn().expect("spawn");
    drop(cmd); // our copy of the terminal side: the controller reads EOF (EIO) once it exits
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
    let mut logged = Vec::new();
    // Reading past the last writer's close fails with EIO: everything before it is kept.
    let _ = std::fs::File::from(controller).read_to_end(&mut logged);
    text(&logged)
}

/// sandpipe's own log lines carry colour only on a terminal, and not with `NO_COLOR`.
#[test]
fn log_lines_are_coloured_only_on_a_terminal_without_no_color() {
    let (status, _, piped) = run(&["-v", &path("cat", Target::Wasm)], b"");
    assert_eq!(status, Status::Code(0), "{piped}");
    assert!(piped.contains("INFO"), "{piped}");
    assert!(!piped.contains('\x1b'), "colour on a pipe: {piped:?}");
    let coloured = logged_on_a_terminal(None);
    assert!(coloured.contains("INFO"), "{coloured:?}");
    assert!(
        coloured.contains('\x1b'),
        "no colour on a terminal: {coloured:?}"
    );
    for no_color in ["1", "true"] {
        let plain = logged_on_a_terminal(Some(no_color));
        assert!(plain.contains("INFO"), "{plain:?}");
        assert!(
            !plain.contains('\x1b'),
            "colour with NO_COLOR={no_color}: {plain:?}"
        );
    }
}

/// The engine reads one line, closes its end of sandpipe's stdout and goes on writing until
/// sandpipe ends: the status and sandpipe's stderr.
fn engine_vanishes(args: &[&str]) -> (Status, String) {
    let mut cmd = Command::new(sandpipe());
    cmd.arg("run").args(args);
    let mut child = sandpipe_tests::cli::spawn(&mut cmd);
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let err = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all);
        text(&all)
    });
    stdin.write_all(b"{\"n\":0}\n").expect("first line");
    let mut first = [0u8; 8];
    stdout.read_exact(&mut first).expect("the first line back");
    assert_eq!(&first, b"{\"n\":0}\n");
    drop(stdout);
    // Go on as an engine that has not noticed: the plugin answers into the broken pipe.
    let writer = std::thread::spawn(move || {
        for n in 1.. {
            if stdin
                .write_all(format!("{{\"n\":{n}}}\n").as_bytes())
                .is_err()
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    let status = Status::of(child.wait().expect("wait"));
    let _ = writer.join();
    (status, err.join().expect("stderr"))
}

/// The engine goes away: the plugin's next write fails as it would without sandpipe, and
/// sandpipe exits as the plugin then does. `cat` leaves with 3 on EPIPE, wasm and native alike,
/// framed or raw; `/bin/cat`, which does not ignore SIGPIPE, dies of it, and so does sandpipe.
#[test]
fn an_engine_that_vanishes_passes_the_broken_pipe_on() {
    for target in [Target::Wasm, Target::Native] {
        let cat = path("cat", target);
        for framing in [&[][..], &["--framing", "lines"][..]] {
            let args = [framing, &[cat.as_str()]].concat();
            let (status, stderr) = engine_vanishes(&args);
            assert_eq!(status, Status::Code(3), "{target:?} {framing:?}: {stderr}");
            assert!(
                stderr.contains("cat: writing stdout: Broken pipe"),
                "{target:?} {framing:?}: {stderr}"
            );
        }
    }
    for framing in [&[][..], &["--framing", "lines"][..]] {
        let args = [framing, &["/bin/cat"]].concat();
        let (status, stderr) = engine_vanishes(&args);
        assert_eq!(
            status,
            Status::Signal(libc::SIGPIPE),
            "{framing:?}: {stderr}"
        );
    }
}
