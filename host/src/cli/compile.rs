//! `sandpipe compile`: fetch and compile a plugin ahead of time, so its first start loads the
//! compiled artifact from the cache instead of compiling: one artifact for the engine with fuel
//! metering (runs with a fuel budget) and one for the engine without (every other run).

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
    /// The plugin: a path or oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX].
    plugin: PathBuf,
}

pub(crate) async fn compile(args: CompileArgs) -> Result<i32> {
    if args.cache.no_cache {
        anyhow::bail!("compile writes the artifact cache; --no-cache leaves nothing to do");
    }
    let root = store_root(&args.cache)?;
    let host = super::host(Some(root.clone()))?;
    let plugin = load(&host, &args.plugin, &args.dist, &args.cache).await?;
    // `run` compiles fuel metering in only when it sets a fuel budget (see `run.rs`), and each
    // engine has its own artifact: compile for the engine without fuel too, so any `run` of
    // this plugin starts from the cache.
    if plugin.load_source().is_some() {
        let unmetered = super::host_metered(Some(root), crate::Metering::default().fuel(false))?;
        load(&unmetered, &args.plugin, &args.dist, &args.cache).await?;
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
