//! The foundation, end to end: every case runs the plugin built from source, as a wasm
//! component and (where the limit exists natively) as a native child process.

use std::time::{Duration, Instant};

use sandpipe::{
    Exit, Fuel, Host, HostOptions, Plugin, PluginKind, Policy, SessionError, SessionOptions,
};
use sandpipe_proto::frame::{FrameError, FrameLimits, Framing};
use sandpipe_tests::{Target, plugin};

mod common;
use common::{host, load, opts, recv_all, start};

fn cbor_frames() -> Vec<Vec<u8>> {
    vec![
        vec![0xf6],                                                 // null: ATP's start item
        vec![0xa2, 0x61, b'a', 0x01, 0x61, b'b', 0x82, 0x02, 0x03], // {"a":1,"b":[2,3]}
        vec![0x9f, 0x01, 0x5f, 0x41, 0x00, 0xff, 0xff],             // [_ 1, (_ h'00')]
    ]
}

fn lines_frames() -> Vec<Vec<u8>> {
    vec![
        br#"{"id":1}"#.to_vec(),
        br#"{"id":"two","params":[1,2,3]}"#.to_vec(),
        b"[]".to_vec(),
    ]
}

#[tokio::test]
async fn echo_plugins_answer_in_every_framing_wasm_p1_and_native() {
    let host = host();
    let cases = [
        ("echo-lines", Framing::JsonLines, lines_frames()),
        ("echo-cbor", Framing::CborSeq, cbor_frames()),
        (
            "echo-content-length",
            Framing::ContentLength,
            lines_frames(),
        ),
    ];
    for target in Target::ALL {
        for (bin, framing, frames) in &cases {
            let p = load(&host, bin, target);
            let want_kind = match target {
                Target::Wasm => PluginKind::Component,
                Target::WasmP1 => PluginKind::CoreModule,
                Target::Native => PluginKind::NativeUnsandboxed,
            };
            assert_eq!(p.kind(), want_kind, "{bin} {target:?}");
            let mut s = host
                .start(&p, &Policy::default(), &opts(*framing))
                .await
                .expect("start");
            for f in frames {
                s.send(f).await.expect("send");
                assert_eq!(
                    s.recv().await.expect("recv").as_deref(),
                    Some(&f[..]),
                    "{bin} {target:?}"
                );
            }
            s.close_stdin().await;
            assert_eq!(s.recv().await.expect("eof").as_deref(), None);
            assert_eq!(s.wait().await, Exit::Exited(0), "{bin} {target:?}");
        }
    }
}

