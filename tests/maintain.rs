//! Offline maintenance: `Store::maintain` and `tagstore maintain`.
//!
//! Covers:
//! - a proptest model test: random workloads (a peak subject with thousands
//!   of objects, a peak object with many subjects, Zipf-ish ordinary tags,
//!   rare single-tag keys, tags of the maximum size, heavy random deletes,
//!   refills; sometimes journaled (`OnSync`), sometimes dropped without a
//!   close so that maintenance starts from an unclean store; the store
//!   grows by splits as the tags arrive), then `maintain` with
//!   `keep_geometry` (the bucket count the store has grown to), plain
//!   `maintain` (re-sized: the geometry `planned_geometry` chooses for the
//!   live tags, which the copy fills without splitting) and `maintain`
//!   into a new geometry (fewer or more primary buckets, other bucket sizes;
//!   a starting size too small for the tags splits while copying, and is
//!   then only checked to have grown from it). After each run the tag set
//!   equals the `BTreeSet` model, FIND agrees with the model in both
//!   directions (including keys whose tags were all deleted), `check()` is
//!   clean, and the layout is exactly the dense one the model predicts
//!   (bucket loads computed with the public hash helpers and the store's
//!   seed): no holes, no free secondary buckets, the minimal chain per bucket.
//!   (Placement follows the store's growth state: linear hashing for
//!   format 2.) With the bucket count kept the linked secondary buckets, the file
//!   length and the written (non-zero) 4 KB blocks never grow, and no journal
//!   is left. The store keeps working afterwards. (Allocated bytes have their
//!   own test: on ext4 they can grow by a block even for a dense store.)
//!   `TAGSTORE_PROPTEST_CASES` raises the case count (default 16).
//! - the report: `before` describes the file as it was before the run, and
//!   `after` the file as it is afterwards;
//! - compaction of 100k tags never grows the allocated bytes (fails on ext4,
//!   see `compaction_does_not_grow_allocated_bytes`);
//! - deleting half of 20,000 tags in a store grown from one bucket, then
//!   plain maintenance, at most 0.65 x the file and allocated bytes;
//!   `keep_geometry` keeps the grown bucket count;
//! - refusal: `Error::Locked` (and exit 1 from the CLI) while a writable or a
//!   read-only handle in this process or a CLI writer in another process
//!   holds the store, with the file byte-identical afterwards; an invalid
//!   geometry or a missing store is refused without leaving a temporary file;
//! - a stale `STORE.maintain.tmp` (garbage, empty, or a whole other store) is
//!   replaced, never merged, and does not disturb normal use;
//! - a rewrite that fails half-way (the CLI run under a file-size limit)
//!   leaves the old store and no temporary file;
//! - file permissions survive the rewrite-and-rename;
//! - crash safety with a real process: `tagstore maintain` on a store of
//!   200k tags with holes, killed with SIGKILL 7 times: once at a random
//!   moment before the copy starts, then at stratified random delays from the
//!   start of the copy to 1.3 x the copy time of a measured complete run (so
//!   before, around and after the rename). Every run re-hashes (alternating
//!   between the count sized for the tags and 1000 more, which the copy
//!   fills without splitting), so the
//!   geometry shows which side of the rename a kill landed on; every time the
//!   store holds exactly the original tags, passes `check()`, and has either
//!   the old or the new geometry. A final complete run replaces the leftover
//!   temporary file. (Runs in /dev/shm when it has room: see
//!   `crash_scratch_dir`.)
//! - the CLI: the before/after table and `--json` (`after.holes == 0`,
//!   plain runs re-size for the live tags, `--keep-buckets`,
//!   `--primary-buckets`, `--expected-tags`, bucket size options).
//!
//! The tests run one at a time (`serial()`): an flock belongs to the open
//! file description, which a child forked by one test thread shares until it
//! execs, so a store closed in one thread could still look locked to another.
//!
//! `find_latency` (ignored) times FINDs on a large store for the notes:
//! `TAGSTORE_BENCH_STORE=/path/to/store cargo test --release --test maintain find_latency -- --ignored --nocapture`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tagstore::maintain_temp_path as temp_path;
use tagstore::testing::{bucket_of, key_hash, planned_geometry};
use tagstore::Half;
mod common;

use common::store::{
    assert_check_ok, expect_locked, holds_write_lock, serial, sized, sorted_objects,
    sorted_subjects, spawn_cli_holder, wait_until_marked_open, Rng,
};
use tagstore::{
    journal_path, CreateOptions, Durability, Error, Geometry, Growth, MaintainOptions, Stats,
    Store, Tag, MAX_TAG_BYTES,
};

const BIN: &str = env!("CARGO_BIN_EXE_tagstore");

type Model = BTreeSet<Tag>;

// ---------------------------------------------------------------------------
// Verification helpers

/// Every FIND key (object and subject side) of a set of tags.
#[derive(Default)]
struct Keys {
    objects: BTreeSet<(String, String)>,
    subjects: BTreeSet<(String, String)>,
}

impl Keys {
    fn add(&mut self, t: &Tag) {
        self.objects
            .insert((t.object.clone(), t.relationship.clone()));
        self.subjects
            .insert((t.subject.clone(), t.relationship.clone()));
    }
}

fn first_few<'a>(it: impl Iterator<Item = &'a Tag>) -> Vec<&'a Tag> {
    it.take(5).collect()
}

/// The store holds exactly `model`: `tags()` (no duplicates), `len()`, and
/// FIND in both directions for every key in `keys` (absent keys find nothing).
fn assert_matches_model(store: &Store, model: &Model, keys: &Keys, what: &str) {
    let all: Vec<Tag> = store
        .tags()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("{what}: tags(): {e}"));
    let n = all.len();
    let got: Model = all.into_iter().collect();
    assert_eq!(n, got.len(), "{what}: tags() yields duplicates");
    assert!(
        got == *model,
        "{what}: {} tags stored, {} in the model; missing {:?}; unexpected {:?}",
        got.len(),
        model.len(),
        first_few(model.difference(&got)),
        first_few(got.difference(model)),
    );
    assert_eq!(store.len(), model.len() as u64, "{what}: len()");

    let mut subjects_of: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    let mut objects_of: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for t in model {
        subjects_of
            .entry((&t.object, &t.relationship))
            .or_default()
            .push(&t.subject);
        objects_of
            .entry((&t.subject, &t.relationship))
            .or_default()
            .push(&t.object);
    }
    let want = |index: &BTreeMap<(&str, &str), Vec<&str>>, k: &str, r: &str| {
        let mut w: Vec<String> = index
            .get(&(k, r))
            .map(|v| v.iter().map(|x| x.to_string()).collect())
            .unwrap_or_default();
        w.sort();
        w
    };
    for (o, r) in &keys.objects {
        let found = sorted_subjects(store, o, r);
        assert_eq!(
            found,
            want(&subjects_of, o, r),
            "{what}: FIND <{o}, {r}, *>"
        );
    }
    for (s, r) in &keys.subjects {
        let found = sorted_objects(store, s, r);
        assert_eq!(found, want(&objects_of, s, r), "{what}: FIND <*, {r}, {s}>");
    }
    assert_check_ok(store, what);
}

fn open_matches_model(path: &Path, model: &Model, keys: &Keys, what: &str) {
    let s = Store::open_read_only(path).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    assert_matches_model(&s, model, keys, what);
}

/// The layout a dense rewrite of `model` must produce.
#[derive(Debug, PartialEq, Eq)]
struct Dense {
    primary_buckets_used: u64,
    secondary_linked: u64,
    chains: u64,
    longest_chain: u64,
    load_max: u64,
}

/// The half-local bucket of key hash `h` in a store whose growth state is
/// `growth`: format 1 places with the public `bucket_of` (multiply-shift);
/// format 2 by linear hashing on the hash's top 48 bits (the low 16 are the
/// key fingerprint), as the format describes.
fn bucket_in(growth: &Growth, h: u64) -> u32 {
    if growth.format_version == 1 {
        return bucket_of(h, growth.base_buckets_per_half);
    }
    let x = h >> 16;
    let m = (growth.base_buckets_per_half as u64) << growth.level;
    let b = x % m;
    if b < growth.split_pointer as u64 {
        (x % (2 * m)) as u32
    } else {
        b as u32
    }
}

