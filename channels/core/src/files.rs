//! The files that come with messages.
//!
//! Intake never downloads: an adapter leaves its description of a message's files on the
//! message ([`leave_pending`]), publishes it at once, and the gateway has the adapter
//! fetch them ([`crate::Channel::fetch_files`]) when that chat's turn comes, so a large file
//! on a slow link holds up neither the platform's acknowledgement nor any other chat.
//!
//! Saving a download into the workspace inbox ([`save`]): it is written to `<name>.part`,
//! at most a given size, made durable and renamed once whole (a crash never leaves half a
//! file under that name); the part goes otherwise, also when the download is dropped.
//! The inbox is in the workspace, where `exec` can plant links: nothing is written through
//! one (see [`save`]).

use std::ffi::{OsStr, OsString};
use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use futures_util::{Stream, StreamExt};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

use crate::InboundMessage;

/// The [`InboundMessage::metadata`] key under which an adapter leaves a message's files
/// for [`crate::Channel::fetch_files`]: its own description of them, as JSON.
pub const PENDING: &str = "pending_files";

/// Files of one message fetched at once. With the bus fetching at most two messages of a
/// chat at once, one chat holds at most 4 of an adapter's download slots, and waits in
/// their queue with no more: a Discord post with 10 attachments leaves room for the
/// other chats.
const FILES_AT_ONCE: usize = 2;

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

/// The note put in a message's text for a file that was not downloaded:
/// `[file report.pdf (2.0 MB) not downloaded: <why>; <url>]`.
pub fn not_downloaded(
    name: Option<&str>,
    size: u64,
    why: &dyn std::fmt::Display,
    url: &str,
) -> String {
    let name = name.unwrap_or("(unnamed)");
    let size = if size > 0 {
        format!(" ({})", crate::human_size(size))
    } else {
        String::new()
    };
    format!("[file {name}{size} not downloaded: {why}; {url}]")
}

/// Why [`write_capped`] stopped.
#[derive(Debug)]
pub enum WriteError<E> {
    /// More than the size limit came.
    TooLarge,
    /// The download failed.
    Stream(E),
    /// The inbox could not be written.
    Io(io::Error),
}

impl<E> From<io::Error> for WriteError<E> {
    fn from(e: io::Error) -> Self {
        WriteError::Io(e)
    }
}

/// A file's name in the inbox: `base` (the adapter's unique part, safe already), then the
/// original name with only ASCII letters, digits, `.`, `-` and `_` kept (others become `_`,
/// leading dots go), so that a name from a platform never leaves the inbox.
pub fn inbox_name(base: &str, original: &str) -> PathBuf {
    const MAX_NAME: usize = 120;
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
    // Its end (the extension) kept, the whole within what a file system takes.
    let safe = safe.trim_start_matches('.');
    let safe = &safe[safe.len().saturating_sub(MAX_NAME)..];
    match safe {
        "" => PathBuf::from(base),
        safe => PathBuf::from(format!("{base}-{safe}")),
    }
}

/// Where a file is written until it is whole: `report.pdf` → `report.pdf.part`.
fn part_name(name: &OsStr) -> OsString {
    let mut part = name.to_os_string();
    part.push(".part");
    part
}

/// How a folder is opened by its name: never through a link.
const FOLDER: OFlags = OFlags::DIRECTORY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::RDONLY)
    .union(OFlags::CLOEXEC);

/// Open the inbox `folder` to save files in, created when missing. The folder above it
/// (the workspace) is taken as configured; the inbox itself is opened by its name from
/// there without following a link: `exec` can put a link there (`ln -s /home/me/.ssh
/// inbox`), and a download written through it would land wherever it leads. A link or
/// anything else that is not a folder is refused, logged, and left as it is.
fn open_inbox(folder: &Path) -> io::Result<OwnedFd> {
    let name = folder.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "the inbox has no folder name")
    })?;
    let above = match folder.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(above)?;
    let above = rustix::fs::open(above, FOLDER.difference(OFlags::NOFOLLOW), Mode::empty())?;
    let opened = match rustix::fs::openat(&above, name, FOLDER, Mode::empty()) {
        Err(Errno::NOENT) => {
            match rustix::fs::mkdirat(&above, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            rustix::fs::openat(&above, name, FOLDER, Mode::empty())
        }
        opened => opened,
    };
    let err = match opened {
        Ok(dir) => return Ok(dir),
        Err(e) => e,
    };
    let what = match rustix::fs::statat(&above, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => "a link",
        Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::Directory => "not a folder",
        _ => return Err(err.into()),
    };
    tracing::error!(
        inbox = %folder.display(),
        "the inbox is {what}: no file is saved through it; remove it and the gateway makes \
         a folder there"
    );
    Err(io::Error::other(format!(
        "the inbox is {what}, so nothing is saved through it (remove it, and a folder is made)"
    )))
}

