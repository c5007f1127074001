//! The admin API: loopback only, bearer token from `<data_dir>/admin.token` (mode 0600, new
//! at every start).
//! State-changing CLI commands go through it while a gateway runs, so the CLI and the
//! gateway never fight over the store.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::session::Session;
use crate::gateway::{GatewayError, Shared};
use crate::pairing;
use crate::store::Batch;

const TOKEN_FILE: &str = "admin.token";
const ADDR_FILE: &str = "admin.addr";

/// Compare secrets without leaking where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A new admin token for this run of the gateway, written to `admin.token` at mode 0600
/// (readable by the gateway's user only). New at every start: a token from an earlier run
/// (sent to a stale `admin.addr` by a CLI after a crash, where another program may listen
/// now) opens nothing. Registered as a secret: a command the agent runs can read the file,
/// but what it reads never reaches a log or a reply.
pub fn token(data_dir: &Path) -> std::io::Result<String> {
    let t = new_token(data_dir)?;
    switchboard_channel::redact::register(&t);
    Ok(t)
}

fn new_token(data_dir: &Path) -> std::io::Result<String> {
    let path = data_dir.join(TOKEN_FILE);
    let t: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    std::fs::create_dir_all(data_dir)?;
    // Written whole under another name, then renamed: a CLI never reads half a token.
    let fresh = data_dir.join(format!("{TOKEN_FILE}.new"));
    let _ = std::fs::remove_file(&fresh);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    std::io::Write::write_all(&mut opts.open(&fresh)?, t.as_bytes())?;
    owner_only(&fresh)?;
    std::fs::rename(&fresh, &path)?;
    Ok(t)
}

