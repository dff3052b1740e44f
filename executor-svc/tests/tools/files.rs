//! `file_read` / `file_write`: round trips, caps, binary files, and every way out of the
//! workspace refused with nothing written outside.

use std::{os::unix::fs::symlink, path::PathBuf};

use executor_svc::tools::Tool;
use executor_svc::tools::{ToolError, native::FileWrite};
use serde_json::json;

use super::{ctx, ctx_with, ok_text, output, tool};

struct Dirs {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&ws).expect("ws");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("secret.txt"), "top secret").expect("secret");
    Dirs {
        _tmp: tmp,
        ws,
        outside,
    }
}

fn is_outside(r: &Result<executor_svc::tools::ToolOutcome, ToolError>) -> bool {
    matches!(r, Err(ToolError::OutsideWorkspace { .. }))
}

#[tokio::test]
async fn write_then_read_round_trips_creating_directories_and_appending() {
    let d = dirs();
    let c = ctx(&d.ws);
    let msg = ok_text(
        tool("file_write")
            .call(
                &c,
                json!({ "path": "notes/2026/plan.md", "content": "line one\n" }),
            )
            .await,
    );
    assert!(msg.contains("wrote 9 bytes"), "{msg}");
    ok_text(
        tool("file_write")
            .call(
                &c,
                json!({ "path": "notes/2026/plan.md", "content": "línea dos\n", "append": true }),
            )
            .await,
    );
    let on_disk = std::fs::read_to_string(d.ws.join("notes/2026/plan.md")).expect("on disk");
    assert_eq!(on_disk, "line one\nlínea dos\n");
    let read = ok_text(
        tool("file_read")
            .call(&c, json!({ "path": "./notes/2026/plan.md" }))
            .await,
    );
    assert_eq!(read, on_disk);
    // An absolute path inside the workspace is fine too.
    let abs = d.ws.join("notes/2026/plan.md");
    let read = ok_text(tool("file_read").call(&c, json!({ "path": abs })).await);
    assert_eq!(read, on_disk);
    // A path naming a directory is refused, and no file of that name is written.
    let r = tool("file_write")
        .call(&c, json!({ "path": "drafts/", "content": "x" }))
        .await;
    assert!(format!("{r:?}").contains("names a directory"), "{r:?}");
    assert!(!d.ws.join("drafts").exists());
}

#[tokio::test]
async fn an_overwrite_replaces_the_file_whole_and_keeps_its_permissions() {
    use std::{io::Read, os::unix::fs::PermissionsExt};
    let d = dirs();
    let c = ctx(&d.ws);
    let script = d.ws.join("run.sh");
    std::fs::write(&script, "#!/bin/sh\necho old\n").expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    // Opened before the write: a replaced file is a new one, so this reader still reads the
    // old content whole (a write in place would cut it first; on a full disk, for good).
    let mut before = std::fs::File::open(&script).expect("open");
    ok_text(
        tool("file_write")
            .call(
                &c,
                json!({ "path": "run.sh", "content": "#!/bin/sh\necho new\n" }),
            )
            .await,
    );
    let mut old = String::new();
    before.read_to_string(&mut old).expect("read");
    assert_eq!(old, "#!/bin/sh\necho old\n");
    assert_eq!(
        std::fs::read_to_string(&script).expect("new"),
        "#!/bin/sh\necho new\n"
    );
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o7777;
    assert_eq!(mode(&script), 0o750, "the script stays executable");
    ok_text(
        tool("file_write")
            .call(&c, json!({ "path": "new.txt", "content": "x" }))
            .await,
    );
    assert_eq!(mode(&d.ws.join("new.txt")), 0o644);
    // Nothing else is left in the workspace.
    let mut names: Vec<String> = std::fs::read_dir(&d.ws)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["new.txt", "run.sh"]);
}

#[tokio::test]
async fn parent_dir_and_absolute_escapes_are_refused_and_nothing_is_written_outside() {
    let d = dirs();
    let c = ctx(&d.ws);
    for path in [
        "../outside/evil.txt",
        "a/../../outside/evil.txt",
        "/etc/passwd",
        "/tmp/evil.txt",
    ] {
        let w = tool("file_write")
            .call(&c, json!({ "path": path, "content": "x" }))
            .await;
        assert!(is_outside(&w), "{path}: {w:?}");
        let r = tool("file_read").call(&c, json!({ "path": path })).await;
        assert!(is_outside(&r), "{path}: {r:?}");
    }
    assert!(!d.outside.join("evil.txt").exists());
    assert!(!PathBuf::from("/tmp/evil.txt").exists());
    // A `..` that stays inside is normal.
    ok_text(
        tool("file_write")
            .call(&c, json!({ "path": "a/../inside.txt", "content": "ok" }))
            .await,
    );
    assert!(d.ws.join("inside.txt").exists());
}

