//! Tests of the sled store: atomic batches, the journal through crashes, ids, locking.

use super::*;

#[tokio::test]
async fn batches_are_atomic_and_require_absent_detects_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let s: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let mut b = Batch::default();
    b.require_absent(Tree::Seen, "m1");
    b.put(Tree::Seen, "m1", "t");
    b.put(Tree::Inbox, 1u64.to_be_bytes(), "msg");
    assert_eq!(s.apply(b.clone()).unwrap(), Applied::Done);
    assert_eq!(s.apply(b).unwrap(), Applied::Conflict);
    assert_eq!(s.len(Tree::Inbox), 1);
    s.flush().await.unwrap();
    assert_eq!(
        s.get(Tree::Inbox, &1u64.to_be_bytes()).unwrap().unwrap(),
        b"msg"
    );
}

#[tokio::test]
async fn concurrent_flushes_share_fsyncs_and_data_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let syncs = Arc::new(crate::metrics::Histogram::default());
    {
        let s: Arc<dyn Store> = Arc::new(SledStore::open_with(dir.path(), syncs.clone()).unwrap());
        let mut tasks = Vec::new();
        for i in 0..200u64 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                s.put(Tree::Meta, &i.to_be_bytes(), b"v").unwrap();
                s.flush().await.unwrap();
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(s.next_id().unwrap() < s.next_id().unwrap());
    }
    // 200 flushes asked for while others were on their way: grouped, not one sync each.
    assert!(syncs.count() < 200, "{} syncs", syncs.count());
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(s.len(Tree::Meta), 200);
}

#[tokio::test]
async fn commits_are_durable_at_once_and_a_conflict_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
        let mut tasks = Vec::new();
        for i in 0..100u64 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let mut b = Batch::default();
                b.require_absent(Tree::Seen, i.to_be_bytes());
                b.put(Tree::Seen, i.to_be_bytes(), "t");
                b.put(Tree::Inbox, i.to_be_bytes(), "msg");
                s.commit(b).await.unwrap()
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), Applied::Done);
        }
        let mut again = Batch::default();
        again.require_absent(Tree::Seen, 7u64.to_be_bytes());
        again.put(Tree::Inbox, 1000u64.to_be_bytes(), "not written");
        assert_eq!(s.commit(again).await.unwrap(), Applied::Conflict);
        // The process "dies" here: no flush on the way out beyond what commit did.
        std::mem::forget(s);
    }
    // sled's own lock is held by the forgotten handle; read the files through a copy.
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let s = SledStore::open(copy.path()).unwrap();
    assert_eq!(s.len(Tree::Inbox), 100);
    assert_eq!(s.get(Tree::Inbox, &1000u64.to_be_bytes()).unwrap(), None);
}

/// A copy of the store's files as a crash would leave them (the store still open).
pub(in crate::store) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn meta(s: &SledStore, key: &str) -> Option<Vec<u8>> {
    s.get(Tree::Meta, key.as_bytes()).unwrap()
}

async fn commit_meta(s: &SledStore, pairs: &[(&str, &str)]) {
    let mut b = Batch::default();
    for (k, v) in pairs {
        b.put(Tree::Meta, *k, *v);
    }
    assert_eq!(s.commit(b).await.unwrap(), Applied::Done);
}

#[tokio::test]
async fn the_journal_is_applied_again_in_order_over_what_sled_kept() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledStore::open(dir.path()).unwrap();
        commit_meta(&s, &[("k", "a")]).await;
        commit_meta(&s, &[("k", "b"), ("j", "c")]).await;
    } // a clean close: sled has both, the journal is gone
    let jdir = dir.path().join("journal");
    assert!(journal::files(&jdir).unwrap().is_empty());
    // A journal as a crash could leave it: batches sled has, then ones it lost.
    let put = |k: &str, v: &str| Op::Put(Tree::Meta, k.into(), v.into());
    let mut bytes = Vec::new();
    journal::encode(&mut bytes, &[put("k", "a")]);
    journal::encode(&mut bytes, &[put("k", "b"), put("j", "c")]);
    journal::encode(
        &mut bytes,
        &[put("m", "z"), Op::Delete(Tree::Meta, "j".into())],
    );
    std::fs::write(journal::path_of(&jdir, 5), &bytes).unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(meta(&s, "k").as_deref(), Some(&b"b"[..]));
    assert_eq!(meta(&s, "j"), None);
    assert_eq!(meta(&s, "m").as_deref(), Some(&b"z"[..]));
    assert!(
        journal::files(&jdir).unwrap().len() == 1,
        "only the new, empty file"
    );
    // Later commits survive a crash too.
    commit_meta(&s, &[("n", "1")]).await;
    std::mem::forget(s);
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let s = SledStore::open(copy.path()).unwrap();
    assert_eq!(meta(&s, "n").as_deref(), Some(&b"1"[..]));
    assert_eq!(meta(&s, "m").as_deref(), Some(&b"z"[..]));
}

