//! `Store::open_salvage` and `tagstore export --salvage`: a damaged store
//! gives back every tag with a readable half.
//!
//! Regression: one block failing its checksum made `export` print nothing
//! (it stopped at that block), and after an unclean close no open at all
//! succeeded (the table rebuild met the block), although double tagging
//! keeps every tag in two buckets. A single damaged block holds one half of
//! a tag at most, so a salvage must return exactly the stored tags.

mod common;

use common::crash::{small_split_store, split_inserts_crashing_at};
use common::edge::{build_store, cli, one_block_buckets, serial};
use std::collections::BTreeSet;
use std::path::Path;
use tagstore::{OpenOptions, Store, Tag};

const BLOCK: usize = 4096;
/// Offset of a block's kind byte (DESIGN.md §3).
const HDR_KIND: usize = 4;
/// Kind bytes of a primary and a secondary bucket's block.
const KINDS: [u8; 2] = [0xB1, 0xB2];
/// Offset of a block's owner: the global primary bucket of its chain,
/// even in the object half (format 2).
const HDR_OWNER: usize = 10;
/// Where the slots of a block start.
const HEADER: usize = 96;

fn tag(i: u32) -> Tag {
    Tag::new(
        format!("obj{i}\u{e9}"),
        if i.is_multiple_of(3) { "likes" } else { "isa" },
        format!("sub{}", i % 37),
    )
}

/// The written bucket blocks of the store file, in file order.
fn bucket_blocks(path: &Path) -> Vec<usize> {
    let img = std::fs::read(path).expect("read the store");
    (2..img.len() / BLOCK)
        .filter(|&b| KINDS.contains(&img[b * BLOCK + HDR_KIND]))
        .collect()
}

/// True if block `b` of the store holds object halves.
fn in_object_half(path: &Path, b: usize) -> bool {
    let img = std::fs::read(path).expect("read the store");
    let o = b * BLOCK + HDR_OWNER;
    let owner = u32::from_le_bytes(img[o..o + 4].try_into().expect("four bytes"));
    owner.is_multiple_of(2)
}

/// Flips a byte in the first slot of each of `blocks`.
fn damage(path: &Path, blocks: &[usize]) {
    damage_at(path, blocks, HEADER + 5);
}

/// Flips the byte at offset `at` of each of `blocks`.
fn damage_at(path: &Path, blocks: &[usize], at: usize) {
    let mut img = std::fs::read(path).expect("read the store");
    for &b in blocks {
        img[b * BLOCK + at] ^= 0x5A;
    }
    std::fs::write(path, &img).expect("write the store");
}

/// A closed store of `n` tags with small buckets (chains of secondary
/// buckets), and its tags.
fn store(dir: &Path, n: u32) -> (std::path::PathBuf, BTreeSet<Tag>) {
    let path = dir.join("s.tags");
    let tags: BTreeSet<Tag> = (0..n).map(tag).collect();
    build_store(&path, &one_block_buckets(u64::from(n), 8, 11), &tags);
    (path, tags)
}

/// The salvage's tags (each once: asserted), how many came from the
/// subject half, and the damaged blocks.
fn salvaged(path: &Path) -> (BTreeSet<Tag>, u64, Vec<u64>) {
    let (all, from_subject, bad) = salvaged_all(path);
    let got: BTreeSet<Tag> = all.iter().cloned().collect();
    assert_eq!(got.len(), all.len(), "the salvage returned a tag twice");
    (got, from_subject, bad)
}

/// The salvage's tags as returned (a store left in a split may repeat one).
fn salvaged_all(path: &Path) -> (Vec<Tag>, u64, Vec<u64>) {
    let s = Store::open_salvage(path, &OpenOptions::default()).expect("salvage open");
    let mut it = s.salvaged_tags();
    let all: Vec<Tag> = (&mut it).map(|t| t.expect("salvaged tag")).collect();
    let from_subject = it.from_subject_half();
    drop(it);
    (all, from_subject, s.unreadable_blocks())
}

/// Every single damaged bucket block, after a clean close: the plain
/// export fails, the salvage returns every tag and names the block.
#[test]
fn one_damaged_block_loses_no_tag() {
    let dir = tempfile::tempdir().expect("test setup");
    let (path, tags) = store(dir.path(), 1500);
    let clean = std::fs::read(&path).expect("read the store");
    let blocks = bucket_blocks(&path);
    assert!(
        blocks.len() > 20,
        "a store of many blocks: {}",
        blocks.len()
    );
    let (mut recovered, mut halves) = (0, [0, 0]);
    for &b in blocks.iter().step_by(blocks.len() / 12) {
        std::fs::write(&path, &clean).expect("restore the store");
        let object = in_object_half(&path, b);
        halves[usize::from(object)] += 1;
        damage(&path, &[b]);
        let plain = Store::open_read_only(&path).expect("the clean close's tables open");
        // The plain export reads the object half alone.
        let all: Result<Vec<Tag>, _> = plain.tags().collect();
        assert_eq!(all.is_err(), object, "block {b}: the plain export");
        drop(plain);
        let (got, from_subject, bad) = salvaged(&path);
        assert_eq!(bad, vec![b as u64], "block {b}: the unreadable blocks");
        assert_eq!(got.len(), tags.len(), "block {b}: tags salvaged");
        assert!(
            got == tags,
            "block {b}: the salvage differs from the tags stored"
        );
        recovered += from_subject;
    }
    assert!(recovered > 0, "no tag ever came from its subject half");
    assert!(
        halves[0] > 0 && halves[1] > 0,
        "both halves damaged in turn: {halves:?}"
    );
}

