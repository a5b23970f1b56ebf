//! Typed async clients, one per hosted protocol, over a [`Session`](crate::Session).
//!
//! Each drives the protocol's client (host-role) state machine from `sandpipe-proto`, so the
//! host and the in-memory tests share one implementation of the protocol's rules. When the
//! sandbox stops a plugin with requests pending, each pending request gets the protocol's own
//! error form carrying the reason and the plugin's stderr tail.

pub mod atp;
pub mod denobridge;
pub mod finecode;
pub mod mcp;
pub mod oracle;
pub mod orchard;

/// Which protocol a command speaks. New protocols (`atp`, `finecode`) slot in here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// Plain JSON-RPC 2.0 over JSON Lines: one request, its response.
    JsonRpc,
    /// Cairo oracle `stdio:`.
    Oracle,
    /// Orchard provider protocol.
    Orchard,
    /// terraform-provider-denobridge.
    DenoBridge,
    /// Arcaflow ATP v1/v3 (CBOR).
    Atp,
    /// FineCode WM↔ER (LSP `Content-Length`).
    FineCode,
    /// Model Context Protocol servers (stdio: JSON-RPC 2.0 in JSON Lines).
    Mcp,
}

impl Protocol {
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

    /// The framing the protocol uses.
    pub fn framing(self) -> sandpipe_proto::frame::Framing {
        use sandpipe_proto::frame::Framing;
        match self {
            Protocol::Atp => Framing::CborSeq,
            Protocol::FineCode => Framing::ContentLength,
            _ => Framing::JsonLines,
        }
    }

    /// The protocol's rules for the supervisor ([`crate::supervise`]), from its module in
    /// `sandpipe-proto`.
    pub fn supervised(self) -> Box<dyn sandpipe_proto::supervise::SupervisedProtocol> {
        use sandpipe_proto::{atp, denobridge, finecode, jsonrpc, mcp, oracle, orchard};
        match self {
            Protocol::JsonRpc => Box::new(jsonrpc::Supervised),
            Protocol::Oracle => Box::new(oracle::Supervised),
            Protocol::Orchard => Box::new(orchard::Supervised),
            Protocol::DenoBridge => Box::new(denobridge::Supervised),
            Protocol::Atp => Box::new(atp::Supervised),
            Protocol::FineCode => Box::new(finecode::Supervised),
            Protocol::Mcp => Box::new(mcp::Supervised::default()),
        }
    }

    /// The name used on the command line and in transcripts.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::JsonRpc => "jsonrpc",
            Protocol::Oracle => "oracle",
            Protocol::Orchard => "orchard",
            Protocol::DenoBridge => "denobridge",
            Protocol::Atp => "atp",
            Protocol::FineCode => "finecode",
            Protocol::Mcp => "mcp",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "jsonrpc" => Ok(Protocol::JsonRpc),
            "oracle" => Ok(Protocol::Oracle),
            "orchard" => Ok(Protocol::Orchard),
            "denobridge" => Ok(Protocol::DenoBridge),
            "atp" => Ok(Protocol::Atp),
            "finecode" => Ok(Protocol::FineCode),
            "mcp" => Ok(Protocol::Mcp),
            other => Err(format!(
                "unknown protocol {other:?} (expected jsonrpc, oracle, orchard, denobridge, atp, finecode or mcp)"
            )),
        }
    }
}
