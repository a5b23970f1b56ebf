//! terraform-provider-denobridge, host side: `health` first, then the provider kind's calls,
//! several in flight at once (answers may come back in any order), `shutdown` last.

use std::time::Duration;

use sandpipe_proto::denobridge::{
    self as proto, CreateResult, DataResult, DeleteParams, DoneResult, HealthResult, Method,
    ModifyPlanParams, ModifyPlanResult, OpenResult, PrivateParams, PropsParams, ReadParams,
    ReadResult, RenewResult, UpdateParams, UpdateResult,
};
use sandpipe_proto::jsonrpc::{Dialect, INTERNAL_ERROR};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Exit;
use crate::rpc::{Incoming, JsonRpcPeer, RpcError};
use crate::session::Session;

/// A denobridge provider plugin. Calls may run concurrently (`&self`).
#[derive(Debug)]
pub struct DenoBridgeClient {
    rpc: JsonRpcPeer,
}

impl DenoBridgeClient {
    /// Take over `session` and check the provider's health, as the Go host does first.
    pub async fn connect(session: Session) -> Result<(Self, HealthResult), RpcError> {
        let client = DenoBridgeClient {
            rpc: JsonRpcPeer::new(session, Dialect::JsonRpc2),
        };
        let health = client
            .call::<(), HealthResult>(Method::Health, None)
            .await?;
        Ok((client, health))
    }

    /// The underlying JSON-RPC connection (for calls this client does not type).
    pub fn rpc(&self) -> &JsonRpcPeer {
        &self.rpc
    }

    /// Resource `create`.
    pub async fn create(&self, params: &PropsParams) -> Result<CreateResult, RpcError> {
        self.call(Method::Create, Some(params)).await
    }
    /// Resource `read` (`ReadResult::Gone` when it no longer exists).
    pub async fn read(&self, params: &ReadParams) -> Result<ReadResult, RpcError> {
        self.call(Method::Read, Some(params)).await
    }
    /// Resource `update`.
    pub async fn update(&self, params: &UpdateParams) -> Result<UpdateResult, RpcError> {
        self.call(Method::Update, Some(params)).await
    }
    /// Resource `delete`.
    pub async fn delete(&self, params: &DeleteParams) -> Result<DoneResult, RpcError> {
        self.call(Method::Delete, Some(params)).await
    }
    /// Resource `modifyPlan`.
    pub async fn modify_plan(
        &self,
        params: &ModifyPlanParams,
    ) -> Result<ModifyPlanResult, RpcError> {
        self.call(Method::ModifyPlan, Some(params)).await
    }
    /// Data source `read`.
    pub async fn read_data(&self, params: &PropsParams) -> Result<DataResult, RpcError> {
        self.call(Method::Read, Some(params)).await
    }
    /// Ephemeral `open`.
    pub async fn open(&self, params: &PropsParams) -> Result<OpenResult, RpcError> {
        self.call(Method::Open, Some(params)).await
    }
    /// Ephemeral `renew`.
    pub async fn renew(&self, params: &PrivateParams) -> Result<RenewResult, RpcError> {
        self.call(Method::Renew, Some(params)).await
    }
    /// Ephemeral `close`.
    pub async fn close(&self, params: &PrivateParams) -> Result<DoneResult, RpcError> {
        self.call(Method::Close, Some(params)).await
    }

    /// Action `invoke`; each `invokeProgress` message the plugin sends meanwhile is passed to
    /// `progress`.
    pub async fn invoke(
        &self,
        params: &PropsParams,
        mut progress: impl FnMut(String),
    ) -> Result<DoneResult, RpcError> {
        let value = serde_json::to_value(params).map_err(|e| RpcError::BadResult {
            method: "invoke".into(),
            reason: e.to_string(),
        })?;
        let (_, mut rx) = self
            .rpc
            .start_call(Method::Invoke.name(), Some(value))
            .await?;
        let result = loop {
            tokio::select! {
                r = &mut rx => break r.unwrap_or(Err(RpcError::Cancelled)),
                incoming = self.rpc.next_incoming() => match incoming {
                    Some(Incoming::Notification { method, params }) if method == proto::INVOKE_PROGRESS => {
                        let message = params.as_ref().and_then(|p| p.get("message")).and_then(|m| m.as_str());
                        progress(message.unwrap_or_default().to_owned());
                    }
                    Some(Incoming::Request { id, method, .. }) => {
                        let error = sandpipe_proto::jsonrpc::ErrorObject::new(
                            sandpipe_proto::jsonrpc::METHOD_NOT_FOUND,
                            format!("the host does not serve {method}"),
                        );
                        let _ = self.rpc.respond(id, Err(error)).await;
                    }
                    Some(Incoming::Notification { .. }) => {}
                    None => {
                        // The plugin is gone: the pending call is failed by the driver.
                        break rx.await.unwrap_or(Err(RpcError::Cancelled));
                    }
                },
            }
        };
        let value = self.finish(Method::Invoke, result)?;
        serde_json::from_value(value).map_err(|e| RpcError::BadResult {
            method: "invoke".into(),
            reason: e.to_string(),
        })
    }

    /// End the session the way the Go host does: a `shutdown` notification, then close stdin
    /// and give the plugin `grace` to exit.
    pub async fn shutdown(self, grace: Duration) -> Exit {
        let _ = self.rpc.notify(Method::Shutdown.name(), None).await;
        self.rpc.shutdown(grace).await
    }

    /// The request form of `shutdown` the guide shows: wait for its answer, then as
    /// [`DenoBridgeClient::shutdown`].
    pub async fn shutdown_request(self, grace: Duration) -> Exit {
        let _ = self.rpc.call(Method::Shutdown.name(), None).await;
        self.rpc.shutdown(grace).await
    }

    async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: Method,
        params: Option<&P>,
    ) -> Result<R, RpcError> {
        let result =
            self.rpc
                .call(
                    method.name(),
                    params.map(serde_json::to_value).transpose().map_err(|e| {
                        RpcError::BadResult {
                            method: method.name().into(),
                            reason: e.to_string(),
                        }
                    })?,
                )
                .await;
        let value = self.finish(method, result)?;
        serde_json::from_value(value).map_err(|e| RpcError::BadResult {
            method: method.name().into(),
            reason: e.to_string(),
        })
    }

    /// A bare `-32603 Internal error` carries its detail only on stderr: attach the tail.
    fn finish<T>(&self, _method: Method, result: Result<T, RpcError>) -> Result<T, RpcError> {
        match result {
            Err(RpcError::Remote(e))
                if e.code == sandpipe_proto::jsonrpc::ErrorCode::Int(INTERNAL_ERROR) =>
            {
                Err(RpcError::Remote(proto::with_stderr(
                    e,
                    &self.rpc.control().stderr_tail(),
                )))
            }
            other => other,
        }
    }
}
