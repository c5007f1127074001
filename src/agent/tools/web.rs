//! `web_fetch` (a page as readable text) and `web_search` (Brave Search API).
//!
//! `web_fetch` resolves the host itself, refuses any non-public address (see [`super::net`]),
//! then connects to exactly the address it checked (no second DNS answer can slip in),
//! verifies the peer it actually reached is that address, and follows redirects by hand so
//! every hop is checked the same way.

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::net::is_public;
use crate::agent::tool::{Tool, ToolContext, ToolError};

/// Largest body read, in bytes.
const MAX_BODY: usize = 2 * 1024 * 1024;
const MAX_REDIRECTS: usize = 5;
const FETCH_TIMEOUT: Duration = Duration::from_secs(20);
const USER_AGENT: &str = concat!("switchboard/", env!("CARGO_PKG_VERSION"), " (web_fetch)");

/// `web_fetch`: a URL's content as text.
#[derive(Default)]
pub struct WebFetch {
    /// Addresses allowed despite being private (tests point this at a local fake).
    allow: Vec<SocketAddr>,
}

impl WebFetch {
    /// A fetcher that may also reach `addr` (for tests against a local server).
    pub fn allowing(addr: SocketAddr) -> Self {
        Self { allow: vec![addr] }
    }

    async fn checked_addr(&self, url: &url::Url) -> Result<SocketAddr, ToolError> {
        let host = url
            .host_str()
            .ok_or_else(|| ToolError::Failed("the URL has no host".into()))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let host_trim = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match host_trim.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host_trim, port))
                .await
                .map_err(|e| ToolError::Failed(format!("cannot resolve {host}: {e}")))?
                .collect(),
        };
        let first = *addrs
            .first()
            .ok_or_else(|| ToolError::Failed(format!("{host} has no address")))?;
        // Every answer must be public: a name with one private answer is refused outright.
        if let Some(bad) = addrs
            .iter()
            .find(|a| !is_public(a.ip()) && !self.allow.contains(a))
        {
            return Err(ToolError::Refused(format!(
                "{host} resolves to a private, loopback or link-local address ({})",
                bad.ip()
            )));
        }
        Ok(first)
    }
}

#[async_trait]
impl Tool for WebFetch {
    fn name(&self) -> &'static str {
        "web_fetch"
    }
    fn description(&self) -> &'static str {
        "Fetch a public web page (http/https) and return it as readable text."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["url"], "properties": {"url": {"type": "string", "minLength": 1}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let raw = args["url"].as_str().unwrap_or_default();
        let mut url =
            url::Url::parse(raw).map_err(|e| ToolError::Failed(format!("bad URL {raw}: {e}")))?;
        for _ in 0..=MAX_REDIRECTS {
            if !matches!(url.scheme(), "http" | "https") {
                return Err(ToolError::Refused(format!(
                    "only http and https URLs, not {}",
                    url.scheme()
                )));
            }
            let addr = self.checked_addr(&url).await?;
            let host = url.host_str().unwrap_or_default().to_string();
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(FETCH_TIMEOUT)
                // A proxy from HTTP(S)_PROXY would resolve the name itself, past the check.
                .no_proxy()
                .resolve(&host, addr)
                .user_agent(USER_AGENT)
                .build()
                .map_err(|e| ToolError::Failed(format!("HTTP client: {e}")))?;
            let resp = client
                .get(url.clone())
                .send()
                .await
                .map_err(|e| ToolError::Failed(format!("fetch failed: {}", e.without_url())))?;
            // The name was pinned to the checked address; nothing is read from any other
            // (should an override ever miss and the system resolver answer instead).
            if let Some(peer) = resp.remote_addr() {
                if peer.ip() != addr.ip() {
                    return Err(ToolError::Refused(format!(
                        "{host} was reached at {} instead of the checked {}",
                        peer.ip(),
                        addr.ip()
                    )));
                }
            }
            let status = resp.status();
            if status.is_redirection() {
                let loc = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        ToolError::Failed(format!("HTTP {status} without a Location"))
                    })?;
                url = url
                    .join(loc)
                    .map_err(|e| ToolError::Failed(format!("bad redirect target {loc}: {e}")))?;
                continue;
            }
            let html = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|t| t.contains("html"));
            let mut body = Vec::new();
            let mut stream = resp.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk
                    .map_err(|e| ToolError::Failed(format!("read failed: {}", e.without_url())))?;
                body.extend_from_slice(&chunk);
                if body.len() >= MAX_BODY {
                    body.truncate(MAX_BODY);
                    break;
                }
            }
            let text = String::from_utf8_lossy(&body);
            let text = if html {
                html_to_text(&text)
            } else {
                text.into_owned()
            };
            let prefix = if status.is_success() {
                String::new()
            } else {
                format!("HTTP {status}\n")
            };
            return Ok(format!("{prefix}{text}"));
        }
        Err(ToolError::Failed(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }
}

