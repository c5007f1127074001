//! Tests of config loading and validation.

use super::*;

fn err(text: &str) -> String {
    load_str(text, Path::new("/base")).unwrap_err().to_string()
}

#[test]
fn defaults_load_and_paths_resolve() {
    let l = load_str("", Path::new("/etc/sb")).unwrap();
    assert_eq!(l.config.gateway.data_dir, PathBuf::from("/etc/sb/data"));
    assert!(l.warnings.is_empty());
}

#[test]
fn http_listen_takes_an_address_or_a_host_name_with_a_port() {
    let addr = |v: &str| {
        load_str(&format!("[gateway]\nhttp_listen = {v:?}"), Path::new("/b"))
            .map(|l| l.config.gateway.http_addr())
    };
    assert_eq!(
        addr("[::1]:8080").unwrap(),
        Some("[::1]:8080".parse().unwrap())
    );
    assert_eq!(
        addr("localhost:8080").unwrap(),
        Some("127.0.0.1:8080".parse().unwrap())
    );
    assert_eq!(addr("").unwrap(), None);
    for bad in [
        "localhost",
        "localhost:http",
        "localhost:70000",
        ":8080",
        "8080",
    ] {
        let e = addr(bad).unwrap_err().to_string();
        assert!(e.starts_with("gateway.http_listen: expected"), "{bad}: {e}");
    }
}

#[test]
fn each_invalid_class_names_the_key_path() {
    let cases = [
        (
            "[agent]\nmax_iterations = \"x\"",
            "agent.max_iterations: expected an integer",
        ),
        ("[agent]\nmax_iterations = -1", "agent.max_iterations"),
        (
            "[agent]\nmax_iterations = 0",
            "agent.max_iterations: must be at least 1",
        ),
        (
            "[agent]\ntool_timeout = \"soon\"",
            "agent.tool_timeout: expected a duration",
        ),
        (
            "[llm]\nprovider = \"gemini\"",
            "llm.provider: unknown variant",
        ),
        (
            "[gateway]\ntimezone = \"Europe/Berln\"",
            "gateway.timezone: unknown timezone \"Europe/Berln\" (did you mean \"Europe/Berlin\"?)",
        ),
        ("[gateway]\nhttp_listen = \"nope\"", "gateway.http_listen"),
        (
            "[channels.telegram]\ndm_policy = \"everyone\"",
            "channels.telegram.dm_policy: unknown variant",
        ),
        (
            "[channels.slack]\nreply_in_thread = \"yes\"",
            "channels.slack.reply_in_thread: expected true or false",
        ),
        (
            "[heartbeat]\nactive_hours = \"8-22\"",
            "heartbeat.active_hours",
        ),
        ("[heartbeat]\ntarget = \"nowhere\"", "heartbeat.target"),
        (
            "[heartbeat]\ntarget = \"telegram:@alice\"",
            "heartbeat.target: `telegram:@alice` is not a chat of telegram: a key is telegram:<chat id>",
        ),
        ("[llm]\nbase_url = \"ftp://x\"", "llm.base_url"),
        (
            "agent = 5",
            "agent: expected a table (a [section]) (got integer `5`)",
        ),
        (
            "[llm]\nprovider = \"anthropic\"\nbase_url = \"https://api.openai.com/v1\"",
            "llm.base_url: \"https://api.openai.com/v1\" is OpenAI's; with provider = \"anthropic\"",
        ),
        (
            "[llm]\nprovider = \"anthropic\"\napi_key_env = \"OPENAI_API_KEY\"",
            "llm.api_key_env: \"OPENAI_API_KEY\" is where the other provider's key is usually kept",
        ),
        (
            "[llm]\nbase_url = \"https://api.anthropic.com/v1\"",
            "llm.api_key_env: \"OPENAI_API_KEY\" is where the other provider's key is usually kept",
        ),
        (
            "[llm]\napi_key_env = \"ANTHROPIC_API_KEY\"",
            "llm.api_key_env: \"ANTHROPIC_API_KEY\" is where the other provider's key is usually kept",
        ),
        (
            "[channels.discord]\nallow_from = [\"\"]",
            "channels.discord.allow_from[0]",
        ),
    ];
    for (text, want) in cases {
        let e = err(text);
        assert!(
            e.starts_with(want) || e.contains(want),
            "{text:?} gave {e:?}"
        );
    }
}

