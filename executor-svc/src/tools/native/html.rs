//! HTML tokens (html5ever's tokenizer: the WHATWG tokenizing rules, every named entity, linear
//! time however the markup nests) and HTML → readable text.

use std::cell::RefCell;

use html5ever::{
    LocalName, TokenizerResult,
    tendril::StrTendril,
    tokenizer::{
        BufferQueue, Tag, TagKind, Token as RawToken, TokenSink, TokenSinkResult, Tokenizer,
        TokenizerOpts, states::RawKind,
    },
};

/// One piece of an HTML document.
#[derive(Debug)]
pub(crate) enum Token<'a> {
    /// A start tag (name lowercased, attribute values entity-decoded).
    Start(&'a Tag),
    /// An end tag's name.
    End(&'a str),
    /// Text between tags, entity-decoded.
    Text(&'a str),
}

/// The value of attribute `key` on `tag`.
pub(crate) fn attr<'a>(tag: &'a Tag, key: &str) -> Option<&'a str> {
    tag.attrs
        .iter()
        .find(|a| &*a.name.local == key)
        .map(|a| &*a.value)
}

/// True when `tag`'s `class` list contains `class`.
pub(crate) fn has_class(tag: &Tag, class: &str) -> bool {
    attr(tag, "class").is_some_and(|c| c.split_ascii_whitespace().any(|x| x == class))
}

/// Elements whose content is not text to read, and how the tokenizer reads it.
fn skipped(name: &str) -> Option<Option<RawKind>> {
    match name {
        "script" => Some(Some(RawKind::ScriptData)),
        "style" | "noscript" => Some(Some(RawKind::Rawtext)),
        "template" => Some(None),
        _ => None,
    }
}

