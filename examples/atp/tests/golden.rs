//! Golden transcripts: each case drives the example plugin (its `main_with`, in memory, on a
//! thread) with the proto client machine, records every frame with its CBOR diagnostic
//! notation as the note, and compares the recording with
//! `tests/transcripts/atp/<case>.transcript`. `BLESS=1` rewrites the files.

use std::io::Read;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::thread::{self, JoinHandle};

use sandpipe_guest::{FrameLimits, Framed, Framing};
use sandpipe_proto::atp::{
    AtpClient, ClientEvent, Message, Value, Version, diagnostic, diagnostic_frame,
};
use sandpipe_proto::transcript::{Direction, Entry, Transcript};

/// The host end of one in-memory plugin session, recording every frame.
struct Session {
    io: Framed<UnixStream, UnixStream>,
    sock: UnixStream,
    client: AtpClient,
    entries: Vec<Entry>,
    plugin: JoinHandle<Result<(), String>>,
}

impl Session {
    fn open(args: &[String]) -> Self {
        let (host, plugin) = UnixStream::pair().expect("socket pair");
        let args = args.to_vec();
        let plugin = thread::spawn(move || {
            let reader = plugin.try_clone().expect("clone");
            let mut io =
                Framed::from_parts(reader, plugin, Framing::CborSeq, FrameLimits::default());
            sandpipe_example_atp::main_with(&mut io, &args).map_err(|e| e.to_string())
        });
        let reader = host.try_clone().expect("clone");
        let writer = host.try_clone().expect("clone");
        Self {
            io: Framed::from_parts(reader, writer, Framing::CborSeq, FrameLimits::default()),
            sock: host,
            client: AtpClient::new(),
            entries: Vec::new(),
            plugin,
        }
    }

    fn record(&mut self, dir: Direction, frame: &[u8]) {
        self.entries.push(Entry {
            dir,
            frame: frame.to_vec(),
            note: Some(diagnostic_frame(frame)),
        });
    }

    /// Send what the client queued.
    fn flush(&mut self) {
        while let Some(frame) = self.client.poll_transmit() {
            self.send_raw(&frame);
        }
    }

    /// Send a frame past the client machine (one it would refuse to build).
    fn send_raw(&mut self, frame: &[u8]) {
        self.record(Direction::ToPlugin, frame);
        self.io.send(frame).expect("send");
    }

    /// Read one plugin frame without giving it to the client.
    fn recv_raw(&mut self) -> Vec<u8> {
        let frame = self.io.recv().expect("recv").expect("a frame, not EOF");
        self.record(Direction::FromPlugin, &frame);
        frame.to_vec()
    }

    /// Read one plugin frame into the client and return its event.
    fn recv_event(&mut self) -> ClientEvent {
        let frame = self.recv_raw();
        self.client
            .handle_frame(&frame)
            .expect("valid plugin frame");
        self.client.poll_event().expect("an event")
    }

    fn hello(&mut self, version: Version) {
        self.flush();
        match self.recv_event() {
            ClientEvent::Hello(h) => assert_eq!(h.version, version),
            other => panic!("{other:?}"),
        }
    }

    fn start(&mut self, run_id: &str, step: &str, config: serde_json::Value) {
        let config = Value::serialized(&config).expect("cbor");
        self.client.start(run_id, step, config).expect("start");
        self.flush();
    }

    /// Expect a work done of `run_id`: its output id and data in diagnostic notation.
    fn done(&mut self, run_id: &str) -> (String, String) {
        match self.recv_event() {
            ClientEvent::WorkDone {
                run_id: got,
                output_id,
                output_data,
                ..
            } => {
                assert_eq!(got, run_id);
                (output_id, diagnostic(&output_data))
            }
            other => panic!("{other:?}"),
        }
    }

    /// Client done (v3 sends it), close our end, record anything the plugin still wrote, and
    /// join it. The plugin must have exited cleanly and the client must be finished.
    fn finish(mut self) -> Vec<Entry> {
        if self.client.client_done().is_ok() {
            self.flush();
        }
        assert!(self.client.is_finished(), "runs still in flight");
        self.sock.shutdown(Shutdown::Write).expect("close stdin");
        let mut rest = Vec::new();
        self.sock.read_to_end(&mut rest).expect("drain stdout");
        assert!(
            rest.is_empty(),
            "plugin wrote after the session: {rest:02x?}"
        );
        self.plugin
            .join()
            .expect("plugin thread")
            .expect("plugin exits cleanly");
        self.entries
    }
}

