//! The core bad-input cases over gRPC: the right status code, `google.rpc` details naming the
//! problem, and nothing changed.

use taskforce_proto::{
    error::ErrorKind,
    v1::{self, AgentSource},
};
use taskforce_tests::spawn_registry;
use tonic::Code;

use crate::{
    bad_input::{bad_ids, invalid_tools_body, snapshot},
    helpers::{api_error, spec},
};

#[tokio::test]
async fn grpc_refuses_invalid_ids_with_invalid_argument() {
    let stack = spawn_registry().await.expect("stack starts");
    let mut client = stack.registry();
    let before = snapshot(&stack).await;

    for id in bad_ids() {
        let e = client
            .create_agent(v1::CreateAgentRequest {
                spec: Some(spec(&id)),
            })
            .await
            .expect_err("bad id is refused");
        assert_eq!(e.code(), Code::InvalidArgument, "create {id:?}: {e:?}");
        let fields: Vec<String> = api_error(&e)
            .field_violations
            .into_iter()
            .map(|f| f.0)
            .collect();
        assert_eq!(fields, ["agent_id"], "create {id:?}");
        let e = client
            .get_agent(v1::GetAgentRequest {
                agent_id: id.clone(),
            })
            .await
            .expect_err("bad id is refused");
        assert_eq!(e.code(), Code::InvalidArgument, "get {id:?}: {e:?}");
        let e = client
            .update_agent(v1::UpdateAgentRequest {
                agent_id: id.clone(),
                spec: Some(spec("valid-id")),
                expected_version: String::new(),
            })
            .await
            .expect_err("bad id is refused");
        assert_eq!(e.code(), Code::InvalidArgument, "update {id:?}: {e:?}");
        let e = client
            .delete_agent(v1::DeleteAgentRequest {
                agent_id: id.clone(),
                expected_version: String::new(),
            })
            .await
            .expect_err("bad id is refused");
        assert_eq!(e.code(), Code::InvalidArgument, "delete {id:?}: {e:?}");
    }

    assert_eq!(
        snapshot(&stack).await,
        before,
        "refused requests changed files or listing"
    );
}

#[tokio::test]
async fn grpc_refuses_missing_fields_and_unknown_tools_with_invalid_argument_details() {
    let stack = spawn_registry().await.expect("stack starts");
    let mut client = stack.registry();
    let before = snapshot(&stack).await;

    let e = client
        .create_agent(v1::CreateAgentRequest { spec: None })
        .await
        .expect_err("no spec");
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = client
        .create_agent(v1::CreateAgentRequest {
            spec: Some(v1::AgentSpec {
                agent_id: "empty-spec".into(),
                ..Default::default()
            }),
        })
        .await
        .expect_err("empty spec");
    assert_eq!(e.code(), Code::InvalidArgument);
    let fields: Vec<String> = api_error(&e)
        .field_violations
        .into_iter()
        .map(|f| f.0)
        .collect();
    assert_eq!(
        fields,
        ["name", "description", "system_prompt", "tool_allowlist"],
        "all violations at once"
    );

    let mut unknown = spec("grpc-unknown-tools");
    unknown.tool_allowlist = vec!["foo_tool".into(), "Python".into()];
    let e = client
        .create_agent(v1::CreateAgentRequest {
            spec: Some(unknown),
        })
        .await
        .expect_err("unknown tools");
    assert_eq!(e.code(), Code::InvalidArgument);
    let err = api_error(&e);
    assert_eq!(err.kind, ErrorKind::InvalidTools);
    assert_eq!(err.to_json(), invalid_tools_body(&["foo_tool", "Python"]));

    assert_eq!(
        snapshot(&stack).await,
        before,
        "refused requests changed files or listing"
    );
}

