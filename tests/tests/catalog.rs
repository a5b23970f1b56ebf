//! The adversarial catalog (SECURITY.md): one hostile plugin per row, run as a wasm component
//! and, where the case exists natively, as a native child. Each test shows the row's typed
//! outcome, that frames completed before the failure were delivered, that host memory stayed
//! bounded where the case is about memory, and that the same `Host` still runs a plugin after.
//!
//! Every run sits inside a generous `tokio::time::timeout`, so a regression fails instead of
//! hanging CI. Rows already shown by `tests/tests/sandbox.rs` are not repeated here.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use sandpipe::{Access, Exit, Host, Plugin, Policy, Session, SessionError};
use sandpipe_proto::frame::{FrameError, FrameLimits, Framing};
use sandpipe_tests::Target;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

mod common;
use common::{host, load, opts, recv_all};

/// Far beyond what any case needs; only a hang reaches it.
const HANG: Duration = Duration::from_secs(120);
const MIB: u64 = 1 << 20;

/// Tests that measure this process's memory run alone (write lock); the others share
/// (read lock), so a neighbour's allocation never shows up in a measurement.
static MEMORY_LOCK: RwLock<()> = RwLock::const_new(());

async fn shared() -> RwLockReadGuard<'static, ()> {
    MEMORY_LOCK.read().await
}

async fn exclusive() -> RwLockWriteGuard<'static, ()> {
    MEMORY_LOCK.write().await
}

async fn start(host: &Host, p: &Plugin, policy: &Policy, framing: Framing) -> Session {
    host.start(p, policy, &opts(framing))
        .await
        .expect("start session")
}

/// Run `fut`, failing the test (not hanging it) if it has not finished after [`HANG`].
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(HANG, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no outcome after {HANG:?}: the host hung"),
    }
}

