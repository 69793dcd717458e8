//! Reading `STORE.counts` without loading it: a handle's own merge
//! appended, or one count read, from a single pass over the file with its
//! strings borrowed (nothing is built per count), checked as a load would
//! check it. A single `tagstore insert` on a store of 259,000 subjects
//! spent 0.4 s building every count in memory to append one record, and a
//! `tagstore count` as long to read one.

use super::increment::{CloudEntry, IncrementId};
use super::log::{counts_path, frame, frames, RecordRef, COMPACT_MIN, HEADER};
use super::model::weigh;
use super::pending::SharedDeltas;
use crate::error::Result;
use crate::side::AppendLog;
use serde::Deserialize;
use std::path::Path;

/// A record of the counts file with its strings borrowed from the file's
/// bytes: decodes as `Record`.
#[derive(Deserialize)]
enum Peek<'a> {
    Snapshot {
        version: u64,
        own_only: bool,
        #[serde(borrow)]
        counts: Vec<(&'a str, &'a str, i64)>,
        #[allow(dead_code)]
        processed: Vec<IncrementId>,
    },
    Merge {
        version: u64,
        #[allow(dead_code)]
        ids: Vec<IncrementId>,
        #[serde(borrow)]
        deltas: Vec<(&'a str, &'a str, i64)>,
        foreign: bool,
    },
}

/// What one pass over a whole, valid counts file found.
struct Scan {
    version: u64,
    own_only: bool,
    /// Sum of every count.
    total: i64,
    snapshot_len: u64,
}

impl Scan {
    /// True when a load would serve these counts once `net` more is
    /// merged: a collector's always, own-only ones if they add up to `tags`.
    fn adds_up(&self, net: i64, tags: u64) -> bool {
        !self.own_only || self.total.wrapping_add(net) == tags as i64
    }
}

/// The counts file of `store` and its bytes; `None` when there is none.
fn read(store: &Path, writable: bool) -> Result<Option<(AppendLog, Vec<u8>)>> {
    let Some(log) = AppendLog::open(counts_path(store), writable, false)? else {
        return Ok(None);
    };
    let data = log.read_all()?;
    Ok(Some((log, data)))
}

/// Scans the counts file's bytes, handing every count and delta to
/// `visit`; `None` unless it is ours (`seed`) and whole (a snapshot, then
/// merges in order, no torn or damaged tail).
fn scan<'d>(
    data: &'d [u8],
    seed: u64,
    mut visit: impl FnMut(&'d str, &'d str, i64),
) -> Option<Scan> {
    let mut end = HEADER;
    let mut found: Option<Scan> = None;
    let mut sum = |list: &[(&'d str, &'d str, i64)], sc: &mut Scan| {
        for &(r, s, n) in list {
            sc.total = sc.total.wrapping_add(n);
            visit(r, s, n);
        }
    };
    for (body, next) in frames(data, seed)? {
        let (rec, _) =
            bincode::serde::borrow_decode_from_slice::<Peek, _>(body, bincode::config::standard())
                .ok()?;
        match (rec, found.as_mut()) {
            (
                Peek::Snapshot {
                    version,
                    own_only,
                    counts,
                    ..
                },
                None,
            ) => {
                let mut sc = Scan {
                    version,
                    own_only,
                    total: 0,
                    snapshot_len: (next - end) as u64,
                };
                sum(&counts, &mut sc);
                found = Some(sc);
            }
            (
                Peek::Merge {
                    version,
                    deltas,
                    foreign,
                    ..
                },
                Some(sc),
            ) if version == sc.version + 1 => {
                sum(&deltas, sc);
                sc.version = version;
                sc.own_only &= !foreign;
            }
            _ => return None,
        }
        end = next;
    }
    // A torn or damaged frame ended the frames early.
    found.filter(|_| end == data.len())
}

/// Appends `deltas` as merge `id` if the counts file can take it blindly:
/// present, ours (`seed`), whole (no torn or damaged tail), not due for
/// folding, and, when it counts only this store's tags, adding up to
/// `tags` once the deltas are in. `Ok(false)` changes nothing: the caller
/// then loads the counts and merges as usual (which repairs or rebuilds).
pub fn append_own(
    store: &Path,
    seed: u64,
    id: IncrementId,
    deltas: &SharedDeltas,
    tags: u64,
) -> Result<bool> {
    let Some((mut log, data)) = read(store, true)? else {
        return Ok(false);
    };
    let net: i64 = deltas.iter().map(|(_, _, d)| *d).sum();
    let Some(sc) = scan(&data, seed, |_, _, _| {}).filter(|sc| sc.adds_up(net, tags)) else {
        return Ok(false);
    };
    let rec = frame(&RecordRef::Merge {
        version: sc.version + 1,
        ids: vec![id],
        deltas: deltas
            .iter()
            .filter(|(_, _, d)| *d != 0)
            .map(|(r, s, d)| (&**r, &**s, *d))
            .collect(),
        foreign: false,
    })?;
    // A log due for folding is folded by the full merge, which holds the counts.
    if log.len() + rec.len() as u64 > HEADER as u64 + 2 * sc.snapshot_len.max(COMPACT_MIN) {
        return Ok(false);
    }
    log.append(&rec)?;
    Ok(true)
}

