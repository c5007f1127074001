//! Built-in tools through the real `Agent` and the fake LLM: argument validation,
//! workspace confinement, the `exec` deny list and environment, `web_fetch` SSRF checks,
//! the tools offered.

mod agent_support;

use agent_support::*;
use serde_json::json;
use switchboard_fakes::llm::Reply;

#[tokio::test]
async fn invalid_arguments_are_returned_to_the_model() {
    let h = Harness::new().await;
    h.llm.push(Reply::calls([
        switchboard_fakes::llm::ToolCall::new("exec", json!({})),
        switchboard_fakes::llm::ToolCall::new("exec", json!({"command": 5})),
        switchboard_fakes::llm::ToolCall::new("memory", json!({"action": "forget"})),
        switchboard_fakes::llm::ToolCall::new("exec", json!({"command": "ls", "timeout_secs": 0})),
        switchboard_fakes::llm::ToolCall::new(
            "exec",
            json!({"command": "ls", "timeout_secs": 99999}),
        ),
        switchboard_fakes::llm::ToolCall::raw("read_file", "{not json"),
        switchboard_fakes::llm::ToolCall::new("no_such_tool", json!({})),
    ]));
    h.llm.push(Reply::text("sorry"));
    turn(&h.agent(), &h.store, msg("t:1", "go")).await;
    let results = tool_results(&h.llm.requests()[1].body);
    assert_eq!(
        results[0],
        "error: invalid arguments: missing required command"
    );
    assert_eq!(
        results[1],
        "error: invalid arguments: command: expected string, got integer"
    );
    assert!(
        results[2].starts_with(
            "error: invalid arguments: action: must be one of \"remember\", \"recall\""
        ),
        "{}",
        results[2]
    );
    assert_eq!(
        results[3],
        "error: invalid arguments: timeout_secs: must be >= 1, got 0"
    );
    assert_eq!(
        results[4],
        "error: invalid arguments: timeout_secs: must be <= 600, got 99999"
    );
    assert!(
        results[5].starts_with("error: invalid arguments: arguments are not valid JSON"),
        "{}",
        results[5]
    );
    assert!(
        results[6].starts_with("error: unknown tool no_such_tool"),
        "{}",
        results[6]
    );
    // The broken call goes back in the history as an object holding its text: some
    // servers refuse a history holding arguments that are not a JSON object.
    let sent: Vec<String> = h.llm.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["function"]["arguments"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent.len(), 7);
    assert_eq!(sent[5], r#"{"unparsed_arguments":"{not json"}"#);
    assert_eq!(sent[1], r#"{"command":5}"#);
}

#[tokio::test]
async fn a_call_cut_off_by_the_output_limit_is_not_run_and_the_model_is_told_why() {
    let h = Harness::new().await;
    let cut = r#"{"path":"story.md","content":"Once upon a time, in a land far"#;
    h.llm
        .push(Reply::calls([switchboard_fakes::llm::ToolCall::raw("write_file", cut)]).truncated());
    h.llm.push(Reply::text("I will write it in parts."));
    let out = turn(&h.agent(), &h.store, msg("t:1", "write me a long story")).await;
    assert_eq!(out.replies[0].text, "I will write it in parts.");
    assert!(!h.workspace().join("story.md").exists());
    let second = &h.llm.requests()[1].body;
    let results = tool_results(second);
    assert_eq!(results.len(), 1);
    assert!(
        results[0].contains("cut off by the output token limit")
            && results[0].contains("smaller pieces"),
        "{}",
        results[0]
    );
    assert!(!results[0].contains("not valid JSON"), "{}", results[0]);
    // The history shows what the model sent, not `{}`.
    let call = messages(second)
        .iter()
        .find_map(|m| m["tool_calls"].get(0).cloned())
        .unwrap();
    let sent: serde_json::Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(sent, json!({"unparsed_arguments": cut}));
    // Stored as the model wrote it.
    let s = stored_session(&h.store);
    assert_eq!(
        s["messages"][1]["tool_calls"][0]["arguments"],
        serde_json::Value::from(cut)
    );
}

#[tokio::test]
async fn path_and_symlink_escapes_are_refused() {
    let h = Harness::new().await;
    let outside = h.dir.path().join("secret.txt");
    std::fs::write(&outside, "top secret").unwrap();
    std::os::unix::fs::symlink(&outside, h.workspace().join("link.txt")).unwrap();
    std::os::unix::fs::symlink(h.dir.path(), h.workspace().join("updir")).unwrap();
    // A symlink to a file outside that does not exist yet: writing through it would create it.
    let planted = h.dir.path().join("planted.txt");
    std::os::unix::fs::symlink(&planted, h.workspace().join("dangling")).unwrap();
    h.llm.push(Reply::tool_calls([
        ("read_file", json!({"path": "../secret.txt"})),
        ("read_file", json!({"path": outside.to_str().unwrap()})),
        ("read_file", json!({"path": "link.txt"})),
        (
            "write_file",
            json!({"path": "updir/new.txt", "content": "x"}),
        ),
        ("list_dir", json!({"path": "updir"})),
        (
            "write_file",
            json!({"path": "inside/ok.txt", "content": "fine"}),
        ),
        ("write_file", json!({"path": "dangling", "content": "x"})),
    ]));
    h.llm.push(Reply::text("done"));
    turn(&h.agent(), &h.store, msg("t:1", "go")).await;
    let results = tool_results(&h.llm.requests()[1].body);
    for r in &results[..5] {
        assert!(
            r.starts_with("error: refused:") && r.contains("outside the workspace"),
            "{r}"
        );
    }
    assert!(!results.iter().any(|r| r.contains("top secret")));
    assert!(!h.dir.path().join("new.txt").exists());
    assert!(results[5].starts_with("wrote 4 bytes"), "{}", results[5]);
    assert!(results[6].starts_with("error: refused:"), "{}", results[6]);
    assert!(!planted.exists(), "written through a dangling symlink");
}

#[tokio::test]
async fn edit_file_replaces_exactly_one_occurrence() {
    let h = Harness::new().await;
    std::fs::write(h.workspace().join("notes.md"), "aaa then b").unwrap();
    h.llm.push(Reply::tool_calls([
        // `aa` is in `aaa` twice (overlapping): ambiguous, nothing changes.
        (
            "edit_file",
            json!({"path": "notes.md", "old_text": "aa", "new_text": "x"}),
        ),
        (
            "edit_file",
            json!({"path": "notes.md", "old_text": "zz", "new_text": "x"}),
        ),
        (
            "edit_file",
            json!({"path": "notes.md", "old_text": "b", "new_text": "c"}),
        ),
    ]));
    h.llm.push(Reply::text("done"));
    turn(&h.agent(), &h.store, msg("t:1", "go")).await;
    let results = tool_results(&h.llm.requests()[1].body);
    assert!(results[0].contains("occurs 2 times"), "{}", results[0]);
    assert!(results[1].contains("not found"), "{}", results[1]);
    assert_eq!(results[2], "edited notes.md");
    assert_eq!(
        std::fs::read_to_string(h.workspace().join("notes.md")).unwrap(),
        "aaa then c"
    );
}

#[tokio::test]
async fn exec_runs_in_the_workspace_without_secrets_and_denies_destructive_commands() {
    let h = Harness::new().await;
    // cargo sets CARGO_MANIFEST_DIR for the test process: a stand-in for a gateway secret.
    let secret = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    std::fs::write(h.workspace().join("a.txt"), "x").unwrap();
    h.llm.push(Reply::tool_calls([
        (
            "exec",
            json!({"command": "ls; echo token=$CARGO_MANIFEST_DIR"}),
        ),
        // Refused by name; harmless should the deny list ever let them through.
        ("exec", json!({"command": "shred --version"})),
        ("exec", json!({"command": "sh -c 'wipefs --version'"})),
        ("exec", json!({"command": "echo \"rm -rf /\""})),
        ("exec", json!({"command": "sleep 5", "timeout_secs": 1})),
    ]));
    h.llm.push(Reply::text("done"));
    // A bystander process: the timeout must end only the command's own process group.
    let mut bystander = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    turn(&h.agent(), &h.store, msg("t:1", "go")).await;
    assert!(
        bystander.try_wait().unwrap().is_none(),
        "the exec timeout killed a process outside its group"
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
    let r = tool_results(&h.llm.requests()[1].body);
    assert_eq!(r[0], "exit code: 0\nstdout:\na.txt\ntoken=\n");
    assert!(!r[0].contains(&secret));
    assert!(
        r[1].starts_with("error: refused: command not allowed"),
        "{}",
        r[1]
    );
    assert!(
        r[2].starts_with("error: refused: command not allowed"),
        "{}",
        r[2]
    );
    assert_eq!(r[3], "exit code: 0\nstdout:\nrm -rf /\n");
    assert_eq!(r[4], "error: command timed out after 1s (killed)");
}

#[tokio::test]
async fn web_fetch_refuses_private_targets_even_after_redirects() {
    use axum::{Router, response::Redirect, routing::get};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route(
            "/page",
            get(|| async { axum::response::Html("<h1>Hi</h1><p>there &amp; back</p>") }),
        )
        .route(
            "/to-metadata",
            get(|| async { Redirect::temporary("http://169.254.169.254/latest/meta-data/") }),
        )
        .route(
            "/to-loopback",
            get(|| async { Redirect::temporary("http://127.0.0.1:1/") }),
        )
        .route(
            "/to-localhost",
            get(|| async { Redirect::temporary("http://localhost:9/") }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let h = Harness::new().await;
    h.llm.push(Reply::tool_calls([
        ("web_fetch", json!({"url": "http://127.0.0.1:8080/"})),
        (
            "web_fetch",
            json!({"url": "http://169.254.169.254/latest/meta-data/"}),
        ),
        (
            "web_fetch",
            json!({"url": format!("http://{addr}/to-metadata")}),
        ),
        (
            "web_fetch",
            json!({"url": format!("http://{addr}/to-loopback")}),
        ),
        (
            "web_fetch",
            json!({"url": format!("http://{addr}/to-localhost")}),
        ),
        ("web_fetch", json!({"url": "http://[::ffff:127.0.0.1]/"})),
        ("web_fetch", json!({"url": "file:///etc/passwd"})),
        ("web_fetch", json!({"url": format!("http://{addr}/page")})),
    ]));
    h.llm.push(Reply::text("done"));
    let agent = h.agent().with_fetch_allowed(addr);
    turn(&agent, &h.store, msg("t:1", "go")).await;
    let r = tool_results(&h.llm.requests()[1].body);
    for (i, res) in r[..7].iter().enumerate() {
        assert!(res.starts_with("error: refused:"), "{i}: {res}");
    }
    assert!(r[2].contains("169.254.169.254"));
    assert_eq!(r[7], "Hi\n\nthere & back");
}

#[tokio::test]
async fn every_tool_of_the_contract_is_offered_and_web_search_can_be_turned_off() {
    let h = Harness::new().await;
    turn(&h.agent(), &h.store, msg("t:1", "hi")).await;
    let mut names = h.llm.requests()[0].tool_names();
    names.sort();
    for tool in [
        "edit_file",
        "exec",
        "list_dir",
        "memory",
        "read_file",
        "read_skill",
        "web_fetch",
        "web_search",
        "write_file",
    ] {
        assert!(names.iter().any(|n| n == tool), "{tool} not in {names:?}");
    }
    let h = Harness::with(|c| c.agent.web_search_key_env = String::new()).await;
    turn(&h.agent(), &h.store, msg("t:1", "hi")).await;
    let names = h.llm.requests()[0].tool_names();
    assert!(!names.iter().any(|n| n == "web_search"), "{names:?}");
    assert!(names.iter().any(|n| n == "web_fetch"), "{names:?}");
}