/// Computes the dense layout from the bucket loads, placing every tag with
/// the store's public hash helpers: each bucket keeps as many tags in its
/// primary bucket as fit and links the fewest secondary buckets that hold the rest.
fn dense_layout(model: &Model, seed: u64, geo: &Geometry, growth: &Growth) -> Dense {
    let mut loads = vec![0u64; geo.primary_buckets() as usize];
    for t in model {
        for (half, name) in [(Half::Object, &t.object), (Half::Subject, &t.subject)] {
            let b = bucket_in(growth, key_hash(seed, half, &t.relationship, name));
            loads[geo.global(half, b) as usize] += 1;
        }
    }
    let (pc, sc) = (
        geo.primary_capacity() as u64,
        geo.secondary_capacity() as u64,
    );
    let chain = |l: u64| l.saturating_sub(pc).div_ceil(sc);
    Dense {
        primary_buckets_used: loads.iter().filter(|&&l| l > 0).count() as u64,
        secondary_linked: loads.iter().map(|&l| chain(l)).sum(),
        chains: loads.iter().filter(|&&l| chain(l) > 0).count() as u64,
        longest_chain: loads.iter().map(|&l| chain(l)).max().unwrap_or(0),
        load_max: loads.iter().copied().max().unwrap_or(0),
    }
}

/// `after` is the dense layout of `model` in geometry `geo`: a fresh
/// rewrite that did not split while copying (a split leaves holes in the
/// chain it moved tags out of, so only an unsplit rewrite is dense).
fn assert_dense(after: &Stats, model: &Model, seed: u64, geo: &Geometry, what: &str) {
    assert_eq!(after.geometry, *geo, "{what}: geometry after");
    assert!(
        after.growth.format_version == 1
            || (after.growth.level == 0
                && after.growth.split_pointer == 0
                && after.growth.base_buckets_per_half == geo.primary_buckets_per_half),
        "{what}: the rewrite is not an unsplit store of its starting size: {:?}",
        after.growth
    );
    assert_eq!(after.tags, model.len() as u64, "{what}: tags after");
    assert_eq!(after.holes, 0, "{what}: holes after");
    assert_eq!(
        after.secondary_free, 0,
        "{what}: free secondary buckets kept after maintenance"
    );
    assert_eq!(
        after.secondary_buckets, after.secondary_linked,
        "{what}: secondary buckets that are not linked"
    );
    let got = Dense {
        primary_buckets_used: after.primary_buckets_used,
        secondary_linked: after.secondary_linked,
        chains: after.chains,
        longest_chain: after.longest_chain,
        load_max: after.load_max,
    };
    assert_eq!(
        got,
        dense_layout(model, seed, geo, &after.growth),
        "{what}: layout after is not the dense one"
    );
}

/// `after` is a rewrite of `model` that started as a fresh store of
/// geometry `start`: dense in `start` if the copy did not split, and
/// otherwise (only when the tags exceed the split threshold of `start`)
/// grown from `start` by splits, with the same bucket sizes.
fn assert_rewrite(after: &Stats, model: &Model, seed: u64, start: &Geometry, what: &str) {
    if after.geometry == *start {
        assert_dense(after, model, seed, start, what);
        return;
    }
    let slots = start.primary_buckets_per_half as f64 * start.primary_capacity() as f64;
    assert!(
        after.geometry.primary_buckets_per_half > start.primary_buckets_per_half
            && after.geometry.blocks_per_primary == start.blocks_per_primary
            && after.geometry.blocks_per_secondary == start.blocks_per_secondary
            && after.growth.base_buckets_per_half == start.primary_buckets_per_half
            && model.len() as f64 + 1.0
                > after.growth.split_fill * slots + after.growth.split_allowance as f64,
        "{what}: started at {start:?} for {} tags, now {:?} ({:?})",
        model.len(),
        after.geometry,
        after.growth
    );
    assert_eq!(after.tags, model.len() as u64, "{what}: tags after");
}

/// 4 KB blocks of the file holding any non-zero byte (what was written).
fn data_blocks(path: &Path) -> u64 {
    std::fs::read(path)
        .expect("read store")
        .chunks(4096)
        .filter(|b| b.iter().any(|&x| x != 0))
        .count() as u64
}

fn read_only_stats(path: &Path) -> Stats {
    Store::open_read_only(path)
        .and_then(|s| s.stats())
        .expect("stats")
}

/// The geometry a plain `maintain` of the store at `path` chooses.
fn planned(path: &Path) -> Geometry {
    planned_with(path, &MaintainOptions::default())
}

/// The geometry `maintain` with `o` (and no geometry) chooses.
fn planned_with(path: &Path, o: &MaintainOptions) -> Geometry {
    let s = Store::open_read_only(path).expect("open to plan");
    planned_geometry(&s, o).expect("plan")
}

/// Runs `Store::maintain`, checking the progress calls: `total` is the tag
/// count throughout, `done` grows and ends at `total`.
fn maintain_checked(
    path: &Path,
    geometry: Option<Geometry>,
    tags: u64,
    what: &str,
) -> tagstore::MaintainReport {
    maintain_with(
        path,
        &MaintainOptions {
            geometry,
            ..Default::default()
        },
        tags,
        what,
    )
}

/// [`maintain_checked`] with any options.
fn maintain_with(
    path: &Path,
    options: &MaintainOptions,
    tags: u64,
    what: &str,
) -> tagstore::MaintainReport {
    let mut calls: Vec<(u64, u64)> = Vec::new();
    let r = Store::maintain(path, options, |d, t| calls.push((d, t)))
        .unwrap_or_else(|e| panic!("{what}: maintain: {e}"));
    assert!(
        calls.iter().all(|&(_, t)| t == tags),
        "{what}: progress total is not the tag count {tags}: {calls:?}"
    );
    assert!(
        calls.windows(2).all(|w| w[0].0 < w[1].0),
        "{what}: progress does not advance: {calls:?}"
    );
    if tags > 0 {
        assert_eq!(
            calls.last(),
            Some(&(tags, tags)),
            "{what}: last progress call"
        );
    }
    assert!(
        !temp_path(path).exists(),
        "{what}: {} left behind",
        temp_path(path).display()
    );
    r
}

// ---------------------------------------------------------------------------
// 1. Model test

#[derive(Clone, Debug)]
struct Workload {
    rng_seed: u64,
    hash_seed: u64,
    base: Geometry,
    /// Objects of the peak subject `<*, isa, peak>`.
    peak: usize,
    /// Subjects of the peak object `<album, contains, *>`.
    fan_out: usize,
    /// Ordinary tags, Zipf-ish subjects.
    spread: usize,
    /// Keys with a single tag each (some of the maximum size).
    rare: usize,
    delete_permille: u32,
    /// Tags inserted after the deletes (into the holes).
    refill: usize,
    /// Drop the handle without closing before maintenance (as a crash would).
    crash_before: bool,
    /// Journal the workload's changes (`OnSync`, one sync at the end) rather
    /// than writing them straight to the map; with `crash_before`,
    /// maintenance starts from a store whose journal must be replayed.
    journaled: bool,
    new_geometry: Geometry,
}

fn workload() -> impl Strategy<Value = Workload> {
    let base = (
        prop_oneof![1 => Just(1u32), 6 => 2u32..=24, 3 => 24u32..=160],
        1u32..=4,
        1u32..=16,
    )
        .prop_map(|(p, bp, bs)| Geometry {
            primary_buckets_per_half: p,
            blocks_per_primary: bp,
            blocks_per_secondary: bs,
        });
    let deletes = prop_oneof![
        1 => Just(0u32),
        2 => 100u32..600,
        6 => 600u32..950,
        1 => Just(1000u32),
    ];
    (
        (any::<u64>(), any::<u64>(), base),
        (1000usize..4000, 0usize..1500, 0usize..2500, 0usize..200),
        (deletes, 0usize..300, any::<bool>(), any::<bool>()),
        (0usize..6, 1u32..=5, 1u32..=20),
    )
        .prop_map(
            |(
                (rng_seed, hash_seed, base),
                (peak, fan_out, spread, rare),
                (delete_permille, refill, crash_before, journaled),
                (pick, bp, bs),
            )| {
                let p = base.primary_buckets_per_half;
                let primary_buckets_per_half = match pick {
                    0 => 1,
                    1 => (p / 4).max(1),
                    2 => (p / 2).max(1),
                    3 => p,
                    4 => p * 2,
                    _ => p * 4 + 3,
                };
                Workload {
                    rng_seed,
                    hash_seed,
                    base,
                    peak,
                    fan_out,
                    spread,
                    rare,
                    delete_permille,
                    refill,
                    crash_before,
                    journaled,
                    new_geometry: Geometry {
                        primary_buckets_per_half,
                        blocks_per_primary: bp,
                        blocks_per_secondary: bs,
                    },
                }
            },
        )
}

