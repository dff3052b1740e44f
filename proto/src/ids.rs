//! The agent id rule: `[a-z0-9][a-z0-9-_]{2,63}`, which is also the file name without `.yaml`;
//! and the session id rule (a chat's `threadId` is a session id): 1-128 letters, digits, `-`, `_`.

/// Why an id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Shorter than 3 or longer than 64 characters.
    #[error("agent_id must be 3 to 64 characters long, got {0}")]
    Length(usize),
    /// The first character is not a lowercase letter or digit.
    #[error("agent_id must start with a lowercase ASCII letter (a-z) or digit, found {0:?}")]
    Start(char),
    /// A character outside `[a-z0-9-_]`.
    #[error(
        "agent_id may only contain lowercase ASCII letters (a-z), digits, '-' and '_', found {0:?}"
    )]
    Char(char),
}

/// Smallest allowed id length.
pub const MIN_LEN: usize = 3;
/// Largest allowed id length.
pub const MAX_LEN: usize = 64;

/// Checks `id` against the agent id rule.
pub fn validate_agent_id(id: &str) -> Result<(), IdError> {
    let len = id.chars().count();
    if !(MIN_LEN..=MAX_LEN).contains(&len) {
        return Err(IdError::Length(len));
    }
    let mut chars = id.chars();
    match chars.next() {
        Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit() => {}
        Some(c) => return Err(IdError::Start(c)),
        None => return Err(IdError::Length(0)),
    }
    match chars.find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '_'))
    {
        Some(c) => Err(IdError::Char(c)),
        None => Ok(()),
    }
}

/// Whether `id` is a valid session id (also a chat `threadId`): 1-128 ASCII letters, digits,
/// `-` and `_`.
pub fn is_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Longest `model` (an alias of the executor's `llm_config.yaml`, or a provider's model name).
pub const MAX_MODEL: usize = 128;

/// A model name, of an agent or of a request: 1 to [`MAX_MODEL`] characters, no whitespace or
/// control characters.
pub fn check_model(model: &str) -> Result<(), String> {
    let n = model.chars().count();
    if !(1..=MAX_MODEL).contains(&n) {
        return Err(format!(
            "must be 1 to {MAX_MODEL} characters when set, got {n}"
        ));
    }
    if model.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "must not contain whitespace or control characters, got {model:?}"
        ));
    }
    Ok(())
}

/// Longest executor instance name.
pub const MAX_INSTANCE_LEN: usize = 40;

