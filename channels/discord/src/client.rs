//! serenity's client on a thread and runtime of its own, and the way out of its spins.
//!
//! serenity 0.12.5's shard runner can spin without yielding:
//! - after a dropped socket, a RESUME whose connect fails (the network is still down) leaves
//!   the shard `Connecting` over the dead socket, and the runner polls that ended stream in a
//!   loop until its next heartbeat is due (about 41 s), then starts a new session;
//! - a runner told to shut down over a dead socket waits for a close frame in the same kind
//!   of loop, forever.
//!
//! On the gateway's runtime that stalled the rest of the process (`/healthz` took 26 s). Here
//! it can only hold up this client's thread, and [`ClientThread::poke`] ends such a runner: it
//! hands it a heartbeat frame to send, which fails on a dead socket and makes the runner stop
//! (on a live socket it is one more heartbeat). Stopping the client then drops its runtime,
//! so nothing of it outlives it.

use std::sync::Arc;
use std::time::Duration;

use serenity::all::{ClientBuilder, ShardManager};
use serenity::gateway::ConnectionStage;
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message as WsMessage;

/// How long a clean stop (close frames sent and answered) may take.
const CLEAN_STOP: Duration = Duration::from_secs(5);
/// How long the thread may take to end once told to.
const THREAD_END: Duration = Duration::from_secs(2);

/// A running serenity client.
pub(crate) struct ClientThread {
    pub(crate) manager: Arc<ShardManager>,
    /// How `Client::start` ended; closed without a value once the thread's runtime is gone.
    done: Option<oneshot::Receiver<serenity::Result<()>>>,
    kill: Option<oneshot::Sender<()>>,
}

/// The shard runner as the manager last heard of it.
pub(crate) struct RunnerView {
    pub(crate) stage: ConnectionStage,
    pub(crate) latency: Option<Duration>,
}

impl ClientThread {
    /// Build the client on a new thread and start it there.
    pub(crate) async fn start(builder: ClientBuilder) -> Result<Self, String> {
        let (built_tx, built_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let (kill, kill_rx) = oneshot::channel::<()>();
        let body = move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = built_tx.send(Err(format!("discord: client runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let mut client = match builder.await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = built_tx.send(Err(format!("discord: client: {e}")));
                        return;
                    }
                };
                let _ = built_tx.send(Ok(client.shard_manager.clone()));
                tokio::select! {
                    res = client.start() => { let _ = done_tx.send(res); }
                    _ = kill_rx => {}
                }
            });
            // Dropping the runtime drops whatever serenity still runs there (handlers, a
            // runner waiting on a socket).
            drop(rt);
        };
        std::thread::Builder::new()
            .name("discord-gateway".into())
            .spawn(body)
            .map_err(|e| format!("discord: client thread: {e}"))?;
        let manager = built_rx
            .await
            .map_err(|_| "discord: the client thread ended early".to_string())??;
        Ok(Self {
            manager,
            done: Some(done_rx),
            kill: Some(kill),
        })
    }

    /// Wait until the client ends on its own (`None`: its thread ended without saying how).
    pub(crate) async fn ended(&mut self) -> Option<serenity::Result<()>> {
        let Some(done) = self.done.as_mut() else {
            return std::future::pending().await;
        };
        let res = done.await.ok();
        self.done = None;
        res
    }

    /// The (only) shard runner's stage and heartbeat latency.
    pub(crate) async fn runner(&self) -> Option<RunnerView> {
        let runners = self.manager.runners.lock().await;
        runners.values().next().map(|r| RunnerView {
            stage: r.stage,
            latency: r.latency,
        })
    }

    /// Hand every runner a heartbeat frame: one whose socket is dead stops (see the module
    /// docs); a live one sends it.
    pub(crate) async fn poke(&self) {
        let frame = WsMessage::Text(r#"{"op":1,"d":null}"#.to_string());
        for r in self.manager.runners.lock().await.values() {
            r.runner_tx.websocket_message(frame.clone());
        }
    }

    /// Stop the client: with `clean`, close its sessions first (bounded), so Discord shows
    /// the bot offline at once; then its runtime is dropped.
    pub(crate) async fn stop(mut self, clean: bool) {
        self.poke().await;
        if clean {
            let _ = tokio::time::timeout(CLEAN_STOP, self.manager.shutdown_all()).await;
        }
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        if let Some(done) = self.done.take()
            && tokio::time::timeout(THREAD_END, done).await.is_err()
        {
            tracing::warn!("discord: the old gateway client did not stop in time");
        }
    }
}
