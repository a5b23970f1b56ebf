//! The namespace probe's answer, remembered between runs of sandpipe.
//!
//! The probe ([`super::NamespaceSupport::detect`]) makes the plugin's namespaces in a throwaway
//! child, and a network namespace made and torn down is a sixth of a native start. Its answer
//! depends on the kernel, the boot, the user and the namespaces sandpipe itself runs in, so a
//! positive answer is kept under the cache root, keyed by those:
//!
//! ```text
//! <cache root>/namespaces   one line: "sandpipe-namespaces 1 <version> <boot id> uid=<euid>
//!                                      user:[…] mnt:[…] pid:[…]"
//! ```
//!
//! Only "available" is kept: an answer that says less than the probe would can never come from
//! the file. One that says more (a sysctl turned user namespaces off since, within the same
//! boot and namespaces) costs one failed start: the jail's first step is refused, the file is
//! removed, the probe runs, and the plugin starts under what it finds (`native::spawn`).

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// The file's first words; a file that does not start with them is not an answer.
const MAGIC: &str = "sandpipe-namespaces 1";

/// A key file is one short line: anything longer is not one of ours.
const MAX_LEN: u64 = 512;

/// What the probe's answer depends on, in one line, or `None` where one part cannot be read
/// (then nothing is remembered, and the probe runs every time).
#[allow(unsafe_code)]
pub(super) fn key() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    let mut key = format!("{} {} uid={euid}", env!("CARGO_PKG_VERSION"), boot.trim());
    for ns in ["user", "mnt", "pid"] {
        let link = std::fs::read_link(format!("/proc/self/ns/{ns}")).ok()?;
        key.push(' ');
        key.push_str(link.to_str()?);
    }
    Some(key)
}

fn path() -> Option<PathBuf> {
    crate::run::cache_root::default_cache_dir().map(|dir| dir.join("namespaces"))
}

/// Whether the file holds a positive answer for `key`.
pub(super) fn remembered(key: &str) -> bool {
    let Some(path) = path() else {
        return false;
    };
    let mut text = String::new();
    let read = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|f| f.take(MAX_LEN).read_to_string(&mut text));
    read.is_ok() && text.strip_prefix(MAGIC).and_then(|t| t.strip_prefix(' ')) == Some(&*line(key))
}

fn line(key: &str) -> String {
    format!("{key}\n")
}

/// Keep a positive answer for `key`: written whole under a name of this process's, then
/// renamed over the file, so a reader sees the old line or the new one. Best effort: a cache
/// that cannot be written only means the probe runs again next time.
pub(super) fn remember(key: &str) {
    let Some(path) = path() else {
        return;
    };
    let Some(dir) = path.parent() else {
        return;
    };
    let temp = dir.join(format!(".namespaces.{}", std::process::id()));
    let written = (|| {
        crate::run::cache_root::create_private_dir(dir)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temp)?;
        file.write_all(format!("{MAGIC} {}", line(key)).as_bytes())?;
        std::fs::rename(&temp, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
}

/// Drop the kept answer: it no longer held.
pub(super) fn forget() {
    if let Some(path) = path() {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_names_the_boot_the_user_and_the_namespaces() {
        let key = key().expect("a key on Linux");
        assert!(key.starts_with(env!("CARGO_PKG_VERSION")), "{key}");
        for part in ["uid=", " user:[", " mnt:[", " pid:["] {
            assert!(key.contains(part), "{part} in {key}");
        }
        assert!(!key.contains('\n'), "{key}");
    }
}
