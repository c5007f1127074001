//! `web_fetch` through the tool registry: every spelling of a private, loopback or
//! link-local address is refused (also by name and after redirects), only http(s) is
//! fetched, and a body that never ends is cut.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::{Router, response::Redirect, routing::get};
use serde_json::json;
use switchboard::agent::tool::{ToolContext, ToolError};
use switchboard::agent::tools::{MAX_RESULT_CHARS, Registry, web::WebFetch};

async fn fetch(tool: WebFetch, url: &str) -> Result<String, ToolError> {
    let ctx = ToolContext {
        sender_is_owner: true,
        ..ToolContext::new("test:1".parse().unwrap(), std::env::temp_dir())
    };
    Registry::new(vec![Arc::new(tool)])
        .call(
            "web_fetch",
            &json!({ "url": url }).to_string(),
            &ctx,
            Duration::from_secs(15),
        )
        .await
}

/// A local server the fetcher is allowed to reach (it is private like every other test
/// target, so everything else stays refused).
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn refused(r: &Result<String, ToolError>) -> bool {
    matches!(r, Err(ToolError::Refused(_)))
}

#[tokio::test]
async fn every_spelling_of_a_private_address_is_refused() {
    for url in [
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0x7f000001/",
        "http://017700000001/",
        "http://127.1/",
        "http://0/",
        "http://0.0.0.0/",
        "http://100.64.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://[::]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://[fd12:3456::1]/",
        "http://localhost/",
        // Not global unicast: IPv4-translated, local-use NAT64, 6to4 of loopback, discard.
        "http://[::ffff:0:127.0.0.1]/",
        "http://[64:ff9b:1::7f00:1]/",
        "http://[2002:7f00:1::1]/",
        "http://[100::1]/",
    ] {
        let r = fetch(WebFetch::default(), url).await;
        assert!(refused(&r), "{url}: {r:?}");
    }
}

#[tokio::test]
async fn only_http_and_https_are_fetched() {
    for url in [
        "file:///etc/passwd",
        "ftp://example.com/",
        "gopher://example.com/",
        "data:text/plain,hi",
        "javascript:alert(1)",
    ] {
        let r = fetch(WebFetch::default(), url).await;
        assert!(
            matches!(&r, Err(ToolError::Refused(m)) if m.starts_with("only http and https")),
            "{url}: {r:?}"
        );
    }
    let r = fetch(WebFetch::default(), "not a url").await;
    assert!(matches!(r, Err(ToolError::Failed(_))), "{r:?}");
}

#[tokio::test]
async fn redirects_to_any_spelling_of_a_private_address_are_refused() {
    let app = Router::new()
        .route(
            "/hex",
            get(|| async { Redirect::temporary("http://0x7f.1/") }),
        )
        .route(
            "/v6",
            get(|| async { Redirect::temporary("http://[::ffff:a9fe:a9fe]/") }),
        )
        .route(
            "/name",
            get(|| async { Redirect::temporary("//localhost/") }),
        )
        .route(
            "/file",
            get(|| async { Redirect::temporary("file:///etc/passwd") }),
        );
    let addr = serve(app).await;
    for path in ["hex", "v6", "name", "file"] {
        let r = fetch(WebFetch::allowing(addr), &format!("http://{addr}/{path}")).await;
        assert!(refused(&r), "{path}: {r:?}");
    }
}

#[tokio::test]
async fn a_body_that_never_ends_is_cut() {
    let app = Router::new().route(
        "/endless",
        get(|| async {
            let chunk = bytes::Bytes::from(vec![b'a'; 64 * 1024]);
            axum::body::Body::from_stream(futures_util::stream::repeat_with(move || {
                Ok::<_, std::convert::Infallible>(chunk.clone())
            }))
        }),
    );
    let addr = serve(app).await;
    let r = fetch(WebFetch::allowing(addr), &format!("http://{addr}/endless"))
        .await
        .unwrap();
    assert!(r.chars().count() <= MAX_RESULT_CHARS + 100, "{}", r.len());
    assert!(r.starts_with("aaaa"));
}
