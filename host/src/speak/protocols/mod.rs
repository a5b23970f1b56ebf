//! Typed async clients, one per hosted protocol, over a [`Session`](crate::Session).
//!
//! Each drives the protocol's client (host-role) state machine from `sandpipe-proto`, so the
//! host and the in-memory tests share one implementation of the protocol's rules. When the
//! sandbox stops a plugin with requests pending, each pending request gets the protocol's own
//! error form carrying the reason and the plugin's stderr tail.

pub mod atp;
pub mod denobridge;
pub mod finecode;
pub mod hooks;
pub mod jsonrpc;
pub mod mcp;
pub mod oracle;
pub mod orchard;

use sandpipe_proto::frame::Framing;
use sandpipe_proto::mcp::ToolFilter;
use sandpipe_proto::supervise::SupervisedProtocol;

use hooks::{CallHook, DescribeHook, ServesExports};

pub use crate::protocol::Protocol;

use crate::protocol::or_list;

use crate::exports::session::{exports_runner, serve};
use crate::{Host, HostError, Plugin, Policy, Session, SessionOptions};

/// One protocol, all that sandpipe needs of it besides its proto module and its host client:
/// what the command line calls it, its framing, its supervision rules, the hooks of `call`
/// and `inspect --protocol` (in its client module), and how it serves a component's exports.
/// `replay` needs only the name and the rules.
pub struct ProtocolSpec {
    /// Which protocol.
    pub protocol: Protocol,
    /// What it is, in `--help`.
    pub help: &'static str,
    /// The framing it uses.
    pub framing: Framing,
    /// Its rules for the supervisor ([`crate::speak::supervise`]), from its module in `sandpipe-proto`.
    pub supervised: fn() -> Box<dyn SupervisedProtocol>,
    /// Its rules with a tool filter (`run --allow-tool/--deny-tool`), for a protocol whose
    /// plugin offers tools; `None` refuses those options.
    pub tool_filter: Option<fn(ToolFilter) -> Box<dyn SupervisedProtocol>>,
    /// `sandpipe call`: the handshake, one call, a clean shutdown.
    pub call: CallHook,
    /// `sandpipe inspect --protocol`: the plugin's self-description.
    pub describe: DescribeHook,
    /// How it serves a component that exports functions (in its client module), or `None`
    /// for a protocol that does not: [`Host::start_speaking`] refuses such a component.
    pub exports: Option<ServesExports>,
}

impl ProtocolSpec {
    /// Its name on the command line, in policy files and in transcripts.
    pub fn name(&self) -> &'static str {
        self.protocol.name()
    }
}

impl std::fmt::Debug for ProtocolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtocolSpec")
            .field("name", &self.name())
            .field("framing", &self.framing)
            .field("exports", &self.exports.is_some())
            .finish_non_exhaustive()
    }
}

/// The registry: every protocol sandpipe speaks, one line each, in `--help`'s order.
#[rustfmt::skip]
pub static PROTOCOLS: &[ProtocolSpec] = {
    use sandpipe_proto::{atp as a, denobridge as d, finecode as f, jsonrpc as j, mcp as m};
    use sandpipe_proto::{oracle as o, orchard as r};
    use Framing::{CborSeq, ContentLength, JsonLines};
    &[
        ProtocolSpec { protocol: Protocol::JsonRpc, help: "plain JSON-RPC 2.0 over JSON Lines", framing: JsonLines, supervised: || Box::new(j::Supervised), tool_filter: None, call: |l, r| Box::pin(crate::speak::protocols::jsonrpc::one_call(l, r)), describe: |_| Box::pin(crate::speak::protocols::jsonrpc::describe()), exports: None },
        ProtocolSpec { protocol: Protocol::Oracle, help: "Cairo oracle stdio: (and wasm: components exporting functions)", framing: JsonLines, supervised: || Box::new(o::Supervised), tool_filter: None, call: |l, r| Box::pin(oracle::one_call(l, r)), describe: |l| Box::pin(oracle::describe(l)), exports: Some(ServesExports { server: oracle::serve_exports, describe: Some(|l| Box::pin(oracle::describe_exports(l))) }) },
        ProtocolSpec { protocol: Protocol::Orchard, help: "Orchard provider protocol", framing: JsonLines, supervised: || Box::new(r::Supervised), tool_filter: None, call: |l, r| Box::pin(orchard::one_call(l, r)), describe: |l| Box::pin(orchard::describe(l)), exports: None },
        ProtocolSpec { protocol: Protocol::DenoBridge, help: "terraform-provider-denobridge", framing: JsonLines, supervised: || Box::new(d::Supervised), tool_filter: None, call: |l, r| Box::pin(denobridge::one_call(l, r)), describe: |l| Box::pin(denobridge::describe(l)), exports: None },
        ProtocolSpec { protocol: Protocol::Atp, help: "Arcaflow ATP v1/v3 (CBOR)", framing: CborSeq, supervised: || Box::new(a::Supervised), tool_filter: None, call: |l, r| Box::pin(atp::one_call(l, r)), describe: |l| Box::pin(atp::describe(l)), exports: None },
        ProtocolSpec { protocol: Protocol::FineCode, help: "FineCode WM-ER (LSP Content-Length)", framing: ContentLength, supervised: || Box::new(f::Supervised), tool_filter: None, call: |l, r| Box::pin(finecode::one_call(l, r)), describe: |l| Box::pin(finecode::describe(l)), exports: None },
        ProtocolSpec { protocol: Protocol::Mcp, help: "Model Context Protocol servers (stdio), or a component's exported functions as tools", framing: JsonLines, supervised: || Box::new(m::Supervised::default()), tool_filter: Some(|filter| Box::new(m::Supervised::new(filter))), call: |l, r| Box::pin(mcp::one_call(l, r)), describe: |l| Box::pin(mcp::describe(l)), exports: Some(ServesExports { server: mcp::serve_exports, describe: None }) },
    ]
};

