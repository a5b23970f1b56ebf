//! Where a plugin comes from: a path (optionally pinned with `--sha256`) or an `oci://`
//! reference (fetched into the store, its digests, signature and lock entry checked), resolved
//! to a verified local file before anything is compiled.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use super::CacheArgs;
use crate::dist::signing::TrustedKey;
use crate::dist::store::Store;
use crate::{Host, Plugin};

/// Distribution options shared by run, call, inspect, replay, pull and compile.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DistArgs {
    /// Refuse the plugin unless its file (or, for oci://, its wasm layer) has this sha256.
    #[arg(long, value_name = "HEX")]
    pub(crate) sha256: Option<String>,
    /// `[trust]`, declared with the policy's sections.
    #[command(flatten)]
    pub(crate) trust: crate::policy::Trust,
}

/// A plugin resolved to a verified local file.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// The file to load.
    pub(crate) path: PathBuf,
    /// What the registry gave, for an oci:// reference.
    #[cfg(feature = "registry")]
    pub(crate) fetched: Option<crate::dist::registry::fetch::Fetched>,
}

/// The cache root for the store: `--cache-dir`, else the default (even with --no-cache, which
/// only skips compiled artifacts).
pub(crate) fn store_root(cache: &CacheArgs) -> Result<PathBuf> {
    cache
        .cache_dir
        .clone()
        .or_else(crate::default_cache_dir)
        .context("no cache directory: give --cache-dir or set SANDPIPE_CACHE_DIR or HOME")
}

impl DistArgs {
    fn trusted(&self) -> Result<Vec<TrustedKey>> {
        self.trust
            .trusted_keys
            .iter()
            .map(|p| TrustedKey::from_file(p).map_err(anyhow::Error::from))
            .collect()
    }
}

/// Resolve `spec` (a path or an oci:// reference) without compiling anything.
pub(crate) async fn resolve(spec: &Path, dist: &DistArgs, cache: &CacheArgs) -> Result<Resolved> {
    let text = spec.to_string_lossy();
    if text.starts_with("oci://") {
        return resolve_reference(&text, dist, cache, false).await;
    }
    if dist.trust.require_signature {
        bail!(
            "--require-signature needs an oci:// reference ({} is a local file, which carries no signature)",
            spec.display()
        );
    }
    if let Some(expected) = &dist.sha256 {
        let bytes = std::fs::read(spec).with_context(|| format!("reading {}", spec.display()))?;
        check_sha256(spec, &crate::hex(&Sha256::digest(&bytes)), expected)?;
    }
    Ok(Resolved {
        path: spec.to_owned(),
        #[cfg(feature = "registry")]
        fetched: None,
    })
}

fn check_sha256(what: &Path, got: &str, expected: &str) -> Result<()> {
    let expected = expected
        .trim()
        .trim_start_matches("sha256:")
        .to_ascii_lowercase();
    if got != expected {
        bail!(
            "{} has sha256 {got}, not {expected} (--sha256); refusing to run it",
            what.display()
        );
    }
    Ok(())
}

#[cfg(not(feature = "registry"))]
async fn resolve_reference(
    text: &str,
    _dist: &DistArgs,
    _cache: &CacheArgs,
    _want_signature: bool,
) -> Result<Resolved> {
    bail!("{text}: this sandpipe was built without the `registry` feature")
}