#[tokio::test]
async fn grpc_maps_conflicts_unknown_ids_and_read_only_agents_to_their_codes() {
    let stack = spawn_registry().await.expect("stack starts");
    let mut client = stack.registry();
    let created = client
        .create_agent(v1::CreateAgentRequest {
            spec: Some(spec("grpc-target")),
        })
        .await
        .expect("create grpc-target")
        .into_inner();
    let mut second = spec("grpc-target");
    second.description = "Second revision.".into();
    client
        .update_agent(v1::UpdateAgentRequest {
            agent_id: "grpc-target".into(),
            spec: Some(second),
            expected_version: created.version.clone(),
        })
        .await
        .expect("update grpc-target");
    let before = snapshot(&stack).await;

    let e = client
        .create_agent(v1::CreateAgentRequest {
            spec: Some(spec("invoice-extractor")),
        })
        .await
        .expect_err("duplicate");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");

    for e in [
        client
            .get_agent(v1::GetAgentRequest {
                agent_id: "no-such-agent".into(),
            })
            .await
            .expect_err("unknown"),
        client
            .update_agent(v1::UpdateAgentRequest {
                agent_id: "no-such-agent".into(),
                spec: Some(spec("no-such-agent")),
                expected_version: String::new(),
            })
            .await
            .expect_err("unknown"),
        client
            .delete_agent(v1::DeleteAgentRequest {
                agent_id: "no-such-agent".into(),
                expected_version: String::new(),
            })
            .await
            .expect_err("unknown"),
    ] {
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        assert!(e.message().contains("no-such-agent"), "{e:?}");
    }

    let e = client
        .update_agent(v1::UpdateAgentRequest {
            agent_id: "grpc-target".into(),
            spec: Some(spec("grpc-target")),
            expected_version: created.version.clone(),
        })
        .await
        .expect_err("stale update");
    assert_eq!(e.code(), Code::Aborted, "{e:?}");
    assert_eq!(api_error(&e).kind, ErrorKind::VersionConflict);
    let e = client
        .delete_agent(v1::DeleteAgentRequest {
            agent_id: "grpc-target".into(),
            expected_version: created.version.clone(),
        })
        .await
        .expect_err("stale delete");
    assert_eq!(e.code(), Code::Aborted, "{e:?}");

    let e = client
        .update_agent(v1::UpdateAgentRequest {
            agent_id: "dev".into(),
            spec: Some(spec("dev")),
            expected_version: String::new(),
        })
        .await
        .expect_err("profile agents are read-only");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert_eq!(api_error(&e).kind, ErrorKind::ReadOnly);

    let e = client
        .list_agents(v1::ListAgentsRequest {
            page_size: 10,
            page_token: "not-a-token".into(),
            source: AgentSource::Unspecified.into(),
        })
        .await
        .expect_err("bad page token");
    assert_eq!(e.code(), Code::InvalidArgument);
    // As over REST: a page over the most is refused, naming the field.
    let e = client
        .list_agents(v1::ListAgentsRequest {
            page_size: 1001,
            page_token: String::new(),
            source: AgentSource::Unspecified.into(),
        })
        .await
        .expect_err("too large a page");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("page_size"), "{e:?}");

    assert_eq!(
        snapshot(&stack).await,
        before,
        "refused requests changed files or listing"
    );
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_and_the_registry_still_answers() {
    use tokio::io::AsyncReadExt;
    let stack = spawn_registry().await.expect("stack starts");
    // Many silent connections at once (a client holding descriptors without a request).
    let mut silent = Vec::new();
    for _ in 0..20 {
        silent.push(
            tokio::net::TcpStream::connect(stack.registry_addr())
                .await
                .expect("connect"),
        );
    }
    // Calls on other connections are answered meanwhile.
    let listed = stack
        .registry()
        .list_agents(v1::ListAgentsRequest::default())
        .await;
    assert!(listed.is_ok(), "{listed:?}");
    // Each is closed by the server (EOF) after its opening timeout, not held for good.
    for mut conn in silent {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(std::time::Duration::from_secs(60), conn.read(&mut buf))
            .await
            .expect("the server closed a silent connection within a minute");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
}
