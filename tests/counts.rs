//! Tag-usage counters and the tag cloud (`src/counts.rs`, seed 004).
//!
//! Covers:
//!
//! * **Model, several writers and one collector** (property tests). Three
//!   writer stores each own a partition of the objects (by object name) and a
//!   file of their own; a fourth store, the collector, holds no tags. Random
//!   INSERT/DELETE calls (single and batched, the batches through the bulk
//!   path) run on the writers, which now
//!   and then `take_increment()`; the increments travel as bytes
//!   (`to_bytes`/`from_bytes`) and reach the collector delayed, interleaved,
//!   duplicated, and again after they were merged; the collector merges at
//!   random thresholds (`set_merge_threshold`) or on demand
//!   (`merge_increments`) and is reopened cleanly between merges. After every
//!   step the collector's `count()`, `cloud()`, `counts_version()` and every
//!   `submit_increment` answer (fresh or discarded) are compared with a model
//!   of what was merged; at the end, with everything delivered and merged,
//!   the collector's counts and top-K clouds must equal those derived from
//!   the union of the writers' tags, the same after a clean reopen (where
//!   every increment is discarded as already merged), and each writer's own
//!   `count()`/`cloud()` must equal its own tags. Three variants:
//!   - `collector_matches_writers_in_order`: each writer's increments reach
//!     the collector in the order they were taken (other writers' in
//!     between).
//!   - `collector_matches_writers_out_of_order`: any order (half the cases
//!     deliver the final backlog newest first), and collector crashes
//!     (`abandon`) that lose queued increments, later resent.
//!   - `writers_own_counts_while_shipping`: in-order delivery, but writers
//!     also read their own `count()`/`cloud()` between their shipments.
//!
//!   The last two failed on d62a97a and pass since dc982ac.
//! * **Crash atomicity**: every cut of the collector's counts file inside its
//!   last merge records reopens as exactly the counts of a whole number of
//!   merges, with the exactly-once state of that version (a torn merge's
//!   increments are accepted again, earlier ones are still discarded); a
//!   damaged middle record drops it and everything after it.
//! * **Merging without loading**: a handle that never loaded the counts
//!   appends its own merge blind; when the file needs the full load (a torn
//!   tail on a collector's counts) the changes still reach it.
//! * **Rebuild**: a deleted, emptied, foreign, garbled or junk-extended counts
//!   file, an unclean shutdown that lost pending changes, and changes made
//!   with `set_counting(false)` all give counts equal to the tags after
//!   reopen, and `check()` agrees; `check()` reports an own-only counts file
//!   that disagrees with the tags while summing to the tag count (built via
//!   the public API and as a hand-written file); foreign counts are neither
//!   rebuilt nor checked; counts survive `maintain`.
//! * **Regressions** (short deterministic tests, each failed on d62a97a and
//!   passes since dc982ac): out-of-order merges, own counts versus shipped
//!   increments (both directions, and the auto-merge past 10,000 keys), an
//!   increment sent back to its own store, counting switched off within a
//!   session, a damaged net-zero merge record.
//! * **Open defects** (fail on dc982ac, see each comment):
//!   `increment_sent_back_after_a_rebuild_changes_nothing`,
//!   `increment_sent_back_after_a_crash_changes_nothing` (a rebuild forgets
//!   the merged ids) and `counts_file_of_the_first_format_is_not_misread`
//!   (snapshot counts changed from u64 to i64 under the same magic).
//! * **CLI**: `count` and `cloud` (text and `--json`) on
//!   fixtures/debian-packages.tsv, against counts taken from the file itself,
//!   before and after a `delete`.
//!
//! Every library test holds [`lib_guard`] and the CLI test holds
//! [`cli_guard`]: a child process forked while another test thread has a
//! store open inherits that store's file (and its lock) until it execs, so a
//! concurrent reopen could fail with `Locked`.
//!
//! The property tests run `TAGSTORE_PROPTEST_CASES` cases (default 96).

mod common;

use common::cli::{fixture, ok, run, stdout};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRunner};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use tagstore::{counts_path, AUTO_MERGE_KEYS};
use tagstore::{CloudEntry, CreateOptions, Increment, IncrementId, Store, Tag};

// ---------------------------------------------------------------- helpers

static FORK_GUARD: RwLock<()> = RwLock::new(());

/// Held by every test that opens stores in this process.
fn lib_guard() -> RwLockReadGuard<'static, ()> {
    FORK_GUARD.read().unwrap_or_else(|p| p.into_inner())
}

/// Held by the test that spawns the CLI: no store is open in this process meanwhile.
fn cli_guard() -> RwLockWriteGuard<'static, ()> {
    FORK_GUARD.write().unwrap_or_else(|p| p.into_inner())
}

/// For a library test: holds [`lib_guard`] and makes a temp dir.
fn lib_test() -> (RwLockReadGuard<'static, ()>, tempfile::TempDir) {
    (lib_guard(), tempfile::tempdir().expect("tempdir"))
}

/// (relationship, subject)
type Key = (String, String);

/// The [`Key`] of relationship `r` and subject `s`.
fn key(r: &str, s: &str) -> Key {
    (r.to_owned(), s.to_owned())
}

/// Options for a small store (256 expected tags).
fn small() -> CreateOptions {
    CreateOptions {
        expected_tags: 256,
        ..CreateOptions::default()
    }
}

/// A tag from its object, relationship and subject.
fn tag(o: &str, r: &str, s: &str) -> Tag {
    Tag::new(o, r, s)
}

/// How many objects carry each (relationship, subject).
fn tag_counts<'a>(tags: impl IntoIterator<Item = &'a Tag>) -> BTreeMap<Key, u64> {
    let mut m = BTreeMap::new();
    for t in tags {
        *m.entry(key(&t.relationship, &t.subject)).or_default() += 1;
    }
    m
}

/// The model cloud: positive counts of `rel`, count descending, subject ascending, first `k`.
fn model_cloud(counts: &BTreeMap<Key, u64>, rel: &str, k: usize) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = counts
        .iter()
        .filter(|((r, _), n)| r == rel && **n > 0)
        .map(|((_, s), n)| (s.clone(), *n))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

/// The cloud must list `want` exactly, with log-scaled weights in 1..=10.
fn assert_cloud(got: &[CloudEntry], want: &[(String, u64)], ctx: &str) {
    let g: Vec<(String, u64)> = got.iter().map(|e| (e.subject.clone(), e.count)).collect();
    assert_eq!(g, want, "{ctx}: cloud subjects and counts");
    let (Some(first), Some(last)) = (want.first(), want.last()) else {
        return;
    };
    let (max, min) = (first.1 as f64, last.1 as f64);
    for e in got {
        let w = if max > min {
            1.0 + 9.0 * ((e.count as f64).ln() - min.ln()) / (max.ln() - min.ln())
        } else {
            10.0
        };
        assert!(
            (e.weight - w).abs() < 1e-9 && (1.0..=10.0).contains(&e.weight),
            "{ctx}: weight of {:?} (count {}) is {}, expected {w}",
            e.subject,
            e.count,
            e.weight
        );
    }
    assert!(
        got.windows(2).all(|p| p[0].weight >= p[1].weight),
        "{ctx}: weights must not increase down the cloud: {got:?}"
    );
}

/// Every count of `want`, the full cloud of every relationship in `rels` or
/// `want` (so no extra subject may appear), and a subject that has no tags.
fn assert_store_counts(store: &Store, want: &BTreeMap<Key, u64>, rels: &[&str], ctx: &str) {
    for ((r, s), n) in want {
        assert_eq!(
            store.count(s, r).expect("count"),
            *n,
            "{ctx}: count({s:?}, {r:?})"
        );
    }
    let mut all: BTreeSet<&str> = rels.iter().copied().collect();
    all.extend(want.keys().map(|(r, _)| r.as_str()));
    for r in all {
        assert_eq!(
            store.count("no-such-subject", r).expect("count"),
            0,
            "{ctx}: count of a subject without tags under {r:?}"
        );
        let got = store.cloud(r, usize::MAX).expect("cloud");
        assert_cloud(
            &got,
            &model_cloud(want, r, usize::MAX),
            &format!("{ctx}: {r}"),
        );
    }
}

/// [`assert_store_counts`] of the counts of `tags`, with "isa" and "owns".
fn assert_counts_of(store: &Store, tags: &BTreeSet<Tag>, ctx: &str) {
    assert_store_counts(store, &tag_counts(tags), &["isa", "owns"], ctx);
}

/// Asserts that `check()` finds no fault; `ctx` says when.
fn assert_check_ok(store: &Store, ctx: &str) {
    let r = store.check().expect("check");
    assert!(r.ok(), "{ctx}: check found faults: {:?}", r.faults);
}

/// Creates a store holding `tags`, closed cleanly (its counts file written at close).
fn make_store(dir: &Path, name: &str, tags: &[Tag]) -> PathBuf {
    let path = dir.join(name);
    let s = Store::create(&path, &small()).expect("create");
    let (out, r) = s.insert_batch(tags);
    r.expect("insert_batch");
    assert_eq!(out.changed, tags.len() as u64, "test tags must be distinct");
    s.close().expect("close");
    assert!(counts_path(&path).exists(), "close writes the counts file");
    path
}

/// A store made by [`make_store`], opened again read-write.
fn open_made(dir: &Path, name: &str, tags: &[Tag]) -> (PathBuf, Store) {
    let path = make_store(dir, name, tags);
    let s = Store::open(&path).expect("open");
    (path, s)
}

