//! Who keeps a workspace id two files name: the rule alone, then the store over temporary
//! directories (a copied file read while the registry runs, at a restart, in a rebuilt cache,
//! in a cache an older registry wrote, and an API update of the copy).

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use taskforce_proto::v1::{self, agent_change::Kind as ChangeKind};

use super::Claim;
use crate::{
    definition::derived_workspace_id,
    error::{RegistryError, Result},
    store::{
        Store,
        tests::{agent_file, reopen, write},
    },
};

const NOW: &str = "2026-11-22T09:00:00Z";

fn claim(id: &str) -> Claim {
    Claim {
        derives: false,
        prior: false,
        created: None,
        file_created: None,
        id: id.to_owned(),
    }
}

#[test]
fn the_agent_whose_id_derives_a_workspace_id_keeps_it_over_any_other_claim() {
    let own = Claim {
        derives: true,
        ..claim("zz-original")
    };
    let served_and_older = Claim {
        prior: true,
        created: Some(chrono::DateTime::UNIX_EPOCH),
        file_created: Some(SystemTime::UNIX_EPOCH),
        ..claim("aa-copy")
    };
    assert!(own.beats(&served_and_older));
    assert!(!served_and_older.beats(&own));
}

/// A claim of an agent created at `created` (seconds), in a file made at `file` (seconds).
fn dated(id: &str, created: i64, file: Option<u64>) -> Claim {
    Claim {
        created: chrono::DateTime::from_timestamp(created, 0),
        file_created: file.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
        ..claim(id)
    }
}

#[test]
fn the_agent_served_with_it_keeps_it_then_the_older_agent_then_the_older_file_then_the_smaller_id()
{
    let wins = |a: &Claim, b: &Claim| a.beats(b) && !b.beats(a);
    // Served with it before: keeps it against an agent created earlier, in an older file.
    let served = Claim {
        prior: true,
        ..dated("zz-served", 50, Some(50))
    };
    assert!(wins(&served, &dated("aa-older", 10, Some(10))));
    // Neither served: the earlier `created_at`, even in a newer file.
    assert!(wins(
        &dated("zz-first", 10, Some(90)),
        &dated("aa-later", 20, Some(10))
    ));
    // The same `created_at` (a copied file): the older file; no time known counts as latest.
    let old_file = dated("zz-old-file", 10, Some(10));
    assert!(wins(&old_file, &dated("aa-new-file", 10, Some(20))));
    assert!(wins(&old_file, &dated("aa-no-time", 10, None)));
    // Nothing else tells them apart: the smaller id.
    assert!(wins(&claim("aa"), &claim("bb")));
}

/// A config directory with its `custom/` under `dir`.
fn custom_dir(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let root = dir.join("configs");
    let custom = root.join("custom");
    fs::create_dir_all(&custom).map_err(|e| RegistryError::io(&custom, e))?;
    Ok((root, custom))
}

/// What a user does to make a new agent from `from`'s file: copies it to `to.yaml` and changes
/// the id (the one field that must change; the rest, `workspace_id` included, is copied).
fn copy_agent(custom: &Path, from: &str, to: &str) -> Result<PathBuf> {
    let source = custom.join(format!("{from}.yaml"));
    let text = fs::read_to_string(&source).map_err(|e| RegistryError::io(&source, e))?;
    let path = custom.join(format!("{to}.yaml"));
    write(
        &path,
        &text.replace(&format!("agent_id: {from}\n"), &format!("agent_id: {to}\n")),
    )?;
    Ok(path)
}

/// The workspace id custom agent `id` is served with.
fn workspace_id(store: &Store, id: &str) -> Result<String> {
    match store.get(id)?.kind {
        Some(v1::agent::Kind::Custom(c)) => Ok(c.workspace_id),
        other => panic!("{id} is not a custom agent: {other:?}"),
    }
}

/// The `workspace_id` written in a definition file.
fn written_workspace_id(path: &Path) -> Result<Option<String>> {
    let text = fs::read_to_string(path).map_err(|e| RegistryError::io(path, e))?;
    Ok(text.lines().find_map(|l| {
        l.strip_prefix("workspace_id: ")
            .map(|w| w.trim_matches('"').to_owned())
    }))
}

/// File times tick coarsely: a file written right after another may have its time.
fn let_the_clock_tick() {
    std::thread::sleep(Duration::from_millis(30));
}

