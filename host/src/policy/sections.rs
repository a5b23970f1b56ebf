//! The sections of a policy, each declared once: `[limits]`, `[grants]`, `[net]`,
//! `[requests]`, `[tools]` and `[trust]`, and `sandpipe serve`'s `[serve]`.
//!
//! One [`section!`] declaration per section gives, for each of its fields:
//!
//! ```text
//!              /// doc comment ──────────────► --help text of the flag
//!   field: Type = "key", flag "long" => policy_field
//!                  │           │            │
//!                  │           │            └─► Policy::from_document / Policy::document
//!                  │           └──────────────► clap flag --long (id "long"), SANDPIPE_LONG
//!                  └──────────────────────────► TOML key and document key "section.key"
//! ```
//!
//! and, for the section: the struct (clap `Args` under feature `cli`, serde both ways), its
//! key list ([`Key`]: what `inspect`'s sources and the round-trip tests walk), and the overlay
//! of the command line on a policy file (a flag replaces the file's value, a list adds to the
//! file's, a switch is on when either turns it on: by the field's type, [`Given`]).
//!
//! A section as given holds `None` (an empty list, `false`) where nothing set a key; the
//! document of a resolved policy ([`super::PolicyDocument`], a recording's header) is the same
//! sections with every key set, so one schema reads a policy file, the command line's flags and
//! a recording. Adding a limit is one field in [`Limits`] (with `=> field` for a [`Policy`]
//! field of the same meaning) and its enforcement.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Policy;
use super::value::{Cap, Quantity, parse_duration, parse_size};

/// How a flag and a policy file's value of one key combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// The flag's value replaces the file's.
    One,
    /// The file's entries, then the flag's.
    List,
    /// On when either turns it on.
    Switch,
}

/// One key of a section, as its declaration names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key in a policy file and the document: `limits.max-memory`.
    pub key: &'static str,
    /// The flag's long name, also its clap id: `max-memory`.
    pub flag: &'static str,
    /// How the flag and the file combine.
    pub merge: Merge,
}

impl Key {
    /// The flag's `--` form.
    pub fn long(&self) -> String {
        format!("--{}", self.flag)
    }

    /// The `SANDPIPE_*` variable of the flag (`SANDPIPE_MAX_MEMORY`).
    pub fn env_var(&self) -> String {
        env_name(self.flag)
    }
}

/// The `SANDPIPE_*` variable of the flag `long` (`max-memory`: `SANDPIPE_MAX_MEMORY`).
pub fn env_name(long: &str) -> String {
    format!("SANDPIPE_{}", long.to_uppercase().replace('-', "_"))
}

/// A field's value as given, on the command line or in a file: whether something set it, and
/// how a flag's value lies over a file's.
pub trait Given: Clone {
    /// How the two combine.
    const MERGE: Merge;
    /// Whether the key was set.
    fn is_set(&self) -> bool;
    /// Lay `file` under this value (the command line's).
    fn lay_over(&mut self, file: &Self);
    /// The value in a note (a list's entries).
    fn show(&self) -> String;
}

impl<T: Clone> Given for Option<T> {
    const MERGE: Merge = Merge::One;
    fn is_set(&self) -> bool {
        self.is_some()
    }
    fn lay_over(&mut self, file: &Self) {
        if self.is_none() {
            self.clone_from(file);
        }
    }
    fn show(&self) -> String {
        String::new()
    }
}

/// An entry of a list field, as a note shows it.
pub trait Entry: Clone {
    /// The entry in a note.
    fn show(&self) -> String;
}

impl Entry for String {
    fn show(&self) -> String {
        self.clone()
    }
}

impl Entry for PathBuf {
    fn show(&self) -> String {
        self.display().to_string()
    }
}

impl Entry for Dir {
    fn show(&self) -> String {
        self.to_string()
    }
}

impl<T: Entry> Given for Vec<T> {
    const MERGE: Merge = Merge::List;
    fn is_set(&self) -> bool {
        !self.is_empty()
    }
    fn lay_over(&mut self, file: &Self) {
        self.splice(0..0, file.iter().cloned());
    }
    fn show(&self) -> String {
        self.iter().map(Entry::show).collect::<Vec<_>>().join(",")
    }
}

impl Given for bool {
    const MERGE: Merge = Merge::Switch;
    fn is_set(&self) -> bool {
        *self
    }
    fn lay_over(&mut self, file: &Self) {
        *self |= *file;
    }
    fn show(&self) -> String {
        String::new()
    }
}

