//! Group commit: writer threads inserting durably at once share journal
//! fsyncs, and a power cut at any commit loses none of what was acknowledged.
//!
//! Four threads insert durably (`Durability::Immediate` and `OnSync` +
//! `sync()`), in a store that grows by splits while they do. The sync hook
//! copies the journal file at every commit that reaches disk
//! (`JournalSynced`) and the store file at every checkpoint
//! (`StoreSynced`); when a thread's call returns it notes how many commits
//! had reached disk. Each copy is then opened as the disk a power cut would
//! leave (store file as of the last checkpoint, journal as of that commit,
//! whole: past its round's end lie zeros written ahead or an older round's
//! commits) and must hold every tag whose call returned before the next
//! commit reached disk, nothing never inserted, and every tag whole. Covers the bug class where a staged block is applied to the
//! store file before its commit is durable, or a reused journal replays a
//! stale round.

mod common;

use common::crash::{assert_check_ok, whole};
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;
use tagstore::testing::SyncPoint;
use tagstore::{journal_path, CreateOptions, Durability, Store, Tag};

const THREADS: usize = 4;
const PER_THREAD: usize = 150;

fn tag(t: usize, i: usize) -> Tag {
    Tag::new(
        format!("obj-{t}-{i:04}"),
        "r",
        format!("subj-{}", (t * 7 + i) % 23),
    )
}

/// One commit that reached disk: the journal file then, and the store file
/// as of the last checkpoint before it.
struct Capture {
    journal: Vec<u8>,
    store: Vec<u8>,
}

#[derive(Default)]
struct Recorder {
    store: Vec<u8>,
    captures: Vec<Capture>,
    /// Each acknowledged tag, with the commits on disk when its call returned.
    acks: Vec<(Tag, usize)>,
}

/// What [`run`] leaves: the captures, every tag acknowledged with the
/// commits on disk at its acknowledgement, and the directory holding it all.
struct Run {
    captures: Vec<Capture>,
    acks: Vec<(Tag, usize)>,
    _dir: tempfile::TempDir,
}

