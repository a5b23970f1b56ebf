//! DenoBridge's fuzz body.

use super::*;

/// Fuzz body: `data` split at `\n` is fed, line by line, to a client with requests of every
/// method in flight and to a server of every kind; both must return (`Ok` or a typed error)
/// and never panic, and every frame they produce must decode as JSON-RPC.
pub fn fuzz(data: &[u8]) {
    use crate::jsonrpc::Message;
    let kinds = [
        ProviderKind::Resource,
        ProviderKind::DataSource,
        ProviderKind::Ephemeral,
        ProviderKind::Action,
    ];
    for kind in kinds {
        let mut client = Client::new(kind);
        let _ = client.health();
        let _ = client.create(PropsParams::default());
        let _ = client.read(ReadParams::default());
        let _ = client.modify_plan(ModifyPlanParams {
            id: None,
            plan_type: PlanType::Create,
            next_props: Value::Null,
            current_props: None,
            current_state: None,
            current_sensitive_state: None,
            extra: Default::default(),
        });
        let _ = client.read_data(PropsParams::default());
        let _ = client.open(PropsParams::default());
        let _ = client.invoke(PropsParams::default());
        let mut server = Server::new(kind);
        for line in data.split(|b| *b == b'\n') {
            let _ = client.handle_frame(line);
            let _ = server.handle_frame(line);
            while let Some(ServerEvent::Request { id, .. }) = server.poll_event() {
                let _ = server.progress(&id, InvokeProgress::default());
                let _ = server.respond(id, Err(internal_error()));
            }
        }
        client.fail_pending(&Stopped::by_host("fuzz", Vec::new()));
        while client.poll_event().is_some() {}
        for frame in std::iter::from_fn(|| client.poll_transmit())
            .chain(std::iter::from_fn(|| server.poll_transmit()))
        {
            assert!(
                Message::decode(&frame, Dialect::JsonRpc2).is_ok(),
                "machine produced an undecodable frame"
            );
        }
    }
}

/// A response of the wrong shape completes its request with an error; `invokeProgress`
/// belongs to the one `invoke` pending (with several pending, the wire cannot say which).
impl ClientMachine for Client {
    type Key = Id;
    type Event = ClientEvent;
    type Error = ProtocolError;

    fn handle_frame(&mut self, frame: &[u8]) -> Result<(), ProtocolError> {
        Client::handle_frame(self, frame)
    }
    fn is_fatal(error: &ProtocolError) -> bool {
        !matches!(error, ProtocolError::BadPayload { .. })
    }
    fn handle_timeout(&mut self, now: Instant) {
        Client::handle_timeout(self, now);
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Client::poll_timeout(self)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        Client::poll_transmit(self)
    }
    fn poll_event(&mut self) -> Option<ClientEvent> {
        Client::poll_event(self)
    }
    fn completes(event: &ClientEvent) -> Option<&Id> {
        match event {
            ClientEvent::Response { id, .. } => Some(id),
            _ => None,
        }
    }
    fn belongs_to(event: &ClientEvent) -> Option<&Id> {
        match event {
            ClientEvent::Progress { invoke, .. } => invoke.as_ref(),
            _ => None,
        }
    }
    fn fail_pending(&mut self, stopped: &Stopped) {
        Client::fail_pending(self, stopped);
    }
}

crate::machine::server_machine!(Server => ServerEvent, ProtocolError);