/// A field given in a section as the [`Policy`] field `P` holds it resolved.
pub trait Resolve<P> {
    /// Set `policy` from this value, when it is set.
    fn resolve(&self, policy: &mut P);
    /// The value that sets `policy`.
    fn given(policy: &P) -> Self;
}

impl Resolve<Option<u64>> for Option<Cap> {
    fn resolve(&self, policy: &mut Option<u64>) {
        if let Some(cap) = self {
            *policy = cap.0;
        }
    }
    fn given(policy: &Option<u64>) -> Self {
        Some(Cap(*policy))
    }
}

impl<T: Clone> Resolve<Option<T>> for Option<T> {
    fn resolve(&self, policy: &mut Option<T>) {
        if self.is_some() {
            policy.clone_from(self);
        }
    }
    fn given(policy: &Option<T>) -> Self {
        policy.clone()
    }
}

impl Resolve<bool> for Option<bool> {
    fn resolve(&self, policy: &mut bool) {
        if let Some(on) = self {
            *policy = *on;
        }
    }
    fn given(policy: &bool) -> Self {
        Some(*policy)
    }
}

/// Lay a file's `file` under the command line's `flag` for `key`. A `SANDPIPE_*` variable
/// counts as the command line, but never silently: when it overrides or adds to what the file
/// says, `note` names it.
fn overlay_one<T: Given>(
    flag: &mut T,
    file: &T,
    key: &Key,
    from_env: &dyn Fn(&str) -> bool,
    note: &mut dyn FnMut(String),
) {
    if flag.is_set() && file.is_set() && from_env(key.flag) {
        match T::MERGE {
            Merge::One => note(format!(
                "{} overrides the policy file's {}",
                key.env_var(),
                key.key
            )),
            Merge::List => note(format!(
                "{} adds {} to the policy file's {}",
                key.env_var(),
                flag.show(),
                key.key
            )),
            Merge::Switch => {}
        }
    }
    flag.lay_over(file);
}

/// Declares one section of the policy (see the module documentation): each field's doc comment
/// (its flag's `--help`), serde and clap attributes (parsers), type, key, flag, and optionally
/// the [`Policy`] field it resolves to.
macro_rules! section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident in $section:literal {
            $(
                $(#[$fmeta:meta])*
                $field:ident : $ty:ty = $key:literal, flag $long:literal $(=> $policy:ident)?;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[cfg_attr(feature = "cli", derive(clap::Args))]
        #[serde(deny_unknown_fields)]
        #[non_exhaustive]
        pub struct $name {
            $(
                $(#[$fmeta])*
                #[serde(rename = $key)]
                #[cfg_attr(feature = "cli", arg(id = $long, long = $long))]
                pub $field: $ty,
            )*
        }

        impl $name {
            /// This section's keys, in declaration order.
            pub const KEYS: &'static [Key] = &[$(Key {
                key: concat!($section, ".", $key),
                flag: $long,
                merge: <$ty as Given>::MERGE,
            }),*];

            /// Each key with whether this section sets it.
            pub fn keys_set(&self) -> impl Iterator<Item = (&'static Key, bool)> {
                let set = [$(Given::is_set(&self.$field)),*];
                Self::KEYS.iter().zip(set)
            }

            /// Lay a policy file's section under this one, the command line's (see
            /// [`Given`]); `from_env(flag)` says whether a flag's value came from its
            /// `SANDPIPE_*` variable, and `note` hears what such a variable overrides.
            pub fn overlay(
                &mut self,
                file: &Self,
                from_env: &dyn Fn(&str) -> bool,
                note: &mut dyn FnMut(String),
            ) {
                let mut keys = Self::KEYS.iter();
                $(
                    if let Some(key) = keys.next() {
                        overlay_one(&mut self.$field, &file.$field, key, from_env, note);
                    }
                )*
            }

            /// Set the policy fields these keys resolve to, where set.
            #[allow(unused_variables, dead_code)]
            pub(crate) fn resolve_into(&self, policy: &mut Policy) {
                $($( Resolve::resolve(&self.$field, &mut policy.$policy); )?)*
            }

            /// The keys that resolve to a policy field, from `policy`; the others unset.
            #[allow(unused_variables, unused_mut, dead_code)]
            pub(crate) fn from_policy(policy: &Policy) -> Self {
                let mut section = Self::default();
                $($( section.$field = Resolve::given(&policy.$policy); )?)*
                section
            }
        }
    };
}

