//! The `sandpipe` command line: the parser and the dispatch ([`main`]), one file per
//! subcommand, and what several subcommands share in `common.rs`; `src/bin/sandpipe.rs` only
//! calls [`main`].

mod cache;
mod call;
mod common;
mod compile;
mod dist;
mod engine;
mod image;
mod inspect;
mod policy_overlay;
#[cfg(feature = "registry")]
mod pull;
#[cfg(feature = "registry")]
mod push;
mod replay;
mod run;
mod sandbox_args;
mod serve;
mod signals;
mod status;
mod stdio;
mod supervised;

use clap::{CommandFactory, FromArgMatches, Subcommand};

use crate::policy::value::{parse_duration, parse_size};
use common::{host, host_metered, plugin_args, tool_filter};

pub use common::{CacheArgs, UnusedCacheArgs};
pub use status::{exit, exit_code};

/// Run untrusted stdio plugins as sandboxed WASI components.
#[derive(Debug, clap::Parser)]
#[command(name = "sandpipe", version, about, long_about = None, after_help = status::help())]
pub struct Cli {
    /// More logging on stderr (-v: info, -vv: debug). `SANDPIPE_LOG` takes an env-filter.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// The cache options before the subcommand (`sandpipe --cache-dir X cache ls`); each
    /// subcommand that uses the cache takes them after it too, and sees them either way.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run PLUGIN with sandpipe's stdin and stdout as its own, so `sandpipe run plugin.wasm`
    /// can stand in for a plugin binary in any engine's command line.
    #[command(after_help = status::help())]
    Run(run::RunArgs),
    /// Speak a protocol to PLUGIN: handshake, one call (--method, --params), clean shutdown.
    /// The result is printed as JSON on stdout; the protocol's error goes to stderr with a
    /// non-zero status. Everything after PLUGIN goes to the plugin, as with `run`.
    #[command(after_help = status::help())]
    Call(call::CallArgs),
    /// Show what PLUGIN is (component, p1 module or native), its size, sha256, imports and
    /// exports, and with --protocol its self-description (everything after PLUGIN goes to the
    /// plugin it starts).
    Inspect(inspect::InspectArgs),
    /// Serve an MCP server over Streamable HTTP at /mcp, each client in its own sandboxed
    /// instance (2025 sessions and 2026-07-28 requests on one endpoint); every `run` option
    /// applies to each instance. Stops on SIGTERM: in-flight requests get --grace, then every
    /// instance ends.
    Serve(Box<serve::ServeArgs>),
    /// Check a plugin against a recorded session (--plugin), or stand in for the plugin
    /// (--serve).
    Replay(replay::ReplayArgs),
    /// Upload a .wasm file to an OCI registry in the CNCF Wasm layout (optionally signed) and
    /// print REF@sha256:... (the same file always gives the same digest).
    #[cfg(feature = "registry")]
    Push(push::PushArgs),
    /// Download a plugin by reference, verify its digests (and signature, lock entry), and
    /// write it out.
    #[cfg(feature = "registry")]
    Pull(pull::PullArgs),
    /// Build a container image FROM scratch: a static sandpipe, the plugin, the plugin
    /// compiled, and its policy; entrypoint `sandpipe run /plugin.wasm` (the container's
    /// arguments go to the plugin). Written as an archive for `podman load` / `docker load`, or
    /// pushed; the same inputs give the same digest, printed on stdout.
    Image(image::ImageArgs),
    /// Compile a plugin (path or reference) ahead of time into the artifact cache.
    Compile(compile::CompileArgs),
    /// List, trim (least recently used first) or empty the store of plugins and compiled
    /// artifacts.
    Cache(cache::CacheCmdArgs),
}

/// Parse the command line, run it, and return the process exit code (pass it to [`exit`]).
pub fn main() -> i32 {
    status::no_core_file();
    let matches = with_env_names(Cli::command()).get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // An empty --stderr (`-e SANDPIPE_STDERR=` over an image's default) keeps stderr.
    if let Command::Run(run::RunArgs {
        stderr: Some(path), ..
    }) = &cli.command
        && !path.is_empty()
        && let Err(e) = image::redirect_stderr(std::path::Path::new(path))
    {
        eprintln!("sandpipe: --stderr {path}: {e}");
        return exit_code::HOST_ERROR;
    }
    init_logging(cli.verbose);
    // A policy file fills in what the command line left unsaid (see `policy_overlay`).
    if let Err(e) = policy_overlay::apply(&mut cli.command, &matches) {
        eprintln!("sandpipe: {e:#}");
        return exit_code::HOST_ERROR;
    }
    // After the policy file: its max-memory, like the command line's, wins over the
    // container's default.
    if let Command::Run(args) = &mut cli.command {
        image::follow_cgroup_memory(&mut args.sandbox);
    }
    // `run` bridges one plugin: on one thread, a frame goes from a read of sandpipe's stdin to
    // the plugin (or the wasm guest running on that same thread) and back to a write of its
    // stdout without a hand-off between threads. The other subcommands keep the default.
    let runtime = match &cli.command {
        Command::Run(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Runtime::new(),
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandpipe: starting the async runtime: {e}");
            return exit_code::HOST_ERROR;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Call(args) => call::call(args).await,
            Command::Serve(args) => serve::serve(*args).await,
            Command::Inspect(args) => inspect::inspect(args).await,
            Command::Replay(args) => replay::replay(args).await,
            #[cfg(feature = "registry")]
            Command::Push(args) => push::push(args).await,
            #[cfg(feature = "registry")]
            Command::Pull(args) => pull::pull(args).await,
            Command::Image(args) => image::image(args).await,
            Command::Compile(args) => compile::compile(args).await,
            Command::Cache(args) => cache::cache(args),
        }
    });
    // Don't wait for the stdin pump: it may be parked in a blocking read of our stdin.
    runtime.shutdown_background();
    if let Some(e) = common::recording_failure() {
        eprintln!("sandpipe: --record: {e}; the recording ends with a `# stopped:` line");
        return exit_code::HOST_ERROR;
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandpipe: {e:#}");
            exit_code::HOST_ERROR
        }
    }
}