#[tokio::test]
async fn of_two_commits_requiring_the_same_key_absent_one_applies() {
    let dir = tempfile::tempdir().unwrap();
    let s: Arc<dyn Store> = Arc::new(SledStore::open(dir.path()).unwrap());
    let attempt = |v: &'static str| {
        let s = s.clone();
        tokio::spawn(async move {
            let mut b = Batch::default();
            b.require_absent(Tree::Seen, "id");
            b.put(Tree::Seen, "id", v);
            s.commit(b).await.unwrap()
        })
    };
    for _ in 0..20 {
        let (a, b) = (attempt("a"), attempt("b"));
        let results = [a.await.unwrap(), b.await.unwrap()];
        assert_eq!(
            results.iter().filter(|r| **r == Applied::Done).count(),
            1,
            "{results:?}"
        );
        s.delete(Tree::Seen, b"id").unwrap();
    }
}

#[tokio::test]
async fn a_record_cut_short_by_a_crash_is_skipped_and_the_store_opens() {
    let dir = tempfile::tempdir().unwrap();
    drop(SledStore::open(dir.path()).unwrap());
    let jdir = dir.path().join("journal");
    let mut bytes = Vec::new();
    journal::encode(
        &mut bytes,
        &[Op::Put(Tree::Meta, "whole".into(), "1".into())],
    );
    journal::encode(
        &mut bytes,
        &[Op::Put(Tree::Meta, "torn".into(), "1".into())],
    );
    bytes.truncate(bytes.len() - 2);
    std::fs::write(journal::path_of(&jdir, 1), &bytes).unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    assert!(meta(&s, "whole").is_some());
    assert!(meta(&s, "torn").is_none());
    commit_meta(&s, &[("after", "1")]).await;
    assert!(meta(&s, "after").is_some());
}

#[tokio::test]
async fn a_damaged_record_loses_only_its_batch_and_the_file_is_kept_aside() {
    let dir = tempfile::tempdir().unwrap();
    drop(SledStore::open(dir.path()).unwrap());
    let jdir = dir.path().join("journal");
    let put = |k: &str| Op::Put(Tree::Meta, k.into(), "1".into());
    let mut bytes = Vec::new();
    journal::encode(&mut bytes, &[put("before")]);
    let damaged_at = bytes.len() + 12;
    journal::encode(&mut bytes, &[put("damaged")]);
    journal::encode(&mut bytes, &[put("after")]);
    bytes[damaged_at] ^= 0x20;
    std::fs::write(journal::path_of(&jdir, 3), &bytes).unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    assert!(meta(&s, "before").is_some());
    assert!(meta(&s, "damaged").is_none());
    assert!(
        meta(&s, "after").is_some(),
        "the batches after the damage are applied"
    );
    let kept = journal::path_of(&jdir, 3).with_extension("log.damaged");
    assert_eq!(
        std::fs::read(&kept).unwrap(),
        bytes,
        "the file is kept as it was"
    );
    commit_meta(&s, &[("later", "1")]).await;
    assert!(kept.exists(), "not cleaned up with the journal");
}

