//! The allowlist itself: the subcommands the `git` tool runs and the options each accepts,
//! the global options, and why the well-known hostile options are refused. [`super::args`]
//! applies it.

/// Options are written `-x`, `--long` (a flag), with `=` (takes a value: attached or the next
/// argument), `@` (takes a value that is a path inside the workspace) or `?` (an optional value,
/// attached only: `--porcelain=v2`, `-uno`). `-NUM` allows `-3` style counts.
pub(super) type Spec = &'static [&'static str];

#[rustfmt::skip]
const QUIET: Spec = &["-q", "--quiet", "-v", "--verbose"];
#[rustfmt::skip]
const DIFF: Spec = &[
    "-p", "--patch", "-s", "--no-patch", "-u", "-U?", "--unified?", "--raw", "--patch-with-raw",
    "--patch-with-stat", "--stat?", "--numstat", "--shortstat", "--dirstat?", "--summary",
    "--name-only", "--name-status", "--check", "-z", "--color?", "--no-color", "--word-diff?",
    "--word-diff-regex=", "--color-words?", "--color-moved?", "--no-color-moved", "-w",
    "--ignore-all-space", "-b", "--ignore-space-change", "--ignore-space-at-eol",
    "--ignore-blank-lines", "--ignore-cr-at-eol", "--minimal", "--patience", "--histogram",
    "--diff-algorithm=", "-M?", "--find-renames?", "-C?", "--find-copies?", "--no-renames",
    "-D", "--irreversible-delete", "-R", "--relative?", "--no-relative", "-a", "--text",
    "--binary", "--full-index", "--abbrev?", "--src-prefix=", "--dst-prefix=", "--no-prefix",
    "--default-prefix", "--diff-filter=", "-S=", "-G=", "--pickaxe-all", "--pickaxe-regex",
    "-O@", "--output@", "--no-ext-diff", "--no-textconv", "--exit-code", "--quiet",
    "--function-context", "--inter-hunk-context=", "--ignore-submodules?",
];
#[rustfmt::skip]
const LOG: Spec = &[
    "-n=", "--max-count=", "--skip=", "-NUM", "--since=", "--after=", "--until=", "--before=",
    "--author=", "--committer=", "--grep=", "--all-match", "--invert-grep", "-i",
    "--regexp-ignore-case", "-E", "--extended-regexp", "-F", "--fixed-strings", "--merges",
    "--no-merges", "--first-parent", "--all", "--branches?", "--tags?", "--remotes?",
    "--oneline", "--graph", "--decorate?", "--no-decorate", "--pretty?", "--format=",
    "--abbrev-commit", "--no-abbrev-commit", "--date=", "--relative-date", "--reverse",
    "--follow", "-L=", "--topo-order", "--date-order", "--author-date-order", "--left-right",
    "--cherry-pick", "--cherry-mark", "--ancestry-path?", "--simplify-by-decoration",
    "--full-history", "--boundary", "-g", "--walk-reflogs", "--source", "--use-mailmap",
    "--mailmap", "--notes?", "--no-notes", "--parents", "--children", "--no-walk?",
    "--encoding=", "--expand-tabs?", "--no-expand-tabs", "-m", "--diff-merges=", "--cc",
    "--combined-all-paths", "--count", "-c", "-t", "--objects", "--not",
];
#[rustfmt::skip]
const FETCH: Spec = &[
    "--all", "-a", "--append", "--atomic", "--depth=", "--deepen=", "--shallow-since=",
    "--shallow-exclude=", "--unshallow", "--update-shallow", "--dry-run", "-f", "--force", "-k",
    "--keep", "-p", "--prune", "-P", "--prune-tags", "-n", "--no-tags", "-t", "--tags",
    "--refetch", "--refmap=", "-j=", "--jobs=", "--set-upstream", "--progress", "--no-progress",
    "--filter=", "-4", "-6", "--multiple", "--porcelain",
];
#[rustfmt::skip]
const MERGE: Spec = &[
    "--commit", "--no-commit", "--no-edit", "--cleanup=", "--ff", "--no-ff", "--ff-only",
    "--log?", "--no-log", "--signoff", "--no-signoff", "--stat", "-n", "--no-stat", "--squash",
    "--no-squash", "--no-verify", "-s=", "--strategy=", "-X=", "--strategy-option=", "--summary",
    "--no-summary", "--allow-unrelated-histories", "--rerere-autoupdate",
    "--no-rerere-autoupdate", "--autostash", "--no-autostash", "--progress", "--no-progress",
    "--overwrite-ignore", "--no-overwrite-ignore",
];
#[rustfmt::skip]
const SEQUENCE: Spec = &["--continue", "--skip", "--quit", "--abort"];
#[rustfmt::skip]
const PATHSPEC_FILE: Spec = &["--pathspec-from-file@", "--pathspec-file-nul"];

