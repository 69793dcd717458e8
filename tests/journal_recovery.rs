//! Targeted journal and durability-mode recovery cases.
//!
//! * A torn last commit (cut anywhere: inside the header, inside an image,
//!   one byte short) is dropped and the commits before it are replayed; a
//!   damaged commit in the middle drops itself and everything after it.
//! * A journal of another store (different hash seed, same geometry, so its
//!   images would fit) is never applied, neither alone nor after this
//!   store's own commits.
//! * A journal left beside the path by an earlier store does not swallow the
//!   commits of a store created there later.
//! * A data block garbled in the store file (a 4 KB write torn while a
//!   checkpoint copied it in) is repaired on open from the checkpoint's
//!   image in the journal.
//! * `open_read_only` of a store with a pending journal recovers it.
//! * Replaying the same journal twice (a crash during recovery, before the
//!   journal was emptied) gives the same store.
//! * OnSync: changes not synced are wholly absent after `abandon()`, also
//!   when they linked secondary buckets and grew the file; synced ones stay.
//! * Immediate: every change is present after `abandon()`.
//! * `insert_with(.., Some(Immediate))` / `delete_with` in None mode are
//!   durable on return: the store file as fsynced at that moment holds them
//!   (and everything before them); in OnSync mode they make the pending
//!   changes durable too.
//! * Immediate `insert_batch` / `delete_batch` cut by a crash in the middle
//!   of a tag (`fail_after_writes`) leave every tag of the batch whole.
//!
//! Power cuts are simulated with the doc-hidden sync hook: the journal is
//! copied at `JournalSynced` and the store file at `StoreSynced`, and those
//! copies are what a fresh directory gets.

mod common;

use common::crash::{assert_check_ok, assert_exactly, whole};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tagstore::testing::SyncPoint;
use tagstore::{journal_path, CreateOptions, Durability, Store, Tag};

const PAGE: usize = 4096;

/// Options for a store of two one-block primary buckets per half, hashed
/// with `seed`.
fn opts(seed: u64) -> CreateOptions {
    CreateOptions {
        expected_tags: 50,
        primary_buckets_per_half: Some(2),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(seed),
    }
}

/// Tag `i`: `<o{i}, r{i % 2}, ..>`, every fourth on the "hub" subject.
fn tag(i: usize) -> Tag {
    // Every fourth tag is on the "hub" peak, so chains link.
    let s = if i.is_multiple_of(4) {
        "hub".to_string()
    } else {
        format!("s{}", i % 5)
    };
    Tag::new(format!("o{i}"), format!("r{}", i % 2), s)
}

/// Tags `tag(i)` for `i` in `r`.
fn tags(r: std::ops::Range<usize>) -> Vec<Tag> {
    r.map(tag).collect()
}

/// Copies of the durable state taken by the sync hook.
#[derive(Default)]
struct Durable {
    /// Journal bytes after each JournalSynced, in order.
    journals: Vec<Vec<u8>>,
    /// Store file at the last StoreSynced.
    store: Vec<u8>,
    store_syncs: usize,
    /// At the last Applied (a checkpoint copied the private copies in, not
    /// yet fsynced): the store file as last fsynced, and as it is live.
    applied: Option<(Vec<u8>, Vec<u8>)>,
}

/// Installs a sync hook on `store` (at `path`) that records the durable
/// state into the returned [`Durable`].
fn record(store: &Store, path: &Path) -> Arc<Mutex<Durable>> {
    let d = Arc::new(Mutex::new(Durable {
        store: fs::read(path).expect("read store"),
        ..Durable::default()
    }));
    let (d2, path) = (Arc::clone(&d), path.to_path_buf());
    store.set_sync_hook(Some(Box::new(move |p: SyncPoint| {
        let mut d = d2.lock().unwrap_or_else(|e| e.into_inner());
        match p {
            SyncPoint::JournalSynced => {
                let j = fs::read(journal_path(&path)).expect("read journal");
                d.journals.push(j);
            }
            SyncPoint::StoreSynced => {
                d.store = fs::read(&path).expect("read store");
                d.store_syncs += 1;
            }
            // The strings file: these tests store no long tag.
            SyncPoint::StringsSynced => {}
            SyncPoint::Applied => {
                let live = fs::read(&path).expect("read store");
                d.applied = Some((d.store.clone(), live));
            }
        }
    })));
    d
}

