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
//! * A data block garbled in the store file (a torn 4 KB write) whose image
//!   is in the journal is repaired on open.
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

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tagstore::testing::SyncPoint;
use tagstore::{journal_path, CreateOptions, Durability, Store, Tag};

const PAGE: usize = 4096;

fn opts(seed: u64) -> CreateOptions {
    CreateOptions {
        expected_tags: 50,
        primary_buckets_per_half: Some(2),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(seed),
    }
}

fn tag(i: usize) -> Tag {
    // Every fourth tag is on the "hub" peak, so chains link.
    let s = if i.is_multiple_of(4) {
        "hub".to_string()
    } else {
        format!("s{}", i % 5)
    };
    Tag::new(format!("o{i}"), format!("r{}", i % 2), s)
}

fn tags(r: std::ops::Range<usize>) -> Vec<Tag> {
    r.map(tag).collect()
}

/// (contains, in the object half, in the subject half).
fn halves(store: &Store, t: &Tag) -> (bool, bool, bool) {
    let c = store.contains(t).expect("contains");
    let subjects: Vec<String> = store
        .find_subjects(&t.object, &t.relationship)
        .collect::<Result<_, _>>()
        .expect("find_subjects");
    let objects: Vec<String> = store
        .find_objects(&t.subject, &t.relationship)
        .collect::<Result<_, _>>()
        .expect("find_objects");
    (
        c,
        subjects.contains(&t.subject),
        objects.contains(&t.object),
    )
}

/// Asserts the tag is in both halves or neither; returns which.
fn whole(store: &Store, t: &Tag, when: &str) -> bool {
    let (c, o, s) = halves(store, t);
    assert!(
        c == o && c == s,
        "{when}: {t:?} is torn: contains={c}, object half={o}, subject half={s}"
    );
    c
}

fn assert_check_ok(store: &Store, when: &str) {
    let r = store.check().expect("check runs");
    assert!(r.ok(), "check() {when}: {:?}", r.faults);
}

/// The store holds exactly `want` (export, both halves, len, check).
fn assert_exactly(store: &Store, want: &BTreeSet<Tag>, when: &str) {
    let got: BTreeSet<Tag> = store
        .tags()
        .collect::<Result<_, _>>()
        .expect("tags() export");
    let missing: Vec<&Tag> = want.difference(&got).collect();
    let extra: Vec<&Tag> = got.difference(want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{when}: missing {missing:?}, unexpected {extra:?}"
    );
    assert_eq!(store.len(), want.len() as u64, "len() {when}");
    for t in want {
        assert!(whole(store, t, when), "{when}: {t:?} missing");
    }
    assert_check_ok(store, when);
}

/// Copies of the durable state taken by the sync hook.
#[derive(Default)]
struct Durable {
    /// Journal bytes after each JournalSynced, in order.
    journals: Vec<Vec<u8>>,
    /// Store file at the last StoreSynced.
    store: Vec<u8>,
    store_syncs: usize,
}

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
            SyncPoint::Applied => {}
        }
    })));
    d
}

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

/// Byte offsets where each complete commit of a journal starts, plus the end.
fn commit_bounds(j: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut out = vec![0];
    while j.len() >= at + 32 {
        let n = u32::from_le_bytes(j[at + 24..at + 28].try_into().expect("4 bytes")) as usize;
        let size = 32 + n * (8 + PAGE) + 8;
        if j.len() < at + size {
            break;
        }
        at += size;
        out.push(at);
    }
    out
}

/// Creates a store in Immediate mode and inserts `ops` one call each,
/// recording the durable state. Returns (store, recorder, path).
fn immediate_store(dir: &Path, seed: u64) -> (Store, Arc<Mutex<Durable>>, PathBuf) {
    let path = dir.join(format!("s{seed}.tags"));
    let store = Store::create(&path, &opts(seed)).expect("create");
    let d = record(&store, &path);
    store
        .set_durability(Durability::Immediate)
        .expect("set_durability");
    (store, d, path)
}