const RELS: [&str; 4] = ["isa", "owns", "by", "near"];

/// The tags a workload inserts first (duplicates included, shuffled).
fn initial_tags(w: &Workload, rng: &mut Rng) -> Vec<Tag> {
    let mut v = Vec::new();
    for i in 0..w.peak {
        v.push(Tag::new(format!("img{}", i * 3), "isa", "peak"));
    }
    for i in 0..w.fan_out {
        v.push(Tag::new("album", "contains", format!("img{}", i * 5)));
    }
    for _ in 0..w.spread {
        let o = format!("img{}", rng.below(3000));
        let r = RELS[rng.below(4) as usize];
        let s = format!("s{}", rng.zipf(400));
        v.push(Tag::new(o, r, s));
    }
    for i in 0..w.rare {
        let s = format!("rare-subject-{i}");
        let mut o = format!("rare-object-{i}-{}", rng.below(1 << 20));
        if i % 5 == 0 {
            // The largest tag a slot holds.
            let pad = MAX_TAG_BYTES - "rare".len() - s.len() - o.len();
            o.push_str(&"x".repeat(pad));
        }
        v.push(Tag::new(o, "rare", s));
    }
    rng.shuffle(&mut v);
    v
}

fn insert_all(store: &Store, tags: &[Tag], model: &mut Model, keys: &mut Keys) {
    // Singles for the first few, batches for the rest.
    let split = tags.len().min(50);
    for t in &tags[..split] {
        assert_eq!(
            store.insert(t).expect("insert"),
            model.insert(t.clone()),
            "insert({t:?})"
        );
        keys.add(t);
    }
    let before = model.len();
    let rest = &tags[split..];
    let (out, r) = store.insert_batch(rest.iter());
    r.expect("insert_batch");
    for t in rest {
        model.insert(t.clone());
        keys.add(t);
    }
    assert_eq!(
        out.changed as usize,
        model.len() - before,
        "insert_batch changed"
    );
    assert_eq!(
        (out.changed + out.unchanged) as usize,
        rest.len(),
        "insert_batch outcome"
    );
}

fn delete_all(store: &Store, tags: &[Tag], model: &mut Model) {
    let split = tags.len().min(50);
    for t in &tags[..split] {
        assert_eq!(
            store.delete(t).expect("delete"),
            model.remove(t),
            "delete({t:?})"
        );
    }
    let before = model.len();
    let rest = &tags[split..];
    let (out, r) = store.delete_batch(rest.iter());
    r.expect("delete_batch");
    for t in rest {
        model.remove(t);
    }
    assert_eq!(
        out.changed as usize,
        before - model.len(),
        "delete_batch changed"
    );
}

fn run_workload(w: &Workload) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("model.tags");
    let mut rng = Rng(w.rng_seed);
    let mut model = Model::new();
    let mut keys = Keys::default();

    let store = Store::create(
        &path,
        &CreateOptions {
            expected_tags: 0,
            primary_buckets_per_half: Some(w.base.primary_buckets_per_half),
            blocks_per_primary: Some(w.base.blocks_per_primary),
            blocks_per_secondary: Some(w.base.blocks_per_secondary),
            seed: Some(w.hash_seed),
        },
    )
    .expect("create");
    assert_eq!(store.geometry(), w.base);
    if w.journaled {
        store
            .set_durability(Durability::OnSync)
            .expect("set_durability");
    }
    let tags = initial_tags(w, &mut rng);
    insert_all(&store, &tags, &mut model, &mut keys);

    // Heavy random deletes, plus tags that were never there.
    let mut doomed: Vec<Tag> = model
        .iter()
        .filter(|_| rng.chance(w.delete_permille as u64))
        .cloned()
        .collect();
    doomed.extend((0..20).map(|i| Tag::new(format!("img{i}"), "isa", "never-inserted")));
    rng.shuffle(&mut doomed);
    delete_all(&store, &doomed, &mut model);

    // Refill some holes: new tags and some deleted ones again.
    let mut refill: Vec<Tag> = (0..w.refill)
        .map(|i| {
            if i % 2 == 0 && !doomed.is_empty() {
                doomed[rng.below(doomed.len() as u64) as usize].clone()
            } else {
                Tag::new(
                    format!("late{i}"),
                    RELS[i % 4],
                    format!("s{}", rng.zipf(400)),
                )
            }
        })
        .collect();
    rng.shuffle(&mut refill);
    insert_all(&store, &refill, &mut model, &mut keys);

    if w.journaled {
        store.sync().expect("sync");
    }
    // The store grew (split buckets) as the tags arrived: maintenance starts
    // from the geometry it has now, not the one it was created with.
    let grown = store.geometry();
    assert!(
        grown.primary_buckets_per_half >= w.base.primary_buckets_per_half
            && grown.blocks_per_primary == w.base.blocks_per_primary
            && grown.blocks_per_secondary == w.base.blocks_per_secondary,
        "grew from {:?} to {grown:?}",
        w.base
    );
    if w.crash_before {
        store.abandon();
    } else {
        store.close().expect("close");
    }

    // Maintenance keeping the bucket count (`keep_geometry`). After a crash
    // it runs on the store as the crash left it (unclean, perhaps with a
    // journal to replay), so the sizes before are only compared after a
    // clean close.
    let pre = (!w.crash_before).then(|| {
        let st = read_only_stats(&path);
        let len = std::fs::metadata(&path).expect("stat").len();
        assert_eq!(st.file_bytes, len, "stats file bytes vs the file");
        (st, data_blocks(&path))
    });
    let keep = MaintainOptions {
        keep_geometry: true,
        ..Default::default()
    };
    let r = maintain_with(&path, &keep, model.len() as u64, "maintain");
    assert_eq!(r.before.tags, model.len() as u64, "report: tags before");
    assert_eq!(r.before.geometry, grown, "report: geometry before");
    assert!(
        std::fs::metadata(journal_path(&path)).map_or(true, |m| m.len() == 0),
        "a journal is left after maintenance"
    );
    // The store never holds more tags than its bucket count takes without
    // a split, so the copy does not split: dense in the same geometry.
    assert_dense(&r.after, &model, w.hash_seed, &grown, "maintain");
    let now = read_only_stats(&path);
    assert_dense(&now, &model, w.hash_seed, &grown, "maintain (reopened)");
    assert_eq!(
        r.after.file_bytes, now.file_bytes,
        "report: file bytes after"
    );
    assert_eq!(
        now.file_bytes,
        std::fs::metadata(&path).expect("stat").len(),
        "stats file bytes vs the file"
    );
    // A rewrite places each key as the store did only when that store was
    // unsplit (level 0): a grown store's keys hash to the same bucket count
    // by another rule, so its chains may come out otherwise.
    let unsplit = r.before.growth.level == 0 && r.before.growth.split_pointer == 0;
    assert!(
        !unsplit || now.secondary_linked <= r.before.secondary_linked,
        "linked secondary buckets grew: {} -> {}",
        r.before.secondary_linked,
        now.secondary_linked
    );
    if let Some((pre, pre_data)) = &pre {
        assert_eq!(r.before.holes, pre.holes, "report: holes before");
        assert_eq!(
            r.before.secondary_linked, pre.secondary_linked,
            "report: linked secondary buckets before"
        );
        assert_eq!(
            (r.before.file_bytes, r.before.allocated_bytes),
            (pre.file_bytes, pre.allocated_bytes),
            "report: file and allocated bytes before"
        );
        assert!(
            !unsplit || now.file_bytes <= pre.file_bytes,
            "file grew from {} to {} bytes",
            pre.file_bytes,
            now.file_bytes
        );
        // What the rewrite writes, independent of the filesystem; the
        // allocated bytes are checked by `compaction_does_not_grow_allocated_bytes`
        // (on ext4 they can grow by a block or two even here).
        let data = data_blocks(&path);
        assert!(
            !unsplit || data <= *pre_data,
            "the rewrite holds {data} written 4 KB blocks, the old file {pre_data}"
        );
    }
    open_matches_model(&path, &model, &keys, "after maintain");

    // Plain maintenance: re-sized for the live tags (the copy never splits).
    let resize = planned(&path);
    let r = maintain_checked(&path, None, model.len() as u64, "maintain re-sizing");
    assert_eq!(r.before.geometry, grown, "re-size: report: geometry before");
    assert_eq!(
        r.after.geometry, resize,
        "maintain re-sizing split while copying"
    );
    assert_rewrite(&r.after, &model, w.hash_seed, &resize, "maintain re-sizing");
    let now = read_only_stats(&path);
    assert_rewrite(
        &now,
        &model,
        w.hash_seed,
        &resize,
        "maintain re-sizing (reopened)",
    );
    let resized = now.geometry;
    open_matches_model(&path, &model, &keys, "after maintain re-sizing");

    // Maintenance into a new geometry (its starting size: fewer buckets
    // than the tags need split while copying).
    let r = maintain_checked(
        &path,
        Some(w.new_geometry),
        model.len() as u64,
        "maintain into a new geometry",
    );
    assert_eq!(r.before.geometry, resized);
    assert_rewrite(
        &r.after,
        &model,
        w.hash_seed,
        &w.new_geometry,
        "maintain into a new geometry",
    );
    open_matches_model(&path, &model, &keys, "after maintain into a new geometry");

    // The rewritten store keeps working: more deletes and inserts.
    let s = Store::open(&path).expect("open after maintenance");
    let doomed: Vec<Tag> = model.iter().filter(|_| rng.chance(300)).cloned().collect();
    delete_all(&s, &doomed, &mut model);
    let more: Vec<Tag> = (0..200)
        .map(|i| Tag::new(format!("img{}", i * 7), "isa", "peak"))
        .chain((0..50).map(|i| Tag::new(format!("after{i}"), "owns", "new")))
        .collect();
    insert_all(&s, &more, &mut model, &mut keys);
    s.close().expect("close");
    open_matches_model(&path, &model, &keys, "after writes to the maintained store");
}

