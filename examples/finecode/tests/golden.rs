//! Golden transcripts: scenarios driven by the proto `Client` (the workspace manager) against
//! `main_with` running in memory, over `Content-Length` framing.
//!
//! Each case records every body in order and compares it with
//! `tests/transcripts/finecode/<case>.transcript`; `BLESS=1 cargo test` rewrites the files.
//! The scenarios only ever send a run of frames and then read a known number of answers, so
//! each file replays sequentially against the real plugin (wasm or native).

use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::Duration;

use sandpipe_example_finecode::main_with;
use sandpipe_guest::{FrameLimits, Framed, Framing, GuestError};
use sandpipe_proto::finecode::{
    Call, CallForm, Client, ClientEvent, ClientState, FineCodeError, InitializeParams,
    MergeResultsParams, Reply, RunActionParams, RunHandlersParams, RunOptions, RunStatus,
    RunnerRequest, UpdateConfigParams,
};
use sandpipe_proto::jsonrpc::{ErrorCode, METHOD_NOT_FOUND, REQUEST_CANCELLED};
use sandpipe_proto::transcript::{Direction, Entry, Transcript};
use serde_json::{Value, json};

const PROJECT_DEF: &str = "/work/demo/finecode.toml";

/// A manager session with the runner on a thread over a socket pair.
struct Session {
    client: Client,
    host: Framed<UnixStream, UnixStream>,
    entries: Vec<Entry>,
    plugin: JoinHandle<Result<(), GuestError>>,
}

impl Session {
    fn start(form: CallForm) -> Self {
        let (host, plugin) = UnixStream::pair().expect("socket pair");
        // A safety net so a missing answer fails the test instead of hanging it.
        host.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let plugin = std::thread::spawn(move || {
            let reader = plugin.try_clone().expect("clone");
            let mut io = Framed::from_parts(
                reader,
                plugin,
                Framing::ContentLength,
                FrameLimits::default(),
            );
            main_with(&mut io, &[])
        });
        let reader = host.try_clone().expect("clone");
        Self {
            client: Client::with_call_form(form),
            host: Framed::from_parts(reader, host, Framing::ContentLength, FrameLimits::default()),
            entries: Vec::new(),
            plugin,
        }
    }

    fn write(&mut self, frame: Vec<u8>) {
        self.host.send(&frame).expect("write");
        self.entries.push(Entry {
            dir: Direction::ToPlugin,
            frame,
            note: None,
        });
    }

    /// Send everything the client has queued.
    fn flush(&mut self) {
        while let Some(frame) = self.client.poll_transmit() {
            self.write(frame);
        }
    }

    /// Read one body from the runner.
    fn read(&mut self) -> Vec<u8> {
        let frame = self
            .host
            .recv()
            .expect("read")
            .expect("runner closed its output")
            .to_vec();
        self.entries.push(Entry {
            dir: Direction::FromPlugin,
            frame: frame.clone(),
            note: None,
        });
        frame
    }

    /// Read `n` bodies, feed them to the client, return its events.
    fn recv(&mut self, n: usize) -> Vec<ClientEvent> {
        for _ in 0..n {
            let frame = self.read();
            self.client.handle_frame(&frame).expect("valid answer");
        }
        std::iter::from_fn(|| self.client.poll_event()).collect()
    }

    /// Make `call`, read `n` bodies, return the events.
    fn call(&mut self, call: Call, n: usize) -> Vec<ClientEvent> {
        self.client.call(call).expect("ready");
        self.flush();
        self.recv(n)
    }