/// Takes what the recorder holds, leaving it empty.
fn take(d: &Arc<Mutex<Durable>>) -> Durable {
    std::mem::take(&mut *d.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Writes a simulated disk into a fresh directory; returns the store path.
fn disk(dir: &Path, name: &str, store: &[u8], journal: Option<&[u8]>) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, store).expect("write store image");
    if let Some(j) = journal {
        fs::write(journal_path(&path), j).expect("write journal image");
    }
    path
}

/// Writes the disk `image` (store file, journal) as `dir/name` (see
/// [`disk`]), opens it and asserts it holds exactly `want`; returns the
/// opened store and its path.
fn recover(
    dir: &Path,
    name: &str,
    image: (&[u8], Option<&[u8]>),
    want: &BTreeSet<Tag>,
    when: &str,
) -> (Store, PathBuf) {
    let path = disk(dir, name, image.0, image.1);
    let s = Store::open(&path).unwrap_or_else(|e| panic!("{when}: open did not recover: {e}"));
    assert_exactly(&s, want, when);
    (s, path)
}

/// Byte offsets where each complete commit of a journal starts, plus the end.
fn commit_bounds(j: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut out = vec![0];
    // The file is written ahead with zeros: commits end where a header does not start.
    // Version 2 framing: a 40-byte header whose bytes 32..36 hold the body length.
    while j.len() >= at + 40 && &j[at..at + 4] == b"TJNL" {
        let body = u32::from_le_bytes(j[at + 32..at + 36].try_into().expect("4 bytes")) as usize;
        let size = 40 + body + 8;
        if j.len() < at + size {
            break;
        }
        at += size;
        out.push(at);
    }
    out
}

/// Creates a store at `path` with `opts(seed)` in `mode` and inserts
/// `initial`, one call each, every one new.
fn create_in(path: &Path, seed: u64, mode: Durability, initial: &[Tag]) -> Store {
    let store = Store::create(path, &opts(seed)).expect("create");
    store.set_durability(mode).expect("set_durability");
    for t in initial {
        assert!(store.insert(t).expect("insert"), "{t:?} was already there");
    }
    store
}

/// Creates a store at `path` with `opts(seed)`, records its durable state
/// (see [`record`]) and sets `mode`.
fn recorded(path: &Path, seed: u64, mode: Durability) -> (Store, Arc<Mutex<Durable>>) {
    let store = Store::create(path, &opts(seed)).expect("create");
    let d = record(&store, path);
    store.set_durability(mode).expect("set_durability");
    (store, d)
}

/// Abandons `store` (recorded by `d`) and writes the disk a power cut
/// leaves, the store file and the journal as last fsynced, as `dir/name`;
/// returns what the recorder held and the image's store path.
fn power_cut(dir: &Path, name: &str, store: Store, d: &Arc<Mutex<Durable>>) -> (Durable, PathBuf) {
    store.abandon();
    let rec = take(d);
    let journal = rec.journals.last().expect("journal");
    let path = disk(dir, name, &rec.store, Some(journal));
    (rec, path)
}

/// What [`crashed`] leaves.
struct Crashed {
    /// The durable state the recorder took.
    rec: Durable,
    /// The last durable journal.
    journal: Vec<u8>,
    /// The store file as the crash left it (nothing of the journal's round
    /// in it; with [`checkpointed`], all of it, not yet fsynced).
    live: Vec<u8>,
    /// The store path.
    path: PathBuf,
}

/// A recorded Immediate-mode store `s{seed}.tags` in `dir` that inserts
/// `inserts` and then deletes `deletes`, one call each (every call must
/// change the store), and is abandoned.
fn crashed(dir: &Path, seed: u64, inserts: &[Tag], deletes: &[Tag]) -> Crashed {
    crash(dir, seed, inserts, deletes, false)
}

