//! Masks secrets in tool output before it reaches the event stream, the model's context and
//! the logs.
//!
//! A [`Redactor`] is compiled once from a [`RedactConfig`] (the environment) and replaces each
//! secret it recognises with a marker naming its kind:
//! - `[redacted:bearer]`: the token after `Bearer` (the word stays);
//! - `[redacted:jwt]`: JSON Web Tokens (`eyJ…`.`…`.`…`);
//! - `[redacted:api-key]`: OpenAI and Anthropic `sk-…`, GitHub (`ghp_`, `gho_`, `ghu_`, `ghs_`,
//!   `ghr_`, `github_pat_`), AWS access key ids (`AKIA…`, `ASIA…`), Slack `xox[abpr]-…`,
//!   Google `AIza…`;
//! - `[redacted:secret]`: the value of a `key=value`, `key: value` or `"key": "value"` pair
//!   whose key ends in password, passwd, secret, token, api_key, apikey, access_key, secret_key
//!   or private_key, each word in lower, upper or title case (`GITHUB_TOKEN=…`,
//!   `"clientSecret": "…"`, `X-Api-Key: …`);
//! - `[redacted:private-key]`: PEM private key blocks, also when cut off before their END line;
//! - `[redacted:id]`: GUIDs, unless `AGENT_REDACT_IDS=0`;
//! - `[redacted:custom]`: matches of the operator's `AGENT_REDACT_PATTERNS`.
//!
//! Where two overlap, the one starting first wins; at the same start the context (`Bearer`, a
//! secret key) wins over the shape, so `token=ghp_…` becomes `token=[redacted:secret]`. Markers
//! are never masked again, so redacting twice is redacting once.
//!
//! Unquoted values that read as code or as a reference are kept, so source files read through a
//! tool stay intact: `password: String`, `token = get_token()`, `f(token=token)`,
//! `password = self.password`, `token: ${GITHUB_TOKEN}`, `"token": null`. The price: a
//! letters-only password after `:` (`password: changeme`) is kept unless quoted; after `=`
//! (`.env` files, flags, query strings) it is masked.
//!
//! Speed: text without secrets (the common case) comes back borrowed, without an allocation,
//! after three scans that skip ahead on literals: one regex for the fixed shapes and markers,
//! one for the key words of pairs, and a hand-written GUID scan (a GUID regex has no literal,
//! and a byte-by-byte scan of hex-heavy logs costs several times the rest). All built-in
//! patterns use ASCII word boundaries (`(?-u:\b)`): a Unicode `\b` pushes the scan of non-ASCII
//! text off the fast DFA, and an operator's pattern should avoid it for the same reason; each
//! operator pattern is one more scan.

use std::{borrow::Cow, ops::Range};

use regex::Regex;

/// Separates the regexes in `AGENT_REDACT_PATTERNS`.
const PATTERN_SEPARATOR: &str = ";;";

/// The fixed shapes, in the order they win at the same start; [`Shape::of`] tells them apart
/// by their first bytes: the markers this module wrote (kept as they are), PEM private keys (or
/// their beginning when the output was cut off), `Bearer <token>`, JWTs (base64url JSON
/// header, payload, and a signature that is empty for `none`), `sk-` keys, and the key shapes
/// whose prefix needs no further check. No capture groups: resolving them costs more than the
/// whole scan when secrets are many.
const SHAPES: &str = concat!(
    r"\[redacted:[a-z-]+\]",
    r"|-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.)*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
    r"|(?-u:\b)(?:[Bb]earer|BEARER)[ \t]+[A-Za-z0-9\-._~+/]{8,}=*",
    r"|(?-u:\b)eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*",
    r"|(?-u:\b)sk-[A-Za-z0-9_-]{20,}",
    r"|(?-u:\b)(?:(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}",
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}(?-u:\b)|xox[abpr]-[A-Za-z0-9-]{10,}|AIza[A-Za-z0-9_-]{35})",
);

