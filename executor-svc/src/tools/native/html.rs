//! A small, forgiving HTML tokenizer, entity decoding, and HTML → readable text.
//!
//! Enough for search result pages and articles: tags with quoted or bare attributes, comments,
//! doctype, raw-text elements (`script`, `style`) skipped whole, named and numeric entities.
//! Malformed markup never fails; it degrades to text.

/// One piece of an HTML document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Token<'a> {
    /// `<name attr=...>` (names lowercased); `attrs` values are entity-decoded.
    Start {
        name: String,
        attrs: Vec<(String, String)>,
    },
    /// `</name>`.
    End { name: String },
    /// Raw text between tags (not yet entity-decoded).
    Text(&'a str),
}

impl Token<'_> {
    /// The value of attribute `key` on a start tag.
    pub fn attr(&self, key: &str) -> Option<&str> {
        match self {
            Token::Start { attrs, .. } => attrs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str()),
            _ => None,
        }
    }

    /// True when a start tag's `class` list contains `class`.
    pub fn has_class(&self, class: &str) -> bool {
        self.attr("class")
            .is_some_and(|c| c.split_ascii_whitespace().any(|x| x == class))
    }
}

/// Splits `html` into tokens.
pub(crate) fn tokenize(html: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            out.push(Token::Text(rest));
            break;
        };
        if lt > 0 {
            out.push(Token::Text(&rest[..lt]));
        }
        rest = &rest[lt..];
        let after = &rest[1..];
        if let Some(c) = after.strip_prefix("!--") {
            rest = c.find("-->").map_or("", |i| &c[i + 3..]);
        } else if after.starts_with('!') || after.starts_with('?') {
            rest = after.find('>').map_or("", |i| &after[i + 1..]);
        } else if let Some(body) = after.strip_prefix('/') {
            let end = body.find('>').unwrap_or(body.len());
            let name = body[..end].trim().to_ascii_lowercase();
            out.push(Token::End { name });
            rest = body.get(end + 1..).unwrap_or("");
        } else if after.starts_with(|c: char| c.is_ascii_alphabetic()) {
            let (name, attrs, consumed) = start_tag(after);
            rest = &after[consumed..];
            if matches!(name.as_str(), "script" | "style" | "noscript" | "template") {
                // Raw text: skip to the matching end tag.
                let close = format!("</{name}");
                rest = find_ci(rest, &close)
                    .and_then(|i| rest[i..].find('>').map(|j| &rest[i + j + 1..]))
                    .unwrap_or("");
                continue;
            }
            out.push(Token::Start { name, attrs });
        } else {
            // A lone `<` is text.
            out.push(Token::Text("<"));
            rest = after;
        }
    }
    out
}

/// Byte offset of ASCII `needle` in `hay`, ignoring ASCII case.
fn find_ci(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if n.is_empty() || n.len() > h.len() {
        return None;
    }
    (0..=h.len() - n.len())
        .filter(|&i| h[i] == n[0])
        .find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Parses a start tag after its `<`; returns name, attributes and bytes consumed (past `>`).
fn start_tag(s: &str) -> (String, Vec<(String, String)>, usize) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'>' && b[i] != b'/' {
        i += 1;
    }
    let name = s[..i].to_ascii_lowercase();
    let mut attrs = Vec::new();
    loop {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'/') {
            i += 1;
        }
        if i >= b.len() {
            return (name, attrs, b.len());
        }
        if b[i] == b'>' {
            return (name, attrs, i + 1);
        }
        let k0 = i;
        while i < b.len() && !b[i].is_ascii_whitespace() && !matches!(b[i], b'=' | b'>' | b'/') {
            i += 1;
        }
        let key = s[k0..i].to_ascii_lowercase();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < b.len() && b[i] == b'=' {
            i += 1;
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
                let q = b[i];
                let v0 = i + 1;
                i = v0;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
                value = decode_entities(&s[v0..i]);
                i = (i + 1).min(b.len());
            } else {
                let v0 = i;
                while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'>' {
                    i += 1;
                }
                value = decode_entities(&s[v0..i]);
            }
        }
        if !key.is_empty() {
            attrs.push((key, value));
        }
    }
}

