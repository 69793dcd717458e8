//! Bulk INSERT and DELETE: a large `insert_batch` or `delete_batch` in
//! mapped mode is written one half at a time, each half in bucket order
//! (`engine/bulk.rs`). Random batches
//! (repeats inside a batch, tags already stored, peaks that overflow into
//! secondary chains, Unicode, tabs, empty strings), deletes, clean and
//! unclean reopens and injected crashes run against a tiny store and a
//! `BTreeSet<Tag>` model. After every step the export, `len()`, FIND both
//! ways for every key and `check()` agree with the model.
//!
//! An injected crash (`fail_after_writes`) stops a batch (of inserts or
//! of deletes) at any write,
//! including between the object pass and the subject pass and inside the
//! write-back of a pass. After the reopen every tag of the batch must be
//! whole (both halves or none), nothing stored before may be lost, and
//! nothing outside the batch may appear. A read-only open before that
//! finishes the round in memory: it serves exactly the tags the writable
//! reopen then holds, passes `check()`, and leaves the file's bytes as
//! they were (it refused with `BulkPending` until 2026-11-29).
//!
//! Regression (CI at 239d156): every test here runs alone (`serial`). The
//! tmpfs test spawns `cp` and `mount`; a child forked while the model test
//! had just abandoned its store still held the store's lock until it
//! exec'd, and the model test's read-only open failed with `Locked`.

mod common;

use common::crash::{hub_tags, whole};
use common::store::{assert_check_ok, serial};
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use tagstore::{CreateOptions, Durability, Error, Half, Store, Tag};

/// The tags a read-only open of the crashed store at `path` serves (it
/// must open, pass `check()` and leave the file's bytes as they were).
fn read_only_view(path: &Path, when: &str) -> BTreeSet<Tag> {
    let before = std::fs::read(path).expect("read store");
    let ro = Store::open_read_only(path).unwrap_or_else(|e| panic!("{when}: read-only open: {e}"));
    assert_check_ok(&ro, &format!("{when}, read-only"));
    let seen = ro
        .tags()
        .collect::<Result<_, _>>()
        .expect("read-only export");
    drop(ro);
    assert!(
        std::fs::read(path).expect("read store") == before,
        "{when}: a read-only open wrote"
    );
    seen
}

/// Opens the crashed store at `path` read-only, then writable (with
/// `open`), and asserts both serve the same tags; returns the writable
/// store and its tags.
fn recovered(path: &Path, when: &str, open: impl FnOnce(&Path) -> Store) -> (Store, BTreeSet<Tag>) {
    let seen = read_only_view(path, when);
    let s = open(path);
    let got: BTreeSet<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
    assert_eq!(
        seen, got,
        "{when}: the read-only view and the recovery differ"
    );
    (s, got)
}

/// A plain writable open of a crashed store, failing with `when`.
fn reopen(when: &str) -> impl FnOnce(&Path) -> Store + '_ {
    move |p| Store::open(p).unwrap_or_else(|e| panic!("{when}: reopen: {e}"))
}

/// A tiny store's options (two 1-block primary buckets a half, 1-block
/// secondary buckets): chains and splits come early.
fn tiny(seed: u64) -> CreateOptions {
    CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(2),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(seed),
    }
}

/// Copies the store `base` to `path` and inserts `batch` into the copy
/// with a crash injected at write `k`; true if the batch finished first.
fn crash_copy(base: &Path, path: &Path, batch: &[Tag], k: u64) -> bool {
    std::fs::copy(base, path).expect("copy");
    let s = open(path, (4096, usize::MAX));
    s.fail_after_writes(Some(k));
    let done = s.insert_batch(batch).1.is_ok();
    s.abandon();
    done
}

/// Crashes after which some but not all new tags of the batch survived
/// (the redo at open had halves to agree).
static PARTIAL: AtomicUsize = AtomicUsize::new(0);

const OBJECTS: &[&str] = &[
    "",
    "a",
    "photo1",
    "日本",
    "x\ty",
    "🦀",
    "long object name 0123456789",
];
const RELS: &[&str] = &["isa", "", "owned\tby"];
const SUBJECTS: &[&str] = &["sunset", "", "夕日", "z\n"];

fn tag() -> impl Strategy<Value = Tag> {
    (
        prop_oneof![
            4 => proptest::sample::select(OBJECTS).prop_map(str::to_owned),
            // Many distinct objects: a subject's tags pile up into a peak.
            3 => (0u32..400).prop_map(|i| format!("file-{i}")),
        ],
        proptest::sample::select(RELS),
        proptest::sample::select(SUBJECTS),
    )
        .prop_map(|(o, r, s)| Tag::new(o, r, s))
}

