//! The store in process: over temporary directories, no service around it.

use std::{fs, path::Path, time::Duration};

use taskforce_proto::{
    error::ErrorKind,
    v1::{self, agent_change::Kind as ChangeKind},
};
use taskforce_runtime::now_ms;

use super::*;
use crate::{
    definition::{self, CustomAgentFile},
    error::RegistryError,
};

pub(super) fn agent_file() -> CustomAgentFile {
    CustomAgentFile {
        name: "Agent".into(),
        description: "An agent".into(),
        prompt: definition::Prompt {
            system_prompt: "Be brief.".into(),
        },
        tools: definition::Allowlist {
            allowlist: vec!["file_read".into()],
        },
        ..Default::default()
    }
}

/// Opens the store at `data` again after the test dropped it. sled's background threads let go
/// of the cache's file lock shortly after the last handle is dropped, not at once: until then an
/// open is refused as "another process is using the cache", so it is tried again for a while.
pub(super) fn reopen(root: &Path, data: &Path) -> Result<Store> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match Store::open(root, data) {
            Err(e) if std::time::Instant::now() < deadline && e.to_string().contains("lock") => {
                std::thread::sleep(Duration::from_millis(20));
            }
            opened => return opened,
        }
    }
}

/// A reconciled store over a temporary config directory with one profile, `dev`.
fn store_with_dev_profile() -> Result<(tempfile::TempDir, Store)> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let root = dir.path().join("configs");
    fs::create_dir_all(&root).map_err(|e| RegistryError::io(&root, e))?;
    fs::write(root.join("dev.yaml"), "description: Dev\n")
        .map_err(|e| RegistryError::io(&root, e))?;
    let store = Store::open(&root, &dir.path().join("data"))?;
    store.reconcile_all()?;
    Ok((dir, store))
}

#[test]
fn subagents_must_name_served_agents() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    store.create("researcher", agent_file(), "2026-11-22T09:00:00Z")?;
    store.check_subagents("boss", &["researcher".into(), "dev".into()])?;
    let err = store.check_subagents("researcher", &["dev".into(), "nope".into()]);
    let Err(RegistryError::Api(e)) = err else {
        panic!("unknown sub-agents are refused: {err:?}");
    };
    assert_eq!(e.kind, ErrorKind::InvalidSubagents);
    let body = e.to_json();
    assert_eq!(body["invalid_subagents"], serde_json::json!(["nope"]));
    // Sorted, both sources, without the agent itself.
    assert_eq!(body["available_agents"], serde_json::json!(["dev"]));
    Ok(())
}

#[test]
fn a_hand_written_file_may_name_an_agent_that_is_not_there_yet() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let root = dir.path().join("configs");
    let custom = root.join("custom");
    fs::create_dir_all(&custom).map_err(|e| RegistryError::io(&custom, e))?;
    let body = "name: Boss\ndescription: Delegates\nprompt: {system_prompt: p}\n\
                tools: {allowlist: [delegate_to_agent]}\nsubagents: [zz-later]\nmodel: fast\n";
    fs::write(custom.join("boss.yaml"), body).map_err(|e| RegistryError::io(&custom, e))?;
    let selfish = body.replace("zz-later", "selfish");
    fs::write(custom.join("selfish.yaml"), selfish).map_err(|e| RegistryError::io(&custom, e))?;
    let store = Store::open(&root, &dir.path().join("data"))?;
    let stats = store.reconcile_all()?;
    assert_eq!((stats.updated, stats.invalid), (1, 1), "{stats:?}");
    let Some(v1::agent::Kind::Custom(c)) = store.get("boss")?.kind else {
        panic!("boss is a custom agent");
    };
    let spec = c.spec.unwrap_or_default();
    assert_eq!(
        (spec.subagents, spec.model),
        (vec!["zz-later".into()], "fast".into())
    );
    let diagnostics = store.diagnostics();
    assert_eq!(diagnostics.len(), 1);
    assert!(
        diagnostics[0].0.ends_with("selfish.yaml"),
        "{diagnostics:?}"
    );
    assert!(diagnostics[0].1.contains("subagents"), "{diagnostics:?}");
    Ok(())
}

#[test]
fn a_hand_written_mode_is_served_canonically_and_an_unknown_one_is_skipped() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let root = dir.path().join("configs");
    let custom = root.join("custom");
    fs::create_dir_all(&custom).map_err(|e| RegistryError::io(&custom, e))?;
    let body = "name: Reader\ndescription: Reads\nprompt: {system_prompt: p}\n\
                tools: {allowlist: [file_read]}\nmode: read_only\n";
    fs::write(custom.join("reader.yaml"), body).map_err(|e| RegistryError::io(&custom, e))?;
    fs::write(
        custom.join("reckless.yaml"),
        body.replace("read_only", "yolo"),
    )
    .map_err(|e| RegistryError::io(&custom, e))?;
    let store = Store::open(&root, &dir.path().join("data"))?;
    let stats = store.reconcile_all()?;
    assert_eq!((stats.updated, stats.invalid), (1, 1), "{stats:?}");
    let Some(v1::agent::Kind::Custom(c)) = store.get("reader")?.kind else {
        panic!("reader is a custom agent");
    };
    assert_eq!(c.spec.unwrap_or_default().mode, "readOnly");
    assert!(store.get("reckless").is_err());
    let diagnostics = store.diagnostics();
    assert_eq!(diagnostics.len(), 1);
    assert!(
        diagnostics[0].0.ends_with("reckless.yaml"),
        "{diagnostics:?}"
    );
    assert!(diagnostics[0].1.contains("mode"), "{diagnostics:?}");
    Ok(())
}

#[test]
fn hand_written_times_that_are_missing_or_not_rfc3339_are_served_as_the_files_times() -> Result<()>
{
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let root = dir.path().join("configs");
    let custom = root.join("custom");
    fs::create_dir_all(&custom).map_err(|e| RegistryError::io(&custom, e))?;
    let body = "name: Reader\ndescription: Reads\nprompt: {system_prompt: p}\n\
                tools: {allowlist: [file_read]}\n";
    fs::write(custom.join("timeless.yaml"), body).map_err(|e| RegistryError::io(&custom, e))?;
    let odd = format!("{body}created_at: yesterday\nupdated_at: '2026-11-20T08:00:00Z'\n");
    fs::write(custom.join("odd.yaml"), &odd).map_err(|e| RegistryError::io(&custom, e))?;
    // Times chrono reads but clients do not (Python's `fromisoformat`, JavaScript's `Date`).
    let unreadable = [
        "2026-11-22t09:00:00z",
        "2026-11-22 09:00:00Z",
        "2026-11-22T09:00:60Z",
        "0000-01-01T00:00:00Z",
    ];
    for (n, time) in unreadable.iter().enumerate() {
        let text = format!("{body}created_at: '{time}'\nupdated_at: '{time}'\n");
        fs::write(custom.join(format!("unreadable-{n}.yaml")), text)
            .map_err(|e| RegistryError::io(&custom, e))?;
    }
    let store = Store::open(&root, &dir.path().join("data"))?;
    assert_eq!(store.reconcile_all()?.updated, 2 + unreadable.len());
    let times = |id: &str| -> Result<(String, String)> {
        let Some(v1::agent::Kind::Custom(c)) = store.get(id)?.kind else {
            panic!("{id} is a custom agent");
        };
        Ok((c.created_at, c.updated_at))
    };
    let (file_created, file_modified) = files::times(&custom.join("timeless.yaml"));
    assert!(file_created.ends_with('Z'), "{file_created}");
    assert_eq!(times("timeless")?, (file_created, file_modified));
    for (n, time) in unreadable.iter().enumerate() {
        let id = format!("unreadable-{n}");
        let (file_created, file_modified) = files::times(&custom.join(format!("{id}.yaml")));
        assert_eq!(times(&id)?, (file_created, file_modified), "{time}");
    }
    let (created, updated) = times("odd")?;
    assert_eq!(updated, "2026-11-20T08:00:00Z", "a valid time is kept");
    assert!(
        chrono::DateTime::parse_from_rfc3339(&created).is_ok(),
        "{created}"
    );
    // An update keeps the created_at clients saw, and the file then holds both.
    let version = store.get("timeless")?.version;
    let updated = store.update("timeless", agent_file(), &version, "2026-11-27T10:00:00Z")?;
    let Some(v1::agent::Kind::Custom(c)) = updated.kind else {
        panic!("a custom agent");
    };
    assert_eq!(c.created_at, times("timeless")?.0);
    assert_ne!(c.created_at, "2026-11-27T10:00:00Z");
    let written: CustomAgentFile = serde_yaml::from_slice(
        &fs::read(custom.join("timeless.yaml")).map_err(|e| RegistryError::io(&custom, e))?,
    )
    .map_err(|e| RegistryError::Config(e.to_string()))?;
    assert_eq!(written.created_at.as_deref(), Some(c.created_at.as_str()));
    Ok(())
}

