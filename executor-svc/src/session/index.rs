//! The stored sessions' summaries in memory, ordered by their last change, for
//! `ListSessions`: a page is read from here, never by decoding the stored sessions (a store
//! holds up to 256 MB of them).

use std::collections::{BTreeSet, HashMap};

use taskforce_proto::v1;

/// Most sessions of one page.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Sessions of a page when the request gives no size.
pub const DEFAULT_PAGE_SIZE: usize = 100;

/// Characters of a mission or a question a summary keeps.
const PREVIEW_CHARS: usize = 200;

/// What a list keeps.
#[derive(Debug, Default, Clone, Copy)]
pub struct Filter<'a> {
    /// Only this agent's sessions.
    pub agent_id: Option<&'a str>,
    /// Only sessions in this status.
    pub status: Option<v1::RunStatus>,
}

impl Filter<'_> {
    fn keeps(&self, s: &v1::SessionSummary) -> bool {
        self.agent_id.is_none_or(|a| a == s.agent_id)
            && self.status.is_none_or(|st| st as i32 == s.status)
    }
}

/// The summaries, by id and in order of (`updated_at`, id).
#[derive(Debug, Default)]
pub struct SessionIndex {
    inner: std::sync::Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_id: HashMap<String, v1::SessionSummary>,
    order: BTreeSet<(String, String)>,
}

impl SessionIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing here can leave the maps half-changed: a panic elsewhere does not poison them.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Puts a session's summary in, unless the index holds a later one of it (two saves of one
    /// session racing to here).
    pub fn put(&self, summary: v1::SessionSummary) {
        let mut inner = self.lock();
        if let Some(old) = inner.by_id.get(&summary.session_id) {
            if old.updated_at > summary.updated_at {
                return;
            }
            let key = (old.updated_at.clone(), old.session_id.clone());
            inner.order.remove(&key);
        }
        inner
            .order
            .insert((summary.updated_at.clone(), summary.session_id.clone()));
        inner.by_id.insert(summary.session_id.clone(), summary);
    }

    /// Takes session `id` out, if the index holds it as of `updated_at` (a save after the
    /// deletion put a newer one in, which stays).
    pub fn remove(&self, id: &str, updated_at: &str) {
        let mut inner = self.lock();
        if inner
            .by_id
            .get(id)
            .is_some_and(|s| s.updated_at == updated_at)
        {
            inner.by_id.remove(id);
            inner.order.remove(&(updated_at.to_owned(), id.to_owned()));
        }
    }

    /// Up to `size` summaries that `filter` keeps, the latest change first, starting after
    /// `after` (`updated_at`, id) when given; and whether more follow.
    pub fn page(
        &self,
        filter: Filter<'_>,
        size: usize,
        after: Option<(&str, &str)>,
    ) -> (Vec<v1::SessionSummary>, bool) {
        let inner = self.lock();
        let before = after.map(|(u, id)| (u.to_owned(), id.to_owned()));
        let keys: Box<dyn Iterator<Item = &(String, String)>> = match &before {
            Some(key) => Box::new(inner.order.range(..key).rev()),
            None => Box::new(inner.order.iter().rev()),
        };
        let mut page = Vec::new();
        for (_, id) in keys {
            let Some(summary) = inner.by_id.get(id).filter(|s| filter.keeps(s)) else {
                continue;
            };
            if page.len() == size {
                return (page, true);
            }
            page.push(summary.clone());
        }
        (page, false)
    }

    /// How many sessions it holds.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `text` cut to its first [`PREVIEW_CHARS`] characters, with `…` when it was longer.
pub fn preview(text: &str) -> String {
    match text.char_indices().nth(PREVIEW_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str, agent: &str, status: v1::RunStatus, at: &str) -> v1::SessionSummary {
        v1::SessionSummary {
            session_id: id.into(),
            agent_id: agent.into(),
            status: status as i32,
            updated_at: at.into(),
            ..Default::default()
        }
    }

    fn ids(page: &[v1::SessionSummary]) -> Vec<&str> {
        page.iter().map(|s| s.session_id.as_str()).collect()
    }

    #[test]
    fn pages_go_from_the_latest_change_back_and_resume_after_their_last() {
        let index = SessionIndex::default();
        for (i, id) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            let status = if i % 2 == 0 {
                v1::RunStatus::Paused
            } else {
                v1::RunStatus::Completed
            };
            index.put(summary(
                id,
                "coder",
                status,
                &format!("2026-11-29T12:00:0{i}.000Z"),
            ));
        }
        // Two sessions changed in the same millisecond are ordered by id.
        index.put(summary(
            "f",
            "other",
            v1::RunStatus::Paused,
            "2026-11-29T12:00:04.000Z",
        ));
        let (page, more) = index.page(Filter::default(), 2, None);
        assert_eq!((ids(&page), more), (vec!["f", "e"], true));
        let last = page
            .last()
            .map(|s| (s.updated_at.as_str(), s.session_id.as_str()));
        let (page, more) = index.page(Filter::default(), 3, last);
        assert_eq!((ids(&page), more), (vec!["d", "c", "b"], true));
        let (page, more) = index.page(
            Filter::default(),
            10,
            Some(("2026-11-29T12:00:01.000Z", "b")),
        );
        assert_eq!((ids(&page), more), (vec!["a"], false));

        let paused = Filter {
            status: Some(v1::RunStatus::Paused),
            ..Filter::default()
        };
        assert_eq!(
            ids(&index.page(paused, 10, None).0),
            vec!["f", "e", "c", "a"]
        );
        let coder_paused = Filter {
            agent_id: Some("coder"),
            ..paused
        };
        let (page, more) = index.page(coder_paused, 2, None);
        assert_eq!((ids(&page), more), (vec!["e", "c"], true));
    }

    #[test]
    fn a_session_changed_again_moves_up_and_a_stale_save_or_removal_changes_nothing() {
        let index = SessionIndex::default();
        index.put(summary(
            "a",
            "coder",
            v1::RunStatus::Running,
            "2026-11-29T12:00:00.000Z",
        ));
        index.put(summary(
            "b",
            "coder",
            v1::RunStatus::Running,
            "2026-11-29T12:00:01.000Z",
        ));
        index.put(summary(
            "a",
            "coder",
            v1::RunStatus::Completed,
            "2026-11-29T12:00:02.000Z",
        ));
        assert_eq!(
            ids(&index.page(Filter::default(), 10, None).0),
            vec!["a", "b"]
        );
        assert_eq!(index.len(), 2);
        // An older save of `a` arriving late does not move it back.
        index.put(summary(
            "a",
            "coder",
            v1::RunStatus::Running,
            "2026-11-29T12:00:00.500Z",
        ));
        let (page, _) = index.page(Filter::default(), 10, None);
        assert_eq!(page[0].status, v1::RunStatus::Completed as i32);
        // Deleting `a` as it was before its last save keeps it.
        index.remove("a", "2026-11-29T12:00:00.000Z");
        assert_eq!(index.len(), 2);
        index.remove("a", "2026-11-29T12:00:02.000Z");
        assert_eq!(ids(&index.page(Filter::default(), 10, None).0), vec!["b"]);
    }

    #[test]
    fn a_preview_keeps_200_characters_at_char_boundaries() {
        assert_eq!(preview("short"), "short");
        let long = "é".repeat(250);
        let cut = preview(&long);
        assert_eq!(cut.chars().count(), 201);
        assert!(cut.ends_with('…'));
        assert_eq!(preview(&"x".repeat(200)), "x".repeat(200));
    }
}
