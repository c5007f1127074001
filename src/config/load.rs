//! Loading `config.toml`: parse, warn on unknown keys, deserialize with key paths, validate,
//! and resolve relative paths against the config file's folder.

use std::path::{Path, PathBuf};

use super::Config;

/// A configuration that loaded, with the warnings worth showing.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// Unknown keys and other non-fatal findings, each naming its key path.
    pub warnings: Vec<String>,
    /// The file it came from, when it came from a file.
    pub path: Option<PathBuf>,
}

/// Why a configuration could not be used. The message names the key path.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file is not valid TOML: {0}")]
    Syntax(String),
    /// A value is wrong; the string starts with the key path.
    #[error("{0}")]
    Invalid(String),
}

/// Load and validate a config file; relative paths resolve against its folder.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let base = path
        .parent()
        .map(Path::to_path_buf)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."));
    let mut loaded = load_str(&text, &base)?;
    loaded.path = Some(path.to_path_buf());
    Ok(loaded)
}

/// Load and validate config text; relative paths resolve against `base`.
pub fn load_str(text: &str, base: &Path) -> Result<Loaded, ConfigError> {
    let value: toml::Value = text
        .parse::<toml::Table>()
        .map(toml::Value::Table)
        .map_err(|e| ConfigError::Syntax(syntax_error(text, &e)))?;
    let known = toml::Value::try_from(Config::default()).expect("default config serializes");
    let mut warnings = Vec::new();
    unknown_keys(&value, &known, "", &mut warnings);

    let llm_keys: Vec<String> = value
        .get("llm")
        .and_then(toml::Value::as_table)
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default();
    let mut config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        ConfigError::Invalid(format!("{path}: {}", friendly(&e.into_inner().to_string())))
    })?;
    provider_defaults(&mut config.llm, &llm_keys);
    validate(&config, &mut warnings)?;
    resolve_paths(&mut config, base);
    super::places::check(&config)?;
    Ok(Loaded {
        config,
        warnings,
        path: None,
    })
}

/// With `provider = "anthropic"`, the `llm` keys left out default to Anthropic's address,
/// key variable and a small model of theirs, not OpenAI's (`given`: the keys the file sets).
fn provider_defaults(llm: &mut crate::config::LlmConfig, given: &[String]) {
    if llm.provider != crate::config::Provider::Anthropic {
        return;
    }
    let unset = |key: &str| !given.iter().any(|k| k == key);
    if unset("base_url") {
        llm.base_url = ANTHROPIC_URL.into();
    }
    if unset("api_key_env") {
        llm.api_key_env = "ANTHROPIC_API_KEY".into();
    }
    if unset("model") {
        llm.model = "claude-haiku-4-5".into();
    }
}

/// Anthropic's API address, the default `llm.base_url` with `provider = "anthropic"`.
const ANTHROPIC_URL: &str = "https://api.anthropic.com";

/// Turn serde's wording into what a person editing a TOML file understands.
/// Where and what, without the line itself: it may hold a secret pasted in the wrong place
/// (`api_key_env = sk-…`), and this goes to the terminal and the service's log.
fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim();
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            format!("line {line}, column {column}: {msg}")
        }
        None => msg.to_string(),
    }
}

fn friendly(msg: &str) -> String {
    // toml ends a custom error with a line naming the key, which the caller already leads
    // with: "expected a duration …\nin `heartbeat.interval`".
    let msg = match msg.trim().rsplit_once('\n') {
        Some((head, tail)) if tail.starts_with("in `") => head.trim(),
        _ => msg.trim(),
    };
    // "invalid value: integer `-1`, expected u32": a number of the right kind, out of range.
    if let Some(rest) = msg.strip_prefix("invalid value: integer ") {
        if msg.contains("expected u") {
            let got = rest.split(',').next().unwrap_or_default().trim_matches('`');
            return format!(
                "expected a non-negative integer small enough for this setting (got {got})"
            );
        }
    }
    for (pat, say) in [
        ("expected u32", "expected an integer"),
        ("expected u64", "expected an integer"),
        ("expected usize", "expected an integer"),
        ("expected i64", "expected an integer"),
        ("expected a boolean", "expected true or false"),
        ("expected a string", "expected a string"),
        ("expected a sequence", "expected a list"),
        // A section written as a value (`agent = 5`): serde names the Rust type.
        ("expected struct ", "expected a table (a [section])"),
    ] {
        if msg.contains(pat) {
            let got = msg
                .strip_prefix("invalid type: ")
                .and_then(|r| r.split(", expected").next())
                .map(|g| format!(" (got {g})"))
                .unwrap_or_default();
            return format!("{say}{got}");
        }
    }
    msg.to_string()
}

