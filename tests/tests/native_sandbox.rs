//! A native plugin in its own namespaces, root and process tree, with a system-call filter:
//! each escape `sandbox-probe` tries from a real child process, against real sockets and
//! processes the test made on the host. These need the kernel to allow the namespaces
//! (`NamespaceSupport::detect`), as it does on CI and the development machine (root);
//! elsewhere they fail on purpose, naming why, rather than pass on a sandbox that is not there.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use sandpipe::{Access, Exit, Host, NamespaceSupport, Policy, Session};
use sandpipe_tests::{Target, plugin};
use serde_json::{Value, json};

mod common;
use common::{host, opts};

use sandpipe_proto::frame::Framing;

const EACCES: i64 = 13;
const ESRCH: i64 = 3;

fn require_namespaces() {
    let support = NamespaceSupport::detect();
    assert!(
        support.is_available(),
        "these tests need namespaces for native plugins: {}",
        support.describe()
    );
}

/// Start the native `sandbox-probe` with `args` under `policy`.
async fn start(host: &Host, policy: Policy, args: &[String]) -> Session {
    require_namespaces();
    let probe = host
        .load(plugin("sandbox-probe", Target::Native))
        .expect("load");
    let policy = args.iter().fold(policy, |p, a| p.arg(a.as_str()));
    host.start(&probe, &policy, &opts(Framing::JsonLines))
        .await
        .expect("start")
}

/// Every frame until EOF, then how the plugin ended.
async fn replies(s: &mut Session) -> (Vec<Value>, Exit) {
    let mut frames = Vec::new();
    while let Ok(Some(frame)) = s.recv().await {
        frames.push(serde_json::from_slice(&frame).expect("a JSON frame"));
    }
    (frames, s.wait().await)
}

/// Run the probe to its end; its frames, each checked to be `op`'s answer in order.
async fn probe(policy: Policy, ops: &[String]) -> Vec<Value> {
    let host = host();
    let mut s = start(&host, policy, ops).await;
    let (frames, exit) = replies(&mut s).await;
    assert_eq!(exit, Exit::Exited(0), "{frames:?} {:?}", s.stderr_tail());
    assert_eq!(frames.len(), ops.len(), "{frames:?}");
    frames
}

/// A process of the test's own, outside any sandbox, with `SECRET` in its environment; it
/// blocks reading its stdin until dropped.
struct Outsider(Child);