/// For a writer test: [`lib_test`], and a store holding `a isa sunset`
/// reopened with its counts loaded (count 1).
fn sunset_writer() -> (
    RwLockReadGuard<'static, ()>,
    tempfile::TempDir,
    PathBuf,
    Store,
) {
    let (g, dir) = lib_test();
    let (path, w) = open_made(dir.path(), "w.tags", &[tag("a", "isa", "sunset")]);
    assert_eq!(w.count("sunset", "isa").expect("count"), 1);
    (g, dir, path, w)
}

/// Inserts `t` into `s` and takes the increment, which must hold just its +1.
fn insert_and_ship(s: &Store, t: &Tag) -> Increment {
    assert!(s.insert(t).expect("insert"));
    let inc = s
        .take_increment()
        .expect("take_increment")
        .expect("one change");
    let one = (t.relationship.clone(), t.subject.clone(), 1);
    assert_eq!(inc.deltas, vec![one]);
    inc
}

/// A hand-made increment of `writer` numbered `seq` carrying `deltas`.
fn foreign_increment(writer: u64, seq: u64, deltas: &[(&str, &str, i64)]) -> Increment {
    Increment {
        id: IncrementId { writer, seq },
        deltas: deltas
            .iter()
            .map(|(r, s, d)| (r.to_string(), s.to_string(), *d))
            .collect(),
    }
}

/// The number of property-test cases: `TAGSTORE_PROPTEST_CASES`, else 96.
fn cases() -> u32 {
    std::env::var("TAGSTORE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

// ------------------------------------------------------------------ model

const RELS: [&str; 2] = ["isa", "owns"];
const SUBJECTS: [&str; 5] = ["sunset", "beach", "", "é\tü", "z"];
const WRITERS: usize = 3;
const OBJECTS_PER_WRITER: usize = 3;

/// (object slot within the writer's partition, relationship, subject)
type TagIx = (usize, usize, usize);

/// The tag of writer `w` that a [`TagIx`] stands for.
fn writer_tag(w: usize, (o, r, s): TagIx) -> Tag {
    Tag::new(format!("writer{w}/object{o}"), RELS[r], SUBJECTS[s])
}

#[derive(Clone, Copy, Debug)]
struct Mode {
    /// Deliver any in-flight increment, not only a writer's oldest.
    reorder: bool,
    /// Also abandon the collector (queued increments are lost, later resent).
    collector_crashes: bool,
    /// Writers read their own counts between shipments.
    writer_queries: bool,
}

#[derive(Clone, Debug)]
enum Op {
    Insert(usize, TagIx),
    Delete(usize, TagIx),
    /// Deletes one of the writer's present tags (if any).
    DeletePresent(usize, Index),
    Batch(usize, bool, Vec<TagIx>),
    /// The writer takes its increment and puts it on the network.
    Take(usize),
    /// One in-flight increment reaches the collector.
    Deliver(Index),
    /// An increment already delivered arrives again (duplicate or late).
    Redeliver(Index),
    Threshold(usize),
    Merge,
    ReopenCollector {
        clean: bool,
    },
    /// Ships the writer's increment, then closes and reopens it.
    ReopenWriter(usize),
    /// The writer's own count()/cloud() must match its own tags.
    WriterQuery(usize),
}

/// Any [`TagIx`].
fn tag_ix() -> impl Strategy<Value = TagIx> {
    (0..OBJECTS_PER_WRITER, 0..RELS.len(), 0..SUBJECTS.len())
}

/// Any [`Op`] that `mode` allows, weighted.
fn op(mode: Mode) -> BoxedStrategy<Op> {
    let w = || 0..WRITERS;
    let mut v: Vec<(u32, BoxedStrategy<Op>)> = vec![
        (
            8,
            (w(), tag_ix()).prop_map(|(w, t)| Op::Insert(w, t)).boxed(),
        ),
        (
            4,
            (w(), tag_ix()).prop_map(|(w, t)| Op::Delete(w, t)).boxed(),
        ),
        (
            4,
            (w(), any::<Index>())
                .prop_map(|(w, i)| Op::DeletePresent(w, i))
                .boxed(),
        ),
        (
            2,
            (w(), any::<bool>(), prop::collection::vec(tag_ix(), 0..6))
                .prop_map(|(w, i, t)| Op::Batch(w, i, t))
                .boxed(),
        ),
        (4, w().prop_map(Op::Take).boxed()),
        (4, any::<Index>().prop_map(Op::Deliver).boxed()),
        (2, any::<Index>().prop_map(Op::Redeliver).boxed()),
        (1, (1usize..5).prop_map(Op::Threshold).boxed()),
        (1, Just(Op::Merge).boxed()),
        (1, Just(Op::ReopenCollector { clean: true }).boxed()),
        (1, w().prop_map(Op::ReopenWriter).boxed()),
    ];
    if mode.collector_crashes {
        v.push((1, Just(Op::ReopenCollector { clean: false }).boxed()));
    }
    if mode.writer_queries {
        v.push((2, w().prop_map(Op::WriterQuery).boxed()));
    }
    proptest::strategy::Union::new_weighted(v).boxed()
}

#[derive(Clone, Debug)]
struct Case {
    ops: Vec<Op>,
    /// Picks for the final delivery of whatever is still in flight.
    final_picks: Vec<Index>,
    /// With reordering: deliver what is still in flight at the end newest first.
    newest_first: bool,
}

/// Any [`Case`] for `mode`.
fn case(mode: Mode) -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(op(mode), 1..70),
        prop::collection::vec(any::<Index>(), 1..6),
        any::<bool>(),
    )
        .prop_map(move |(ops, final_picks, newest_first)| Case {
            ops,
            final_picks,
            newest_first: newest_first && mode.reorder,
        })
}

/// Coverage of the interesting events, summed over all cases of a test.
#[derive(Default)]
struct Coverage {
    shipped: AtomicUsize,
    merges: AtomicUsize,
    late_duplicates: AtomicUsize,
    discarded_after_reopen: AtomicUsize,
    out_of_order: AtomicUsize,
    lost_in_crash: AtomicUsize,
}

struct Writer {
    path: PathBuf,
    store: Option<Store>,
    tags: BTreeSet<Tag>,
    /// Changes since the last take_increment.
    since_take: BTreeMap<Key, i64>,
    /// Writer id of the open handle (known after its first increment).
    handle_writer: Option<u64>,
    next_seq: u64,
    /// Increments taken, in order (for "out of order" coverage).
    taken: Vec<IncrementId>,
}

impl Writer {
    fn s(&self) -> &Store {
        self.store.as_ref().expect("writer is open")
    }

    fn note(&mut self, t: &Tag, d: i64) {
        *self
            .since_take
            .entry(key(&t.relationship, &t.subject))
            .or_default() += d;
    }
}

struct Sim<'c> {
    mode: Mode,
    cov: &'c Coverage,
    _dir: tempfile::TempDir,
    writers: Vec<Writer>,
    collector_path: PathBuf,
    collector: Option<Store>,
    threshold: usize,
    queued: Vec<Increment>,
    merged: HashSet<IncrementId>,
    /// Merged before the collector's last reopen.
    merged_before_reopen: HashSet<IncrementId>,
    /// Sum of the merged deltas (no clamping).
    merged_sum: BTreeMap<Key, i64>,
    version: u64,
    /// Taken, never delivered, in take order: (writer index, increment).
    in_flight: Vec<(usize, Increment)>,
    /// Delivered at least once.
    delivered: Vec<Increment>,
    writer_ids: HashSet<u64>,
    /// Per logical writer, the position (in `taken`) of the last delivered increment.
    last_delivered: Vec<Option<usize>>,
}

impl<'c> Sim<'c> {
    fn new(mode: Mode, cov: &'c Coverage) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let writers = (0..WRITERS)
            .map(|w| {
                let path = dir.path().join(format!("writer{w}.tags"));
                let store = Store::create(&path, &small()).expect("create writer");
                // Batches of two or more take the bulk path (mapped mode),
                // so its counting is held to the model too.
                store.set_bulk_limits(2, 4);
                Writer {
                    path,
                    store: Some(store),
                    tags: BTreeSet::new(),
                    since_take: BTreeMap::new(),
                    handle_writer: None,
                    next_seq: 0,
                    taken: Vec::new(),
                }
            })
            .collect();
        let collector_path = dir.path().join("collector.tags");
        let collector = Store::create(&collector_path, &small()).expect("create collector");
        Sim {
            mode,
            cov,
            _dir: dir,
            writers,
            collector_path,
            collector: Some(collector),
            threshold: 1,
            queued: Vec::new(),
            merged: HashSet::new(),
            merged_before_reopen: HashSet::new(),
            merged_sum: BTreeMap::new(),
            version: 0,
            in_flight: Vec::new(),
            delivered: Vec::new(),
            writer_ids: HashSet::new(),
            last_delivered: vec![None; WRITERS],
        }
    }

    fn c(&self) -> &Store {
        self.collector.as_ref().expect("collector is open")
    }

    fn insert(&mut self, w: usize, ix: TagIx) {
        let t = writer_tag(w, ix);
        let wr = &mut self.writers[w];
        let got = wr.s().insert(&t).expect("insert");
        assert_eq!(got, !wr.tags.contains(&t), "insert {t:?} answer");
        if got {
            wr.tags.insert(t.clone());
            wr.note(&t, 1);
        }
    }

