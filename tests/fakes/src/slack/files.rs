//! The fake's file host (`files.slack.com`): `/files/<path>`, like `url_private`.
//!
//! As Slack does, a request without the bot token is redirected to the sign-in page, an
//! HTML page answered with 200 — not an error status. A file can answer slowly, or redirect
//! elsewhere (another fake, standing for a CDN on another host). Every GET is recorded
//! with the `Authorization` header it carried.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{BOT_TOKEN, Shared};

/// A file the fake serves.
#[derive(Debug, Clone, Default)]
pub(super) struct HostedFile {
    pub body: Vec<u8>,
    pub mime: String,
    /// Served without a token (a pre-signed CDN URL).
    pub public: bool,
    /// Wait this long before answering.
    pub delay: Option<Duration>,
    /// Answer `302 Location: <url>` instead.
    pub redirect_to: Option<String>,
}

/// One GET of `/files/<path>`.
#[derive(Debug, Clone, PartialEq)]
pub struct FileGet {
    pub path: String,
    /// The `Authorization` header as received.
    pub authorization: Option<String>,
}

pub(super) async fn get(
    State(shared): State<Arc<Shared>>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let file = {
        let mut g = shared.lock();
        g.file_gets.push(FileGet {
            path: path.clone(),
            authorization: authorization.clone(),
        });
        g.files.get(&path).cloned()
    };
    shared.bump();
    let Some(file) = file else {
        return (StatusCode::NOT_FOUND, "file not found").into_response();
    };
    let authed = authorization.as_deref() == Some(&format!("Bearer {BOT_TOKEN}"));
    if !file.public && !authed {
        return (StatusCode::FOUND, [(header::LOCATION, "/signin")]).into_response();
    }
    if let Some(d) = file.delay {
        tokio::time::sleep(d).await;
    }
    if let Some(to) = file.redirect_to {
        return (StatusCode::FOUND, [(header::LOCATION, to)]).into_response();
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, file.mime)],
        file.body,
    )
        .into_response()
}

/// Slack's sign-in page, where unauthenticated file requests end up.
pub(super) async fn signin() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        "<html><body>Sign in to Fake Team</body></html>",
    )
        .into_response()
}