/// Create the part file `part` in `dir`, only as a new file (never opening what is there,
/// never following a link). Something already there (a crash's part file, or a link put
/// in its place) loses its name first; what a link led to is not touched.
fn create_part(dir: &OwnedFd, part: &OsStr) -> io::Result<std::fs::File> {
    let create = || {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(dir, part, flags, Mode::from_raw_mode(0o666))
    };
    let fd = match create() {
        Err(Errno::EXIST) => {
            rustix::fs::unlinkat(dir, part, AtFlags::empty())?;
            create()?
        }
        created => created?,
    };
    Ok(std::fs::File::from(fd))
}

/// Removes the part file unless the download was saved: also when the download is
/// dropped half-way (a time limit, `/stop`), so no half file is left in the inbox. By its
/// name in the inbox opened, not by path (which could lead elsewhere by now).
struct PartFile<'a> {
    dir: &'a OwnedFd,
    name: Option<&'a OsStr>,
}

impl Drop for PartFile<'_> {
    fn drop(&mut self) {
        if let Some(part) = self.name {
            let _ = rustix::fs::unlinkat(self.dir, part, AtFlags::empty());
        }
    }
}

/// Save `chunks` as `dest`, at most `max_bytes`: written to `<dest>.part` (a new file),
/// synced, then renamed, so a crash never leaves half a file under its name. The bytes
/// written.
///
/// `dest`'s folder (the inbox) is opened as [`open_inbox`] does, and the part file is made
/// and renamed by name within that open folder: a link planted at the inbox, at the part
/// file's name or at `dest`'s is never written through. (The few calls on names are quick
/// and made in place; the bytes are written on tokio's blocking threads.)
pub async fn save<S, B, E>(chunks: S, dest: &Path, max_bytes: u64) -> Result<u64, WriteError<E>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    let (Some(folder), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no file name to save as").into());
    };
    let dir = open_inbox(folder)?;
    let part = part_name(name);
    let out = create_part(&dir, &part)?;
    let mut guard = PartFile {
        dir: &dir,
        name: Some(&part),
    };
    let written = write_capped(chunks, tokio::fs::File::from_std(out), max_bytes).await?;
    rustix::fs::renameat(&dir, &part, &dir, name).map_err(io::Error::from)?;
    guard.name = None;
    Ok(written)
}

