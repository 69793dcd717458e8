//! The slot directory (memory only: a byte of each primary slot's key
//! fingerprint) must never hide a tag from FIND or DELETE.
//!
//! * Primary buckets of 70 blocks (past the 64 the directory's block mask
//!   covers) and of 2, growing from one bucket: single INSERTs, batches,
//!   DELETEs and re-INSERTs into freed slots, with FINDs of every key in
//!   both directions against a model after each round, in the session that
//!   learnt the directory (splits pack buckets behind it) and after a
//!   reopen (learnt again from the blocks).
//! * Keys are many and short, so directory bytes collide (a byte is 1/255
//!   of the fingerprint space): collisions must only cost reads.

use std::collections::{BTreeMap, BTreeSet};
use tagstore::{CreateOptions, Store, Tag};

fn check(s: &Store, model: &BTreeSet<Tag>) {
    let mut by_obj: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut by_sub: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for t in model {
        by_obj.entry(&t.object).or_default().insert(&t.subject);
        by_sub.entry(&t.subject).or_default().insert(&t.object);
    }
    for (o, want) in &by_obj {
        let got: BTreeSet<String> = s.find_subjects(o, "r").map(|r| r.expect("find")).collect();
        let want: BTreeSet<String> = want.iter().map(|x| x.to_string()).collect();
        assert_eq!(got, want, "subjects of {o}");
    }
    for (sub, want) in &by_sub {
        let mut got = BTreeSet::new();
        s.for_each_object(sub, "r", |x| {
            got.insert(x.to_owned());
        })
        .expect("find");
        let want: BTreeSet<String> = want.iter().map(|x| x.to_string()).collect();
        assert_eq!(got, want, "objects of {sub}");
    }
    assert_eq!(s.len(), model.len() as u64);
}

fn tag(i: u64) -> Tag {
    // Objects of 1-4 tags, subjects shared by many objects.
    Tag::new(format!("o{}", i / 3 + i % 2), "r", format!("s{}", i % 101))
}

fn run(blocks_per_primary: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("d.tags");
    let opts = CreateOptions {
        primary_buckets_per_half: Some(1),
        blocks_per_primary: Some(blocks_per_primary),
        blocks_per_secondary: Some(2),
        seed: Some(5),
        ..Default::default()
    };
    let mut model = BTreeSet::new();
    let mut s = Store::create(&path, &opts).expect("create");
    for round in 0..4u64 {
        // Single INSERTs, then a batch: the bucket fills and splits.
        for i in round * 3000..round * 3000 + 1500 {
            let t = tag(i);
            s.insert(&t).expect("insert");
            model.insert(t);
        }
        let batch: Vec<Tag> = (round * 3000 + 1500..round * 3000 + 3000)
            .map(tag)
            .collect();
        s.insert_batch(&batch).1.expect("batch");
        model.extend(batch);
        check(&s, &model);
        // DELETE every fifth tag, then INSERT new tags into the freed slots.
        let gone: Vec<Tag> = model.iter().step_by(5).cloned().collect();
        for t in &gone {
            assert!(s.delete(t).expect("delete"), "delete {t:?}");
            model.remove(t);
        }
        for i in 0..gone.len() as u64 {
            let t = Tag::new(format!("n{round}-{}", i / 2), "r", format!("s{}", i % 7));
            s.insert(&t).expect("insert");
            model.insert(t);
        }
        check(&s, &model);
        if round % 2 == 1 {
            s.close().expect("close");
            s = Store::open(&path).expect("reopen");
            check(&s, &model);
        }
    }
    s.check().expect("check");
}

#[test]
fn finds_agree_with_a_model_with_primary_buckets_past_the_directory_mask() {
    run(70);
}

#[test]
fn finds_agree_with_a_model_with_small_primary_buckets() {
    run(2);
}
