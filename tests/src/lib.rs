//! Builds the example and test plugins from source, once per test process, for
//! `wasm32-wasip2`, `wasm32-wasip1` and the host, and hands out their paths.
//!
//! No `.wasm` is committed: every test runs what this builds. The plugins get their own target
//! directory (`<target>/plugins`) so the nested `cargo build` never waits on the outer
//! `cargo test`'s lock.
//!
//! ```no_run
//! let echo = sandpipe_tests::plugin("echo-lines", sandpipe_tests::Target::Wasm);
//! assert!(echo.exists());
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub mod bridge_fuzz;
pub mod cli;
pub mod guests;
pub mod long_run;
pub mod peers;
pub mod registry;
pub mod serve_fuzz;
pub mod soak;
pub mod stand_in;
pub mod web;

/// Which build of a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A WASI p2 component (`wasm32-wasip2`).
    Wasm,
    /// A WASI p1 core module (`wasm32-wasip1`).
    WasmP1,
    /// A native executable for this machine.
    Native,
}

impl Target {
    /// All three.
    pub const ALL: [Target; 3] = [Target::Wasm, Target::WasmP1, Target::Native];

    fn triple(self) -> Option<&'static str> {
        match self {
            Target::Wasm => Some("wasm32-wasip2"),
            Target::WasmP1 => Some("wasm32-wasip1"),
            Target::Native => None,
        }
    }
}

/// The packages holding plugins.
const PACKAGES: [&str; 7] = [
    "sandpipe-example-echo",
    "sandpipe-test-plugins",
    "sandpipe-example-oracle",
    "sandpipe-example-denobridge",
    "sandpipe-example-orchard",
    "sandpipe-example-atp",
    "sandpipe-example-finecode",
];

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace")
        .to_owned()
}

/// Build `package` (cargo's package arguments, e.g. `["-p", "sandpipe", "--bin", "sandpipe"]`)
/// into the target directory that holds `profile_dir` (`<target>/<profile>`), with that
/// profile: how a test or the bench builds another package's binary next to its own. Cargo
/// rebuilds only what changed. `extra` adds what else the build needs (flags, environment).
pub fn cargo_build_into(
    profile_dir: &Path,
    package: &[&str],
    extra: impl FnOnce(&mut std::process::Command),
) -> Result<(), String> {
    let target = profile_dir
        .parent()
        .ok_or_else(|| format!("{} has no target directory", profile_dir.display()))?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{} names no profile", profile_dir.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(workspace_root())
        .args(["build", "--quiet"])
        .args(package)
        .arg("--target-dir")
        .arg(target);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    extra(&mut cmd);
    let status = cmd
        .status()
        .map_err(|e| format!("running cargo build {package:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build {package:?} failed ({status})"))
    }
}

/// The profile directory (`<target>/<profile>`) of the test binary running this:
/// `<target>/<profile>/deps/<test binary>`.
pub fn test_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in <target>/<profile>/deps")
        .to_owned()
}

/// Where plugins are built: `SANDPIPE_PLUGIN_TARGET_DIR` if set (so several checkouts can share
/// one `CARGO_TARGET_DIR` without overwriting each other's plugins), else `<target>/plugins`.
pub fn plugin_target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SANDPIPE_PLUGIN_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        workspace_root().join(target)
    };
    target.join("plugins")
}

/// Path to plugin `bin` built for `target`, building all plugins first if this process has not.
pub fn plugin(bin: &str, target: Target) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        for t in Target::ALL {
            build(t);
        }
    });
    let dir = plugin_target_dir();
    match target.triple() {
        Some(triple) => dir.join(triple).join("release").join(format!("{bin}.wasm")),
        None => dir.join("release").join(bin),
    }
}

/// The example Cairo `wasm:` oracle (`examples/wasm-oracle`), a component exporting functions
/// built with `wit-bindgen`, for `wasm32-wasip2` only (it is a library component, not a
/// program, so there is no p1 or native build of it to run).
pub fn wasm_oracle() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| component_example("sandpipe-example-wasm-oracle"))
        .clone()
}