/// [`crashed`], but with a checkpoint after the inserts, and the crash
/// inside a second one after the deletes, once the private copies were
/// copied into the store file and before it was fsynced: `live` holds
/// every change, `rec.store` the inserts only, and the journal holds the
/// deletes (deltas from the first checkpoint's blocks) and then the
/// second checkpoint's images.
fn checkpointed(dir: &Path, seed: u64, inserts: &[Tag], deletes: &[Tag]) -> Crashed {
    crash(dir, seed, inserts, deletes, true)
}

fn crash(dir: &Path, seed: u64, inserts: &[Tag], deletes: &[Tag], checkpoint: bool) -> Crashed {
    let path = dir.join(format!("s{seed}.tags"));
    let (store, d) = recorded(&path, seed, Durability::Immediate);
    for t in inserts {
        assert!(store.insert(t).expect("insert"), "{t:?} was already there");
    }
    if checkpoint {
        store.set_durability(Durability::None).expect("checkpoint");
        store
            .set_durability(Durability::Immediate)
            .expect("journaled");
    }
    for t in deletes {
        assert!(store.delete(t).expect("delete"), "{t:?} was not there");
    }
    if checkpoint {
        // Leaving the journaled modes checkpoints.
        store.set_durability(Durability::None).expect("checkpoint");
    }
    store.abandon();
    let mut rec = take(&d);
    let journal = rec.journals.last().expect("journal").clone();
    let live = match rec.applied.take() {
        Some((synced, live)) if checkpoint => {
            rec.store = synced;
            live
        }
        _ => fs::read(&path).expect("read the live store file"),
    };
    Crashed {
        rec,
        journal,
        live,
        path,
    }
}

#[test]
fn torn_last_commit_is_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = tags(0..12);
    let Crashed { rec, journal, .. } = crashed(dir.path(), 11, &all, &[]);
    assert_eq!(rec.journals.len(), all.len(), "one commit per insert");
    let bounds = commit_bounds(&journal);
    assert_eq!(bounds.len(), all.len() + 1, "commits parse");
    let (last, end) = (bounds[bounds.len() - 2], bounds[bounds.len() - 1]);
    // Cut inside the header, inside the first image, one byte short, and
    // the whole commit there but one bit of its CRC flipped.
    let cuts = [last + 5, last + 40, (last + end) / 2, end - 1];
    let want: BTreeSet<Tag> = all[..all.len() - 1].iter().cloned().collect();
    for (i, cut) in cuts.iter().enumerate() {
        // The store file as last fsynced: nothing of the journal applied.
        let (s, _) = recover(
            dir.path(),
            &format!("cut{i}.tags"),
            (&rec.store, Some(&journal[..*cut])),
            &want,
            &format!("journal cut at byte {cut} of {end}"),
        );
        assert!(
            !whole(&s, &all[all.len() - 1], "torn commit"),
            "a torn commit was applied"
        );
        drop(s);
    }
    let mut bad_crc = journal.clone();
    bad_crc[end - 8] ^= 0x01;
    let image = (&rec.store[..], Some(&bad_crc[..]));
    drop(
        recover(
            dir.path(),
            "crc.tags",
            image,
            &want,
            "last commit with a bad CRC",
        )
        .0,
    );
    // A damaged commit in the middle: it and everything after are dropped.
    let mut mid = journal.clone();
    let k = 5;
    // (In its body: a commit may be shorter than 150 bytes.)
    mid[(bounds[k] + 40 + bounds[k + 1]) / 2] ^= 0xFF;
    let want: BTreeSet<Tag> = all[..k].iter().cloned().collect();
    let image = (&rec.store[..], Some(&mid[..]));
    let (s, path) = recover(
        dir.path(),
        "mid.tags",
        image,
        &want,
        "damaged commit in the middle",
    );
    // The journal is gone once recovered, and the store is usable.
    assert!(
        !journal_path(&path).exists()
            || fs::metadata(journal_path(&path)).expect("meta").len() == 0,
        "the journal should be emptied after recovery"
    );
    assert!(s.insert(&tag(100)).expect("insert after recovery"));
    s.close().expect("close");
}

