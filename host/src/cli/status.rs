//! How `sandpipe` ends: the exit status for each way a plugin and the bridge to it can end
//! ([`TABLE`]: `--help`'s text is made from it, and the README's and docs/cli.md's tables are
//! tested against it row for row), and ending by the plugin's own signal.

use std::sync::atomic::{AtomicI32, Ordering};

use sandpipe_proto::frame::FrameError;

use crate::Exit;

/// Exit codes `sandpipe` itself uses. Any other code is the plugin's own.
pub mod exit_code {
    /// The plugin ran out of fuel (wasm), or used up its CPU time (native): one code for "the
    /// compute budget is spent", whichever way the plugin runs.
    pub const OUT_OF_FUEL: i32 = 121;
    /// The plugin hit the memory cap.
    pub const MEMORY_LIMIT: i32 = 122;
    /// A frame in either direction was malformed or too large.
    pub const BAD_FRAME: i32 = 123;
    /// The plugin ran past `--timeout` (the same code as coreutils `timeout`).
    pub const DEADLINE: i32 = 124;
    /// sandpipe could not load or start the plugin (bad file, refused imports, bad option).
    pub const HOST_ERROR: i32 = 125;
    /// The plugin trapped (128 + SIGABRT, what a crashing native binary gives).
    pub const TRAP: i32 = 134;
    /// The host killed the plugin (128 + SIGKILL); a native plugin killed by signal N gives
    /// 128 + N.
    pub const KILLED: i32 = 137;
}

/// What a row of [`TABLE`] is the status of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// One code.
    Code(i32),
    /// 128 + the number of the signal that killed the plugin.
    Signal,
    /// Whatever the plugin's end gives.
    Plugins,
}

impl Status {
    /// As the tables write it.
    fn text(self) -> String {
        match self {
            Status::Code(code) => code.to_string(),
            Status::Signal => "128+N".to_owned(),
            Status::Plugins => "the plugin's".to_owned(),
        }
    }
}

/// The exit statuses besides the plugin's own code when it exits by itself, as the README and
/// docs/cli.md give them (Markdown; `--help` shows them without the backticks).
pub(crate) const TABLE: &[(Status, &str)] = &[
    (
        Status::Code(1),
        "`call`: the plugin answered with the protocol's error (printed on stderr)",
    ),
    (
        Status::Code(exit_code::OUT_OF_FUEL),
        "out of fuel (`--fuel`, `--fuel-per-request`), or a native plugin used up its CPU time \
         (`--max-cpu-time`)",
    ),
    (
        Status::Code(exit_code::MEMORY_LIMIT),
        "memory limit (`--max-memory`)",
    ),
    (
        Status::Code(exit_code::BAD_FRAME),
        "bad frame from the plugin (`--framing`, `--max-frame`), a frame over `--max-frame` on \
         sandpipe's stdin, or a plugin that broke its protocol (`call`: an answer that does not \
         fit it, such as an Orchard execute result without `outputs`, or a frame the host \
         stopped it for)",
    ),
    (
        Status::Code(exit_code::DEADLINE),
        "deadline exceeded (`--timeout`, `--request-timeout`; the same code as coreutils \
         `timeout`)",
    ),
    (
        Status::Code(exit_code::HOST_ERROR),
        "sandpipe could not load or start the plugin",
    ),
    (
        Status::Code(exit_code::TRAP),
        "the plugin trapped (wasm trap; natively, a crash signal)",
    ),
    (
        Status::Signal,
        "killed by signal N; `run` then ends by that same signal (`WIFSIGNALED`, as the plugin \
         run directly), except when sandpipe killed the plugin itself: 137 then, never a SIGKILL \
         of sandpipe's own (a native plugin with no cgroup past `--max-processes` is one)",
    ),
    (
        Status::Plugins,
        "engine gone (`run`): the engine closed its end of sandpipe's stdout. The plugin's next \
         write fails as without sandpipe (a wasm guest gets EPIPE, a native plugin SIGPIPE, or \
         EPIPE if it ignores SIGPIPE) and sandpipe exits as the plugin then does: its code, or \
         by SIGPIPE (141 in a shell)",
    ),
];

