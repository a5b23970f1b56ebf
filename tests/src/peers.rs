//! Where `.ci/setup` put the real peers (pinned packages from the registries), the peers built
//! here from source against real SDKs, and the `sandpipe` binary the stand-in tests run.
//! Everything here fails with "run .ci/setup" when something is missing: a test that cannot
//! find its peer fails, it never skips.
//!
//! ```no_run
//! let deno = sandpipe_tests::peers::deno();
//! assert!(deno.ends_with("node_modules/.bin/deno"));
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::Target;

/// `$SANDPIPE_PEERS_DIR`, default `$HOME/.cache/sandpipe-ci/peers` (the same rule as `.ci/setup`).
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SANDPIPE_PEERS_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").expect("HOME is set (or set SANDPIPE_PEERS_DIR)");
    PathBuf::from(home).join(".cache/sandpipe-ci/peers")
}

fn installed(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed at {}: run .ci/setup",
        path.display()
    );
    path
}

// --- Python peers (one venv; .ci/setup's "Python peers" section) --------------------------------

/// The venv holding the Python peers (`arcaflow-plugin-sdk`, `python-lsp-server`,
/// `finecode-extension-runner`, `arcaflow`), made from the machine's `python3`.
pub fn python_venv() -> PathBuf {
    installed(dir().join("venv"), "the Python peers' venv")
}

/// The venv's interpreter, as an engine's configuration names it (a symlink into the
/// interpreter's own prefix, which sandpipe resolves and grants).
pub fn python() -> PathBuf {
    installed(python_venv().join("bin/python"), "the venv's python")
}

/// The real Arcaflow engine: the static Go binary inside PyPI's `arcaflow` wheel.
pub fn arcaflow_engine() -> PathBuf {
    let lib = python_venv().join("lib");
    let site = std::fs::read_dir(&lib)
        .ok()
        .and_then(|entries| {
            entries
                .flatten()
                .map(|e| e.path().join("site-packages/arcaflow/bin/arcaflow"))
                .find(|p| p.exists())
        })
        .unwrap_or_else(|| lib.join("python3/site-packages/arcaflow/bin/arcaflow"));
    installed(site, "the arcaflow engine (PyPI arcaflow)")
}

/// Run a peer driver (a real client, scripted under `tests/peers/`) to its end and parse the
/// JSON report it prints on stdout. A driver that fails, or prints no report, fails the test
/// with `what` and the driver's output.
pub fn report(cmd: &mut Command, what: &str) -> serde_json::Value {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running the driver {what}: {e}"));
    assert!(
        out.status.success(),
        "driver {what} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "driver {what} printed no report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A file in `tests/peers/` (plugins written here against the real SDKs).
pub fn source(name: &str) -> PathBuf {
    let p = super::workspace_root().join("tests/peers").join(name);
    assert!(p.exists(), "{} is missing", p.display());
    p
}

// --- the sandpipe binary ------------------------------------------------------------------------

/// The `sandpipe` binary of this workspace, built (once per test process) into the target
/// directory this test binary runs from, with its profile. The test crate cannot name another
/// package's binary (`CARGO_BIN_EXE_*` is only set for its own), and a binary left over from
/// an earlier build could be stale, so cargo is asked every time; it rebuilds only what
/// changed. Cargo releases the target directory's lock once the test binaries are built, so
/// this nested build does not wait on the `cargo test` that runs it.
pub fn sandpipe() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let profile_dir = super::test_profile_dir();
            if let Err(e) = super::cargo_build_into(
                &profile_dir,
                &["-p", "sandpipe", "--bin", "sandpipe"],
                |_| {},
            ) {
                panic!("building the sandpipe binary: {e}");
            }
            let bin = profile_dir.join("sandpipe");
            assert!(bin.exists(), "{} was not built", bin.display());
            bin
        })
        .clone()
}

/// A static `sandpipe` (`scripts/build-static static-test`: glibc, non-PIE, no debug info),
/// built once per test process into the target directory this test binary runs from, for
/// container images FROM scratch (`sandpipe image`).
pub fn sandpipe_static() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("the test binary's path");
            // <target>/<profile>/deps/<test binary>
            let target = exe
                .ancestors()
                .nth(3)
                .expect("the test binary lives in <target>/<profile>/deps");
            let out = Command::new(super::workspace_root().join("scripts/build-static"))
                .arg("static-test")
                .env("CARGO_TARGET_DIR", target)
                .output()
                .expect("running scripts/build-static");
            assert!(
                out.status.success(),
                "scripts/build-static failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            assert!(bin.exists(), "{} was not built", bin.display());
            bin
        })
        .clone()
}