    fn delete(&mut self, w: usize, ix: TagIx) {
        let t = writer_tag(w, ix);
        let wr = &mut self.writers[w];
        let got = wr.s().delete(&t).expect("delete");
        assert_eq!(got, wr.tags.contains(&t), "delete {t:?} answer");
        if got {
            wr.tags.remove(&t);
            wr.note(&t, -1);
        }
    }

    fn delete_present(&mut self, w: usize, pick: Index) {
        let wr = &mut self.writers[w];
        if wr.tags.is_empty() {
            return;
        }
        let t = wr
            .tags
            .iter()
            .nth(pick.index(wr.tags.len()))
            .cloned()
            .expect("present");
        assert!(wr.s().delete(&t).expect("delete"), "delete present {t:?}");
        wr.tags.remove(&t);
        wr.note(&t, -1);
    }

    fn batch(&mut self, w: usize, insert: bool, ixs: &[TagIx]) {
        let tags: Vec<Tag> = ixs.iter().map(|&i| writer_tag(w, i)).collect();
        let wr = &mut self.writers[w];
        let (out, r) = if insert {
            wr.s().insert_batch(&tags)
        } else {
            wr.s().delete_batch(&tags)
        };
        r.expect("batch");
        let mut changed = 0;
        for t in &tags {
            let c = if insert {
                wr.tags.insert(t.clone())
            } else {
                wr.tags.remove(t)
            };
            if c {
                changed += 1;
                wr.note(t, if insert { 1 } else { -1 });
            }
        }
        assert_eq!(
            (out.changed, out.unchanged),
            (changed, tags.len() as u64 - changed),
            "batch outcome"
        );
    }

    fn take(&mut self, w: usize) {
        let wr = &mut self.writers[w];
        let got = wr.s().take_increment().expect("take_increment");
        let want: Vec<(String, String, i64)> = std::mem::take(&mut wr.since_take)
            .into_iter()
            .filter(|(_, d)| *d != 0)
            .map(|((r, s), d)| (r, s, d))
            .collect();
        let Some(inc) = got else {
            assert!(
                want.is_empty(),
                "writer {w}: take_increment gave None, but its changes since the last one are {want:?}"
            );
            return;
        };
        assert_eq!(
            inc.deltas, want,
            "writer {w}: take_increment deltas (changes since the last one)"
        );
        match wr.handle_writer {
            None => {
                assert!(
                    self.writer_ids.insert(inc.id.writer),
                    "writer id {} reused by a new handle",
                    inc.id.writer
                );
                wr.handle_writer = Some(inc.id.writer);
            }
            Some(id) => assert_eq!(inc.id.writer, id, "writer id changed within a handle"),
        }
        // Own merges use sequence numbers too: increasing, not contiguous.
        assert!(
            inc.id.seq >= wr.next_seq,
            "writer {w}: increment seq {} after {}",
            inc.id.seq,
            wr.next_seq
        );
        wr.next_seq = inc.id.seq + 1;
        wr.taken.push(inc.id);
        self.cov.shipped.fetch_add(1, Ordering::Relaxed);
        self.in_flight.push((w, inc));
    }

    fn deliver(&mut self, pick: Index) {
        if self.in_flight.is_empty() {
            return;
        }
        let i = if self.mode.reorder {
            pick.index(self.in_flight.len())
        } else {
            let mut ws: Vec<usize> = self.in_flight.iter().map(|x| x.0).collect();
            ws.dedup();
            let ws: Vec<usize> = ws
                .into_iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let w = ws[pick.index(ws.len())];
            self.in_flight
                .iter()
                .position(|x| x.0 == w)
                .expect("writer has one in flight")
        };
        self.deliver_at(i);
    }

