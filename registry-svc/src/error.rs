//! The registry's error type and its one mapping to a gRPC status.

use taskforce_proto::error::{ApiError, ErrorKind};
use tonic::Status;

/// Everything that can go wrong in the registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A client-facing error (bad input, not found, conflict).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The YAML directory could not be read or written.
    #[error("file system error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The sled cache failed.
    #[error("cache error: {0}")]
    Cache(#[from] sled::Error),
    /// A definition could not be turned into YAML.
    #[error("yaml encoding error: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A cached entry could not be decoded (the cache is rebuilt from YAML on restart).
    #[error("cache entry could not be decoded: {0}")]
    Decode(#[from] prost::DecodeError),
    /// A configuration file is invalid (start-up only).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A blocking task panicked or was cancelled.
    #[error("background task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl RegistryError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

impl From<RegistryError> for Status {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::Api(api) => api.to_status(),
            internal @ (RegistryError::Io { .. }
            | RegistryError::Cache(_)
            | RegistryError::Yaml(_)
            | RegistryError::Decode(_)
            | RegistryError::Config(_)
            | RegistryError::Join(_)) => {
                tracing::error!(error = %internal, "internal error");
                ApiError::new(ErrorKind::Internal, "internal error; see the registry log")
                    .to_status()
            }
        }
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;
