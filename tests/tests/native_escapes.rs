//! Ways out of a native plugin's sandbox, each tried by a real program as an attacker would:
//! `sandbox-probe` (io_uring, vsock, memfd, SysV shared memory, threads, processes, planted
//! symlinks), a shell script, CPython. Each attack first runs directly, where it must succeed
//! (so the test can fail at all), then under `sandpipe run`, where it must not. And the grants
//! and paths real peers use (`--dir /tmp`, `..`, a pyenv shim), which must work.
//!
//! These need what CI and the development machines have (KERNEL-NOTES.md): namespaces, a
//! writable cgroup hierarchy with the memory and pids controllers, vsock, pyenv. Where one is
//! missing a test fails naming it, rather than pass on a sandbox that is not there.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sandpipe_tests::cli::{path, run_command, text};
use sandpipe_tests::{Target, peers};
use serde_json::Value;

const EPERM: i64 = 1;
const EACCES: i64 = 13;
const EROFS: i64 = 30;
const EAFNOSUPPORT: i64 = 97;

fn probe() -> String {
    path("sandbox-probe", Target::Native)
}

fn frames(out: &Output) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

/// The probe run directly, with `ops`: it must end well.
fn direct(ops: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(probe());
    cmd.args(ops);
    let out = run_command(cmd, b"");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let frames = frames(&out);
    assert_eq!(frames.len(), ops.len(), "{frames:?}");
    frames
}

/// `sandpipe run --framing lines FLAGS PROBE OPS`, in `cwd` when given.
fn sandboxed(flags: &[&str], ops: &[&str], cwd: Option<&Path>) -> (Vec<Value>, Output) {
    let mut cmd = Command::new(peers::sandpipe());
    cmd.args(["run", "--framing", "lines"])
        .args(flags)
        .arg(probe())
        .args(ops);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let out = run_command(cmd, b"");
    (frames(&out), out)
}

/// The probe's frames under `sandpipe run`, which must end well.
fn sandboxed_ok(flags: &[&str], ops: &[&str]) -> Vec<Value> {
    let (frames, out) = sandboxed(flags, ops, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(frames.len(), ops.len(), "{frames:?}");
    frames
}

fn assert_refused(frame: &Value, errno: i64) {
    assert_eq!(frame["ok"], false, "{frame}");
    assert_eq!(frame["errno"], errno, "{frame}");
}

#[test]
fn io_uring_cannot_connect_to_a_unix_socket_in_a_grant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("service.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let op = format!("uring-unix:{}", socket.display());
    let plain = format!("unix:{}", socket.display());

    let outside = direct(&[&op, &plain]);
    assert_eq!(outside[0]["ok"], true, "{outside:?}");
    assert_eq!(outside[1]["ok"], true, "{outside:?}");

    let grant = format!("{}:ro", dir.path().display());
    let inside = sandboxed_ok(&["--dir", &grant], &[&op, &plain]);
    assert_refused(&inside[0], EPERM);
    assert_refused(&inside[1], EACCES);
}

#[test]
fn vsock_and_raw_packet_sockets_are_not_there() {
    // 40 AF_VSOCK (the hypervisor's services), 17 AF_PACKET; 16 AF_NETLINK (route) stays.
    let ops = ["socket:40", "vsock-listen:5000", "socket:17", "socket:16"];
    let outside = direct(&ops);
    assert!(
        outside.iter().all(|f| f["ok"] == true),
        "this machine has no vsock or raw sockets to refuse: {outside:?}"
    );
    let inside = sandboxed_ok(&[], &ops);
    for frame in &inside[..3] {
        assert_refused(frame, EAFNOSUPPORT);
    }
    assert_eq!(inside[3]["ok"], true, "{inside:?}");
}

/// The start-up line must say a cgroup is in force, or these tests test the watch instead.
fn assert_cgroup(out: &Output) {
    let stderr = text(&out.stderr);
    assert!(stderr.contains("; cgroup v"), "no cgroup here: {stderr}");
}

#[test]
fn a_gibibyte_in_a_memfd_is_counted_against_the_memory_cap() {
    let outside = direct(&["memfd:1024"]);
    assert_eq!(outside[0]["bytes"], 1u64 << 30, "{outside:?}");

    assert_stopped_at_64_mib(&["memfd:1024"]);
}

/// The probe with `ops` under a 64 MiB cap, where the cgroup holds it: status 122 and the
/// memory limit's message.
fn assert_stopped_at_64_mib(ops: &[&str]) {
    let (frames, out) = sandboxed(&["--max-memory", "64MiB"], ops, None);
    let stderr = text(&out.stderr);
    assert_cgroup(&out);
    assert_eq!(out.status.code(), Some(122), "{frames:?} {stderr}");
    assert!(stderr.contains("memory limit of 64.0 MiB"), "{stderr}");
}

#[test]
#[allow(unsafe_code)]
fn a_gibibyte_of_detached_shared_memory_is_counted_against_the_memory_cap() {
    let outside = direct(&["shm:1024"]);
    assert_eq!(outside[0]["ok"], true, "{outside:?}");
    let id = outside[0]["id"].as_i64().expect("id") as libc::c_int;
    // SAFETY: removing the segment the probe left; shmctl takes an id and a null pointer.
    let removed = unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
    assert_eq!(
        removed, 0,
        "the probe's segment {id} outlived it, as it should outside"
    );

    assert_stopped_at_64_mib(&["shm:1024"]);
}

#[test]
fn threads_and_processes_stop_at_max_processes() {
    let outside = direct(&["threads:2000", "procs:2000"]);
    assert_eq!(outside[0]["made"], 2000, "{outside:?}");
    assert_eq!(outside[1]["made"], 2000, "{outside:?}");

    let (frames, out) = sandboxed(
        &["--max-processes", "256"],
        &["threads:2000", "procs:2000"],
        None,
    );
    assert_cgroup(&out);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for frame in &frames {
        let made = frame["made"].as_u64().expect("made");
        // The probe itself is one of the 256.
        assert!(made < 256, "{frames:?}");
    }
}

/// Files named `core` or `core.*` in `dir`.
fn cores(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "core" || n.starts_with("core."))
        })
        .collect()
}