/// Mode 0600. (The mode given at creation does not apply to a file that already existed.)
fn owner_only(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if std::fs::metadata(path)?.permissions().mode() & 0o777 != 0o600 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// Where a running gateway's admin API listens, if one wrote its address.
pub fn running_at(data_dir: &Path) -> Option<(SocketAddr, String)> {
    let addr = std::fs::read_to_string(data_dir.join(ADDR_FILE)).ok()?;
    let token = std::fs::read_to_string(data_dir.join(TOKEN_FILE)).ok()?;
    Some((addr.trim().parse().ok()?, token.trim().to_string()))
}

pub(crate) fn remove_files(data_dir: &Path) {
    let _ = std::fs::remove_file(data_dir.join(ADDR_FILE));
}

#[derive(Clone)]
struct AdminState {
    shared: Arc<Shared>,
    token: Arc<String>,
}

/// Serve the admin API on 127.0.0.1 (an ephemeral port), writing its address for the CLI.
pub async fn serve(
    shared: Arc<Shared>,
    data_dir: &Path,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> Result<SocketAddr, GatewayError> {
    let setup = |e: std::io::Error| GatewayError::Setup(format!("admin API: {e}"));
    let token = token(data_dir).map_err(setup)?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(setup)?;
    let addr = listener.local_addr().map_err(setup)?;
    std::fs::write(data_dir.join(ADDR_FILE), addr.to_string()).map_err(setup)?;
    let state = AdminState {
        shared,
        token: Arc::new(token),
    };
    let app = Router::new()
        .route("/admin/ping", get(ping))
        .route("/admin/sessions", get(sessions_list))
        .route("/admin/session", get(session_show).delete(session_reset))
        .route("/admin/pairing", get(pairing_list))
        .route("/admin/pairing/approve", post(pairing_approve))
        .route("/admin/pairing/revoke", post(pairing_revoke))
        .route("/admin/chat", post(chat))
        .route(
            "/admin/cron",
            get(cron_list).post(cron_add).delete(cron_remove),
        )
        .route("/admin/cron/run", post(cron_run))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state);
    tracker.spawn(async move {
        let served = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
        if let Err(e) = served {
            tracing::error!("admin API stopped: {e}");
        }
    });
    Ok(addr)
}

async fn guard(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    if !peer.ip().is_loopback() {
        return (StatusCode::FORBIDDEN, "admin API is loopback only").into_response();
    }
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !constant_time_eq(given.as_bytes(), state.token.as_bytes()) {
        return (StatusCode::UNAUTHORIZED, "wrong admin token").into_response();
    }
    next.run(req).await
}

fn fail(status: StatusCode, e: impl std::fmt::Display) -> Response {
    (status, axum::Json(json!({"error": e.to_string()}))).into_response()
}

/// The CLI's check that a gateway answers (and takes its token): nothing read.
async fn ping() -> StatusCode {
    StatusCode::NO_CONTENT
}

async fn sessions_list(State(s): State<AdminState>) -> Response {
    match Session::keys(s.shared.store.as_ref()) {
        Ok(keys) => axum::Json(json!(keys)).into_response(),
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

#[derive(Deserialize)]
struct KeyQuery {
    key: String,
}

async fn session_show(State(s): State<AdminState>, Query(q): Query<KeyQuery>) -> Response {
    let Ok(key) = q.key.parse() else {
        return fail(
            StatusCode::BAD_REQUEST,
            format!("not a chat key: {}", q.key),
        );
    };
    match Session::load(s.shared.store.as_ref(), &key) {
        Ok(session) => axum::Json(json!(session)).into_response(),
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn session_reset(State(s): State<AdminState>, Query(q): Query<KeyQuery>) -> Response {
    let Ok(key) = q.key.parse() else {
        return fail(
            StatusCode::BAD_REQUEST,
            format!("not a chat key: {}", q.key),
        );
    };
    let mut b = Batch::default();
    Session::reset(&key, &mut b);
    let store = &s.shared.store;
    match store.commit(b).await {
        Ok(_) => axum::Json(json!({"reset": key.to_string()})).into_response(),
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

async fn pairing_list(State(s): State<AdminState>) -> Response {
    match pairing::list(s.shared.store.as_ref()) {
        Ok((pending, approved)) => {
            axum::Json(json!({"pending": pending, "approved": approved})).into_response()
        }
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

#[derive(Deserialize)]
struct Approve {
    channel: String,
    code: String,
}

async fn pairing_approve(
    State(s): State<AdminState>,
    axum::Json(a): axum::Json<Approve>,
) -> Response {
    match pairing::approve(s.shared.store.as_ref(), &a.channel, &a.code).await {
        Ok(ok) => {
            tell_approved(&s, &ok).await;
            axum::Json(json!(ok)).into_response()
        }
        Err(e @ pairing::PairingError::UnknownCode { .. }) => fail(StatusCode::NOT_FOUND, e),
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// Tell someone just approved, in the chat their code was sent in, that they are in:
/// what they wrote before was not kept.
async fn tell_approved(s: &AdminState, ok: &pairing::Approved) {
    let Some(key) = ok.chat.as_deref().and_then(|k| k.parse().ok()) else {
        return;
    };
    let text = "✅ You're in: the owner approved you, so you can talk with me now. \
                What you wrote before was not kept; please send it again.";
    let told = s
        .shared
        .bus
        .send_direct_in_background(vec![switchboard_channel::OutboundMessage::new(key, text)])
        .await;
    if let Err(e) = told {
        tracing::warn!(channel = %ok.channel, "could not tell an approved sender: {e}");
    }
}

#[derive(Deserialize)]
struct Revoke {
    channel: String,
    user: String,
}

async fn pairing_revoke(
    State(s): State<AdminState>,
    axum::Json(r): axum::Json<Revoke>,
) -> Response {
    match pairing::revoke(s.shared.store.as_ref(), &r.channel, &r.user).await {
        Ok(ok) => axum::Json(json!(ok)).into_response(),
        Err(e @ pairing::PairingError::UnknownUser { .. }) => fail(StatusCode::NOT_FOUND, e),
        Err(e) => fail(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

#[derive(Deserialize)]
struct Chat {
    text: String,
}

async fn chat(State(s): State<AdminState>, axum::Json(c): axum::Json<Chat>) -> Response {
    match s
        .shared
        .ask_cli(&c.text, crate::http::api::REPLY_TIMEOUT)
        .await
    {
        Ok(reply) => axum::Json(json!({"reply": reply})).into_response(),
        Err(e) => fail(StatusCode::BAD_GATEWAY, e),
    }
}

#[derive(Deserialize)]
struct CronQuery {
    key: Option<String>,
    id: Option<String>,
}

fn schedule_error(e: crate::scheduler::ScheduleError) -> Response {
    let status = if e.is_user_error() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    fail(status, e)
}

async fn cron_list(State(s): State<AdminState>, Query(q): Query<CronQuery>) -> Response {
    let key = match q
        .key
        .as_deref()
        .map(str::parse::<switchboard_channel::ChatKey>)
    {
        None => None,
        Some(Ok(k)) => Some(k),
        Some(Err(e)) => return fail(StatusCode::BAD_REQUEST, e),
    };
    axum::Json(json!(s.shared.scheduler.list(key.as_ref()))).into_response()
}

async fn cron_add(
    State(s): State<AdminState>,
    axum::Json(job): axum::Json<crate::scheduler::NewJob>,
) -> Response {
    match s.shared.scheduler.add(job).await {
        Ok(job) => axum::Json(json!(job)).into_response(),
        Err(e) => schedule_error(e),
    }
}

async fn cron_remove(State(s): State<AdminState>, Query(q): Query<CronQuery>) -> Response {
    let Some(id) = q.id else {
        return fail(StatusCode::BAD_REQUEST, "give ?id=");
    };
    match s.shared.scheduler.remove(&id).await {
        Ok(job) => axum::Json(json!(job)).into_response(),
        Err(e) => schedule_error(e),
    }
}

async fn cron_run(State(s): State<AdminState>, Query(q): Query<CronQuery>) -> Response {
    let Some(id) = q.id else {
        return fail(StatusCode::BAD_REQUEST, "give ?id=");
    };
    match s.shared.scheduler.run_now(&id).await {
        Ok(()) => axum::Json(json!({"ran": id})).into_response(),
        Err(e) => schedule_error(e),
    }
}
