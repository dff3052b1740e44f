//! Runs per API key: each key may have at most `--max-runs-per-key` runs and streams open
//! through this gateway at once (runs, answers, chat prompts). Past it the call gets 429
//! `resource_exhausted` with `retry-after`, before anything reaches the executor. A slot is
//! held until the response's body ends or is dropped (a closed stream frees it). Without API
//! keys there is no key to count by, and the executors' own `--max-live-runs` is the limit.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use axum::{
    body::Body,
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures::StreamExt;
use taskforce_proto::error::ErrorKind;
use taskforce_runtime::auth::Principal;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::{error::RestError, state::AppState};

/// Default `--max-runs-per-key`.
pub const DEFAULT_MAX_RUNS_PER_KEY: usize = 256;

/// The slots of every key.
#[derive(Debug)]
pub struct RunsPerKey {
    max: usize,
    keys: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
}

impl RunsPerKey {
    /// At most `max` runs per key (0: no limit).
    pub fn new(max: usize) -> Self {
        Self {
            max,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// A slot for `key`, or the 429 that says why there is none.
    pub fn try_acquire(&self, key: &Arc<str>) -> Result<Option<OwnedSemaphorePermit>, RestError> {
        if self.max == 0 {
            return Ok(None);
        }
        let semaphore = {
            let Ok(mut keys) = self.keys.lock() else {
                return Ok(None);
            };
            Arc::clone(
                keys.entry(Arc::clone(key))
                    .or_insert_with(|| Arc::new(Semaphore::new(self.max))),
            )
        };
        semaphore.try_acquire_owned().map(Some).map_err(|_| {
            RestError::new(
                ErrorKind::ResourceExhausted,
                format!(
                    "the API key {key:?} has its most runs open at once ({}, --max-runs-per-key); retry when one has ended",
                    self.max
                ),
            )
        })
    }
}

/// The layer of every route with a body: the request's body must arrive whole, within `max`
/// bytes, in `timeout` (the request timeout). A body sent a byte at a time would otherwise hold
/// its connection (and a run slot) for good, or, on the routes with a request timeout, run
/// into it and be answered as the gateway's fault (504). 408 when it is late, 413 when it is
/// too large. A request with no body (every `GET`) goes straight on: a service of its own, not
/// an `axum::middleware::from_fn`, so the read path pays for no boxed future (measured: 2 µs
/// of a 15 µs `GET`).
#[derive(Debug, Clone, Copy)]
pub struct BodyInTimeLayer {
    /// How long the body may take.
    pub timeout: std::time::Duration,
    /// Its most bytes.
    pub max: usize,
}

impl<S> tower::Layer<S> for BodyInTimeLayer {
    type Service = BodyInTime<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BodyInTime {
            inner,
            limits: *self,
        }
    }
}

/// The answer to a request whose body is refused before a byte of it is read: one that says
/// it is larger than `max` (413 at once, not after `max` bytes, and before an `Expect:
/// 100-continue` client sends it), or one in a content coding (`Content-Encoding: gzip`) the
/// gateway does not decode (415; it was read as plain JSON).
fn refused_unread(req: &Request, max: usize) -> Option<Response> {
    use http_body::Body as _;
    if req.body().size_hint().lower() > u64::try_from(max).unwrap_or(u64::MAX) {
        return Some(crate::extract::too_large(max).into_response());
    }
    let coding = req.headers().get(axum::http::header::CONTENT_ENCODING)?;
    if coding
        .to_str()
        .is_ok_and(|c| c.trim().is_empty() || c.trim().eq_ignore_ascii_case("identity"))
    {
        return None;
    }
    Some(crate::error::json_response(
        axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
        &taskforce_proto::error::ApiError::new(
            ErrorKind::InvalidArgument,
            format!(
                "request bodies are taken without a content coding; Content-Encoding {:?} is not \
                 supported: send the JSON as it is",
                String::from_utf8_lossy(coding.as_bytes())
            ),
        ),
    ))
}

/// The service of [`BodyInTimeLayer`].
#[derive(Debug, Clone)]
pub struct BodyInTime<S> {
    inner: S,
    limits: BodyInTimeLayer,
}

impl<S> tower::Service<Request> for BodyInTime<S>
where
    S: tower::Service<Request, Response = Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::Either<
        S::Future,
        futures::future::BoxFuture<'static, Result<Response, std::convert::Infallible>>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        use http_body::Body as _;
        if req.body().is_end_stream() {
            return futures::future::Either::Left(self.inner.call(req));
        }
        if let Some(refused) = refused_unread(&req, self.limits.max) {
            return futures::future::Either::Right(Box::pin(futures::future::ready(Ok(refused))));
        }
        // The clone that was made ready goes with this request (tower's rule for a service
        // called later than `poll_ready`).
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let BodyInTimeLayer { timeout, max } = self.limits;
        futures::future::Either::Right(Box::pin(async move {
            let (parts, body) = req.into_parts();
            Ok(
                match tokio::time::timeout(timeout, axum::body::to_bytes(body, max)).await {
                    Ok(Ok(bytes)) => {
                        return inner
                            .call(Request::from_parts(parts, Body::from(bytes)))
                            .await;
                    }
                    Ok(Err(e)) if e.to_string().contains("length limit") => {
                        crate::extract::too_large(max).into_response()
                    }
                    Ok(Err(e)) => RestError::new(
                        ErrorKind::InvalidArgument,
                        format!("the request body could not be read: {e}"),
                    )
                    .into_response(),
                    // The client's lateness (408), not the gateway's (504, `ErrorKind::Timeout`'s
                    // status).
                    Err(_) => crate::error::json_response(
                        axum::http::StatusCode::REQUEST_TIMEOUT,
                        &taskforce_proto::error::ApiError::new(
                            ErrorKind::Timeout,
                            format!(
                                "the request body did not arrive within {}s (the gateway's \
                                 request timeout)",
                                timeout.as_secs()
                            ),
                        ),
                    ),
                },
            )
        }))
    }
}

/// The middleware of the run routes: takes the caller's slot, and keeps it in the response
/// body until the body ends.
pub async fn per_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = req
        .extensions()
        .get::<Principal>()
        .map(|p| Arc::clone(&p.name))
    else {
        return next.run(req).await;
    };
    let permit = match state.runs_per_key.try_acquire(&key) {
        Ok(Some(permit)) => permit,
        Ok(None) => return next.run(req).await,
        Err(refused) => {
            let mut refusal = refused.into_response();
            taskforce_runtime::auth::close_unread(&req, &mut refusal);
            return refusal;
        }
    };
    next.run(req).await.map(|body| {
        Body::from_stream(body.into_data_stream().map(move |chunk| {
            // The slot lives as long as the body: dropped with it, when it ends or the client
            // goes away.
            let _slot = &permit;
            chunk
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_has_its_own_slots_and_a_dropped_slot_frees_one() {
        let runs = RunsPerKey::new(2);
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let first = runs.try_acquire(&a).expect("slot 1");
        let _second = runs.try_acquire(&a).expect("slot 2");
        let refused = runs.try_acquire(&a).expect_err("no third slot");
        assert_eq!(refused.0.kind, ErrorKind::ResourceExhausted);
        assert!(refused.0.message.contains("\"a\""), "{}", refused.0.message);
        assert!(
            runs.try_acquire(&b).is_ok_and(|p| p.is_some()),
            "another key"
        );
        drop(first);
        assert!(runs.try_acquire(&a).is_ok_and(|p| p.is_some()), "freed");
        assert!(
            RunsPerKey::new(0)
                .try_acquire(&a)
                .is_ok_and(|p| p.is_none())
        );
    }
}
