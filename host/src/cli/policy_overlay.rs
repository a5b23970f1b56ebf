//! The command line laid over a policy file: `sandpipe run plugin.toml`, and `--policy FILE` on
//! run, call and inspect.
//!
//! The file itself is read by the library ([`PolicyFile`]: its schema, its checks, relative
//! paths resolved against the file's directory), with the parsers the flags use, so
//! `max-memory = "64MiB"` and `--max-memory 64MiB` accept exactly the same values. This module
//! is the one overlay of the command line on it, decided here and documented in
//! docs/policy.md:
//! - a flag given on the command line overrides the file's value for that key;
//! - lists (`dirs`, `env`, `allow-imports`, `net.*`, `trusted-keys`, `insecure-registries`,
//!   `tools.allow`, `tools.deny`) are the file's followed by the command line's;
//! - a switch (`restart`, `locked`, ...) is on when either turns it on;
//! - `--framing` or `--protocol` on the command line replaces whichever of the two the file
//!   names;
//! - arguments after PLUGIN replace the file's `args`;
//! - a PLUGIN given on the command line next to `--policy` replaces the file's `source` (the
//!   same limits for another build of the plugin);
//! - a `SANDPIPE_*` variable counts as the command line, and is named in a `note:` line when it
//!   overrides or adds to what the file says.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::ArgMatches;
use clap::parser::ValueSource;

use super::Command;
use super::sandbox_args::SandboxArgs;
use crate::PolicyFile;
use crate::policy::sections::{Merge, Trust, all_keys};

/// Fold a manifest (named by `--policy` or given as PLUGIN) into `command`'s arguments, keeping
/// whatever the command line said itself.
pub(crate) fn apply(command: &mut Command, matches: &ArgMatches) -> Result<()> {
    let Some((_, sub)) = matches.subcommand() else {
        return Ok(());
    };
    match command {
        Command::Run(args) => {
            let folded = fold(
                args.policy.as_deref(),
                &mut args.plugin,
                &mut args.args,
                &mut args.sandbox,
                sub,
            )?;
            args.sandbox.sources = sources(sub, folded.as_ref(), "args");
            let Some((m, path)) = folded else {
                return Ok(());
            };
            if !given(sub, "framing") && !given(sub, "protocol") {
                if let Some(f) = m.framing {
                    args.framing = f;
                }
                args.protocol = m.protocol;
            }
            let env = |id: &str| from_env(sub, id);
            args.requests.overlay(&m.requests, &env, &mut note);
            args.tools.overlay(&m.tools, &env, &mut note);
            if args.protocol.is_none() && !m.requests.is_empty() {
                bail!(
                    "{}: [requests] budgets need a protocol (`protocol = ...` or --protocol)",
                    path.display()
                );
            }
        }
        Command::Serve(args) => {
            let folded = fold(
                args.policy.as_deref(),
                &mut args.plugin,
                &mut args.args,
                &mut args.sandbox,
                sub,
            )?;
            args.sandbox.sources = sources(sub, folded.as_ref(), "args");
            let Some((m, path)) = folded else {
                return Ok(());
            };
            if m.protocol
                .is_some_and(|p| p != crate::speak::protocols::Protocol::Mcp)
            {
                bail!(
                    "{}: `sandpipe serve` serves MCP: the file names another protocol",
                    path.display()
                );
            }
            let env = |id: &str| from_env(sub, id);
            args.requests.overlay(&m.requests, &env, &mut note);
            args.tools.overlay(&m.tools, &env, &mut note);
            args.serve.overlay(&m.serve, &env, &mut note);
            args.principals = m.principal_tools();
        }
        Command::Call(args) => {
            let folded = fold(
                args.policy.as_deref(),
                &mut args.plugin,
                &mut args.plugin_args,
                &mut args.sandbox,
                sub,
            )?;
            args.sandbox.sources = sources(sub, folded.as_ref(), "plugin_args");
            let Some((m, _)) = folded else {
                return Ok(());
            };
            if args.protocol.is_none() {
                args.protocol = m.protocol;
            }
            let env = |id: &str| from_env(sub, id);
            args.tools.overlay(&m.tools, &env, &mut note);
        }
        Command::Inspect(args) => {
            // inspect starts the plugin only with --protocol: the manifest's protocol is not
            // turned into a self-description run the user did not ask for.
            let folded = fold(
                args.policy.as_deref(),
                &mut args.plugin,
                &mut args.plugin_args,
                &mut args.sandbox,
                sub,
            )?;
            args.sandbox.sources = sources(sub, folded.as_ref(), "plugin_args");
            if let Some((m, path)) = folded {
                args.policy_file = Some(path);
                let env = |id: &str| from_env(sub, id);
                args.tools.overlay(&m.tools, &env, &mut note);
                if m.serve != Default::default() || !m.principals.is_empty() {
                    args.serve = Some(Box::new(super::inspect::ServeSection {
                        principals: m.principal_tools(),
                        serve: m.serve.clone(),
                    }));
                }
                // inspect has no request flags: the file's budgets, as given.
                args.requests = m.requests;
            }
        }
        _ => {}
    }
    Ok(())
}

