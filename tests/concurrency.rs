//! Concurrency: `Store` is `Send + Sync`; one writer inserts through an
//! `Arc<Store>` while four reader threads run FINDs (and an export). Readers
//! never see a tag twice within one FIND, never see garbage (every object
//! matches the writer's naming pattern and belongs to the key searched),
//! and always see every tag whose insert finished before their FIND began.
//! A second test churns (inserts and deletes, refilling holes) in the same
//! chain as a stable set of tags, which every concurrent FIND must return
//! exactly once. A third checks that a second handle on an open store is
//! locked out. Others write between the steps of a FIND of one's own: an
//! iterator's, and a visitor's whose callback splits buckets.

mod common;

use common::store::{assert_check_ok, sorted_objects};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use tagstore::{CreateOptions, Error, Store, Tag};

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Store>();
    send_sync::<Arc<Store>>();
};

const N: usize = 20_000;
const READERS: usize = 4;

fn object(i: usize) -> String {
    format!("obj-{i:06}")
}

fn subject(k: usize) -> String {
    format!("subj-{k}")
}

fn tag(i: usize) -> Tag {
    Tag::new(object(i), "isa", subject(i % READERS))
}

/// Index of a well-formed object name, or a panic naming the garbage.
fn parse(o: &str) -> usize {
    let digits = o
        .strip_prefix("obj-")
        .filter(|d| d.len() == 6 && d.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or_else(|| panic!("FIND returned garbage: {o:?}"));
    let i: usize = digits.parse().expect("digits");
    assert!(i < N, "FIND returned an object never inserted: {o:?}");
    i
}

fn small_store(path: &std::path::Path, primary: u32) -> Store {
    Store::create(
        path,
        &CreateOptions {
            expected_tags: N as u64,
            primary_buckets_per_half: Some(primary),
            blocks_per_primary: Some(1),
            blocks_per_secondary: Some(2),
            seed: Some(0xc0c0),
        },
    )
    .expect("create")
}

#[test]
fn readers_see_consistent_finds_while_a_writer_inserts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(small_store(&dir.path().join("c.tags"), 16));
    // Tags 0..published are inserted (the writer publishes after each step).
    let published = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicBool::new(false));

    let readers: Vec<_> = (0..READERS)
        .map(|k| {
            let (store, published, finished) = (
                Arc::clone(&store),
                Arc::clone(&published),
                Arc::clone(&finished),
            );
            thread::spawn(move || {
                let mut finds = 0usize;
                let mut seen_mid_write = 0usize;
                loop {
                    let last = finished.load(Ordering::Acquire);
                    let before = published.load(Ordering::Acquire);
                    let mut seen = vec![false; N];
                    let mut count = 0usize;
                    for r in store.find_objects(&subject(k), "isa") {
                        let i = parse(&r.expect("find_objects"));
                        assert_eq!(i % READERS, k, "object {i} under the wrong subject");
                        assert!(!seen[i], "FIND returned {} twice", object(i));
                        seen[i] = true;
                        count += 1;
                    }
                    let missing = (k..before).step_by(READERS).find(|&i| !seen[i]);
                    assert!(
                        missing.is_none(),
                        "FIND missed {:?}, inserted before the FIND began ({before} published)",
                        missing.map(object)
                    );
                    if count > before.div_ceil(READERS) {
                        seen_mid_write += 1;
                    }
                    // The other half: a published object's subjects.
                    if before > 0 {
                        let j = (finds * 7919 + k) % before;
                        let subjects: Vec<String> = store
                            .find_subjects(&object(j), "isa")
                            .collect::<Result<_, _>>()
                            .expect("find_subjects");
                        assert_eq!(
                            subjects,
                            [subject(j % READERS)],
                            "subjects of {}",
                            object(j)
                        );
                        assert!(store.contains(&tag(j)).expect("contains"));
                    }
                    // Reader 0 also exports everything now and then.
                    if k == 0 && finds.is_multiple_of(8) {
                        let mut all = vec![false; N];
                        for t in store.tags() {
                            let t = t.expect("tags");
                            let i = parse(&t.object);
                            assert_eq!(t, tag(i), "export returned a foreign tag");
                            assert!(!all[i], "export returned {t:?} twice");
                            all[i] = true;
                        }
                        assert!(all[..before].iter().all(|&b| b), "export missed a tag");
                    }
                    finds += 1;
                    if last {
                        return (finds, seen_mid_write);
                    }
                }
            })
        })
        .collect();

    let tags: Vec<Tag> = (0..N).map(tag).collect();
    let mut i = 0;
    while i < N {
        if (i / 100) % 2 == 0 {
            let end = (i + 100).min(N);
            let (out, r) = store.insert_batch(&tags[i..end]);
            r.expect("insert_batch");
            assert_eq!(out.changed as usize, end - i);
            i = end;
        } else {
            assert!(store.insert(&tags[i]).expect("insert"));
            i += 1;
        }
        published.store(i, Ordering::Release);
    }
    finished.store(true, Ordering::Release);

    for (k, h) in readers.into_iter().enumerate() {
        let (finds, mid) = h.join().expect("reader panicked");
        eprintln!("reader {k}: {finds} FINDs, {mid} saw inserts made during the FIND");
        assert!(finds >= 2, "reader {k} ran only {finds} FINDs");
    }
    assert_eq!(store.len(), N as u64);
    for k in 0..READERS {
        let mut got: Vec<usize> = store
            .find_objects(&subject(k), "isa")
            .map(|r| parse(&r.expect("find")))
            .collect();
        got.sort_unstable();
        let want: Vec<usize> = (k..N).step_by(READERS).collect();
        assert_eq!(got, want, "final FIND of {}", subject(k));
    }
    let st = store.stats().expect("stats");
    assert!(st.secondary_linked > 0, "test should exercise chains");
    let report = store.check().expect("check");
    assert!(report.ok(), "{:?}", report.faults);
}