impl Outsider {
    fn start() -> Outsider {
        Outsider(
            Command::new("/bin/cat")
                .env("SECRET", "outsider-secret-value")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .expect("cat"),
        )
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Outsider {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_udp_datagram_to_the_hosts_loopback_never_arrives() {
    let listener = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let frames = probe(Policy::default(), &[format!("udp:{addr}")]).await;
    // Sent without error: into the plugin's own loopback, where nobody listens.
    assert_eq!(frames[0]["ok"], json!(true), "{frames:?}");
    // The plugin has exited: anything it sent is already queued. The test's marker must be
    // the first datagram the listener holds.
    let sender = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    sender.send_to(b"marker", addr).expect("send");
    let mut buf = [0u8; 64];
    let (n, _) = listener.recv_from(&mut buf).expect("recv");
    assert_eq!(&buf[..n], b"marker");
}

#[tokio::test]
async fn unix_sockets_are_refused_in_granted_and_other_directories() {
    let hidden = tempfile::tempdir().expect("tempdir");
    let granted = tempfile::tempdir().expect("tempdir");
    let hidden_socket = hidden.path().join("s.sock");
    let granted_socket = granted.path().join("s.sock");
    let _a = std::os::unix::net::UnixListener::bind(&hidden_socket).expect("bind");
    let _b = std::os::unix::net::UnixListener::bind(&granted_socket).expect("bind");
    let policy = Policy::default().preopen(
        granted.path(),
        granted.path().display().to_string(),
        Access::ReadWrite,
    );
    let frames = probe(
        policy,
        &[
            format!("unix:{}", hidden_socket.display()),
            format!("unix:{}", granted_socket.display()),
        ],
    )
    .await;
    for frame in &frames {
        assert_eq!(frame["ok"], json!(false), "{frames:?}");
        assert_eq!(frame["errno"], json!(EACCES), "{frames:?}");
    }
}

#[tokio::test]
async fn a_process_outside_can_be_neither_traced_nor_seen() {
    let outsider = Outsider::start();
    let pid = outsider.pid();
    let frames = probe(
        Policy::default(),
        &[format!("ptrace:{pid}"), format!("signal0:{pid}")],
    )
    .await;
    assert_eq!(frames[0]["ok"], json!(false), "{frames:?}");
    // Not even there: the plugin's PID namespace holds only its own processes.
    assert_eq!(frames[1]["ok"], json!(false), "{frames:?}");
    assert_eq!(frames[1]["errno"], json!(ESRCH), "{frames:?}");
}

#[tokio::test]
async fn proc_shows_only_the_sandbox_and_home_is_out_of_reach() {
    let outsider = Outsider::start();
    let home = tempfile::tempdir().expect("tempdir");
    std::fs::write(home.path().join("secret.txt"), "home-secret").expect("write");
    let granted = home.path().join("granted");
    std::fs::create_dir(&granted).expect("mkdir");
    let home_secret = home.path().join("secret.txt");
    let policy = Policy::default()
        .preopen("/proc", "/proc", Access::ReadOnly)
        .preopen(&granted, granted.display().to_string(), Access::ReadWrite);
    let frames = probe(
        policy,
        &[
            format!("read:/proc/{}/environ", outsider.pid()),
            "read:/proc/self/status".to_owned(),
            format!("read:/proc/self/root{}", home_secret.display()),
            format!("read:/proc/1/root{}", home_secret.display()),
            format!("read:{}/../secret.txt", granted.display()),
        ],
    )
    .await;
    assert_eq!(frames[0]["ok"], json!(false), "{frames:?}");
    // /proc is granted, and it is the sandbox's own: the probe is PID 2 in it.
    assert_eq!(frames[1]["ok"], json!(true), "{frames:?}");
    let status = frames[1]["text"]["start"].as_str().expect("text");
    assert!(status.contains("\nPid:\t2\n"), "{status}");
    for frame in &frames[2..] {
        assert_eq!(frame["ok"], json!(false), "{frames:?}");
    }
    let all = serde_json::to_string(&frames).expect("json");
    assert!(
        !all.contains("secret-value") && !all.contains("home-secret"),
        "{all}"
    );
}

#[tokio::test]
async fn a_dir_is_seen_at_its_guest_path_and_a_single_file_can_be_granted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    std::fs::write(data.join("hello.txt"), "hello").expect("write");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "key = 1").expect("write");
    std::fs::write(dir.path().join("beside.txt"), "beside").expect("write");
    let policy = Policy::default()
        .preopen(&data, "/data", Access::ReadOnly)
        .preopen(&config, "/etc/plugin.toml", Access::ReadOnly);
    let frames = probe(
        policy,
        &[
            "read:/data/hello.txt".to_owned(),
            "read:/etc/plugin.toml".to_owned(),
            format!("read:{}", data.join("hello.txt").display()),
            format!("read:{}", dir.path().join("beside.txt").display()),
            "write:/data/new.txt".to_owned(),
            "write:/etc/plugin.toml".to_owned(),
        ],
    )
    .await;
    assert_eq!(frames[0]["text"]["start"], json!("hello"), "{frames:?}");
    assert_eq!(frames[1]["text"]["start"], json!("key = 1"), "{frames:?}");
    // Only at the guest paths, nothing beside the file, and read-only means read-only.
    for frame in &frames[2..] {
        assert_eq!(frame["ok"], json!(false), "{frames:?}");
    }
    assert!(!data.join("new.txt").exists());
    assert_eq!(std::fs::read_to_string(&config).expect("read"), "key = 1");
}

#[tokio::test]
async fn a_wasm_plugin_is_told_that_only_native_plugins_take_a_single_file() {
    let file = tempfile::NamedTempFile::new().expect("tempfile");
    let host = host();
    let fs = host.load(plugin("fs", Target::Wasm)).expect("load");
    let policy = Policy::default().preopen(file.path(), "/one.txt", Access::ReadOnly);
    let Err(err) = host.start(&fs, &policy, &opts(Framing::JsonLines)).await else {
        panic!("a single file was granted to a wasm plugin");
    };
    let message = err.to_string();
    assert!(
        message.contains("a single file can be granted only to a native plugin"),
        "{message}"
    );
}

/// Start the probe with `op` (`wait` or `term-exit:CODE`), read its `ready` frame (the handler
/// is in place once it is written), send SIGTERM to its group, and return how it ended.
async fn terminated(op: &str) -> Exit {
    let host = host();
    let mut s = start(&host, Policy::default(), &[op.to_owned()]).await;
    let ready: Value =
        serde_json::from_slice(&s.recv().await.expect("recv").expect("ready")).expect("json");
    assert_eq!(ready["op"], json!("ready"), "{ready}");
    // The plugin is PID 2 of its own namespace, below the monitor and PID 1 that relay its end.
    assert_eq!(ready["pid"], json!(2), "{ready}");
    s.control().signal(libc::SIGTERM);
    let (_, exit) = replies(&mut s).await;
    exit
}

#[tokio::test]
async fn a_plugin_handling_sigterm_decides_its_exit_code() {
    assert_eq!(terminated("term-exit:7").await, Exit::Exited(7));
}

#[tokio::test]
async fn a_plugin_not_handling_sigterm_dies_of_it() {
    assert_eq!(
        terminated("wait").await,
        Exit::Killed {
            signal: Some(libc::SIGTERM)
        }
    );
}

#[tokio::test]
async fn exit_codes_pass_through_the_monitor_unchanged() {
    let host = host();
    for code in [0, 1, 42, 255] {
        let mut s = start(
            &host,
            Policy::default(),
            &["pid".to_owned(), format!("exit:{code}")],
        )
        .await;
        let (frames, exit) = replies(&mut s).await;
        assert_eq!(frames[0]["pid"], json!(2), "{frames:?}");
        assert_eq!(exit, Exit::Exited(code));
    }
}

/// The start-up notice a native plugin gets from `sandpipe run` says what is enforced.
#[test]
fn the_start_up_line_names_the_namespaces_and_the_filter() {
    require_namespaces();
    let probe = plugin("sandbox-probe", Target::Native);
    let mut child = Command::new(sandpipe_tests::peers::sandpipe())
        .args(["run", "--framing", "lines"])
        .arg(&probe)
        .arg("pid")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sandpipe");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} is not wasm; running it natively in a sandbox (namespaces: user, mount, pid, ipc, net, uts; seccomp; Landlock ABI",
            Path::new(&probe).display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("NOT sandboxed"), "{stderr}");
}

