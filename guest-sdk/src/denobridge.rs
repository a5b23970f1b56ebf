//! Write terraform-provider-denobridge providers: one handler trait per provider kind and a
//! blocking serve loop over [`sandpipe_proto::denobridge::Server`].
//!
//! ```text
//!   stdin ─► Framed::recv ─► Server::handle_frame ─┬─ health / shutdown / unknown method /
//!                                                  │  bad params: answered by the machine
//!                                                  └─ ServerEvent::Request ─► your trait
//!   stdout ◄─ Framed::send (flush per frame) ◄─ Server::poll_transmit ◄─ respond / progress
//! ```
//!
//! The loop ends at stdin EOF or at `shutdown` (request or notification). Requests are
//! handled one at a time, in arrival order. A handler may ask for its answer to be held until
//! the next request has been answered (see [`ResourceProvider::answer_after_next`]), which
//! lets a sequential plugin answer out of order, deterministically.
//!
//! ```
//! use sandpipe_guest::denobridge::{serve_action, ActionProvider};
//! use sandpipe_guest::{Framed, FrameLimits, Framing};
//! use sandpipe_proto::denobridge::{DoneResult, PropsParams};
//! use sandpipe_proto::jsonrpc::ErrorObject;
//!
//! struct Hello;
//! impl ActionProvider for Hello {
//!     fn invoke(&mut self, _p: PropsParams, progress: &mut dyn FnMut(String))
//!         -> Result<DoneResult, ErrorObject> {
//!         progress("halfway".into());
//!         Ok(DoneResult::done())
//!     }
//! }
//! let input = concat!(
//!     r#"{"jsonrpc":"2.0","id":0,"method":"health"}"#, "\n",
//!     r#"{"jsonrpc":"2.0","id":1,"method":"invoke","params":{"props":{}}}"#, "\n",
//!     r#"{"jsonrpc":"2.0","method":"shutdown"}"#, "\n",
//! );
//! let mut out = Vec::new();
//! let mut io = Framed::from_parts(input.as_bytes(), &mut out, Framing::JsonLines, FrameLimits::default());
//! serve_action(&mut io, &mut Hello).unwrap();
//! assert_eq!(String::from_utf8(out).unwrap(), concat!(
//!     r#"{"jsonrpc":"2.0","id":0,"result":{"ok":true}}"#, "\n",
//!     r#"{"jsonrpc":"2.0","method":"invokeProgress","params":{"message":"halfway"}}"#, "\n",
//!     r#"{"jsonrpc":"2.0","id":1,"result":{"done":true}}"#, "\n",
//! ));
//! ```

use std::io::{self, Write};

use sandpipe_proto::denobridge::{
    CreateResult, DataResult, DeleteParams, DoneResult, InvokeProgress, ModifyPlanParams,
    ModifyPlanResult, OpenResult, PrivateParams, PropsParams, ProviderKind, ReadParams, ReadResult,
    RenewResult, Request, Response, Server, ServerEvent, UpdateParams, UpdateResult,
    method_not_found,
};
use sandpipe_proto::jsonrpc::{ErrorObject, Id};

use crate::{Framed, GuestError};

/// A handler's answer.
pub type Answer<T> = Result<T, ErrorObject>;

/// A resource provider: the managed-object lifecycle.
pub trait ResourceProvider {
    /// `create`.
    fn create(&mut self, params: PropsParams) -> Answer<CreateResult>;
    /// `read`; answer [`ReadResult::Gone`] when the resource no longer exists.
    fn read(&mut self, params: ReadParams) -> Answer<ReadResult>;
    /// `update`.
    fn update(&mut self, params: UpdateParams) -> Answer<UpdateResult>;
    /// `delete`.
    fn delete(&mut self, params: DeleteParams) -> Answer<DoneResult>;
    /// `modifyPlan` (optional): by default `-32601 Method not found`, as the seed allows.
    fn modify_plan(&mut self, params: ModifyPlanParams) -> Answer<ModifyPlanResult> {
        let _ = params;
        Err(method_not_found())
    }
    /// Hold the answer to `request` until the next request has been answered (default:
    /// never). Lets a sequential plugin answer out of order.
    fn answer_after_next(&self, request: &Request) -> bool {
        let _ = request;
        false
    }
}

/// A data source provider.
pub trait DataSourceProvider {
    /// `read`.
    fn read(&mut self, params: PropsParams) -> Answer<DataResult>;
}

