//! Micro-benchmarks of tagstore's hot paths: key hashing, slot encode/decode,
//! the fingerprint scan of a block, block checksums (full and updated in
//! place), one INSERT and one small FIND in an open store.
//!
//! Run: `cargo bench --bench hot_paths` (see benches/README.md for results).
//! The machine these run on is shared and noisy: compare numbers from one run
//! with each other, not with another day's.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::hint::black_box;
use std::time::Duration;
use tagstore::testing::{bucket_of, decode, encode, key_fp, key_hash, tag_fp};
use tagstore::testing::{BlockMut, BlockRef, BLOCK_SIZE, KIND_PRIMARY, SLOTS_PER_BLOCK};
use tagstore::{CreateOptions, Half, Store, Tag};

const SEED: u64 = 0x7A65_7374_6F72_6521;

/// A realistic tag: a ~45-byte photo path, a short relationship, a subject.
fn sample_tag(i: usize) -> Tag {
    Tag::new(
        format!("photo/2024/07/trip-to-lisbon/IMG_{i:06}.jpg"),
        "isa",
        format!("sunset-beach-{i}"),
    )
}

/// A block with all 25 slots occupied, each by a different key, sealed.
fn full_block() -> Vec<u8> {
    let mut buf = vec![0u8; BLOCK_SIZE];
    let mut b = BlockMut(&mut buf);
    b.set_identity(KIND_PRIMARY, 0, 0);
    for i in 0..SLOTS_PER_BLOCK {
        let t = sample_tag(i);
        let s = encode(&t).expect("fits");
        let h = key_hash(SEED, Half::Object, &t.relationship, &t.object);
        b.put(i, &s, key_fp(h), tag_fp(SEED, &s));
    }
    b.seal();
    buf
}

fn codec(c: &mut Criterion) {
    let t = sample_tag(12_345);
    c.bench_function("key_hash (rel 3 B + object 44 B)", |b| {
        b.iter(|| {
            key_hash(
                black_box(SEED),
                Half::Object,
                black_box(&t.relationship),
                black_box(&t.object),
            )
        })
    });
    c.bench_function("key_hash + bucket_of", |b| {
        b.iter(|| {
            let h = key_hash(
                black_box(SEED),
                Half::Object,
                black_box(&t.relationship),
                black_box(&t.object),
            );
            bucket_of(h, black_box(20_000))
        })
    });
    c.bench_function("slot encode", |b| b.iter(|| encode(black_box(&t))));
    let slot = encode(&t).expect("fits");
    c.bench_function("slot decode", |b| {
        b.iter(|| decode(black_box(&slot[..])).map(|v| v.subject.len()))
    });
    c.bench_function("tag_fp (whole-tag fingerprint)", |b| {
        b.iter(|| tag_fp(black_box(SEED), black_box(&slot)))
    });
}

fn block(c: &mut Criterion) {
    let buf = full_block();
    let k = sample_tag(7);
    let fp = key_fp(key_hash(SEED, Half::Object, &k.relationship, &k.object));
    assert_eq!(BlockRef(&buf).matching(fp) & (1 << 7), 1 << 7);
    c.bench_function("BlockRef::matching, full block (25 slots)", |b| {
        b.iter(|| BlockRef(black_box(&buf)).matching(black_box(fp)))
    });
    c.bench_function("BlockRef::crc_ok, full block (4 KB)", |b| {
        b.iter(|| BlockRef(black_box(&buf)).crc_ok())
    });
    let zero = vec![0u8; BLOCK_SIZE];
    c.bench_function("BlockRef::crc_ok, never-written block", |b| {
        b.iter(|| BlockRef(black_box(&zero)).crc_ok())
    });
    let mut w = buf.clone();
    c.bench_function("BlockMut::seal (CRC of 4 KB)", |b| {
        b.iter(|| BlockMut(black_box(&mut w)).seal())
    });
    // DELETE then INSERT of one slot, with the CRC recomputed over the block
    // (before) or moved by the bytes that changed (what INSERT/DELETE do).
    let s = encode(&sample_tag(99)).expect("fits");
    c.bench_function("clear + put + seal of slot 12 (full CRC)", |b| {
        b.iter(|| {
            let mut m = BlockMut(black_box(&mut w));
            m.clear(12);
            m.put(12, &s, 7, 9);
            m.seal();
        })
    });
    assert!(BlockRef(&w).crc_ok());
    c.bench_function("clear_resealed + put_resealed of slot 12", |b| {
        b.iter(|| {
            let mut m = BlockMut(black_box(&mut w));
            m.clear_resealed(12);
            m.put_resealed(12, &s, 7, 9);
        })
    });
    assert!(BlockRef(&w).crc_ok());
}

fn store(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = CreateOptions {
        expected_tags: 2_000_000,
        seed: Some(SEED),
        ..Default::default()
    };
    let store = Store::create(dir.path().join("bench.tags"), &opts).expect("create");
    // 200,000 tags: 20,000 objects with 5 "isa" and 5 "owns" tags each.
    let preload: Vec<Tag> = (0..200_000)
        .map(|i| {
            Tag::new(
                format!("photo/2024/07/trip-to-lisbon/IMG_{:06}.jpg", i % 20_000),
                ["isa", "owns"][(i / 20_000) % 2],
                format!("subject-{}", i / 2),
            )
        })
        .collect();
    let (out, r) = store.insert_batch(&preload);
    r.expect("preload");
    assert_eq!(out.changed, preload.len() as u64);

    let probe = &preload[1_234];
    let expected = store
        .find_subjects(&probe.object, &probe.relationship)
        .count();
    assert_eq!(expected, 5);
    c.bench_function("FIND small key (5 results), open store", |b| {
        b.iter(|| {
            store
                .find_subjects(black_box(&probe.object), black_box(&probe.relationship))
                .filter_map(Result::ok)
                .count()
        })
    });
    c.bench_function("FIND small key (5 results) by visitor, open store", |b| {
        b.iter(|| {
            let mut bytes = 0usize;
            store
                .for_each_subject(
                    black_box(&probe.object),
                    black_box(&probe.relationship),
                    |s| bytes += s.len(),
                )
                .expect("find");
            bytes
        })
    });
    let rare = Tag::new("photo/none/IMG_000000.jpg", "isa", "nothing");
    c.bench_function("FIND absent key, open store", |b| {
        b.iter(|| {
            store
                .find_subjects(black_box(&rare.object), black_box(&rare.relationship))
                .count()
        })
    });
    c.bench_function("INSERT already-present tag (lookup only)", |b| {
        b.iter(|| store.insert(black_box(probe)).expect("insert"))
    });
    // Each iteration inserts a new tag (the store grows as criterion samples).
    let mut i = 0u64;
    c.bench_function("INSERT new tag, open store", |b| {
        b.iter_batched(
            || {
                i += 1;
                Tag::new(
                    format!("photo/2025/01/new/IMG_{i:08}.jpg"),
                    "isa",
                    format!("new-subject-{}", i % 50_000),
                )
            },
            |t| store.insert(&t).expect("insert"),
            BatchSize::SmallInput,
        )
    });
    store.close().expect("close");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = codec, block, store
}
criterion_main!(benches);