impl Protocol {
    /// The protocol's line in [`PROTOCOLS`].
    pub fn spec(self) -> &'static ProtocolSpec {
        PROTOCOLS
            .iter()
            .find(|s| s.protocol == self)
            .expect("every protocol has its line in PROTOCOLS")
    }

    /// The answer to the engine's request `request` (a frame) that the plugin will never
    /// answer, for `stopped`: the protocol's own, by its supervision rules
    /// ([`supervised`](Self::supervised): each protocol's `stopped_error` in `sandpipe-proto`,
    /// with the request's id; an ATP run's error is not server fatal). `None` for a frame that
    /// is not a request (`replay --serve`).
    pub fn stopped_answer(self, request: &[u8], stopped: &crate::Stopped) -> Option<Vec<u8>> {
        use sandpipe_proto::supervise::FromEngine;
        let rules = self.supervised();
        let (key, method) = match rules.classify_engine(request) {
            FromEngine::Request { key, method } => (key, method),
            FromEngine::Handshake { awaits: Some(key) } => (key, None),
            _ => return None,
        };
        Some(rules.stopped_answer(&key, method.as_deref(), stopped))
    }

    /// `inspect --protocol`'s hook for `plugin`: the protocol's own, or, for a component that
    /// exports functions, the one its [`ServesExports`] gives, if any.
    pub fn describe_for(self, plugin: &Plugin) -> DescribeHook {
        let spec = self.spec();
        match &spec.exports {
            Some(exports) if plugin.exports_functions() => {
                exports.describe.unwrap_or(spec.describe)
            }
            _ => spec.describe,
        }
    }

    /// The framing the protocol uses.
    pub fn framing(self) -> Framing {
        self.spec().framing
    }

    /// The protocol's rules for the supervisor ([`crate::speak::supervise`]), from its module in
    /// `sandpipe-proto`.
    pub fn supervised(self) -> Box<dyn SupervisedProtocol> {
        (self.spec().supervised)()
    }
}

impl Host {
    /// Start `plugin` for a session speaking `protocol`. A component that exports functions
    /// (see [`Plugin::exports_functions`]) is served in process by the protocol's
    /// [`ServesExports`], each function an oracle selector or an MCP tool (see
    /// [`crate::exports::session`]), from a fresh instance made now (one that cannot start is
    /// an error here), with `policy.deadline` as each call's limit; any other plugin starts as
    /// [`Host::start`] starts it.
    pub async fn start_speaking(
        &self,
        plugin: &Plugin,
        policy: &Policy,
        options: &SessionOptions,
        protocol: Protocol,
    ) -> Result<Session, HostError> {
        if !plugin.exports_functions() {
            return self.start(plugin, policy, options).await;
        }
        let runner = exports_runner(self, plugin, policy)?;
        let Some(exports) = &protocol.spec().exports else {
            let serving: Vec<&str> = PROTOCOLS
                .iter()
                .filter(|s| s.exports.is_some())
                .map(|s| s.name())
                .collect();
            return Err(HostError::Instantiate {
                message: format!(
                    "{} exports functions: sandpipe serves them as the {} protocol, not {}",
                    plugin.path().display(),
                    or_list(&serving),
                    protocol.name()
                ),
            });
        };
        serve(runner, plugin, policy, options, (exports.server)(plugin)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_protocol_has_one_line_and_its_name_parses_back() {
        // One line per protocol, in the order of `Protocol::ALL`.
        let listed: Vec<Protocol> = PROTOCOLS.iter().map(|s| s.protocol).collect();
        assert_eq!(listed, Protocol::ALL);
        for spec in PROTOCOLS {
            assert_eq!(spec.protocol.spec().name(), spec.name());
            assert_eq!(spec.name().parse::<Protocol>(), Ok(spec.protocol));
        }
        assert_eq!(
            "x".parse::<Protocol>(),
            Err("unknown protocol \"x\" (expected jsonrpc, oracle, orchard, denobridge, atp, finecode or mcp)".to_owned())
        );
    }
}
