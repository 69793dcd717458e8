//! Unclean shutdown and crash recovery.
//!
//! * Tags written before an `abandon()` (a process crash without clean
//!   shutdown) are all there after reopening, and the store reports
//!   `recovered_on_open()`; a clean close does not.
//! * A stale table image from an earlier clean close is never trusted after
//!   a later unclean shutdown.
//! * A crash injected at each write step of an INSERT and of a DELETE
//!   (`fail_after_writes(Some(n))`, n = 0 intent, 1 object half, 2 subject
//!   half, 3 clearing the intent) leaves the tag wholly present or wholly
//!   absent after reopening: present exactly when the INSERT's intent record
//!   was written (n >= 1), absent exactly when the DELETE's was. The slot may
//!   be in a primary bucket, in a secondary bucket being linked by this very
//!   write, or in a hole of an existing secondary bucket.
//! * After recovery the store is fully usable and `check()` is clean.

mod common;

use common::crash::{assert_exactly, numbered, whole};
use std::collections::BTreeSet;
use std::path::Path;
use tagstore::{CreateOptions, Error, Store, Tag};

/// Options for a small store of `primary` one-block primary buckets per
/// half (one-block secondary buckets), hashed with `seed`.
fn opts(primary: u32, seed: u64) -> CreateOptions {
    CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(primary),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(seed),
    }
}

/// Abandons `store` (an unclean shutdown) and reopens it, asserting the
/// open noticed and recovered.
fn reopen_unclean(store: Store, path: &Path) -> Store {
    store.abandon();
    let s = Store::open(path).expect("reopen after abandon");
    assert!(s.recovered_on_open(), "unclean shutdown not noticed");
    s
}

/// Creates a store at `path` with `opts` (asserting it is not marked
/// recovered) and inserts `tags` one call each, every one new; returns the
/// store and the set of tags it holds.
fn populated(path: &Path, opts: &CreateOptions, tags: Vec<Tag>) -> (Store, BTreeSet<Tag>) {
    let store = Store::create_format1(path, opts).expect("create");
    assert!(!store.recovered_on_open(), "a new store marked recovered");
    for t in &tags {
        assert!(store.insert(t).expect("insert"), "{t:?} was already there");
    }
    (store, tags.into_iter().collect())
}

#[test]
fn abandon_keeps_every_insert_and_delete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("r.tags");
    let all = numbered("obj", "isa", "subj", 7, 0..300);
    let (store, mut want) = populated(&path, &opts(3, 11), all.clone());
    for t in all.iter().step_by(5) {
        assert!(store.delete(t).expect("delete"));
        want.remove(t);
    }
    assert!(
        store.stats().expect("stats").secondary_linked > 0,
        "test should reach secondary buckets"
    );
    let store = reopen_unclean(store, &path);
    assert_exactly(&store, &want, "after abandon");
    store.close().expect("close");
    let store = Store::open(&path).expect("clean reopen");
    assert!(
        !store.recovered_on_open(),
        "clean close reported as unclean"
    );
    assert_exactly(&store, &want, "after clean close");
    // Dropping the handle shuts down cleanly too.
    drop(store);
    let store = Store::open(&path).expect("reopen after drop");
    assert!(!store.recovered_on_open(), "drop did not shut down cleanly");
    assert_exactly(&store, &want, "after drop");
}

#[test]
fn stale_table_image_is_not_trusted_after_a_later_crash() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stale.tags");
    let all = numbered("a", "r", "hot", 0, 0..200);
    let (store, mut want) = populated(&path, &opts(2, 12), all[..80].to_vec());
    store.close().expect("close");
    // Second session: the persisted tables go stale with these writes.
    let store = Store::open(&path).expect("open");
    assert!(!store.recovered_on_open());
    for t in &all[80..] {
        store.insert(t).expect("insert");
        want.insert(t.clone());
    }
    for t in &all[..40] {
        store.delete(t).expect("delete");
        want.remove(t);
    }
    let store = reopen_unclean(store, &path);
    assert_exactly(&store, &want, "after crash following a clean session");
    // And once more without any write in between.
    let store = reopen_unclean(store, &path);
    assert_exactly(&store, &want, "after a second abandon");
}