#[tokio::test]
async fn with_allowed_hosts_the_plugin_reaches_sandpipes_proxy_and_nothing_else() {
    require_namespaces();
    let host = host();
    let fs = host.load(plugin("fs", Target::Native)).expect("load");
    let mut policy = Policy::default();
    policy.net = sandpipe::net::NetPolicy::default()
        .allow("example.com")
        .expect("rule");
    let port = sandpipe::PROXY_PORT;
    for op in [
        "env:HTTP_PROXY".to_owned(),
        "env:all_proxy".to_owned(),
        format!("connect:127.0.0.1:{port}"),
        format!("connect:127.0.0.1:{}", port + 1),
    ] {
        policy = policy.arg(op);
    }
    let mut s = host
        .start(&fs, &policy, &opts(Framing::JsonLines))
        .await
        .expect("start");
    let (frames, exit) = replies(&mut s).await;
    assert_eq!(exit, Exit::Exited(0), "{frames:?}");
    assert_eq!(
        frames[0]["value"],
        json!(format!("http://127.0.0.1:{port}")),
        "{frames:?}"
    );
    assert_eq!(
        frames[1]["value"],
        json!(format!("socks5h://127.0.0.1:{port}")),
        "{frames:?}"
    );
    assert_eq!(frames[2]["ok"], json!(true), "{frames:?}");
    assert_eq!(frames[3]["ok"], json!(false), "{frames:?}");
}