#[derive(Clone, Debug)]
enum Step {
    Bulk(Vec<Tag>),
    Delete(Vec<Tag>),
    Reopen {
        clean: bool,
    },
    /// A bulk insert (or delete) stopped at its `n`-th write.
    Crash {
        insert: bool,
        tags: Vec<Tag>,
        n: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => proptest::collection::vec(tag(), 8..300).prop_map(Step::Bulk),
        2 => proptest::collection::vec(tag(), 1..60).prop_map(Step::Delete),
        2 => any::<bool>().prop_map(|clean| Step::Reopen { clean }),
        4 => (proptest::collection::vec(tag(), 8..300), 0u64..400)
            .prop_map(|(tags, n)| Step::Crash { insert: true, tags, n }),
        2 => (proptest::collection::vec(tag(), 8..200), 0u64..300)
            .prop_map(|(tags, n)| Step::Crash { insert: false, tags, n }),
    ]
}

/// Opens the store with the bulk path taken from 8 tags on, writing back
/// every `flush` blocks, in rounds of at most `round` tags.
fn open(path: &Path, (flush, round): (usize, usize)) -> Store {
    let s = Store::open(path).expect("open");
    s.set_bulk_limits(8, flush);
    s.set_bulk_round_max(round);
    s
}

/// Export, `len()`, FIND both ways for every key of `keys`, and `check()`
/// agree with `model`.
fn agree(store: &Store, model: &BTreeSet<Tag>, keys: &BTreeSet<Tag>, when: &str) {
    let got: BTreeSet<Tag> = store.tags().collect::<Result<_, _>>().expect("export");
    assert_eq!(&got, model, "{when}: export differs from the model");
    assert_eq!(store.len(), model.len() as u64, "{when}: len()");
    for k in keys {
        for (half, name) in [(Half::Object, &k.object), (Half::Subject, &k.subject)] {
            let found = match half {
                Half::Object => store.find_subjects(name, &k.relationship),
                Half::Subject => store.find_objects(name, &k.relationship),
            };
            let mut found: Vec<String> = found.collect::<Result<_, _>>().expect("find");
            found.sort();
            let mut want: Vec<String> = model
                .iter()
                .filter(|t| t.relationship == k.relationship)
                .filter_map(|t| match half {
                    Half::Object => (t.object == *name).then(|| t.subject.clone()),
                    Half::Subject => (t.subject == *name).then(|| t.object.clone()),
                })
                .collect();
            want.sort();
            assert_eq!(
                found, want,
                "{when}: FIND {half:?} {name:?} {:?}",
                k.relationship
            );
        }
    }
    assert_check_ok(store, when);
}

fn run(buckets: u32, blocks_per_secondary: u32, bulk: (usize, usize), steps: &[Step]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bulk.tags");
    let opts = CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(buckets),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(blocks_per_secondary),
        seed: Some(7),
    };
    drop(Store::create(&path, &opts).expect("create"));
    let mut store = Some(open(&path, bulk));
    let mut model = BTreeSet::new();
    let mut keys = BTreeSet::new();
    for (i, st) in steps.iter().enumerate() {
        let when = format!("step {i} ({})", name(st));
        let s = store.take().expect("open store");
        match st {
            Step::Bulk(tags) => {
                let (out, r) = s.insert_batch(tags);
                r.unwrap_or_else(|e| panic!("{when}: {e}"));
                let before = model.len();
                model.extend(tags.iter().cloned());
                assert_eq!(
                    out.changed as usize,
                    model.len() - before,
                    "{when}: changed"
                );
                assert_eq!((out.changed + out.unchanged) as usize, tags.len(), "{when}");
                keys.extend(tags.iter().cloned());
                store = Some(s);
            }
            Step::Delete(tags) => {
                let (_, r) = s.delete_batch(tags);
                r.unwrap_or_else(|e| panic!("{when}: {e}"));
                for t in tags {
                    model.remove(t);
                }
                store = Some(s);
            }
            Step::Reopen { clean } => {
                if *clean {
                    s.close().expect("close");
                } else {
                    s.abandon();
                }
                store = Some(open(&path, bulk));
            }
            Step::Crash { insert, tags, n } => {
                s.fail_after_writes(Some(*n));
                let (_, r) = match insert {
                    true => s.insert_batch(tags),
                    false => s.delete_batch(tags),
                };
                keys.extend(tags.iter().cloned());
                let batch: BTreeSet<Tag> = tags.iter().cloned().collect();
                // What the batch leaves when it finishes.
                let done: BTreeSet<Tag> = match insert {
                    true => model.union(&batch).cloned().collect(),
                    false => model.difference(&batch).cloned().collect(),
                };
                if r.is_ok() {
                    s.fail_after_writes(None);
                    model = done;
                    store = Some(s);
                } else {
                    s.abandon();
                    let (s, got) = recovered(&path, &when, |p| open(p, bulk));
                    let outside: Vec<&Tag> = got
                        .symmetric_difference(&model)
                        .filter(|t| !batch.contains(t))
                        .collect();
                    assert!(
                        outside.is_empty(),
                        "{when}: tags outside the batch changed: {outside:?}"
                    );
                    for t in &batch {
                        whole(&s, t, &when);
                    }
                    let changed = got.symmetric_difference(&model).count();
                    if changed > 0 && changed < done.symmetric_difference(&model).count() {
                        PARTIAL.fetch_add(1, Ordering::Relaxed);
                    }
                    model = got;
                    store = Some(s);
                }
            }
        }
        agree(store.as_ref().expect("open store"), &model, &keys, &when);
    }
}

