//! SIGKILL in the middle of a burst of writes loses no acknowledged write and leaves no partial
//! file; a deleted cache is rebuilt from the YAML files to the same listing.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use taskforce_proto::v1::{self, AgentSource};
use taskforce_tests::{eventually, spawn_registry};
use tokio::time::Instant;

use crate::helpers::{custom_spec, dir_entries, grpc_list_all, grpc_versions, read_yaml, spec};

const TASKS: usize = 16;
const OPS_PER_TASK: u32 = 40;
/// Acknowledged writes to wait for before the kill (well before the burst can end).
const KILL_AFTER_ACKS: usize = 120;

/// One acknowledged write: the agent, the task-local sequence number written into its
/// description, and the version the registry returned.
#[derive(Debug, Clone)]
struct Ack {
    id: String,
    seq: u32,
    version: String,
}

/// An error a writer saw, and when.
#[derive(Debug)]
struct Failure {
    at: Instant,
    status: tonic::Status,
}

fn description(task: usize, seq: u32) -> String {
    format!("task {task} rev {seq}")
}

/// The sequence number in a description written by [`description`].
fn seq_of(description: &str) -> u32 {
    description
        .rsplit(' ')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unexpected description {description:?}"))
}

/// One writer: creates agents it owns and updates them with their last known version, until
/// the registry stops answering.
async fn writer(
    task: usize,
    mut client: v1::agent_registry_client::AgentRegistryClient<tonic::transport::Channel>,
    acks: Arc<Mutex<Vec<Ack>>>,
    acked: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
) -> Option<Failure> {
    let mut own: Vec<(String, String)> = Vec::new();
    for seq in 0..OPS_PER_TASK {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let result = if seq % 3 == 0 || own.is_empty() {
            let id = format!("crash-{task:02}-{seq:03}");
            let mut s = spec(&id);
            s.description = description(task, seq);
            client
                .create_agent(v1::CreateAgentRequest { spec: Some(s) })
                .await
                .map(|r| (own.len(), id, r.into_inner().version))
        } else {
            let slot = (seq as usize * 7) % own.len();
            let (id, version) = own[slot].clone();
            let mut s = spec(&id);
            s.description = description(task, seq);
            s.tool_allowlist = vec![
                "ask_user".into(),
                ["python", "git", "web_fetch"][seq as usize % 3].into(),
            ];
            client
                .update_agent(v1::UpdateAgentRequest {
                    agent_id: id.clone(),
                    spec: Some(s),
                    expected_version: version,
                })
                .await
                .map(|r| (slot, id, r.into_inner().version))
        };
        match result {
            Ok((slot, id, version)) => {
                if slot == own.len() {
                    own.push((id.clone(), version.clone()));
                } else {
                    own[slot].1.clone_from(&version);
                }
                acks.lock()
                    .expect("acks lock")
                    .push(Ack { id, seq, version });
                acked.fetch_add(1, Ordering::SeqCst);
            }
            Err(status) => {
                return Some(Failure {
                    at: Instant::now(),
                    status,
                });
            }
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9_mid_burst_and_a_cache_rebuild() {
    let mut stack = spawn_registry().await.expect("stack starts");
    let acks = Arc::new(Mutex::new(Vec::new()));
    let acked = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..TASKS)
        .map(|t| {
            tokio::spawn(writer(
                t,
                stack.registry(),
                Arc::clone(&acks),
                Arc::clone(&acked),
                Arc::clone(&stop),
            ))
        })
        .collect();

    let reached = eventually(Duration::from_secs(120), Duration::from_millis(5), || {
        let n = acked.load(Ordering::SeqCst);
        async move { (n >= KILL_AFTER_ACKS).then_some(n) }
    })
    .await;
    let killed_at = Instant::now();
    stack.kill9().expect("SIGKILL the registry");
    stop.store(true, Ordering::SeqCst);
    assert!(
        reached.is_some(),
        "only {} writes acknowledged in 120 s\n{}",
        acked.load(Ordering::SeqCst),
        stack.logs()
    );
    let mut interrupted = 0;
    for w in writers {
        if let Some(f) = w.await.expect("writer task") {
            assert!(
                f.at >= killed_at,
                "a write failed before the kill: {:?}",
                f.status
            );
            interrupted += 1;
        }
    }
    let acks = acks.lock().expect("acks lock").clone();
    let temp_files = dir_entries(&stack.custom_dir())
        .into_iter()
        .filter(|n| n.starts_with(".tmp-"))
        .count();
    eprintln!(
        "killed after {} acknowledged writes; {interrupted} writers saw the kill; \
         {temp_files} temp files left behind",
        acks.len()
    );
    let total = TASKS * OPS_PER_TASK as usize;
    assert!(
        acks.len() < total,
        "the burst ended before the kill; nothing was interrupted"
    );

    stack
        .restart()
        .await
        .expect("registry restarts on the same dirs");

    // No temp file and no partial file: every entry is a definition that parses.
    let custom = stack.custom_dir();
    let entries = dir_entries(&custom);
    let leftovers: Vec<_> = entries
        .iter()
        .filter(|n| !n.ends_with(".yaml") || n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "left in custom/: {leftovers:?}");
    let mut on_disk: BTreeMap<String, String> = BTreeMap::new();
    for name in &entries {
        let yaml = read_yaml(&custom.join(name));
        let description = yaml["description"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no description"));
        assert!(
            yaml["prompt"]["system_prompt"].as_str().is_some(),
            "{name} is incomplete"
        );
        assert!(
            yaml["tools"]["allowlist"].as_sequence().is_some(),
            "{name} is incomplete"
        );
        on_disk.insert(
            name.trim_end_matches(".yaml").to_owned(),
            description.to_owned(),
        );
    }

    // The listing is exactly the valid files, with their content.
    let listed = grpc_list_all(&stack, AgentSource::Custom).await;
    let listed_ids: BTreeSet<&str> = listed.iter().map(|a| a.agent_id.as_str()).collect();
    let disk_ids: BTreeSet<&str> = on_disk.keys().map(String::as_str).collect();
    assert_eq!(
        listed_ids, disk_ids,
        "listing and files differ after the restart"
    );
    let by_id: BTreeMap<&str, &v1::Agent> =
        listed.iter().map(|a| (a.agent_id.as_str(), a)).collect();
    for a in &listed {
        assert_eq!(
            custom_spec(a).description,
            on_disk[&a.agent_id],
            "{} differs from its file",
            a.agent_id
        );
    }

    // Every acknowledged write is there, or a later one of the same writer.
    let mut last: BTreeMap<&str, &Ack> = BTreeMap::new();
    for a in &acks {
        last.entry(a.id.as_str())
            .and_modify(|prev| {
                if a.seq > prev.seq {
                    *prev = a;
                }
            })
            .or_insert(a);
    }
    for (id, ack) in &last {
        let agent = by_id
            .get(id)
            .unwrap_or_else(|| panic!("acknowledged agent {id} is gone after the crash"));
        let seq = seq_of(&custom_spec(agent).description);
        assert!(
            seq >= ack.seq,
            "{id}: acknowledged rev {} but found rev {seq}",
            ack.seq
        );
        if seq == ack.seq {
            assert_eq!(
                agent.version, ack.version,
                "{id}: same content, different version"
            );
        }
    }

    // A cache rebuilt from nothing gives the same listing.
    let before = grpc_versions(&stack).await;
    stack.stop().await.expect("graceful stop");
    std::fs::remove_dir_all(stack.data_dir()).expect("delete the sled dir");
    stack
        .restart()
        .await
        .expect("registry starts without its cache");
    assert_eq!(
        grpc_versions(&stack).await,
        before,
        "the rebuilt cache lists other agents or versions"
    );
}

#[tokio::test]
async fn an_unopenable_cache_is_moved_aside_and_rebuilt_from_yaml() {
    let mut stack = spawn_registry().await.expect("registry starts");
    let mut client = stack.registry();
    client
        .create_agent(v1::CreateAgentRequest {
            spec: Some(spec("kept-agent")),
        })
        .await
        .expect("create");
    let before = grpc_versions(&stack).await;
    stack.stop().await.expect("graceful stop");

    // sled refuses a database whose config file is garbage.
    std::fs::write(stack.data_dir().join("conf"), b"not a sled config at all")
        .expect("corrupt the cache");
    stack
        .restart()
        .await
        .expect("registry starts over a broken cache");
    assert_eq!(
        grpc_versions(&stack).await,
        before,
        "the rebuilt cache lists other agents or versions"
    );
    // Inside the data directory, which may be a volume's mount point (not to be renamed).
    let aside: Vec<String> = dir_entries(stack.data_dir())
        .into_iter()
        .filter(|n| n.starts_with("broken-"))
        .collect();
    assert_eq!(aside.len(), 1, "the broken cache is kept aside: {aside:?}");
}
