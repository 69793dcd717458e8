//! Benchmarks of the tag-usage counters and the tag cloud (`src/counts.rs`):
//!
//! * `cloud(rel, 50)` on a store with 100,000 distinct subjects under one
//!   relationship (Zipf-like usage, 115,518 tags), counts already loaded; also
//!   `count(subject, rel)`, and (printed once) the first-use cost of loading
//!   those counts from `STORE.counts` and of rebuilding them from the tags;
//! * `merge_increments()` of one queued increment of 5,000 distinct
//!   (relationship, subject) keys into a collector already holding 100,000
//!   subjects (one record appended and fsynced per merge; the periodic
//!   compaction of the merge log into a new snapshot is included, amortised);
//! * `insert_batch` of 200,000 tags into a fresh store with counting on and
//!   with counting off (same data, same run), then an interleaved A/B
//!   measurement of the two printing their ratio, and the cost of `close()`
//!   in both cases (with counting on, close merges what is still pending).
//!
//! Run: `cargo bench --bench counts`. Files live in the system temp dir
//! (fsync cost depends on it). The machine is shared and noisy: compare
//! numbers from one run with each other.

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};
use tagstore::counts_path;
use tagstore::{CreateOptions, Increment, IncrementId, Store, Tag};

const SUBJECTS: usize = 100_000;
const MERGE_KEYS: usize = 5_000;
const INSERT_TAGS: usize = 200_000;

/// Objects per subject `i`: 1 + 2000 / (i + 1) (subject 0 most used).
fn zipf_tags() -> Vec<Tag> {
    let mut v = Vec::new();
    for i in 0..SUBJECTS {
        for j in 0..1 + 2000 / (i + 1) {
            v.push(Tag::new(
                format!("photo/{j:05}/{i:06}.jpg"),
                "isa",
                format!("subject-{i:06}"),
            ));
        }
    }
    v
}

fn fresh(path: &Path, expected: usize) -> Store {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(counts_path(path));
    Store::create(
        path,
        &CreateOptions {
            expected_tags: expected as u64,
            ..CreateOptions::default()
        },
    )
    .expect("create")
}

fn cloud_query(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cloud.tags");
    let tags = zipf_tags();
    let s = fresh(&path, tags.len());
    let (_, r) = s.insert_batch(&tags);
    r.expect("insert");
    s.close().expect("close");

    // One-off first-use costs.
    let s = Store::open(&path).expect("open");
    let t = Instant::now();
    let top = s.cloud("isa", 50).expect("cloud");
    let load = t.elapsed();
    drop(s);
    std::fs::remove_file(counts_path(&path)).expect("remove counts");
    let s = Store::open(&path).expect("open");
    let t = Instant::now();
    s.cloud("isa", 50).expect("cloud");
    let rebuild = t.elapsed();
    eprintln!(
        "{} tags, {SUBJECTS} subjects: first cloud() after open loads STORE.counts in {load:?}; \
         rebuilds from the tags in {rebuild:?}; top entry {:?} x{}",
        tags.len(),
        top[0].subject,
        top[0].count
    );
    assert_eq!(top.len(), 50);
    assert_eq!(top[0].count, 2001);

    c.bench_function("cloud(rel, 50), 100k subjects", |b| {
        b.iter(|| s.cloud(black_box("isa"), black_box(50)).expect("cloud"))
    });
    c.bench_function("count(subject, rel), 100k subjects", |b| {
        b.iter(|| {
            s.count(black_box("subject-054321"), black_box("isa"))
                .expect("count")
        })
    });
    s.close().expect("close");
}