#[test]
fn a_copied_file_is_served_with_its_own_workspace_id_and_the_original_keeps_its() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, custom) = custom_dir(dir.path())?;
    let data = dir.path().join("data");
    let store = Store::open(&root, &data)?;
    store.reconcile_all()?;
    // The copy's id sorts first, so neither reading order nor ids decide for the original.
    store.create("zz-original", agent_file(), NOW)?;
    let original = workspace_id(&store, "zz-original")?;
    let mut changes = store.subscribe();
    let copy = copy_agent(&custom, "zz-original", "aa-copy")?;
    assert_eq!(written_workspace_id(&copy)?.as_deref(), Some(&*original));

    store.reconcile_path(&copy)?;
    let own = derived_workspace_id("aa-copy");
    assert_eq!(workspace_id(&store, "zz-original")?, original);
    assert_eq!(workspace_id(&store, "aa-copy")?, own);
    // Watchers (the gateway's copy) hear the copy with its own id; the original is untouched.
    let change = changes
        .try_recv()
        .map_err(|e| RegistryError::Config(e.to_string()))?;
    assert_eq!(
        (change.kind(), change.agent_id.as_str()),
        (ChangeKind::Upserted, "aa-copy")
    );
    assert!(matches!(
        change.agent.and_then(|a| a.kind),
        Some(v1::agent::Kind::Custom(c)) if c.workspace_id == own
    ));
    assert!(changes.try_recv().is_err(), "only the copy changed");
    // The file is not changed.
    assert_eq!(written_workspace_id(&copy)?.as_deref(), Some(&*original));

    // Neither a full reconcile nor a restart nor an edit of either file moves them.
    store.reconcile_all()?;
    drop(store);
    let store = reopen(&root, &data)?;
    store.reconcile_all()?;
    assert_eq!(workspace_id(&store, "zz-original")?, original);
    assert_eq!(workspace_id(&store, "aa-copy")?, own);
    let original_file = custom.join("zz-original.yaml");
    let text = fs::read_to_string(&original_file).map_err(|e| RegistryError::io(&custom, e))?;
    // An editor's save by rename: a new file, newer than the copy.
    let saved = custom.join(".zz-original.yaml.swp");
    write(&saved, &text.replace("name: Agent", "name: Original"))?;
    fs::rename(&saved, &original_file).map_err(|e| RegistryError::io(&saved, e))?;
    store.reconcile_path(&original_file)?;
    let text = fs::read_to_string(&copy).map_err(|e| RegistryError::io(&copy, e))?;
    write(&copy, &text.replace("name: Agent", "name: Copy"))?;
    store.reconcile_path(&copy)?;
    store.reconcile_all()?;
    assert_eq!(workspace_id(&store, "zz-original")?, original);
    assert_eq!(workspace_id(&store, "aa-copy")?, own);
    Ok(())
}

#[test]
fn files_read_together_for_the_first_time_leave_the_workspace_id_to_the_older_file() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, custom) = custom_dir(dir.path())?;
    let original = uuid::Uuid::new_v4().to_string();
    write(
        &custom.join("zz-original.yaml"),
        &format!(
            "agent_id: zz-original\nname: A\ndescription: D\nprompt: {{system_prompt: p}}\n\
             tools: {{allowlist: [file_read]}}\nworkspace_id: {original}\n\
             created_at: \"{NOW}\"\nupdated_at: \"{NOW}\"\n"
        ),
    )?;
    let_the_clock_tick();
    copy_agent(&custom, "zz-original", "aa-copy")?;
    // A new (or rebuilt) cache: both files are read in one pass, the copy first.
    let store = Store::open(&root, &dir.path().join("data"))?;
    let stats = store.reconcile_all()?;
    assert_eq!((stats.updated, stats.invalid), (2, 0), "{stats:?}");
    assert_eq!(workspace_id(&store, "zz-original")?, original);
    assert_eq!(
        workspace_id(&store, "aa-copy")?,
        derived_workspace_id("aa-copy")
    );
    Ok(())
}

