//! What a native plugin needs to read in order to start, granted read-only without a `--dir`.
//!
//! Landlock confines a native plugin to the system's programs and libraries. A plugin whose
//! interpreter lives elsewhere (a pyenv or venv Python, Deno or Node installed from npm, a
//! script next to the engine's configuration) would die before its first frame:
//! `Fatal Python error: init_fs_encoding ... No module named 'encodings'`. So sandpipe grants,
//! read-only (read, list, execute):
//!
//! ```text
//! program           the executable, resolved through symlinks (and the path it was named by)
//! interpreter       the program named on a script's `#!` line (not /usr/bin/env), resolved
//! install prefix    P, when an executable resolves to P/bin/NAME and P has a lib/ directory
//!                   (a pyenv version, a Node or Python installed under a home directory)
//! venv              V, when an executable was named as V/bin/NAME and V/pyvenv.cfg exists,
//!                   plus the prefix of the interpreter its `home =` line names
//! script            every argument that names an existing regular file (plugin.py, main.ts)
//! package tree      N, when the program or a script resolves to a path under N, the outermost
//!                   `node_modules` directory on it (a Node package's imports resolve from
//!                   the project's node_modules: an npm-installed MCP server); and V, when it
//!                   lies inside a venv V (V/pyvenv.cfg exists: a pip or uv-installed server)
//! ```
//!
//! Nothing here is writable, and nothing outside these paths is added: a compiled plugin in
//! `target/release/` gets its own file, not its directory. [`crate::Policy::startup_grants`]
//! (`--no-startup-grants`) turns this off. The grants are listed in the not-sandboxed notice and
//! by `sandpipe inspect`.

use std::path::{Path, PathBuf};

/// One path granted read-only to a native plugin so that it can start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupGrant {
    /// The host path (a file or a directory).
    pub path: PathBuf,
    /// Why it is granted: `program`, `interpreter`, `install prefix`, `venv`, `script` or
    /// `package tree`.
    pub reason: &'static str,
}

/// The read-only grants `program` started with `args` needs (see the module docs). Paths
/// already covered by the system directories Landlock always allows are left out.
pub fn startup_grants(program: &Path, args: &[String]) -> Vec<StartupGrant> {
    let mut grants = Grants::default();
    grants.executable(program, "program");
    if let Some(interpreter) = shebang_interpreter(program) {
        grants.executable(&interpreter, "interpreter");
    }
    for arg in args {
        if arg.starts_with('-') {
            continue;
        }
        let path = Path::new(arg);
        if path.is_file()
            && let Ok(real) = path.canonicalize()
        {
            grants.package_tree(&real);
            grants.add(real, "script");
        }
    }
    grants.0
}

#[derive(Debug, Default)]
struct Grants(Vec<StartupGrant>);

impl Grants {
    fn add(&mut self, path: PathBuf, reason: &'static str) {
        if super::landlock::is_system_path(&path)
            || self.0.iter().any(|g| path.starts_with(&g.path))
        {
            return;
        }
        // A wider grant replaces the narrower ones it covers.
        self.0.retain(|g| !g.path.starts_with(&path));
        self.0.push(StartupGrant { path, reason });
    }

    /// An executable as named, the file it resolves to, and the install prefix or venv that
    /// either path shows.
    fn executable(&mut self, named: &Path, reason: &'static str) {
        let Ok(real) = named.canonicalize() else {
            return;
        };
        if let Some(venv) = venv_of(named) {
            if let Some(home) = venv_home(&venv) {
                self.prefix_of(&home.join("python"));
            }
            self.add(venv, "venv");
        }
        self.prefix_of(&real);
        self.package_tree(&real);
        self.add(real, reason);
    }

    /// The package tree a file resolved to lies in: the outermost `node_modules` on its path,
    /// or the venv holding it.
    fn package_tree(&mut self, real: &Path) {
        let mut outermost = None;
        for dir in real.ancestors().skip(1) {
            if dir.file_name().is_some_and(|n| n == "node_modules") {
                outermost = Some(dir);
            }
        }
        if let Some(dir) = outermost {
            self.add(dir.to_owned(), "package tree");
            return;
        }
        if let Some(venv) = real
            .ancestors()
            .skip(1)
            .find(|d| d.join("pyvenv.cfg").is_file())
        {
            self.add(venv.to_owned(), "venv");
        }
    }

    /// `P` for an executable at `P/bin/NAME` when `P/lib` exists.
    fn prefix_of(&mut self, executable: &Path) {
        let Some(bin) = executable.parent() else {
            return;
        };
        if bin.file_name().is_some_and(|n| n == "bin")
            && let Some(prefix) = bin.parent()
            && prefix.parent().is_some()
            && prefix.join("lib").is_dir()
        {
            self.add(prefix.to_owned(), "install prefix");
        }
    }
}

/// `V` when `named` is `V/bin/NAME` and `V/pyvenv.cfg` exists (made absolute, not resolved:
/// the venv is found through the path the interpreter was started by).
fn venv_of(named: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(named).ok()?;
    let bin = absolute.parent()?;
    let venv = bin.parent()?;
    (bin.file_name()? == "bin" && venv.join("pyvenv.cfg").is_file()).then(|| venv.to_owned())
}

