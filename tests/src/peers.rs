//! Where the real peers that `.ci/setup` installs are. Each function fails the test with
//! "run .ci/setup" when its peer is missing: a test never skips.

use std::path::PathBuf;

/// `$SANDPIPE_PEERS_DIR`, else `$HOME/.cache/sandpipe-ci/peers`.
pub fn peers_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SANDPIPE_PEERS_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").expect("HOME is set");
    PathBuf::from(home).join(".cache/sandpipe-ci/peers")
}

fn must_exist(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is missing ({}): run .ci/setup",
        path.display()
    );
    path
}

/// A program from a Debian package (`/usr/bin/NAME`).
pub fn debian(name: &str) -> PathBuf {
    must_exist(
        PathBuf::from("/usr/bin").join(name),
        &format!("Debian's {name}"),
    )
}

// --- oci (issue 14) -----------------------------------------------------------------------

/// The Python of the venv holding the `oras` SDK (PyPI `oras`).
pub fn oras_python() -> PathBuf {
    must_exist(
        peers_dir().join("oras-venv/bin/python"),
        "the oras Python SDK",
    )
}