/// An ephemeral resource provider.
pub trait EphemeralProvider {
    /// `open`.
    fn open(&mut self, params: PropsParams) -> Answer<OpenResult>;
    /// `renew` (optional): by default `-32601 Method not found`.
    fn renew(&mut self, params: PrivateParams) -> Answer<RenewResult> {
        let _ = params;
        Err(method_not_found())
    }
    /// `close` (optional): by default `-32601 Method not found`.
    fn close(&mut self, params: PrivateParams) -> Answer<DoneResult> {
        let _ = params;
        Err(method_not_found())
    }
}

/// An action provider.
pub trait ActionProvider {
    /// `invoke`; each `progress(message)` sends an `invokeProgress` notification at once.
    fn invoke(
        &mut self,
        params: PropsParams,
        progress: &mut dyn FnMut(String),
    ) -> Answer<DoneResult>;
}

/// When to send an answer.
#[derive(Debug)]
#[non_exhaustive]
pub enum Reply {
    /// Now.
    Now(Answer<Response>),
    /// After the next request's answer (or at shutdown / EOF, whichever comes first).
    AfterNext(Answer<Response>),
}

/// Any provider kind, as the serve loop sees it. The four traits above reach it through
/// [`Resource`], [`DataSource`], [`Ephemeral`] and [`Action`].
pub trait Provider {
    /// Which methods exist.
    fn kind(&self) -> ProviderKind;
    /// Handle one call; `progress` sends an `invokeProgress` notification.
    fn call(&mut self, request: Request, progress: &mut dyn FnMut(String)) -> Reply;
}

/// Adapts a [`ResourceProvider`].
#[derive(Debug)]
pub struct Resource<'a, H>(pub &'a mut H);
/// Adapts a [`DataSourceProvider`].
#[derive(Debug)]
pub struct DataSource<'a, H>(pub &'a mut H);
/// Adapts an [`EphemeralProvider`].
#[derive(Debug)]
pub struct Ephemeral<'a, H>(pub &'a mut H);
/// Adapts an [`ActionProvider`].
#[derive(Debug)]
pub struct Action<'a, H>(pub &'a mut H);

fn unsupported() -> Reply {
    // The server machine only passes on methods of its kind; this is a safe answer anyway.
    Reply::Now(Err(method_not_found()))
}

impl<H: ResourceProvider> Provider for Resource<'_, H> {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Resource
    }

    fn call(&mut self, request: Request, _progress: &mut dyn FnMut(String)) -> Reply {
        let later = self.0.answer_after_next(&request);
        let answer = match request {
            Request::Create(p) => self.0.create(p).map(Response::Create),
            Request::ReadResource(p) => self.0.read(p).map(Response::ReadResource),
            Request::Update(p) => self.0.update(p).map(Response::Update),
            Request::Delete(p) => self.0.delete(p).map(Response::Delete),
            Request::ModifyPlan(p) => self.0.modify_plan(p).map(Response::ModifyPlan),
            _ => return unsupported(),
        };
        if later {
            Reply::AfterNext(answer)
        } else {
            Reply::Now(answer)
        }
    }
}

impl<H: DataSourceProvider> Provider for DataSource<'_, H> {
    fn kind(&self) -> ProviderKind {
        ProviderKind::DataSource
    }

    fn call(&mut self, request: Request, _progress: &mut dyn FnMut(String)) -> Reply {
        match request {
            Request::ReadData(p) => Reply::Now(self.0.read(p).map(Response::ReadData)),
            _ => unsupported(),
        }
    }
}

impl<H: EphemeralProvider> Provider for Ephemeral<'_, H> {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Ephemeral
    }

    fn call(&mut self, request: Request, _progress: &mut dyn FnMut(String)) -> Reply {
        Reply::Now(match request {
            Request::Open(p) => self.0.open(p).map(Response::Open),
            Request::Renew(p) => self.0.renew(p).map(Response::Renew),
            Request::Close(p) => self.0.close(p).map(Response::Close),
            _ => return unsupported(),
        })
    }
}

impl<H: ActionProvider> Provider for Action<'_, H> {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Action
    }

    fn call(&mut self, request: Request, progress: &mut dyn FnMut(String)) -> Reply {
        match request {
            Request::Invoke(p) => Reply::Now(self.0.invoke(p, progress).map(Response::Invoke)),
            _ => unsupported(),
        }
    }
}

/// Serve a resource provider until stdin EOF or `shutdown`.
pub fn serve_resource<R: crate::Input, W: Write, H: ResourceProvider>(
    io: &mut Framed<R, W>,
    handler: &mut H,
) -> Result<(), GuestError> {
    serve(io, &mut Resource(handler))
}

