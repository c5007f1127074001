//! `switchboard doctor`: each part checked as the gateway would use it: the config, the
//! data dir and store, the workspace, the model provider, and each enabled channel's
//! token, asked of its platform with one cheap call (`getMe`, `users/@me`, `auth.test`).

use std::time::Duration;

use anyhow::bail;
use serde_json::Value;

use super::admin_client::Target;
use crate::config::{Config, Loaded, secret};

pub async fn doctor(loaded: &Loaded) -> anyhow::Result<()> {
    let c = &loaded.config;
    let mut problems = 0;
    let mut report = |ok: bool, what: &str, detail: String| {
        out!("{} {what}: {detail}", if ok { "ok  " } else { "FAIL" });
        if !ok {
            problems += 1;
        }
    };
    report(
        true,
        "config",
        loaded
            .path
            .as_ref()
            .map_or("built-in defaults".into(), |p| p.display().to_string()),
    );
    for w in &loaded.warnings {
        // Worth reading, not a failure: the gateway runs with them.
        out!("warn config: {w}");
    }
    let data_ok =
        std::fs::create_dir_all(&c.gateway.data_dir).is_ok() && tempfile_in(&c.gateway.data_dir);
    report(
        data_ok,
        "data dir",
        c.gateway.data_dir.display().to_string(),
    );
    match Target::find(c).await {
        Ok(Target::Remote { .. }) => {
            report(true, "store", "a gateway is running and answering".into())
        }
        Ok(Target::Local(_)) => report(true, "store", "opens".into()),
        Err(e) => report(false, "store", format!("{e:#}")),
    }
    let ws_ok = std::fs::create_dir_all(&c.gateway.workspace).is_ok();
    report(
        ws_ok,
        "workspace",
        c.gateway.workspace.display().to_string(),
    );
    let key = secret(&c.llm.api_key_env);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let base = c.llm.base_url.trim_end_matches('/');
    let rb = match c.llm.provider {
        crate::config::Provider::Openai => {
            let rb = http.get(format!("{base}/{}", key_probe(base)));
            match &key {
                Some(k) => rb.bearer_auth(k),
                None => rb,
            }
        }
        // Found as the Messages API is (the base with or without /v1), with its version
        // header.
        crate::config::Provider::Anthropic => crate::llm::anthropic::with_headers(
            http.get(crate::llm::anthropic::endpoint(base, "models")),
            key.as_deref(),
        ),
    };
    match rb.send().await {
        Ok(r) if r.status().is_success() => {
            report(true, "llm", format!("{} answers", c.llm.base_url))
        }
        Ok(r) => report(
            false,
            "llm",
            format!("{} answered HTTP {}", c.llm.base_url, r.status().as_u16()),
        ),
        Err(e) => report(
            false,
            "llm",
            format!(
                "{} unreachable: {}",
                c.llm.base_url,
                crate::llm::openai::with_causes(e)
            ),
        ),
    }
    if c.llm.api_key_env.trim().is_empty() {
        out!("ok   llm key: none (llm.api_key_env is empty, as for a local Ollama)");
    } else if key.is_none() {
        report(
            false,
            "llm key",
            format!("${} is not set", c.llm.api_key_env),
        );
    }
    let ch = &c.channels;
    let unset = |var: &str| secret(var).is_none().then(|| format!("${var} is not set"));
    for (name, enabled, missing) in [
        (
            "telegram",
            ch.telegram.enabled,
            unset(&ch.telegram.token_env),
        ),
        ("discord", ch.discord.enabled, unset(&ch.discord.token_env)),
        (
            "slack",
            ch.slack.enabled,
            ch.slack
                .missing_credentials(c.gateway.http_addr().is_some()),
        ),
    ] {
        match (enabled, missing) {
            (false, _) => out!("off  {name}: disabled in the config"),
            (true, None) => {
                let (ok, detail) = match check_credentials(&http, c, name).await {
                    Ok(who) => (true, format!("the platform accepts the token ({who})")),
                    Err(why) => (false, why),
                };
                report(ok, name, detail);
            }
            (true, Some(why)) => out!("off  {name}: {why}, so the channel stays off"),
        }
    }
    if problems > 0 {
        bail!("{problems} problem(s) found");
    }
    Ok(())
}