#[test]
fn a_hand_edit_moves_updated_at_and_keeps_created_at() -> Result<()> {
    let (_dir, mut store) = store_with_dev_profile()?;
    store.racy = Duration::ZERO;
    let times = |store: &Store, id: &str| -> Result<(String, String)> {
        let Some(v1::agent::Kind::Custom(c)) = store.get(id)?.kind else {
            panic!("{id} is a custom agent");
        };
        Ok((c.created_at, c.updated_at))
    };
    // A file that records its times, as the API writes them, read for the first time: served
    // with them.
    let recorded = store.custom_dir().join("recorded.yaml");
    let stamped =
        format!("{HAND}created_at: '2026-11-20T08:00:00Z'\nupdated_at: '2026-11-20T08:00:00Z'\n");
    write(&recorded, &stamped)?;
    store.reconcile_all()?;
    assert_eq!(
        times(&store, "recorded")?,
        (
            "2026-11-20T08:00:00Z".to_owned(),
            "2026-11-20T08:00:00Z".to_owned()
        )
    );
    // Edited by hand, the field left as it was: updated_at is the file's time now.
    write(
        &recorded,
        &stamped.replace("Made by hand", "Edited by hand"),
    )?;
    store.reconcile_path(&recorded)?;
    let (created, updated) = times(&store, "recorded")?;
    assert_eq!(created, "2026-11-20T08:00:00Z");
    assert_eq!(
        updated,
        files::times(&recorded).1,
        "the edit moved updated_at"
    );

    // A file without times, saved the way editors do (a new file renamed over it): it keeps
    // the created_at it was first served with.
    let bare = store.custom_dir().join("bare.yaml");
    write(&bare, HAND)?;
    store.reconcile_path(&bare)?;
    let (first_created, _) = times(&store, "bare")?;
    std::thread::sleep(Duration::from_millis(1100));
    let saved = store.custom_dir().join(".bare.yaml.swp");
    write(&saved, &HAND.replace("Made by hand", "Saved again"))?;
    fs::rename(&saved, &bare).map_err(|e| RegistryError::io(&bare, e))?;
    store.reconcile_path(&bare)?;
    assert_eq!(times(&store, "bare")?.0, first_created);
    // An update keeps it too (the file never held one).
    std::thread::sleep(Duration::from_millis(1100));
    let updated = store.update("bare", agent_file(), "", "2026-11-27T10:00:00Z")?;
    let Some(v1::agent::Kind::Custom(c)) = updated.kind else {
        panic!("a custom agent");
    };
    assert_eq!(c.created_at, first_created);
    Ok(())
}

/// A hand edit that passes through an invalid file (a typo saved, then fixed; a slow write
/// seen half-way) moves `updated_at` on from what was served before it, and keeps `created_at`,
/// as any other hand edit: the agent's times do not restart from the fixed file's.
#[test]
fn a_file_broken_then_fixed_keeps_its_served_times() -> Result<()> {
    let (_dir, mut store) = store_with_dev_profile()?;
    store.racy = Duration::ZERO;
    let times = |store: &Store| -> Result<(String, String)> {
        let Some(v1::agent::Kind::Custom(c)) = store.get("fixed")?.kind else {
            panic!("fixed is a custom agent");
        };
        Ok((c.created_at, c.updated_at))
    };
    // A hand-written file without created_at, edited once (updated_at is the file's time).
    let path = store.custom_dir().join("fixed.yaml");
    write(&path, HAND)?;
    store.reconcile_path(&path)?;
    std::thread::sleep(Duration::from_millis(1100));
    let stale = "updated_at: '2000-01-01T00:00:00Z'\n";
    write(
        &path,
        &format!("{}{stale}", HAND.replace("Made by hand", "v2")),
    )?;
    store.reconcile_path(&path)?;
    let (created, updated) = times(&store)?;
    // Broken twice, then fixed, still with the old updated_at.
    for broken in ["description: [v3\n", "name: [\n"] {
        std::thread::sleep(Duration::from_millis(1100));
        write(&path, broken)?;
        store.reconcile_path(&path)?;
        assert!(store.get("fixed").is_err(), "an invalid file is not served");
    }
    // Fixed the way editors save (a new file renamed over it: a new creation time).
    std::thread::sleep(Duration::from_millis(1100));
    let saved = store.custom_dir().join(".fixed.yaml.swp");
    write(
        &saved,
        &format!("{}{stale}", HAND.replace("Made by hand", "v3")),
    )?;
    fs::rename(&saved, &path).map_err(|e| RegistryError::io(&path, e))?;
    store.reconcile_path(&path)?;
    let (created_after, updated_after) = times(&store)?;
    assert_eq!(created_after, created, "created_at stays");
    assert!(
        updated_after > updated,
        "{updated_after} is not after {updated}"
    );
    Ok(())
}

#[test]
fn busy_holds_for_its_lease_and_survives_a_reopen() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, data) = (dir.path().join("configs"), dir.path().join("data"));
    let store = Store::open(&root, &data)?;
    store.reconcile_all()?;
    store.create("worker", agent_file(), "2026-11-22T09:00:00Z")?;
    let status = |s: &Store| s.get("worker").map(|a| (a.status, a.last_task));

    store.report_status(
        "worker",
        v1::AgentStatus::Busy,
        "sorting",
        Duration::from_secs(60),
        "",
    )?;
    assert_eq!(
        status(&store)?,
        (v1::AgentStatus::Busy.into(), "sorting".into())
    );
    // An expired lease reads as idle: a crashed executor cannot leave an agent busy.
    store.report_status("worker", v1::AgentStatus::Busy, "", Duration::ZERO, "")?;
    assert_eq!(
        status(&store)?,
        (v1::AgentStatus::Idle.into(), "sorting".into())
    );
    store.report_status(
        "worker",
        v1::AgentStatus::Idle,
        "sorted",
        Duration::ZERO,
        "",
    )?;
    store.flush()?;
    drop(store);

    let store = reopen(&root, &data)?;
    store.reconcile_all()?;
    assert_eq!(
        status(&store)?,
        (v1::AgentStatus::Idle.into(), "sorted".into())
    );
    let unknown = store.report_status("nobody", v1::AgentStatus::Busy, "", Duration::ZERO, "");
    assert!(matches!(unknown, Err(RegistryError::Api(e)) if e.kind == ErrorKind::NotFound));
    Ok(())
}

