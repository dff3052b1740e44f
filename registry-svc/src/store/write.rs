//! Writes through the API: create, update and delete custom agents, durably, with version
//! checks, each under the write lock.

use std::{
    fs,
    path::{Path, PathBuf},
};

use prost::Message;
use taskforce_proto::{
    error::{ApiError, ErrorKind},
    ids,
    v1::{self, AgentSource, agent_change::Kind as ChangeKind},
};

use super::Store;
use crate::{
    convert,
    definition::{self, CustomAgentFile},
    error::{RegistryError, Result},
    files,
};

impl Store {
    /// Creates a custom agent from a validated definition.
    pub fn create(&self, id: &str, def: CustomAgentFile, now: &str) -> Result<v1::Agent> {
        self.cached(self.create_inner(id, def, now))
    }

    /// Replaces a custom agent, keeping its `created_at`.
    pub fn update(
        &self,
        id: &str,
        def: CustomAgentFile,
        expected_version: &str,
        now: &str,
    ) -> Result<v1::Agent> {
        self.cached(self.update_inner(id, def, expected_version, now))
    }

    /// Deletes a custom agent; returns the revision of the deletion.
    pub fn delete(&self, id: &str, expected_version: &str) -> Result<u64> {
        self.cached(self.delete_inner(id, expected_version))
    }

    fn create_inner(&self, id: &str, mut def: CustomAgentFile, now: &str) -> Result<v1::Agent> {
        let path = self.custom_path(id)?;
        let _guard = self.lock();
        self.writable()?;
        if path.exists() || self.custom.contains_key(id)? || self.profile_holds(id)? {
            let mut message = format!("agent {id:?} already exists");
            if let Some((rel, reason)) = self.diagnostic(&path) {
                message.push_str(&format!(
                    ": its definition file {rel} is invalid ({reason}); fix the file, or \
                     delete the agent and create it again"
                ));
            }
            return Err(ApiError::new(ErrorKind::AlreadyExists, message).into());
        }
        def.agent_id = Some(id.to_owned());
        def.workspace_id = Some(uuid::Uuid::new_v4().to_string());
        def.created_at = Some(now.to_owned());
        def.updated_at = Some(now.to_owned());
        // A new agent starts with no runtime history, even if an old one had this id.
        self.forget_facts(id)?;
        self.write_custom(id, &path, &def, None, None)
    }

    fn update_inner(
        &self,
        id: &str,
        mut def: CustomAgentFile,
        expected_version: &str,
        now: &str,
    ) -> Result<v1::Agent> {
        let path = self.custom_path(id)?;
        let _guard = self.lock();
        self.writable()?;
        self.not_a_profile(id)?;
        let current = self.read_current(id, &path, expected_version)?;
        // What the file says of itself, even when it is invalid (a PUT is how it gets fixed).
        let (workspace_id, created_at) = match files::yaml::<CustomAgentFile>(&current) {
            Ok(old) => (old.workspace_id, old.created_at),
            Err(_) => kept_fields(&current),
        };
        // What was served for it: the created_at clients saw when the file has none, and the
        // workspace id.
        let (served_created, served_workspace) = match self.cached_custom(id)?.and_then(|a| a.kind)
        {
            Some(v1::agent::Kind::Custom(c)) => (
                Some(c.created_at),
                Some(c.workspace_id).filter(|w| !w.is_empty()),
            ),
            _ => (None, None),
        };
        let created = super::reconcile::served_created_at(created_at, served_created, &path);
        def.agent_id = Some(id.to_owned());
        // The workspace id stays what clients have seen, also for files written by hand; a
        // file copied from another agent's does not keep that agent's.
        def.workspace_id =
            Some(self.workspace_for_update(id, served_workspace.as_deref(), workspace_id));
        def.created_at = Some(created);
        def.updated_at = Some(now.to_owned());
        self.write_custom(id, &path, &def, Some(&current), served_workspace.as_deref())
    }

    fn delete_inner(&self, id: &str, expected_version: &str) -> Result<u64> {
        let path = self.custom_path(id)?;
        let _guard = self.lock();
        self.writable()?;
        self.not_a_profile(id)?;
        let current = self.read_current(id, &path, expected_version)?;
        if !files::remove_durable_if(&path, &current).map_err(|e| RegistryError::io(&path, e))? {
            return Err(ApiError::new(
                ErrorKind::VersionConflict,
                format!(
                    "agent {id:?}'s file was changed by hand while it was being deleted; \
                     nothing was deleted: get it again and retry"
                ),
            )
            .into());
        }
        let cached = self
            .uncache(AgentSource::Custom, id)
            .and_then(|_| self.forget_facts(id));
        if let Err(e) = cached {
            return Err(self.undo(&path, Some(&current), e));
        }
        self.forget_diagnostic(&path);
        Ok(self.notify(ChangeKind::Deleted, id, AgentSource::Custom, None))
    }

