//! terraform-provider-denobridge, host side: `health` first, then the provider kind's calls,
//! several in flight at once (answers may come back in any order), `shutdown` last. The rules
//! are the machine's (`sandpipe_proto::denobridge::Client`: health first, only the kind's
//! methods, typed results); the [`Driver`] runs it.

use std::time::Duration;

use sandpipe_proto::denobridge::{
    self as proto, ClientEvent, CreateResult, DataResult, DeleteParams, DoneResult, HealthResult,
    Method, ModifyPlanParams, ModifyPlanResult, OpenResult, PrivateParams, PropsParams,
    ProviderKind, ReadParams, ReadResult, RenewResult, Request, Response, UpdateParams,
    UpdateResult,
};
use sandpipe_proto::jsonrpc::{self, ErrorCode, INTERNAL_ERROR};
use serde_json::Value;

use crate::error::{Exit, Stopped};
use crate::run::session::{Session, SessionControl};
use crate::speak::driver::{Completion, Driver, Refused, Unasked};
use crate::speak::protocols::hooks::{
    CallError, CallRequest, DESCRIBE_GRACE, DescribeError, Launch,
};
use crate::speak::protocols::jsonrpc::RpcError;

/// A denobridge provider plugin of one [`ProviderKind`]. Calls may run concurrently (`&self`).
#[derive(Debug)]
pub struct DenoBridgeClient {
    driver: Driver<proto::Client>,
}

/// Pick the typed result out of a response, or say what came instead.
macro_rules! expect {
    ($response:expr, $variant:ident) => {
        match $response {
            Response::$variant(r) => Ok(r),
            other => Err(RpcError::BadResult {
                method: other.method().name().into(),
                reason: format!("unexpected {:?} result", other.method()),
            }),
        }
    };
}

impl DenoBridgeClient {
    /// Take over `session`, call `health` (the protocol's first call) and return its result.
    pub async fn connect(
        session: Session,
        kind: ProviderKind,
    ) -> Result<(Self, HealthResult), RpcError> {
        let client = DenoBridgeClient {
            // `invokeProgress` with several invokes pending (the wire cannot say whose) is
            // logged.
            driver: Driver::new(session, proto::Client::new(kind), Unasked),
        };
        let health = client.call(proto::Client::health).await?;
        Ok((client, expect!(health, Health)?))
    }

    /// The provider kind.
    pub fn kind(&self) -> ProviderKind {
        self.driver.inspect(proto::Client::kind)
    }

    /// The session's control half (exit, kill, stderr tail).
    pub fn control(&self) -> &SessionControl {
        self.driver.control()
    }

    /// Resource `create`.
    pub async fn create(&self, params: &PropsParams) -> Result<CreateResult, RpcError> {
        expect!(self.call(|m| m.create(params.clone())).await?, Create)
    }
    /// Resource `read`.
    pub async fn read(&self, params: &ReadParams) -> Result<ReadResult, RpcError> {
        expect!(self.call(|m| m.read(params.clone())).await?, ReadResource)
    }
    /// Resource `update`.
    pub async fn update(&self, params: &UpdateParams) -> Result<UpdateResult, RpcError> {
        expect!(self.call(|m| m.update(params.clone())).await?, Update)
    }
    /// Resource `delete`.
    pub async fn delete(&self, params: &DeleteParams) -> Result<DoneResult, RpcError> {
        expect!(self.call(|m| m.delete(params.clone())).await?, Delete)
    }
    /// Resource `modifyPlan` (optional: a plugin without it answers `-32601`).
    pub async fn modify_plan(
        &self,
        params: &ModifyPlanParams,
    ) -> Result<ModifyPlanResult, RpcError> {
        expect!(
            self.call(|m| m.modify_plan(params.clone())).await?,
            ModifyPlan
        )
    }
    /// Data source `read`.
    pub async fn read_data(&self, params: &PropsParams) -> Result<DataResult, RpcError> {
        expect!(self.call(|m| m.read_data(params.clone())).await?, ReadData)
    }
    /// Ephemeral `open`.
    pub async fn open(&self, params: &PropsParams) -> Result<OpenResult, RpcError> {
        expect!(self.call(|m| m.open(params.clone())).await?, Open)
    }
    /// Ephemeral `renew`.
    pub async fn renew(&self, params: &PrivateParams) -> Result<RenewResult, RpcError> {
        expect!(self.call(|m| m.renew(params.clone())).await?, Renew)
    }
    /// Ephemeral `close`.
    pub async fn close(&self, params: &PrivateParams) -> Result<DoneResult, RpcError> {
        expect!(self.call(|m| m.close(params.clone())).await?, Close)
    }

    /// Action `invoke`: `progress` gets each `invokeProgress` message as it arrives, in
    /// order, before the result. With several invokes in flight the wire does not say whose a
    /// message is; the machine then gives it to none of them, and it is logged.
    pub async fn invoke(
        &self,
        params: &PropsParams,
        mut progress: impl FnMut(String),
    ) -> Result<DoneResult, RpcError> {
        let mut stream = self
            .driver
            .request_stream(|m| m.invoke(params.clone()))
            .map_err(refused)?;
        let completion = loop {
            match stream.next().await {
                Some(Ok(Completion {
                    event: ClientEvent::Progress { progress: p, .. },
                    ..
                })) => progress(p.message),
                Some(done) => break done,
                None => {
                    break Err(self.driver.stopped().unwrap_or_else(|| {
                        Stopped::by_host("the session was dropped", Vec::new())
                    }));
                }
            }
        };
        let response = self.finish(completion)?;
        expect!(response, Invoke)
    }