section! {
    /// `[limits]`, and the command line's limit flags (the field docs are their `--help`). A
    /// size is a number of bytes or text (`"64MiB"`); a [`Cap`] of `None` is `"none"`, no cap. A
    /// key left out is `None`: the default, which [`Policy::default`] holds and `--help` names.
    pub struct Limits in "limits" {
        /// Total fuel (about one unit per wasm instruction) for the whole session [default: unlimited].
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "N"))]
        fuel: Option<u64> = "fuel", flag "fuel";
        /// Memory cap (e.g. 64MiB, or none): linear memory for wasm; for native, RLIMIT_DATA (heap
        /// and other writable memory, not address space V8, Go or the JVM only reserve)
        /// [default: 256MiB].
        #[serde(default, with = "size_cap")]
        #[cfg_attr(feature = "cli", arg(value_name = "SIZE", value_parser = Cap::size))]
        max_memory: Option<Cap> = "max-memory", flag "max-memory" => max_memory;
        /// Wall-clock deadline for the whole session (e.g. 2s, 500ms) [default: none].
        #[serde(default, with = "duration")]
        #[cfg_attr(feature = "cli", arg(value_name = "DURATION", value_parser = parse_duration))]
        timeout: Option<Duration> = "timeout", flag "timeout" => deadline;
        /// CPU time for a native plugin (RLIMIT_CPU, whole seconds rounded up, e.g. 30s); past it
        /// the kernel stops the plugin (exit status 121). Wasm plugins use --fuel [default: unlimited].
        #[serde(default, with = "duration")]
        #[cfg_attr(feature = "cli", arg(value_name = "DURATION", value_parser = parse_duration))]
        max_cpu_time: Option<Duration> = "max-cpu-time", flag "max-cpu-time" => max_cpu_time;
        /// Most files a plugin may have open at once, or none for sandpipe's own limit. Wasm: host
        /// descriptors the session holds (its --dir preopens plus what it opened); past it an open
        /// fails (p2 error-code quota, EDQUOT; p1 EMFILE) and the plugin runs on. Native:
        /// RLIMIT_NOFILE, stdio included (EMFILE) [default: 1024].
        #[serde(default, with = "count_cap")]
        #[cfg_attr(feature = "cli", arg(value_name = "N", value_parser = Cap::count))]
        max_open_files: Option<Cap> = "max-open-files", flag "max-open-files" => max_open_files;
        /// Native only: most processes and threads the plugin may have at once, or none. Past it
        /// fork and thread creation fail with EAGAIN (the plugin's cgroup pids.max); where no
        /// cgroup can be had, as the start-up line then says, the host watches the count and
        /// stops the plugin past it (status 137) [default: 512].
        #[serde(default, with = "count_cap")]
        #[cfg_attr(feature = "cli", arg(value_name = "N", value_parser = Cap::count))]
        max_processes: Option<Cap> = "max-processes", flag "max-processes" => max_processes;
        /// Bytes a wasm component may write to files through its --dir grants, in all (e.g.
        /// 100MiB); every write counts, an overwrite again. Past it a write fails with ENOSPC
        /// (insufficient-space) and the plugin runs on [default: none]. Not for native plugins.
        #[serde(default, with = "size")]
        #[cfg_attr(feature = "cli", arg(value_name = "SIZE", value_parser = parse_size))]
        max_disk_write: Option<u64> = "max-disk-write", flag "max-disk-write" => max_disk_write;
        /// Largest frame accepted in either direction (e.g. 16MiB) [default: 16MiB].
        #[serde(default, with = "size")]
        #[cfg_attr(feature = "cli", arg(value_name = "SIZE", value_parser = parse_size))]
        max_frame: Option<u64> = "max-frame", flag "max-frame";
        /// Largest recording --record writes, the network's exchanges and bodies included (e.g.
        /// 64MiB); a recording that would grow past it stops there with an error (exit status
        /// 125), never cut silently [default: 64MiB].
        #[serde(default, with = "size")]
        #[cfg_attr(feature = "cli", arg(value_name = "SIZE", value_parser = parse_size))]
        max_record: Option<u64> = "max-record", flag "max-record";
    }
}

impl Limits {
    /// The largest frame either way: `max_frame`, or [`DEFAULT_MAX_FRAME`].
    pub fn max_frame(&self) -> u64 {
        self.max_frame.unwrap_or(DEFAULT_MAX_FRAME)
    }

    /// The largest recording: `max_record`, or [`DEFAULT_MAX_RECORD`].
    pub fn max_record(&self) -> u64 {
        self.max_record.unwrap_or(DEFAULT_MAX_RECORD)
    }
}