fn proptest_cases() -> u32 {
    std::env::var("TAGSTORE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}

#[test]
fn maintain_matches_model() {
    let _serial = serial();
    let mut runner = TestRunner::new(Config {
        cases: proptest_cases(),
        failure_persistence: None,
        max_shrink_iters: 200,
        ..Config::default()
    });
    if let Err(e) = runner.run(&workload(), |w| {
        run_workload(&w);
        Ok(())
    }) {
        panic!("{e}");
    }
}

/// A deterministic workload at the edges: everything deleted, one primary
/// bucket per half, one-block buckets.
#[test]
fn maintain_edge_workloads() {
    let _serial = serial();
    let base = Workload {
        rng_seed: 1,
        hash_seed: 2,
        base: Geometry {
            primary_buckets_per_half: 1,
            blocks_per_primary: 1,
            blocks_per_secondary: 1,
        },
        peak: 1000,
        fan_out: 300,
        spread: 500,
        rare: 40,
        delete_permille: 1000,
        refill: 0,
        crash_before: false,
        journaled: false,
        new_geometry: Geometry {
            primary_buckets_per_half: 7,
            blocks_per_primary: 1,
            blocks_per_secondary: 1,
        },
    };
    run_workload(&base);
    run_workload(&Workload {
        delete_permille: 0,
        crash_before: true,
        journaled: true,
        ..base.clone()
    });
    run_workload(&Workload {
        delete_permille: 900,
        refill: 200,
        new_geometry: Geometry {
            primary_buckets_per_half: 1,
            blocks_per_primary: 3,
            blocks_per_secondary: 7,
        },
        ..base
    });
}

// ---------------------------------------------------------------------------
// 2. The report, refusal, stale temporary files, failures, permissions

/// A store with holes: `n` tags inserted, every third deleted.
fn holey_store(dir: &Path, name: &str, n: usize) -> (PathBuf, Model, Keys) {
    let path = dir.join(name);
    let s = Store::create(&path, &sized(n as u64, 11)).expect("create");
    let mut model = Model::new();
    let mut keys = Keys::default();
    let tags: Vec<Tag> = (0..n)
        .map(|i| {
            Tag::new(
                format!("photo/{}/IMG_{i:05}.jpg", i / 100),
                RELS[i % 4],
                format!("s{}", (i * 7919) % 97),
            )
        })
        .chain((0..n / 4).map(|i| Tag::new(format!("o{i}"), "isa", "peak")))
        .collect();
    insert_all(&s, &tags, &mut model, &mut keys);
    let doomed: Vec<Tag> = model.iter().step_by(3).cloned().collect();
    delete_all(&s, &doomed, &mut model);
    s.close().expect("close");
    (path, model, keys)
}

/// `MaintainReport::before` must describe the store as it was before the run
/// (what `stats` printed a moment earlier and what `ls -l` showed), so that an
/// operator comparing before and after sees the real change.
#[test]
fn report_before_describes_the_file_as_it_was() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    // Dense already (no deletes): maintenance cannot shrink it, so it must
    // not appear to grow it either.
    let path = dir.path().join("dense.tags");
    let s = Store::create(&path, &sized(1000, 1)).expect("create");
    for i in 0..500 {
        s.insert(&Tag::new(format!("o{i}"), "r", format!("s{}", i % 13)))
            .expect("insert");
    }
    s.close().expect("close");
    let pre = read_only_stats(&path);
    let pre_len = std::fs::metadata(&path).expect("stat").len();
    assert_eq!(pre.file_bytes, pre_len);
    let r = maintain_checked(&path, None, 500, "maintain a dense store");
    let post_len = std::fs::metadata(&path).expect("stat").len();
    assert_eq!(
        r.after.file_bytes, post_len,
        "after.file_bytes vs ls -l after"
    );
    assert!(
        post_len <= pre_len,
        "the file grew from {pre_len} to {post_len} bytes"
    );
    assert_eq!(
        (r.before.file_bytes, r.before.allocated_bytes),
        (pre_len, pre.allocated_bytes),
        "before.file_bytes / allocated_bytes differ from the file before the run \
         (after: {} / {})",
        r.after.file_bytes,
        r.after.allocated_bytes
    );
    assert!(
        r.after.allocated_bytes <= r.before.allocated_bytes,
        "the report says maintenance grew the allocated bytes: {} -> {}",
        r.before.allocated_bytes,
        r.after.allocated_bytes
    );
}

/// Compaction must not grow the disk space the store takes: here 100k
/// tags, 5% deleted, geometry unchanged. The dense rewrite needs fewer blocks
/// than the old file holds, so `allocated_bytes` may only fall.
///
/// Depends on the filesystem: on tmpfs it holds; on ext4 the rewrite fills
/// the object half bucket by bucket in ascending block order, and ext4 then
/// allocates (zero-filled) the short gaps between the used blocks of
/// neighbouring buckets, so the new file allocates far more than its data.
#[test]
fn compaction_does_not_grow_allocated_bytes() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("alloc.tags");
    let n = 100_000u64;
    let s = Store::create(&path, &sized(n, 1)).expect("create");
    let tags: Vec<Tag> = (0..n)
        .map(|i| {
            Tag::new(
                format!("photo/{}/IMG_{i:07}.jpg", i / 1000),
                RELS[(i % 4) as usize],
                format!("s{}", (i * 7919) % 5000),
            )
        })
        .collect();
    let (_, r) = s.insert_batch(tags.iter());
    r.expect("insert_batch");
    let (_, r) = s.delete_batch(tags.iter().step_by(20));
    r.expect("delete_batch");
    s.close().expect("close");
    let pre = read_only_stats(&path);
    let r = maintain_checked(&path, None, pre.tags, "maintain");
    let data_blocks = data_blocks(&path);
    assert!(
        r.after.allocated_bytes <= pre.allocated_bytes,
        "maintenance grew the allocated bytes from {} to {}; the new file has {} non-zero \
         4 KB blocks ({} bytes), so {} allocated bytes hold only zeros",
        pre.allocated_bytes,
        r.after.allocated_bytes,
        data_blocks,
        data_blocks * 4096,
        r.after.allocated_bytes.saturating_sub(data_blocks * 4096)
    );
}

