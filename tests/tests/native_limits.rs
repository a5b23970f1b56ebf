//! The native fallback's limits: CPU time (`RLIMIT_CPU`), open files (`RLIMIT_NOFILE`) and
//! Landlock filesystem and network confinement, each biting on a real child process, and the
//! stated fallback where the kernel has no Landlock. Beside the native open-file limit, the
//! same cap on wasm sessions (p2 and p1), where it is the host's own count, and the wasm
//! disk-write quota.

use std::path::Path;
use std::time::Duration;

use sandpipe::{
    Access, DEFAULT_MAX_OPEN_FILES, Exit, Host, HostError, LandlockSupport, Plugin, Policy,
    Session, SessionOptions, StderrMode,
};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::{Target, plugin};
use serde_json::Value;

mod common;
use common::host;

/// A wall-clock bound far above any CPU limit used here: a plugin the CPU limit misses ends
/// as `DeadlineExceeded`, which fails the assertion, rather than hanging the suite.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// "Too many open files" on Linux.
const EMFILE: i64 = 24;

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

/// How the fs plugin's `open-many` ended: how many opens succeeded, the error that stopped it,
/// and whether an open after closing one succeeded.
#[derive(Debug)]
struct OpenMany {
    opened: u64,
    errno: Option<i64>,
    error: String,
    kind: String,
    reopened: bool,
}

/// Run the fs plugin built for `target` with `open-many` under `policy`: natively on
/// `/dev/null`, as wasm on a file in a read-only preopen at `/data` (one host descriptor).
async fn open_until_refused(host: &Host, target: Target, policy: Policy) -> OpenMany {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f.txt"), "f").expect("write");
    let policy = match target {
        Target::Native => policy.arg("open-many:/dev/null"),
        Target::Wasm | Target::WasmP1 => policy
            .preopen(dir.path(), "/data", Access::ReadOnly)
            .arg("open-many:/data/f.txt"),
    };
    let p = host.load(plugin("fs", target)).expect("load");
    let opts = SessionOptions::framed(Framing::JsonLines).stderr(StderrMode::Discard);
    let mut s = host.start(&p, &policy, &opts).await.expect("start");
    let (frames, exit) = replies(&mut s).await;
    // An error, not a trap: the plugin reports and exits normally.
    assert_eq!(exit, Exit::Exited(0), "{frames:?} {:?}", s.stderr_tail());
    let [reply] = frames.as_slice() else {
        panic!("expected one reply, got {frames:?}");
    };
    assert_eq!(reply["ok"], true, "{reply}");
    let r = &reply["result"];
    let text = |key: &str| r[key].as_str().unwrap_or_default().to_owned();
    OpenMany {
        opened: r["opened"].as_u64().expect("opened"),
        errno: r["stopped"].as_i64(),
        error: text("error"),
        kind: text("kind"),
        reopened: r["reopened"] == true,
    }
}

#[tokio::test]
async fn open_file_limit_bites_at_emfile() {
    let host = host();
    // Stdin, stdout and stderr are three of the allowed descriptors; the rest are the
    // plugin's, and the open past them fails with EMFILE. Exactly three: nothing this test
    // process leaves inheritable (cargo's jobserver pipe) reaches the plugin.
    for limit in [32, 64, DEFAULT_MAX_OPEN_FILES] {
        let r = open_until_refused(
            &host,
            Target::Native,
            Policy::default().max_open_files(Some(limit)),
        )
        .await;
        assert_eq!(r.opened, limit - 3, "limit {limit}: {r:?}");
        assert_eq!(r.errno, Some(EMFILE), "limit {limit}: {r:?}");
        assert!(r.reopened, "limit {limit}: {r:?}");
    }
    // The default policy applies the default limit.
    let r = open_until_refused(&host, Target::Native, Policy::default()).await;
    assert_eq!(r.opened, DEFAULT_MAX_OPEN_FILES - 3, "{r:?}");
}

/// `EDQUOT` and `EMFILE` as wasi-libc numbers them (the WASI p1 errno values).
const WASI_EDQUOT: i64 = 19;
const WASI_EMFILE: i64 = 33;

