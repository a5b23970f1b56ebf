//! The lock file: for each plugin reference, the manifest digest it resolved to, its layer's
//! digest and size, and the key that signed it. TOML:
//!
//! ```toml
//! version = 1
//!
//! [[plugin]]
//! reference = "oci://127.0.0.1:5000/echo:1"
//! manifest = "sha256:…"
//! layer = "sha256:…"
//! size = 123456
//! signer = "E5B3B3C4D6A0F2A1"   # absent when unsigned
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What went wrong with a lock file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LockError {
    /// It could not be read or written.
    #[error("lock file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a lock file.
    #[error("lock file {path}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// One locked reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// The reference as given, without a digest (`oci://HOST/REPO:TAG`).
    pub reference: String,
    /// The manifest digest it resolved to.
    pub manifest: String,
    /// The wasm layer's digest.
    pub layer: String,
    /// The wasm layer's size.
    pub size: u64,
    /// The signer's minisign key id, when verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
}

/// A lock file's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockFile {
    /// Format version (1).
    pub version: u32,
    /// The entries, sorted by reference.
    #[serde(default, rename = "plugin")]
    pub plugins: Vec<LockEntry>,
}

impl Default for LockFile {
    fn default() -> Self {
        LockFile {
            version: 1,
            plugins: Vec::new(),
        }
    }
}

impl LockFile {
    /// Read `path`; a missing file is an empty lock file.
    pub fn load(path: &Path) -> Result<LockFile, LockError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LockFile::default()),
            Err(source) => {
                return Err(LockError::Io {
                    path: path.to_owned(),
                    source,
                });
            }
        };
        let lock: LockFile = toml::from_str(&text).map_err(|e| LockError::Parse {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        if lock.version != 1 {
            return Err(LockError::Parse {
                path: path.to_owned(),
                reason: format!("version {} (this sandpipe reads version 1)", lock.version),
            });
        }
        Ok(lock)
    }

    /// Write it to `path` atomically.
    pub fn save(&self, path: &Path) -> Result<(), LockError> {
        let text = toml::to_string(self).map_err(|e| LockError::Parse {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let io = |source| LockError::Io {
            path: path.to_owned(),
            source,
        };
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        std::fs::write(
            &tmp,
            format!("# written by sandpipe; do not edit by hand\n{text}"),
        )
        .map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// The entry for `reference`.
    pub fn get(&self, reference: &str) -> Option<&LockEntry> {
        self.plugins.iter().find(|e| e.reference == reference)
    }

    /// Add or replace the entry for its reference.
    pub fn insert(&mut self, entry: LockEntry) {
        self.plugins.retain(|e| e.reference != entry.reference);
        self.plugins.push(entry);
        self.plugins.sort_by(|a, b| a.reference.cmp(&b.reference));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_toml() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sandpipe.lock");
        assert_eq!(LockFile::load(&path).expect("missing"), LockFile::default());
        let mut lock = LockFile::default();
        for (r, signer) in [
            ("oci://h/b:1", None),
            ("oci://h/a:1", Some("ABCD".to_owned())),
        ] {
            lock.insert(LockEntry {
                reference: r.into(),
                manifest: "sha256:m".into(),
                layer: "sha256:l".into(),
                size: 3,
                signer,
            });
        }
        lock.save(&path).expect("save");
        let back = LockFile::load(&path).expect("load");
        assert_eq!(back, lock);
        assert_eq!(back.plugins[0].reference, "oci://h/a:1");
        std::fs::write(&path, "version = 2\n").expect("write");
        assert!(matches!(
            LockFile::load(&path),
            Err(LockError::Parse { .. })
        ));
    }
}