/// Every FIND key of `model`.
fn keys_of(model: &Model) -> Keys {
    let mut keys = Keys::default();
    for t in model {
        keys.add(t);
    }
    keys
}

/// 20,000 distinct tags in a store created with no size hint (it grows
/// from one bucket per half by splits): a subject and an object with 2,000
/// tags each, the rest on Zipf-ish subjects. Deleting every other tag and
/// running plain maintenance (re-sized for the live tags) must roughly
/// halve the file: file and allocated bytes at most 0.65 x those after the
/// load, exactly the remaining tags, `check()` clean.
#[test]
fn delete_half_then_maintain_roughly_halves_the_file() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("half.tags");
    let s = Store::create(
        &path,
        &CreateOptions {
            seed: Some(21),
            ..CreateOptions::default()
        },
    )
    .expect("create");
    assert_eq!(s.geometry().primary_buckets_per_half, 1, "no size hint");
    let mut rng = Rng(0x4A1F);
    let mut model = Model::new();
    let mut tags: Vec<Tag> = Vec::new();
    let mut i = 0u64;
    while model.len() < 20_000 {
        let t = match i % 10 {
            0 => Tag::new(format!("img{i}"), "isa", "popular"),
            1 => Tag::new("album", "contains", format!("img{i}")),
            _ => Tag::new(
                format!("photo/{}/IMG_{i:06}.jpg", rng.below(500)),
                RELS[rng.below(4) as usize],
                format!("s{}", rng.zipf(2000)),
            ),
        };
        if model.insert(t.clone()) {
            tags.push(t);
        }
        i += 1;
    }
    rng.shuffle(&mut tags);
    let (out, r) = s.insert_batch(tags.iter());
    r.expect("insert_batch");
    assert_eq!(out.changed, 20_000);
    s.close().expect("close");
    let loaded = read_only_stats(&path);
    assert_eq!(loaded.tags, 20_000);
    assert!(
        loaded.geometry.primary_buckets_per_half > 100,
        "the load did not grow the store: {:?}",
        loaded.geometry
    );

    let s = Store::open(&path).expect("open");
    let doomed: Vec<&Tag> = tags.iter().step_by(2).collect();
    let (out, r) = s.delete_batch(doomed.iter().copied());
    r.expect("delete_batch");
    assert_eq!(out.changed, doomed.len() as u64);
    for t in doomed {
        model.remove(t);
    }
    s.close().expect("close");
    assert_eq!(model.len(), 10_000);

    let live = planned(&path);
    let r = maintain_checked(&path, None, model.len() as u64, "maintain after deletes");
    assert_eq!(
        r.before.geometry, loaded.geometry,
        "report: geometry before"
    );
    let now = read_only_stats(&path);
    assert_eq!(now.geometry, live, "the copy split");
    assert_rewrite(&now, &model, 21, &live, "maintain after deletes");
    open_matches_model(&path, &model, &keys_of(&model), "after maintain");
    for (name, after, before) in [
        ("file bytes", now.file_bytes, loaded.file_bytes),
        (
            "allocated bytes",
            now.allocated_bytes,
            loaded.allocated_bytes,
        ),
    ] {
        assert!(
            after as f64 <= 0.65 * before as f64,
            "{name}: {after} after maintenance, {before} after the load (ratio {:.3}); \
             geometry {:?} -> {:?}",
            after as f64 / before as f64,
            loaded.geometry,
            now.geometry
        );
    }
}

/// `keep_geometry: true` keeps the primary bucket count the store has now
/// (grown by splits), even where plain maintenance would shrink it.
#[test]
fn keep_geometry_keeps_the_bucket_count() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("keep.tags");
    let s = Store::create(
        &path,
        &CreateOptions {
            seed: Some(8),
            ..CreateOptions::default()
        },
    )
    .expect("create");
    let tags: Vec<Tag> = (0..6000)
        .map(|i| Tag::new(format!("o{i}"), RELS[i % 4], format!("s{}", i % 300)))
        .collect();
    let (_, r) = s.insert_batch(tags.iter());
    r.expect("insert_batch");
    let (_, r) = s.delete_batch(tags.iter().filter(|t| !t.object.ends_with('0')));
    r.expect("delete_batch");
    let model: Model = tags
        .iter()
        .filter(|t| t.object.ends_with('0'))
        .cloned()
        .collect();
    let grown = s.geometry();
    s.close().expect("close");
    assert!(grown.primary_buckets_per_half > 1, "{grown:?}");
    let shrunk = planned(&path);
    assert!(
        shrunk.primary_buckets_per_half * shrunk.blocks_per_primary
            < grown.primary_buckets_per_half * grown.blocks_per_primary
    );

    let keep = MaintainOptions {
        keep_geometry: true,
        ..Default::default()
    };
    let r = maintain_with(&path, &keep, model.len() as u64, "keep_geometry");
    assert_eq!(r.before.geometry, grown);
    assert_eq!(
        r.after.geometry, grown,
        "keep_geometry changed the geometry"
    );
    assert_dense(&r.after, &model, 8, &grown, "keep_geometry");
    open_matches_model(&path, &model, &keys_of(&model), "after keep_geometry");
    assert_eq!(read_only_stats(&path).geometry, grown);

    // Plain maintenance then re-sizes for the live tags.
    let r = maintain_checked(&path, None, model.len() as u64, "plain");
    assert_eq!(r.after.geometry, shrunk);
    open_matches_model(&path, &model, &keys_of(&model), "after plain maintain");
}

