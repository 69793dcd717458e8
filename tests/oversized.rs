//! Oversized tags: since format 3 a tag longer than a slot holds its long
//! strings by reference (tests/long_tags.rs); what is refused is a string
//! longer than `MAX_STRING_BYTES` (65,536 bytes of UTF-8, counted in bytes,
//! not characters), with `TagTooLarge { needed, limit }` naming the longest
//! string's bytes and the limit, and nothing changes: not the tag count,
//! the file, the other tags, nor the store's usability. A tag of exactly
//! 160 encoded bytes is stored in its slot and found intact, also after
//! reopening. DELETE, `contains` and FIND with oversized input find nothing.

use proptest::prelude::*;
use std::collections::BTreeSet;
use tagstore::{CreateOptions, Error, Store, Tag, MAX_STRING_BYTES, MAX_TAG_BYTES, SLOT_SIZE};

/// A small store's options (2 primary buckets per half, 1-block buckets).
fn opts() -> CreateOptions {
    CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(2),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(160),
    }
}

/// The bytes of a tag's three strings, in UTF-8.
fn text_bytes(t: &Tag) -> usize {
    t.object.len() + t.relationship.len() + t.subject.len()
}

/// Bytes of a tag's longest string.
fn longest(t: &Tag) -> usize {
    t.object
        .len()
        .max(t.relationship.len())
        .max(t.subject.len())
}

/// Asserts that inserting `t` fails with the exact `TagTooLarge` and
/// that `contains` and `delete` find nothing.
fn assert_too_large(store: &Store, t: &Tag) {
    let needed = longest(t);
    match store.insert(t) {
        Err(Error::TagTooLarge { needed: n, limit }) => {
            assert_eq!(n, needed, "needed for {} text bytes", text_bytes(t));
            assert_eq!(limit, MAX_STRING_BYTES);
            let msg = Error::TagTooLarge { needed: n, limit }.to_string();
            assert!(
                msg.contains(&needed.to_string()) && msg.contains("65536"),
                "message should name both sizes: {msg}"
            );
        }
        other => {
            panic!("insert of a {needed}-byte tag should fail with TagTooLarge, got {other:?}")
        }
    }
    assert!(!store.contains(t).expect("contains"));
    assert!(!store.delete(t).expect("delete of an oversized tag"));
}

/// Asserts the store holds exactly `want`, each tag found both ways, and
/// that `check()` is clean; `when` says when.
fn assert_state(store: &Store, want: &BTreeSet<Tag>, when: &str) {
    assert_eq!(store.len(), want.len() as u64, "len() {when}");
    let got: BTreeSet<Tag> = store.tags().collect::<Result<_, _>>().expect("tags");
    assert_eq!(&got, want, "tags() {when}");
    for t in want {
        let subjects: Vec<String> = store
            .find_subjects(&t.object, &t.relationship)
            .collect::<Result<_, _>>()
            .expect("find_subjects");
        assert!(subjects.contains(&t.subject), "{when}: {t:?} by object");
        let objects: Vec<String> = store
            .find_objects(&t.subject, &t.relationship)
            .collect::<Result<_, _>>()
            .expect("find_objects");
        assert!(objects.contains(&t.object), "{when}: {t:?} by subject");
        assert!(store.contains(t).expect("contains"), "{when}: {t:?}");
    }
    let r = store.check().expect("check");
    assert!(r.ok(), "check() {when}: {:?}", r.faults);
}

#[test]
fn limits_are_what_the_format_says() {
    assert_eq!(SLOT_SIZE, 160);
    assert_eq!(MAX_TAG_BYTES, 156);
    assert_eq!(MAX_STRING_BYTES, 65_536);
    assert_eq!(Tag::new("ab", "é", "日").encoded_len(), 4 + 2 + 2 + 3);
}