#[tokio::test]
async fn a_store_whose_files_lost_everything_is_refused_not_opened_empty() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = SledStore::open(dir.path()).unwrap();
        commit_meta(&s, &[("kept", "1")]).await;
    }
    // Reopened as it is: fine. Then a crash leaves a batch in the journal.
    let s = SledStore::open(dir.path()).unwrap();
    commit_meta(&s, &[("journalled", "1")]).await;
    std::mem::forget(s);
    let dir = {
        let copy = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), copy.path());
        copy
    };
    assert!(journal_bytes(dir.path()) > 0);
    // sled's data gone (the snapshot removed, the log zeroed): sled would open it empty,
    // and only the journal's batch would be there.
    let sled_dir = dir.path().join("store");
    for entry in std::fs::read_dir(&sled_dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("snap.") {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    let db = sled_dir.join("db");
    let len = std::fs::metadata(&db).unwrap().len();
    std::fs::write(&db, vec![0u8; len as usize]).unwrap();
    let err = SledStore::open(dir.path()).err().expect("refused");
    assert!(err.to_string().contains("opened empty"), "{err}");
    // A new store in an empty folder is made as before.
    let fresh = tempfile::tempdir().unwrap();
    drop(SledStore::open(fresh.path()).unwrap());
    drop(SledStore::open(fresh.path()).unwrap());
}

/// Bytes in the journal files of the store in `dir`.
fn journal_bytes(dir: &Path) -> u64 {
    journal::files(&dir.join("journal"))
        .unwrap()
        .iter()
        .map(|(_, p)| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}

#[tokio::test]
async fn a_checkpoint_leaves_no_journal_to_apply_again() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    commit_meta(&s, &[("a", "1"), ("b", "2")]).await;
    (&s as &dyn Store).put(Tree::Meta, b"direct", b"3").unwrap();
    s.flush().await.unwrap();
    assert!(journal_bytes(dir.path()) > 0);
    s.checkpoint().await.unwrap();
    assert_eq!(journal_bytes(dir.path()), 0);
    assert_eq!(meta(&s, "direct").as_deref(), Some(&b"3"[..]));
    commit_meta(&s, &[("c", "4")]).await;
    assert_eq!(meta(&s, "c").as_deref(), Some(&b"4"[..]));
}

#[tokio::test]
async fn a_direct_write_is_journalled_soon_without_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    // Never quiet long enough to fold: only the direct-write rule can write the journal.
    let timing = crate::store::group_commit::Timing {
        rotate_every: std::time::Duration::from_secs(3600),
        direct_within: std::time::Duration::from_millis(50),
        ..Default::default()
    };
    let s = SledStore::open_timed(dir.path(), Arc::default(), timing).unwrap();
    // The case to cover: the writer already idle, in the long wait, when the write comes.
    // (A pause to let it get there, not a wait for a result.)
    s.flush().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // A reply's delivered mark, and no commit after it.
    (&s as &dyn Store)
        .put(Tree::Meta, b"delivered", b"1")
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while journal_bytes(dir.path()) == 0 {
        assert!(std::time::Instant::now() < deadline, "never journalled");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // The write itself is in the journal (what a start after a crash applies).
    let journalled = std::fs::read_dir(dir.path().join("journal"))
        .unwrap()
        .map(|f| std::fs::read(f.unwrap().path()).unwrap())
        .any(|bytes| bytes.windows(9).any(|w| w == b"delivered"));
    assert!(journalled);
    drop(s);
}

#[tokio::test]
async fn a_quiet_store_folds_its_journal_into_sled() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    commit_meta(&s, &[("a", "1")]).await;
    assert!(journal_bytes(dir.path()) > 0);
    // The writer checks the journal in after ROTATE_EVERY (2 s) without work.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while journal_bytes(dir.path()) > 0 {
        assert!(std::time::Instant::now() < deadline, "the journal was kept");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(meta(&s, "a").as_deref(), Some(&b"1"[..]));
}

#[tokio::test]
async fn a_failed_journal_append_shows_in_readyz_and_its_direct_writes_go_with_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    let refused = |s: &SledStore, on: bool| s.shared.refuse_appends.store(on, Ordering::Relaxed);
    let a_batch = || {
        let mut b = Batch::default();
        b.put(Tree::Meta, "refused", "1");
        b
    };
    // A full disk: `/readyz` says so until an append succeeds; with room again and no
    // write coming, the writer tries one by itself.
    refused(&s, true);
    let err = s.commit(a_batch()).await.unwrap_err();
    assert!(err.to_string().contains("journal write failed"), "{err}");
    let why = s.unwritable().expect("unwritable while appends fail");
    assert!(why.contains("No space left"), "{why}");
    refused(&s, false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while s.unwritable().is_some() {
        assert!(std::time::Instant::now() < deadline, "still unwritable");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A direct write (a delivered mark, say), then a commit whose append fails: the next
    // append carries the direct write.
    (&s as &dyn crate::store::Store)
        .put(Tree::Meta, b"direct", b"1")
        .unwrap();
    refused(&s, true);
    s.commit(a_batch()).await.unwrap_err();
    refused(&s, false);
    commit_meta(&s, &[("later", "1")]).await;
    // A crash now: only the journal holds the direct write.
    std::mem::forget(s);
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let s = SledStore::open(copy.path()).unwrap();
    assert_eq!(meta(&s, "later").as_deref(), Some(&b"1"[..]));
    assert_eq!(meta(&s, "direct").as_deref(), Some(&b"1"[..]));
    assert_eq!(meta(&s, "refused"), None);
}

#[tokio::test]
async fn a_write_sled_refuses_stays_in_the_journal_for_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    {
        // Not opened again in this run (see `slot_tests`): only a restart applies it.
        let timing = crate::store::group_commit::Timing {
            reopen_every: std::time::Duration::from_secs(3600),
            ..Default::default()
        };
        let s = SledStore::open_timed(dir.path(), Arc::default(), timing).unwrap();
        commit_meta(&s, &[("before", "1")]).await;
        s.shared.refuse_writes.store(true, Ordering::Relaxed);
        let mut b = Batch::default();
        b.put(Tree::Meta, "refused", "2");
        b.put(Tree::Inbox, 7u64.to_be_bytes(), "message");
        let err = s.commit(b).await.unwrap_err();
        assert!(err.to_string().contains("No space left"), "{err}");
        assert_eq!(meta(&s, "refused"), None);
        // From now on commits are refused before the journal: sled's dedup marks lag
        // it, and a retried message must not be journalled (and run) once per retry.
        assert!(s.unwritable().is_some());
        let journalled = journal_bytes(dir.path());
        for _ in 0..3 {
            let mut retry = Batch::default();
            retry.put(Tree::Inbox, 8u64.to_be_bytes(), "retried message");
            let err = s.commit(retry).await.unwrap_err();
            assert!(err.to_string().contains("takes no more"), "{err}");
        }
        assert_eq!(journal_bytes(dir.path()), journalled);
        // Neither a checkpoint nor the store's end may delete what only the journal has.
        let err = s.checkpoint().await.unwrap_err();
        assert!(err.to_string().contains("journal is kept"), "{err}");
        assert!(journal_bytes(dir.path()) > 0);
    }
    assert!(
        journal_bytes(dir.path()) > 0,
        "closing the store deleted the journal"
    );
    let s = SledStore::open(dir.path()).unwrap();
    assert_eq!(meta(&s, "before").as_deref(), Some(&b"1"[..]));
    assert_eq!(meta(&s, "refused").as_deref(), Some(&b"2"[..]));
    assert_eq!(
        s.get(Tree::Inbox, &7u64.to_be_bytes()).unwrap().as_deref(),
        Some(&b"message"[..])
    );
    assert_eq!(s.get(Tree::Inbox, &8u64.to_be_bytes()).unwrap(), None);
    assert!(s.unwritable().is_none());
    // Applied and checked in: the journal goes as usual again.
    assert_eq!(journal_bytes(dir.path()), 0);
}

