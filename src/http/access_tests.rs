//! Tests of the HTTP API's access rules.

use super::*;

fn status(token: Option<&str>, auth: Option<&str>, peer: &str) -> StatusCode {
    let mut headers = HeaderMap::new();
    if let Some(a) = auth {
        headers.insert(axum::http::header::AUTHORIZATION, a.parse().unwrap());
    }
    match access(token, &headers, peer.parse().unwrap()) {
        Ok(()) => StatusCode::OK,
        Err((status, ..)) => status,
    }
}

#[test]
fn without_a_token_only_this_machine_may_call() {
    for local in ["127.0.0.1", "127.0.0.9", "::1", "::ffff:127.0.0.1"] {
        assert_eq!(status(None, None, local), StatusCode::OK, "{local}");
    }
    for remote in [
        "192.168.1.20",
        "172.17.0.1",
        "2001:db8::1",
        "::ffff:10.0.0.2",
    ] {
        assert_eq!(
            status(None, None, remote),
            StatusCode::FORBIDDEN,
            "{remote}"
        );
    }
}

#[test]
fn with_a_token_anyone_bearing_it_may_call() {
    let t = Some("s3cret");
    assert_eq!(
        status(t, Some("Bearer s3cret"), "192.168.1.20"),
        StatusCode::OK
    );
    assert_eq!(
        status(t, Some("bearer s3cret"), "127.0.0.1"),
        StatusCode::OK
    );
    for wrong in [None, Some("Bearer nope"), Some("Basic s3cret")] {
        assert_eq!(status(t, wrong, "127.0.0.1"), StatusCode::UNAUTHORIZED);
        assert_eq!(status(t, wrong, "192.168.1.20"), StatusCode::UNAUTHORIZED);
    }
}

/// A loopback request without a token, with `headers`.
fn local_with(headers: &[(&str, &str)]) -> StatusCode {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        map.insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    match access(None, &map, "127.0.0.1".parse().unwrap()) {
        Ok(()) => StatusCode::OK,
        Err((status, ..)) => status,
    }
}

#[test]
fn without_a_token_no_web_page_or_proxy_passes_as_this_machine() {
    // Programs on this machine, as curl and client libraries call it.
    for ok in [
        vec![],
        vec![("host", "127.0.0.1:8080")],
        vec![("host", "localhost:8080")],
        vec![("host", "[::1]:8080")],
        vec![("host", "localhost"), ("origin", "http://localhost:3000")],
        vec![
            ("sec-fetch-site", "same-site"),
            ("origin", "http://127.0.0.1:3000"),
        ],
    ] {
        assert_eq!(local_with(&ok), StatusCode::OK, "{ok:?}");
    }
    for refused in [
        // A page elsewhere posting to the gateway from the owner's browser.
        vec![("origin", "https://evil.example")],
        vec![("origin", "null")],
        vec![("sec-fetch-site", "cross-site")],
        // A page that rebound its own name to 127.0.0.1.
        vec![("host", "evil.example:8080")],
        // A reverse proxy on this machine, forwarding the internet.
        vec![("x-forwarded-for", "203.0.113.9")],
        vec![("forwarded", "for=203.0.113.9")],
        vec![("x-real-ip", "203.0.113.9")],
    ] {
        assert_eq!(local_with(&refused), StatusCode::FORBIDDEN, "{refused:?}");
    }
}