/// Runs the CLI (stdin closed; a panic or a signal fails the test).
fn cli(args: &[&str]) -> Output {
    common::cli::run(args)
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn maintain_refuses_while_the_store_is_open() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, mut model, mut keys) = holey_store(dir.path(), "held.tags", 3000);
    let path_s = path.to_str().expect("utf-8 path");
    let tmp = temp_path(&path);

    // A writable handle in this process.
    let w = Store::open(&path).expect("open");
    let bytes = std::fs::read(&path).expect("read");
    expect_locked(
        Store::maintain(&path, &MaintainOptions::default(), |_, _| {}),
        &path,
        "maintain while a writer is open",
    );
    let rehash = MaintainOptions {
        geometry: Some(Geometry::for_expected_tags(50)),
        ..Default::default()
    };
    expect_locked(
        Store::maintain(&path, &rehash, |_, _| {}),
        &path,
        "re-hash while a writer is open",
    );
    let out = cli(&["maintain", path_s]);
    assert_eq!(out.status.code(), Some(1), "CLI: {}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("locked"),
        "CLI stderr: {}",
        stderr_of(&out)
    );
    assert!(out.stdout.is_empty(), "CLI printed a report");
    assert!(
        std::fs::read(&path).expect("read") == bytes,
        "refused maintenance changed the file"
    );
    assert!(!tmp.exists(), "refused maintenance left {}", tmp.display());
    // The holder is undisturbed.
    let t = Tag::new("written", "while", "held");
    assert!(w.insert(&t).expect("insert"));
    model.insert(t.clone());
    keys.add(&t);
    w.close().expect("close");

    // A read-only handle.
    let r = Store::open_read_only(&path).expect("open read-only");
    let bytes = std::fs::read(&path).expect("read");
    expect_locked(
        Store::maintain(&path, &MaintainOptions::default(), |_, _| {}),
        &path,
        "maintain while a reader is open",
    );
    assert!(std::fs::read(&path).expect("read") == bytes);
    assert!(!tmp.exists());
    assert_matches_model(&r, &model, &keys, "reader after refused maintenance");
    drop(r);

    // A CLI writer in another process: `insert --file -` waits on stdin.
    let mut holder = spawn_cli_holder(Path::new(path_s));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !holds_write_lock(holder.id(), &path) {
        if let Some(st) = holder.try_wait().expect("try_wait") {
            panic!("the lock holder exited early: {st}");
        }
        assert!(Instant::now() < deadline, "the CLI never took the lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Regression (failed once in CI): the holder marks the store open just
    // after it takes the lock; bytes read in between differed from those
    // read after the refused maintenance, blamed on the maintenance.
    wait_until_marked_open(&path);
    let bytes = std::fs::read(&path).expect("read");
    expect_locked(
        Store::maintain(&path, &MaintainOptions::default(), |_, _| {}),
        &path,
        "maintain while another process writes",
    );
    let out = cli(&["maintain", path_s, "--json"]);
    assert_eq!(out.status.code(), Some(1), "CLI: {}", stderr_of(&out));
    assert!(stderr_of(&out).contains("locked"), "{}", stderr_of(&out));
    assert!(std::fs::read(&path).expect("read") == bytes);
    assert!(!tmp.exists());
    let t = Tag::new("from", "the", "holder");
    {
        let mut stdin = holder.stdin.take().expect("stdin");
        stdin.write_all(b"from\tthe\tholder\n").expect("write");
    }
    let out = holder.wait_with_output().expect("wait");
    assert!(out.status.success(), "holder: {}", stderr_of(&out));
    model.insert(t.clone());
    keys.add(&t);
    open_matches_model(&path, &model, &keys, "after the refusals");

    // Free again: maintenance runs.
    let r = maintain_checked(&path, None, model.len() as u64, "maintain once free");
    assert_eq!(r.after.holes, 0);
    open_matches_model(&path, &model, &keys, "after maintenance");
}

#[test]
fn stale_temporary_file_is_replaced() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, model, keys) = holey_store(dir.path(), "stale.tags", 3000);
    let tmp = temp_path(&path);
    assert_eq!(
        tmp.file_name().and_then(|n| n.to_str()),
        Some("stale.tags.maintain.tmp")
    );
    for kind in ["garbage", "empty", "other store"] {
        match kind {
            "garbage" => std::fs::write(&tmp, vec![0xAB; 3 * 4096]).expect("write"),
            "empty" => std::fs::write(&tmp, b"").expect("write"),
            _ => {
                // A complete store with other tags, as if a run died just
                // before its rename; it must be discarded, never merged.
                let o = Store::create(&tmp, &sized(100, 11)).expect("create stale");
                for i in 0..50 {
                    o.insert(&Tag::new(format!("intruder{i}"), "isa", "peak"))
                        .expect("insert");
                }
                o.close().expect("close");
            }
        }
        // Normal use ignores it.
        open_matches_model(&path, &model, &keys, &format!("{kind} stale tmp: open"));
        let s = Store::open(&path).expect("open writable");
        let t = Tag::new("passing", "through", kind);
        assert!(s.insert(&t).expect("insert"));
        assert!(s.delete(&t).expect("delete"));
        s.close().expect("close");
        // A writable open owns the store: it removes what a killed run left.
        assert!(
            !tmp.exists(),
            "{kind}: a writable open removes the stale temporary"
        );
        // Leave one again, for maintenance itself to meet.
        std::fs::write(&tmp, b"stale").expect("write");

        let geometry = (kind == "other store").then(|| Geometry::for_expected_tags(100_000));
        let r = maintain_checked(
            &path,
            geometry,
            model.len() as u64,
            &format!("maintain over a {kind} stale tmp"),
        );
        assert_eq!(r.after.tags, model.len() as u64);
        open_matches_model(&path, &model, &keys, &format!("{kind} stale tmp: after"));
    }
}

#[test]
fn refused_arguments_leave_the_store_untouched() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, model, keys) = holey_store(dir.path(), "args.tags", 2000);
    let before = read_only_stats(&path);
    for bad in [
        Geometry {
            primary_buckets_per_half: 0,
            ..before.geometry
        },
        Geometry {
            blocks_per_primary: 0,
            ..before.geometry
        },
        Geometry {
            blocks_per_secondary: (1 << 16) + 1,
            ..before.geometry
        },
    ] {
        match Store::maintain(
            &path,
            &MaintainOptions {
                geometry: Some(bad),
                ..Default::default()
            },
            |_, _| {},
        ) {
            Err(Error::InvalidArgument(_)) => {}
            other => panic!("geometry {bad:?}: expected InvalidArgument, got {other:?}"),
        }
        assert!(!temp_path(&path).exists());
    }
    // Bucket sizes alone (the planner chooses the rest): 0 was read as 1.
    for (bp, bs) in [
        (Some(0), None),
        (None, Some(0)),
        (Some((1 << 16) + 1), None),
    ] {
        match Store::maintain(
            &path,
            &MaintainOptions {
                blocks_per_primary: bp,
                blocks_per_secondary: bs,
                ..Default::default()
            },
            |_, _| {},
        ) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("must be 1..="), "{m}"),
            other => panic!("sizes {bp:?} {bs:?}: expected InvalidArgument, got {other:?}"),
        }
        assert!(!temp_path(&path).exists());
    }
    let out = cli(&[
        "maintain",
        path.to_str().expect("utf-8"),
        "--primary-buckets",
        "0",
    ]);
    // A geometry value out of range is a usage error.
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).starts_with("error: "),
        "{}",
        stderr_of(&out)
    );
    let after = read_only_stats(&path);
    assert_eq!(after.geometry, before.geometry);
    assert_eq!(after.holes, before.holes, "a refused run compacted anyway");
    open_matches_model(&path, &model, &keys, "after refused arguments");

    let missing = dir.path().join("missing.tags");
    match Store::maintain(&missing, &MaintainOptions::default(), |_, _| {}) {
        Err(Error::NotFound(p)) => assert_eq!(p, missing),
        other => panic!("missing store: expected NotFound, got {other:?}"),
    }
    assert!(!missing.exists() && !temp_path(&missing).exists());
    let out = cli(&["maintain", missing.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("no such store file"),
        "{}",
        stderr_of(&out)
    );
}

/// The rewrite runs out of room half-way (the CLI under RLIMIT_FSIZE, the
/// way a full disk stops it): the old store stays, the temporary file goes.
///
/// The limit is computed from exact file lengths, so the store is made in
/// format 1 (`Store::create_format1`: fixed geometry, never splits) and its
/// 600 peak tags stay in 20 buckets per half; the rewrite is a format-2
/// store of `Geometry::sized(600, 1, 64)` (it does not split at that size).
#[test]
fn failed_rewrite_leaves_the_old_store() {
    use std::os::unix::process::CommandExt;
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("full.tags");
    let geo = Geometry {
        primary_buckets_per_half: 20,
        blocks_per_primary: 1,
        blocks_per_secondary: 1,
    };
    let s = Store::create_format1(
        &path,
        &CreateOptions {
            expected_tags: 0,
            primary_buckets_per_half: Some(geo.primary_buckets_per_half),
            blocks_per_primary: Some(1),
            blocks_per_secondary: Some(1),
            seed: Some(5),
        },
    )
    .expect("create");
    let mut model = Model::new();
    let mut keys = Keys::default();
    let tags: Vec<Tag> = (0..600)
        .map(|i| Tag::new(format!("o{i}"), "isa", "peak"))
        .collect();
    insert_all(&s, &tags, &mut model, &mut keys);
    s.close().expect("close");
    let len = std::fs::metadata(&path).expect("stat").len();
    let st = read_only_stats(&path);
    assert!(st.secondary_linked > 0);
    assert_eq!((st.geometry, st.growth.format_version), (geo, 1));
    // The new geometry's first secondary bucket (64 blocks) ends past the
    // old file's end, so the copy must fail once the peak overflows.
    let new = Geometry::sized(600, 1, 64);
    assert!(new.file_len(1) > len, "{} <= {len}", new.file_len(1));
    let limit = len as libc::rlim_t;
    let mut cmd = Command::new(BIN);
    cmd.args([
        "maintain",
        path.to_str().expect("utf-8"),
        "--blocks-per-secondary",
        "64",
    ]);
    // SAFETY: only async-signal-safe calls (setrlimit, signal) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let rl = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // At its default, as under `ulimit -f`: the CLI ignores it.
            libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
            Ok(())
        });
    }
    let out = cmd.stdin(Stdio::null()).output().expect("run tagstore");
    assert_eq!(
        out.status.code(),
        Some(1),
        "maintenance past the file-size limit: {:?}, stderr: {}",
        out.status,
        stderr_of(&out)
    );
    assert!(
        stderr_of(&out).starts_with("error: "),
        "{}",
        stderr_of(&out)
    );
    assert!(
        !temp_path(&path).exists(),
        "a failed run left {}",
        temp_path(&path).display()
    );
    let after = read_only_stats(&path);
    assert_eq!(
        (after.geometry, after.growth.format_version),
        (geo, 1),
        "the failed run replaced the store"
    );
    open_matches_model(&path, &model, &keys, "after the failed run");
}

