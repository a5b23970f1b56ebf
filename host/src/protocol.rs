//! Which protocol a command speaks, by name: the names a policy file, the command line and a
//! recording's header give. All else sandpipe knows of a protocol (framing, supervision rules,
//! the hooks of `call` and `inspect`) is its line in the registry,
//! [`PROTOCOLS`](crate::protocols::PROTOCOLS), in the tier that speaks it; a policy file reads
//! the name without that tier.

/// Which protocol a command speaks: a variant and its name here, and its line in
/// [`PROTOCOLS`](crate::protocols::PROTOCOLS).
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
    /// Every protocol, in `--help`'s order (the registry's).
    pub const ALL: [Protocol; 7] = [
        Protocol::JsonRpc,
        Protocol::Oracle,
        Protocol::Orchard,
        Protocol::DenoBridge,
        Protocol::Atp,
        Protocol::FineCode,
        Protocol::Mcp,
    ];

    /// The name used on the command line, in policy files and in transcripts.
    pub const fn name(self) -> &'static str {
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

    /// Every protocol's name, for messages: `a, b or c`.
    pub fn names() -> String {
        let names: Vec<&str> = Protocol::ALL.iter().map(|p| p.name()).collect();
        or_list(&names)
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Protocol::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown protocol {s:?} (expected {})", Protocol::names()))
    }
}

/// `a, b or c`.
pub(crate) fn or_list(items: &[&str]) -> String {
    match items.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}
