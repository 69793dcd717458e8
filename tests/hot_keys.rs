//! Hot copies of FIND results (DESIGN.md §5.3.2): a key found again and
//! again is answered from a packed copy of its results, which every write
//! to the key must drop. These tests run writes of every kind (single and
//! batched, bulk rounds, half-only stores, tags naming long strings, a
//! writer racing the FINDs that make copies) against a `BTreeSet` model,
//! FINDing each hot key three times in a row so that copies are made and
//! then read, and check every answer against the model.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tagstore::{CreateOptions, Half, Store, Tag};

const REL: &str = "r";
/// Hot subjects: one short, one of 60 bytes (stored by reference in a tag
/// too long for a slot, so its copy is dropped by a write naming another
/// stored form of it), one with multi-byte characters.
fn subjects() -> [String; 3] {
    [
        "hot".to_string(),
        format!("s{}", "6".repeat(59)),
        "夕日🦀".to_string(),
    ]
}

/// Objects: many short ones, and a few of 200 bytes (a tag too long for a slot).
fn object(i: u16) -> String {
    if i % 37 == 5 {
        format!("{i:03}{}", "L".repeat(197))
    } else {
        format!("o{i}\t日")
    }
}

/// Cases that read some key from a copy (the tests must reach copies).
static READ_FROM_COPY: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone, Debug)]
enum Op {
    Insert(u8, u16),
    Delete(u8, u16),
    InsertBatch(Vec<(u8, u16)>),
    DeleteBatch(Vec<(u8, u16)>),
    /// FIND a subject's objects three times (visitor or iterator).
    FindObjects(u8, bool),
    /// FIND an object's subjects three times.
    FindSubjects(u16, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let pair = (0u8..3, 0u16..120);
    prop_oneof![
        20 => pair.clone().prop_map(|(s, o)| Op::Insert(s, o)),
        8 => pair.clone().prop_map(|(s, o)| Op::Delete(s, o)),
        3 => proptest::collection::vec(pair.clone(), 1..200).prop_map(Op::InsertBatch),
        2 => proptest::collection::vec(pair, 1..100).prop_map(Op::DeleteBatch),
        12 => (0u8..3, any::<bool>()).prop_map(|(s, v)| Op::FindObjects(s, v)),
        2 => (0u16..120, any::<bool>()).prop_map(|(o, v)| Op::FindSubjects(o, v)),
    ]
}

fn tag_of(subs: &[String; 3], (s, o): (u8, u16)) -> Tag {
    Tag::new(object(o), REL, subs[s as usize].clone())
}

fn found(store: &Store, half: Half, name: &str, visitor: bool) -> Vec<String> {
    let mut v = Vec::new();
    if visitor {
        let n = match half {
            Half::Subject => store.for_each_object(name, REL, |x| v.push(x.to_owned())),
            Half::Object => store.for_each_subject(name, REL, |x| v.push(x.to_owned())),
        }
        .expect("visitor FIND");
        assert_eq!(n as usize, v.len(), "visitor's count");
    } else {
        let it = match half {
            Half::Subject => store.find_objects(name, REL),
            Half::Object => store.find_subjects(name, REL),
        };
        v = it.collect::<Result<_, _>>().expect("iterator FIND");
    }
    v.sort();
    v
}

fn expected(model: &BTreeSet<Tag>, half: Half, name: &str) -> Vec<String> {
    let mut v: Vec<String> = model
        .iter()
        .filter_map(|t| match half {
            Half::Subject => (t.subject == name).then(|| t.object.clone()),
            Half::Object => (t.object == name).then(|| t.subject.clone()),
        })
        .collect();
    v.sort();
    v
}

fn run(half_only: bool, bulk: bool, ops: &[Op]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hot.tags");
    let store = if half_only {
        Store::create_half_only(&path, &CreateOptions::default())
    } else {
        Store::create(&path, &CreateOptions::default())
    }
    .expect("create");
    // Keys of 32 results or more count (256 by default).
    store.set_hot_min_results(32);
    if bulk {
        // Batches from 64 tags take the bulk path (its rounds).
        store.set_bulk_limits(64, 4096);
    }
    let subs = subjects();
    let mut model = BTreeSet::new();
    let mut copied = false;
    for op in ops {
        match op {
            Op::Insert(s, o) => {
                let t = tag_of(&subs, (*s, *o));
                assert_eq!(store.insert(&t).expect("insert"), model.insert(t));
            }
            Op::Delete(s, o) => {
                let t = tag_of(&subs, (*s, *o));
                assert_eq!(store.delete(&t).expect("delete"), model.remove(&t));
            }
            Op::InsertBatch(v) => {
                let tags: Vec<Tag> = v.iter().map(|&p| tag_of(&subs, p)).collect();
                store.insert_batch(&tags).1.expect("insert_batch");
                model.extend(tags);
            }
            Op::DeleteBatch(v) => {
                let tags: Vec<Tag> = v.iter().map(|&p| tag_of(&subs, p)).collect();
                store.delete_batch(&tags).1.expect("delete_batch");
                for t in &tags {
                    model.remove(t);
                }
            }
            Op::FindObjects(s, visitor) => {
                let name = &subs[*s as usize];
                for round in 0..3 {
                    let want = expected(&model, Half::Subject, name);
                    let got = found(&store, Half::Subject, name, *visitor ^ (round == 1));
                    assert_eq!(got, want, "objects of {name:?}, FIND {round}");
                }
                copied |= store.hot_usage().reads > 0;
            }
            Op::FindSubjects(o, visitor) => {
                let name = object(*o);
                for round in 0..3 {
                    let want = expected(&model, Half::Object, &name);
                    let got = found(&store, Half::Object, &name, *visitor ^ (round == 1));
                    assert_eq!(got, want, "subjects of {name:?}, FIND {round}");
                }
            }
        }
    }
    for name in &subs {
        let want = expected(&model, Half::Subject, name);
        for visitor in [true, false, true] {
            assert_eq!(found(&store, Half::Subject, name, visitor), want);
        }
    }
    if copied {
        READ_FROM_COPY.fetch_add(1, Ordering::Relaxed);
    }
}

/// Every FIND of hot keys agrees with the model while copies are made,
/// read and dropped by writes of every kind.
#[test]
fn hot_copies_agree_with_a_model() {
    let cases = std::env::var("TAGSTORE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let strategy = (
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(op(), 1..120),
    );
    runner
        .run(&strategy, |(half_only, bulk, ops)| {
            run(half_only, bulk, &ops);
            Ok(())
        })
        .expect("model");
    assert!(
        READ_FROM_COPY.load(Ordering::Relaxed) > cases as usize / 4,
        "too few cases made a hot copy: {}",
        READ_FROM_COPY.load(Ordering::Relaxed)
    );
}

/// A writer changing a hot key while other threads FIND it (and so make
/// copies of it) leaves no copy behind that misses its writes: once it
/// stops, every FIND equals what it wrote.
#[test]
fn a_writer_racing_hot_finds_leaves_no_stale_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(
        Store::create(dir.path().join("race.tags"), &CreateOptions::default()).expect("create"),
    );
    let mut model = BTreeSet::new();
    for i in 0..400u16 {
        let t = Tag::new(object(i), REL, "hot");
        store.insert(&t).expect("insert");
        model.insert(t.object);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut finds = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let n = found(&store, Half::Subject, "hot", r == 0).len();
                    assert!(n >= 300, "a FIND saw {n} of the hot key's 300 or more tags");
                    finds += 1;
                }
                finds
            })
        })
        .collect();
    // Objects 0..300 stay; 300..700 come and go.
    let mut x = 12345u64;
    for _ in 0..3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = 300 + (x % 400) as u16;
        let t = Tag::new(object(i), REL, "hot");
        if x & (1 << 40) == 0 {
            store.insert(&t).expect("insert");
            model.insert(t.object);
        } else {
            store.delete(&t).expect("delete");
            model.remove(&t.object);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let finds: u64 = readers.into_iter().map(|h| h.join().expect("reader")).sum();
    assert!(finds > 10, "readers ran {finds} FINDs");
    let want: Vec<String> = model.into_iter().collect();
    for visitor in [true, false, true, false] {
        assert_eq!(found(&store, Half::Subject, "hot", visitor), want);
    }
    let before = store.hot_usage().reads;
    assert_eq!(found(&store, Half::Subject, "hot", true), want);
    assert!(
        store.hot_usage().reads > before,
        "the last FIND read no copy"
    );
}