/// The rewritten file replaces the old one by rename: it must keep the old
/// file's permission bits (a private 0600 store must not become world-readable).
#[test]
fn maintain_keeps_file_permissions() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, model, keys) = holey_store(dir.path(), "private.tags", 1000);
    // Two modes no single umask produces, so a default mode cannot pass both.
    for mode in [0o600, 0o664] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        maintain_checked(&path, None, model.len() as u64, "maintain");
        let got = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(
            got, mode,
            "maintenance changed the store's mode from {mode:o} to {got:o}"
        );
    }
    open_matches_model(&path, &model, &keys, "after maintenance");
}

// ---------------------------------------------------------------------------
// 3. Crash safety with a real process

/// Identity of the file at `p` (inode and change time), if it exists.
fn file_id(p: &Path) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p)
        .ok()
        .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Waits until a file other than `stale` exists at `p`; `None` if the child
/// exits first.
fn wait_for_new_file(
    p: &Path,
    stale: Option<(u64, i64, i64)>,
    child: &mut std::process::Child,
) -> Option<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(id) = file_id(p) {
            if Some(id) != stale {
                return Some(());
            }
        }
        if child.try_wait().expect("try_wait").is_some() {
            return None;
        }
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A scratch directory for the crash test: in /dev/shm when it has room.
///
/// SIGKILL leaves the page cache intact, so the filesystem does not change
/// what the test checks; on a disk filesystem most of its time goes to
/// writing back and freeing the killed runs' temporary files (written in
/// hash order, so fragmented).
fn crash_scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let free = std::ffi::CString::new("/dev/shm").ok().and_then(|c| {
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid C string and a zeroed statvfs to fill.
        (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0)
            .then(|| st.f_bavail as u64 * st.f_frsize as u64)
    });
    if shm.is_dir() && free.is_some_and(|f| f >= 2 << 30) {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("tempdir")
}