#[test]
fn oversized_tags_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.tags");
    let store = Store::create(&path, &opts()).expect("create");
    let mut want = BTreeSet::new();
    for i in 0..40 {
        let t = Tag::new(format!("o{i}"), "isa", format!("s{}", i % 3));
        store.insert(&t).expect("insert");
        want.insert(t);
    }
    let before = store.stats().expect("stats");

    let m = MAX_STRING_BYTES;
    let oversized = [
        // One byte over, in each field.
        Tag::new("o".repeat(m + 1), "r", "s"),
        Tag::new("", "r".repeat(m + 1), ""),
        Tag::new("", "", "s".repeat(m + 1)),
        // 32,769 characters but 65,538 bytes: é is 2 bytes.
        Tag::new("é".repeat(32_769), "isa", "s"),
        // 16,385 four-byte characters: 65,540 bytes.
        Tag::new("o", "isa", "🌅".repeat(16_385)),
        // The longest string stored, its last "s" made a 2-byte "é".
        Tag::new("o".repeat(m - 1) + "é", "r", "s"),
        Tag::new("x".repeat(3 * m), "isa", "sunset"),
    ];
    for t in &oversized {
        assert!(longest(t) > MAX_STRING_BYTES, "{t:.80?}");
        assert_too_large(&store, t);
    }
    // FIND with a key longer than any storable key: nothing, no error.
    assert_eq!(store.find_subjects(&"o".repeat(m + 1), "").count(), 0);
    assert_eq!(store.find_objects(&"s".repeat(3 * m), "isa").count(), 0);

    // Batches stop at the oversized tag; tags before it stay inserted.
    let ok1 = Tag::new("batch-ok-1", "isa", "s0");
    let ok2 = Tag::new("batch-ok-2", "isa", "s0");
    let batch = [ok1.clone(), oversized[0].clone(), ok2.clone()];
    let (out, r) = store.insert_batch(&batch);
    assert!(
        matches!(
            r,
            Err(Error::TagTooLarge {
                needed: 65_537,
                limit: 65_536
            })
        ),
        "{r:?}"
    );
    assert_eq!((out.changed, out.unchanged), (1, 0));
    want.insert(ok1.clone());
    assert!(!store.contains(&ok2).expect("contains"));
    // A DELETE batch counts an oversized tag as absent and goes on.
    let (out, r) = store.delete_batch(&[oversized[1].clone(), ok1.clone()]);
    r.expect("delete_batch with an oversized tag");
    assert_eq!((out.changed, out.unchanged), (1, 1));
    want.remove(&ok1);

    let after = store.stats().expect("stats");
    assert_eq!(after.file_bytes, before.file_bytes, "file grew");
    assert_eq!(after.secondary_linked, before.secondary_linked);
    assert_state(&store, &want, "after refused inserts");

    // The store is not poisoned by the refusals.
    let t = Tag::new("still", "works", "fine");
    assert!(store.insert(&t).expect("insert after TagTooLarge"));
    want.insert(t);
    store.abandon();
    let store = Store::open(&path).expect("reopen");
    assert_state(&store, &want, "after unclean reopen");
}

#[test]
fn exactly_160_byte_tags_are_stored_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("exact.tags");
    let store = Store::create(&path, &opts()).expect("create");
    let exact = [
        Tag::new("o".repeat(150), "r", "sssss"),
        Tag::new("o".repeat(156), "", ""),
        Tag::new("", "r".repeat(156), ""),
        Tag::new("", "", "s".repeat(156)),
        // 150 + 1 + 4 + 1 bytes with 3- and 2-byte characters.
        Tag::new("日".repeat(50), "r", "éé\n"),
        // 4-byte characters, a tab and a newline: 36 + 3 + 117 = 156.
        Tag::new("🦀".repeat(9), "i\ta", format!("\n{}", "🌅".repeat(29))),
    ];
    let mut want = BTreeSet::new();
    for t in &exact {
        assert_eq!(t.encoded_len(), 160, "{t:?}");
        assert_eq!(text_bytes(t), MAX_TAG_BYTES);
        assert!(store.insert(t).expect("a 160-byte tag fits"));
        assert!(!store.insert(t).expect("second insert"));
        want.insert(t.clone());
    }
    assert_state(&store, &want, "after inserting 160-byte tags");
    store.close().expect("close");
    let store = Store::open(&path).expect("open");
    assert_state(&store, &want, "after a clean reopen");
    for t in &exact {
        assert!(store.delete(t).expect("delete"));
    }
    assert_state(&store, &BTreeSet::new(), "after deleting them");
}

