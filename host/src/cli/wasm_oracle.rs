//! `inspect --protocol oracle` for a component that exports functions (a Cairo `wasm:`
//! oracle): its selectors with their WIT signatures. `run`, `call` and `inspect --protocol mcp`
//! need nothing of their own: the component is a session ([`crate::exports::session`]), served
//! in the protocol's frames, and goes through the same supervisor and clients as any plugin.

use serde_json::{Value, json};

use crate::speak::protocols::oracle::OracleClient;
use crate::{Host, Plugin, Policy, SessionOptions};

/// What `inspect` shows of a component's functions: full name and WIT signature, and why the
/// codec cannot carry it, if so.
pub(crate) fn functions_json(plugin: &Plugin) -> Value {
    Value::Array(
        plugin
            .functions()
            .iter()
            .map(|f| {
                let mut entry = json!({"name": f.name, "signature": f.signature});
                let supported = f
                    .params
                    .as_ref()
                    .and(f.results.as_ref())
                    .map_err(Clone::clone)
                    .and_then(|_| {
                        let params = f.params.as_deref().unwrap_or_default();
                        let results = f.results.as_deref().unwrap_or_default();
                        sandpipe_proto::oracle::wasm::check_supported(params.iter().chain(results))
                    });
                if let Err(e) = supported {
                    entry["unsupported"] = Value::from(e.to_string());
                }
                entry
            })
            .collect(),
    )
}

/// `inspect --protocol oracle` of a `wasm:` oracle: start it and wait for its `ready` (so a
/// component that cannot start says so), and list its selectors.
pub(crate) async fn describe(
    host: &Host,
    plugin: &Plugin,
    policy: &Policy,
    options: &SessionOptions,
) -> Result<Value, String> {
    let protocol = crate::speak::protocols::Protocol::Oracle;
    let session = host
        .start_speaking(plugin, policy, options, protocol)
        .await
        .map_err(|e| e.to_string())?;
    let client = OracleClient::connect(session)
        .await
        .map_err(|e| format!("oracle error {}: {}", e.code, e.message))?;
    let _ = client.shutdown(std::time::Duration::from_secs(2)).await;
    Ok(json!({ "kind": "wasm: oracle (exported functions)", "selectors": functions_json(plugin) }))
}