#[test]
fn each_executor_holds_its_own_busy_and_its_idle_ends_only_that() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, data) = (dir.path().join("configs"), dir.path().join("data"));
    let store = Store::open(&root, &data)?;
    store.reconcile_all()?;
    store.create("worker", agent_file(), "2026-11-22T09:00:00Z")?;
    let status = |s: &Store| s.get("worker").map(|a| a.status);
    let (busy, idle) = (
        i32::from(v1::AgentStatus::Busy),
        i32::from(v1::AgentStatus::Idle),
    );
    let minute = Duration::from_secs(60);

    store.report_status("worker", v1::AgentStatus::Busy, "a", minute, "e0")?;
    store.report_status("worker", v1::AgentStatus::Busy, "b", minute, "e1")?;
    store.report_status("worker", v1::AgentStatus::Idle, "", minute, "e0")?;
    assert_eq!(status(&store)?, busy, "e1's run still holds it");
    // An IDLE of a reporter that holds nothing changes nothing.
    store.report_status("worker", v1::AgentStatus::Idle, "", minute, "e2")?;
    assert_eq!(status(&store)?, busy);
    store.report_status("worker", v1::AgentStatus::Idle, "", minute, "e1")?;
    assert_eq!(status(&store)?, idle, "the last hold ended");

    // Facts written before holds were per reporter: the unnamed reporter's hold.
    store.report_status("worker", v1::AgentStatus::Busy, "", minute, "e0")?;
    store.flush()?;
    drop(store);
    {
        let db = taskforce_runtime::open_waiting_for_lock(|| {
            taskforce_runtime::store::sled_config(
                &data,
                taskforce_runtime::store::DEFAULT_SEGMENT_BYTES,
            )
            .open()
        })
        .map_err(RegistryError::from)?;
        let tree = db.open_tree("runtime").map_err(RegistryError::from)?;
        let until = now_ms() + 60_000;
        let old = format!(r#"{{"busy_until_ms":{until},"last_task":"old"}}"#);
        tree.insert("worker", old.as_bytes())
            .map_err(RegistryError::from)?;
        db.flush().map_err(RegistryError::from)?;
    }
    let store = reopen(&root, &data)?;
    store.reconcile_all()?;
    assert_eq!(status(&store)?, busy, "an old file's hold is read");
    store.report_status("worker", v1::AgentStatus::Idle, "", minute, "")?;
    assert_eq!(status(&store)?, idle, "and ended by the unnamed reporter");
    Ok(())
}

#[test]
fn a_reporter_releasing_its_holds_ends_only_its_own() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, data) = (dir.path().join("configs"), dir.path().join("data"));
    let store = Store::open(&root, &data)?;
    store.reconcile_all()?;
    for id in ["alpha", "beta", "gamma"] {
        store.create(id, agent_file(), "2026-11-22T09:00:00Z")?;
    }
    let busy = |id: &str| {
        store
            .get(id)
            .map(|a| a.status == i32::from(v1::AgentStatus::Busy))
    };
    let minute = Duration::from_secs(60);
    store.report_status("alpha", v1::AgentStatus::Busy, "a", minute, "e0")?;
    store.report_status("beta", v1::AgentStatus::Busy, "b", minute, "e0")?;
    store.report_status("beta", v1::AgentStatus::Busy, "b", minute, "e1")?;
    store.report_status("gamma", v1::AgentStatus::Busy, "c", minute, "e1")?;
    // A hold whose lease ended is no hold to release.
    store.report_status("gamma", v1::AgentStatus::Busy, "", Duration::ZERO, "e0")?;
    let mut changes = store.subscribe();

    assert_eq!(store.release_holds("e0")?, ["alpha", "beta"]);
    assert!(!busy("alpha")?, "e0's only hold ended");
    assert!(busy("beta")?, "e1 still holds beta");
    assert!(busy("gamma")?);
    let told: Vec<String> = std::iter::from_fn(|| changes.try_recv().ok())
        .map(|c| c.agent_id)
        .collect();
    assert_eq!(told, ["alpha", "beta"], "watchers hear each status");
    assert_eq!(store.get("alpha")?.last_task, "a", "the last task stays");
    assert!(store.release_holds("e0")?.is_empty(), "nothing left to end");
    // It lasts: the facts were written, not only changed in memory.
    store.flush()?;
    drop(changes);
    drop(store);
    let store = reopen(&root, &data)?;
    store.reconcile_all()?;
    assert_eq!(store.get("alpha")?.status, i32::from(v1::AgentStatus::Idle));
    assert_eq!(store.get("beta")?.status, i32::from(v1::AgentStatus::Busy));
    Ok(())
}

#[test]
fn a_snapshot_and_its_changes_make_every_write_visible_once_in_revision_order() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    let first = store.create("alpha", agent_file(), "2026-11-22T09:00:00Z")?;
    let mut snap = store.snapshot()?;
    let ids: Vec<_> = snap.agents.iter().map(|a| a.agent_id.as_str()).collect();
    assert_eq!(ids, ["dev", "alpha"], "profiles first");
    // A profile carries its file's times.
    let Some(v1::agent::Kind::Profile(p)) = &snap.agents[0].kind else {
        panic!("dev is a profile");
    };
    assert!(
        p.created_at.ends_with('Z') && p.updated_at.ends_with('Z'),
        "{p:?}"
    );
    assert_eq!(
        snap.revision, first.revision,
        "the snapshot is at the last write"
    );
    // Nothing from before the snapshot is in its receiver.
    assert!(snap.changes.try_recv().is_err());

    let second = store.create("beta", agent_file(), "2026-11-22T09:00:00Z")?;
    store.report_status(
        "beta",
        v1::AgentStatus::Busy,
        "sorting",
        Duration::from_secs(60),
        "",
    )?;
    let deleted = store.delete("alpha", "")?;
    let mut changes = Vec::new();
    while let Ok(c) = snap.changes.try_recv() {
        changes.push(c);
    }
    let seen: Vec<_> = changes
        .iter()
        .map(|c| (c.kind(), c.agent_id.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (ChangeKind::Upserted, "beta"),
            (ChangeKind::Status, "beta"),
            (ChangeKind::Deleted, "alpha"),
        ]
    );
    let revisions: Vec<_> = changes.iter().map(|c| c.revision).collect();
    assert_eq!(revisions, [second.revision, second.revision + 1, deleted]);
    // The upsert carries the agent as a read would answer it; the status change its facts.
    let upserted = changes[0].agent.clone().unwrap_or_default();
    assert_eq!(upserted.version, second.version);
    assert!(upserted.kind.is_some());
    let status = changes[1].agent.clone().unwrap_or_default();
    assert_eq!(status.status, i32::from(v1::AgentStatus::Busy));
    assert_eq!(status.last_task, "sorting");
    assert!(status.busy_until_ms > now_ms() && status.kind.is_none());
    Ok(())
}

