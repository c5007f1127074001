//! The fake's Socket Mode websocket: `hello` on connect, envelopes out, acks in.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{APP_ID, Shared};

enum Out {
    Frame(String),
    /// Drop the connection without a close frame.
    Kill,
    /// Stop reading and writing but keep the connection open.
    Freeze,
}

/// The fake's handle on one open socket.
pub(crate) struct SocketHandle {
    id: u64,
    tx: mpsc::UnboundedSender<Out>,
}

impl SocketHandle {
    pub(crate) fn send(&self, frame: String) {
        let _ = self.tx.send(Out::Frame(frame));
    }

    pub(crate) fn kill(&self) {
        let _ = self.tx.send(Out::Kill);
    }

    pub(crate) fn freeze(&self) {
        let _ = self.tx.send(Out::Freeze);
    }
}

pub(crate) async fn upgrade(State(shared): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    {
        let mut g = shared.lock();
        if g.refuse_sockets {
            g.refused_sockets += 1;
            drop(g);
            shared.bump();
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    }
    ws.on_upgrade(move |socket| serve(shared, socket))
}

async fn serve(shared: Arc<Shared>, mut socket: WebSocket) {
    let id = shared.next_id();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let hello = json!({
        "type": "hello",
        "num_connections": 1,
        "debug_info": {"host": "fake-slack", "build_number": 1, "approximate_connection_time": 18060},
        "connection_info": {"app_id": APP_ID},
    });
    if socket
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    {
        let mut g = shared.lock();
        g.sockets.push(SocketHandle { id, tx });
        g.connections += 1;
    }
    shared.bump();
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(Out::Frame(f)) => {
                    if socket.send(Message::Text(f.into())).await.is_err() {
                        break;
                    }
                }
                Some(Out::Freeze) => {
                    // Keep the socket (and its TCP connection) alive but never touch it again.
                    unregister(&shared, id);
                    let _held = socket;
                    std::future::pending::<()>().await;
                    return;
                }
                Some(Out::Kill) | None => break,
            },
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(t))) => on_frame(&shared, t.as_str()),
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    unregister(&shared, id);
}

fn unregister(shared: &Shared, id: u64) {
    shared.lock().sockets.retain(|s| s.id != id);
    shared.bump();
}

/// A frame from the client: an ack `{"envelope_id": …}` is recorded.
fn on_frame(shared: &Shared, text: &str) {
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return;
    };
    if let Some(env) = v.get("envelope_id").and_then(Value::as_str) {
        let mut g = shared.lock();
        g.acks.push(env.to_string());
        g.unacked.retain(|(e, _)| e != env);
    }
    shared.bump();
}