    pub(super) fn custom_path(&self, id: &str) -> Result<PathBuf> {
        ids::validate_agent_id(id).map_err(|e| ApiError::field("agent_id", e.to_string()))?;
        Ok(self.custom_dir.join(format!("{id}.{}", files::EXT)))
    }

    /// Reads the current file of `id` and checks the expected version against it.
    pub(super) fn read_current(
        &self,
        id: &str,
        path: &Path,
        expected_version: &str,
    ) -> Result<Vec<u8>> {
        let bytes = match files::read_at_most(path, files::MAX_DEFINITION_BYTES) {
            Ok(Some(b)) => b,
            Ok(None) => {
                return Err(ApiError::new(
                    ErrorKind::ReadOnly,
                    format!(
                        "agent {id:?}'s definition file is larger than {} bytes; fix it by hand",
                        files::MAX_DEFINITION_BYTES
                    ),
                )
                .into());
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                return Err(ApiError::new(
                    ErrorKind::ReadOnly,
                    format!("agent {id:?}'s definition file is {e}; the API does not change it"),
                )
                .into());
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(ApiError::new(
                    ErrorKind::ReadOnly,
                    format!("agent {id:?}'s definition file cannot be read ({e}); fix its permissions by hand"),
                )
                .into());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let err = if self.profile.contains_key(id)? {
                    ApiError::new(
                        ErrorKind::ReadOnly,
                        format!(
                            "agent {id:?} is a profile agent; edit its file {id}.{} in the \
                             registry's config directory instead",
                            files::EXT
                        ),
                    )
                } else {
                    ApiError::new(ErrorKind::NotFound, format!("agent {id:?} not found"))
                };
                return Err(err.into());
            }
            Err(e) => return Err(RegistryError::io(path, e)),
        };
        let version = files::version_of(&bytes);
        if !expected_version.is_empty() && expected_version != version {
            return Err(ApiError::new(
                ErrorKind::VersionConflict,
                format!("agent {id:?} is at version {version}, not the expected {expected_version}; get it again and retry"),
            )
            .into());
        }
        Ok(bytes)
    }

    /// Refuses to change `id` when a profile holds it: what is served under it is the profile,
    /// whatever a custom file of that id says (that file is not read).
    fn not_a_profile(&self, id: &str) -> Result<()> {
        if !self.profile_holds(id)? {
            return Ok(());
        }
        let mut message = format!(
            "agent {id:?} is a profile agent; edit its file {id}.{} in the registry's config \
             directory instead",
            files::EXT
        );
        if self.custom_path(id)?.exists() {
            message.push_str(&format!(
                " (custom/{id}.{} is not read while the profile has its id: rename it)",
                files::EXT
            ));
        }
        Err(ApiError::new(ErrorKind::ReadOnly, message).into())
    }

    /// Refuses a write while the cache is broken (see [`Store::fault`]).
    fn writable(&self) -> Result<()> {
        match self.fault.get() {
            None => Ok(()),
            Some(cause) => Err(ApiError::new(
                ErrorKind::Unavailable,
                format!(
                    "the registry cannot change agents until it is restarted: {cause}. Free \
                     space on its --data-dir and restart it (it rebuilds the cache from the YAML \
                     files); nothing was changed"
                ),
            )
            .into()),
        }
    }

