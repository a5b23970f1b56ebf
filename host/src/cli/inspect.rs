//! `sandpipe inspect`: what a plugin is, what it asks for, and (with a protocol) what it says
//! about itself.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use super::sandbox_args::SandboxArgs;
use crate::protocols::Protocol;
use crate::protocols::denobridge::DenoBridgeClient;
use crate::protocols::oracle::OracleClient;
use crate::{
    Host, LANDLOCK_TARGET_ABI, LandlockSupport, LoadSource, PluginKind, Policy, SessionOptions,
    StderrMode,
};

/// Arguments of `sandpipe inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Also start the plugin and show its self-description: the Orchard schema (plan mode),
    /// the oracle's `ready` (a `wasm:` oracle component: its selectors with WIT signatures),
    /// or denobridge's `health`.
    #[arg(long, value_name = "PROTOCOL")]
    protocol: Option<Protocol>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    sandbox: SandboxArgs,
    /// An argument for the plugin (repeatable).
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    plugin_args: Vec<String>,
    /// The plugin.
    plugin: PathBuf,
}

pub(crate) async fn inspect(args: InspectArgs) -> Result<i32> {
    let host = Host::with_cache_dir(args.sandbox.cache.dir().as_deref())?;
    let plugin =
        super::dist::load(&host, &args.plugin, &args.sandbox.dist, &args.sandbox.cache).await?;
    let mut report = json!({
        "path": plugin.path().display().to_string(),
        "kind": plugin.kind().name(),
        "sandboxed": plugin.kind() != PluginKind::NativeUnsandboxed,
        "size": plugin.size(),
        "sha256": plugin.sha256(),
        "compiled": match plugin.load_source() {
            Some(LoadSource::Compiled) => "compiled now",
            Some(LoadSource::DiskCache) => "from the disk cache",
            Some(LoadSource::Memory) => "already loaded",
            None => "not wasm",
        },
        "imports": plugin.imports(),
        "exports": plugin.exports(),
    });
    if plugin.exports_functions() {
        report["functions"] = super::wasm_oracle::functions_json(&plugin);
    }
    if plugin.kind() == PluginKind::NativeUnsandboxed {
        let policy = args.sandbox.policy(args.plugin_args.clone())?;
        report["native"] = native_report(&policy, &LandlockSupport::detect());
        let grants: Vec<Value> = if policy.startup_grants {
            crate::startup_grants(plugin.path(), &policy.args)
                .iter()
                .map(|g| json!({"path": g.path.display().to_string(), "reason": g.reason}))
                .collect()
        } else {
            Vec::new()
        };
        report["native"]["startup_grants"] = Value::Array(grants);
    }
    if let Some(protocol) = args.protocol {
        let policy = args.sandbox.policy(args.plugin_args.clone())?;
        let mut options =
            SessionOptions::framed(protocol.framing()).frame_limits(args.sandbox.frame_limits());
        options.stderr = StderrMode::Discard;
        let grace = Duration::from_secs(2);
        let described: Result<Value, String> = match protocol {
            Protocol::Orchard => {
                crate::protocols::orchard::schema(&host, &plugin, &policy, &options)
                    .await
                    .map(|schema| json!({ "schema": schema }))
                    .map_err(|e| e.to_string())
            }
            Protocol::Oracle if plugin.exports_functions() => {
                super::wasm_oracle::describe(&host, &plugin, &policy).await
            }
            Protocol::Oracle => {
                let session = host.start(&plugin, &policy, &options).await?;
                match OracleClient::connect(session).await {
                    Ok(client) => {
                        let _ = client.shutdown(grace).await;
                        Ok(json!({"ready": true}))
                    }
                    Err(e) => Err(format!("oracle error {}: {}", e.code, e.message)),
                }
            }
            Protocol::DenoBridge => {
                let session = host.start(&plugin, &policy, &options).await?;
                match DenoBridgeClient::connect(session).await {
                    Ok((client, health)) => {
                        let _ = client.shutdown(grace).await;
                        serde_json::to_value(health)
                            .map(|h| json!({"health": h}))
                            .map_err(|e| e.to_string())
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            Protocol::JsonRpc => Err("plain JSON-RPC has no self-description".to_owned()),
            Protocol::Atp => {
                let session = host.start(&plugin, &policy, &options).await?;
                match crate::protocols::atp::AtpClient::connect(session).await {
                    Ok((client, hello)) => {
                        let _ = client.done(grace).await;
                        let schema = hello.schema.deserialized::<Value>().unwrap_or(Value::Null);
                        Ok(json!({"version": hello.version.number(), "schema": schema}))
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            Protocol::FineCode => {
                use crate::protocols::finecode::{CallForm, FineCodeClient, NoRunnerRequests};
                let session = host.start(&plugin, &policy, &options).await?;
                match FineCodeClient::connect(session, CallForm::Direct, NoRunnerRequests).await {
                    Ok((client, init)) => {
                        let meta = client.resolve_action_meta().await;
                        let _ = client.shutdown(grace).await;
                        let init = serde_json::to_value(init).unwrap_or(Value::Null);
                        meta.map_err(|e| e.to_string())
                            .and_then(|m| serde_json::to_value(m).map_err(|e| e.to_string()))
                            .map(|m| json!({"initialize": init, "resolveActionMeta": m}))
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        report["protocol"] = Value::from(protocol.name());
        match described {
            Ok(v) => report["self_description"] = v,
            Err(e) => report["self_description_error"] = Value::from(e),
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(if report.get("self_description_error").is_some() {
        1
    } else {
        0
    })
}

fn print_text(r: &Value) {
    let s = |k: &str| {
        r[k].as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| r[k].to_string())
    };
    println!("path:      {}", s("path"));
    println!("kind:      {}", s("kind"));
    println!("size:      {} bytes", s("size"));
    println!("sha256:    {}", s("sha256"));
    println!("compiled:  {}", s("compiled"));
    for (title, key) in [("imports", "imports"), ("exports", "exports")] {
        let list = r[key].as_array().cloned().unwrap_or_default();
        println!(
            "{title}:   {}",
            if list.is_empty() {
                "(none)".to_owned()
            } else {
                String::new()
            }
        );
        for item in list {
            println!("  {}", item.as_str().unwrap_or_default());
        }
    }
    if let Some(funcs) = r.get("functions").and_then(Value::as_array) {
        println!("functions: (selectors, for a wasm: oracle)");
        for f in funcs {
            println!(
                "  {}: {}{}",
                f["name"].as_str().unwrap_or_default(),
                f["signature"].as_str().unwrap_or_default(),
                f["unsupported"]
                    .as_str()
                    .map(|u| format!("  ({u})"))
                    .unwrap_or_default()
            );
        }
    }
    if let Some(n) = r.get("native") {
        let l = &n["landlock"];
        println!(
            "landlock:  {} ({})",
            l["status"].as_str().unwrap_or_default(),
            l["confinement"].as_str().unwrap_or_default()
        );
        let limit = |key: &str, unit: &dyn Fn(u64) -> String| match n["rlimits"][key].as_u64() {
            Some(v) => unit(v),
            None => "unlimited".to_owned(),
        };
        if let Some(grants) = n["startup_grants"].as_array() {
            let listed: Vec<String> = grants
                .iter()
                .map(|g| {
                    format!(
                        "{} ({})",
                        g["path"].as_str().unwrap_or_default(),
                        g["reason"].as_str().unwrap_or_default()
                    )
                })
                .collect();
            println!(
                "start-up:  read-only {}",
                if listed.is_empty() {
                    "nothing beyond the system directories".to_owned()
                } else {
                    listed.join(", ")
                }
            );
        }
        println!(
            "rlimits:   writable memory (RLIMIT_DATA, backstop of the resident cap) {}, CPU time {}, open files {}, core 0",
            limit("data_bytes", &|b| bytesize::ByteSize(b)
                .display()
                .iec()
                .to_string()),
            limit("cpu_seconds", &|s| format!("{s}s")),
            limit("open_files", &|n| n.to_string()),
        );
    }
    if let Some(p) = r.get("protocol") {
        println!("protocol:  {}", p.as_str().unwrap_or_default());
        if let Some(d) = r.get("self_description") {
            println!("{}", serde_json::to_string_pretty(d).unwrap_or_default());
        }
        if let Some(e) = r.get("self_description_error") {
            println!("error:     {}", e.as_str().unwrap_or_default());
        }
    }
}

/// What a native plugin would run under: Landlock on this kernel and the rlimits of `policy`.
fn native_report(policy: &Policy, support: &LandlockSupport) -> Value {
    let limits = crate::native::Limits::for_policy(policy);
    json!({
        "landlock": {
            "status": support.name(),
            "abi": support.abi(),
            "target_abi": LANDLOCK_TARGET_ABI,
            "confinement": support.describe(),
            "warning": support.warning(),
        },
        "rlimits": {
            "data_bytes": limits.data.map(|(soft, _)| soft),
            "cpu_seconds": limits.cpu_seconds.map(|(soft, _)| soft),
            "open_files": limits.open_files.map(|(soft, _)| soft),
            "core_bytes": 0,
        },
        "not_enforced": ["fuel", "system calls", "UDP and Unix sockets", "determinism"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_native_report_names_the_landlock_status_and_the_limits() {
        let policy = Policy::default()
            .max_cpu_time(Some(Duration::from_millis(1500)))
            .max_open_files(Some(64));
        let missing = LandlockSupport::from_query(Err(libc::ENOSYS));
        let r = native_report(&policy, &missing);
        assert_eq!(r["landlock"]["status"], "unavailable");
        assert_eq!(r["landlock"]["abi"], Value::Null);
        assert!(
            r["landlock"]["warning"]
                .as_str()
                .is_some_and(|w| w.starts_with("sandpipe: warning: Landlock is not available")),
            "{r:#}"
        );
        assert_eq!(r["rlimits"]["cpu_seconds"], 2);
        assert_eq!(r["rlimits"]["open_files"], 64);
        assert_eq!(r["rlimits"]["data_bytes"], 1u64 << 30);
        let full = native_report(&Policy::default(), &LandlockSupport::from_query(Ok(7)));
        assert_eq!(full["landlock"]["status"], "full");
        assert_eq!(full["landlock"]["abi"], 7);
        assert_eq!(full["landlock"]["warning"], Value::Null);
        assert_eq!(full["rlimits"]["cpu_seconds"], Value::Null);
        assert_eq!(full["rlimits"]["open_files"], crate::DEFAULT_MAX_OPEN_FILES);
    }
}
