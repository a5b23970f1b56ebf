//! `sandpipe inspect`: what a plugin is, what it asks for, and (with a protocol) what it says
//! about itself.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Result;
use serde_json::{Value, json};

use sandpipe_proto::mcp::ToolFilter;

use super::sandbox_args::SandboxArgs;
use crate::speak::protocols::Protocol;
use crate::speak::protocols::hooks::{DescribeError, Launch};
use crate::{
    LANDLOCK_TARGET_ABI, LandlockSupport, LoadSource, PluginKind, Policy, SessionOptions,
    StderrMode,
};

/// Arguments of `sandpipe inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Also start the plugin and show its self-description: the Orchard schema (plan mode),
    /// the oracle's `ready` (a `wasm:` oracle component: its selectors with WIT signatures),
    /// denobridge's `health`, or an MCP server's revision, its `server/discover` or
    /// `initialize` result, and the tools a client would see (after `--allow-tool`,
    /// `--deny-tool` and the policy's `[tools]`) with their input schemas.
    #[arg(long, value_enum, value_name = "PROTOCOL")]
    protocol: Option<Protocol>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Read the plugin, its limits and grants from a policy file (TOML); the report shows
    /// what it grants next to the component's imports. PLUGIN may be the file itself.
    #[arg(long, value_name = "FILE")]
    pub(super) policy: Option<PathBuf>,
    #[command(flatten)]
    pub(super) sandbox: SandboxArgs,
    #[command(flatten)]
    pub(super) tools: crate::policy_file::Tools,
    /// A policy file's `[requests]` (inspect has no flags for them), shown in its policy.
    #[arg(skip)]
    pub(super) requests: crate::policy_file::Requests,
    /// The plugin, or a policy file (*.toml) naming one.
    pub(super) plugin: PathBuf,
    /// Arguments for the plugin when --protocol starts it: everything after PLUGIN, as with
    /// `run` (a leading `--` is dropped).
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub(super) plugin_args: Vec<String>,
    /// The policy file the report shows (set from --policy or PLUGIN).
    #[arg(skip)]
    pub(super) policy_file: Option<PathBuf>,
    /// A policy file's `[serve]` and `[principals]`, when it has either: what `sandpipe serve`
    /// would make of the file.
    #[arg(skip)]
    pub(super) serve: Option<Box<ServeSection>>,
}

/// A policy file's `[serve]` and its principals' own tool filters.
#[derive(Debug, Clone, Default)]
pub(super) struct ServeSection {
    pub(super) serve: crate::policy::sections::Serve,
    pub(super) principals: BTreeMap<String, ToolFilter>,
}

