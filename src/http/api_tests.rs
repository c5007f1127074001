//! Tests of the API channel's access rule.

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