    /// Any handler call by method name with JSON params, the result as JSON (`sandpipe
    /// call`). `health` answers from a fresh call.
    pub async fn call_value(&self, method: &str, params: Option<Value>) -> Result<Value, RpcError> {
        let kind = self.kind();
        let bad = |reason: String| RpcError::BadResult {
            method: method.to_owned(),
            reason,
        };
        let response = match Method::parse(kind, method) {
            Some(Method::Health) => self.call(proto::Client::health).await?,
            Some(m) if m != Method::Shutdown => {
                let request = Request::decode(kind, m, params.unwrap_or(Value::Null))
                    .map_err(|e| bad(format!("params do not fit: {e}")))?;
                self.call(|c| c.request(request)).await?
            }
            _ => {
                return Err(bad(format!(
                    "{} providers have no method {method}",
                    kind.describe()
                )));
            }
        };
        response.encode().map_err(|e| bad(e.to_string()))
    }

    /// `shutdown` as the real Go host sends it (a notification), then close stdin and give the
    /// plugin `grace` to exit (see [`DenoBridgeClient::shutdown_request`] for the request form).
    pub async fn shutdown(self, grace: Duration) -> Exit {
        let _ = self.driver.act(proto::Client::shutdown_notify);
        self.driver.shutdown(grace).await
    }

    /// `shutdown` as the guide shows it: a request, answered `{}`; then as
    /// [`DenoBridgeClient::shutdown`].
    pub async fn shutdown_request(self, grace: Duration) -> Exit {
        let _ = self.call(proto::Client::shutdown_request).await;
        self.driver.shutdown(grace).await
    }

    async fn call(
        &self,
        make: impl FnOnce(&mut proto::Client) -> Result<jsonrpc::Id, jsonrpc::ProtocolError>,
    ) -> Result<Response, RpcError> {
        let pending = self.driver.request(make).map_err(refused)?;
        self.finish(pending.wait().await)
    }

    /// A completion as the caller's result. An answer that does not fit the method is
    /// [`RpcError::BadResult`]; a plugin's bare `-32603` gets its stderr tail attached
    /// ([`proto::with_stderr`]), since such a plugin writes the detail there.
    fn finish(&self, c: Result<Completion<ClientEvent>, Stopped>) -> Result<Response, RpcError> {
        let c = c.map_err(stopped)?;
        let ClientEvent::Response {
            result,
            refused,
            method,
            ..
        } = c.event
        else {
            unreachable!("only responses complete requests")
        };
        // An answer that does not fit the method's schema is the plugin breaking the
        // protocol, not its error: the machine made the `-32603`.
        if let Some(e) = refused {
            return Err(RpcError::BadResult {
                method: method.name().to_owned(),
                reason: e.to_string(),
            });
        }
        RpcError::from_answer(result, c.stopped).map_err(|e| match e {
            RpcError::Remote(e) if e.code == ErrorCode::Int(INTERNAL_ERROR) => {
                RpcError::Remote(proto::with_stderr(e, &self.control().stderr_tail()))
            }
            other => other,
        })
    }
}

fn stopped(s: Stopped) -> RpcError {
    RpcError::Failed {
        error: proto::stopped_error(&s),
        stopped: s,
    }
}

fn refused(r: Refused<jsonrpc::ProtocolError>) -> RpcError {
    match r {
        Refused::Stopped(s) => stopped(s),
        Refused::Machine(e) => RpcError::Refused(e),
    }
}

// `sandpipe call` and `inspect --protocol` (the hooks in this protocol's line of
// `protocols::PROTOCOLS`).

/// `sandpipe call --protocol denobridge`: METHOD names the provider kind ([`kind_of`]) and
/// the call; `health` is the handshake's answer.
pub(crate) async fn one_call(launch: Launch<'_>, request: CallRequest) -> Result<Value, CallError> {
    let session = launch.start().await.map_err(CallError::Start)?;
    let method = request.method.as_str();
    let (client, health) = DenoBridgeClient::connect(session, kind_of(method))
        .await
        .map_err(|e| e.call_error("denobridge"))?;
    let result = if method == "health" {
        serde_json::to_value(&health).map_err(|e| RpcError::BadResult {
            method: "health".into(),
            reason: e.to_string(),
        })
    } else {
        client.call_value(method, request.params).await
    };
    let _ = client.shutdown(request.grace).await;
    result.map_err(|e| e.call_error("denobridge"))
}

/// `sandpipe inspect --protocol denobridge`: the `health` answer (as a resource provider).
pub(crate) async fn describe(launch: Launch<'_>) -> Result<Value, DescribeError> {
    let session = launch.start().await?;
    let (client, health) = DenoBridgeClient::connect(session, ProviderKind::Resource)
        .await
        .map_err(|e| DescribeError::Failed(e.to_string()))?;
    let _ = client.shutdown(DESCRIBE_GRACE).await;
    serde_json::to_value(health)
        .map(|h| serde_json::json!({"health": h}))
        .map_err(|e| DescribeError::Failed(e.to_string()))
}

/// The provider kind a `call` of `method` speaks to: the kind that has the method (`read` is
/// a resource's; `health` any kind's). A data source's `read` is not callable from
/// `sandpipe call`.
fn kind_of(method: &str) -> ProviderKind {
    match method {
        "open" | "renew" | "close" => ProviderKind::Ephemeral,
        "invoke" => ProviderKind::Action,
        _ => ProviderKind::Resource,
    }
}
