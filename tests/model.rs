//! Model-based test: random sequences of INSERT, DELETE (single and batched),
//! FIND by object and by subject, clean reopen, unclean reopen (abandon, then
//! open), read-only reopen and injected crashes (`fail_after_writes`, abandon,
//! reopen) are run against a store with a tiny geometry (so buckets overflow
//! into secondary chains and keys collide) and against a `BTreeSet<Tag>`
//! model. After every step the FIND results for the touched keys, `len()`
//! and `check()` must agree with the model; after reopens and at the end
//! every key's FINDs and the full `tags()` export are compared.
//!
//! An injected crash leaves one tag in flight: the model accepts either
//! outcome for it, but the tag must be in both halves or in neither
//! (`contains`, `find_subjects` and `find_objects` agree).
//!
//! Default case count keeps this file well under a minute in the test
//! profile; set `TAGSTORE_PROPTEST_CASES` to run more.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use tagstore::{CreateOptions, Half, Store, Tag};

const DEFAULT_CASES: u32 = 200;

/// Coverage counters: cases that linked secondary buckets, and in-flight
/// tags that recovery left present or absent.
static CHAINED_CASES: AtomicUsize = AtomicUsize::new(0);
static IN_FLIGHT_PRESENT: AtomicUsize = AtomicUsize::new(0);
static IN_FLIGHT_ABSENT: AtomicUsize = AtomicUsize::new(0);

/// Small alphabets with empty strings, tabs, newlines and multi-byte UTF-8,
/// so that tags repeat (duplicate inserts, deletes of present tags) and
/// few keys crowd into few buckets.
const OBJECTS: &[&str] = &[
    "",
    "a",
    "b",
    "photo1",
    "photo2",
    "日本",
    "x\ty",
    "line\nbreak",
    "é",
    "🦀crab",
    " ",
    "an object with a rather longer name, 0123456789",
];
const RELS: &[&str] = &["isa", "", "rel\n", "owned\tby"];
const SUBJECTS: &[&str] = &["", "s", "sunset", "夕日", "t\tab", "z\n", "Ωmega", "s2"];

fn name(pool: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        12 => proptest::sample::select(pool).prop_map(str::to_owned),
        1 => "[a\\t\\né日 ]{0,3}",
    ]
    .boxed()
}

fn tag() -> impl Strategy<Value = Tag> {
    (name(OBJECTS), name(RELS), name(SUBJECTS)).prop_map(|(o, r, s)| Tag::new(o, r, s))
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Tag),
    Delete(Tag),
    InsertBatch(Vec<Tag>),
    DeleteBatch(Vec<Tag>),
    FindSubjects(String, String),
    FindObjects(String, String),
    CleanReopen,
    UncleanReopen,
    ReadOnlyReopen {
        unclean: bool,
    },
    Crash {
        insert: bool,
        tag: Tag,
        n: u64,
    },
    CrashBatch {
        insert: bool,
        tags: Vec<Tag>,
        n: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => tag().prop_map(Op::Insert),
        12 => tag().prop_map(Op::Delete),
        6 => proptest::collection::vec(tag(), 1..40).prop_map(Op::InsertBatch),
        3 => proptest::collection::vec(tag(), 1..20).prop_map(Op::DeleteBatch),
        8 => (name(OBJECTS), name(RELS)).prop_map(|(o, r)| Op::FindSubjects(o, r)),
        8 => (name(SUBJECTS), name(RELS)).prop_map(|(s, r)| Op::FindObjects(s, r)),
        3 => Just(Op::CleanReopen),
        3 => Just(Op::UncleanReopen),
        2 => any::<bool>().prop_map(|unclean| Op::ReadOnlyReopen { unclean }),
        6 => (any::<bool>(), tag(), 0u64..6).prop_map(|(insert, tag, n)| Op::Crash {
            insert,
            tag,
            n
        }),
        2 => (any::<bool>(), proptest::collection::vec(tag(), 1..12), 0u64..30).prop_map(
            |(insert, tags, n)| Op::CrashBatch { insert, tags, n }
        ),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    primary_buckets_per_half: u32,
    blocks_per_secondary: u32,
    seed: u64,
    ops: Vec<Op>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1u32..=8,
        1u32..=3,
        any::<u64>(),
        proptest::collection::vec(op(), 1..160),
    )
        .prop_map(
            |(primary_buckets_per_half, blocks_per_secondary, seed, ops)| Case {
                primary_buckets_per_half,
                blocks_per_secondary,
                seed,
                ops,
            },
        )
}