#[test]
fn an_agent_keeps_the_workspace_id_its_id_derives_even_from_a_copy_read_before_it() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, custom) = custom_dir(dir.path())?;
    // A hand-written agent once updated through the API has its derived id in its file; a copy
    // of that file names it too. Here the copy is there first.
    let derived = derived_workspace_id("zz-original");
    let body = |id: &str| {
        format!(
            "agent_id: {id}\nname: A\ndescription: D\nprompt: {{system_prompt: p}}\n\
             tools: {{allowlist: [file_read]}}\nworkspace_id: {derived}\n"
        )
    };
    write(&custom.join("aa-copy.yaml"), &body("aa-copy"))?;
    let store = Store::open(&root, &dir.path().join("data"))?;
    store.reconcile_all()?;
    assert_eq!(
        workspace_id(&store, "aa-copy")?,
        derived,
        "nobody else names it"
    );

    let original = custom.join("zz-original.yaml");
    write(&original, &body("zz-original"))?;
    let mut changes = store.subscribe();
    store.reconcile_path(&original)?;
    assert_eq!(workspace_id(&store, "zz-original")?, derived);
    assert_eq!(
        workspace_id(&store, "aa-copy")?,
        derived_workspace_id("aa-copy")
    );
    let moved = changes
        .try_recv()
        .map_err(|e| RegistryError::Config(e.to_string()))?;
    assert_eq!(
        moved.agent_id, "aa-copy",
        "watchers hear that the copy moved"
    );
    Ok(())
}

#[test]
fn an_update_of_a_copy_writes_its_own_workspace_id_into_its_file() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, custom) = custom_dir(dir.path())?;
    let store = Store::open(&root, &dir.path().join("data"))?;
    store.reconcile_all()?;
    store.create("zz-original", agent_file(), NOW)?;
    let original = workspace_id(&store, "zz-original")?;
    let copy = copy_agent(&custom, "zz-original", "aa-copy")?;
    store.reconcile_path(&copy)?;

    let updated = store.update("aa-copy", agent_file(), "", "2026-11-23T09:00:00Z")?;
    let own = derived_workspace_id("aa-copy");
    assert!(matches!(
        updated.kind,
        Some(v1::agent::Kind::Custom(ref c)) if c.workspace_id == own
    ));
    assert_eq!(written_workspace_id(&copy)?.as_deref(), Some(&*own));
    store.reconcile_all()?;
    assert_eq!(workspace_id(&store, "aa-copy")?, own);
    assert_eq!(workspace_id(&store, "zz-original")?, original);
    // The original's own update keeps its id.
    store.update("zz-original", agent_file(), "", "2026-11-23T09:00:00Z")?;
    let original_file = custom.join("zz-original.yaml");
    assert_eq!(
        written_workspace_id(&original_file)?.as_deref(),
        Some(&*original)
    );
    assert_eq!(workspace_id(&store, "zz-original")?, original);
    Ok(())
}

#[test]
fn duplicates_cached_by_an_older_registry_are_settled_when_the_cache_opens() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, custom) = custom_dir(dir.path())?;
    let data = dir.path().join("data");
    let store = Store::open(&root, &data)?;
    store.reconcile_all()?;
    store.create("zz-original", agent_file(), NOW)?;
    let original = workspace_id(&store, "zz-original")?;
    let_the_clock_tick();
    let copy = copy_agent(&custom, "zz-original", "aa-copy")?;
    store.reconcile_path(&copy)?;
    // What a registry without the rule cached for the copy: the file's id as it stands.
    let mut cached = store.get("aa-copy")?;
    if let Some(v1::agent::Kind::Custom(c)) = &mut cached.kind {
        c.workspace_id.clone_from(&original);
    }
    store
        .custom
        .insert("aa-copy", prost::Message::encode_to_vec(&cached))?;
    drop(store);

    let store = reopen(&root, &data)?;
    assert_eq!(workspace_id(&store, "zz-original")?, original);
    let own = derived_workspace_id("aa-copy");
    assert_eq!(workspace_id(&store, "aa-copy")?, own);
    store.reconcile_all()?;
    assert_eq!(workspace_id(&store, "aa-copy")?, own);
    assert_eq!(workspace_id(&store, "zz-original")?, original);
    Ok(())
}

