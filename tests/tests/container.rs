//! Plugins as container images (issue 22): `sandpipe image` builds an image FROM scratch around
//! a static sandpipe (`scripts/build-static static-test`) and the plugin, compiled; real Podman
//! (Debian's, with the `containers.conf` `.ci/setup` writes) loads and runs it, and the real
//! Arcaflow engine (PyPI `arcaflow` 0.21.0) runs it with its real Podman deployer.
//!
//! | test | checks |
//! |---|---|
//! | `podman run -i` | ATP with a driver here: hello, a greeting, client done; the container ends by itself while its stdin stays open; the plugin was loaded from the image's cache, not compiled |
//! | Arcaflow + Podman | hello, error output, unicode, a large input, a chain of two steps: the engine's output and exit status equal those of the same plugin run natively (by a podman stand-in) |
//! | `podman rm --force` | SIGTERM to sandpipe as PID 1 ends the plugin by the SIGTERM emulation: exit 0, not the SIGKILL after 10 s; no container left |
//! | memory | `-e SANDPIPE_MAX_MEMORY=32MiB`, and a `--memory` limit with no cap given: exit 122, not the OOM killer |
//! | reproducible | two builds give the same digest and the same archive bytes; podman's image id is the config digest |
//!
//! Every image is loaded under a name of its own and removed at the end of its test.
//!
//! `cargo test -p sandpipe-tests --test container` (after `.ci/setup`).

mod stand_in;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sandpipe_proto::atp::{Message, Value};
use sandpipe_proto::frame::Framing;
use sandpipe_tests::{Target, peers, plugin};
use stand_in::atp::{map, text, work_start};
use stand_in::{Session, Way};

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
    let (t, _) = s.finish();
    assert_eq!(t.status, "exit 0", "{stderr}");
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

/// Run `workflow` on `input` with the engine's podman deployer using `podman_path`; the
/// engine's stdout (the workflow's output) and exit status.
fn run_workflow(podman_path: &Path, workflow: &str, input: &str) -> (String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("workflow.yaml"), workflow).expect("workflow");
    std::fs::write(d.join("input.yaml"), input).expect("input");
    std::fs::write(
        d.join("config.yaml"),
        format!(
            "deployers:\n  image:\n    deployer_name: podman\n    podman:\n      path: {}\n    \
             deployment:\n      imagePullPolicy: Never\nlog:\n  level: info\n",
            podman_path.display()
        ),
    )
    .expect("config");
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
    )
}

/// A workflow case: its name, the workflow for an image, the input, what the output holds.
type Case = (&'static str, fn(&str) -> String, String, &'static str);

#[test]
fn arcaflow_engine_runs_the_image_with_real_podman_like_the_native_plugin() {
    let image = Image::build(&example_atp(), "arcaflow", &[]);
    let native = plugin("example-atp", Target::Native);
    let stand_in_dir = tempfile::tempdir().expect("tempdir");
    let stand_in = fake_podman(stand_in_dir.path(), &native);
    let real_podman = peers::debian("podman");
    let large = "y".repeat(256 << 10);
    let cases: [Case; 5] = [
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
    ];
    let mut failures = Vec::new();
    for (case, workflow, input, expect) in &cases {
        let want = run_workflow(&stand_in, &workflow("localhost/native"), input);
        let got = run_workflow(&real_podman, &workflow(&image.tag), input);
        if !want.0.contains(expect) {
            failures.push(format!(
                "{case}: the native run lacks {expect:?}:\n{}",
                want.0
            ));
        }
        if got != want {
            failures.push(format!(
                "{case}: the image under podman differs from the native plugin\nnative ({}):\n{}\nimage ({}):\n{}",
                want.1, want.0, got.1, got.0
            ));
        }
    }
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
    let rm = podman(&["rm", "--force", &name]);
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
    let (t, _) = s.finish();
    assert_eq!(t.status, "exit 0", "podman run's stderr:\n{stderr}");
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