/// HTML to readable text: scripts and styles dropped, blocks on their own lines,
/// list items as `- `, entities decoded, whitespace collapsed.
pub fn html_to_text(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut out = String::with_capacity(html.len() / 2);
    let mut i = 0;
    while i < html.len() {
        if html.as_bytes()[i] == b'<' {
            let Some(end) = html[i..].find('>').map(|e| i + e) else {
                break;
            };
            let tag = lower[i + 1..end].trim_start_matches('/');
            let name: String = tag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            let closing = lower.as_bytes().get(i + 1) == Some(&b'/');
            if !closing
                && matches!(
                    name.as_str(),
                    "script" | "style" | "noscript" | "template" | "svg"
                )
            {
                let close = format!("</{name}");
                i = lower[end..].find(&close).map_or(html.len(), |p| {
                    let at = end + p;
                    lower[at..].find('>').map_or(html.len(), |q| at + q + 1)
                });
                continue;
            }
            match name.as_str() {
                "br" | "p" | "div" | "tr" | "section" | "article" | "header" | "footer" | "h1"
                | "h2" | "h3" | "h4" | "h5" | "h6" | "pre" | "blockquote" | "table" | "ul"
                | "ol" | "title" => out.push('\n'),
                "li" if !closing => out.push_str("\n- "),
                "td" | "th" => out.push(' '),
                _ => {}
            }
            i = end + 1;
        } else {
            let next = html[i..].find('<').map_or(html.len(), |p| i + p);
            out.push_str(&decode_entities(&html[i..next]));
            i = next;
        }
    }
    let mut text = String::with_capacity(out.len());
    let mut blank = 0;
    for line in out.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if line.is_empty() {
            blank += 1;
            if blank == 1 && !text.is_empty() {
                text.push('\n');
            }
        } else {
            blank = 0;
            text.push_str(&line);
            text.push('\n');
        }
    }
    text.trim().to_string()
}

fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(p) = rest.find('&') {
        out.push_str(&rest[..p]);
        rest = &rest[p..];
        // By bytes: the 12th byte may fall inside a character ("&Москва"); `;` is ASCII, so
        // where it is found is a character boundary.
        let end = rest.as_bytes()[..rest.len().min(12)]
            .iter()
            .position(|&b| b == b';');
        let decoded = end.and_then(|e| {
            let ent = &rest[1..e];
            let c = match ent {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" | "#39" => Some('\''),
                "nbsp" => Some(' '),
                _ if ent.starts_with("#x") || ent.starts_with("#X") => {
                    u32::from_str_radix(&ent[2..], 16)
                        .ok()
                        .and_then(char::from_u32)
                }
                _ if ent.starts_with('#') => ent[1..].parse().ok().and_then(char::from_u32),
                _ => None,
            };
            c.map(|c| (c, e))
        });
        match decoded {
            Some((c, e)) => {
                out.push(c);
                rest = &rest[e + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `web_search`: the Brave Search API. Always offered: without its key, a call says how
/// to set one up, so the model can tell the user rather than guess it cannot search.
pub struct WebSearch {
    /// The key, or the variable that should hold it.
    api_key: Result<String, String>,
    endpoint: String,
    http: reqwest::Client,
}

impl WebSearch {
    /// The search tool as `agent.web_search_key_env` and `agent.web_search_url` say.
    pub fn from_config(agent: &crate::config::AgentConfig) -> Self {
        let var = agent.web_search_key_env.trim();
        let key = crate::config::secret(var).ok_or_else(|| var.to_string());
        Self::new(key, &agent.web_search_url)
    }

    /// A search tool against `endpoint` with `api_key` (or the name of its unset variable).
    pub fn new(api_key: Result<String, String>, endpoint: &str) -> Self {
        if let Ok(key) = &api_key {
            switchboard_channel::redact::register(key);
        }
        Self {
            api_key,
            endpoint: endpoint.to_string(),
            http: reqwest::Client::builder()
                .timeout(FETCH_TIMEOUT)
                .build()
                .unwrap_or_default(),
        }
    }
}

#[async_trait]
impl Tool for WebSearch {
    fn name(&self) -> &'static str {
        "web_search"
    }
    fn description(&self) -> &'static str {
        "Search the web; returns titles, URLs and snippets."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "required": ["query"],
               "properties": {"query": {"type": "string", "minLength": 1},
                              "count": {"type": "integer", "minimum": 1, "maximum": 20}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let key = self.api_key.as_ref().map_err(|var| {
            ToolError::Failed(format!(
                "web search is not set up (${var} is not set): the gateway's operator can get \
                 a Brave Search API key at https://brave.com/search/api/ and put it there"
            ))
        })?;
        let query = args["query"].as_str().unwrap_or_default();
        let count = args["count"].as_u64().unwrap_or(5);
        let resp = self
            .http
            .get(&self.endpoint)
            .query(&[("q", query), ("count", &count.to_string())])
            .header("X-Subscription-Token", key)
            .header("Accept", "application/json")
            .send()
            .await
            .map_err(|e| ToolError::Failed(format!("search failed: {}", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(ToolError::Failed(format!(
                "search failed: HTTP {}",
                resp.status()
            )));
        }
        let v: Value = resp.json().await.map_err(|e| {
            ToolError::Failed(format!("unreadable search answer: {}", e.without_url()))
        })?;
        let results: Vec<String> = v["web"]["results"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                format!(
                    "- {}\n  {}\n  {}",
                    r["title"].as_str().unwrap_or_default(),
                    r["url"].as_str().unwrap_or_default(),
                    html_to_text(r["description"].as_str().unwrap_or_default())
                )
            })
            .collect();
        if results.is_empty() {
            return Ok(format!("no results for {query}"));
        }
        Ok(results.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::{Tool, WebSearch, html_to_text};
    use serde_json::json;

    fn ctx() -> crate::agent::tool::ToolContext {
        crate::agent::tool::ToolContext::new(
            switchboard_channel::ChatKey::new("test", "1"),
            std::env::temp_dir(),
        )
    }

    #[tokio::test]
    async fn search_asks_brave_with_the_key_and_lists_the_results() {
        use axum::extract::{Query, State};
        use axum::http::HeaderMap;
        type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String)>>>;
        let seen: Seen = Default::default();
        let app = axum::Router::new()
            .route(
                "/res/v1/web/search",
                axum::routing::get(
                    |State(seen): State<Seen>,
                     headers: HeaderMap,
                     Query(q): Query<std::collections::HashMap<String, String>>| async move {
                        let token = headers["x-subscription-token"].to_str().unwrap().to_string();
                        seen.lock().unwrap().push((token, q["q"].clone(), q["count"].clone()));
                        axum::Json(json!({"web": {"results": [
                            {"title": "Rust", "url": "https://rust-lang.org/",
                             "description": "A <strong>language</strong> &amp; more"}
                        ]}}))
                    },
                ),
            )
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url = format!("http://{addr}/res/v1/web/search");
        let search = WebSearch::new(Ok("brave-test-key".into()), &url);
        let out = search
            .call(json!({"query": "rust lang", "count": 3}), &ctx())
            .await
            .unwrap();
        assert_eq!(out, "- Rust\n  https://rust-lang.org/\n  A language & more");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [("brave-test-key".into(), "rust lang".into(), "3".into())]
        );
    }

    #[tokio::test]
    async fn without_a_key_search_says_how_to_set_one_up() {
        let search = WebSearch::new(Err("SB_NO_SUCH_KEY".into()), "http://127.0.0.1:9/");
        let e = search
            .call(json!({"query": "anything"}), &ctx())
            .await
            .unwrap_err();
        let e = e.to_string();
        assert!(e.contains("$SB_NO_SUCH_KEY is not set"), "{e}");
        assert!(e.contains("brave.com/search/api"), "{e}");
    }

    #[test]
    fn html_becomes_readable_text() {
        let html = "<html><head><title>T</title><style>p{}</style><script>var x=1<2;</script></head>\
                    <body><h1>Hello &amp; welcome</h1><p>One&nbsp;two</p><ul><li>a</li><li>b &#x263A;</li></ul></body></html>";
        assert_eq!(
            html_to_text(html),
            "T\n\nHello & welcome\n\nOne two\n\n- a\n- b \u{263A}"
        );
    }

    #[test]
    fn an_ampersand_before_other_scripts_is_kept_as_text() {
        // The 12 bytes after `&` end inside a character here.
        assert_eq!(html_to_text("<p>&Москва</p>"), "&Москва");
        assert_eq!(
            html_to_text("<p>&amp;中文中 &中文中文</p>"),
            "&中文中 &中文中文"
        );
    }
}
