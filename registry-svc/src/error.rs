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
            // Nothing was written (the write path undoes a file change its cache update did not
            // follow): say why, so the operator frees space instead of reading logs.
            RegistryError::Io { ref source, .. } if taskforce_runtime::is_disk_full(source) => {
                tracing::error!(error = %e, "a write failed: the disk is full");
                ApiError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the registry cannot write: {}; nothing was changed",
                        taskforce_runtime::describe_io(source)
                    ),
                )
                .to_status()
            }
            // A read-only volume, or a config directory the registry's user may not write.
            RegistryError::Io { ref source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
                ) =>
            {
                tracing::error!(error = %e, "the config directory refused the registry");
                ApiError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the registry may not use its config directory ({source}); nothing was \
                         changed. Let the registry read and write it (or edit the files where \
                         they are kept, as in git)"
                    ),
                )
                .to_status()
            }
            RegistryError::Cache(sled::Error::Io(ref source)) => {
                tracing::error!(error = %e, "the cache failed");
                ApiError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the registry's cache cannot be written ({}); nothing was changed. Free \
                         space on its --data-dir and restart it: it rebuilds the cache from the \
                         YAML files",
                        taskforce_runtime::describe_io(source)
                    ),
                )
                .to_status()
            }
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