fn v3_basic(s: &mut Session) {
    s.hello(Version::V3);
    s.start("r1", "greet", serde_json::json!({"name": "Ada"}));
    assert_eq!(
        s.done("r1"),
        ("success".into(), r#"{"message": "Hello, Ada!"}"#.into())
    );
}

fn v3_concurrent(s: &mut Session) {
    s.hello(Version::V3);
    s.start(
        "r1",
        "greet",
        serde_json::json!({"name": "Ada", "defer": true}),
    );
    s.start("r2", "greet", serde_json::json!({"name": "Bob"}));
    assert_eq!(s.client.in_flight().collect::<Vec<_>>(), ["r1", "r2"]);
    // r2 finishes at once, r1 right after the frame that followed it: out of order.
    assert_eq!(
        s.done("r2"),
        ("success".into(), r#"{"message": "Hello, Bob!"}"#.into())
    );
    assert_eq!(
        s.done("r1"),
        ("success".into(), r#"{"message": "Hello, Ada!"}"#.into())
    );
}

fn v3_signal(s: &mut Session) {
    s.hello(Version::V3);
    s.start("w1", "wait", serde_json::json!({}));
    match s.recv_event() {
        ClientEvent::Signal {
            run_id, signal_id, ..
        } => assert_eq!((run_id.as_str(), signal_id.as_str()), ("w1", "ready")),
        other => panic!("{other:?}"),
    }
    // A greet finishes while w1 waits: the plugin keeps reading frames.
    s.start("g1", "greet", serde_json::json!({"name": "Cy"}));
    assert_eq!(s.done("g1").0, "success");
    let data = Value::serialized(&serde_json::json!({"token": 42})).expect("cbor");
    s.client.signal("w1", "go", data).expect("signal");
    s.flush();
    assert_eq!(
        s.done("w1"),
        ("success".into(), r#"{"received": {"token": 42}}"#.into())
    );
}

fn v3_error_output(s: &mut Session) {
    s.hello(Version::V3);
    // The declared error output is a normal work done.
    s.start("e1", "greet", serde_json::json!({"name": ""}));
    assert_eq!(
        s.done("e1"),
        (
            "error".into(),
            r#"{"reason": "name must not be empty"}"#.into()
        )
    );
    // A config the step cannot use: an ATP error message, step fatal.
    s.start("e2", "greet", serde_json::json!({"name": 7}));
    match s.recv_event() {
        ClientEvent::Error {
            run_id,
            error,
            step_fatal: true,
            server_fatal: false,
        } => {
            assert_eq!(run_id, "e2");
            assert_eq!(error, "greet: config needs a text name");
        }
        other => panic!("{other:?}"),
    }
    // A step the schema does not declare (the client would refuse to send it).
    let start = Message::WorkStart {
        run_id: "e3".into(),
        step_id: "nope".into(),
        config: Value::Null,
    };
    s.send_raw(&start.encode());
    let reply = Message::decode(&s.recv_raw()).expect("a message");
    assert!(
        matches!(&reply, Message::Error { run_id, step_fatal: true, .. } if run_id == "e3"),
        "{reply:?}"
    );
}

fn v3_done_while_running(s: &mut Session) {
    s.hello(Version::V3);
    s.start(
        "r1",
        "greet",
        serde_json::json!({"name": "Ada", "defer": true}),
    );
    s.client.client_done().expect("client done");
    s.flush();
    // The run still reports after client done.
    assert_eq!(
        s.done("r1"),
        ("success".into(), r#"{"message": "Hello, Ada!"}"#.into())
    );
}

fn v1_basic(s: &mut Session) {
    s.hello(Version::V1);
    s.start("only", "greet", serde_json::json!({"name": "Ada"}));
    assert_eq!(s.recv_raw(), sandpipe_proto::atp::encode_v1_ack());
    s.client
        .handle_frame(&sandpipe_proto::atp::encode_v1_ack())
        .expect("ack");
    assert_eq!(
        s.done("only"),
        ("success".into(), r#"{"message": "Hello, Ada!"}"#.into())
    );
}

type Scenario = fn(&mut Session);

const CASES: &[(&str, &[&str], Scenario)] = &[
    ("v3-basic", &[], v3_basic),
    ("v3-concurrent", &[], v3_concurrent),
    ("v3-signal", &[], v3_signal),
    ("v3-error-output", &[], v3_error_output),
    ("v3-done-while-running", &[], v3_done_while_running),
    ("v1-basic", &["--v1"], v1_basic),
];

fn render(args: &[&str], entries: Vec<Entry>) -> String {
    let mut headers = vec![
        ("protocol".to_owned(), "atp".to_owned()),
        ("framing".to_owned(), "cbor".to_owned()),
        ("plugin".to_owned(), "example-atp".to_owned()),
    ];
    if !args.is_empty() {
        headers.push(("args".to_owned(), args.join(" ")));
    }
    let t = Transcript { headers, entries };
    format!("# sandpipe transcript 1\n{}", t.render())
}

#[test]
fn transcripts_match() {
    let bless = sandpipe_tests::golden::blessing();
    let mut failures = Vec::new();
    for (case, args, scenario) in CASES {
        let owned: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let mut session = Session::open(&owned);
        scenario(&mut session);
        let got = render(args, session.finish());
        let file = sandpipe_tests::golden::path("atp", case);
        if bless {
            std::fs::write(&file, &got).expect("write transcript");
            continue;
        }
        let want = std::fs::read_to_string(&file).unwrap_or_default();
        let parsed = Transcript::parse(&want).expect("transcript parses");
        assert_eq!(
            parsed.header("args").unwrap_or(""),
            args.join(" "),
            "{case}"
        );
        if got != want {
            failures.push(sandpipe_tests::golden::diff(
                &format!("atp/{case}.transcript"),
                &want,
                &got,
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "rerun with BLESS=1 to accept:\n{}",
        failures.join("\n")
    );
}