fn sorted_unique(what: &str, it: impl Iterator<Item = tagstore::Result<String>>) -> Vec<String> {
    let mut v: Vec<String> = it
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{what}: FIND failed: {e}"));
    v.sort();
    for w in v.windows(2) {
        assert_ne!(w[0], w[1], "{what}: FIND returned {:?} twice", w[0]);
    }
    v
}

/// The model's answer to a FIND of `name` under `r` in `half`, sorted.
fn names_of(model: &BTreeSet<Tag>, half: Half, name: &str, r: &str) -> Vec<String> {
    let mut v: Vec<String> = model
        .iter()
        .filter(|t| t.relationship == r)
        .filter_map(|t| match half {
            Half::Object => (t.object == name).then(|| t.subject.clone()),
            Half::Subject => (t.subject == name).then(|| t.object.clone()),
        })
        .collect();
    v.sort();
    v
}

/// FIND in one direction (object half: the subjects of `name`; subject
/// half: its objects), by iterator and by visitor, against the model.
fn check_find(store: &Store, model: &BTreeSet<Tag>, half: Half, name: &str, r: &str) {
    let (what, want) = match half {
        Half::Object => (
            format!("find_subjects({name:?}, {r:?})"),
            names_of(model, Half::Object, name, r),
        ),
        Half::Subject => (
            format!("find_objects({name:?}, {r:?})"),
            names_of(model, Half::Subject, name, r),
        ),
    };
    let got = match half {
        Half::Object => sorted_unique(&what, store.find_subjects(name, r)),
        Half::Subject => sorted_unique(&what, store.find_objects(name, r)),
    };
    assert_eq!(got, want, "{what}");
    let by_visitor = visited(&what, |f| match half {
        Half::Object => store.for_each_subject(name, r, f),
        Half::Subject => store.for_each_object(name, r, f),
    });
    assert_eq!(by_visitor, got, "{what} by visitor");
}

fn check_find_subjects(store: &Store, model: &BTreeSet<Tag>, o: &str, r: &str) {
    check_find(store, model, Half::Object, o, r);
}

/// Results of a visitor FIND, sorted; its returned count must match.
fn visited(
    what: &str,
    run: impl FnOnce(&mut dyn FnMut(&str)) -> tagstore::Result<u64>,
) -> Vec<String> {
    let mut v = Vec::new();
    let n = run(&mut |x: &str| v.push(x.to_owned()))
        .unwrap_or_else(|e| panic!("{what}: visitor FIND failed: {e}"));
    assert_eq!(n, v.len() as u64, "{what}: visitor count");
    v.sort();
    v
}

fn check_find_objects(store: &Store, model: &BTreeSet<Tag>, s: &str, r: &str) {
    check_find(store, model, Half::Subject, s, r);
}

/// FINDs for both keys of `t`, and `contains`.
fn check_tag_keys(store: &Store, model: &BTreeSet<Tag>, t: &Tag) {
    check_find_subjects(store, model, &t.object, &t.relationship);
    check_find_objects(store, model, &t.subject, &t.relationship);
    assert_eq!(
        store.contains(t).expect("contains"),
        model.contains(t),
        "contains({t:?})"
    );
}

fn check_ok(store: &Store, when: &str) {
    let report = store.check().expect("check runs");
    assert!(report.ok(), "check() after {when}: {:?}", report.faults);
}