/// `cmd` with `ulimit -c unlimited`.
#[allow(unsafe_code)]
fn with_core_dumps(cmd: &mut Command) -> &mut Command {
    // SAFETY: setrlimit and signal in the child before exec, on values on its stack.
    unsafe {
        cmd.pre_exec(|| {
            let unlimited = libc::rlimit {
                rlim_cur: libc::RLIM_INFINITY,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_CORE, &unlimited) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // An ignored signal stays ignored across exec, and a job a non-interactive shell
            // starts in the background (`cmd &`, nohup, some CI runners) ignores SIGQUIT: the
            // test is of SIGQUIT's default action, so the child gets it back.
            if libc::signal(libc::SIGQUIT, libc::SIG_DFL) == libc::SIG_ERR {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

#[test]
#[allow(unsafe_code)]
fn sandpipe_killed_by_sigquit_leaves_no_core_file_with_its_secrets() {
    // Outside: a process ended by SIGQUIT under `ulimit -c unlimited` leaves a core here.
    let control = tempfile::tempdir().expect("tempdir");
    let status = with_core_dumps(
        Command::new("/bin/sh")
            .args(["-c", "kill -QUIT $$"])
            .current_dir(control.path()),
    )
    .status()
    .expect("sh");
    assert!(
        !cores(control.path()).is_empty(),
        "this machine writes no core file in the working directory ({status}): see kernel.core_pattern"
    );

    // `sandpipe call` (no signal handler of its own) with a secret in its environment, its
    // working directory granted to a plugin that waits; SIGQUIT once the plugin runs.
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = dir.path().join("wait.sh");
    std::fs::write(&plugin, "#!/bin/sh\n: > \"$1\"\nexec /bin/sleep 600\n").expect("write");
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let started = dir.path().join("started");
    let mut cmd = Command::new(peers::sandpipe());
    cmd.args([
        "call",
        "--protocol",
        "jsonrpc",
        "--method",
        "m",
        "--dir",
        ".",
    ])
    .arg(&plugin)
    .arg(&started)
    .current_dir(dir.path())
    .env(
        "SANDPIPE_TEST_SECRET",
        "a-secret-sandpipe-keeps-from-the-plugin",
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut child = with_core_dumps(&mut cmd).spawn().expect("sandpipe");
    // The plugin is running once it made the file (a bounded wait for that, not a delay).
    for _ in 0..6000 {
        if started.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(started.exists(), "the plugin never started");
    // SAFETY: kill takes integers; the pid is our child's, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGQUIT) };
    let status = child.wait().expect("wait");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGQUIT),
        "{status}"
    );
    assert!(
        !std::os::unix::process::ExitStatusExt::core_dumped(&status),
        "{status}"
    );
    assert_eq!(cores(dir.path()), Vec::<PathBuf>::new());
}

/// Everything written to a terminal by `cmd` with its stderr on it (stdout to /dev/null).
#[allow(unsafe_code)]
fn stderr_on_a_terminal(mut cmd: Command) -> Vec<u8> {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors; the null pointers ask for no name, termios or
    // window size.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are new and ours alone.
    let (mut master, slave) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave))
        .spawn()
        .expect("spawn");
    drop(cmd);
    let mut seen = Vec::new();
    // Until the last holder of the terminal's other side is gone (EIO).
    let _ = master.read_to_end(&mut seen);
    child.wait().expect("wait");
    seen
}

#[test]
fn escape_sequences_on_stderr_reach_a_terminal_quoted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("osc.sh");
    // A window title and OSC 52, which writes the clipboard of the terminal's user.
    std::fs::write(
        &script,
        "#!/bin/sh\nprintf 'hello\\033]0;pwned\\007 \\033]52;c;cHduZWQ=\\007\\n' >&2\n",
    )
    .expect("write");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");

    let outside = stderr_on_a_terminal(Command::new(&script));
    let osc52 = b"\x1b]52;c;";
    assert!(
        outside.windows(osc52.len()).any(|w| w == osc52),
        "{:?}",
        text(&outside)
    );

    let mut cmd = Command::new(peers::sandpipe());
    cmd.arg("run").arg(&script).env_remove("SANDPIPE_LOG");
    let inside = stderr_on_a_terminal(cmd);
    let shown = text(&inside);
    assert!(!inside.windows(2).any(|w| w == b"\x1b]"), "{shown:?}");
    assert!(
        shown.contains(r"hello\x1b]0;pwned\x07 \x1b]52;c;cHduZWQ=\x07"),
        "{shown:?}"
    );
}

#[test]
fn a_grant_of_tmp_itself_works_below_it_read_only_and_writable() {
    let below = tempfile::tempdir_in("/tmp").expect("tempdir");
    std::fs::write(below.path().join("existing"), "hi").expect("write");
    let new_below = below.path().join("new");
    let new_top = PathBuf::from(format!("/tmp/sandpipe-test-{}", std::process::id()));
    let write_below = format!("write:{}", new_below.display());
    let write_top = format!("write:{}", new_top.display());
    let read = format!("read:{}", below.path().join("existing").display());

    let rw = sandboxed_ok(&["--dir", "/tmp"], &[&write_below, &write_top, &read]);
    assert!(rw.iter().all(|f| f["ok"] == true), "{rw:?}");
    assert_eq!(std::fs::read(&new_below).expect("written"), b"sandpipe");
    assert_eq!(std::fs::read(&new_top).expect("written"), b"sandpipe");
    std::fs::remove_file(&new_top).expect("rm");

    let ro = sandboxed_ok(&["--dir", "/tmp:ro"], &[&read, &write_below]);
    assert_eq!(ro[0]["ok"], true, "{ro:?}");
    assert_refused(&ro[1], EROFS);

    let var_tmp = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let write_var = format!("write:{}", var_tmp.path().join("f").display());
    let var = sandboxed_ok(&["--dir", "/var/tmp"], &[&write_var]);
    assert_eq!(var[0]["ok"], true, "{var:?}");
}

#[test]
fn a_grant_of_the_whole_root_is_the_root() {
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let file = dir.path().join("written");
    let write = format!("write:{}", file.display());
    let ro = sandboxed_ok(&["--dir", "/:ro"], &["read:/etc/passwd", &write]);
    assert_eq!(ro[0]["ok"], true, "{ro:?}");
    assert_refused(&ro[1], EROFS);
    let rw = sandboxed_ok(&["--dir", "/"], &[&write, "pid"]);
    assert_eq!(rw[0]["ok"], true, "{rw:?}");
    assert_eq!(std::fs::read(&file).expect("written"), b"sandpipe");
    // Still its own PID namespace and /proc.
    assert_eq!(rw[1]["pid"], 2, "{rw:?}");
}

#[test]
fn the_working_directory_inside_a_grant_is_the_grant() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("input"), "in").expect("write");
    let (frames, out) = sandboxed(
        &["--dir", "."],
        &["read:input", "write:output"],
        Some(dir.path()),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(frames.iter().all(|f| f["ok"] == true), "{frames:?}");
    assert_eq!(
        std::fs::read(dir.path().join("output")).expect("written"),
        b"sandpipe"
    );
    // The start-up line names the grant as resolved, not as typed.
    let real = dir.path().canonicalize().expect("canonical");
    assert!(
        text(&out.stderr).contains(&format!("; granted: {} (rw);", real.display())),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_symlink_planted_in_one_run_does_not_redirect_the_next_runs_grant() {
    let root = tempfile::tempdir().expect("tempdir");
    let work = root.path().join("work");
    let secret = root.path().join("host-secrets");
    std::fs::create_dir_all(&work).expect("mkdir");
    std::fs::create_dir_all(&secret).expect("mkdir");
    std::fs::write(secret.join("key"), "hunter2").expect("write");
    let plant = format!("symlink:work/config={}", secret.display());

    // Run 1: the plugin may write to ./work, and plants ./work/config -> the secrets.
    let (frames, out) = sandboxed(&["--dir", "work"], &[&plant], Some(root.path()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(frames[0]["ok"], true, "{frames:?}");
    // Outside, the link leads to the secret.
    assert_eq!(
        std::fs::read_to_string(work.join("config/key")).expect("through the link"),
        "hunter2"
    );

    // Run 2: a grant of ./work/config, read-only, must not become the secrets.
    let (frames, out) = sandboxed(
        &["--dir", "work/config:ro"],
        &["read:work/config/key"],
        Some(root.path()),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{frames:?} {stderr}");
    assert!(frames.is_empty(), "{frames:?}");
    assert!(stderr.contains("is a symbolic link to"), "{stderr}");
    assert!(
        stderr.contains(&format!("--dir {}", secret.display())),
        "{stderr}"
    );
}

#[test]
fn pid_1_shows_no_host_path_of_a_grant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let grant = format!("{}::/data", dir.path().display());
    // Outside: a process's command line is there for anyone who can read its /proc.
    let outside = direct(&["read:/proc/self/cmdline"]);
    assert!(
        outside[0]["text"]["start"]
            .as_str()
            .is_some_and(|t| t.contains("read:/proc/self/cmdline")),
        "{outside:?}"
    );
    let inside = sandboxed_ok(
        &["--dir", "/proc:ro", "--dir", &grant],
        &["read:/proc/1/cmdline"],
    );
    assert_eq!(inside[0]["ok"], true, "{inside:?}");
    let shown = inside[0]["text"]["start"].as_str().expect("text");
    assert!(
        !shown.contains(&dir.path().display().to_string()),
        "{shown:?}"
    );
}

/// `PROGRAM ARGS` run directly and under `sandpipe run` (raw stdio) in `cwd`: the same output.
fn same_output(cwd: &Path, program: &str, args: &[&str]) -> String {
    let outside = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("direct");
    assert!(outside.status.success(), "{}", text(&outside.stderr));
    let mut cmd = Command::new(peers::sandpipe());
    cmd.arg("run").arg(program).args(args).current_dir(cwd);
    let inside = run_command(cmd, b"");
    assert!(inside.status.success(), "{}", text(&inside.stderr));
    assert_eq!(text(&inside.stdout), text(&outside.stdout));
    text(&inside.stdout)
}

#[test]
fn a_program_named_through_dot_dot_runs_as_in_a_shell() {
    let venv = peers::python_venv();
    let beside = tempfile::tempdir_in(venv.parent().expect("peers dir")).expect("tempdir");
    let name = venv.file_name().expect("venv name").to_string_lossy();
    let program = format!("../{name}/bin/python");
    let prefix = same_output(
        beside.path(),
        &program,
        &["-c", "import sys; print(sys.prefix)"],
    );
    assert_eq!(
        Path::new(prefix.trim()).canonicalize().expect("prefix"),
        venv.canonicalize().expect("venv")
    );
}

#[test]
fn a_pyenv_shim_runs_the_interpreter_it_names() {
    let home = std::env::var_os("HOME").expect("HOME");
    let shim = Path::new(&home).join(".pyenv/shims/python3");
    assert!(
        shim.is_file(),
        "{} is missing: the machines of this project have a pyenv CPython",
        shim.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let version = same_output(
        dir.path(),
        &shim.display().to_string(),
        &["-c", "import sys; print(sys.version)"],
    );
    assert!(!version.trim().is_empty());
}

#[test]
fn git_sqlite_cpython_node_and_deno_do_their_usual_work_under_the_allow_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    let run = |program: &str, args: &[&str]| -> String {
        let mut cmd = Command::new(peers::sandpipe());
        cmd.args(["run", "--dir", &d, "--env", "HOME=/nonexistent"])
            .arg(program)
            .args(args)
            .current_dir(dir.path());
        let out = run_command(cmd, b"");
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    let git = peers::debian("git").display().to_string();
    run(&git, &["init", "-q", "repo"]);
    std::fs::write(dir.path().join("repo/file"), "content\n").expect("write");
    run(&git, &["-C", "repo", "add", "file"]);
    run(
        &git,
        &[
            "-C",
            "repo",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "first",
        ],
    );
    assert_eq!(run(&git, &["-C", "repo", "log", "--format=%s"]), "first\n");

    let sqlite = peers::debian("sqlite3").display().to_string();
    let db = format!("{d}/db.sqlite");
    run(
        &sqlite,
        &[&db, "create table t(x); insert into t values (42);"],
    );
    assert_eq!(run(&sqlite, &[&db, "select x from t;"]), "42\n");

    let python = peers::python().display().to_string();
    let script = "import subprocess, threading, hashlib, ssl, sqlite3, tempfile, os\n\
        t = threading.Thread(target=lambda: None); t.start(); t.join()\n\
        out = subprocess.run(['/bin/echo', 'child'], capture_output=True, check=True).stdout\n\
        with open('py.txt', 'w') as f: f.write(hashlib.sha256(out).hexdigest())\n\
        print(out.decode().strip(), len(open('py.txt').read()))";
    assert_eq!(run(&python, &["-c", script]), "child 64\n");

    let node = peers::node().display().to_string();
    let js = "const cp = require('child_process'); const fs = require('fs');\
        fs.writeFileSync('node.txt', cp.execFileSync('/bin/echo', ['child']));\
        console.log(fs.readFileSync('node.txt', 'utf8').trim());";
    assert_eq!(run(&node, &["-e", js]), "child\n");

    // Deno wants a writable cache, as in any empty environment (docs/native.md).
    let deno = peers::deno().display().to_string();
    let deno_dir = format!("DENO_DIR={d}/deno");
    let mut cmd = Command::new(peers::sandpipe());
    cmd.args(["run", "--dir", &d, "--env", &deno_dir])
        .arg(&deno)
        .args(["eval", "console.log(Deno.pid > 0, 6 * 7)"])
        .current_dir(dir.path());
    let out = run_command(cmd, b"");
    assert!(out.status.success(), "deno: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "true 42\n");
}

/// `sandpipe run --framing lines FLAGS PROBE OPS` in a user namespace of its own, after
/// `setup` (a shell command run there first, as its root).
fn sandboxed_after(setup: &str, flags: &[&str], ops: &[&str]) -> (Vec<Value>, Output) {
    let line = format!("{setup} && exec \"$0\" run --framing lines \"$@\"");
    let mut cmd = Command::new("unshare");
    cmd.args(["--user", "--map-root-user", "--mount", "sh", "-c", &line])
        .arg(peers::sandpipe())
        .args(flags)
        .arg(probe())
        .args(ops);
    let out = run_command(cmd, b"");
    (frames(&out), out)
}

#[test]
fn where_user_namespaces_are_refused_landlock_and_the_same_allow_list_hold() {
    // `user.max_user_namespaces` 0 in a namespace of the test's own: what Ubuntu's AppArmor
    // rule or a container's seccomp profile does to sandpipe.
    let (frames, out) = sandboxed_after(
        "echo 0 > /proc/sys/user/max_user_namespaces",
        &[],
        &[
            "uring-unix:/nonexistent.sock",
            "socket:40",
            "read:/etc/passwd",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("running it natively partly sandboxed (no namespaces (unshare is refused"),
        "{stderr}"
    );
    assert!(stderr.contains("; seccomp; Landlock ABI"), "{stderr}");
    assert_refused(&frames[0], EPERM);
    assert_refused(&frames[1], EAFNOSUPPORT);
    assert_refused(&frames[2], EACCES);
}

/// The processes whose environment holds `SANDPIPE_TEST_MARK=mark`, with their names: a fork
/// of sandpipe keeps sandpipe's environment, and the plugin is given the mark with `--env`.
fn marked(mark: &str) -> Vec<(i32, String)> {
    let needle = format!("SANDPIPE_TEST_MARK={mark}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let env = std::fs::read(entry.path().join("environ")).ok()?;
            let name = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            env.split(|&b| b == 0)
                .any(|var| var == needle.as_bytes())
                .then(|| (pid, name.trim().to_owned()))
        })
        .collect()
}

/// Poll `done` until it holds; a minute without it fails the test with its last word (nothing
/// here waits on a clock: the bound only turns a leak into a failure instead of a hang).
fn eventually(mut done: impl FnMut() -> Result<(), String>) {
    let mut last = String::new();
    for _ in 0..3000 {
        match done() {
            Ok(()) => return,
            Err(why) => last = why,
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{last}");
}

#[allow(unsafe_code)]
fn signal(pid: i32, sig: i32) {
    // SAFETY: kill takes integers.
    unsafe { libc::kill(pid, sig) };
}

#[test]
fn an_orphan_left_by_a_killed_parent_is_seen() {
    // The control: a parent that does nothing for its child, SIGKILLed, leaves it running.
    let mark = format!("{}-control", std::process::id());
    let mut parent = Command::new("sh")
        .args(["-c", "sleep 1000 & wait"])
        .env("SANDPIPE_TEST_MARK", &mark)
        .spawn()
        .expect("sh");
    eventually(|| match marked(&mark).len() {
        2 => Ok(()),
        n => Err(format!("the control has {n} processes, not 2")),
    });
    parent.kill().expect("kill");
    parent.wait().expect("wait");
    let left = marked(&mark);
    assert_eq!(left.len(), 1, "{left:?}");
    signal(left[0].0, libc::SIGKILL);
}

/// Debug builds only: the pause (`SANDPIPE_START_PAUSE`) is not in a release build.
#[cfg(debug_assertions)]
#[test]
fn sandpipe_killed_at_any_step_of_the_start_leaves_no_process() {
    for step in [
        "forked", "joined", "unshared", "init", "root", "plugin", "exec",
    ] {
        let mark = format!("{}-{step}", std::process::id());
        let mut sandpipe = Command::new(peers::sandpipe())
            .args(["run", "--env", &format!("SANDPIPE_TEST_MARK={mark}")])
            .args(["/bin/sleep", "1000"])
            .env("SANDPIPE_START_PAUSE", step)
            .env("SANDPIPE_TEST_MARK", &mark)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sandpipe");
        eventually(|| {
            let now = marked(&mark);
            match now.iter().any(|(_, name)| name == "sandpipe-paused") {
                true => Ok(()),
                false => Err(format!("the start never reached {step}: {now:?}")),
            }
        });
        sandpipe.kill().expect("kill");
        sandpipe.wait().expect("wait");
        // The paused process goes on (a SIGCONT may land before it waits: send it again).
        eventually(|| {
            let left = marked(&mark);
            for (pid, _) in &left {
                signal(*pid, libc::SIGCONT);
            }
            match left.is_empty() {
                true => Ok(()),
                false => Err(format!("sandpipe killed at {step} left {left:?}")),
            }
        });
    }
}

#[test]
fn a_remembered_probe_that_no_longer_holds_costs_one_retry_not_the_run() {
    // A first run, where namespaces work, remembers so; then user namespaces are turned off
    // within the same boot and namespaces (what the remembered answer is keyed by). The jail's
    // first step is refused, the answer forgotten, and the plugin runs under Landlock alone.
    let cache = tempfile::tempdir().expect("tempdir");
    let file = cache.path().join("namespaces");
    let setup = format!(
        "export SANDPIPE_CACHE_DIR='{}' && \"$0\" run /bin/true && test -s '{}' \
         && echo 0 > /proc/sys/user/max_user_namespaces",
        cache.path().display(),
        file.display()
    );
    let (frames, out) = sandboxed_after(&setup, &[], &["socket:40", "read:/etc/passwd"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "the remembered namespace probe no longer holds (no namespaces (unshare is refused"
        ),
        "{stderr}"
    );
    assert_refused(&frames[0], EAFNOSUPPORT);
    assert_refused(&frames[1], EACCES);
    assert!(
        !file.exists(),
        "the answer that no longer held is forgotten"
    );
}

/// [`sandboxed_after`] with the cgroup hierarchies hidden under a tmpfs, in a mount namespace
/// of the test's own: sandpipe finds no cgroup to make.
fn without_a_cgroup(flags: &[&str], ops: &[&str]) -> (Vec<Value>, Output) {
    sandboxed_after("mount -t tmpfs none /sys/fs/cgroup", flags, ops)
}

#[test]
fn without_a_cgroup_shared_memory_still_stops_at_the_cap_and_the_line_says_why() {
    let (frames, out) = without_a_cgroup(&["--max-memory", "64MiB"], &["shm:1024", "shm:32"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("; no cgroup (v"), "{stderr}");
    // The IPC namespace's shmmax is the cap: a segment over it is refused at shmget.
    assert_refused(&frames[0], 22);
    assert_eq!(frames[1]["ok"], true, "{frames:?}");
}

#[test]
fn without_a_cgroup_a_gibibyte_in_a_memfd_still_stops_at_the_cap() {
    let outside = direct(&["memfd:1024"]);
    assert_eq!(outside[0]["bytes"], 1u64 << 30, "{outside:?}");

    // The memfd's pages are in no resident set: the watch counts the open file. The sleep holds
    // the memfd for the watch to see; a plugin the watch missed ends after it with status 0.
    let (frames, out) = without_a_cgroup(&["--max-memory", "64MiB"], &["memfd:1024", "sleep:60"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("; no cgroup (v") && stderr.contains("memfd pages and processes watched"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(122), "{frames:?} {stderr}");
    assert!(stderr.contains("memory limit of 64.0 MiB"), "{stderr}");
}

#[test]
fn without_a_cgroup_threads_and_processes_past_max_processes_stop_the_plugin() {
    let outside = direct(&["threads:2000", "procs:2000"]);
    assert_eq!(outside[0]["made"], 2000, "{outside:?}");
    assert_eq!(outside[1]["made"], 2000, "{outside:?}");

    for op in ["threads-held:2000", "procs-held:2000"] {
        let (frames, out) = without_a_cgroup(
            // No memory cap: the watch counts a page shared by 2,000 forks 2,000 times, and
            // that count is not what this test is about.
            &["--max-processes", "256", "--max-memory", "none"],
            &[op, "sleep:60"],
        );
        let stderr = text(&out.stderr);
        assert!(stderr.contains("; no cgroup (v"), "{stderr}");
        assert_eq!(out.status.code(), Some(137), "{op}: {frames:?} {stderr}");
        assert!(
            stderr.contains("plugin exceeded the limit of 256 processes and threads"),
            "{op}: {stderr}"
        );
    }
}
