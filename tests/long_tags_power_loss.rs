//! Power loss with long tags: no slot is durable before the string it
//! names.
//!
//! Long strings live in `STORE.strings`, beside the store file and the
//! journal. Since the twenty-first session a string is not fsynced as it is
//! appended; every commit point fsyncs the strings file first (one
//! fdatasync per commit, not one per string). These tests take a copy of
//! the disk at each durability point, with the strings file as of its last
//! fsync (`StringsSynced`; a power cut loses what was appended after it),
//! and check that every copy opens to exactly the tags of its last commit,
//! each read whole: a commit that made a slot durable before its string
//! would leave a tag naming a lost string (`Corrupt` on export, a fault in
//! `check`).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tagstore::testing::SyncPoint;
use tagstore::{journal_path, CreateOptions, Durability, Store, Tag};

fn strings_of(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".strings");
    p.into()
}

fn read_or_empty(p: &Path) -> Option<Vec<u8>> {
    fs::read(p).ok()
}

/// The disk as a power cut at one durability point leaves it.
struct Image {
    label: String,
    store: Vec<u8>,
    journal: Option<Vec<u8>>,
    strings: Option<Vec<u8>>,
    want: BTreeSet<Tag>,
}

#[derive(Default)]
struct Recorder {
    /// The tags as of the call now running (applied before the call).
    model: BTreeSet<Tag>,
    /// The strings file as of its last fsync.
    strings: Option<Vec<u8>>,
    images: Vec<Image>,
    strings_syncs: usize,
}

fn lock(r: &Mutex<Recorder>) -> std::sync::MutexGuard<'_, Recorder> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

/// A tag with a long object (stored by reference), a long subject, both,
/// or neither, from a counter.
fn tag(i: u64) -> Tag {
    // Over 156 bytes with any of the short strings below.
    let long = |what: &str| {
        format!(
            "{what}/{i:06}/{}",
            "path-segment/".repeat(12 + (i % 5) as usize)
        )
    };
    match i % 4 {
        0 => Tag::new(long("obj"), "owned_by", format!("pkg{}", i % 7)),
        1 => Tag::new(format!("o{i}"), "mentions", long("subj")),
        2 => Tag::new(long("obj"), "links", long("subj")),
        _ => Tag::new(format!("short{i}"), "owned_by", format!("pkg{}", i % 7)),
    }
}

/// Runs inserts and deletes of long and short tags in `mode`, with a copy
/// of the disk taken at every durability point.
fn run(mode: Durability, dir: &Path) -> (Vec<Image>, usize) {
    let path = dir.join("p.tags");
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    store.set_durability(mode).expect("set_durability");
    let rec = Arc::new(Mutex::new(Recorder::default()));
    {
        let (rec, path) = (Arc::clone(&rec), path.clone());
        store.set_sync_hook(Some(Box::new(move |p: SyncPoint| {
            let mut r = lock(&rec);
            let (label, journal) = match p {
                SyncPoint::StringsSynced => {
                    r.strings = read_or_empty(&strings_of(&path));
                    r.strings_syncs += 1;
                    return;
                }
                SyncPoint::JournalSynced => (
                    "JournalSynced",
                    Some(fs::read(journal_path(&path)).expect("read journal")),
                ),
                // Mode none: `sync` or an Immediate call flushed the store.
                SyncPoint::StoreSynced if mode == Durability::None => ("StoreSynced", None),
                _ => return,
            };
            let image = Image {
                label: format!("{mode:?}, image {} ({label})", r.images.len()),
                store: fs::read(&path).expect("read store"),
                journal,
                strings: r.strings.clone(),
                want: r.model.clone(),
            };
            r.images.push(image);
        })));
    }
    let mut next = 0u64;
    let mut live: Vec<Tag> = Vec::new();
    for round in 0..12u64 {
        // A batch of new tags, then single inserts and deletes.
        let batch: Vec<Tag> = (0..20).map(|k| tag(next + k)).collect();
        next += 20;
        lock(&rec).model.extend(batch.iter().cloned());
        let (_, r) = store.insert_batch(&batch);
        r.expect("insert_batch");
        live.extend(batch);
        for _ in 0..6 {
            let t = tag(next);
            next += 1;
            lock(&rec).model.insert(t.clone());
            assert!(store.insert(&t).expect("insert"));
            live.push(t);
        }
        if round % 3 == 1 {
            let t = live.swap_remove((round as usize * 7) % live.len());
            lock(&rec).model.remove(&t);
            assert!(store.delete(&t).expect("delete"));
        }
        if mode != Durability::Immediate && round % 2 == 1 {
            store.sync().expect("sync");
        }
        if round == 5 {
            // An Immediate call in any mode.
            let t = tag(next);
            next += 1;
            lock(&rec).model.insert(t.clone());
            assert!(store
                .insert_with(&t, Some(Durability::Immediate))
                .expect("insert_with"));
            live.push(t);
        }
    }
    store.sync().expect("last sync");
    store.set_sync_hook(None);
    drop(store);
    let r = std::mem::take(&mut *lock(&rec));
    (r.images, r.strings_syncs)
}