/// Every key's FINDs, the full export, `len()` and `check()`.
fn check_everything(store: &Store, model: &BTreeSet<Tag>, when: &str) {
    assert_eq!(store.len(), model.len() as u64, "len() after {when}");
    let mut exported: Vec<Tag> = store
        .tags()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("tags() after {when}: {e}"));
    exported.sort();
    let before = exported.len();
    exported.dedup();
    assert_eq!(before, exported.len(), "tags() repeated a tag after {when}");
    let want: Vec<Tag> = model.iter().cloned().collect();
    assert_eq!(exported, want, "tags() after {when}");
    let mut objects: BTreeSet<&str> = OBJECTS.iter().copied().collect();
    let mut rels: BTreeSet<&str> = RELS.iter().copied().collect();
    let mut subjects: BTreeSet<&str> = SUBJECTS.iter().copied().collect();
    for t in model {
        objects.insert(&t.object);
        rels.insert(&t.relationship);
        subjects.insert(&t.subject);
    }
    for r in &rels {
        for o in &objects {
            check_find_subjects(store, model, o, r);
        }
        for s in &subjects {
            check_find_objects(store, model, s, r);
        }
    }
    check_ok(store, when);
}

/// After a crash the in-flight tag may have gone either way, but never half.
fn settle_in_flight(store: &Store, model: &mut BTreeSet<Tag>, t: &Tag) {
    let contains = store.contains(t).expect("contains");
    let in_subjects = store
        .find_subjects(&t.object, &t.relationship)
        .collect::<Result<Vec<_>, _>>()
        .expect("find_subjects")
        .contains(&t.subject);
    let in_objects = store
        .find_objects(&t.subject, &t.relationship)
        .collect::<Result<Vec<_>, _>>()
        .expect("find_objects")
        .contains(&t.object);
    assert!(
        contains == in_subjects && contains == in_objects,
        "tag {t:?} is torn after crash recovery: contains={contains}, \
         object half (find_subjects)={in_subjects}, subject half (find_objects)={in_objects}"
    );
    if contains {
        IN_FLIGHT_PRESENT.fetch_add(1, Ordering::Relaxed);
        model.insert(t.clone());
    } else {
        IN_FLIGHT_ABSENT.fetch_add(1, Ordering::Relaxed);
        model.remove(t);
    }
}

struct Harness {
    path: PathBuf,
    store: Option<Store>,
    model: BTreeSet<Tag>,
}

impl Harness {
    fn store(&self) -> &Store {
        self.store.as_ref().expect("store is open")
    }

    fn reopen(&mut self, clean: bool) {
        let s = self.store.take().expect("store is open");
        if clean {
            s.close().expect("clean close");
        } else {
            s.abandon();
        }
        let s = Store::open(&self.path).expect("reopen");
        assert_eq!(
            s.recovered_on_open(),
            !clean,
            "recovered_on_open after a {} shutdown",
            if clean { "clean" } else { "unclean" }
        );
        self.store = Some(s);
    }

    fn apply_insert(&mut self, t: &Tag) {
        let fresh = self.store().insert(t).expect("insert");
        assert_eq!(fresh, !self.model.contains(t), "insert({t:?}) return value");
        self.model.insert(t.clone());
    }

    fn apply_delete(&mut self, t: &Tag) {
        let was = self.store().delete(t).expect("delete");
        assert_eq!(was, self.model.contains(t), "delete({t:?}) return value");
        self.model.remove(t);
    }