#[tokio::test]
async fn a_wasm_plugin_is_refused_past_its_open_file_cap_and_runs_on() {
    let host = host();
    // The preopen holds one of the allowed descriptors (wasm stdio is in memory and holds
    // none); the rest are the plugin's. Past them the open fails with an error the guest can
    // handle, and after it closes one, the next open succeeds.
    for target in [Target::Wasm, Target::WasmP1] {
        for policy in [
            Policy::default().max_open_files(Some(32)),
            Policy::default(),
        ] {
            let limit = policy.max_open_files.expect("a limit");
            let r = open_until_refused(&host, target, policy).await;
            assert_eq!(r.opened, limit - 1, "{target:?} limit {limit}: {r:?}");
            assert!(r.reopened, "{target:?} limit {limit}: {r:?}");
            match target {
                // WASI p2 has no EMFILE: the host answers error-code `quota`.
                Target::Wasm => {
                    assert_eq!(r.errno, Some(WASI_EDQUOT), "{r:?}");
                    assert_eq!(r.kind, "QuotaExceeded", "{r:?}");
                }
                _ => {
                    assert_eq!(r.errno, Some(WASI_EMFILE), "{r:?}");
                    assert!(r.error.contains("os error 33"), "{r:?}");
                }
            }
        }
    }
}

#[tokio::test]
async fn below_the_cap_opens_behave_as_before() {
    // The capped open hands every open it lets through to wasmtime-wasi: its answers, refusals
    // included, are wasmtime-wasi's own, under p1 as under p2.
    let host = host();
    let ro = tempfile::tempdir().expect("tempdir");
    std::fs::write(ro.path().join("hello.txt"), "hello").expect("write");
    let ops = [
        ("read:/ro/hello.txt", "ok"),
        ("read:/ro/missing.txt", "NotFound"),
        ("write:/ro/hello.txt", "PermissionDenied"),
        ("write:/ro/new.txt", "PermissionDenied"),
        ("read:/ro/../outside.txt", "PermissionDenied"),
        ("list:/ro", "ok"),
    ];
    for target in [Target::Wasm, Target::WasmP1] {
        let mut policy =
            Policy::default()
                .max_open_files(Some(8))
                .preopen(ro.path(), "/ro", Access::ReadOnly);
        for (op, _) in ops {
            policy = policy.arg(op);
        }
        let p = host.load(plugin("fs", target)).expect("load");
        let opts = SessionOptions::framed(Framing::JsonLines).stderr(StderrMode::Discard);
        let mut s = host.start(&p, &policy, &opts).await.expect("start");
        let (frames, exit) = replies(&mut s).await;
        assert_eq!(exit, Exit::Exited(0), "{target:?} {:?}", s.stderr_tail());
        let got: Vec<&str> = frames
            .iter()
            .map(|f| match f["ok"].as_bool() {
                Some(true) => "ok",
                _ => f["kind"].as_str().unwrap_or("?"),
            })
            .collect();
        let want: Vec<&str> = ops.iter().map(|(_, want)| *want).collect();
        assert_eq!(got, want, "{target:?}: {frames:#?}");
    }
    assert_eq!(
        std::fs::read_to_string(ro.path().join("hello.txt")).expect("read"),
        "hello"
    );
}

