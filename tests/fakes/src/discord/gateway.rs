//! The fake's websocket gateway: JSON text frames, HELLO → IDENTIFY → READY, heartbeats,
//! RESUME with replay of missed dispatches, and connection faults (abort, half-close, freeze).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{
    APPLICATION_ID, Author, BOT_ROLE_ID, BOT_USER_ID, ConnCmd, GUILD_ID, HELPER_ROLE_ID, Shared,
};

/// Accept gateway connections until the task is aborted.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(connection(tcp, shared.clone()));
    }
}

type Ws = WebSocketStream<TcpStream>;

async fn connection(tcp: TcpStream, shared: Arc<Shared>) {
    if shared.lock().refuse_new {
        shared.lock().refused += 1;
        shared.bump();
        let _ = tcp.set_zero_linger();
        return;
    }
    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    let (conn, hello, muted) = {
        let mut st = shared.lock();
        st.connections += 1;
        let hello = json!({"op": 10, "d": {"heartbeat_interval": st.heartbeat_interval_ms}});
        (st.connections, hello.to_string(), st.mute_new)
    };
    shared.bump();
    if muted {
        // Hang: read and ignore everything until the client goes away.
        while let Some(Ok(_)) = ws.next().await {}
        return;
    }
    if ws.send(Message::Text(hello)).await.is_err() {
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<ConnCmd>();
    loop {
        tokio::select! {
            Some(cmd) = rx.recv() => match cmd {
                ConnCmd::Frame(f) => {
                    if ws.send(Message::Text(f)).await.is_err() {
                        break;
                    }
                }
                ConnCmd::Abort => {
                    // SO_LINGER 0: closing sends RST, the client sees an I/O error.
                    let _ = ws.get_ref().set_zero_linger();
                    drop(ws);
                    return;
                }
                ConnCmd::HalfClose => {
                    // FIN without a websocket close frame; wait for the client to go away.
                    let _ = ws.get_mut().shutdown().await;
                    let _ = tokio::time::timeout(Duration::from_secs(30), async {
                        while let Some(Ok(_)) = ws.next().await {}
                    })
                    .await;
                    return;
                }
            },
            msg = ws.next() => match msg {
                Some(Ok(Message::Text(text))) => {
                    if !handle_frame(&shared, conn, &tx, &mut ws, &text).await {
                        break;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
        }
    }
    let mut st = shared.lock();
    if st.live.as_ref().is_some_and(|(c, _)| *c == conn) {
        st.live = None;
    }
}

/// Handle one client frame; false ends the connection.
async fn handle_frame(
    shared: &Shared,
    conn: usize,
    tx: &mpsc::UnboundedSender<ConnCmd>,
    ws: &mut Ws,
    text: &str,
) -> bool {
    let Ok(frame) = serde_json::from_str::<Value>(text) else {
        return close(ws, 4002, "Error while decoding payload.").await;
    };
    if shared.lock().frozen == Some(conn) {
        return true;
    }
    let d = frame.get("d").cloned().unwrap_or(Value::Null);
    match frame["op"].as_u64() {
        Some(1) => {
            shared.lock().heartbeats += 1;
            shared.bump();
            ws.send(Message::Text(json!({"op": 11}).to_string()))
                .await
                .is_ok()
        }
        Some(2) => {
            if !token_ok(shared, &d) {
                return close(ws, 4004, "Authentication failed.").await;
            }
            if shared.lock().intents_disallowed {
                shared.lock().identifies.push(d);
                shared.bump();
                return close(ws, 4014, "Disallowed intent(s).").await;
            }
            let mut st = shared.lock();
            st.identifies.push(d);
            let session_id = format!("fake-session-{}", st.identifies.len());
            st.session_id = Some(session_id.clone());
            st.seq = 0;
            st.log.clear();
            st.live = Some((conn, tx.clone()));
            st.sessions_started += 1;
            let mut user = Author::this_bot().to_json();
            user["verified"] = json!(true);
            user["mfa_enabled"] = json!(false);
            let ready = json!({
                "v": 10,
                "user": user,
                "guilds": [],
                "session_id": session_id,
                "resume_gateway_url": st.gateway_url,
                "shard": [0, 1],
                "application": {"id": APPLICATION_ID.to_string(), "flags": 0},
            });
            st.dispatch("READY", ready);
            drop(st);
            shared.bump();
            true
        }
        Some(6) => {
            if !token_ok(shared, &d) {
                return close(ws, 4004, "Authentication failed.").await;
            }
            let resumed = {
                let mut st = shared.lock();
                let same = st.session_id.as_deref() == d["session_id"].as_str();
                if same {
                    let from = d["seq"].as_u64().unwrap_or(0);
                    st.resumes.push(d);
                    st.live = Some((conn, tx.clone()));
                    for (s, f) in st.log.iter() {
                        if *s > from {
                            let _ = tx.send(ConnCmd::Frame(f.clone()));
                        }
                    }
                    st.sessions_started += 1;
                    st.dispatch("RESUMED", json!({}));
                }
                same
            };
            if !resumed {
                // Invalid session, not resumable: the client identifies again.
                return ws
                    .send(Message::Text(json!({"op": 9, "d": false}).to_string()))
                    .await
                    .is_ok();
            }
            shared.bump();
            true
        }
        _ => true,
    }
}

fn token_ok(shared: &Shared, d: &Value) -> bool {
    let token = shared.lock().token.clone();
    let sent = d["token"].as_str().unwrap_or("");
    sent == token || sent.strip_prefix("Bot ") == Some(token.as_str())
}

async fn close(ws: &mut Ws, code: u16, reason: &str) -> bool {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: reason.to_string().into(),
    };
    let _ = ws.send(Message::Close(Some(frame))).await;
    false
}

/// GUILD_CREATE data for [`GUILD_ID`]: every field serenity's `Guild` requires, text channel
/// `channel_id` and the channels registered in `known`.
pub(crate) fn guild_create(channel_id: u64, known: &super::channels::Channels) -> Value {
    let role = |id: u64, name: &str, managed: bool, tags: Value| {
        json!({
            "id": id.to_string(), "name": name, "color": 0,
            "colors": {"primary_color": 0, "secondary_color": null, "tertiary_color": null},
            "hoist": false, "managed": managed, "mentionable": true, "permissions": "0",
            "position": 0, "tags": tags, "icon": null, "unicode_emoji": null,
        })
    };
    let mut g = json!({
        "id": GUILD_ID.to_string(),
        "name": "Fake Guild",
        "icon": null, "icon_hash": null, "splash": null, "discovery_splash": null,
        "owner_id": "1",
        "afk_channel_id": null, "afk_timeout": 300,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "roles": [
            role(GUILD_ID, "@everyone", false, json!({})),
            role(BOT_ROLE_ID, "switchboard", true, json!({"bot_id": BOT_USER_ID.to_string()})),
            role(HELPER_ROLE_ID, "helpers", false, json!({})),
        ],
        "emojis": [],
        "features": [],
        "mfa_level": 0,
        "application_id": null,
        "system_channel_id": null,
        "system_channel_flags": 0,
        "rules_channel_id": null,
        "vanity_url_code": null,
        "description": null,
        "banner": null,
        "premium_tier": 0,
        "preferred_locale": "en-US",
        "public_updates_channel_id": null,
        "nsfw_level": 0,
    });
    let mut channels = vec![json!({
        "id": channel_id.to_string(), "type": 0, "name": "general", "position": 0,
        "permission_overwrites": [], "nsfw": false, "topic": null, "last_message_id": null,
        "parent_id": null,
    })];
    channels.extend(known.channels_json());
    let rest = json!({
        "stickers": [],
        "premium_progress_bar_enabled": false,
        "joined_at": "2024-01-01T00:00:00.000000+00:00",
        "large": false,
        "unavailable": false,
        "member_count": 2,
        "voice_states": [],
        "members": [],
        "channels": channels,
        "threads": known.threads_json(),
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "safety_alerts_channel_id": null,
        "incidents_data": null,
    });
    if let (Some(g), Value::Object(rest)) = (g.as_object_mut(), rest) {
        g.extend(rest);
    }
    g
}