    /// Applies `tags[..done]` of a batch to the model and checks the outcome counts.
    fn apply_batch_prefix(&mut self, insert: bool, tags: &[Tag], out: tagstore::BatchOutcome) {
        let done = (out.changed + out.unchanged) as usize;
        assert!(
            done <= tags.len(),
            "batch outcome counts more tags than given"
        );
        let mut changed = 0;
        for t in &tags[..done] {
            let did = if insert {
                self.model.insert(t.clone())
            } else {
                self.model.remove(t)
            };
            changed += u64::from(did);
        }
        assert_eq!(out.changed, changed, "batch outcome.changed");
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Insert(t) => {
                self.apply_insert(t);
                check_tag_keys(self.store(), &self.model, t);
            }
            Op::Delete(t) => {
                self.apply_delete(t);
                check_tag_keys(self.store(), &self.model, t);
            }
            Op::InsertBatch(ts) | Op::DeleteBatch(ts) => {
                let insert = matches!(op, Op::InsertBatch(_));
                let (out, r) = if insert {
                    self.store().insert_batch(ts)
                } else {
                    self.store().delete_batch(ts)
                };
                r.expect("batch");
                assert_eq!((out.changed + out.unchanged) as usize, ts.len());
                self.apply_batch_prefix(insert, ts, out);
                for t in ts {
                    check_tag_keys(self.store(), &self.model, t);
                }
            }
            Op::FindSubjects(o, r) => check_find_subjects(self.store(), &self.model, o, r),
            Op::FindObjects(s, r) => check_find_objects(self.store(), &self.model, s, r),
            Op::CleanReopen => {
                self.reopen(true);
                check_everything(self.store(), &self.model, "clean reopen");
            }
            Op::UncleanReopen => {
                self.reopen(false);
                check_everything(self.store(), &self.model, "unclean reopen");
            }
            Op::ReadOnlyReopen { unclean } => {
                let s = self.store.take().expect("store is open");
                if *unclean {
                    s.abandon();
                } else {
                    s.close().expect("clean close");
                }
                {
                    let ro = Store::open_read_only(&self.path).expect("open_read_only");
                    check_everything(&ro, &self.model, "read-only reopen");
                    assert!(
                        matches!(
                            ro.insert(&Tag::new("ro", "ro", "ro")),
                            Err(tagstore::Error::ReadOnly)
                        ),
                        "insert into a read-only store must fail with ReadOnly"
                    );
                }
                let s = Store::open(&self.path).expect("reopen after read-only");
                // A read-only open writes nothing: an unclean store stays
                // unclean until a writable open recovers it.
                assert_eq!(
                    s.recovered_on_open(),
                    *unclean,
                    "read-only open must leave the store as it found it"
                );
                self.store = Some(s);
            }
            Op::Crash { insert, tag, n } => {
                self.store().fail_after_writes(Some(*n));
                let r = if *insert {
                    self.store().insert(tag)
                } else {
                    self.store().delete(tag)
                };
                let in_flight = match r {
                    Ok(changed) => {
                        // The operation finished within the write budget (or had
                        // nothing to write): it must have behaved normally.
                        if *insert {
                            assert_eq!(changed, !self.model.contains(tag), "insert return");
                            self.model.insert(tag.clone());
                        } else {
                            assert_eq!(changed, self.model.contains(tag), "delete return");
                            self.model.remove(tag);
                        }
                        false
                    }
                    Err(e) => {
                        assert!(
                            matches!(e, tagstore::Error::Io { .. }),
                            "injected crash should surface as an I/O error, got {e:?}"
                        );
                        // A write was attempted, so the tag needed changing.
                        assert_eq!(
                            self.model.contains(tag),
                            !*insert,
                            "a no-op {} attempted a write",
                            if *insert { "insert" } else { "delete" }
                        );
                        assert!(
                            self.store().insert(&Tag::new("p", "p", "p")).is_err(),
                            "store must refuse writes after a failed write"
                        );
                        true
                    }
                };
                self.reopen(false);
                if in_flight {
                    settle_in_flight(self.store.as_ref().expect("open"), &mut self.model, tag);
                }
                check_everything(self.store(), &self.model, "crash recovery");
            }
            Op::CrashBatch { insert, tags, n } => {
                self.store().fail_after_writes(Some(*n));
                let (out, r) = if *insert {
                    self.store().insert_batch(tags)
                } else {
                    self.store().delete_batch(tags)
                };
                self.apply_batch_prefix(*insert, tags, out);
                let done = (out.changed + out.unchanged) as usize;
                let in_flight = match r {
                    Ok(()) => {
                        assert_eq!(done, tags.len(), "successful batch left tags out");
                        None
                    }
                    Err(e) => {
                        assert!(
                            matches!(e, tagstore::Error::Io { .. }),
                            "injected crash should surface as an I/O error, got {e:?}"
                        );
                        let t = tags.get(done).expect("failed batch names its tag").clone();
                        assert_eq!(
                            self.model.contains(&t),
                            !*insert,
                            "batch attempted a write for a tag that needed none"
                        );
                        Some(t)
                    }
                };
                self.reopen(false);
                if let Some(t) = in_flight {
                    settle_in_flight(self.store.as_ref().expect("open"), &mut self.model, &t);
                }
                check_everything(self.store(), &self.model, "batch crash recovery");
            }
        }
        assert_eq!(
            self.store().len(),
            self.model.len() as u64,
            "len() after {op:?}"
        );
        check_ok(self.store(), &format!("{op:?}"));
    }
}