#[tokio::test]
async fn fuel_stops_the_spinner_after_its_frame() {
    let host = host();
    let policy = Policy::default().fuel(Fuel::PerSession(50_000_000));
    let mut s = start(&host, "spin", Target::Wasm, &policy, Framing::JsonLines).await;
    let (frames, end) = recv_all(&mut s).await;
    assert_eq!(frames, vec![br#"{"spinning":true}"#.to_vec()]);
    assert!(end.is_ok(), "{end:?}");
    assert_eq!(s.wait().await, Exit::OutOfFuel { limit: 50_000_000 });
}

#[tokio::test]
async fn native_spinner_has_no_fuel_but_meets_its_deadline() {
    let host = host();
    let policy = Policy::default()
        .fuel(Fuel::PerSession(50_000_000))
        .deadline(Duration::from_millis(500));
    let mut s = start(&host, "spin", Target::Native, &policy, Framing::JsonLines).await;
    let (frames, _) = recv_all(&mut s).await;
    assert_eq!(frames.len(), 1);
    assert_eq!(
        s.wait().await,
        Exit::DeadlineExceeded {
            limit: Duration::from_millis(500)
        }
    );
}

#[tokio::test]
async fn memory_cap_stops_the_allocator() {
    let host = host();
    let policy = Policy::default().max_memory(Some(32 << 20));
    let mut s = start(&host, "alloc", Target::Wasm, &policy, Framing::JsonLines).await;
    let (frames, _) = recv_all(&mut s).await;
    assert!(frames.is_empty());
    assert_eq!(s.wait().await, Exit::MemoryLimit { limit: 32 << 20 });
    // The guest's own last words are kept.
    assert!(
        s.stderr_tail()
            .iter()
            .any(|l| l.contains("allocated 16 MiB")),
        "{:?}",
        s.stderr_tail()
    );
}

#[tokio::test]
async fn native_allocator_stops_at_the_memory_cap() {
    let host = host();
    let policy = Policy::default().max_memory(Some(256 << 20));
    let mut s = start(&host, "alloc", Target::Native, &policy, Framing::JsonLines).await;
    let _ = recv_all(&mut s).await;
    // The cap counts resident memory: past it the plugin's group is killed and the exit is
    // the memory limit, as under wasm.
    match s.wait().await {
        Exit::MemoryLimit { limit } => assert_eq!(limit, 256 << 20),
        other => panic!("expected the memory limit, got {other:?}"),
    }
}

#[tokio::test]
async fn deadline_stops_a_plugin_blocked_in_a_host_call() {
    let host = host();
    let limit = Duration::from_secs(1);
    for target in [Target::Wasm, Target::Native] {
        for arg in ["stdin", "sleep"] {
            let policy = Policy::default().deadline(limit).arg(arg);
            let started = Instant::now();
            let mut s = start(&host, "sleep-stdin", target, &policy, Framing::JsonLines).await;
            let (frames, _) = recv_all(&mut s).await;
            assert!(frames.is_empty());
            assert_eq!(
                s.wait().await,
                Exit::DeadlineExceeded { limit },
                "{target:?} {arg}"
            );
            // Not a speed assertion: a generous bound that only a missing deadline can break.
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{target:?} {arg}: {:?}",
                started.elapsed()
            );
        }
    }
}

#[tokio::test]
async fn frames_completed_before_a_trap_reach_the_caller() {
    let host = host();
    for target in [Target::Wasm, Target::Native] {
        let mut s = start(
            &host,
            "trap-mid-frame",
            target,
            &Policy::default(),
            Framing::JsonLines,
        )
        .await;
        let (frames, end) = recv_all(&mut s).await;
        assert_eq!(
            frames,
            vec![br#"{"id":1}"#.to_vec(), br#"{"id":2}"#.to_vec()],
            "{target:?}"
        );
        match end {
            Err(SessionError::BadFrameFromPlugin {
                error: FrameError::Truncated { got, .. },
                ..
            }) => {
                assert_eq!(got, br#"{"id":3,"par"#.len());
            }
            other => panic!("{target:?}: expected the cut-off third frame, got {other:?}"),
        }
        match s.wait().await {
            Exit::Trap { stderr_tail, .. } => {
                assert_eq!(
                    stderr_tail,
                    vec!["about to trap", "second stderr line"],
                    "{target:?}"
                );
            }
            other => panic!("{target:?}: expected a trap, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn oversized_frame_is_refused_after_the_good_one() {
    let host = host();
    for target in [Target::Wasm, Target::Native] {
        let p = load(&host, "oversized", target);
        let policy = Policy::default().arg("2097152");
        let o = opts(Framing::JsonLines).frame_limits(FrameLimits::with_max_frame_bytes(1 << 20));
        let mut s = host.start(&p, &policy, &o).await.expect("start");
        let (frames, end) = recv_all(&mut s).await;
        assert_eq!(frames, vec![br#"{"ok":1}"#.to_vec()]);
        match end {
            Err(SessionError::BadFrameFromPlugin {
                error: FrameError::TooLarge { limit, got },
                ..
            }) => {
                assert_eq!(limit, 1 << 20);
                assert!(got > limit, "{got}");
            }
            other => panic!("{target:?}: expected TooLarge, got {other:?}"),
        }
        s.kill();
        assert_eq!(
            s.wait().await,
            Exit::Killed {
                signal: if target == Target::Native {
                    Some(9)
                } else {
                    None
                }
            }
        );
    }
}

#[tokio::test]
async fn junk_on_stdout_is_quoted_in_the_error() {
    let host = host();
    for target in [Target::Wasm, Target::Native] {
        let mut s = start(
            &host,
            "junk",
            target,
            &Policy::default(),
            Framing::JsonLines,
        )
        .await;
        let (frames, end) = recv_all(&mut s).await;
        assert_eq!(frames, vec![br#"{"id":1}"#.to_vec()]);
        match end {
            Err(SessionError::BadFrameFromPlugin {
                error: FrameError::InvalidJson { snippet, .. },
                ..
            }) => {
                assert_eq!(snippet, r"this is not json \x1b[31mred\x1b[0m");
            }
            other => panic!("{target:?}: expected InvalidJson, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn early_exit_keeps_the_code_and_closes_stdin() {
    let host = host();
    for target in [Target::Wasm, Target::WasmP1, Target::Native] {
        let policy = Policy::default().arg("7");
        let mut s = start(&host, "exit-early", target, &policy, Framing::JsonLines).await;
        s.send(br#"{"a":1}"#).await.expect("send");
        let (frames, end) = recv_all(&mut s).await;
        assert_eq!(frames, vec![br#"{"a":1}"#.to_vec()]);
        assert!(end.is_ok());
        assert_eq!(s.wait().await, Exit::Exited(7), "{target:?}");
        // Writing to a plugin that is gone is an error, not a hang.
        let mut closed = false;
        for _ in 0..64 {
            if let Err(e) = s.send(&[b'1'; 4096]).await {
                assert!(matches!(e, SessionError::StdinClosed), "{e:?}");
                closed = true;
                break;
            }
        }
        assert!(closed, "{target:?}: sends kept succeeding after exit");
    }
}

#[tokio::test]
async fn filesystem_is_limited_to_preopens_and_read_only_bites() {
    let host = host();
    let outside = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    let ro = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
    std::fs::write(ro.path().join("hello.txt"), "hello").expect("write");
    let secret = outside.path().join("secret.txt");
    let policy = Policy::default()
        .preopen(data.path(), "/data", sandpipe::Access::ReadWrite)
        .preopen(ro.path(), "/ro", sandpipe::Access::ReadOnly)
        .arg(format!("read:{}", secret.display()))
        .arg("read:/data/../secret.txt")
        .arg("read:/ro/hello.txt")
        .arg("write:/ro/new.txt")
        .arg("write:/ro/hello.txt")
        .arg("write:/data/ok.txt")
        .arg("list:/");
    let mut s = start(&host, "fs", Target::Wasm, &policy, Framing::JsonLines).await;
    let (frames, end) = recv_all(&mut s).await;
    assert!(end.is_ok());
    assert_eq!(s.wait().await, Exit::Exited(0));
    let results: Vec<serde_json::Value> = frames
        .iter()
        .map(|f| serde_json::from_slice(f).expect("json"))
        .collect();
    let ok: Vec<bool> = results
        .iter()
        .map(|r| r["ok"].as_bool().expect("ok"))
        .collect();
    assert_eq!(
        ok,
        vec![false, false, true, false, false, true, false],
        "{results:#?}"
    );
    assert_eq!(results[3]["kind"], "PermissionDenied", "{results:#?}");
    // The host side is untouched where the plugin was refused, and written where it was allowed.
    assert_eq!(
        std::fs::read_to_string(ro.path().join("hello.txt")).expect("read"),
        "hello"
    );
    assert!(!ro.path().join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(data.path().join("ok.txt")).expect("read"),
        "sandpipe"
    );
    // The host is unaffected: another session runs.
    let mut s = start(
        &host,
        "echo-lines",
        Target::Wasm,
        &Policy::default(),
        Framing::JsonLines,
    )
    .await;
    s.send(b"{}").await.expect("send");
    assert_eq!(s.recv().await.expect("recv").as_deref(), Some(&b"{}"[..]));
}

#[tokio::test]
async fn native_env_is_cleared_to_the_grant() {
    // This test process has PATH, HOME and cargo's variables; the child must see none of them.
    let host = host();
    let policy = Policy::default().env("GRANTED", "yes");
    let p = Plugin::native_unsandboxed("/usr/bin/env").expect("env binary");
    let mut s = host
        .start(&p, &policy, &SessionOptions::default())
        .await
        .expect("start");
    let (frames, _) = recv_all(&mut s).await;
    let out: Vec<u8> = frames.concat();
    assert_eq!(String::from_utf8_lossy(&out), "GRANTED=yes\n");
    assert_eq!(s.wait().await, Exit::Exited(0));
}

/// Resident set size of this process, in bytes.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("rss pages");
    pages * 4096
}

#[tokio::test]
async fn a_flooding_plugin_leaves_host_memory_bounded() {
    let host = host();
    for target in [Target::Wasm, Target::Native] {
        let mut s = start(
            &host,
            "flood",
            target,
            &Policy::default(),
            Framing::JsonLines,
        )
        .await;
        // Read a little, then stop reading: the plugin must be held back by backpressure.
        for _ in 0..1000 {
            s.recv().await.expect("recv").expect("frame");
        }
        let before = rss_bytes();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let paused = rss_bytes();
        for _ in 0..100_000 {
            s.recv().await.expect("recv").expect("frame");
        }
        let after = rss_bytes();
        eprintln!(
            "{target:?} flood rss: before {before} paused {paused} after 100k frames {after}"
        );
        assert!(
            paused.saturating_sub(before) < 16 << 20,
            "{target:?}: rss grew while paused: {before} -> {paused}"
        );
        assert!(
            after.saturating_sub(before) < 32 << 20,
            "{target:?}: rss grew while reading: {before} -> {after}"
        );
        s.kill();
        assert!(matches!(s.wait().await, Exit::Killed { .. }));
    }
}

#[tokio::test]
async fn stderr_is_drained_so_a_chatty_plugin_runs_unchanged() {
    let host = host();
    for target in [Target::Wasm, Target::Native] {
        let mut s = start(
            &host,
            "stderr-chatty",
            target,
            &Policy::default(),
            Framing::JsonLines,
        )
        .await;
        for i in 0..50 {
            let frame = format!(r#"{{"i":{i}}}"#);
            s.send(frame.as_bytes()).await.expect("send");
            assert_eq!(
                s.recv().await.expect("recv").as_deref(),
                Some(frame.as_bytes())
            );
        }
        s.close_stdin().await;
        assert_eq!(s.recv().await.expect("eof"), None);
        assert_eq!(s.wait().await, Exit::Exited(0));
        assert_eq!(
            s.stderr_tail().last().map(String::as_str),
            Some(r#"got frame: {"i":49}"#),
            "{target:?}"
        );
    }
}

#[tokio::test]
async fn cbor_written_one_byte_per_write_is_reassembled() {
    let host = host();
    for target in [Target::Wasm, Target::Native] {
        let mut s = start(
            &host,
            "cbor-tokens",
            target,
            &Policy::default(),
            Framing::CborSeq,
        )
        .await;
        for f in cbor_frames() {
            s.send(&f).await.expect("send");
            assert_eq!(
                s.recv().await.expect("recv").as_deref(),
                Some(&f[..]),
                "{target:?}"
            );
        }
        s.close_stdin().await;
        assert_eq!(s.recv().await.expect("eof"), None);
    }
}

#[tokio::test]
async fn shutdown_closes_stdin_then_kills_after_grace() {
    let host = host();
    for target in [Target::Wasm, Target::Native] {
        // The echo exits by itself when stdin closes.
        let s = start(
            &host,
            "echo-lines",
            target,
            &Policy::default(),
            Framing::JsonLines,
        )
        .await;
        assert_eq!(
            s.shutdown(Duration::from_secs(10)).await,
            Exit::Exited(0),
            "{target:?}"
        );
        // The sleeper ignores EOF and is killed after the grace period.
        let policy = Policy::default().arg("stdin");
        let s = start(&host, "sleep-stdin", target, &policy, Framing::JsonLines).await;
        let exit = s.shutdown(Duration::from_millis(200)).await;
        assert!(matches!(exit, Exit::Killed { .. }), "{target:?}: {exit:?}");
    }
}

#[tokio::test]
async fn the_host_survives_every_misbehaving_plugin_in_turn() {
    let host = host();
    let cases: [(&str, Policy); 6] = [
        ("spin", Policy::default().fuel(Fuel::PerSession(20_000_000))),
        ("alloc", Policy::default().max_memory(Some(16 << 20))),
        (
            "sleep-stdin",
            Policy::default().deadline(Duration::from_millis(200)),
        ),
        ("trap-mid-frame", Policy::default()),
        ("junk", Policy::default()),
        (
            "flood",
            Policy::default().deadline(Duration::from_millis(200)),
        ),
    ];
    for (bin, policy) in cases {
        let mut s = start(&host, bin, Target::Wasm, &policy, Framing::JsonLines).await;
        if bin == "flood" {
            // Not reading: the flood is held back, and the deadline ends it.
            let exit = s.wait().await;
            assert!(matches!(exit, Exit::DeadlineExceeded { .. }), "{exit:?}");
        } else {
            let _ = recv_all(&mut s).await;
            let exit = s.wait().await;
            assert!(!matches!(exit, Exit::Killed { .. }), "{bin}: {exit:?}");
        }
        let mut echo = start(
            &host,
            "echo-lines",
            Target::Wasm,
            &Policy::default(),
            Framing::JsonLines,
        )
        .await;
        echo.send(br#"{"after":"ok"}"#).await.expect("send");
        assert_eq!(
            echo.recv().await.expect("recv").as_deref(),
            Some(&br#"{"after":"ok"}"#[..]),
            "after {bin}"
        );
    }
}

#[tokio::test]
async fn compiled_artifacts_are_cached_on_disk_and_in_memory() {
    let cache = tempfile::tempdir().expect("tempdir");
    let path = plugin("echo-lines", Target::Wasm);
    let first =
        Host::with_options(&HostOptions::default().cache_dir(Some(cache.path().to_owned())))
            .expect("host");
    let cold = first.load(&path).expect("load");
    assert_eq!(cold.load_source(), Some(sandpipe::LoadSource::Compiled));
    let warm = first.load(&path).expect("load");
    assert_eq!(warm.load_source(), Some(sandpipe::LoadSource::Memory));
    // A new host (as a second `sandpipe run` would be) reads the artifact instead of compiling.
    let second =
        Host::with_options(&HostOptions::default().cache_dir(Some(cache.path().to_owned())))
            .expect("host");
    let disk = second.load(&path).expect("load");
    assert_eq!(disk.load_source(), Some(sandpipe::LoadSource::DiskCache));
    eprintln!(
        "load times: compile {:?}, disk cache {:?}, in-process {:?}",
        cold.load_time(),
        disk.load_time(),
        warm.load_time()
    );
    // And the cached artifact runs.
    let mut s = second
        .start(&disk, &Policy::default(), &opts(Framing::JsonLines))
        .await
        .expect("start");
    s.send(b"[1]").await.expect("send");
    assert_eq!(s.recv().await.expect("recv").as_deref(), Some(&b"[1]"[..]));
}

/// The on-disk index from a file's identity to its sha256: a new host (a new `sandpipe run`)
/// believes it for an unchanged file, so it neither reads nor hashes the file; any change to
/// the identity (here a chmod, which moves ctime) makes it hash the file again.
#[tokio::test]
async fn a_new_host_takes_an_unchanged_files_hash_from_the_disk_index_and_rehashes_a_changed_one() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let cache = tempfile::tempdir().expect("tempdir");
    let files = tempfile::tempdir().expect("tempdir");
    let (a, b) = (files.path().join("a.wasm"), files.path().join("b.wasm"));
    std::fs::copy(plugin("echo-lines", Target::Wasm), &a).expect("copy");
    std::fs::copy(plugin("echo-cbor", Target::Wasm), &b).expect("copy");
    // Older than the racy window, as an installed plugin is.
    for p in [&a, &b] {
        std::fs::File::options()
            .write(true)
            .open(p)
            .and_then(|f| f.set_modified(std::time::SystemTime::now() - Duration::from_secs(3600)))
            .expect("set mtime");
    }
    let host = || {
        Host::with_options(&HostOptions::default().cache_dir(Some(cache.path().to_owned())))
            .expect("host")
    };
    let first = host();
    let (sha_a, sha_b) = (
        first.load(&a).expect("load a").sha256().to_owned(),
        first.load(&b).expect("load b").sha256().to_owned(),
    );
    assert_ne!(sha_a, sha_b);
    let entry = |p: &std::path::Path| {
        let m = std::fs::metadata(p).expect("metadata");
        cache
            .path()
            .join("index")
            .join(format!("{:x}-{:x}", m.dev(), m.ino()))
    };
    let text = std::fs::read_to_string(entry(&b)).expect("b has an index entry");
    assert!(text.trim_end().ends_with(&sha_b), "{text}");

    let again = host().load(&b).expect("load b");
    assert_eq!(again.load_source(), Some(sandpipe::LoadSource::DiskCache));
    assert_eq!(again.sha256(), sha_b);

    // Plant an entry naming a's hash for b's identity: a new host believes it (b was not
    // hashed) and runs a's artifact. This is the cache directory's trust (SECURITY.md).
    std::fs::write(entry(&b), text.replace(&sha_b, &sha_a)).expect("plant");
    let believed = host().load(&b).expect("load b");
    assert_eq!(believed.sha256(), sha_a);

    // A changed identity (chmod moves ctime) is hashed again and re-indexed.
    std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let rehashed = host().load(&b).expect("load b");
    assert_eq!(rehashed.sha256(), sha_b);
    assert_eq!(
        rehashed.load_source(),
        Some(sandpipe::LoadSource::DiskCache)
    );
    let text = std::fs::read_to_string(entry(&b)).expect("b's new entry");
    assert!(text.trim_end().ends_with(&sha_b), "{text}");
}

#[tokio::test]
async fn strict_imports_name_the_offenders() {
    let host = host();
    let p = load(&host, "echo-lines", Target::Wasm);
    assert!(
        p.imports()
            .iter()
            .any(|i| i.starts_with("wasi:cli/stdin@0.2")),
        "{:?}",
        p.imports()
    );
    let policy = Policy::default().imports(sandpipe::ImportPolicy::Strict(vec![
        "wasi:cli/stdin@0.2".into(),
        "wasi:cli/stdout".into(),
    ]));
    match host.start(&p, &policy, &opts(Framing::JsonLines)).await {
        Err(sandpipe::HostError::ImportsRefused { offending }) => {
            assert!(
                offending.iter().any(|o| o.starts_with("wasi:cli/stderr@")),
                "{offending:?}"
            );
            assert!(
                !offending.iter().any(|o| o.starts_with("wasi:cli/stdin@")),
                "{offending:?}"
            );
        }
        other => panic!("expected ImportsRefused, got {other:?}"),
    }
    // Allowing everything it imports lets it run.
    let all: Vec<String> = p.imports().to_vec();
    let policy = Policy::default().imports(sandpipe::ImportPolicy::Strict(all));
    let mut s = host
        .start(&p, &policy, &opts(Framing::JsonLines))
        .await
        .expect("start");
    s.send(b"1").await.expect("send");
    assert_eq!(s.recv().await.expect("recv").as_deref(), Some(&b"1"[..]));
}

#[tokio::test]
async fn wasm_env_is_empty_unless_granted() {
    let host = host();
    let policy = Policy::default()
        .env("GRANTED", "yes")
        .arg("env:GRANTED")
        .arg("env:HOME")
        .arg("env:PATH");
    let mut s = start(&host, "fs", Target::Wasm, &policy, Framing::JsonLines).await;
    let (frames, _) = recv_all(&mut s).await;
    let results: Vec<serde_json::Value> = frames
        .iter()
        .map(|f| serde_json::from_slice(f).expect("json"))
        .collect();
    assert_eq!(results[0]["value"], "yes", "{results:#?}");
    assert_eq!(results[1]["ok"], false, "{results:#?}");
    assert_eq!(results[2]["ok"], false, "{results:#?}");
}

/// True while `pid` exists, zombie or not.
fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn dropping_a_native_session_kills_and_reaps_the_child() {
    let host = host();
    let policy = Policy::default().arg("sleep");
    let s = start(
        &host,
        "sleep-stdin",
        Target::Native,
        &policy,
        Framing::JsonLines,
    )
    .await;
    let pid = s.control().pid().expect("native pid");
    assert!(process_exists(pid));
    drop(s);
    // Reaped, not a zombie: /proc/<pid> disappears only after the wait.
    let mut gone = false;
    for _ in 0..500 {
        if !process_exists(pid) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        gone,
        "pid {pid} still present after the session was dropped"
    );
}

#[tokio::test]
async fn deterministic_mode_gives_identical_clocks_and_random_per_seed() {
    let host = host();
    let run = |seed: u64| {
        let host = &host;
        async move {
            let mut s = start(
                host,
                "clock-random",
                Target::Wasm,
                &Policy::default().deterministic(seed),
                Framing::JsonLines,
            )
            .await;
            let (frames, end) = recv_all(&mut s).await;
            assert!(end.is_ok());
            assert_eq!(s.wait().await, Exit::Exited(0));
            frames.concat()
        }
    };
    let a = run(42).await;
    let b = run(42).await;
    let c = run(43).await;
    assert_eq!(a, b, "same seed, different output");
    assert_ne!(a, c, "another seed gave the same random numbers");
    let v: serde_json::Value = serde_json::from_slice(&a).expect("json");
    // The documented rule: the wall clock starts at 2000-01-01T00:00:00Z and moves 1 ms per
    // read; the monotonic clock moves 1 ms per read.
    assert_eq!(v["wall_ns"], 946_684_800_000_000_000u64);
    assert_eq!(v["mono_ns"], 1_000_000);
    // Without the mode, the clock is real.
    let mut s = start(
        &host,
        "clock-random",
        Target::Wasm,
        &Policy::default(),
        Framing::JsonLines,
    )
    .await;
    let (frames, _) = recv_all(&mut s).await;
    let v: serde_json::Value = serde_json::from_slice(&frames.concat()).expect("json");
    assert!(v["wall_ns"].as_u64().expect("wall") > 1_700_000_000_000_000_000);
}

/// A native program (an interpreter, for a script server) is indexed too: a new host takes an
/// unchanged one's hash from the index instead of reading and hashing it on every start, and
/// hashes it again once it changes.
#[tokio::test]
async fn a_new_host_takes_an_unchanged_native_programs_hash_from_the_disk_index() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let cache = tempfile::tempdir().expect("tempdir");
    let files = tempfile::tempdir().expect("tempdir");
    let program = files.path().join("tool");
    std::fs::write(&program, "#!/bin/sh\ncat\n").expect("write");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::File::options()
        .write(true)
        .open(&program)
        .and_then(|f| f.set_modified(std::time::SystemTime::now() - Duration::from_secs(3600)))
        .expect("set mtime");
    let host = || {
        Host::with_options(
            &HostOptions::default()
                .cache_dir(Some(cache.path().to_owned()))
                .allow_native_unsandboxed(true),
        )
        .expect("host")
    };
    let sha = host().load(&program).expect("load").sha256().to_owned();
    let m = std::fs::metadata(&program).expect("metadata");
    let entry = cache
        .path()
        .join("index")
        .join(format!("{:x}-{:x}", m.dev(), m.ino()));
    let text = std::fs::read_to_string(&entry).expect("the program has an index entry");
    assert!(text.trim_end().ends_with(&sha), "{text}");
    // A planted digest is believed: the new host did not hash the file.
    let planted = "0".repeat(64);
    std::fs::write(&entry, text.replace(&sha, &planted)).expect("plant");
    let believed = host().load(&program).expect("load");
    assert_eq!(believed.kind(), sandpipe::PluginKind::NativeUnsandboxed);
    assert_eq!(believed.sha256(), planted);
    // A changed identity is hashed again.
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    assert_eq!(host().load(&program).expect("load").sha256(), sha);
    // A host that refuses native plugins still refuses an indexed one.
    let refusing =
        Host::with_options(&HostOptions::default().cache_dir(Some(cache.path().to_owned())))
            .expect("host");
    assert!(refusing.load(&program).is_err());
}
