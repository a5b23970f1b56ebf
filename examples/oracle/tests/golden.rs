//! Golden transcripts: each case drives the example oracle (its `main_with`, in memory, on a
//! thread) with the proto client machine, records every frame, and compares the recording with
//! `tests/transcripts/oracle/<case>.transcript`. `BLESS=1` rewrites the files.

use std::io::Read;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::thread::{self, JoinHandle};

use sandpipe_guest::{FrameLimits, Framed, Framing};
use sandpipe_proto::oracle::{ClientEvent, ErrorOrigin, Felt, OracleClient, OracleError};
use sandpipe_proto::transcript::{Direction, Entry, Transcript};

/// The host end of one in-memory plugin session, recording every frame.
struct Session {
    io: Framed<UnixStream, UnixStream>,
    sock: UnixStream,
    client: OracleClient,
    entries: Vec<Entry>,
    plugin: JoinHandle<Result<(), String>>,
}

impl Session {
    fn start(args: &[String]) -> Self {
        let (host, plugin) = UnixStream::pair().expect("socket pair");
        let args = args.to_vec();
        let plugin = thread::spawn(move || {
            let reader = plugin.try_clone().expect("clone");
            let mut io =
                Framed::from_parts(reader, plugin, Framing::JsonLines, FrameLimits::default());
            sandpipe_example_oracle::main_with(&mut io, &args).map_err(|e| e.to_string())
        });
        let reader = host.try_clone().expect("clone");
        let writer = host.try_clone().expect("clone");
        Self {
            io: Framed::from_parts(reader, writer, Framing::JsonLines, FrameLimits::default()),
            sock: host,
            client: OracleClient::new(),
            entries: Vec::new(),
            plugin,
        }
    }

    fn record(&mut self, dir: Direction, frame: &[u8]) {
        self.entries.push(Entry {
            dir,
            frame: frame.to_vec(),
            note: None,
        });
    }

    /// Send what the client queued.
    fn flush(&mut self) {
        while let Some(frame) = self.client.poll_transmit() {
            self.record(Direction::ToPlugin, &frame);
            self.io.send(&frame).expect("send");
        }
    }

    /// Read one plugin frame into the client and return its event.
    fn recv_event(&mut self) -> ClientEvent {
        let frame = self.io.recv().expect("recv").expect("a frame, not EOF");
        self.record(Direction::FromPlugin, &frame);
        self.client
            .handle_frame(&frame)
            .expect("valid plugin frame");
        self.client.poll_event().expect("an event")
    }

    /// Send a frame the client machine would refuse to build (a misbehaving host) and return
    /// the plugin's answer, which the client does not see.
    fn raw(&mut self, frame: &str) -> String {
        self.record(Direction::ToPlugin, frame.as_bytes());
        self.io.send(frame.as_bytes()).expect("send");
        let answer = self.io.recv().expect("recv").expect("a frame, not EOF");
        self.record(Direction::FromPlugin, &answer);
        String::from_utf8(answer.to_vec()).expect("utf-8")
    }

    fn handshake(&mut self) {
        assert_eq!(self.recv_event(), ClientEvent::Ready);
        self.flush();
    }

    fn invoke(&mut self, selector: &str, calldata: &[u128]) -> Result<Vec<u128>, String> {
        let calldata: Vec<Felt> = calldata.iter().map(|&n| Felt::from(n)).collect();
        self.invoke_felts(selector, &calldata)
            .map(|felts| felts.iter().map(|f| f.to_u128().expect("small")).collect())
    }

    fn invoke_felts(&mut self, selector: &str, calldata: &[Felt]) -> Result<Vec<Felt>, String> {
        self.client.invoke(selector, calldata).expect("idle");
        self.flush();
        match self.recv_event() {
            ClientEvent::Invoked { result, .. } => result.map_err(|e: OracleError| {
                assert_eq!(e.origin, ErrorOrigin::Plugin);
                e.message
            }),
            other => panic!("{other:?}"),
        }
    }