/// `--help`'s exit statuses: [`TABLE`], wrapped, under the plugin's own code.
pub(crate) fn help() -> String {
    const WIDTH: usize = 90;
    const INDENT: &str = "       ";
    let mut out = String::from(
        "Exit status:\n  the plugin's own code when it exits by itself (under WASI p2 a guest must use\n  \
         wasi:cli/exit.exit-with-code, e.g. sandpipe_guest::exit, to report codes other than 0/1)\n",
    );
    for (status, meaning) in TABLE {
        let mut line = format!("  {}  ", status.text());
        for word in meaning.replace('`', "").split_whitespace() {
            if line.len() + word.len() > WIDTH && !line.trim().is_empty() {
                out.push_str(line.trim_end());
                out.push('\n');
                line = INDENT.to_owned();
            }
            line.push_str(word);
            line.push(' ');
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str("Each sandpipe-made status prints one line starting with `sandpipe:` on stderr.");
    out
}

/// The signal that ended `run`'s plugin, when sandpipe is to end the same way (see [`exit`]).
static PLUGIN_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Signals whose default action ends a process without a core file: a plugin killed by one of
/// these (a forwarded SIGTERM, SIGINT, …) ends sandpipe by the same signal.
const TERMINATING: [i32; 8] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGKILL,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
];

/// `run`'s plugin was killed by `signal` (not by sandpipe: a SIGKILL sandpipe sent arrives
/// here as [`crate::Exit::Killed`] without a signal): [`exit`] re-raises it.
pub(crate) fn end_by_signal_like_the_plugin(signal: i32) {
    if TERMINATING.contains(&signal) {
        PLUGIN_SIGNAL.store(signal, Ordering::SeqCst);
    }
}

/// End the process with `code`, or, when `run`'s plugin was killed by a terminating signal,
/// by that same signal: an engine that waits for its plugin then sees "killed by SIGTERM"
/// (`WIFSIGNALED`), exactly as without sandpipe, not an exit code of 143. A shell's `$?` is
/// 128 + N either way, and `code` is that number should the signal not end the process.
pub fn exit(code: i32) -> ! {
    let signal = PLUGIN_SIGNAL.load(Ordering::SeqCst);
    if signal != 0 {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: resetting one signal to its default action and raising it on the calling
        // thread, with no handler of ours left to run. The runtime's handlers for these
        // signals only write to a pipe; the process ends here either way.
        #[allow(unsafe_code)]
        unsafe {
            no_core_file();
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(signal);
        }
    }
    std::process::exit(code)
}

/// sandpipe never leaves a core file: its memory holds what it keeps from the plugin (the
/// `--http-header` secrets, the caller's whole environment), and a core lands in the working
/// directory, which may be a plugin's `--dir` grant. `RLIMIT_CORE` goes to 0, hard limit
/// included, at the start of every command, before any plugin runs and whatever `ulimit -c`
/// the caller set; and sandpipe becomes non-dumpable before it re-raises a plugin's signal.
/// Not non-dumpable from the start: a non-dumpable process's `/proc/self` belongs to root, so
/// an unprivileged sandpipe's forked jail could not write its own `uid_map`.
pub(crate) fn no_core_file() {
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads one rlimit on our stack. Lowering a limit cannot fail but for
    // a bad resource; the plugin's own limit is 0 regardless.
    #[allow(unsafe_code)]
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &none);
    }
}

/// Why the bridge stopped early.
#[derive(Debug)]
pub(crate) enum BridgeEnd {
    /// The plugin wrote a bad frame.
    BadOutput(FrameError),
    /// sandpipe's stdout went away.
    StdoutClosed,
}