/// A damaged block is read for what of it is sound: with only its
/// checksum hit every slot is kept (no tag needs its other half); with a
/// slot's bytes hit, that slot alone is left out.
#[test]
fn a_damaged_block_keeps_its_sound_slots() {
    let dir = tempfile::tempdir().expect("test setup");
    let (path, tags) = store(dir.path(), 1500);
    let clean = std::fs::read(&path).expect("read the store");
    let blocks = bucket_blocks(&path);
    let b = blocks
        .iter()
        .copied()
        .find(|&b| b > blocks.len() / 2 && in_object_half(&path, b))
        .expect("a block of the object half");
    damage_at(&path, &[b], 1); // the checksum's second byte
    let (got, from_subject, bad) = salvaged(&path);
    assert_eq!(bad, vec![b as u64], "the damaged block is listed");
    assert!(got == tags, "the salvage differs from the tags stored");
    assert_eq!(from_subject, 0, "every slot of the block was kept");
    std::fs::write(&path, &clean).expect("restore the store");
    damage(&path, &[b]); // the first slot's bytes
    let (got, from_subject, _) = salvaged(&path);
    assert!(got == tags, "the salvage differs from the tags stored");
    assert_eq!(
        from_subject, 1,
        "the damaged slot's tag came from its subject half"
    );
}

/// After an unclean close no plain open succeeds (the rebuild of the
/// tables meets the block); the salvage still returns every tag.
#[test]
fn an_unclean_store_with_a_damaged_block_is_salvaged() {
    let dir = tempfile::tempdir().expect("test setup");
    let (path, mut tags) = store(dir.path(), 1200);
    let s = Store::open(&path).expect("reopen");
    for i in 5000..5100 {
        assert!(s.insert(&tag(i)).expect("insert"));
        tags.insert(tag(i));
    }
    s.abandon();
    let blocks = bucket_blocks(&path);
    let b = blocks[blocks.len() / 2];
    damage(&path, &[b]);
    let e = Store::open_read_only(&path)
        .err()
        .expect("a plain open of the damaged store");
    assert!(
        e.to_string().contains(&format!("block {b}")),
        "names the block: {e}"
    );
    let (got, _, bad) = salvaged(&path);
    assert_eq!(bad, vec![b as u64], "the unreadable blocks");
    assert!(got == tags, "the salvage differs from the tags stored");
    // The salvage wrote nothing: the plain open still fails the same way.
    assert!(
        Store::open_read_only(&path).is_err(),
        "the store was changed"
    );
    // `check` reports the failed open and still checks the blocks.
    let _serial = serial();
    let o = cli(&["check", path.to_str().expect("utf-8 path")]);
    assert_eq!(o.status.code(), Some(1), "check of a damaged store: {o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("fault: open: ") && out.contains(&format!("fault: block {b}: damaged")),
        "check names the failed open and the block: {out}"
    );
}

/// Damage in both halves of an unclean store (the tables rebuilt around
/// it): whatever is returned was stored, and at most the slots of the
/// damaged blocks are missing.
#[test]
fn many_damaged_blocks_lose_at_most_their_slots() {
    let dir = tempfile::tempdir().expect("test setup");
    let (path, tags) = store(dir.path(), 2000);
    Store::open(&path).expect("reopen").abandon();
    let blocks = bucket_blocks(&path);
    let picked: Vec<usize> = blocks.iter().copied().step_by(5).collect();
    damage(&path, &picked);
    let (got, _, bad) = salvaged(&path);
    let want: Vec<u64> = picked.iter().map(|&b| b as u64).collect();
    assert_eq!(bad, want, "the unreadable blocks");
    assert!(got.is_subset(&tags), "a salvaged tag was never stored");
    let lost = tags.len() - got.len();
    assert!(
        lost <= picked.len() * 25,
        "{lost} tags lost in {} blocks",
        picked.len()
    );
}

