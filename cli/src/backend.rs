//! One set of operations over two transports: the gateway (REST and SSE, the default) or the
//! registry and the executor straight over gRPC (`--grpc`). Both answer in the gateway's JSON
//! shapes, so printing does not care which one ran.

use std::{collections::BTreeMap, pin::Pin};

use futures::Stream;
use serde::Serialize;
use serde_json::Value;

use crate::{
    args::{Connection, Source},
    error::{Error, Result},
    gateway::Gateway,
    grpc::Grpc,
};

/// A run's events, each as the gateway's SSE `data:` JSON, until the stream ends.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<Value>> + Send>>;

/// What to run: the body of `POST /api/v1/execute/stream`.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ExecuteBody {
    /// What the agent should do.
    pub mission: String,
    /// A registry agent; wins over `profile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// A profile agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// Continue this session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// A model alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The policy mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Confirmation ids of `safeWrite` calls.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub confirmations: Vec<String>,
}

/// An answer: the body of `POST /api/v1/sessions/{id}/answer`.
#[derive(Debug, Default, Clone, Serialize)]
pub struct AnswerBody {
    /// The answer to an ordinary question.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub answer: String,
    /// Answers by item key (a consolidated question).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub answers: BTreeMap<String, String>,
    /// Only if this is the pending question's call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The continued run's policy mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Confirmation ids of `safeWrite` calls.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub confirmations: Vec<String>,
}

/// Where requests go.
#[derive(Debug)]
pub enum Backend {
    /// The gateway's REST API.
    Gateway(Gateway),
    /// The registry and the executor over gRPC.
    Grpc(Box<Grpc>),
}

impl Backend {
    /// The backend the flags choose.
    pub fn new(conn: &Connection) -> Result<Self> {
        if conn.grpc {
            Ok(Self::Grpc(Box::new(Grpc::new(
                &conn.registry,
                &conn.executor,
                conn.timeout(),
                conn.idle_timeout,
                conn.authorization()?,
            )?)))
        } else {
            Ok(Self::Gateway(Gateway::new(
                &conn.gateway,
                conn.timeout(),
                conn.idle_timeout,
                conn.authorization()?,
            )?))
        }
    }

    /// `{"agents": [...]}`: every agent (of `source`).
    pub async fn list_agents(&self, source: Option<Source>) -> Result<Value> {
        match self {
            Self::Gateway(g) => {
                let query: Vec<(&str, &str)> =
                    source.map(|s| ("source", s.as_str())).into_iter().collect();
                g.get(&["api", "v1", "agents"], &query).await
            }
            Self::Grpc(g) => g.list_agents(source).await,
        }
    }

    /// One agent.
    pub async fn get_agent(&self, id: &str) -> Result<Value> {
        match self {
            Self::Gateway(g) => g.get(&["api", "v1", "agents", id], &[]).await,
            Self::Grpc(g) => g.get_agent(id).await,
        }
    }

    /// Creates a custom agent from a REST create body; answers the stored agent.
    pub async fn create_agent(&self, body: Value) -> Result<Value> {
        match self {
            Self::Gateway(g) => g.post(&["api", "v1", "agents"], &body).await,
            Self::Grpc(g) => g.create_agent(body).await,
        }
    }

    /// Replaces custom agent `id` with a REST update body; with `expected_version`, only if
    /// that is its stored version. Answers the stored agent.
    pub async fn update_agent(
        &self,
        id: &str,
        body: Value,
        expected_version: Option<&str>,
    ) -> Result<Value> {
        match self {
            Self::Gateway(g) => {
                let mut body = body;
                if let (Some(fields), Some(version)) = (body.as_object_mut(), expected_version) {
                    fields.insert("expected_version".into(), version.into());
                }
                g.put(&["api", "v1", "agents", id], &body).await
            }
            Self::Grpc(g) => g.update_agent(id, body, expected_version).await,
        }
    }