fn unknown_keys(value: &toml::Value, known: &toml::Value, prefix: &str, out: &mut Vec<String>) {
    let (Some(table), Some(known_table)) = (value.as_table(), known.as_table()) else {
        return;
    };
    for (key, v) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match known_table.get(key) {
            Some(k) => unknown_keys(v, k, &path, out),
            // `token = "123:AA…"` where `token_env` is meant: a secret written into the file.
            None if known_table.contains_key(&format!("{key}_env")) => out.push(format!(
                "unknown config key `{path}` is ignored: secrets are read only from the \
                 environment; put it in an environment variable and name that in `{path}_env` \
                 (and remove it from the file)"
            )),
            None => {
                let suggestion = closest(key, known_table.keys().map(String::as_str));
                let hint = suggestion
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                out.push(format!("unknown config key `{path}` is ignored{hint}"));
            }
        }
    }
}

/// The closest candidate within a small edit distance.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let word_l = word.to_lowercase();
    candidates
        .map(|c| (edit_distance(&word_l, &c.to_lowercase()), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Most turns at once `gateway.max_concurrent_turns` may allow (far more than any machine
/// runs; the limit keeps an absurd value from failing at start-up instead of here).
const MAX_TURNS: usize = 100_000;

fn invalid(path: &str, msg: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("{path}: {msg}"))
}

fn validate(c: &Config, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    let g = &c.gateway;
    // "" would be the config file's own folder: the agent's files next to the config and
    // the store's files.
    for (key, path) in [
        ("gateway.data_dir", &g.data_dir),
        ("gateway.workspace", &g.workspace),
    ] {
        if path.as_os_str().is_empty() {
            return Err(invalid(key, "must not be empty (a folder, like \"data\")"));
        }
    }
    if !g.http_listen.trim().is_empty() && g.http_addr().is_none() {
        return Err(invalid(
            "gateway.http_listen",
            format!(
                "expected an address like \"127.0.0.1:8080\", \"localhost:8080\" or \"\" \
                 (HTTP off), got {:?}",
                g.http_listen
            ),
        ));
    }
    if !(1..=MAX_TURNS).contains(&g.max_concurrent_turns) {
        return Err(invalid(
            "gateway.max_concurrent_turns",
            format!("must be between 1 and {MAX_TURNS}"),
        ));
    }
    check_timezone("gateway.timezone", &g.timezone)?;
    let a = &c.agent;
    if a.max_iterations == 0 {
        return Err(invalid("agent.max_iterations", "must be at least 1"));
    }
    if a.history_messages == 0 {
        return Err(invalid("agent.history_messages", "must be at least 1"));
    }
    if a.tool_timeout.get().is_zero() {
        return Err(invalid("agent.tool_timeout", "must be longer than 0s"));
    }
    if a.name.trim().is_empty() {
        return Err(invalid("agent.name", "must not be empty"));
    }
    let l = &c.llm;
    check_url("llm.base_url", &l.base_url)?;
    // `provider = "anthropic"` alone would send Messages API requests to OpenAI.
    if l.provider == crate::config::Provider::Anthropic && l.base_url.contains("api.openai.com") {
        return Err(invalid(
            "llm.base_url",
            format!(
                "{:?} is OpenAI's; with provider = \"anthropic\" set base_url = \"{ANTHROPIC_URL}\" or leave it out (and api_key_env and model: Anthropic's are taken when left out)",
                l.base_url
            ),
        ));
    }
    // One company's key sent to the other's server: a secret handed to a third party.
    let (key_of_openai, key_of_anthropic) = (
        l.api_key_env == "OPENAI_API_KEY",
        l.api_key_env == "ANTHROPIC_API_KEY",
    );
    if (l.base_url.contains("anthropic.com") && key_of_openai)
        || (l.base_url.contains("openai.com") && key_of_anthropic)
    {
        return Err(invalid(
            "llm.api_key_env",
            format!(
                "{:?} is where the other provider's key is usually kept, and it would be sent to this one; name the variable holding this provider's key (e.g. {:?})",
                l.api_key_env,
                if key_of_openai {
                    "ANTHROPIC_API_KEY"
                } else {
                    "OPENAI_API_KEY"
                }
            ),
        ));
    }
    if l.model.trim().is_empty() {
        return Err(invalid("llm.model", "must not be empty"));
    }
    if let Some(i) = l.fallback_models.iter().position(|m| m.trim().is_empty()) {
        return Err(invalid(
            &format!("llm.fallback_models[{i}]"),
            "must be a model name",
        ));
    }
    if l.max_tokens == 0 {
        return Err(invalid("llm.max_tokens", "must be at least 1"));
    }
    if l.context_window <= l.max_tokens {
        return Err(invalid(
            "llm.context_window",
            format!("must be larger than llm.max_tokens ({})", l.max_tokens),
        ));
    }
    if l.request_timeout.get().is_zero() {
        return Err(invalid("llm.request_timeout", "must be longer than 0s"));
    }
    check_url("channels.telegram.api_url", &c.channels.telegram.api_url)?;
    check_url("channels.discord.api_url", &c.channels.discord.api_url)?;
    check_url("channels.slack.api_url", &c.channels.slack.api_url)?;
    check_url("agent.web_search_url", &c.agent.web_search_url)?;
    for (name, len, max) in [
        (
            "telegram",
            c.channels.telegram.max_message_len,
            switchboard_channel::TELEGRAM_MAX_MESSAGE_LEN,
        ),
        (
            "discord",
            c.channels.discord.max_message_len,
            switchboard_channel::DISCORD_MAX_MESSAGE_LEN,
        ),
        (
            "slack",
            c.channels.slack.max_message_len,
            switchboard_channel::SLACK_MAX_MESSAGE_LEN,
        ),
    ] {
        let min = switchboard_channel::MIN_MESSAGE_LEN;
        if !(min..=max).contains(&len) {
            return Err(invalid(
                &format!("channels.{name}.max_message_len"),
                format!("must be between {min} and {max} (the platform's limit), got {len}"),
            ));
        }
    }
    for (name, list) in [
        ("telegram", &c.channels.telegram.allow_from),
        ("discord", &c.channels.discord.allow_from),
        ("slack", &c.channels.slack.allow_from),
    ] {
        if let Some(i) = list
            .iter()
            .position(|s| s.trim().is_empty() || s.trim() == "@")
        {
            return Err(invalid(
                &format!("channels.{name}.allow_from[{i}]"),
                "must be a user id, a username or \"*\"",
            ));
        }
    }
    // Those listed are owners. A Slack name is not unique across organisations (a Slack
    // Connect guest may carry the same one) and can change: worth a warning.
    for (i, entry) in c.channels.slack.allow_from.iter().enumerate() {
        let e = entry.trim();
        if e != "*" && !crate::access::id_like(e) {
            warnings.push(format!(
                "channels.slack.allow_from[{i}]: {e:?} is a name; Slack names can change and \
                 are not unique across organisations (Slack Connect), so list member ids \
                 (U…, from the profile's ⋮ menu: Copy member ID) instead"
            ));
        }
    }
    let h = &c.heartbeat;
    if h.interval.get() < std::time::Duration::from_secs(1) {
        return Err(invalid("heartbeat.interval", "must be at least 1s"));
    }
    let target = match h.target.as_str() {
        "last" => None,
        t => {
            let key: switchboard_channel::ChatKey = t.parse().map_err(|_| {
                invalid(
                    "heartbeat.target",
                    format!(
                        "expected \"last\" or a chat key like \"telegram:123456\", got {:?}",
                        h.target
                    ),
                )
            })?;
            crate::channels::check_chat_id(&key).map_err(|why| invalid("heartbeat.target", why))?;
            Some(key)
        }
    };
    match target {
        None => {}
        // Such a chat gets only the answers to its own requests: a beat is kept in its
        // history, not pushed.
        Some(key) if crate::channels::answers_only(&key) => {
            warnings.push(format!(
                "heartbeat.target: {:?} only gets the answers to its own requests, so what a \
                 heartbeat says there is kept in its history, not pushed; use \"last\" or a \
                 Telegram, Discord or Slack chat key to be told",
                h.target
            ));
        }
        // A warning, not an error: a program embedding the gateway may add its own channels.
        Some(key) if !crate::channels::built_in().contains(&key.channel.as_str()) => {
            let known = crate::channels::built_in();
            let hint = closest(&key.channel, known.iter().copied())
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            warnings.push(format!(
                "heartbeat.target: this build has no channel named {:?}{hint}, so beats there \
                 reach nobody; channels: {}",
                key.channel,
                known.join(", ")
            ));
        }
        Some(key) if h.enabled && crate::channels::switched_off(c, &key.channel) => {
            warnings.push(format!(
                "heartbeat.target: channels.{}.enabled is off, so no heartbeat is sent until \
                 it is on",
                key.channel
            ));
        }
        Some(_) => {}
    }
    if !h.active_hours.trim().is_empty() && parse_active_hours(&h.active_hours).is_none() {
        return Err(invalid(
            "heartbeat.active_hours",
            format!(
                "expected \"HH:MM-HH:MM\" like \"08:00-22:00\", got {:?}",
                h.active_hours
            ),
        ));
    }
    for (key, name) in [
        ("llm.api_key_env", &l.api_key_env),
        ("agent.web_search_key_env", &c.agent.web_search_key_env),
        (
            "channels.telegram.token_env",
            &c.channels.telegram.token_env,
        ),
        ("channels.discord.token_env", &c.channels.discord.token_env),
        (
            "channels.slack.bot_token_env",
            &c.channels.slack.bot_token_env,
        ),
        (
            "channels.slack.app_token_env",
            &c.channels.slack.app_token_env,
        ),
        (
            "channels.slack.signing_secret_env",
            &c.channels.slack.signing_secret_env,
        ),
    ] {
        check_env_name(key, name)?;
    }
    if l.api_key_env.trim().is_empty() {
        warnings.push("llm.api_key_env is empty: requests go out without an API key".into());
    }
    Ok(())
}

/// Whether a would-be variable name looks like an API key pasted in its place: a known
/// key prefix (`gsk_`, `hf_`, `sk_`…) on a long value, or a long run of letters and digits
/// with lowercase and no `_` between words, which variable names people write do not have.
fn looks_like_a_key(name: &str) -> bool {
    const PREFIXES: [&str; 8] = [
        "gsk_",
        "hf_",
        "sk_",
        "ghp_",
        "gho_",
        "github_pat_",
        "xox",
        "AIza",
    ];
    let lower = name.chars().any(|c| c.is_ascii_lowercase());
    let digit = name.chars().any(|c| c.is_ascii_digit());
    let prefixed = name.len() >= 20 && PREFIXES.iter().any(|p| name.starts_with(p));
    prefixed || (name.len() >= 24 && lower && digit && !name.contains('_'))
}

/// A `*_env` key holds the name of an environment variable ("" for none), never the secret:
/// a token pasted there is refused without being repeated.
fn check_env_name(key: &str, name: &str) -> Result<(), ConfigError> {
    let mut chars = name.chars();
    let valid = match chars.next() {
        None => true,
        Some(first) => {
            (first.is_ascii_alphabetic() || first == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
    };
    if valid && looks_like_a_key(name) {
        Err(invalid(
            key,
            "looks like a key itself, not the name of the environment variable that holds \
             it (not repeated here); put the key in a variable like \"OPENAI_API_KEY\" and \
             name that variable",
        ))
    } else if valid {
        Ok(())
    } else {
        Err(invalid(
            key,
            "must name an environment variable (letters, digits and _), like \"OPENAI_API_KEY\"; \
             put the secret itself in that variable",
        ))
    }
}

/// Parse `"08:00-22:00"` into minutes since midnight (start, end). End may be before start
/// (a window across midnight).
pub fn parse_active_hours(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once('-')?;
    let hm = |t: &str| -> Option<u32> {
        let (h, m) = t.trim().split_once(':')?;
        let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
        (h <= 24 && m < 60 && h * 60 + m <= 24 * 60).then_some(h * 60 + m)
    };
    Some((hm(a)?, hm(b)?))
}

/// Refuse an unknown IANA timezone, suggesting the closest name.
pub fn check_timezone(path: &str, tz: &str) -> Result<chrono_tz::Tz, ConfigError> {
    if tz.trim().is_empty() {
        return Err(invalid(
            path,
            "must not be empty: an IANA name like \"Europe/Berlin\" or \"UTC\"",
        ));
    }
    tz.parse::<chrono_tz::Tz>().map_err(|_| {
        let hint = closest(tz, chrono_tz::TZ_VARIANTS.iter().map(|t| t.name()))
            .map(|s| format!(" (did you mean {s:?}?)"))
            .unwrap_or_default();
        invalid(path, format!("unknown timezone {tz:?}{hint}"))
    })
}

fn check_url(path: &str, s: &str) -> Result<(), ConfigError> {
    match url::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(()),
        _ => Err(invalid(path, format!("expected an http(s) URL, got {s:?}"))),
    }
}

fn resolve_paths(c: &mut Config, base: &Path) {
    let abs = |p: &mut PathBuf| {
        if p.is_relative() {
            *p = base.join(&*p);
        }
    };
    abs(&mut c.gateway.data_dir);
    abs(&mut c.gateway.workspace);
    for d in &mut c.gateway.skills_dirs {
        abs(d);
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
