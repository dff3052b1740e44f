//! The policy modes of a run (seed 004 §6.2): their wire spelling and how it parses. The
//! executor's policy gives them meaning; the gateway checks its default mode at start-up.

/// How much a run may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Reads only.
    ReadOnly,
    /// Reads and allowlisted writes.
    Default,
    /// Reads, and allowlisted writes the user confirmed.
    SafeWrite,
}

impl Mode {
    /// The wire spelling (`readOnly`, `default`, `safeWrite`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "readOnly",
            Self::Default => "default",
            Self::SafeWrite => "safeWrite",
        }
    }

    /// Parses the wire spelling (case-insensitive, `-`/`_` ignored: `read_only` works too).
    pub fn parse(text: &str) -> Result<Self, UnknownMode> {
        let plain: String = text
            .chars()
            .filter(|c| *c != '-' && *c != '_')
            .flat_map(char::to_lowercase)
            .collect();
        match plain.as_str() {
            "readonly" => Ok(Self::ReadOnly),
            "default" => Ok(Self::Default),
            "safewrite" => Ok(Self::SafeWrite),
            _ => Err(UnknownMode(text.to_owned())),
        }
    }

    /// The stricter of two modes (`None`, no mode, is the laxest: the agent's allowlist is the
    /// whole policy): readOnly, then safeWrite, then default.
    pub fn stricter(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        let rank = |m: Option<Self>| match m {
            None => 0,
            Some(Self::Default) => 1,
            Some(Self::SafeWrite) => 2,
            Some(Self::ReadOnly) => 3,
        };
        if rank(a) >= rank(b) { a } else { b }
    }
}

/// A mode that is none of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a mode; use readOnly, default or safeWrite")]
pub struct UnknownMode(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stricter_mode_wins() {
        use Mode::{Default, ReadOnly, SafeWrite};
        assert_eq!(
            Mode::stricter(Some(Default), Some(ReadOnly)),
            Some(ReadOnly)
        );
        assert_eq!(Mode::stricter(Some(ReadOnly), None), Some(ReadOnly));
        assert_eq!(Mode::stricter(None, Some(Default)), Some(Default));
        assert_eq!(
            Mode::stricter(Some(SafeWrite), Some(Default)),
            Some(SafeWrite)
        );
        assert_eq!(
            Mode::stricter(Some(SafeWrite), Some(ReadOnly)),
            Some(ReadOnly)
        );
        assert_eq!(Mode::stricter(None, None), None);
    }

    #[test]
    fn modes_parse_loosely_and_an_unknown_one_is_named() {
        assert_eq!(Mode::parse("readOnly"), Ok(Mode::ReadOnly));
        assert_eq!(Mode::parse("read_only"), Ok(Mode::ReadOnly));
        assert_eq!(Mode::parse("SAFEWRITE"), Ok(Mode::SafeWrite));
        assert_eq!(Mode::parse("safeWrite").map(Mode::as_str), Ok("safeWrite"));
        let Err(e) = Mode::parse("yolo") else {
            panic!("yolo is no mode");
        };
        assert_eq!(
            e.to_string(),
            "`yolo` is not a mode; use readOnly, default or safeWrite"
        );
    }
}