#[test]
fn stable_tags_are_found_exactly_once_amid_churn_in_their_chain() {
    const STABLE: usize = 300;
    let dir = tempfile::tempdir().expect("tempdir");
    // One bucket per half: every tag shares the one chain.
    let store = Arc::new(small_store(&dir.path().join("churn.tags"), 1));
    let stable: Vec<Tag> = (0..STABLE)
        .map(|i| Tag::new(format!("stable-{i}"), "isa", "keep"))
        .collect();
    // Interleave stable tags with churn so holes open all along the chain.
    for (i, t) in stable.iter().enumerate() {
        store.insert(t).expect("insert");
        store
            .insert(&Tag::new(format!("churn-{i}"), "isa", "keep"))
            .expect("insert");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|k| {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            thread::spawn(move || {
                let mut finds = 0;
                while !stop.load(Ordering::Acquire) || finds < 2 {
                    let mut stable_seen = vec![false; STABLE];
                    let mut churn_seen = BTreeSet::new();
                    for r in store.find_objects("keep", "isa") {
                        let o = r.expect("find");
                        if let Some(i) = o.strip_prefix("stable-") {
                            let i: usize = i.parse().expect("stable index");
                            assert!(!stable_seen[i], "reader {k}: {o} returned twice");
                            stable_seen[i] = true;
                        } else if o.starts_with("churn-") {
                            assert!(churn_seen.insert(o.clone()), "reader {k}: {o} twice");
                        } else {
                            panic!("reader {k}: garbage object {o:?}");
                        }
                    }
                    let missing = stable_seen.iter().position(|&b| !b);
                    assert!(
                        missing.is_none(),
                        "reader {k}: stable-{} present throughout but not returned",
                        missing.unwrap_or(0)
                    );
                    let subjects: Vec<String> = store
                        .find_subjects(&format!("stable-{}", finds % STABLE), "isa")
                        .collect::<Result<_, _>>()
                        .expect("find_subjects");
                    assert_eq!(subjects, ["keep"]);
                    finds += 1;
                }
                finds
            })
        })
        .collect();

    // Churn: delete and reinsert churn tags (and new ones), refilling holes.
    let mut live: BTreeSet<usize> = (0..STABLE).collect();
    for round in 0..100usize {
        let victims: Vec<usize> = live
            .iter()
            .copied()
            .filter(|i| (i + round) % 3 == 0)
            .collect();
        for &i in &victims {
            let t = Tag::new(format!("churn-{i}"), "isa", "keep");
            assert!(store.delete(&t).expect("delete"));
            live.remove(&i);
        }
        for j in 0..victims.len() {
            let i = STABLE + round * STABLE + j;
            let t = Tag::new(format!("churn-{i}"), "isa", "keep");
            assert!(store.insert(&t).expect("insert"));
            live.insert(i);
        }
    }
    stop.store(true, Ordering::Release);
    for (k, h) in readers.into_iter().enumerate() {
        let finds = h.join().expect("reader panicked");
        eprintln!("churn reader {k}: {finds} FINDs");
        assert!(finds >= 2);
    }
    let got = sorted_objects(&store, "keep", "isa");
    let mut want: Vec<String> = stable
        .iter()
        .map(|t| t.object.clone())
        .chain(live.iter().map(|i| format!("churn-{i}")))
        .collect();
    want.sort();
    assert_eq!(got, want);
    assert_check_ok(&store, "after churn");
}