#[tokio::test]
async fn a_stream_keeps_its_file_counted_after_the_descriptor_is_dropped() {
    // A p2 guest can drop a descriptor and keep a stream read from it; the host file stays
    // open, so it stays counted: dropping descriptors is no way around the cap.
    let host = host();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("f.txt"), "f").expect("write");
    let policy = Policy::default()
        .max_open_files(Some(32))
        .preopen(dir.path(), "/data", Access::ReadOnly)
        .arg("open-streams:/data/f.txt");
    let p = host.load(plugin("fs", Target::Wasm)).expect("load");
    let opts = SessionOptions::framed(Framing::JsonLines).stderr(StderrMode::Discard);
    let mut s = host.start(&p, &policy, &opts).await.expect("start");
    let (frames, exit) = replies(&mut s).await;
    assert_eq!(exit, Exit::Exited(0), "{frames:?} {:?}", s.stderr_tail());
    assert_eq!(frames[0]["ok"], true, "{frames:?}");
    assert_eq!(frames[0]["result"]["opened"], 31, "{frames:?}");
    assert_eq!(frames[0]["result"]["error"], "quota", "{frames:?}");
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
            // In its own root (namespaces) what was not granted is not even there; under
            // Landlock alone it is refused. A read-only grant refuses writes either way.
            let outside = if sandpipe::NamespaceSupport::detect().is_available() {
                "NotFound"
            } else {
                "PermissionDenied"
            };
            for refused in [0, 1, 2] {
                assert_eq!(results[refused]["kind"], outside, "{results:#?}");
            }
            for refused in [5, 6] {
                let kind = results[refused]["kind"].as_str().expect("kind");
                assert!(
                    ["PermissionDenied", "ReadOnlyFilesystem"].contains(&kind),
                    "{results:#?}"
                );
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

/// The fs plugin (wasm) answering `op` with `dir` granted read-write at `/data`, under a
/// disk-write quota of `quota` bytes.
async fn under_quota(
    target: Target,
    quota: u64,
    op: &str,
) -> Result<(Vec<Value>, Exit), HostError> {
    let host = host();
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = Policy::default()
        .max_disk_write(Some(quota))
        .preopen(dir.path(), "/data", Access::ReadWrite)
        .arg(op);
    let p = host.load(plugin("fs", target)).expect("load");
    let opts = SessionOptions::framed(Framing::JsonLines).stderr(StderrMode::Discard);
    let mut s = host.start(&p, &policy, &opts).await?;
    Ok(replies(&mut s).await)
}

/// An I/O error, as wasi-libc reports any failed stream write.
const EIO: i64 = 29;

#[tokio::test]
async fn a_wasm_plugin_that_fills_its_quota_gets_enospc_and_runs_on() {
    const QUOTA: u64 = 1 << 20;
    let (frames, exit) = under_quota(Target::Wasm, QUOTA, "fill:/data/big")
        .await
        .expect("start");
    // It ran on after the failure: it answered, looked at its file, and exited by itself.
    assert_eq!(exit, Exit::Exited(0), "{frames:?}");
    let r = &frames[0]["result"];
    // The host's code is `insufficient-space` (the next test reads it), but wasi-libc's
    // `write`, under Rust's std, reports every failed stream write as EIO.
    assert_eq!(r["errno"], EIO, "{frames:?}");
    // A refused write writes nothing: the file holds at most the quota, and std's 64 KiB
    // writes filled all but the last one.
    let size = r["size"].as_u64().expect("size");
    assert!(size <= QUOTA && size + (64 << 10) > QUOTA, "{frames:?}");
}

/// 4 KiB writes through `op` under a 10,000-byte quota: two fit, the third is refused with the
/// host's own code.
async fn third_write_is_insufficient_space(op: &str) {
    let (frames, exit) = under_quota(Target::Wasm, 10_000, op).await.expect("start");
    assert_eq!(exit, Exit::Exited(0), "{frames:?}");
    assert_eq!(frames[0]["result"]["written"], 8192, "{frames:?}");
    assert_eq!(
        frames[0]["result"]["error"], "insufficient-space",
        "{frames:?}"
    );
}

#[tokio::test]
async fn a_positioned_write_over_the_quota_is_insufficient_space() {
    third_write_is_insufficient_space("pwrite:/data/p").await;
}

#[tokio::test]
async fn a_stream_write_over_the_quota_is_insufficient_space() {
    third_write_is_insufficient_space("stream-fill:/data/s").await;
}

#[tokio::test]
async fn a_quota_with_a_read_write_dir_refuses_a_core_module() {
    match under_quota(Target::WasmP1, 1 << 20, "fill:/data/big").await {
        Err(HostError::DiskQuotaNeedsComponent) => {}
        other => panic!("expected DiskQuotaNeedsComponent, got {other:?}"),
    }
}