    /// The single reply of a call that produces exactly one body.
    fn reply(&mut self, call: Call) -> Result<Reply, FineCodeError> {
        match self.call(call, 1).pop() {
            Some(ClientEvent::Reply { result, .. }) => result,
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    /// initialize, initialized, updateConfig.
    fn ready(form: CallForm) -> Self {
        let mut s = Self::start(form);
        let params = InitializeParams {
            process_id: Some(12345),
            client_info: Some(json!({"name": "FineCode_WorkspaceManager", "version": "0.1.0"})),
            capabilities: json!({}),
            workspace_folders: Some(vec![json!({"uri": "file:///work/demo", "name": "demo"})]),
            trace: Some("verbose".into()),
            extra: Default::default(),
        };
        s.client.initialize(&params).expect("start");
        s.flush();
        let evs = s.recv(1);
        assert!(
            matches!(&evs[..], [ClientEvent::Initialize { result: Ok(r), .. }] if r.server_info == Some(json!({"name": "example-finecode", "version": "0.1.0"}))),
            "{evs:?}"
        );
        s.client.initialized().expect("initialized");
        s.flush();
        let config = UpdateConfigParams {
            working_dir: "/work/demo".into(),
            project_name: "demo".into(),
            project_def_path: PROJECT_DEF.into(),
            config: json!({
                "actions": [{"name": "lint", "handlers": [], "source": "example_finecode.LintAction", "config": {}}],
                "action_handler_configs": {},
            }),
        };
        assert_eq!(s.reply(Call::UpdateConfig(config)), Ok(Reply::UpdateConfig));
        s
    }

    fn shutdown_and_exit(&mut self) {
        self.client.shutdown().expect("shutdown allowed");
        self.flush();
        assert!(matches!(
            &self.recv(1)[..],
            [ClientEvent::Shutdown { result: Ok(()), .. }]
        ));
        self.client.exit().expect("exit after shutdown");
        self.flush();
        assert_eq!(self.client.state(), ClientState::Closed);
    }

    /// Check the runner stopped after `exit`, compare with (or bless) the file.
    fn finish(self, case: &str) {
        let Session {
            host,
            plugin,
            entries,
            ..
        } = self;
        plugin
            .join()
            .expect("plugin thread")
            .expect("runner ends cleanly after exit");
        drop(host);
        let transcript = Transcript {
            headers: [
                ("protocol", "finecode"),
                ("framing", "content-length"),
                ("plugin", "example-finecode"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            entries,
        };
        // The format's first line is a comment, not a `key: value` header.
        compare(
            case,
            &format!("# sandpipe transcript 1\n{}", transcript.render()),
        );
    }
}

fn compare(case: &str, got: &str) {
    if let Err(diff) = sandpipe_tests::golden::check("finecode", case, got) {
        panic!("{case}: {diff}");
    }
    Transcript::parse(got).expect("the file parses");
}

fn lint(files: &[&str]) -> RunActionParams {
    RunActionParams::new("lint", json!({"files": files}))
}

fn json_result(reply: Result<Reply, FineCodeError>) -> Value {
    match reply {
        Ok(Reply::RunAction(r)) => {
            assert_eq!(r.status, RunStatus::Success);
            Value::Object(r.decode_result_by_format().expect("JSON"))["json"].clone()
        }
        other => panic!("expected a run result, got {other:?}"),
    }
}

#[test]
fn lifecycle() {
    let mut s = Session::ready(CallForm::Direct);
    match s.reply(Call::ResolveActionMeta) {
        Ok(Reply::ResolveActionMeta(m)) => {
            assert_eq!(
                m["example_finecode.LintAction"].canonical_source,
                "example_finecode.actions.lint.LintAction"
            );
            assert!(!m.contains_key("example_finecode.BrokenAction"));
        }
        other => panic!("{other:?}"),
    }
    match s.reply(Call::GetPayloadSchemas) {
        Ok(Reply::GetPayloadSchemas(schemas)) => {
            assert_eq!(schemas["broken"], None);
            assert_eq!(
                schemas["lint"].as_ref().map(|l| l.required.clone()),
                Some(vec!["files".to_owned()])
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(s.reply(Call::GetInfo), Ok(Reply::GetInfo(i)) if i.log_file_path.is_none()));
    s.client
        .notify("textDocument/didOpen", json!({"textDocument": {"uri": "file:///work/demo/a.py", "languageId": "python", "version": 1, "text": "x = 1\n"}}))
        .expect("ready");
    s.flush();
    assert_eq!(
        s.reply(Call::ReloadAction {
            action_name: "lint".into()
        }),
        Ok(Reply::ReloadAction)
    );
    s.shutdown_and_exit();
    s.finish("lifecycle");
}

#[test]
fn streamed() {
    let mut s = Session::ready(CallForm::Direct);
    let params = lint(&["a.py", "b.py"]).with_options(RunOptions::streamed("lint-1"));
    let run = s.client.run_action(params).expect("ready");
    s.flush();
    let evs = s.recv(3);
    let partial: Vec<Value> = evs
        .iter()
        .filter_map(|e| match e {
            ClientEvent::Progress { id, params } if id == &run => params.decode_value().ok(),
            _ => None,
        })
        .collect();
    assert_eq!(
        partial,
        [
            json!({"messages": [{"file": "a.py", "message": "line too long"}]}),
            json!({"messages": [{"file": "b.py", "message": "line too long"}]}),
        ]
    );
    assert!(matches!(
        evs.last(),
        Some(ClientEvent::Reply { result: Ok(Reply::RunAction(r)), .. }) if r.status == RunStatus::Streamed
    ));
    // Without a token the same action answers in the response.
    let got = json_result(s.reply(Call::RunAction(lint(&["c.py"]))));
    assert_eq!(
        got,
        json!({"messages": [{"file": "c.py", "message": "line too long"}]})
    );
    s.shutdown_and_exit();
    s.finish("streamed");
}

#[test]
fn runner_request() {
    let mut s = Session::ready(CallForm::Direct);
    let run = s
        .client
        .run_action(RunActionParams::new("config_summary", json!({})))
        .expect("ready");
    s.flush();
    let asked = match &s.recv(1)[..] {
        [
            ClientEvent::Request {
                id,
                request: RunnerRequest::GetRawConfig(p),
            },
        ] => {
            assert_eq!(p.project_def_path, PROJECT_DEF);
            id.clone()
        }
        other => panic!("{other:?}"),
    };
    let raw = json!({"project": {"name": "demo"}, "tool": {"finecode": {}}}).to_string();
    s.client
        .respond(asked, Ok(json!({"config": raw})))
        .expect("awaiting");
    s.flush();
    match s.recv(1).pop() {
        Some(ClientEvent::Reply { id, result, .. }) => {
            assert_eq!(id, run);
            assert_eq!(
                json_result(result),
                json!({"projectDefPath": PROJECT_DEF, "keys": ["project", "tool"]})
            );
        }
        other => panic!("{other:?}"),
    }
    // A manager that cannot answer: the action fails at the command level.
    s.client
        .run_action(RunActionParams::new("config_summary", json!({})))
        .expect("ready");
    s.flush();
    let Some(ClientEvent::Request { id, .. }) = s.recv(1).pop() else {
        panic!()
    };
    s.client
        .respond(
            id,
            Err(sandpipe_proto::jsonrpc::ErrorObject::new(
                -32603,
                "no such project",
            )),
        )
        .expect("awaiting");
    s.flush();
    assert!(matches!(
        s.recv(1).pop(),
        Some(ClientEvent::Reply { result: Err(FineCodeError::Command { message }), .. }) if message == "cannot read config: no such project"
    ));
    s.shutdown_and_exit();
    s.finish("runner-request");
}

#[test]
fn cancel() {
    let mut s = Session::ready(CallForm::Direct);
    let run = s
        .client
        .run_action(RunActionParams::new("config_summary", json!({})))
        .expect("ready");
    s.flush();
    let Some(ClientEvent::Request { id: asked, .. }) = s.recv(1).pop() else {
        panic!()
    };
    // The manager cancels before answering: the call completes locally at once...
    assert!(s.client.cancel(&run));
    match s.client.poll_event() {
        Some(ClientEvent::Reply {
            id,
            result: Err(FineCodeError::Rpc(e)),
            ..
        }) => {
            assert_eq!((id, e.code), (run, ErrorCode::Int(REQUEST_CANCELLED)));
        }
        other => panic!("{other:?}"),
    }
    s.flush();
    // ...the runner stops waiting and answers -32800, which the client drops as late.
    assert_eq!(s.recv(1), vec![]);
    let last = s.entries.last().expect("the answer").frame.clone();
    assert_eq!(
        String::from_utf8_lossy(&last),
        r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32800,"message":"request cancelled"}}"#
    );
    // The manager's late answer to getRawConfig is dropped by the runner.
    s.client
        .respond(asked, Ok(json!({"config": "{}"})))
        .expect("awaiting");
    s.flush();
    s.shutdown_and_exit();
    s.finish("cancel");
}

#[test]
fn command_error() {
    let mut s = Session::ready(CallForm::Direct);
    assert_eq!(
        s.reply(Call::RunAction(RunActionParams::new("broken", json!({})))),
        Err(FineCodeError::command("broken: this action always fails"))
    );
    assert_eq!(
        s.reply(Call::RunAction(RunActionParams::new("format", json!({})))),
        Err(FineCodeError::command("unknown action: format"))
    );
    // A JSON-RPC error is not a command error.
    match s.reply(Call::ResolveSource {
        source: "example_finecode.LintAction".into(),
    }) {
        Err(FineCodeError::Rpc(e)) => assert_eq!(e.code, ErrorCode::Int(METHOD_NOT_FOUND)),
        other => panic!("{other:?}"),
    }
    match s.reply(Call::ResolvePackagePath {
        package_name: "example_finecode".into(),
    }) {
        Err(FineCodeError::Rpc(e)) => assert_eq!(e.code, ErrorCode::Int(METHOD_NOT_FOUND)),
        other => panic!("{other:?}"),
    }
    // Frames the typed client cannot send: an unknown method and bad params.
    s.write(br#"{"jsonrpc":"2.0","id":100,"method":"actions/frobnicate","params":{}}"#.to_vec());
    assert_eq!(
        s.read(),
        br#"{"jsonrpc":"2.0","id":100,"error":{"code":-32601,"message":"unknown method: actions/frobnicate"}}"#
    );
    s.write(
        br#"{"jsonrpc":"2.0","id":101,"method":"actions/run","params":{"params":{}}}"#.to_vec(),
    );
    assert_eq!(
        s.read(),
        br#"{"jsonrpc":"2.0","id":101,"error":{"code":-32602,"message":"invalid params: missing field `actionName`"}}"#
    );
    s.shutdown_and_exit();
    s.finish("command-error");
}

#[test]
fn multi_env() {
    let mut s = Session::ready(CallForm::Direct);
    let first = RunHandlersParams {
        action_name: "lint".into(),
        handler_names: vec!["ruff".into(), "flake8".into()],
        previous_result: None,
        options: None,
    };
    let result = match s.reply(Call::RunHandlers(first)) {
        Ok(Reply::RunHandlers(r)) => {
            assert!(r.result_by_format.is_empty());
            r.result
        }
        other => panic!("{other:?}"),
    };
    let last = RunHandlersParams {
        action_name: "lint".into(),
        handler_names: vec!["mypy".into()],
        previous_result: Some(result),
        options: Some(RunOptions {
            result_formats: Some(vec!["json".into()]),
            ..RunOptions::default()
        }),
    };
    match s.reply(Call::RunHandlers(last)) {
        Ok(Reply::RunHandlers(r)) => assert_eq!(
            r.result_by_format["json"],
            json!({"handlers": ["lint:ruff", "lint:flake8", "lint:mypy"]})
        ),
        other => panic!("{other:?}"),
    }
    let merge = MergeResultsParams {
        action_name: "lint".into(),
        results: vec![json!({"messages": [1]}), json!({"messages": [2, 3]})],
    };
    assert_eq!(
        s.reply(Call::MergeResults(merge)),
        Ok(Reply::MergeResults(json!({"messages": [1, 2, 3]})))
    );
    let bad = MergeResultsParams {
        action_name: "lint".into(),
        results: vec![json!({})],
    };
    assert_eq!(
        s.reply(Call::MergeResults(bad)),
        Err(FineCodeError::command("results[0] has no messages"))
    );
    s.shutdown_and_exit();
    s.finish("multi-env");
}

#[test]
fn execute_command() {
    let mut s = Session::ready(CallForm::ExecuteCommand);
    assert!(
        matches!(s.reply(Call::ResolveActionMeta), Ok(Reply::ResolveActionMeta(m)) if m.len() == 2)
    );
    assert!(
        matches!(s.reply(Call::GetPayloadSchemas), Ok(Reply::GetPayloadSchemas(m)) if m.len() == 3)
    );
    let got = json_result(s.reply(Call::RunAction(lint(&["a.py"]))));
    assert_eq!(
        got,
        json!({"messages": [{"file": "a.py", "message": "line too long"}]})
    );
    let evs = s.call(
        Call::RunAction(lint(&["b.py"]).with_options(RunOptions::streamed(7))),
        2,
    );
    assert!(
        matches!(
            &evs[..],
            [
                ClientEvent::Progress { .. },
                ClientEvent::Reply { result: Ok(_), .. }
            ]
        ),
        "{evs:?}"
    );
    assert_eq!(
        s.reply(Call::RunAction(RunActionParams::new("broken", json!({})))),
        Err(FineCodeError::command("broken: this action always fails"))
    );
    // Unknown commands are refused like unknown methods.
    s.write(br#"{"jsonrpc":"2.0","id":100,"method":"workspace/executeCommand","params":{"command":"actions/frobnicate","arguments":[]}}"#.to_vec());
    assert_eq!(
        s.read(),
        br#"{"jsonrpc":"2.0","id":100,"error":{"code":-32601,"message":"unknown command: actions/frobnicate"}}"#
    );
    s.shutdown_and_exit();
    s.finish("execute-command");
}

#[test]
fn eof_without_exit_ends_cleanly() {
    let s = Session::start(CallForm::Direct);
    let Session { host, plugin, .. } = s;
    drop(host);
    plugin.join().expect("thread").expect("clean end at EOF");
}