/// A secret key's last word (its literals let the scan skip ahead), an optional closing quote
/// (also `\"` inside a JSON string), a separator, and the value: double-quoted, single-quoted,
/// double-quoted inside a JSON string, or bare; [`secret_value`] takes the match apart. Only
/// spaces and tabs around the separator, so a YAML key that opens a nested block does not take
/// the next line as its value.
const PAIRS: &str = concat!(
    r"(?:(?:pass|PASS|Pass)(?:word|WORD|Word|wd|WD)|(?:secret|SECRET|Secret)(?:[_-]?(?:key|KEY|Key))?",
    r"|token|TOKEN|Token|(?:api|API|Api|access|ACCESS|Access|private|PRIVATE|Private)[_-]?(?:key|KEY|Key))",
    r#"(?:\\?["'])?[ \t]*(?:=>|:=|[:=])[ \t]*"#,
    r#"(?:"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|\\"(?:[^"\\\n]|\\[^"\n])*\\"|[^\s"'`,;&]+)"#,
);

/// Unquoted values that are code or JSON, not a secret.
const CODE_WORDS: [&str; 6] = ["null", "none", "nil", "true", "false", "undefined"];

/// Words of secret keys, lowercase; a bare value holding one reads as a variable.
const SECRET_WORDS: [&str; 7] = [
    "passw",
    "secret",
    "token",
    "apikey",
    "api_key",
    "access_key",
    "private_key",
];

/// Which patterns are on; [`RedactConfig::from_env`] reads it once at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedactConfig {
    /// Off turns every pattern off, the operator's too (`AGENT_REDACT`).
    pub enabled: bool,
    /// Whether GUIDs are masked (`AGENT_REDACT_IDS`): off where ids are what users work with.
    pub ids: bool,
    /// The operator's regexes (`AGENT_REDACT_PATTERNS`); each match becomes `[redacted:custom]`.
    pub extra: Vec<String>,
}

impl Default for RedactConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            ids: true,
            extra: Vec::new(),
        }
    }
}

impl RedactConfig {
    /// The defaults, overridden by `AGENT_REDACT` and `AGENT_REDACT_IDS` (switches: `0`,
    /// `false`, `no` or `off` turn them off; see [`taskforce_runtime::switch`]) and
    /// `AGENT_REDACT_PATTERNS` (regexes separated by `;;`).
    pub fn from_env() -> Result<Self, taskforce_runtime::BadSwitch> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// [`RedactConfig::from_env`] over any lookup (tests).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, taskforce_runtime::BadSwitch> {
        let on = |key: &str| taskforce_runtime::switch(key, get(key).as_deref(), true);
        let extra = get("AGENT_REDACT_PATTERNS").map_or_else(Vec::new, |v| {
            v.split(PATTERN_SEPARATOR)
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        });
        Ok(Self {
            enabled: on("AGENT_REDACT")?,
            ids: on("AGENT_REDACT_IDS")?,
            extra,
        })
    }
}

/// Why a [`Redactor`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    /// A pattern is not a valid regex.
    #[error("redaction pattern {pattern:?} is not a valid regex: {source}")]
    InvalidPattern {
        /// The pattern as configured.
        pattern: String,
        /// What the regex parser says.
        source: regex::Error,
    },
}

/// The kinds of secret, in the order they win when two start at the same place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    PrivateKey,
    Bearer,
    Secret,
    Jwt,
    ApiKey,
    Id,
    Custom,
}

impl Shape {
    /// The kind of a [`SHAPES`] match and the part of it to mask; `None` for a marker, and for
    /// a token that reads as a word.
    fn of(found: regex::Match<'_>) -> Option<(Range<usize>, Self)> {
        let text = found.as_str();
        let (shape, skip, random) = match text.as_bytes().first()? {
            b'[' => return None,
            b'-' => (Self::PrivateKey, 0, false),
            b'B' | b'b' => (Self::Bearer, text.find([' ', '\t'])?, true),
            _ if text.starts_with("eyJ") => (Self::Jwt, 0, false),
            _ if text.starts_with("sk-") => (Self::ApiKey, 0, true),
            _ => (Self::ApiKey, 0, false),
        };
        let masked = text[skip..].trim_start_matches([' ', '\t']);
        let start = found.end() - masked.len();
        (!masked.is_empty() && (!random || looks_random(masked)))
            .then_some((start..found.end(), shape))
    }