    fn deliver_at(&mut self, i: usize) {
        let (w, inc) = self.in_flight.remove(i);
        let pos = self.writers[w]
            .taken
            .iter()
            .position(|id| *id == inc.id)
            .expect("taken");
        if self.last_delivered[w].is_some_and(|p| p > pos) {
            self.cov.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        self.last_delivered[w] = Some(self.last_delivered[w].map_or(pos, |p| p.max(pos)));
        self.submit(&inc);
        self.delivered.push(inc);
    }

    fn redeliver(&mut self, pick: Index) {
        if self.delivered.is_empty() {
            return;
        }
        let inc = self.delivered[pick.index(self.delivered.len())].clone();
        self.submit(&inc);
    }

    /// Ships `inc` as bytes and submits it; checks the answer against the model.
    fn submit(&mut self, inc: &Increment) {
        let wire = inc.to_bytes().expect("to_bytes");
        let arrived = Increment::from_bytes(&wire).expect("from_bytes");
        assert_eq!(&arrived, inc, "increment bytes round trip");
        let fresh = !self.merged.contains(&inc.id) && !self.queued.iter().any(|q| q.id == inc.id);
        if self.merged.contains(&inc.id) {
            self.cov.late_duplicates.fetch_add(1, Ordering::Relaxed);
        }
        if self.merged_before_reopen.contains(&inc.id) {
            self.cov
                .discarded_after_reopen
                .fetch_add(1, Ordering::Relaxed);
        }
        let got = self
            .c()
            .submit_increment(arrived)
            .expect("submit_increment");
        assert_eq!(
            got,
            fresh,
            "submit_increment({:?}) answer (merged: {}, queued: {})",
            inc.id,
            self.merged.contains(&inc.id),
            self.queued.iter().any(|q| q.id == inc.id)
        );
        if fresh {
            self.queued.push(inc.clone());
        }
        if self.queued.len() >= self.threshold {
            self.model_merge();
        }
    }

    fn model_merge(&mut self) {
        if self.queued.is_empty() {
            return;
        }
        self.version += 1;
        self.cov.merges.fetch_add(1, Ordering::Relaxed);
        for inc in self.queued.drain(..) {
            self.merged.insert(inc.id);
            for (r, s, d) in &inc.deltas {
                *self.merged_sum.entry(key(r, s)).or_default() += d;
            }
        }
    }

    fn merge_now(&mut self) {
        let out = self.c().merge_increments().expect("merge_increments");
        let n = self.queued.len();
        self.model_merge();
        assert_eq!(
            (out.version, out.merged, out.discarded),
            (self.version, n, 0),
            "merge_increments outcome"
        );
    }

    fn reopen_collector(&mut self, clean: bool) {
        let c = self.collector.take().expect("collector is open");
        if clean {
            c.close().expect("close collector");
            // Close merges whatever is queued.
            self.model_merge();
        } else {
            c.abandon();
            self.cov
                .lost_in_crash
                .fetch_add(self.queued.len(), Ordering::Relaxed);
            self.queued.clear();
        }
        self.merged_before_reopen = self.merged.clone();
        self.collector = Some(Store::open(&self.collector_path).expect("reopen collector"));
        self.threshold = 1;
    }

    fn reopen_writer(&mut self, w: usize) {
        self.take(w);
        let wr = &mut self.writers[w];
        wr.store
            .take()
            .expect("open")
            .close()
            .expect("close writer");
        let store = Store::open(&wr.path).expect("reopen writer");
        store.set_bulk_limits(2, 4);
        wr.store = Some(store);
        wr.handle_writer = None;
        wr.next_seq = 0;
    }

    fn check_writer(&self, w: usize, ctx: &str) {
        let wr = &self.writers[w];
        assert_store_counts(
            wr.s(),
            &tag_counts(&wr.tags),
            &RELS,
            &format!("{ctx}: writer {w} own counts"),
        );
    }

    /// The collector shows exactly what was merged so far.
    fn check_collector(&self, ctx: &str) {
        let c = self.c();
        let want: BTreeMap<Key, u64> = self
            .merged_sum
            .iter()
            .map(|(k, d)| (k.clone(), (*d).max(0) as u64))
            .collect();
        for r in RELS {
            for s in SUBJECTS {
                assert_eq!(
                    c.count(s, r).expect("count"),
                    want.get(&key(r, s)).copied().unwrap_or(0),
                    "{ctx}: collector count({s:?}, {r:?}) after {} merges",
                    self.version
                );
            }
            for k in [2, usize::MAX] {
                assert_cloud(
                    &c.cloud(r, k).expect("cloud"),
                    &model_cloud(&want, r, k),
                    &format!("{ctx}: collector cloud({r}, {k})"),
                );
            }
        }
        assert_eq!(
            c.counts_version().expect("counts_version"),
            self.version,
            "{ctx}: counts version = number of merges"
        );
    }

    fn step(&mut self, i: usize, op: &Op) {
        match op {
            Op::Insert(w, t) => self.insert(*w, *t),
            Op::Delete(w, t) => self.delete(*w, *t),
            Op::DeletePresent(w, i) => self.delete_present(*w, *i),
            Op::Batch(w, ins, ts) => self.batch(*w, *ins, ts),
            Op::Take(w) => self.take(*w),
            Op::Deliver(p) => self.deliver(*p),
            Op::Redeliver(p) => self.redeliver(*p),
            Op::Threshold(n) => {
                self.c().set_merge_threshold(*n).expect("threshold");
                self.threshold = *n;
            }
            Op::Merge => self.merge_now(),
            Op::ReopenCollector { clean } => self.reopen_collector(*clean),
            Op::ReopenWriter(w) => self.reopen_writer(*w),
            Op::WriterQuery(w) => self.check_writer(*w, &format!("step {i} {op:?}")),
        }
        if matches!(
            op,
            Op::Deliver(_)
                | Op::Redeliver(_)
                | Op::Merge
                | Op::Threshold(_)
                | Op::ReopenCollector { .. }
        ) {
            self.check_collector(&format!("step {i} {op:?}"));
        }
    }

    fn finish(mut self, final_picks: &[Index], newest_first: bool) {
        for w in 0..WRITERS {
            self.take(w);
        }
        let mut i = 0;
        while !self.in_flight.is_empty() {
            if newest_first {
                self.deliver_at(self.in_flight.len() - 1);
            } else {
                self.deliver(final_picks[i % final_picks.len()]);
            }
            i += 1;
        }
        // Every increment once more: late duplicates (and, after a collector
        // crash, the resending of what it lost).
        for inc in self.delivered.clone() {
            self.submit(&inc);
        }
        self.merge_now();
        let union = tag_counts(self.writers.iter().flat_map(|w| w.tags.iter()));
        let merged: BTreeMap<Key, u64> = self
            .merged_sum
            .iter()
            .filter(|(_, d)| **d != 0)
            .map(|(k, d)| (k.clone(), u64::try_from(*d).expect("model sum >= 0")))
            .collect();
        assert_eq!(
            merged, union,
            "model self-check: merged deltas = union of tags"
        );
        self.check_collector("end");
        assert_store_counts(
            self.c(),
            &union,
            &RELS,
            "end: collector vs union of writers",
        );
        for r in RELS {
            for k in [1, 2, 3] {
                assert_cloud(
                    &self.c().cloud(r, k).expect("cloud"),
                    &model_cloud(&union, r, k),
                    &format!("end: collector cloud({r}, {k})"),
                );
            }
        }
        assert_check_ok(self.c(), "end: collector");
        // Counts and exactly-once state survive a clean reopen.
        self.reopen_collector(true);
        assert_store_counts(self.c(), &union, &RELS, "after reopen: collector");
        for inc in self.delivered.clone() {
            assert!(
                !self.c().submit_increment(inc.clone()).expect("submit"),
                "after reopen: {:?} was merged before and must be discarded",
                inc.id
            );
        }
        assert_eq!(
            self.c().counts_version().expect("version"),
            self.version,
            "after reopen: discarded increments make no version"
        );
        assert_store_counts(self.c(), &union, &RELS, "after resending: collector");
        for w in 0..WRITERS {
            self.check_writer(w, "end");
            assert_check_ok(self.writers[w].s(), &format!("end: writer {w}"));
            self.reopen_writer(w);
            self.check_writer(w, "end, after reopen");
        }
    }
}

/// Runs the model property test in `mode`.
fn run_model(mode: Mode) {
    let _g = lib_guard();
    let cov = Coverage::default();
    let get = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    // Rare events (a collector crash that loses a queued increment: about 5
    // in 96 cases) can miss a round; a round of fresh random cases runs
    // again, at most twice more, until every event was seen. (Regression:
    // one round of 96 cases lost none, once in a few hundred runs, and the
    // coverage check failed CI.)
    for _round in 0..3 {
        let mut runner = TestRunner::new(Config {
            cases: cases(),
            max_shrink_iters: 400,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&case(mode), |c| {
            let mut sim = Sim::new(mode, &cov);
            for (i, op) in c.ops.iter().enumerate() {
                sim.step(i, op);
            }
            sim.finish(&c.final_picks, c.newest_first);
            Ok(())
        });
        if let Err(e) = result {
            panic!("{mode:?}: {e}");
        }
        let rare_seen = get(&cov.late_duplicates) > 0
            && get(&cov.discarded_after_reopen) > 0
            && (!mode.reorder || get(&cov.out_of_order) > 0)
            && (!mode.collector_crashes || get(&cov.lost_in_crash) > 0);
        if rare_seen {
            break;
        }
    }
    eprintln!(
        "{mode:?}, {} cases: {} increments shipped, {} merges, {} late duplicates, \
         {} discarded after a reopen, {} delivered out of order, {} lost in collector crashes",
        cases(),
        get(&cov.shipped),
        get(&cov.merges),
        get(&cov.late_duplicates),
        get(&cov.discarded_after_reopen),
        get(&cov.out_of_order),
        get(&cov.lost_in_crash),
    );
    if cases() >= 32 {
        assert!(get(&cov.late_duplicates) > 0, "no late duplicate delivered");
        assert!(
            get(&cov.discarded_after_reopen) > 0,
            "no increment merged before a reopen was resent after it"
        );
        assert!(get(&cov.merges) > cases() as usize, "too few merges");
        if mode.reorder {
            assert!(get(&cov.out_of_order) > 0, "nothing delivered out of order");
        } else {
            assert_eq!(get(&cov.out_of_order), 0, "in-order mode reordered");
        }
        if mode.collector_crashes {
            assert!(
                get(&cov.lost_in_crash) > 0,
                "no crash lost a queued increment"
            );
        }
    }
}

/// Each writer's increments arrive in the order taken (interleaved with the
/// other writers', duplicated, resent after merges and reopens).
#[test]
fn collector_matches_writers_in_order() {
    run_model(Mode {
        reorder: false,
        collector_crashes: false,
        writer_queries: false,
    });
}

/// Increments arrive in any order; the collector also crashes, losing its
/// queue, and the lost increments are resent later. The seed's collectors
/// receive increments delayed and out of order; merged counts must not
/// depend on the order. (Failed on d62a97a, which clamped counts at zero:
/// see `out_of_order_increments_of_one_writer_give_the_same_counts`.)
#[test]
fn collector_matches_writers_out_of_order() {
    run_model(Mode {
        reorder: true,
        collector_crashes: true,
        writer_queries: false,
    });
}

/// In-order delivery, but writers also read their own counts between
/// shipments ("a single store's counts are exact for every caller"), and
/// the collector must still receive every change. (Failed on d62a97a, where
/// own counts and shipping shared one pending map: see
/// `own_counts_include_changes_shipped_with_take_increment` and
/// `take_increment_after_count_still_holds_the_changes`.)
#[test]
fn writers_own_counts_while_shipping() {
    run_model(Mode {
        reorder: false,
        collector_crashes: false,
        writer_queries: true,
    });
}

// ----------------------------------------------------- crash atomicity

/// Cuts the collector's counts file at every byte of its last two merge
/// records: each cut reopens as the counts of a whole number of merges,
/// with that version's exactly-once state.
#[test]
fn torn_merge_record_leaves_previous_version() {
    let (_g, dir) = lib_test();
    let wp = dir.path().join("writer.tags");
    let cp = dir.path().join("collector.tags");
    let w = Store::create(&wp, &small()).expect("create");
    let c = Store::create(&cp, &small()).expect("create");
    // Version 0: the collector's first (empty) snapshot.
    assert_eq!(c.counts_version().expect("version"), 0);
    let mut lens = vec![fs::metadata(counts_path(&cp)).expect("counts file").len()];
    let mut versions = vec![BTreeMap::new()];
    let mut incs = Vec::new();
    let mut tags = BTreeSet::new();
    let rounds: [&[(&str, &str, &str, bool)]; 4] = [
        &[("p1", "isa", "sunset", true), ("p2", "isa", "sunset", true)],
        &[("p3", "isa", "beach", true), ("p1", "owns", "cat", true)],
        &[("p2", "isa", "sunset", false), ("p4", "isa", "beach", true)],
        &[("p1", "isa", "sunset", false), ("p5", "isa", "dawn", true)],
    ];
    for (i, round) in rounds.iter().enumerate() {
        for &(o, r, s, ins) in *round {
            let t = tag(o, r, s);
            if ins {
                assert!(w.insert(&t).expect("insert"));
                tags.insert(t);
            } else {
                assert!(w.delete(&t).expect("delete"));
                tags.remove(&t);
            }
        }
        let inc = w
            .take_increment()
            .expect("take_increment")
            .expect("changes");
        assert!(c.submit_increment(inc.clone()).expect("submit"));
        assert_eq!(c.counts_version().expect("version"), i as u64 + 1);
        incs.push(inc);
        versions.push(tag_counts(&tags));
        lens.push(fs::metadata(counts_path(&cp)).expect("counts").len());
    }
    assert_store_counts(&c, &versions[4], &["isa"], "before the cut");
    c.close().expect("close");
    w.close().expect("close");
    let full = fs::read(counts_path(&cp)).expect("read counts");
    assert_eq!(full.len() as u64, lens[4]);
    let start = lens[2] as usize;
    let mut seen = BTreeSet::new();
    for cut in start..=full.len() {
        fs::write(counts_path(&cp), &full[..cut]).expect("write cut");
        let c = Store::open(&cp).expect("open");
        let v = lens
            .iter()
            .rposition(|&l| l as usize <= cut)
            .expect("version");
        seen.insert(v);
        let ctx = format!("cut at byte {cut} of {}", full.len());
        assert_eq!(c.counts_version().expect("version"), v as u64, "{ctx}");
        assert_store_counts(&c, &versions[v], &["isa", "owns"], &ctx);
        c.close().expect("close");
        assert_eq!(
            fs::metadata(counts_path(&cp)).expect("counts").len(),
            lens[v],
            "{ctx}: the torn tail is cut off"
        );
    }
    assert_eq!(seen, BTreeSet::from([2, 3, 4]));

    // The brief's case: a few bytes torn off the last merge.
    fs::write(counts_path(&cp), &full[..full.len() - 3]).expect("write cut");
    let c = Store::open(&cp).expect("open");
    assert_eq!(c.counts_version().expect("version"), 3);
    assert_store_counts(&c, &versions[3], &["isa", "owns"], "torn by 3 bytes");
    assert!(
        !c.submit_increment(incs[2].clone()).expect("submit"),
        "merged in version 3: still discarded"
    );
    assert!(
        c.submit_increment(incs[3].clone()).expect("submit"),
        "the torn merge never happened: its increment is accepted again"
    );
    assert_eq!(c.counts_version().expect("version"), 4);
    assert_store_counts(&c, &versions[4], &["isa", "owns"], "merged again");
    assert_check_ok(&c, "after the torn merge was redone");
    c.close().expect("close");

    // A damaged middle record: it and everything after it are dropped.
    let mut bad = full.clone();
    bad[lens[2] as usize + 9] ^= 0x40;
    fs::write(counts_path(&cp), &bad).expect("write damaged");
    let c = Store::open(&cp).expect("open");
    assert_eq!(c.counts_version().expect("version"), 2);
    assert_store_counts(&c, &versions[2], &["isa", "owns"], "damaged third merge");
    c.close().expect("close");
}

// ---------------------------------------------------------------- rebuild

/// The tags most rebuild tests start from (three "sunset", an awkward subject).
fn base_tags() -> Vec<Tag> {
    vec![
        tag("a", "isa", "sunset"),
        tag("b", "isa", "sunset"),
        tag("c", "isa", "sunset"),
        tag("a", "isa", "beach"),
        tag("b", "owns", "cat"),
        tag("d", "isa", "é\t\n"),
    ]
}

/// Holds [`lib_guard`] and runs `body(loaded_first, path, tags, store)` for
/// `loaded_first` false and true, each on a new store `s0.tags`/`s1.tags`
/// holding [`base_tags`] (its tags given), reopened; when `loaded_first`,
/// its counts were first loaded by asserting that `subject` under "isa"
/// counts `n`.
fn for_base_stores((subject, n): (&str, u64), body: impl Fn(bool, PathBuf, BTreeSet<Tag>, Store)) {
    let (_g, dir) = lib_test();
    for (i, loaded_first) in [false, true].into_iter().enumerate() {
        let (path, s) = open_made(dir.path(), &format!("s{i}.tags"), &base_tags());
        if loaded_first {
            assert_eq!(s.count(subject, "isa").expect("count"), n);
        }
        body(loaded_first, path, base_tags().into_iter().collect(), s);
    }
}

/// A store whose counts file holds a snapshot and one merge record (+2 net).
fn store_with_merge(dir: &Path, name: &str) -> (PathBuf, BTreeSet<Tag>) {
    let path = make_store(dir, name, &base_tags());
    let mut tags: BTreeSet<Tag> = base_tags().into_iter().collect();
    let s = Store::open(&path).expect("open");
    assert_eq!(s.count("sunset", "isa").expect("count"), 3);
    for t in [tag("e", "isa", "beach"), tag("f", "isa", "dawn")] {
        assert!(s.insert(&t).expect("insert"));
        tags.insert(t);
    }
    s.close().expect("close");
    (path, tags)
}

/// A damaged, missing, emptied, foreign or extended counts file of a store
/// with tags: the counts are rebuilt from the tags (and persisted again).
#[test]
fn damaged_counts_file_is_rebuilt_from_tags() {
    let (_g, dir) = lib_test();
    let other = make_store(
        dir.path(),
        "other.tags",
        &[tag("x", "isa", "sunset"), tag("y", "isa", "sunset")],
    );
    let other_counts = fs::read(counts_path(&other)).expect("other counts");
    type Damage = fn(&mut Vec<u8>, &[u8]);
    let damages: [(&str, Damage); 9] = [
        ("deleted", |_, _| {}),
        ("emptied", |b, _| b.clear()),
        ("magic", |b, _| b[0] ^= 1),
        ("seed", |b, _| b[9] ^= 1),
        ("snapshot body", |b, _| b[30] ^= 0x10),
        ("last record", |b, _| {
            let n = b.len();
            b[n - 1] ^= 0x01
        }),
        ("torn into the snapshot", |b, _| b.truncate(40)),
        ("junk appended", |b, _| {
            b.extend_from_slice(b"\x07\0\0\0junkjunkjunk")
        }),
        ("another store's file", |b, o| *b = o.to_vec()),
    ];
    for (i, (what, damage)) in damages.iter().enumerate() {
        let (path, tags) = store_with_merge(dir.path(), &format!("s{i}.tags"));
        let cp = counts_path(&path);
        let mut bytes = fs::read(&cp).expect("counts");
        if *what == "deleted" {
            fs::remove_file(&cp).expect("remove");
        } else {
            damage(&mut bytes, &other_counts);
            fs::write(&cp, &bytes).expect("write");
        }
        let want = tag_counts(&tags);
        let s = Store::open(&path).expect("open");
        assert_store_counts(&s, &want, &["isa", "owns"], what);
        assert_check_ok(&s, what);
        s.close().expect("close");
        let s = Store::open_read_only(&path).expect("open read-only");
        assert_store_counts(&s, &want, &["isa", "owns"], &format!("{what}, reopened"));
        assert_check_ok(&s, &format!("{what}, reopened"));
    }
}

/// An unclean shutdown loses the pending (unmerged) changes; after reopen
/// the counts are rebuilt from the tags, even when the lost changes net to
/// zero (so the totals alone would not tell).
#[test]
fn unclean_shutdown_that_lost_pending_changes_is_rebuilt() {
    for_base_stores(("sunset", 3), |loaded_first, path, mut tags, s| {
        if loaded_first {
            // Merged mid-session, then more changes that stay pending.
            assert!(s.insert(&tag("z", "isa", "sunset")).expect("insert"));
            tags.insert(tag("z", "isa", "sunset"));
            assert_eq!(s.count("sunset", "isa").expect("count"), 4);
        }
        // Net zero: one more "dawn", one less "beach".
        assert!(s.insert(&tag("q", "isa", "dawn")).expect("insert"));
        assert!(s.delete(&tag("a", "isa", "beach")).expect("delete"));
        tags.insert(tag("q", "isa", "dawn"));
        tags.remove(&tag("a", "isa", "beach"));
        s.abandon();
        let s = Store::open(&path).expect("reopen");
        assert!(s.recovered_on_open());
        let want = tag_counts(&tags);
        assert_check_ok(&s, "after the crash");
        assert_store_counts(&s, &want, &["isa", "owns"], "after the crash");
        s.close().expect("close");
        // Reopened without using the counts: closing must not keep stale ones.
        let s = Store::open(&path).expect("reopen");
        s.abandon();
        let s = Store::open(&path).expect("reopen");
        s.close().expect("close");
        let s = Store::open(&path).expect("reopen");
        assert_store_counts(&s, &want, &["isa", "owns"], "after crash, close, reopen");
        assert_check_ok(&s, "after crash, close, reopen");
    });
}

/// Changes made with counting off (net zero, so totals match) then a clean
/// close: the next open's counts equal the tags.
#[test]
fn counting_off_then_close_is_rebuilt_on_next_open() {
    for_base_stores(("beach", 1), |_, path, mut tags, s| {
        // Counted change, then uncounted ones, then counted again.
        assert!(s.insert(&tag("k", "isa", "beach")).expect("insert"));
        s.set_counting(false);
        assert!(s.insert(&tag("q", "isa", "dawn")).expect("insert"));
        assert!(s.delete(&tag("a", "isa", "sunset")).expect("delete"));
        s.set_counting(true);
        assert!(s.insert(&tag("r", "owns", "dog")).expect("insert"));
        for t in [
            tag("k", "isa", "beach"),
            tag("q", "isa", "dawn"),
            tag("r", "owns", "dog"),
        ] {
            tags.insert(t);
        }
        tags.remove(&tag("a", "isa", "sunset"));
        s.close().expect("close");
        let s = Store::open(&path).expect("reopen");
        let want = tag_counts(&tags);
        assert_store_counts(&s, &want, &["isa", "owns"], "after counting off");
        assert_check_ok(&s, "after counting off");
        s.close().expect("close");
        let s = Store::open_read_only(&path).expect("reopen");
        assert_store_counts(&s, &want, &["isa", "owns"], "read-only after counting off");
    });
}

/// `check()` reports own-only counts that disagree with the tags while
/// summing to the tag count (so they are served and never rebuilt). Built
/// twice: through the public API, as an increment carrying the store's own
/// writer id (taken from one of its shipped increments) with a fresh seq and
/// edited deltas, which keeps the counts "own-only"; and as an edited counts
/// file written in the documented format (DESIGN.md §8).
#[test]
fn check_reports_wrong_own_only_counts() {
    let (_g, dir) = lib_test();
    let (path, s) = open_made(dir.path(), "s.tags", &base_tags());
    assert_eq!(s.count("sunset", "isa").expect("count"), 3);
    let shipped = insert_and_ship(&s, &tag("n", "isa", "beach"));
    assert!(
        !s.submit_increment(shipped.clone()).expect("submit"),
        "a shipped increment sent back is already merged"
    );
    // Own writer id, unused seq: one "beach" moved to "sunset" (same total).
    let edited = foreign_increment(
        shipped.id.writer,
        shipped.id.seq + 1_000_000,
        &[("isa", "sunset", 1), ("isa", "beach", -1)],
    );
    assert!(s.submit_increment(edited).expect("submit"));
    assert_eq!(s.count("sunset", "isa").expect("count"), 4);
    let faults = s.check().expect("check").faults;
    assert!(
        faults.iter().any(|f| f.contains("\"sunset\""))
            && faults.iter().any(|f| f.contains("\"beach\"")),
        "check must name both wrong counts: {faults:?}"
    );
    s.close().expect("close");
    // The file sums to the tag count, so it is served again, and check says so again.
    let s = Store::open_read_only(&path).expect("reopen");
    assert_eq!(s.count("sunset", "isa").expect("count"), 4);
    assert!(
        !s.check().expect("check").ok(),
        "fault persists across reopen"
    );
    drop(s);

    // A hand-edited file: a snapshot of the right total with one count moved.
    let seed = 0x5EED;
    let path = dir.path().join("edited.tags");
    let st = Store::create(
        &path,
        &CreateOptions {
            seed: Some(seed),
            ..small()
        },
    )
    .expect("create");
    let (_, r) = st.insert_batch(&base_tags());
    r.expect("insert");
    st.close().expect("close");
    let mut counts: Vec<(String, String, i64)> = tag_counts(&base_tags())
        .into_iter()
        .map(|((r, s), n)| (r, s, n as i64))
        .collect();
    for c in &mut counts {
        match (c.0.as_str(), c.1.as_str()) {
            ("isa", "sunset") => c.2 -= 1,
            ("isa", "beach") => c.2 += 1,
            _ => {}
        }
    }
    write_counts_file(
        &path,
        seed,
        &[Record::Snapshot {
            version: 0,
            own_only: true,
            counts,
            processed: vec![],
        }],
    );
    let s = Store::open(&path).expect("open");
    let faults = s.check().expect("check").faults;
    assert!(
        faults.iter().any(|f| f.contains("\"sunset\""))
            && faults.iter().any(|f| f.contains("\"beach\"")),
        "check must name both wrong counts of the edited file: {faults:?}"
    );
    // Proof that the hand-written file was read: its (wrong) counts are served.
    assert_eq!(s.count("beach", "isa").expect("count"), 2);
}

/// A counts-file record in the documented layout (DESIGN.md §8): the same
/// serde shape as the private `Record` of src/counts.rs. Snapshot counts are
/// `i64`; `Record<u64>` is the first format (d62a97a), same magic (bincode
/// writes no type names, so the bytes are those of that format's records).
#[derive(serde::Serialize)]
enum Record<N = i64> {
    Snapshot {
        version: u64,
        own_only: bool,
        counts: Vec<(String, String, N)>,
        processed: Vec<IncrementId>,
    },
    Merge {
        version: u64,
        ids: Vec<IncrementId>,
        deltas: Vec<(String, String, i64)>,
        foreign: bool,
    },
}

/// A collector's records: a snapshot of `counts` (version 1, `ids[0]`
/// processed), then a foreign merge (version 2) of `ids[1]` with `deltas`.
fn snapshot_and_merge<N>(
    counts: Vec<(String, String, N)>,
    ids: [IncrementId; 2],
    deltas: Vec<(String, String, i64)>,
) -> [Record<N>; 2] {
    [
        Record::Snapshot {
            version: 1,
            own_only: false,
            counts,
            processed: vec![ids[0]],
        },
        Record::Merge {
            version: 2,
            ids: vec![ids[1]],
            deltas,
            foreign: true,
        },
    ]
}

/// Writes `STORE.counts`: magic, seed, then `len`, CRC32, bincode-2 body per record.
fn write_counts_file<R: serde::Serialize>(store: &Path, seed: u64, records: &[R]) {
    write_counts_file_with(b"TSCOUNT2", store, seed, records)
}

/// Writes a counts file with the given magic (`TSCOUNT1` was the first format).
fn write_counts_file_with<R: serde::Serialize>(
    magic: &[u8; 8],
    store: &Path,
    seed: u64,
    records: &[R],
) {
    let mut out = magic.to_vec();
    out.extend_from_slice(&seed.to_le_bytes());
    for r in records {
        let body = bincode::serde::encode_to_vec(r, bincode::config::standard()).expect("encode");
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&body);
    }
    fs::write(counts_path(store), out).expect("write counts file");
}

/// A collector's counts include other writers' increments: a hand-made
/// increment with another writer id makes the counts "foreign". They are
/// not rebuilt from the store's own tags (which would lose them) and
/// `check()` does not compare them with the tags, so an edited-but-consistent
/// file cannot be built this way for the own-only check (see the test above).
#[test]
fn foreign_counts_are_kept_and_not_checked() {
    let (_g, dir) = lib_test();
    let (path, s) = open_made(dir.path(), "s.tags", &base_tags());
    let inc = foreign_increment(0xF0F0, 0, &[("isa", "sunset", 5), ("isa", "beach", -1)]);
    assert!(s.submit_increment(inc.clone()).expect("submit"));
    let mut want = tag_counts(&base_tags());
    *want.get_mut(&key("isa", "sunset")).expect("sunset") += 5;
    want.remove(&key("isa", "beach"));
    assert_store_counts(&s, &want, &["isa", "owns"], "foreign merged");
    assert_check_ok(&s, "foreign counts are not compared with the tags");
    s.close().expect("close");
    let s = Store::open(&path).expect("reopen");
    assert_store_counts(&s, &want, &["isa", "owns"], "foreign kept after reopen");
    assert!(
        !s.submit_increment(inc).expect("submit"),
        "still merged once"
    );
    // A crash does not turn foreign counts into a rebuild either.
    s.abandon();
    let s = Store::open(&path).expect("reopen");
    assert!(s.recovered_on_open());
    assert_store_counts(&s, &want, &["isa", "owns"], "foreign kept after crash");
}

/// Maintenance rewrites the store; its counts stay valid (same tags, same seed).
#[test]
fn counts_survive_maintain() {
    let (_g, dir) = lib_test();
    let (path, tags) = store_with_merge(dir.path(), "s.tags");
    Store::maintain(&path, &tagstore::MaintainOptions::default(), |_, _| {}).expect("maintain");
    let s = Store::open(&path).expect("open");
    assert_store_counts(&s, &tag_counts(&tags), &["isa", "owns"], "after maintain");
    assert_check_ok(&s, "after maintain");
}

// ------------------------------------------------------- specific defects

/// Regression (failed on d62a97a; fixed by signed counts in dc982ac):
/// merges must commute. A writer inserts a tag (increment A, +1) and
/// deletes it again (increment B, -1). Merged together the counts are
/// right; merged B first and A later (delayed delivery, threshold 1),
/// d62a97a clamped 0 - 1 to 0 (`(old + d).max(0)` in `Counts::apply`), then
/// added 1: count 1 for a tag that exists nowhere.
#[test]
fn out_of_order_increments_of_one_writer_give_the_same_counts() {
    let (_g, dir) = lib_test();
    let w = Store::create(dir.path().join("w.tags"), &small()).expect("create");
    let t = tag("p", "isa", "sunset");
    assert!(w.insert(&t).expect("insert"));
    let a = w.take_increment().expect("take_increment").expect("A");
    assert!(w.delete(&t).expect("delete"));
    let b = w.take_increment().expect("take_increment").expect("B");

    let together = Store::create(dir.path().join("c1.tags"), &small()).expect("create");
    together.set_merge_threshold(2).expect("threshold");
    assert!(together.submit_increment(b.clone()).expect("submit"));
    assert!(together.submit_increment(a.clone()).expect("submit"));
    assert_eq!(
        together.count("sunset", "isa").expect("count"),
        0,
        "B+A in one merge"
    );

    let apart = Store::create(dir.path().join("c2.tags"), &small()).expect("create");
    assert!(apart.submit_increment(b).expect("submit"));
    assert!(apart.submit_increment(a).expect("submit"));
    assert_eq!(apart.counts_version().expect("version"), 2);
    assert_eq!(
        apart.count("sunset", "isa").expect("count"),
        0,
        "B merged before A: the tag exists nowhere, its count must be 0"
    );
}

/// Regression (failed on d62a97a; fixed by the outbox in dc982ac):
/// `take_increment()` handed this handle's changes to a collector and
/// they never reached the handle's own counts, although `count()` promises
/// "this handle's own changes are merged first" (DESIGN §8: "a single store's
/// counts are exact for every caller"): both consumers shared one pending map.
#[test]
fn own_counts_include_changes_shipped_with_take_increment() {
    let (_g, _dir, _path, w) = sunset_writer();
    insert_and_ship(&w, &tag("b", "isa", "sunset"));
    let own = w.count("sunset", "isa").expect("count");
    assert_eq!(
        own, 2,
        "own count after shipping the change: the tags say 2"
    );
}

/// Regression (failed on d62a97a, same cause, persistent): shipped changes
/// that net to zero left the own-only counts file wrong across reopens (its
/// total still equalled the tag count, so it was never rebuilt), and
/// `check()` reported the store.
#[test]
fn shipped_net_zero_changes_leave_own_counts_wrong_after_reopen() {
    let (_g, _dir, path, w) = sunset_writer();
    assert!(w.insert(&tag("b", "isa", "beach")).expect("insert"));
    assert!(w.delete(&tag("a", "isa", "sunset")).expect("delete"));
    assert!(w.take_increment().expect("take_increment").is_some());
    w.close().expect("close");
    let w = Store::open(&path).expect("reopen");
    let want = tag_counts(&[tag("b", "isa", "beach")]);
    assert_check_ok(&w, "after shipping net-zero changes and reopening");
    assert_store_counts(
        &w,
        &want,
        &["isa"],
        "after shipping net-zero changes and reopening",
    );
}

/// Regression (failed on d62a97a, same cause, other direction):
/// `count()`/`cloud()` merged the pending changes into the own counts and
/// emptied the pending map, so a later `take_increment()` ("this handle's
/// changes since the last call") returned None and the collector never saw
/// them; likewise when the first use rebuilt the counts from the tags.
#[test]
fn take_increment_after_count_still_holds_the_changes() {
    let (_g, dir) = lib_test();
    let w = Store::create(dir.path().join("w.tags"), &small()).expect("create");
    assert!(w.insert(&tag("a", "isa", "sunset")).expect("insert"));
    assert_eq!(w.count("sunset", "isa").expect("count"), 1);
    let inc = w.take_increment().expect("take_increment");
    assert_eq!(
        inc.map(|i| i.deltas),
        Some(vec![("isa".into(), "sunset".into(), 1)]),
        "the insert must still be shipped after a count()"
    );
}

/// Regression (failed on d62a97a, same cause, unavoidable by the caller): past
/// `AUTO_MERGE_KEYS` distinct pending keys a handle merged them into its
/// own counts, so a writer shipping every so many changes lost them for its
/// collector (here: all 10,050).
#[test]
fn auto_merge_past_10000_keys_keeps_changes_for_take_increment() {
    let (_g, dir) = lib_test();
    let n = AUTO_MERGE_KEYS + 50;
    let w = Store::create(
        dir.path().join("w.tags"),
        &CreateOptions {
            expected_tags: n as u64,
            ..CreateOptions::default()
        },
    )
    .expect("create");
    let tags: Vec<Tag> = (0..n)
        .map(|i| tag(&format!("o{i}"), "isa", &format!("s{i}")))
        .collect();
    let (out, r) = w.insert_batch(&tags);
    r.expect("insert");
    assert_eq!(out.changed, n as u64);
    let c = Store::create(dir.path().join("c.tags"), &small()).expect("create");
    if let Some(inc) = w.take_increment().expect("take_increment") {
        assert!(c.submit_increment(inc).expect("submit"));
    }
    let shipped: u64 = c
        .cloud("isa", usize::MAX)
        .expect("cloud")
        .iter()
        .map(|e| e.count)
        .sum();
    assert_eq!(
        shipped, n as u64,
        "every inserted tag must reach the collector"
    );
}

/// Regression (failed on d62a97a: counted twice when the submit was the
/// counts' first use). `take_increment` says "submitting the increment back
/// here changes nothing" (the seed's collector sends its own increment to
/// itself): whether or not the counts were loaded before the change.
#[test]
fn increment_submitted_to_its_own_store_counts_once() {
    let (_g, dir) = lib_test();
    for (i, loaded_first) in [true, false].into_iter().enumerate() {
        let w = Store::create(dir.path().join(format!("w{i}.tags")), &small()).expect("create");
        if loaded_first {
            assert_eq!(w.count("sunset", "isa").expect("count"), 0);
        }
        assert!(w.insert(&tag("a", "isa", "sunset")).expect("insert"));
        let inc = w.take_increment().expect("take_increment").expect("change");
        let v = w.counts_version().expect("version");
        assert!(
            !w.submit_increment(inc.clone()).expect("submit"),
            "loaded first: {loaded_first}: discarded as already merged"
        );
        assert_eq!(w.counts_version().expect("version"), v, "no new version");
        assert_eq!(
            w.count("sunset", "isa").expect("count"),
            1,
            "loaded first: {loaded_first}"
        );
        w.close().expect("close");
        let w = Store::open(dir.path().join(format!("w{i}.tags"))).expect("reopen");
        assert!(
            !w.submit_increment(inc).expect("submit"),
            "after reopen too"
        );
        assert_eq!(w.count("sunset", "isa").expect("count"), 1);
    }
}

/// A store `w.tags` in `dir` holding [`base_tags`], reopened, that inserted
/// `n isa beach` and shipped it: its path, the store, the increment and the tags.
fn shipped_base(dir: &Path) -> (PathBuf, Store, Increment, BTreeSet<Tag>) {
    let (path, w) = open_made(dir, "w.tags", &base_tags());
    let t = tag("n", "isa", "beach");
    let inc = insert_and_ship(&w, &t);
    let mut tags: BTreeSet<Tag> = base_tags().into_iter().collect();
    tags.insert(t);
    (path, w, inc, tags)
}

/// The same promise after the own counts were rebuilt from the tags (changes
/// made with counting off in the same session; an unclean shutdown): the
/// rebuilt counts already hold the shipped change, so the increment sent
/// back must still be discarded. FAILS on dc982ac: a rebuild
/// (`Counts::from_counts` in `ensure_counts`) starts from an empty set of
/// merged ids, so the increment is merged on top: counted twice.
/// See also `increment_sent_back_after_a_crash_changes_nothing`.
#[test]
fn increment_sent_back_after_a_rebuild_changes_nothing() {
    let (_g, dir) = lib_test();
    let (_path, w, inc, mut tags) = shipped_base(dir.path());
    // Counting off for one change: the next use rebuilds the own counts.
    w.set_counting(false);
    assert!(w.insert(&tag("m", "owns", "dog")).expect("insert"));
    tags.insert(tag("m", "owns", "dog"));
    w.set_counting(true);
    assert_store_counts(&w, &tag_counts(&tags), &["isa", "owns"], "rebuilt");
    let fresh = w.submit_increment(inc.clone()).expect("submit");
    let ctx = format!("shipped increment sent back after a rebuild (accepted: {fresh})");
    assert_counts_of(&w, &tags, &ctx);
    assert!(!fresh, "already in the counts: must be discarded");
    w.close().expect("close");
}

/// The clean-close variant: changes made with counting off make the own
/// counts stale, and the close used to delete the counts file, so the
/// reopened handle rebuilt them with no merged ids and merged the shipped
/// increment sent back on top (counted twice, and the counts turned
/// "foreign" for good). The close now keeps the merged ids.
#[test]
fn increment_sent_back_after_counting_off_and_a_close_changes_nothing() {
    let (_g, dir) = lib_test();
    let (path, w, inc, mut tags) = shipped_base(dir.path());
    w.set_counting(false);
    assert!(w.insert(&tag("m", "owns", "dog")).expect("insert"));
    tags.insert(tag("m", "owns", "dog"));
    w.close().expect("close");
    let w = Store::open(&path).expect("reopen");
    assert_store_counts(&w, &tag_counts(&tags), &["isa", "owns"], "rebuilt");
    let fresh = w.submit_increment(inc).expect("submit");
    w.close().expect("close");
    let w = Store::open(&path).expect("reopen");
    assert_check_ok(&w, "after the increment came back");
    let ctx = format!("shipped increment sent back after a close (accepted: {fresh})");
    assert_counts_of(&w, &tags, &ctx);
    assert!(!fresh, "already in the counts: must be discarded");
}

/// The crash variant: the shipped id was recorded durably in the own
/// counts file, but the unclean shutdown makes the reopened handle rebuild
/// its counts, dropping the merged ids. FAILS on dc982ac: the increment sent
/// back is merged on top (counted twice), and because it carries the old
/// handle's writer id the counts turn "foreign": never rebuilt again and
/// no longer checked, so the error is permanent and `check()` stays silent.
#[test]
fn increment_sent_back_after_a_crash_changes_nothing() {
    let (_g, dir) = lib_test();
    let (path, w, inc, tags) = shipped_base(dir.path());
    w.abandon();
    let w = Store::open(&path).expect("reopen");
    assert!(w.recovered_on_open());
    assert_store_counts(&w, &tag_counts(&tags), &["isa", "owns"], "after the crash");
    let fresh = w.submit_increment(inc).expect("submit");
    w.close().expect("close");
    let w = Store::open(&path).expect("reopen");
    assert_check_ok(&w, "after the increment came back");
    let ctx = format!("shipped increment sent back after a crash (accepted: {fresh})");
    assert_counts_of(&w, &tags, &ctx);
}

/// Format compatibility: the first counts format (d62a97a) stored snapshot
/// counts as `u64`; dc982ac stores `i64` (zigzag varints in bincode) under
/// the same magic `TSCOUNT1`. A collector's file written by the first
/// version (its counts cannot be rebuilt from its tags) must be read as
/// written, or refused, never misread. The current-format half of the test
/// shows the hand-written layout is the one the store reads.
#[test]
fn counts_file_of_the_first_format_is_not_misread() {
    let (_g, dir) = lib_test();
    let seed = 0xC0;
    let ids = [
        IncrementId { writer: 9, seq: 0 },
        IncrementId { writer: 9, seq: 1 },
    ];
    let snapshot_counts: [(&str, &str, i64); 3] = [
        ("isa", "beach", 4),
        ("isa", "sunset", 3),
        ("owns", "dog", 7),
    ];
    let merge = (("isa", "sunset"), 2i64);
    let want: BTreeMap<Key, u64> = [
        (key("isa", "beach"), 4),
        (key("isa", "sunset"), 5),
        (key("owns", "dog"), 7),
    ]
    .into_iter()
    .collect();
    for first_format in [false, true] {
        let path = dir.path().join(format!("c{first_format}.tags"));
        let c = Store::create(
            &path,
            &CreateOptions {
                seed: Some(seed),
                ..small()
            },
        )
        .expect("create");
        c.close().expect("close");
        let delta = vec![(merge.0 .0.to_string(), merge.0 .1.to_string(), merge.1)];
        let counts = snapshot_counts
            .iter()
            .map(|(r, s, n)| (r.to_string(), s.to_string(), *n));
        if first_format {
            let counts = counts.map(|(r, s, n)| (r, s, n as u64)).collect();
            let records = snapshot_and_merge(counts, ids, delta);
            write_counts_file_with(b"TSCOUNT1", &path, seed, &records);
        } else {
            write_counts_file(
                &path,
                seed,
                &snapshot_and_merge(counts.collect(), ids, delta),
            );
        }
        let c = Store::open(&path).expect("open");
        let got: BTreeMap<Key, u64> = want
            .keys()
            .map(|(r, s)| (key(r, s), c.count(s, r).expect("count")))
            .collect();
        if first_format {
            assert!(
                got == want || got.values().all(|n| *n == 0),
                "a first-format file must be read as written ({want:?}) or refused, got {got:?}"
            );
        } else {
            assert_eq!(got, want, "current format, hand-written");
            assert_eq!(c.counts_version().expect("version"), 2);
            assert!(!c
                .submit_increment(foreign_increment(9, 1, &[("isa", "x", 1)]))
                .expect("submit"));
        }
    }
}

/// Regression (failed on d62a97a; fixed in dc982ac): `set_counting` says
/// changes made while off "are then rebuilt from the tags on next use";
/// within the same session the already loaded counts were served unchanged
/// (and `check()` skipped them as stale).
#[test]
fn counting_off_changes_are_rebuilt_on_next_use_in_the_same_session() {
    let (_g, dir) = lib_test();
    let (_path, s) = open_made(dir.path(), "s.tags", &base_tags());
    assert_eq!(s.count("sunset", "isa").expect("count"), 3);
    s.set_counting(false);
    assert!(s.insert(&tag("z", "isa", "sunset")).expect("insert"));
    let mut tags: BTreeSet<Tag> = base_tags().into_iter().collect();
    tags.insert(tag("z", "isa", "sunset"));
    assert_store_counts(
        &s,
        &tag_counts(&tags),
        &["isa", "owns"],
        "same session, counting off",
    );
}

/// Regression (failed on d62a97a; fixed by `cut` in dc982ac; damage only):
/// a damaged last merge record whose deltas net to zero is cut off on load;
/// the shorter file still summed to the tag count and was served with wrong
/// counts (DESIGN §8: a damaged counts file causes a rebuild).
#[test]
fn damaged_net_zero_merge_record_is_rebuilt() {
    let (_g, dir) = lib_test();
    let (path, s) = open_made(dir.path(), "s.tags", &base_tags());
    let before = fs::metadata(counts_path(&path)).expect("counts").len();
    assert!(s.insert(&tag("q", "isa", "dawn")).expect("insert"));
    assert!(s.delete(&tag("a", "isa", "beach")).expect("delete"));
    s.close().expect("close");
    let mut bytes = fs::read(counts_path(&path)).expect("counts");
    assert!(bytes.len() as u64 > before, "close appended a merge record");
    let n = bytes.len();
    bytes[n - 1] ^= 0x01;
    fs::write(counts_path(&path), &bytes).expect("write");
    let mut tags: BTreeSet<Tag> = base_tags().into_iter().collect();
    tags.insert(tag("q", "isa", "dawn"));
    tags.remove(&tag("a", "isa", "beach"));
    let s = Store::open(&path).expect("reopen");
    assert_store_counts(
        &s,
        &tag_counts(&tags),
        &["isa", "owns"],
        "damaged net-zero merge",
    );
}

// -------------------------------------------------------------------- CLI

/// Runs `tagstore` with these arguments (`&str` or `&OsStr`) and asserts success.
macro_rules! cli {
    ($($a:expr),* $(,)?) => {
        ok(run(&[$(std::ffi::OsStr::new($a)),*]))
    };
}

/// `count` and `cloud` (text and JSON) on the Debian fixture, against counts
/// taken from the fixture itself; again after deleting a few tags.
#[test]
fn cli_count_and_cloud_on_debian_fixture() {
    let _g = cli_guard();
    let fixture = fixture("debian-packages.tsv");
    let text = fs::read_to_string(&fixture).expect("fixture");
    let mut tags: BTreeSet<Tag> = text
        .lines()
        .map(|l| tagstore::tsv::parse_line(l).expect("fixture line"))
        .collect();
    let libc6 = text
        .lines()
        .filter(|l| l.ends_with("\tdepends_on\tlibc6"))
        .count();
    assert!(libc6 > 100, "fixture has libc6 dependencies");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("debian.tags");
    let st = store.as_os_str();
    cli!("create", st, "--expected-tags", "20000");
    cli!("insert", st, "--file", fixture.as_os_str());

    let count = |s: &str, r: &str| -> u64 {
        let o = cli!("count", st, "--subject", s, "--relationship", r);
        stdout(&o).trim().parse().expect("a number")
    };
    assert_eq!(
        count("libc6", "depends_on"),
        libc6 as u64,
        "libc6 under depends_on"
    );
    assert_eq!(count("libc6", "provides"), 0);
    assert_eq!(count("no-such-package", "depends_on"), 0);

    let check_cloud = |tags: &BTreeSet<Tag>, rel: &str, top: usize| {
        let want = model_cloud(&tag_counts(tags), rel, top);
        let top_s = top.to_string();
        let o = cli!(
            "cloud",
            st,
            "--relationship",
            rel,
            "--top",
            &top_s,
            "--json"
        );
        let got: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).expect("JSON array");
        let entries: Vec<CloudEntry> = got
            .iter()
            .map(|v| CloudEntry {
                subject: v["subject"].as_str().expect("subject").to_owned(),
                count: v["count"].as_u64().expect("count"),
                weight: v["weight"].as_f64().expect("weight"),
            })
            .collect();
        assert_cloud(&entries, &want, &format!("cli cloud {rel} --top {top}"));
        // Text form: subject<TAB>count<TAB>weight with two decimals.
        let o = cli!("cloud", st, "--relationship", rel, "--top", &top_s);
        let lines: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
        let want_lines: Vec<String> = entries
            .iter()
            .map(|e| {
                format!(
                    "{}\t{}\t{:.2}",
                    tagstore::tsv::escape(&e.subject),
                    e.count,
                    e.weight
                )
            })
            .collect();
        assert_eq!(lines, want_lines, "cli cloud text {rel}");
        entries
    };
    let c = check_cloud(&tags, "depends_on", 10);
    assert_eq!(c.len(), 10);
    assert_eq!((c[0].subject.as_str(), c[0].count), ("libc6", libc6 as u64));
    assert_eq!(c[0].weight, 10.0);
    assert_eq!(c[9].weight, 1.0);
    check_cloud(&tags, "has_priority", 50);
    check_cloud(&tags, "in_section", 3);
    assert!(check_cloud(&tags, "no_such_relationship", 5).is_empty());

