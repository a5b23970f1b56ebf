//! The FineCode fuzz body.

use serde_json::Value;

use super::types::*;
use super::{
    CallForm, Client, ClientEvent, FineCodeError, Method, RunnerRequest, Server, ServerEvent,
};
use crate::jsonrpc::Dialect;
use crate::stopped::Stopped;

/// Fuzz body: feed each line of `data` to a client (in both call forms, with calls in flight)
/// and to a server that answers everything it is asked. Panics only if a machine panics or
/// emits a frame that is not a JSON-RPC 2.0 message.
pub fn fuzz(data: &[u8]) {
    use crate::jsonrpc::Message;
    for form in [CallForm::Direct, CallForm::ExecuteCommand] {
        let mut client = Client::with_call_form(form);
        let _ = client.initialize(&InitializeParams::default());
        // Pretend `initialize` was answered so calls can be in flight.
        let _ = client.handle_frame(br#"{"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}"#);
        let _ = client.initialized();
        let streamed = RunActionParams::new("a", Value::Null).with_options(RunOptions::streamed(1));
        let _ = client.run_action(streamed);
        let _ = client.get_payload_schemas();
        let mut server = Server::new();
        for line in data.split(|b| *b == b'\n') {
            let _ = client.handle_frame(line);
            let _ = server.handle_frame(line);
            while let Some(ev) = server.poll_event() {
                let _ = match ev {
                    ServerEvent::Initialize { id, .. } => {
                        server.respond_initialize(id, &InitializeResult::default())
                    }
                    ServerEvent::Call { id, call, .. } => {
                        let _ = server.progress(&id, &Value::Null);
                        let _ = server.request(&RunnerRequest::ApplyEdit(Value::Null));
                        match call.method() {
                            Method::RunAction => {
                                server.respond(id, Err(FineCodeError::command("x")))
                            }
                            _ => server.respond_cancelled(id),
                        }
                    }
                    ServerEvent::Shutdown { id } => server.respond_shutdown(id),
                    _ => Ok(()),
                };
            }
            while let Some(ClientEvent::Request { id, .. }) = client.poll_event() {
                let _ = client.respond(id, Ok(Value::Null));
            }
        }
        client.fail_pending(&Stopped::by_host("fuzz", Vec::new()));
        while client.poll_event().is_some() {}
        for frame in std::iter::from_fn(|| client.poll_transmit())
            .chain(std::iter::from_fn(|| server.poll_transmit()))
        {
            assert!(
                Message::decode(&frame, Dialect::JsonRpc2).is_ok(),
                "emitted an invalid frame: {}",
                String::from_utf8_lossy(&frame)
            );
        }
    }
}
