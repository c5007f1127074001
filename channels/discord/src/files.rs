//! Files people attach, downloaded from Discord's CDN into the workspace inbox when the
//! gateway asks, before the message's turn (intake only leaves them on the message).
//!
//! Attachment URLs are signed and expire after about a day, so a local copy is what the
//! agent can still read later. They need no token: none is sent (the bot token goes to the
//! API only). Each file is saved through `switchboard_channel::files::save` (a part file,
//! renamed when whole). A file too large, failed or not done in time becomes a note in the
//! text with its URL. Without an inbox folder, the attachments are handed on as URLs.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchboard_channel::files::{self, WriteError};
use switchboard_channel::{Attachment, InboundMessage, human_size};
use tokio::sync::Semaphore;

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
    /// The adapter's downloads at once, across chats.
    pub slots: &'a Semaphore,
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
        let bases: Vec<(String, &Attachment)> = (0..)
            .map(|i| format!("dc-{}-{i}", pending.message))
            .zip(&pending.files)
            .collect();
        let note = |(_, file): &(String, &Attachment), why: &dyn std::fmt::Display| note(file, why);
        let (slots, limit) = (self.slots, self.timeout);
        files::fetch_onto(
            msg,
            slots,
            limit,
            &bases,
            |(base, file)| self.download(inbox, base, file),
            note,
        )
        .await;
    }

    async fn download(
        &self,
        inbox: &Path,
        base: &str,
        file: &Attachment,
    ) -> Result<Attachment, FileError> {
        if file.size > self.max_bytes {
            return Err(FileError::TooLarge(human_size(self.max_bytes)));
        }
        let name = files::inbox_name(base, file.name.as_deref().unwrap_or_default());
        let dest = inbox.join(name);
        let written = self.save(file, &dest).await?;
        Ok(Attachment {
            location: dest.to_string_lossy().into_owned(),
            size: written,
            ..file.clone()
        })
    }

    /// GET the file and save it as `dest`; the bytes written.
    async fn save(&self, file: &Attachment, dest: &Path) -> Result<u64, FileError> {
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
        files::save(resp.bytes_stream(), dest, self.max_bytes)
            .await
            .map_err(|e| match e {
                WriteError::TooLarge => too_large(),
                WriteError::Stream(e) => failed(e),
                WriteError::Io(e) => e.into(),
            })
    }
}

/// The note added to the message text for a file that was not downloaded.
fn note(file: &Attachment, err: &dyn std::fmt::Display) -> String {
    files::not_downloaded(file.name.as_deref(), file.size, err, &file.location)
}
