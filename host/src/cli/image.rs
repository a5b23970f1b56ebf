//! `sandpipe image`: a container image `FROM scratch` around one plugin, for engines that run
//! plugins as containers (Arcaflow's Podman, Docker and Kubernetes deployers).
//!
//! ```text
//!   layer 1  /sandpipe                  the static sandpipe (this executable, or --sandpipe)
//!   layer 2  /plugin.wasm               the plugin
//!            /cache/wasmtime-*/*.cwasm  the plugin compiled by that same sandpipe, for the
//!                                       engine the image's policy runs (with fuel metering
//!                                       when it sets a fuel budget, without otherwise)
//!            /policy.toml               with --policy
//!   entrypoint  /sandpipe run [--policy /policy.toml] /plugin.wasm   (+ the container's args)
//!   env         SANDPIPE_CACHE_DIR=/cache, SANDPIPE_STDERR=/dev/null,
//!               SANDPIPE_MEMORY_FOLLOWS_CGROUP=1, and --container-env
//!   --serve:    entrypoint /sandpipe serve [--policy /policy.toml] /plugin.wasm, env
//!               SANDPIPE_CACHE_DIR=/cache, SANDPIPE_LISTEN=0.0.0.0:8080 (stderr kept: it is
//!               the endpoint's log; no cap follows the cgroup: its instances share it)
//! ```
//!
//! The image's sandpipe compiles the plugin itself (`sandpipe compile`, run as a child), so the
//! artifact's key matches what that binary looks up at start: no container start compiles
//! unless its CPU lacks a feature the build machine had.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::dist::image::{Image, ImageFile, ImageSpec, check_static_elf};
use crate::policy::sections::{env_name, meters_fuel};

/// Where the image holds the plugin's compiled artifacts.
const CACHE_DIR: &str = "/cache";

/// Where a serving image listens (`--serve`): every address of the container, MCP's
/// conventional port.
const SERVE_LISTEN: &str = "0.0.0.0:8080";

/// Arguments of `sandpipe image`.
#[derive(Debug, clap::Args)]
pub struct ImageArgs {
    #[command(flatten)]
    cache: super::UnusedCacheArgs,
    /// Write the image as an archive that `podman load` and `docker load` accept.
    #[arg(short, long, value_name = "FILE.tar", required_unless_present = "push")]
    output: Option<PathBuf>,
    /// Push the image to oci://HOST[:PORT]/REPO[:TAG] instead (a registry's plain-HTTP rules
    /// are those of `sandpipe push`).
    #[arg(long, value_name = "REF", conflicts_with = "output")]
    push: Option<String>,
    /// The image's name in the archive (what `podman load` tags it) [default:
    /// localhost/sandpipe/<plugin file stem>:latest].
    #[arg(long, value_name = "NAME")]
    tag: Option<String>,
    /// A policy file to put in the image (/policy.toml, passed to `run --policy`): the plugin's
    /// framing or protocol, limits and grants. Its paths are the container's.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The sandpipe executable to put in the image; it must be static [default: this one].
    #[arg(long, value_name = "BIN")]
    sandpipe: Option<PathBuf>,
    /// An environment variable of the image, e.g. SANDPIPE_FRAMING=cbor or
    /// SANDPIPE_MAX_MEMORY=64MiB (every `run` option has one; `-e` at `podman run` overrides).
    /// It replaces the image's own setting of the same name (SANDPIPE_STDERR= brings stderr
    /// back). The only knob under Arcaflow's Docker deployer, which cannot pass one.
    #[arg(long = "container-env", value_name = "NAME=VALUE")]
    container_env: Vec<String>,
    /// Sign the manifest with this minisign secret key, as `sandpipe push` signs a plugin:
    /// pushed as its signature artifact, or written to FILE.tar.minisig beside the archive.
    #[arg(long, value_name = "KEY")]
    sign: Option<PathBuf>,
    /// Speak plain HTTP to this registry (HOST[:PORT]; repeatable; loopback always is).
    #[arg(long = "insecure-registry", value_name = "HOST")]
    insecure_registries: Vec<String>,
    /// The image serves the plugin, an MCP server, over Streamable HTTP: entry point `sandpipe
    /// serve`, listening on 0.0.0.0:8080 (SANDPIPE_LISTEN). It needs a way for clients to
    /// authenticate at start (SANDPIPE_AUTH_TOKEN_FILE or SANDPIPE_JWKS, or the policy's
    /// [serve]); see docs/serve.md for a Kubernetes manifest.
    #[arg(long)]
    serve: bool,
    /// The plugin: a .wasm component or p1 module [default: the one --policy names].
    #[arg(required_unless_present = "policy")]
    plugin: Option<PathBuf>,
}