/// The CLI: `export --salvage` prints every tag and says on stderr what it
/// left out; a plain `export` fails naming the block.
#[test]
fn export_salvage_through_the_cli() {
    let _serial = serial();
    let dir = tempfile::tempdir().expect("test setup");
    let (path, tags) = store(dir.path(), 800);
    let blocks = bucket_blocks(&path);
    let b = blocks
        .iter()
        .copied()
        .find(|&b| b > blocks.len() / 3 && in_object_half(&path, b))
        .expect("a block of the object half");
    damage(&path, &[b]);
    let p = path.to_str().expect("utf-8 path");
    let plain = cli(&["export", p]);
    assert_eq!(
        plain.status.code(),
        Some(1),
        "a plain export of a damaged store"
    );
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(
        err.contains(&format!("block {b}")) && err.contains("export STORE --salvage"),
        "names the block and the way out: {err}"
    );
    let o = cli(&["export", p, "--salvage"]);
    assert_eq!(o.status.code(), Some(0), "export --salvage: {o:?}");
    let lines: BTreeSet<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let want: BTreeSet<String> = tags
        .iter()
        .map(|t| format!("{}\t{}\t{}", t.object, t.relationship, t.subject))
        .collect();
    assert!(
        lines == want,
        "export --salvage differs from the tags stored"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("salvaged {} tags", tags.len()))
            && err.contains(&format!(
                "1 damaged block, read for their sound slots only: {b}"
            )),
        "the summary: {err}"
    );
}

/// A split interrupted by a crash (mapped mode) and a damaged block: the
/// salvage reads the store as it lies and misses no acknowledged tag.
#[test]
fn a_store_left_in_a_split_with_a_damaged_block_is_salvaged() {
    let dir = tempfile::tempdir().expect("test setup");
    let base = dir.path().join("base.tags");
    small_split_store(&base, 400, 0x5A1);
    let mut cases = 0;
    for k in (0..400u64).step_by(7) {
        let path = dir.path().join("k.tags");
        let (acked, in_flight) = split_inserts_crashing_at(&base, &path, k, 400..520);
        // The intent record's operation (DESIGN.md §3.2: block 1, byte 8):
        // 3, a split in progress.
        if std::fs::read(&path).expect("read store")[4096 + 8] != 3 {
            continue;
        }
        cases += 1;
        let blocks = bucket_blocks(&path);
        let b = blocks[blocks.len() / 2];
        damage(&path, &[b]);
        // Listed too: the blocks the split had changed and not yet sealed.
        let (all, _, bad) = salvaged_all(&path);
        let got: BTreeSet<Tag> = all.into_iter().collect();
        assert!(
            bad.contains(&(b as u64)),
            "k={k}: the damaged blocks: {bad:?}"
        );
        let lost: Vec<&Tag> = acked.difference(&got).collect();
        assert!(lost.is_empty(), "k={k}: acknowledged tags lost: {lost:?}");
        let extra: Vec<&Tag> = got
            .difference(&acked)
            .filter(|t| Some(*t) != in_flight.as_ref())
            .collect();
        assert!(extra.is_empty(), "k={k}: tags never inserted: {extra:?}");
    }
    assert!(cases > 3, "too few crashes inside a split: {cases}");
}

/// A secondary block whose header's owner is hit: the identity of its
/// bucket's sound blocks wins, so they are read and only the damaged block
/// is listed (it no longer fits, and reads as empty); no tag is lost or
/// doubled.
#[test]
fn a_damaged_owner_does_not_take_its_bucket_along() {
    let dir = tempfile::tempdir().expect("test setup");
    let path = dir.path().join("s.tags");
    let tags: BTreeSet<Tag> = (0..1500).map(tag).collect();
    let opts = tagstore::CreateOptions {
        blocks_per_secondary: Some(4),
        ..one_block_buckets(1500, 4, 11)
    };
    build_store(&path, &opts, &tags);
    let img = std::fs::read(&path).expect("read the store");
    // Kind, owner and position.
    let id = |b: usize| {
        let h = &img[b * BLOCK..b * BLOCK + 18];
        (h[HDR_KIND], h[HDR_OWNER..18].to_vec())
    };
    // The first block of a secondary bucket with a second written block.
    let b = (3..img.len() / BLOCK - 1)
        .find(|&b| {
            img[b * BLOCK + HDR_KIND] == KINDS[1] && id(b + 1) == id(b) && id(b - 1) != id(b)
        })
        .expect("a secondary bucket of two written blocks");
    // Another owner of the same half, one that exists: the header still
    // fits the block's place, and the key fingerprints keep every slot.
    let mut img = img;
    img[b * BLOCK + HDR_OWNER] ^= 2;
    std::fs::write(&path, &img).expect("write the store");
    let (got, _, bad) = salvaged(&path);
    assert_eq!(bad, vec![b as u64], "only the damaged block is listed");
    assert!(got == tags, "the salvage differs from the tags stored");
}
