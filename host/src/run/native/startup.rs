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
//! `target/release/` gets its own file, not its directory. **No directory grant is ever the
//! user's home, an ancestor of it, or a directory holding `.ssh`, `.gnupg`, `.aws` or
//! `.config`**: a program at `~/bin/x` with a `~/lib` beside it would otherwise hand the plugin
//! `~/.ssh`. Such a grant is withheld ([`withheld_startup_grants`]); for an install prefix the
//! narrower `P/lib` is granted instead, and the command line says which `--dir` grants the rest. [`crate::Policy::startup_grants`]
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

/// A directory grant the rules found and withheld, because it would hand the plugin the user's
/// home or secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithheldGrant {
    /// The directory.
    pub path: PathBuf,
    /// Why it would have been granted (as [`StartupGrant::reason`]).
    pub reason: &'static str,
    /// Why it was not: `the home directory`, `an ancestor of the home directory`, or
    /// `it holds .ssh` (or `.gnupg`, `.aws`, `.config`).
    pub why: String,
}

/// The read-only grants `program` started with `args` needs (see the module docs). Paths
/// already covered by the system directories Landlock always allows are left out, and so are
/// the [withheld](withheld_startup_grants) ones.
pub fn startup_grants(program: &Path, args: &[String]) -> Vec<StartupGrant> {
    plan(program, args, home().as_deref()).grants
}

/// The directory grants the rules found for `program` and withheld (see the module docs).
pub fn withheld_startup_grants(program: &Path, args: &[String]) -> Vec<WithheldGrant> {
    plan(program, args, home().as_deref()).withheld
}

/// `$HOME`, resolved, when it is set and exists.
fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").and_then(|h| PathBuf::from(h).canonicalize().ok())
}

/// The files in a directory that mark it as a home: granting it would grant them.
const SECRETS: [&str; 4] = [".ssh", ".gnupg", ".aws", ".config"];

/// Why `dir` must not be granted whole, if it must not.
fn too_wide(dir: &Path, home: Option<&Path>) -> Option<String> {
    if let Some(home) = home {
        if dir == home {
            return Some("it is the home directory".into());
        }
        if home.starts_with(dir) {
            return Some("it holds the home directory".into());
        }
    }
    SECRETS
        .iter()
        .find(|s| dir.join(s).exists())
        .map(|s| format!("it holds {s}"))
}

/// The file a native plugin named `program` really is, as a shell would run it: relative to
/// the working directory, `..` and symlinked directories resolved physically (as the kernel
/// resolves them), the file's own name kept (a venv's `bin/python` is a link whose location
/// tells Python its venv). A version manager's shim (pyenv, asdf, mise: a script that looks
/// up the interpreter on every run, in a tree the plugin is not granted) becomes the program
/// the manager would run here, asked with `MANAGER which NAME` in sandpipe's own
/// environment and working directory, so `.python-version` and `PYENV_VERSION` count.
/// The second value says whether it was a shim.
pub(crate) fn resolve_program(program: &Path) -> std::io::Result<(PathBuf, bool)> {
    let absolute = std::path::absolute(program)?;
    let name = absolute
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?;
    let dir = absolute.parent().unwrap_or(Path::new("/")).canonicalize()?;
    let resolved = dir.join(name);
    match shim_manager(&resolved) {
        Some(manager) => which(&manager, name).map(|p| (p, true)).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "{} is a shim of {}, which names no {} here: run `{} which {}` to see why",
                    resolved.display(),
                    manager.display(),
                    name.to_string_lossy(),
                    manager.display(),
                    name.to_string_lossy()
                ),
            )
        }),
        None => Ok((resolved, false)),
    }
}

