//! Plugins as container images: `sandpipe image` builds an image FROM scratch around
//! a static sandpipe (`scripts/build-static static-test`) and the plugin, compiled; real Podman
//! (Debian's, with the `containers.conf` `.ci/setup` writes) loads and runs it, and the real
//! Arcaflow engine (PyPI `arcaflow` 0.21.0) runs it with its real Podman and Docker deployers.
//!
//! | test | checks |
//! |---|---|
//! | `podman run -i` | ATP with a driver here: hello, a greeting, client done; the container ends by itself while its stdin stays open; the plugin was loaded from the image's cache, not compiled |
//! | Arcaflow + Podman | hello, error output, unicode, a large input, a chain of two steps: the engine's output and exit status equal those of the same plugin run natively (by a podman stand-in) |
//! | Arcaflow + Docker | Debian's dockerd 20.10 started here (private socket, no iptables, vfs), `docker load` of the same archive: the same five workflows equal the native plugin's; an image with stderr back fails the deployer's multiplexed stream ("unexpected stderr stream frame"); no container left after the engine or after `docker rm --force` |
//! | push and sign | `image --push --sign` to Debian's docker-registry: the digest equals `-o`'s and skopeo's; podman pulls and runs it; the pushed and the `-o` signatures verify (sandpipe's check, minisign), another key is refused |
//! | `podman kube play` | the README's pod manifest: its memory limit reaches sandpipe's default cap, the plugin loads from the cache, `kube down` leaves nothing |
//! | `image --serve` + docs/k8s | the image's entry point is `serve`; docs/k8s/sandpipe-serve.yaml (ConfigMap, Deployment, Service) under `podman kube play --network host` answers /healthz, publishes the ConfigMap's issuer, serves the official SDK client with a JWT of it; `kube down` leaves nothing |
//! | `podman rm --force` | SIGTERM to sandpipe as PID 1 ends the plugin by the SIGTERM emulation: exit 0, not the SIGKILL after 10 s; no container left |
//! | memory | `-e SANDPIPE_MAX_MEMORY=32MiB`, and a `--memory` limit with no cap given: exit 122, not the OOM killer |
//! | reproducible | two builds give the same digest and the same archive bytes; podman's image id is the config digest |
//! | one artifact | the image's cache holds one artifact, for the engine its policy or `--container-env` runs (fuel metering or not); its entrypoint's run loads it, the other engine's does not find it |
//!
//! Every image is loaded under a name of its own and removed at the end of its test.
//!
//! `cargo test -p sandpipe-tests --test container` (after `.ci/setup`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use sandpipe_proto::atp::{Message, Value};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::registry::{PASSWORD, Registry, minisign_keypair};
use sandpipe_tests::stand_in;
use sandpipe_tests::stand_in::atp::{map, text, work_start};
use sandpipe_tests::stand_in::{Session, Way};
use sandpipe_tests::{Target, peers, plugin};

/// An image built by the static sandpipe's `sandpipe image` and loaded into podman; removed
/// (with its containers) when dropped.
struct Image {
    tag: String,
    digest: String,
    archive: PathBuf,
    _dir: tempfile::TempDir,
}

impl Image {
    /// `sandpipe image --tag T [extra] -o DIR/image.tar PLUGIN`, then `podman load`.
    fn build(plugin: &Path, name: &str, extra: &[&str]) -> Image {
        let dir = tempfile::tempdir().expect("tempdir");
        let tag = format!(
            "localhost/sandpipe-test/{name}-{}:latest",
            std::process::id()
        );
        let archive = dir.path().join("image.tar");
        let digest = build_archive(plugin, &tag, extra, &archive);
        let load = podman(&["load", "--quiet", "-i", &archive.to_string_lossy()]);
        assert!(load.status.success(), "podman load: {}", text_of(&load));
        Image {
            tag,
            digest,
            archive,
            _dir: dir,
        }
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = podman(&["rmi", "--force", &self.tag]);
    }
}

/// Run the static sandpipe's `image` subcommand; the digest it prints.
fn build_archive(plugin: &Path, tag: &str, extra: &[&str], archive: &Path) -> String {
    let out = Command::new(peers::sandpipe_static())
        .args(["image", "--tag", tag])
        .args(extra)
        .arg("-o")
        .arg(archive)
        .arg(plugin)
        .output()
        .expect("running sandpipe image");
    assert!(out.status.success(), "sandpipe image: {}", text_of(&out));
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(digest.starts_with("sha256:"), "{}", text_of(&out));
    digest
}

fn podman(args: &[&str]) -> Output {
    peers::podman()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running podman")
}

/// A podman command that removes containers (`kube down`, `rm --force`). podman 4.3 (Debian's)
/// can fail such a removal with `unlinkat …/userdata/shm: device or resource busy`: its
/// removal races the cleanup process conmon starts when a container stops, which is what
/// unmounts that `shm` (podman's best-known flake: containers/podman#11594, #10454, #17216).
/// The containers are stopped by then and the same command run again removes what is left, so
/// that error, and only it, runs the command again, at most four times in all. Every caller
/// still asserts that nothing is left.
fn podman_removing(args: &[&str]) -> Output {
    let mut out = podman(args);
    for _ in 1..4 {
        let busy =
            String::from_utf8_lossy(&out.stderr).contains("/userdata/shm: device or resource busy");
        if out.status.success() || !busy {
            break;
        }
        out = podman(args);
    }
    out
}

