//! Downloading a message's files into the workspace inbox, within the size limit, when
//! the gateway asks before the message's turn (intake only leaves them on the message).
//!
//! `getFile` gives the path, `{api_url}/file/bot{token}/{path}` the bytes. The file is
//! streamed to `<name>.part` with a running size check and renamed when complete, so a
//! crash never leaves a half file under the final name. Problems become a note in the
//! message text instead of losing the message.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchboard_channel::files::{self, WriteError};
use switchboard_channel::{Attachment, AttachmentKind, InboundMessage, human_size};
use teloxide::Bot;
use teloxide::net::Download;
use teloxide::prelude::Requester;
use teloxide::types::FileId;
use tokio::sync::Semaphore;

use crate::TelegramConfig;
use crate::errors::scrub;
use crate::mapping::FileRef;

/// The files intake leaves on a message (see `switchboard_channel::files`).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Pending {
    /// The update id, which keeps file names unique.
    pub update: u32,
    pub files: Vec<FileRef>,
}

/// Fetch the files left on `msg`, at once within the adapter's download `slots`, each
/// within `limit` (`getFile` and the download together), keeping their order.
pub(crate) async fn fetch(
    bot: &Bot,
    cfg: &TelegramConfig,
    slots: &Semaphore,
    limit: Duration,
    msg: &mut InboundMessage,
) {
    let Some(pending) = files::take_pending::<Pending>(msg) else {
        return;
    };
    let (update, inbox) = (pending.update, &cfg.inbox_dir);
    let fetch = |file| download(bot, inbox, cfg.max_file_bytes, update, file);
    files::fetch_onto(msg, slots, limit, &pending.files, fetch, note).await;
}

/// Why a file was not downloaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MediaError {
    #[error("larger than the {limit} limit")]
    TooLarge { limit: String },
    #[error("Telegram would not give the file: {0}")]
    Api(String),
    #[error("download failed: {0}")]
    Download(String),
    #[error("could not write to the inbox: {0}")]
    Io(#[from] std::io::Error),
}

/// Download `file` into `inbox`; `tag` (the update id) keeps names unique.
async fn download(
    bot: &Bot,
    inbox: &Path,
    max_bytes: u64,
    tag: u32,
    file: &FileRef,
) -> Result<Attachment, MediaError> {
    let too_large = || MediaError::TooLarge {
        limit: human_size(max_bytes),
    };
    if file.size > max_bytes {
        return Err(too_large());
    }
    let meta = bot
        .get_file(FileId(file.file_id.clone()))
        .await
        .map_err(|e| MediaError::Api(scrub(&e.to_string())))?;
    if u64::from(meta.meta.size) > max_bytes {
        return Err(too_large());
    }
    let dest = inbox.join(file_name(tag, file, &meta.path));
    let stream = bot.download_file_stream(&meta.path);
    let written = files::save(stream, &dest, max_bytes)
        .await
        .map_err(|e| match e {
            WriteError::TooLarge => too_large(),
            WriteError::Stream(e) => MediaError::Download(scrub(&e.without_url().to_string())),
            WriteError::Io(e) => e.into(),
        })?;
    Ok(Attachment {
        kind: file.kind,
        name: file.name.clone(),
        mime: file.mime.clone(),
        location: dest.to_string_lossy().into_owned(),
        size: written,
    })
}

/// `tg-<update>-<unique id>[-<original name>]`, keeping the extension, with only safe
/// characters (a file name from Telegram must not escape the inbox).
fn file_name(tag: u32, file: &FileRef, remote_path: &str) -> PathBuf {
    let original = file
        .name
        .clone()
        .or_else(|| remote_path.rsplit('/').next().map(str::to_string))
        .unwrap_or_default();
    let unique: String = file
        .unique_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    files::inbox_name(&format!("tg-{tag}-{unique}"), &original)
}

/// The note added to the message text when a file could not be downloaded.
pub(crate) fn note(file: &FileRef, err: &dyn std::fmt::Display) -> String {
    let what = match file.kind {
        AttachmentKind::Image => "photo",
        AttachmentKind::Audio => "audio file",
        AttachmentKind::Voice => "voice message",
        AttachmentKind::Video => "video",
        AttachmentKind::Document => "document",
    };
    let name = file
        .name
        .as_deref()
        .map(|n| format!(" {n}"))
        .unwrap_or_default();
    let size = if file.size > 0 {
        format!(" ({})", human_size(file.size))
    } else {
        String::new()
    };
    format!("[{what}{name}{size} not downloaded: {err}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: Option<&str>) -> FileRef {
        FileRef {
            kind: AttachmentKind::Document,
            file_id: "F".into(),
            unique_id: "AQAD-x1".into(),
            size: 30 * 1024 * 1024,
            name: name.map(str::to_string),
            mime: None,
        }
    }

    #[test]
    fn file_names_stay_inside_the_inbox() {
        let n = file_name(7, &file(Some("../../etc/passwd")), "documents/file_1.pdf");
        assert_eq!(n, PathBuf::from("tg-7-AQADx1-_.._etc_passwd"));
        assert_eq!(n.components().count(), 1);
        let p = file_name(8, &file(None), "photos/file_3.jpg");
        assert_eq!(p, PathBuf::from("tg-8-AQADx1-file_3.jpg"));
    }

    #[test]
    fn too_large_note_names_the_file_and_limit() {
        let e = MediaError::TooLarge {
            limit: human_size(20 * 1024 * 1024),
        };
        assert_eq!(
            note(&file(Some("big.zip")), &e),
            "[document big.zip (30.0 MB) not downloaded: larger than the 20.0 MB limit]"
        );
    }
}
