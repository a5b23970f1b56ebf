//! Python (and JS) plugins built from source: the component with the language's toolchain,
//! the native build as one executable file for the system interpreter.
//!
//! A componentize-py build takes 20 s or more and gives an 18 MB component, so each build is
//! made once and kept in `<plugin target dir>/guests/` under a hash of everything it is built
//! from (the plugin, the SDK, the build script): later tests and later test processes reuse
//! it, and any change to a source rebuilds it.
//!
//! ```no_run
//! let wasm = sandpipe_tests::guests::python("examples/python/example_oracle.py", sandpipe_tests::Target::Wasm);
//! ```

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::{Target, peers, plugin_target_dir, workspace_root};

/// One build at a time: concurrent tests asking for the same plugin wait for the first build.
static BUILDING: Mutex<()> = Mutex::new(());

/// The Python plugin at `source` (relative to the workspace root) built for `target`:
/// `Wasm` a componentize-py component, `Native` a zipapp run by `/usr/bin/python3`.
pub fn python(source: &str, target: Target) -> PathBuf {
    let root = workspace_root();
    let sdk = root.join("guest-sdk/python");
    let inputs = [
        root.join(source),
        sdk.join("sandpipe_guest"),
        sdk.join("wit"),
    ];
    let (ext, flags): (&str, Vec<String>) = match target {
        Target::Wasm => ("wasm", Vec::new()),
        Target::Native => (
            "pyz",
            vec![
                "--native".into(),
                "--python".into(),
                peers::system_python().display().to_string(),
            ],
        ),
        Target::WasmP1 => panic!("Python plugins are components (wasm32-wasip2) only"),
    };
    cached(source, ext, &inputs, |out| {
        let mut cmd = Command::new(match target {
            Target::Wasm => peers::venv_python(),
            _ => peers::system_python(),
        });
        cmd.current_dir(&root)
            .env("PYTHONPATH", &sdk)
            .env("COMPONENTIZE_PY", peers::componentize_py())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-m", "sandpipe_guest.build", source, "-o"])
            .arg(out)
            .args(&flags);
        cmd
    })
}

/// The JS plugin at `source` (relative to the workspace root) built by
/// `guest-sdk/js/build.js`: `Wasm` a componentize-js component, `Native` one `.mjs` file run
/// by `/usr/bin/node`.
pub fn js(source: &str, target: Target) -> PathBuf {
    let root = workspace_root();
    let sdk = root.join("guest-sdk/js");
    let inputs = [
        root.join(source),
        sdk.join("src"),
        sdk.join("wit"),
        sdk.join("build.js"),
        sdk.join("package-lock.json"),
    ];
    let (ext, flags): (&str, Vec<String>) = match target {
        Target::Wasm => ("wasm", Vec::new()),
        Target::Native => (
            "mjs",
            vec![
                "--native".into(),
                "--node".into(),
                peers::node().display().to_string(),
            ],
        ),
        Target::WasmP1 => panic!("JS plugins are components (wasm32-wasip2) only"),
    };
    let toolchain = peers::js_toolchain();
    cached(source, ext, &inputs, |out| {
        let mut cmd = Command::new(peers::node());
        cmd.current_dir(&root)
            .arg(sdk.join("build.js"))
            .arg(source)
            .arg("-o")
            .arg(out)
            .arg("--toolchain")
            .arg(&toolchain)
            .args(&flags);
        cmd
    })
}

/// The unchanged Arcaflow plugin at `source` (relative to the workspace root, run natively as
/// `python3 SOURCE --atp` by the shared venv's Python) built into a component with
/// `python3 -m sandpipe_guest.build --arcaflow`, which bundles `arcaflow-plugin-sdk` and its
/// dependencies from that venv (so the venv's pins are part of what the build is cached by).
pub fn arcaflow(source: &str) -> PathBuf {
    let root = workspace_root();
    let sdk = root.join("guest-sdk/python");
    let inputs = [
        root.join(source),
        sdk.join("sandpipe_guest"),
        sdk.join("wit"),
        root.join("tests/peers/requirements.txt"),
    ];
    cached(source, "wasm", &inputs, |out| {
        let mut cmd = Command::new(peers::venv_python());
        cmd.current_dir(&root)
            .env("PYTHONPATH", &sdk)
            .env("COMPONENTIZE_PY", peers::componentize_py())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .args(["-m", "sandpipe_guest.build", "--arcaflow", source, "-o"])
            .arg(out);
        cmd
    })
}

/// Build `name` into `<plugin target dir>/guests/<stem>-<hash>.<ext>` unless it is there.
fn cached(
    source: &str,
    ext: &str,
    inputs: &[PathBuf],
    build: impl Fn(&Path) -> Command,
) -> PathBuf {
    let dir = plugin_target_dir().join("guests");
    std::fs::create_dir_all(&dir).expect("creating the guests build directory");
    let stem = Path::new(source)
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("a plugin file name");
    let out = dir.join(format!("{stem}-{:016x}.{ext}", hash_tree(inputs)));
    let _one = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
    if out.exists() {
        return out;
    }
    let partial = out.with_extension(format!("{ext}.partial"));
    let started = std::time::Instant::now();
    let status = build(&partial)
        .status()
        .unwrap_or_else(|e| panic!("building {source}: {e} (run .ci/setup)"));
    assert!(
        status.success(),
        "building {source} ({ext}) failed: {status}"
    );
    std::fs::rename(&partial, &out).expect("moving the build into place");
    eprintln!(
        "built {} in {:.1} s",
        out.display(),
        started.elapsed().as_secs_f64()
    );
    out
}

/// A hash of every file under `paths` (names and contents, sorted), `__pycache__` aside.
fn hash_tree(paths: &[PathBuf]) -> u64 {
    fn walk(p: &Path, files: &mut Vec<PathBuf>) {
        if p.is_dir() {
            let Ok(entries) = std::fs::read_dir(p) else {
                return;
            };
            for e in entries.flatten() {
                let path = e.path();
                if path
                    .file_name()
                    .is_some_and(|n| n == "__pycache__" || n == "node_modules")
                {
                    continue;
                }
                walk(&path, files);
            }
        } else {
            files.push(p.to_owned());
        }
    }
    let mut files = Vec::new();
    for p in paths {
        walk(p, &mut files);
    }
    files.sort();
    let mut h = DefaultHasher::new();
    for f in files {
        f.hash(&mut h);
        std::fs::read(&f).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}