fn merge(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("collector.tags");
    let s = fresh(&path, 1000);
    // The collector already holds 100k subjects (one big foreign increment).
    let base = Increment {
        id: IncrementId { writer: 1, seq: 0 },
        deltas: (0..SUBJECTS)
            .map(|i| ("isa".to_string(), format!("subject-{i:06}"), 3))
            .collect(),
    };
    assert!(s.submit_increment(base).expect("submit"));
    s.set_merge_threshold(usize::MAX).expect("threshold");
    let mut seq = 0u64;
    let mut window = 0usize;
    let mut next = move || {
        seq += 1;
        window = (window + 7_919) % SUBJECTS;
        let mut deltas: Vec<(String, String, i64)> = (0..MERGE_KEYS)
            .map(|k| {
                let i = (window + k * 19) % SUBJECTS;
                let d = if k % 2 == 0 { 1 } else { -1 };
                ("isa".to_string(), format!("subject-{i:06}"), d)
            })
            .collect();
        deltas.sort_unstable();
        Increment {
            id: IncrementId { writer: 2, seq },
            deltas,
        }
    };
    let mut each: Vec<Duration> = Vec::new();
    c.bench_function("merge_increments(), one increment of 5k keys", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                assert!(s.submit_increment(next()).expect("submit"));
                let t = Instant::now();
                let out = s.merge_increments().expect("merge");
                let d = t.elapsed();
                total += d;
                each.push(d);
                assert_eq!(out.merged, 1);
            }
            total
        })
    });
    each.sort();
    let pct = |p: usize| each[(each.len() - 1) * p / 100];
    eprintln!(
        "{} merges of 5k keys: p10 {:?}, median {:?}, p90 {:?}, p99 {:?}, max {:?} \
         (the slow tail is the merge log folded into a new snapshot); collector at version {}, \
         STORE.counts {} bytes",
        each.len(),
        pct(10),
        pct(50),
        pct(90),
        pct(99),
        pct(100),
        s.counts_version().expect("version"),
        std::fs::metadata(counts_path(&path)).map_or(0, |m| m.len())
    );
    s.close().expect("close");
}

/// 200k tags: 50k packages x 4 relationships, up to `subjects` distinct
/// subjects per relationship (skewed).
fn insert_data(subjects: u64) -> Vec<Tag> {
    let rels = ["depends_on", "isa", "in_section", "maintained_by"];
    (0..INSERT_TAGS)
        .map(|i| {
            let r = rels[i % 4];
            let p = i / 4;
            // Skewed: low subject numbers are much more common.
            let x = (p as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            let subj = (x * x / (1 << 24)) % subjects;
            Tag::new(format!("package-{p:06}"), r, format!("{r}-{subj:05}"))
        })
        .collect()
}

/// Inserts `tags` into a fresh store; returns (insert_batch time, close time).
fn load(path: &Path, tags: &[Tag], counting: bool) -> (Duration, Duration) {
    let s = fresh(path, tags.len());
    s.set_counting(counting);
    let t = Instant::now();
    let (out, r) = s.insert_batch(tags);
    let ins = t.elapsed();
    r.expect("insert");
    assert_eq!(out.changed, tags.len() as u64);
    let t = Instant::now();
    s.close().expect("close");
    (ins, t.elapsed())
}

fn insert_counting(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("insert.tags");
    let tags = insert_data(20_000);
    let mut g = c.benchmark_group("insert_batch 200k tags");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    for counting in [true, false] {
        let name = if counting {
            "counting on"
        } else {
            "counting off"
        };
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| load(&path, &tags, counting).0).sum())
        });
    }
    g.finish();

    ab(
        &path,
        &tags,
        6,
        "20k subjects/relationship (~80k distinct keys)",
    );
    ab(
        &path,
        &insert_data(2_000),
        4,
        "2k subjects/relationship (~8k distinct keys, below the auto-merge)",
    );
}

/// Interleaved A/B of counting on and off: alternates the order so drift
/// hits both alike; prints medians and the on/off ratio.
fn ab(path: &Path, tags: &[Tag], rounds: usize, what: &str) {
    let mut ratios = Vec::new();
    let (mut on_ins, mut off_ins, mut on_close, mut off_close) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        let mut pair = [Duration::ZERO; 2];
        for counting in order {
            let (ins, close) = load(path, tags, counting);
            if counting {
                pair[0] = ins;
                on_ins.push(ins);
                on_close.push(close);
            } else {
                pair[1] = ins;
                off_ins.push(ins);
                off_close.push(close);
            }
        }
        ratios.push(pair[0].as_secs_f64() / pair[1].as_secs_f64());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    let ms = |v: &[Duration]| {
        let mut x: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        median(&mut x)
    };
    eprintln!(
        "interleaved A/B, {rounds} rounds of 200k tags, {what}: insert_batch median {:.1} ms counting on, \
         {:.1} ms counting off; ratio on/off median {:.3} (each round: {:?}); close median \
         {:.1} ms on, {:.1} ms off",
        ms(&on_ins),
        ms(&off_ins),
        median(&mut ratios.clone()),
        ratios
            .iter()
            .map(|r| (r * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>(),
        ms(&on_close),
        ms(&off_close),
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = cloud_query, merge, insert_counting
}
criterion_main!(benches);