#[tokio::test]
async fn symlinks_pointing_out_are_neither_read_nor_followed_when_writing() {
    let d = dirs();
    let c = ctx(&d.ws);
    symlink(d.outside.join("secret.txt"), d.ws.join("link.txt")).expect("file link");
    symlink(&d.outside, d.ws.join("dirlink")).expect("dir link");
    symlink(
        d.outside.join("created-by-agent.txt"),
        d.ws.join("dangling"),
    )
    .expect("dangling");

    let r = tool("file_read")
        .call(&c, json!({ "path": "link.txt" }))
        .await;
    assert!(is_outside(&r), "{r:?}");
    let r = tool("file_read")
        .call(&c, json!({ "path": "dirlink/secret.txt" }))
        .await;
    assert!(is_outside(&r), "{r:?}");

    let w = tool("file_write")
        .call(&c, json!({ "path": "link.txt", "content": "pwned" }))
        .await;
    assert!(is_outside(&w), "{w:?}");
    let w = tool("file_write")
        .call(&c, json!({ "path": "dirlink/new.txt", "content": "pwned" }))
        .await;
    assert!(is_outside(&w), "{w:?}");
    let w = tool("file_write")
        .call(
            &c,
            json!({ "path": "dirlink/deeper/new.txt", "content": "pwned" }),
        )
        .await;
    assert!(is_outside(&w), "{w:?}");
    let w = tool("file_write")
        .call(&c, json!({ "path": "dangling", "content": "pwned" }))
        .await;
    assert!(is_outside(&w), "{w:?}");

    assert_eq!(
        std::fs::read_to_string(d.outside.join("secret.txt")).expect("secret"),
        "top secret"
    );
    assert!(!d.outside.join("new.txt").exists());
    assert!(!d.outside.join("deeper").exists());
    assert!(!d.outside.join("created-by-agent.txt").exists());

    // A symlink that stays inside the workspace works.
    std::fs::write(d.ws.join("real.txt"), "inside").expect("real");
    symlink(d.ws.join("real.txt"), d.ws.join("alias.txt")).expect("inner link");
    assert_eq!(
        ok_text(
            tool("file_read")
                .call(&c, json!({ "path": "alias.txt" }))
                .await
        ),
        "inside"
    );
}

#[tokio::test]
async fn reads_are_cut_to_max_bytes_and_the_output_cap_and_say_so() {
    let d = dirs();
    std::fs::write(d.ws.join("big.txt"), "a".repeat(10_000)).expect("big");
    let text = ok_text(
        tool("file_read")
            .call(&ctx(&d.ws), json!({ "path": "big.txt", "max_bytes": 100 }))
            .await,
    );
    assert!(text.starts_with(&"a".repeat(100)), "{text}");
    assert!(!text.starts_with(&"a".repeat(101)));
    assert!(
        text.contains("[file cut: showing the first 100 of 10000 bytes]"),
        "{text}"
    );
    // max_bytes above the call's output cap is held to the cap.
    let c = ctx_with(&d.ws, std::time::Duration::from_secs(5), 500);
    let text = ok_text(
        tool("file_read")
            .call(&c, json!({ "path": "big.txt", "max_bytes": 5000 }))
            .await,
    );
    assert!(
        text.contains("showing the first 500 of 10000 bytes"),
        "{text}"
    );
}

#[tokio::test]
async fn binary_missing_and_directory_reads_are_clear_errors() {
    let d = dirs();
    let c = ctx(&d.ws);
    std::fs::write(d.ws.join("img.png"), [0x89, b'P', b'N', b'G', 0, 0, 1, 2]).expect("bin");
    let (text, is_error) = output(
        tool("file_read")
            .call(&c, json!({ "path": "img.png" }))
            .await,
    );
    assert!(
        is_error && text.contains("is not UTF-8 text (8 bytes: a binary file"),
        "{text}"
    );
    let r = tool("file_read")
        .call(&c, json!({ "path": "nope.txt" }))
        .await;
    assert!(
        matches!(&r, Err(ToolError::Failed { reason, .. }) if reason.contains("no such file")),
        "{r:?}"
    );
    std::fs::create_dir(d.ws.join("sub")).expect("sub");
    let (text, is_error) = output(tool("file_read").call(&c, json!({ "path": "sub" })).await);
    assert!(is_error && text.contains("is a directory"), "{text}");
}