fn name(s: &Step) -> &'static str {
    match s {
        Step::Bulk(_) => "bulk insert",
        Step::Delete(_) => "delete batch",
        Step::Reopen { .. } => "reopen",
        Step::Crash { insert: true, .. } => "crash in a bulk insert",
        Step::Crash { insert: false, .. } => "crash in a bulk delete",
    }
}

#[test]
fn bulk_batches_agree_with_a_model_across_crashes() {
    let _one = serial();
    let mut runner = common::prop::runner(48);
    let strategy = (
        1u32..=4,
        1u32..=3,
        (
            prop_oneof![Just(1usize), Just(3), Just(4096)],
            // Rounds: most batches in several (the bulk path's round of
            // 4,194,304 tags at most, scaled down), or each in one.
            prop_oneof![Just(50usize), Just(usize::MAX)],
        ),
        proptest::collection::vec(step(), 1..12),
    );
    runner
        .run(&strategy, |(buckets, bps, bulk, steps)| {
            run(buckets, bps, bulk, &steps);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        PARTIAL.load(Ordering::Relaxed) > 0,
        "no crash left a batch partly stored: the redo was never exercised"
    );
}

/// A store that must grow for the batch: `insert_batch` grows it first,
/// then writes both halves; the result holds every tag exactly once.
#[test]
fn bulk_load_into_a_store_with_no_size_hint() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("grown.tags");
    let s = Store::create(&path, &CreateOptions::default()).expect("create");
    let tags: Vec<Tag> = (0..40_000u32)
        .map(|i| {
            Tag::new(
                format!("/usr/share/{i}/file-{i}"),
                "owned_by",
                format!("pkg{}", i % 700),
            )
        })
        .collect();
    let (out, r) = s.insert_batch(&tags);
    r.expect("bulk insert");
    assert_eq!(out.changed, 40_000);
    let (out, r) = s.insert_batch(&tags);
    r.expect("bulk insert again");
    assert_eq!((out.changed, out.unchanged), (0, 40_000));
    let model: BTreeSet<Tag> = tags.iter().cloned().collect();
    agree(&s, &model, &BTreeSet::new(), "after a bulk load");
    for t in tags.iter().step_by(97) {
        assert!(whole(&s, t, "bulk load"), "{t:?} missing");
    }
    s.close().expect("close");
    let s = Store::open(&path).expect("reopen");
    assert_eq!(s.len(), 40_000);
    assert_check_ok(&s, "reopened");
}

