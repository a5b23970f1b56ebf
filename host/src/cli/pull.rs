//! `sandpipe pull`: download a plugin by reference, verify it, and write it out.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::CacheArgs;
use super::dist::{DistArgs, resolve_reference};

/// Arguments of `sandpipe pull`.
#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// Write the plugin here [default: the repository's last path segment + .wasm].
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also write the signature (`.minisig`, checkable with
    /// `minisign -V -p KEY.pub -m MANIFEST -x FILE`); fails if the plugin is unsigned.
    #[arg(long, value_name = "FILE")]
    signature: Option<PathBuf>,
    /// Also write the manifest bytes (what the signature covers).
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    #[command(flatten)]
    dist: DistArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX].
    reference: String,
}

pub(crate) async fn pull(args: PullArgs) -> Result<i32> {
    let resolved = resolve_reference(
        &args.reference,
        &args.dist,
        &args.cache,
        args.signature.is_some(),
    )
    .await
    .with_context(|| format!("pulling {}", args.reference))?;
    let fetched = resolved.fetched.context("a reference always fetches")?;
    let output = args.output.unwrap_or_else(|| {
        let repo = &fetched.reference.repository;
        PathBuf::from(format!("{}.wasm", repo.rsplit('/').next().unwrap_or(repo)))
    });
    std::fs::copy(&fetched.wasm_path, &output)
        .with_context(|| format!("writing {}", output.display()))?;
    if let Some(path) = &args.signature {
        let sig = fetched
            .signature
            .as_deref()
            .with_context(|| format!("{} has no signature", args.reference))?;
        std::fs::write(path, sig).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.manifest {
        std::fs::write(path, &fetched.manifest)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("{}", fetched.reference);
    eprintln!(
        "sandpipe: wrote {} ({} bytes, sha256 {}){}",
        output.display(),
        fetched.layer.size,
        fetched.layer.digest.trim_start_matches("sha256:"),
        fetched
            .signer
            .map(|k| format!(", signed by {k}"))
            .unwrap_or_default()
    );
    Ok(0)
}
