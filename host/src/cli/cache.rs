//! `sandpipe cache`: list, trim or empty the store of blobs and compiled artifacts.

use anyhow::Result;
use bytesize::ByteSize;

use super::dist::store_root;
use super::{CacheArgs, parse_size};
use crate::dist::store::{EntryKind, Store};

/// Arguments of `sandpipe cache`.
#[derive(Debug, clap::Args)]
pub struct CacheCmdArgs {
    #[command(subcommand)]
    action: CacheAction,
    #[command(flatten)]
    cache: CacheArgs,
}

#[cfg(test)]
impl CacheCmdArgs {
    pub(super) fn cache(&self) -> &CacheArgs {
        &self.cache
    }
}

/// What to do with the cache.
#[derive(Debug, clap::Subcommand)]
enum CacheAction {
    /// List blobs, compiled artifacts and tags, least recently used first.
    Ls,
    /// Evict least recently used entries down to SIZE [default: the cap,
    /// SANDPIPE_CACHE_MAX_SIZE or 2GiB].
    Gc {
        /// The size to trim to (e.g. 500MiB).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: Option<u64>,
    },
    /// Remove every blob, tag, compiled artifact and file-hash index entry.
    Clean,
}

pub(crate) fn cache(args: CacheCmdArgs) -> Result<i32> {
    let store = Store::open(store_root(&args.cache)?);
    match args.action {
        CacheAction::Ls => {
            let entries = store.entries();
            let total: u64 = entries.iter().map(|e| e.size).sum();
            for e in &entries {
                let age = e.last_used.elapsed().unwrap_or_default();
                println!(
                    "{:<8} {:>10}  {:>8} ago  {}",
                    match e.kind {
                        EntryKind::Blob => "blob",
                        EntryKind::Compiled => "compiled",
                    },
                    ByteSize(e.size).display().iec().to_string(),
                    humantime::format_duration(std::time::Duration::from_secs(age.as_secs()))
                        .to_string(),
                    e.name
                );
            }
            for (tag, digest) in store.tags() {
                println!("tag      {tag} -> {digest}");
            }
            println!(
                "{} entries, {} of {} ({})",
                entries.len(),
                ByteSize(total).display().iec(),
                ByteSize(store.max_size()).display().iec(),
                store.root().display()
            );
        }
        CacheAction::Gc { max_size } => {
            let r = store.gc(max_size.unwrap_or(store.max_size()))?;
            println!(
                "removed {} entries ({}), {} left",
                r.removed,
                ByteSize(r.freed).display().iec(),
                ByteSize(r.kept).display().iec()
            );
        }
        CacheAction::Clean => {
            let r = store.clean()?;
            println!(
                "removed {} entries ({})",
                r.removed,
                ByteSize(r.freed).display().iec()
            );
        }
    }
    Ok(0)
}
