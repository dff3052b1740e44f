//! Polling with a deadline: tests wait for a condition, never for a fixed time.

use std::{future::Future, time::Duration};

use tokio::time::Instant;

/// Calls `probe` every `step` until it returns `Some`, or gives up after `timeout` with `None`.
/// The probe runs at least once, also with a zero timeout.
pub async fn eventually<T, F, Fut>(timeout: Duration, step: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(step).await;
    }
}