#[test]
fn revisions_keep_growing_across_a_reopen() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, data) = (dir.path().join("configs"), dir.path().join("data"));
    let store = Store::open(&root, &data)?;
    let before = store.create("alpha", agent_file(), "2026-11-22T09:00:00Z")?;
    drop(store);
    let store = reopen(&root, &data)?;
    let after = store.create("beta", agent_file(), "2026-11-22T09:00:00Z")?;
    assert!(
        after.revision > before.revision,
        "{} then {}",
        before.revision,
        after.revision
    );
    Ok(())
}

/// The kind of a store error, for asserting on refusals.
fn kind_of<T: std::fmt::Debug>(r: Result<T>) -> ErrorKind {
    match r {
        Err(RegistryError::Api(e)) => e.kind,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[test]
fn writes_check_versions_and_sources_and_change_nothing_when_refused() -> Result<()> {
    let (dir, store) = store_with_dev_profile()?;
    let made = store.create("writer", agent_file(), "2026-11-22T09:00:00Z")?;
    let file = dir.path().join("configs/custom/writer.yaml");
    let yaml = fs::read(&file).map_err(|e| RegistryError::io(&file, e))?;
    assert_eq!(
        files::version_of(&yaml),
        made.version,
        "the version is the file's"
    );
    assert_eq!(
        kind_of(store.create("writer", agent_file(), "later")),
        ErrorKind::AlreadyExists
    );
    assert_eq!(
        kind_of(store.create("dev", agent_file(), "later")),
        ErrorKind::AlreadyExists,
        "a profile's id is taken too"
    );
    let mut changed = agent_file();
    changed.description = "Changed".into();
    assert_eq!(
        kind_of(store.update("writer", changed.clone(), "0000000000000000", "later")),
        ErrorKind::VersionConflict
    );
    assert_eq!(
        fs::read(&file).map_err(|e| RegistryError::io(&file, e))?,
        yaml,
        "a refused update leaves the file"
    );
    let updated = store.update("writer", changed, &made.version, "2026-11-22T10:00:00Z")?;
    let Some(v1::agent::Kind::Custom(c)) = &updated.kind else {
        panic!("a custom agent");
    };
    assert_eq!(
        (c.created_at.as_str(), c.updated_at.as_str()),
        ("2026-11-22T09:00:00Z", "2026-11-22T10:00:00Z")
    );
    assert_eq!(
        kind_of(store.update("dev", agent_file(), "", "x")),
        ErrorKind::ReadOnly
    );
    assert_eq!(kind_of(store.delete("dev", "")), ErrorKind::ReadOnly);
    assert_eq!(kind_of(store.delete("nobody", "")), ErrorKind::NotFound);
    assert_eq!(
        kind_of(store.delete("writer", &made.version)),
        ErrorKind::VersionConflict
    );
    store.delete("writer", &updated.version)?;
    assert!(!file.exists());
    assert_eq!(kind_of(store.get("writer")), ErrorKind::NotFound);
    Ok(())
}

#[test]
fn a_page_of_large_agents_stops_at_its_byte_cap() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    // 70 agents of ~250 KiB each (the prompt's cap is 256 KiB): ~17.5 MiB, over one page's cap.
    let mut def = agent_file();
    def.prompt.system_prompt = "p".repeat(250 * 1024);
    for i in 0..70 {
        store.create(&format!("big-{i:02}"), def.clone(), "2026-11-22T09:00:00Z")?;
    }
    let (mut token, mut seen, mut pages) = (String::new(), Vec::new(), 0);
    loop {
        let (page, next) = store.list(MAX_PAGE, &token, AgentSource::Custom)?;
        pages += 1;
        let bytes: usize = page.iter().map(prost::Message::encoded_len).sum();
        assert!(bytes <= MAX_PAGE_BYTES, "a page of {bytes} bytes");
        seen.extend(page.into_iter().map(|a| a.agent_id));
        if next.is_empty() {
            break;
        }
        token = next;
    }
    assert_eq!(pages, 2);
    let expected: Vec<String> = (0..70).map(|i| format!("big-{i:02}")).collect();
    assert_eq!(seen, expected);
    Ok(())
}

#[test]
fn pages_walk_profiles_then_custom_agents_once_each() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    for id in ["cc-3", "cc-1", "cc-2"] {
        store.create(id, agent_file(), "2026-11-22T09:00:00Z")?;
    }
    let (mut token, mut seen) = (String::new(), Vec::new());
    loop {
        let (page, next) = store.list(2, &token, AgentSource::Unspecified)?;
        assert!(page.len() <= 2);
        seen.extend(page.into_iter().map(|a| a.agent_id));
        if next.is_empty() {
            break;
        }
        token = next;
    }
    assert_eq!(seen, ["dev", "cc-1", "cc-2", "cc-3"]);
    let (custom, _) = store.list(0, "", AgentSource::Custom)?;
    assert_eq!(custom.len(), 3);
    assert_eq!(
        kind_of(store.list(2, "garbage", AgentSource::Unspecified)),
        ErrorKind::InvalidArgument
    );
    Ok(())
}

#[test]
fn a_path_reconcile_follows_a_file_and_names_what_is_wrong_with_it() -> Result<()> {
    let (dir, store) = store_with_dev_profile()?;
    let mut changes = store.subscribe();
    let path = store.custom_dir().join("hand.yaml");
    let body = "name: Hand\ndescription: Made by hand\nprompt: {system_prompt: p}\n\
                tools: {allowlist: [file_read]}\n";
    fs::write(&path, body).map_err(|e| RegistryError::io(&path, e))?;
    assert_eq!(store.reconcile_path(&path)?.updated, 1);
    // The same content again changes nothing and tells nobody.
    assert_eq!(store.reconcile_path(&path)?.updated, 0);
    // An unknown tool: the diagnostic names it, and asking for the agent says why it is not
    // served (the seed's 400 "agent config invalid") instead of "not found".
    fs::write(&path, body.replace("[file_read]", "[file_read, web_surf]"))
        .map_err(|e| RegistryError::io(&path, e))?;
    let stats = store.reconcile_path(&path)?;
    assert_eq!((stats.invalid, stats.removed), (1, 1));
    let diagnostics = store.diagnostics();
    assert!(
        diagnostics
            .iter()
            .any(|(p, e)| p.ends_with("hand.yaml") && e.ends_with(": web_surf")),
        "{diagnostics:?}"
    );
    let Err(RegistryError::Api(refused)) = store.get("hand") else {
        panic!("an invalid file is not served");
    };
    assert_eq!(refused.kind, ErrorKind::InvalidArgument, "{refused:?}");
    assert!(
        refused.message.contains("custom/hand.yaml") && refused.message.contains("web_surf"),
        "{refused:?}"
    );
    assert_eq!(kind_of(store.get("nobody")), ErrorKind::NotFound);
    let Err(RegistryError::Api(taken)) = store.create("hand", agent_file(), "now") else {
        panic!("the id of an invalid file is taken");
    };
    assert_eq!(taken.kind, ErrorKind::AlreadyExists);
    assert!(
        taken.message.contains("custom/hand.yaml is invalid"),
        "{taken:?}"
    );
    fs::write(&path, "name: [unclosed").map_err(|e| RegistryError::io(&path, e))?;
    let stats = store.reconcile_path(&path)?;
    assert_eq!((stats.invalid, stats.removed), (1, 0));
    assert_eq!(kind_of(store.get("hand")), ErrorKind::InvalidArgument);
    let diagnostics = store.diagnostics();
    assert!(
        diagnostics
            .iter()
            .any(|(p, e)| p.ends_with("hand.yaml") && e.contains("invalid YAML")),
        "{diagnostics:?}"
    );
    fs::remove_file(&path).map_err(|e| RegistryError::io(&path, e))?;
    store.reconcile_path(&path)?;
    assert!(
        store.diagnostics().is_empty(),
        "a removed file has no diagnostic"
    );
    let kinds: Vec<_> = std::iter::from_fn(|| changes.try_recv().ok())
        .map(|c| c.kind())
        .collect();
    assert_eq!(kinds, [ChangeKind::Upserted, ChangeKind::Deleted]);
    // Files outside the two directories are not definitions.
    let elsewhere = dir.path().join("hand.yaml");
    fs::write(&elsewhere, body).map_err(|e| RegistryError::io(&elsewhere, e))?;
    assert_eq!(store.reconcile_path(&elsewhere)?.files, 0);
    Ok(())
}