#[test]
fn read_only_open_recovers_an_unclean_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ro.tags");
    let (store, want) = populated(&path, &opts(1, 13), numbered("o", "isa", "s", 3, 0..60));
    // Crash in the middle of an insert (intent and object half written).
    let t = Tag::new("inflight", "isa", "s0");
    store.fail_after_writes(Some(2));
    assert!(store.insert(&t).is_err());
    store.abandon();
    let image = std::fs::read(&path).expect("read");
    {
        let ro = Store::open_read_only(&path).expect("open_read_only");
        assert!(
            whole(&ro, &t, "read-only open after crash"),
            "insert with its intent record written must be completed"
        );
        let mut with = want.clone();
        with.insert(t.clone());
        assert_exactly(&ro, &with, "read-only open after crash");
        assert!(matches!(ro.insert(&t), Err(Error::ReadOnly)));
    }
    // Recovery in memory: the read-only open wrote nothing.
    assert_eq!(
        std::fs::read(&path).expect("read"),
        image,
        "a read-only open must not change the store file"
    );
    let store = Store::open(&path).expect("open");
    assert!(
        store.recovered_on_open(),
        "the store stays unclean until a writable open recovers it"
    );
    assert!(whole(&store, &t, "writable open after crash"));
}

/// Where the crashing operation's slots lie.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// Both halves write into a primary bucket with room.
    Primary,
    /// Both halves' buckets are full: the write links a new secondary bucket
    /// (and grows the file) in each half.
    NewSecondary,
    /// Both halves write into a hole left by a DELETE in a linked secondary bucket.
    SecondaryHole,
    /// Object half in a primary bucket, subject half in a secondary bucket.
    Mixed,
}

const PLACES: [Place; 4] = [
    Place::Primary,
    Place::NewSecondary,
    Place::SecondaryHole,
    Place::Mixed,
];

/// A populated store and the tag the scenario will insert (absent) or delete (present).
fn setup(path: &Path, place: Place, insert: bool) -> (Store, BTreeSet<Tag>, Tag) {
    let mut want = BTreeSet::new();
    let (store, target) = match place {
        Place::Primary | Place::NewSecondary | Place::SecondaryHole => {
            // One bucket per half: every tag lands in the same chain, in
            // insertion order, in both halves.
            let store = Store::create_format1(path, &opts(1, 21)).expect("create");
            let n = match (place, insert) {
                (Place::Primary, true) => 10,
                (Place::Primary, false) => 11,
                (Place::NewSecondary, true) => 25,
                (Place::NewSecondary, false) => 26,
                _ => 35,
            };
            let tags: Vec<Tag> = (0..n)
                .map(|i| Tag::new(format!("p{i}"), "isa", format!("q{}", i % 4)))
                .collect();
            let (out, r) = store.insert_batch(&tags);
            r.expect("populate");
            assert_eq!(out.changed, n);
            want.extend(tags.iter().cloned());
            let target = match (place, insert) {
                (Place::Primary, true) => Tag::new("new", "isa", "q1"),
                (Place::Primary, false) => tags[10].clone(),
                (Place::NewSecondary, true) => Tag::new("new", "isa", "q1"),
                // The only tag of the first secondary bucket.
                (Place::NewSecondary, false) => tags[25].clone(),
                (_, true) => {
                    // Punch a hole in the first secondary bucket (slot 3).
                    assert!(store.delete(&tags[28]).expect("delete"));
                    want.remove(&tags[28]);
                    Tag::new("new", "isa", "q1")
                }
                (_, false) => tags[30].clone(),
            };
            (store, target)
        }
        Place::Mixed => {
            // "hot" overflows its subject-half bucket; the objects spread
            // over eight object-half buckets and stay in primary buckets.
            let store = Store::create_format1(path, &opts(8, 22)).expect("create");
            let tags: Vec<Tag> = (0..40)
                .map(|i| Tag::new(format!("m{i}"), "isa", "hot"))
                .collect();
            store.insert_batch(&tags).1.expect("populate");
            want.extend(tags.iter().cloned());
            let target = if insert {
                Tag::new("m40", "isa", "hot")
            } else {
                tags[35].clone()
            };
            (store, target)
        }
    };
    assert_eq!(
        store.contains(&target).expect("contains"),
        !insert,
        "scenario setup"
    );
    let st = store.stats().expect("stats");
    match place {
        Place::Primary => assert_eq!(st.secondary_linked, 0, "{place:?} setup"),
        Place::NewSecondary if insert => assert_eq!(st.secondary_linked, 0, "{place:?} setup"),
        Place::Mixed => assert_eq!(st.secondary_linked, 1, "{place:?} setup"),
        _ => assert_eq!(st.secondary_linked, 2, "{place:?} setup"),
    }
    (store, want, target)
}