pub(crate) async fn image(args: ImageArgs) -> Result<i32> {
    args.cache.refuse("image")?;
    let plugin_path = match (&args.plugin, &args.policy) {
        (Some(p), _) => p.clone(),
        (None, Some(policy)) => super::policy_overlay::plugin_of(policy)?,
        (None, None) => bail!("image needs PLUGIN or --policy"),
    };
    if plugin_path.to_string_lossy().starts_with("oci://") {
        bail!(
            "image takes a plugin file; `sandpipe pull {}` first",
            plugin_path.display()
        );
    }
    let plugin = std::fs::read(&plugin_path)
        .with_context(|| format!("reading the plugin {}", plugin_path.display()))?;
    if !plugin.starts_with(b"\0asm") {
        bail!(
            "{} is not wasm: an image holds a sandboxed plugin only",
            plugin_path.display()
        );
    }
    let sandpipe_path = match &args.sandpipe {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("finding sandpipe's own executable")?,
    };
    let sandpipe = std::fs::read(&sandpipe_path)
        .with_context(|| format!("reading {}", sandpipe_path.display()))?;
    check_static_elf(&sandpipe_path.display().to_string(), &sandpipe)?;
    let fuel = runs_metered(args.policy.as_deref(), &args.container_env)?;
    let cache = precompile(&sandpipe_path, &plugin_path, fuel)?;
    let compiled: u64 = cache.iter().map(|f| f.bytes.len() as u64).sum();

    let mut layer = vec![ImageFile::file("plugin.wasm", 0o644, plugin.clone())];
    layer.extend(cache);
    let command = if args.serve { "serve" } else { "run" };
    let mut entrypoint: Vec<String> = vec!["/sandpipe".into(), command.into()];
    if let Some(policy) = &args.policy {
        let text = std::fs::read(policy)
            .with_context(|| format!("reading the policy {}", policy.display()))?;
        layer.push(ImageFile::file("policy.toml", 0o644, text));
        entrypoint.extend(["--policy".into(), "/policy.toml".into()]);
    }
    entrypoint.push("/plugin.wasm".into());
    let mut env = vec![format!("SANDPIPE_CACHE_DIR={CACHE_DIR}")];
    if args.serve {
        // Reachable from outside the container; `serve` refuses to start there without auth.
        // The container's memory limit is shared by every instance, so no instance's cap
        // follows it: size it with SANDPIPE_MAX_MEMORY and the limit with --max-instances.
        env.push(format!("{}={SERVE_LISTEN}", env_name("listen")));
    } else {
        env.push(format!("{FOLLOW_CGROUP_ENV}=1"));
        // stderr is no use to an engine, and Arcaflow's Docker deployer takes any byte on it
        // for a broken stream: by default the image discards it (`-e SANDPIPE_STDERR=` brings
        // it back). A serving image keeps it: it is the endpoint's log.
        env.push("SANDPIPE_STDERR=/dev/null".to_owned());
    }
    for e in &args.container_env {
        let Some((name, _)) = e.split_once('=') else {
            bail!("--container-env {e:?}: expected NAME=VALUE");
        };
        // A name given twice would be in the environment twice, and which one a process sees
        // is up to its libc (glibc's getenv takes the first): the later one replaces it, so
        // `--container-env SANDPIPE_STDERR=` does bring stderr back.
        env.retain(|old| old.split_once('=').map(|(n, _)| n) != Some(name));
        env.push(e.clone());
    }
    let stem = plugin_path
        .file_stem()
        .map(|s| s.to_string_lossy().to_lowercase())
        .unwrap_or_else(|| "plugin".into());
    let tag = args
        .tag
        .clone()
        .unwrap_or_else(|| format!("localhost/sandpipe/{stem}:latest"));
    let spec = ImageSpec {
        layers: vec![
            vec![ImageFile::file("sandpipe", 0o755, sandpipe.clone())],
            layer,
        ],
        entrypoint,
        env,
        tag,
    };
    let image = Image::build(&spec)?;
    let mb = |n: u64| n as f64 / 1e6;
    eprintln!(
        "sandpipe: image {} (sandpipe {:.1} MB, plugin {:.1} MB, compiled {:.1} MB; {:.1} MB in all)",
        image.tag,
        mb(sandpipe.len() as u64),
        mb(plugin.len() as u64),
        mb(compiled),
        mb(image.size())
    );
    if let Some(out) = &args.output {
        write_archive(&image, out)?;
        if let Some(key) = &args.sign {
            let (minisig, id) = crate::dist::signing::sign(
                key,
                &image.manifest,
                &format!("sandpipe image manifest {}", image.manifest_digest),
            )?;
            let sig_path = PathBuf::from(format!("{}.minisig", out.display()));
            std::fs::write(&sig_path, minisig)
                .with_context(|| format!("writing {}", sig_path.display()))?;
            eprintln!("sandpipe: signed by key {id} ({})", sig_path.display());
        }
        println!("{}", image.manifest_digest);
        return Ok(0);
    }
    push(image, &args)
}