// --- container: real Podman ---------------------------------------------------------------------

/// `podman` from Debian (`.ci/setup`), with the `containers.conf` `.ci/setup` writes selected
/// by `CONTAINERS_CONF` (runc, the machine's open-file limit, no network namespace).
pub fn podman() -> Command {
    let mut cmd = Command::new(debian("podman"));
    cmd.env("CONTAINERS_CONF", containers_conf());
    cmd
}

/// Debian's Docker daemon (`docker.io`, `.ci/setup`); the tests start their own on a private
/// socket. Its client is `debian("docker")`.
pub fn dockerd() -> PathBuf {
    installed(
        PathBuf::from("/usr/sbin/dockerd"),
        "Debian's dockerd (docker.io)",
    )
}

/// The `containers.conf` `.ci/setup` writes for podman on these machines.
pub fn containers_conf() -> PathBuf {
    installed(dir().join("containers.conf"), "containers.conf")
}

// --- the Cairo oracle on the real SDK, and Deno from npm ----------------------------------------

/// `deno` from the npm package `deno` (pinned in `.ci/setup`), as an engine's configuration
/// names it: `node_modules/.bin/deno`, a symlink to the binary the package ships.
pub fn deno() -> PathBuf {
    installed(
        dir().join("deno/node_modules/.bin/deno"),
        "deno (npm package `deno`)",
    )
}

/// What the Cairo executor writes to a `stdio:` oracle after reading its `ready` (request id 0):
/// the acknowledgement, one line without its newline.
pub const ORACLE_READY_ACK: &str = r#"{"jsonrpc":"2.0","id":0,"result":{}}"#;

/// The executor's `invoke` of `selector` with `calldata` (felts as hex strings) as request `id`,
/// one line without its newline, in the executor's key order.
pub fn oracle_invoke(id: u64, selector: &str, calldata: &[&str]) -> String {
    let calldata: Vec<String> = calldata.iter().map(|f| format!("\"{f}\"")).collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"invoke","params":{{"selector":"{selector}","calldata":[{}]}}}}"#,
        calldata.join(",")
    )
}

/// The Cairo oracle in `tests/peers/cairo-oracle`, written with the real `cairo-oracle-server`
/// SDK from crates.io, built for `target` (once per test process and target) into the plugin
/// target directory. It is its own cargo workspace, with its own lock file.
pub fn cairo_oracle(target: Target) -> PathBuf {
    static WASM: OnceLock<PathBuf> = OnceLock::new();
    static NATIVE: OnceLock<PathBuf> = OnceLock::new();
    let (cell, triple) = match target {
        Target::Wasm => (&WASM, Some("wasm32-wasip2")),
        Target::Native => (&NATIVE, None),
        Target::WasmP1 => panic!("the Cairo oracle peer is built for wasm32-wasip2 and natively"),
    };
    cell.get_or_init(|| {
        let manifest = source("cairo-oracle/Cargo.toml");
        let dir = super::plugin_target_dir();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "--release",
            "--quiet",
            "--locked",
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&dir);
        if let Some(triple) = triple {
            cmd.args(["--target", triple]);
        }
        let status = cmd
            .status()
            .expect("running cargo to build the Cairo oracle");
        assert!(
            status.success(),
            "building {} for {target:?} failed",
            manifest.display()
        );
        match triple {
            Some(triple) => dir.join(triple).join("release/peer-cairo-oracle.wasm"),
            None => dir.join("release/peer-cairo-oracle"),
        }
    })
    .clone()
}

// --- pyjs: componentize-py, and the interpreter of the native Python builds ---------------------

/// The shared venv's Python (componentize-py 0.25.1 lives there too).
pub fn venv_python() -> PathBuf {
    python()
}

/// `componentize-py` 0.25.1 in the shared venv.
pub fn componentize_py() -> PathBuf {
    installed(
        dir().join("venv/bin/componentize-py"),
        "componentize-py (PyPI)",
    )
}

/// The system `python3` that runs the native builds of Python plugins (a path Landlock lets a
/// native plugin read: `/usr`).
pub fn system_python() -> PathBuf {
    installed(PathBuf::from("/usr/bin/python3"), "the system python3")
}

// --- oci: Debian's registry, skopeo, minisign, htpasswd; the oras SDK ---------------------------