    fn marker(self) -> &'static str {
        match self {
            Self::PrivateKey => "[redacted:private-key]",
            Self::Bearer => "[redacted:bearer]",
            Self::Secret => "[redacted:secret]",
            Self::Jwt => "[redacted:jwt]",
            Self::ApiKey => "[redacted:api-key]",
            Self::Id => "[redacted:id]",
            Self::Custom => "[redacted:custom]",
        }
    }
}

/// The compiled patterns of a [`RedactConfig`]; cloning shares the compiled programs.
#[derive(Debug, Clone)]
pub struct Redactor {
    /// Off: [`Redactor::redact`] hands its input back.
    enabled: bool,
    /// [`SHAPES`].
    shapes: Regex,
    /// [`PAIRS`].
    pairs: Regex,
    /// Whether GUIDs are masked.
    ids: bool,
    /// The operator's patterns.
    extra: Vec<Regex>,
}

impl Default for Redactor {
    fn default() -> Self {
        Self::new(&RedactConfig::default()).expect("the built-in redaction patterns compile")
    }
}

impl Redactor {
    /// Compiles the patterns `config` turns on; an invalid extra pattern is an error naming it.
    pub fn new(config: &RedactConfig) -> Result<Self, RedactError> {
        let compile = |pattern: &str| {
            Regex::new(pattern).map_err(|source| RedactError::InvalidPattern {
                pattern: pattern.to_owned(),
                source,
            })
        };
        let extra = if config.enabled {
            config
                .extra
                .iter()
                .map(|p| compile(p))
                .collect::<Result<_, _>>()?
        } else {
            Vec::new()
        };
        Ok(Self {
            enabled: config.enabled,
            shapes: compile(SHAPES)?,
            pairs: compile(PAIRS)?,
            ids: config.ids,
            extra,
        })
    }

    /// `text` with every recognised secret replaced by its marker; borrowed when nothing was.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.mask(text, self.ids)
    }

    /// [`Redactor::redact`] keeping GUIDs: for what a sub-agent hands its orchestrator (the ids
    /// of the work it did are data the orchestrator acts on) and for the arguments a tool call
    /// shows, while secrets stay masked.
    pub fn redact_keeping_ids<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.mask(text, false)
    }

    fn mask<'a>(&self, text: &'a str, ids: bool) -> Cow<'a, str> {
        if !self.enabled {
            return Cow::Borrowed(text);
        }
        let mut found: Vec<(Range<usize>, Shape)> = Vec::new();
        let mut markers: Vec<Range<usize>> = Vec::new();
        for m in self.shapes.find_iter(text) {
            match Shape::of(m) {
                Some(shape) => found.push(shape),
                None if m.as_str().starts_with('[') => markers.push(m.range()),
                None => {}
            }
        }
        let pairs = self.pairs.find_iter(text);
        found.extend(pairs.filter_map(|m| Some((secret_value(m)?, Shape::Secret))));
        if ids {
            found.extend(guids(text).map(|r| (r, Shape::Id)));
        }
        for regex in &self.extra {
            let matches = regex.find_iter(text).filter(|m| !m.is_empty());
            found.extend(matches.map(|m| (m.range(), Shape::Custom)));
        }
        if found.is_empty() {
            return Cow::Borrowed(text);
        }
        found.sort_unstable_by_key(|(range, shape)| (range.start, *shape));
        let mut out = String::with_capacity(text.len());
        let mut cursor = 0;
        for (range, shape) in found {
            let overlaps = |m: &Range<usize>| m.start < range.end && range.start < m.end;
            if range.start < cursor || markers.iter().any(overlaps) {
                continue;
            }
            out.push_str(&text[cursor..range.start]);
            out.push_str(shape.marker());
            cursor = range.end;
        }
        if out.is_empty() {
            return Cow::Borrowed(text);
        }
        out.push_str(&text[cursor..]);
        Cow::Owned(out)
    }
}

/// Whether a token looks generated rather than like a word: a digit, or too long for a word.
fn looks_random(token: &str) -> bool {
    token.bytes().any(|b| b.is_ascii_digit()) || token.len() >= 24
}