/// Crashes an INSERT (`insert`) or DELETE at `place` after `n` writes, then
/// checks recovery and that the store stays usable.
fn crash_scenario(place: Place, insert: bool, n: u64) {
    let what = format!(
        "{} at {place:?}, crash after {n} writes",
        if insert { "insert" } else { "delete" }
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("crash.tags");
    let (store, mut want, target) = setup(&path, place, insert);
    let linked_before = store.stats().expect("stats").secondary_linked;
    store.fail_after_writes(Some(n));
    let r = if insert {
        store.insert(&target)
    } else {
        store.delete(&target)
    };
    if n < 4 {
        assert!(
            matches!(r, Err(Error::Io { .. })),
            "{what}: expected an injected I/O error, got {r:?}"
        );
        assert!(
            store.insert(&Tag::new("after", "crash", "x")).is_err(),
            "{what}: a poisoned store accepted a write"
        );
    } else {
        assert!(
            matches!(r, Ok(true)),
            "{what}: four writes suffice, got {r:?}"
        );
    }
    let store = reopen_unclean(store, &path);
    let present = whole(&store, &target, &what);
    // The intent record is written first: once it is, recovery completes the
    // operation; before it, nothing changed.
    let expect_present = if insert { n >= 1 } else { n == 0 };
    assert_eq!(
        present, expect_present,
        "{what}: outcome of the in-flight tag"
    );
    if present {
        want.insert(target.clone());
    } else {
        want.remove(&target);
    }
    assert_exactly(&store, &want, &what);
    let st = store.stats().expect("stats");
    let linked_after = if matches!(place, Place::NewSecondary) && insert && n >= 1 {
        // The recovered insert linked one bucket per half.
        linked_before + 2
    } else {
        linked_before
    };
    assert_eq!(st.secondary_linked, linked_after, "{what}: linked buckets");

    // The recovered store keeps working: redo the operation, more writes,
    // another unclean and a clean reopen.
    if insert {
        assert_eq!(store.insert(&target).expect("insert"), !present, "{what}");
        want.insert(target.clone());
    } else {
        assert_eq!(store.delete(&target).expect("delete"), present, "{what}");
        want.remove(&target);
    }
    for i in 0..60 {
        let t = Tag::new(format!("later{i}"), "isa", format!("q{}", i % 3));
        assert!(store.insert(&t).expect("insert"), "{what}");
        want.insert(t);
    }
    let first = want.iter().next().expect("non-empty").clone();
    assert!(store.delete(&first).expect("delete"));
    want.remove(&first);
    assert_exactly(&store, &want, &format!("{what}, then more writes"));
    let store = reopen_unclean(store, &path);
    assert_exactly(&store, &want, &format!("{what}, then a second crash"));
    store.close().expect("close");
    let store = Store::open(&path).expect("open");
    assert!(!store.recovered_on_open());
    assert_exactly(&store, &want, &format!("{what}, then a clean close"));
}

#[test]
fn crash_at_each_insert_step() {
    for place in PLACES {
        for n in 0..=4 {
            crash_scenario(place, true, n);
        }
    }
}

#[test]
fn crash_at_each_delete_step() {
    for place in PLACES {
        for n in 0..=4 {
            crash_scenario(place, false, n);
        }
    }
}

#[test]
fn crash_in_the_middle_of_a_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("batch.tags");
    let store = Store::create_format1(&path, &opts(2, 31)).expect("create");
    let tags: Vec<Tag> = (0..50)
        .map(|i| Tag::new(format!("b{i}"), "in", format!("set{}", i % 2)))
        .collect();
    // 4 writes per insert: 10 tags complete, the 11th stops after its
    // intent and object half.
    store.fail_after_writes(Some(42));
    let (out, r) = store.insert_batch(&tags);
    assert!(r.is_err(), "batch should hit the injected crash");
    assert_eq!(out.changed, 10, "tags completed before the crash");
    let store = reopen_unclean(store, &path);
    let want: BTreeSet<Tag> = tags[..11].iter().cloned().collect();
    assert!(whole(&store, &tags[10], "batch crash"));
    assert_exactly(&store, &want, "batch crash");
}

