//! A component that exports functions instead of running `wasi:cli/run`: called directly, as
//! Scarb calls a `wasm:` oracle ([`oracle::WasmOracle`]), or served as a session that speaks a
//! protocol for it in process ([`session`]: the oracle protocol, or MCP tools).

mod error;
pub mod oracle;
pub mod session;
