//! The content-addressed store under the cache root, next to the compiled artifacts:
//!
//! ```text
//!   <root>/blobs/sha256/<hex>             manifests, configs, plugin layers, signatures
//!   <root>/tags/<registry>/<repo>/<tag>   the manifest digest a tag last resolved to
//!   <root>/wasmtime-<version>/*.cwasm     compiled artifacts (written by the sandbox)
//!   <root>/index/<dev>-<ino>              a wasm plugin file's identity -> its sha256
//!                                         (written by `Host::load`, removed by `clean`)
//! ```
//!
//! Blobs are re-hashed on every read; one that no longer matches its name is deleted and
//! reported as [`StoreError::Corrupt`]. Reading a blob marks it used (its mtime), and the
//! store's size cap ([`DEFAULT_MAX_SIZE`], or `SANDPIPE_CACHE_MAX_SIZE`) is enforced on every
//! write by evicting the least recently used entries, blobs and compiled artifacts alike.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use thiserror::Error;

/// The default size cap of the cache root: 2 GiB, room for a few dozen large (Python or JS)
/// components with their compiled artifacts.
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;

/// What went wrong in the store.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A blob did not hash to its name (it was deleted).
    #[error("stored blob {digest} is corrupt (hashes to {got}); it was removed")]
    Corrupt {
        /// Its name.
        digest: String,
        /// What it hashed to.
        got: String,
    },
    /// A digest that is not `sha256:<64 hex>`.
    #[error("bad digest {0:?}")]
    BadDigest(String),
    /// Content given to [`Store::put`] does not hash to the digest it was given with.
    #[error("content hashes to {got}, not {expected}")]
    Mismatch {
        /// The digest given.
        expected: String,
        /// The content's digest.
        got: String,
    },
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A blob by digest.
    Blob,
    /// A compiled artifact.
    Compiled,
}

/// One entry of the store.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Blob or compiled artifact.
    pub kind: EntryKind,
    /// `sha256:<hex>` for a blob, the file name for a compiled artifact.
    pub name: String,
    /// Its file.
    pub path: PathBuf,
    /// Bytes.
    pub size: u64,
    /// When it was last written or read.
    pub last_used: SystemTime,
}

/// What a garbage collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Entries removed.
    pub removed: usize,
    /// Bytes freed.
    pub freed: u64,
    /// Bytes left.
    pub kept: u64,
}

/// The store at one cache root.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    max_size: u64,
}

impl Store {
    /// The store under `root` with the size cap from `SANDPIPE_CACHE_MAX_SIZE`, else
    /// [`DEFAULT_MAX_SIZE`].
    pub fn open(root: impl Into<PathBuf>) -> Store {
        let max_size = std::env::var("SANDPIPE_CACHE_MAX_SIZE")
            .ok()
            .and_then(|s| s.parse::<bytesize::ByteSize>().ok())
            .map_or(DEFAULT_MAX_SIZE, |b| b.as_u64());
        Store {
            root: root.into(),
            max_size,
        }
    }

    /// The same store with another size cap.
    pub fn with_max_size(mut self, max_size: u64) -> Store {
        self.max_size = max_size;
        self
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The size cap.
    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    fn blob_path(&self, digest: &str) -> Result<PathBuf, StoreError> {
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|h| is_hex64(h))
            .ok_or_else(|| StoreError::BadDigest(digest.to_owned()))?;
        Ok(self.root.join("blobs").join("sha256").join(hex))
    }

