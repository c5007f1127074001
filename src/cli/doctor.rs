//! `switchboard doctor`: each part checked as the gateway would use it: the config, the
//! data dir and store, the workspace, the model provider, and each enabled channel's
//! token, asked of its platform with one cheap call (`getMe`, `users/@me`, `auth.test`, and
//! `apps.connections.open` for Slack's app token when one is set).

use std::path::Path;
use std::time::Duration;

use anyhow::bail;
use serde_json::Value;

use super::admin_client::Target;
use crate::agent::tools::net::is_public;
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
    match &loaded.path {
        Some(p) => report(true, "config", p.display().to_string()),
        None => report(
            true,
            "config",
            format!(
                "built-in defaults: no config.toml found in {} (name one with --config or \
                 $SWITCHBOARD_CONFIG)",
                std::env::current_dir().unwrap_or_default().display()
            ),
        ),
    }
    for w in &loaded.warnings {
        // Worth reading, not a failure: the gateway runs with them.
        out!("warn config: {w}");
    }
    // Nothing is made here: a doctor run in the wrong folder must not leave a data dir
    // (the other commands would then find an empty store instead of saying there is none).
    let (data, ws) = (&c.gateway.data_dir, &c.gateway.workspace);
    if data.is_dir() {
        report(tempfile_in(data), "data dir", data.display().to_string());
        if data.join("store").exists() {
            match Target::find(c).await {
                Ok(Target::Remote { .. }) => {
                    report(true, "store", "a gateway is running and answering".into())
                }
                Ok(Target::Local(_)) => report(true, "store", "opens".into()),
                Err(e) => report(false, "store", format!("{e:#}")),
            }
        } else {
            report(true, "store", "none yet: made at the first `run`".into());
        }
    } else {
        report_missing(&mut report, "data dir", data);
        report(true, "store", "none yet: made at the first `run`".into());
    }
    if ws.is_dir() {
        report(true, "workspace", ws.display().to_string());
    } else {
        report_missing(&mut report, "workspace", ws);
    }
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
    } else if key.is_none() && on_this_network(base) {
        out!(
            "ok   llm key: ${} is not set (fine for a local server)",
            c.llm.api_key_env
        );
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
                if name == "slack" && secret(&ch.slack.app_token_env).is_some() {
                    let (ok, detail) = match check_slack_app_token(&http, c).await {
                        Ok(()) => (true, "Slack accepts it (apps.connections.open)".to_string()),
                        Err(why) => (false, why),
                    };
                    report(ok, "slack app token", detail);
                }
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

/// A folder `run` makes: fine if it can be made (its nearest existing parent is a folder
/// this user may write to).
fn report_missing(report: &mut impl FnMut(bool, &str, String), what: &str, dir: &Path) {
    let parent = dir.ancestors().skip(1).find(|a| a.exists());
    match parent {
        Some(p) if p.is_dir() && tempfile_in(p) => report(
            true,
            what,
            format!(
                "{} does not exist yet: made at the first `run`",
                dir.display()
            ),
        ),
        Some(p) => report(
            false,
            what,
            format!(
                "{} does not exist, and cannot be made in {}",
                dir.display(),
                p.display()
            ),
        ),
        None => report(false, what, format!("{} cannot be made", dir.display())),
    }
}

/// Whether the model server at `base` is on this machine or its network (loopback,
/// private, link-local or carrier-grade NAT address as Tailscale's, `localhost`, a name
/// without a dot as a Docker Compose service's, `.local`, `.lan`, `.internal`, `.home.arpa`),
/// where a server without a key (Ollama, vLLM) is usual; a hosted one needs a key.
fn on_this_network(base: &str) -> bool {
    let Ok(url) = url::Url::parse(base) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            !d.contains('.')
                || [".localhost", ".local", ".lan", ".internal", ".home.arpa"]
                    .iter()
                    .any(|end| d.ends_with(end))
        }
        Some(url::Host::Ipv4(ip)) => !is_public(ip.into()),
        Some(url::Host::Ipv6(ip)) => !is_public(ip.into()),
        None => false,
    }
}

fn tempfile_in(dir: &Path) -> bool {
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

/// Ask Slack whether it takes the app token, as Socket Mode does at start
/// (`apps.connections.open`; the connection it offers is never opened): why not, in words
/// with Slack's error code and the variable's name, never the token.
async fn check_slack_app_token(http: &reqwest::Client, c: &Config) -> Result<(), String> {
    let s = &c.channels.slack;
    let base = s.api_url.trim_end_matches('/');
    let resp = http
        .post(format!("{base}/apps.connections.open"))
        .bearer_auth(secret(&s.app_token_env).unwrap_or_default())
        .send()
        .await
        .map_err(|e| {
            let e = crate::llm::openai::with_causes(e.without_url());
            format!("{base} unreachable: {}", switchboard_channel::redact(&e))
        })?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or_default();
    if body["ok"] == true {
        return Ok(());
    }
    let code = match body["error"].as_str() {
        Some(code) => code.chars().take(100).collect(),
        None => format!("HTTP {}", status.as_u16()),
    };
    let events_api = if secret(&s.signing_secret_env).is_some() {
        format!(
            "; until it is fixed, events come only over the Events API (${})",
            s.signing_secret_env
        )
    } else {
        String::new()
    };
    Err(format!(
        "Slack refused the app token in ${} ({code}){events_api}",
        s.app_token_env
    ))
}

#[cfg(test)]
mod tests {
    use super::{key_probe, on_this_network};

    #[test]
    fn a_server_on_this_machine_or_network_may_go_without_a_key() {
        for local in [
            "http://127.0.0.1:11434/v1",
            "http://localhost:11434/v1",
            "http://LocalHost./v1",
            "http://ollama.localhost/v1",
            "http://10.0.0.5:8000/v1",
            "http://192.168.1.20/v1",
            "http://172.16.0.1/v1",
            "http://169.254.10.10/v1",
            "http://[::1]:11434/v1",
            "http://[fd00::5]/v1",
            "http://[fe80::1]/v1",
            "http://[::ffff:127.0.0.1]/v1",
            "http://ollama:11434/v1",
            "http://host.docker.internal:11434/v1",
            "http://gpu-box.local:8000/v1",
            "http://100.101.102.103:11434/v1",
        ] {
            assert!(on_this_network(local), "{local}");
        }
        for hosted in [
            "https://api.openai.com/v1",
            "https://openrouter.ai/api/v1",
            "http://8.8.8.8/v1",
            "http://172.32.0.1/v1",
            "http://100.128.0.1/v1",
            "http://[2606:4700::1111]/v1",
            "http://localhost.example.com/v1",
            "not a url",
        ] {
            assert!(!on_this_network(hosted), "{hosted}");
        }
    }

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
