//! Files users share, downloaded into the workspace inbox with the bot token when the
//! gateway asks, before the message's turn (intake, which Slack's 3 s ack waits for, only
//! leaves them on the message).
//!
//! Slack's file URLs (`url_private_download`, else `url_private`) need `Authorization:
//! Bearer <bot token>` (scope `files:read`). Each file is streamed to `<name>.part` with a
//! running size check and renamed when complete, so a crash never leaves a half file under
//! the final name. A file not done in time, too large, or failed becomes a note in the
//! message text (its name and URL, never the token) instead of losing the message.
//! Redirects are followed by reqwest, which drops `Authorization` when one leads to another
//! host or port; a URL that is not Slack's to begin with (an external file) is not fetched.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_channel::files::{self, WriteError};
use switchboard_channel::{Attachment, AttachmentKind, InboundMessage, human_size};
use tokio::sync::Semaphore;

use crate::web::short;

/// The files intake leaves on a message (see `switchboard_channel::files`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Pending {
    /// The event id, which keeps file names unique.
    pub tag: String,
    pub files: Vec<FileRef>,
}

/// A shared file as the event describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FileRef {
    pub id: String,
    pub kind: AttachmentKind,
    pub name: Option<String>,
    pub mime: Option<String>,
    pub url: String,
    /// From the Events API; 0 when unknown (Socket Mode, through slack-morphism).
    pub size: u64,
}

impl FileRef {
    /// The file of one `files[]` entry, when it has a URL to fetch.
    pub fn from_event(f: &Value) -> Option<FileRef> {
        let s = |k: &str| f.get(k).and_then(Value::as_str).filter(|x| !x.is_empty());
        let url = s("url_private_download").or_else(|| s("url_private"))?;
        let mime = s("mimetype").map(str::to_string);
        let kind = match mime.as_deref().and_then(|m| m.split('/').next()) {
            Some("image") => AttachmentKind::Image,
            Some("audio") => AttachmentKind::Audio,
            Some("video") => AttachmentKind::Video,
            _ => AttachmentKind::Document,
        };
        Some(FileRef {
            id: s("id").unwrap_or_default().to_string(),
            kind,
            name: s("name").map(str::to_string),
            mime,
            url: url.to_string(),
            size: f.get("size").and_then(Value::as_u64).unwrap_or(0),
        })
    }
}

/// Why a file was not downloaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    #[error("larger than the {0} limit")]
    TooLarge(String),
    #[error("no inbox folder configured")]
    NoInbox,
    #[error("download failed: {0}")]
    Download(String),
    #[error("could not write to the inbox: {0}")]
    Io(#[from] std::io::Error),
}

/// Where and how to download.
pub(crate) struct Downloader<'a> {
    pub http: &'a reqwest::Client,
    pub bot_token: &'a str,
    /// The Web API's base URL: files on its host (and port) are Slack's too.
    pub api_url: &'a str,
    pub inbox: Option<&'a Path>,
    pub max_bytes: u64,
    /// Longest one file may take.
    pub timeout: Duration,
    /// The adapter's downloads at once, across chats.
    pub slots: &'a Semaphore,
}

impl Downloader<'_> {
    /// Download the files left on `msg`, adding an attachment for each, or a note to its
    /// text for a file that did not come.
    pub async fn fetch_into(&self, msg: &mut InboundMessage) {
        let Some(pending) = files::take_pending::<Pending>(msg) else {
            return;
        };
        let tag = pending.tag.as_str();
        let fetch = |file| self.download(tag, file);
        files::fetch_onto(msg, self.slots, self.timeout, &pending.files, fetch, note).await;
    }

    async fn download(&self, tag: &str, file: &FileRef) -> Result<Attachment, FileError> {
        let inbox = self.inbox.ok_or(FileError::NoInbox)?;
        if file.size > self.max_bytes {
            return Err(FileError::TooLarge(human_size(self.max_bytes)));
        }
        let dest = inbox.join(file_name(tag, file));
        let written = self.save(file, &dest).await?;
        Ok(Attachment {
            kind: file.kind,
            name: file.name.clone(),
            mime: file.mime.clone(),
            location: dest.to_string_lossy().into_owned(),
            size: written,
        })
    }

    /// GET the file and save it as `dest`; the bytes written.
    async fn save(&self, file: &FileRef, dest: &Path) -> Result<u64, FileError> {
        if !on_slack(&file.url, self.api_url) {
            return Err(FileError::Download(
                "not a Slack file URL (an external file), so not fetched with the bot token".into(),
            ));
        }
        let too_large = || FileError::TooLarge(human_size(self.max_bytes));
        // reqwest errors name the URL only, which carries no secret; `short` redacts anyway.
        let failed = |e: reqwest::Error| FileError::Download(short(&e.to_string()));
        let resp = self
            .http
            .get(&file.url)
            .bearer_auth(self.bot_token)
            .send()
            .await
            .map_err(failed)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(FileError::Download(format!(
                "http status {}",
                status.as_u16()
            )));
        }
        // Without a valid token (or without `files:read`) Slack answers with its sign-in
        // page, not an error: do not store that as the user's file.
        let html = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/html"));
        if html && file.mime.as_deref() != Some("text/html") {
            return Err(FileError::Download(
                "slack answered with a web page (is the files:read scope granted?)".into(),
            ));
        }
        if resp.content_length().is_some_and(|n| n > self.max_bytes) {
            return Err(too_large());
        }
        files::save(resp.bytes_stream(), dest, self.max_bytes)
            .await
            .map_err(|e| match e {
                WriteError::TooLarge => too_large(),
                WriteError::Stream(e) => failed(e),
                WriteError::Io(e) => e.into(),
            })
    }
}

