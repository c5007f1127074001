//! The CLI commands' bodies.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use switchboard_channel::ChatKey;
use tokio_util::sync::CancellationToken;

use super::admin_client::Target;
use super::show::field;
use super::{CronAction, PairingAction, SessionsAction};
use crate::agent::session::Session;
use crate::channels::PLATFORMS;
use crate::config::Loaded;
use crate::gateway;
use crate::pairing;
use crate::store::Batch;

pub async fn run(loaded: &Loaded) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    super::chat::cancel_on_signals(shutdown.clone());
    if let Some(p) = &loaded.path {
        tracing::info!("config: {}", p.display());
    } else {
        tracing::info!("config: built-in defaults (no config.toml found)");
    }
    gateway::run(loaded, shutdown).await?;
    Ok(())
}

pub fn config_check(loaded: &Loaded) -> anyhow::Result<()> {
    match &loaded.path {
        Some(p) => out!("config OK: {}", p.display()),
        None => out!("config OK: built-in defaults (no config file found)"),
    }
    for w in &loaded.warnings {
        out!("warning: {w}");
    }
    Ok(())
}

/// The channels a chat key may name (stored by any build): the platforms, the HTTP API and
/// the terminal.
const CHAT_CHANNELS: [&str; 5] = [PLATFORMS[0], PLATFORMS[1], PLATFORMS[2], "api", "cli"];