/// `exit`, with a death by sandpipe's own kill (`killed`: sandpipe threw the kill switch, and
/// the plugin died of SIGKILL) made [`Exit::Killed`] without a signal, as for a wasm plugin: status
/// 137 (or the bad frame's 123), never mirrored onto sandpipe, which would otherwise end itself
/// by a SIGKILL it sent. A SIGKILL from anyone else is the plugin's end, mirrored.
pub(crate) fn own_kill(exit: Exit, killed: bool) -> Exit {
    match exit {
        Exit::Killed {
            signal: Some(libc::SIGKILL),
        } if killed => Exit::Killed { signal: None },
        exit => exit,
    }
}

/// A crash or a non-zero exit, not a limit or a kill.
pub(crate) fn failed_by_itself(exit: &Exit) -> bool {
    matches!(exit, Exit::Trap { .. }) || matches!(exit, Exit::Exited(c) if *c != 0)
}

/// How `run` ends: its exit status, and the plugin's signal to end by instead (mirrored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ending {
    status: i32,
    by_signal: Option<i32>,
}

/// The README's exit-status table for `run`, as a pure function of how the bridge and the
/// plugin ended (`exit` already through [`own_kill`]).
fn ending(end: Option<&BridgeEnd>, bad_input: bool, exit: &Exit) -> Ending {
    let bad_frame = Ending {
        status: exit_code::BAD_FRAME,
        by_signal: None,
    };
    if bad_input {
        return bad_frame;
    }
    if let Some(BridgeEnd::BadOutput(e)) = end
        && !cut_by_a_crash(e, exit)
    {
        return bad_frame;
    }
    let by_signal = match exit {
        Exit::Killed { signal: Some(sig) } if TERMINATING.contains(sig) => Some(*sig),
        _ => None,
    };
    Ending {
        status: status_for(exit),
        by_signal,
    }
}

/// A frame cut off by the plugin's crash is a casualty of the crash: the crash is reported.
fn cut_by_a_crash(e: &FrameError, exit: &Exit) -> bool {
    let abnormal = !matches!(exit, Exit::Exited(_) | Exit::Killed { signal: None });
    matches!(e, FrameError::Truncated { .. }) && abnormal
}

/// Print the one-line reason and choose the exit status.
pub(crate) fn report(end: Option<BridgeEnd>, bad_input: Option<&FrameError>, exit: &Exit) -> i32 {
    let decided = ending(end.as_ref(), bad_input.is_some(), exit);
    if let Some(e) = bad_input {
        return bad_frame_in(e);
    }
    match &end {
        Some(BridgeEnd::BadOutput(e @ FrameError::Truncated { got, .. }))
            if cut_by_a_crash(e, exit) =>
        {
            eprintln!("sandpipe: dropped an incomplete frame of {got} bytes");
        }
        Some(BridgeEnd::BadOutput(e)) => return bad_frame_out(e),
        Some(BridgeEnd::StdoutClosed) | None => {}
    }
    if let Some(sig) = decided.by_signal {
        end_by_signal_like_the_plugin(sig);
    }
    exit_status(exit);
    decided.status
}

/// A bad frame on sandpipe's stdin (over `--max-frame`, or a stream that lost its framing
/// where frames are needed): its one line, and its status.
pub(crate) fn bad_frame_in(e: &FrameError) -> i32 {
    eprintln!("sandpipe: bad frame on stdin: {e}");
    exit_code::BAD_FRAME
}

/// A bad frame from the plugin (or the recording standing in for it): its one line, and its
/// status.
pub(crate) fn bad_frame_out(e: &FrameError) -> i32 {
    eprintln!("sandpipe: bad frame from plugin: {e}");
    exit_code::BAD_FRAME
}