/// Decodes `&amp;`, `&#39;`, `&#x27;` and the common named entities; unknown ones stay as is.
pub(crate) fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let end = rest[1..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '#'));
        let (entity, has_semi) = match end {
            Some(e) => (&rest[1..=e], rest[1 + e..].starts_with(';')),
            None => (&rest[1..], false),
        };
        match decode_one(entity) {
            Some(c) => {
                out.push(c);
                rest = &rest[1 + entity.len() + usize::from(has_semi)..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn decode_one(entity: &str) -> Option<char> {
    if let Some(num) = entity.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return Some(char::from_u32(code).unwrap_or('\u{FFFD}'));
    }
    Some(match entity {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "mdash" => '—',
        "ndash" => '–',
        "hellip" => '…',
        "copy" => '©',
        "reg" => '®',
        "trade" => '™',
        "laquo" => '«',
        "raquo" => '»',
        "lsquo" => '‘',
        "rsquo" => '’',
        "ldquo" => '“',
        "rdquo" => '”',
        "bull" => '•',
        "middot" => '·',
        "euro" => '€',
        "pound" => '£',
        "times" => '×',
        "deg" => '°',
        _ => return None,
    })
}

/// Tags set apart by a blank line.
const PARAGRAPHS: [&str; 17] = [
    "p",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "ul",
    "ol",
    "table",
    "pre",
    "blockquote",
    "title",
    "figure",
    "hr",
    "form",
    "dl",
];
/// Tags that start a new line.
const LINES: [&str; 13] = [
    "div",
    "section",
    "article",
    "header",
    "footer",
    "main",
    "nav",
    "aside",
    "tr",
    "dt",
    "dd",
    "figcaption",
    "address",
];

/// Ends the current line (dropping trailing spaces) unless it is already ended.
fn line_break(out: &mut String) {
    while out.ends_with(' ') {
        out.pop();
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
}

/// Ends the current paragraph with a blank line.
fn paragraph_break(out: &mut String) {
    line_break(out);
    if !out.is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
}

/// Readable text of an HTML document: scripts and styles dropped, paragraphs apart, list items
/// as `- `, whitespace collapsed (kept inside `<pre>`), entities decoded.
pub fn html_to_text(html: &str) -> String {
    let mut out = String::new();
    let mut pre = 0usize;
    for token in tokenize(html) {
        match &token {
            Token::Text(t) => {
                let text = decode_entities(t);
                if pre > 0 {
                    out.push_str(&text);
                    continue;
                }
                let space = |out: &mut String| {
                    if !out.is_empty() && !out.ends_with([' ', '\n']) {
                        out.push(' ');
                    }
                };
                for (i, word) in text.split_whitespace().enumerate() {
                    if i > 0 || text.starts_with(char::is_whitespace) {
                        space(&mut out);
                    }
                    out.push_str(word);
                }
                if text.ends_with(char::is_whitespace) {
                    space(&mut out);
                }
            }
            Token::Start { name, .. } => match name.as_str() {
                "br" => {
                    while out.ends_with(' ') {
                        out.pop();
                    }
                    out.push('\n');
                }
                "li" => {
                    line_break(&mut out);
                    out.push_str("- ");
                }
                "td" | "th" if !out.is_empty() && !out.ends_with(['\n', ' ']) => out.push(' '),
                n if PARAGRAPHS.contains(&n) => {
                    paragraph_break(&mut out);
                    pre += usize::from(n == "pre");
                }
                n if LINES.contains(&n) => line_break(&mut out),
                _ => {}
            },
            Token::End { name } => {
                let n = name.as_str();
                if n == "pre" {
                    pre = pre.saturating_sub(1);
                }
                if PARAGRAPHS.contains(&n) {
                    paragraph_break(&mut out);
                } else if LINES.contains(&n) || n == "li" {
                    line_break(&mut out);
                }
            }
        }
    }
    let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
    let mut text = String::new();
    let mut blank = 0;
    for line in lines {
        if line.trim().is_empty() {
            blank += 1;
            if blank > 1 || text.is_empty() {
                continue;
            }
        } else {
            blank = 0;
        }
        text.push_str(line);
        text.push('\n');
    }
    text.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entities_named_numeric_and_unknown() {
        assert_eq!(
            decode_entities("a &amp; b &lt;c&gt; &#39;d&#x27; &copy; &bogus; &"),
            "a & b <c> 'd' © &bogus; &"
        );
    }

    #[test]
    fn text_drops_scripts_keeps_blocks_and_lists() {
        let html = r#"<!DOCTYPE html><html><head><title>T</title><style>p{x:1}</style>
            <script>var a = "<p>no</p>";</script></head><body><!-- c --><h1>Hello&nbsp;World</h1>
            <p>One <b>bold</b>
            word.</p><ul><li>a</li><li>b</li></ul><pre>x  y
z</pre></body></html>"#;
        let text = html_to_text(html);
        assert_eq!(
            text,
            "T\n\nHello World\n\nOne bold word.\n\n- a\n- b\n\nx  y\nz"
        );
    }

    #[test]
    fn attributes_quoted_bare_and_decoded() {
        let toks = tokenize(r#"<a class="x y" href='/l/?u=1&amp;v=2' data-n=3 hidden>t</a"#);
        assert!(toks[0].has_class("y"));
        assert_eq!(toks[0].attr("href"), Some("/l/?u=1&v=2"));
        assert_eq!(toks[0].attr("data-n"), Some("3"));
        assert_eq!(toks[1], Token::Text("t"));
        assert_eq!(toks[2], Token::End { name: "a".into() });
    }
}
