//! People edit the YAML directory by hand while the registry runs (and while it is down); the
//! registry follows, skipping invalid files and saying why.

use std::{collections::BTreeMap, time::Duration};

use serde_json::json;
use taskforce_proto::v1::{self, AgentSource, agent::Kind};
use taskforce_tests::{Stack, spawn_registry, spawn_stack};
use tonic::Code;

use crate::helpers::{
    EDIT_VISIBLE_WITHIN, Reply, SAMPLE_IDS, agent_json, create, custom_spec, get, grpc_list_all,
    hand_written_yaml, read_yaml, rss_mib, send, until,
};

/// GetAgent as a plain result.
async fn get_agent(stack: &Stack, id: &str) -> Result<v1::Agent, tonic::Status> {
    stack
        .registry()
        .get_agent(v1::GetAgentRequest {
            agent_id: id.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// ListDiagnostics as `path → error`.
async fn diagnostics(stack: &Stack) -> BTreeMap<String, String> {
    stack
        .registry()
        .list_diagnostics(v1::ListDiagnosticsRequest {})
        .await
        .expect("ListDiagnostics")
        .into_inner()
        .diagnostics
        .into_iter()
        .map(|d| (d.path, d.error))
        .collect()
}

fn description_is(r: &Result<v1::Agent, tonic::Status>, want: &str) -> bool {
    r.as_ref().is_ok_and(|a| custom_spec(a).description == want)
}

fn is_not_found(r: &Result<v1::Agent, tonic::Status>) -> bool {
    r.as_ref().is_err_and(|e| e.code() == Code::NotFound)
}

/// Not served because its file `rel` is invalid: the registry says so, naming the file.
fn is_refused_as_invalid(r: &Result<v1::Agent, tonic::Status>, rel: &str) -> bool {
    r.as_ref()
        .is_err_and(|e| e.code() == Code::InvalidArgument && e.message().contains(rel))
}

#[tokio::test]
async fn a_hand_written_file_is_served_changed_and_removed_within_a_second() {
    let stack = spawn_registry().await.expect("stack starts");
    let path = stack.custom_dir().join("hand-made.yaml");

    std::fs::write(&path, hand_written_yaml("hand-made", "First draft.")).expect("write by hand");
    let first = until(
        EDIT_VISIBLE_WITHIN,
        "a new hand-written file",
        || get_agent(&stack, "hand-made"),
        |r| description_is(r, "First draft."),
    )
    .await
    .expect("served");
    assert_eq!(custom_spec(&first).tool_allowlist, ["ask_user"]);

    std::fs::write(&path, hand_written_yaml("hand-made", "Second draft.")).expect("edit by hand");
    let second = until(
        EDIT_VISIBLE_WITHIN,
        "a hand edit",
        || get_agent(&stack, "hand-made"),
        |r| description_is(r, "Second draft."),
    )
    .await
    .expect("served");
    assert_ne!(
        second.version, first.version,
        "a hand edit gives a new version"
    );

    std::fs::remove_file(&path).expect("delete by hand");
    until(
        EDIT_VISIBLE_WITHIN,
        "a hand delete",
        || get_agent(&stack, "hand-made"),
        is_not_found,
    )
    .await
    .expect_err("gone");
}

#[tokio::test]
async fn a_custom_directory_removed_and_made_again_is_watched_again() {
    let stack = spawn_registry().await.expect("stack starts");
    let custom = stack.custom_dir();
    // What `git checkout` of a branch without custom agents, and back, does to the directory.
    std::fs::remove_dir_all(&custom).expect("custom/ removed");
    std::fs::create_dir(&custom).expect("custom/ made again");
    std::fs::write(
        custom.join("restored.yaml"),
        hand_written_yaml("restored", "Back."),
    )
    .expect("write by hand");
    until(
        EDIT_VISIBLE_WITHIN,
        "a file in the re-made directory",
        || get_agent(&stack, "restored"),
        |r| description_is(r, "Back."),
    )
    .await
    .expect("served");
    // Edits after that are seen as quickly as before (not at the next full reconcile).
    std::fs::write(
        custom.join("restored.yaml"),
        hand_written_yaml("restored", "Edited."),
    )
    .expect("edit by hand");
    until(
        EDIT_VISIBLE_WITHIN,
        "an edit in the re-made directory",
        || get_agent(&stack, "restored"),
        |r| description_is(r, "Edited."),
    )
    .await
    .expect("served");
}

#[tokio::test]
async fn invalid_files_are_skipped_and_listed_as_diagnostics_while_the_rest_keeps_serving() {
    let stack = spawn_stack().await.expect("stack starts");
    let custom = stack.custom_dir();
    let broken = custom.join("broken-syntax.yaml");
    std::fs::write(&broken, "name: [unclosed\ndescription: {\n").expect("write");
    std::fs::write(
        custom.join("wrong-types.yaml"),
        "name:\n  nested: map\ndescription: 42\nprompt: just a string\ntools:\n  allowlist: file_read\n",
    )
    .expect("write");
    std::fs::write(
        custom.join("Bad_Name.yaml"),
        hand_written_yaml("Bad_Name", "Id breaks the rule."),
    )
    .expect("write");
    std::fs::write(
        custom.join("unknown-tool.yaml"),
        hand_written_yaml("unknown-tool", "Names a tool nobody offers.")
            .replace("ask_user", "foo_tool"),
    )
    .expect("write");

    let wanted = [
        "custom/broken-syntax.yaml",
        "custom/wrong-types.yaml",
        "custom/Bad_Name.yaml",
        "custom/unknown-tool.yaml",
    ];
    let found = until(
        EDIT_VISIBLE_WITHIN,
        "diagnostics of the invalid files",
        || diagnostics(&stack),
        |d| wanted.iter().all(|w| d.contains_key(*w)),
    )
    .await;
    for w in wanted {
        assert!(!found[w].is_empty(), "{w} has an empty reason");
    }

    for id in ["broken-syntax", "wrong-types", "unknown-tool"] {
        let got = get_agent(&stack, id).await;
        assert!(
            is_refused_as_invalid(&got, &format!("custom/{id}.yaml")),
            "{id} is served though invalid, or not said to be: {got:?}"
        );
    }
    let ids: Vec<String> = grpc_list_all(&stack, AgentSource::Unspecified)
        .await
        .into_iter()
        .map(|a| a.agent_id)
        .collect();
    assert_eq!(
        ids, SAMPLE_IDS,
        "invalid files are skipped, the rest is listed"
    );

    let r = send(stack.http().get(stack.url("/api/v1/diagnostics"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let rest: BTreeMap<String, String> = r.body["diagnostics"]
        .as_array()
        .expect("diagnostics is an array")
        .iter()
        .map(|d| {
            let path = d["path"].as_str().expect("path").to_owned();
            let error = d["error"].as_str().expect("error").to_owned();
            (path, error)
        })
        .collect();
    for w in wanted {
        assert!(
            rest.contains_key(w),
            "REST diagnostics lack {w}: {}",
            r.text
        );
    }
    let r = send(stack.http().get(stack.url("/api/v1/agents"))).await;
    assert_eq!(
        r.body["agents"].as_array().map(Vec::len),
        Some(SAMPLE_IDS.len()),
        "{}",
        r.text
    );
    assert_eq!(
        create(&stack, &agent_json("still-writable")).await.status,
        201
    );

    std::fs::write(
        &broken,
        hand_written_yaml("broken-syntax", "Fixed by hand."),
    )
    .expect("fix by hand");
    until(
        EDIT_VISIBLE_WITHIN,
        "the fixed file",
        || get_agent(&stack, "broken-syntax"),
        |r| description_is(r, "Fixed by hand."),
    )
    .await
    .expect("served");
    std::fs::remove_file(custom.join("wrong-types.yaml")).expect("delete");
    until(
        EDIT_VISIBLE_WITHIN,
        "diagnostics without the fixed and deleted files",
        || diagnostics(&stack),
        |d| {
            !d.contains_key("custom/broken-syntax.yaml")
                && !d.contains_key("custom/wrong-types.yaml")
        },
    )
    .await;
}

#[tokio::test]
async fn a_served_agent_broken_by_hand_disappears_until_fixed() {
    let stack = spawn_registry().await.expect("stack starts");
    let path = stack.custom_dir().join("invoice-extractor.yaml");
    let good = std::fs::read_to_string(&path).expect("seed file");
    std::fs::write(
        &path,
        good.replace("tools:\n  allowlist:", "tools:\n  allowlist: ["),
    )
    .expect("break");
    until(
        EDIT_VISIBLE_WITHIN,
        "the broken seed",
        || get_agent(&stack, "invoice-extractor"),
        |r| is_refused_as_invalid(r, "custom/invoice-extractor.yaml"),
    )
    .await
    .expect_err("not served");
    assert!(
        diagnostics(&stack)
            .await
            .contains_key("custom/invoice-extractor.yaml")
    );
    std::fs::write(&path, &good).expect("repair");
    until(
        EDIT_VISIBLE_WITHIN,
        "the repaired seed",
        || get_agent(&stack, "invoice-extractor"),
        Result::is_ok,
    )
    .await
    .expect("served again");
}

#[tokio::test]
async fn hand_edits_of_profiles_are_picked_up() {
    let stack = spawn_registry().await.expect("stack starts");
    let dev = stack.config_dir().join("dev.yaml");
    let text = std::fs::read_to_string(&dev).expect("dev.yaml");
    std::fs::write(
        &dev,
        text.replace("specialist: generic", "specialist: coding"),
    )
    .expect("edit");
    until(
        EDIT_VISIBLE_WITHIN,
        "the edited profile",
        || get_agent(&stack, "dev"),
        |r| matches!(r, Ok(v1::Agent { kind: Some(Kind::Profile(p)), .. }) if p.specialist == "coding"),
    )
    .await
    .expect("served");

    std::fs::write(
        stack.config_dir().join("ops.yaml"),
        "profile: ops\ndescription: Operations.\nspecialist: generic\n",
    )
    .expect("new profile");
    let ops = until(
        EDIT_VISIBLE_WITHIN,
        "a new profile",
        || get_agent(&stack, "ops"),
        Result::is_ok,
    )
    .await
    .expect("served");
    assert_eq!(ops.source(), AgentSource::Profile);
    assert!(
        is_not_found(&get_agent(&stack, "llm_config").await),
        "llm_config.yaml is never a profile"
    );
}

#[tokio::test]
async fn changes_made_while_the_registry_is_down_are_reconciled_on_start() {
    let mut stack = spawn_registry().await.expect("stack starts");
    let before: BTreeMap<String, String> = grpc_list_all(&stack, AgentSource::Unspecified)
        .await
        .into_iter()
        .map(|a| (a.agent_id, a.version))
        .collect();
    stack.stop().await.expect("graceful stop");

    let custom = stack.custom_dir();
    std::fs::write(
        custom.join("offline-made.yaml"),
        hand_written_yaml("offline-made", "Made offline."),
    )
    .expect("write");
    let invoice = custom.join("invoice-extractor.yaml");
    let text = std::fs::read_to_string(&invoice).expect("seed");
    std::fs::write(
        &invoice,
        text.replace("Invoice Extractor", "Invoice Extractor v2"),
    )
    .expect("edit");
    std::fs::remove_file(custom.join("time-keeper.yaml")).expect("delete");

    stack.restart().await.expect("registry starts");
    let after: BTreeMap<String, v1::Agent> = grpc_list_all(&stack, AgentSource::Unspecified)
        .await
        .into_iter()
        .map(|a| (a.agent_id.clone(), a))
        .collect();
    let ids: Vec<&str> = after.keys().map(String::as_str).collect();
    assert_eq!(
        ids,
        ["dev", "invoice-extractor", "m365-assistant", "offline-made"],
        "the stale cache was not reconciled"
    );
    assert_eq!(
        custom_spec(&after["invoice-extractor"]).name,
        "Invoice Extractor v2"
    );
    assert_ne!(
        after["invoice-extractor"].version,
        before["invoice-extractor"]
    );
    assert_eq!(
        after["dev"].version, before["dev"],
        "untouched files keep their version"
    );
    let r = json!(custom_spec(&after["offline-made"]).description);
    assert_eq!(r, "Made offline.");
}

#[tokio::test]
async fn an_alias_bomb_and_a_huge_file_are_skipped_with_diagnostics_and_memory_stays_flat() {
    let stack = spawn_stack().await.expect("stack starts");
    let pid = stack.registry_pid().expect("the registry runs");
    let before = rss_mib(pid);
    let custom = stack.custom_dir();
    // "Billion laughs": nine levels of nine aliases each, 9^9 strings if expanded.
    let mut bomb = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for pair in names.windows(2) {
        let (prev, next) = (pair[0], pair[1]);
        let refs = vec![format!("*{prev}"); 9].join(",");
        bomb.push_str(&format!("{next}: &{next} [{refs}]\n"));
    }
    bomb.push_str("name: *i\ndescription: boom\n");
    std::fs::write(custom.join("alias-bomb.yaml"), bomb).expect("write");
    // 64 MiB of a valid-looking definition.
    let mut huge = hand_written_yaml("huge-file", "Too big to read.");
    huge.push_str("# ");
    huge.push_str(&"x".repeat(64 * 1024 * 1024));
    huge.push('\n');
    std::fs::write(custom.join("huge-file.yaml"), huge).expect("write");

    let found = until(
        EDIT_VISIBLE_WITHIN,
        "diagnostics of the bomb and the huge file",
        || diagnostics(&stack),
        |d| d.contains_key("custom/alias-bomb.yaml") && d.contains_key("custom/huge-file.yaml"),
    )
    .await;
    assert!(
        found["custom/huge-file.yaml"].contains("larger than"),
        "{found:?}"
    );
    assert!(is_refused_as_invalid(
        &get_agent(&stack, "alias-bomb").await,
        "custom/alias-bomb.yaml"
    ));
    assert!(is_refused_as_invalid(
        &get_agent(&stack, "huge-file").await,
        "larger than"
    ));
    // The rest keeps serving, and the registry did not swallow either file.
    assert!(get_agent(&stack, SAMPLE_IDS[0]).await.is_ok());
    let after = rss_mib(pid);
    assert!(
        after < before + 32,
        "registry RSS grew from {before} MiB to {after} MiB"
    );
}

#[tokio::test]
async fn an_idle_registry_does_not_keep_reading_its_files() {
    let stack = spawn_registry().await.expect("stack starts");
    for i in 0..300 {
        let id = format!("idle-{i:03}");
        std::fs::write(
            stack.custom_dir().join(format!("{id}.yaml")),
            hand_written_yaml(&id, "Left alone."),
        )
        .expect("write by hand");
    }
    until(
        EDIT_VISIBLE_WITHIN * 4,
        "300 hand-written agents",
        || async { grpc_list_all(&stack, AgentSource::Custom).await.len() },
        |&n| n >= 300,
    )
    .await;
    // Reading a file raises a watcher event too; reacting to those would reconcile every file
    // again and again (it once kept a core busy with 10,000 agents). Idle means idle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = stack.registry_pid().expect("registry runs");
    let before = taskforce_tests::process::cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let used = taskforce_tests::process::cpu_ticks(pid) - before;
    assert!(
        used < 30,
        "an idle registry used {used} ticks (1/100 s) of CPU in 3 s\n{}",
        stack.logs()
    );
}

/// `workspace_id` of a REST agent body, checked to be a UUID (8-4-4-4-12 lowercase hex).
fn workspace_id_of(reply: &Reply) -> String {
    let w = reply.body["workspace_id"].as_str().unwrap_or_default();
    let groups: Vec<usize> = w.split('-').map(str::len).collect();
    assert!(
        groups == [8, 4, 4, 4, 12]
            && w.chars()
                .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)),
        "workspace_id is a UUID: {}",
        reply.text
    );
    w.to_owned()
}

#[tokio::test]
async fn a_copied_agent_file_gets_a_workspace_id_of_its_own_and_the_original_keeps_its() {
    let mut stack = spawn_stack().await.expect("stack starts");
    let r = create(&stack, &agent_json("release-notes")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let original = workspace_id_of(&r);

    // Agents are reviewable YAML: a new one is made by copying a file and changing its id.
    let custom = stack.custom_dir();
    let text = std::fs::read_to_string(custom.join("release-notes.yaml")).expect("API's file");
    assert!(text.contains(&original), "the file holds the id:\n{text}");
    let copy_path = custom.join("release-notes-v2.yaml");
    std::fs::write(
        &copy_path,
        text.replace("agent_id: release-notes\n", "agent_id: release-notes-v2\n"),
    )
    .expect("copy");
    let copy = until(
        EDIT_VISIBLE_WITHIN,
        "the copied agent",
        || get(&stack, "release-notes-v2"),
        |r| r.status == 200,
    )
    .await;
    let own = workspace_id_of(&copy);
    assert_ne!(own, original, "two agents, two workspaces");
    assert_eq!(
        workspace_id_of(&get(&stack, "release-notes").await),
        original,
        "the original keeps its workspace"
    );
    assert!(
        std::fs::read_to_string(&copy_path)
            .expect("copy")
            .contains(&original),
        "the registry does not rewrite the user's file"
    );

    // The same after a restart: nothing in the files or the cache moves it.
    stack.restart().await.expect("registry restarts");
    for (id, want) in [("release-notes", &original), ("release-notes-v2", &own)] {
        let r = until(
            Duration::from_secs(10),
            "the agents after a restart",
            || get(&stack, id),
            |r| r.status == 200,
        )
        .await;
        assert_eq!(&workspace_id_of(&r), want, "{id} after a restart");
    }

    // An update of the copy (its GET body PUT back) writes the copy's own workspace id.
    let before = get(&stack, "release-notes-v2").await;
    let mut body = before.body.clone();
    body["description"] = json!("Copied, then changed.");
    let r = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/release-notes-v2"))
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(workspace_id_of(&r), own);
    let written = read_yaml(&copy_path);
    assert_eq!(written["workspace_id"].as_str(), Some(own.as_str()));
    assert_eq!(
        workspace_id_of(&get(&stack, "release-notes").await),
        original
    );
}
