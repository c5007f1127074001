//! `switchboard chat`, and the signals that stop the gateway or a chat: SIGINT (Ctrl-C),
//! SIGTERM and SIGHUP (the terminal closed, an SSH session ending).

use std::io::{BufRead, Write};
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::admin_client::Target;
use crate::config::Loaded;
use crate::gateway::{self, StartOptions};

/// Longest wait for the question being asked to be withdrawn once a signal came: its
/// storing, then its turn stopping ([`crate::http::api::ApiChannel::ask_until`]).
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// A command ended by a signal: the process exits with 128 + its number, saying nothing
/// more (the terminal showed `^C`).
#[derive(Debug, thiserror::Error)]
#[error("stopped by signal {0}")]
pub struct Interrupted(pub i32);

/// The first SIGINT, SIGTERM or SIGHUP to come: its number. One that cannot be listened
/// for is logged and left to its default (the others still count); SIGHUP is left alone
/// when it was ignored at start (`nohup`).
async fn stop_signal() -> i32 {
    stop_signal_among(true).await
}

/// The first SIGINT or SIGTERM to come, or SIGHUP too when `hangup`: its number.
async fn stop_signal_among(hangup: bool) -> i32 {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut streams = Vec::new();
        for (kind, name, number) in [
            (SignalKind::interrupt(), "SIGINT", 2),
            (SignalKind::terminate(), "SIGTERM", 15),
            (SignalKind::hangup(), "SIGHUP", 1),
        ] {
            // Listening would undo `nohup` (the handler replaces its "ignore").
            if number == 1 && (!hangup || hangup_ignored()) {
                continue;
            }
            match signal(kind) {
                Ok(s) => streams.push((s, number)),
                Err(e) => tracing::error!("cannot listen for {name}: {e}"),
            }
        }
        if streams.is_empty() {
            return std::future::pending().await;
        }
        let waits = streams.iter_mut().map(|(s, number)| {
            Box::pin(async move {
                s.recv().await;
                *number
            })
        });
        futures_util::future::select_all(waits).await.0
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        2
    }
}

/// Cancel `token` on SIGINT, SIGTERM or SIGHUP. A gateway started from a terminal that
/// is then closed stops as gracefully as one stopped by its service manager. A second
/// SIGINT or SIGTERM during that stop ends the process at once (as a crash: what was
/// unfinished runs at the next start). A SIGHUP then does not: it is what closing the
/// terminal after a Ctrl-C sends, and what systemd's `SendSIGHUP=yes` sends right after
/// its SIGTERM.
pub fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        let signal = stop_signal().await;
        tracing::info!(signal, "stop signal received");
        token.cancel();
        let again = stop_signal_among(false).await;
        tracing::warn!(
            signal = again,
            "a second stop signal: exiting at once; unfinished work runs at the next start"
        );
        std::process::exit(128 + again);
    });
}

/// Whether SIGHUP was set to be ignored when this process started (`nohup`): then a
/// closed terminal must not stop it. Read from `/proc/self/status` (`SigIgn`, a mask with
/// signal n at bit n-1); where that cannot be read, not ignored.
fn hangup_ignored() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & 1 != 0)
}

pub async fn chat(loaded: &Loaded, message: Option<String>) -> anyhow::Result<()> {
    let target = Target::find(&loaded.config).await?;
    if let Target::Remote { .. } = target {
        // Ctrl-C ends this process as it would any; the gateway sees the request go away
        // and withdraws its message (its turn stops as by `/stop`).
        return chat_loop(message, &CancellationToken::new(), |text| {
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
    let stop = CancellationToken::new();
    let asking = chat_loop(message, &stop, |text| {
        let (shared, stop) = (shared.clone(), stop.clone());
        async move {
            shared
                .ask_cli_until(&text, crate::http::api::REPLY_TIMEOUT, &stop)
                .await
                .map_err(anyhow::Error::msg)
        }
    });
    tokio::pin!(asking);
    // A signal ends the chat as `/stop` would: the question being asked is withdrawn (its
    // turn stops, or it leaves the queue), so it neither enters the conversation nor runs
    // at the next start. Before the shutdown below, which would keep it for then instead.
    let result = tokio::select! {
        r = &mut asking => r,
        signal = stop_signal() => {
            stop.cancel();
            if tokio::time::timeout(SETTLE_WAIT, &mut asking).await.is_err() {
                tracing::warn!("the question asked did not stop in time; it may run at the next start");
            }
            Err(Interrupted(signal).into())
        }
    };
    shutdown.cancel();
    running.stopped().await;
    result
}

/// Lines typed at the prompt, read on a thread of their own: a read blocked on the
/// terminal must not hold up the signal that ends the chat, nor the runtime's shutdown.
fn stdin_lines() -> mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = mpsc::channel(1);
    let spawned = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            loop {
                let mut line = String::new();
                let read = stdin.lock().read_line(&mut line).map(|_| line);
                let end = !matches!(&read, Ok(l) if !l.is_empty());
                if tx.blocking_send(read).is_err() || end {
                    return;
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!("cannot read the terminal: {e}");
    }
    rx
}

/// Ask `message`, or each line typed at the prompt; ends, without a word, once `stop` is
/// cancelled and the question being asked has come back.
async fn chat_loop<F, Fut>(
    message: Option<String>,
    stop: &CancellationToken,
    mut ask: F,
) -> anyhow::Result<()>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<String>>,
{
    if let Some(m) = message {
        let reply = ask(m).await;
        if !stop.is_cancelled() {
            out!("{}", reply?);
        }
        return Ok(());
    }
    let mut lines = stdin_lines();
    loop {
        print!("> ");
        std::io::stdout().flush().ok();
        let line = tokio::select! {
            line = lines.recv() => line,
            () = stop.cancelled() => return Ok(()),
        };
        let line = match line {
            None => return Ok(()),
            Some(line) => line?,
        };
        if line.is_empty() {
            return Ok(());
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if matches!(line, "/quit" | "/exit") {
            return Ok(());
        }
        let reply = ask(line.to_string()).await;
        if stop.is_cancelled() {
            return Ok(());
        }
        match reply {
            Ok(reply) => out!("{reply}\n"),
            Err(e) => eprintln!("error: {e:#}"),
        }
    }
}
