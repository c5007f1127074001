//! Who may use the HTTP API: with `SWITCHBOARD_API_TOKEN` set, a bearer of it; without,
//! programs on the gateway's own machine only.

use std::net::IpAddr;

use axum::http::{HeaderMap, StatusCode};

/// Why a request is refused: status, message and OpenAI error type.
type Refusal = (StatusCode, &'static str, &'static str);

/// Whether a request may use the API: with `SWITCHBOARD_API_TOKEN` set, one bearing it;
/// without, one from this machine only (the agent has tools: a gateway listening on
/// 0.0.0.0 must not hand them to the network unasked).
pub(super) fn access(
    token: Option<&str>,
    headers: &HeaderMap,
    peer: IpAddr,
) -> Result<(), Refusal> {
    let Some(token) = token else {
        if !peer.to_canonical().is_loopback() {
            return Err((
                StatusCode::FORBIDDEN,
                "the API answers only clients on the gateway's own machine until SWITCHBOARD_API_TOKEN is set",
                "permission_error",
            ));
        }
        return local_only(headers);
    };
    let given = bearer(headers).unwrap_or("");
    if crate::http::admin::constant_time_eq(given.as_bytes(), token.as_bytes()) {
        Ok(())
    } else {
        Err((
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token",
            "authentication_error",
        ))
    }
}

/// The token of the request's `Authorization: Bearer <token>`, trimmed.
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    // The scheme is case-insensitive (RFC 9110).
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Without a token, "this machine" must mean a program on it, not anyone a program on it
/// passes along: a reverse proxy (it forwards the internet from loopback), a web page in
/// the owner's browser (a form or `fetch` posting cross-site needs no CORS preflight), or
/// a page that rebound its own host name to 127.0.0.1.
fn local_only(headers: &HeaderMap) -> Result<(), Refusal> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if ["forwarded", "x-forwarded-for", "x-real-ip"]
        .iter()
        .any(|h| headers.contains_key(*h))
    {
        return Err((
            StatusCode::FORBIDDEN,
            "a request forwarded by a proxy needs SWITCHBOARD_API_TOKEN to be set",
            "permission_error",
        ));
    }
    let cross_site = header("sec-fetch-site") == Some("cross-site");
    let foreign_origin =
        header("origin").is_some_and(|o| !local_host(o.split("://").nth(1).unwrap_or(o)));
    let foreign_host = header("host").is_some_and(|h| !local_host(h));
    if cross_site || foreign_origin || foreign_host {
        return Err((
            StatusCode::FORBIDDEN,
            "without SWITCHBOARD_API_TOKEN the API answers only programs on this machine that \
             call it as localhost or by a loopback address, never a web page",
            "permission_error",
        ));
    }
    Ok(())
}

/// Whether `host` (`name[:port]`, `[v6]:port`) is `localhost` or a loopback address.
fn local_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
