//! The cache root every run shares: compiled artifacts (`sandbox::cache`), the file index
//! (`hash_index`) and the namespace probe's answer (`native::probe_cache`) live below it.

use std::path::{Path, PathBuf};

/// The default cache root: `$SANDPIPE_CACHE_DIR`, else `$XDG_CACHE_HOME/sandpipe`, else
/// `$HOME/.cache/sandpipe`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SANDPIPE_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("sandpipe"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("sandpipe"))
}

/// Make `dir` and its parents, 0700: what is read back from the cache is trusted, so only
/// this user may write there.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}