#[test]
fn a_second_handle_is_locked_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lock.tags");
    let store = small_store(&path, 2);
    store.insert(&tag(1)).expect("insert");
    assert!(matches!(Store::open(&path), Err(Error::Locked(_))));
    assert!(matches!(
        Store::open_read_only(&path),
        Err(Error::Locked(_))
    ));
    store.close().expect("close");
    let r1 = Store::open_read_only(&path).expect("first reader");
    let r2 = Store::open_read_only(&path).expect("second reader");
    assert!(matches!(Store::open(&path), Err(Error::Locked(_))));
    assert!(r1.contains(&tag(1)).expect("contains"));
    assert!(r2.contains(&tag(1)).expect("contains"));
    drop((r1, r2));
    let w = Store::open(&path).expect("writer after readers left");
    assert_eq!(w.len(), 1);
}

/// The same thread may write between the steps of its own FIND: the
/// iterator holds no lock between items. Deleting each tag as it is
/// returned, and inserting new tags under the same key meanwhile, every
/// original tag (present until returned) comes back exactly once.
#[test]
fn writing_between_steps_of_ones_own_find() {
    const M: usize = 600;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = small_store(&dir.path().join("own.tags"), 1);
    for i in 0..M {
        store.insert(&tag(i * READERS)).expect("insert");
    }
    let mut originals = vec![false; M];
    let mut added = 0usize;
    let mut added_seen = BTreeSet::new();
    for r in store.find_objects(&subject(0), "isa") {
        let o = r.expect("find");
        if let Some(n) = o.strip_prefix("added-") {
            assert!(added_seen.insert(n.to_owned()), "{o} returned twice");
            continue;
        }
        let i = parse(&o);
        assert_eq!(i % READERS, 0);
        assert!(!originals[i / READERS], "{o} returned twice");
        originals[i / READERS] = true;
        assert!(store.delete(&tag(i)).expect("delete during FIND"));
        if added < M / 2 {
            let t = Tag::new(format!("added-{added}"), "isa", subject(0));
            assert!(store.insert(&t).expect("insert during FIND"));
            added += 1;
        }
    }
    assert!(
        originals.iter().all(|&b| b),
        "{} originals never returned",
        originals.iter().filter(|&&b| !b).count()
    );
    assert_eq!(store.len(), added as u64);
    let report = store.check().expect("check");
    assert!(report.ok(), "{:?}", report.faults);
}

/// A visitor FIND releases the store's lock between its steps (and runs
/// its callback without it), so it must hold splits off until it ends,
/// as the iterators do. A FIND of a key spanning many steps whose callback
/// inserts enough tags to split buckets many times over must still return
/// the key's tags exactly once each: a split that moved the key's chain
/// between two steps would lose the rest of it. (Written for a change
/// that registered such a FIND as a reader only from its second step on;
/// the change was dropped, as it measured no faster, and the test kept.)
#[test]
fn a_visitor_find_spanning_steps_holds_splits_off_until_it_ends() {
    const PEAK: usize = 3_000;
    const WRITES: usize = 30_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::create(
        dir.path().join("visit.tags"),
        &CreateOptions {
            primary_buckets_per_half: Some(2),
            blocks_per_primary: Some(1),
            blocks_per_secondary: Some(2),
            seed: Some(0xc0c0),
            ..CreateOptions::default()
        },
    )
    .expect("create");
    let want: Vec<String> = (0..PEAK).map(|i| format!("peak-{i:05}")).collect();
    for o in &want {
        store
            .insert(&Tag::new(o.as_str(), "isa", "peak"))
            .expect("insert");
    }
    let before = store.geometry().primary_buckets_per_half;
    let mut got = Vec::with_capacity(PEAK);
    let n = store
        .for_each_object("peak", "isa", |o| {
            if got.is_empty() {
                // Between the FIND's first and second steps.
                for i in 0..WRITES {
                    let t = Tag::new(format!("w-{i}"), "isa", format!("s-{}", i % 5_000));
                    store.insert(&t).expect("insert inside the FIND");
                }
            }
            got.push(o.to_owned());
        })
        .expect("FIND");
    got.sort();
    assert_eq!(n as usize, got.len());
    assert!(
        got == want,
        "the FIND returned {} of {PEAK} tags",
        got.len()
    );
    // The splits were held off, not lost: the next write makes them.
    store
        .insert(&Tag::new("after", "isa", "s-0"))
        .expect("insert after");
    let after = store.geometry().primary_buckets_per_half;
    assert!(
        after > before,
        "no bucket split ({before} -> {after} per half)"
    );
    assert_check_ok(&store, "after the FIND and the splits");
}
