//! State tokens: the opaque, tamper-evident references to a paused sub-agent frame that a
//! `need_user_input` result carries (seed 003 §6).
//!
//! A token is `v1.<frame_id>.<mac>`, the MAC an HMAC-SHA256 over the session id and frame id
//! with a key kept in the executor's data directory. The frame itself stays in the session
//! (a deliberate choice over carrying state in the token: nothing a model or client holds can
//! change a conversation), so a token only says *which* frame, and only for its own session.

use std::{io::Write, path::Path};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::ExecutorError;

type HmacSha256 = Hmac<Sha256>;

/// File of the signing key in the data directory.
const KEY_FILE: &str = "state_token.key";

/// The signing key.
#[derive(Clone)]
pub struct TokenKey([u8; 32]);

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token of this format.
    #[error("`resume_token` is malformed")]
    Malformed,
    /// The MAC does not match: altered, or issued for another session.
    #[error("`resume_token` was altered or belongs to another session")]
    Forged,
}

fn key_error(path: &Path, e: &std::io::Error) -> ExecutorError {
    ExecutorError::Config(format!("state token key {}: {e}", path.display()))
}

impl TokenKey {
    /// The key in `dir`, created (32 random bytes, mode 0600) on first use. Blocking.
    pub fn load_or_create(dir: &Path) -> Result<Self, ExecutorError> {
        let path = dir.join(KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => {
                let bytes = hex::decode(text.trim())
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok());
                bytes.map(Self).ok_or_else(|| {
                    ExecutorError::Config(format!(
                        "state token key {} is not 64 hex digits; delete it to make a new one \
                         (paused sub-agents then cannot be resumed)",
                        path.display()
                    ))
                })
            }
            // Empty: left by a first start that could not write the key (a full disk, before
            // keys were written whole), so no token was ever signed with it.
            Ok(_) => Self::create(dir, &path, true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::create(dir, &path, false),
            Err(e) => Err(key_error(&path, &e)),
        }
    }

    /// A new key written whole to `path` (a temp file, synced, then moved there), or nothing
    /// written: a start that fails here (a full disk) leaves no half key behind.
    fn create(dir: &Path, path: &Path, over_empty: bool) -> Result<Self, ExecutorError> {
        let config = |e: std::io::Error| key_error(path, &e);
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| {
            ExecutorError::Config(format!("no randomness for the state token key: {e}"))
        })?;
        std::fs::create_dir_all(dir).map_err(config)?;
        // Mode 0600, removed when dropped unless moved.
        let mut file = tempfile::Builder::new()
            .prefix(".state_token.key.")
            .tempfile_in(dir)
            .map_err(config)?;
        file.write_all(hex::encode(key).as_bytes())
            .and_then(|()| file.as_file().sync_all())
            .map_err(config)?;
        if over_empty {
            file.persist(path).map_err(|e| config(e.error))?;
        } else {
            file.persist_noclobber(path).map_err(|e| config(e.error))?;
        }
        // The name too: a key lost in a power cut would void every stored token.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(config)?;
        Ok(Self(key))
    }

    /// A key from bytes (tests).
    pub fn from_bytes(key: [u8; 32]) -> Self {
        Self(key)
    }

    fn mac(&self, session_id: &str, frame_id: &str) -> HmacSha256 {
        // Any key length is valid for HMAC; `new_from_slice` cannot fail with 32 bytes.
        let Ok(mut mac) = HmacSha256::new_from_slice(&self.0) else {
            unreachable!("HMAC accepts keys of any length")
        };
        mac.update(b"taskforce-state-token-v1\0");
        mac.update(session_id.as_bytes());
        mac.update(b"\0");
        mac.update(frame_id.as_bytes());
        mac
    }

    /// The token for frame `frame_id` of session `session_id`.
    pub fn sign(&self, session_id: &str, frame_id: &str) -> String {
        let tag = self.mac(session_id, frame_id).finalize().into_bytes();
        format!("v1.{frame_id}.{}", hex::encode(tag))
    }

    /// The frame id a token of `session_id` names (compared in constant time).
    pub fn verify(&self, session_id: &str, token: &str) -> Result<String, TokenError> {
        let mut parts = token.trim().splitn(3, '.');
        let (Some("v1"), Some(frame_id), Some(tag)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        if frame_id.is_empty() || !frame_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(TokenError::Malformed);
        }
        let tag = hex::decode(tag).map_err(|_| TokenError::Malformed)?;
        self.mac(session_id, frame_id)
            .verify_slice(&tag)
            .map_err(|_| TokenError::Forged)?;
        Ok(frame_id.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_frame_only_in_its_own_session() {
        let key = TokenKey::from_bytes([7; 32]);
        let token = key.sign("s1", "f1a2");
        assert_eq!(key.verify("s1", &token), Ok("f1a2".to_owned()));
        assert_eq!(key.verify("s2", &token), Err(TokenError::Forged));
        let other = key.sign("s1", "f1a3");
        let spliced = format!("v1.f1a2.{}", other.rsplit('.').next().unwrap_or_default());
        assert_eq!(key.verify("s1", &spliced), Err(TokenError::Forged));
        assert_eq!(
            TokenKey::from_bytes([8; 32]).verify("s1", &token),
            Err(TokenError::Forged)
        );
        for bad in ["", "v2.f.00", "v1..00", "v1.f-1.00", "v1.f.zz"] {
            assert_eq!(key.verify("s1", bad), Err(TokenError::Malformed), "{bad}");
        }
    }

    #[test]
    fn the_key_is_created_once_and_reused() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let a = TokenKey::load_or_create(dir.path()).expect("create");
        let b = TokenKey::load_or_create(dir.path()).expect("load");
        assert_eq!(a.0, b.0);
        let token = a.sign("s", "f1");
        assert!(b.verify("s", &token).is_ok());
        let file = dir.path().join(KEY_FILE);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&file).expect("key").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        // Nothing but the key is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 1);
    }

    #[test]
    fn an_empty_key_file_left_by_a_failed_first_start_is_replaced() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let file = dir.path().join(KEY_FILE);
        std::fs::write(&file, "").expect("empty");
        let a = TokenKey::load_or_create(dir.path()).expect("made anew");
        let b = TokenKey::load_or_create(dir.path()).expect("load");
        assert_eq!(a.0, b.0);
        assert_eq!(std::fs::read_to_string(&file).expect("key").len(), 64);
        // A key that is there but broken is still refused, not replaced.
        std::fs::write(&file, "not hex").expect("broken");
        assert!(TokenKey::load_or_create(dir.path()).is_err());
    }
}
