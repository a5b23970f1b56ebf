//! Write an Orchard provider: implement [`Provider`], call [`run`].
//!
//! ```text
//!   args[0] == "schema" ──► print_schema ──► one JSON line on stdout, return (exit 0)
//!   otherwise: stdin ──► Server (sandpipe-proto) ──► Provider::{schema, configure, execute}
//!                                  │                     │
//!   stdout ◄── one frame per answer, flushed ◄───────────┘   until `shutdown` or EOF
//! ```
//!
//! The loop answers `describe` from [`Provider::schema`] (computed once), answers `execute`
//! of an action missing from the schema with `unknown_action` without calling the provider,
//! and answers malformed requests and unknown methods itself: a line that is not JSON gets
//! `invalid_request`, and the next line is served as usual. A line the framer rejects (over
//! the size limit) is answered with `invalid_request` and ends the loop with the
//! [`GuestError::Frame`], since the stream cannot be resynchronised. Diagnostics go to stderr.
//!
//! **Deferred answers.** A provider that processes sequentially always answers in order. To
//! let tests show a host coping with answers out of order, [`Provider::defer`] may hold an
//! execute back: it runs, and is answered, right after the next request that is answered
//! normally (several held executes run in arrival order). Held executes also run before
//! `shutdown` is answered and when stdin closes, so none is lost.
//!
//! ```no_run
//! use sandpipe_guest::orchard::{Provider, ProviderError, ProviderSchema, Value, run};
//! use sandpipe_guest::{Framing, Stdio};
//!
//! struct Hello;
//! impl Provider for Hello {
//!     fn schema(&self) -> ProviderSchema {
//!         ProviderSchema::new("hello")
//!     }
//!     fn execute(&mut self, _action: &str, attrs: Value) -> Result<Value, ProviderError> {
//!         Ok(attrs)
//!     }
//! }
//!
//! let args: Vec<String> = std::env::args().skip(1).collect();
//! run(&mut Stdio::new(Framing::JsonLines), &mut Hello, &args).unwrap();
//! ```

use std::io::Write;

use sandpipe_proto::jsonrpc::{Id, ProtocolError};
pub use sandpipe_proto::orchard::{
    ActionSchema, AttributeSchema, ProviderError, ProviderSchema, SCHEMA_SUBCOMMAND, Value, codes,
};
use sandpipe_proto::orchard::{Server, ServerEvent, encode_schema_output};

use crate::{Framed, GuestError};

/// An Orchard provider.
pub trait Provider {
    /// What the provider offers; asked once per run.
    fn schema(&self) -> ProviderSchema;

    /// Accept or refuse the config (refuse with [`ProviderError::configure_failed`]). The
    /// default accepts anything.
    fn configure(&mut self, config: Value) -> Result<(), ProviderError> {
        let _ = config;
        Ok(())
    }

    /// Run `action` (always one of the schema's) with `attrs`; `Ok` carries the `outputs`.
    fn execute(&mut self, action: &str, attrs: Value) -> Result<Value, ProviderError>;

    /// Hold this execute back until the next request has been answered (see the module docs).
    /// The default never defers.
    fn defer(&self, action: &str, attrs: &Value) -> bool {
        let _ = (action, attrs);
        false
    }
}

/// The whole provider: `args == ["schema", ..]` prints the schema (plan mode), anything else
/// serves the RPC loop on `io`.
pub fn run<R: crate::Input, W: Write, P: Provider>(
    io: &mut Framed<R, W>,
    provider: &mut P,
    args: &[String],
) -> Result<(), GuestError> {
    if args.first().map(String::as_str) == Some(SCHEMA_SUBCOMMAND) {
        return print_schema(io.writer(), &provider.schema());
    }
    serve(io, provider)
}

/// Plan mode: write the schema as one JSON line and flush.
pub fn print_schema<W: Write>(out: &mut W, schema: &ProviderSchema) -> Result<(), GuestError> {
    out.write_all(&encode_schema_output(schema))?;
    out.flush()?;
    Ok(())
}

/// Answer requests until `shutdown` has been answered or stdin closes.
pub fn serve<R: crate::Input, W: Write, P: Provider>(
    io: &mut Framed<R, W>,
    provider: &mut P,
) -> Result<(), GuestError> {
    let schema = provider.schema();
    let mut server = Server::new();
    let mut held: Vec<(Id, String, Value)> = Vec::new();
    loop {
        let frame = match io.recv() {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(GuestError::Frame(e)) => {
                // The framer cannot resynchronise: say why, then stop.
                server.reject_frame(&e.to_string());
                while let Some(out) = server.poll_transmit() {
                    io.send(&out)?;
                }
                return Err(GuestError::Frame(e));
            }
            Err(e) => return Err(e),
        };
        if let Err(e) = server.handle_frame(&frame) {
            eprintln!("orchard provider: {e}");
        }
        while let Some(event) = server.poll_event() {
            let answered = match event {
                ServerEvent::Describe { id } => server.respond_describe(id, &schema),
                ServerEvent::Configure { id, config } => {
                    server.respond_configure(id, provider.configure(config))
                }
                ServerEvent::Execute { id, action, attrs } => {
                    if !schema.actions.contains_key(&action) {
                        let error = ProviderError::new(
                            codes::UNKNOWN_ACTION,
                            format!("unknown action: {action}"),
                        );
                        server.respond_execute(id, Err(error))
                    } else if provider.defer(&action, &attrs) {
                        held.push((id, action, attrs));
                        Ok(())
                    } else {
                        let result = provider.execute(&action, attrs);
                        server.respond_execute(id, result)
                    }
                }
                ServerEvent::Shutdown { id } => {
                    run_held(&mut server, provider, &mut held);
                    server.respond_shutdown(id)
                }
                _ => Ok(()),
            };
            log(answered);
        }
        let mut sent_any = false;
        while let Some(out) = server.poll_transmit() {
            io.send(&out)?;
            sent_any = true;
        }
        if sent_any && !held.is_empty() {
            run_held(&mut server, provider, &mut held);
            while let Some(out) = server.poll_transmit() {
                io.send(&out)?;
            }
        }
        if server.is_shut_down() {
            return Ok(());
        }
    }
    // stdin closed: answer what is held, in case the host still reads.
    run_held(&mut server, provider, &mut held);
    while let Some(out) = server.poll_transmit() {
        io.send(&out)?;
    }
    Ok(())
}

