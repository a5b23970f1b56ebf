//! Arcaflow (ATP) plugins: implement [`Plugin`], call [`serve`] with framed stdio
//! ([`Framing::CborSeq`](crate::Framing::CborSeq)).
//!
//! A wasm guest has one thread, so runs are served one frame at a time, yet several runs can
//! be in flight: a handler returns [`Progress::Pending`] to keep a run open and finishes it
//! later from [`Plugin::signal`] or [`Plugin::poll`]. The order is deterministic:
//!
//! ```text
//!   frame from the host ──► AtpServer ──► events, in order:
//!        work start ──► Plugin::start(run, step, config)   ─┐
//!        signal     ──► Plugin::signal(run, id, data)       ├─► Progress: Pending | Done | Failed
//!   then, for every run that was pending BEFORE this frame, ─┘   (signals the run queued go
//!        in start order ──► Plugin::poll(run)                      out first, then its result)
//!   then every queued frame is written and flushed; the loop ends when the server is finished
//!   (v3: client done and no run in flight; v1: the output is sent) or stdin closes.
//! ```
//!
//! A signal for a run that is not in flight is reported on stderr and ignored; any other
//! frame the protocol refuses ends the loop with [`GuestError::Io`] of kind `InvalidData`.
//! [`Progress::Failed`] becomes an ATP error message (step fatal, not server fatal); v1 has no
//! error message, so there it ends the loop with an error (the plugin exits non-zero, as the
//! v1 text asks). A run still pending when stdin closes is dropped.
//!
//! ```
//! use sandpipe_guest::atp::{serve, Output, Plugin, Progress, Run, Value, Version};
//! use sandpipe_guest::proto::atp::{AtpClient, ClientEvent};
//! use sandpipe_guest::{FrameLimits, Framed, Framing};
//!
//! struct Echo;
//! impl Plugin for Echo {
//!     fn start(&mut self, _run: &mut Run<'_>, _step: &str, config: Value) -> Progress {
//!         Progress::Done(Output::new("success", config))
//!     }
//! }
//! let schema = Value::Map(vec![("steps".into(), Value::Map(vec![("echo".into(), Value::Null)]))]);
//! let mut host = AtpClient::new();
//! let input = host.poll_transmit().unwrap(); // the start item
//! let mut out = Vec::new();
//! let mut io = Framed::from_parts(&input[..], &mut out, Framing::CborSeq, FrameLimits::default());
//! serve(&mut io, &mut Echo, Version::V3, schema).unwrap(); // hello, then stdin ends
//! drop(io);
//! host.handle_frame(&out).unwrap();
//! assert!(matches!(host.poll_event(), Some(ClientEvent::Hello(_))));
//! ```

use std::io::{self, Write};

use sandpipe_proto::atp::{AtpError, AtpServer, ServerEvent};
pub use sandpipe_proto::atp::{Output, Value, Version};

use crate::{Framed, GuestError};

/// What a run did in one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Still running: keep it in flight.
    Pending,
    /// Finished with one of its declared outputs (a declared error output too).
    Done(Output),
    /// Failed outside its declared outputs.
    Failed(String),
}

/// The run a handler call is about; signals queued here go out before the call's result.
#[derive(Debug)]
pub struct Run<'a> {
    id: &'a str,
    signals: Vec<(String, Value)>,
}

impl Run<'_> {
    /// The run id (`""` under v1).
    pub fn id(&self) -> &str {
        self.id
    }

    /// Send a signal from this run to the host (v3 only; under v1 the loop fails).
    pub fn signal(&mut self, signal_id: &str, data: Value) {
        self.signals.push((signal_id.to_owned(), data));
    }
}