/// `name` (any case) if it is one of `known`; else an error naming it (and where it was
/// given, `place`), with the closest known name when one is near (`telegramm`), or the list.
fn known_channel(name: &str, place: &str, known: &[&'static str]) -> anyhow::Result<String> {
    let lower = name.trim().to_ascii_lowercase();
    if known.contains(&lower.as_str()) {
        return Ok(lower);
    }
    let hint = match crate::config::closest(&lower, known.iter().copied()) {
        Some(c) => format!("did you mean \"{c}\"?"),
        None => format!("one of {}", known.join(", ")),
    };
    bail!("unknown channel \"{}\"{place} ({hint})", field(name))
}

/// A session's key, refused when its channel is none a chat can be on.
fn chat_key(key: &str) -> anyhow::Result<ChatKey> {
    let parsed: ChatKey = key.parse()?;
    let place = format!(" in {}", field(key));
    known_channel(&parsed.channel, &place, &CHAT_CHANNELS)?;
    Ok(parsed)
}

/// A sender as the pairing commands show it: `Alice @alice (5555)`, the username being
/// what `revoke` takes besides the id. Each part comes from a stranger (see `show`).
fn sender(v: &Value) -> String {
    let f = |v: &Value| field(v.as_str().unwrap_or("")).into_owned();
    let user = v["username"]
        .as_str()
        .filter(|u| !u.is_empty())
        .map(|u| format!(" @{}", field(u.trim_start_matches('@'))))
        .unwrap_or_default();
    format!("{}{user} ({})", f(&v["display_name"]), f(&v["sender_id"]))
}

pub async fn pairing(loaded: &Loaded, action: PairingAction) -> anyhow::Result<()> {
    let action = match action {
        PairingAction::Approve { channel, code } => PairingAction::Approve {
            channel: known_channel(&channel, "", &PLATFORMS)?,
            code,
        },
        PairingAction::Revoke { channel, user } => PairingAction::Revoke {
            channel: known_channel(&channel, "", &PLATFORMS)?,
            user,
        },
        list => list,
    };
    let target = Target::find_existing(&loaded.config).await?;
    match action {
        PairingAction::List => {
            let (pending, approved): (Value, Value) = match &target {
                Target::Remote { .. } => {
                    let v = target.get("/admin/pairing").await?;
                    (v["pending"].clone(), v["approved"].clone())
                }
                Target::Local(store) => {
                    let (p, a) = pairing::list(store.as_ref())?;
                    (json!(p), json!(a))
                }
            };
            // Names come from strangers: each stays on its line (see `show`).
            let f = |v: &Value| field(v.as_str().unwrap_or("")).into_owned();
            // When a code runs out, as `cron list` shows times: in the gateway's timezone.
            let until = |v: &Value| match v
                .as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            {
                Some(t) => crate::scheduler::local(&t.to_utc(), loaded.config.gateway.tz()),
                None => f(v),
            };
            out!("pending:");
            for p in pending.as_array().into_iter().flatten() {
                out!(
                    "  {} {} from {} until {}",
                    f(&p["channel"]),
                    f(&p["code"]),
                    sender(p),
                    until(&p["expires_at"])
                );
            }
            out!("approved:");
            for a in approved.as_array().into_iter().flatten() {
                out!("  {} {}", f(&a["channel"]), sender(a));
            }
        }
        PairingAction::Approve { channel, code } => {
            let who = match &target {
                Target::Remote { .. } => {
                    target
                        .post(
                            "/admin/pairing/approve",
                            json!({"channel": channel, "code": code}),
                        )
                        .await?
                }
                Target::Local(store) => {
                    json!(pairing::approve(store.as_ref(), &channel, &code).await?)
                }
            };
            out!("approved {} on {channel}", sender(&who));
            match &target {
                Target::Remote { .. } if who["chat"].is_string() => {
                    out!("(told in their chat that they are in)");
                }
                Target::Local(_) => {
                    out!("(not told: no gateway is running; they are answered when they write)");
                }
                _ => {}
            }
        }
        PairingAction::Revoke { channel, user } => {
            let who = match &target {
                Target::Remote { .. } => {
                    target
                        .post(
                            "/admin/pairing/revoke",
                            json!({"channel": channel, "user": user}),
                        )
                        .await?
                }
                Target::Local(store) => {
                    json!(pairing::revoke(store.as_ref(), &channel, &user).await?)
                }
            };
            // Who it was (a name may have matched): the id, as approve says it.
            out!("revoked {} on {channel}", sender(&who));
        }
    }
    Ok(())
}

pub async fn sessions(loaded: &Loaded, action: SessionsAction) -> anyhow::Result<()> {
    // The key is checked before the store is looked for: a typo is told as such.
    let (key, reset) = match &action {
        SessionsAction::List => (None, false),
        SessionsAction::Show { key } => (Some(chat_key(key)?), false),
        SessionsAction::Reset { key } => (Some(chat_key(key)?), true),
    };
    let target = Target::find_existing(&loaded.config).await?;
    let Some(key) = key else {
        for (k, n) in session_keys(&target).await? {
            out!("{}\t{n} messages", field(&k));
        }
        return Ok(());
    };
    let session: Value = match &target {
        Target::Remote { .. } => {
            target
                .get(&format!(
                    "/admin/session?key={}",
                    urlencode(&key.to_string())
                ))
                .await?
        }
        Target::Local(store) => json!(Session::load(store.as_ref(), &key)?),
    };
    let messages = session["messages"].as_array().filter(|m| !m.is_empty());
    let empty = session["summary"].is_null() && messages.is_none();
    if reset {
        if empty {
            bail!("no session {}: nothing to reset", field(&key.to_string()));
        }
        match &target {
            Target::Remote { .. } => {
                target
                    .delete(&format!(
                        "/admin/session?key={}",
                        urlencode(&key.to_string())
                    ))
                    .await?;
            }
            Target::Local(store) => {
                let mut b = Batch::default();
                Session::reset(&key, &mut b);
                store.commit(b).await?;
            }
        }
        out!("reset {key}");
        return Ok(());
    }
    if let Some(s) = session["summary"].as_str() {
        out!("[summary] {s}\n");
    }
    if empty {
        out!("no messages in {key}");
    }
    // A message's own lines are kept; its control characters are not (`out!`).
    for m in messages.into_iter().flatten() {
        out!(
            "{}: {}",
            field(m["role"].as_str().unwrap_or("?")),
            m["content"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// Every stored session's key, with its number of messages.
async fn session_keys(target: &Target) -> anyhow::Result<Vec<(String, usize)>> {
    Ok(match target {
        Target::Remote { .. } => serde_json::from_value(target.get("/admin/sessions").await?)?,
        Target::Local(store) => Session::keys(store.as_ref())?,
    })
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

pub fn skills_list(loaded: &Loaded) -> anyhow::Result<()> {
    let skills = crate::agent::list_skills(&loaded.config);
    if skills.is_empty() {
        let g = &loaded.config.gateway;
        let dirs: Vec<String> = g
            .skills_dirs
            .iter()
            .chain([&g.workspace.join("skills")])
            .map(|d| d.display().to_string())
            .collect();
        out!("no skills found in {}", field(&dirs.join(", ")));
        out!(
            "hint: the bundled skills are in the repository's skills/ folder: copy it next to \
             config.toml, or point gateway.skills_dirs at it"
        );
    }
    for s in skills {
        let status = if s.available {
            if s.always {
                "available, always on".to_string()
            } else {
                "available".to_string()
            }
        } else {
            format!("unavailable: missing {}", s.missing.join(", "))
        };
        // Skills in the workspace are the agent's to write.
        out!(
            "{:<20} {:<10} {}\n{:<20} {}",
            field(&s.name),
            field(&s.source),
            field(&status),
            "",
            field(&s.description)
        );
    }
    Ok(())
}

fn print_jobs(jobs: &Value) {
    use crate::scheduler::Outcome;
    let jobs = jobs.as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        out!("no jobs");
    }
    for j in jobs {
        let job: Result<crate::scheduler::Job, _> = serde_json::from_value(j);
        match job {
            Ok(job) => {
                // A last run that did not go (skipped, failed) says why.
                let last = job.runs.last().filter(|r| r.outcome != Outcome::Ok);
                let why = last
                    .map(|r| {
                        let outcome = serde_json::to_value(r.outcome).unwrap_or_default();
                        let error = field(r.error.as_deref().unwrap_or("no reason recorded"));
                        format!(" (last run {}: {error})", outcome.as_str().unwrap_or("?"))
                    })
                    .unwrap_or_default();
                out!(
                    "{}\t{}{why}",
                    field(&job.key.to_string()),
                    field(&job.summary())
                )
            }
            Err(e) => out!("(unreadable job: {})", field(&e.to_string())),
        }
    }
}

pub async fn cron(loaded: &Loaded, action: CronAction) -> anyhow::Result<()> {
    use crate::scheduler::{NewJob, ScheduleSpec, Scheduler, SystemClock};
    // A job may be set up before the first run; the rest needs one.
    let target = match action {
        CronAction::Add { .. } => Target::find(&loaded.config).await?,
        _ => Target::find_existing(&loaded.config).await?,
    };
    let offline = match &target {
        Target::Local(store) => Some(Scheduler::new(
            store.clone(),
            None,
            std::sync::Arc::new(loaded.config.clone()),
            Default::default(),
            std::sync::Arc::new(SystemClock),
        )),
        Target::Remote { .. } => None,
    };
    match action {
        CronAction::List { key } => {
            let jobs = match &offline {
                Some(s) => {
                    let key = key
                        .map(|k| k.parse::<ChatKey>())
                        .transpose()
                        .context("--key")?;
                    json!(s.list(key.as_ref()))
                }
                None => {
                    let q = key
                        .map(|k| format!("?key={}", urlencode(&k)))
                        .unwrap_or_default();
                    target.get(&format!("/admin/cron{q}")).await?
                }
            };
            print_jobs(&jobs);
        }
        CronAction::Add {
            key,
            at,
            every,
            cron,
            tz,
            message,
        } => {
            let key: ChatKey = key.parse().context("--key")?;
            let spec = match (at, every, cron) {
                (Some(a), None, None) => ScheduleSpec::At(a),
                (None, Some(e), None) => ScheduleSpec::Every(e),
                (None, None, Some(c)) => ScheduleSpec::Cron(c),
                _ => bail!("give exactly one of --at, --every or --cron"),
            };
            let mut job = NewJob::new(key, message, spec, "cli");
            job.tz = tz;
            let added = match &offline {
                Some(s) => json!(s.add(job).await?),
                None => target.post("/admin/cron", json!(job)).await?,
            };
            print_jobs(&json!([added]));
        }
        CronAction::Remove { id } => {
            match &offline {
                Some(s) => {
                    s.remove(&id).await?;
                }
                None => {
                    target
                        .delete(&format!("/admin/cron?id={}", urlencode(&id)))
                        .await?;
                }
            }
            out!("removed {id}");
        }
        CronAction::Run { id } => match &offline {
            Some(s) => {
                s.run_now(&id).await?;
                out!("queued {id}: the gateway runs it when it starts");
            }
            None => {
                target
                    .post(&format!("/admin/cron/run?id={}", urlencode(&id)), json!({}))
                    .await?;
                out!("ran {id}");
            }
        },
    }
    Ok(())
}