pub(crate) async fn inspect(args: InspectArgs) -> Result<i32> {
    let host = super::host(args.sandbox.cache.dir())?;
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
    if let Some(path) = &args.policy_file {
        report["policy_file"] = Value::from(path.display().to_string());
    }
    let policy = args.sandbox.policy(
        super::plugin_args(&args.plugin_args),
        &args.requests,
        &args.tools,
    )?;
    // The effective policy, as the policy document a recording's header holds, and where each
    // value came from.
    let mut document = policy.document();
    document.limits.max_frame = Some(args.sandbox.limits.max_frame());
    document.limits.max_record = Some(args.sandbox.limits.max_record());
    report["policy"] = serde_json::to_value(document)?;
    report["policy_sources"] = serde_json::to_value(&args.sandbox.sources)?;
    report["net"] = serde_json::to_value(&policy.net)?;
    if plugin.kind() != PluginKind::NativeUnsandboxed {
        report["grants"] = Value::Array(
            plugin
                .imports()
                .iter()
                .map(|i| json!({"import": i, "grant": import_grant(&policy, i)}))
                .collect(),
        );
        report["limits"] = limits_report(&policy, args.sandbox.limits.max_frame());
        // What one session takes from a pool (`Pooling::fitting` sizes one from this).
        if let Ok(needs) = std::fs::read(plugin.path())
            .map_err(|e| e.to_string())
            .and_then(|b| crate::PoolNeeds::of(&b).map_err(|e| e.to_string()))
        {
            report["pool_needs"] = json!({
                "core_instances": needs.core_instances,
                "memories": needs.memories,
                "tables": needs.tables,
                "table_elements": needs.table_elements,
            });
        }
        report["unused_grants"] = Value::Array(
            unused_grants(&policy, plugin.imports())
                .into_iter()
                .map(Value::from)
                .collect(),
        );
    }
    if plugin.exports_functions() {
        report["functions"] = crate::exports::session::functions_json(&plugin);
    }
    if plugin.kind() == PluginKind::NativeUnsandboxed {
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
    if let Some(section) = &args.serve {
        report["serve"] = serve_report(section, &policy, args.policy_file.as_deref());
    }
    if let Some(protocol) = args.protocol {
        let tools = super::tool_filter(&args.tools, protocol)?;
        let mut options =
            SessionOptions::framed(protocol.framing()).frame_limits(args.sandbox.frame_limits());
        options.stderr = StderrMode::Discard;
        let group = crate::SessionGroup::new();
        options.group = Some(group.clone());
        let launch = Launch::new(&host, &plugin, &policy, &options, protocol).with_tools(tools);
        let described: Result<Value, String> = match protocol.describe_for(&plugin)(launch).await {
            Ok(v) => Ok(v),
            Err(DescribeError::Failed(e)) => Err(e),
            Err(DescribeError::Start(e)) => return Err(e.into()),
        };
        if described.is_err()
            && let Some((exit, tail)) = group.last_ended()
            && super::status::failed_by_itself(&exit)
        {
            super::sandbox_args::explain_failed_start(&plugin, &policy, false, &tail);
        }
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
    // A report that says the plugin could not describe itself, or that `serve` would not
    // start with this file, exits 1, so a script can check a policy before it deploys it.
    Ok(
        if report.get("self_description_error").is_some() || report["serve"].get("error").is_some()
        {
            1
        } else {
            0
        },
    )
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
    if let Some(p) = r.get("policy_file") {
        println!("policy:    {}", p.as_str().unwrap_or_default());
    }
    let set: Vec<String> = r
        .get("policy_sources")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(_, from)| from.as_str() != Some("default"))
        .map(|(key, from)| format!("{key} ({})", from.as_str().unwrap_or_default()))
        .collect();
    if !set.is_empty() {
        println!("set by:    {}", set.join(", "));
    }
    if let Some(n) = r.get("net") {
        let list = |k: &str| -> Vec<String> {
            n[k].as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        };
        let allow = list("allow");
        if allow.is_empty() {
            println!("network:   none (no --allow-net)");
        } else {
            println!("network:   {}", allow.join(", "));
            for pin in list("resolve") {
                println!("  resolve  {pin}");
            }
            for header in list("http_headers") {
                println!("  header   {header}");
            }
            if n["tls_intercept"] == true {
                println!(
                    "  tls      native tunnels intercepted with a session CA (--tls-intercept)"
                );
            }
        }
    }
    if let Some(grants) = r.get("grants").and_then(Value::as_array) {
        println!("grants:    what each import gets under this policy");
        let width = grants
            .iter()
            .map(|g| g["import"].as_str().unwrap_or_default().len())
            .max()
            .unwrap_or(0);
        for g in grants {
            println!(
                "  {:width$}  {}",
                g["import"].as_str().unwrap_or_default(),
                g["grant"].as_str().unwrap_or_default()
            );
        }
    }
    if let Some(p) = r.get("pool_needs") {
        println!(
            "pool:      a session takes {} core instances, {} memories, {} tables (largest {} elements)",
            p["core_instances"], p["memories"], p["tables"], p["table_elements"]
        );
    }
    for unused in r
        .get("unused_grants")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        println!("unused:    {}", unused.as_str().unwrap_or_default());
    }
    if let Some(l) = r.get("limits") {
        let text = |k: &str| {
            l[k].as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| l[k].to_string())
        };
        println!(
            "limits:    fuel {}, memory {}, deadline {}, open files {}, frame {}",
            text("fuel"),
            text("memory"),
            text("deadline"),
            text("open_files"),
            text("frame")
        );
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
    if let Some(serve) = r.get("serve") {
        print_serve(serve);
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

/// What `sandpipe serve FILE` would make of the file's `[serve]` and `[principals]`: the
/// endpoint, who shares an instance, who gets in, the limits per principal, each principal's
/// tools; or why it would refuse to start.
fn serve_report(section: &ServeSection, policy: &Policy, file: Option<&std::path::Path>) -> Value {
    let endpoint = policy.tools.filter();
    let principals: serde_json::Map<String, Value> = section
        .principals
        .iter()
        .map(|(name, own)| {
            (
                name.clone(),
                Value::from(tool_words(&endpoint.narrowed(own))),
            )
        })
        .collect();
    let mut r = json!({
        "command": match file {
            Some(f) => format!("sandpipe serve {}", f.display()),
            None => "sandpipe serve".to_owned(),
        },
        "tools": tool_words(&endpoint),
        "principals": principals,
        "record_dir": section.serve.record_dir.as_ref().map(|d| d.display().to_string()),
    });
    let grace = super::parse_duration(super::serve::DEFAULT_GRACE).unwrap_or_default();
    let options = super::serve::options(&section.serve, grace).and_then(|o| {
        o.refusal(&section.principals)?;
        if let crate::serve::Auth::Jwt(jwt) = &o.auth {
            jwt.bound(o.listen)?;
        }
        Ok(o)
    });
    match options {
        Ok(o) => {
            let size = |n: u64| bytesize::ByteSize(n).display().iec().to_string();
            r["endpoint"] = Value::from(format!("http://{}/mcp", o.listen));
            r["isolation"] = Value::from(super::serve::isolation(&o));
            r["auth"] = Value::from(o.auth.describe());
            r["max_instances"] = Value::from(o.max_instances);
            r["warm"] = Value::from(o.warm);
            r["rate_per_minute"] = json!(o.rate_per_minute);
            r["max_body"] = Value::from(size(u64::try_from(o.max_body).unwrap_or(u64::MAX)));
            r["idle_timeout"] = Value::from(humantime::format_duration(o.idle_timeout).to_string());
            r["header_timeout"] =
                Value::from(humantime::format_duration(o.header_timeout).to_string());
            r["allow_hosts"] = json!(o.allow_hosts);
            r["allow_origins"] = json!(o.allow_origins);
        }
        Err(e) => r["error"] = Value::from(format!("{e:#}")),
    }
    r
}

/// A tool filter in words: `all`, `all but a, b`, `only a, b` (`only a but not b`).
fn tool_words(f: &ToolFilter) -> String {
    match (f.allow.is_empty(), f.deny.is_empty()) {
        (true, true) => "all".to_owned(),
        (true, false) => format!("all but {}", f.deny.join(", ")),
        (false, true) => format!("only {}", f.allow.join(", ")),
        (false, false) => format!("only {} but not {}", f.allow.join(", "), f.deny.join(", ")),
    }
}

fn print_serve(s: &Value) {
    let text = |k: &str| s[k].as_str().unwrap_or_default().to_owned();
    match s.get("endpoint") {
        Some(e) => println!(
            "serve:     {} ({})",
            e.as_str().unwrap_or_default(),
            text("command")
        ),
        None => println!("serve:     ({})", text("command")),
    }
    if s.get("isolation").is_some() {
        println!("  isolation {}", text("isolation"));
        println!("  auth     {}", text("auth"));
        let rate = match s["rate_per_minute"].as_u64() {
            Some(n) => format!("{n} requests a minute"),
            None => "requests unlimited".to_owned(),
        };
        println!(
            "  limits   per principal: {} instances, {rate}; bodies up to {}; idle instances end after {}; request heads within {}",
            s["max_instances"],
            text("max_body"),
            text("idle_timeout"),
            text("header_timeout")
        );
        if let Some(n) = s["warm"].as_u64().filter(|n| *n > 0) {
            println!("  warm     {n} instances started ahead for new clients");
        }
        for (title, key) in [("hosts", "allow_hosts"), ("origins", "allow_origins")] {
            let list: Vec<&str> = s[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !list.is_empty() {
                println!("  {title:8} also {}", list.join(", "));
            }
        }
    }
    println!("  tools    {}", text("tools"));
    for (name, tools) in s["principals"].as_object().into_iter().flatten() {
        println!("  {name:8} tools: {}", tools.as_str().unwrap_or_default());
    }
    if let Some(dir) = s["record_dir"].as_str() {
        println!("  record   {dir}/instance-N.transcript");
    }
    if let Some(e) = s.get("error") {
        println!(
            "  error    serve would not start: {}",
            e.as_str().unwrap_or_default()
        );
    }
}

/// What `policy` gives a wasm plugin's `import`, in words: the inspect report's answer to
/// "what does this plugin ask for, and what does it get".
fn import_grant(policy: &Policy, import: &str) -> String {
    use crate::ImportPolicy;
    if let ImportPolicy::Strict(allowed) = &policy.imports
        && !crate::policy::import_allowed(allowed, import)
    {
        return "REFUSED: not in --allow-import (the plugin will not load)".to_owned();
    }
    let (iface, _) = crate::policy::import_key(import);
    let (package, name) = iface.split_once('/').unwrap_or((iface, ""));
    match (package, name) {
        ("wasi:filesystem", _) | ("wasi_snapshot_preview1", _) if policy.preopens.is_empty() => {
            if package == "wasi:filesystem" {
                "no directories (nothing granted)".to_owned()
            } else {
                "WASI p1: no directories, no env unless granted".to_owned()
            }
        }
        ("wasi:filesystem", _) | ("wasi_snapshot_preview1", _) => policy
            .preopens
            .iter()
            .map(|p| {
                format!(
                    "{} as {} ({})",
                    p.host.display(),
                    p.guest,
                    match p.access {
                        crate::Access::ReadOnly => "read-only",
                        _ => "read-write",
                    }
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
        ("wasi:sockets" | "wasi:http", _) if policy.net.is_closed() => {
            "linked, every connection refused (no --allow-net)".to_owned()
        }
        ("wasi:sockets", _) => format!(
            "TCP to {} (names looked up by sandpipe and pinned); no UDP, no listening",
            allowed_list(policy)
        ),
        ("wasi:http", _) => format!(
            "outgoing requests to {}{}",
            allowed_list(policy),
            if policy.net.http_headers.is_empty() {
                String::new()
            } else {
                let added: Vec<String> = policy
                    .net
                    .http_headers
                    .iter()
                    .map(|h| h.to_string())
                    .collect();
                format!(", adding {}", added.join(", "))
            }
        ),
        ("wasi:cli", "environment") => {
            let names: Vec<&str> = policy.env.iter().map(|(k, _)| k.as_str()).collect();
            format!(
                "{} argument(s); env {}",
                policy.args.len(),
                if names.is_empty() {
                    "empty".to_owned()
                } else {
                    names.join(", ")
                }
            )
        }
        ("wasi:cli", "stdin" | "stdout") => "the engine's stream, through the framer".to_owned(),
        ("wasi:cli", "stderr") => "sandpipe's stderr (its tail is kept for reports)".to_owned(),
        ("wasi:cli", "exit") => "exit status passed on".to_owned(),
        ("wasi:cli", n) if n.starts_with("terminal") => "no terminal".to_owned(),
        ("wasi:clocks", _) => match policy.deterministic {
            Some(_) => "virtual: 2000-01-01, 1 ms per read (deterministic)".to_owned(),
            None => "the host's clock".to_owned(),
        },
        ("wasi:random", _) => match policy.deterministic {
            Some(seed) => format!("from seed {seed} (deterministic)"),
            None => "the host's random source".to_owned(),
        },
        ("wasi:io", _) => "streams and polling (no capability by itself)".to_owned(),
        _ => "not provided by sandpipe (the plugin will not instantiate)".to_owned(),
    }
}

/// The allow-list as `a, b, c`.
fn allowed_list(policy: &Policy) -> String {
    let rules: Vec<String> = policy.net.allow.iter().map(|r| r.to_string()).collect();
    rules.join(", ")
}

/// Grants `policy` makes that no import of the plugin can use: a directory for a component
/// without `wasi:filesystem`, env for one without `wasi:cli/environment`.
fn unused_grants(policy: &Policy, imports: &[String]) -> Vec<String> {
    let imports_any = |prefix: &str| imports.iter().any(|i| i.starts_with(prefix));
    let p1 = imports_any("wasi_snapshot_preview1");
    let mut unused = Vec::new();
    if !policy.preopens.is_empty() && !p1 && !imports_any("wasi:filesystem/") {
        for p in &policy.preopens {
            unused.push(format!(
                "directory {} (the plugin does not import wasi:filesystem)",
                p.host.display()
            ));
        }
    }
    if !policy.env.is_empty() && !p1 && !imports_any("wasi:cli/environment") {
        unused.push("env (the plugin does not import wasi:cli/environment)".to_owned());
    }
    unused
}

/// The limits of `policy`, as the report shows them.
fn limits_report(policy: &Policy, max_frame: u64) -> Value {
    let size = |b: u64| bytesize::ByteSize(b).display().iec().to_string();
    json!({
        "fuel": policy.fuel.to_string(),
        "memory": policy.max_memory.map(size).unwrap_or_else(|| "unlimited".to_owned()),
        "deadline": policy
            .deadline
            .map(|d| humantime::format_duration(d).to_string())
            .unwrap_or_else(|| "none".to_owned()),
        "open_files": policy
            .max_open_files
            .map(|n| n.to_string())
            .unwrap_or_else(|| "unlimited".to_owned()),
        "frame": size(max_frame),
    })
}

/// What a native plugin would run under: Landlock on this kernel and the rlimits of `policy`.
fn native_report(policy: &Policy, support: &LandlockSupport) -> Value {
    let limits = crate::run::native::Limits::for_policy(policy);
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
    use std::time::Duration;

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