#[test]
fn foreign_journal_is_never_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Store X: some tags, left unclean by a crash.
    let xs = tags(0..10);
    let x = checkpointed(dir.path(), 21, &xs, &[]);
    let (xrec, x_journal, x_live) = (x.rec, x.journal, x.live);
    // Store Y: same geometry, other seed; its images would fit X's blocks.
    // Delete some too, so Y's images empty blocks X uses.
    let y_journal = checkpointed(dir.path(), 22, &tags(50..80), &tags(50..60)).journal;
    let want: BTreeSet<Tag> = xs.iter().cloned().collect();

    // Y's journal alone beside X's (applied) store file.
    let image = (&x_live[..], Some(&y_journal[..]));
    let (s, _) = recover(
        dir.path(),
        "a.tags",
        image,
        &want,
        "foreign journal beside the store",
    );
    for t in tags(60..80) {
        assert!(!whole(&s, &t, "foreign journal"), "{t:?} leaked in");
    }
    drop(s);

    // X's own commits, then Y's: X's are replayed, Y's dropped. The store
    // file is the one last fsynced, so X's tags must come from the journal.
    let mut both = x_journal.clone();
    both.extend_from_slice(&y_journal);
    let image = (&xrec.store[..], Some(&both[..]));
    let when = "own commits followed by foreign ones";
    drop(recover(dir.path(), "b.tags", image, &want, when).0);

    // Y's commits first: nothing after a foreign commit is applied, and X's
    // store file as last written still opens consistently.
    let mut first = y_journal.clone();
    first.extend_from_slice(&x_journal);
    let image = (&x_live[..], Some(&first[..]));
    let when = "foreign commits before own ones";
    let (s, _) = recover(dir.path(), "c.tags", image, &want, when);
    s.close().expect("close");
}

/// A journal left beside the path by an earlier store (deleted after a
/// crash without its journal) must not swallow the commits of a store
/// created at that path later: they are acknowledged as durable.
#[test]
fn stale_journal_at_create_does_not_hide_new_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = crashed(dir.path(), 31, &tags(0..5), &[]).path;
    assert!(
        journal_path(&path).exists(),
        "the crashed store left its journal"
    );
    fs::remove_file(&path).expect("remove the old store file only");

    // Created over the old name.
    let (store, d) = recorded(&path, 32, Durability::Immediate);
    let acked = tags(100..110);
    for t in &acked {
        assert!(store.insert(t).expect("insert"));
    }
    // Power cut: the store file as last fsynced, the journal as last fsynced.
    let (_, img) = power_cut(dir.path(), "power-cut.tags", store, &d);
    let s = Store::open(&img).expect("open recovers");
    assert_exactly(
        &s,
        &acked.iter().cloned().collect(),
        "acknowledged inserts after a power cut, with a stale journal at create",
    );
}

#[test]
fn garbled_block_is_repaired_from_the_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = tags(0..40);
    let Crashed {
        rec, journal, live, ..
    } = checkpointed(dir.path(), 41, &all, &all[..20]);
    // Blocks that differ from the last fsynced store file are all in the
    // journal (the checkpoint's images); tear each of them in turn.
    let zero = [0u8; PAGE];
    let changed: Vec<usize> = (2..live.len() / PAGE)
        .filter(|b| {
            let old = rec.store.get(b * PAGE..(b + 1) * PAGE).unwrap_or(&zero);
            old != &live[b * PAGE..(b + 1) * PAGE]
        })
        .collect();
    assert!(changed.len() >= 4, "deletes changed blocks: {changed:?}");
    let want: BTreeSet<Tag> = all[20..].iter().cloned().collect();
    for (i, &b) in changed.iter().enumerate() {
        let mut img = live.clone();
        let at = b * PAGE;
        match i % 3 {
            // A sector of garbage.
            0 => img[at + 1024..at + 1536].fill(0x5A),
            // The old first sector (header) with the new rest.
            1 => {
                let old = rec
                    .store
                    .get(at..at + 512)
                    .map_or(vec![0; 512], |s| s.to_vec());
                img[at..at + 512].copy_from_slice(&old);
            }
            // The new first sector, the old (or zero) rest.
            _ => {
                let old = rec
                    .store
                    .get(at + 512..at + PAGE)
                    .map_or(vec![0; PAGE - 512], |s| s.to_vec());
                img[at + 512..at + PAGE].copy_from_slice(&old);
            }
        }
        let name = format!("torn{b}.tags");
        let image = (&img[..], Some(&journal[..]));
        let (s, p) = recover(dir.path(), &name, image, &want, &format!("block {b} torn"));
        assert!(
            fs::read(&p).expect("read")[at..at + PAGE] == live[at..at + PAGE],
            "block {b} should be restored to its journaled image"
        );
        drop(s);
    }
}

