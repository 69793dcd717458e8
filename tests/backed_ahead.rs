//! Blocks backed ahead of need (`pager/ahead.rs`): in the journaled modes,
//! an INSERT that fills a block has the helper thread back the bucket's
//! next block when that block is known never written, and the writer then
//! takes it as backed and all zeros.
//!
//! The danger is a block that holds tags taken as never written: its reads
//! would then see zeros and its tags would vanish. These tests fill a
//! block in front of blocks that hold tags written before the store was
//! reopened (so this handle has not backed them itself), give the helper
//! time, and check that every tag is still found, before and after a
//! reopen.

mod common;

use common::store::{assert_check_ok, sorted_subjects};
use std::collections::BTreeSet;
use std::time::Duration;
use tagstore::{CreateOptions, Durability, Store, Tag};

/// Tags of eight objects, 60 each: each object's tags fill the first two
/// blocks of its primary bucket and part of the third.
fn hubs() -> Vec<Tag> {
    (0..8)
        .flat_map(|h| (0..60).map(move |i| Tag::new(format!("hub{h}"), "owns", format!("s{i:03}"))))
        .collect()
}

fn export(s: &Store) -> BTreeSet<Tag> {
    s.tags().collect::<Result<_, _>>().expect("export")
}

#[test]
fn filling_a_block_never_hides_the_tags_of_the_next() {
    let dir = tempfile::tempdir().expect("test setup");
    let path = dir.path().join("ahead.tags");
    drop(Store::create(&path, &CreateOptions::default()).expect("test setup"));
    let tags = hubs();
    {
        let s = Store::open(&path).expect("test setup");
        for t in &tags {
            assert!(s.insert(t).expect("insert"), "{t:?} was new");
        }
    }
    let s = Store::open(&path).expect("reopen");
    s.set_durability(Durability::Immediate).expect("mode");
    let mut want: BTreeSet<Tag> = tags.iter().cloned().collect();
    // A hole in each hub's first block, filled again: that INSERT fills
    // the block, in front of blocks holding tags this handle has not
    // touched.
    for h in 0..8 {
        let gone = Tag::new(format!("hub{h}"), "owns", "s000");
        assert!(s.delete(&gone).expect("delete"));
        want.remove(&gone);
        let new = Tag::new(format!("hub{h}"), "owns", "new");
        assert!(s.insert(&new).expect("insert"));
        want.insert(new);
        // Time for the helper, then INSERTs elsewhere: each takes what
        // the helper backed.
        for k in 0..3 {
            std::thread::sleep(Duration::from_millis(20));
            let other = Tag::new(format!("other{h}-{k}"), "owns", "x");
            assert!(s.insert(&other).expect("insert"));
            want.insert(other);
        }
        let subjects: BTreeSet<String> = sorted_subjects(&s, &format!("hub{h}"), "owns")
            .into_iter()
            .collect();
        let expected: BTreeSet<String> = want
            .iter()
            .filter(|t| t.object == format!("hub{h}"))
            .map(|t| t.subject.clone())
            .collect();
        assert_eq!(subjects, expected, "hub{h}'s subjects");
    }
    assert_eq!(export(&s), want, "the export");
    drop(s);
    let s = Store::open(&path).expect("reopen");
    assert_eq!(export(&s), want, "the export after the reopen");
    assert_check_ok(&s, "after the reopen");
}