fn run_held<P: Provider>(
    server: &mut Server,
    provider: &mut P,
    held: &mut Vec<(Id, String, Value)>,
) {
    for (id, action, attrs) in held.drain(..) {
        let result = provider.execute(&action, attrs);
        log(server.respond_execute(id, result));
    }
}

fn log(result: Result<(), ProtocolError>) {
    // Ids come from the server's own events, so this only reports a bug in this loop.
    if let Err(e) = result {
        eprintln!("orchard provider: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use sandpipe_proto::orchard::parse_schema_output;

    use super::*;
    use crate::{FrameLimits, Framing};

    /// Echoes attrs; defers when `attrs.defer` is true; refuses every config.
    struct Probe;

    impl Provider for Probe {
        fn schema(&self) -> ProviderSchema {
            ProviderSchema::new("probe").with_action("echo", ActionSchema::new("echo"))
        }
        fn configure(&mut self, _config: Value) -> Result<(), ProviderError> {
            Err(ProviderError::configure_failed("no"))
        }
        fn execute(&mut self, _action: &str, attrs: Value) -> Result<Value, ProviderError> {
            Ok(attrs)
        }
        fn defer(&self, _action: &str, attrs: &Value) -> bool {
            attrs.get("defer").is_some()
        }
    }

    /// Run the provider over `input` (frames joined by newlines) and return its output lines.
    fn run_with(input: &str, args: &[&str]) -> Vec<String> {
        let mut io = Framed::from_parts(
            Cursor::new(format!("{input}\n").into_bytes()),
            Vec::new(),
            Framing::JsonLines,
            FrameLimits::default(),
        );
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        run(&mut io, &mut Probe, &args).expect("clean end");
        String::from_utf8(io.writer().clone())
            .expect("utf8")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn answers_each_method_and_stops_at_shutdown() {
        let input = [
            r#"{"id":1,"method":"describe"}"#,
            r#"{"id":2,"method":"configure","params":{"config":{}}}"#,
            r#"{"id":3,"method":"execute","params":{"action":"nope"}}"#,
            r#"{"id":4,"method":"execute","params":{"action":"echo","attrs":{"a":1}}}"#,
            r#"{"id":5,"method":"shutdown"}"#,
            r#"{"id":6,"method":"describe"}"#,
        ]
        .join("\n");
        assert_eq!(
            run_with(&input, &[]),
            [
                r#"{"id":1,"result":{"schema":{"name":"probe","protocol":"1","actions":{"echo":{"description":"echo"}}}}}"#,
                r#"{"id":2,"error":{"code":"configure_failed","message":"no"}}"#,
                r#"{"id":3,"error":{"code":"unknown_action","message":"unknown action: nope"}}"#,
                r#"{"id":4,"result":{"outputs":{"a":1}}}"#,
                r#"{"id":5,"result":{}}"#,
            ]
        );
    }

    #[test]
    fn deferred_executes_follow_the_next_answer_or_eof() {
        // (input frames, the ids of the answers in order)
        let cases: &[(&[&str], &[u32])] = &[
            (
                &[
                    r#"{"id":1,"method":"execute","params":{"action":"echo","attrs":{"defer":1}}}"#,
                    r#"{"id":2,"method":"execute","params":{"action":"echo","attrs":{"defer":2}}}"#,
                    r#"{"id":3,"method":"execute","params":{"action":"echo"}}"#,
                ],
                &[3, 1, 2],
            ),
            (
                &[r#"{"id":1,"method":"execute","params":{"action":"echo","attrs":{"defer":1}}}"#],
                &[1],
            ),
            (
                &[
                    r#"{"id":1,"method":"execute","params":{"action":"echo","attrs":{"defer":1}}}"#,
                    r#"{"id":2,"method":"shutdown"}"#,
                ],
                &[1, 2],
            ),
        ];
        for (frames, ids) in cases {
            let got: Vec<u32> = run_with(&frames.join("\n"), &[])
                .iter()
                .map(|line| {
                    let v: Value =
                        sandpipe_proto::orchard::serde_json::from_str(line).expect("json");
                    v["id"].as_u64().expect("id") as u32
                })
                .collect();
            assert_eq!(&got, ids, "{frames:?}");
        }
    }

    #[test]
    fn schema_subcommand_prints_one_line_and_ignores_stdin() {
        let out = run_with(r#"{"id":1,"method":"describe"}"#, &["schema"]);
        assert_eq!(out.len(), 1);
        let schema = parse_schema_output(out[0].as_bytes()).expect("valid");
        assert_eq!(schema.name, "probe");
    }
}
