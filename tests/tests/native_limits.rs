//! The native fallback's limits: CPU time (`RLIMIT_CPU`), open files (`RLIMIT_NOFILE`) and
//! Landlock filesystem and network confinement, each biting on a real child process, and the
//! stated fallback where the kernel has no Landlock.

use std::path::Path;
use std::time::Duration;

use sandpipe::{
    Access, DEFAULT_MAX_OPEN_FILES, Exit, Host, HostError, LandlockSupport, Plugin, Policy,
    Session, SessionOptions, StderrMode,
};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::{Target, plugin};
use serde_json::Value;

/// A wall-clock bound far above any CPU limit used here: a plugin the CPU limit misses ends
/// as `DeadlineExceeded`, which fails the assertion, rather than hanging the suite.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// "Too many open files" on Linux.
const EMFILE: i64 = 24;

fn host() -> Host {
    Host::with_cache_dir(None).expect("host")
}

/// Start the native build of `bin` under `policy`, stderr discarded (the tail is kept).
async fn start(host: &Host, bin: &str, policy: &Policy) -> Session {
    let p = host.load(plugin(bin, Target::Native)).expect("load");
    let opts = SessionOptions::framed(Framing::JsonLines).stderr(StderrMode::Discard);
    host.start(&p, policy, &opts).await.expect("start")
}

/// Every frame until EOF, as JSON, then how the plugin ended.
async fn replies(s: &mut Session) -> (Vec<Value>, Exit) {
    let mut frames = Vec::new();
    while let Ok(Some(frame)) = s.recv().await {
        frames.push(serde_json::from_slice(&frame).expect("a JSON frame"));
    }
    (frames, s.wait().await)
}

#[tokio::test]
async fn cpu_time_limit_stops_a_native_spinner_after_its_frame() {
    let host = host();
    let policy = Policy::default()
        .max_cpu_time(Some(Duration::from_secs(1)))
        .deadline(HANG_GUARD);
    let mut s = start(&host, "spin", &policy).await;
    let (frames, exit) = replies(&mut s).await;
    assert_eq!(frames, vec![serde_json::json!({"spinning": true})]);
    assert_eq!(
        exit,
        Exit::CpuTimeLimit {
            limit: Duration::from_secs(1)
        }
    );
    assert_eq!(exit.to_string(), "plugin used up its CPU time of 1s");
}

#[tokio::test]
async fn cpu_time_limit_catches_a_plugin_that_ignores_sigxcpu() {
    // A shell ignores SIGXCPU and execs the spinner, which inherits the ignored disposition:
    // only the kernel's SIGKILL at the hard limit stops it, and that must still read as the
    // CPU limit, not as a kill.
    let host = host();
    let spin = plugin("spin", Target::Native);
    let dir = spin.parent().expect("the plugin's directory");
    let policy = Policy::default()
        .max_cpu_time(Some(Duration::from_secs(1)))
        .deadline(HANG_GUARD)
        // Landlock: the shell may read and execute the spinner.
        .preopen(dir, dir.display().to_string(), Access::ReadOnly)
        .arg("-c")
        .arg(format!("trap '' XCPU; exec '{}'", spin.display()));
    let sh = Plugin::native_unsandboxed("/bin/sh").expect("/bin/sh");
    let opts = SessionOptions::framed(Framing::JsonLines).stderr(StderrMode::Discard);
    let mut s = host.start(&sh, &policy, &opts).await.expect("start");
    let (frames, exit) = replies(&mut s).await;
    assert_eq!(
        frames,
        vec![serde_json::json!({"spinning": true})],
        "{:?}",
        s.stderr_tail()
    );
    assert_eq!(
        exit,
        Exit::CpuTimeLimit {
            limit: Duration::from_secs(1)
        },
        "{:?}",
        s.stderr_tail()
    );
}

/// Run the native fs plugin with `open-many:/dev/null` under `limit`; (opened, errno).
async fn open_until_refused(host: &Host, limit: Option<u64>) -> (u64, Option<i64>) {
    let policy = Policy::default()
        .max_open_files(limit)
        .arg("open-many:/dev/null");
    let mut s = start(host, "fs", &policy).await;
    let (frames, exit) = replies(&mut s).await;
    assert_eq!(exit, Exit::Exited(0), "{frames:?} {:?}", s.stderr_tail());
    let [reply] = frames.as_slice() else {
        panic!("expected one reply, got {frames:?}");
    };
    assert_eq!(reply["ok"], true, "{reply}");
    (
        reply["result"]["opened"].as_u64().expect("opened"),
        reply["result"]["stopped"].as_i64(),
    )
}

#[tokio::test]
async fn open_file_limit_bites_at_emfile() {
    let host = host();
    // Stdin, stdout and stderr are three of the allowed descriptors; the rest are the
    // plugin's, and the open past them fails with EMFILE. Exactly three: nothing this test
    // process leaves inheritable (cargo's jobserver pipe) reaches the plugin.
    for limit in [32, 64, DEFAULT_MAX_OPEN_FILES] {
        let (opened, errno) = open_until_refused(&host, Some(limit)).await;
        assert_eq!(opened, limit - 3, "limit {limit}");
        assert_eq!(errno, Some(EMFILE), "limit {limit}");
    }
    // The default policy applies the default limit.
    let policy = Policy::default();
    assert_eq!(policy.max_open_files, Some(DEFAULT_MAX_OPEN_FILES));
}