fn run_case(c: &Case) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.tags");
    let opts = CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(c.primary_buckets_per_half),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(c.blocks_per_secondary),
        seed: Some(c.seed),
    };
    let store = Store::create(&path, &opts).expect("create");
    let mut h = Harness {
        path,
        store: Some(store),
        model: BTreeSet::new(),
    };
    for op in &c.ops {
        h.step(op);
    }
    check_everything(h.store(), &h.model, "the last step");
    if h.store().stats().expect("stats").secondary_linked > 0 {
        CHAINED_CASES.fetch_add(1, Ordering::Relaxed);
    }
    h.reopen(true);
    check_everything(h.store(), &h.model, "the final clean reopen");
    h.store.take().expect("open").close().expect("close");
}

fn cases() -> u32 {
    std::env::var("TAGSTORE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

#[test]
fn store_matches_btreeset_model() {
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        max_shrink_iters: 2000,
        ..Config::default()
    });
    let result = runner.run(&case(), |c| {
        run_case(&c);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (chained, present, absent) = (
        CHAINED_CASES.load(Ordering::Relaxed),
        IN_FLIGHT_PRESENT.load(Ordering::Relaxed),
        IN_FLIGHT_ABSENT.load(Ordering::Relaxed),
    );
    eprintln!(
        "{} cases: {chained} linked secondary buckets; in-flight tags after recovery: \
         {present} present, {absent} absent",
        cases()
    );
    if cases() >= 50 {
        assert!(chained > 0, "no case reached a secondary bucket");
        assert!(
            present > 0 && absent > 0,
            "crashes never left a tag in flight both ways"
        );
    }
}

/// A hand-written sequence on a store that starts with one bucket per half:
/// the store must split buckets as it fills, and a key with more tags than a
/// primary bucket holds must still overflow into a chain, so the property
/// test's geometry is known to reach both splits and secondary buckets.
#[test]
fn tiny_geometry_splits_and_overflows_into_chains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("chain.tags");
    let opts = CreateOptions {
        expected_tags: 10,
        primary_buckets_per_half: Some(1),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(7),
    };
    let store = Store::create(&path, &opts).expect("create");
    let mut model = BTreeSet::new();
    let mut tags: Vec<Tag> = OBJECTS
        .iter()
        .flat_map(|o| SUBJECTS.iter().map(move |s| Tag::new(*o, "isa", *s)))
        .collect();
    // One object with 60 subjects: 35 more than its primary bucket holds.
    tags.extend((0..60).map(|i| Tag::new("peak", "isa", format!("s{i}"))));
    for t in tags {
        assert!(store.insert(&t).expect("insert"));
        model.insert(t);
    }
    let st = store.stats().expect("stats");
    assert!(
        st.geometry.primary_buckets_per_half > 1,
        "{} tags should have split the one bucket per half, stats say {:?}",
        model.len(),
        st.geometry
    );
    assert!(
        st.secondary_linked >= 2,
        "a 60-tag key should link two 25-slot secondary buckets, stats say {}",
        st.secondary_linked
    );
    check_everything(&store, &model, "splitting and filling buckets");
    store.close().expect("close");
    let store = Store::open(&path).expect("reopen");
    check_everything(&store, &model, "after a clean reopen");
}