/// The largest frame sandpipe accepts either way unless `max-frame` says otherwise: 16 MiB.
pub const DEFAULT_MAX_FRAME: u64 = 16 << 20;

/// The largest recording unless `max-record` says otherwise: 64 MiB, room for any test's
/// exchanges, small enough that a plugin downloading in a loop stops early.
pub const DEFAULT_MAX_RECORD: u64 = 64 << 20;

section! {
    /// `[grants]`, and the command line's grant flags.
    pub struct Grants in "grants" {
        /// Preopen a host directory: HOST[::GUEST][:ro]. GUEST defaults to HOST; `:ro` makes it
        /// read-only. Without --dir the plugin sees no filesystem.
        // In a file, also a table `{ host, guest, read-only }`.
        #[serde(default, deserialize_with = "dirs")]
        #[cfg_attr(feature = "cli", arg(value_name = "HOST[::GUEST][:ro]"))]
        dirs: Vec<Dir> = "dirs", flag "dir";
        /// Pass an environment variable: NAME=VALUE, or NAME to copy sandpipe's own value.
        /// Nothing else is inherited.
        // A resolved policy's document holds the names only.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "NAME[=VALUE]"))]
        env: Vec<String> = "env", flag "env";
        /// Strict imports: refuse a component importing anything not listed (repeatable;
        /// e.g. wasi:cli/stdin@0.2; patch versions are ignored).
        // Empty: every import is linked; the document writes it as `null`.
        #[serde(default, with = "imports")]
        #[cfg_attr(feature = "cli", arg(value_name = "INTERFACE"))]
        allow_imports: Vec<String> = "allow-imports", flag "allow-import";
        /// Native only: do not grant, read-only, what the plugin needs to start (its resolved
        /// executable, a script's interpreter, the interpreter's install prefix, a venv, script
        /// files named in its arguments); it then sees only the system directories and --dir.
        // In a file, `startup-grants = false`; the flag is `Some(false)`.
        #[serde(default)]
        #[cfg_attr(
            feature = "cli",
            arg(
                num_args = 0,
                default_missing_value = "true",
                value_parser = clap::builder::TypedValueParser::map(
                    clap::builder::FalseyValueParser::new(),
                    |off: bool| !off
                ),
            )
        )]
        startup_grants: Option<bool> = "startup-grants", flag "no-startup-grants" => startup_grants;
    }
}

section! {
    /// `[net]`, each entry as its command-line flag takes it (the field docs are the flags'
    /// `--help`).
    pub struct Net in "net" {
        /// Allow connections to HOST[:PORT] (repeatable, or comma-separated): a name, a wildcard
        /// (*.example.com), an IP address ([::1]:8080) or a range (10.0.0.0/8). sandpipe resolves
        /// names itself; a name resolving to a loopback, private or link-local address is refused
        /// unless a rule names that address. Without it the plugin has no network at all. Native
        /// plugins reach allowed hosts through sandpipe's proxy (HTTP_PROXY, ALL_PROXY).
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "HOST[:PORT]", value_delimiter = ','))]
        allow: Vec<String> = "allow", flag "allow-net";
        /// Resolve NAME to these addresses without DNS, as curl's --resolve (repeatable):
        /// NAME=ADDR[,ADDR...]. The name must still be allowed by --allow-net.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "NAME=ADDR[,ADDR]"))]
        resolve: Vec<String> = "resolve", flag "resolve";
        /// Add a header to every wasi:http request a wasm plugin sends to HOST, its value read
        /// from sandpipe's own environment: HOST:NAME=env:VAR (repeatable). The plugin never sees it.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "HOST:NAME=env:VAR"))]
        http_headers: Vec<String> = "http-headers", flag "http-header";
        /// Native plugins: terminate TLS in their proxy tunnels with a CA made for the session,
        /// so that their HTTPS requests are recorded and replayed like wasi:http requests and get
        /// --http-header. The plugin is told to trust the CA (SSL_CERT_FILE, REQUESTS_CA_BUNDLE,
        /// NODE_EXTRA_CA_CERTS, DENO_CERT, CURL_CA_BUNDLE); sandpipe verifies each server itself
        /// (webpki roots and its own SSL_CERT_FILE). A plugin that pins certificates refuses it.
        #[serde(default)]
        tls_intercept: bool = "tls-intercept", flag "tls-intercept";
    }
}