/// A string for one field: ASCII, multi-byte, any printable, empty, or
/// near the limit on one string.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z]{0,80}",
        4 => "[é日🦀\t\n]{0,40}",
        4 => "\\PC{0,60}",
        2 => Just(String::new()),
        1 => (MAX_STRING_BYTES - 2..MAX_STRING_BYTES + 3).prop_map(|n| "a".repeat(n)),
        1 => (MAX_STRING_BYTES / 2 - 1..MAX_STRING_BYTES / 2 + 2).prop_map(|n| "é".repeat(n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Insert succeeds exactly when no string passes 65,536 bytes (the tag
    /// is then found whole), and otherwise reports the exact size and
    /// leaves the store as it was.
    #[test]
    fn size_limit_is_counted_in_bytes(o in piece(), r in piece(), s in piece()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.tags");
        let store = Store::create(&path, &opts()).expect("create");
        let t = Tag::new(o, r, s);
        let needed = longest(&t);
        match store.insert(&t) {
            Ok(fresh) => {
                prop_assert!(needed <= MAX_STRING_BYTES, "{needed}-byte string accepted");
                prop_assert!(fresh);
                prop_assert_eq!(store.len(), 1);
                let got: Vec<Tag> = store.tags().collect::<Result<_, _>>().expect("tags");
                prop_assert_eq!(got, vec![t.clone()]);
            }
            Err(Error::TagTooLarge { needed: n, limit }) => {
                prop_assert!(needed > MAX_STRING_BYTES, "{needed}-byte string refused");
                prop_assert_eq!(n, needed);
                prop_assert_eq!(limit, MAX_STRING_BYTES);
                prop_assert_eq!(store.len(), 0);
                prop_assert_eq!(store.tags().count(), 0);
            }
            Err(e) => prop_assert!(false, "unexpected error {e:?}"),
        }
        let report = store.check().expect("check");
        prop_assert!(report.ok(), "{:?}", report.faults);
    }
}

/// Regression (a review, 2026-11-30): a batch large enough for the bulk
/// path (20,000 tags) with a refused tag at index 17,000 refused all of it
/// and reported nothing applied, so `insert --file` named line 1 of the
/// chunk; a small batch applies the tags before the refused one and stops
/// there. Both paths now do the same: the first 17,000 go in, the refusal
/// is returned, and the rest is not applied.
#[test]
fn a_large_batch_stops_at_its_refused_tag_as_a_small_one_does() {
    let dir = tempfile::tempdir().expect("test setup");
    let store =
        Store::create(dir.path().join("b.tags"), &CreateOptions::default()).expect("create");
    let mut batch: Vec<Tag> = (0..20_000)
        .map(|i| Tag::new(format!("o{i}"), "r", format!("s{}", i % 300)))
        .collect();
    batch[17_000] = Tag::new("huge", "r", "x".repeat(MAX_STRING_BYTES + 1));
    let (out, r) = store.insert_batch(&batch);
    assert!(matches!(r, Err(Error::TagTooLarge { .. })), "{r:?}");
    assert_eq!(
        (out.changed, out.unchanged),
        (17_000, 0),
        "the tags before the refused one"
    );
    let want: BTreeSet<Tag> = batch[..17_000].iter().cloned().collect();
    let got: BTreeSet<Tag> = store.tags().collect::<Result<_, _>>().expect("export");
    assert!(got == want, "the store holds exactly the tags before it");
    assert!(store.check().expect("check").ok(), "check");
}