fn text_of(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn example_atp() -> PathBuf {
    plugin("example-atp", Target::Wasm)
}

fn member<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(m) => m
            .iter()
            .find(|(k, _)| matches!(k, Value::Text(t) if t == key))
            .map(|(_, v)| v),
        _ => None,
    }
}

#[test]
fn podman_run_speaks_atp_and_the_container_ends_with_the_plugin() {
    let image = Image::build(&example_atp(), "atp", &[]);
    let mut cmd = peers::podman();
    cmd.args([
        "run",
        "-i",
        "--rm",
        "-e",
        "SANDPIPE_LOG=info",
        "-e",
        "SANDPIPE_STDERR=",
    ])
    .args([image.tag.as_str(), "--atp"]);
    let mut s = Session::spawn(cmd, Framing::CborSeq, Way::Behind(Some(Framing::CborSeq)));
    let hello = stand_in::atp::hello(&mut s);
    assert_eq!(
        hello.step_ids().into_iter().collect::<Vec<_>>(),
        ["greet", "wait"]
    );
    s.send(&work_start(
        "r1",
        "greet",
        map(&[("name", text("Arca Lot"))]),
    ));
    let frame = s.await_frame("the result", |f| {
        matches!(Message::decode(f), Ok(Message::WorkDone { .. }))
    });
    let Ok(Message::WorkDone { output, .. }) = Message::decode(&frame) else {
        unreachable!("awaited a work done")
    };
    assert_eq!(
        member(&output.output_data, "message"),
        Some(&text("Hello, Arca Lot!"))
    );
    s.send(&Message::ClientDone.encode());
    // Our end of its stdin stays open, as under an engine's attach: the plugin's end after
    // client done ends the container.
    assert_eq!(s.next_frame(), None, "stdout after client done");
    let stderr = s.stderr();
    let t = s.finish();
    assert_eq!(t.status, "exit code 0", "{stderr}");
    assert!(
        stderr.contains("loaded from the disk cache"),
        "the container compiled the plugin:\n{stderr}"
    );
}

// --- the real Arcaflow engine with its real Podman deployer ---------------------------------

/// The workflow input's schema: one text, `name`.
const INPUT: &str = "\
version: v0.2.0
input:
  root: RootObject
  objects:
    RootObject:
      id: RootObject
      properties:
        name:
          type:
            type_id: string
";

/// One `greet` step; the workflow's outputs cover both of the step's outputs.
fn one_step(src: &str) -> String {
    format!(
        "{INPUT}steps:
  greet:
    plugin:
      deployment_type: image
      src: {src}
    step: greet
    input:
      name: !expr $.input.name
outputs:
  success:
    message: !expr $.steps.greet.outputs.success.message
  failed:
    reason: !expr $.steps.greet.outputs.error.reason
"
    )
}

/// Two steps, the second greeting the first's message.
fn chain(src: &str) -> String {
    format!(
        "{INPUT}steps:
  first:
    plugin:
      deployment_type: image
      src: {src}
    step: greet
    input:
      name: !expr $.input.name
  second:
    plugin:
      deployment_type: image
      src: {src}
    step: greet
    input:
      name: !expr $.steps.first.outputs.success.message
outputs:
  success:
    message: !expr $.steps.second.outputs.success.message
"
    )
}

/// A podman stand-in for the native reference run: `run ... IMAGE ARGS` becomes `PLUGIN ARGS`,
/// `rm --force` SIGTERM then SIGKILL after 10 s (as `peers_python.rs`'s stand-in).
fn fake_podman(dir: &Path, plugin: &Path) -> PathBuf {
    let script = format!(
        r#"#!/bin/sh
dir='{dir}'
case "$1" in
  run)
    shift
    while [ $# -gt 0 ]; do
      case "$1" in
        -i|--privileged) shift ;;
        --name) name=$2; shift 2 ;;
        -a|-e|-v|--cgroupns|--network) shift 2 ;;
        *) shift; break ;;
      esac
    done
    echo $$ > "$dir/$name.pid"
    exec '{plugin}' "$@" ;;
  rm)
    if [ -f "$dir/$3.pid" ]; then
      pid=$(cat "$dir/$3.pid")
      kill -TERM "$pid" 2>/dev/null
      n=0
      while kill -0 "$pid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n+1)); done
      kill -KILL "$pid" 2>/dev/null
    fi
    exit 0 ;;
  *) exit 0 ;;
esac
"#,
        dir = dir.display(),
        plugin = plugin.display(),
    );
    let path = dir.join("podman");
    std::fs::write(&path, script).expect("write the podman stand-in");
    let status = Command::new("chmod")
        .arg("+x")
        .arg(&path)
        .status()
        .expect("chmod");
    assert!(status.success());
    path
}

/// The engine's configuration for its Podman deployer running `podman_path`.
fn podman_deployer(podman_path: &Path) -> String {
    format!(
        "deployers:\n  image:\n    deployer_name: podman\n    podman:\n      path: {}\n    \
         deployment:\n      imagePullPolicy: Never\nlog:\n  level: info\n",
        podman_path.display()
    )
}

