//! Tests of reopening sled in process: after a failed write, and to give back memory, with
//! reads and writes going on.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::super::group_commit::Timing;
use super::super::sled_store::SledStore;
use super::super::sled_store::tests::copy_dir;
use super::super::{Applied, Batch, Store, Tree};

fn open(dir: &Path, reopen_every: Duration) -> SledStore {
    let timing = Timing {
        reopen_every,
        ..Timing::default()
    };
    SledStore::open_timed(dir, Arc::default(), timing).unwrap()
}

fn meta(s: &dyn Store, key: &str) -> Option<Vec<u8>> {
    s.get(Tree::Meta, key.as_bytes()).unwrap()
}

fn batch(key: &str, value: &str) -> Batch {
    let mut b = Batch::default();
    b.put(Tree::Meta, key, value);
    b
}

#[tokio::test]
async fn a_store_whose_sled_failed_a_write_takes_writes_again_once_the_disk_does() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path(), Duration::from_millis(50));
    s.commit(batch("before", "1")).await.unwrap();
    // sled refuses a write (a full disk); so does the journal, for a while.
    s.shared.refuse_writes.store(true, Ordering::Relaxed);
    s.shared.refuse_appends.store(false, Ordering::Relaxed);
    let err = s.commit(batch("refused", "2")).await.unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    s.shared.refuse_appends.store(true, Ordering::Relaxed);
    assert!(s.unwritable().is_some());
    let err = s.commit(batch("while_full", "3")).await.unwrap_err();
    assert!(err.to_string().contains("takes no more"), "{err}");
    // Reads go on meanwhile, and the reopen waits for a disk that takes writes: the tries
    // fail at the journal, before sled is closed.
    let waited = Instant::now();
    while waited.elapsed() < Duration::from_millis(300) {
        assert_eq!(meta(&s, "before").as_deref(), Some(&b"1"[..]));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(s.unwritable().is_some());
    // Room again: within a few tries the store is opened again and takes writes, and what
    // the journal kept of the refused write is there.
    s.shared.refuse_appends.store(false, Ordering::Relaxed);
    s.shared.refuse_writes.store(false, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.unwritable().is_some() {
        assert!(Instant::now() < deadline, "still refusing writes");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(meta(&s, "refused").as_deref(), Some(&b"2"[..]));
    assert_eq!(meta(&s, "while_full"), None);
    s.commit(batch("after", "4")).await.unwrap();
    (&s as &dyn Store).put(Tree::Meta, b"direct", b"5").unwrap();
    s.flush().await.unwrap();
    // A crash now keeps all of it.
    std::mem::forget(s);
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let s = SledStore::open(copy.path()).unwrap();
    for (k, v) in [
        ("before", "1"),
        ("refused", "2"),
        ("after", "4"),
        ("direct", "5"),
    ] {
        assert_eq!(meta(&s, k).as_deref(), Some(v.as_bytes()), "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reopening_while_chats_read_and_write_loses_nothing_and_fails_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(open(dir.path(), Duration::from_secs(3600)));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4u64 {
        let (s, stop) = (s.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let (mut n, mut ids) = (0u64, Vec::new());
            while !stop.load(Ordering::Relaxed) || n < 50 {
                let key = format!("w{w}-{n}");
                // A commit with a dedup key, a direct write, reads of both, a scan, an id.
                let mut b = batch(&key, "c");
                b.require_absent(Tree::Seen, key.as_bytes());
                b.put(Tree::Seen, key.as_bytes(), "t");
                assert_eq!(s.commit(b).await.unwrap(), Applied::Done);
                let direct = format!("{key}-direct");
                (&*s as &dyn Store)
                    .put(Tree::Meta, direct.as_bytes(), b"d")
                    .unwrap();
                assert_eq!(meta(&*s, &key).as_deref(), Some(&b"c"[..]));
                assert_eq!(meta(&*s, &direct).as_deref(), Some(&b"d"[..]));
                let mut seen = 0;
                s.for_each(Tree::Seen, format!("w{w}-").as_bytes(), &mut |_, _| {
                    seen += 1;
                    true
                })
                .unwrap();
                assert_eq!(seen, n + 1);
                ids.push(s.next_id().unwrap());
                n += 1;
            }
            (n, ids)
        }));
    }
    let mut reopened = 0;
    while reopened < 15 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        s.reopen_now().await.unwrap();
        reopened += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let mut all_ids = Vec::new();
    let mut written = Vec::new();
    for (w, t) in workers.into_iter().enumerate() {
        let (n, ids) = t.await.unwrap();
        // Each worker's ids rise, across every reopen.
        assert!(ids.windows(2).all(|p| p[0] < p[1]), "worker {w}: {ids:?}");
        all_ids.extend(ids);
        written.push(n);
    }
    let count = all_ids.len();
    all_ids.sort_unstable();
    all_ids.dedup();
    assert_eq!(all_ids.len(), count, "an id was handed out twice");
    s.flush().await.unwrap();
    // A crash now: everything acknowledged is there.
    let s = Arc::into_inner(s).unwrap();
    std::mem::forget(s);
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let s = SledStore::open(copy.path()).unwrap();
    for (w, n) in written.iter().enumerate() {
        for i in 0..*n {
            assert_eq!(meta(&s, &format!("w{w}-{i}")).as_deref(), Some(&b"c"[..]));
            assert_eq!(
                meta(&s, &format!("w{w}-{i}-direct")).as_deref(),
                Some(&b"d"[..])
            );
        }
    }
    assert!(s.next_id().unwrap() > *all_ids.last().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_holding_the_store_makes_a_reopen_give_up_not_hang() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(open(dir.path(), Duration::from_secs(3600)));
    s.commit(batch("a", "1")).await.unwrap();
    // A scan whose visitor reads the store again while a reopen waits for the scan.
    let (holding, held) = tokio::sync::oneshot::channel();
    let reader = std::thread::spawn({
        let s = s.clone();
        move || {
            let (mut inner, mut holding) = (None, Some(holding));
            s.for_each(Tree::Meta, b"", &mut |_, _| {
                // The scan holds the database from here on: the reopen may begin.
                if let Some(tx) = holding.take() {
                    let _ = tx.send(());
                }
                let waited = Instant::now();
                while s.shared.slot.open().is_some() {
                    assert!(
                        waited.elapsed() < Duration::from_secs(10),
                        "no reopen began"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                inner = Some(meta(&*s, "a"));
                true
            })
            .unwrap();
            inner
        }
    });
    held.await.unwrap();
    let err = s.reopen_now().await.unwrap_err();
    assert!(err.to_string().contains("held the store"), "{err}");
    assert_eq!(reader.join().unwrap(), Some(Some(b"1".to_vec())));
    // Nobody holds it now: the next one goes through.
    s.reopen_now().await.unwrap();
    assert_eq!(meta(&*s, "a").as_deref(), Some(&b"1"[..]));
    s.commit(batch("b", "2")).await.unwrap();
    assert_eq!(meta(&*s, "b").as_deref(), Some(&b"2"[..]));
}