/// Serve a data source provider until stdin EOF or `shutdown`.
pub fn serve_data_source<R: crate::Input, W: Write, H: DataSourceProvider>(
    io: &mut Framed<R, W>,
    handler: &mut H,
) -> Result<(), GuestError> {
    serve(io, &mut DataSource(handler))
}

/// Serve an ephemeral resource provider until stdin EOF or `shutdown`.
pub fn serve_ephemeral<R: crate::Input, W: Write, H: EphemeralProvider>(
    io: &mut Framed<R, W>,
    handler: &mut H,
) -> Result<(), GuestError> {
    serve(io, &mut Ephemeral(handler))
}

/// Serve an action provider until stdin EOF or `shutdown`.
pub fn serve_action<R: crate::Input, W: Write, H: ActionProvider>(
    io: &mut Framed<R, W>,
    handler: &mut H,
) -> Result<(), GuestError> {
    serve(io, &mut Action(handler))
}

/// The loop: recv → [`Server`] → provider → send, flushing every frame, until stdin EOF or
/// `shutdown`. A frame the machine rejects (not JSON, a duplicate id) is reported on stderr
/// and skipped: one bad line must not end a Terraform run. Held answers
/// ([`Reply::AfterNext`]) are sent after the next request's answer, or before the loop ends.
pub fn serve<R: crate::Input, W: Write, P: Provider>(
    io: &mut Framed<R, W>,
    provider: &mut P,
) -> Result<(), GuestError> {
    let mut server = Server::new(provider.kind());
    let mut held: Vec<(Id, Answer<Response>)> = Vec::new();
    while let Some(frame) = io.recv()? {
        if let Err(err) = server.handle_frame(&frame) {
            eprintln!("denobridge: {err}");
        }
        flush(io, &mut server)?;
        while let Some(event) = server.poll_event() {
            match event {
                ServerEvent::Shutdown { .. } => return release(io, &mut server, &mut held),
                ServerEvent::Request { id, request } => {
                    match call(io, &mut server, provider, &id, request)? {
                        Reply::Now(answer) => {
                            respond(&mut server, id, answer)?;
                            release(io, &mut server, &mut held)?;
                        }
                        Reply::AfterNext(answer) => held.push((id, answer)),
                    }
                }
                _ => {}
            }
        }
    }
    release(io, &mut server, &mut held)
}

/// Run the provider, sending each progress notification as it happens.
fn call<R: crate::Input, W: Write, P: Provider>(
    io: &mut Framed<R, W>,
    server: &mut Server,
    provider: &mut P,
    id: &Id,
    request: Request,
) -> Result<Reply, GuestError> {
    let mut failed: Option<GuestError> = None;
    let mut progress = |message: String| {
        if failed.is_some() {
            return;
        }
        let sent = server
            .progress(
                id,
                InvokeProgress {
                    message,
                    ..Default::default()
                },
            )
            .map_err(machine_error)
            .and_then(|()| flush(io, server));
        if let Err(e) = sent {
            failed = Some(e);
        }
    };
    let reply = provider.call(request, &mut progress);
    match failed {
        Some(e) => Err(e),
        None => Ok(reply),
    }
}

fn respond(server: &mut Server, id: Id, answer: Answer<Response>) -> Result<(), GuestError> {
    server.respond(id, answer).map_err(machine_error)
}

fn release<R: crate::Input, W: Write>(
    io: &mut Framed<R, W>,
    server: &mut Server,
    held: &mut Vec<(Id, Answer<Response>)>,
) -> Result<(), GuestError> {
    for (id, answer) in held.drain(..) {
        respond(server, id, answer)?;
    }
    flush(io, server)
}

fn flush<R: crate::Input, W: Write>(
    io: &mut Framed<R, W>,
    server: &mut Server,
) -> Result<(), GuestError> {
    while let Some(frame) = server.poll_transmit() {
        io.send(&frame)?;
    }
    Ok(())
}

/// The handler answered something the machine refuses (a result for another method): a bug
/// in the plugin, reported as an IO-level failure of the loop.
fn machine_error(e: sandpipe_proto::jsonrpc::ProtocolError) -> GuestError {
    GuestError::Io(io::Error::other(e))
}

#[cfg(test)]
mod tests {
    use sandpipe_proto::denobridge::{DataResult, OpenResult};

    use super::*;
    use crate::{FrameLimits, Framing};

    fn run<P: Provider>(provider: &mut P, input: &[&str]) -> Vec<String> {
        let text: String = input.iter().map(|l| format!("{l}\n")).collect();
        let mut out = Vec::new();
        let mut io = Framed::from_parts(
            text.as_bytes(),
            &mut out,
            Framing::JsonLines,
            FrameLimits::default(),
        );
        serve(&mut io, provider).expect("serve");
        String::from_utf8(out)
            .expect("utf8")
            .lines()
            .map(str::to_owned)
            .collect()
    }

