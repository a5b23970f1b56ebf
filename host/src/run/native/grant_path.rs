//! Where a `--dir` grant really is, resolved before the sandbox is built.
//!
//! A plugin with write access to a directory can plant a symbolic link there, and a later
//! grant of a path through that directory would follow it: `--dir ./work` lets a plugin make
//! `./work/config` a link to `/etc`, and the next run's `--dir ./work/config:ro` would hand it
//! `/etc`. So a grant's path is resolved one component at a time, as the kernel would, and a
//! symbolic link on it is followed only where its target stays beneath the directory that
//! holds the link (`lib -> lib64`, `current -> v2`). A link that leads out of its directory is
//! refused, naming the link and its target, so the user grants the target by its own name if
//! that is what they mean. `..` is resolved physically, as the kernel resolves it; a relative
//! path starts from the working directory, whose own path is taken as the kernel reports it.
//!
//! The resolved path holds no symbolic link, and the namespace jail opens it with
//! `RESOLVE_NO_SYMLINKS`: a link planted between this check and the mount (by another
//! plugin writing there at the same time) makes the grant fail instead of redirecting it.

use std::path::{Component, Path, PathBuf};

/// Links followed on one path at most (the kernel's own limit is 40).
const MAX_LINKS: usize = 40;

/// `path` (relative to the working directory) resolved without following a symbolic link out
/// of the directory that holds it; the message says which link did, and where to.
pub(crate) fn resolve(path: &Path) -> Result<PathBuf, String> {
    let mut links = 0;
    walk(PathBuf::from("/"), &absolute(path)?, &mut links)
}

/// `path` made absolute against the working directory (as the kernel reports it), nothing
/// resolved.
pub(super) fn absolute(path: &Path) -> Result<PathBuf, String> {
    if path.is_absolute() {
        return Ok(path.to_owned());
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .map_err(|e| format!("the working directory: {e}"))
}

/// Resolve `rest` from `at`, a directory that is already a physical path.
fn walk(mut at: PathBuf, rest: &Path, links: &mut usize) -> Result<PathBuf, String> {
    for part in rest.components() {
        match part {
            Component::RootDir => at = PathBuf::from("/"),
            Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                at.pop();
            }
            Component::Normal(name) => {
                let next = at.join(name);
                let meta = std::fs::symlink_metadata(&next)
                    .map_err(|e| format!("{}: {e}", next.display()))?;
                if !meta.file_type().is_symlink() {
                    at = next;
                    continue;
                }
                *links += 1;
                if *links > MAX_LINKS {
                    return Err(format!(
                        "{}: too many levels of symbolic links",
                        next.display()
                    ));
                }
                let target =
                    std::fs::read_link(&next).map_err(|e| format!("{}: {e}", next.display()))?;
                let resolved = walk(at.clone(), &target, links)?;
                if !resolved.starts_with(&at) || resolved == at {
                    return Err(format!(
                        "{} is a symbolic link to {}, out of {}: a plugin that could write there may have planted it. Grant the target by its own path if that is what you mean (--dir {})",
                        next.display(),
                        target.display(),
                        at.display(),
                        resolved.display()
                    ));
                }
                at = resolved;
            }
        }
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_within_its_directory_is_followed_and_one_out_of_it_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("work/v2")).expect("mkdir");
        std::fs::create_dir_all(root.join("secret")).expect("mkdir");
        std::os::unix::fs::symlink("v2", root.join("work/current")).expect("symlink");
        std::os::unix::fs::symlink(root.join("secret"), root.join("work/config")).expect("symlink");
        std::os::unix::fs::symlink("../secret", root.join("work/up")).expect("symlink");

        assert_eq!(
            resolve(&root.join("work/current")),
            Ok(root.join("work/v2"))
        );
        assert_eq!(
            resolve(&root.join("work/v2/../current")),
            Ok(root.join("work/v2"))
        );
        for link in ["work/config", "work/up"] {
            let err = resolve(&root.join(link)).expect_err(link);
            assert!(err.contains("is a symbolic link to"), "{err}");
            assert!(
                err.contains(&format!("--dir {}", root.join("secret").display())),
                "{err}"
            );
        }
        // The target named by its own path is granted.
        assert_eq!(resolve(&root.join("secret")), Ok(root.join("secret")));
    }

    #[test]
    fn a_missing_path_says_which() {
        let err = resolve(Path::new("/nonexistent-sandpipe/x")).expect_err("missing");
        assert!(err.starts_with("/nonexistent-sandpipe:"), "{err}");
    }
}