#[test]
fn a_cache_that_cannot_be_opened_is_moved_aside_and_rebuilt_from_the_files() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, data) = (dir.path().join("configs"), dir.path().join("data"));
    let store = Store::open(&root, &data)?;
    store.create("survivor", agent_file(), "2026-11-22T09:00:00Z")?;
    drop(store);
    // Garbage where sled keeps its configuration, beside what a volume's root holds.
    fs::write(data.join("conf"), b"\xff\xfe not sled").map_err(|e| RegistryError::io(&data, e))?;
    let lost = data.join("lost+found");
    fs::create_dir(&lost).map_err(|e| RegistryError::io(&lost, e))?;
    let store = reopen(&root, &data)?;
    store.reconcile_all()?;
    assert_eq!(store.get("survivor")?.agent_id, "survivor");
    assert!(lost.is_dir(), "only sled's files are set aside");
    // Set aside inside the data directory (which may be a volume's mount point, not to be
    // renamed), and kept for inspection.
    let aside: Vec<String> = names_in(&data)?
        .into_iter()
        .filter(|n| n.starts_with("broken-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(names_in(&data.join(&aside[0]))?.contains(&"conf".to_owned()));
    assert!(
        !names_in(dir.path())?.iter().any(|n| n.contains("broken")),
        "nothing is made beside the data directory"
    );
    // A second breakage keeps the first one's files apart.
    drop(store);
    fs::write(data.join("conf"), b"\xff\xfe not sled").map_err(|e| RegistryError::io(&data, e))?;
    let store = reopen(&root, &data)?;
    store.reconcile_all()?;
    assert_eq!(store.get("survivor")?.agent_id, "survivor");
    let kept = names_in(&data)?
        .into_iter()
        .filter(|n| n.starts_with("broken-"))
        .count();
    assert_eq!(kept, 2);
    Ok(())
}

#[test]
fn a_definition_the_registry_could_not_read_back_is_not_written() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    let mut huge = agent_file();
    huge.tools.allowlist = vec!["file_read".into(); 250_000];
    let refused = store.create("huge", huge, "2026-11-22T09:00:00Z");
    assert_eq!(kind_of(refused), ErrorKind::PayloadTooLarge);
    assert!(!store.custom_dir().join("huge.yaml").exists());
    assert_eq!(kind_of(store.get("huge")), ErrorKind::NotFound);
    // An update to that size leaves the agent as it was.
    let kept = store.create("kept", agent_file(), "2026-11-22T09:00:00Z")?;
    let mut grown = agent_file();
    grown.tools.allowlist = vec!["file_read".into(); 250_000];
    let refused = store.update("kept", grown, &kept.version, "2026-11-22T10:00:00Z");
    assert_eq!(kind_of(refused), ErrorKind::PayloadTooLarge);
    assert_eq!(store.get("kept")?.version, kept.version);
    Ok(())
}

#[test]
fn a_yml_file_is_not_read_and_the_diagnostics_say_so_until_it_is_gone() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    let path = store.custom_dir().join("hand.yml");
    write(
        &path,
        "name: Hand\ndescription: d\nprompt: {system_prompt: p}\ntools: {allowlist: [file_read]}\n",
    )?;
    store.reconcile_all()?;
    assert!(store.get("hand").is_err(), "a .yml file is not an agent");
    let said = store.diagnostics();
    assert!(
        said.iter()
            .any(|(p, why)| p.ends_with("hand.yml") && why.contains("rename it to `hand.yaml`")),
        "{said:?}"
    );
    fs::remove_file(&path).map_err(|e| RegistryError::io(&path, e))?;
    store.reconcile_all()?;
    assert!(store.diagnostics().is_empty(), "{:?}", store.diagnostics());
    // Nor is one whose extension has capitals, which says so too.
    for name in ["upper.YAML", "mixed.Yml"] {
        let odd = store.custom_dir().join(name);
        write(&odd, "name: Odd\n")?;
        store.reconcile_all()?;
        let said = store.diagnostics();
        assert!(
            said.iter()
                .any(|(p, why)| p.ends_with(name) && why.contains("rename it")),
            "{said:?}"
        );
        fs::remove_file(&odd).map_err(|e| RegistryError::io(&odd, e))?;
    }
    store.reconcile_all()?;
    assert!(store.diagnostics().is_empty(), "{:?}", store.diagnostics());

    // The watcher's path, one file at a time, says the same at once.
    write(&path, "name: Hand\n")?;
    store.reconcile_path(&path)?;
    assert!(
        store
            .diagnostics()
            .iter()
            .any(|(p, why)| p.ends_with("hand.yml") && why.contains("rename it")),
        "{:?}",
        store.diagnostics()
    );
    fs::remove_file(&path).map_err(|e| RegistryError::io(&path, e))?;
    store.reconcile_path(&path)?;
    assert!(store.diagnostics().is_empty(), "{:?}", store.diagnostics());
    let elsewhere = store.custom_dir().join("sub").join("x.yml");
    store.reconcile_path(&elsewhere)?;
    assert!(
        store.diagnostics().is_empty(),
        "only the definitions' directories"
    );
    Ok(())
}

/// An agent file moved into a subdirectory of `custom/` is not read (as before), and the
/// diagnostics say where it should be, until it is gone from there.
#[test]
fn a_file_in_a_subdirectory_of_custom_is_named_in_the_diagnostics() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    let sub = store.custom_dir().join("keep");
    fs::create_dir_all(&sub).map_err(|e| RegistryError::io(&sub, e))?;
    let path = sub.join("moved.yaml");
    write(&path, HAND)?;
    store.reconcile_all()?;
    assert!(store.get("moved").is_err(), "not read");
    let said = store.diagnostics();
    assert!(
        said.iter().any(|(p, why)| p == "custom/keep/moved.yaml"
            && why.contains("move it to `custom/moved.yaml`")),
        "{said:?}"
    );
    let back = store.custom_dir().join("moved.yaml");
    fs::rename(&path, &back).map_err(|e| RegistryError::io(&back, e))?;
    store.reconcile_all()?;
    assert!(store.get("moved").is_ok(), "served from custom/");
    assert!(store.diagnostics().is_empty(), "{:?}", store.diagnostics());
    Ok(())
}

#[test]
fn a_deeply_nested_file_is_skipped_with_a_diagnostic_and_the_others_serve() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    let n = 200_000;
    let deep = store.custom_dir().join("deep.yaml");
    write(
        &deep,
        &format!(
            "name: D\ndescription: d\nprompt: {{system_prompt: p}}\ntools: {{allowlist: [file_read]}}\nrole: {}{}\n",
            "[".repeat(n),
            "]".repeat(n)
        ),
    )?;
    let fine = store.custom_dir().join("fine.yaml");
    write(
        &fine,
        "name: F\ndescription: d\nprompt: {system_prompt: p}\ntools: {allowlist: [file_read]}\n",
    )?;
    store.reconcile_all()?;
    assert!(store.get("fine").is_ok(), "the other files serve");
    assert!(store.get("deep").is_err());
    let said = store.diagnostics();
    assert!(
        said.iter()
            .any(|(p, why)| p.ends_with("deep.yaml") && why.contains("nested more than")),
        "{said:?}"
    );
    Ok(())
}