/// What to ask an OpenAI-compatible provider so that a wrong key shows: `models` needs the
/// key at OpenAI and most others, but OpenRouter lists its models to anyone, so there the
/// key's own record (`GET /key`, 401 for a key it does not know) is asked for instead.
fn key_probe(base: &str) -> &'static str {
    let host = base
        .split("://")
        .nth(1)
        .unwrap_or(base)
        .split(['/', ':'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if host == "openrouter.ai" || host.ends_with(".openrouter.ai") {
        "key"
    } else {
        "models"
    }
}

fn tempfile_in(dir: &std::path::Path) -> bool {
    let p = dir.join(".doctor-write-test");
    let ok = std::fs::write(&p, b"ok").is_ok();
    let _ = std::fs::remove_file(&p);
    ok
}

/// Ask `channel`'s platform who its token belongs to: the bot's name, or why not (never the
/// token, nor a URL holding it).
async fn check_credentials(
    http: &reqwest::Client,
    c: &Config,
    channel: &str,
) -> Result<String, String> {
    let ch = &c.channels;
    let token = |var: &str| secret(var).unwrap_or_default();
    let (url, rb) = match channel {
        "telegram" => {
            let base = ch.telegram.api_url.trim_end_matches('/');
            let t = token(&ch.telegram.token_env);
            (base.to_string(), http.get(format!("{base}/bot{t}/getMe")))
        }
        "discord" => {
            let base = ch.discord.api_url.trim_end_matches('/');
            let t = token(&ch.discord.token_env);
            let rb = http
                .get(format!("{base}/api/v10/users/@me"))
                .header("Authorization", format!("Bot {t}"));
            (base.to_string(), rb)
        }
        _ => {
            let base = ch.slack.api_url.trim_end_matches('/');
            let rb = http
                .post(format!("{base}/auth.test"))
                .bearer_auth(token(&ch.slack.bot_token_env));
            (base.to_string(), rb)
        }
    };
    let resp = rb.send().await.map_err(|e| {
        let e = crate::llm::openai::with_causes(e.without_url());
        format!("{url} unreachable: {}", switchboard_channel::redact(&e))
    })?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or_default();
    let name = |v: &Value| v.as_str().map(str::to_string);
    match channel {
        "telegram" if body["ok"] == true => {
            Ok(name(&body["result"]["username"]).map_or("a bot".into(), |n| format!("@{n}")))
        }
        "discord" if status.is_success() => {
            Ok(name(&body["username"]).unwrap_or_else(|| "a bot".into()))
        }
        "slack" if body["ok"] == true => Ok(format!(
            "{} in {}",
            name(&body["user"]).unwrap_or_else(|| "a bot".into()),
            name(&body["team"]).unwrap_or_else(|| "its workspace".into())
        )),
        "slack" => Err(format!(
            "Slack refused the bot token ({})",
            name(&body["error"]).unwrap_or_else(|| format!("HTTP {}", status.as_u16()))
        )),
        _ if matches!(status.as_u16(), 401 | 403 | 404) => Err(format!(
            "the platform refused the token (HTTP {})",
            status.as_u16()
        )),
        _ => Err(format!("{url} answered HTTP {}", status.as_u16())),
    }
}

#[cfg(test)]
mod tests {
    use super::key_probe;

    #[test]
    fn openrouter_is_asked_about_its_key_not_its_public_model_list() {
        assert_eq!(key_probe("https://openrouter.ai/api/v1"), "key");
        assert_eq!(key_probe("https://OpenRouter.ai:443/api/v1"), "key");
        assert_eq!(key_probe("https://eu.openrouter.ai/api/v1"), "key");
        assert_eq!(key_probe("https://api.openai.com/v1"), "models");
        assert_eq!(key_probe("http://127.0.0.1:11434/v1"), "models");
        assert_eq!(key_probe("https://notopenrouter.ai/v1"), "models");
    }
}
