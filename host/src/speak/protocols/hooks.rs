//! What `sandpipe call` and `sandpipe inspect --protocol` ask of a protocol: one call (the
//! handshake, the call, a clean shutdown) and the plugin's self-description. Each protocol's
//! host client module has the two functions; its line in [`super::PROTOCOLS`] names them.
//! They return typed answers and classified failures; printing and exit statuses are the
//! command line's.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use sandpipe_proto::mcp::ToolFilter;
use serde_json::Value;

use super::Protocol;
use crate::exports::session::ExportsServer;
use crate::{Exit, Host, HostError, Plugin, Policy, Session, SessionOptions};

/// A boxed future, so each protocol's hook fits one function-pointer type.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// `call`'s hook: one call, its answer or its classified failure.
pub type CallHook = for<'a> fn(Launch<'a>, CallRequest) -> BoxFuture<'a, Result<Value, CallError>>;

/// `inspect --protocol`'s hook: the plugin's self-description.
pub type DescribeHook = for<'a> fn(Launch<'a>) -> BoxFuture<'a, Result<Value, DescribeError>>;

/// How a protocol serves a component that exports functions (its line's
/// [`exports`](super::ProtocolSpec::exports)): the in-process server that speaks it for the
/// component's functions, and `inspect --protocol`'s hook for such a component when the
/// protocol's own `describe` does not fit (`None`: the protocol's own, over the served
/// session).
#[derive(Clone, Copy)]
pub struct ServesExports {
    pub(crate) server: fn(&Plugin) -> Box<dyn ExportsServer>,
    pub(crate) describe: Option<DescribeHook>,
}

impl std::fmt::Debug for ServesExports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServesExports")
            .field("describe", &self.describe.is_some())
            .finish_non_exhaustive()
    }
}

/// What a hook runs: a plugin to start with its policy and session options, or a session
/// already started ([`Launch::session`]: `Session::memory` in tests); and, for a protocol
/// whose plugin offers tools, the tools the caller may see and call.
#[derive(Debug)]
pub struct Launch<'a> {
    source: Source<'a>,
    tools: ToolFilter,
}

#[derive(Debug)]
enum Source<'a> {
    Plugin(
        &'a Host,
        &'a Plugin,
        &'a Policy,
        &'a SessionOptions,
        Protocol,
    ),
    Session(Box<Session>),
}

impl<'a> Launch<'a> {
    /// `plugin` under `policy`, started by `host` with `options` (the protocol's framing,
    /// limits, stderr, recording) speaking `protocol`: a component that exports functions is
    /// served in process in the protocol's frames ([`Host::start_speaking`]).
    pub fn new(
        host: &'a Host,
        plugin: &'a Plugin,
        policy: &'a Policy,
        options: &'a SessionOptions,
        protocol: Protocol,
    ) -> Self {
        Launch {
            source: Source::Plugin(host, plugin, policy, options, protocol),
            tools: ToolFilter::default(),
        }
    }

    /// A session already started.
    pub fn session(session: Session) -> Launch<'static> {
        Launch {
            source: Source::Session(Box::new(session)),
            tools: ToolFilter::default(),
        }
    }

    /// Show and call only the tools `filter` lets through (`--allow-tool`, `--deny-tool`, a
    /// policy's `[tools]`), as `run` does: a hidden tool is absent from lists and a call of it
    /// gets the answer the supervisor gives.
    pub fn with_tools(mut self, filter: ToolFilter) -> Self {
        self.tools = filter;
        self
    }

    /// The tools the caller may see and call.
    pub fn tools(&self) -> &ToolFilter {
        &self.tools
    }

    /// Start the plugin's session (or take the one given).
    pub async fn start(self) -> Result<Session, HostError> {
        match self.source {
            Source::Plugin(host, plugin, policy, options, protocol) => {
                host.start_speaking(plugin, policy, options, protocol).await
            }
            Source::Session(session) => Ok(*session),
        }
    }

    /// The plugin, its policy and options, to run it another way than one session (Orchard's
    /// plan mode); `None` for a session already started.
    pub fn plugin(&self) -> Option<(&'a Host, &'a Plugin, &'a Policy, &'a SessionOptions)> {
        match self.source {
            Source::Plugin(host, plugin, policy, options, _) => {
                Some((host, plugin, policy, options))
            }
            Source::Session(_) => None,
        }
    }
}