section! {
    /// `[requests]`: per-request budgets and instance renewal (`run --protocol` only), and their
    /// flags.
    pub struct Requests in "requests" {
        /// Fuel for each request instead of the whole session (wasm only). Re-armed when a request
        /// (a JSON-RPC id, an ATP run, an oracle invoke) reaches the plugin; idle time is not billed.
        // Resolved, it is the policy's fuel (`Fuel::PerRequest`), its one home.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "N", conflicts_with = "fuel"))]
        fuel: Option<u64> = "fuel", flag "fuel-per-request";
        /// Wall-clock limit from a request reaching a started plugin to its response (e.g. 2s);
        /// neither start-up nor the time between requests is counted. A request that runs over
        /// gets the protocol's error at once. MCP: the server is sent notifications/cancelled and
        /// keeps serving; only if it then stays deaf for --recycle-grace is it replaced, with or
        /// without --restart. Other protocols: the plugin is stopped. For a component that exports
        /// functions, each call's deadline inside the instance.
        #[serde(default, with = "duration")]
        #[cfg_attr(feature = "cli", arg(value_name = "DURATION", value_parser = parse_duration))]
        timeout: Option<Duration> = "timeout", flag "request-timeout";
        /// How long a fresh instance gets to answer its handshake (MCP: initialize or
        /// server/discover, or the discover sandpipe sends before a 2026-07-28 client's first
        /// request), from when it was sent. Start-up is bounded by this, never billed to a request
        /// [default: 60s].
        #[serde(default, with = "duration")]
        #[cfg_attr(feature = "cli", arg(value_name = "DURATION", value_parser = parse_duration))]
        start_timeout: Option<Duration> = "start-timeout", flag "start-timeout";
        /// After a request's budget stops the plugin (or it dies), give the next request a fresh
        /// instance, replaying the protocol's handshake to it, instead of ending the session (for a
        /// component that exports functions: instead of poisoning it, where every later request
        /// fails with the first stop's reason, as in Scarb).
        #[serde(default)]
        restart: bool = "restart", flag "restart";
        /// Replace the plugin with a fresh instance, between requests, after N answered requests.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "N"))]
        recycle_after: Option<u64> = "recycle-after", flag "recycle-after";
        /// Replace the plugin with a fresh instance, between requests, once it holds more than
        /// SIZE of memory (wasm: linear memory; native: resident set), e.g. 64MiB. auto (wasm with
        /// a --max-memory): once it has used half of its headroom below the cap, measured from its
        /// size after the first request (linear memory never shrinks, so a heap that grows per
        /// request would otherwise meet the cap mid-request). none: never [default: auto].
        #[serde(default, with = "recycle_memory")]
        #[cfg_attr(feature = "cli", arg(value_name = "SIZE|auto|none", value_parser = <RecycleMemory as FromStr>::from_str))]
        recycle_memory: Option<RecycleMemory> = "recycle-memory", flag "recycle-memory";
        /// How long a recycled instance gets to exit after its stdin closes, and how long an MCP
        /// server gets to answer sandpipe's probe after a request was cancelled for its timeout
        /// [default: 2s].
        #[serde(default, with = "duration")]
        #[cfg_attr(feature = "cli", arg(value_name = "DURATION", value_parser = parse_duration))]
        recycle_grace: Option<Duration> = "recycle-grace", flag "recycle-grace";
    }
}

/// Whether `limits` and `requests` set a fuel budget (`fuel`, `[requests] fuel`): a run that
/// does needs the engine with fuel metering, which costs a guest about a fifth of its speed in
/// every loop, so every other run gets the engine without (`run`, `serve`, the artifact
/// `sandpipe image` stores).
pub fn meters_fuel(limits: &Limits, requests: &Requests) -> bool {
    limits.fuel.is_some() || requests.fuel.is_some()
}

/// `--start-timeout`'s default, which its `--help` names.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// `--recycle-grace`'s default, which its `--help` names.
pub const DEFAULT_RECYCLE_GRACE: Duration = Duration::from_secs(2);

impl Requests {
    /// Whether any per-request budget is set.
    pub fn is_empty(&self) -> bool {
        *self == Requests::default()
    }

    /// These budgets with every default filled in (what a resolved policy holds), and without
    /// `fuel`, whose resolved home is [`Policy::fuel`].
    pub fn resolved(&self) -> Requests {
        Requests {
            fuel: None,
            start_timeout: self.start_timeout.or(Some(DEFAULT_START_TIMEOUT)),
            recycle_memory: self.recycle_memory.or(Some(RecycleMemory::Auto)),
            recycle_grace: self.recycle_grace.or(Some(DEFAULT_RECYCLE_GRACE)),
            ..self.clone()
        }
    }
}