#[test]
fn read_only_open_recovers_a_pending_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = tags(0..30);
    let crash = crashed(dir.path(), 51, &all, &all[..10]);
    let journal = crash.journal;
    let want: BTreeSet<Tag> = all[10..].iter().cloned().collect();
    // The live files after a process crash, and the last fsynced store
    // file (nothing applied) after a power cut.
    for (name, img) in [("live", crash.live), ("synced", crash.rec.store)] {
        let p = disk(dir.path(), &format!("ro-{name}.tags"), &img, Some(&journal));
        let s = Store::open_read_only(&p)
            .unwrap_or_else(|e| panic!("open_read_only ({name}) with a pending journal: {e}"));
        assert_exactly(&s, &want, &format!("read-only open ({name})"));
        assert!(
            s.insert(&tag(99)).is_err(),
            "a read-only store must refuse writes"
        );
        drop(s);
        // A read-only open never writes: the journal stays for the next
        // writable open, which replays it.
        assert_eq!(
            fs::read(journal_path(&p)).expect("journal still there"),
            journal,
            "a read-only open must leave the journal as it was"
        );
        let w = Store::open(&p).expect("writable open replays the journal");
        assert_exactly(
            &w,
            &want,
            &format!("writable open after read-only ({name})"),
        );
        drop(w);
        let left = fs::metadata(journal_path(&p)).map(|m| m.len()).unwrap_or(0);
        assert_eq!(left, 0, "the writable open should consume the journal");
    }
}

/// A crash during recovery, after the images were copied but before the
/// journal was emptied, replays the same journal again.
#[test]
fn replaying_a_journal_twice_is_harmless() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = tags(0..40);
    let Crashed { rec, journal, .. } = crashed(dir.path(), 61, &all, &all[..15]);
    let want: BTreeSet<Tag> = all[15..].iter().cloned().collect();
    let image = (&rec.store[..], Some(&journal[..]));
    let (s, p) = recover(dir.path(), "twice.tags", image, &want, "first recovery");
    s.abandon();
    fs::write(journal_path(&p), &journal).expect("put the journal back");
    let s = Store::open(&p).expect("second recovery");
    assert_exactly(&s, &want, "second recovery of the same journal");
    s.close().expect("close");
}

