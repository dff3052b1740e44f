//! `taskforce health TARGET`: one probe, for container healthchecks (distroless images have no
//! shell and no curl). `grpc://HOST:PORT` asks `grpc.health.v1.Health/Check`; an `http(s)://`
//! URL is a GET that must answer 2xx. Everything, connecting included, within one timeout.

use std::time::Duration;

use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::{
    error::{Error, Result, chain},
    gateway::parse_http_url,
    grpc,
};

/// Probes `target`; answers what it said when healthy (`SERVING`, `200 OK`).
pub async fn check(target: &str, service: &str, timeout: Duration) -> Result<String> {
    let timed_out = || Error::Timeout {
        service: "service",
        url: target.to_owned(),
        after: timeout,
        what: "--timeout",
    };
    if target.starts_with("grpc://") {
        tokio::time::timeout(timeout, check_grpc(target, service, timeout))
            .await
            .map_err(|_| timed_out())?
    } else if target.starts_with("http://") || target.starts_with("https://") {
        if !service.is_empty() {
            return Err(Error::Usage(format!(
                "--service {service:?} names a gRPC service; {target:?} is an HTTP target \
                 (use grpc://HOST:PORT, or leave out --service)"
            )));
        }
        tokio::time::timeout(timeout, check_http(target, timeout))
            .await
            .map_err(|_| timed_out())?
    } else {
        Err(Error::Usage(format!(
            "{target:?}: expected grpc://HOST:PORT or an http(s):// URL"
        )))
    }
}

async fn check_grpc(target: &str, service: &str, timeout: Duration) -> Result<String> {
    let endpoint = grpc::endpoint(target, "TARGET", timeout)?;
    let channel = grpc::connect(&endpoint, "service", timeout)
        .await
        .map_err(|e| match e {
            // Name the target as given (`grpc://`), not as the endpoint spells it.
            Error::Unreachable { service, cause, .. } => Error::Unreachable {
                service,
                url: target.to_owned(),
                cause,
            },
            other => other,
        })?;
    let mut req = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    req.set_timeout(timeout);
    let status = HealthClient::new(channel)
        .check(req)
        .await
        .map_err(|s| {
            if grpc::is_deadline(&s) {
                Error::Timeout {
                    service: "service",
                    url: target.to_owned(),
                    after: timeout,
                    what: "--timeout",
                }
            } else {
                Error::Unhealthy {
                    target: target.to_owned(),
                    status: format!("{:?}: {}", s.code(), s.message()),
                }
            }
        })?
        .into_inner()
        .status();
    match status {
        ServingStatus::Serving => Ok(status.as_str_name().to_owned()),
        other => Err(Error::Unhealthy {
            target: target.to_owned(),
            status: other.as_str_name().to_owned(),
        }),
    }
}

async fn check_http(target: &str, timeout: Duration) -> Result<String> {
    let url = parse_http_url(target, "TARGET")?;
    // A probe of a local service: a proxy from the environment must not get in between.
    let client = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()
        .map_err(|e| Error::Input(format!("cannot build the HTTP client: {}", chain(&e))))?;
    let resp = client.get(url).send().await.map_err(|e| {
        let cause = std::error::Error::source(&e).map_or_else(|| e.to_string(), chain);
        if e.is_connect() {
            Error::Unreachable {
                service: "service",
                url: target.to_owned(),
                cause,
            }
        } else {
            Error::Transport {
                service: "service",
                url: target.to_owned(),
                cause,
            }
        }
    })?;
    let status = resp.status();
    let said = format!(
        "{} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default()
    )
    .trim_end()
    .to_owned();
    if status.is_success() {
        Ok(said)
    } else {
        Err(Error::Unhealthy {
            target: target.to_owned(),
            status: format!("HTTP {said}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn other_schemes_are_refused_at_once() {
        let err = check("tcp://127.0.0.1:1", "", Duration::from_secs(1))
            .await
            .expect_err("not a target");
        assert!(matches!(err, Error::Usage(_)), "{err}");
    }

    #[tokio::test]
    async fn a_port_nobody_listens_on_is_unreachable() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
            l.local_addr().expect("an address").port()
        };
        for target in [
            format!("grpc://127.0.0.1:{port}"),
            format!("http://127.0.0.1:{port}/healthz"),
        ] {
            let err = check(&target, "", Duration::from_secs(5))
                .await
                .expect_err("nothing listens");
            assert!(
                matches!(err, Error::Unreachable { .. }),
                "{target}: {err:?}"
            );
        }
    }
}
