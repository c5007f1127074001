//! Files people attach, downloaded from Discord's CDN into the workspace inbox when the
//! gateway asks, before the message's turn (intake only leaves them on the message).
//!
//! Attachment URLs are signed and expire after about a day, so a local copy is what the
//! agent can still read later. They need no token: none is sent (the bot token goes to the
//! API only). Each file is streamed to `<name>.part` with a running size check and renamed
//! when complete. A file too large, failed or not done in time becomes a note in the text
//! with its URL. Without an inbox folder, the attachments are handed on as URLs.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchboard_channel::files::{self, WriteError};
use switchboard_channel::{Attachment, InboundMessage, human_size};

/// The files intake leaves on a message (see `switchboard_channel::files`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Pending {
    /// The Discord message id, which keeps file names unique.
    pub message: String,
    /// As Discord described them, `location` being the CDN URL.
    pub files: Vec<Attachment>,
}

/// Why a file was not downloaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    #[error("larger than the {0} limit")]
    TooLarge(String),
    #[error("not done in time")]
    TimedOut,
    #[error("download failed: {0}")]
    Download(String),
    #[error("could not write to the inbox: {0}")]
    Io(#[from] std::io::Error),
}

/// Where and how to download.
pub(crate) struct Downloader<'a> {
    pub http: &'a reqwest::Client,
    pub inbox: Option<&'a Path>,
    pub max_bytes: u64,
    /// Longest one file may take.
    pub timeout: Duration,
}

impl Downloader<'_> {
    /// Download the files left on `msg`: an attachment for each, or a note in the text.
    pub async fn fetch_into(&self, msg: &mut InboundMessage) {
        let Some(pending) = files::take_pending::<Pending>(msg) else {
            return;
        };
        let Some(inbox) = self.inbox else {
            msg.attachments.extend(pending.files);
            return;
        };
        for (i, file) in pending.files.into_iter().enumerate() {
            let base = format!("dc-{}-{i}", pending.message);
            match self.download(inbox, &base, &file).await {
                Ok(local) => msg.attachments.push(local),
                Err(e) => {
                    tracing::warn!(message = %pending.message, error = %e,
                        "discord: file not downloaded");
                    files::add_note(msg, &note(&file, &e));
                }
            }
        }
    }

    async fn download(
        &self,
        inbox: &Path,
        base: &str,
        file: &Attachment,
    ) -> Result<Attachment, FileError> {
        let too_large = || FileError::TooLarge(human_size(self.max_bytes));
        if file.size > self.max_bytes {
            return Err(too_large());
        }
        tokio::fs::create_dir_all(inbox).await?;
        let dest = inbox.join(files::inbox_name(
            base,
            file.name.as_deref().unwrap_or_default(),
        ));
        let part = files::part_path(&dest);
        let written = match tokio::time::timeout(self.timeout, self.stream_to(file, &part)).await {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => {
                let _ = tokio::fs::remove_file(&part).await;
                return Err(e);
            }
            Err(_) => {
                let _ = tokio::fs::remove_file(&part).await;
                return Err(FileError::TimedOut);
            }
        };
        tokio::fs::rename(&part, &dest).await?;
        Ok(Attachment {
            location: dest.to_string_lossy().into_owned(),
            size: written,
            ..file.clone()
        })
    }

    /// GET the file into `part`; the bytes written.
    async fn stream_to(&self, file: &Attachment, part: &Path) -> Result<u64, FileError> {
        let too_large = || FileError::TooLarge(human_size(self.max_bytes));
        let failed = |e: reqwest::Error| {
            FileError::Download(switchboard_channel::redact_owned(
                e.without_url().to_string(),
            ))
        };
        let resp = self.http.get(&file.location).send().await.map_err(failed)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(FileError::Download(format!(
                "http status {}",
                status.as_u16()
            )));
        }
        if resp.content_length().is_some_and(|n| n > self.max_bytes) {
            return Err(too_large());
        }
        files::write_capped(resp.bytes_stream(), part, self.max_bytes)
            .await
            .map_err(|e| match e {
                WriteError::TooLarge => too_large(),
                WriteError::Stream(e) => failed(e),
                WriteError::Io(e) => e.into(),
            })
    }
}

/// The note added to the message text for a file that was not downloaded.
fn note(file: &Attachment, err: &FileError) -> String {
    let name = file.name.as_deref().unwrap_or("(unnamed)");
    let size = if file.size > 0 {
        format!(" ({})", human_size(file.size))
    } else {
        String::new()
    };
    format!(
        "[file {name}{size} not downloaded: {err}; {}]",
        file.location
    )
}
