//! What several subcommands share: the cache options, the host they run plugins on, the
//! arguments after PLUGIN, `--protocol`'s names and the MCP tool filter. The dispatcher is
//! `mod.rs`; this is its toolbox (as wasmtime's CLI keeps its shared options in `common.rs`).

use std::path::PathBuf;

use crate::speak::protocols::Protocol;

/// Cache options shared by subcommands. Global, so that a subcommand's own subcommands take
/// them where a user types them: `sandpipe cache ls --cache-dir X` as well as
/// `sandpipe cache --cache-dir X ls`.
#[derive(Debug, Clone, clap::Args)]
pub struct CacheArgs {
    /// Directory of compiled artifacts [default: $SANDPIPE_CACHE_DIR, $XDG_CACHE_HOME/sandpipe
    /// or ~/.cache/sandpipe].
    #[arg(long, value_name = "DIR", global = true)]
    pub cache_dir: Option<PathBuf>,
    /// Do not read or write the artifact cache (always compile).
    #[arg(long, conflicts_with = "cache_dir", global = true)]
    pub no_cache: bool,
}

impl CacheArgs {
    pub(super) fn dir(&self) -> Option<PathBuf> {
        if self.no_cache {
            None
        } else {
            self.cache_dir.clone().or_else(crate::default_cache_dir)
        }
    }
}

/// The cache options where they mean nothing (`image`, `push`). Given before the subcommand
/// they reach every subcommand (clap's global options): here they are hidden and refused,
/// not silently ignored.
#[derive(Debug, Clone, clap::Args)]
pub struct UnusedCacheArgs {
    #[arg(long, value_name = "DIR", hide = true)]
    cache_dir: Option<PathBuf>,
    #[arg(long, hide = true)]
    no_cache: bool,
}

impl UnusedCacheArgs {
    /// An error when a cache option was given to `subcommand`.
    pub(super) fn refuse(&self, subcommand: &str) -> anyhow::Result<()> {
        if self.cache_dir.is_some() || self.no_cache {
            anyhow::bail!(
                "{subcommand} does not use the cache: --cache-dir and --no-cache do not apply"
            );
        }
        Ok(())
    }
}

/// `--protocol`: clap lists the names, with what each is, in `--help`, from the registry
/// ([`crate::speak::protocols::PROTOCOLS`], in the order of [`Protocol::ALL`]).
impl clap::ValueEnum for Protocol {
    fn value_variants<'a>() -> &'a [Self] {
        &Protocol::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let spec = self.spec();
        Some(clap::builder::PossibleValue::new(spec.name()).help(spec.help))
    }
}

/// The arguments after PLUGIN (`run`, `call`, `inspect`), without a leading `--`.
pub(super) fn plugin_args(after_plugin: &[String]) -> Vec<String> {
    after_plugin
        .strip_prefix(&["--".to_owned()])
        .unwrap_or(after_plugin)
        .to_vec()
}

/// The host every subcommand uses, with artifacts cached in `cache_dir` (or not at all). The
/// command line runs a file that is not wasm natively, unsandboxed, and says so on stderr
/// (`sandbox_args::warn_if_native`).
pub(super) fn host(cache_dir: Option<PathBuf>) -> Result<crate::Host, crate::HostError> {
    host_metered(cache_dir, crate::Metering::default())
}

/// [`host`] with an engine compiled with `metering`.
pub(super) fn host_metered(
    cache_dir: Option<PathBuf>,
    metering: crate::Metering,
) -> Result<crate::Host, crate::HostError> {
    crate::Host::with_options(
        &crate::HostOptions::default()
            .cache_dir(cache_dir)
            .allow_native_unsandboxed(true)
            .metering(metering),
    )
}

/// The MCP tool filter `tools` (`--allow-tool`, `--deny-tool`, a policy file's `[tools]`) set
/// for `protocol`: one definition for `run --protocol mcp`, `call` and `inspect`, so that what
/// `inspect` shows and `call` may call is what a client behind `run` sees. An error when tools
/// are named and the protocol's plugins offer none.
pub(super) fn tool_filter(
    tools: &crate::policy_file::Tools,
    protocol: Protocol,
) -> anyhow::Result<sandpipe_proto::mcp::ToolFilter> {
    if !tools.is_empty() && protocol.spec().tool_filter.is_none() {
        anyhow::bail!("--allow-tool and --deny-tool need --protocol mcp");
    }
    Ok(tools.filter())
}

/// The recording this process writes, if any (one per process: `run`, `call`).
static RECORDING: std::sync::OnceLock<std::sync::Arc<crate::run::record::Recorder>> =
    std::sync::OnceLock::new();

/// Keep `recorder` so that [`recording_failure`] can ask it, once the command is done,
/// whether it was cut short.
pub(crate) fn remember_recording(recorder: &std::sync::Arc<crate::run::record::Recorder>) {
    let _ = RECORDING.set(recorder.clone());
}

/// Why this process's recording stopped before its end, if it did: `cli::main` then fails
/// the command, so a recording is never silently incomplete.
pub(crate) fn recording_failure() -> Option<crate::RecordError> {
    RECORDING.get().and_then(|r| r.failure())
}
