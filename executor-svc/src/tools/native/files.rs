//! `file_read` and `file_write`: text files inside the agent's workspace.

use futures::{FutureExt, future::BoxFuture};
use serde::Deserialize;
use serde_json::Value;
use std::{
    io::{Read, Write},
    sync::Arc,
};

use tracing::debug;

use super::{
    blocking, bounded, catalog_definition, failed, parse_args, workspace, workspace::WriteTurns,
};
use crate::{
    llm::ToolDefinition,
    tools::{Tool, ToolContext, ToolError, ToolOutcome, Workspace},
};

/// How many leading bytes are checked for NUL when telling text from binary.
const SNIFF_BYTES: usize = 8192;

/// `file_read`: a text file from the workspace, cut to `max_bytes` and the call's output cap.
#[derive(Debug)]
pub struct FileRead {
    definition: ToolDefinition,
}

impl FileRead {
    /// The tool.
    pub fn new() -> Self {
        Self {
            definition: catalog_definition("file_read"),
        }
    }
}

impl Default for FileRead {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    max_bytes: Option<u64>,
}

impl Tool for FileRead {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            let args: ReadArgs = parse_args("file_read", arguments)?;
            let cap = args
                .max_bytes
                .map_or(ctx.limits.max_output_bytes, |m| {
                    usize::try_from(m).unwrap_or(usize::MAX)
                })
                .min(ctx.limits.max_output_bytes)
                .max(1);
            let workspace = ctx.workspace.clone();
            let work = blocking("file_read", move || read(&workspace, &args.path, cap));
            bounded("file_read", ctx, work).await
        }
        .boxed()
    }
}