    /// Whether the blob is present (not verified).
    pub fn contains(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|p| p.is_file())
    }

    /// Store `bytes` under `digest` (which they must hash to), then enforce the size cap.
    pub fn put(&self, digest: &str, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let path = self.blob_path(digest)?;
        let got = format!("sha256:{}", hex(&Sha256::digest(bytes)));
        if got != digest {
            return Err(StoreError::Mismatch {
                expected: digest.to_owned(),
                got,
            });
        }
        let dir = path.parent().unwrap_or(&self.root);
        create_private_dir(dir).map_err(io("creating", dir))?;
        let tmp = dir.join(format!(".{}.{}.tmp", &digest[7..19], std::process::id()));
        {
            let mut f = std::fs::File::create(&tmp).map_err(io("writing", &tmp))?;
            f.write_all(bytes).map_err(io("writing", &tmp))?;
            f.sync_all().map_err(io("writing", &tmp))?;
        }
        std::fs::rename(&tmp, &path).map_err(io("renaming", &tmp))?;
        self.enforce_cap(Some(&path))?;
        Ok(path)
    }

    /// The blob's bytes, re-hashed; `None` if absent. A corrupt blob is removed.
    pub fn get(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.blob_path(digest)?;
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("reading", &path)(e)),
        };
        let got = format!("sha256:{}", hex(&Sha256::digest(&bytes)));
        if got != digest {
            let _ = std::fs::remove_file(&path);
            return Err(StoreError::Corrupt {
                digest: digest.to_owned(),
                got,
            });
        }
        touch(&path);
        Ok(Some(bytes))
    }

    /// The verified blob's path; `None` if absent.
    pub fn get_path(&self, digest: &str) -> Result<Option<PathBuf>, StoreError> {
        self.get(digest)?
            .map(|_| self.blob_path(digest))
            .transpose()
    }

    /// Remember that `tag` of `registry/repository` resolved to `digest`.
    pub fn set_tag(
        &self,
        registry: &str,
        repository: &str,
        tag: &str,
        digest: &str,
    ) -> Result<(), StoreError> {
        let path = self.tag_path(registry, repository, tag);
        let dir = path.parent().unwrap_or(&self.root);
        create_private_dir(dir).map_err(io("creating", dir))?;
        std::fs::write(&path, digest).map_err(io("writing", &path))
    }

    /// The digest `tag` last resolved to.
    pub fn tag(&self, registry: &str, repository: &str, tag: &str) -> Option<String> {
        let d = std::fs::read_to_string(self.tag_path(registry, repository, tag)).ok()?;
        Some(d.trim().to_owned())
    }

    fn tag_path(&self, registry: &str, repository: &str, tag: &str) -> PathBuf {
        // ':' in HOST:PORT is fine in a file name on Linux; '/' in the repository makes dirs.
        self.root
            .join("tags")
            .join(registry.replace('/', "_"))
            .join(repository)
            .join(tag)
    }

    /// Every tag recorded: (`registry/repo:tag`, digest).
    pub fn tags(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let base = self.root.join("tags");
        walk(&base, &mut |path| {
            if let (Ok(rel), Ok(d)) = (path.strip_prefix(&base), std::fs::read_to_string(path)) {
                let rel = rel.display().to_string();
                if let Some((repo, tag)) = rel.rsplit_once('/') {
                    out.push((format!("{repo}:{tag}"), d.trim().to_owned()));
                }
            }
        });
        out.sort();
        out
    }

    /// Blobs and compiled artifacts, least recently used first.
    pub fn entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        let blobs = self.root.join("blobs").join("sha256");
        if let Ok(dir) = std::fs::read_dir(&blobs) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !is_hex64(&name) {
                    continue;
                }
                if let Some(entry) = entry(EntryKind::Blob, format!("sha256:{name}"), e.path()) {
                    out.push(entry);
                }
            }
        }
        if let Ok(dir) = std::fs::read_dir(&self.root) {
            for d in dir.flatten() {
                if !d.file_name().to_string_lossy().starts_with("wasmtime-") {
                    continue;
                }
                let Ok(files) = std::fs::read_dir(d.path()) else {
                    continue;
                };
                for f in files.flatten() {
                    let name = f.file_name().to_string_lossy().into_owned();
                    if !name.ends_with(".cwasm") {
                        continue;
                    }
                    if let Some(entry) = entry(EntryKind::Compiled, name, f.path()) {
                        out.push(entry);
                    }
                }
            }
        }
        out.sort_by_key(|e| e.last_used);
        out
    }

    /// Evict least recently used entries until the store holds at most `max_size` bytes.
    pub fn gc(&self, max_size: u64) -> Result<GcReport, StoreError> {
        self.evict(max_size, None)
    }

    /// Enforce the store's own cap, never evicting `keep` (the entry just written).
    pub fn enforce_cap(&self, keep: Option<&Path>) -> Result<GcReport, StoreError> {
        self.evict(self.max_size, keep)
    }

    fn evict(&self, max_size: u64, keep: Option<&Path>) -> Result<GcReport, StoreError> {
        let entries = self.entries();
        let mut total: u64 = entries.iter().map(|e| e.size).sum();
        let mut report = GcReport::default();
        for e in entries {
            if total <= max_size {
                break;
            }
            if keep == Some(e.path.as_path()) {
                continue;
            }
            match std::fs::remove_file(&e.path) {
                Ok(()) => {
                    total -= e.size;
                    report.removed += 1;
                    report.freed += e.size;
                    tracing::info!("cache: evicted {} ({} bytes)", e.name, e.size);
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => total -= e.size,
                Err(err) => return Err(io("removing", &e.path)(err)),
            }
        }
        report.kept = total;
        Ok(report)
    }

    /// Remove everything under the root that the store and the artifact cache own.
    pub fn clean(&self) -> Result<GcReport, StoreError> {
        let report = self.gc(0)?;
        for sub in ["blobs", "tags", "index"] {
            let p = self.root.join(sub);
            match std::fs::remove_dir_all(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("removing", &p)(e)),
            }
        }
        Ok(report)
    }
}