#[tokio::test]
async fn ids_stay_above_what_the_journal_restored_after_an_early_crash() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    let mut b = Batch::default();
    let mut seqs = Vec::new();
    for i in 0..3 {
        let seq = s.next_id().unwrap();
        b.put(Tree::Inbox, seq.to_be_bytes(), format!("message {i}"));
        seqs.push(seq);
    }
    s.commit(b).await.unwrap();
    // Killed before sled's first flush: only the journal has the entries.
    copy_dir(dir.path(), crashed.path());
    let s = SledStore::open(crashed.path()).unwrap();
    assert_eq!(s.len(Tree::Inbox), 3);
    let next = s.next_id().unwrap();
    assert!(
        seqs.iter().all(|seq| next > *seq),
        "{next} would overwrite one of {seqs:?}"
    );
}

#[test]
fn ids_taken_at_the_same_time_on_a_new_store_are_all_different() {
    let dir = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    // Publishing, staging replies and adding jobs all take ids, from any thread.
    let ids: Vec<u64> = std::thread::scope(|scope| {
        let takers: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    (0..20_000)
                        .map(|_| s.next_id().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        takers.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "{} ids handed out twice",
        ids.len() - unique.len()
    );
}

#[tokio::test]
async fn ids_kept_outside_the_inbox_and_outbox_are_not_handed_out_again_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let crashed = tempfile::tempdir().unwrap();
    let s = SledStore::open(dir.path()).unwrap();
    // A job id, say: only the cron tree holds it.
    let first = s.next_id().unwrap();
    let mut b = Batch::default();
    b.put(Tree::Cron, format!("j{first}"), "job");
    s.commit(b).await.unwrap();
    // Killed at once, before any checkpoint.
    copy_dir(dir.path(), crashed.path());
    let s = SledStore::open(crashed.path()).unwrap();
    assert!(
        s.get(Tree::Cron, format!("j{first}").as_bytes())
            .unwrap()
            .is_some()
    );
    let next = s.next_id().unwrap();
    assert!(next > first, "{next} is {first} again");
}

#[tokio::test]
async fn a_second_open_reports_locked() {
    let dir = tempfile::tempdir().unwrap();
    let _a = SledStore::open(dir.path()).unwrap();
    match SledStore::open(dir.path()) {
        // A sentence naming the holder (this process), not sled's dump of the OS error.
        Err(StoreError::Locked(m)) => {
            let pid = std::process::id();
            assert!(
                m.contains(&format!(
                    "is in use by another switchboard process (pid {pid})"
                )),
                "{m}"
            );
            assert!(!m.contains("Os {") && !m.contains("WouldBlock"), "{m}");
        }
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("expected Locked, got a second handle"),
    }
}

#[test]
fn the_data_folder_is_closed_to_other_users_and_a_failure_names_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    drop(SledStore::open(&data).unwrap());
    let mode = std::fs::metadata(&data).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o750,
        "closed to other users, the group left as set"
    );
    // A file where the folder should be.
    let blocked = dir.path().join("blocked");
    std::fs::write(&blocked, "").unwrap();
    let e = SledStore::open(&blocked)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains(&blocked.display().to_string()), "{e}");
}
