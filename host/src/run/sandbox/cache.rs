//! The on-disk cache of compiled artifacts.
//!
//! One file per (wasm content, codegen settings): `<dir>/wasmtime-<version>/<sha256>-<engine>.cwasm`
//! where `<engine>` hashes [`wasmtime::Engine::precompile_compatibility_hash`] (fuel, epochs and
//! memory settings change generated code, so each configuration keeps its own artifact).

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;

use crate::run::cache_root::create_private_dir;

/// Where compiled artifacts live.
#[derive(Debug, Clone)]
pub(crate) struct ArtifactCache {
    dir: PathBuf,
    engine_key: u64,
}

impl ArtifactCache {
    pub(crate) fn new(root: &Path, engine: &Engine) -> Self {
        // DefaultHasher::new() uses fixed keys, so the key is stable for one build of sandpipe;
        // a rebuild with another std may change it, which only costs one recompile.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let dir = root.join(format!("wasmtime-{}", wasmtime_version()));
        Self {
            dir,
            engine_key: h.finish(),
        }
    }

    pub(crate) fn path_for(&self, sha256_hex: &str) -> PathBuf {
        self.dir
            .join(format!("{sha256_hex}-{:016x}.cwasm", self.engine_key))
    }

    /// Artifacts of the plugin `sha256_hex` compiled under other engine keys (another CPU's
    /// features, other codegen settings), in name order.
    pub(crate) fn others_for(&self, sha256_hex: &str) -> Vec<PathBuf> {
        let mine = self.path_for(sha256_hex);
        let prefix = format!("{sha256_hex}-");
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".cwasm"))
                    && *p != mine
            })
            .collect();
        found.sort();
        found
    }

    /// Write `bytes` atomically: a reader never sees a half-written artifact.
    pub(crate) fn store(&self, sha256_hex: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        create_private_dir(&self.dir)?;
        let path = self.path_for(sha256_hex);
        let tmp = self
            .dir
            .join(format!(".{sha256_hex}.{}.tmp", std::process::id()));
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        // The cache root's size cap covers compiled artifacts too (see crate::dist::store).
        if let Some(root) = self.dir.parent()
            && let Err(e) = crate::dist::store::Store::open(root).enforce_cap(Some(&path))
        {
            tracing::warn!("cache: enforcing the size cap: {e}");
        }
        Ok(path)
    }
}

/// The wasmtime version compiled in (artifacts are only valid for the exact version).
pub(crate) fn wasmtime_version() -> &'static str {
    "48.0.8" // keep equal to the `=48.0.8` pin in the workspace Cargo.toml
}
