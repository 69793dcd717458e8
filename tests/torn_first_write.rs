//! A kill in the middle of a block's *first* write, in mapped (`None`) mode.
//!
//! Regression test for a store that would not open after `kill -9`:
//! `Corrupt: block N: header does not match primary bucket G` from the
//! table rebuild (seen about twice in 80 runs of `sigkill_none_mode` with
//! two test binaries running at once). The first write of a never-written
//! block stores its identity (kind, owner, chain position), then the slot,
//! then the checksum. The kill had landed after the kind byte and before
//! the owner: the block held `0xB1` at byte 4 and zeros everywhere else,
//! in the first block of the bucket a split was moving tags into. Recovery
//! then trusted that half-written identity: the split repair (and, for an
//! INSERT, the intent redo) resealed the block with owner 0, so its
//! checksum was valid and the rebuild rejected it.
//!
//! The test finds every write of a workload that is a block's first write
//! (inserts crossing several splits, which write the new buckets' blocks,
//! link secondary buckets and refill primary buckets): write `k` is one
//! when the file after `k + 1` writes holds a block that was all zeros
//! after `k` writes. It then builds the file a kill inside that write
//! leaves (the `k`-write file plus some of the bytes the write stores: the
//! kind byte alone, the owner and position alone, or the whole identity
//! with no slot and no checksum), opens it and checks that no tag is lost,
//! duplicated or torn and that `check()` is clean.

mod common;

use common::crash::{assert_check_ok, small_split_store, split_inserts_crashing_at, whole};
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use tagstore::{Store, Tag};

const BLOCK: usize = 4096;

const BASE: usize = 300;
const MORE: usize = 160;

/// Opens a crashed file and checks it holds `acked`, the in-flight tag
/// whole or not at all, nothing else and nothing twice.
fn verify(path: &Path, acked: &BTreeSet<Tag>, in_flight: &Tag, when: &str) {
    let s = Store::open(path).unwrap_or_else(|e| panic!("{when}: open: {e}"));
    let all: Vec<Tag> = s.tags().collect::<Result<_, _>>().expect("export");
    let got: BTreeSet<Tag> = all.iter().cloned().collect();
    assert_eq!(all.len(), got.len(), "{when}: a tag exported twice");
    let lost: Vec<&Tag> = acked.difference(&got).collect();
    assert!(lost.is_empty(), "{when}: acknowledged tags lost: {lost:?}");
    let extra: Vec<&Tag> = got.difference(acked).filter(|t| *t != in_flight).collect();
    assert!(extra.is_empty(), "{when}: tags never inserted: {extra:?}");
    whole(&s, in_flight, when);
    assert_eq!(s.len(), got.len() as u64, "{when}: len()");
    assert_check_ok(&s, when);
    s.abandon();
}

#[test]
fn a_kill_inside_the_first_write_of_a_block_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().join("base.tags");
    let buckets_before = small_split_store(&base, BASE, 0x70_12E);

    let (before, after) = (dir.path().join("k.tags"), dir.path().join("k1.tags"));
    let torn = dir.path().join("torn.tags");
    let (mut first_writes, mut in_splits) = (0, 0);
    let mut k = 0u64;
    loop {
        let (acked, in_flight) = split_inserts_crashing_at(&base, &before, k, BASE..BASE + MORE);
        let Some(in_flight) = in_flight else {
            assert!(k > 0, "no write was ever made");
            break;
        };
        split_inserts_crashing_at(&base, &after, k + 1, BASE..BASE + MORE);
        let (old, new) = (
            fs::read(&before).expect("read"),
            fs::read(&after).expect("read"),
        );
        // Blocks 0 and 1 are the superblock and the intent record.
        for b in 2..old.len().min(new.len()) / BLOCK {
            let (o, n) = (&old[b * BLOCK..][..BLOCK], &new[b * BLOCK..][..BLOCK]);
            if o.iter().any(|&x| x != 0) || n.iter().all(|&x| x == 0) {
                continue;
            }
            // Write k is block b's first write: kill it part way.
            first_writes += 1;
            let split = old[BLOCK + 8] == 3;
            if split {
                in_splits += 1;
            }
            for (what, bytes) in [
                ("kind byte only", 4..5),
                ("owner and position only", 10..18),
                ("identity, no slot, no checksum", 4..18),
            ] {
                let mut img = old.clone();
                img[b * BLOCK..][bytes.clone()].copy_from_slice(&n[bytes]);
                fs::write(&torn, &img).expect("write torn file");
                let when = format!(
                    "write {k}, the first of block {b} ({}): {what}",
                    if split { "in a split" } else { "in an insert" }
                );
                verify(&torn, &acked, &in_flight, &when);
            }
        }
        k += 1;
    }
    let s = Store::open(&after).expect("open the last copy");
    assert!(
        s.stats().expect("stats").primary_buckets > buckets_before,
        "the inserts must cross splits"
    );
    s.abandon();
    assert!(
        in_splits >= 5 && first_writes > in_splits,
        "too few first writes: {first_writes}, {in_splits} in splits"
    );
    eprintln!("{first_writes} first writes of a block killed part way, {in_splits} in splits");
}
