//! `sandpipe push`: upload a plugin in the CNCF Wasm OCI layout, optionally signed.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::dist::registry::fetch::push as push_artifact;
use crate::dist::registry::{Client, ClientOptions, Credentials, Reference};

/// Arguments of `sandpipe push`.
#[derive(Debug, clap::Args)]
pub struct PushArgs {
    #[command(flatten)]
    cache: super::UnusedCacheArgs,
    /// Sign the manifest with this minisign secret key (as `minisign -G` writes it; the
    /// password, if any, comes from SANDPIPE_MINISIGN_PASSWORD).
    #[arg(long, value_name = "KEY")]
    sign: Option<PathBuf>,
    /// Speak plain HTTP to this registry (HOST[:PORT]; repeatable; loopback always is).
    #[arg(long = "insecure-registry", value_name = "HOST")]
    insecure_registries: Vec<String>,
    /// Where to push: oci://HOST[:PORT]/REPO[:TAG].
    reference: String,
    /// The .wasm file.
    file: PathBuf,
}

pub(crate) async fn push(args: PushArgs) -> Result<i32> {
    args.cache.refuse("push")?;
    let reference: Reference = args.reference.parse()?;
    let wasm =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let pushed = tokio::task::spawn_blocking(move || -> Result<_> {
        let mut options = ClientOptions::new(Credentials::from_default_config()?);
        options.insecure_registries = args.insecure_registries;
        let client = Client::new(options);
        Ok(push_artifact(
            &client,
            &reference,
            &wasm,
            args.sign.as_deref(),
        )?)
    })
    .await??;
    if let Some(id) = &pushed.signer {
        eprintln!("sandpipe: signed by key {id}");
    }
    println!("{}", pushed.reference);
    Ok(0)
}