#[cfg(feature = "registry")]
fn push(image: Image, args: &ImageArgs) -> Result<i32> {
    use crate::dist::registry::{Client, ClientOptions, Credentials, Reference};
    let Some(reference) = &args.push else {
        bail!("image needs -o FILE.tar or --push REF");
    };
    let reference: Reference = reference.parse()?;
    let mut options = ClientOptions::new(Credentials::from_default_config()?);
    options.insecure_registries = args.insecure_registries.clone();
    let client = Client::new(options);
    let pushed = crate::dist::registry::fetch::push_image(
        &client,
        &reference,
        &image,
        args.sign.as_deref(),
    )?;
    if let Some(id) = &pushed.signer {
        eprintln!("sandpipe: signed by key {id}");
    }
    println!("{}", pushed.reference);
    Ok(0)
}

#[cfg(not(feature = "registry"))]
fn push(_image: Image, _args: &ImageArgs) -> Result<i32> {
    bail!("--push needs sandpipe built with the `registry` feature")
}

/// Write the archive next to its final name, then rename it: an interrupted build never leaves
/// a truncated archive under the name a `podman load` would read.
fn write_archive(image: &Image, out: &Path) -> Result<()> {
    let tmp = PathBuf::from(format!("{}.{}.tmp", out.display(), std::process::id()));
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?,
    );
    image
        .write_archive(&mut file)
        .and_then(|()| std::io::Write::flush(&mut file))
        .with_context(|| format!("writing {}", tmp.display()))?;
    drop(file);
    std::fs::rename(&tmp, out).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// Whether the image's `run` sets a fuel budget, and so runs the engine with fuel metering:
/// `run` decides it from `--fuel` and `--fuel-per-request`, here from the image's policy file
/// and its `--container-env`, which lies over the file as it will at start (an empty value
/// unsets, as clap reads it). The image holds that engine's artifact only: a `podman run -e
/// SANDPIPE_FUEL=N` of an image built without a fuel budget compiles the plugin at start.
fn runs_metered(policy: Option<&Path>, container_env: &[String]) -> Result<bool> {
    let (mut limits, mut requests) = match policy.map(crate::PolicyFile::load).transpose()? {
        Some(file) => (file.limits, file.requests),
        None => Default::default(),
    };
    // The environment over the file, as clap reads it at start: the last setting of a name is
    // the image's (see `image`), and an empty value unsets. Only whether a budget is set
    // matters here, so a set value stands for any.
    let env = |var: String| {
        container_env
            .iter()
            .rev()
            .find_map(|e| e.strip_prefix(var.as_str())?.strip_prefix('='))
            .map(|value| (!value.is_empty()).then_some(1))
    };
    if let Some(set) = env(env_name("fuel")) {
        limits.fuel = set;
    }
    if let Some(set) = env(env_name("fuel-per-request")) {
        requests.fuel = set;
    }
    Ok(meters_fuel(&limits, &requests))
}