/// The directory `home = ...` in a venv's `pyvenv.cfg` names (the base interpreter's bin/).
fn venv_home(venv: &Path) -> Option<PathBuf> {
    let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).ok()?;
    cfg.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "home").then(|| PathBuf::from(value.trim()))
    })
}

/// The interpreter on `program`'s `#!` line, unless it is `env` (whose target is looked up on a
/// PATH the plugin does not have unless granted).
fn shebang_interpreter(program: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n')?];
    let line = std::str::from_utf8(line).ok()?;
    let interpreter = Path::new(line.split_whitespace().next()?);
    (interpreter.is_absolute() && interpreter.file_name()? != "env").then(|| interpreter.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for d in ["py/bin", "py/lib/python3.11", "venv/bin", "app"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::write(root.join("py/bin/python3.11"), b"\x7fELF").expect("write");
        std::os::unix::fs::symlink(root.join("py/bin/python3.11"), root.join("venv/bin/python"))
            .expect("symlink");
        std::fs::write(
            root.join("venv/pyvenv.cfg"),
            format!(
                "home = {}\nversion = 3.11.7\n",
                root.join("py/bin").display()
            ),
        )
        .expect("write");
        std::fs::write(root.join("app/plugin.py"), b"print()").expect("write");
        std::fs::write(
            root.join("app/tool"),
            format!("#!{}\nimport sys\n", root.join("venv/bin/python").display()),
        )
        .expect("write");
        std::fs::write(root.join("app/compiled"), b"\x7fELF").expect("write");
        dir
    }

    fn paths(grants: &[StartupGrant], root: &Path) -> Vec<(String, &'static str)> {
        let root = root.canonicalize().expect("canonical");
        grants
            .iter()
            .map(|g| {
                let rel = g.path.strip_prefix(&root).unwrap_or(&g.path);
                (rel.display().to_string(), g.reason)
            })
            .collect()
    }

    #[test]
    fn a_venv_interpreter_gets_its_venv_its_base_prefix_and_the_script() {
        let dir = tree();
        let root = dir.path().canonicalize().expect("canonical");
        let script = root.join("app/plugin.py").display().to_string();
        let grants = startup_grants(&root.join("venv/bin/python"), &["-u".into(), script]);
        assert_eq!(
            paths(&grants, &root),
            [
                ("py".to_owned(), "install prefix"),
                ("venv".to_owned(), "venv"),
                ("app/plugin.py".to_owned(), "script"),
            ]
        );
    }

    #[test]
    fn a_script_gets_the_interpreter_on_its_shebang_line() {
        let dir = tree();
        let root = dir.path().canonicalize().expect("canonical");
        let grants = startup_grants(&root.join("app/tool"), &[]);
        assert_eq!(
            paths(&grants, &root),
            [
                ("app/tool".to_owned(), "program"),
                ("py".to_owned(), "install prefix"),
                ("venv".to_owned(), "venv"),
            ]
        );
    }

    #[test]
    fn a_compiled_plugin_gets_its_own_file_and_nothing_around_it() {
        let dir = tree();
        let root = dir.path().canonicalize().expect("canonical");
        let grants = startup_grants(&root.join("app/compiled"), &["not-a-file".into()]);
        assert_eq!(
            paths(&grants, &root),
            [("app/compiled".to_owned(), "program")]
        );
    }

    #[test]
    fn a_script_in_node_modules_gets_the_projects_node_modules() {
        let dir = tree();
        let root = dir.path().canonicalize().expect("canonical");
        let pkg = root.join("proj/node_modules/@scope/server/dist");
        std::fs::create_dir_all(&pkg).expect("mkdir");
        std::fs::create_dir_all(root.join("proj/node_modules/.bin")).expect("mkdir");
        std::fs::write(pkg.join("index.js"), b"#!/usr/bin/env node\n").expect("write");
        std::os::unix::fs::symlink(
            pkg.join("index.js"),
            root.join("proj/node_modules/.bin/server"),
        )
        .expect("symlink");
        let script = pkg.join("index.js").display().to_string();
        let grants = startup_grants(Path::new("/usr/bin/node"), &[script]);
        assert_eq!(
            paths(&grants, &root),
            [("proj/node_modules".to_owned(), "package tree")]
        );
        // The package's bin link run as the program: the same tree.
        let grants = startup_grants(&root.join("proj/node_modules/.bin/server"), &[]);
        assert_eq!(
            paths(&grants, &root),
            [("proj/node_modules".to_owned(), "package tree")]
        );
    }

    #[test]
    fn a_script_inside_a_venv_gets_the_venv() {
        let dir = tree();
        let root = dir.path().canonicalize().expect("canonical");
        let site = root.join("venv/lib/python3.11/site-packages/server");
        std::fs::create_dir_all(&site).expect("mkdir");
        std::fs::write(site.join("main.py"), b"").expect("write");
        let grants = startup_grants(
            Path::new("/usr/bin/python3"),
            &[site.join("main.py").display().to_string()],
        );
        assert_eq!(paths(&grants, &root), [("venv".to_owned(), "venv")]);
    }

    #[test]
    fn system_programs_need_no_grant() {
        assert_eq!(startup_grants(Path::new("/bin/sh"), &[]), []);
    }
}