/// A program from a Debian package (`/usr/bin/NAME`).
pub fn debian(name: &str) -> PathBuf {
    installed(
        PathBuf::from("/usr/bin").join(name),
        &format!("Debian's {name}"),
    )
}

/// The Python of the venv holding the `oras` SDK (PyPI `oras`).
pub fn oras_python() -> PathBuf {
    installed(dir().join("oras-venv/bin/python"), "the oras Python SDK")
}

// --- js: the JS guest toolchain -----------------------------------------------------------------

/// The system `node` that runs the native builds of JS plugins (a path Landlock lets a native
/// plugin read: `/usr`).
pub fn node() -> PathBuf {
    installed(PathBuf::from("/usr/bin/node"), "the system node")
}

/// The directory holding the pinned JS toolchain (rolldown, componentize-js, jco from
/// `guest-sdk/js/package-lock.json`) that `guest-sdk/js/build.js` uses.
pub fn js_toolchain() -> PathBuf {
    let dir = dir().join("js-toolchain");
    installed(
        dir.join("node_modules/@bytecodealliance/componentize-js/package.json"),
        "componentize-js (npm)",
    );
    installed(
        dir.join("node_modules/rolldown/package.json"),
        "rolldown (npm)",
    );
    dir
}

// --- mcp: the official MCP Python SDK client and real MCP servers -------------------------------

/// The Python of the venv holding the MCP Python SDK (PyPI `mcp`) and `mcp-server-time`.
pub fn mcp_python() -> PathBuf {
    installed(
        dir().join("mcp-venv/bin/python"),
        "the MCP Python SDK (PyPI mcp)",
    )
}

/// `mcp-server-fetch` (PyPI), the server that needs the network, as a client's config names it.
pub fn mcp_server_fetch() -> PathBuf {
    installed(
        dir().join("mcp-venv/bin/mcp-server-fetch"),
        "mcp-server-fetch (PyPI)",
    )
}

/// `mcp-server-time` (PyPI) as a client's config names it: the venv's entry-point script.
pub fn mcp_server_time() -> PathBuf {
    installed(
        dir().join("mcp-venv/bin/mcp-server-time"),
        "mcp-server-time (PyPI)",
    )
}

/// An npm MCP server's bin link (`mcp-server-everything`, `mcp-server-filesystem`,
/// `mcp-server-memory`) in the project `.ci/setup` installs from
/// `tests/peers/mcp/package-lock.json`: a symlink to the package's script (`#!/usr/bin/env node`).
pub fn mcp_npm_server(name: &str) -> PathBuf {
    installed(
        dir().join("mcp-npm/node_modules/.bin").join(name),
        &format!("{name} (npm @modelcontextprotocol)"),
    )
}

/// The official MCP conformance suite (npm `@modelcontextprotocol/conformance`) as a command:
/// the Node 22 it needs (npm's `node` package) running its script, both from
/// `tests/peers/conformance/package-lock.json`.
pub fn mcp_conformance() -> Command {
    let dir = dir().join("conformance/node_modules");
    let node = installed(dir.join("node/bin/node"), "Node 22 (npm node)");
    let script = installed(
        dir.join("@modelcontextprotocol/conformance/dist/index.js"),
        "the MCP conformance suite (npm @modelcontextprotocol/conformance)",
    );
    let mut cmd = Command::new(node);
    cmd.arg(script);
    cmd
}

/// `tests/peers/mcp/issuer.py` (PyJWT, `cryptography`, in the MCP venv): `args[0]` is the
/// verb (`keys`, `rotate`, `token`, `forge`), run on the key directory `dir` with the rest;
/// what it prints (a token), trimmed.
pub fn issuer(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(mcp_python())
        .arg(source("mcp/issuer.py"))
        .arg(args[0])
        .arg(dir)
        .args(&args[1..])
        .output()
        .expect("issuer.py");
    assert!(
        out.status.success(),
        "issuer.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The directory of the npm project `.ci/setup` installs from `tests/peers/mcp/package-lock.json`
/// (the npm MCP servers and the official MCP TypeScript SDK, `@modelcontextprotocol/sdk`), for
/// `tests/peers/mcp/drive.mjs` to load the SDK from (`SANDPIPE_MCP_NPM`).
pub fn mcp_npm() -> PathBuf {
    let dir = dir().join("mcp-npm");
    installed(
        dir.join("node_modules/@modelcontextprotocol/sdk/package.json"),
        "the MCP TypeScript SDK (npm @modelcontextprotocol/sdk)",
    );
    dir
}
