//! Where `.ci/setup` installed the things that are not Rust crates. Every lookup fails with
//! "run .ci/setup" when the thing is missing; no test skips.

use std::path::PathBuf;

/// `$SANDPIPE_PEERS_DIR`, default `$HOME/.cache/sandpipe-ci/peers`.
pub fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SANDPIPE_PEERS_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").expect("HOME is set");
    PathBuf::from(home).join(".cache/sandpipe-ci/peers")
}

fn installed(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run .ci/setup",
        path.display()
    );
    path
}

// --- pyjs: componentize-py, componentize-js, the interpreters of the native builds ---------

/// The shared venv's Python (componentize-py 0.25.1 and arcaflow-plugin-sdk live there).
pub fn venv_python() -> PathBuf {
    installed(dir().join("venv/bin/python"))
}

/// `componentize-py` 0.25.1 in the shared venv.
pub fn componentize_py() -> PathBuf {
    installed(dir().join("venv/bin/componentize-py"))
}

/// An executable npm package installed under `<peers>/js` (`componentize-js`, `jco`, `esbuild`).
pub fn npm_bin(name: &str) -> PathBuf {
    installed(dir().join("js/node_modules/.bin").join(name))
}

/// The system `python3` that runs the native builds of Python plugins (a path Landlock lets a
/// native plugin read: `/usr`).
pub fn system_python() -> PathBuf {
    installed(PathBuf::from("/usr/bin/python3"))
}

/// The system `node` that runs the native builds of JS plugins.
pub fn system_node() -> PathBuf {
    installed(PathBuf::from("/usr/bin/node"))
}