/// The count of (`relationship`, `subject`) read from the counts file if
/// a load would serve the file as it is (present, ours, whole, and for
/// own-only counts adding up to `tags`); `None` otherwise (the caller
/// loads the counts, which repairs or rebuilds them).
pub fn count_unloaded(
    store: &Path,
    seed: u64,
    relationship: &str,
    subject: &str,
    tags: u64,
) -> Result<Option<i64>> {
    let Some((_, data)) = read(store, false)? else {
        return Ok(None);
    };
    let mut n = 0i64;
    let sc = scan(&data, seed, |r, s, d| {
        if r == relationship && s == subject {
            n = n.wrapping_add(d);
        }
    });
    Ok(sc.filter(|sc| sc.adds_up(0, tags)).map(|_| n))
}

/// The `top` most used subjects of `relationship` read from the counts
/// file, as [`count_unloaded`] reads one count (`None`: load them).
pub fn cloud_unloaded(
    store: &Path,
    seed: u64,
    relationship: &str,
    top: usize,
    tags: u64,
) -> Result<Option<Vec<CloudEntry>>> {
    let Some((_, data)) = read(store, false)? else {
        return Ok(None);
    };
    let mut of_rel: foldhash::HashMap<&str, i64> = foldhash::HashMap::default();
    let sc = scan(&data, seed, |r, s, d| {
        if r == relationship {
            let e = of_rel.entry(s).or_default();
            *e = e.wrapping_add(d);
        }
    });
    if !sc.is_some_and(|sc| sc.adds_up(0, tags)) {
        return Ok(None);
    }
    // The order of the cloud index: count descending, then subject.
    let mut ranked: Vec<(u64, &str)> = of_rel
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| (n as u64, s))
        .collect();
    let by = |a: &(u64, &str), b: &(u64, &str)| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1));
    if ranked.len() > top && top > 0 {
        ranked.select_nth_unstable_by(top - 1, by);
        ranked.truncate(top);
    }
    ranked.sort_unstable_by(by);
    ranked.truncate(top);
    Ok(Some(weigh(ranked)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::log::CountsFile;
    use crate::counts::model::Counts;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn deltas(v: &[(&str, &str, i64)]) -> SharedDeltas {
        v.iter()
            .map(|&(r, s, d)| (Arc::from(r), Arc::from(s), d))
            .collect()
    }

    const ID: IncrementId = IncrementId { writer: 3, seq: 9 };

    /// A counts file of 5 tags: isa/sunset 3, isa/beach 2.
    fn five(dir: &Path) -> std::path::PathBuf {
        let store = dir.join("s.tags");
        let mut m = HashMap::new();
        m.insert(("isa".to_string(), "sunset".to_string()), 3);
        m.insert(("isa".to_string(), "beach".to_string()), 2);
        CountsFile::create(&store, 7, &Counts::from_counts(m)).expect("create");
        store
    }

    fn bytes(store: &Path) -> Vec<u8> {
        std::fs::read(counts_path(store)).expect("read")
    }

    #[test]
    fn appends_a_merge_the_full_load_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = five(dir.path());
        let d = deltas(&[
            ("isa", "sunset", 1),
            ("isa", "beach", -2),
            ("owns", "é\t", 1),
        ]);
        assert!(append_own(&store, 7, ID, &d, 5).expect("append"));
        // Twice: the second reads the first's record back as a merge.
        let d2 = deltas(&[("isa", "sunset", 1)]);
        let id2 = IncrementId { writer: 3, seq: 10 };
        assert!(append_own(&store, 7, id2, &d2, 6).expect("append"));
        let (c, _) = CountsFile::load(&store, 7, false)
            .expect("load")
            .expect("present");
        assert_eq!(c.version, 2);
        assert_eq!(
            (
                c.get("isa", "sunset"),
                c.get("isa", "beach"),
                c.get("owns", "é\t")
            ),
            (5, 0, 1)
        );
        assert_eq!(c.total(), 6);
        assert!(c.processed.contains(&ID) && c.processed.contains(&id2));
        assert!(c.own_only && !c.cut);
    }

    #[test]
    fn refuses_what_only_a_full_load_may_handle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = five(dir.path());
        let d = deltas(&[("isa", "sunset", 1)]);
        let before = bytes(&store);
        // Counts that would not add up to the store's tags: rebuilt instead.
        assert!(!append_own(&store, 7, ID, &d, 7).expect("mismatch"));
        // Another store's counts (seed).
        assert!(!append_own(&store, 8, ID, &d, 6).expect("foreign"));
        assert_eq!(bytes(&store), before, "a refusal changed the file");
        // A torn last record: the full load cuts it off first.
        assert!(append_own(&store, 7, ID, &d, 6).expect("append"));
        let whole = bytes(&store);
        std::fs::write(counts_path(&store), &whole[..whole.len() - 2]).expect("tear");
        let d2 = deltas(&[("isa", "sunset", 1)]);
        assert!(!append_own(&store, 7, ID, &d2, 7).expect("torn"));
        assert_eq!(bytes(&store).len(), whole.len() - 2);
        // No counts file at all.
        std::fs::remove_file(counts_path(&store)).expect("rm");
        assert!(!append_own(&store, 7, ID, &d2, 7).expect("absent"));
    }

    #[test]
    fn reads_one_count_as_the_full_load_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = five(dir.path());
        let d = deltas(&[
            ("isa", "sunset", 2),
            ("isa", "beach", -2),
            ("owns", "é\t", 1),
        ]);
        assert!(append_own(&store, 7, ID, &d, 6).expect("append"));
        let (c, _) = CountsFile::load(&store, 7, false)
            .expect("load")
            .expect("present");
        for (r, s) in [
            ("isa", "sunset"),
            ("isa", "beach"),
            ("owns", "é\t"),
            ("isa", "none"),
        ] {
            assert_eq!(
                count_unloaded(&store, 7, r, s, 6).expect("count"),
                Some(c.get(r, s) as i64),
                "{r} {s}"
            );
        }
        // Not served as it is: a total that disagrees, another store, a torn tail.
        assert_eq!(
            count_unloaded(&store, 7, "isa", "sunset", 5).expect("count"),
            None
        );
        assert_eq!(
            count_unloaded(&store, 8, "isa", "sunset", 6).expect("count"),
            None
        );
        let whole = bytes(&store);
        std::fs::write(counts_path(&store), &whole[..whole.len() - 1]).expect("tear");
        assert_eq!(
            count_unloaded(&store, 7, "isa", "sunset", 6).expect("count"),
            None
        );
        std::fs::remove_file(counts_path(&store)).expect("rm");
        assert_eq!(
            count_unloaded(&store, 7, "isa", "sunset", 6).expect("count"),
            None
        );
    }

    #[test]
    fn reads_a_cloud_as_the_full_load_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = five(dir.path());
        // Ties (beach and dawn at 2), a count gone to zero, another relationship.
        let d = deltas(&[
            ("isa", "dawn", 2),
            ("isa", "zero", 1),
            ("owns", "x", 4),
            ("isa", "aaa", 1),
        ]);
        assert!(append_own(&store, 7, ID, &d, 13).expect("append"));
        let d2 = deltas(&[("isa", "zero", -1)]);
        let id2 = IncrementId { writer: 3, seq: 10 };
        assert!(append_own(&store, 7, id2, &d2, 12).expect("append"));
        let (mut c, _) = CountsFile::load(&store, 7, false)
            .expect("load")
            .expect("present");
        for top in [0, 1, 2, 3, 4, 10] {
            let want = c.cloud("isa", top);
            let got = cloud_unloaded(&store, 7, "isa", top, 12)
                .expect("cloud")
                .expect("served");
            let key = |v: &[CloudEntry]| -> Vec<(String, u64, u64)> {
                v.iter()
                    .map(|e| (e.subject.clone(), e.count, (e.weight * 1e9) as u64))
                    .collect()
            };
            assert_eq!(key(&got), key(&want), "top {top}");
        }
        assert!(cloud_unloaded(&store, 7, "isa", 3, 11)
            .expect("cloud")
            .is_none());
    }

    #[test]
    fn leaves_folding_to_the_full_merge() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = five(dir.path());
        // Merges past twice the folding minimum: the next must fold.
        let big: Vec<(String, String, i64)> = (0..40_000)
            .map(|i| {
                (
                    "rel".to_string(),
                    format!("subject-{i:08}-{}", "x".repeat(40)),
                    1,
                )
            })
            .collect();
        let mut tags = 5u64;
        let mut refused = false;
        for seq in 0..200 {
            let d: SharedDeltas = big
                .iter()
                .map(|(r, s, n)| {
                    (
                        Arc::from(r.as_str()),
                        Arc::from(s.as_str()),
                        *n * if seq % 2 == 0 { 1 } else { -1 },
                    )
                })
                .collect();
            let after = if seq % 2 == 0 {
                tags + 40_000
            } else {
                tags - 40_000
            };
            let id = IncrementId { writer: 1, seq };
            if !append_own(&store, 7, id, &d, after).expect("append") {
                refused = true;
                break;
            }
            tags = after;
        }
        assert!(refused, "the log grew without bound");
        let len = bytes(&store).len() as u64;
        assert!(len <= HEADER as u64 + 2 * COMPACT_MIN, "{len}");
    }
}