#[cfg(feature = "registry")]
pub(crate) async fn resolve_reference(
    text: &str,
    dist: &DistArgs,
    cache: &CacheArgs,
    want_signature: bool,
) -> Result<Resolved> {
    use crate::dist::lock::LockFile;
    use crate::dist::registry::fetch::{FetchOptions, fetch};
    use crate::dist::registry::{Client, ClientOptions, Credentials, Reference};

    let reference: Reference = text.parse()?;
    let trusted = dist.trusted()?;
    let store = Store::open(store_root(cache)?);
    let lock = match &dist.trust.lockfile {
        Some(p) => Some(LockFile::load(p)?),
        None => None,
    };
    let key = reference.unpinned().to_string();
    let dist2 = dist.clone();
    let fetched = tokio::task::spawn_blocking(move || -> Result<_> {
        let mut options = ClientOptions::new(Credentials::from_default_config()?);
        options.insecure_registries = dist2.trust.insecure_registries.clone();
        let client = Client::new(options);
        let locked = lock.as_ref().and_then(|l| l.get(&key));
        let fetch_options = FetchOptions {
            offline: dist2.trust.offline,
            trusted_keys: &trusted,
            require_signature: dist2.trust.require_signature,
            want_signature,
            locked,
            enforce_lock: dist2.trust.locked,
        };
        Ok(fetch(&client, &store, &reference, &fetch_options)?)
    })
    .await??;
    if let Some(expected) = &dist.sha256 {
        let got = fetched
            .layer
            .digest
            .trim_start_matches("sha256:")
            .to_owned();
        check_sha256(Path::new(text), &got, expected)?;
    }
    if let Some(path) = &dist.trust.lockfile
        && !dist.trust.locked
    {
        let mut lock = LockFile::load(path)?;
        lock.insert(fetched.lock_entry());
        lock.save(path)?;
    }
    tracing::info!(
        "{text} resolved to {} (layer {}, {} bytes{})",
        fetched.manifest_digest,
        fetched.layer.digest,
        fetched.layer.size,
        fetched
            .signer
            .as_deref()
            .map(|k| format!(", signed by {k}"))
            .unwrap_or_default()
    );
    Ok(Resolved {
        path: fetched.wasm_path.clone(),
        fetched: Some(fetched),
    })
}

/// Past this, a compile at start-up is worth a note: the engine waited for it.
const SLOW_COMPILE: std::time::Duration = std::time::Duration::from_secs(2);

/// After `run` or `call` compiled a plugin at start-up for longer than [`SLOW_COMPILE`]: one
/// note saying how long, and that `sandpipe compile` does it ahead of time. (wasmtime's CLI
/// says nothing; an engine whose first call took ten seconds deserves to know why.) Or, when
/// the cache held an artifact of the plugin that does not fit this engine (compiled with other
/// settings, such as fuel metering, which `run` compiles in only with a fuel budget) or this
/// CPU (an image built on another machine), one note saying so and why, whatever the compile
/// took; the next start loads the artifact compiled now.
pub(crate) fn note_slow_compile(plugin: &Plugin, spec: &Path) {
    // One line either way: an artifact that did not fit says why the compile happened.
    if let Some(why) = plugin.cache_mismatch() {
        eprintln!(
            "sandpipe: note: compiled {} ({:.1} MB) in {:.1?}: the cached artifact {why}",
            spec.display(),
            plugin.size() as f64 / 1e6,
            plugin.load_time(),
        );
        return;
    }
    if plugin.load_source() == Some(crate::LoadSource::Compiled)
        && plugin.load_time() > SLOW_COMPILE
    {
        eprintln!(
            "sandpipe: note: compiled {} ({:.1} MB) in {:.1?} before its first start; the next start loads it from the cache (`sandpipe compile {}` does this ahead of time)",
            spec.display(),
            plugin.size() as f64 / 1e6,
            plugin.load_time(),
            spec.display()
        );
    }
}

/// Resolve `spec` and load (compile) it: what run, call, inspect and replay do with PLUGIN.
pub(crate) async fn load(
    host: &Host,
    spec: &Path,
    dist: &DistArgs,
    cache: &CacheArgs,
) -> Result<Plugin> {
    let resolved = resolve(spec, dist, cache)
        .await
        .context("resolving the plugin")?;
    let plugin = host
        .load(&resolved.path)
        .with_context(|| format!("loading plugin {}", spec.display()))?;
    // The file was hashed before loading; check what was loaded too (it may have changed).
    if let Some(expected) = &dist.sha256 {
        check_sha256(spec, plugin.sha256(), expected)?;
    }
    Ok(plugin)
}