/// Every `run` option can also be set as `SANDPIPE_<OPTION>` (`--max-memory` as
/// `SANDPIPE_MAX_MEMORY`): `-e NAME=VALUE` is the one knob every container deployer passes. The
/// command line wins over the variable, and the variable over a policy file (see `policy_overlay`).
///
/// `inspect` reads the same variables for the options it shares with `run` (all but
/// `--protocol`, which makes inspect start the plugin), so the policy it shows is the one `run`
/// would use in the same environment.
fn with_env_names(cli: clap::Command) -> clap::Command {
    use crate::policy::sections::env_name;
    // SANDPIPE_CACHE_DIR already means the cache root (default_cache_dir); as the flag's
    // variable it would also conflict with --no-cache.
    let bound = |long: &str| long != "help" && long != "cache-dir";
    let run_longs: Vec<String> = cli
        .find_subcommand("run")
        .into_iter()
        .flat_map(|run| run.get_arguments())
        .filter_map(|arg| arg.get_long())
        .filter(|long| bound(long) && *long != "protocol")
        .map(str::to_owned)
        .collect();
    cli.mut_subcommand("run", |run| {
        run.mut_args(|arg| match arg.get_long() {
            Some(long) if bound(long) => {
                let name = env_name(long);
                arg.env(name)
            }
            _ => arg,
        })
    })
    .mut_subcommand("serve", |serve| {
        serve.mut_args(|arg| match arg.get_long() {
            Some(long) if bound(long) && long != "protocol" => {
                let name = env_name(long);
                arg.env(name)
            }
            _ => arg,
        })
    })
    .mut_subcommand("inspect", |inspect| {
        inspect.mut_args(|arg| match arg.get_long() {
            Some(long) if run_longs.iter().any(|l| l == long) => {
                let name = env_name(long);
                arg.env(name)
            }
            _ => arg,
        })
    })
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SANDPIPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(log_colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_target(false)
        .init();
}

/// Colour in sandpipe's own log lines only on a terminal, and not when `NO_COLOR` is set to a
/// non-empty value (no-color.org): an engine that pipes stderr to a log gets plain text.
fn log_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn sizes_and_durations() {
        use crate::policy::value::Cap;
        assert_eq!(Cap::size("64MiB"), Ok(Cap(Some(64 << 20))));
        assert_eq!(Cap::size("none"), Ok(Cap(None)));
        assert_eq!(Cap::count("64"), Ok(Cap(Some(64))));
        assert_eq!(Cap::count("none"), Ok(Cap(None)));
        assert!(Cap::count("-1").is_err());
        assert!(Cap::count("lots").is_err());
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert!(parse_size("lots").is_err());
        assert_eq!(parse_duration("2s"), Ok(std::time::Duration::from_secs(2)));
        assert_eq!(
            parse_duration("1500ms"),
            Ok(std::time::Duration::from_millis(1500))
        );
    }

    #[test]
    fn cache_options_are_taken_before_and_after_the_cache_action() {
        for argv in [
            ["sandpipe", "cache", "ls", "--cache-dir", "/tmp/x"],
            ["sandpipe", "cache", "--cache-dir", "/tmp/x", "ls"],
            ["sandpipe", "--cache-dir", "/tmp/x", "cache", "ls"],
        ] {
            let cli = Cli::from_arg_matches(&with_env_names(Cli::command()).get_matches_from(argv))
                .expect("parses");
            let Command::Cache(args) = cli.command else {
                panic!("{argv:?}: not cache");
            };
            assert_eq!(
                args.cache().dir(),
                Some(PathBuf::from("/tmp/x")),
                "{argv:?}"
            );
        }
    }

    #[test]
    fn run_takes_the_cache_options_before_and_after_it() {
        for argv in [
            ["sandpipe", "run", "--no-cache", "p.wasm"],
            ["sandpipe", "--no-cache", "run", "p.wasm"],
        ] {
            let cli = Cli::from_arg_matches(&with_env_names(Cli::command()).get_matches_from(argv))
                .expect("parses");
            let Command::Run(args) = cli.command else {
                panic!("{argv:?}: not run");
            };
            assert!(args.sandbox.cache.no_cache, "{argv:?}");
        }
    }

    #[test]
    fn log_colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(log_colour(true, None));
        assert!(log_colour(true, Some(OsStr::new(""))));
        assert!(!log_colour(true, Some(OsStr::new("1"))));
        assert!(!log_colour(false, None));
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        with_env_names(Cli::command()).debug_assert();
    }
}