/// GUIDs (8-4-4-4-12 hex digits between ASCII word boundaries), found from each `-`.
fn guids(text: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    let bytes = text.as_bytes();
    let hex = move |r: Range<usize>| {
        bytes
            .get(r)
            .is_some_and(|s| s.iter().all(u8::is_ascii_hexdigit))
    };
    let dash = move |i: usize| bytes.get(i) == Some(&b'-');
    let word = move |i: usize| {
        bytes
            .get(i)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    };
    let mut from = 0;
    std::iter::from_fn(move || {
        while let Some(offset) = text[from..].find('-') {
            let first = from + offset;
            from = first + 1;
            let Some(start) = first.checked_sub(8) else {
                continue;
            };
            let end = start + 36;
            let layout = hex(start..first)
                && hex(first + 1..first + 5)
                && dash(first + 5)
                && hex(first + 6..first + 10)
                && dash(first + 10)
                && hex(first + 11..first + 15)
                && dash(first + 15)
                && hex(first + 16..end);
            if layout && (start == 0 || !word(start - 1)) && !word(end) {
                from = end;
                return Some(start..end);
            }
        }
        None
    })
}

/// The value of a [`PAIRS`] match, unless it is empty, a placeholder or code. The key holds no
/// `:` or `=`, so the first one starts the separator.
fn secret_value(pair: regex::Match<'_>) -> Option<Range<usize>> {
    let text = pair.as_str();
    let sep = text.find([':', '='])?;
    let typed = text[sep..].starts_with(':');
    let rest = ["=>", ":=", ":", "="]
        .iter()
        .find_map(|s| text[sep..].strip_prefix(s))?;
    let value = rest.trim_start_matches([' ', '\t']);
    let quote = ["\\\"", "\"", "'"]
        .into_iter()
        .find(|q| value.len() >= 2 * q.len() && value.starts_with(q) && value.ends_with(q))
        .map_or(0, str::len);
    let inner = &value[quote..value.len() - quote];
    if inner.is_empty() || is_placeholder(inner) || (quote == 0 && reads_as_code(inner, typed)) {
        return None;
    }
    Some(pair.end() - quote - inner.len()..pair.end() - quote)
}

/// `$VAR`, `${VAR}`, `${{ secrets.X }}`, `{{ .Values.x }}`, `<your-token>`: a reference to a
/// secret, not one.
fn is_placeholder(value: &str) -> bool {
    let env_var = value.strip_prefix('$').is_some_and(|name| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    });
    env_var
        || value.starts_with("${")
        || value.starts_with("{{")
        || (value.starts_with('<') && value.ends_with('>'))
}

