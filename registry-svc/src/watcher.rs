//! Keeps the cache current with hand edits: a file watcher for quick updates and a periodic
//! full reconcile as the backstop (for missed events and network file systems).

use std::{collections::BTreeSet, path::PathBuf, sync::Arc, time::Duration};

use notify::{
    EventKind, RecursiveMode, Watcher,
    event::{AccessKind, AccessMode},
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::store::Store;

/// A path to reconcile, or `None` for "reconcile everything".
type Event = Option<PathBuf>;

/// How long to gather events before reconciling (editors write in several steps).
const DEBOUNCE: Duration = Duration::from_millis(25);

/// The installed file watcher and its events; made before the first reconcile so that no edit
/// is missed, then handed to [`run`].
pub struct Installed {
    watcher: Option<notify::RecommendedWatcher>,
    events: mpsc::UnboundedReceiver<Event>,
}

/// Starts watching the config directories (or says why it cannot: then only the periodic
/// reconcile keeps the cache current).
pub fn install(store: &Store) -> Installed {
    let (tx, events) = mpsc::unbounded_channel::<Event>();
    let watcher = match watch(store, tx) {
        Ok(w) => Some(w),
        Err(e) => {
            warn!(error = %e, "file watcher unavailable; relying on the periodic reconcile");
            None
        }
    };
    Installed { watcher, events }
}

/// Applies watched changes and reconciles every `interval` until `stop` fires.
pub async fn run(
    store: Arc<Store>,
    installed: Installed,
    interval: Duration,
    stop: CancellationToken,
) {
    let Installed {
        mut watcher,
        events: mut rx,
    } = installed;
    let custom_dir = store.custom_dir().to_path_buf();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        let mut batch: BTreeSet<PathBuf> = BTreeSet::new();
        let mut full = false;
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => full = true,
            ev = rx.recv() => {
                let Some(ev) = ev else { return };
                gather(ev, &mut batch, &mut full);
                tokio::time::sleep(DEBOUNCE).await;
                while let Ok(ev) = rx.try_recv() {
                    gather(ev, &mut batch, &mut full);
                }
            }
        }
        // A watch follows the directory it was set on: `custom/` removed and made again (a
        // `git checkout` of a branch without it and back, a restore from a backup) needs a new
        // one, and everything in it a reconcile.
        if batch.contains(&custom_dir) {
            full = true;
            if let Some(w) = watcher.as_mut()
                && custom_dir.is_dir()
            {
                match w.watch(&custom_dir, RecursiveMode::NonRecursive) {
                    Ok(()) => {
                        debug!(dir = %custom_dir.display(), "watching the custom agents' directory again")
                    }
                    Err(e) => {
                        warn!(error = %e, "cannot watch the custom agents' directory again; relying on the periodic reconcile")
                    }
                }
            }
        }
        let follower = Arc::clone(&store);
        let result = tokio::task::spawn_blocking(move || {
            if full {
                follower.reconcile_all().map(|s| {
                    crate::metrics::reconciled();
                    debug!(?s, "periodic reconcile");
                })
            } else {
                // One path that fails is said; the batch's other paths still count.
                for (p, e) in follower.reconcile_paths(batch.iter().map(PathBuf::as_path)) {
                    if !follower.note_failure(&e) {
                        warn!(path = %p.display(), error = %e, "reconciling a changed file failed; the periodic reconcile retries");
                    }
                }
                Ok(())
            }
        })
        .await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                if !store.note_failure(&e) {
                    warn!(error = %e, "reconcile failed; will retry");
                }
            }
            Err(e) => warn!(error = %e, "reconcile task failed"),
        }
    }
}

fn gather(ev: Event, batch: &mut BTreeSet<PathBuf>, full: &mut bool) {
    match ev {
        Some(p) => {
            batch.insert(p);
        }
        None => *full = true,
    }
}

fn watch(
    store: &Store,
    tx: mpsc::UnboundedSender<Event>,
) -> notify::Result<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        // Sending fails only once the watch loop has stopped; nothing to do then.
        match res {
            // Reading a file (ours included: reconciling opens it) is no change.
            Ok(ev) if !changes_content(&ev.kind) => {}
            Ok(ev) if ev.need_rescan() || ev.paths.is_empty() => {
                let _ = tx.send(None);
            }
            Ok(ev) => {
                for p in ev.paths {
                    let _ = tx.send(Some(p));
                }
            }
            Err(_) => {
                let _ = tx.send(None);
            }
        }
    })?;
    watcher.watch(store.root(), RecursiveMode::NonRecursive)?;
    watcher.watch(store.custom_dir(), RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// Whether an event can mean a file's content or presence changed. Opening, reading and
/// closing a file unchanged cannot; without this filter, reconciling a file (which opens it)
/// would report itself and reconcile it again, forever.
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Any | EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) => true,
        EventKind::Other => true,
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{CreateKind, ModifyKind, RemoveKind};

    use super::*;

    #[test]
    fn reading_a_file_is_not_a_change_and_writing_one_is() {
        for quiet in [
            AccessKind::Open(AccessMode::Any),
            AccessKind::Read,
            AccessKind::Close(AccessMode::Read),
            AccessKind::Any,
        ] {
            assert!(!changes_content(&EventKind::Access(quiet)), "{quiet:?}");
        }
        for change in [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
        ] {
            assert!(changes_content(&change), "{change:?}");
        }
    }

    /// An API write stages its file outside the watched directory, so the watcher hears of the
    /// definition only, not of a temp file's creation, writes and rename.
    #[test]
    fn an_atomic_write_is_heard_as_its_definition_only() -> Result<(), Box<dyn std::error::Error>> {
        let root = tempfile::tempdir()?;
        let dir_path = std::fs::canonicalize(root.path())?.join("custom");
        let staging = dir_path.with_file_name(crate::files::STAGING);
        std::fs::create_dir(&dir_path)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let mut watcher =
            notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
                if let Ok(ev) = res {
                    let _ = tx.send(ev);
                }
            })?;
        watcher.watch(&dir_path, RecursiveMode::NonRecursive)?;
        let target = dir_path.join("a.yaml");
        crate::files::write_atomic(&target, b"one", &staging)?;
        let mut heard = Vec::new();
        // Events arrive in order: everything before the definition's own event is in `heard`.
        while !heard
            .iter()
            .any(|ev: &notify::Event| changes_content(&ev.kind) && ev.paths.contains(&target))
        {
            heard.push(rx.recv_timeout(std::time::Duration::from_secs(10))?);
        }
        for ev in &heard {
            assert!(
                ev.paths.iter().all(|p| p == &target || p == &dir_path),
                "an event about another path: {ev:?}"
            );
        }
        assert_eq!(std::fs::read(&target)?, b"one");
        Ok(())
    }
}
