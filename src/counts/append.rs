//! A handle's own merge appended to `STORE.counts` without loading the
//! counts: the file is read once with its strings borrowed (nothing is
//! built per count), checked as a load would check it, and the merge record
//! appended. A single `tagstore insert` on a store of 259,000 subjects
//! spent 0.4 s building every count in memory to append one record.

use super::increment::IncrementId;
use super::log::{counts_path, frame, RecordRef, COMPACT_MIN, HEADER, MAGIC};
use super::pending::SharedDeltas;
use crate::error::Result;
use crate::format::bytes::rd32;
use crate::side::AppendLog;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::path::Path;

/// The sum of a record's counts (or deltas), read without keeping them.
struct Total(i64);

impl<'de> Deserialize<'de> for Total {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Sum;
        impl<'de> Visitor<'de> for Sum {
            type Value = Total;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of (relationship, subject, count)")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Total, A::Error> {
                let mut t = 0i64;
                while let Some((_, _, n)) = seq.next_element::<(&'de str, &'de str, i64)>()? {
                    t = t.wrapping_add(n);
                }
                Ok(Total(t))
            }
        }
        d.deserialize_seq(Sum)
    }
}

/// A record of the counts file as [`append_own`] reads it: decodes as `Record`.
#[derive(Deserialize)]
enum Peek {
    Snapshot {
        version: u64,
        own_only: bool,
        counts: Total,
        #[allow(dead_code)]
        processed: Vec<IncrementId>,
    },
    Merge {
        version: u64,
        #[allow(dead_code)]
        ids: Vec<IncrementId>,
        deltas: Total,
        foreign: bool,
    },
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
    let Some(mut log) = AppendLog::open(counts_path(store), true, false)? else {
        return Ok(false);
    };
    let data = log.read_all()?;
    if data.len() < HEADER || &data[..8] != MAGIC || data[8..16] != seed.to_le_bytes() {
        return Ok(false);
    }
    let (mut at, mut version, mut own_only, mut total) = (HEADER, None::<u64>, true, 0i64);
    let mut snapshot_len = 0u64;
    while data.len() >= at + 8 {
        let (len, crc) = (rd32(&data, at) as usize, rd32(&data, at + 4));
        let Some(body) = data.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        let Ok((rec, _)) =
            bincode::serde::borrow_decode_from_slice::<Peek, _>(body, bincode::config::standard())
        else {
            break;
        };
        match (rec, version) {
            (
                Peek::Snapshot {
                    version: v,
                    own_only: o,
                    counts,
                    ..
                },
                None,
            ) => {
                (version, own_only, total) = (Some(v), o, counts.0);
                snapshot_len = (8 + len) as u64;
            }
            (
                Peek::Merge {
                    version: v,
                    deltas: d,
                    foreign,
                    ..
                },
                Some(cur),
            ) if v == cur + 1 => {
                (version, own_only, total) =
                    (Some(v), own_only && !foreign, total.wrapping_add(d.0));
            }
            _ => break,
        }
        at += 8 + len;
    }
    let Some(version) = version else {
        return Ok(false);
    };
    let net: i64 = deltas.iter().map(|(_, _, d)| *d).sum();
    if at < data.len() || (own_only && total.wrapping_add(net) != tags as i64) {
        return Ok(false);
    }
    let rec = frame(&RecordRef::Merge {
        version: version + 1,
        ids: vec![id],
        deltas: deltas
            .iter()
            .filter(|(_, _, d)| *d != 0)
            .map(|(r, s, d)| (&**r, &**s, *d))
            .collect(),
        foreign: false,
    })?;
    // A log due for folding is folded by the full merge, which holds the counts.
    if log.len() + rec.len() as u64 > HEADER as u64 + 2 * snapshot_len.max(COMPACT_MIN) {
        return Ok(false);
    }
    log.append(&rec)?;
    Ok(true)
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