/// Where a subcommand takes a repository URL among its positional arguments.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Url {
    /// No URL: every positional is a revision, a name or a path.
    No,
    /// The first positional (`clone`, `fetch`, `pull`, `push`, `ls-remote`).
    First,
    /// `remote add NAME URL` and `remote set-url NAME URL`: the third positional.
    Remote,
}

/// One allowed subcommand.
pub(super) struct Sub {
    /// The subcommand.
    pub name: &'static str,
    /// Its options, in groups.
    pub opts: &'static [Spec],
    /// Where it takes a repository URL.
    pub url: Url,
}

const fn sub(name: &'static str, opts: &'static [Spec], url: Url) -> Sub {
    Sub { name, opts, url }
}

/// The subcommands the model may run, each with every option it may pass.
#[rustfmt::skip]
pub(super) const SUBCOMMANDS: &[Sub] = &[
    sub("status", &[QUIET, &[
        "-s", "--short", "-b", "--branch", "--show-stash", "--porcelain?", "--long", "-u?",
        "--untracked-files?", "--ignored?", "--ignore-submodules?", "-z", "--column?",
        "--no-column", "--ahead-behind", "--no-ahead-behind", "--renames", "--no-renames",
        "--find-renames?",
    ]], Url::No),
    sub("log", &[QUIET, DIFF, LOG], Url::No),
    sub("show", &[QUIET, DIFF, LOG], Url::No),
    sub("diff", &[DIFF, &[
        "--cached", "--staged", "--merge-base", "--no-index", "-1", "-2", "-3", "--base",
        "--ours", "--theirs",
    ]], Url::No),
    sub("shortlog", &[LOG, &["-s", "--summary", "-e", "--email", "--group="]], Url::No),
    sub("rev-list", &[LOG, &["--objects", "--in-commit-order"]], Url::No),
    sub("reflog", &[LOG], Url::No),
    sub("blame", &[&[
        "-b", "--root", "--show-stats", "-L=", "-l", "-t", "--reverse=", "--first-parent",
        "-p", "--porcelain", "--line-porcelain", "--incremental", "--encoding=", "--contents@",
        "--date=", "-M?", "-C?", "--ignore-rev=", "--ignore-revs-file@", "--color-lines",
        "--color-by-age", "-c", "-f", "--show-name", "-n", "--show-number", "-s", "-e",
        "--show-email", "-w", "--abbrev?", "--progress", "--no-progress",
    ]], Url::No),
    sub("grep", &[&[
        "--cached", "--no-index", "--untracked", "--exclude-standard", "--no-exclude-standard",
        "-a", "--text", "-i", "--ignore-case", "-I", "--max-depth=", "-r", "--recursive",
        "--no-recursive", "-w", "--word-regexp", "-v", "--invert-match", "-h", "-H",
        "--full-name", "-E", "--extended-regexp", "-G", "--basic-regexp", "-P",
        "--perl-regexp", "-F", "--fixed-strings", "-n", "--line-number", "--column", "-l",
        "--files-with-matches", "--name-only", "-L", "--files-without-match", "-z", "--null",
        "-o", "--only-matching", "-c", "--count", "--color?", "--no-color", "--break",
        "--heading", "-p", "--show-function", "-A=", "--after-context=", "-B=",
        "--before-context=", "-C=", "--context=", "-NUM", "-W", "--function-context", "-m=",
        "--max-count=", "--threads=", "-f@", "-e=", "--and", "--or", "--not", "--all-match",
        "-q", "--quiet",
    ]], Url::No),
    sub("ls-files", &[&[
        "-c", "--cached", "-d", "--deleted", "-m", "--modified", "-o", "--others", "-i",
        "--ignored", "-s", "--stage", "-u", "--unmerged", "-k", "--killed", "--directory",
        "--no-empty-directory", "--eol", "-z", "-t", "-v", "-f", "--full-name", "--abbrev?",
        "-x=", "--exclude=", "--exclude-standard", "--exclude-per-directory=",
        "--error-unmatch", "--with-tree=", "--deduplicate", "--sparse", "--format=",
    ]], Url::No),
    sub("ls-tree", &[&[
        "-d", "-r", "-t", "-l", "--long", "-z", "--name-only", "--name-status", "--object-only",
        "--full-name", "--full-tree", "--abbrev?", "--format=",
    ]], Url::No),
    sub("cat-file", &[&["-t", "-s", "-p", "-e", "--allow-unknown-type", "--use-mailmap", "--mailmap"]], Url::No),
    sub("rev-parse", &[&[
        "--abbrev-ref?", "--symbolic", "--symbolic-full-name", "--verify", "-q", "--quiet",
        "--short?", "--show-toplevel", "--show-prefix", "--show-cdup", "--git-dir",
        "--git-common-dir", "--absolute-git-dir", "--is-inside-work-tree", "--is-inside-git-dir",
        "--is-bare-repository", "--is-shallow-repository", "--all", "--branches?", "--tags?",
        "--remotes?", "--since=", "--until=", "--default=", "--sq", "--not", "--revs-only",
        "--no-revs", "--flags", "--no-flags", "--show-object-format?", "--show-ref-format",
        "--path-format=",
    ]], Url::No),
    sub("describe", &[&[
        "--all", "--tags", "--contains", "--abbrev?", "--candidates=", "--exact-match",
        "--long", "--match=", "--exclude=", "--always", "--first-parent", "--dirty?",
        "--broken?",
    ]], Url::No),
    sub("show-ref", &[&[
        "--head", "--branches", "--tags", "-d", "--dereference", "-s", "--hash?", "--abbrev?",
        "--verify", "--exists", "-q", "--quiet",
    ]], Url::No),
    sub("init", &[&[
        "-q", "--quiet", "--bare", "-b=", "--initial-branch=", "--object-format=",
        "--ref-format=", "--shared?",
    ]], Url::No),
    sub("add", &[PATHSPEC_FILE, &[
        "-v", "--verbose", "-n", "--dry-run", "-f", "--force", "-u", "--update", "-A", "--all",
        "--no-all", "--ignore-removal", "--no-ignore-removal", "-N", "--intent-to-add",
        "--refresh", "--ignore-errors", "--ignore-missing", "--renormalize", "--chmod=",
        "--sparse",
    ]], Url::No),
    sub("commit", &[QUIET, PATHSPEC_FILE, &[
        "-a", "--all", "-m=", "--message=", "-F@", "--file@", "-t@", "--template@", "-C=",
        "--reuse-message=", "--fixup=", "--squash=", "--amend", "--no-edit", "--allow-empty",
        "--allow-empty-message", "--author=", "--date=", "-s", "--signoff", "--no-signoff",
        "--no-verify", "-n", "--cleanup=", "--dry-run", "--short", "--porcelain", "--long",
        "-z", "-u?", "--untracked-files?", "-o", "--only", "-i", "--include", "--reset-author",
        "--trailer=", "--no-gpg-sign", "--status", "--no-status",
    ]], Url::No),
    sub("rm", &[QUIET, PATHSPEC_FILE, &[
        "-f", "--force", "-n", "--dry-run", "-r", "--cached", "--ignore-unmatch", "--sparse",
    ]], Url::No),
    sub("mv", &[&["-f", "--force", "-k", "-n", "--dry-run", "-v", "--verbose", "--sparse"]], Url::No),
    sub("restore", &[QUIET, PATHSPEC_FILE, &[
        "-s=", "--source=", "-W", "--worktree", "-S", "--staged", "--ours", "--theirs", "-m",
        "--merge", "--conflict=", "--ignore-unmerged", "--ignore-skip-worktree-bits",
        "--overlay", "--no-overlay", "--progress", "--no-progress",
    ]], Url::No),
    sub("reset", &[QUIET, PATHSPEC_FILE, &[
        "--soft", "--mixed", "--hard", "--merge", "--keep", "-N", "--no-refresh", "--refresh",
    ]], Url::No),
    sub("clean", &[&[
        "-d", "-f", "--force", "-n", "--dry-run", "-q", "--quiet", "-e=", "--exclude=", "-x",
        "-X",
    ]], Url::No),
    sub("branch", &[&[
        "-a", "--all", "-r", "--remotes", "-l", "--list", "-v", "--verbose", "-q", "--quiet",
        "-d", "--delete", "-D", "-m", "--move", "-M", "-c", "--copy", "-C", "-f", "--force",
        "--show-current", "--contains?", "--no-contains?", "--merged?", "--no-merged?",
        "--points-at=", "--sort=", "--format=", "--column?", "--no-column", "--color?",
        "--no-color", "-u=", "--set-upstream-to=", "--unset-upstream", "-t", "--track?",
        "--no-track", "--create-reflog", "-i", "--ignore-case", "--omit-empty", "--abbrev?",
        "--no-abbrev",
    ]], Url::No),
    sub("tag", &[&[
        "-a", "--annotate", "-m=", "--message=", "-F@", "--file@", "-d", "--delete", "-l",
        "--list", "-n?", "-f", "--force", "--sort=", "--contains?", "--no-contains?",
        "--merged?", "--no-merged?", "--points-at?", "--format=", "--column?", "--no-column",
        "-i", "--ignore-case", "--cleanup=", "--create-reflog", "--color?", "--no-sign",
    ]], Url::No),
    sub("checkout", &[QUIET, PATHSPEC_FILE, &[
        "-b=", "-B=", "--orphan=", "-f", "--force", "--detach", "-t", "--track?", "--no-track",
        "--ours", "--theirs", "-m", "--merge", "--conflict=", "--ignore-skip-worktree-bits",
        "--overwrite-ignore", "--no-overwrite-ignore", "--progress", "--no-progress", "--guess",
        "--no-guess", "--overlay", "--no-overlay",
    ]], Url::No),
    sub("switch", &[QUIET, &[
        "-c=", "--create=", "-C=", "--force-create=", "-d", "--detach", "--guess", "--no-guess",
        "-f", "--force", "--discard-changes", "-m", "--merge", "--conflict=", "-t", "--track?",
        "--no-track", "--orphan=", "--ignore-other-worktrees", "--progress", "--no-progress",
    ]], Url::No),
    sub("stash", &[QUIET, PATHSPEC_FILE, &[
        "-k", "--keep-index", "--no-keep-index", "-u", "--include-untracked",
        "--no-include-untracked", "--only-untracked", "-a", "--all", "-m=", "--message=",
        "--index", "-S", "--staged",
    ], DIFF], Url::No),
    sub("merge", &[QUIET, MERGE, &["-m=", "-F@", "--file@", "--into-name=", "--abort", "--quit", "--continue"]], Url::No),
    sub("rebase", &[QUIET, SEQUENCE, &[
        "--onto=", "--keep-base", "--apply", "--merge", "-m", "--empty=", "--keep-empty",
        "--no-keep-empty", "--allow-empty-message", "--autostash", "--no-autostash",
        "--committer-date-is-author-date", "--ignore-date", "--reset-author-date", "--signoff",
        "--ignore-whitespace", "--whitespace=", "-C=", "-f", "--force-rebase", "--no-ff",
        "--fork-point", "--no-fork-point", "-s=", "--strategy=", "-X=", "--strategy-option=",
        "--root", "--update-refs", "--no-update-refs", "--rebase-merges?", "--no-rebase-merges",
        "--stat", "-n", "--no-stat", "--no-verify", "--verify", "--reapply-cherry-picks",
        "--no-reapply-cherry-picks",
    ]], Url::No),
    sub("cherry-pick", &[SEQUENCE, &[
        "-n", "--no-commit", "-x", "-r", "-m=", "--mainline=", "-s", "--signoff", "--ff",
        "--allow-empty", "--allow-empty-message", "--keep-redundant-commits", "--empty=",
        "--strategy=", "-X=", "--strategy-option=", "--rerere-autoupdate",
        "--no-rerere-autoupdate", "--cleanup=", "--no-edit",
    ]], Url::No),
    sub("revert", &[SEQUENCE, &[
        "-n", "--no-commit", "-m=", "--mainline=", "-s", "--signoff", "--no-edit",
        "--strategy=", "-X=", "--strategy-option=", "--rerere-autoupdate",
        "--no-rerere-autoupdate", "--cleanup=", "--reference",
    ]], Url::No),
    sub("apply", &[QUIET, &[
        "--stat", "--numstat", "--summary", "--check", "--index", "--cached", "-N",
        "--intent-to-add", "-3", "--3way", "--ours", "--theirs", "--union", "-R", "--reverse",
        "--reject", "-z", "-p=", "-C=", "--unidiff-zero", "--apply", "--no-add", "--binary",
        "--exclude=", "--include=", "--ignore-space-change", "--ignore-whitespace",
        "--whitespace=", "--inaccurate-eof", "--recount", "--directory=", "--allow-empty",
    ]], Url::No),
    sub("archive", &[&[
        "--format=", "-l", "--list", "-v", "--verbose", "--prefix=", "-o@", "--output@",
        "--add-file@", "--add-virtual-file=", "--worktree-attributes", "--mtime=", "-NUM",
    ]], Url::No),
    sub("format-patch", &[QUIET, DIFF, &[
        "-o@", "--output-directory@", "-n", "--numbered", "-N", "--no-numbered",
        "--start-number=", "--numbered-files", "-k", "--keep-subject", "-s", "--signoff",
        "--stdout", "--cover-letter", "--no-cover-letter", "--no-attach", "--no-thread",
        "--in-reply-to=", "--ignore-if-in-upstream", "--always", "--cover-from-description=",
        "--subject-prefix=", "--rfc?", "-v=", "--reroll-count=", "--to=", "--cc=", "--from?",
        "--no-to", "--no-cc", "--add-header=", "--suffix=", "--no-binary", "--zero-commit",
        "--base=", "--root", "--progress", "--interdiff=", "--range-diff=",
        "--creation-factor=", "--no-signature", "--signature=", "--signature-file@", "-NUM",
    ]], Url::No),
    sub("clone", &[QUIET, &[
        "-n", "--no-checkout", "--bare", "--mirror", "-l", "--local", "--no-local",
        "--no-hardlinks", "-o=", "--origin=", "-b=", "--branch=", "--revision=", "--depth=",
        "--shallow-since=", "--shallow-exclude=", "--single-branch", "--no-single-branch",
        "--no-tags", "--tags", "--filter=", "--sparse", "--reject-shallow",
        "--no-reject-shallow", "--progress", "--no-progress",
    ]], Url::First),
    sub("fetch", &[QUIET, FETCH], Url::First),
    sub("pull", &[QUIET, FETCH, MERGE, &["-r", "--rebase?", "--no-rebase"]], Url::First),
    sub("push", &[QUIET, &[
        "--all", "--branches", "--mirror", "--tags", "--follow-tags", "--no-follow-tags",
        "--atomic", "--no-atomic", "-n", "--dry-run", "--porcelain", "-d", "--delete", "-f",
        "--force", "--force-with-lease?", "--no-force-with-lease", "--force-if-includes",
        "-u", "--set-upstream", "--prune", "--no-verify", "--progress", "--no-progress", "-4",
        "-6", "--thin", "--no-thin",
    ]], Url::First),
    sub("ls-remote", &[&[
        "--heads", "--tags", "--branches", "-h", "-b", "-t", "--refs", "--get-url", "--symref",
        "--sort=", "-q", "--quiet", "--exit-code",
    ]], Url::First),
    sub("remote", &[&[
        "-v", "--verbose", "-f", "-t=", "-m=", "--tags", "--no-tags", "--push", "--add",
        "--delete", "--all", "-n", "--dry-run",
    ]], Url::Remote),
    sub("config", &[&[
        "--get", "--get-all", "--get-regexp", "-l", "--list", "--show-origin", "--show-scope",
        "--local", "--global", "--includes", "--no-includes", "-z", "--null", "--name-only",
        "--type=", "--default=", "--bool", "--int", "--path", "--all", "--regexp",
    ]], Url::No),
    sub("version", &[&["--build-options"]], Url::No),
];