section! {
    /// `[tools]`: MCP tool filters, and `--allow-tool` and `--deny-tool`.
    pub struct Tools in "tools" {
        /// MCP: only this tool is listed and callable (repeat for more; default: every tool).
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "NAME"))]
        allow: Vec<String> = "allow", flag "allow-tool";
        /// MCP: this tool is taken out of tools/list and a tools/call of it is refused as if the
        /// server did not have it (repeatable).
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "NAME"))]
        deny: Vec<String> = "deny", flag "deny-tool";
    }
}

section! {
    /// `[serve]`: `sandpipe serve`'s endpoint (who gets in, its limits, its instances' lives),
    /// and its flags. Not part of an instance's policy: each instance gets the other sections.
    pub struct Serve in "serve" {
        /// Address and port to listen on, e.g. 127.0.0.1:8080 (port 0: any free port, printed on
        /// the start-up line). An address that is not loopback needs --auth-token-file or --jwks
        /// [default: 127.0.0.1:8080].
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "ADDR:PORT"))]
        listen: Option<std::net::SocketAddr> = "listen", flag "listen";
        /// Bearer tokens: a file of `PRINCIPAL TOKEN` lines (`#` comments). A request without one of
        /// them gets 401; the token never reaches the server. Without it every client is
        /// `anonymous` and only a loopback address is served.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "FILE"))]
        auth_token_file: Option<PathBuf> = "auth-token-file", flag "auth-token-file";
        /// JWT access tokens (OAuth 2.1, the MCP spec's resource-server profile): the issuer's
        /// public keys, a JWK Set file (JSON; re-read when a token names a key it lacks). A request
        /// needs `Authorization: Bearer JWT` signed by one of them, from --jwt-issuer, naming
        /// --resource in `aud`, not expired; its principal is `sub`. Not with --auth-token-file.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "FILE"))]
        jwks: Option<PathBuf> = "jwks", flag "jwks";
        /// The issuer (`iss`) whose tokens --jwks accepts; published as the authorization server
        /// at /.well-known/oauth-protected-resource (RFC 9728).
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "URL"))]
        jwt_issuer: Option<String> = "jwt-issuer", flag "jwt-issuer";
        /// This endpoint's URL as clients reach it (e.g. https://mcp.example.com/mcp behind a TLS
        /// proxy): the audience a token must name (RFC 8707) and the metadata's `resource`
        /// [default on loopback: http://ADDR:PORT/mcp; needed elsewhere].
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "URL"))]
        resource: Option<String> = "resource", flag "resource";
        /// Another Host name the endpoint answers to (NAME or NAME:PORT; repeatable, or
        /// comma-separated). Requests with any other Host get 403 (DNS rebinding) [default: the
        /// listening address, and localhost on loopback].
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "NAME[:PORT]", value_delimiter = ','))]
        allow_hosts: Vec<String> = "allow-hosts", flag "allow-host";
        /// Another Origin allowed (scheme://host[:port]; repeatable, or comma-separated). A
        /// request with any other Origin gets 403; one without Origin (not a browser) passes.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "ORIGIN", value_delimiter = ','))]
        allow_origins: Vec<String> = "allow-origins", flag "allow-origin";
        /// Largest request body (e.g. 1MiB); past it 413, and nothing reaches a server
        /// [default: 4MiB].
        #[serde(default, with = "size")]
        #[cfg_attr(feature = "cli", arg(value_name = "SIZE", value_parser = parse_size))]
        max_body: Option<u64> = "max-body", flag "max-body";
        /// Requests per minute per principal (a burst of as many, refilled evenly); past it 429 with
        /// Retry-After [default: unlimited].
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "N"))]
        rate_limit: Option<u32> = "rate-limit", flag "rate-limit";
        /// Instances a principal may hold at once (its 2025 sessions and its 2026-07-28 instances);
        /// past it 429 [default: 16].
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "N"))]
        max_instances: Option<usize> = "max-instances", flag "max-instances";
        /// Serve every client's 2026-07-28 requests with one shared instance, for a server that
        /// keeps no state between requests (ids are still each client's own; state a server
        /// does keep is then seen by all). 2025 sessions keep an instance each. Default: an
        /// instance per principal (per connection without auth).
        #[serde(default)]
        share: bool = "share", flag "share";
        /// End an instance after this long without a request (e.g. 5m), open streams or not; a
        /// request in flight keeps it [default: 5m].
        #[serde(default, with = "duration")]
        #[cfg_attr(feature = "cli", arg(value_name = "DURATION", value_parser = parse_duration))]
        idle_timeout: Option<Duration> = "idle-timeout", flag "idle-timeout";
        /// Close a connection whose request head (the request line and headers) has not all
        /// arrived this long after the endpoint began waiting for it (e.g. 10s), so a client
        /// that sends half a head holds nothing; a kept-alive connection idle this long between
        /// requests is closed too. A request being answered is not timed [default: 10s].
        #[serde(default, with = "duration")]
        #[cfg_attr(feature = "cli", arg(value_name = "DURATION", value_parser = parse_duration))]
        header_timeout: Option<Duration> = "header-timeout", flag "header-timeout";
        /// Keep N instances started for nobody: a new client's first request (a 2025
        /// `initialize`, a principal's first 2026-07-28 request) takes one rather than waiting
        /// for a server to start, and another starts in its place. Each costs what an idle
        /// instance costs (a native server's process). Not with [principals.NAME.tools]
        /// [default: 0].
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "N"))]
        warm: Option<usize> = "warm", flag "warm";
        /// Record each instance (every frame both ways, the policy, the outcome) as
        /// DIR/instance-N.transcript, for `sandpipe replay`.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "DIR"))]
        record_dir: Option<PathBuf> = "record-dir", flag "record-dir";
    }
}