#[test]
fn entries_that_are_no_plain_files_are_diagnosed_never_opened_and_the_rest_serves() -> Result<()> {
    let (dir, store) = store_with_dev_profile()?;
    let custom = store.custom_dir().to_path_buf();
    fn io(p: &Path) -> impl Fn(std::io::Error) -> RegistryError + '_ {
        move |e| RegistryError::io(p, e)
    }
    // A named pipe: opening it would wait for a writer forever, holding the store's lock.
    let pipe = custom.join("pipe.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&pipe)
        .status()
        .map_err(io(&pipe))?;
    assert!(made.success(), "mkfifo");
    // A symbolic link: edits of its target would never be seen.
    let target = dir.path().join("elsewhere.yaml");
    write(&target, HAND)?;
    let link = custom.join("linked.yaml");
    std::os::unix::fs::symlink(&target, &link).map_err(io(&link))?;
    // A directory under a definition's name.
    let folder = custom.join("folder.yaml");
    fs::create_dir(&folder).map_err(io(&folder))?;
    write(&custom.join("fine.yaml"), HAND)?;

    store.reconcile_all()?;
    assert!(store.get("fine").is_ok(), "the plain file serves");
    let said = store.diagnostics();
    for (name, kind) in [
        ("pipe.yaml", "a named pipe"),
        ("linked.yaml", "a symbolic link"),
        ("folder.yaml", "a directory"),
    ] {
        assert!(
            said.iter()
                .any(|(p, why)| p.ends_with(name) && why.contains(kind)),
            "{name}: {said:?}"
        );
        let id = name.trim_end_matches(".yaml");
        assert!(store.get(id).is_err(), "{id} is not served");
    }
    // The watcher's path says the same, one file at a time, and never blocks on the pipe.
    store.reconcile_path(&pipe)?;
    store.reconcile_path(&link)?;
    // The API does not write through them either.
    let err = store
        .update("linked", agent_file(), "", "2026-11-22T09:00:00Z")
        .expect_err("a link is not the API's to replace");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    Ok(())
}

#[test]
fn a_custom_file_may_not_take_a_profiles_id() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    let shadow = store.custom_dir().join("dev.yaml");
    write(&shadow, HAND)?;
    store.reconcile_all()?;
    let Some(v1::agent::Kind::Profile(_)) = store.get("dev")?.kind else {
        panic!("the profile keeps its id");
    };
    let said = store.diagnostics();
    assert!(
        said.iter()
            .any(|(p, why)| p.ends_with("custom/dev.yaml") && why.contains("profile")),
        "{said:?}"
    );
    // The profile's file goes: the custom file that was refused for its id now serves.
    let profile = store.root().join("dev.yaml");
    fs::remove_file(&profile).map_err(|e| RegistryError::io(&profile, e))?;
    store.reconcile_path(&profile)?;
    let Some(v1::agent::Kind::Custom(_)) = store.get("dev")?.kind else {
        panic!("the custom file serves once the id is free");
    };
    assert!(store.diagnostics().is_empty(), "{:?}", store.diagnostics());
    // The profile comes back: it takes its id again, though the custom agent came first (a
    // rebuilt cache, which reads profiles first, serves the same).
    write(&profile, "description: Dev\n")?;
    store.reconcile_path(&profile)?;
    let Some(v1::agent::Kind::Profile(_)) = store.get("dev")?.kind else {
        panic!("the profile takes its id back");
    };
    assert!(
        store.list(0, "", AgentSource::Custom)?.0.is_empty(),
        "the custom agent gave way"
    );
    // The API does not change the custom file it shadows: the profile is what is served.
    let before = fs::read(&shadow).map_err(|e| RegistryError::io(&shadow, e))?;
    for refused in [
        store
            .update("dev", agent_file(), "", "2026-11-27T00:00:00Z")
            .map(drop),
        store.delete("dev", "").map(drop),
    ] {
        assert_eq!(kind_of(refused), ErrorKind::ReadOnly);
    }
    assert_eq!(fs::read(&shadow).ok(), Some(before));
    Ok(())
}

#[test]
fn an_invalid_profile_file_takes_no_id_from_a_custom_agent() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    store.create("keeper", agent_file(), "2026-11-22T09:00:00Z")?;
    let is_custom = |store: &Store| {
        matches!(
            store.get("keeper").map(|a| a.kind),
            Ok(Some(v1::agent::Kind::Custom(_)))
        )
    };
    let stray = store.root().join("keeper.yaml");
    // An empty file, then a custom agent's file copied beside the profiles (invalid as a
    // profile): the custom agent keeps being served, and the stray file is named.
    for text in [
        "",
        "agent_id: keeper\nname: K\ntools: {allowlist: [file_read]}\n",
    ] {
        write(&stray, text)?;
        store.reconcile_path(&stray)?;
        assert!(is_custom(&store), "{:?}", store.diagnostics());
        assert!(
            store.diagnostics().iter().any(|(p, _)| p == "keeper.yaml"),
            "{:?}",
            store.diagnostics()
        );
    }
    // A valid profile takes the id; turned invalid again, it gives it back.
    write(&stray, "description: Keeper\n")?;
    store.reconcile_path(&stray)?;
    assert!(!is_custom(&store));
    write(&stray, "")?;
    store.reconcile_path(&stray)?;
    assert!(is_custom(&store), "{:?}", store.diagnostics());
    // Valid, then gone: the custom agent is back, and nothing is said of either file.
    write(&stray, "description: Keeper\n")?;
    store.reconcile_path(&stray)?;
    assert!(!is_custom(&store));
    fs::remove_file(&stray).map_err(|e| RegistryError::io(&stray, e))?;
    store.reconcile_path(&stray)?;
    assert!(is_custom(&store), "{:?}", store.diagnostics());
    assert!(store.diagnostics().is_empty(), "{:?}", store.diagnostics());
    Ok(())
}

#[test]
fn another_kind_of_yaml_beside_the_profiles_is_not_served_as_one() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    // A copy of the LLM configuration and a compose file, saved in the config directory.
    let llm = store.root().join("llm-prod.yaml");
    write(
        &llm,
        "default_model: main\nmodels: {main: {provider: scripted, model: s}}\n",
    )?;
    let compose = store.root().join("docker-compose.yaml");
    write(&compose, "services: {app: {image: x}}\n")?;
    store.reconcile_all()?;
    assert!(store.get("llm-prod").is_err());
    assert!(store.get("docker-compose").is_err());
    let said = store.diagnostics();
    for (file, keys) in [
        ("llm-prod.yaml", "default_model, models"),
        ("docker-compose.yaml", "services"),
    ] {
        assert!(
            said.iter().any(|(p, why)| p == file
                && why.contains(&format!("not a profile: none of its keys ({keys})"))),
            "{said:?}"
        );
    }
    // A profile with sections the registry does not read beside its own is served.
    assert!(store.get("dev").is_ok());
    Ok(())
}