/// The copies' memory is bounded by `set_hot_bytes`, and 0 keeps none.
#[test]
fn hot_copies_stay_within_their_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Store::create(dir.path().join("bound.tags"), &CreateOptions::default()).expect("create");
    store.set_hot_min_results(32);
    let tags: Vec<Tag> = (0..40u16)
        .flat_map(|s| {
            (0..100u16).map(move |o| Tag::new(format!("object {o}"), REL, format!("subject {s}")))
        })
        .collect();
    store.insert_batch(&tags).1.expect("load");
    let find_all = |times: usize| {
        for s in 0..40 {
            for _ in 0..times {
                let n = store
                    .for_each_object(&format!("subject {s}"), REL, |_| {})
                    .expect("find");
                assert_eq!(n, 100);
            }
        }
    };
    find_all(3);
    let u = store.hot_usage();
    let (copies, bytes) = (u.copies, u.bytes);
    assert_eq!(copies, 40, "each key found three times has a copy");
    find_all(1);
    assert_eq!(
        store.hot_usage().reads,
        u.reads + 40,
        "each key's next FIND reads its copy"
    );
    assert!(bytes > 40 * 100 * 10, "{bytes} bytes for 4,000 results");
    store.set_hot_bytes(bytes / 4);
    find_all(3);
    let u = store.hot_usage();
    let (copies, small) = (u.copies, u.bytes);
    assert!(
        small <= bytes / 4,
        "{small} bytes kept past a bound of {}",
        bytes / 4
    );
    assert!(
        copies > 0 && copies < 40,
        "{copies} copies within a quarter of the room"
    );
    store.set_hot_bytes(0);
    find_all(4);
    let u = store.hot_usage();
    assert_eq!((u.copies, u.bytes), (0, 0));
}