/// After a hostile plugin, the same host still runs a well-behaved one.
async fn assert_host_alive(host: &Host, after: &str) {
    let p = load(host, "echo-lines", Target::Wasm);
    within(after, async {
        let mut s = start(host, &p, &Policy::default(), Framing::JsonLines).await;
        s.send(br#"{"alive":true}"#).await.expect("send");
        assert_eq!(
            s.recv().await.expect("recv").as_deref(),
            Some(&br#"{"alive":true}"#[..]),
            "echo after {after}"
        );
        s.close_stdin().await;
        assert_eq!(s.wait().await, Exit::Exited(0), "echo after {after}");
    })
    .await;
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
}

/// Peak resident memory of this process over a stretch of a test.
struct PeakRss {
    base: u64,
    /// False when the kernel refused to reset the high-water mark; the end sample is used then.
    reset: bool,
}

impl PeakRss {
    /// Reset the kernel's high-water mark (`VmHWM`) to the current RSS and remember it.
    fn start() -> Self {
        let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let base = status_kib("VmRSS:").expect("VmRSS") * 1024;
        PeakRss { base, reset }
    }

    /// How far the peak rose above the start, in bytes.
    fn growth(&self) -> u64 {
        let field = if self.reset { "VmHWM:" } else { "VmRSS:" };
        (status_kib(field).expect("rss") * 1024).saturating_sub(self.base)
    }
}

#[tokio::test]
async fn an_infinite_loop_meets_its_deadline_without_fuel() {
    let _g = shared().await;
    let host = host();
    let limit = Duration::from_millis(500);
    for target in [Target::Wasm, Target::Native] {
        let p = load(&host, "spin", target);
        within("spin", async {
            // No fuel budget: only the wall clock (epoch checks inside the guest) can stop it.
            let policy = Policy::default().deadline(limit);
            let mut s = start(&host, &p, &policy, Framing::JsonLines).await;
            let (frames, end) = recv_all(&mut s).await;
            assert_eq!(frames, vec![br#"{"spinning":true}"#.to_vec()], "{target:?}");
            assert!(end.is_ok(), "{target:?}: {end:?}");
            assert_eq!(
                s.wait().await,
                Exit::DeadlineExceeded { limit },
                "{target:?}"
            );
        })
        .await;
    }
    assert_host_alive(&host, "spin").await;
}

#[tokio::test]
async fn deep_recursion_is_a_typed_trap() {
    let _g = shared().await;
    let host = host();
    // (target, how the plugin recurses, what the trap message must name)
    let cases = [
        // The engine's own stack guard: wasmtime's `Trap::StackOverflow`.
        (Target::Wasm, "frames", "call stack exhausted"),
        (Target::WasmP1, "frames", "call stack exhausted"),
        // Big frames overflow the guest's shadow stack in linear memory first; the stack
        // pointer wraps below address 0 and the next store is out of bounds.
        (Target::Wasm, "locals", "out of bounds memory access"),
        // Natively the guard page faults. Rust's handler reports it and aborts (SIGABRT) when
        // it can find the guard page; under Landlock /proc/self/maps is unreadable, so it
        // cannot, and the fault stays a SIGSEGV. Either is a crash signal: a typed trap.
        (Target::Native, "frames", "killed by signal"),
        (Target::Native, "locals", "killed by signal"),
    ];
    for (target, how, want) in cases {
        let p = load(&host, "stack-overflow", target);
        within("stack-overflow", async {
            let policy = Policy::default().arg(how);
            let mut s = start(&host, &p, &policy, Framing::JsonLines).await;
            let (frames, end) = recv_all(&mut s).await;
            assert_eq!(
                frames,
                vec![br#"{"recursing":true}"#.to_vec()],
                "{target:?} {how}"
            );
            assert!(end.is_ok(), "{target:?} {how}: {end:?}");
            match s.wait().await {
                Exit::Trap {
                    message,
                    stderr_tail,
                } => {
                    assert!(message.contains(want), "{target:?} {how}: {message}");
                    assert!(
                        stderr_tail
                            .iter()
                            .any(|l| l.contains("stack-overflow: recursing")),
                        "{target:?} {how}: {stderr_tail:?}"
                    );
                    if target == Target::Native {
                        assert!(
                            message.contains("SIGABRT") || message.contains("SIGSEGV"),
                            "{target:?} {how}: {message}"
                        );
                    }
                    if target == Target::Native && message.contains("SIGABRT") {
                        assert!(
                            stderr_tail
                                .iter()
                                .any(|l| l.contains("overflowed its stack")),
                            "{target:?} {how}: {stderr_tail:?}"
                        );
                    }
                }
                other => panic!("{target:?} {how}: expected a trap, got {other:?}"),
            }
        })
        .await;
    }
    assert_host_alive(&host, "stack-overflow").await;
}

#[tokio::test]
async fn unbounded_allocation_stops_at_the_cap_and_host_memory_follows_it() {
    let _g = exclusive().await;
    let host = host();
    let cap = 64 * MIB;
    let p = load(&host, "alloc", Target::Wasm);
    let peak = PeakRss::start();
    within("alloc", async {
        let policy = Policy::default().max_memory(Some(cap));
        let mut s = start(&host, &p, &policy, Framing::JsonLines).await;
        let _ = recv_all(&mut s).await;
        assert_eq!(s.wait().await, Exit::MemoryLimit { limit: cap });
    })
    .await;
    let growth = peak.growth();
    eprintln!("alloc under a {cap} byte cap: host peak rss grew {growth} bytes");
    // The guest's linear memory lives in this process: the cap plus a little, never more.
    assert!(growth < cap + 32 * MIB, "peak rss grew {growth} bytes");
    assert_host_alive(&host, "alloc").await;
}

/// A core module that grows its funcref table by `step` elements until `table.grow` refuses
/// (-1), writes `{"table":<size reached>}\n` to stdout through WASI p1 `fd_write`, and then
/// executes `unreachable`, as a guest whose allocation failed would abort.
///
/// Rust has no way to emit `table.grow`, so this one plugin is assembled here.
fn table_bomb(step: u32) -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, ConstExpr, DataSection, EntityType, ExportKind, ExportSection, Function,
        FunctionSection, HeapType, ImportSection, Instruction as I, MemArg, MemorySection,
        MemoryType, Module, RefType, TableSection, TableType, TypeSection, ValType,
    };
    // Linear memory: three iovecs at 0, `nwritten` at 32, `{"table":` at 64, `}\n` at 80,
    // and the decimal digits written backwards from 106.
    const PREFIX: u32 = 64;
    const SUFFIX: u32 = 80;
    const DIGITS_END: i32 = 106;
    let mut types = TypeSection::new();
    types.ty().function(
        [ValType::I32, ValType::I32, ValType::I32, ValType::I32],
        [ValType::I32],
    );
    types.ty().function([], []);
    let mut imports = ImportSection::new();
    imports.import(
        "wasi_snapshot_preview1",
        "fd_write",
        EntityType::Function(0),
    );
    let mut functions = FunctionSection::new();
    functions.function(1);
    let mut tables = TableSection::new();
    tables.table(TableType {
        element_type: RefType::FUNCREF,
        table64: false,
        minimum: 0,
        maximum: None,
        shared: false,
    });
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0);
    exports.export("_start", ExportKind::Func, 1);

    let store = |offset| MemArg {
        offset,
        align: 2,
        memory_index: 0,
    };
    let (n, p) = (0, 1); // locals: the table size, then the digit cursor
    let mut f = Function::new([(2, ValType::I32)]);
    let body = [
        // Grow until refused.
        I::Block(wasm_encoder::BlockType::Empty),
        I::Loop(wasm_encoder::BlockType::Empty),
        I::RefNull(HeapType::FUNC),
        I::I32Const(step as i32),
        I::TableGrow(0),
        I::I32Const(-1),
        I::I32Eq,
        I::BrIf(1),
        I::Br(0),
        I::End,
        I::End,
        // Size reached, in decimal.
        I::TableSize(0),
        I::LocalSet(n),
        I::I32Const(DIGITS_END),
        I::LocalSet(p),
        I::Loop(wasm_encoder::BlockType::Empty),
        I::LocalGet(p),
        I::I32Const(1),
        I::I32Sub,
        I::LocalTee(p),
        I::LocalGet(n),
        I::I32Const(10),
        I::I32RemU,
        I::I32Const(i32::from(b'0')),
        I::I32Add,
        I::I32Store8(MemArg {
            offset: 0,
            align: 0,
            memory_index: 0,
        }),
        I::LocalGet(n),
        I::I32Const(10),
        I::I32DivU,
        I::LocalTee(n),
        I::BrIf(0),
        I::End,
        // iovecs: prefix, digits, suffix.
        I::I32Const(0),
        I::I32Const(PREFIX as i32),
        I::I32Store(store(0)),
        I::I32Const(0),
        I::I32Const(9),
        I::I32Store(store(4)),
        I::I32Const(0),
        I::LocalGet(p),
        I::I32Store(store(8)),
        I::I32Const(0),
        I::I32Const(DIGITS_END),
        I::LocalGet(p),
        I::I32Sub,
        I::I32Store(store(12)),
        I::I32Const(0),
        I::I32Const(SUFFIX as i32),
        I::I32Store(store(16)),
        I::I32Const(0),
        I::I32Const(2),
        I::I32Store(store(20)),
    ];
    // One fd_write(stdout, iov, 1, &nwritten) per iovec: WASI may write only the first
    // buffer of a vector (a short write), but each of these few bytes fits the pipe whole.
    let write_each = [0, 8, 16].into_iter().flat_map(|iov| {
        [
            I::I32Const(1),
            I::I32Const(iov),
            I::I32Const(1),
            I::I32Const(32),
            I::Call(0),
            I::Drop,
        ]
    });
    let body: Vec<I<'_>> = body
        .into_iter()
        .chain(write_each)
        // Then crash, as a guest whose allocation failed aborts.
        .chain([I::Unreachable, I::End])
        .collect();
    for i in &body {
        f.instruction(i);
    }
    let mut code = CodeSection::new();
    code.function(&f);
    let mut data = DataSection::new();
    data.active(
        0,
        &ConstExpr::i32_const(PREFIX as i32),
        br#"{"table":"#.iter().copied(),
    );
    data.active(
        0,
        &ConstExpr::i32_const(SUFFIX as i32),
        b"}\n".iter().copied(),
    );

    let mut module = Module::new();
    module
        .section(&types)
        .section(&imports)
        .section(&functions)
        .section(&tables)
        .section(&memories)
        .section(&exports)
        .section(&code)
        .section(&data);
    module.finish()
}

#[tokio::test]
async fn table_growth_is_refused_at_the_store_cap() {
    let _g = exclusive().await;
    let host = host();
    let dir = tempfile::tempdir().expect("tempdir");
    // (growth step, table size when the limiter refuses). The sandbox caps all tables of a
    // store at 1 << 20 elements (`MAX_TABLE_ELEMENTS` in host/src/run/sandbox/mod.rs).
    let cases: [(u32, u64); 2] = [(1 << 16, 1 << 20), (i32::MAX as u32, 0)];
    for (step, reached) in cases {
        let path = dir.path().join(format!("table-bomb-{step}.wasm"));
        std::fs::write(&path, table_bomb(step)).expect("write module");
        let p = host.load(&path).expect("load table bomb");
        let peak = PeakRss::start();
        within("table bomb", async {
            let mut s = start(&host, &p, &Policy::default(), Framing::JsonLines).await;
            let (frames, end) = recv_all(&mut s).await;
            let exit = s.wait().await;
            assert_eq!(
                frames,
                vec![format!(r#"{{"table":{reached}}}"#).into_bytes()],
                "step {step}: {end:?} {exit:?}"
            );
            assert!(end.is_ok(), "step {step}: {end:?}");
            match exit {
                Exit::Trap { message, .. } => {
                    assert!(message.contains("unreachable"), "step {step}: {message}")
                }
                other => panic!("step {step}: expected the guest's trap, got {other:?}"),
            }
        })
        .await;
        let growth = peak.growth();
        eprintln!("table bomb, step {step}: host peak rss grew {growth} bytes");
        // 1 << 20 funcref slots are 8 MiB; a refused 2^31-element request allocates nothing.
        assert!(
            growth < 32 * MIB,
            "step {step}: peak rss grew {growth} bytes"
        );
    }
    assert_host_alive(&host, "table bomb").await;
}

#[tokio::test]
async fn a_100_mib_frame_is_refused_without_buffering_it() {
    let _g = exclusive().await;
    let host = host();
    let limit = FrameLimits::default().max_frame_bytes;
    assert_eq!(limit, 16 << 20, "the documented default");
    let size = 100 << 20;
    for target in [Target::Wasm, Target::Native] {
        let p = load(&host, "huge-frame", target);
        for (framing, name) in [
            (Framing::JsonLines, "lines"),
            (Framing::ContentLength, "content-length"),
        ] {
            let peak = PeakRss::start();
            within("huge-frame", async {
                let policy = Policy::default().arg(name).arg(size.to_string());
                let mut s = start(&host, &p, &policy, framing).await;
                let (frames, end) = recv_all(&mut s).await;
                assert_eq!(frames, vec![br#"{"ok":1}"#.to_vec()], "{target:?} {name}");
                match end {
                    Err(SessionError::BadFrameFromPlugin {
                        error: FrameError::TooLarge { limit: l, got },
                        ..
                    }) => {
                        assert_eq!(l, limit, "{target:?} {name}");
                        assert!(got > limit, "{target:?} {name}: {got}");
                        if framing == Framing::ContentLength {
                            // Refused from the header alone, before any of the body.
                            assert_eq!(got, size, "{target:?} {name}");
                        }
                    }
                    other => panic!("{target:?} {name}: expected TooLarge, got {other:?}"),
                }
                // The plugin is left blocked on a full pipe; the caller ends it.
                s.kill();
                assert!(
                    matches!(s.wait().await, Exit::Killed { .. }),
                    "{target:?} {name}"
                );
            })
            .await;
            let growth = peak.growth();
            eprintln!("100 MiB frame, {target:?} {name}: host peak rss grew {growth} bytes");
            assert!(
                growth < 48 * MIB,
                "{target:?} {name}: peak rss grew {growth} bytes"
            );
        }
    }
    assert_host_alive(&host, "huge-frame").await;
}

#[tokio::test]
async fn a_slow_drip_assembles_into_whole_frames() {
    let _g = shared().await;
    let host = host();
    for target in [Target::Wasm, Target::Native] {
        let p = load(&host, "drip", target);
        within("drip", async {
            let policy = Policy::default().arg("2");
            let mut s = start(&host, &p, &policy, Framing::JsonLines).await;
            let (frames, end) = recv_all(&mut s).await;
            assert_eq!(
                frames,
                vec![br#"{"drip":0}"#.to_vec(), br#"{"drip":1}"#.to_vec()],
                "{target:?}"
            );
            assert!(end.is_ok(), "{target:?}: {end:?}");
            assert_eq!(s.wait().await, Exit::Exited(0), "{target:?}");
        })
        .await;
    }
}

#[tokio::test]
async fn a_slow_drip_under_a_deadline_keeps_its_complete_frames() {
    let _g = shared().await;
    let host = host();
    // One frame takes 11 bytes x 100 ms = 1.1 s to drip.
    let limit = Duration::from_secs(3);
    for target in [Target::Wasm, Target::Native] {
        let p = load(&host, "drip", target);
        within("drip forever", async {
            let policy = Policy::default().arg("forever").deadline(limit);
            let mut s = start(&host, &p, &policy, Framing::JsonLines).await;
            let (frames, end) = recv_all(&mut s).await;
            // Not a speed assertion: 3 s leave room for 2 frames, and one is asked for.
            assert!(
                !frames.is_empty(),
                "{target:?}: no frame before the deadline"
            );
            for (i, f) in frames.iter().enumerate() {
                assert_eq!(f, format!(r#"{{"drip":{i}}}"#).as_bytes(), "{target:?}");
            }
            // The frame being dripped when the deadline hit is reported as cut, never
            // delivered half.
            match end {
                Ok(()) => {}
                Err(SessionError::BadFrameFromPlugin {
                    error: FrameError::Truncated { got, .. },
                    ..
                }) => assert!(got < br#"{"drip":0}"#.len() + 2, "{target:?}: {got}"),
                Err(other) => panic!("{target:?}: {other:?}"),
            }
            assert_eq!(
                s.wait().await,
                Exit::DeadlineExceeded { limit },
                "{target:?}"
            );
        })
        .await;
    }
    assert_host_alive(&host, "drip").await;
}

#[tokio::test]
async fn a_stderr_flood_is_drained_into_a_bounded_tail() {
    let _g = exclusive().await;
    let host = host();
    // Many times the pipe and the tail; small enough that a debug build drains it quickly.
    let flood_mib: u64 = 8;
    for target in [Target::Wasm, Target::Native] {
        let p = load(&host, "stderr-flood", target);
        let peak = PeakRss::start();
        within("stderr-flood", async {
            let policy = Policy::default().arg(flood_mib.to_string());
            let mut s = start(&host, &p, &policy, Framing::JsonLines).await;
            let (frames, end) = recv_all(&mut s).await;
            assert_eq!(frames, vec![br#"{"done":true}"#.to_vec()], "{target:?}");
            assert!(end.is_ok(), "{target:?}: {end:?}");
            assert_eq!(s.wait().await, Exit::Exited(0), "{target:?}");
            let tail = s.stderr_tail();
            // The default tail: 20 lines, each cut at 1 KiB; the last line is the plugin's last.
            assert!(tail.len() <= 20, "{target:?}: {} lines kept", tail.len());
            assert!(
                tail.iter().all(|l| l.len() <= 1024),
                "{target:?}: a kept line is longer than 1 KiB"
            );
            assert_eq!(
                tail.last().map(String::as_str),
                Some("stderr-flood: last line"),
                "{target:?}"
            );
        })
        .await;
        let growth = peak.growth();
        eprintln!("{flood_mib} MiB stderr flood, {target:?}: host peak rss grew {growth} bytes");
        assert!(
            growth < 16 * MIB,
            "{target:?}: peak rss grew {growth} bytes"
        );
    }
    assert_host_alive(&host, "stderr-flood").await;
}

/// One `fs` plugin result per operation, in order.
async fn fs_probe(host: &Host, policy: Policy) -> Vec<serde_json::Value> {
    let p = load(host, "fs", Target::Wasm);
    within("fs", async {
        let mut s = start(host, &p, &policy, Framing::JsonLines).await;
        let (frames, end) = recv_all(&mut s).await;
        assert!(end.is_ok(), "{end:?}");
        assert_eq!(s.wait().await, Exit::Exited(0));
        frames
            .iter()
            .map(|f| serde_json::from_slice(f).expect("json"))
            .collect()
    })
    .await
}

fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

#[tokio::test]
async fn path_escapes_and_symlinks_out_of_a_preopen_are_refused() {
    let _g = shared().await;
    let host = host();
    let root = tempfile::tempdir().expect("tempdir");
    let outside = root.path().join("outside");
    let data = root.path().join("data");
    std::fs::create_dir_all(data.join("sub")).expect("mkdir");
    std::fs::create_dir(&outside).expect("mkdir");
    let secret = outside.join("secret.txt");
    std::fs::write(&secret, "secret").expect("write");
    std::fs::write(data.join("inside.txt"), "inside").expect("write");
    // Links that leave the preopen: absolute, relative, and to a directory.
    symlink(&secret, &data.join("abs-link"));
    symlink(Path::new("../outside/secret.txt"), &data.join("rel-link"));
    symlink(&outside, &data.join("dir-link"));
    // A link that stays inside, as a control: symlinks are not refused as such.
    symlink(Path::new("inside.txt"), &data.join("inner-link"));

    let ops = [
        // (operation, allowed, error kind when refused)
        ("read:/data/inside.txt".to_owned(), true, ""),
        ("read:/data/inner-link".to_owned(), true, ""),
        (
            "read:/data/../outside/secret.txt".to_owned(),
            false,
            "PermissionDenied",
        ),
        (
            "read:/data/sub/../../outside/secret.txt".to_owned(),
            false,
            "PermissionDenied",
        ),
        ("read:/data/abs-link".to_owned(), false, "PermissionDenied"),
        ("read:/data/rel-link".to_owned(), false, "PermissionDenied"),
        (
            "read:/data/dir-link/secret.txt".to_owned(),
            false,
            "PermissionDenied",
        ),
        ("write:/data/abs-link".to_owned(), false, "PermissionDenied"),
        (
            "write:/data/dir-link/planted.txt".to_owned(),
            false,
            "PermissionDenied",
        ),
        (
            "mkdir:/data/dir-link/planted".to_owned(),
            false,
            "PermissionDenied",
        ),
        ("list:/data/dir-link".to_owned(), false, "PermissionDenied"),
        // Absolute paths resolve only through preopens: the host's own paths do not exist.
        (format!("read:{}", secret.display()), false, "NotFound"),
        ("read:/etc/passwd".to_owned(), false, "NotFound"),
        ("list:/".to_owned(), false, "NotFound"),
        // No current directory is granted either.
        ("read:inside.txt".to_owned(), false, "NotFound"),
    ];
    let mut policy = Policy::default().preopen(&data, "/data", Access::ReadWrite);
    for (op, _, _) in &ops {
        policy = policy.arg(op.clone());
    }
    let results = fs_probe(&host, policy).await;
    assert_eq!(results.len(), ops.len(), "{results:#?}");
    for ((op, allowed, kind), r) in ops.iter().zip(&results) {
        assert_eq!(r["ok"], *allowed, "{op}: {r}");
        if !allowed {
            assert_eq!(r["kind"], *kind, "{op}: {r}");
        }
    }
    // Nothing leaked out: the outside directory is as it was.
    assert_eq!(std::fs::read_to_string(&secret).expect("read"), "secret");
    let mut left: Vec<_> = std::fs::read_dir(&outside)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    left.sort();
    assert_eq!(left, vec![std::ffi::OsString::from("secret.txt")]);
    assert_host_alive(&host, "fs escapes").await;
}

#[tokio::test]
async fn a_partial_frame_then_exit_reports_the_cut_frame_and_the_code() {
    let _g = shared().await;
    let host = host();
    for target in [Target::Wasm, Target::WasmP1, Target::Native] {
        let p = load(&host, "partial-exit", target);
        for code in [0, 5] {
            within("partial-exit", async {
                let policy = Policy::default().arg(code.to_string());
                let mut s = start(&host, &p, &policy, Framing::JsonLines).await;
                let (frames, end) = recv_all(&mut s).await;
                assert_eq!(frames, vec![br#"{"id":1}"#.to_vec()], "{target:?} {code}");
                match end {
                    Err(SessionError::BadFrameFromPlugin {
                        error: FrameError::Truncated { got, .. },
                        ..
                    }) => assert_eq!(got, br#"{"id":2,"res"#.len(), "{target:?} {code}"),
                    other => panic!("{target:?} {code}: expected Truncated, got {other:?}"),
                }
                // The error repeats: the stream stays failed, it does not resync.
                assert!(
                    matches!(
                        s.recv().await,
                        Err(SessionError::BadFrameFromPlugin {
                            error: FrameError::Truncated { .. },
                            ..
                        })
                    ),
                    "{target:?} {code}"
                );
                assert_eq!(s.wait().await, Exit::Exited(code), "{target:?} {code}");
            })
            .await;
        }
    }
}

#[tokio::test]
async fn a_computing_plugin_that_ignores_shutdown_is_killed_after_grace() {
    let _g = shared().await;
    let host = host();
    for target in [Target::Wasm, Target::Native] {
        let p = load(&host, "spin", target);
        within("spin shutdown", async {
            // No fuel, no deadline: only the shutdown escalation can end it.
            let s = start(&host, &p, &Policy::default(), Framing::JsonLines).await;
            let exit = s.shutdown(Duration::from_millis(200)).await;
            match target {
                // Not interruptible by signals: the epoch yield lets the kill land.
                Target::Wasm => assert_eq!(exit, Exit::Killed { signal: None }),
                // std does not catch SIGTERM, so the escalation's SIGTERM ends the spinner.
                _ => assert_eq!(exit, Exit::Killed { signal: Some(15) }),
            }
        })
        .await;
    }
    // A native plugin that ignores SIGTERM too: the escalation ends in SIGKILL.
    let sh = Plugin::native_unsandboxed("/bin/sh").expect("/bin/sh");
    within("sh ignoring SIGTERM", async {
        let policy = Policy::default()
            .arg("-c")
            .arg("trap '' TERM; while :; do :; done");
        let s = start(&host, &sh, &policy, Framing::JsonLines).await;
        let exit = s.shutdown(Duration::from_millis(200)).await;
        assert_eq!(exit, Exit::Killed { signal: Some(9) });
    })
    .await;
    assert_host_alive(&host, "spin shutdown").await;
}