/// An ATP plugin: its steps' behaviour. The schema is given to [`serve`].
pub trait Plugin {
    /// A run of `step_id` starts (the step is one the schema declares).
    fn start(&mut self, run: &mut Run<'_>, step_id: &str, config: Value) -> Progress;

    /// A signal for a pending run. By default signals are ignored.
    fn signal(&mut self, run: &mut Run<'_>, signal_id: &str, data: Value) -> Progress {
        let _ = (run, signal_id, data);
        Progress::Pending
    }

    /// Called for every run that was pending before the frame just handled, in start order.
    fn poll(&mut self, run: &mut Run<'_>) -> Progress {
        let _ = run;
        Progress::Pending
    }
}

/// Serve `plugin` over `io` as ATP `version` with `schema` (a map with a `steps` member):
/// wait for the start item, send hello, then run steps until the session ends (see the module
/// docs for the order of calls).
pub fn serve<R: crate::Input, W: Write, P: Plugin + ?Sized>(
    io: &mut Framed<R, W>,
    plugin: &mut P,
    version: Version,
    schema: Value,
) -> Result<(), GuestError> {
    let mut server = AtpServer::new(version, schema);
    // Pending runs in start order.
    let mut pending: Vec<String> = Vec::new();
    while let Some(frame) = io.recv()? {
        let before = pending.clone();
        match server.handle_frame(&frame) {
            Ok(()) => {}
            Err(e @ AtpError::UnknownRun { .. }) => eprintln!("atp: ignoring a frame: {e}"),
            Err(e) => return Err(protocol_error(e)),
        }
        while let Some(event) = server.poll_event() {
            match event {
                ServerEvent::WorkStart {
                    run_id,
                    step_id,
                    config,
                } => {
                    let mut run = new_run(&run_id);
                    let progress = plugin.start(&mut run, &step_id, config);
                    let signals = run.signals;
                    settle(&mut server, &mut pending, &run_id, signals, progress)?;
                }
                ServerEvent::Signal {
                    run_id,
                    signal_id,
                    data,
                } => {
                    let mut run = new_run(&run_id);
                    let progress = plugin.signal(&mut run, &signal_id, data);
                    let signals = run.signals;
                    settle(&mut server, &mut pending, &run_id, signals, progress)?;
                }
                _ => {}
            }
        }
        for run_id in before {
            if pending.contains(&run_id) {
                let mut run = new_run(&run_id);
                let progress = plugin.poll(&mut run);
                let signals = run.signals;
                settle(&mut server, &mut pending, &run_id, signals, progress)?;
            }
        }
        while let Some(out) = server.poll_transmit() {
            io.send(&out)?;
        }
        if server.is_finished() {
            return Ok(());
        }
    }
    Ok(())
}

fn new_run(id: &str) -> Run<'_> {
    Run {
        id,
        signals: Vec::new(),
    }
}

/// Queue a run's signals and result, and keep `pending` in step.
fn settle(
    server: &mut AtpServer,
    pending: &mut Vec<String>,
    run_id: &str,
    signals: Vec<(String, Value)>,
    progress: Progress,
) -> Result<(), GuestError> {
    for (signal_id, data) in signals {
        server
            .signal(run_id, &signal_id, data)
            .map_err(protocol_error)?;
    }
    match progress {
        Progress::Pending => {
            if !pending.iter().any(|r| r == run_id) {
                pending.push(run_id.to_owned());
            }
            return Ok(());
        }
        Progress::Done(output) => server
            .work_done(
                run_id,
                &output.output_id,
                output.output_data,
                &output.debug_logs,
            )
            .map_err(protocol_error)?,
        Progress::Failed(error) => match server.version() {
            Version::V3 => server
                .error(run_id, &error, true, false)
                .map_err(protocol_error)?,
            Version::V1 => return Err(GuestError::Io(io::Error::other(error))),
        },
    }
    pending.retain(|r| r != run_id);
    Ok(())
}