#[test]
fn a_definitions_directory_that_cannot_be_read_is_named_in_the_diagnostics() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    store.create("kept", agent_file(), "2026-11-22T09:00:00Z")?;
    // `custom/` turned into something that is no directory (a volume mounted wrong).
    let custom = store.custom_dir().to_path_buf();
    let aside = custom.with_extension("aside");
    fs::rename(&custom, &aside).map_err(|e| RegistryError::io(&custom, e))?;
    write(&custom, "not a directory")?;
    assert!(store.reconcile_all().is_err());
    let said = store.diagnostics();
    assert!(
        said.iter()
            .any(|(p, why)| p == "custom/" && why.contains("cannot be read")),
        "{said:?}"
    );
    assert!(store.get("kept").is_ok(), "served as last read");
    // Readable again: nothing is said of it any more.
    fs::remove_file(&custom).map_err(|e| RegistryError::io(&custom, e))?;
    fs::rename(&aside, &custom).map_err(|e| RegistryError::io(&aside, e))?;
    store.reconcile_all()?;
    assert!(store.diagnostics().is_empty(), "{:?}", store.diagnostics());
    Ok(())
}

#[test]
fn a_byte_order_mark_is_read_past_and_an_empty_file_says_so() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    write(
        &store.custom_dir().join("bom.yaml"),
        &format!("\u{feff}{HAND}"),
    )?;
    write(&store.custom_dir().join("blank.yaml"), " \n")?;
    store.reconcile_all()?;
    assert!(store.get("bom").is_ok(), "{:?}", store.diagnostics());
    let said = store.diagnostics();
    assert!(
        said.iter()
            .any(|(p, why)| p.ends_with("blank.yaml") && why.contains("the file is empty")),
        "{said:?}"
    );
    Ok(())
}

#[test]
fn a_cache_another_registry_has_open_is_an_error_and_left_in_place() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, data) = (dir.path().join("configs"), dir.path().join("data"));
    let running = Store::open(&root, &data)?;
    running.create("kept", agent_file(), "2026-11-22T09:00:00Z")?;
    // Another config directory, so that the cache's own lock is what refuses it.
    let Err(RegistryError::Config(message)) = Store::open(&dir.path().join("other"), &data) else {
        panic!("a second store on a cache in use must not open");
    };
    assert!(
        message.contains("another process") && message.contains("--data-dir"),
        "{message}"
    );
    let names = names_in(&data)?;
    assert!(
        !names.iter().any(|n| n.contains("broken")),
        "the live cache was moved aside: {names:?}"
    );
    assert_eq!(running.get("kept")?.agent_id, "kept");
    Ok(())
}

#[test]
fn a_config_dir_another_registry_uses_is_an_error_and_its_writes_in_progress_are_left() -> Result<()>
{
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let root = dir.path().join("configs");
    let running = Store::open(&root, &dir.path().join("data"))?;
    // A write of the running registry, in progress.
    let staging = root.join(files::STAGING);
    fs::create_dir_all(&staging).map_err(|e| RegistryError::io(&staging, e))?;
    let in_progress = staging.join(".tmp-in-progress");
    write(&in_progress, "name: W\n")?;
    let Err(RegistryError::Config(message)) = Store::open(&root, &dir.path().join("data2")) else {
        panic!("a second registry on a config directory in use must not start");
    };
    assert!(
        message.contains("--config-dir") && message.contains("another registry"),
        "{message}"
    );
    assert!(
        in_progress.exists(),
        "the running registry's write was removed"
    );
    // Once the first one has stopped, the directory is free (and its leftovers are removed).
    drop(running);
    let next = Store::open(&root, &dir.path().join("data2"))?;
    assert!(!in_progress.exists());
    drop(next);
    Ok(())
}

#[test]
fn a_data_dir_that_is_no_sled_database_is_an_error_and_left_alone() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let root = dir.path().join("configs");
    let file = dir.path().join("start.sh");
    fs::write(&file, "#!/bin/sh\n").map_err(|e| RegistryError::io(&file, e))?;
    let Err(RegistryError::Config(message)) = Store::open(&root, &file) else {
        panic!("a file is no data directory");
    };
    assert!(
        message.contains("--data-dir") && message.contains("start.sh"),
        "{message}"
    );
    assert_eq!(
        fs::read_to_string(&file).map_err(|e| RegistryError::io(&file, e))?,
        "#!/bin/sh\n",
        "the operator's file is untouched"
    );
    let siblings = names_in(dir.path())?.len();
    assert_eq!(siblings, 2, "nothing moved aside (configs and start.sh)");
    Ok(())
}

/// The names of the entries of `dir`.
fn names_in(dir: &Path) -> Result<Vec<String>> {
    Ok(fs::read_dir(dir)
        .map_err(|e| RegistryError::io(dir, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect())
}

/// Writes `body` to `path`, mapping the error.
pub(super) fn write(path: &Path, body: &str) -> Result<()> {
    fs::write(path, body).map_err(|e| RegistryError::io(path, e))
}

const HAND: &str = "name: Hand\ndescription: Made by hand\nprompt: {system_prompt: p}\n\
                    tools: {allowlist: [file_read]}\n";

#[test]
fn a_periodic_reconcile_reads_only_the_files_that_changed() -> Result<()> {
    let (_dir, mut store) = store_with_dev_profile()?;
    store.racy = Duration::ZERO;
    let (a, b) = (
        store.custom_dir().join("hand-a.yaml"),
        store.custom_dir().join("hand-b.yaml"),
    );
    write(&a, HAND)?;
    write(&b, "name: [unclosed")?;
    let first = store.reconcile_all()?;
    assert_eq!(
        (first.files, first.updated, first.invalid, first.unchanged),
        (3, 1, 1, 0),
        "{first:?}"
    );
    let again = store.reconcile_all()?;
    assert_eq!(
        (again.unchanged, again.updated, again.invalid),
        (3, 0, 0),
        "{again:?}"
    );
    // The same size, written in place: the change time moves on (past one tick of the clock).
    std::thread::sleep(Duration::from_millis(50));
    write(&a, &HAND.replace("Made by hand", "Made by Hand"))?;
    let edited = store.reconcile_all()?;
    assert_eq!((edited.unchanged, edited.updated), (2, 1), "{edited:?}");
    let Some(v1::agent::Kind::Custom(c)) = store.get("hand-a")?.kind else {
        panic!("hand-a is a custom agent");
    };
    assert_eq!(c.spec.unwrap_or_default().description, "Made by Hand");
    // Gone, and back with the same bytes: read again.
    fs::remove_file(&a).map_err(|e| RegistryError::io(&a, e))?;
    assert_eq!(store.reconcile_all()?.removed, 1);
    write(&a, HAND)?;
    assert_eq!(store.reconcile_all()?.updated, 1);
    // A write through the API is read back by the next pass, not trusted to a stale stamp.
    let version = store.get("hand-a")?.version;
    store.update("hand-a", agent_file(), &version, "2026-01-01T00:00:00Z")?;
    let after_api = store.reconcile_all()?;
    assert_eq!(
        (after_api.unchanged, after_api.updated),
        (2, 0),
        "{after_api:?}"
    );
    Ok(())
}

#[test]
fn a_file_changed_within_the_racy_window_is_read_every_time() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    let a = store.custom_dir().join("hand-a.yaml");
    write(&a, HAND)?;
    store.reconcile_all()?;
    // Written just now: two same-size writes within one tick of the file clock would leave
    // the same stamp, so the file is not stamped yet.
    let again = store.reconcile_all()?;
    assert_eq!((again.files, again.unchanged), (2, 0), "{again:?}");
    Ok(())
}

/// A small tmpfs at `dir` (the test is skipped where it cannot be mounted: not root, or no
/// `mount`); unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Self> {
        fs::create_dir_all(dir).ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_cache_that_fills_its_disk_changes_no_file_and_refuses_writes_until_a_restart() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let Some(disk) = Tmpfs::mount(&dir.path().join("small"), "1m") else {
        eprintln!("note: no tmpfs could be mounted (not root?); the full-disk path is not checked");
        return Ok(());
    };
    let root = dir.path().join("configs");
    fs::create_dir_all(&root).map_err(|e| RegistryError::io(&root, e))?;
    let store = std::sync::Arc::new(Store::open(&root, &disk.0.join("data"))?);
    store.reconcile_all()?;
    // sled's flush may never return on a full disk: wait for it on a thread of its own.
    let flush = |store: &std::sync::Arc<Store>| {
        let (tx, rx) = std::sync::mpsc::channel();
        let store = std::sync::Arc::clone(store);
        std::thread::spawn(move || tx.send(store.flush()));
        let _ = rx.recv_timeout(Duration::from_secs(5));
    };
    let mut def = agent_file();
    def.prompt.system_prompt = "x".repeat(20_000);
    let now = "2026-11-27T00:00:00Z";
    // The files have room; the cache does not: its writes fail once sled's log cannot flush.
    let mut created = Vec::new();
    let failed = (0..200).find_map(|n| {
        let id = format!("a{n:03}");
        match store.create(&id, def.clone(), now) {
            Ok(_) => {
                created.push(id);
                flush(&store);
                None
            }
            Err(e) => Some((id, e)),
        }
    });
    let Some((id, err)) = failed else {
        panic!("200 creates of 20 KB fit in a 1 MiB cache");
    };
    let status = tonic::Status::from(err);
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("nothing was changed"),
        "{status:?}"
    );
    // The create that failed left no file; those that succeeded have theirs.
    assert!(!root.join("custom").join(format!("{id}.yaml")).exists());
    assert!(
        created
            .iter()
            .all(|id| root.join("custom").join(format!("{id}.yaml")).exists())
    );
    assert!(
        store.fault().get().is_some(),
        "the cache is marked broken: {status:?}"
    );
    // Until a restart, writes are refused before anything is touched.
    let first = &created[0];
    let refused = store.delete(first, "").map(drop);
    assert_eq!(kind_of(refused), ErrorKind::Unavailable);
    assert!(root.join("custom").join(format!("{first}.yaml")).exists());
    drop(store);
    drop(disk);
    // A restart on a disk with room serves what the files say.
    let store = reopen(&root, &dir.path().join("data2"))?;
    store.reconcile_all()?;
    assert_eq!(store.counts().1, created.len());
    Ok(())
}

