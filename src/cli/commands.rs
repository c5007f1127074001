//! The CLI commands' bodies.

use std::io::{BufRead, Write};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use switchboard_channel::ChatKey;
use tokio_util::sync::CancellationToken;

use super::admin_client::Target;
use super::show::field;
use super::{CronAction, PairingAction, SessionsAction};
use crate::agent::session::Session;
use crate::config::Loaded;
use crate::gateway::{self, StartOptions};
use crate::pairing;
use crate::store::Batch;

/// Cancel `token` on SIGINT or SIGTERM.
pub fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!("cannot listen for SIGTERM: {e}");
                        let _ = ctrl_c.await;
                        token.cancel();
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        token.cancel();
    });
}

pub async fn run(loaded: &Loaded) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    cancel_on_signals(shutdown.clone());
    if let Some(p) = &loaded.path {
        tracing::info!("config: {}", p.display());
    } else {
        tracing::info!("config: built-in defaults (no config.toml found)");
    }
    gateway::run(loaded, shutdown).await?;
    Ok(())
}

pub async fn chat(loaded: &Loaded, message: Option<String>) -> anyhow::Result<()> {
    let target = Target::find(&loaded.config).await?;
    if let Target::Remote { .. } = target {
        return chat_loop(message, |text| {
            let target = &target;
            async move {
                let v = target.post("/admin/chat", json!({"text": text})).await?;
                Ok(v["reply"].as_str().unwrap_or_default().to_string())
            }
        })
        .await;
    }
    // No gateway runs: close the store handle and start one in this process, without
    // channels, HTTP, producers or the last run's unfinished work (all left for `run`).
    drop(target);
    let shutdown = CancellationToken::new();
    let opts = StartOptions {
        channels: false,
        http: false,
        background: false,
        ..Default::default()
    };
    let running = gateway::start(loaded, opts, shutdown.clone()).await?;
    let shared = running.shared.clone();
    let result = chat_loop(message, |text| {
        let shared = shared.clone();
        async move {
            shared
                .ask_cli(&text, crate::http::api::REPLY_TIMEOUT)
                .await
                .map_err(anyhow::Error::msg)
        }
    })
    .await;
    shutdown.cancel();
    running.stopped().await;
    result
}

async fn chat_loop<F, Fut>(message: Option<String>, mut ask: F) -> anyhow::Result<()>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<String>>,
{
    if let Some(m) = message {
        out!("{}", ask(m).await?);
        return Ok(());
    }
    let stdin = std::io::stdin();
    loop {
        print!("> ");
        std::io::stdout().flush().ok();
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if matches!(line, "/quit" | "/exit") {
            return Ok(());
        }
        match ask(line.to_string()).await {
            Ok(reply) => out!("{reply}\n"),
            Err(e) => eprintln!("error: {e:#}"),
        }
    }
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

pub async fn pairing(loaded: &Loaded, action: PairingAction) -> anyhow::Result<()> {
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
            out!("pending:");
            for p in pending.as_array().into_iter().flatten() {
                out!(
                    "  {} {} from {} ({}) until {}",
                    f(&p["channel"]),
                    f(&p["code"]),
                    f(&p["display_name"]),
                    f(&p["sender_id"]),
                    f(&p["expires_at"])
                );
            }
            out!("approved:");
            for a in approved.as_array().into_iter().flatten() {
                out!(
                    "  {} {} ({})",
                    f(&a["channel"]),
                    f(&a["display_name"]),
                    f(&a["sender_id"])
                );
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
            out!(
                "approved {} ({}) on {}",
                field(who["display_name"].as_str().unwrap_or("")),
                field(who["sender_id"].as_str().unwrap_or("")),
                field(&channel)
            );
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
            out!(
                "revoked {} ({}) on {}",
                field(who["display_name"].as_str().unwrap_or(&user)),
                field(who["sender_id"].as_str().unwrap_or("")),
                field(&channel)
            );
        }
    }
    Ok(())
}

pub async fn sessions(loaded: &Loaded, action: SessionsAction) -> anyhow::Result<()> {
    let target = Target::find_existing(&loaded.config).await?;
    match action {
        SessionsAction::List => {
            let keys: Vec<(String, usize)> = match &target {
                Target::Remote { .. } => {
                    serde_json::from_value(target.get("/admin/sessions").await?)?
                }
                Target::Local(store) => Session::keys(store.as_ref())?,
            };
            for (k, n) in keys {
                out!("{}\t{n} messages", field(&k));
            }
        }
        SessionsAction::Show { key } => {
            let key: ChatKey = key.parse().context("sessions show")?;
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
            if let Some(s) = session["summary"].as_str() {
                out!("[summary] {s}\n");
            }
            let messages = session["messages"].as_array();
            if session["summary"].is_null() && messages.is_none_or(|m| m.is_empty()) {
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
        }
        SessionsAction::Reset { key } => {
            let key: ChatKey = key.parse().context("sessions reset")?;
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
        }
    }
    Ok(())
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

pub fn skills_list(loaded: &Loaded) -> anyhow::Result<()> {
    let skills = crate::agent::list_skills(&loaded.config);
    if skills.is_empty() {
        out!("no skills found in {:?}", loaded.config.gateway.skills_dirs);
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
