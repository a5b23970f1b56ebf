//! The on-disk index from a plugin file's identity to its sha256, so a process start does not
//! read and hash an unchanged file again (an 18 MB component costs ~40 ms to read and hash;
//! node's 99 MB binary, the plugin of every Node MCP server run as `node server.js`, 150-330
//! ms).
//!
//! ```text
//!   <cache root>/index/<dev>-<ino>   one line: "sandpipe-index 1 <len> <mtime s> <mtime ns>
//!                                               <ctime s> <ctime ns> <sha256 hex>"
//! ```
//!
//! The rule is the one [`crate::Host::load`] uses in memory: device, inode, size, mtime and
//! ctime to the nanosecond, all equal, and the file not modified within the racy window when
//! the entry was written. Any change to the file (a write moves mtime and ctime, a rename over
//! it gives a new inode, a chmod moves ctime) misses the index and the file is read and hashed.
//! For a wasm plugin what runs is the compiled artifact keyed by that sha256, which lives in
//! the same cache directory under the same trust (see SECURITY.md). For a native program the
//! file itself runs and the digest only names it (`inspect`, a recording's header, a
//! `--sha256` pin, whose resolution hashes the file itself before loading).

use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MAGIC: &str = "sandpipe-index 1";

/// What identifies one version of a file without reading it: device, inode, size, and the
/// modification and status-change times to the nanosecond. Replacing the file (a new inode),
/// writing to it (mtime) or touching its metadata (ctime) all change the stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) len: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
}

/// A file modified this recently may be modified again within the same timestamp tick (the
/// kernel's coarse clock), which the stamp could not tell apart; such a file is not memoized
/// (git's "racily clean" rule).
const RACY_WINDOW: Duration = Duration::from_secs(2);

impl FileStamp {
    pub(crate) fn of(path: &Path) -> std::io::Result<FileStamp> {
        let m = std::fs::metadata(path)?;
        Ok(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// Whether the file was modified so recently that a same-size rewrite could keep this stamp.
    pub(crate) fn racy(&self) -> bool {
        let Ok(secs) = u64::try_from(self.mtime.0) else {
            return true;
        };
        let nanos = u32::try_from(self.mtime.1).unwrap_or(0);
        let modified = std::time::UNIX_EPOCH + Duration::new(secs, nanos);
        std::time::SystemTime::now()
            .duration_since(modified)
            .map_or(true, |age| age < RACY_WINDOW)
    }
}

/// The index under one cache root.
#[derive(Debug, Clone)]
pub(crate) struct HashIndex {
    dir: PathBuf,
}

impl HashIndex {
    pub(crate) fn new(cache_root: &Path) -> HashIndex {
        HashIndex {
            dir: cache_root.join("index"),
        }
    }

    fn entry_path(&self, stamp: &FileStamp) -> PathBuf {
        self.dir.join(format!("{:x}-{:x}", stamp.dev, stamp.ino))
    }

    /// The sha256 recorded for exactly this identity, if any.
    pub(crate) fn get(&self, stamp: &FileStamp) -> Option<String> {
        let text = std::fs::read_to_string(self.entry_path(stamp)).ok()?;
        let (recorded, sha) = text.trim_end().rsplit_once(' ')?;
        let valid_sha = sha.len() == 64
            && sha
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        (valid_sha && recorded == line(stamp)).then(|| sha.to_owned())
    }

    /// Record `sha256` for `stamp`, atomically; a failure only costs a hash next time.
    pub(crate) fn put(&self, stamp: &FileStamp, sha256: &str) {
        if let Err(e) = self.try_put(stamp, sha256) {
            tracing::debug!("cache: could not write the file hash index: {e}");
        }
    }

    fn try_put(&self, stamp: &FileStamp, sha256: &str) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let path = self.entry_path(stamp);
        let tmp = self.dir.join(format!(
            ".{:x}-{:x}.{}.tmp",
            stamp.dev,
            stamp.ino,
            std::process::id()
        ));
        {
            let mut f = std::fs::File::create(&tmp)?;
            writeln!(f, "{} {sha256}", line(stamp))?;
        }
        std::fs::rename(&tmp, &path)
    }
}

/// Everything of the identity but the entry's name (device and inode).
fn line(s: &FileStamp) -> String {
    format!(
        "{MAGIC} {} {} {} {} {}",
        s.len, s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_answers_only_its_exact_identity() {
        let dir = std::env::temp_dir().join(format!("sandpipe-index-{}", std::process::id()));
        let index = HashIndex::new(&dir);
        let stamp = FileStamp {
            dev: 1,
            ino: 2,
            len: 3,
            mtime: (4, 5),
            ctime: (6, 7),
        };
        let sha = "ab".repeat(32);
        assert_eq!(index.get(&stamp), None);
        index.put(&stamp, &sha);
        assert_eq!(index.get(&stamp), Some(sha.clone()));
        let changed = [
            FileStamp { len: 4, ..stamp },
            FileStamp {
                mtime: (4, 6),
                ..stamp
            },
            FileStamp {
                ctime: (6, 8),
                ..stamp
            },
            FileStamp { ino: 3, ..stamp },
            FileStamp { dev: 9, ..stamp },
        ];
        for other in changed {
            assert_eq!(index.get(&other), None, "{other:?}");
        }
        // A damaged entry is a miss, never a wrong answer.
        std::fs::write(index.entry_path(&stamp), format!("{} zz\n", line(&stamp)))
            .expect("writing a damaged entry");
        assert_eq!(index.get(&stamp), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
