//! `sandpipe compile`: fetch and compile a plugin ahead of time, so its first start loads the
//! compiled artifact from the cache instead of compiling: one artifact for the engine with fuel
//! metering (runs with a fuel budget) and one for the engine without (every other run), or
//! the one `--metering` names.

use std::path::PathBuf;

use anyhow::Result;

use super::CacheArgs;
use super::dist::{DistArgs, load, store_root};
use crate::LoadSource;

/// Arguments of `sandpipe compile`.
#[derive(Debug, clap::Args)]
pub struct CompileArgs {
    #[command(flatten)]
    dist: DistArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// Which engine to compile for: `fuel` for the runs that set a fuel budget (--fuel,
    /// --fuel-per-request), `none` for every other run, or `both`. `sandpipe image` compiles
    /// for the one its policy runs.
    #[arg(long, value_enum, default_value = "both", value_name = "ENGINE")]
    pub(super) metering: Metering,
    /// The plugin: a path or oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX].
    plugin: PathBuf,
}

/// The engines `sandpipe compile` compiles for. `run` compiles fuel metering in only when it
/// sets a fuel budget (see `run.rs`), and each engine has its own artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Metering {
    /// Both, so that any `run` of the plugin starts from the cache.
    Both,
    /// The engine with fuel metering.
    Fuel,
    /// The engine without.
    None,
}

pub(crate) async fn compile(args: CompileArgs) -> Result<i32> {
    if args.cache.no_cache {
        anyhow::bail!("compile writes the artifact cache; --no-cache leaves nothing to do");
    }
    let root = store_root(&args.cache)?;
    let metered =
        |fuel| super::host_metered(Some(root.clone()), crate::Metering::default().fuel(fuel));
    let first = metered(args.metering != Metering::None)?;
    let plugin = load(&first, &args.plugin, &args.dist, &args.cache).await?;
    if args.metering == Metering::Both && plugin.load_source().is_some() {
        load(&metered(false)?, &args.plugin, &args.dist, &args.cache).await?;
    }
    let how = match plugin.load_source() {
        Some(LoadSource::Compiled) => "compiled",
        Some(LoadSource::DiskCache | LoadSource::Memory) => "already compiled",
        None => "not wasm, nothing to compile:",
    };
    println!(
        "{how} {} ({}, {} bytes, sha256 {}) in {:.1?}",
        args.plugin.display(),
        plugin.kind().name(),
        plugin.size(),
        plugin.sha256(),
        plugin.load_time()
    );
    Ok(0)
}