    // Delete two libc6 dependencies: the counts follow.
    let deps: Vec<Tag> = tags
        .iter()
        .filter(|t| t.relationship == "depends_on" && t.subject == "libc6")
        .take(2)
        .cloned()
        .collect();
    for t in &deps {
        let o = cli!("delete", st, &t.object, &t.relationship, &t.subject);
        assert!(o.status.success());
        tags.remove(t);
    }
    assert_eq!(
        count("libc6", "depends_on"),
        libc6 as u64 - 2,
        "after delete"
    );
    check_cloud(&tags, "depends_on", 10);
    cli!("check", st);
}

/// Regression (the merge that skips loading the counts): a handle that
/// never loaded the counts appends its own merge to the file without
/// loading it, unless the file needs the full load (here a torn tail on a
/// collector's counts, which cannot be rebuilt from the tags). The pending
/// changes must then reach the full merge: taking them for the blind append
/// and dropping them when it declined lost the insert.
#[test]
fn a_declined_blind_merge_keeps_the_changes() {
    let (_g, dir) = lib_test();
    let path = dir.path().join("c.tags");
    let s = Store::create(&path, &small()).expect("create");
    assert!(s.insert(&tag("a", "isa", "sunset")).expect("insert"));
    assert!(s
        .submit_increment(foreign_increment(77, 0, &[("isa", "beach", 5)]))
        .expect("submit"));
    s.close().expect("close");
    // Blind appends on a whole file: two handles, one insert each.
    for (o, sub) in [("b", "sunset"), ("c", "dawn")] {
        let s = Store::open(&path).expect("open");
        assert!(s.insert(&tag(o, "isa", sub)).expect("insert"));
        s.close().expect("close");
    }
    // A torn record at the end: the next merge must take the full path.
    let counts = tagstore::counts_path(&path);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&counts)
        .expect("open counts");
    std::io::Write::write_all(&mut f, &[9, 0, 0, 0, 1, 2]).expect("tear");
    drop(f);
    let s = Store::open(&path).expect("open");
    assert!(s.insert(&tag("d", "isa", "dawn")).expect("insert"));
    s.close().expect("close");
    let s = Store::open(&path).expect("reopen");
    assert_eq!(s.count("sunset", "isa").expect("count"), 2);
    assert_eq!(s.count("dawn", "isa").expect("count"), 2);
    assert_eq!(
        s.count("beach", "isa").expect("count"),
        5,
        "the collector's counts kept"
    );
}