/// Whether `name` may name an executor instance (the owner part of the session ids it mints):
/// 1-40 lowercase ASCII letters, digits and `-`, starting with a letter or digit, as a
/// Kubernetes pod name of a StatefulSet is.
pub fn is_instance_name(name: &str) -> bool {
    (1..=MAX_INSTANCE_LEN).contains(&name.len())
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A new session id owned by `owner` (an instance name): `<owner>_<unique>`, or `unique` alone
/// when there is no owner. `unique` must not contain `_` (a UUID does not).
pub fn owned_session_id(owner: Option<&str>, unique: &str) -> String {
    match owner {
        Some(owner) => format!("{owner}_{unique}"),
        None => unique.to_owned(),
    }
}

/// A new session id minted for `owner` (an instance name, or none): `<owner>_<uuid>`, or the
/// UUID alone. The UUID is time-ordered (its first 48 bits are the Unix time in milliseconds,
/// as a v7's, so a new session's key lands next to the last ones in sled), the other 74 bits
/// random (a v7's would hold a counter: ids minted in one millisecond would differ in 32 random
/// bits only, and a session id is all a caller needs to read or answer it), and it is marked
/// version 8, which tells a minted id from a client's own `thread_<uuid>` (UUIDs clients make
/// are version 4 or 7): see [`minted_owner`].
pub fn mint_session_id(owner: Option<&str>) -> String {
    // A v4's bytes: 122 random bits, the RFC 9562 variant set.
    let mut bytes = *uuid::Uuid::new_v4().as_bytes();
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let millis = u64::try_from(millis).unwrap_or(u64::MAX).to_be_bytes();
    bytes[..6].copy_from_slice(&millis[2..]);
    bytes[6] = (bytes[6] & 0x0f) | (MINTED_VERSION << 4);
    owned_session_id(owner, &uuid::Uuid::from_bytes(bytes).to_string())
}

/// The UUID version of minted session ids.
const MINTED_VERSION: u8 = 8;

/// The instance that owns session `id`, when the id says so (see [`owned_session_id`]): the
/// part before the first `_`, if it is an instance name. Ids chosen by clients may carry none.
pub fn session_owner(id: &str) -> Option<&str> {
    id.split_once('_')
        .map(|(owner, _)| owner)
        .filter(|owner| is_instance_name(owner))
}

/// The instance session `id` was minted for ([`mint_session_id`]): as [`session_owner`], when
/// the rest of the id is a UUID of the minted version. A client's own id (`my_thread`,
/// `thread_<a v4 UUID>`) names no owner here.
pub fn minted_owner(id: &str) -> Option<&str> {
    let (owner, rest) = id.split_once('_')?;
    let minted = uuid::Uuid::try_parse(rest)
        .is_ok_and(|u| u.get_version_num() == usize::from(MINTED_VERSION) && rest.len() == 36);
    (minted && is_instance_name(owner)).then_some(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_name_their_owner_and_a_clients_own_do_not() {
        let id = mint_session_id(Some("e2"));
        assert_eq!(minted_owner(&id), Some("e2"), "{id}");
        assert_eq!(session_owner(&id), Some("e2"));
        let plain = mint_session_id(None);
        assert!(uuid::Uuid::try_parse(&plain).is_ok(), "{plain}");
        // Time-ordered, as a v7.
        let later = mint_session_id(None);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(mint_session_id(None) > later);
        // Its first 48 bits are the time in milliseconds, the rest is random, not a counter:
        // ids minted one after another differ in (nearly) all of their last eight bytes.
        let bytes = |id: &str| *uuid::Uuid::try_parse(id).expect("a UUID").as_bytes();
        let millis = |b: &[u8; 16]| b[..6].iter().fold(0u64, |t, x| t << 8 | u64::from(*x));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let minted = bytes(&mint_session_id(None));
        assert!(
            u128::from(millis(&minted)).abs_diff(now) < 1000,
            "{minted:?}"
        );
        let ids: Vec<[u8; 16]> = (0..100).map(|_| bytes(&mint_session_id(None))).collect();
        let differing: usize = ids
            .windows(2)
            .map(|w| (8..16).filter(|&i| w[0][i] != w[1][i]).count())
            .sum();
        assert!(differing > 99 * 6, "{differing} of {} bytes differ", 99 * 8);
        let v4 = "3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b";
        let v7 = "0195f0a2-7c1e-7b3a-9d4e-1f2a3b4c5d6e";
        let rest = id.split_once('_').map(|(_, r)| r).unwrap_or_default();
        for own in [
            "my_thread",
            "e2_abc",
            &format!("thread_{v4}"),
            &format!("e2_{v7}"),
            rest,
            &format!("E2_{rest}"),
            &format!("e2_{rest}x"),
            &format!("e2_{}", rest.replace('-', "")),
        ] {
            assert_eq!(minted_owner(own), None, "{own}");
        }
    }

    #[test]
    fn session_ids_name_their_owner() {
        let id = owned_session_id(Some("executor-1"), "3f2a");
        assert_eq!(id, "executor-1_3f2a");
        assert!(is_session_id(&id));
        assert_eq!(session_owner(&id), Some("executor-1"));
        assert_eq!(owned_session_id(None, "3f2a"), "3f2a");
        for unowned in ["3f2a-77", "Big_thread", "_x", "a.b_c"] {
            assert_eq!(session_owner(unowned), None, "{unowned}");
        }
        assert!(is_instance_name("executor-0") && is_instance_name("0x"));
        for bad in ["", "-a", "A", "a_b", "a.b", &"a".repeat(41)] {
            assert!(!is_instance_name(bad), "{bad}");
        }
    }

    #[test]
    fn session_ids_are_short_plain_words() {
        assert!(is_session_id("c123-456") && is_session_id(&"a".repeat(128)));
        for bad in ["", "a b", "../x", "é", &"a".repeat(129)] {
            assert!(!is_session_id(bad), "{bad}");
        }
    }

    #[test]
    fn accepts_ids_of_the_rule() {
        for ok in ["abc", "invoice-extractor", "a_b-c", "0ab", &"a".repeat(64)] {
            assert_eq!(validate_agent_id(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refuses_paths_case_and_lengths() {
        assert_eq!(validate_agent_id("ab"), Err(IdError::Length(2)));
        assert_eq!(validate_agent_id(&"a".repeat(65)), Err(IdError::Length(65)));
        assert_eq!(validate_agent_id("AB"), Err(IdError::Length(2)));
        assert_eq!(validate_agent_id("ABC"), Err(IdError::Start('A')));
        assert_eq!(validate_agent_id(".hidden"), Err(IdError::Start('.')));
        assert_eq!(validate_agent_id("../x"), Err(IdError::Start('.')));
        assert_eq!(validate_agent_id("a/b"), Err(IdError::Char('/')));
        assert_eq!(validate_agent_id("-abc"), Err(IdError::Start('-')));
        assert_eq!(validate_agent_id("ünïcode"), Err(IdError::Start('ü')));
        assert_eq!(validate_agent_id("abc.yaml"), Err(IdError::Char('.')));
    }
}