#[test]
fn a_read_only_config_directory_refuses_writes_saying_so_and_changes_nothing() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let Some(disk) = Tmpfs::mount(&dir.path().join("configs"), "1m") else {
        eprintln!("note: no tmpfs could be mounted (not root?); the read-only path is not checked");
        return Ok(());
    };
    let root = disk.0.clone();
    let store = Store::open(&root, &dir.path().join("data"))?;
    store.reconcile_all()?;
    let now = "2026-11-27T00:00:00Z";
    let kept = store.create("kept", agent_file(), now)?;
    let file = root.join("custom").join("kept.yaml");
    let before = fs::read_to_string(&file).map_err(|e| RegistryError::io(&file, e))?;
    let remounted = std::process::Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&root)
        .status()
        .is_ok_and(|s| s.success());
    assert!(remounted, "remount read-only");
    let refusals = [
        store.create("new-one", agent_file(), now).map(drop),
        store
            .update("kept", agent_file(), &kept.version, now)
            .map(drop),
        store.delete("kept", &kept.version).map(drop),
    ];
    for refused in refusals {
        let status = tonic::Status::from(refused.expect_err("refused"));
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        assert!(
            status
                .message()
                .contains("may not use its config directory")
                && status.message().contains("nothing was changed"),
            "{status:?}"
        );
    }
    assert_eq!(
        fs::read_to_string(&file).map_err(|e| RegistryError::io(&file, e))?,
        before
    );
    assert!(!root.join("custom").join("new-one.yaml").exists());
    drop(store);
    drop(disk);
    Ok(())
}

#[test]
fn a_profile_with_an_unknown_tool_or_a_control_character_is_skipped_and_named() -> Result<()> {
    let (_dir, store) = store_with_dev_profile()?;
    let odd = store.root().join("odd.yaml");
    write(&odd, "tools:\n  - type: bogus_tool\n  - type: file_read\n")?;
    let escape = store.root().join("escape.yaml");
    write(&escape, "description: \"bad\\u001b[31mred\"\n")?;
    store.reconcile_all()?;
    // Not served: asking for one names its file and the problem.
    for id in ["odd", "escape"] {
        assert_eq!(kind_of(store.get(id)), ErrorKind::InvalidArgument, "{id}");
    }
    let said = store.diagnostics();
    assert!(
        said.iter()
            .any(|(p, why)| p == "odd.yaml" && why.contains("bogus_tool")),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|(p, why)| p == "escape.yaml" && why.contains("control characters")),
        "{said:?}"
    );
    // The valid profile serves on.
    assert!(store.get("dev").is_ok());
    Ok(())
}

#[test]
fn api_writes_cannot_grow_the_custom_agents_past_their_limit() -> Result<()> {
    let (dir, store) = store_with_dev_profile()?;
    let big = |n: usize| CustomAgentFile {
        prompt: definition::Prompt {
            system_prompt: "p".repeat(n),
        },
        ..agent_file()
    };
    store.create("one", big(40_000), "2026-11-22T09:00:00Z")?;
    let one = store.custom_bytes();
    assert!(one > 40_000, "{one}");
    store.set_max_custom_bytes(one * 2 + 1000);
    store.create("two", big(40_000), "2026-11-22T09:00:00Z")?;
    // A third would pass the limit: refused, and nothing written.
    let refused = store.create("three", big(40_000), "2026-11-22T09:00:00Z");
    assert_eq!(kind_of(refused), ErrorKind::QuotaExceeded);
    assert!(!store.custom_dir.join("three.yaml").exists());
    // Growing one that is there is refused too; shrinking it is not, and makes room.
    let version = |id: &str| -> Result<String> { Ok(store.get(id)?.version) };
    let grown = store.update("two", big(41_500), &version("two")?, "2026-11-22T10:00:00Z");
    assert_eq!(kind_of(grown), ErrorKind::QuotaExceeded);
    store.update("two", big(10), &version("two")?, "2026-11-22T10:00:00Z")?;
    store.create("three", big(30_000), "2026-11-22T11:00:00Z")?;
    // A delete frees its bytes; files written by hand count after a reconcile, and a reopened
    // store counts what it holds.
    store.delete("three", "")?;
    let before = store.custom_bytes();
    fs::write(
        store.custom_dir.join("by-hand.yaml"),
        definition::file_text("by-hand", &agent_file())?,
    )
    .map_err(|e| RegistryError::io(dir.path(), e))?;
    store.reconcile_all()?;
    assert!(store.custom_bytes() > before);
    let counted = store.custom_bytes();
    let root = store.root.clone();
    drop(store);
    let store = reopen(&root, &dir.path().join("data"))?;
    assert_eq!(store.custom_bytes(), counted);
    Ok(())
}