#[test]
fn a_copy_keeps_its_own_workspace_id_once_the_original_is_gone_until_its_file_changes() -> Result<()>
{
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, custom) = custom_dir(dir.path())?;
    let store = Store::open(&root, &dir.path().join("data"))?;
    store.reconcile_all()?;
    store.create("zz-original", agent_file(), NOW)?;
    let original = workspace_id(&store, "zz-original")?;
    let copy = copy_agent(&custom, "zz-original", "aa-copy")?;
    store.reconcile_path(&copy)?;
    let version = store.get("zz-original")?.version;
    store.delete("zz-original", &version)?;
    store.reconcile_all()?;
    assert_eq!(
        workspace_id(&store, "aa-copy")?,
        derived_workspace_id("aa-copy"),
        "a served agent's workspace id does not move by itself"
    );
    // Its file read again: it names a workspace id nobody has now.
    let text = fs::read_to_string(&copy).map_err(|e| RegistryError::io(&copy, e))?;
    write(&copy, &text.replace("name: Agent", "name: Copy"))?;
    store.reconcile_path(&copy)?;
    assert_eq!(workspace_id(&store, "aa-copy")?, original);
    // A create is never given a workspace id anyone has.
    store.create("zz-original", agent_file(), NOW)?;
    assert_ne!(workspace_id(&store, "zz-original")?, original);
    Ok(())
}

#[test]
fn an_update_keeps_the_workspace_id_served_also_once_the_original_is_gone() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, custom) = custom_dir(dir.path())?;
    let store = Store::open(&root, &dir.path().join("data"))?;
    store.reconcile_all()?;
    store.create("zz-original", agent_file(), NOW)?;
    let copy = copy_agent(&custom, "zz-original", "aa-copy")?;
    store.reconcile_path(&copy)?;
    let version = store.get("zz-original")?.version;
    store.delete("zz-original", &version)?;
    // The copy's file still names the original's id, which nobody has now: an update keeps
    // the one the copy is served with, and writes it.
    let own = derived_workspace_id("aa-copy");
    store.update("aa-copy", agent_file(), "", "2026-11-23T09:00:00Z")?;
    assert_eq!(workspace_id(&store, "aa-copy")?, own);
    assert_eq!(written_workspace_id(&copy)?.as_deref(), Some(&*own));
    Ok(())
}

#[test]
fn a_renamed_file_keeps_its_workspace_id_however_the_rename_is_seen() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
    let (root, custom) = custom_dir(dir.path())?;
    let data = dir.path().join("data");
    let rename = |from: &str, to: &str| -> Result<(PathBuf, PathBuf)> {
        let (old, new) = (
            custom.join(format!("{from}.yaml")),
            custom.join(format!("{to}.yaml")),
        );
        let text = fs::read_to_string(&old).map_err(|e| RegistryError::io(&old, e))?;
        write(
            &new,
            &text.replace(&format!("agent_id: {from}\n"), &format!("agent_id: {to}\n")),
        )?;
        fs::remove_file(&old).map_err(|e| RegistryError::io(&old, e))?;
        Ok((old, new))
    };
    let store = Store::open(&root, &data)?;
    store.reconcile_all()?;
    store.create("zz-agent", agent_file(), NOW)?;
    let w = workspace_id(&store, "zz-agent")?;

    // Seen by the watcher, the new name first (it sorts first): the old entry is not reconciled
    // yet when the new file is read, and its file is gone.
    let (old, new) = rename("zz-agent", "aa-agent")?;
    let failed = store.reconcile_paths([new.as_path(), old.as_path()]);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(workspace_id(&store, "aa-agent")?, w);

    // While the registry is stopped: at the next start the cache still has the old name.
    drop(store);
    rename("aa-agent", "mm-agent")?;
    let store = reopen(&root, &data)?;
    store.reconcile_all()?;
    assert_eq!(workspace_id(&store, "mm-agent")?, w);

    // The original edited to another id in the same batch as a copy that sorts first: the copy
    // is read while the original's entry still has the id, but its file no longer names it.
    let copy = copy_agent(&custom, "mm-agent", "bb-copy")?;
    let original = custom.join("mm-agent.yaml");
    let text = fs::read_to_string(&original).map_err(|e| RegistryError::io(&original, e))?;
    let other = uuid::Uuid::new_v4().to_string();
    write(&original, &text.replace(&w, &other))?;
    let failed = store.reconcile_paths([copy.as_path(), original.as_path()]);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(workspace_id(&store, "bb-copy")?, w);
    assert_eq!(workspace_id(&store, "mm-agent")?, other);
    Ok(())
}
