//! The `taskforce.v1.Executor` gRPC service: a thin layer over [`Runner`].

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

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
    type ExecuteStream = WithinDeadline;
    type AnswerStream = WithinDeadline;

    #[instrument(level = "debug", skip_all, fields(agent_id = request.get_ref().agent_id.as_deref().unwrap_or(""), profile = request.get_ref().profile.as_deref().unwrap_or("")))]
    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<Self::ExecuteStream>, Status> {
        let deadline = deadline_of(&request).map(|d| tokio::time::Instant::now() + d);
        let stream = self
            .runner
            .execute(request.into_inner())
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(WithinDeadline::new(stream, deadline)))
    }

    #[instrument(level = "debug", skip_all, fields(session_id = %request.get_ref().session_id))]
    async fn answer(
        &self,
        request: Request<AnswerRequest>,
    ) -> Result<Response<Self::AnswerStream>, Status> {
        let deadline = deadline_of(&request).map(|d| tokio::time::Instant::now() + d);
        let stream = self
            .runner
            .answer(request.into_inner())
            .await
            .map_err(|e| e.to_status())?;
        Ok(Response::new(WithinDeadline::new(stream, deadline)))
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

/// The deadline a client gave its call (`grpc-timeout`: up to 8 digits and a unit), if any.
/// tonic's own deadline covers a call until its answer starts, which for a run is its stream.
fn deadline_of<T>(request: &Request<T>) -> Option<Duration> {
    let value = request.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A run's events until the call's deadline (counted from the call's arrival), if it has one:
/// then the call ends with `DEADLINE_EXCEEDED`, and the run, its stream gone, is cancelled as
/// when its client leaves.
pub struct WithinDeadline {
    events: ReceiverStream<StreamItem>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The deadline passed: the stream has ended.
    ended: bool,
}

impl WithinDeadline {
    fn new(events: ReceiverStream<StreamItem>, deadline: Option<tokio::time::Instant>) -> Self {
        Self {
            events,
            deadline: deadline.map(|at| Box::pin(tokio::time::sleep_until(at))),
            ended: false,
        }
    }

    fn expired(&mut self) -> Poll<Option<StreamItem>> {
        self.ended = true;
        self.events.close();
        Poll::Ready(Some(Err(Status::deadline_exceeded(
            "the call's deadline (grpc-timeout) passed; the run is cancelled",
        ))))
    }
}

impl tokio_stream::Stream for WithinDeadline {
    type Item = StreamItem;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamItem>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        // The events first; the timer is looked at (no waker registered) when one is ready,
        // and waited on only when none is.
        let Some(deadline) = &mut this.deadline else {
            return Pin::new(&mut this.events).poll_next(cx);
        };
        if deadline.is_elapsed() {
            return this.expired();
        }
        match Pin::new(&mut this.events).poll_next(cx) {
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => this.expired(),
            polled => polled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_as_the_protocol_writes_them() {
        let with = |value: &str| {
            let mut request = Request::new(());
            request
                .metadata_mut()
                .insert("grpc-timeout", value.parse().expect("ascii"));
            deadline_of(&request)
        };
        assert_eq!(with("2S"), Some(Duration::from_secs(2)));
        assert_eq!(with("300m"), Some(Duration::from_millis(300)));
        assert_eq!(with("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(with("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "S", "123456789S", "2s", "-1S", "1.5S", "2 S"] {
            assert_eq!(with(bad), None, "{bad:?}");
        }
        assert_eq!(deadline_of(&Request::new(())), None);
    }
}