/// The version manager whose shim `path` is: a `shims` directory whose script runs
/// `pyenv exec`, `asdf exec` or `mise x` (or `exec`). The manager is the one the shim names
/// (pyenv's shim names its own `libexec/pyenv`), else found beside the shims directory.
fn shim_manager(path: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let dir = path.parent()?;
    if dir.file_name()? != "shims" {
        return None;
    }
    let mut head = [0u8; 2048];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let text = std::str::from_utf8(head.get(..n)?).ok()?;
    if !text.starts_with("#!") {
        return None;
    }
    let root = dir.parent()?;
    let named = |tool: &str| {
        text.split(['"', '\'', ' ', '\n'])
            .map(Path::new)
            .find(|w| w.is_absolute() && w.file_name().is_some_and(|f| f == tool))
            .map(Path::to_owned)
    };
    [
        ("pyenv", " exec ", root.join("libexec/pyenv")),
        ("asdf", " exec ", root.join("bin/asdf")),
        ("mise", " x ", root.join("bin/mise")),
        ("mise", " exec ", root.join("bin/mise")),
    ]
    .into_iter()
    .find(|(tool, verb, _)| text.contains(tool) && text.contains(verb))
    .and_then(|(tool, _, beside)| {
        named(tool)
            .or_else(|| beside.is_file().then_some(beside))
            .or_else(|| Some(PathBuf::from(tool)))
    })
}

/// `MANAGER which NAME`: the file the manager would run for `name`. Asked once per process
/// for each pair (the start-up line, its notes and the spawn each resolve the program).
fn which(manager: &Path, name: &std::ffi::OsStr) -> Option<PathBuf> {
    type Answers = std::collections::HashMap<(PathBuf, std::ffi::OsString), Option<PathBuf>>;
    static ANSWERS: std::sync::OnceLock<std::sync::Mutex<Answers>> = std::sync::OnceLock::new();
    let answers = ANSWERS.get_or_init(Default::default);
    let key = (manager.to_owned(), name.to_owned());
    if let Some(answer) = answers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&key)
    {
        return answer.clone();
    }
    let answer = ask_which(manager, name);
    answers
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key, answer.clone());
    answer
}

fn ask_which(manager: &Path, name: &std::ffi::OsStr) -> Option<PathBuf> {
    let out = std::process::Command::new(manager)
        .arg("which")
        .arg(name)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let path = PathBuf::from(text.lines().next()?.trim());
    (out.status.success() && path.is_absolute() && path.is_file()).then_some(path)
}

fn plan(program: &Path, args: &[String], home: Option<&Path>) -> Grants {
    let mut grants = Grants {
        home: home.map(Path::to_owned),
        ..Grants::default()
    };
    let program = &resolve_program(program).map_or_else(|_| program.to_owned(), |(p, _)| p);
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
    grants
}

#[derive(Debug, Default)]
struct Grants {
    grants: Vec<StartupGrant>,
    withheld: Vec<WithheldGrant>,
    home: Option<PathBuf>,
}

impl Grants {
    /// Grant `path`, unless a wider grant covers it or it is a directory too wide to grant.
    fn add(&mut self, path: PathBuf, reason: &'static str) -> bool {
        if super::paths::is_system_path(&path)
            || self.grants.iter().any(|g| path.starts_with(&g.path))
        {
            return true;
        }
        if path.is_dir()
            && let Some(why) = too_wide(&path, self.home.as_deref())
        {
            if !self.withheld.iter().any(|w| w.path == path) {
                self.withheld.push(WithheldGrant { path, reason, why });
            }
            return false;
        }
        // A wider grant replaces the narrower ones it covers.
        self.grants.retain(|g| !g.path.starts_with(&path));
        self.grants.push(StartupGrant { path, reason });
        true
    }