    /// Shut down, close our end, record anything the plugin still wrote, and join it.
    fn finish(mut self) -> Vec<Entry> {
        self.client.shutdown().expect("idle");
        self.flush();
        self.sock.shutdown(Shutdown::Write).expect("close stdin");
        let mut rest = Vec::new();
        self.sock.read_to_end(&mut rest).expect("drain stdout");
        assert!(rest.is_empty(), "plugin wrote after shutdown: {rest:?}");
        self.plugin
            .join()
            .expect("plugin thread")
            .expect("plugin exits cleanly");
        self.entries
    }
}

fn big() -> Felt {
    Felt::parse(&format!("0x1{}", "0".repeat(32))).expect("2^128")
}

fn basic(s: &mut Session) {
    s.handshake();
    assert_eq!(s.invoke("sqrt", &[0x10]), Ok(vec![4]));
    assert_eq!(s.invoke("sqrt", &[0]), Ok(vec![0]));
    assert_eq!(s.invoke("sqrt", &[1_000_000_000_000]), Ok(vec![1_000_000]));
    assert_eq!(s.invoke("add", &[1, 2, 3]), Ok(vec![6]));
    assert_eq!(
        s.invoke("add", &[u64::MAX as u128, 1]),
        Ok(vec![1u128 << 64])
    );
}

fn errors(s: &mut Session) {
    s.handshake();
    let fails: &[(&str, &[u128], &str)] = &[
        ("sqrt", &[], "sqrt: expected exactly one argument"),
        ("sqrt", &[1, 2], "sqrt: expected exactly one argument"),
        ("add", &[], "add: expected at least one argument"),
        ("add", &[u128::MAX, 1], "add: sum overflows 128 bits"),
        ("fail", &[], "fail: this selector always fails"),
        ("nope", &[7], "unknown selector: nope"),
    ];
    for (selector, calldata, message) in fails {
        assert_eq!(s.invoke(selector, calldata), Err((*message).to_owned()));
    }
    assert_eq!(
        s.invoke_felts("sqrt", &[big()]),
        Err(
            "sqrt: argument 0 (0x100000000000000000000000000000000) does not fit in 128 bits"
                .into()
        )
    );
    // Params the SDK refuses before the handler runs; the plugin keeps serving.
    let answer = s.raw(
        r#"{"jsonrpc":"2.0","id":"bad-felt","method":"invoke","params":{"selector":"sqrt","calldata":["0x010"]}}"#,
    );
    assert!(answer.contains(r#""code":-32602"#), "{answer}");
    let answer = s.raw(r#"{"jsonrpc":"2.0","id":"bad-method","method":"describe"}"#);
    assert!(answer.contains(r#""code":-32601"#), "{answer}");
    assert_eq!(s.invoke("sqrt", &[0x51]), Ok(vec![9]));
}

fn echo_stderr(s: &mut Session) {
    s.handshake();
    assert_eq!(s.invoke("sqrt", &[144]), Ok(vec![12]));
    assert_eq!(
        s.invoke("fail", &[]),
        Err("fail: this selector always fails".into())
    );
    assert_eq!(s.invoke("add", &[40, 2]), Ok(vec![42]));
}

type Scenario = fn(&mut Session);

const CASES: &[(&str, &[&str], Scenario)] = &[
    ("basic", &[], basic),
    ("errors", &[], errors),
    ("echo-stderr", &["--echo-stderr"], echo_stderr),
];

fn render(args: &[&str], entries: Vec<Entry>) -> String {
    let mut headers = vec![
        ("protocol".to_owned(), "oracle".to_owned()),
        ("framing".to_owned(), "lines".to_owned()),
        ("plugin".to_owned(), "example-oracle".to_owned()),
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
        let mut session = Session::start(&owned);
        scenario(&mut session);
        let got = render(args, session.finish());
        let file = sandpipe_tests::golden::path("oracle", case);
        if bless {
            std::fs::write(&file, &got).expect("write transcript");
            continue;
        }
        let want = std::fs::read_to_string(&file).unwrap_or_default();
        // The file must also parse, and its args header must be what the scenario ran with.
        let parsed = Transcript::parse(&want).expect("transcript parses");
        assert_eq!(
            parsed.header("args").unwrap_or(""),
            args.join(" "),
            "{case}"
        );
        if got != want {
            failures.push(sandpipe_tests::golden::diff(
                &format!("oracle/{case}.transcript"),
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
