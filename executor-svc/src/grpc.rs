//! The `taskforce.v1.Executor` gRPC service: a thin layer over [`Runner`].

use std::sync::Arc;

use taskforce_proto::v1::{
    AnswerRequest, CancelRequest, CancelResponse, DeleteSessionRequest, DeleteSessionResponse,
    ExecuteRequest, GetPlanRequest, GetSessionRequest, ListSessionsRequest, ListSessionsResponse,
    Plan, Session, executor_server::Executor,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::instrument;

use crate::{
    ExecutorError,
    run::{Runner, StreamItem, session_id_of},
};

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct ExecutorService {
    runner: Arc<Runner>,
}

impl ExecutorService {
    /// A service over `runner`.
    pub fn new(runner: Arc<Runner>) -> Self {
        Self { runner }
    }
}

#[tonic::async_trait]
impl Executor for ExecutorService {
    type ExecuteStream = ReceiverStream<StreamItem>;
    type AnswerStream = ReceiverStream<StreamItem>;

    #[instrument(level = "debug", skip_all, fields(agent_id = request.get_ref().agent_id.as_deref().unwrap_or(""), profile = request.get_ref().profile.as_deref().unwrap_or("")))]
    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<Self::ExecuteStream>, Status> {
        let stream = self
            .runner
            .execute(request.into_inner())
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(stream))
    }

    #[instrument(level = "debug", skip_all, fields(session_id = %request.get_ref().session_id))]
    async fn answer(
        &self,
        request: Request<AnswerRequest>,
    ) -> Result<Response<Self::AnswerStream>, Status> {
        let stream = self
            .runner
            .answer(request.into_inner())
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(stream))
    }

    #[instrument(level = "debug", skip_all, fields(session_id = %request.get_ref().session_id))]
    async fn cancel(
        &self,
        request: Request<CancelRequest>,
    ) -> Result<Response<CancelResponse>, Status> {
        let id = session_id_of(&request.into_inner().session_id).map_err(|e| e.to_status())?;
        let cancelled = self.runner.cancel(&id).await.map_err(|e| e.to_status())?;
        if !cancelled
            && self
                .runner
                .session(&id)
                .map_err(|e| e.to_status())?
                .is_none()
        {
            return Err(
                ExecutorError::NotFound(format!("session `{id}` does not exist")).to_status(),
            );
        }
        Ok(Response::new(CancelResponse { cancelled }))
    }

    #[instrument(level = "debug", skip_all, fields(session_id = %request.get_ref().session_id))]
    async fn get_session(
        &self,
        request: Request<GetSessionRequest>,
    ) -> Result<Response<Session>, Status> {
        let id = session_id_of(&request.into_inner().session_id).map_err(|e| e.to_status())?;
        match self.runner.session(&id).map_err(|e| e.to_status())? {
            Some(session) => Ok(Response::new(session.to_proto())),
            None => {
                Err(ExecutorError::NotFound(format!("session `{id}` does not exist")).to_status())
            }
        }
    }

    #[instrument(level = "debug", skip_all, fields(session_id = %request.get_ref().session_id))]
    async fn delete_session(
        &self,
        request: Request<DeleteSessionRequest>,
    ) -> Result<Response<DeleteSessionResponse>, Status> {
        let id = session_id_of(&request.into_inner().session_id).map_err(|e| e.to_status())?;
        if self
            .runner
            .delete_session(&id)
            .await
            .map_err(|e| e.to_status())?
        {
            Ok(Response::new(DeleteSessionResponse {}))
        } else {
            Err(ExecutorError::NotFound(format!("session `{id}` does not exist")).to_status())
        }
    }

    #[instrument(level = "debug", skip_all)]
    async fn list_sessions(
        &self,
        request: Request<ListSessionsRequest>,
    ) -> Result<Response<ListSessionsResponse>, Status> {
        // Reads the page's sessions from the store: off the async workers.
        let runner = Arc::clone(&self.runner);
        let req = request.into_inner();
        tokio::task::spawn_blocking(move || runner.list_sessions(&req))
            .await
            .map_err(ExecutorError::from)
            .and_then(|listed| listed)
            .map(Response::new)
            .map_err(|e| e.to_status())
    }

    #[instrument(level = "debug", skip_all, fields(session_id = %request.get_ref().session_id))]
    async fn get_plan(&self, request: Request<GetPlanRequest>) -> Result<Response<Plan>, Status> {
        let id = session_id_of(&request.into_inner().session_id).map_err(|e| e.to_status())?;
        match self.runner.plan(&id).map_err(|e| e.to_status())? {
            Some(plan) => Ok(Response::new(crate::session::plan_to_proto(&plan))),
            None => {
                Err(ExecutorError::NotFound(format!("session `{id}` does not exist")).to_status())
            }
        }
    }
}
