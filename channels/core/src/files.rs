//! The files that come with messages.
//!
//! Intake never downloads: an adapter leaves its description of a message's files on the
//! message ([`leave_pending`]), publishes it at once, and the gateway has the adapter
//! fetch them ([`crate::Channel::fetch_files`]) when that chat's turn comes, so a large file
//! on a slow link holds up neither the platform's acknowledgement nor any other chat.
//!
//! Saving a download into the workspace inbox: it is written to `<name>.part`, at most a
//! given size, and made durable; the adapter renames it to its final name once whole (a
//! crash never leaves half a file under that name) and removes the part otherwise.

use std::path::{Path, PathBuf};

use futures_util::{Stream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::AsyncWriteExt;

use crate::InboundMessage;

/// The [`InboundMessage::metadata`] key under which an adapter leaves a message's files
/// for [`crate::Channel::fetch_files`]: its own description of them, as JSON.
pub const PENDING: &str = "pending_files";

/// Leave `files` on `msg` to be fetched before its turn.
pub fn leave_pending<T: Serialize>(msg: &mut InboundMessage, files: &T) {
    match serde_json::to_value(files) {
        Ok(v) => {
            msg.metadata.insert(PENDING.into(), v);
        }
        Err(e) => tracing::error!(id = %msg.id, "could not describe the message's files: {e}"),
    }
}

/// Whether `msg` has files left to fetch.
pub fn has_pending(msg: &InboundMessage) -> bool {
    msg.metadata.contains_key(PENDING)
}

/// Take the files left on `msg` (they are fetched once); `None` when there are none, or
/// when what was left does not read as `T` (an older build's, say), which is logged.
pub fn take_pending<T: DeserializeOwned>(msg: &mut InboundMessage) -> Option<T> {
    let v = msg.metadata.remove(PENDING)?;
    match serde_json::from_value(v) {
        Ok(files) => Some(files),
        Err(e) => {
            tracing::warn!(id = %msg.id, "the message's files cannot be read back: {e}");
            add_note(
                msg,
                "[files came with this message but could not be fetched]",
            );
            None
        }
    }
}

/// Add `note` (why a file is missing) to the message's text.
pub fn add_note(msg: &mut InboundMessage, note: &str) {
    if msg.text.is_empty() {
        msg.text = note.to_string();
    } else {
        msg.text = format!("{}\n\n{note}", msg.text);
    }
}

/// Why [`write_capped`] stopped.
#[derive(Debug)]
pub enum WriteError<E> {
    /// More than the size limit came.
    TooLarge,
    /// The download failed.
    Stream(E),
    /// The inbox could not be written.
    Io(std::io::Error),
}

impl<E> From<std::io::Error> for WriteError<E> {
    fn from(e: std::io::Error) -> Self {
        WriteError::Io(e)
    }
}

/// A file's name in the inbox: `base` (the adapter's unique part, safe already), then the
/// original name with only ASCII letters, digits, `.`, `-` and `_` kept (others become `_`,
/// leading dots go), so that a name from a platform never leaves the inbox.
pub fn inbox_name(base: &str, original: &str) -> PathBuf {
    let safe: String = original
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    match safe.trim_start_matches('.') {
        "" => PathBuf::from(base),
        safe => PathBuf::from(format!("{base}-{safe}")),
    }
}

/// Where `dest` is written until it is whole: `report.pdf` → `report.pdf.part`.
pub fn part_path(dest: &Path) -> PathBuf {
    dest.with_extension(match dest.extension() {
        Some(e) => format!("{}.part", e.to_string_lossy()),
        None => "part".to_string(),
    })
}

/// Write `chunks` into `part` (created, or emptied), at most `max_bytes`, and sync it: the
/// bytes written.
pub async fn write_capped<S, B, E>(
    chunks: S,
    part: &Path,
    max_bytes: u64,
) -> Result<u64, WriteError<E>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    let mut chunks = std::pin::pin!(chunks);
    let mut out = tokio::fs::File::create(part).await?;
    let mut written: u64 = 0;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(WriteError::Stream)?;
        let bytes = chunk.as_ref();
        written += bytes.len() as u64;
        if written > max_bytes {
            return Err(WriteError::TooLarge);
        }
        out.write_all(bytes).await?;
    }
    out.flush().await?;
    out.sync_all().await?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn writes_up_to_the_limit_and_no_further() {
        let dir = tempfile::tempdir().unwrap();
        let part = part_path(&dir.path().join("a.pdf"));
        assert!(part.ends_with("a.pdf.part"), "{part:?}");
        let chunks = |n: usize| futures_util::stream::iter(vec![Ok::<_, ()>(vec![7u8; 10]); n]);
        assert_eq!(write_capped(chunks(3), &part, 30).await.unwrap(), 30);
        assert_eq!(std::fs::read(&part).unwrap(), vec![7u8; 30]);
        assert!(matches!(
            write_capped(chunks(4), &part, 30).await,
            Err(WriteError::TooLarge)
        ));
        let failing = futures_util::stream::iter(vec![Ok(vec![1u8]), Err("gone")]);
        assert!(matches!(
            write_capped(failing, &part, 30).await,
            Err(WriteError::Stream("gone"))
        ));
    }
}
