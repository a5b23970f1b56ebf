//! Defaults that fail safe, seen from the command line: a start-up grant never hands a native
//! plugin the user's home, and a `SANDPIPE_*` variable never loosens a policy file silently.
//! (The cgroup memory default, which only ever lowers the cap outside images, is a unit test in
//! `host/src/dist/image.rs`.)

use std::path::Path;
use std::process::{Command, Output, Stdio};

use sandpipe_tests::peers;

/// `sandpipe ARGS` with `env` added and stdin closed.
fn sandpipe(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(peers::sandpipe())
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("running sandpipe")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_program_in_home_bin_beside_home_lib_is_not_handed_the_home_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().canonicalize().expect("canonical");
    for d in ["bin", "lib", ".ssh"] {
        std::fs::create_dir_all(home.join(d)).expect("mkdir");
    }
    std::fs::write(home.join(".ssh/id_ed25519"), b"secret").expect("write");
    let program = home.join("bin/true");
    std::fs::copy("/bin/true", &program).expect("copy /bin/true");
    let home_s = home.to_str().expect("UTF-8");
    let out = sandpipe(
        &[
            "run",
            "--framing",
            "lines",
            program.to_str().expect("UTF-8"),
        ],
        &[("HOME", home_s)],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "note: {home_s} (the plugin's install prefix) is not granted: it is the home directory"
        )),
        "{err}"
    );
    // The narrower directory is granted instead, and the program itself.
    let lib = home.join("lib");
    assert!(
        err.contains(&format!("{} (install prefix)", lib.display())),
        "{err}"
    );
    assert!(
        !err.contains(&format!("{home_s} (install prefix)")),
        "{err}"
    );
    assert!(Path::new(&program).exists());
}

#[test]
fn an_environment_variable_that_loosens_a_policy_file_is_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let other = dir.path().join("other");
    for d in [&data, &other] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "framing = \"lines\"\n\n[plugin]\nsource = \"/bin/true\"\n\n[limits]\nmax-memory = \"64MiB\"\n\n[grants]\ndirs = [\"{}:ro\"]\n",
            data.display()
        ),
    )
    .expect("write");
    let policy = policy.to_str().expect("UTF-8");
    let other = other.to_str().expect("UTF-8");
    // No variable: no note.
    let quiet = sandpipe(&["run", policy], &[]);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert!(
        !stderr(&quiet).contains("note: SANDPIPE_"),
        "{}",
        stderr(&quiet)
    );
    let out = sandpipe(
        &["run", policy],
        &[("SANDPIPE_MAX_MEMORY", "none"), ("SANDPIPE_DIR", other)],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "sandpipe: note: SANDPIPE_MAX_MEMORY overrides the policy file's limits.max-memory"
        ),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "sandpipe: note: SANDPIPE_DIR adds {other} to the policy file's grants.dirs"
        )),
        "{err}"
    );
}