/// The example MCP tools component (`examples/mcp-tools`): exported functions that
/// `sandpipe run --protocol mcp` serves as tools; built like [`wasm_oracle`].
pub fn mcp_tools() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| component_example("sandpipe-example-mcp-tools"))
        .clone()
}

/// Build the library component `package` for `wasm32-wasip2`; its `.wasm`.
fn component_example(package: &str) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(workspace_root())
        .args(["build", "--release", "--quiet", "--target", "wasm32-wasip2"])
        .args(["-p", package, "--target-dir"])
        .arg(plugin_target_dir())
        .status()
        .unwrap_or_else(|e| panic!("running cargo to build {package}: {e}"));
    assert!(
        status.success(),
        "building {package} failed; run `rustup target add wasm32-wasip2`"
    );
    plugin_target_dir()
        .join("wasm32-wasip2")
        .join("release")
        .join(format!("{}.wasm", package.replace('-', "_")))
}

fn build(target: Target) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .arg("build")
        .arg("--release")
        .arg("--quiet")
        .arg("--target-dir")
        .arg(plugin_target_dir());
    for p in PACKAGES {
        cmd.arg("-p").arg(p);
    }
    if let Some(triple) = target.triple() {
        cmd.arg("--target").arg(triple);
    }
    let status = cmd
        .status()
        .expect("running cargo to build the test plugins");
    assert!(
        status.success(),
        "building the test plugins for {target:?} failed; is the target installed? \
         run `rustup target add wasm32-wasip2 wasm32-wasip1`"
    );
}

/// Golden transcripts in `tests/transcripts/<protocol>/<case>.transcript`, shared by every
/// example crate's `tests/golden.rs`: one path rule, one `BLESS=1` switch, one diff.
pub mod golden {
    use std::path::PathBuf;

    /// The golden file for `case` of `protocol`.
    pub fn path(protocol: &str, case: &str) -> PathBuf {
        super::workspace_root()
            .join("tests")
            .join("transcripts")
            .join(protocol)
            .join(format!("{case}.transcript"))
    }

    /// True when `BLESS=1`: golden files are rewritten instead of compared.
    pub fn blessing() -> bool {
        std::env::var_os("BLESS").is_some_and(|v| v == "1")
    }

    /// A line-by-line diff: `-` lines only in the file, `+` lines only in the recording.
    pub fn diff(name: &str, want: &str, got: &str) -> String {
        let want: Vec<&str> = want.lines().collect();
        let got: Vec<&str> = got.lines().collect();
        let mut out = format!("--- {name}\n+++ recorded\n");
        for i in 0..want.len().max(got.len()) {
            match (want.get(i), got.get(i)) {
                (Some(w), Some(g)) if w == g => {}
                (w, g) => {
                    if let Some(w) = w {
                        out.push_str(&format!("-{:>3} {w}\n", i + 1));
                    }
                    if let Some(g) = g {
                        out.push_str(&format!("+{:>3} {g}\n", i + 1));
                    }
                }
            }
        }
        out
    }

    /// Compare `got` with the golden file (or write it, under `BLESS=1`). `Err` holds the
    /// message to fail with: a diff, or why the file could not be read.
    pub fn check(protocol: &str, case: &str, got: &str) -> Result<(), String> {
        let file = path(protocol, case);
        if blessing() {
            return std::fs::write(&file, got).map_err(|e| format!("{}: {e}", file.display()));
        }
        let want = std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: {e} (run with BLESS=1)", file.display()))?;
        if want == got {
            Ok(())
        } else {
            Err(format!(
                "{} differs (BLESS=1 rewrites it):\n{}",
                file.display(),
                diff(&format!("{protocol}/{case}.transcript"), &want, got)
            ))
        }
    }
}