/// Whether `url` is Slack's, so that the bot token may go with it: https on `slack.com` or
/// `slack-gov.com` (or a subdomain: `files.slack.com`), or the Web API's own host and port
/// (a self-hosted proxy, the tests' fake). An external file's URL (a shared Google Drive
/// document) may name any host, which must never be sent the token.
fn on_slack(url: &str, api_url: &str) -> bool {
    let Ok(u) = reqwest::Url::parse(url) else {
        return false;
    };
    let under = |host: &str, domain: &str| host == domain || host.ends_with(&format!(".{domain}"));
    let slack = u.scheme() == "https"
        && u.host_str()
            .is_some_and(|h| under(h, "slack.com") || under(h, "slack-gov.com"));
    let api = reqwest::Url::parse(api_url).is_ok_and(|a| {
        a.scheme() == u.scheme()
            && a.host_str() == u.host_str()
            && a.port_or_known_default() == u.port_or_known_default()
    });
    slack || api
}

/// `slack-<event id>-<file id>[-<original name>]`, with only safe characters (a name from
/// Slack must not escape the inbox).
fn file_name(tag: &str, file: &FileRef) -> PathBuf {
    let alnum = |s: &str| -> String { s.chars().filter(char::is_ascii_alphanumeric).collect() };
    let base = format!("slack-{}-{}", alnum(tag), alnum(&file.id));
    files::inbox_name(&base, file.name.as_deref().unwrap_or_default())
}

/// The note added to the message text for a file that was not downloaded.
pub(crate) fn note(file: &FileRef, err: &dyn std::fmt::Display) -> String {
    files::not_downloaded(file.name.as_deref(), file.size, err, &file.url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: Option<&str>) -> FileRef {
        FileRef {
            id: "F0-1".into(),
            kind: AttachmentKind::Document,
            name: name.map(str::to_string),
            mime: None,
            url: "https://files.slack.com/files-pri/T0-F01/a.pdf".into(),
            size: 30 * 1024 * 1024,
        }
    }

    #[test]
    fn file_names_stay_inside_the_inbox() {
        let n = file_name("Ev0:1", &file(Some("../../etc/passwd")));
        assert_eq!(n, PathBuf::from("slack-Ev01-F01-_.._etc_passwd"));
        assert_eq!(n.components().count(), 1);
        assert_eq!(
            file_name("Ev2", &file(None)),
            PathBuf::from("slack-Ev2-F01")
        );
    }

    #[test]
    fn notes_name_the_file_and_its_url() {
        let e = FileError::TooLarge(human_size(20 * 1024 * 1024));
        assert_eq!(
            note(&file(Some("big.zip")), &e),
            "[file big.zip (30.0 MB) not downloaded: larger than the 20.0 MB limit; \
             https://files.slack.com/files-pri/T0-F01/a.pdf]"
        );
    }

    #[test]
    fn the_token_goes_only_to_slack() {
        let api = "http://127.0.0.1:9000/api";
        for ok in [
            "https://files.slack.com/files-pri/T0-F1/a.pdf",
            "https://slack.com/x",
            "https://files.slack-gov.com/a",
            "http://127.0.0.1:9000/files/a",
        ] {
            assert!(on_slack(ok, api), "{ok}");
        }
        for no in [
            "https://drive.google.com/a",
            "https://evilslack.com/a",
            "https://slack.com.evil.example/a",
            "http://files.slack.com/a",
            "http://127.0.0.1:9001/files/a",
            "not a url",
        ] {
            assert!(!on_slack(no, api), "{no}");
        }
    }

    #[test]
    fn the_download_url_is_preferred() {
        let f = FileRef::from_event(&serde_json::json!({
            "id": "F1", "name": "a.pdf", "mimetype": "application/pdf",
            "url_private": "https://files.slack.com/a", "url_private_download": "https://files.slack.com/a/download",
        }))
        .expect("a file");
        assert_eq!(f.url, "https://files.slack.com/a/download");
        assert_eq!(f.size, 0);
    }
}