/// Global options, before the subcommand. `-C` must name a directory inside the workspace.
#[rustfmt::skip]
pub(super) const GLOBAL: Spec = &[
    "--no-pager", "-P", "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs",
    "--icase-pathspecs", "--no-optional-locks", "--no-replace-objects", "--no-advice",
    "--no-lazy-fetch", "-C@", "--version",
];

/// Why well-known hostile options are refused, for a clearer message than "not allowed".
pub(super) fn known_danger(name: &str) -> Option<&'static str> {
    Some(match name {
        "-c" | "--config" | "--config-env" => {
            "it sets git configuration, which can name programs for git to run"
        }
        "--upload-pack"
        | "-u"
        | "--receive-pack"
        | "--exec"
        | "-x"
        | "--open-files-in-pager"
        | "-O"
        | "--ext-diff"
        | "--textconv"
        | "--interactive"
        | "-i" => "it makes git run a program (or wait for an editor)",
        "--template" => "it copies hooks (programs) from a directory outside the workspace",
        "--git-dir" | "--work-tree" | "--exec-path" | "--namespace" | "--separate-git-dir"
        | "--reference" | "--super-prefix" | "--remote" => {
            "it points git at a repository, program or files outside the workspace"
        }
        "--submodule" | "--recurse-submodules" | "--recursive" => {
            "it makes git run inside submodules, with their own configuration, which the git \
             tool does not check"
        }
        "-S" | "--gpg-sign" | "--sign" | "--show-signature" | "--verify-signatures" => {
            "signing and signature checks run gpg, which the tool does not offer"
        }
        _ => return None,
    })
}

/// What an option takes after it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Takes {
    Nothing,
    Text,
    Path,
    Optional,
}

/// How `name` (`-x` or `--long`) is spelled in `specs`, if at all.
pub(super) fn lookup(specs: &[Spec], name: &str) -> Option<Takes> {
    specs.iter().flat_map(|s| s.iter()).find_map(|entry| {
        let (bare, takes) = match entry.as_bytes().last() {
            Some(b'=') => (&entry[..entry.len() - 1], Takes::Text),
            Some(b'@') => (&entry[..entry.len() - 1], Takes::Path),
            Some(b'?') => (&entry[..entry.len() - 1], Takes::Optional),
            _ => (*entry, Takes::Nothing),
        };
        (bare == name).then_some(takes)
    })
}

pub(super) fn allows_count(specs: &[Spec]) -> bool {
    specs.iter().any(|s| s.contains(&"-NUM"))
}

/// The options of `specs`, spelled for a message.
pub(super) fn listing(specs: &[Spec]) -> String {
    let names: Vec<&str> = specs
        .iter()
        .flat_map(|s| s.iter())
        .map(|e| e.trim_end_matches(['=', '@', '?']))
        .filter(|e| *e != "-NUM")
        .collect();
    names.join(" ")
}
