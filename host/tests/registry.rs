//! Plugins by reference, against a real registry: Debian's `docker-registry`
//! (CNCF distribution 2.8) started here on 127.0.0.1 with a temporary storage dir, without auth
//! and with htpasswd. Cross-checked with clients nobody here wrote: skopeo, oras (PyPI) and
//! minisign.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sandpipe_tests::registry::{PASSWORD, Registry, minisign_keypair};
use sandpipe_tests::{Target, peers, plugin};

/// A sandpipe command with its own cache dir and Docker config dir.
struct Sandpipe {
    cache: tempfile::TempDir,
    docker_config: tempfile::TempDir,
}

impl Sandpipe {
    fn new() -> Sandpipe {
        Sandpipe {
            cache: tempfile::tempdir().expect("tempdir"),
            docker_config: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn run(&self, args: &[&str], stdin: &[u8]) -> Output {
        self.run_env(args, stdin, &[])
    }

    fn run_env(&self, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandpipe"));
        cmd.args(args)
            .env_remove("SANDPIPE_CACHE_MAX_SIZE")
            .env("SANDPIPE_CACHE_DIR", self.cache.path())
            .env("DOCKER_CONFIG", self.docker_config.path())
            .envs(env.iter().copied());
        sandpipe_tests::cli::run_command(cmd, stdin)
    }

    /// `push REF FILE`, expecting success; returns the printed REF@sha256:….
    fn push(&self, reference: &str, file: &Path, extra: &[&str]) -> String {
        let mut args = vec!["push"];
        args.extend_from_slice(extra);
        args.push(reference);
        let file = file.display().to_string();
        args.push(&file);
        let out = self.run_env(&args, b"", &[("SANDPIPE_MINISIGN_PASSWORD", PASSWORD)]);
        assert_eq!(out.status.code(), Some(0), "push: {}", stderr(&out));
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_owned()
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn wasm(bin: &str) -> PathBuf {
    plugin(bin, Target::Wasm)
}

/// A refusal: sandpipe's load status, one `sandpipe:` line naming `reason`, nothing run.
fn assert_refused(out: &Output, reason: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(out.stdout.is_empty(), "the plugin must not run: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("sandpipe: "), "{err}");
    assert!(err.contains(reason), "expected {reason:?} in: {err}");
}

const FRAME: &[u8] = b"{\"id\":1}\n";

#[test]
fn push_run_pull_and_offline_after_the_registry_stops() {
    let mut registry = Registry::start(None);
    let sp = Sandpipe::new();
    let echo = wasm("echo-lines");
    let reference = registry.reference("plugins/echo:1");
    let pinned = sp.push(&reference, &echo, &[]);
    let digest = pinned
        .strip_prefix(&format!("{reference}@"))
        .unwrap_or_else(|| panic!("push prints REF@sha256:…, got {pinned}"))
        .to_owned();

    // Reproducible: the same file gives the same manifest digest.
    assert_eq!(sp.push(&reference, &echo, &[]), pinned);

    // skopeo sees the CNCF layout, and the manifest hashes to the printed digest.
    let out = Command::new(peers::debian("skopeo"))
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{}/plugins/echo:1", registry.host()))
        .output()
        .expect("skopeo");
    assert!(out.status.success(), "skopeo: {}", stderr(&out));
    let manifest: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(
        layers[0]["size"].as_u64(),
        Some(std::fs::metadata(&echo).expect("meta").len())
    );
    assert_eq!(
        format!("sha256:{}", sha256_hex(&out.stdout)),
        digest,
        "the printed digest is the manifest's"
    );

    // run by tag echoes a frame.
    let out = sp.run(&["run", "--framing", "lines", &reference], FRAME);
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // pull gives a byte-identical file.
    let dir = tempfile::tempdir().expect("tempdir");
    let pulled = dir.path().join("echo.wasm");
    let out = sp.run(
        &["pull", &reference, "-o", &pulled.display().to_string()],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), pinned);
    assert_eq!(
        std::fs::read(&pulled).expect("pulled"),
        std::fs::read(&echo).expect("echo")
    );

    // The registry goes down: a clear error without --offline, the store with it.
    registry.stop();
    let out = sp.run(&["run", "--framing", "lines", &pinned], FRAME);
    assert_refused(
        &out,
        &format!("registry {} is unreachable", registry.host()),
    );
    let out = sp.run(&["run", "--offline", "--framing", "lines", &pinned], FRAME);
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A bare tag is not pinned, so --offline refuses it.
    let out = sp.run(&["run", "--offline", &reference], FRAME);
    assert_refused(&out, "is not pinned");
}

#[test]
fn a_component_pushed_by_oras_runs() {
    let registry = Registry::start(None);
    let sp = Sandpipe::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = dir.path().join("echo.wasm");
    std::fs::copy(wasm("echo-lines"), &echo).expect("copy");
    std::fs::write(dir.path().join("config.json"), b"{}").expect("config");
    let script = format!(
        "import oras.client\n\
         c = oras.client.OrasClient(hostname='{host}', insecure=True)\n\
         c.push(target='{host}/oras/echo:v1', files=['echo.wasm:application/wasm'],\n\
                manifest_config='config.json:application/vnd.wasm.config.v0+json', disable_path_validation=True)\n",
        host = registry.host()
    );
    let out = Command::new(peers::oras_python())
        .arg("-c")
        .arg(script)
        .current_dir(dir.path())
        .output()
        .expect("oras");
    assert!(
        out.status.success(),
        "oras push: {}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    let out = sp.run(
        &[
            "run",
            "--framing",
            "lines",
            &registry.reference("oras/echo:v1"),
        ],
        FRAME,
    );
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn signatures_interoperate_with_minisign_and_refuse_wrong_or_missing_ones() {
    let registry = Registry::start(None);
    let sp = Sandpipe::new();
    let keys = tempfile::tempdir().expect("tempdir");
    let (sk, pk) = minisign_keypair(keys.path(), "good");
    let (_, other_pk) = minisign_keypair(keys.path(), "other");
    let pk_s = pk.display().to_string();
    let other_s = other_pk.display().to_string();

    let signed = registry.reference("signed/echo:1");
    sp.push(
        &signed,
        &wasm("echo-lines"),
        &["--sign", &sk.display().to_string()],
    );

    // pull --signature writes a .minisig that minisign -V verifies over the manifest.
    let out_dir = tempfile::tempdir().expect("tempdir");
    let sig = out_dir.path().join("echo.minisig");
    let manifest = out_dir.path().join("manifest.json");
    let out = sp.run(
        &[
            "pull",
            "--trusted-key",
            &pk_s,
            "--require-signature",
            "--signature",
            &sig.display().to_string(),
            "--manifest",
            &manifest.display().to_string(),
            "-o",
            &out_dir.path().join("echo.wasm").display().to_string(),
            &signed,
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = Command::new(peers::debian("minisign"))
        .arg("-V")
        .arg("-p")
        .arg(&pk)
        .arg("-m")
        .arg(&manifest)
        .arg("-x")
        .arg(&sig)
        .output()
        .expect("minisign -V");
    assert!(
        out.status.success(),
        "minisign -V: {}{}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );

    // Trusted key: it runs.
    let out = sp.run(
        &[
            "run",
            "--trusted-key",
            &pk_s,
            "--require-signature",
            "--framing",
            "lines",
            &signed,
        ],
        FRAME,
    );
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));

    // A wrong key: refused before anything is compiled.
    let out = sp.run(
        &[
            "run",
            "--trusted-key",
            &other_s,
            "--framing",
            "lines",
            &signed,
        ],
        FRAME,
    );
    assert_refused(&out, "which is not a --trusted-key");

    // No signature under --require-signature: refused.
    let unsigned = registry.reference("unsigned/echo:1");
    sp.push(&unsigned, &wasm("echo-lines"), &[]);
    for cmd in ["run", "inspect"] {
        let out = sp.run(
            &[
                cmd,
                "--trusted-key",
                &pk_s,
                "--require-signature",
                &unsigned,
            ],
            FRAME,
        );
        assert_refused(&out, "is not signed (--require-signature)");
    }
}

/// A key made by `minisign -G -W` (no password: minisign leaves its checksum zeroed) signs
/// through `push --sign`; and an engine's whole command line is one policy file naming the
/// signed reference, its key and its lock file.
#[test]
fn a_passwordless_key_signs_and_a_policy_file_names_the_signed_reference() {
    let registry = Registry::start(None);
    let sp = Sandpipe::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let sk = dir.path().join("w.key");
    let pk = dir.path().join("w.pub");
    let out = Command::new(peers::debian("minisign"))
        .args(["-G", "-W", "-p"])
        .arg(&pk)
        .arg("-s")
        .arg(&sk)
        .stdin(Stdio::null())
        .output()
        .expect("minisign -G -W");
    assert!(out.status.success(), "minisign -G -W: {}", stderr(&out));
    let reference = registry.reference("signed/echo:w");
    let sk_s = sk.display().to_string();
    let out = sp.run(
        &[
            "push",
            "--sign",
            &sk_s,
            &reference,
            &wasm("echo-lines").display().to_string(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "push: {}", stderr(&out));

    let policy = dir.path().join("echo.toml");
    std::fs::write(
        &policy,
        format!(
            r#"framing = "lines"

[plugin]
source = "{reference}"

[limits]
max-memory = "32MiB"

[trust]
trusted-keys = ["w.pub"]
require-signature = true
lockfile = "sandpipe.lock"
"#
        ),
    )
    .expect("write");
    let policy_s = policy.display().to_string();
    let out = sp.run(&["run", &policy_s], FRAME);
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lock = std::fs::read_to_string(dir.path().join("sandpipe.lock")).expect("lock file");
    assert!(lock.contains("signed/echo:w"), "{lock}");

    // Another key in the file: refused before anything runs.
    let (_, other) = minisign_keypair(dir.path(), "other");
    std::fs::write(
        &policy,
        format!(
            "framing = \"lines\"\n[plugin]\nsource = \"{reference}\"\n[trust]\ntrusted-keys = [\"{}\"]\n",
            other.display()
        ),
    )
    .expect("write");
    let out = sp.run(&["run", &policy_s], FRAME);
    assert_refused(&out, "which is not a --trusted-key");
}

#[test]
fn a_corrupted_blob_in_the_registry_is_refused() {
    let registry = Registry::start(None);
    let sp = Sandpipe::new();
    let echo = wasm("echo-lines");
    let bytes = std::fs::read(&echo).expect("read");
    let reference = registry.reference("corrupt/echo:1");
    sp.push(&reference, &echo, &[]);
    let layer = format!("sha256:{}", sha256_hex(&bytes));
    let file = registry.blob_file(&layer);
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    std::fs::write(&file, &bad).expect("corrupt the registry's blob");
    let out = sp.run(&["run", "--framing", "lines", &reference], FRAME);
    assert_refused(
        &out,
        &format!("layer has digest sha256:{}", sha256_hex(&bad)),
    );
}

#[test]
fn a_wrong_digest_in_the_reference_is_refused() {
    let registry = Registry::start(None);
    let sp = Sandpipe::new();
    let reference = registry.reference("plugins/echo:1");
    sp.push(&reference, &wasm("echo-lines"), &[]);
    let wrong = format!("{reference}@sha256:{}", "0".repeat(64));
    let out = sp.run(&["run", "--framing", "lines", &wrong], FRAME);
    assert_refused(&out, "not found");
}

#[test]
fn a_moved_tag_is_refused_under_locked() {
    let registry = Registry::start(None);
    let sp = Sandpipe::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = dir.path().join("sandpipe.lock");
    let lock_s = lock.display().to_string();
    let reference = registry.reference("plugins/echo:stable");
    let first = sp.push(&reference, &wasm("echo-lines"), &[]);
    let out = sp.run(
        &[
            "run",
            "--lockfile",
            &lock_s,
            "--framing",
            "lines",
            &reference,
        ],
        FRAME,
    );
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    let text = std::fs::read_to_string(&lock).expect("lock file written");
    let first_digest = first.rsplit_once('@').expect("pinned").1;
    assert!(
        text.contains(&format!("manifest = \"{first_digest}\"")),
        "{text}"
    );
    assert!(
        text.contains(&format!("reference = \"{reference}\"")),
        "{text}"
    );

    // Locked and unmoved: runs.
    let out = sp.run(
        &[
            "run",
            "--lockfile",
            &lock_s,
            "--locked",
            "--framing",
            "lines",
            &reference,
        ],
        FRAME,
    );
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));

    // The tag moves to another plugin.
    let second = sp.push(&reference, &wasm("echo-cbor"), &[]);
    let second_digest = second.rsplit_once('@').expect("pinned").1;
    let out = sp.run(
        &[
            "run",
            "--lockfile",
            &lock_s,
            "--locked",
            "--framing",
            "lines",
            &reference,
        ],
        FRAME,
    );
    assert_refused(
        &out,
        &format!("the lock file has {first_digest}, the registry now has {second_digest}"),
    );

    // --offline resolves the tag through the lock file.
    let out = sp.run(
        &[
            "run",
            "--lockfile",
            &lock_s,
            "--offline",
            "--framing",
            "lines",
            &reference,
        ],
        FRAME,
    );
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
}

#[test]
fn a_registry_with_htpasswd_wants_credentials_from_the_docker_config() {
    let registry = Registry::start(Some(("sandpipe", "s3cret")));
    let sp = Sandpipe::new();
    let reference = registry.reference("private/echo:1");
    let out = sp.run(
        &[
            "push",
            &reference,
            &wasm("echo-lines").display().to_string(),
        ],
        b"",
    );
    assert_refused(&out, "refused access (401 unauthorized); no credentials");
    let out = sp.run(&["run", &reference], FRAME);
    assert_refused(&out, "refused access (401 unauthorized)");

    // skopeo login writes the Docker config; sandpipe reads it.
    let authfile = sp.docker_config.path().join("config.json");
    let out = Command::new(peers::debian("skopeo"))
        .args([
            "login",
            "--tls-verify=false",
            "-u",
            "sandpipe",
            "-p",
            "s3cret",
            "--authfile",
        ])
        .arg(&authfile)
        .arg(registry.host())
        .output()
        .expect("skopeo login");
    assert!(out.status.success(), "skopeo login: {}", stderr(&out));
    sp.push(&reference, &wasm("echo-lines"), &[]);
    let out = sp.run(&["run", "--framing", "lines", &reference], FRAME);
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn sha256_pins_a_local_path() {
    let sp = Sandpipe::new();
    let echo = wasm("echo-lines");
    let hex = sha256_hex(&std::fs::read(&echo).expect("read"));
    let path = echo.display().to_string();
    let out = sp.run(
        &["run", "--sha256", &hex, "--framing", "lines", &path],
        FRAME,
    );
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    let wrong = "f".repeat(64);
    let out = sp.run(
        &["run", "--sha256", &wrong, "--framing", "lines", &path],
        FRAME,
    );
    assert_refused(&out, &format!("has sha256 {hex}, not {wrong} (--sha256)"));
}

#[test]
fn compile_ahead_of_time_then_run_is_a_cache_hit() {
    let sp = Sandpipe::new();
    let path = wasm("echo-lines").display().to_string();
    let out = sp.run(&["compile", &path], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("compiled "));
    let out = sp.run(&["run", "-v", "--framing", "lines", &path], FRAME);
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("loaded from the disk cache"),
        "{}",
        stderr(&out)
    );
}

/// The cache holds an artifact of the plugin compiled for another engine: here with fuel
/// metering on, which a `run` without a fuel budget compiles out, and which changes the
/// generated code as a CPU feature of the build machine does (an image's /cache built
/// elsewhere). wasmtime's own check refuses it; sandpipe compiles and says so in one
/// `sandpipe: note:` line with wasmtime's reason; the next start loads the artifact it kept,
/// silently.
#[test]
fn a_cached_artifact_that_does_not_fit_is_said_once_then_replaced() {
    let sp = Sandpipe::new();
    let echo = wasm("echo-lines");
    let other = sandpipe::Host::with_options(
        &sandpipe::HostOptions::default()
            .cache_dir(Some(sp.cache.path().to_owned()))
            .metering(sandpipe::Metering::all()),
    )
    .expect("host");
    other.load(&echo).expect("compile with fuel on");
    let path = echo.display().to_string();
    let out = sp.run(&["run", "--framing", "lines", &path], FRAME);
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].starts_with("sandpipe: note: compiled ")
            && lines[0].contains("does not fit this engine's settings or this CPU")
            && lines[0].contains("fuel"),
        "{err}"
    );
    let out = sp.run(&["run", "-v", "--framing", "lines", &path], FRAME);
    assert_eq!(out.stdout, FRAME, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("loaded from the disk cache") && !stderr(&out).contains("note"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_cache_stays_under_its_cap_when_filled_past_it() {
    let sp = Sandpipe::new();
    let plugins = ["echo-lines", "echo-cbor", "echo-content-length"].map(wasm);
    let out = sp.run(&["compile", &plugins[0].display().to_string()], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let one = cache_size(sp.cache.path());
    assert!(one > 0);
    // Room for one and a half artifacts: compiling the other two must evict.
    let cap = one + one / 2;
    let cap_s = cap.to_string();
    for p in &plugins[1..] {
        let out = sp.run_env(
            &["compile", &p.display().to_string()],
            b"",
            &[("SANDPIPE_CACHE_MAX_SIZE", &cap_s)],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let total = cache_size(sp.cache.path());
        assert!(
            total <= cap,
            "cache holds {total} bytes, over its cap of {cap}"
        );
    }
    // `compile` writes each plugin's two artifacts (with fuel metering and without): the cap,
    // one plugin and a half, keeps the newest plugin's two and at most one older artifact, of
    // the six that all three would take.
    let out = sp.run(&["cache", "ls"], b"");
    let listing = String::from_utf8_lossy(&out.stdout).into_owned();
    let compiled = listing
        .lines()
        .filter(|l| l.starts_with("compiled"))
        .count();
    assert!((2..=3).contains(&compiled), "{listing}");
    let out = sp.run(&["cache", "clean"], b"");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(cache_size(sp.cache.path()), 0);
}

fn cache_size(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            total += cache_size(&p);
        } else if let Ok(m) = p.metadata() {
            total += m.len();
        }
    }
    total
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