#[test]
fn torn_last_commit_is_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, d, _) = immediate_store(dir.path(), 11);
    let all = tags(0..12);
    for t in &all {
        assert!(store.insert(t).expect("insert"));
    }
    store.abandon();
    let rec = take(&d);
    assert_eq!(rec.journals.len(), all.len(), "one commit per insert");
    let journal = rec.journals.last().expect("journal").clone();
    let bounds = commit_bounds(&journal);
    assert_eq!(bounds.len(), all.len() + 1, "commits parse");
    let (last, end) = (bounds[bounds.len() - 2], bounds[bounds.len() - 1]);
    // Cut inside the header, inside the first image, one byte short, and
    // the whole commit there but one bit of its CRC flipped.
    let cuts = [last + 5, last + 40, (last + end) / 2, end - 1];
    for (i, cut) in cuts.iter().enumerate() {
        // The store file as last fsynced: nothing of the journal applied.
        let path = disk(
            dir.path(),
            &format!("cut{i}.tags"),
            &rec.store,
            Some(&journal[..*cut]),
        );
        let s = Store::open(&path).expect("open recovers");
        let want: BTreeSet<Tag> = all[..all.len() - 1].iter().cloned().collect();
        assert_exactly(&s, &want, &format!("journal cut at byte {cut} of {end}"));
        assert!(
            !whole(&s, &all[all.len() - 1], "torn commit"),
            "a torn commit was applied"
        );
        drop(s);
    }
    let mut bad_crc = journal.clone();
    bad_crc[end - 8] ^= 0x01;
    let path = disk(dir.path(), "crc.tags", &rec.store, Some(&bad_crc));
    let s = Store::open(&path).expect("open recovers");
    let want: BTreeSet<Tag> = all[..all.len() - 1].iter().cloned().collect();
    assert_exactly(&s, &want, "last commit with a bad CRC");
    drop(s);
    // A damaged commit in the middle: it and everything after are dropped.
    let mut mid = journal.clone();
    let k = 5;
    mid[bounds[k] + 32 + 8 + 100] ^= 0xFF;
    let path = disk(dir.path(), "mid.tags", &rec.store, Some(&mid));
    let s = Store::open(&path).expect("open recovers");
    let want: BTreeSet<Tag> = all[..k].iter().cloned().collect();
    assert_exactly(&s, &want, "damaged commit in the middle");
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
    let (x, dx, xpath) = immediate_store(dir.path(), 21);
    let xs = tags(0..10);
    for t in &xs {
        x.insert(t).expect("insert");
    }
    x.abandon();
    let xrec = take(&dx);
    let x_journal = xrec.journals.last().expect("journal").clone();
    let x_live = fs::read(&xpath).expect("read x");
    // Store Y: same geometry, other seed; its images would fit X's blocks.
    let (y, dy, _) = immediate_store(dir.path(), 22);
    for t in tags(50..80) {
        y.insert(&t).expect("insert");
    }
    // Delete some too, so Y's images empty blocks X uses.
    for t in tags(50..60) {
        y.delete(&t).expect("delete");
    }
    y.abandon();
    let y_journal = take(&dy).journals.last().expect("journal").clone();
    let want: BTreeSet<Tag> = xs.iter().cloned().collect();

    // Y's journal alone beside X's (applied) store file.
    let path = disk(dir.path(), "a.tags", &x_live, Some(&y_journal));
    let s = Store::open(&path).expect("open ignores a foreign journal");
    assert_exactly(&s, &want, "foreign journal beside the store");
    for t in tags(60..80) {
        assert!(!whole(&s, &t, "foreign journal"), "{t:?} leaked in");
    }
    drop(s);

    // X's own commits, then Y's: X's are replayed, Y's dropped. The store
    // file is the one last fsynced, so X's tags must come from the journal.
    let mut both = x_journal.clone();
    both.extend_from_slice(&y_journal);
    let path = disk(dir.path(), "b.tags", &xrec.store, Some(&both));
    let s = Store::open(&path).expect("open");
    assert_exactly(&s, &want, "own commits followed by foreign ones");
    drop(s);

    // Y's commits first: nothing after a foreign commit is applied, and X's
    // store file as last written still opens consistently.
    let mut first = y_journal.clone();
    first.extend_from_slice(&x_journal);
    let path = disk(dir.path(), "c.tags", &x_live, Some(&first));
    let s = Store::open(&path).expect("open");
    assert_exactly(&s, &want, "foreign commits before own ones");
    s.close().expect("close");
}