/// Opens one image in a fresh directory: it must hold exactly its tags,
/// each whole, and `check` must find nothing wrong.
fn recover(image: &Image) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.tags");
    fs::write(&path, &image.store).expect("write store");
    if let Some(j) = &image.journal {
        fs::write(journal_path(&path), j).expect("write journal");
    }
    if let Some(s) = &image.strings {
        fs::write(strings_of(&path), s).expect("write strings");
    }
    let store = Store::open(&path).unwrap_or_else(|e| panic!("{}: open: {e}", image.label));
    let got: BTreeSet<Tag> = store
        .tags()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{}: export: {e}", image.label));
    assert_eq!(got, image.want, "{}: tags", image.label);
    for t in &image.want {
        let subjects: Vec<String> = store
            .find_subjects(&t.object, &t.relationship)
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{}: find: {e}", image.label));
        assert!(subjects.contains(&t.subject), "{}: {t:?}", image.label);
    }
    let report = store.check().expect("check");
    assert!(report.ok(), "{}: {:?}", image.label, report.faults);
}

fn power_loss_in(mode: Durability) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (images, strings_syncs) = run(mode, dir.path());
    for i in 0..40 {
        let t = tag(i);
        let text = t.object.len() + t.relationship.len() + t.subject.len();
        assert_eq!(text > 156, i % 4 != 3, "{t:?} is long, or short, as meant");
    }
    assert!(images.len() >= 5, "{mode:?}: {} images", images.len());
    assert!(
        images
            .iter()
            .any(|i| i.want.iter().any(|t| t.object.len() > 48)),
        "long tags were committed"
    );
    // Far fewer fsyncs of the strings file than long strings (one per
    // commit that needs one, and one before the superblock's strings flag
    // is first set; not one per string): 12 rounds of 26 tags, three in
    // four with long strings.
    assert!(
        strings_syncs > 0 && strings_syncs <= images.len() + 1,
        "{mode:?}: {strings_syncs} strings fsyncs for {} commits",
        images.len()
    );
    for image in &images {
        recover(image);
    }
}

#[test]
fn immediate_mode_commits_no_slot_before_its_string() {
    power_loss_in(Durability::Immediate);
}

#[test]
fn on_sync_mode_commits_no_slot_before_its_string() {
    power_loss_in(Durability::OnSync);
}

#[test]
fn mode_none_sync_makes_strings_durable_before_the_store() {
    power_loss_in(Durability::None);
}

/// Regression: a string appended by a session that ended uncleanly (so
/// never fsynced) was trusted by the next session, which inserted its tag
/// again (the string then held, nothing appended) and committed the slot
/// without an fsync of the strings file; a power cut then left a tag
/// naming a lost string.
#[test]
fn a_string_an_unclean_session_left_unsynced_is_synced_before_its_next_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("u.tags");
    let t = tag(2);
    let store = Store::create(&path, &CreateOptions::default()).expect("create");
    store.set_durability(Durability::OnSync).expect("on-sync");
    assert!(store.insert(&t).expect("insert"));
    // No commit: the string is in the file (the page cache), never fsynced.
    store.abandon();
    let store = Store::open(&path).expect("reopen");
    let rec = Arc::new(Mutex::new(Recorder::default()));
    {
        let (rec, path, t) = (Arc::clone(&rec), path.clone(), t.clone());
        store.set_sync_hook(Some(Box::new(move |p: SyncPoint| {
            let mut r = lock(&rec);
            match p {
                // What the strings file holds durably: nothing before this
                // session's first strings fsync.
                SyncPoint::StringsSynced => r.strings = read_or_empty(&strings_of(&path)),
                SyncPoint::JournalSynced => {
                    let image = Image {
                        label: format!("image {} (JournalSynced)", r.images.len()),
                        store: fs::read(&path).expect("read store"),
                        journal: Some(fs::read(journal_path(&path)).expect("read journal")),
                        strings: r.strings.clone(),
                        want: BTreeSet::from([t.clone()]),
                    };
                    r.images.push(image);
                }
                _ => {}
            }
        })));
    }
    store.set_durability(Durability::OnSync).expect("on-sync");
    assert!(
        store.insert(&t).expect("insert again"),
        "not committed before"
    );
    store.sync().expect("sync");
    store.set_sync_hook(None);
    drop(store);
    let images = std::mem::take(&mut lock(&rec).images);
    assert!(!images.is_empty());
    for image in &images {
        recover(image);
    }
}