fn entry(kind: EntryKind, name: String, path: PathBuf) -> Option<Entry> {
    let m = std::fs::metadata(&path).ok()?;
    // Blobs are touched on read; compiled artifacts are mapped by the sandbox, so their atime
    // (relatime: at least daily) says when they were last loaded.
    let modified = m.modified().ok()?;
    let accessed = m.accessed().unwrap_or(modified);
    Some(Entry {
        kind,
        name,
        path,
        size: m.len(),
        last_used: modified.max(accessed),
    })
}

fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().write(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, f);
        } else {
            f(&p);
        }
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(b: &[u8]) -> String {
        format!("sha256:{}", hex(&Sha256::digest(b)))
    }

    #[test]
    fn blobs_round_trip_and_corruption_is_caught() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).with_max_size(1 << 20);
        let d = digest(b"hello");
        let path = store.put(&d, b"hello").expect("put");
        assert_eq!(store.get(&d).expect("get").as_deref(), Some(&b"hello"[..]));
        assert!(matches!(
            store.put(&d, b"other"),
            Err(StoreError::Mismatch { .. })
        ));
        std::fs::write(&path, b"hellO").expect("corrupt");
        assert!(matches!(store.get(&d), Err(StoreError::Corrupt { .. })));
        assert_eq!(store.get(&d).expect("gone"), None);
        assert!(matches!(
            store.get("sha256:xyz"),
            Err(StoreError::BadDigest(_))
        ));
    }

    #[test]
    fn writes_past_the_cap_evict_the_least_recently_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).with_max_size(250);
        let blobs: Vec<Vec<u8>> = (0u8..5).map(|i| vec![i; 100]).collect();
        for (i, b) in blobs.iter().enumerate() {
            store.put(&digest(b), b).expect("put");
            // Distinct, increasing last-use times without sleeping.
            let p = store.blob_path(&digest(b)).expect("path");
            let f = std::fs::File::options().write(true).open(&p).expect("open");
            f.set_modified(
                SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64),
            )
            .expect("mtime");
        }
        let left: Vec<String> = store.entries().into_iter().map(|e| e.name).collect();
        assert_eq!(left, vec![digest(&blobs[3]), digest(&blobs[4])]);
        let report = store.gc(100).expect("gc");
        assert_eq!(report.removed, 1);
        assert_eq!(store.entries().len(), 1);
        store.clean().expect("clean");
        assert!(store.entries().is_empty());
    }
}