/// Whether an unquoted value after `=` (or `:` when `typed`) reads as code rather than a
/// literal: a comparison or a structure, a call, a generic type, an index, the end of an
/// argument list, a dotted path, a keyword, a variable named like a secret, and after `:` any
/// bare word (a type annotation, or prose). Digits or symbols make a literal.
fn reads_as_code(value: &str, typed: bool) -> bool {
    if value.starts_with(['=', '{', '[', '(']) {
        return true;
    }
    let end = value
        .find(|c: char| !(c.is_ascii_alphabetic() || matches!(c, '_' | '.' | ':')))
        .unwrap_or(value.len());
    let (word, rest) = value.split_at(end);
    if word.is_empty() {
        return false;
    }
    match rest.bytes().next() {
        Some(b'(' | b'<' | b'[' | b')') => true,
        Some(_) => false,
        None => {
            let lower = word.to_ascii_lowercase();
            typed
                || word.contains('.')
                || CODE_WORDS.contains(&lower.as_str())
                || SECRET_WORDS.iter().any(|w| lower.contains(w))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor() -> Redactor {
        Redactor::default()
    }

    fn with_env(vars: &[(&str, &str)]) -> Redactor {
        let config = RedactConfig::from_lookup(|key| {
            vars.iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        })
        .expect("valid switches");
        Redactor::new(&config).expect("valid config")
    }

    /// Fake keys built at run time, so secret scanners do not flag this file.
    fn fake(prefix: &str, body: &str, len: usize) -> String {
        format!("{prefix}{}", &body.repeat(len.div_ceil(body.len()))[..len])
    }

    #[test]
    fn a_masked_value_keeps_the_line_break_after_it_and_ids_can_stay() {
        let key = fake("ghp_", "aB3", 36);
        let text = format!("- [x] t1 · notes: token={key}\n- [ ] t2 · next");
        assert_eq!(
            redactor().redact(&text),
            "- [x] t1 · notes: token=[redacted:secret]\n- [ ] t2 · next"
        );
        let id = "deploy 550e8400-e29b-41d4-a716-446655440000 done";
        assert_eq!(redactor().redact(id), "deploy [redacted:id] done");
        assert!(matches!(
            redactor().redact_keeping_ids(id),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn bearer_token_is_masked_and_the_word_kept() {
        let text = r#"curl -H "Authorization: Bearer abc123def456ghi789" https://x"#;
        assert_eq!(
            redactor().redact(text),
            r#"curl -H "Authorization: Bearer [redacted:bearer]" https://x"#
        );
    }

    #[test]
    fn bearer_in_prose_is_kept() {
        let text = "the API uses Bearer authentication; pass Bearer YOUR_TOKEN";
        assert!(matches!(redactor().redact(text), Cow::Borrowed(_)));
    }

    #[test]
    fn jwt_is_masked() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXNpZw";
        assert_eq!(
            redactor().redact(&format!("id_token {jwt} end")),
            "id_token [redacted:jwt] end"
        );
    }

    #[test]
    fn api_keys_of_each_provider_are_masked() {
        let keys = [
            fake("sk-", "a1B2c3", 48),
            fake("sk-proj-", "x9_Y8-z7", 80),
            fake("sk-ant-api03-", "Q1w2E3r4", 90),
            fake("ghp_", "k3J4", 36),
            fake("gho_", "k3J4", 36),
            fake("ghu_", "k3J4", 36),
            fake("ghs_", "k3J4", 36),
            fake("ghr_", "k3J4", 36),
            fake("github_pat_", "11AB_cd", 82),
            fake("AKIA", "Z9Y8X7", 16),
            fake("ASIA", "Q2W3", 16),
            fake("xoxb-", "1234-abcd-", 40),
            fake("AIza", "Sy0-_b", 35),
        ];
        for key in keys {
            assert_eq!(
                redactor().redact(&format!("got ({key}) back")),
                "got ([redacted:api-key]) back",
                "{key}"
            );
        }
    }

    #[test]
    fn secret_values_are_masked_and_keys_kept() {
        let cases = [
            ("password=hunter2", "password=[redacted:secret]"),
            ("DB_PASSWORD=changeme\n", "DB_PASSWORD=[redacted:secret]\n"),
            (
                r#"{"client_secret": "a b c", "n": 1}"#,
                r#"{"client_secret": "[redacted:secret]", "n": 1}"#,
            ),
            ("api_key: 'xyz123'", "api_key: '[redacted:secret]'"),
            ("X-Api-Key: abc123", "X-Api-Key: [redacted:secret]"),
            (
                "run --token=s3cr3t now",
                "run --token=[redacted:secret] now",
            ),
            (
                "https://h/p?access_key=AB12&y=1",
                "https://h/p?access_key=[redacted:secret]&y=1",
            ),
            (
                r#"{\"passwd\": \"pa ss\"}"#,
                r#"{\"passwd\": \"[redacted:secret]\"}"#,
            ),
            ("SECRET_KEY = 'django'", "SECRET_KEY = '[redacted:secret]'"),
            (
                r#"{"apiKey": "k3y", "accessToken": "t"}"#,
                r#"{"apiKey": "[redacted:secret]", "accessToken": "[redacted:secret]"}"#,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(redactor().redact(text), want, "{text}");
        }
    }

    #[test]
    fn code_placeholders_and_lookalike_keys_keep_their_values() {
        let texts = [
            "pub password: String,",
            "def login(password: str) -> bool:",
            "token: Option<String>",
            "let token = get_token()?;",
            "client.call(token=token)",
            "password = self.password",
            "if password == other:",
            "token: ${GITHUB_TOKEN}",
            "password=$DB_PASSWORD",
            "api_key: <your-api-key>",
            r#"{"token": null, "password": ""}"#,
            "max_tokens: 1024, token_count=5",
            "password:\n  nested: value",
        ];
        for text in texts {
            assert!(
                matches!(redactor().redact(text), Cow::Borrowed(_)),
                "{text}"
            );
        }
    }

    #[test]
    fn private_key_block_is_masked_also_when_cut_off() {
        let block =
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK==\n-----END RSA PRIVATE KEY-----";
        assert_eq!(
            redactor().redact(&format!("key:\n{block}\nafter")),
            "key:\n[redacted:private-key]\nafter"
        );
        assert_eq!(
            redactor().redact("x -----BEGIN PRIVATE KEY-----\nMIIEvQ"),
            "x [redacted:private-key]"
        );
    }

    #[test]
    fn guids_are_masked_as_ids() {
        let text = "tenant {3F2504E0-4F89-11D3-9A0C-0305E82C3301} and 123e4567-e89b-12d3-a456-426614174000.";
        assert_eq!(
            redactor().redact(text),
            "tenant {[redacted:id]} and [redacted:id]."
        );
    }

    #[test]
    fn context_wins_over_shape_at_the_same_start() {
        let token = fake("ghp_", "k3J4", 36);
        assert_eq!(
            redactor().redact(&format!("GITHUB_TOKEN={token}")),
            "GITHUB_TOKEN=[redacted:secret]"
        );
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2ln";
        assert_eq!(
            redactor().redact(&format!("Bearer {jwt}")),
            "Bearer [redacted:bearer]"
        );
    }

    #[test]
    fn text_without_secrets_is_unchanged_and_borrowed() {
        let line = "commit 4e4018e: 12 files changed, café ünïcode, 0xdeadbeef, task-runner ok\n";
        let text = line.repeat(64 * 1024 / line.len());
        assert!(matches!(redactor().redact(&text), Cow::Borrowed(_)));
    }

    #[test]
    fn agent_redact_0_disables_everything() {
        let redactor = with_env(&[("AGENT_REDACT", "0"), ("AGENT_REDACT_PATTERNS", "acme")]);
        let text = "password=hunter2 Bearer abc123def456 acme";
        assert!(matches!(redactor.redact(text), Cow::Borrowed(_)));
    }

    #[test]
    fn agent_redact_ids_0_keeps_guids() {
        let redactor = with_env(&[("AGENT_REDACT_IDS", "0")]);
        let text = "site 123e4567-e89b-12d3-a456-426614174000, password=hunter2";
        assert_eq!(
            redactor.redact(text),
            "site 123e4567-e89b-12d3-a456-426614174000, password=[redacted:secret]"
        );
    }

    #[test]
    fn extra_patterns_are_masked() {
        let redactor = with_env(&[("AGENT_REDACT_PATTERNS", r" ACME-\d{6} ;; ;;(?-u:\b)emp\d+")]);
        assert_eq!(
            redactor.redact("ticket ACME-123456 by emp42"),
            "ticket [redacted:custom] by [redacted:custom]"
        );
    }

    #[test]
    fn invalid_extra_pattern_is_an_error_naming_it() {
        let config = RedactConfig::from_lookup(|key| {
            (key == "AGENT_REDACT_PATTERNS").then(|| r"ok\d;;(unclosed".to_owned())
        })
        .expect("valid switches");
        let error = Redactor::new(&config).expect_err("invalid pattern");
        assert!(
            matches!(&error, RedactError::InvalidPattern { pattern, .. } if pattern == "(unclosed")
        );
        assert!(error.to_string().contains("\"(unclosed\""), "{error}");
    }

    #[test]
    fn redacting_twice_equals_redacting_once() {
        let redactor = with_env(&[("AGENT_REDACT_PATTERNS", "redacted|api")]);
        let text = format!(
            "Authorization: Bearer abc123def456ghi789\npassword=hunter2 \"token\": \"t0k\" {} \
             123e4567-e89b-12d3-a456-426614174000 -----BEGIN PRIVATE KEY-----\nMII\n\
             -----END PRIVATE KEY----- eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
            fake("sk-", "a1B2c3", 48)
        );
        let once = redactor.redact(&text).into_owned();
        assert_ne!(once, text);
        assert!(matches!(redactor.redact(&once), Cow::Borrowed(_)), "{once}");
    }
}