#[test]
fn anthropic_left_at_its_defaults_gets_anthropics_not_openais() {
    let l = load_str("[llm]\nprovider = \"anthropic\"", Path::new(".")).unwrap();
    let llm = &l.config.llm;
    assert_eq!(llm.base_url, "https://api.anthropic.com");
    assert_eq!(llm.api_key_env, "ANTHROPIC_API_KEY");
    assert_eq!(llm.model, "claude-haiku-4-5");
    // What the file sets is kept.
    let text = "[llm]\nprovider = \"anthropic\"\nbase_url = \"http://127.0.0.1:9\"\n\
                api_key_env = \"MY_KEY\"\nmodel = \"claude-opus-4-1\"";
    let l = load_str(text, Path::new(".")).unwrap();
    let llm = &l.config.llm;
    assert_eq!(
        (
            llm.base_url.as_str(),
            llm.api_key_env.as_str(),
            llm.model.as_str()
        ),
        ("http://127.0.0.1:9", "MY_KEY", "claude-opus-4-1")
    );
    // A proxy speaking Anthropic's protocol may take any variable, OpenAI's too.
    let proxy = "[llm]\nprovider = \"anthropic\"\nbase_url = \"http://localhost:4000\"\n\
                 api_key_env = \"OPENAI_API_KEY\"";
    assert!(load_str(proxy, Path::new(".")).is_ok());
    // OpenAI's defaults stay OpenAI's.
    let l = load_str("[llm]\nmodel = \"gpt-4.1\"", Path::new(".")).unwrap();
    assert_eq!(l.config.llm.base_url, "https://api.openai.com/v1");
    assert_eq!(l.config.llm.api_key_env, "OPENAI_API_KEY");
}

#[test]
fn unknown_keys_warn_with_a_suggestion() {
    let l = load_str("[agent]\nmax_iteration = 5\n[extra]\nx = 1", Path::new(".")).unwrap();
    assert_eq!(l.config.agent.max_iterations, 20);
    assert!(
        l.warnings
            .iter()
            .any(|w| w.contains("`agent.max_iteration`")
                && w.contains("did you mean `max_iterations`")),
        "{:?}",
        l.warnings
    );
    assert!(l.warnings.iter().any(|w| w.contains("`extra`")));
}

#[test]
fn a_secret_written_into_the_file_is_pointed_at_its_env_key() {
    let l = load_str(
        "[channels.telegram]\ntoken = \"123456:AAsecret\"\n[llm]\napi_key = \"sk-secret\"",
        Path::new("."),
    )
    .unwrap();
    for key in ["channels.telegram.token", "llm.api_key"] {
        assert!(
            l.warnings.iter().any(|w| w.contains(&format!(
                "`{key}` is ignored: secrets are read only from the environment; put it in \
                 an environment variable and name that in `{key}_env`"
            ))),
            "{:?}",
            l.warnings
        );
    }
    // The value itself is never repeated.
    assert!(
        !l.warnings
            .iter()
            .any(|w| w.contains("sk-secret") || w.contains("AAsecret"))
    );
}

#[test]
fn syntax_errors_are_reported_without_repeating_the_line() {
    assert!(err("[agent\n").starts_with("config file is not valid TOML"));
    // Unquoted, so not TOML: the line may hold a secret pasted in the wrong place.
    let e = err("[llm]\napi_key_env = sk-abcdef123456\n");
    assert!(e.contains("line 2, column"), "{e}");
    assert!(!e.contains("abcdef"), "{e}");
}

#[test]
fn a_key_pasted_as_a_variable_name_is_refused_without_repeating_it() {
    for key in [
        "gsk_4fQk9ZPz7Yx2Lm8Nb3Vc6Xd1",
        "hf_AbCdEfGhIjKlMnOpQrStUv",
        "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9",
        "f0123456789abcdef0123456789abcdef012",
    ] {
        let e = err(&format!("[llm]\napi_key_env = \"{key}\"\n"));
        assert!(
            e.contains("llm.api_key_env: looks like a key itself"),
            "{e}"
        );
        assert!(!e.contains(&key[..8]), "{e}");
    }
    for name in [
        "OPENAI_API_KEY",
        "GROQ_API_KEY",
        "my_key",
        "TELEGRAM_BOT_TOKEN_2",
    ] {
        let text = format!("[llm]\napi_key_env = \"{name}\"\n");
        assert!(load_str(&text, Path::new("/base")).is_ok(), "{name}");
    }
}