/// A crash at every write of one bulk batch into a loaded store: a peak
/// of 600 tags under one subject grows a chain of new secondary buckets
/// in one write-back, so a write-back out of order would leave a chain
/// position without the one before it (a store that cannot be opened).
#[test]
fn crash_at_every_write_of_a_bulk_batch() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().join("base.tags");
    let opts = tiny(11);
    let before: Vec<Tag> = (0..150u32)
        .map(|i| Tag::new(format!("old{i}"), "in", format!("s{}", i % 7)))
        .collect();
    let s = Store::create(&base, &opts).expect("create");
    s.insert_batch(&before).1.expect("load");
    s.close().expect("close");
    let mut batch: Vec<Tag> = (0..600u32)
        .map(|i| Tag::new(format!("new{i}"), "in", "peak"))
        .collect();
    batch.extend(before.iter().take(40).cloned());
    let model: BTreeSet<Tag> = before.iter().cloned().collect();
    let (mut k, mut partial) = (0u64, 0);
    loop {
        let path = dir.path().join(format!("k{k}.tags"));
        let done = crash_copy(&base, &path, &batch, k);
        let when = format!("crash at write {k}");
        let (s, got) = recovered(&path, &when, reopen(&when));
        assert!(got.is_superset(&model), "{when}: tags stored before lost");
        let kept = got.len() - model.len();
        for t in batch.iter().step_by(7) {
            whole(&s, t, &when);
        }
        assert_check_ok(&s, &when);
        if done {
            assert_eq!(kept, 600, "{when}: a finished batch lost tags");
            break;
        }
        if kept > 0 && kept < 600 {
            partial += 1;
        }
        k += 1;
    }
    assert!(partial > 0, "no crash left the batch partly stored");
}

// ------------------------------------------- edges found in review

fn review_export(s: &Store) -> BTreeSet<Tag> {
    s.tags().collect::<Result<_, _>>().expect("export")
}

/// Journaled writes, then a switch to mapped mode and a bulk batch, then a
/// switch back and a crash: everything agrees after the reopen.
#[test]
fn bulk_between_journaled_modes() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("review test");
    let path = dir.path().join("j.tags");
    drop(Store::create(&path, &CreateOptions::default()).expect("review test"));
    let s = Store::open(&path).expect("review test");
    s.set_bulk_limits(1000, 64);
    let first = hub_tags("a", 3000);
    s.set_durability(Durability::OnSync).expect("review test");
    for t in &first[..1500] {
        s.insert(t).expect("review test");
    }
    s.sync().expect("review test");
    s.set_durability(Durability::None).expect("review test");
    s.insert_batch(&first).1.expect("review test");
    s.set_durability(Durability::Immediate)
        .expect("review test");
    let second = hub_tags("b", 300);
    for t in &second {
        s.insert(t).expect("review test");
    }
    s.delete_batch(&first[..100]).1.expect("review test");
    s.abandon();
    let s = Store::open(&path).expect("review test");
    let mut want: BTreeSet<Tag> = first[100..].iter().cloned().collect();
    want.extend(second.iter().cloned());
    assert_eq!(review_export(&s), want);
    assert_eq!(s.len(), want.len() as u64);
    assert_check_ok(&s, "after journaled/bulk/journaled");
}

/// Regression (review): a bulk batch that failed halfway left its private
/// copies in the poisoned handle, whose reads then showed 4,998 tags that
/// never reached the file (`contains` yes, FIND by subject no). The
/// copies are dropped: the handle's reads show what the reopen shows.
#[test]
fn reads_on_a_handle_poisoned_by_a_bulk_batch() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("review test");
    let path = dir.path().join("p.tags");
    drop(Store::create(&path, &CreateOptions::default()).expect("review test"));
    let s = Store::open(&path).expect("review test");
    s.set_bulk_limits(1000, 1_000_000);
    let batch = hub_tags("p", 20_000);
    // A few writes in: the object pass is under way, nothing written back.
    s.fail_after_writes(Some(5_000));
    let (_, r) = s.insert_batch(&batch);
    assert!(r.is_err(), "the injected failure must stop the batch");
    let seen_before: usize = batch
        .iter()
        .filter(|t| s.contains(t).expect("review test"))
        .count();
    let hub_before = s.find_objects("hub", "owned_by").count();
    let len_before = s.len();
    s.abandon();
    let s = Store::open(&path).expect("review test");
    let seen_after: usize = batch
        .iter()
        .filter(|t| s.contains(t).expect("review test"))
        .count();
    eprintln!(
        "poisoned handle: contains {seen_before}, FIND hub {hub_before}, len {len_before}; \
         after reopen: contains {seen_after}, len {}",
        s.len()
    );
    for t in batch.iter().step_by(11) {
        whole(&s, t, "after reopen");
    }
    assert_check_ok(&s, "after reopen");
    assert_eq!(
        seen_before, seen_after,
        "the poisoned handle answered from private copies that never reached the file"
    );
}