#[tokio::test]
async fn a_missing_preopen_is_a_typed_error_natively_too() {
    let host = host();
    let gone = tempfile::tempdir().expect("tempdir").path().join("gone");
    let policy = Policy::default().preopen(&gone, "/gone", Access::ReadOnly);
    let p = host.load(plugin("fs", Target::Native)).expect("load");
    match host.start(&p, &policy, &SessionOptions::default()).await {
        Err(HostError::Preopen { host, .. }) => assert_eq!(host, gone),
        Err(other) => panic!("expected a preopen error, got {other}"),
        Ok(_) => panic!("a missing directory was accepted"),
    }
}

/// The fs plugin's answers to `ops` with `data` read-write and `ro` read-only, granted at
/// their host paths.
async fn fs_probe(host: &Host, data: &Path, ro: &Path, ops: &[String]) -> Vec<Value> {
    let mut policy = Policy::default()
        .preopen(data, data.display().to_string(), Access::ReadWrite)
        .preopen(ro, ro.display().to_string(), Access::ReadOnly);
    for op in ops {
        policy = policy.arg(op.as_str());
    }
    let mut s = start(host, "fs", &policy).await;
    let (frames, exit) = replies(&mut s).await;
    assert_eq!(exit, Exit::Exited(0), "{:?}", s.stderr_tail());
    assert_eq!(frames.len(), ops.len(), "{frames:#?}");
    frames
}

#[tokio::test]
async fn landlock_limits_a_native_plugin_to_its_dirs_or_the_fallback_says_it_cannot() {
    let host = host();
    let outside = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    let ro = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
    std::fs::write(ro.path().join("hello.txt"), "hello").expect("write");
    let at = |dir: &Path, name: &str| dir.join(name).display().to_string();
    let (o, d, r) = (outside.path(), data.path(), ro.path());
    let ops = [
        ("read", at(o, "secret.txt")),
        ("write", at(o, "planted.txt")),
        ("list", o.display().to_string()),
        ("read", at(r, "hello.txt")),
        ("list", r.display().to_string()),
        ("write", at(r, "new.txt")),
        ("write", at(r, "hello.txt")),
        ("write", at(d, "ok.txt")),
        ("read", at(d, "ok.txt")),
        ("mkdir", at(d, "sub")),
        ("write", at(d, "sub/deeper.txt")),
    ];
    let args: Vec<String> = ops.iter().map(|(op, p)| format!("{op}:{p}")).collect();
    let results = fs_probe(&host, d, r, &args).await;
    let ok: Vec<bool> = results
        .iter()
        .map(|r| r["ok"].as_bool().expect("ok"))
        .collect();
    let support = LandlockSupport::detect();
    match &support {
        LandlockSupport::Full { .. } | LandlockSupport::Partial { .. } => {
            assert_eq!(
                ok,
                [
                    false, false, false, true, true, false, false, true, true, true, true
                ],
                "{results:#?}"
            );
            for refused in [0, 1, 2, 5, 6] {
                assert_eq!(results[refused]["kind"], "PermissionDenied", "{results:#?}");
            }
            // The host side is untouched where the plugin was refused.
            assert!(!o.join("planted.txt").exists());
            assert!(!r.join("new.txt").exists());
            assert_eq!(
                std::fs::read_to_string(r.join("hello.txt")).expect("read"),
                "hello"
            );
            assert_eq!(
                std::fs::read_to_string(d.join("sub/deeper.txt")).expect("read"),
                "sandpipe"
            );
        }
        LandlockSupport::Unavailable { .. } => {
            // The stated fallback: nothing is confined, and sandpipe says so.
            assert!(ok.iter().all(|ok| *ok), "{results:#?}");
            assert!(o.join("planted.txt").exists());
            let warning = support.warning().expect("a warning without Landlock");
            assert!(
                warning.starts_with("sandpipe: warning: Landlock is not available on this kernel")
                    && warning.contains("the native plugin can reach the whole filesystem"),
                "{warning}"
            );
        }
        other => panic!("unknown Landlock support {other:?}"),
    }
    // Only a kernel that enforces everything starts without a warning.
    assert_eq!(
        support.warning().is_none(),
        matches!(support, LandlockSupport::Full { .. }),
        "{support:?}"
    );
}

#[tokio::test]
async fn landlock_refuses_tcp_where_the_kernel_can() {
    let host = host();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let policy = Policy::default().arg(format!("connect:{addr}"));
    let mut s = start(&host, "fs", &policy).await;
    let (frames, exit) = replies(&mut s).await;
    assert_eq!(exit, Exit::Exited(0));
    let support = LandlockSupport::detect();
    // TCP restriction arrived with Landlock ABI 4.
    let refused = support.abi().is_some_and(|abi| abi >= 4);
    assert_eq!(frames[0]["ok"], !refused, "{support:?} {frames:?}");
    if refused {
        assert_eq!(frames[0]["kind"], "PermissionDenied", "{frames:?}");
    }
}
