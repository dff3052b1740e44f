//! The crate's error type and its mapping to gRPC statuses.

use taskforce_proto::error::{ApiError, ErrorKind};
use tonic::Status;

/// What can go wrong in the executor outside a run (runs report their failures as events).
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The request is malformed; `field` names the offending field.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// The request field.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// An agent, profile or session that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the session's state (e.g. answering a session that is not
    /// paused, or starting a run on a session that has one).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A new prompt for a session that waits for an answer: a `session_conflict` whose body
    /// (and `ErrorInfo`) also says `session_status: paused`, so a client can answer instead.
    #[error("{0}")]
    AwaitingAnswer(String),
    /// The executor is at its most live runs (`--max-live-runs`).
    #[error("{0}")]
    Busy(String),
    /// The executor is stopping: it takes no new run. Answered as a plain `UNAVAILABLE` (no
    /// Taskforce error details), as a stopped executor's connection would be, so a gateway
    /// starts the run on another executor.
    #[error("the executor is stopping and starts no runs now; retry shortly")]
    Stopping,
    /// The registry (or another dependency) cannot be reached.
    #[error("{0}")]
    Unavailable(String),
    /// The session store failed.
    #[error("session store: {0}")]
    Store(#[from] sled::Error),
    /// The session store did not finish a flush in time (sled's flush does not return on a
    /// disk that takes no more writes).
    #[error(
        "the session store did not finish writing within {} s (a full or failing disk?)",
        .0.as_secs()
    )]
    StoreStalled(std::time::Duration),
    /// A stored session could not be decoded or encoded.
    #[error("session encoding: {0}")]
    Encoding(#[from] serde_json::Error),
    /// The LLM configuration is wrong.
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    /// Start-up configuration is wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// A blocking task panicked or was cancelled.
    #[error("background task: {0}")]
    Join(#[from] tokio::task::JoinError),
    /// The gRPC server failed.
    #[error("{0}")]
    Server(#[from] taskforce_runtime::GrpcError),
}

impl ExecutorError {
    /// A bad request field.
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field,
            message: message.into(),
        }
    }

    /// The client-facing kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::FailedPrecondition(_) | Self::AwaitingAnswer(_) => ErrorKind::SessionConflict,
            Self::Unavailable(_) | Self::Store(sled::Error::Io(_)) | Self::StoreStalled(_) => {
                ErrorKind::Unavailable
            }
            Self::Busy(_) => ErrorKind::ResourceExhausted,
            Self::Stopping => ErrorKind::Unavailable,
            Self::Llm(_) => ErrorKind::InvalidArgument,
            Self::Store(_)
            | Self::Encoding(_)
            | Self::Config(_)
            | Self::Join(_)
            | Self::Server(_) => ErrorKind::Internal,
        }
    }

    /// The gRPC status: client errors say what is wrong; internal ones say little and are
    /// logged with their cause.
    pub fn to_status(&self) -> Status {
        let api = match self {
            Self::Stopping => return Status::unavailable(self.to_string()),
            Self::InvalidArgument { field, message } => ApiError::field(*field, message.clone()),
            // The disk (full, failing): the operator can act on it, so it is said.
            Self::Store(sled::Error::Io(e)) => {
                tracing::error!(error = %self, "the session store failed");
                let e = taskforce_runtime::describe_io(e);
                ApiError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the executor cannot store sessions ({e}); free space on its --data-dir \
                         and restart it"
                    ),
                )
            }
            Self::Store(_) | Self::Encoding(_) | Self::Join(_) | Self::Server(_) => {
                tracing::error!(error = %self, "internal error");
                ApiError::new(ErrorKind::Internal, "internal error in the executor")
            }
            Self::AwaitingAnswer(message) => {
                let mut api = ApiError::new(ErrorKind::SessionConflict, message.clone());
                api.extra
                    .push(("session_status".to_owned(), serde_json::json!("paused")));
                api
            }
            Self::NotFound(_)
            | Self::FailedPrecondition(_)
            | Self::Busy(_)
            | Self::Unavailable(_)
            | Self::StoreStalled(_)
            | Self::Llm(_)
            | Self::Config(_) => ApiError::new(self.kind(), self.to_string()),
        };
        api.to_status()
    }
}