fn protocol_error(e: AtpError) -> GuestError {
    GuestError::Io(io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use sandpipe_proto::atp::{AtpClient, ClientEvent, Message, encode};
    use sandpipe_proto::frame::{FrameLimits, Framing};

    use super::*;

    /// `now` finishes at once, `later` on the next frame, `sig` on signal `go`, `bad` fails.
    struct Steps;

    impl Plugin for Steps {
        fn start(&mut self, run: &mut Run<'_>, step_id: &str, config: Value) -> Progress {
            match step_id {
                "now" => Progress::Done(Output::new("success", config)),
                "bad" => Progress::Failed("bad step".into()),
                "sig" => {
                    run.signal("waiting", Value::Null);
                    Progress::Pending
                }
                _ => Progress::Pending,
            }
        }

        fn signal(&mut self, _run: &mut Run<'_>, signal_id: &str, data: Value) -> Progress {
            if signal_id == "go" {
                Progress::Done(Output::new("success", data))
            } else {
                Progress::Pending
            }
        }

        fn poll(&mut self, run: &mut Run<'_>) -> Progress {
            if run.id().starts_with("later") {
                Progress::Done(Output::new("success", Value::Null))
            } else {
                Progress::Pending
            }
        }
    }

    fn schema() -> Value {
        let steps = ["now", "later", "sig", "bad"]
            .iter()
            .map(|s| (Value::Text((*s).into()), Value::Null))
            .collect();
        Value::Map(vec![(Value::Text("steps".into()), Value::Map(steps))])
    }

    /// Run the plugin on `input` frames; return its result and the frames it wrote.
    fn run(version: Version, input: &[Vec<u8>]) -> (Result<(), GuestError>, Vec<Vec<u8>>) {
        let bytes: Vec<u8> = input.concat();
        let mut out = Vec::new();
        let mut io = Framed::from_parts(
            &bytes[..],
            &mut out,
            Framing::CborSeq,
            FrameLimits::default(),
        );
        let result = serve(&mut io, &mut Steps, version, schema());
        let mut reader = Framed::from_parts(
            &out[..],
            io::sink(),
            Framing::CborSeq,
            FrameLimits::default(),
        );
        let frames = std::iter::from_fn(|| reader.recv().expect("frames"))
            .map(|f| f.to_vec())
            .collect();
        (result, frames)
    }

    fn start(run: &str, step: &str) -> Vec<u8> {
        Message::WorkStart {
            run_id: run.into(),
            step_id: step.into(),
            config: Value::Null,
        }
        .encode()
    }

    fn signal(run: &str, id: &str) -> Vec<u8> {
        Message::Signal {
            run_id: run.into(),
            signal_id: id.into(),
            data: Value::Text("d".into()),
        }
        .encode()
    }

    /// The v3 messages the plugin wrote, as (kind, run id); hello is (0, "").
    fn kinds(version: Version, input: &[Vec<u8>]) -> (Result<(), GuestError>, Vec<(u64, String)>) {
        let (result, frames) = run(version, input);
        let got = frames
            .iter()
            .map(|frame| match Message::decode(frame) {
                Ok(Message::WorkDone { run_id, .. }) => (2, run_id),
                Ok(Message::Signal { run_id, .. }) => (3, run_id),
                Ok(Message::Error { run_id, .. }) => (5, run_id),
                _ => (0, String::new()),
            })
            .collect();
        (result, got)
    }

    /// A case: name, frames the host sends, (kind, run id) the plugin writes.
    type Case = (&'static str, Vec<Vec<u8>>, Vec<(u64, &'static str)>);

    #[test]
    fn order_of_results() {
        let null = vec![0xf6];
        let done = Message::ClientDone.encode();
        let cases: Vec<Case> = vec![
            ("hello only", vec![null.clone()], vec![(0, "")]),
            (
                "immediate",
                vec![null.clone(), start("a", "now"), done.clone()],
                vec![(0, ""), (2, "a")],
            ),
            (
                "deferred finishes after the next frame",
                vec![
                    null.clone(),
                    start("later1", "later"),
                    start("b", "now"),
                    done.clone(),
                ],
                vec![(0, ""), (2, "b"), (2, "later1")],
            ),
            (
                "deferred finishes after client done",
                vec![null.clone(), start("later1", "later"), done.clone()],
                vec![(0, ""), (2, "later1")],
            ),
            (
                "signal in, signal out",
                vec![
                    null.clone(),
                    start("s", "sig"),
                    signal("s", "go"),
                    done.clone(),
                ],
                vec![(0, ""), (3, "s"), (2, "s")],
            ),
            (
                "unknown run signal is ignored",
                vec![
                    null.clone(),
                    signal("zz", "go"),
                    start("a", "now"),
                    done.clone(),
                ],
                vec![(0, ""), (2, "a")],
            ),
            (
                "failure is an error message",
                vec![null.clone(), start("x", "bad"), done.clone()],
                vec![(0, ""), (5, "x")],
            ),
            (
                "unknown step answered by the machine",
                vec![null.clone(), start("x", "nope"), done.clone()],
                vec![(0, ""), (5, "x")],
            ),
        ];
        for (name, input, want) in cases {
            let (result, got) = kinds(Version::V3, &input);
            assert!(result.is_ok(), "{name}: {result:?}");
            let want: Vec<(u64, String)> = want.into_iter().map(|(k, r)| (k, r.into())).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn refused_frames_end_the_loop() {
        let (result, _) = run(Version::V3, &[vec![0xf6], vec![0x80]]);
        assert!(
            matches!(result, Err(GuestError::Io(ref e)) if e.kind() == io::ErrorKind::InvalidData),
            "{result:?}"
        );
    }

    #[test]
    fn v1_one_run_then_exit() {
        let input = [
            vec![0xf6],
            sandpipe_proto::atp::encode_v1_start("now", &Value::from(5)),
            // Never read: the loop ends after the output.
            encode(&Value::Null),
        ];
        let (result, frames) = run(Version::V1, &input);
        assert!(result.is_ok(), "{result:?}");
        let mut client = AtpClient::new();
        client.handle_frame(&frames[0]).expect("hello");
        assert!(matches!(client.poll_event(), Some(ClientEvent::Hello(_))));
        client.start("label", "now", Value::from(5)).expect("start");
        for frame in &frames[1..] {
            client.handle_frame(frame).expect("ack, output");
        }
        assert!(matches!(
            client.poll_event(),
            Some(ClientEvent::WorkDone { ref run_id, .. }) if run_id == "label"
        ));
        assert!(client.is_finished());
        let (result, _) = run(
            Version::V1,
            &[
                vec![0xf6],
                sandpipe_proto::atp::encode_v1_start("bad", &Value::Null),
            ],
        );
        assert!(matches!(result, Err(GuestError::Io(_))), "{result:?}");
    }
}