impl Tools {
    /// True when a tool is named.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// The filter these lists say.
    pub fn filter(&self) -> sandpipe_proto::mcp::ToolFilter {
        sandpipe_proto::mcp::ToolFilter {
            allow: self.allow.clone(),
            deny: self.deny.clone(),
        }
    }
}

section! {
    /// `[trust]`: where an `oci://` plugin may come from, and its flags (`run`, `call`,
    /// `inspect`, `replay`, `pull`, `compile`). Not in a policy's document: it decides which
    /// file runs, and a recording names that file by its sha256.
    pub struct Trust in "trust" {
        /// Accept signatures by this minisign public key (repeatable). With a key given, a
        /// signature that does not verify is refused.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "FILE"))]
        trusted_keys: Vec<PathBuf> = "trusted-keys", flag "trusted-key";
        /// Refuse an oci:// plugin that is not signed by a --trusted-key.
        #[serde(default)]
        require_signature: bool = "require-signature", flag "require-signature";
        /// Record each oci:// reference's manifest digest, layer digest, size and signer in FILE
        /// (TOML); with --locked or --offline, read them from it.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "FILE"))]
        lockfile: Option<PathBuf> = "lockfile", flag "lockfile";
        /// Refuse a reference that is not in --lockfile, or whose tag now names another manifest.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(requires = "lockfile"))]
        locked: bool = "locked", flag "locked";
        /// Resolve oci:// references from the local store only (they must be pinned by @sha256 or
        /// --lockfile).
        #[serde(default)]
        offline: bool = "offline", flag "offline";
        /// Speak plain HTTP to this registry (HOST[:PORT]; repeatable). Loopback registries always
        /// use plain HTTP, others HTTPS.
        #[serde(default)]
        #[cfg_attr(feature = "cli", arg(value_name = "HOST"))]
        insecure_registries: Vec<String> = "insecure-registries", flag "insecure-registry";
    }
}

/// Every section's keys, in the document's order: what `inspect`'s sources list and the
/// round-trip tests walk.
pub fn all_keys() -> impl Iterator<Item = &'static Key> {
    Limits::KEYS
        .iter()
        .chain(Grants::KEYS)
        .chain(Net::KEYS)
        .chain(Requests::KEYS)
        .chain(Tools::KEYS)
}

/// `--recycle-memory` and `requests.recycle-memory`: `auto`, `none`, or a size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecycleMemory {
    /// Half the headroom below the memory cap (wasm with a cap).
    Auto,
    /// Never for memory.
    Never,
    /// Above this many bytes.
    Above(u64),
}

impl FromStr for RecycleMemory {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(RecycleMemory::Auto),
            "none" | "never" => Ok(RecycleMemory::Never),
            _ => parse_size(s).map(RecycleMemory::Above),
        }
    }
}

/// A size cap: written as a number, `null` for none; read as a number, text its flag takes
/// (`"64MiB"`, `"none"`), or `null`.
mod size_cap {
    use super::*;

