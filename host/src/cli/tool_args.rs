//! `--allow-tool` and `--deny-tool`: one definition for `run --protocol mcp`, `call` and
//! `inspect`, so that what `inspect` shows and `call` may call is what a client behind `run`
//! sees.

use anyhow::{Result, bail};
use sandpipe_proto::mcp::ToolFilter;

use crate::speak::protocols::Protocol;

/// The tools an MCP client may see and call (a policy file's `[tools]` comes first).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ToolArgs {
    /// MCP: only this tool is listed and callable (repeat for more; default: every tool).
    #[arg(long = "allow-tool", value_name = "NAME")]
    pub(crate) allow_tools: Vec<String>,
    /// MCP: this tool is taken out of tools/list and a tools/call of it is refused as if the
    /// server did not have it (repeatable).
    #[arg(long = "deny-tool", value_name = "NAME")]
    pub(crate) deny_tools: Vec<String>,
}

impl ToolArgs {
    /// The filter the options say.
    pub(crate) fn filter(&self) -> ToolFilter {
        ToolFilter {
            allow: self.allow_tools.clone(),
            deny: self.deny_tools.clone(),
        }
    }

    /// True when a tool is named.
    pub(crate) fn given(&self) -> bool {
        !self.allow_tools.is_empty() || !self.deny_tools.is_empty()
    }

    /// The filter for `protocol`; an error when tools are named and its plugins offer none.
    pub(crate) fn for_protocol(&self, protocol: Protocol) -> Result<ToolFilter> {
        if self.given() && protocol.spec().tool_filter.is_none() {
            bail!("--allow-tool and --deny-tool need --protocol mcp");
        }
        Ok(self.filter())
    }
}