#[test]
fn on_sync_changes_not_synced_are_wholly_absent_after_abandon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("onsync.tags");
    let synced = tags(0..30);
    let store = create_in(&path, 71, Durability::OnSync, &synced);
    store.sync().expect("sync");
    let len_synced = fs::metadata(&path).expect("meta").len();
    // Unsynced: many tags on the peak (links secondary buckets, grows the
    // file), deletes of synced tags, and an insert-then-delete.
    let pending: Vec<Tag> = (0..120)
        .map(|i| Tag::new(format!("p{i}"), "r0", "hub"))
        .collect();
    for t in &pending {
        assert!(store.insert(t).expect("insert"));
    }
    for t in &synced[..8] {
        assert!(store.delete(t).expect("delete"));
    }
    store.insert(&tag(500)).expect("insert");
    store.delete(&tag(500)).expect("delete");
    assert!(
        fs::metadata(&path).expect("meta").len() > len_synced,
        "the unsynced inserts should have grown the file"
    );
    store.abandon();
    let s = Store::open(&path).expect("reopen");
    let want: BTreeSet<Tag> = synced.iter().cloned().collect();
    assert_exactly(&s, &want, "OnSync after abandon");
    for t in &pending {
        assert!(!whole(&s, t, "unsynced insert"), "unsynced {t:?} survived");
    }
    // Usable, and the freshly grown (empty) space is reused.
    for t in &pending {
        assert!(s.insert(t).expect("insert after recovery"));
    }
    s.close().expect("close");
    let s = Store::open(&path).expect("reopen");
    let mut want = want;
    want.extend(pending.iter().cloned());
    assert_exactly(&s, &want, "after reinserting");
}

#[test]
fn immediate_changes_are_present_after_abandon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("imm.tags");
    let store = create_in(&path, 81, Durability::Immediate, &[]);
    let mut want = BTreeSet::new();
    for i in 0..150usize {
        let t = if i.is_multiple_of(3) {
            Tag::new(format!("p{i}"), "r0", "hub")
        } else {
            tag(i)
        };
        assert!(store.insert(&t).expect("insert"));
        want.insert(t);
    }
    let gone: Vec<Tag> = want.iter().step_by(4).cloned().collect();
    for t in &gone {
        assert!(store.delete(t).expect("delete"));
        want.remove(t);
    }
    let batch = tags(1000..1010);
    let (out, r) = store.insert_batch(batch.iter());
    r.expect("batch");
    assert_eq!(out.changed, 10);
    want.extend(batch);
    store.abandon();
    let s = Store::open(&path).expect("reopen");
    assert_exactly(&s, &want, "Immediate after abandon");
    for t in &gone {
        assert!(!whole(&s, t, "deleted"), "deleted {t:?} came back");
    }
    s.close().expect("close");
    assert!(
        !journal_path(&path).exists(),
        "a clean close should remove the journal"
    );
}

#[test]
fn insert_with_immediate_in_none_mode_is_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("none.tags");
    let store = Store::create(&path, &opts(91)).expect("create");
    assert_eq!(store.durability(), Durability::None);
    let d = record(&store, &path);
    let before = tags(0..20);
    for t in &before {
        store.insert(t).expect("insert");
    }
    let key = Tag::new("important", "r0", "hub");
    assert!(store
        .insert_with(&key, Some(Durability::Immediate))
        .expect("insert_with"));
    let at_insert = take(&d);
    assert_eq!(
        at_insert.store_syncs, 1,
        "insert_with(Immediate) fsyncs once"
    );
    // More changes that are not durable yet.
    for t in tags(20..30) {
        store.insert(&t).expect("insert");
    }
    assert!(store
        .delete_with(&before[0], Some(Durability::Immediate))
        .expect("delete_with"));
    let at_delete = take(&d);
    assert_eq!(
        at_delete.store_syncs, 1,
        "delete_with(Immediate) fsyncs once"
    );
    store.abandon();

    // Power cut right after insert_with returned: the file as fsynced.
    let mut want: BTreeSet<Tag> = before.iter().cloned().collect();
    want.insert(key.clone());
    let (image, when) = (
        (&at_insert.store[..], None),
        "power cut after insert_with(Immediate)",
    );
    drop(recover(dir.path(), "cut1.tags", image, &want, when).0);
    // Power cut right after delete_with returned.
    want.extend(tags(20..30));
    want.remove(&before[0]);
    let (image, when) = (
        (&at_delete.store[..], None),
        "power cut after delete_with(Immediate)",
    );
    drop(recover(dir.path(), "cut2.tags", image, &want, when).0);

    // OnSync: insert_with(Immediate) makes the pending changes durable too.
    let path = dir.path().join("onsync.tags");
    let (store, d) = recorded(&path, 92, Durability::OnSync);
    let pending = tags(0..15);
    for t in &pending {
        store.insert(t).expect("insert");
    }
    store
        .insert_with(&key, Some(Durability::Immediate))
        .expect("insert_with");
    store.insert(&tag(77)).expect("insert");
    let (rec, p) = power_cut(dir.path(), "cut3.tags", store, &d);
    assert_eq!(
        rec.journals.len(),
        1,
        "one commit for insert_with(Immediate)"
    );
    let s = Store::open(&p).expect("open");
    let mut want: BTreeSet<Tag> = pending.iter().cloned().collect();
    want.insert(key);
    assert_exactly(
        &s,
        &want,
        "power cut after insert_with(Immediate) in OnSync",
    );
}