    /// Grant install prefix `prefix`, unless it is too wide or sits directly in the home
    /// directory (`~/.local`, whose `share/` holds keyrings and browser profiles).
    fn add_prefix(&mut self, prefix: &Path) -> bool {
        if let Some(home) = &self.home
            && prefix.parent() == Some(home.as_path())
        {
            self.withheld.push(WithheldGrant {
                path: prefix.to_owned(),
                reason: "install prefix",
                why: "it is directly in the home directory".into(),
            });
            return false;
        }
        self.add(prefix.to_owned(), "install prefix")
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
            && !self.add_prefix(prefix)
        {
            // Too wide (a program in ~/bin with a ~/lib beside it): the libraries alone.
            self.add(prefix.join("lib"), "install prefix");
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

    /// A version manager's layout: `ROOT/shims/NAME` (a script that runs `MANAGER exec`) and
    /// the manager at `manager`, a script answering `which NAME` with `real`.
    fn manager_tree(shim: &str, manager: &str, real: &Path) -> (tempfile::TempDir, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let manager_path = root.join(manager);
        std::fs::create_dir_all(manager_path.parent().expect("parent")).expect("mkdir");
        std::fs::create_dir_all(root.join("shims")).expect("mkdir");
        std::fs::write(
            &manager_path,
            format!("#!/bin/sh\n[ \"$1\" = which ] && echo {}\n", real.display()),
        )
        .expect("write");
        let shim_path = root.join("shims/python3");
        std::fs::write(
            &shim_path,
            shim.replace("MANAGER", &manager_path.display().to_string()),
        )
        .expect("write");
        for p in [&manager_path, &shim_path] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        (dir, shim_path)
    }

    #[test]
    fn a_shim_of_pyenv_asdf_or_mise_resolves_to_what_its_manager_names() {
        let real = Path::new("/bin/sh");
        for (shim, manager) in [
            (
                "#!/usr/bin/env bash\nexec \"MANAGER\" exec \"python3\" \"$@\"\n",
                "libexec/pyenv",
            ),
            (
                "#!/usr/bin/env bash\nexec MANAGER exec python3 \"$@\"\n",
                "bin/asdf",
            ),
            ("#!/bin/sh\nexec MANAGER x -- python3 \"$@\"\n", "bin/mise"),
        ] {
            let (_dir, shim_path) = manager_tree(shim, manager, real);
            assert_eq!(
                resolve_program(&shim_path).expect("resolved"),
                (real.to_owned(), true),
                "{manager}"
            );
        }
        // A script in a directory named otherwise is the program itself.
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("python3");
        std::fs::write(&script, "#!/bin/sh\nexec pyenv exec python3\n").expect("write");
        assert_eq!(
            resolve_program(&script).expect("resolved"),
            (
                dir.path()
                    .canonicalize()
                    .expect("canonical")
                    .join("python3"),
                false
            )
        );
    }

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

    /// A home directory with secrets, a program in `~/bin` beside `~/lib`, and one in
    /// `~/.local/bin` beside `~/.local/lib`.
    fn home_tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path();
        for d in [
            ".ssh",
            "bin",
            "lib",
            ".local/bin",
            ".local/lib",
            ".local/share/keyrings",
        ] {
            std::fs::create_dir_all(home.join(d)).expect("mkdir");
        }
        for f in ["bin/x", ".local/bin/y"] {
            std::fs::write(home.join(f), b"\x7fELF").expect("write");
        }
        dir
    }

    #[test]
    fn a_program_in_home_bin_never_gets_the_home_directory_only_its_lib() {
        let dir = home_tree();
        let home = dir.path().canonicalize().expect("canonical");
        let plan = plan(&home.join("bin/x"), &[], Some(&home));
        assert_eq!(
            paths(&plan.grants, &home),
            [
                ("lib".into(), "install prefix"),
                ("bin/x".into(), "program")
            ]
        );
        assert_eq!(plan.withheld.len(), 1, "{:?}", plan.withheld);
        assert_eq!(plan.withheld[0].path, home);
        assert_eq!(plan.withheld[0].why, "it is the home directory");
        // An ancestor of home, or any directory with secrets in it, is withheld the same way.
        assert_eq!(
            too_wide(home.parent().expect("parent"), Some(&home)).as_deref(),
            Some("it holds the home directory")
        );
        assert_eq!(too_wide(&home, None).as_deref(), Some("it holds .ssh"));
    }

    #[test]
    fn a_program_in_dot_local_bin_gets_dot_local_lib_not_dot_local() {
        let dir = home_tree();
        let home = dir.path().canonicalize().expect("canonical");
        let plan = plan(&home.join(".local/bin/y"), &[], Some(&home));
        assert_eq!(
            paths(&plan.grants, &home),
            [
                (".local/lib".into(), "install prefix"),
                (".local/bin/y".into(), "program")
            ]
        );
        assert_eq!(plan.withheld[0].path, home.join(".local"));
    }

    #[test]
    fn system_programs_need_no_grant() {
        assert_eq!(startup_grants(Path::new("/bin/sh"), &[]), []);
    }
}