    pub(super) fn serialize<S: Serializer>(v: &Option<Cap>, s: S) -> Result<S::Ok, S::Error> {
        v.and_then(|c| c.0).serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cap>, D::Error> {
        match Option::<Quantity>::deserialize(d)? {
            None => Ok(Some(Cap(None))),
            Some(q) => q
                .parse(Cap::size, |n| Cap(Some(n)))
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A count cap, as [`size_cap`] with counts (`64`, `"none"`).
mod count_cap {
    use super::*;

    pub(super) use super::size_cap::serialize;

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cap>, D::Error> {
        match Option::<Quantity>::deserialize(d)? {
            None => Ok(Some(Cap(None))),
            Some(q) => q
                .parse(Cap::count, |n| Cap(Some(n)))
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A size: a number, or text (`"64MiB"`); `null` for unset.
mod size {
    use super::*;

    pub(super) fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Option::<Quantity>::deserialize(d)?
            .map(|q| q.parse(parse_size, |n| n).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// A duration as humantime text (`30s`, `1m 30s`); `null` for none.
mod duration {
    use super::*;

    pub(super) fn serialize<S: Serializer>(v: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|t| parse_duration(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// `auto`, `none`, or a size (a number of bytes when written).
mod recycle_memory {
    use super::*;

    pub(super) fn serialize<S: Serializer>(
        v: &Option<RecycleMemory>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(RecycleMemory::Auto) => s.serialize_str("auto"),
            Some(RecycleMemory::Never) => s.serialize_str("none"),
            Some(RecycleMemory::Above(n)) => s.serialize_u64(*n),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<RecycleMemory>, D::Error> {
        Option::<Quantity>::deserialize(d)?
            .map(|q| {
                q.parse(RecycleMemory::from_str, RecycleMemory::Above)
                    .map_err(serde::de::Error::custom)
            })
            .transpose()
    }
}

/// Strict imports: a list; the document writes none as `null`.
mod imports {
    use super::*;

    pub(super) fn serialize<S: Serializer>(v: &[String], s: S) -> Result<S::Ok, S::Error> {
        if v.is_empty() {
            s.serialize_none()
        } else {
            v.serialize(s)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
    }
}

fn dirs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Dir>, D::Error> {
    /// A directory: `--dir`'s spec, or a table.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum DirGrant {
        Spec(String),
        Table(DirTable),
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "kebab-case")]
    struct DirTable {
        host: String,
        guest: Option<String>,
        #[serde(default)]
        read_only: bool,
    }
    Vec::<DirGrant>::deserialize(d)?
        .into_iter()
        .map(|g| match g {
            DirGrant::Spec(spec) => spec.parse::<Dir>(),
            DirGrant::Table(t) => Ok(Dir {
                guest: t.guest.unwrap_or_else(|| t.host.clone()),
                host: t.host.into(),
                read_only: t.read_only,
            }),
        })
        .collect::<Result<_, _>>()
        .map_err(serde::de::Error::custom)
}

/// One preopened directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub struct Dir {
    /// The directory on the host.
    pub host: PathBuf,
    /// Where the plugin sees it.
    pub guest: String,
    /// Whether writes are refused.
    #[serde(default)]
    pub read_only: bool,
}

/// `HOST[::GUEST][:ro|:rw]`, as `--dir` and a policy file's `grants.dirs` take it: the guest
/// path defaults to the host path as written, and access to read-write.
impl std::str::FromStr for Dir {
    type Err = String;
    fn from_str(spec: &str) -> Result<Dir, String> {
        let (rest, read_only) = if let Some(r) = spec.strip_suffix(":ro") {
            (r, true)
        } else if let Some(r) = spec.strip_suffix(":rw") {
            (r, false)
        } else {
            (spec, false)
        };
        let (host, guest) = rest.split_once("::").unwrap_or((rest, rest));
        if host.is_empty() || guest.is_empty() {
            return Err(format!(
                "invalid --dir {spec:?}: expected HOST[::GUEST][:ro]"
            ));
        }
        Ok(Dir {
            host: PathBuf::from(host),
            guest: guest.to_owned(),
            read_only,
        })
    }
}

/// As `--dir` takes it: `HOST[::GUEST][:ro]`.
impl std::fmt::Display for Dir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.host.display())?;
        if self.host.to_str() != Some(self.guest.as_str()) {
            write!(f, "::{}", self.guest)?;
        }
        if self.read_only {
            f.write_str(":ro")?;
        }
        Ok(())
    }
}