/// Regression (a review, 2026-11-29): a key whose results passed the
/// bound in one step of its walk was offered for keeping anyway, dropped
/// every other copy to make room, was still not kept, and did so again at
/// each FIND. It is now marked too big and drops nothing.
#[test]
fn a_key_too_big_to_copy_drops_no_other_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Store::create(dir.path().join("big.tags"), &CreateOptions::default()).expect("create");
    store.set_hot_bytes(20_000);
    let small: Vec<Tag> = (0..260)
        .map(|i| Tag::new(format!("{i}"), REL, "small"))
        .collect();
    let big: Vec<Tag> = (0..350)
        .map(|i| Tag::new(format!("{i:03}{}", "b".repeat(57)), REL, "big"))
        .collect();
    store
        .insert_batch(small.iter().chain(&big))
        .1
        .expect("load");
    let find = |name: &str, want: u64| {
        let n = store.for_each_object(name, REL, |_| {}).expect("find");
        assert_eq!(n, want, "{name}");
    };
    for _ in 0..3 {
        find("small", 260);
    }
    let kept = store.hot_usage();
    assert_eq!(kept.copies, 1, "small's copy");
    for _ in 0..5 {
        find("big", 350);
    }
    let after = store.hot_usage();
    assert_eq!(
        (after.copies, after.bytes),
        (kept.copies, kept.bytes),
        "small's copy stays"
    );
    find("small", 260);
    assert_eq!(store.hot_usage().reads, after.reads + 1, "and is read");
}

/// Writes that change nothing (an INSERT of a stored tag, a DELETE of an
/// absent one) leave a key's copy in place.
#[test]
fn writes_that_change_nothing_keep_the_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    for half_only in [false, true] {
        let path = dir.path().join(format!("same{half_only}.tags"));
        let store = match half_only {
            false => Store::create(&path, &CreateOptions::default()),
            true => Store::create_half_only(&path, &CreateOptions::default()),
        }
        .expect("create");
        let tags: Vec<Tag> = (0..300)
            .map(|i| Tag::new(format!("o{i}"), REL, "hot"))
            .collect();
        store.insert_batch(&tags).1.expect("load");
        for _ in 0..3 {
            store.for_each_object("hot", REL, |_| {}).expect("find");
        }
        let u = store.hot_usage();
        assert_eq!(u.copies, 1);
        if half_only {
            assert!(!store
                .insert_half(Half::Subject, &tags[7])
                .expect("insert_half"));
            let absent = Tag::new("absent", REL, "hot");
            assert!(!store
                .delete_half(Half::Subject, &absent)
                .expect("delete_half"));
        } else {
            assert!(!store.insert(&tags[7]).expect("insert"));
            assert!(!store
                .delete(&Tag::new("absent", REL, "hot"))
                .expect("delete"));
        }
        assert_eq!(
            store.hot_usage().copies,
            1,
            "half-only {half_only}: copy kept"
        );
        store.for_each_object("hot", REL, |_| {}).expect("find");
        assert_eq!(
            store.hot_usage().reads,
            u.reads + 1,
            "half-only {half_only}: and read"
        );
        // A write that changes the key drops it.
        assert!(store.delete(&tags[7]).expect("delete"));
        assert_eq!(
            store.hot_usage().copies,
            0,
            "half-only {half_only}: dropped"
        );
    }
}