/// Run `workflow` on `input` with the engine configuration `config`; the engine's stdout (the
/// workflow's output), its exit status, and its stderr (its log).
fn run_workflow(config: &str, workflow: &str, input: &str) -> (String, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("workflow.yaml"), workflow).expect("workflow");
    std::fs::write(d.join("input.yaml"), input).expect("input");
    std::fs::write(d.join("config.yaml"), config).expect("config");
    let out = Command::new(peers::arcaflow_engine())
        .arg("-config")
        .arg(d.join("config.yaml"))
        .arg("-input")
        .arg(d.join("input.yaml"))
        .arg("-workflow")
        .arg(d.join("workflow.yaml"))
        .arg("-context")
        .arg(d)
        // The engine passes its environment to podman.
        .env("CONTAINERS_CONF", peers::containers_conf())
        .stdin(Stdio::null())
        .output()
        .expect("run the arcaflow engine");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        format!("{}", out.status),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A workflow case: its name, the workflow for an image, the input, what the output holds.
type Case = (&'static str, fn(&str) -> String, String, &'static str);

/// hello, error output, unicode, a large input, a chain of two steps.
fn cases() -> Vec<Case> {
    let large = "y".repeat(256 << 10);
    vec![
        (
            "hello",
            one_step,
            "name: Arca Lot\n".into(),
            "message: Hello, Arca Lot!",
        ),
        (
            "error output",
            one_step,
            "name: ''\n".into(),
            "name must not be empty",
        ),
        (
            "unicode",
            one_step,
            "name: \"Zoë 🦀 Ωμέγα 日本語\"\n".into(),
            // The engine writes YAML, which escapes the emoji as \U0001F980.
            "Ωμέγα 日本語!",
        ),
        (
            "large input",
            one_step,
            format!("name: {large}\n"),
            "Hello, yyyy",
        ),
        (
            "chain",
            chain,
            "name: Arca Lot\n".into(),
            "message: Hello, Hello, Arca Lot!!",
        ),
    ]
}

/// The engine's output and exit status for each of [`cases`] with the native plugin behind the
/// podman stand-in: run once, shared by the Podman and Docker tests.
fn native_outputs() -> &'static [(String, String)] {
    static NATIVE: OnceLock<Vec<(String, String)>> = OnceLock::new();
    NATIVE.get_or_init(|| {
        let native = plugin("example-atp", Target::Native);
        let stand_in_dir = tempfile::tempdir().expect("tempdir");
        let stand_in = fake_podman(stand_in_dir.path(), &native);
        cases()
            .iter()
            .map(|(case, workflow, input, expect)| {
                let (out, status, log) = run_workflow(
                    &podman_deployer(&stand_in),
                    &workflow("localhost/native"),
                    input,
                );
                assert!(
                    out.contains(expect),
                    "{case}: the native run lacks {expect:?}:\n{out}\n{log}"
                );
                (out, status)
            })
            .collect()
    })
}

/// Run every case on `image` with the engine configuration `config`; the differences from the
/// native plugin's outputs.
fn compare_with_native(deployer: &str, config: &str, image: &str) -> Vec<String> {
    let native = native_outputs();
    let mut failures = Vec::new();
    for ((case, workflow, input, _), want) in cases().iter().zip(native) {
        let (out, status, log) = run_workflow(config, &workflow(image), input);
        if (&out, &status) != (&want.0, &want.1) {
            failures.push(format!(
                "{case}: the image under {deployer} differs from the native plugin\nnative ({}):\n{}\nimage ({status}):\n{out}\nthe engine's log:\n{log}",
                want.1, want.0
            ));
        }
    }
    failures
}