/// The whole read, blocking: resolve inside the workspace, check, read at most `cap` bytes.
fn read(workspace: &Workspace, given: &str, cap: usize) -> Result<ToolOutcome, ToolError> {
    const TOOL: &str = "file_read";
    let root = workspace::root_blocking(TOOL, workspace)?;
    let candidate = workspace::lexical(TOOL, workspace, &root, given)?;
    let real = workspace::resolve_existing(TOOL, &root, &candidate, given)?;
    // Opened beneath the workspace, then checked through the open file: what was checked is
    // what is read. Non-blocking, so opening a FIFO does not wait for a writer.
    let file = workspace::open_beneath(
        TOOL,
        &root,
        &real,
        given,
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_NONBLOCK,
    )?;
    let meta = file
        .metadata()
        .map_err(|e| failed(TOOL, format!("{given}: {e}")))?;
    if meta.is_dir() {
        return Ok(ToolOutcome::failed(format!(
            "{given} is a directory; file_read reads files"
        )));
    }
    if !meta.is_file() {
        // Opening a FIFO would block until someone writes to it.
        return Ok(ToolOutcome::failed(format!(
            "{given} is not a regular file; file_read reads files"
        )));
    }
    // Read one byte past the cap to know whether the file is longer, never the whole file.
    let mut buf = Vec::with_capacity(cap.min(1 << 20) + 1);
    file.take(cap as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| failed(TOOL, format!("{given}: {e}")))?;
    let cut = buf.len() > cap;
    buf.truncate(cap);
    let total = meta.len();
    if buf[..buf.len().min(SNIFF_BYTES)].contains(&0) {
        return Ok(binary(given, total));
    }
    let text = match String::from_utf8(buf) {
        Ok(t) => t,
        Err(e) => {
            // A cut may split the last character; anything else invalid is binary.
            let valid = e.utf8_error().valid_up_to();
            let tail = e.as_bytes().len() - valid;
            if !(cut && tail < 4 && e.utf8_error().error_len().is_none()) {
                return Ok(binary(given, total));
            }
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    debug!(path = given, bytes = text.len(), cut, "file_read");
    if cut {
        let shown = text.len();
        return Ok(ToolOutcome::ok(format!(
            "{text}\n[file cut: showing the first {shown} of {total} bytes]"
        )));
    }
    Ok(ToolOutcome::ok(text))
}

fn binary(given: &str, total: u64) -> ToolOutcome {
    ToolOutcome::failed(format!(
        "{given} is not UTF-8 text ({total} bytes: a binary file, or text in another encoding); \
         file_read returns UTF-8 text files only"
    ))
}

/// `file_write`: writes (or appends to) a text file in the workspace, creating directories.
#[derive(Debug)]
pub struct FileWrite {
    definition: ToolDefinition,
    max_bytes: usize,
    turns: Arc<WriteTurns>,
}

impl FileWrite {
    /// The tool; content longer than `max_bytes` is refused.
    pub fn new(max_bytes: usize) -> Self {
        Self::taking_turns(max_bytes, Arc::default())
    }

    /// The same, writing a workspace only in its turn among `turns` (shared with `git`).
    pub(crate) fn taking_turns(max_bytes: usize, turns: Arc<WriteTurns>) -> Self {
        Self {
            definition: catalog_definition("file_write"),
            max_bytes,
            turns,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
    #[serde(default)]
    append: bool,
}

impl Tool for FileWrite {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            let args: WriteArgs = parse_args("file_write", arguments)?;
            // `dir/` names a directory: writing a file `dir` instead would say it wrote `dir/`.
            if args.path.ends_with('/') {
                return Err(ToolError::InvalidArguments {
                    tool: "file_write".to_owned(),
                    reason: format!(
                        "`path` `{}` names a directory; give the file's path",
                        args.path
                    ),
                });
            }
            if args.content.len() > self.max_bytes {
                return Err(ToolError::InvalidArguments {
                    tool: "file_write".to_owned(),
                    reason: format!(
                        "`content` is {} bytes; the limit is {} bytes",
                        args.content.len(),
                        self.max_bytes
                    ),
                });
            }
            let workspace = ctx.workspace.clone();
            let work = async {
                let root = workspace::root("file_write", &workspace).await?;
                // Held until the write is done, even when the call has timed out.
                let turn = self.turns.take(&root).await;
                blocking("file_write", move || {
                    let _turn = turn;
                    write(&workspace, &args)
                })
                .await
            };
            bounded("file_write", ctx, work).await
        }
        .boxed()
    }
}

fn not_a_file(given: &str) -> ToolOutcome {
    ToolOutcome::failed(format!(
        "{given} is not a regular file; file_write writes files"
    ))
}

/// Writes `content` as the file `real` (inside `root`) in one step: into a new file in the
/// same directory, then renamed over it, so a write that fails (a full disk) leaves the old
/// content whole rather than cut. Everything goes through the directory opened beneath `root`,
/// so a directory swapped meanwhile (by a program of the agent's) cannot send it elsewhere. An
/// existing file keeps its permissions (set-id bits aside), a new one gets 0644 less the umask.
/// A file this process may not write is refused as before, and one in a directory it may not
/// add to is written in place. `Some` outcome when `real` is there and no regular file.
fn replace(
    root: &std::path::Path,
    real: &std::path::Path,
    given: &str,
    content: &[u8],
) -> Result<Option<ToolOutcome>, ToolError> {
    use nix::{
        errno::Errno,
        fcntl::{AtFlags, OFlag, openat, renameat},
        sys::stat::{Mode, SFlag, fchmod, fstatat},
        unistd::{AccessFlags, UnlinkatFlags, faccessat, unlinkat},
    };
    const TOOL: &str = "file_write";
    let io = |e: Errno| failed(TOOL, format!("{given}: {}", std::io::Error::from(e)));
    let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
        return Err(failed(TOOL, format!("{given}: not a file path")));
    };
    let dir = workspace::open_beneath(
        TOOL,
        root,
        parent,
        given,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY,
    )?;
    let kept = match fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(stat) if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG => {
            faccessat(&dir, name, AccessFlags::W_OK, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io)?;
            Some(Mode::from_bits_truncate(stat.st_mode & 0o777))
        }
        Ok(_) => return Ok(Some(not_a_file(given))),
        Err(Errno::ENOENT) => None,
        Err(e) => return Err(io(e)),
    };
    let temp = format!(".tf-write-{}", uuid::Uuid::new_v4().simple());
    let fd = match openat(
        &dir,
        temp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    ) {
        Ok(fd) => fd,
        // A writable file in a directory this process may not add to: written in place.
        Err(Errno::EACCES | Errno::EPERM) => {
            return write_in_place(root, real, given, content, OFlag::O_TRUNC);
        }
        Err(e) => return Err(io(e)),
    };
    let mut file = std::fs::File::from(fd);
    let written = kept
        .map_or(Ok(()), |mode| fchmod(&file, mode))
        .map_err(std::io::Error::from)
        .and_then(|()| file.write_all(content))
        .and_then(|()| file.flush())
        .map_err(|e| format!("{e}"))
        .and_then(|()| {
            renameat(&dir, temp.as_str(), &dir, name)
                .map_err(|e| format!("{}", std::io::Error::from(e)))
        });
    if let Err(e) = written {
        let _ = unlinkat(&dir, temp.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(failed(
            TOOL,
            format!("{given}: {e} (the file is left as it was)"),
        ));
    }
    Ok(None)
}

/// Writes `content` into the file `real` (inside `root`) as it is opened with `mode`
/// (`O_APPEND`, or `O_TRUNC`), creating it when missing. Non-blocking, and checked through the
/// open file: a named pipe swapped in after `resolve_for_write` (by a program of the agent's)
/// would otherwise hold this thread, and the workspace's write turn, until a reader came.
/// `Some` outcome when it is no regular file.
fn write_in_place(
    root: &std::path::Path,
    real: &std::path::Path,
    given: &str,
    content: &[u8],
    mode: nix::fcntl::OFlag,
) -> Result<Option<ToolOutcome>, ToolError> {
    use nix::fcntl::OFlag;
    const TOOL: &str = "file_write";
    let mut file = workspace::open_beneath(
        TOOL,
        root,
        real,
        given,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NONBLOCK | mode,
    )?;
    if !file
        .metadata()
        .map_err(|e| failed(TOOL, format!("{given}: {e}")))?
        .is_file()
    {
        return Ok(Some(not_a_file(given)));
    }
    file.write_all(content)
        .and_then(|()| file.flush())
        .map_err(|e| failed(TOOL, format!("{given}: {e}")))?;
    Ok(None)
}

/// The whole write, blocking: resolve inside the workspace (creating directories), write.
fn write(workspace: &Workspace, args: &WriteArgs) -> Result<ToolOutcome, ToolError> {
    const TOOL: &str = "file_write";
    let given = args.path.as_str();
    let root = workspace::root_blocking(TOOL, workspace)?;
    let candidate = workspace::lexical(TOOL, workspace, &root, given)?;
    let real = workspace::resolve_for_write(TOOL, &root, &candidate, given)?;
    let refused = if args.append {
        write_in_place(
            &root,
            &real,
            given,
            args.content.as_bytes(),
            nix::fcntl::OFlag::O_APPEND,
        )?
    } else {
        replace(&root, &real, given, args.content.as_bytes())?
    };
    if let Some(refused) = refused {
        return Ok(refused);
    }
    let n = args.content.len();
    debug!(path = given, bytes = n, append = args.append, "file_write");
    let verb = if args.append { "appended" } else { "wrote" };
    Ok(ToolOutcome::ok(format!("{verb} {n} bytes to {given}")))
}