#[test]
fn sigkill_during_maintain_leaves_old_or_new_store() {
    use std::os::unix::process::ExitStatusExt;
    let _serial = serial();
    let dir = crash_scratch_dir();
    let path = dir.path().join("crash.tags");
    let path_s = path.to_str().expect("utf-8").to_owned();
    let mut rng = Rng(0x5EED);
    let mut model = Model::new();
    {
        let s = Store::create(&path, &sized(200_000, 3)).expect("create");
        let tags: Vec<Tag> = (0..260_000u64)
            .map(|i| {
                Tag::new(
                    format!("photo/{}/IMG_{i:07}.jpg", i / 1000),
                    RELS[(i % 4) as usize],
                    format!("subject{}", rng.zipf(5000)),
                )
            })
            .collect();
        let (_, r) = s.insert_batch(tags.iter());
        r.expect("insert_batch");
        let doomed: Vec<&Tag> = tags.iter().filter(|_| rng.chance(230)).collect();
        let (_, r) = s.delete_batch(doomed.iter().copied());
        r.expect("delete_batch");
        let doomed: BTreeSet<&Tag> = doomed.into_iter().collect();
        model.extend(tags.iter().filter(|t| !doomed.contains(t)).cloned());
        assert_eq!(s.len(), model.len() as u64);
        s.close().expect("close");
    }
    let geo0 = read_only_stats(&path).geometry;
    assert!(read_only_stats(&path).holes > 0);

    let verify = |what: &str| -> Geometry {
        let s = Store::open_read_only(&path).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        let got: Model = s
            .tags()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{what}: tags: {e}"));
        assert!(
            got == model,
            "{what}: {} tags, {} expected; missing {:?}; unexpected {:?}",
            got.len(),
            model.len(),
            first_few(model.difference(&got)),
            first_few(got.difference(&model))
        );
        assert_eq!(s.len(), model.len() as u64, "{what}: len");
        let c = s.check().unwrap_or_else(|e| panic!("{what}: check: {e}"));
        assert!(c.ok(), "{what}: check faults: {:?}", c.faults);
        s.geometry()
    };

    // Each run re-hashes, so the geometry afterwards tells which side of the
    // rename a kill landed on. The first run, not killed, measures the time
    // a whole run takes. The store grew while loading (`geo0`); the runs
    // alternate between the bucket count sized for the live tags and 1000
    // more, both of which the copy fills without splitting, so a new store
    // has exactly the target count.
    let fit = Geometry::sized(
        model.len() as u64,
        geo0.blocks_per_primary,
        geo0.blocks_per_secondary,
    );
    assert_ne!(fit.primary_buckets_per_half, geo0.primary_buckets_per_half);
    let other = |g: Geometry| {
        if g.primary_buckets_per_half == fit.primary_buckets_per_half {
            fit.primary_buckets_per_half + 1000
        } else {
            fit.primary_buckets_per_half
        }
    };
    let run_args = |args: &[&str]| {
        Command::new(BIN)
            .args(["maintain", &path_s])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn maintain")
    };
    let run = |target: u32| run_args(&["--primary-buckets", &target.to_string()]);
    let tmp = temp_path(&path);
    let started = Instant::now();
    let mut child = run(other(geo0));
    let appeared = wait_for_new_file(&tmp, None, &mut child).map(|_| started.elapsed());
    let mut renamed = None;
    let status = loop {
        if renamed.is_none() && !tmp.exists() {
            renamed = Some(started.elapsed());
        }
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let full = started.elapsed();
    assert!(status.success(), "complete run: {status:?}");
    let appeared = appeared.expect("the run never created its temporary file");
    let renamed = renamed.expect("the temporary file was never renamed");
    // The copy: from the temporary file's creation to its rename.
    let copy = renamed.saturating_sub(appeared);
    let mut current = verify("complete run");
    assert_eq!(current.primary_buckets_per_half, other(geo0));

    // Kill 0 lands at a random moment before the copy starts; the others at
    // stratified random moments from the start of the copy to 1.3 x its
    // measured length after it, so they fall before, around and after the rename.
    let kills = 7u32;
    let (mut old_side, mut new_side, mut mid_copy) = (0, 0, 0);
    for k in 0..kills {
        let target = other(current);
        let stale = file_id(&tmp);
        let mut child = run(target);
        let t0 = Instant::now();
        let delay = if k == 0 {
            std::thread::sleep(appeared.mul_f64(rng.below(1000) as f64 / 1000.0));
            t0.elapsed()
        } else {
            let frac = ((k - 1) as f64 + rng.below(1000) as f64 / 1000.0) / (kills - 1) as f64;
            if wait_for_new_file(&tmp, stale, &mut child).is_some() {
                std::thread::sleep(copy.mul_f64(1.3 * frac));
            }
            t0.elapsed()
        };
        child.kill().expect("kill");
        let status = child.wait().expect("wait");
        let left = tmp.exists();
        let what = format!("kill {k} after {delay:?} ({status:?})");
        let geo = verify(&what);
        let new = geo.primary_buckets_per_half == target;
        if new {
            new_side += 1;
        } else {
            assert_eq!(geo, current, "{what}: neither the old nor the new geometry");
            old_side += 1;
            mid_copy += left as u32;
        }
        if status.signal().is_none() {
            assert!(status.success(), "{what}: maintain failed");
            assert!(new, "{what}: a finished run left the old geometry");
        }
        current = geo;
        eprintln!(
            "{what}: {} store, temporary file {}",
            if new { "new" } else { "old" },
            if left { "left" } else { "absent" }
        );
    }
    eprintln!(
        "complete run {full:?} (copy {appeared:?}..{renamed:?}); kills left the old store {old_side} times \
         ({mid_copy} mid-copy), the new one {new_side} times"
    );

    // A complete plain run (re-sized for the live tags) after the kills
    // replaces any leftover temporary file.
    let plain = planned(&path);
    let out = run_args(&[]).wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(!temp_path(&path).exists());
    assert_eq!(verify("final run"), plain);
    assert_eq!(read_only_stats(&path).holes, 0);
}

// ---------------------------------------------------------------------------
// 4. CLI

/// Parses the before/after table into row name -> (before, after).
fn parse_table(stdout: &str) -> BTreeMap<String, (u64, u64)> {
    let mut lines = stdout.lines();
    let head: Vec<&str> = lines
        .next()
        .expect("header line")
        .split_whitespace()
        .collect();
    assert_eq!(head, ["before", "after"], "header: {stdout}");
    let mut rows = BTreeMap::new();
    for l in lines {
        if l.starts_with("took ") {
            assert!(l.ends_with(" s"), "{l}");
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        assert!(f.len() >= 3, "row: {l:?}");
        let n = f.len();
        let parse = |s: &str| {
            s.parse::<u64>()
                .unwrap_or_else(|_| panic!("number in {l:?}"))
        };
        rows.insert(f[..n - 2].join(" "), (parse(f[n - 2]), parse(f[n - 1])));
    }
    rows
}

#[test]
fn cli_prints_table_and_json() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, model, keys) = holey_store(dir.path(), "cli.tags", 4000);
    let p = path.to_str().expect("utf-8");
    let pre = read_only_stats(&path);
    assert!(pre.holes > 0);
    let n = model.len() as u64;
    let sized_live = planned(&path);

    let out = cli(&["maintain", p]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let rows = parse_table(&stdout);
    let names: Vec<&str> = rows.keys().map(String::as_str).collect();
    let mut want = vec![
        "tags",
        "primary buckets",
        "linked secondary buckets",
        "holes",
        "longest chain",
        "file bytes",
        "allocated bytes",
    ];
    want.sort();
    assert_eq!(names, want, "rows: {stdout}");
    assert!(stdout.lines().last().expect("last").starts_with("took "));
    let now = read_only_stats(&path);
    assert_eq!(rows["tags"], (n, n));
    assert_eq!(
        rows["primary buckets"],
        (pre.primary_buckets, now.primary_buckets)
    );
    assert_eq!(rows["holes"], (pre.holes, 0));
    assert_eq!(
        rows["linked secondary buckets"],
        (pre.secondary_linked, now.secondary_linked)
    );
    assert_eq!(
        rows["longest chain"],
        (pre.longest_chain, now.longest_chain)
    );
    assert_eq!(rows["file bytes"], (pre.file_bytes, now.file_bytes));
    assert_eq!(
        rows["allocated bytes"],
        (pre.allocated_bytes, now.allocated_bytes)
    );
    // Plain maintain re-sizes for the live tags (the planned geometry).
    assert_eq!(
        now.geometry, sized_live,
        "plain maintain did not re-size for the live tags"
    );
    assert_dense(&now, &model, 11, &sized_live, "CLI maintain");

    // --json, re-hashing into more primary buckets.
    let more = pre.geometry.primary_buckets_per_half * 2 + 1;
    let out = cli(&[
        "maintain",
        p,
        "--json",
        "--primary-buckets",
        &more.to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(j["after"]["holes"], 0, "{j}");
    assert_eq!(j["before"]["tags"], n);
    assert_eq!(j["after"]["tags"], n);
    assert_eq!(j["after"]["secondary_free"], 0);
    assert_eq!(j["after"]["geometry"]["primary_buckets_per_half"], more);
    assert_eq!(
        j["after"]["geometry"]["blocks_per_primary"],
        sized_live.blocks_per_primary
    );
    assert_eq!(
        j["before"]["geometry"]["primary_buckets_per_half"],
        sized_live.primary_buckets_per_half
    );
    assert!(j["seconds"].as_f64().is_some_and(|s| s >= 0.0), "{j}");
    let now = read_only_stats(&path);
    assert_eq!(j["after"]["file_bytes"], now.file_bytes);
    assert_eq!(j["after"]["secondary_linked"], now.secondary_linked);

    // --keep-buckets keeps the bucket count (here the one just chosen).
    let out = cli(&["maintain", p, "--json", "--keep-buckets"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(j["before"]["geometry"]["primary_buckets_per_half"], more);
    assert_eq!(j["after"]["geometry"]["primary_buckets_per_half"], more);
    assert_eq!(j["after"]["holes"], 0, "{j}");
    assert_eq!(
        read_only_stats(&path).geometry.primary_buckets_per_half,
        more
    );

    // --expected-tags keeps the bucket sizes; bucket sizes alone re-size for
    // the live tags with the new sizes.
    let out = cli(&["maintain", p, "--json", "--expected-tags", "100000"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let g = Geometry::sized(
        100_000,
        sized_live.blocks_per_primary,
        sized_live.blocks_per_secondary,
    );
    assert_eq!(
        j["after"]["geometry"]["primary_buckets_per_half"],
        g.primary_buckets_per_half
    );
    assert_eq!(read_only_stats(&path).geometry, g);
    let want = planned_with(
        &path,
        &MaintainOptions {
            blocks_per_primary: Some(2),
            blocks_per_secondary: Some(3),
            ..Default::default()
        },
    );
    assert_eq!((want.blocks_per_primary, want.blocks_per_secondary), (2, 3));
    let out = cli(&[
        "maintain",
        p,
        "--json",
        "--blocks-per-primary",
        "2",
        "--blocks-per-secondary",
        "3",
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let now = read_only_stats(&path);
    assert_eq!(now.geometry, want);
    assert_dense(&now, &model, 11, &want, "CLI bucket sizes");
    open_matches_model(&path, &model, &keys, "after the CLI runs");
}

// ---------------------------------------------------------------------------
// Measurement (ignored): FIND latency through the library.

#[test]
#[ignore = "measurement: set TAGSTORE_BENCH_STORE to a large store"]
fn find_latency() {
    let _serial = serial();
    let path =
        PathBuf::from(std::env::var_os("TAGSTORE_BENCH_STORE").expect("set TAGSTORE_BENCH_STORE"));
    let s = Store::open_read_only(&path).expect("open");
    // A sample that does not depend on the layout: tags whose FNV-1a hash
    // falls in one residue class, sorted by that hash.
    let fnv = |t: &Tag| {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in [&t.object, &t.relationship, &t.subject]
            .iter()
            .flat_map(|x| x.bytes().chain([0]))
        {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    let every = (s.len() / 20_000).max(1);
    let mut sample: Vec<(u64, Tag)> = s
        .tags()
        .map(|t| t.expect("tag"))
        .filter_map(|t| {
            let h = fnv(&t);
            (h % every == 0).then_some((h, t))
        })
        .collect();
    sample.sort();
    sample.truncate(10_000);
    let time = |name: &str, f: &dyn Fn(&Tag) -> usize| {
        // One warm-up pass, then a timed one.
        for (_, t) in &sample {
            f(t);
        }
        let mut us: Vec<f64> = Vec::with_capacity(sample.len());
        let mut results = 0usize;
        for (_, t) in &sample {
            let t0 = Instant::now();
            results += f(t);
            us.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        us.sort_by(f64::total_cmp);
        let q = |p: f64| us[((us.len() - 1) as f64 * p) as usize];
        println!(
            "{name}: {} FINDs, p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, max {:.1} us, mean results {:.1}",
            us.len(),
            q(0.5),
            q(0.9),
            q(0.99),
            q(1.0),
            results as f64 / us.len() as f64
        );
    };
    time("FIND <object, rel, *>", &|t| {
        s.find_subjects(&t.object, &t.relationship)
            .try_fold(0usize, |n, r| r.map(|_| n + 1))
            .expect("find")
    });
    time("FIND <*, rel, subject> first 100", &|t| {
        s.find_objects(&t.subject, &t.relationship)
            .take(100)
            .try_fold(0usize, |n, r| r.map(|_| n + 1))
            .expect("find")
    });
    time("FIND <*, rel, subject> all", &|t| {
        s.find_objects(&t.subject, &t.relationship)
            .try_fold(0usize, |n, r| r.map(|_| n + 1))
            .expect("find")
    });
}
