//! Small JSON state files a channel keeps beside the store (where to catch up after a gap:
//! `discord-recent.json`, `slack-recent.json`): read leniently, written atomically.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The file at `path`, or `None` when it is missing or unreadable (logged for `channel`):
/// a state file that cannot be read is nothing remembered.
pub fn read<T: DeserializeOwned>(path: &Path, channel: &str) -> Option<T> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| {
                tracing::warn!(file = %path.display(), error = %e,
                    "{channel}: ignoring an unreadable state file")
            })
            .ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e,
                "{channel}: cannot read the state file");
            None
        }
    }
}

/// Write `value` to `path` atomically: a crash leaves the old file or the new one.
pub fn write<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer(&mut tmp, value)?;
    tmp.as_file().sync_data()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Milliseconds since the Unix epoch (0 before it).
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