/// Compile `plugin` with `sandpipe` (`sandpipe compile --cache-dir TMP`) for the engine with
/// fuel metering or the one without, and return the cache's compiled artifact as image files
/// under /cache, in sorted order.
fn precompile(sandpipe: &Path, plugin: &Path, fuel: bool) -> Result<Vec<ImageFile>> {
    let tmp = std::env::temp_dir().join(format!(
        "sandpipe-image-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    let out = Command::new(sandpipe)
        .arg("compile")
        .arg("--cache-dir")
        .arg(&tmp)
        .args(["--metering", if fuel { "fuel" } else { "none" }])
        .arg(plugin)
        .env_remove("SANDPIPE_CACHE_DIR")
        .output()
        .with_context(|| format!("running {} compile", sandpipe.display()));
    let files = out.and_then(|out| {
        if !out.status.success() {
            bail!(
                "{} compile {} failed ({}): {}",
                sandpipe.display(),
                plugin.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        collect_cache(&tmp)
    });
    let _ = std::fs::remove_dir_all(&tmp);
    files
}

/// The `wasmtime-*` directories of the cache root `root`, as files under `cache/`.
fn collect_cache(root: &Path) -> Result<Vec<ImageFile>> {
    let mut files = vec![ImageFile::dir(CACHE_DIR.trim_start_matches('/'))];
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .with_context(|| format!("reading {}", root.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("wasmtime-"))
        })
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        files.push(ImageFile::dir(format!("cache/{name}")));
        let mut artifacts: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .collect();
        artifacts.sort();
        for a in artifacts {
            let bytes = std::fs::read(&a).with_context(|| format!("reading {}", a.display()))?;
            let file = a
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            files.push(ImageFile::file(
                format!("cache/{name}/{file}"),
                0o644,
                bytes,
            ));
        }
    }
    if files.len() < 3 {
        bail!(
            "compiling left no artifact in {} (is the sandpipe given a different build?)",
            root.display()
        );
    }
    Ok(files)
}

/// Set to `1` in the environment of the images `sandpipe image` builds: there the container's
/// memory limit is the plugin's to use, so the default cap follows it up as well as down.
pub(crate) const FOLLOW_CGROUP_ENV: &str = "SANDPIPE_MEMORY_FOLLOWS_CGROUP";

/// Under a memory limit (the cgroup's), `run`'s default `--max-memory` is a bit under that
/// limit when that is lower than the default: a guest that keeps growing then meets sandpipe's
/// cap (exit status 122, one line saying so) before the kernel's OOM killer ends the whole
/// container (or CI job) with no word. It is never raised above the default by a limit found
/// on the machine (a CI runner's or systemd's 16 GiB), only in an image, which asks for it with
/// [`FOLLOW_CGROUP_ENV`]. A cap from the command line, `SANDPIPE_MAX_MEMORY` or a policy file
/// still wins.
pub(crate) fn follow_cgroup_memory(sandbox: &mut super::sandbox_args::SandboxArgs) {
    if sandbox.limits.max_memory.is_some() {
        return;
    }
    let Some(limit) = crate::dist::image::cgroup_memory_limit() else {
        return;
    };
    let raise = std::env::var_os(FOLLOW_CGROUP_ENV).is_some_and(|v| v == "1");
    let default = crate::DEFAULT_MAX_MEMORY;
    let Some(cap) = crate::dist::image::default_memory_cap(limit, default, raise) else {
        return;
    };
    tracing::info!("the cgroup's memory limit is {limit} bytes: --max-memory defaults to {cap}");
    sandbox.limits.max_memory = Some(crate::policy::value::Cap(Some(cap)));
}

/// `run --stderr FILE`: descriptor 2 becomes FILE (appended to), so sandpipe's own messages and
/// the plugin's stderr (forwarded from a wasm guest, inherited by a native plugin) go there.
pub(crate) fn redirect_stderr(path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)?;
    // SAFETY: dup2 of a descriptor this function owns onto descriptor 2, before any thread is
    // started; no Rust value owns descriptor 2 (std's Stderr only writes to it by number).
    #[allow(unsafe_code)]
    let done = unsafe { libc::dup2(file.as_raw_fd(), 2) };
    if done < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