/// Regression (review): a store on a tmpfs that was full at open (its holes read as zeros,
/// `MappedFile::holes`), given room again, takes a bulk batch: the blocks
/// the write-back puts into holes must read back as written (they read
/// as zeros: 270 of 300 new tags torn).
#[test]
fn bulk_into_a_store_opened_on_a_full_tmpfs() {
    use common::crash::{fill_up, Tmpfs};
    let _one = serial();
    let disk = tempfile::tempdir().expect("review test");
    let src = disk.path().join("s.tags");
    let opts = CreateOptions {
        expected_tags: 20_000,
        seed: Some(5),
        ..Default::default()
    };
    let old: Vec<Tag> = (0..3000)
        .map(|i| Tag::new(format!("obj{i}"), "isa", format!("subj{}", i % 50)))
        .collect();
    let s = Store::create(&src, &opts).expect("review test");
    s.insert_batch(&old).1.expect("review test");
    s.close().expect("review test");
    let Some(fs) = Tmpfs::mount(&disk.path().join("mnt"), "100m") else {
        return;
    };
    let mnt = disk.path().join("mnt");
    let out = std::process::Command::new("cp")
        .arg("--sparse=always")
        .arg(&src)
        .arg(tagstore::counts_path(&src))
        .arg(&mnt)
        .output()
        .expect("review test");
    assert!(out.status.success(), "cp: {out:?}");
    let path = mnt.join("s.tags");
    let fill = fill_up(&mnt);
    let s = Store::open(&path).expect("review test");
    std::fs::remove_file(&fill).expect("review test");
    s.set_bulk_limits(8, 1);
    let new: Vec<Tag> = (0..300)
        .map(|i| Tag::new(format!("new{i}"), "isa", format!("fresh{}", i % 40)))
        .collect();
    let (out, r) = s.insert_batch(&new);
    r.expect("review test");
    assert_eq!(out.changed, 300);
    let mut want: BTreeSet<Tag> = old.iter().cloned().collect();
    want.extend(new.iter().cloned());
    let got = review_export(&s);
    let missing = want.difference(&got).count();
    let torn = new.iter().filter(|t| !whole_quiet(&s, t)).count();
    eprintln!("full tmpfs: {missing} tags missing from the export, {torn} new tags torn");
    assert_eq!(
        missing, 0,
        "tags written by the bulk write-back read back as zeros"
    );
    assert_check_ok(&s, "after a bulk batch on a once-full tmpfs");
    drop(s);
    drop(fs);
}

fn whole_quiet(s: &Store, t: &Tag) -> bool {
    let (c, o, sub) = common::crash::halves(s, t);
    c && o && sub
}

/// Puts the read-only redo's bound back when dropped (even on a panic).
struct RedoBound;

impl Drop for RedoBound {
    fn drop(&mut self) {
        tagstore::testing::set_memory_redo_max(262_144);
    }
}

/// A read-only open finishes a bulk round a crash cut short in memory, up
/// to a bound on the blocks it copies (1 GiB): past it, it refuses the
/// store with `BulkPending` (a writable open finishes it) and writes
/// nothing, rather than risk the machine's memory (a round's redo may put
/// the other half of millions of tags into as many blocks). Here the bound
/// is 0 blocks: every crash whose redo has halves to write is refused, and
/// opens with the usual bound.
#[test]
fn a_read_only_redo_past_its_memory_bound_is_refused() {
    let _one = serial();
    let _bound = RedoBound;
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().join("base.tags");
    let s = Store::create(&base, &tiny(13)).expect("create");
    s.close().expect("close");
    let batch: Vec<Tag> = (0..600u32)
        .map(|i| Tag::new(format!("new{i}"), "in", format!("s{}", i % 9)))
        .collect();
    let mut refused = 0;
    for k in (0..5_000u64).step_by(9) {
        let path = dir.path().join(format!("k{k}.tags"));
        if crash_copy(&base, &path, &batch, k) {
            break;
        }
        let when = format!("crash at write {k}");
        let bytes = std::fs::read(&path).expect("read store");
        tagstore::testing::set_memory_redo_max(0);
        match Store::open_read_only(&path) {
            Ok(_) => {}
            Err(Error::BulkPending(_)) => refused += 1,
            Err(e) => panic!("{when}: read-only open with no room: {e}"),
        }
        assert!(
            std::fs::read(&path).expect("read store") == bytes,
            "{when}: wrote"
        );
        tagstore::testing::set_memory_redo_max(262_144);
        recovered(&path, &when, reopen(&when));
    }
    assert!(
        refused > 2,
        "too few crashes with halves to write: {refused}"
    );
}