    /// `result` of a write: a failure of the cache marks it broken.
    fn cached<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            self.note_failure(e);
        }
        result
    }

    /// Puts `path` back as it was (`previous`, or absent) after its cache update failed with
    /// `cause`, so a write that answers an error has changed nothing; the cache is then broken.
    fn undo(&self, path: &Path, previous: Option<&[u8]>, cause: RegistryError) -> RegistryError {
        self.note_failure(&cause);
        let undone = match previous {
            Some(bytes) => files::write_atomic(path, bytes, &self.root.join(files::STAGING)),
            None => files::remove_durable(path),
        };
        match undone {
            Ok(()) => cause,
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "could not undo a file change whose cache update failed; a restart serves the file as it is");
                ApiError::new(
                    ErrorKind::Internal,
                    format!(
                        "the registry's cache failed ({cause}) after {} changed, and undoing the \
                         change failed ({e}): restart the registry, which serves the file as it is",
                        path.file_name()
                            .map(|n| n.to_string_lossy())
                            .unwrap_or_default()
                    ),
                )
                .into()
            }
        }
    }

    /// Writes `def` as `id`'s file if the file is still what the caller checked: absent for a
    /// create (`previous` `None`), the bytes `previous` for an update. A hand edit that landed
    /// meanwhile is a conflict, not overwritten.
    pub(super) fn write_custom(
        &self,
        id: &str,
        path: &Path,
        def: &CustomAgentFile,
        previous: Option<&[u8]>,
        served_workspace: Option<&str>,
    ) -> Result<v1::Agent> {
        let yaml = definition::file_text(id, def)?;
        let mut agent = convert::custom_to_proto(id, files::version_of(yaml.as_bytes()), def);
        self.room_for(id, agent.encoded_len())?;
        let expected = previous.map(files::version_of);
        let expected = expected.as_deref();
        let unchanged = || match expected {
            None => {
                fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            }
            Some(version) => fs::read(path).is_ok_and(|b| files::version_of(&b) == version),
        };
        let written = files::write_atomic_if(
            path,
            yaml.as_bytes(),
            &self.root.join(files::STAGING),
            unchanged,
        )
        .map_err(|e| RegistryError::io(path, e))?;
        if !written {
            let err = match expected {
                None => ApiError::new(
                    ErrorKind::AlreadyExists,
                    format!(
                        "agent {id:?} already exists: its file appeared while this one was written"
                    ),
                ),
                Some(_) => ApiError::new(
                    ErrorKind::VersionConflict,
                    format!(
                        "agent {id:?} was changed on disk while this update was written; get it again and retry"
                    ),
                ),
            };
            return Err(err.into());
        }
        if let Err(e) = self.cache_written(id, &mut agent, served_workspace) {
            return Err(self.undo(path, previous, e));
        }
        self.forget_diagnostic(path);
        let mut agent = self.with_runtime(agent);
        agent.revision = self.notify_upserted(&agent);
        Ok(agent)
    }

    /// Caches custom agent `id` as an API write left its file (`served`: the workspace id it
    /// was served with before). Its workspace id is the file's: a create's fresh UUID is
    /// nobody's, and an update writes one the agent keeps ([`Store::workspace_for_update`]).
    fn cache_written(&self, id: &str, agent: &mut v1::Agent, served: Option<&str>) -> Result<()> {
        self.settle_workspace(id, agent, served)?;
        self.cache(AgentSource::Custom, id, agent)
    }
}

/// `workspace_id` and `created_at` of a definition file that does not parse as one: from its
/// YAML when that parses, else from its top-level `key: value` lines.
pub(super) fn kept_fields(bytes: &[u8]) -> (Option<String>, Option<String>) {
    let text = String::from_utf8_lossy(bytes);
    let yaml = serde_yaml::from_str::<serde_yaml::Value>(&text).ok();
    let field = |key: &str| -> Option<String> {
        if let Some(serde_yaml::Value::Mapping(map)) = &yaml {
            return map.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        }
        text.lines().find_map(|line| {
            let value = line.strip_prefix(key)?.strip_prefix(':')?.trim();
            let value = value.trim_matches(|c| c == '"' || c == '\'');
            (!value.is_empty()).then(|| value.to_owned())
        })
    };
    (field("workspace_id"), field("created_at"))
}

#[cfg(test)]
mod tests {
    use super::kept_fields;

    #[test]
    fn an_invalid_file_still_gives_its_workspace_id_and_creation_time() {
        let broken = b"name: W\nworkspace_id: 386b5b39-aaaa\ncreated_at: \"2026-11-27T09:26:53Z\"\n  bad: [unclosed\n";
        assert_eq!(
            kept_fields(broken),
            (
                Some("386b5b39-aaaa".to_owned()),
                Some("2026-11-27T09:26:53Z".to_owned())
            )
        );
        let wrong_schema = b"workspace_id: w-1\ncreated_at: '2026-01-01T00:00:00Z'\ntools: 3\n";
        assert_eq!(
            kept_fields(wrong_schema),
            (
                Some("w-1".to_owned()),
                Some("2026-01-01T00:00:00Z".to_owned())
            )
        );
        assert_eq!(kept_fields(b"{{{"), (None, None));
    }
}