/// Remove the files of the inbox `folder` last changed before `before` (seconds since the
/// epoch): the downloads a chat sent are kept that long (the platform keeps its own copy).
/// The inbox is opened as [`save`] opens it, never through a link, and only regular files
/// in it go, by name; a missing inbox is nothing to do. The number removed.
pub fn prune_inbox(folder: &Path, before: i64) -> io::Result<usize> {
    if std::fs::symlink_metadata(folder).is_err() {
        return Ok(0);
    }
    let dir = open_inbox(folder)?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        names.push(entry?.file_name().to_owned());
    }
    let mut removed = 0;
    for name in names {
        let Ok(st) = rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let file = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
        if file
            && st.st_mtime < before
            && rustix::fs::unlinkat(&dir, name.as_c_str(), AtFlags::empty()).is_ok()
        {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Write `chunks` into `out`, at most `max_bytes`, and sync it: the bytes written.
async fn write_capped<S, B, E>(
    chunks: S,
    mut out: tokio::fs::File,
    max_bytes: u64,
) -> Result<u64, WriteError<E>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    let mut chunks = std::pin::pin!(chunks);
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

/// Fetch a message's files and put them on `msg`, in their order: an attachment for each,
/// or, for one that did not come, `note(file, why)` in its text (and the log). A few at
/// once, each holding one of the adapter's download `slots` (shared by all its chats) and
/// taking at most `limit` once it has one.
pub async fn fetch_onto<'a, T, E, Fut>(
    msg: &mut InboundMessage,
    slots: &Semaphore,
    limit: std::time::Duration,
    files: &'a [T],
    fetch: impl Fn(&'a T) -> Fut,
    note: impl Fn(&T, &dyn std::fmt::Display) -> String,
) where
    Fut: Future<Output = Result<crate::Attachment, E>>,
    E: std::fmt::Display,
{
    let got = fetch_all(slots, files, |file| {
        let fetched = fetch(file);
        async move { tokio::time::timeout(limit, fetched).await }
    })
    .await;
    for (file, got) in files.iter().zip(got) {
        let why = match got {
            Ok(Ok(a)) => {
                msg.attachments.push(a);
                continue;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "not done in time".to_string(),
        };
        tracing::warn!(id = %msg.id, error = %why, "file not downloaded");
        add_note(msg, &note(file, &why));
    }
}

/// Run `fetch` for every item, [`FILES_AT_ONCE`] at a time, each holding one of the
/// `slots` while it runs: the results in the items' order.
async fn fetch_all<'a, T, R, Fut>(
    slots: &Semaphore,
    items: &'a [T],
    fetch: impl Fn(&'a T) -> Fut,
) -> Vec<R>
where
    Fut: Future<Output = R>,
{
    // Collected first: a stream over the `map` itself is not `Send` to the compiler (its
    // closure's lifetimes), which the adapters' `async_trait` futures must be.
    let fetching: Vec<_> = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let fetched = fetch(item);
            async move {
                // Never closed: a closed semaphore only means no limit.
                let _slot = slots.acquire().await;
                (i, fetched.await)
            }
        })
        .collect();
    // As each ends, the next begins (a slow file does not hold up the ones after it).
    let mut done: Vec<(usize, R)> = futures_util::stream::iter(fetching)
        .buffer_unordered(FILES_AT_ONCE)
        .collect()
        .await;
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inbox_keeps_what_is_newer_than_the_cut_and_follows_no_link() {
        use std::os::unix::fs::symlink;
        use std::time::{Duration, SystemTime};
        let dir = tempfile::tempdir().unwrap();
        let inbox = dir.path().join("inbox");
        assert_eq!(prune_inbox(&inbox, i64::MAX).unwrap(), 0, "no inbox yet");
        std::fs::create_dir_all(inbox.join("sub")).unwrap();
        let outside = dir.path().join("precious.txt");
        std::fs::write(&outside, "keep").unwrap();
        let old = SystemTime::now() - Duration::from_secs(40 * 86_400);
        for name in ["old.jpg", "new.pdf", "sub/deep.txt"] {
            let f = std::fs::File::create(inbox.join(name)).unwrap();
            if name != "new.pdf" {
                f.set_modified(old).unwrap();
            }
        }
        symlink(&outside, inbox.join("link.txt")).unwrap();
        let cut = SystemTime::now() - Duration::from_secs(30 * 86_400);
        let cut = cut
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert_eq!(prune_inbox(&inbox, cut).unwrap(), 1);
        assert!(!inbox.join("old.jpg").exists());
        assert!(inbox.join("new.pdf").exists() && inbox.join("sub/deep.txt").exists());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
        // An inbox that is a link is refused, and what it leads to left alone.
        std::fs::remove_dir_all(&inbox).unwrap();
        symlink(dir.path(), &inbox).unwrap();
        assert!(prune_inbox(&inbox, i64::MAX).is_err());
        assert!(outside.exists());
    }

    #[tokio::test]
    async fn saves_up_to_the_limit_and_leaves_no_part_file() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("in").join("a.pdf");
        assert_eq!(part_name(OsStr::new("a.pdf")), "a.pdf.part");
        let chunks = |n: usize| futures_util::stream::iter(vec![Ok::<_, ()>(vec![7u8; 10]); n]);
        assert_eq!(save(chunks(3), &dest, 30).await.unwrap(), 30);
        assert_eq!(std::fs::read(&dest).unwrap(), vec![7u8; 30]);
        let listing = || -> Vec<_> {
            std::fs::read_dir(dir.path().join("in"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect()
        };
        let other = dir.path().join("in").join("b.pdf");
        assert!(matches!(
            save(chunks(4), &other, 30).await,
            Err(WriteError::TooLarge)
        ));
        let failing = futures_util::stream::iter(vec![Ok(vec![1u8]), Err("gone")]);
        assert!(matches!(
            save(failing, &other, 30).await,
            Err(WriteError::Stream("gone"))
        ));
        // Dropped half-way (a time limit, `/stop`).
        let stalled = futures_util::stream::iter(vec![Ok::<_, ()>(vec![1u8])])
            .chain(futures_util::stream::pending());
        let cut = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            save(stalled, &other, 30),
        );
        assert!(cut.await.is_err());
        assert_eq!(listing(), ["a.pdf"]);
    }

    /// What a chat member with `exec` can plant in the inbox (names are predictable: the
    /// update id and the file's id): a link at the part file's name, at the file's own
    /// name, or at the inbox itself. Nothing is written through any of them.
    #[tokio::test]
    async fn links_planted_in_the_inbox_are_not_written_through() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let (ws, victim) = (dir.path().join("ws"), dir.path().join("victim"));
        std::fs::create_dir_all(ws.join("inbox")).unwrap();
        std::fs::create_dir(&victim).unwrap();
        let keys = victim.join("authorized_keys");
        std::fs::write(&keys, "ssh-ed25519 OWNER").unwrap();
        let upload = || futures_util::stream::iter(vec![Ok::<_, ()>(b"ssh-ed25519 EVE".to_vec())]);

        let first = ws.join("inbox/tg-1-UNIQ2-k.txt");
        symlink(&keys, ws.join("inbox/tg-1-UNIQ2-k.txt.part")).unwrap();
        assert_eq!(save(upload(), &first, 100).await.unwrap(), 15);
        let second = ws.join("inbox/tg-2-UNIQ2-k.txt");
        symlink(&keys, &second).unwrap();
        assert_eq!(save(upload(), &second, 100).await.unwrap(), 15);
        assert_eq!(std::fs::read_to_string(&keys).unwrap(), "ssh-ed25519 OWNER");
        for saved in [&first, &second] {
            assert!(saved.symlink_metadata().unwrap().is_file(), "{saved:?}");
            assert_eq!(std::fs::read(saved).unwrap(), b"ssh-ed25519 EVE");
        }

        // The inbox itself a link out, then a file: refused with a clear error.
        std::fs::rename(ws.join("inbox"), ws.join("inbox.old")).unwrap();
        symlink(&victim, ws.join("inbox")).unwrap();
        let third = ws.join("inbox/tg-3-UNIQ2-k.txt");
        let got = save(upload(), &third, 100).await;
        assert!(
            matches!(&got, Err(WriteError::Io(e)) if e.to_string().contains("the inbox is a link")),
            "{got:?}"
        );
        std::fs::remove_file(ws.join("inbox")).unwrap();
        std::fs::write(ws.join("inbox"), "").unwrap();
        let got = save(upload(), &third, 100).await;
        assert!(
            matches!(&got, Err(WriteError::Io(e)) if e.to_string().contains("not a folder")),
            "{got:?}"
        );
        let in_victim: Vec<_> = std::fs::read_dir(&victim)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(in_victim, ["authorized_keys"]);
        assert_eq!(std::fs::read_to_string(&keys).unwrap(), "ssh-ed25519 OWNER");

        // A missing inbox is made, as a folder.
        std::fs::remove_file(ws.join("inbox")).unwrap();
        assert_eq!(save(upload(), &third, 100).await.unwrap(), 15);
        assert!(ws.join("inbox").symlink_metadata().unwrap().is_dir());
    }

    #[tokio::test]
    async fn fetch_all_keeps_the_order_within_the_slots() {
        let slots = Semaphore::new(2);
        let running = std::sync::atomic::AtomicUsize::new(0);
        let most = std::sync::atomic::AtomicUsize::new(0);
        let items = [30u64, 10, 20, 0];
        let got = fetch_all(&slots, &items, |ms| {
            let (running, most) = (&running, &most);
            async move {
                use std::sync::atomic::Ordering::SeqCst;
                let now = running.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(*ms)).await;
                running.fetch_sub(1, SeqCst);
                *ms
            }
        })
        .await;
        assert_eq!(got, items);
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_message_with_many_files_leaves_slots_for_other_chats() {
        let slots = Semaphore::new(8);
        let hour = std::time::Duration::from_secs(3600);
        // A post with 10 attachments on a link that takes an hour for each.
        let album = [hour; 10];
        let slow = fetch_all(&slots, &album, |d| tokio::time::sleep(*d));
        let photo = [std::time::Duration::ZERO];
        let quick = fetch_all(&slots, &photo, |d| tokio::time::sleep(*d));
        tokio::pin!(slow);
        tokio::select! {
            // The album asks for its slots first.
            biased;
            _ = &mut slow => panic!("the album came down first"),
            got = tokio::time::timeout(std::time::Duration::from_secs(60), quick) => {
                assert!(got.is_ok(), "the other chat's photo waited for the album");
            }
        }
        assert_eq!(slots.available_permits(), 8 - FILES_AT_ONCE);
    }
}