/// `insert_batch` in Immediate mode cut in the middle of a tag (the
/// simulated crash of `fail_after_writes`): every tag of the batch must
/// end whole (in both halves or neither) after recovery.
#[test]
fn immediate_batch_cut_mid_tag_leaves_every_tag_whole() {
    for insert in [true, false] {
        // An INSERT or DELETE writes: intent, object half, subject half,
        // intent cleared. Cut the second tag of the batch between halves.
        for k in [5u64, 6] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("batch.tags");
            let base = tags(0..10);
            let store = create_in(&path, 101, Durability::Immediate, &base);
            let batch = if insert {
                tags(20..24)
            } else {
                base[..4].to_vec()
            };
            store.fail_after_writes(Some(k));
            let (_, r) = if insert {
                store.insert_batch(batch.iter())
            } else {
                store.delete_batch(batch.iter())
            };
            assert!(r.is_err(), "the batch should be cut");
            store.abandon();
            let s = Store::open(&path).expect("reopen");
            let what = if insert {
                "insert_batch"
            } else {
                "delete_batch"
            };
            for t in &batch {
                whole(&s, t, &format!("{what} cut at write {k}"));
            }
            assert_check_ok(&s, &format!("{what} cut at write {k}"));
        }
    }
}

/// A store-file block damaged outside any checkpoint (a media error), that
/// the journal's round changes only by deltas: the open refuses, naming
/// the store file's block rather than blaming the journal.
#[test]
fn a_damaged_base_block_is_named_as_the_store_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s71.tags");
    let (store, d) = recorded(&path, 71, Durability::Immediate);
    let all = tags(0..40);
    for t in &all {
        assert!(store.insert(t).expect("insert"));
    }
    store.set_durability(Durability::None).expect("checkpoint");
    store
        .set_durability(Durability::Immediate)
        .expect("journaled");
    let base = fs::read(&path).expect("read the checkpointed file");
    for t in &all[..20] {
        assert!(store.delete(t).expect("delete"));
    }
    store.abandon();
    let rec = take(&d);
    let journal = rec.journals.last().expect("journal").clone();
    // The blocks the deletes changed are those the journal's round names;
    // the file still holds them as the checkpoint left them.
    let live = fs::read(&path).expect("read");
    assert_eq!(
        live, base,
        "nothing reached the store file between checkpoints"
    );
    let mut damaged = None;
    for b in 2..base.len() / PAGE {
        let mut img = base.clone();
        img[b * PAGE + 100..b * PAGE + 108].fill(0xA5);
        let p = disk(
            dir.path(),
            &format!("damaged{b}.tags"),
            &img,
            Some(&journal),
        );
        match Store::open(&p) {
            Ok(_) => {}
            Err(e) => {
                damaged = Some((b, e.to_string()));
                break;
            }
        }
    }
    let (b, msg) = damaged.expect("some damaged block is one the round changes");
    assert!(
        msg.contains(&format!("block {b} of")) && msg.contains("is damaged"),
        "{msg}"
    );
}

