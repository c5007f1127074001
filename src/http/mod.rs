//! HTTP on `gateway.http_listen`: health, readiness, metrics, the OpenAI-compatible `api`
//! channel and the Slack Events API; plus the loopback-only admin API ([`admin`]).

mod access;
pub mod admin;
pub mod api;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::gateway::{GatewayError, Shared};

/// Bind `addr` and serve until shutdown; returns the bound address.
pub async fn serve(
    shared: Arc<Shared>,
    addr: SocketAddr,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> Result<SocketAddr, GatewayError> {
    let listener =
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|cause| GatewayError::Listen {
                addr: addr.to_string(),
                cause,
            })?;
    let bound = listener
        .local_addr()
        .map_err(|cause| GatewayError::Listen {
            addr: addr.to_string(),
            cause,
        })?;
    if !bound.ip().is_loopback() && crate::config::secret("SWITCHBOARD_API_TOKEN").is_none() {
        tracing::warn!(
            "HTTP listens on {bound} without SWITCHBOARD_API_TOKEN: /v1/chat/completions \
             answers only clients on this machine until it is set"
        );
    }
    let app = router(shared).into_make_service_with_connect_info::<SocketAddr>();
    tracker.spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::error!("HTTP server stopped: {e}");
        }
    });
    tracing::info!("HTTP listening on {bound}");
    Ok(bound)
}

fn router(shared: Arc<Shared>) -> Router {
    let r = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        // Reads its body itself, after the access check (see `api::BODY_LIMIT`).
        .route("/v1/chat/completions", post(api::chat_completions))
        .route("/v1/models", get(api::models));
    #[cfg(feature = "slack")]
    let r = r.route("/slack/events", post(slack_events));
    // After every route: it is set on each of them.
    r.method_not_allowed_fallback(api::wrong_method)
        .layer(axum::extract::DefaultBodyLimit::max(2 * 1024 * 1024))
        .fallback(api::no_route)
        .with_state(shared)
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let mut not_ready = shared.health.not_ready();
    if let Some(why) = shared.store.unwritable() {
        not_ready.insert("store".into(), why);
    }
    if not_ready.is_empty() {
        (
            StatusCode::OK,
            axum::Json(serde_json::json!({"ready": true})),
        )
            .into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({"ready": false, "not_ready": not_ready})),
        )
            .into_response()
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared.metrics.render(),
    )
        .into_response()
}

#[cfg(feature = "slack")]
async fn slack_events(
    State(shared): State<Arc<Shared>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Some(slack) = shared.slack.get() else {
        return (StatusCode::NOT_FOUND, "the Slack Events API is not enabled").into_response();
    };
    let (status, body, content_type) = slack.handle_events_request(&headers, &body).await;
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(header::CONTENT_TYPE, content_type)],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_port_in_use_is_named_once_with_its_cause() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap().to_string();
        let listener = tokio::net::TcpListener::bind(&addr).await;
        let e = super::super::gateway::GatewayError::Listen {
            addr: addr.clone(),
            cause: listener.unwrap_err(),
        };
        let said = format!("{:#}", anyhow::Error::from(e));
        assert!(
            said.starts_with(&format!("gateway.http_listen: cannot listen on {addr}: ")),
            "{said}"
        );
        assert_eq!(said.matches("in use").count(), 1, "{said}");
    }
}