#[test]
fn arcaflow_engine_runs_the_image_with_real_podman_like_the_native_plugin() {
    let image = Image::build(&example_atp(), "arcaflow", &[]);
    let real_podman = peers::debian("podman");
    let failures = compare_with_native("podman", &podman_deployer(&real_podman), &image.tag);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The deployer removes its containers; none of this image is left.
    let left = podman(&[
        "ps",
        "-a",
        "--filter",
        &format!("ancestor={}", image.tag),
        "--format",
        "{{.Names}}",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "containers left"
    );
}

// --- the real Arcaflow engine with its real Docker deployer ---------------------------------

/// Debian's Docker daemon (`docker.io` 20.10), this test's own: no iptables, no bridge, vfs
/// storage, its data root, exec root (with the containerd it starts) and socket in a private
/// directory. Dropped: every container removed, the daemon stopped and waited for, the
/// directory removed.
struct Dockerd {
    child: std::process::Child,
    dir: PathBuf,
}

impl Dockerd {
    fn start() -> Dockerd {
        // The engine's connection.host must match ^[a-z0-9./:_-]+$: no upper-case letters,
        // which a random temp dir name has.
        let dir = std::env::temp_dir().join(format!(
            "sandpipe-dockerd-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let log = std::fs::File::create(dir.join("dockerd.log")).expect("dockerd.log");
        let child = Command::new(peers::dockerd())
            .args([
                "--iptables=false",
                "--ip-masq=false",
                "--bridge=none",
                "--storage-driver=vfs",
            ])
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("dockerd.pid"))
            .arg("-H")
            .arg(format!("unix://{}", dir.join("docker.sock").display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start dockerd");
        let d = Dockerd { child, dir };
        // Ready when the API answers; the bound only turns a daemon that never comes up into
        // a failure with its log.
        let mut tries = 0;
        while !d.docker(&["version"]).status.success() {
            tries += 1;
            assert!(
                tries < 240,
                "dockerd did not answer:\n{}",
                std::fs::read_to_string(d.dir.join("dockerd.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        d
    }

    /// `unix://SOCKET`: the engine's `connection.host`, the client's `-H`.
    fn host(&self) -> String {
        format!("unix://{}", self.dir.join("docker.sock").display())
    }

    /// Debian's docker client on this daemon.
    fn command(&self) -> Command {
        let mut cmd = Command::new(peers::debian("docker"));
        cmd.arg("-H").arg(self.host());
        cmd
    }

    fn docker(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running docker")
    }

    /// The names of every container the daemon has, running or not.
    fn containers(&self) -> String {
        let out = self.docker(&["ps", "-a", "--format", "{{.Names}}"]);
        assert!(out.status.success(), "docker ps: {}", text_of(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        let all = self.docker(&["ps", "-aq"]);
        for id in String::from_utf8_lossy(&all.stdout).split_whitespace() {
            let _ = self.docker(&["rm", "--force", id]);
        }
        // SIGTERM: dockerd stops its containerd and exits (about 3 s here); a daemon that
        // does not within its own shutdown timeout gets SIGKILL.
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid, which it keeps until we wait for it.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        for _ in 0..120 {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The engine's configuration for its Docker deployer on `dockerd`. Engine 0.21.0 refuses any
/// `deployment.container.Env` (a map fails its conversion to Docker's list, a list fails its
/// schema), so the image's own environment (`--container-env`) is the only knob here.
fn docker_deployer(dockerd: &Dockerd) -> String {
    format!(
        "deployers:\n  image:\n    deployer_name: docker\n    connection:\n      host: {}\n    \
         deployment:\n      imagePullPolicy: Never\n      host:\n        NetworkMode: none\n\
         log:\n  level: info\n",
        dockerd.host()
    )
}

/// `sandpipe image -o`, then `docker load`; the image's tag.
fn docker_load(dockerd: &Dockerd, dir: &Path, name: &str, extra: &[&str]) -> String {
    let tag = format!("localhost/sandpipe-test/{name}:latest");
    let archive = dir.join(format!("{name}.tar"));
    build_archive(&example_atp(), &tag, extra, &archive);
    let load = dockerd.docker(&["load", "-i", &archive.to_string_lossy()]);
    assert!(load.status.success(), "docker load: {}", text_of(&load));
    tag
}

/// One daemon for every Docker case (it takes a few seconds to start and stop): the workflows
/// equal the native plugin's; a plugin writing to stderr breaks the deployer's stream (what
/// the image's `SANDPIPE_STDERR=/dev/null` prevents); `docker rm --force` leaves nothing.
#[test]
fn arcaflow_engine_runs_the_image_with_real_docker_like_the_native_plugin() {
    let dockerd = Dockerd::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let tag = docker_load(&dockerd, dir.path(), "docker", &[]);
    let config = docker_deployer(&dockerd);

    let mut failures = compare_with_native("docker", &config, &tag);
    // The deployer removes its containers itself (ContainerRemove with force).
    let left = dockerd.containers();
    if !left.is_empty() {
        failures.push(format!("containers left by the engine: {left}"));
    }

    // The same image with stderr back and sandpipe's log on: Docker multiplexes stderr into
    // the attach stream, and the deployer fails on the first stderr frame.
    let noisy = docker_load(
        &dockerd,
        dir.path(),
        "docker-stderr",
        &[
            "--container-env",
            "SANDPIPE_STDERR=",
            "--container-env",
            "SANDPIPE_LOG=info",
        ],
    );
    let (out, status, log) = run_workflow(&config, &one_step(&noisy), "name: Arca Lot\n");
    if status == "exit status: 0" || !log.contains("unexpected stderr stream frame") {
        failures.push(format!(
            "with stderr on, the deployer was expected to fail on the stderr frame ({status}):\n{out}\n{log}"
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    // What the deployer does at the end of a step, by hand: remove the container with force
    // (Docker kills it with no grace); nothing is left.
    let name = format!("sandpipe-test-rm-{}", std::process::id());
    let mut cmd = dockerd.command();
    cmd.args(["run", "-i", "--network", "none", "--name", name.as_str()])
        .args([tag.as_str(), "--atp"]);
    let mut s = Session::spawn(cmd, Framing::CborSeq, Way::Behind(Some(Framing::CborSeq)));
    stand_in::atp::hello(&mut s);
    let rm = dockerd.docker(&["rm", "--force", &name]);
    assert!(rm.status.success(), "docker rm --force: {}", text_of(&rm));
    assert_eq!(dockerd.containers(), "", "containers left");
    let stderr = s.stderr();
    let t = s.finish();
    // SIGKILL, as docker reports it: 128 + 9.
    assert_eq!(t.status, "exit code 137", "docker run's stderr:\n{stderr}");
}

// --- push and sign ---------------------------------------------------------------------------

/// `sandpipe image --push` to a real registry (Debian's docker-registry), signed: the pushed
/// manifest is the one `-o` writes (same digest); skopeo reads that digest back; podman pulls
/// the image from the registry and it speaks ATP; the signature pushed beside it verifies with
/// sandpipe's own check and with minisign over the registry's manifest bytes, and is refused
/// under another key; `-o --sign` writes a `.minisig` that minisign verifies over the
/// archive's manifest.
#[test]
fn an_image_pushed_and_signed_is_pulled_by_podman_and_its_signature_verifies() {
    let registry = Registry::start(None);
    let keys = tempfile::tempdir().expect("tempdir");
    let (sk, pk) = minisign_keypair(keys.path(), "image");
    let (_, other_pk) = minisign_keypair(keys.path(), "other");
    let sk_s = sk.display().to_string();
    let repo = format!("sandpipe-test/pushed-{}", std::process::id());
    let reference = registry.reference(&format!("{repo}:1"));
    let out = Command::new(peers::sandpipe_static())
        .args(["image", "--push", &reference, "--sign", &sk_s])
        .arg(example_atp())
        .env("SANDPIPE_MINISIGN_PASSWORD", PASSWORD)
        .env("DOCKER_CONFIG", keys.path())
        .output()
        .expect("sandpipe image --push");
    assert!(
        out.status.success(),
        "sandpipe image --push: {}",
        text_of(&out)
    );
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let digest = printed
        .strip_prefix(&format!("{reference}@"))
        .unwrap_or_else(|| panic!("--push prints REF@sha256:…, got {printed}"))
        .to_owned();

    // The same image as -o builds, signed the same way.
    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("image.tar");
    let out = Command::new(peers::sandpipe_static())
        .args(["image", "--sign", &sk_s, "-o"])
        .arg(&archive)
        .arg(example_atp())
        .env("SANDPIPE_MINISIGN_PASSWORD", PASSWORD)
        .output()
        .expect("sandpipe image -o --sign");
    assert!(out.status.success(), "sandpipe image -o: {}", text_of(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), digest);

    let skopeo = |args: &[&str]| {
        let out = Command::new(peers::debian("skopeo"))
            .args(args)
            .output()
            .expect("skopeo");
        assert!(out.status.success(), "skopeo {args:?}: {}", text_of(&out));
        out.stdout
    };
    let remote = format!("docker://{}/{repo}", registry.host());
    let inspected = skopeo(&[
        "inspect",
        "--tls-verify=false",
        "--format",
        "{{.Digest}}",
        &format!("{remote}:1"),
    ]);
    assert_eq!(String::from_utf8_lossy(&inspected).trim(), digest);

    // The signature artifact, under the cosign-style tag `sandpipe push` uses; its one layer is
    // the .minisig. Both it and the manifest are read from the registry's own storage.
    let sig_manifest: serde_json::Value = serde_json::from_slice(&skopeo(&[
        "inspect",
        "--raw",
        "--tls-verify=false",
        &format!("{remote}:{}.sig", digest.replacen(':', "-", 1)),
    ]))
    .expect("signature manifest json");
    assert_eq!(sig_manifest["subject"]["digest"], digest.as_str());
    let sig_layer = sig_manifest["layers"][0]["digest"]
        .as_str()
        .expect("signature layer");
    let minisig = std::fs::read_to_string(registry.blob_file(sig_layer)).expect("signature");
    let manifest = std::fs::read(registry.blob_file(&digest)).expect("manifest");
    let trusted = |pk: &Path| [sandpipe::signing::TrustedKey::from_file(pk).expect("key")];
    let signer = sandpipe::signing::verify(&trusted(&pk), &minisig, &manifest)
        .expect("the pushed signature verifies");
    assert!(matches!(
        sandpipe::signing::verify(&trusted(&other_pk), &minisig, &manifest),
        Err(sandpipe::signing::SignError::UntrustedKey { .. })
    ));
    let pushed_sig = dir.path().join("pushed.minisig");
    let manifest_file = dir.path().join("manifest.json");
    std::fs::write(&pushed_sig, &minisig).expect("write");
    std::fs::write(&manifest_file, &manifest).expect("write");
    let archive_sig = PathBuf::from(format!("{}.minisig", archive.display()));
    assert_eq!(
        sandpipe::signing::signer(&std::fs::read_to_string(&archive_sig).expect("-o's .minisig"))
            .expect("signer"),
        signer
    );
    // The archive's manifest is the registry's, byte for byte.
    let status = Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(dir.path())
        .arg(format!(
            "blobs/sha256/{}",
            digest.trim_start_matches("sha256:")
        ))
        .status()
        .expect("tar");
    assert!(status.success());
    let archived = dir
        .path()
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"));
    assert_eq!(
        std::fs::read(&archived).expect("archived manifest"),
        manifest
    );
    for sig in [&pushed_sig, &archive_sig] {
        let out = Command::new(peers::debian("minisign"))
            .arg("-V")
            .arg("-p")
            .arg(&pk)
            .arg("-m")
            .arg(&manifest_file)
            .arg("-x")
            .arg(sig)
            .output()
            .expect("minisign -V");
        assert!(
            out.status.success(),
            "minisign -V {}: {}",
            sig.display(),
            text_of(&out)
        );
    }

    // podman pulls it from the registry, and it runs.
    let pulled = format!("{}/{repo}:1", registry.host());
    let pull = podman(&["pull", "--quiet", "--tls-verify=false", &pulled]);
    assert!(pull.status.success(), "podman pull: {}", text_of(&pull));
    let mut cmd = peers::podman();
    cmd.args(["run", "-i", "--rm", pulled.as_str(), "--atp"]);
    let mut s = Session::spawn(cmd, Framing::CborSeq, Way::Behind(Some(Framing::CborSeq)));
    let hello = stand_in::atp::hello(&mut s);
    s.send(&Message::ClientDone.encode());
    assert_eq!(s.next_frame(), None, "stdout after client done");
    let stderr = s.stderr();
    let t = s.finish();
    let _ = podman(&["rmi", "--force", &pulled]);
    assert_eq!(
        hello.step_ids().into_iter().collect::<Vec<_>>(),
        ["greet", "wait"]
    );
    assert_eq!(t.status, "exit code 0", "{stderr}");
}

// --- Kubernetes on paper: the pod manifest under `podman kube play` --------------------------

/// The README's pod shape (args `--atp`, env, `resources.limits.memory`) played by `podman kube
/// play`: the memory limit reaches sandpipe's default cap, the plugin is loaded from the
/// image's cache, and `kube down` leaves nothing. podman 4.3 does not keep a played
/// container's stdin open (`stdin: true` is not honoured), so the plugin sees EOF at once and
/// ends with 0: this checks the manifest, not an attached ATP session.
#[test]
fn podman_kube_play_runs_the_pod_manifest_with_its_memory_limit() {
    let image = Image::build(&example_atp(), "kube", &[]);
    let pod = format!("sandpipe-test-kube-{}", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\nspec:\n  restartPolicy: Never\n  \
             containers:\n    - name: plugin\n      image: {}\n      args: [\"--atp\"]\n      \
             stdin: true\n      env:\n        - {{name: SANDPIPE_STDERR, value: \"\"}}\n        \
             - {{name: SANDPIPE_LOG, value: info}}\n      resources:\n        limits: {{memory: 128Mi}}\n",
            image.tag
        ),
    )
    .expect("pod.yaml");
    let manifest = manifest.to_string_lossy().into_owned();
    let play = podman(&["kube", "play", &manifest]);
    let container = format!("{pod}-plugin");
    let wait = podman(&["wait", &container]);
    let logs = podman(&["logs", &container]);
    let down = podman_removing(&["kube", "down", &manifest]);
    assert!(
        play.status.success(),
        "podman kube play: {}",
        text_of(&play)
    );
    assert!(
        down.status.success(),
        "podman kube down: {}",
        text_of(&down)
    );
    assert_eq!(
        String::from_utf8_lossy(&wait.stdout).trim(),
        "0",
        "{}",
        text_of(&logs)
    );
    let log =
        String::from_utf8_lossy(&logs.stderr).into_owned() + &String::from_utf8_lossy(&logs.stdout);
    // 128 MiB less max(24 MiB, a quarter): 96 MiB.
    assert!(
        log.contains(
            "the cgroup's memory limit is 134217728 bytes: --max-memory defaults to 100663296"
        ) && log.contains("loaded from the disk cache"),
        "{log}"
    );
    let left = podman(&[
        "ps",
        "-a",
        "--filter",
        &format!("name={pod}"),
        "--format",
        "{{.Names}}",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "containers left"
    );
}

// --- sandpipe serve: the image whose entry point serves, and docs/k8s's manifest ----------------

/// The issuer of the manifest's ConfigMap, which the test's tokens come from.
const K8S_ISSUER: &str = "https://issuer.example.com/realms/mcp";

/// One HTTP/1.1 request on its own connection; the status line and the rest as text.
fn http_get(port: u16, path: &str, host: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

/// docs/k8s/sandpipe-serve.yaml as a user fills it in: this image, the issuer's keys, this
/// endpoint's URL and a free port; and, since the pod is on the host's network here, without
/// the container's port mapping.
fn k8s_manifest(image: &str, jwks: &str, port: u16) -> String {
    let doc = std::fs::read_to_string(
        sandpipe_tests::workspace_root().join("docs/k8s/sandpipe-serve.yaml"),
    )
    .expect("docs/k8s/sandpipe-serve.yaml");
    let filled = doc
        .replace("registry.example.com/mcp/tools:1", image)
        .replace(
            "https://mcp.example.com/mcp",
            &format!("http://127.0.0.1:{port}/mcp"),
        )
        .replace(r#"{"keys": []}"#, jwks)
        .replace(
            "sandpipe-mcp,localhost:8080",
            &format!("sandpipe-mcp,127.0.0.1:{port},localhost:{port}"),
        )
        .replace(":8080", &format!(":{port}"))
        // On the host's network podman takes no port mappings: the container's port goes,
        // and the probes name the number.
        .replace(
            "          ports:\n            - {name: mcp, containerPort: 8080}\n",
            "",
        )
        .replace("port: mcp\n", &format!("port: {port}\n"));
    assert_ne!(filled, doc);
    assert!(
        filled.contains(&format!("\"0.0.0.0:{port}\"")),
        "the listening port was not replaced: {filled}"
    );
    filled
}

/// `sandpipe image --serve`: the image's entry point is `serve`; docs/k8s's Deployment,
/// Service and ConfigMap, played by `podman kube play`, serve the official SDK client with a
/// JWT of the ConfigMap's issuer, refuse one without, and `kube down` leaves nothing.
#[test]
fn the_kubernetes_manifest_serves_mcp_from_an_image_whose_entry_point_is_serve() {
    let image = Image::build(&sandpipe_tests::mcp_tools(), "serve", &["--serve"]);
    let inspect = podman(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config}}",
        &image.tag,
    ]);
    let config: serde_json::Value =
        serde_json::from_slice(&inspect.stdout).expect("the image's config");
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/sandpipe", "serve", "/plugin.wasm"])
    );
    assert!(
        config["Env"]
            .as_array()
            .is_some_and(|e| e.iter().any(|v| v == "SANDPIPE_LISTEN=0.0.0.0:8080")),
        "{config}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    peers::issuer(dir.path(), &["keys"]);
    let jwks: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("jwks.json")).expect("jwks.json"),
    )
    .expect("JSON");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let manifest = dir.path().join("sandpipe-serve.yaml");
    std::fs::write(&manifest, k8s_manifest(&image.tag, &jwks.to_string(), port)).expect("write");
    let manifest = manifest.to_string_lossy().into_owned();
    // The Deployment's pods have the manifest's names: a run that died before its `kube down`,
    // or whose `kube down` podman failed, leaves them, and `kube play` would then fail with
    // "pod already exists". They go first.
    for pod in deployment_pods() {
        let rm = podman_removing(&["pod", "rm", "--force", "--time", "0", &pod]);
        assert!(rm.status.success(), "podman pod rm {pod}: {}", text_of(&rm));
    }
    let play = podman(&["kube", "play", "--network", "host", &manifest]);
    // Whatever fails, `kube down` runs before the test ends.
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(
            play.status.success(),
            "podman kube play: {}",
            text_of(&play)
        );
        let healthy = (0..1500).any(|_| {
            let up = http_get(port, "/healthz", &format!("localhost:{port}"))
                .is_some_and(|r| r.starts_with("HTTP/1.1 200"));
            if !up {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            up
        });
        assert!(healthy, "no /healthz on port {port} within 30 s");
        let resource = format!("http://127.0.0.1:{port}/mcp");
        // Without a token: 401, naming the metadata, which names the ConfigMap's issuer.
        let metadata = http_get(
            port,
            "/.well-known/oauth-protected-resource/mcp",
            &format!("127.0.0.1:{port}"),
        )
        .expect("metadata");
        assert!(
            metadata.starts_with("HTTP/1.1 200") && metadata.contains(K8S_ISSUER),
            "{metadata}"
        );
        // The official SDK client with the issuer's token.
        let token = peers::issuer(
            dir.path(),
            &["token", "rsa-1", K8S_ISSUER, &resource, "alice"],
        );
        let report = peers::report(
            Command::new(peers::mcp_python())
                .arg(peers::source("mcp/drive_http.py"))
                .args(["2026-07-28", "basic", "--", &resource, &token]),
            "the SDK client against the pod",
        );
        assert_eq!(
            report["basic"]["add"]["result"]["text"],
            serde_json::json!(["5"]),
            "{report}"
        );
    }));
    let down = podman_removing(&["kube", "down", &manifest]);
    if let Err(panic) = served {
        std::panic::resume_unwind(panic);
    }
    assert!(
        down.status.success(),
        "podman kube down: {}",
        text_of(&down)
    );
    let left = podman(&[
        "ps",
        "-a",
        "--filter",
        "name=sandpipe-mcp",
        "--format",
        "{{.Names}}",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "containers left"
    );
    assert_eq!(deployment_pods(), Vec::<String>::new(), "pods left");
}

/// The pods of docs/k8s's Deployment (`sandpipe-mcp-pod-N`) that podman has.
fn deployment_pods() -> Vec<String> {
    let ls = podman(&[
        "pod",
        "ls",
        "--filter",
        "name=^sandpipe-mcp-pod-",
        "--format",
        "{{.Name}}",
    ]);
    assert!(ls.status.success(), "podman pod ls: {}", text_of(&ls));
    String::from_utf8_lossy(&ls.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

// --- signals, memory, reproducibility ------------------------------------------------------

#[test]
fn podman_rm_force_ends_the_plugin_by_sigterm_and_leaves_no_container() {
    let image = Image::build(&example_atp(), "rm", &[]);
    let name = format!("sandpipe-test-rm-{}", std::process::id());
    let mut cmd = peers::podman();
    cmd.args([
        "run",
        "-i",
        "--name",
        name.as_str(),
        image.tag.as_str(),
        "--atp",
    ]);
    let mut s = Session::spawn(cmd, Framing::CborSeq, Way::Behind(Some(Framing::CborSeq)));
    stand_in::atp::hello(&mut s);
    // What the deployer does at the end of a step: SIGTERM to PID 1 (sandpipe), SIGKILL after
    // 10 s. sandpipe closes the plugin's stdin (the SIGTERM emulation) and the plugin ends by
    // itself with 0; a PID 1 that ignored SIGTERM would end by the SIGKILL, 137.
    let rm = podman_removing(&["rm", "--force", &name]);
    assert!(rm.status.success(), "podman rm --force: {}", text_of(&rm));
    let inspect_gone = podman(&[
        "ps",
        "-a",
        "--filter",
        &format!("name=^{name}$"),
        "--format",
        "{{.Names}}",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&inspect_gone.stdout).trim(),
        "",
        "containers left"
    );
    let stderr = s.stderr();
    let t = s.finish();
    assert_eq!(t.status, "exit code 0", "podman run's stderr:\n{stderr}");
}

#[test]
fn a_memory_cap_from_the_environment_or_the_cgroup_stops_the_guest_with_122() {
    let image = Image::build(&plugin("alloc", Target::Wasm), "alloc", &[]);
    for limit in [
        ["-e", "SANDPIPE_MAX_MEMORY=32MiB"],
        // No cap given: the default follows the container's memory limit, under it.
        ["--memory", "96m"],
    ] {
        let mut args = vec!["run", "-i", "--rm", "-e", "SANDPIPE_STDERR="];
        args.extend(limit);
        args.push(&image.tag);
        let out = podman(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(122), "{limit:?}: {}", text_of(&out));
        assert!(
            stderr.contains("sandpipe: ") && stderr.contains("memory"),
            "{stderr}"
        );
    }
}

#[test]
fn the_same_inputs_give_the_same_image_and_podman_names_it_by_its_config() {
    let image = Image::build(&example_atp(), "twice", &[]);
    let again = image.archive.with_file_name("again.tar");
    let digest = build_archive(&example_atp(), &image.tag, &[], &again);
    assert_eq!(digest, image.digest);
    let (a, b) = (
        std::fs::read(&image.archive).expect("read"),
        std::fs::read(&again).expect("read"),
    );
    assert!(a == b, "the two archives differ");
    let id = podman(&["image", "inspect", "--format", "{{.Id}}", &image.tag]);
    let manifest: serde_json::Value = {
        let hex = image.digest.trim_start_matches("sha256:");
        let blob = image.archive.with_file_name("unpacked");
        std::fs::create_dir_all(&blob).expect("mkdir");
        let status = Command::new("tar")
            .arg("-xf")
            .arg(&image.archive)
            .arg("-C")
            .arg(&blob)
            .status()
            .expect("tar");
        assert!(status.success());
        serde_json::from_slice(
            &std::fs::read(blob.join("blobs/sha256").join(hex)).expect("manifest"),
        )
        .expect("manifest json")
    };
    let config = manifest["config"]["digest"]
        .as_str()
        .expect("config digest");
    assert_eq!(
        String::from_utf8_lossy(&id.stdout).trim(),
        config.trim_start_matches("sha256:"),
        "{}",
        text_of(&id)
    );
}

/// The plugin layer of the archive `archive`, unpacked into `dir`: its files by path.
fn unpack_plugin_layer(archive: &Path, dir: &Path) -> PathBuf {
    let tar = |file: &Path, into: &Path| {
        std::fs::create_dir_all(into).expect("mkdir");
        let status = Command::new("tar")
            .arg("-xf")
            .arg(file)
            .arg("-C")
            .arg(into)
            .status()
            .expect("tar");
        assert!(status.success(), "tar -xf {}", file.display());
    };
    let outer = dir.join("archive");
    tar(archive, &outer);
    let docker: serde_json::Value =
        serde_json::from_slice(&std::fs::read(outer.join("manifest.json")).expect("manifest"))
            .expect("manifest json");
    let layers = docker[0]["Layers"].as_array().expect("Layers");
    assert_eq!(layers.len(), 2, "{docker}");
    let layer = dir.join("layer");
    tar(
        &outer.join(layers[1].as_str().expect("a layer path")),
        &layer,
    );
    layer
}

/// The `.cwasm` files under `cache`.
fn artifacts(cache: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir(cache)
        .expect("the image's /cache")
        .flatten()
    {
        for file in std::fs::read_dir(dir.path())
            .expect("an engine's dir")
            .flatten()
        {
            if file.path().extension().is_some_and(|e| e == "cwasm") {
                found.push(file.path());
            }
        }
    }
    found
}

/// An image holds the one compiled artifact its `run` loads: the engine without fuel metering
/// by default, the one with it when the policy or the image's environment sets a fuel budget.
/// Each image's cache is then given to the same static sandpipe, run as the entrypoint runs it:
/// it loads from that cache, and a run with the other engine does not find its artifact there
/// (it compiles, last).
#[test]
fn an_image_holds_the_one_artifact_its_policy_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = example_atp();
    let policy = dir.path().join("fuel.toml");
    std::fs::write(
        &policy,
        format!(
            "[plugin]\nsource = {:?}\n\n[limits]\nfuel = 1000000000\n",
            plugin.display().to_string()
        ),
    )
    .expect("write the policy");
    let policy_arg = policy.to_str().expect("a UTF-8 path");
    for (name, extra, fuel) in [
        ("plain", vec![], false),
        ("policy", vec!["--policy", policy_arg], true),
        (
            "env",
            vec!["--container-env", "SANDPIPE_FUEL=1000000000"],
            true,
        ),
        (
            "unset",
            vec!["--policy", policy_arg, "--container-env", "SANDPIPE_FUEL="],
            false,
        ),
    ] {
        let here = dir.path().join(name);
        let archive = here.join("image.tar");
        std::fs::create_dir_all(&here).expect("mkdir");
        build_archive(
            &plugin,
            &format!("localhost/one/{name}:1"),
            &extra,
            &archive,
        );
        let layer = unpack_plugin_layer(&archive, &here);
        let cache = layer.join("cache");
        assert_eq!(
            artifacts(&cache).len(),
            1,
            "{name}: {:?}",
            artifacts(&cache)
        );

        // The run the image's entrypoint makes, and the one with the other engine.
        for run_fuel in [fuel, !fuel] {
            let mut cmd = Command::new(peers::sandpipe_static());
            cmd.env("SANDPIPE_CACHE_DIR", &cache)
                .env("SANDPIPE_LOG", "info")
                .arg("run");
            if run_fuel {
                cmd.args(["--fuel", "1000000000"]);
            }
            let out = cmd
                .arg(layer.join("plugin.wasm"))
                .stdin(Stdio::null())
                .output()
                .expect("running sandpipe");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                stderr.contains("loaded from the disk cache"),
                run_fuel == fuel,
                "{name}, a run {} fuel:\n{stderr}",
                if run_fuel { "with" } else { "without" }
            );
        }
    }
}
