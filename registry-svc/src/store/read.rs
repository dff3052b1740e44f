//! Reads: one agent, pages of agents, sub-agent checks.

use std::ops::Bound;

use prost::Message;
use taskforce_proto::{
    error::{ApiError, ErrorKind},
    page_token,
    v1::{self, AgentSource},
};

use super::{DEFAULT_PAGE, MAX_PAGE, MAX_PAGE_BYTES, Store};
use crate::{definition, error::Result, files};

impl Store {
    /// One agent: a custom agent, else a profile agent of that name.
    pub fn get(&self, id: &str) -> Result<v1::Agent> {
        for tree in [&self.custom, &self.profile] {
            if let Some(bytes) = tree.get(id)? {
                return Ok(self.with_runtime(v1::Agent::decode(bytes.as_ref())?));
            }
        }
        Err(self.not_served(id).into())
    }

    /// Why `id` is not served: its definition file is invalid (the seed's 400 "agent config
    /// invalid", naming the file and the reason), or there is none (404).
    fn not_served(&self, id: &str) -> ApiError {
        let file = format!("{id}.{}", files::EXT);
        let broken = [AgentSource::Custom, AgentSource::Profile]
            .into_iter()
            .find_map(|source| self.diagnostic(&self.dir_of(source).join(&file)));
        match broken {
            Some((rel, reason)) => ApiError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "agent {id:?} is not served: its definition file {rel} is invalid ({reason}); \
                     fix the file (GET /api/v1/diagnostics lists every invalid file)"
                ),
            ),
            None => ApiError::new(ErrorKind::NotFound, format!("agent {id:?} not found")),
        }
    }

    /// One page of agents: profiles first, then custom agents, each by id.
    pub fn list(
        &self,
        page_size: usize,
        token: &str,
        source: AgentSource,
    ) -> Result<(Vec<v1::Agent>, String)> {
        let page_size = match page_size {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        };
        let (start_source, after) = match page_token::parse(token, source)? {
            Some((source, after)) => (Some(source), after),
            None => (None, ""),
        };
        let order: &[AgentSource] = match source {
            AgentSource::Unspecified => &[AgentSource::Profile, AgentSource::Custom],
            AgentSource::Profile => &[AgentSource::Profile],
            AgentSource::Custom => &[AgentSource::Custom],
        };
        let mut out = Vec::with_capacity(page_size.min(256));
        let mut bytes = 0;
        let mut started = start_source.is_none();
        for &src in order {
            let lower = if start_source == Some(src) {
                started = true;
                Bound::Excluded(after.as_bytes().to_vec())
            } else if started {
                Bound::Unbounded
            } else {
                continue;
            };
            for item in self
                .tree(src)
                .range::<Vec<u8>, _>((lower, Bound::Unbounded))
            {
                let (key, value) = item?;
                bytes += value.len();
                if out.len() == page_size || (!out.is_empty() && bytes > MAX_PAGE_BYTES) {
                    // There is more; the token points after the last agent of this page.
                    let token = match out.last() {
                        Some(last) => page_token::make(self.last_source(&out, src), &last.agent_id),
                        None => page_token::make(src, &String::from_utf8_lossy(&key)),
                    };
                    return Ok((out, token));
                }
                out.push(self.with_runtime(v1::Agent::decode(value.as_ref())?));
            }
        }
        Ok((out, String::new()))
    }

    pub(super) fn last_source(&self, page: &[v1::Agent], fallback: AgentSource) -> AgentSource {
        page.last()
            .and_then(|a| AgentSource::try_from(a.source).ok())
            .unwrap_or(fallback)
    }

    /// Refuses with `invalid_subagents` the entries of agent `id`'s `subagents` that name no
    /// agent the registry serves (custom or profile). Run on API writes only: see
    /// [`definition::validate`] for why loading files does not check this.
    pub fn check_subagents(&self, id: &str, subagents: &[String]) -> Result<()> {
        let mut unknown = Vec::new();
        for s in subagents {
            if !self.custom.contains_key(s)? && !self.profile.contains_key(s)? {
                unknown.push(s.clone());
            }
        }
        if unknown.is_empty() {
            return Ok(());
        }
        let mut known = Vec::with_capacity(self.custom.len() + self.profile.len());
        for key in self.custom.iter().keys().chain(self.profile.iter().keys()) {
            known.push(String::from_utf8_lossy(&key?).into_owned());
        }
        Err(definition::invalid_subagents(id, &unknown, known).into())
    }
}