#[tokio::test]
async fn writes_over_the_size_limit_are_refused() {
    let d = dirs();
    let w = FileWrite::new(10)
        .call(
            &ctx(&d.ws),
            json!({ "path": "x.txt", "content": "12345678901" }),
        )
        .await;
    assert!(
        matches!(&w, Err(ToolError::InvalidArguments { reason, .. }) if reason.contains("limit is 10 bytes")),
        "{w:?}"
    );
    assert!(!d.ws.join("x.txt").exists());
}

#[tokio::test]
async fn fifos_are_refused_instead_of_blocking_the_call() {
    let d = dirs();
    let status = std::process::Command::new("mkfifo")
        .arg(d.ws.join("pipe"))
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let c = ctx_with(&d.ws, std::time::Duration::from_secs(5), 1000);
    let (text, is_error) = output(tool("file_read").call(&c, json!({ "path": "pipe" })).await);
    assert!(is_error && text.contains("not a regular file"), "{text}");
    let w = tool("file_write")
        .call(&c, json!({ "path": "pipe", "content": "x" }))
        .await;
    assert!(
        matches!(&w, Err(ToolError::Failed { reason, .. }) if reason.contains("not a regular file")),
        "{w:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_between_check_and_open_never_leaks_or_writes_outside() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };
    let d = dirs();
    let c = ctx(&d.ws);
    std::fs::write(d.outside.join("f.txt"), "SECRET-OUTSIDE").expect("outside file");
    let real = d.ws.join("real");
    std::fs::create_dir(&real).expect("real dir");
    std::fs::write(real.join("f.txt"), "inside").expect("inside file");
    // Another process in the workspace (the agent's own python, say) keeps turning `real`
    // into a symlink to the outside and back.
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws, outside) = (Arc::clone(&stop), d.ws.clone(), d.outside.clone());
        std::thread::spawn(move || {
            let (real, stash) = (ws.join("real"), ws.join("stash"));
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::rename(&real, &stash);
                let _ = symlink(&outside, &real);
                let _ = std::fs::remove_file(&real);
                let _ = std::fs::rename(&stash, &real);
                // Leave `real` in place a moment, now and then a longer one, so reads also get
                // through on a busy machine.
                n = n.wrapping_add(1);
                let pause = if n.is_multiple_of(16) { 2_000 } else { 50 };
                std::thread::sleep(std::time::Duration::from_micros(pause));
            }
        })
    };
    let (read, write) = (tool("file_read"), tool("file_write"));
    let mut read_ok = 0;
    // At least 300 rounds, and on until one read got through (the race was exercised), for a
    // minute at most.
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    for round in 0.. {
        if (round >= 300 && read_ok > 0) || std::time::Instant::now() > give_up {
            break;
        }
        if let Ok(executor_svc::tools::ToolOutcome::Output {
            content,
            is_error: false,
        }) = read.call(&c, json!({ "path": "real/f.txt" })).await
        {
            assert_eq!(content, "inside", "read through the swapped link");
            read_ok += 1;
        }
        let _ = write
            .call(&c, json!({ "path": "real/w.txt", "content": "x" }))
            .await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = swapper.join();
    assert!(
        read_ok > 0,
        "no read got through at all: the race was not exercised"
    );
    assert!(
        !d.outside.join("w.txt").exists(),
        "a write went through the swapped link"
    );
    assert_eq!(
        std::fs::read_to_string(d.outside.join("f.txt")).expect("outside file"),
        "SECRET-OUTSIDE"
    );
}

#[tokio::test]
async fn a_run_makes_and_resolves_its_workspace_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = tmp.path().join("ws");
    // The first call of a run makes the workspace.
    let run = ctx(&ws);
    ok_text(
        tool("file_write")
            .call(&run, json!({ "path": "a.txt", "content": "one" }))
            .await,
    );
    assert!(ws.join("a.txt").is_file());
    // Removed while the run goes on, it is not made again by the run's later calls: they say
    // the file is missing.
    std::fs::remove_dir_all(&ws).expect("remove the workspace");
    let read = tool("file_read")
        .call(&run, json!({ "path": "a.txt" }))
        .await;
    assert!(
        matches!(&read, Err(ToolError::Failed { reason, .. }) if reason.contains("no such file")),
        "{read:?}"
    );
    assert!(!ws.exists(), "the run made its workspace again");
    // The next run makes it again.
    let next = ctx(&ws);
    ok_text(
        tool("file_write")
            .call(&next, json!({ "path": "a.txt", "content": "two" }))
            .await,
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).expect("read"),
        "two"
    );
}
