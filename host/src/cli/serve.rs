//! `sandpipe serve`: an MCP Streamable HTTP endpoint in front of sandboxed instances of one
//! server (see [`crate::serve`]); the command line, the start-up line and the signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use super::parse_duration;
use super::sandbox_args::{SandboxArgs, warn_if_native};
use crate::policy::sections::Serve;
use crate::serve::{AccessTokens, Auth, Launch, ServeOptions, Server, Tokens};
use crate::{PluginKind, SessionOptions, StderrMode};

/// `--listen`'s default.
const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// `--grace`'s default.
pub(super) const DEFAULT_GRACE: &str = "2s";

/// The protocols `serve` speaks over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ServeProtocol {
    /// MCP over Streamable HTTP (2026-07-28 requests and 2025-11-25 / 2025-06-18 sessions).
    Mcp,
}

/// Arguments of `sandpipe serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The protocol served over HTTP at /mcp.
    #[arg(long, value_enum, value_name = "P", default_value = "mcp")]
    pub(super) protocol: ServeProtocol,
    /// Read the server, its limits, grants, budgets and `[serve]` from a policy file (TOML;
    /// see docs/policy.md); flags given here override it. `sandpipe serve FILE.toml` is the
    /// same with the file's plugin.
    #[arg(long, value_name = "FILE")]
    pub(super) policy: Option<PathBuf>,
    #[command(flatten)]
    pub(super) serve: Serve,
    #[command(flatten)]
    pub(super) sandbox: SandboxArgs,
    #[command(flatten)]
    pub(super) requests: crate::policy_file::Requests,
    #[command(flatten)]
    pub(super) tools: crate::policy_file::Tools,
    /// How long an ending instance has to exit after its stdin closed before it is killed,
    /// and how long SIGTERM waits for requests in flight.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = DEFAULT_GRACE)]
    grace: Duration,
    /// The MCP server: a .wasm component (a stdio server, or one exporting functions served
    /// as tools), an oci:// reference, a policy file (*.toml) naming one, or any other
    /// executable (run natively, in a sandbox of namespaces, seccomp and Landlock where the
    /// kernel allows). Each client gets its own instance of it.
    pub(super) plugin: PathBuf,
    /// Arguments for the server (a leading `--` is dropped).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub(super) args: Vec<String>,
    /// The policy file's `[principals.NAME.tools]`: each principal's own tool filter.
    #[arg(skip)]
    pub(super) principals: std::collections::BTreeMap<String, sandpipe_proto::mcp::ToolFilter>,
}

pub(crate) async fn serve(args: ServeArgs) -> Result<i32> {
    let ServeProtocol::Mcp = args.protocol;
    let (host, plugin) = args.sandbox.load(&args.requests, &args.plugin).await?;
    let policy =
        args.sandbox
            .policy(super::plugin_args(&args.args), &args.requests, &args.tools)?;
    warn_if_native(&plugin, &policy);
    let options = options(&args.serve, args.grace)?;
    options.refusal(&args.principals)?;
    let budgets = super::supervised::budgets(&plugin, &policy);
    let session = SessionOptions::default()
        .frame_limits(args.sandbox.frame_limits())
        .stderr(StderrMode::Inherit);
    let native = plugin.kind() == PluginKind::NativeUnsandboxed;
    let confined = if native {
        "native processes, each in its own sandbox (the line above)".to_owned()
    } else if plugin.exports_functions() {
        "a wasm component's exports, each instance its own wasmtime store".to_owned()
    } else {
        "wasm components, each instance its own wasmtime store".to_owned()
    };
    let mut launch = Launch::new(Arc::new(host), plugin, policy, session, budgets)
        .principal_tools(args.principals.clone());
    if let Some(dir) = &args.serve.record_dir {
        launch = launch.record_dir(
            dir.clone(),
            args.sandbox.limits.max_frame(),
            args.sandbox.limits.max_record(),
        );
    }
    let isolation = isolation(&options);
    let confined = match options.warm {
        0 => confined,
        n => format!("{confined}, {n} kept warm for new clients"),
    };
    let server = Server::bind(options, launch).await?;
    let addr = server.local_addr();
    let principals = server.auth().describe();
    eprintln!(
        "sandpipe: serving MCP at http://{addr}/mcp; isolation: {isolation}; instances: {confined}; auth: {principals}"
    );
    let report = server.run(stop_signal()?).await;
    tracing::info!(
        instances = report.instances,
        ended_at_stop = report.ended_at_stop,
        "serve stopped"
    );
    Ok(0)
}

/// Who shares an instance under `o`, in words (the start-up line's and `inspect`'s).
pub(super) fn isolation(o: &ServeOptions) -> &'static str {
    if o.share {
        "an instance per 2025 session; every 2026-07-28 request shares one instance (--share: whatever state the server keeps, every client sees)"
    } else if o.auth.identifies() {
        "an instance per 2025 session and per 2026-07-28 principal"
    } else {
        "an instance per 2025 session and per 2026-07-28 connection"
    }
}

/// The endpoint's options from `[serve]` and its flags.
pub(super) fn options(s: &Serve, grace: Duration) -> Result<ServeOptions> {
    let default_listen: SocketAddr = DEFAULT_LISTEN.parse().context("the default address")?;
    let mut o = ServeOptions::new(s.listen.unwrap_or(default_listen));
    o.auth = match (&s.auth_token_file, &s.jwks) {
        (Some(_), Some(_)) => {
            anyhow::bail!(
                "--auth-token-file and --jwks: choose one way for clients to prove who they are"
            )
        }
        (Some(path), None) => Auth::Tokens(Tokens::load(path)?),
        (None, Some(jwks)) => {
            let issuer = s
                .jwt_issuer
                .clone()
                .context("--jwks needs --jwt-issuer: the issuer whose tokens are accepted")?;
            Auth::Jwt(Arc::new(AccessTokens::load(
                jwks,
                issuer,
                s.resource.clone(),
            )?))
        }
        (None, None) if s.jwt_issuer.is_some() || s.resource.is_some() => {
            anyhow::bail!("--jwt-issuer and --resource check JWTs: give --jwks, the issuer's keys")
        }
        (None, None) => Auth::None,
    };
    o.allow_hosts.clone_from(&s.allow_hosts);
    o.allow_origins.clone_from(&s.allow_origins);
    if let Some(n) = s.max_body {
        o.max_body = usize::try_from(n).unwrap_or(usize::MAX);
    }
    o.rate_per_minute = s.rate_limit;
    if let Some(n) = s.max_instances {
        o.max_instances = n;
    }
    o.share = s.share;
    if let Some(n) = s.warm {
        o.warm = n;
    }
    if let Some(d) = s.idle_timeout {
        o.idle_timeout = d;
    }
    if let Some(d) = s.header_timeout {
        o.header_timeout = d;
    }
    o.grace = grace;
    Ok(o)
}

/// Resolves at the first SIGTERM or SIGINT.
fn stop_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
        }
    })
}