fn run(mode: Durability) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("g.tags");
    let store = Arc::new(Store::create(&path, &CreateOptions::default()).expect("create"));
    store.set_durability(mode).expect("set_durability");
    let rec = Arc::new(Mutex::new(Recorder {
        store: fs::read(&path).expect("read store"),
        ..Recorder::default()
    }));
    {
        let (rec, path) = (Arc::clone(&rec), path.clone());
        store.set_sync_hook(Some(Box::new(move |p: SyncPoint| {
            let mut r = rec.lock().unwrap_or_else(|e| e.into_inner());
            match p {
                SyncPoint::JournalSynced => {
                    let c = Capture {
                        journal: fs::read(journal_path(&path)).expect("read journal"),
                        store: r.store.clone(),
                    };
                    r.captures.push(c);
                }
                SyncPoint::StoreSynced => r.store = fs::read(&path).expect("read store"),
                // The strings file: these tests store no long tag.
                SyncPoint::StringsSynced => {}
                SyncPoint::Applied => {}
            }
        })));
    }
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, rec) = (Arc::clone(&store), Arc::clone(&rec));
            thread::spawn(move || {
                for i in 0..PER_THREAD {
                    let tg = tag(t, i);
                    match mode {
                        Durability::OnSync => {
                            store.insert(&tg).expect("insert");
                            store.sync().expect("sync");
                        }
                        _ => {
                            store
                                .insert_with(&tg, Some(Durability::Immediate))
                                .expect("insert");
                        }
                    }
                    let mut r = rec.lock().unwrap_or_else(|e| e.into_inner());
                    let on_disk = r.captures.len();
                    r.acks.push((tg, on_disk));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer thread");
    }
    store.set_sync_hook(None);
    let mut r = rec.lock().unwrap_or_else(|e| e.into_inner());
    let (captures, acks) = (std::mem::take(&mut r.captures), std::mem::take(&mut r.acks));
    let all: BTreeSet<Tag> = acks.iter().map(|(t, _)| t.clone()).collect();
    let live: BTreeSet<Tag> = store.tags().collect::<Result<_, _>>().expect("export");
    assert_eq!(live, all, "the live store holds every inserted tag");
    drop(store);
    Run {
        captures,
        acks,
        _dir: dir,
    }
}

fn check_capture(
    dir: &Path,
    k: usize,
    c: &Capture,
    acked: &BTreeSet<Tag>,
    all: &BTreeSet<Tag>,
    when: &str,
) {
    let path = dir.join(format!("cut{k}.tags"));
    fs::write(&path, &c.store).expect("write store image");
    fs::write(journal_path(&path), &c.journal).expect("write journal image");
    let s = Store::open(&path).unwrap_or_else(|e| panic!("{when}: open: {e}"));
    let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
    let lost: Vec<&Tag> = acked.difference(&got).collect();
    assert!(lost.is_empty(), "{when}: acknowledged tags lost: {lost:?}");
    let foreign: Vec<&Tag> = got.difference(all).collect();
    assert!(foreign.is_empty(), "{when}: never inserted: {foreign:?}");
    for t in all {
        whole(&s, t, when);
    }
    assert_eq!(s.len(), got.len() as u64, "{when}: len()");
    assert_check_ok(&s, when);
    drop(s);
    let _ = fs::remove_file(journal_path(&path));
    fs::remove_file(&path).expect("remove image");
}

fn power_cuts(mode: Durability) {
    let Run { captures, acks, .. } = run(mode);
    let all: BTreeSet<Tag> = acks.iter().map(|(t, _)| t.clone()).collect();
    assert_eq!(all.len(), THREADS * PER_THREAD);
    assert!(!captures.is_empty(), "commits were made");
    assert!(
        acks.iter().all(|(_, on_disk)| *on_disk > 0),
        "a call returned before any commit reached disk"
    );
    // Shared fsyncs are not asserted (a fast disk may let each writer
    // commit alone); what matters is that a cut at any commit is sound.
    let scratch = tempfile::tempdir().expect("tempdir");
    let step = (captures.len() / 60).max(1);
    for (k, c) in captures.iter().enumerate() {
        if k % step == 0 || k + 1 == captures.len() {
            let when = format!("{mode:?}: power cut after commit {k} of {}", captures.len());
            // Returned while commit k was the last on disk, or earlier.
            let acked: BTreeSet<Tag> = acks
                .iter()
                .filter(|(_, on_disk)| *on_disk <= k + 1)
                .map(|(t, _)| t.clone())
                .collect();
            check_capture(scratch.path(), k, c, &acked, &all, &when);
        }
    }
}

#[test]
fn power_cut_at_any_group_commit_immediate() {
    power_cuts(Durability::Immediate);
}

#[test]
fn power_cut_at_any_group_commit_on_sync() {
    power_cuts(Durability::OnSync);
}

/// The journal file is reused after a checkpoint: a store closed cleanly,
/// reopened and written again never replays the older round left in it.
#[test]
fn reused_journal_never_replays_an_older_round() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("r.tags");
    let s = Store::create(&path, &CreateOptions::default()).expect("create");
    s.set_durability(Durability::Immediate).expect("mode");
    // Enough commits that the older round reaches pages past the new
    // round's (a direct write zeroes the rest of its page).
    let first: Vec<Tag> = (0..200).map(|i| tag(0, i)).collect();
    for t in &first {
        s.insert(t).expect("insert");
    }
    // A checkpoint starts a new round in the same file.
    s.set_durability(Durability::None).expect("checkpoint");
    s.set_durability(Durability::Immediate).expect("mode");
    for t in &first[..20] {
        assert!(s.delete(t).expect("delete"));
    }
    let journal = fs::read(journal_path(&path)).expect("journal");
    s.abandon();
    // The journal now holds the new round (20 deletes) over the older
    // round's commits (200 inserts): replaying those would bring the
    // deleted tags back.
    let s = Store::open(&path).expect("reopen");
    let want: BTreeSet<Tag> = first[20..].iter().cloned().collect();
    let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
    assert_eq!(got, want, "deleted tags came back from an older round");
    let headers = journal.windows(4).filter(|w| w == b"TJNL").count();
    assert!(
        headers > 100,
        "the older round's commits were still in the file ({headers} headers)"
    );
}

/// A crash right after a checkpoint leaves a journal file with nothing to
/// replay (its first header zeroed) but megabytes written ahead: the next
/// writable open removes it, and the store holds every tag.
#[test]
fn a_reset_journal_left_by_a_crash_is_removed_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("e.tags");
    let s = Store::create(&path, &CreateOptions::default()).expect("create");
    s.set_durability(Durability::Immediate).expect("mode");
    let tags: Vec<Tag> = (0..30).map(|i| tag(1, i)).collect();
    for t in &tags {
        s.insert(t).expect("insert");
    }
    // Checkpoint (the journal's round is reset, its file kept), then a crash.
    s.set_durability(Durability::None).expect("checkpoint");
    assert!(journal_path(&path).exists(), "the journal file was kept");
    s.abandon();
    let s = Store::open(&path).expect("reopen");
    assert!(
        !journal_path(&path).exists(),
        "the emptied journal was left beside the store"
    );
    let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
    assert_eq!(got, tags.iter().cloned().collect::<BTreeSet<_>>());
}