/// Rewrites the superblock as it stood before `close()` wrote it: clean flag
/// clear and no table image recorded (secondary count, tag count, table
/// offset, length and CRC as `create` wrote them), fixing its CRC.
fn unmark_clean(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read store file");
    bytes[32..36].fill(0); // secondary bucket count
    bytes[36..40].fill(0); // flags
    bytes[48..76].fill(0); // tag count, table offset, table length, table CRC
    let crc = crc32fast::hash(&bytes[..4092]);
    bytes[4092..4096].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, &bytes).expect("write store file");
}

/// A process killed inside `close()` after the table image was written
/// after the last secondary bucket but before the superblock was marked
/// clean leaves: clean flag clear, table image still at the end of the file.
/// The next open must rebuild from the blocks and not mistake the image for
/// secondary buckets.
#[test]
fn kill_during_close_after_table_image_before_superblock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("close.tags");
    // Enough primary buckets that the table image spans several blocks.
    let (store, want) = populated(
        &path,
        &opts(1000, 41),
        numbered("o", "isa", "peak", 0, 0..200),
    );
    let linked = store.stats().expect("stats").secondary_linked;
    assert!(linked > 0);
    store.close().expect("close");
    let bytes = std::fs::read(&path).expect("read");
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let (table_offset, table_len) = (word(56), word(64));
    assert_eq!(
        table_offset + table_len,
        bytes.len() as u64,
        "the table image should end the file"
    );
    assert!(
        table_len >= 4096,
        "the table image ({table_len} bytes) should span at least one secondary bucket"
    );
    unmark_clean(&path);
    let store = Store::open(&path).expect("open after a kill inside close()");
    assert!(store.recovered_on_open());
    assert_exactly(&store, &want, "after a kill inside close()");
    assert_eq!(store.stats().expect("stats").secondary_linked, linked);
}

/// A kill in the middle of writing a slot through the map leaves the slot
/// bytes written but the block's bitmap, fingerprints and CRC stale. The
/// intent record's redo must repair the block.
#[test]
fn torn_slot_write_is_repaired_by_the_intent_redo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("torn.tags");
    let (store, mut want) = populated(&path, &opts(4, 51), numbered("o", "isa", "s", 5, 0..30));
    let t = Tag::new("torn", "isa", "s1");
    store.fail_after_writes(Some(1)); // intent record only
    assert!(store.insert(&t).is_err());
    store.abandon();
    // Copy the slot image into the object-half slot named by the intent
    // record, as a kill between the slot copy and the header update would.
    let mut bytes = std::fs::read(&path).expect("read");
    let intent = &bytes[4096..4096 + 216];
    assert_eq!(&intent[4..8], b"INTN", "intent record should be pending");
    let block = u64::from_le_bytes(intent[16..24].try_into().expect("8 bytes")) as usize;
    let slot = u32::from_le_bytes(intent[24..28].try_into().expect("4 bytes")) as usize;
    let image: Vec<u8> = intent[56..216].to_vec();
    let at = block * 4096 + 96 + 160 * slot;
    bytes[at..at + 160].copy_from_slice(&image);
    std::fs::write(&path, &bytes).expect("write");
    let store = Store::open(&path).expect("open repairs the torn block");
    assert!(store.recovered_on_open());
    assert!(whole(&store, &t, "torn write"), "insert must be completed");
    want.insert(t);
    assert_exactly(&store, &want, "after repairing a torn slot");
}