/// A tag put and cleared again and again between two syncs is journaled
/// as its blocks, not as every operation (slot operations past a block's
/// size per stage): the commit stays near two blocks' size, and replaying
/// it after a crash gives the last state.
#[test]
fn churn_between_syncs_is_journaled_as_whole_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("churn.tags");
    let s = Store::create(&path, &CreateOptions::default()).expect("create");
    let kept = Tag::new("kept", "r", "s");
    assert!(s.insert(&kept).expect("insert"));
    s.set_durability(Durability::OnSync).expect("mode");
    let churn = Tag::new("churn", "r", "s");
    for _ in 0..5_000 {
        assert!(s.insert(&churn).expect("insert"));
        assert!(s.delete(&churn).expect("delete"));
    }
    assert!(s.insert(&churn).expect("insert"));
    s.sync().expect("sync");
    let journal = fs::read(journal_path(&path)).expect("journal");
    let used = journal.len() - journal.iter().rev().take_while(|&&b| b == 0).count();
    assert!(
        used < 32 << 10,
        "10,000 operations on two blocks took {used} bytes of journal"
    );
    s.abandon();
    let s = Store::open(&path).expect("reopen replays");
    let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
    assert_eq!(got, BTreeSet::from([kept, churn]));
}

/// The entries of a journal's current round: block number, entry kind
/// (`b'I'` image, `b'D'` delta, `b'O'` slot operations) and length, read
/// by the layout of DESIGN.md §6.1 (version 5).
fn journal_entries(journal: &[u8]) -> Vec<(u64, u8, usize)> {
    let rd32 = |at: usize| u32::from_le_bytes(journal[at..at + 4].try_into().expect("4 bytes"));
    let mut out = Vec::new();
    let (mut pos, mut salt) = (0usize, None);
    while pos + 40 <= journal.len() && &journal[pos..pos + 4] == b"TJNL" {
        assert_eq!(rd32(pos + 4), 5, "journal version");
        if *salt.get_or_insert(rd32(pos + 28)) != rd32(pos + 28) {
            break;
        }
        let (n, body) = (rd32(pos + 24) as usize, rd32(pos + 32) as usize);
        let mut at = pos + 40;
        for _ in 0..n {
            let block = u64::from_le_bytes(journal[at..at + 8].try_into().expect("8 bytes"));
            let k = rd32(at + 8);
            let kind = match k >> 30 {
                0 => b'I',
                1 => b'O',
                2 => b'D',
                _ => panic!("both entry bits set"),
            };
            let len = (k & 0x3FFF_FFFF) as usize;
            out.push((block, kind, len));
            at += 12 + len;
        }
        assert_eq!(at, pos + 40 + body, "entries fill the body");
        pos += 40 + body + 8;
    }
    out
}

/// A split empties blocks of the old bucket (its tags packed into the
/// first ones): journaled as their written lines, each such block was a
/// 4 KB delta of zeros, three of them in a typical split's commit (of
/// about 17 KB); as an image it is a few bytes of zero runs. Replay after
/// a kill gives every synced tag back.
#[test]
fn blocks_a_split_empties_are_journaled_as_images() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("splits.tags");
    let s = Store::create(&path, &CreateOptions::default()).expect("create");
    s.set_durability(Durability::OnSync).expect("mode");
    let start = s.geometry().primary_buckets_per_half;
    let mut model = BTreeSet::new();
    for i in 0..3_000u32 {
        let t = Tag::new(format!("object-{i}"), "r", format!("subject-{}", i % 700));
        assert!(s.insert(&t).expect("insert"));
        s.sync().expect("sync");
        model.insert(t);
    }
    assert!(
        s.geometry().primary_buckets_per_half >= start + 20,
        "the store split"
    );
    let journal = fs::read(journal_path(&path)).expect("journal");
    let entries = journal_entries(&journal);
    assert!(entries.len() > 6_000, "the round holds every commit");
    let whole: Vec<_> = entries
        .iter()
        .filter(|e| e.1 == b'D' && e.2 >= 4096)
        .collect();
    assert!(whole.is_empty(), "whole-block deltas: {whole:?}");
    assert!(
        entries.iter().any(|e| e.1 == b'I' && e.2 < 64),
        "no emptied block journaled as an image"
    );
    s.abandon();
    let s = Store::open(&path).expect("reopen replays");
    let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
    assert_eq!(got, model);
    assert!(s.check().expect("check").ok());
}
