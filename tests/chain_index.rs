//! Long overflow chains (the in-memory chain index and primary extents).
//!
//! Covers FIND and DELETE through a chain long enough to be indexed
//! (8 secondary buckets or more), with the index built at different moments:
//! before further inserts into old and new buckets, after deletes free slots
//! in early buckets, and after clean and unclean reopens (which forget it).
//! Every FIND, by iterator and by visitor, is checked against a `BTreeSet`;
//! DELETE, `contains` and INSERT's duplicate check go through the chains'
//! tag maps (built by the first DELETE of an indexed chain).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::BTreeSet;
use tagstore::{CreateOptions, Store, Tag};

const SUBJECTS: &[&str] = &["peak", "rare", "médio", "tab\there"];

#[derive(Clone, Debug)]
enum Op {
    /// Insert objects `from..from+n` under subject `s`.
    Insert { s: usize, from: u32, n: u32 },
    /// Delete every `step`-th tag of the model, from `start`.
    Delete { start: usize, step: usize },
    /// FIND both ways for subject `s` and one object.
    Find { s: usize, object: u32 },
    /// Close and reopen, cleanly or as after a crash.
    Reopen { clean: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..SUBJECTS.len(), 0u32..400, 1u32..150).prop_map(|(s, from, n)| Op::Insert { s, from, n }),
        2 => (0usize..10, 2usize..9).prop_map(|(start, step)| Op::Delete { start, step }),
        4 => (0..SUBJECTS.len(), 0u32..500).prop_map(|(s, object)| Op::Find { s, object }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

fn object(n: u32) -> String {
    format!("object-{n:05}")
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn check_find(store: &Store, model: &BTreeSet<Tag>, subject: &str, obj: &str) {
    let want_objects: Vec<String> = model
        .iter()
        .filter(|t| t.subject == subject)
        .map(|t| t.object.clone())
        .collect();
    let got: Vec<String> = store
        .find_objects(subject, "isa")
        .collect::<Result<_, _>>()
        .expect("find_objects");
    assert_eq!(
        sorted(got),
        sorted(want_objects.clone()),
        "find_objects({subject:?})"
    );
    let mut seen = Vec::new();
    let n = store
        .for_each_object(subject, "isa", |o| seen.push(o.to_owned()))
        .expect("for_each_object");
    assert_eq!(n as usize, seen.len());
    assert_eq!(
        sorted(seen),
        sorted(want_objects),
        "for_each_object({subject:?})"
    );
    let want_subjects: Vec<String> = model
        .iter()
        .filter(|t| t.object == obj)
        .map(|t| t.subject.clone())
        .collect();
    let mut seen = Vec::new();
    store
        .for_each_subject(obj, "isa", |s| seen.push(s.to_owned()))
        .expect("for_each_subject");
    assert_eq!(
        sorted(seen),
        sorted(want_subjects),
        "for_each_subject({obj:?})"
    );
}

fn run(seed: u64, ops: &[Op]) -> u64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("chain.tags");
    let opts = CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(1),
        blocks_per_primary: Some(2),
        blocks_per_secondary: Some(1),
        seed: Some(seed),
    };
    let mut store = Some(Store::create(&path, &opts).expect("create"));
    let mut model = BTreeSet::new();
    let mut longest = 0;
    for op in ops {
        let st = store.as_ref().expect("open");
        match op {
            Op::Insert { s, from, n } => {
                for k in *from..from + n {
                    let t = Tag::new(object(k), "isa", SUBJECTS[*s]);
                    assert_eq!(
                        st.insert(&t).expect("insert"),
                        model.insert(t.clone()),
                        "{t:?}"
                    );
                }
            }
            Op::Delete { start, step } => {
                let doomed: Vec<Tag> = model.iter().skip(*start).step_by(*step).cloned().collect();
                for t in doomed {
                    assert!(st.delete(&t).expect("delete"), "delete {t:?}");
                    assert!(!st.contains(&t).expect("contains"), "{t:?} after delete");
                    model.remove(&t);
                }
                // A tag the chains never held: DELETE must find nothing
                // (the chain's tag map answers "absent" without a search).
                let never = Tag::new(object(9_999), "isa", SUBJECTS[*start % SUBJECTS.len()]);
                assert!(!st.delete(&never).expect("delete absent"), "{never:?}");
            }
            Op::Find { s, object: o } => check_find(st, &model, SUBJECTS[*s], &object(*o)),
            Op::Reopen { clean } => {
                let st = store.take().expect("open");
                if *clean {
                    st.close().expect("close");
                } else {
                    st.abandon();
                }
                store = Some(Store::open(&path).expect("reopen"));
            }
        }
        let st = store.as_ref().expect("open");
        assert_eq!(st.len(), model.len() as u64);
        longest = longest.max(st.stats().expect("stats").longest_chain);
    }
    let st = store.as_ref().expect("open");
    for s in SUBJECTS {
        check_find(st, &model, s, &object(0));
    }
    for t in model.iter().take(50) {
        assert!(st.contains(t).expect("contains"), "{t:?} lost");
    }
    longest
}

#[test]
fn long_chains_match_the_model() {
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let indexed = std::cell::Cell::new(0);
    let r = runner.run(
        &(any::<u64>(), proptest::collection::vec(op(), 10..60)),
        |(seed, ops)| {
            // Each half's chain has about `secondary_linked / 2` buckets.
            if run(seed, &ops) >= 8 {
                indexed.set(indexed.get() + 1);
            }
            Ok(())
        },
    );
    if let Err(e) = r {
        panic!("{e}");
    }
    let indexed = indexed.get();
    assert!(
        indexed >= 6,
        "only {indexed} of 24 cases grew a chain long enough to index"
    );
}

/// Regression: the first DELETE in a long chain built the chain's tag map,
/// reading and hashing every slot of the chain (9 ms for one DELETE of a
/// 160,000-tag npm peak), even for a chain that saw no other DELETE. Now a
/// chain's first DELETEs search its block headers, and only a chain searched
/// again and again gets a map; every DELETE finds its tag either way.
#[test]
fn a_long_chain_gets_its_tag_map_only_after_repeated_searches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = CreateOptions {
        expected_tags: 100,
        primary_buckets_per_half: Some(1),
        blocks_per_primary: Some(2),
        blocks_per_secondary: Some(1),
        seed: Some(7),
    };
    let st = Store::create(dir.path().join("peak.tags"), &opts).expect("create");
    let peak: Vec<Tag> = (0..2_000)
        .map(|k| Tag::new(object(k), "isa", "peak"))
        .collect();
    for t in &peak {
        assert!(st.insert(t).expect("insert"));
    }
    assert!(
        st.stats().expect("stats").longest_chain >= 8,
        "chain too short to index"
    );
    // A FIND indexes the chain (by key); no DELETE has searched it yet.
    assert_eq!(
        st.for_each_object("peak", "isa", |_| {}).expect("find"),
        2_000
    );
    assert_eq!(st.tag_maps(), 0);
    let mut left: BTreeSet<Tag> = peak.iter().cloned().collect();
    for (n, t) in peak.iter().rev().step_by(7).enumerate() {
        assert!(st.delete(t).expect("delete"), "{t:?}");
        left.remove(t);
        if n == 0 {
            assert_eq!(st.tag_maps(), 0, "the first DELETE built a tag map");
        }
    }
    assert!(st.tag_maps() >= 1, "repeated DELETEs never built the map");
    // With the map: absent tags, deleted tags and the rest.
    assert!(!st
        .delete(&Tag::new("never", "isa", "peak"))
        .expect("delete absent"));
    for t in peak.iter().rev().step_by(7) {
        assert!(!st.contains(t).expect("contains"), "{t:?} after delete");
    }
    let mut found = BTreeSet::new();
    st.for_each_object("peak", "isa", |o| {
        found.insert(Tag::new(o, "isa", "peak"));
    })
    .expect("find");
    assert_eq!(found, left);
}