#[test]
fn a_heartbeat_target_on_an_unknown_channel_warns_and_a_huge_turn_limit_is_refused() {
    let l = load_str(
        "[heartbeat]\ntarget = \"telegarm:123456\"\n",
        Path::new("/b"),
    )
    .unwrap();
    assert!(
        l.warnings.iter().any(|w| w.starts_with(
            "heartbeat.target: this build has no channel named \"telegarm\" (did you mean `telegram`?)"
        )),
        "{:?}",
        l.warnings
    );
    // A Slack owner listed by name: a warning (ids are unique, names are not).
    let l = load_str(
        "[channels.slack]\nallow_from = [\"U0123ABCD\", \"alice\"]\n",
        Path::new("/b"),
    )
    .unwrap();
    let named: Vec<_> = l
        .warnings
        .iter()
        .filter(|w| w.starts_with("channels.slack.allow_from["))
        .collect();
    assert_eq!(named.len(), 1, "{:?}", l.warnings);
    assert!(named[0].starts_with("channels.slack.allow_from[1]: \"alice\" is a name"));
    // A chat of a channel the config leaves off: no beat goes out, which the owner is told.
    let l = load_str(
        "[heartbeat]\nenabled = true\ntarget = \"discord:123\"\n[channels.discord]\nenabled = false\n",
        Path::new("/b"),
    )
    .unwrap();
    assert!(
        l.warnings.iter().any(|w| w
            == "heartbeat.target: channels.discord.enabled is off, so no heartbeat is sent until it is on"),
        "{:?}",
        l.warnings
    );
    // An API chat's beats are kept in its history, not pushed: allowed, with a warning.
    let l = load_str("[heartbeat]\ntarget = \"api:default\"\n", Path::new("/b")).unwrap();
    assert!(
        l.warnings.iter().any(|w| w.starts_with(
            "heartbeat.target: \"api:default\" only gets the answers to its own requests"
        )),
        "{:?}",
        l.warnings
    );
    let e = err("[gateway]\nmax_concurrent_turns = 9223372036854775807\n");
    assert!(
        e.contains("gateway.max_concurrent_turns: must be between 1 and 100000"),
        "{e}"
    );
}

/// A data dir the agent's tools reach (`exec base64 data/admin.token`) is refused while
/// they are confined to the workspace; side by side, or the workspace in the data dir, is
/// fine.
#[test]
fn a_data_dir_in_the_workspace_is_refused_while_the_agent_is_confined_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let load = |text: &str| load_str(text, base).map(|_| ()).map_err(|e| e.to_string());
    std::fs::create_dir(base.join("ws")).unwrap();
    std::os::unix::fs::symlink(base.join("ws"), base.join("linked")).unwrap();
    for (data, ws) in [
        ("ws/data", "ws"),
        ("ws", "ws"),
        ("ws/", "./ws"),
        ("new/../ws/data", "ws"),
        ("linked/data", "ws"),
        ("ws/data", "linked"),
        ("data", "."),
    ] {
        let text = format!("[gateway]\ndata_dir = {data:?}\nworkspace = {ws:?}");
        let e = load(&text).unwrap_err();
        assert!(
            e.starts_with("gateway.data_dir: ")
                && e.contains("the workspace")
                && e.contains("side by side"),
            "{text}: {e}"
        );
    }
    let e = load("[gateway]\ndata_dir = \"data\"\nworkspace = \"data/store/ws\"").unwrap_err();
    assert!(e.starts_with("gateway.workspace: "), "{e}");
    for (data, ws) in [
        ("data", "workspace"),
        ("/srv/sb", "/srv/sb-workspace"),
        ("data", "data/workspace"),
    ] {
        let text = format!("[gateway]\ndata_dir = {data:?}\nworkspace = {ws:?}");
        assert_eq!(load(&text), Ok(()), "{text}");
    }
    // Not confined, the tools reach the data dir wherever it is.
    let free = "[gateway]\ndata_dir = \"ws/data\"\nworkspace = \"ws\"\n\
                [agent]\nrestrict_to_workspace = false";
    assert_eq!(load(free), Ok(()));
}

#[test]
fn a_data_dir_or_workspace_that_is_a_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("afile"), "x").unwrap();
    for key in ["data_dir", "workspace"] {
        let text = format!("[gateway]\n{key} = \"afile\"");
        let e = load_str(&text, dir.path())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("gateway.{key}: "))
                && e.ends_with("afile is a file, not a folder"),
            "{e}"
        );
    }
}