/// A journal left beside the path by an earlier store (deleted after a
/// crash without its journal) must not swallow the commits of a store
/// created at that path later: they are acknowledged as durable.
#[test]
fn stale_journal_at_create_does_not_hide_new_commits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (old, _d, path) = immediate_store(dir.path(), 31);
    for t in tags(0..5) {
        old.insert(&t).expect("insert");
    }
    old.abandon();
    assert!(
        journal_path(&path).exists(),
        "the crashed store left its journal"
    );
    fs::remove_file(&path).expect("remove the old store file only");

    let store = Store::create(
        &path,
        &CreateOptions {
            seed: Some(32),
            ..opts(0)
        },
    )
    .expect("create over the old name");
    let d = record(&store, &path);
    store
        .set_durability(Durability::Immediate)
        .expect("set_durability");
    let acked = tags(100..110);
    for t in &acked {
        assert!(store.insert(t).expect("insert"));
    }
    store.abandon();
    let rec = take(&d);
    // Power cut: the store file as last fsynced, the journal as last fsynced.
    let img = disk(
        dir.path(),
        "power-cut.tags",
        &rec.store,
        Some(rec.journals.last().expect("journal")),
    );
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
    let (store, d, path) = immediate_store(dir.path(), 41);
    let all = tags(0..40);
    for t in &all {
        store.insert(t).expect("insert");
    }
    store.abandon();
    let rec = take(&d);
    let journal = rec.journals.last().expect("journal").clone();
    let live = fs::read(&path).expect("read live");
    // Blocks that differ from the last fsynced store file are all in the
    // journal; tear each of them in turn.
    let zero = [0u8; PAGE];
    let changed: Vec<usize> = (2..live.len() / PAGE)
        .filter(|b| {
            let old = rec.store.get(b * PAGE..(b + 1) * PAGE).unwrap_or(&zero);
            old != &live[b * PAGE..(b + 1) * PAGE]
        })
        .collect();
    assert!(changed.len() >= 4, "inserts changed blocks: {changed:?}");
    let want: BTreeSet<Tag> = all.iter().cloned().collect();
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
        let p = disk(dir.path(), &format!("torn{b}.tags"), &img, Some(&journal));
        let s = Store::open(&p).unwrap_or_else(|e| panic!("open with block {b} torn: {e}"));
        assert_exactly(&s, &want, &format!("block {b} torn"));
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
    let (store, d, path) = immediate_store(dir.path(), 51);
    let all = tags(0..30);
    for t in &all {
        store.insert(t).expect("insert");
    }
    for t in &all[..10] {
        store.delete(t).expect("delete");
    }
    store.abandon();
    let want: BTreeSet<Tag> = all[10..].iter().cloned().collect();
    let rec = take(&d);
    let journal = rec.journals.last().expect("journal").clone();
    // The live files after a process crash, and the last fsynced store
    // file (nothing applied) after a power cut.
    for (name, img) in [
        ("live", fs::read(&path).expect("read")),
        ("synced", rec.store.clone()),
    ] {
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
    let (store, d, _) = immediate_store(dir.path(), 61);
    let all = tags(0..40);
    for t in &all {
        store.insert(t).expect("insert");
    }
    for t in &all[..15] {
        store.delete(t).expect("delete");
    }
    store.abandon();
    let rec = take(&d);
    let journal = rec.journals.last().expect("journal").clone();
    let p = disk(dir.path(), "twice.tags", &rec.store, Some(&journal));
    let want: BTreeSet<Tag> = all[15..].iter().cloned().collect();
    let s = Store::open(&p).expect("first recovery");
    assert_exactly(&s, &want, "first recovery");
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
    let store = Store::create(&path, &opts(71)).expect("create");
    store
        .set_durability(Durability::OnSync)
        .expect("set_durability");
    let synced = tags(0..30);
    for t in &synced {
        store.insert(t).expect("insert");
    }
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
    let store = Store::create(&path, &opts(81)).expect("create");
    store
        .set_durability(Durability::Immediate)
        .expect("set_durability");
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
    let p = disk(dir.path(), "cut1.tags", &at_insert.store, None);
    let s = Store::open(&p).expect("open");
    let mut want: BTreeSet<Tag> = before.iter().cloned().collect();
    want.insert(key.clone());
    assert_exactly(&s, &want, "power cut after insert_with(Immediate)");
    drop(s);
    // Power cut right after delete_with returned.
    let p = disk(dir.path(), "cut2.tags", &at_delete.store, None);
    let s = Store::open(&p).expect("open");
    want.extend(tags(20..30));
    want.remove(&before[0]);
    assert_exactly(&s, &want, "power cut after delete_with(Immediate)");
    drop(s);

    // OnSync: insert_with(Immediate) makes the pending changes durable too.
    let path = dir.path().join("onsync.tags");
    let store = Store::create(&path, &opts(92)).expect("create");
    let d = record(&store, &path);
    store
        .set_durability(Durability::OnSync)
        .expect("set_durability");
    let pending = tags(0..15);
    for t in &pending {
        store.insert(t).expect("insert");
    }
    store
        .insert_with(&key, Some(Durability::Immediate))
        .expect("insert_with");
    store.insert(&tag(77)).expect("insert");
    store.abandon();
    let rec = take(&d);
    assert_eq!(
        rec.journals.len(),
        1,
        "one commit for insert_with(Immediate)"
    );
    let p = disk(
        dir.path(),
        "cut3.tags",
        &rec.store,
        Some(rec.journals.last().expect("journal")),
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
            let store = Store::create(&path, &opts(101)).expect("create");
            store
                .set_durability(Durability::Immediate)
                .expect("set_durability");
            let base = tags(0..10);
            for t in &base {
                store.insert(t).expect("insert");
            }
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
