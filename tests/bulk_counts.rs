//! A bulk call's counts merge runs on another thread (DESIGN.md §8, "Bulk
//! merges on another thread"): the counts must still be exact for the next
//! reader, and a handle closed or dropped with that merge still waiting
//! must leave counts that match the tags.
#![cfg(feature = "test-hooks")]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use tagstore::{CreateOptions, Store, Tag};

/// The hold is global to this binary: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// 130,000 tags over 105,000 subjects of two relationships (more distinct
/// keys than a handle merges at once, so the bulk call merges on another
/// thread); some subjects not ASCII.
fn tags() -> Vec<Tag> {
    (0..130_000u32)
        .map(|i| {
            let rel = if i % 3 == 0 { "owns" } else { "isa" };
            let k = i % 105_000;
            let sub = match k % 7 {
                0 => format!("日本-{k}"),
                _ => format!("subject-{k}"),
            };
            Tag::new(format!("object/{i}"), rel, sub)
        })
        .collect()
}

fn model<'a>(tags: impl IntoIterator<Item = &'a Tag>) -> BTreeMap<(String, String), u64> {
    let mut m = BTreeMap::new();
    for t in tags {
        *m.entry((t.relationship.clone(), t.subject.clone()))
            .or_default() += 1;
    }
    m
}

/// Every 97th key of the model and a few absent ones have the model's count,
/// and the cloud's top 20 of each relationship is the model's.
fn assert_counts(store: &Store, want: &BTreeMap<(String, String), u64>, ctx: &str) {
    for ((r, s), n) in want.iter().step_by(97) {
        let got = store.count(s, r).expect("count");
        assert_eq!(got, *n, "{ctx}: count of <*, {r}, {s}>");
    }
    for s in ["subject-104999x", "absent"] {
        assert_eq!(store.count(s, "isa").expect("count"), 0, "{ctx}: {s}");
    }
    for rel in ["isa", "owns"] {
        let mut top: Vec<(u64, &str)> = want
            .iter()
            .filter(|((r, _), _)| r == rel)
            .map(|((_, s), n)| (*n, s.as_str()))
            .collect();
        top.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let got: Vec<(u64, String)> = store
            .cloud(rel, 20)
            .expect("cloud")
            .into_iter()
            .map(|e| (e.count, e.subject))
            .collect();
        let want: Vec<(u64, String)> = top[..20].iter().map(|(n, s)| (*n, s.to_string())).collect();
        assert_eq!(got, want, "{ctx}: cloud of {rel}");
    }
}

fn hold(on: bool) {
    tagstore::testing::hold_counts_merges(on);
}

/// Holds merges until dropped: a failed assertion must not leave a
/// handle's drop waiting forever for its held merge.
struct Held;

impl Held {
    fn new() -> Held {
        hold(true);
        Held
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        hold(false);
    }
}

/// Lets held merges go after a pause, from another thread (a drop waits for them).
fn release_later() -> std::thread::JoinHandle<()> {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(200));
        hold(false);
    })
}

fn create(path: &Path) -> Store {
    Store::create(path, &CreateOptions::default()).expect("create")
}

/// With the bulk calls' merge threads held, `count`, `cloud` and
/// `check_counts` right after an `insert_batch` and a `delete_batch` must
/// finish the waiting merges themselves: they see every change.
#[test]
fn counts_are_exact_right_after_bulk_calls_while_their_merges_wait() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.tags");
    let all = tags();
    let store = create(&path);
    // After the store: on a panic the hold ends before the handle drops.
    let held = Held::new();
    let (out, r) = store.insert_batch(&all);
    r.expect("insert_batch");
    assert_eq!(out.changed, all.len() as u64);
    assert_counts(&store, &model(&all), "after the load");
    let (gone, kept): (Vec<Tag>, Vec<Tag>) = all.iter().cloned().partition(|t| {
        let n: u32 = t.object["object/".len()..].parse().expect("object");
        n.is_multiple_of(2)
    });
    let (out, r) = store.delete_batch(&gone);
    r.expect("delete_batch");
    assert_eq!(out.changed, gone.len() as u64);
    assert_counts(&store, &model(&kept), "after the delete");
    assert_eq!(store.check_counts().expect("check"), Vec::<String>::new());
    drop(held);
    drop(store);
    let store = Store::open(&path).expect("reopen");
    assert_counts(&store, &model(&kept), "after the reopen");
    assert_eq!(store.check_counts().expect("check"), Vec::<String>::new());
}

/// A clean close with the merge still waiting writes it (the reopened
/// store's counts file holds every change and passes the check), and a
/// handle dropped as a crash would leaves counts that match the tags.
#[test]
fn a_handle_closed_or_dropped_with_its_merge_waiting_leaves_exact_counts() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let all = tags();
    let want = model(&all);
    for (name, crash) in [("closed.tags", false), ("crashed.tags", true)] {
        let path = dir.path().join(name);
        let store = create(&path);
        let held = Held::new();
        store.insert_batch(&all).1.expect("insert_batch");
        let go = release_later();
        if crash {
            store.abandon();
        } else {
            store.close().expect("close");
        }
        go.join().expect("release");
        drop(held);
        let store = Store::open(&path).expect("reopen");
        assert_eq!(store.check_counts().expect("check"), Vec::<String>::new());
        assert_counts(&store, &want, name);
        assert_eq!(store.len(), all.len() as u64);
    }
}

/// Regression (found in review): a bulk call made with counting off must
/// leave the counts stale, so that the next use rebuilds them from the
/// tags. Feeding the counters from the bulk passes' thread skipped the
/// stale mark when counting was off, and the counts missed the batch.
#[test]
fn a_bulk_call_with_counting_off_makes_the_counts_rebuild() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.tags");
    let all = tags();
    let (first, second) = all.split_at(20_000);
    let store = create(&path);
    store.insert_batch(first).1.expect("insert_batch");
    assert_counts(&store, &model(first), "counted");
    store.set_counting(false);
    store.insert_batch(second).1.expect("insert_batch");
    store.set_counting(true);
    assert_counts(&store, &model(&all), "after a batch with counting off");
    drop(store);
    let store = Store::open(&path).expect("reopen");
    assert_counts(&store, &model(&all), "after the reopen");
}