/// Calls `each` with every tag and text run of `html`, in order. Comments, the doctype and the
/// content of `script`, `style`, `noscript` and `template` are left out. Malformed markup never
/// fails; it degrades to text.
pub(crate) fn for_each_token(html: &str, each: impl FnMut(Token<'_>)) {
    let sink = Sink {
        each: RefCell::new(each),
        skipping: RefCell::new(None),
    };
    let tokenizer = Tokenizer::new(sink, TokenizerOpts::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(html));
    // The sink never asks to pause for a script, so one feed reads everything.
    while let TokenizerResult::Script(()) = tokenizer.feed(&input) {}
    tokenizer.end();
}

/// Forwards tokens, skipping the content of [`skipped`] elements.
struct Sink<F> {
    each: RefCell<F>,
    /// The skipped element being read past, and how deep in same-named ones.
    skipping: RefCell<Option<(LocalName, usize)>>,
}

impl<F: FnMut(Token<'_>)> TokenSink for Sink<F> {
    type Handle = ();

    fn process_token(&self, token: RawToken, _line: u64) -> TokenSinkResult<()> {
        let mut skipping = self.skipping.borrow_mut();
        if let Some((name, depth)) = skipping.as_mut() {
            if let RawToken::TagToken(tag) = &token
                && tag.name == *name
            {
                match tag.kind {
                    TagKind::StartTag => *depth += 1,
                    TagKind::EndTag => *depth -= 1,
                }
                if *depth == 0 {
                    *skipping = None;
                }
            }
            return TokenSinkResult::Continue;
        }
        let mut each = self.each.borrow_mut();
        match &token {
            RawToken::TagToken(tag) if tag.kind == TagKind::StartTag => {
                if let Some(raw) = skipped(&tag.name) {
                    // `<script/>` is no empty element in HTML: its content still follows.
                    *skipping = Some((tag.name.clone(), 1));
                    return raw.map_or(TokenSinkResult::Continue, TokenSinkResult::RawData);
                }
                each(Token::Start(tag));
                // Their content is text, markup-looking or not, up to their end tag.
                if matches!(&*tag.name, "title" | "textarea") {
                    return TokenSinkResult::RawData(RawKind::Rcdata);
                }
            }
            RawToken::TagToken(tag) => each(Token::End(&tag.name)),
            RawToken::CharacterTokens(text) => each(Token::Text(text)),
            _ => {}
        }
        TokenSinkResult::Continue
    }
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
    for_each_token(html, |token| match token {
        Token::Text(text) => push_text(&mut out, text, pre > 0),
        Token::Start(tag) => open(&mut out, &tag.name, &mut pre),
        Token::End(name) => close(&mut out, name, &mut pre),
    });
    tidy(&out)
}

/// Appends a text node: as is inside `<pre>`, else with its whitespace collapsed.
fn push_text(out: &mut String, text: &str, pre: bool) {
    if pre {
        out.push_str(text);
        return;
    }
    let space = |out: &mut String| {
        if !out.is_empty() && !out.ends_with([' ', '\n']) {
            out.push(' ');
        }
    };
    for (i, word) in text.split_whitespace().enumerate() {
        if i > 0 || text.starts_with(char::is_whitespace) {
            space(out);
        }
        out.push_str(word);
    }
    if text.ends_with(char::is_whitespace) {
        space(out);
    }
}

/// The breaks an element's start makes.
fn open(out: &mut String, name: &str, pre: &mut usize) {
    match name {
        "br" => {
            while out.ends_with(' ') {
                out.pop();
            }
            out.push('\n');
        }
        "li" => {
            line_break(out);
            out.push_str("- ");
        }
        "td" | "th" if !out.is_empty() && !out.ends_with(['\n', ' ']) => out.push(' '),
        n if PARAGRAPHS.contains(&n) => {
            paragraph_break(out);
            *pre += usize::from(n == "pre");
        }
        n if LINES.contains(&n) => line_break(out),
        _ => {}
    }
}

/// The breaks an element's end makes.
fn close(out: &mut String, name: &str, pre: &mut usize) {
    if name == "pre" {
        *pre = pre.saturating_sub(1);
    }
    if PARAGRAPHS.contains(&name) {
        paragraph_break(out);
    } else if LINES.contains(&name) || name == "li" {
        line_break(out);
    }
}

/// Trailing spaces dropped, runs of blank lines made one, no blank lines at either end.
fn tidy(out: &str) -> String {
    let mut text = String::new();
    let mut blank = 0;
    for line in out.lines().map(str::trim_end) {
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
            html_to_text("<p>a &amp; b &lt;c&gt; &#39;d&#x27; &copy; &hearts; &bogus; &</p>"),
            "a & b <c> 'd' © ♥ &bogus; &"
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
    fn malformed_and_deeply_nested_markup_degrades_to_text() {
        assert_eq!(
            html_to_text("<p>open <b>never closed <i>x"),
            "open never closed x"
        );
        assert_eq!(html_to_text("a < b and <3 > 2"), "a < b and <3 > 2");
        let deep = format!(
            "{}deep{}",
            "<div>".repeat(100_000),
            "</div>".repeat(100_000)
        );
        assert_eq!(html_to_text(&deep), "deep");
        assert_eq!(
            html_to_text("<title>1 <b> 2 &amp; 3</title><script/>var x = 1;</script><p>body"),
            "1 <b> 2 & 3\n\nbody"
        );
        assert_eq!(
            html_to_text(
                r#"<script>if (a<b) x = "</p><p>no";</script>a<template><p>t<template>u</template>v</template>b<noscript><p>n</p></noscript>c"#
            ),
            "abc"
        );
    }

    #[test]
    fn attributes_quoted_bare_and_decoded() {
        let mut seen = String::new();
        for_each_token(
            r#"<A Class="x y" href='/l/?u=1&amp;v=2' data-n=3 hidden>t&lt;</a>"#,
            |token| match token {
                Token::Start(tag) => seen.push_str(&format!(
                    "<{} {} {:?} {:?} {:?}>",
                    tag.name,
                    has_class(tag, "y"),
                    attr(tag, "href"),
                    attr(tag, "data-n"),
                    attr(tag, "hidden"),
                )),
                Token::End(name) => seen.push_str(&format!("</{name}>")),
                Token::Text(text) => seen.push_str(text),
            },
        );
        assert_eq!(
            seen,
            r#"<a true Some("/l/?u=1&v=2") Some("3") Some("")>t<</a>"#
        );
    }
}