/// The one call `sandpipe call` makes.
#[derive(Debug, Clone)]
pub struct CallRequest {
    /// `--method`: the method, selector, step or call name, as the protocol names calls.
    pub method: String,
    /// `--params`: its parameters (the oracle's calldata, ATP's step config).
    pub params: Option<Value>,
    /// `--config` as given (JSON text, parsed by the protocols that use it): Orchard's
    /// `configure` before an `execute`, FineCode's raw config.
    pub config: String,
    /// How long the plugin gets to exit after the call.
    pub grace: Duration,
}

/// Why a call gave no answer (or an answer that says it failed), in the protocol's words.
#[derive(Debug)]
pub enum CallError {
    /// The plugin could not be started.
    Start(HostError),
    /// The call failed: `lines` say how (each printed after `sandpipe: `), `failure` whose
    /// doing it was. `answer`, when the plugin gave one that says the call failed (an MCP
    /// tool's `isError`), is printed as the result.
    Failed {
        /// What to tell the user, one line each.
        lines: Vec<String>,
        /// Whose doing the failure is.
        failure: Failure,
        /// The plugin's answer, when it answered with a failure.
        answer: Option<Value>,
    },
}

impl CallError {
    /// A failure told in `lines`.
    pub fn failed(failure: Failure, lines: impl IntoIterator<Item = String>) -> Self {
        CallError::Failed {
            lines: lines.into_iter().collect(),
            failure,
            answer: None,
        }
    }
}

/// Whose doing a failed call is: the README's exit table, for `call`.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The plugin answered with the protocol's error (status 1).
    Plugin,
    /// The plugin broke its protocol: an answer that does not fit it, or a frame the host
    /// stopped it for (123).
    Violation,
    /// sandpipe would not make the call: input the protocol cannot carry, or a call the host
    /// refuses (125).
    Host,
    /// The plugin was stopped or ended with the call unanswered: the status of how it ended
    /// when that is known and not 0, else `otherwise`'s.
    Ended {
        /// How the plugin ended, when known.
        exit: Option<Exit>,
        /// The class when the end says nothing (exited 0, or unknown).
        otherwise: Box<Failure>,
    },
}

impl Failure {
    /// Ended as `exit` says, else `otherwise`.
    pub fn ended(exit: Option<Exit>, otherwise: Failure) -> Self {
        Failure::Ended {
            exit,
            otherwise: Box::new(otherwise),
        }
    }
}

/// Why there is no self-description.
#[derive(Debug)]
pub enum DescribeError {
    /// The plugin could not be started.
    Start(HostError),
    /// It started, but gave none (the reason, one line).
    Failed(String),
}

impl From<HostError> for DescribeError {
    fn from(e: HostError) -> Self {
        DescribeError::Start(e)
    }
}

impl CallRequest {
    /// `--config` as JSON.
    pub fn config_json(&self) -> Result<Value, CallError> {
        serde_json::from_str(&self.config).map_err(|e| {
            CallError::failed(
                Failure::Host,
                [format!("--config is not JSON: {}: {e}", self.config)],
            )
        })
    }
}

/// How long a plugin gets to exit after describing itself.
pub const DESCRIBE_GRACE: Duration = Duration::from_secs(2);

/// The `clientInfo` sandpipe gives a server that asks who is calling.
pub(crate) fn client_info() -> Value {
    serde_json::json!({"name": "sandpipe", "version": env!("CARGO_PKG_VERSION")})
}