/// What run, call and inspect fold alike: the plugin (when PLUGIN is the manifest), its
/// arguments (when none follow PLUGIN) and the sandbox options. Returns the manifest and its
/// path, or `None` when there is no manifest.
fn fold(
    policy: Option<&Path>,
    plugin: &mut PathBuf,
    args: &mut Vec<String>,
    sandbox: &mut SandboxArgs,
    cli: &ArgMatches,
) -> Result<Option<(PolicyFile, PathBuf)>> {
    let Some(path) = manifest_path(policy, plugin) else {
        return Ok(None);
    };
    let m = PolicyFile::load(&path)?;
    if PolicyFile::is_policy_file(plugin) {
        plugin.clone_from(&m.plugin.source);
    }
    if args.is_empty() {
        args.clone_from(&m.plugin.args);
    }
    merge_sandbox(sandbox, &m, cli)?;
    Ok(Some((m, path)))
}

fn manifest_path(policy: Option<&Path>, plugin: &Path) -> Option<PathBuf> {
    match policy {
        Some(p) => Some(p.to_owned()),
        None if PolicyFile::is_policy_file(plugin) => Some(plugin.to_owned()),
        None => None,
    }
}

/// Whether the command line (or its `SANDPIPE_*` environment variable) set `id`: both win
/// over the file.
fn given(m: &ArgMatches, id: &str) -> bool {
    matches!(
        m.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

/// The plugin a policy file names (`sandpipe image --policy FILE` without PLUGIN).
pub(crate) fn plugin_of(policy: &Path) -> Result<PathBuf> {
    Ok(PolicyFile::load(policy)?.plugin.source)
}

/// A key of the policy document outside its sections: its name, the flags that set it, and
/// whether a policy file does.
type TopLevelKey = (&'static str, Vec<&'static str>, fn(&PolicyFile) -> bool);

/// The keys of the policy document outside its sections; `args`' flag differs per command.
fn top_level_keys(args_flag: &'static str) -> [TopLevelKey; 3] {
    [
        ("seed", vec!["seed", "deterministic"], |m| {
            m.seed.is_some() || m.deterministic
        }),
        ("audit", vec!["audit"], |m| m.audit.is_some()),
        ("args", vec![args_flag], |m| !m.plugin.args.is_empty()),
    ]
}

/// Where each value of the policy came from, by the policy document's key: `flag`, `env` (a
/// `SANDPIPE_*` variable), `file`, `default`, or, for a list the file and the command line
/// both add to, `file+flag` or `file+env`. `inspect --json` shows it as `policy_sources`.
/// Every section's declared keys are here ([`crate::policy::sections::all_keys`]), and `[trust]`'s.
fn sources(
    cli: &ArgMatches,
    manifest: Option<&(PolicyFile, PathBuf)>,
    args_flag: &'static str,
) -> std::collections::BTreeMap<String, String> {
    let m = manifest.map(|(m, _)| m);
    let in_file: std::collections::BTreeMap<&str, bool> = m
        .map(|m| {
            m.limits
                .keys_set()
                .chain(m.grants.keys_set())
                .chain(m.net.keys_set())
                .chain(m.requests.keys_set())
                .chain(m.tools.keys_set())
                .chain(m.trust.keys_set())
                .map(|(k, set)| (k.key, set))
                .collect()
        })
        .unwrap_or_default();
    let source = |file: bool, flags: &[&str], list: bool| {
        let given = flags.iter().find_map(|id| given_by(cli, id));
        match (file, given) {
            (true, Some(g)) if list => format!("file+{g}"),
            (_, Some(g)) => g.to_owned(),
            (true, None) => "file".to_owned(),
            (false, None) => "default".to_owned(),
        }
    };
    let sections = all_keys().chain(Trust::KEYS).map(|k| {
        let file = in_file.get(k.key).copied().unwrap_or(false);
        (
            k.key.to_owned(),
            source(file, &[k.flag], k.merge == Merge::List),
        )
    });
    let top = top_level_keys(args_flag)
        .map(|(key, flags, set)| (key.to_owned(), source(m.is_some_and(set), &flags, false)));
    sections.chain(top).collect()
}

/// `flag` or `env` when the command line or its `SANDPIPE_*` variable gave `id`; `None` when
/// it did not, or the command has no such flag.
fn given_by(cli: &ArgMatches, id: &str) -> Option<&'static str> {
    if !cli.try_contains_id(id).unwrap_or(false) {
        return None;
    }
    match cli.value_source(id) {
        Some(ValueSource::CommandLine) => Some("flag"),
        Some(ValueSource::EnvVariable) => Some("env"),
        _ => None,
    }
}

/// The sandbox sections and `[trust]`, each by its declaration's overlay
/// ([`crate::policy::sections`]), then the keys outside them.
fn merge_sandbox(s: &mut SandboxArgs, m: &PolicyFile, cli: &ArgMatches) -> Result<()> {
    let env = |id: &str| from_env(cli, id);
    s.limits.overlay(&m.limits, &env, &mut note);
    s.grants.overlay(&m.grants, &env, &mut note);
    s.net.overlay(&m.net, &env, &mut note);
    layer(cli, ("audit", "audit"), &mut s.audit, &m.audit);
    s.deterministic |= m.deterministic;
    layer(cli, ("seed", "seed"), &mut s.seed, &m.seed);
    layer(
        cli,
        ("sha256", "plugin.sha256"),
        &mut s.dist.sha256,
        &m.plugin.sha256,
    );
    let trust = &mut s.dist.trust;
    if (m.trust.locked || trust.locked) && m.trust.lockfile.is_none() && trust.lockfile.is_none() {
        bail!("`locked` needs a lock file (`trust.lockfile` or --lockfile)");
    }
    trust.overlay(&m.trust, &env, &mut note);
    Ok(())
}

/// A note on stderr: what a `SANDPIPE_*` variable overrides or adds to.
fn note(text: String) {
    eprintln!("sandpipe: note: {text}");
}

/// A key outside the declared sections that the flag and the file hold in the same type: the
/// flag's value if given, else the file's (`flag.or(file)`).
///
/// One rule for the environment, as for the sections' keys: a `SANDPIPE_*` variable counts as
/// the command line, so it wins too, but never silently: a note names the variable and the
/// file's `key` it overrides (a limit raised, a pin replaced), so a policy file read by a
/// reviewer is not quietly loosened.
fn layer<T: Clone>(
    cli: &ArgMatches,
    (id, key): (&str, &str),
    flag: &mut Option<T>,
    file: &Option<T>,
) {
    match (&*flag, file) {
        (None, Some(v)) => *flag = Some(v.clone()),
        (Some(_), Some(_)) if from_env(cli, id) => {
            let var = format!("SANDPIPE_{}", id.to_uppercase());
            note(format!("{var} overrides the policy file's {key}"));
        }
        _ => {}
    }
}

/// Whether `id`'s value came from its `SANDPIPE_*` variable rather than the command line.
fn from_env(cli: &ArgMatches, id: &str) -> bool {
    given_by(cli, id) == Some("env")
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches};

    use super::*;
    use crate::cli::Cli;

    fn run_args(argv: &[&str]) -> super::super::run::RunArgs {
        let matches = super::super::with_env_names(Cli::command())
            .try_get_matches_from(argv)
            .expect("parses");
        match Cli::from_arg_matches(&matches).expect("parses").command {
            Command::Run(args) => args,
            _ => panic!("not run"),
        }
    }

    /// Each flag and its policy-file key are one field of one struct, read by one parser: the
    /// same values given both ways make equal structs, so the overlay is a field at a time.
    #[test]
    fn flags_and_policy_file_keys_fill_the_same_structs() {
        let file = PolicyFile::parse(
            r#"
[plugin]
source = "p.wasm"
[limits]
fuel = 5
max-memory = "none"
timeout = "3s"
max-cpu-time = "2s"
max-open-files = 64
max-processes = 16
max-disk-write = "1MiB"
max-frame = "1KiB"
max-record = "1MiB"
[grants]
dirs = ["/d::/g:ro", "/e"]
env = ["A=1", "HOME"]
allow-imports = ["wasi:cli/stdin@0.2"]
startup-grants = false
[requests]
timeout = "1s"
start-timeout = "5s"
restart = true
recycle-after = 3
recycle-memory = "64MiB"
recycle-grace = "1s"
[tools]
allow = ["a"]
deny = ["b"]
[net]
allow = ["example.com:443"]
resolve = ["example.com=127.0.0.1"]
http-headers = ["example.com:X-Key=env:KEY"]
[trust]
trusted-keys = ["/k.pub"]
require-signature = true
lockfile = "/sandpipe.lock"
locked = true
offline = true
insecure-registries = ["registry.test:5000"]
"#,
            Path::new("/"),
        )
        .expect("a policy file");
        let run = run_args(&[
            "sandpipe",
            "run",
            "--protocol",
            "mcp",
            "--fuel=5",
            "--max-memory=none",
            "--timeout=3s",
            "--max-cpu-time=2s",
            "--max-open-files=64",
            "--max-processes=16",
            "--max-disk-write=1MiB",
            "--max-frame=1KiB",
            "--max-record=1MiB",
            "--dir=/d::/g:ro",
            "--dir=/e",
            "--env=A=1",
            "--env=HOME",
            "--allow-import=wasi:cli/stdin@0.2",
            "--no-startup-grants",
            "--request-timeout=1s",
            "--start-timeout=5s",
            "--restart",
            "--recycle-after=3",
            "--recycle-memory=64MiB",
            "--recycle-grace=1s",
            "--allow-tool=a",
            "--deny-tool=b",
            "--allow-net=example.com:443",
            "--resolve=example.com=127.0.0.1",
            "--http-header=example.com:X-Key=env:KEY",
            "--trusted-key=/k.pub",
            "--require-signature",
            "--lockfile=/sandpipe.lock",
            "--locked",
            "--offline",
            "--insecure-registry=registry.test:5000",
            "p.wasm",
        ]);
        assert_eq!(run.sandbox.dist.trust, file.trust);
        assert_eq!(run.sandbox.limits, file.limits);
        assert_eq!(run.sandbox.grants, file.grants);
        assert_eq!(run.sandbox.net, file.net);
        assert_eq!(run.requests, file.requests);
        assert_eq!(run.tools, file.tools);
        // `fuel` and `requests.fuel` exclude each other.
        let file = PolicyFile::parse(
            "[plugin]\nsource = \"p.wasm\"\n[requests]\nfuel = 7\n",
            Path::new("/"),
        )
        .expect("a policy file");
        let run = run_args(&["sandpipe", "run", "--fuel-per-request=7", "p.wasm"]);
        assert_eq!(run.requests, file.requests);
        // Nothing given: every key is the default's, as in an empty file.
        let file = PolicyFile::parse("[plugin]\nsource = \"p.wasm\"\n", Path::new("/"))
            .expect("a policy file");
        let run = run_args(&["sandpipe", "run", "p.wasm"]);
        assert_eq!(run.sandbox.limits, file.limits);
        assert_eq!(run.sandbox.grants, file.grants);
        assert_eq!(run.requests, file.requests);
    }

    /// Every declared key is in each place its declaration derives: `run` has its flag, with
    /// its `SANDPIPE_*` variable; a policy file holds it and reads it back as written;
    /// `inspect`'s sources name it; the recorded document has it. The command lines below give
    /// every key (`--fuel` and `--fuel-per-request` exclude each other, so two), so a key
    /// added to a section fails here until it has a value.
    #[test]
    fn every_declared_key_is_in_every_derived_place() {
        let cli = super::super::with_env_names(Cli::command());
        let run = cli.find_subcommand("run").expect("run");
        // `[trust]`'s flags too, though its keys are not the document's.
        for key in all_keys().chain(Trust::KEYS) {
            let arg = run
                .get_arguments()
                .find(|a| a.get_id() == key.flag)
                .unwrap_or_else(|| panic!("{}: no flag {}", key.key, key.flag));
            assert_eq!(arg.get_long(), Some(key.flag), "{}", key.key);
            assert_eq!(
                arg.get_env().and_then(|v| v.to_str()),
                Some(key.env_var().as_str()),
                "{}",
                key.key
            );
        }
        let argvs: [&[&str]; 2] = [
            &[
                "--max-memory=64MiB",
                "--timeout=3s",
                "--max-cpu-time=2s",
                "--max-open-files=64",
                "--max-processes=16",
                "--max-disk-write=1MiB",
                "--max-frame=1KiB",
                "--max-record=1MiB",
                "--dir=/d::/g:ro",
                "--env=A=1",
                "--allow-import=wasi:cli/stdin@0.2",
                "--no-startup-grants",
                "--allow-net=example.com:443",
                "--resolve=example.com=127.0.0.1",
                "--http-header=example.com:X-Key=env:KEY",
                "--tls-intercept",
                "--fuel-per-request=7",
                "--request-timeout=1s",
                "--start-timeout=5s",
                "--restart",
                "--recycle-after=3",
                "--recycle-memory=64MiB",
                "--recycle-grace=1s",
                "--allow-tool=a",
                "--deny-tool=b",
            ],
            &["--fuel=5"],
        ];
        let mut given = std::collections::BTreeSet::new();
        for argv in argvs {
            let full: Vec<&str> = ["sandpipe", "run", "--protocol", "mcp"]
                .into_iter()
                .chain(argv.iter().copied())
                .chain(["p.wasm"])
                .collect();
            let matches = cli.clone().try_get_matches_from(&full).expect("parses");
            let Command::Run(args) = Cli::from_arg_matches(&matches).expect("parses").command
            else {
                panic!("not run");
            };
            let (s, r, t) = (&args.sandbox, &args.requests, &args.tools);
            let set = s
                .limits
                .keys_set()
                .chain(s.grants.keys_set())
                .chain(s.net.keys_set())
                .chain(r.keys_set())
                .chain(t.keys_set());
            given.extend(set.filter(|(_, set)| *set).map(|(k, _)| k.key));
            // The sections as a policy file: written, then read back to the same values.
            let value = |v: Result<toml::Value, toml::ser::Error>| v.expect("TOML");
            let mut table = toml::Table::new();
            let plugin = toml::Table::from_iter([("source".to_owned(), "p.wasm".into())]);
            table.insert("plugin".into(), plugin.into());
            table.insert("limits".into(), value(toml::Value::try_from(&s.limits)));
            table.insert("grants".into(), value(toml::Value::try_from(&s.grants)));
            table.insert("net".into(), value(toml::Value::try_from(&s.net)));
            table.insert("requests".into(), value(toml::Value::try_from(r)));
            table.insert("tools".into(), value(toml::Value::try_from(t)));
            let text = toml::to_string(&table).expect("TOML");
            let file = PolicyFile::parse(&text, Path::new("/")).expect("a policy file");
            assert_eq!(file.limits, s.limits, "{text}");
            assert_eq!(file.grants, s.grants, "{text}");
            assert_eq!(file.net, s.net, "{text}");
            assert_eq!(&file.requests, r, "{text}");
            assert_eq!(&file.tools, t, "{text}");
            let (_, sub) = matches.subcommand().expect("run");
            let sources = sources(sub, None, "args");
            for key in all_keys() {
                assert!(sources.contains_key(key.key), "no source for {}", key.key);
            }
        }
        let document = serde_json::to_value(crate::Policy::default().document()).expect("JSON");
        for key in all_keys() {
            assert!(given.contains(key.key), "{}: not given above", key.key);
            let (section, name) = key.key.split_once('.').expect("section.key");
            assert!(
                document[section].get(name).is_some(),
                "{}: not in the document",
                key.key
            );
        }
    }
}