/// The exit status for `exit`, printing the one-line reason for sandpipe-made ones.
pub(crate) fn exit_status(exit: &Exit) -> i32 {
    let code = status_for(exit);
    if !matches!(exit, Exit::Exited(_)) {
        eprintln!("sandpipe: {exit}");
    }
    code
}

/// The exit status for `exit` (see `sandpipe --help`).
pub(crate) fn status_for(exit: &Exit) -> i32 {
    match exit {
        Exit::Exited(code) => *code & 0xff,
        Exit::OutOfFuel { .. } | Exit::CpuTimeLimit { .. } => exit_code::OUT_OF_FUEL,
        Exit::MemoryLimit { .. } => exit_code::MEMORY_LIMIT,
        Exit::DeadlineExceeded { .. } => exit_code::DEADLINE,
        Exit::Trap { .. } => exit_code::TRAP,
        Exit::Killed { signal: Some(sig) } => 128 + sig,
        // The host stopped it: `--max-processes` with no cgroup to refuse the fork.
        Exit::Killed { signal: None } | Exit::ProcessLimit { .. } => exit_code::KILLED,
        _ => exit_code::KILLED,
    }
}

/// The status of how the plugin ended when that is not 0; `otherwise` when it exited 0 or its
/// end is unknown (`call`: a call the plugin never answered).
pub(crate) fn ended_status(exit: Option<&Exit>, otherwise: i32) -> i32 {
    exit.map(status_for)
        .filter(|s| *s != 0)
        .unwrap_or(otherwise)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Every way a plugin can end, with every signal number Linux has.
    fn exits() -> Vec<Exit> {
        let mut all = vec![
            Exit::OutOfFuel { limit: 1 },
            Exit::MemoryLimit { limit: 1 },
            Exit::ProcessLimit { limit: 1 },
            Exit::CpuTimeLimit {
                limit: Duration::from_secs(1),
            },
            Exit::DeadlineExceeded {
                limit: Duration::from_secs(1),
            },
            Exit::Trap {
                message: "trap".into(),
                stderr_tail: Vec::new(),
            },
            Exit::Killed { signal: None },
        ];
        all.extend([0, 1, 2, 3, 100, 121, 123, 137, 255, 256, 257, -1].map(Exit::Exited));
        all.extend((1..=64).map(|s| Exit::Killed { signal: Some(s) }));
        all
    }

    fn ends() -> Vec<Option<BridgeEnd>> {
        vec![
            None,
            Some(BridgeEnd::StdoutClosed),
            Some(BridgeEnd::BadOutput(FrameError::Truncated {
                got: 3,
                snippet: String::new(),
            })),
            Some(BridgeEnd::BadOutput(FrameError::TooLarge {
                limit: 1,
                got: 2,
            })),
        ]
    }

    /// [`TABLE`]: the plugin's own code, a sandpipe code, or 128 + a signal.
    fn documented(status: i32, exit: &Exit) -> bool {
        match exit {
            Exit::Exited(code) if status == code & 0xff => true,
            _ => TABLE.iter().any(|(s, _)| match s {
                Status::Code(code) => *code == status,
                Status::Signal => (129..=192).contains(&status),
                Status::Plugins => false,
            }),
        }
    }

    /// The rows of the first Markdown table headed `| status | meaning |` in `file` (a path
    /// from the repository's root).
    fn table_in(file: &str) -> Vec<(String, String)> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let rows = text
            .lines()
            .skip_while(|l| l.trim() != "| status | meaning |")
            .skip(2)
            .take_while(|l| l.starts_with('|'));
        rows.map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').splitn(2, " | ").collect();
            match cells[..] {
                [status, meaning] => (status.trim().to_owned(), meaning.trim().to_owned()),
                _ => panic!("{file}: not a row of two cells: {l}"),
            }
        })
        .collect()
    }

    /// The README's and docs/cli.md's exit-status tables are [`TABLE`], row for row.
    #[test]
    fn the_readme_and_docs_cli_md_give_the_status_table() {
        let table: Vec<(String, String)> = TABLE
            .iter()
            .map(|(s, m)| (s.text(), (*m).to_owned()))
            .collect();
        for file in ["README.md", "docs/cli.md"] {
            let rows = table_in(file);
            assert!(!rows.is_empty(), "{file}: no `| status | meaning |` table");
            for (i, (doc, ours)) in rows.iter().zip(&table).enumerate() {
                assert_eq!(
                    doc,
                    ours,
                    "{file}: row {} differs from status.rs's TABLE",
                    i + 1
                );
            }
            assert_eq!(rows.len(), table.len(), "{file}: rows {rows:#?}");
        }
    }

    /// Every code sandpipe makes has its row; `--help` shows every row.
    #[test]
    fn every_code_has_its_row_and_help_shows_each() {
        use exit_code::*;
        for code in [
            OUT_OF_FUEL,
            MEMORY_LIMIT,
            BAD_FRAME,
            DEADLINE,
            HOST_ERROR,
            TRAP,
        ] {
            assert!(
                TABLE.iter().any(|(s, _)| *s == Status::Code(code)),
                "{code}"
            );
        }
        assert!(
            TABLE
                .iter()
                .any(|(s, m)| *s == Status::Signal && m.contains(&KILLED.to_string()))
        );
        let help = help();
        for (status, meaning) in TABLE {
            let first = meaning.replace('`', "");
            let first: Vec<&str> = first.split_whitespace().take(3).collect();
            let line = format!("  {}  {}", status.text(), first.join(" "));
            assert!(help.contains(&line), "{line:?} missing from:\n{help}");
        }
        assert!(help.lines().all(|l| l.len() <= 92), "{help}");
    }

    /// Exhaustive over the whole input space (a few thousand cases): the exit mapping has
    /// no input a fuzzer could find beyond these.
    #[test]
    fn every_ending_is_documented_and_sandpipe_never_ends_by_its_own_kill() {
        for exit in exits() {
            for killed in [false, true] {
                let exit = own_kill(exit.clone(), killed);
                for end in ends() {
                    for bad_input in [false, true] {
                        let e = ending(end.as_ref(), bad_input, &exit);
                        let case =
                            format!("{exit:?} killed={killed} {end:?} bad_input={bad_input}");
                        assert!(documented(e.status, &exit), "{case}: status {}", e.status);
                        assert!((0..=255).contains(&e.status), "{case}");
                        if killed {
                            assert_ne!(e.by_signal, Some(libc::SIGKILL), "{case}: its own kill");
                        }
                        if let Some(sig) = e.by_signal {
                            assert_eq!(e.status, 128 + sig, "{case}");
                            assert_eq!(exit, Exit::Killed { signal: Some(sig) }, "{case}");
                            assert!(TERMINATING.contains(&sig), "{case}");
                        }
                        let bad_output = matches!(&end, Some(BridgeEnd::BadOutput(f)) if !cut_by_a_crash(f, &exit));
                        if bad_input || bad_output {
                            assert_eq!(e.status, exit_code::BAD_FRAME, "{case}");
                            assert_eq!(e.by_signal, None, "{case}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn its_own_kill_is_137_or_the_bad_frames_123() {
        let killed = own_kill(
            Exit::Killed {
                signal: Some(libc::SIGKILL),
            },
            true,
        );
        let plain = ending(None, false, &killed);
        assert_eq!((plain.status, plain.by_signal), (137, None));
        let bad = BridgeEnd::BadOutput(FrameError::Truncated {
            got: 1,
            snippet: String::new(),
        });
        assert_eq!(ending(Some(&bad), false, &killed).status, 123);
        // A SIGKILL from anyone else is the plugin's end, mirrored.
        let foreign = Exit::Killed {
            signal: Some(libc::SIGKILL),
        };
        assert_eq!(ending(None, false, &foreign).by_signal, Some(libc::SIGKILL));
    }
}
