//! Helpers for the `secrets_*` tests: every log line captured (the binary's formatter, all
//! crates, TRACE), a server that quotes each request back in its error answer, and the check
//! that a text holds none of a test's secrets.
#![allow(dead_code)]

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;

pub const WAIT: Duration = Duration::from_secs(20);

#[derive(Clone)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything logged in this test process so far (one subscriber for all its tests; each
/// test looks for its own secrets).
pub fn logs() -> String {
    static LOGS: OnceLock<Buffer> = OnceLock::new();
    let buf = LOGS.get_or_init(|| {
        let buf = Buffer(Arc::default());
        let writer = buf.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        buf
    });
    String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned()
}

/// Panic if `text` (named `what`) holds any of `secrets`.
pub fn assert_clean(what: &str, text: &str, secrets: &[&str]) {
    for s in secrets {
        assert!(!text.contains(s), "{what} leaks the secret {s:?}:\n{text}");
    }
}

/// An HTTP server on 127.0.0.1 that answers every request with `status` and a body made by
/// `body` from the request head (request line, then the headers sorted by name), and counts
/// the requests.
pub struct Quoting {
    pub url: String,
    seen: Arc<(Mutex<usize>, Notify)>,
}

/// `{"message": "<request head>"}`, as a proxy that quotes what it refused might answer.
pub fn quote_head(head: &str) -> (String, String) {
    let body = serde_json::json!({ "message": head }).to_string();
    ("application/json".into(), body)
}

impl Quoting {
    pub async fn start(
        status: u16,
        body: impl Fn(&str) -> (String, String) + Send + Sync + 'static,
    ) -> Quoting {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<(Mutex<usize>, Notify)> = Arc::default();
        let body = Arc::new(body);
        let counter = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (body, counter) = (body.clone(), counter.clone());
                tokio::spawn(async move {
                    let Some(head) = read_head(&mut conn).await else {
                        return;
                    };
                    let (content_type, text) = body(&head);
                    let answer = format!(
                        "HTTP/1.1 {status} Quoted\r\ncontent-type: {content_type}\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{text}",
                        text.len()
                    );
                    let _ = conn.write_all(answer.as_bytes()).await;
                    let _ = conn.shutdown().await;
                    *counter.0.lock().unwrap() += 1;
                    counter.1.notify_waiters();
                });
            }
        });
        Quoting { url, seen }
    }

    /// Wait until `n` requests were answered; panics after [`WAIT`].
    pub async fn wait_requests(&self, n: usize) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let notified = self.seen.1.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if *self.seen.0.lock().unwrap() >= n {
                return;
            }
            assert!(
                tokio::time::timeout_at(deadline, notified).await.is_ok(),
                "{} saw fewer than {n} requests",
                self.url
            );
        }
    }
}

/// The request line and the headers (sorted by name, `; `-separated); the body is skipped.
async fn read_head(conn: &mut tokio::net::TcpStream) -> Option<String> {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let mut headers: Vec<&str> = lines.collect();
    headers.sort_by_key(|h| h.to_ascii_lowercase());
    Some(format!("{request_line}; {}", headers.join("; ")))
}

/// A loopback address nothing listens on.
pub fn closed_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    url
}

/// A server that accepts connections and drops them without a word.
pub async fn dropping_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            drop(conn);
        }
    });
    url
}