    struct Store;
    impl ResourceProvider for Store {
        fn create(&mut self, p: PropsParams) -> Answer<CreateResult> {
            Ok(CreateResult {
                id: "r1".into(),
                state: p.props,
                ..Default::default()
            })
        }
        fn read(&mut self, _p: ReadParams) -> Answer<ReadResult> {
            Ok(ReadResult::Gone)
        }
        fn update(&mut self, _p: UpdateParams) -> Answer<UpdateResult> {
            Err(sandpipe_proto::denobridge::internal_error())
        }
        fn delete(&mut self, _p: DeleteParams) -> Answer<DoneResult> {
            Ok(DoneResult::done())
        }
        fn answer_after_next(&self, request: &Request) -> bool {
            matches!(request, Request::Create(p) if p.props.get("defer").is_some())
        }
    }

    struct Data;
    impl DataSourceProvider for Data {
        fn read(&mut self, p: PropsParams) -> Answer<DataResult> {
            Ok(DataResult {
                result: p.props,
                ..Default::default()
            })
        }
    }

    struct Eph;
    impl EphemeralProvider for Eph {
        fn open(&mut self, _p: PropsParams) -> Answer<OpenResult> {
            Ok(OpenResult::default())
        }
    }

    #[test]
    fn each_kind_serves_its_methods() {
        let r = run(
            &mut Resource(&mut Store),
            &[
                r#"{"jsonrpc":"2.0","id":0,"method":"health"}"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"create","params":{"props":{"defer":1}}}"#,
                r#"{"jsonrpc":"2.0","id":2,"method":"read","params":{"id":"r1","props":{}}}"#,
                r#"{"jsonrpc":"2.0","id":3,"method":"update","params":{"id":"r1","nextProps":{},"currentProps":{},"currentState":{}}}"#,
                r#"{"jsonrpc":"2.0","id":4,"method":"modifyPlan","params":{"planType":"create","nextProps":{}}}"#,
                r#"{"jsonrpc":"2.0","id":5,"method":"create","params":{"props":{"defer":1}}}"#,
                r#"{"jsonrpc":"2.0","method":"shutdown"}"#,
                r#"{"jsonrpc":"2.0","id":6,"method":"health"}"#,
            ],
        );
        assert_eq!(
            r,
            [
                r#"{"jsonrpc":"2.0","id":0,"result":{"ok":true}}"#,
                r#"{"jsonrpc":"2.0","id":2,"result":{"exists":false}}"#,
                r#"{"jsonrpc":"2.0","id":1,"result":{"id":"r1","state":{"defer":1}}}"#,
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"Internal error"}}"#,
                r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"Method not found"}}"#,
                // Held until the end: released at shutdown; nothing is read after it.
                r#"{"jsonrpc":"2.0","id":5,"result":{"id":"r1","state":{"defer":1}}}"#,
            ]
        );
        let d = run(
            &mut DataSource(&mut Data),
            &[
                r#"{"jsonrpc":"2.0","id":0,"method":"read","params":{"props":{"q":1}}}"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"create","params":{"props":{}}}"#,
            ],
        );
        assert_eq!(
            d,
            [
                r#"{"jsonrpc":"2.0","id":0,"result":{"result":{"q":1}}}"#,
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#,
            ]
        );
        let e = run(
            &mut Ephemeral(&mut Eph),
            &[
                r#"{"jsonrpc":"2.0","id":0,"method":"open","params":{"props":{}}}"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"renew","params":{"privateData":{}}}"#,
                r#"{"jsonrpc":"2.0","id":2,"method":"close","params":{"privateData":{}}}"#,
                r#"{"jsonrpc":"2.0","id":3,"method":"shutdown"}"#,
            ],
        );
        assert_eq!(
            e,
            [
                r#"{"jsonrpc":"2.0","id":0,"result":{"result":null}}"#,
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#,
                r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Method not found"}}"#,
                r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
            ]
        );
    }

    #[test]
    fn bad_lines_are_skipped_not_fatal() {
        let r = run(
            &mut Resource(&mut Store),
            &[
                "[1]",
                r#"{"jsonrpc":"2.0","id":9,"result":1}"#,
                r#"{"jsonrpc":"2.0","id":0,"method":"health"}"#,
            ],
        );
        assert_eq!(r, [r#"{"jsonrpc":"2.0","id":0,"result":{"ok":true}}"#]);
    }
}