    /// Checks a REST create body as a create would, saving nothing:
    /// `{"valid": true, "discovered_mcp_tools": [...], "warnings": [...]}`.
    pub async fn validate_agent(&self, body: Value) -> Result<Value> {
        match self {
            Self::Gateway(g) => g.post(&["api", "v1", "agents:validate"], &body).await,
            Self::Grpc(g) => g.validate_agent(body).await,
        }
    }

    /// Deletes a custom agent; with `expected_version`, only if that is its stored version.
    pub async fn delete_agent(&self, id: &str, expected_version: Option<&str>) -> Result<()> {
        match self {
            Self::Gateway(g) => {
                let query: Vec<(&str, &str)> = expected_version
                    .map(|v| ("expected_version", v))
                    .into_iter()
                    .collect();
                g.delete(&["api", "v1", "agents", id], &query).await
            }
            Self::Grpc(g) => g.delete_agent(id, expected_version).await,
        }
    }

    /// `{"tools": [...]}`: the tool catalog.
    pub async fn tools(&self) -> Result<Value> {
        match self {
            Self::Gateway(g) => g.get(&["api", "v1", "tools"], &[]).await,
            Self::Grpc(g) => g.tools().await,
        }
    }

    /// Starts a run and streams its events.
    pub async fn execute(&self, body: &ExecuteBody) -> Result<EventStream> {
        match self {
            Self::Gateway(g) => {
                let json = serde_json::to_value(body).map_err(Error::from_json)?;
                g.stream(&["api", "v1", "execute", "stream"], &json).await
            }
            Self::Grpc(g) => g.execute(body).await,
        }
    }

    /// Answers a paused session and streams the continued run.
    pub async fn answer(&self, session: &str, body: &AnswerBody) -> Result<EventStream> {
        match self {
            Self::Gateway(g) => {
                let json = serde_json::to_value(body).map_err(Error::from_json)?;
                g.stream(&["api", "v1", "sessions", session, "answer"], &json)
                    .await
            }
            Self::Grpc(g) => g.answer(session, body).await,
        }
    }

    /// Cancels a session's live run or waiting question: `{"cancelled": bool}`.
    pub async fn cancel(&self, id: &str) -> Result<Value> {
        match self {
            Self::Gateway(g) => {
                g.post(&["api", "v1", "sessions", id, "cancel"], &Value::Null)
                    .await
            }
            Self::Grpc(g) => g.cancel(id).await,
        }
    }

    /// A session.
    pub async fn session(&self, id: &str) -> Result<Value> {
        match self {
            Self::Gateway(g) => g.get(&["api", "v1", "sessions", id], &[]).await,
            Self::Grpc(g) => g.session(id).await,
        }
    }

    /// Deletes a session.
    pub async fn delete_session(&self, id: &str) -> Result<()> {
        match self {
            Self::Gateway(g) => g.delete(&["api", "v1", "sessions", id], &[]).await,
            Self::Grpc(g) => g.delete_session(id).await,
        }
    }

    /// `{"sessions": [...], "next_page_token"?}`: a page of the sessions.
    pub async fn sessions(&self, args: &crate::args::SessionsListArgs) -> Result<Value> {
        let status = args.status.as_deref().map(status_param).transpose()?;
        match self {
            Self::Gateway(g) => {
                let limit = args.limit.map(|n| n.to_string());
                let query: Vec<(&str, &str)> = [
                    ("agent_id", args.agent.as_deref()),
                    ("status", args.status.as_deref()),
                    ("page_size", limit.as_deref()),
                    ("page_token", args.page_token.as_deref()),
                ]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
                g.get(&["api", "v1", "sessions"], &query).await
            }
            Self::Grpc(g) => g.sessions(args, status).await,
        }
    }
}

/// A `--status` value: one of the statuses a list filters on.
fn status_param(status: &str) -> Result<gateway::sessions::StatusParam> {
    serde_json::from_value(Value::String(status.to_owned())).map_err(|_| {
        Error::Usage(format!(
            "--status must be running, completed, paused, failed or cancelled, not {status:?}"
        ))
    })
}
