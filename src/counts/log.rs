//! `STORE.counts`: a header, then CRC-framed records (a snapshot, then one per merge).

use super::fold::{Fold, BACKGROUND_FOLD_MIN};
use super::increment::IncrementId;
use super::model::Counts;
use crate::error::{Error, Result};
use crate::format::bytes::rd32;
use crate::side::{side_path, AppendLog};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Snapshot size below which the merge log may still grow to twice this
/// before it is folded: a load into a fresh store merges a few times, and
/// folding after each merge rewrote every count each time (a tenth of a
/// 0.5 M-tag npm load); replaying up to 8 MB of merges at open is cheap.
pub(super) const COMPACT_MIN: u64 = 4 << 20;

/// One record of the counts file, as read (written as [`RecordRef`]).
#[derive(Deserialize)]
pub enum Record {
    /// Every count, and the increments merged into them.
    Snapshot {
        version: u64,
        own_only: bool,
        counts: Vec<(String, String, i64)>,
        processed: Vec<IncrementId>,
    },
    /// One merge: the increments merged and the summed changes.
    Merge {
        version: u64,
        ids: Vec<IncrementId>,
        deltas: Vec<(String, String, i64)>,
        foreign: bool,
    },
}

/// A record as written, borrowing its strings instead of copying them:
/// encodes exactly as [`Record`] (the same variants in the same order, the
/// same fields and types), so it is read back as one.
#[derive(Serialize)]
pub enum RecordRef<'a> {
    /// Every count, and the increments merged into them (in no order).
    Snapshot {
        version: u64,
        own_only: bool,
        counts: Vec<(&'a str, &'a str, i64)>,
        processed: Vec<IncrementId>,
    },
    /// One merge: the increments merged and the summed changes.
    Merge {
        version: u64,
        ids: Vec<IncrementId>,
        deltas: Vec<(&'a str, &'a str, i64)>,
        foreign: bool,
    },
}

/// Current counts-file magic. `TSCOUNT1` (unsigned snapshot counts) was
/// never released and is treated like a missing file.
pub(super) const MAGIC: &[u8; 8] = b"TSCOUNT2";
pub(super) const HEADER: usize = 16;

/// Path of the counts file beside a store.
pub fn counts_path(store: &Path) -> PathBuf {
    side_path(store, "counts")
}

/// A record framed for the file: length, CRC32, then the bincode body.
pub(super) fn frame(rec: &RecordRef<'_>) -> Result<Vec<u8>> {
    let body = bincode::serde::encode_to_vec(rec, bincode::config::standard())
        .map_err(|e| Error::InvalidArgument(format!("encoding counts record: {e}")))?;
    let mut buf = Vec::with_capacity(body.len() + 8);
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    buf.extend_from_slice(&body);
    Ok(buf)
}

/// The bytes of a counts file holding one snapshot of `counts`.
pub(super) fn snapshot_file(seed: u64, counts: &Counts) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(HEADER);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&seed.to_le_bytes());
    buf.extend_from_slice(&frame(&counts.snapshot())?);
    Ok(buf)
}

/// The counts file: header then CRC-framed records.
pub struct CountsFile {
    pub(super) log: AppendLog,
    pub(super) seed: u64,
    pub(super) snapshot_len: u64,
    /// A fold running on another thread ([`super::fold`]).
    pub(super) fold: Option<Fold>,
    /// Log length before which no background fold starts again (one failed).
    pub(super) fold_retry_at: u64,
}

/// What a counts file's bytes hold, up to the first record that does not
/// read back whole (a torn or damaged tail).
pub(super) struct Parsed {
    /// The counts after the last whole record.
    pub counts: Counts,
    /// Bytes up to the end of that record.
    pub end: usize,
    /// Length of the snapshot record, framing included.
    pub snapshot_len: u64,
}

/// The CRC-checked record bodies of a counts file's bytes, in order, each
/// with the offset just past its frame; ends at the first torn or damaged
/// frame. `None` unless the header is that of a counts file of `seed`.
pub(super) fn frames(data: &[u8], seed: u64) -> Option<impl Iterator<Item = (&[u8], usize)>> {
    if data.len() < HEADER || &data[..8] != MAGIC || data[8..16] != seed.to_le_bytes() {
        return None;
    }
    let mut at = HEADER;
    Some(std::iter::from_fn(move || {
        if data.len() < at + 8 {
            return None;
        }
        let (len, crc) = (rd32(data, at) as usize, rd32(data, at + 4));
        let body = data.get(at + 8..at + 8 + len)?;
        if crc32fast::hash(body) != crc {
            return None;
        }
        at += 8 + len;
        Some((body, at))
    }))
}

/// Reads the records of a counts file's bytes; `None` when they are not a
/// counts file of `seed` holding a snapshot.
pub(super) fn parse(data: &[u8], seed: u64) -> Option<Parsed> {
    let mut end = HEADER;
    let mut counts: Option<Counts> = None;
    let mut snapshot_len = 0;
    for (body, next) in frames(data, seed)? {
        let Ok((rec, _)) =
            bincode::serde::decode_from_slice::<Record, _>(body, bincode::config::standard())
        else {
            break;
        };
        match (rec, counts.as_mut()) {
            (
                Record::Snapshot {
                    version,
                    own_only,
                    counts: list,
                    processed,
                },
                None,
            ) => {
                let mut c = Counts::empty(version, own_only);
                c.load_snapshot(list);
                c.processed = processed.into_iter().collect();
                snapshot_len = (next - end) as u64;
                counts = Some(c);
            }
            (
                Record::Merge {
                    version,
                    ids,
                    deltas,
                    foreign,
                },
                Some(c),
            ) if version == c.version + 1 => {
                c.reserve_for(deltas.iter().map(|(r, _, _)| r.as_str()));
                c.apply(deltas.iter().map(|(r, s, d)| (r.as_str(), s.as_str(), *d)));
                c.processed.extend(ids);
                c.version = version;
                c.own_only &= !foreign;
            }
            _ => break,
        }
        end = next;
    }
    counts.map(|counts| Parsed {
        counts,
        end,
        snapshot_len,
    })
}

impl CountsFile {
    /// Loads the counts file; `Ok(None)` when absent, damaged or foreign (rebuild).
    pub fn load(store: &Path, seed: u64, writable: bool) -> Result<Option<(Counts, CountsFile)>> {
        let Some(mut log) = AppendLog::open(counts_path(store), writable, false)? else {
            return Ok(None);
        };
        let data = log.read_all()?;
        let Some(Parsed {
            mut counts,
            end,
            snapshot_len,
        }) = parse(&data, seed)
        else {
            return Ok(None);
        };
        counts.cut = end < data.len();
        // A torn last merge was never acknowledged: cut it off.
        if writable && end < data.len() {
            log.truncate(end as u64)?;
        }
        Ok(Some((
            counts,
            CountsFile {
                log,
                seed,
                snapshot_len,
                fold: None,
                fold_retry_at: 0,
            },
        )))
    }

    /// Writes a fresh file holding one snapshot, atomically (temp + rename).
    pub fn create(store: &Path, seed: u64, counts: &Counts) -> Result<CountsFile> {
        let path = counts_path(store);
        let mut f = CountsFile {
            log: AppendLog::create(side_path(&path, "tmp"))?,
            seed,
            snapshot_len: 0,
            fold: None,
            fold_retry_at: 0,
        };
        f.log.append(&snapshot_file(seed, counts)?)?;
        f.snapshot_len = f.log.len() - HEADER as u64;
        f.log.rename(path)?;
        Ok(f)
    }

    /// Appends one record and makes it durable.
    pub fn append(&mut self, rec: &RecordRef<'_>) -> Result<()> {
        self.log.append(&frame(rec)?)
    }

    /// Folds the file into one snapshot of `counts` once the merge log has
    /// grown enough ([`CountsFile::wants_compaction`]): in place while the
    /// snapshot is small, on another thread from [`BACKGROUND_FOLD_MIN`]
    /// bytes (swapped in by a later call once done).
    pub fn fold_if_grown(&mut self, store: &Path, counts: &Counts) -> Result<()> {
        self.finish_fold(store, false)?;
        if self.fold.is_none() && self.wants_compaction() {
            let background = self.snapshot_len >= BACKGROUND_FOLD_MIN;
            if background && self.log.len() < self.fold_retry_at {
                return Ok(());
            }
            if !(background && self.start_fold(store)) {
                self.compact(store, counts)?;
            }
        }
        Ok(())
    }

    /// Bytes in the file.
    #[cfg(test)]
    pub fn len(&self) -> u64 {
        self.log.len()
    }

    /// True when the merge log has grown past twice the snapshot (and past
    /// twice [`COMPACT_MIN`]) and should be folded.
    pub fn wants_compaction(&self) -> bool {
        self.log.len() > HEADER as u64 + 2 * self.snapshot_len.max(COMPACT_MIN)
    }

    /// Rewrites the file as a single snapshot of `counts` (a background
    /// fold in progress is dropped first).
    pub fn compact(&mut self, store: &Path, counts: &Counts) -> Result<()> {
        self.fold = None;
        *self = CountsFile::create(store, self.seed, counts)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::increment::{Increment, IncrementId};
    use std::collections::HashMap;
    use std::fs::OpenOptions;

    #[test]
    fn merges_are_exactly_once_and_survive_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut c = Counts::from_counts(HashMap::new());
        let mut f = CountsFile::create(&store, 5, &c).expect("create");
        let inc = |w, s, d| Increment {
            id: IncrementId { writer: w, seq: s },
            deltas: vec![("isa".into(), "x".into(), d)],
        };
        assert!(c.submit(inc(1, 0, 3)));
        assert!(!c.submit(inc(1, 0, 3)), "duplicate while queued");
        c.merge_queue(&mut f, 1).expect("merge");
        assert!(!c.submit(inc(1, 0, 3)), "late duplicate after merge");
        assert!(c.submit(inc(2, 0, 4)));
        c.merge_queue(&mut f, 1).expect("merge");
        assert_eq!(c.get("isa", "x"), 7);
        assert!(!c.own_only);
        let full = f.len();
        drop(f);
        let (back, _) = CountsFile::load(&store, 5, true)
            .expect("load")
            .expect("present");
        assert_eq!((back.version, back.get("isa", "x")), (2, 7));
        // Tear the last merge: the counts are those of the first merge only.
        let file = OpenOptions::new()
            .write(true)
            .open(counts_path(&store))
            .expect("open");
        file.set_len(full - 3).expect("cut");
        let (back, _) = CountsFile::load(&store, 5, true)
            .expect("load")
            .expect("present");
        assert_eq!((back.version, back.get("isa", "x")), (1, 3));
        assert!(
            CountsFile::load(&store, 6, false).expect("load").is_none(),
            "foreign seed"
        );
    }

    #[test]
    fn borrowed_records_read_back_as_records() {
        let processed = vec![IncrementId { writer: 7, seq: 3 }];
        let rec = RecordRef::Snapshot {
            version: 42,
            own_only: true,
            counts: vec![("isa", "sunset", 3), ("owns", "é\tü", -1)],
            processed: processed.clone(),
        };
        let body = frame(&rec).expect("frame");
        let (back, _) =
            bincode::serde::decode_from_slice::<Record, _>(&body[8..], bincode::config::standard())
                .expect("decode");
        let Record::Snapshot {
            version,
            own_only,
            counts,
            processed: p,
        } = back
        else {
            panic!("not a snapshot");
        };
        assert_eq!((version, own_only, p), (42, true, processed));
        let want = [("isa", "sunset", 3), ("owns", "é\tü", -1)];
        let want: Vec<(String, String, i64)> = want
            .iter()
            .map(|&(r, s, n)| (r.into(), s.into(), n))
            .collect();
        assert_eq!(counts, want.clone());

        let ids = vec![IncrementId { writer: 9, seq: 0 }];
        let rec = RecordRef::Merge {
            version: 43,
            ids: ids.clone(),
            deltas: vec![("isa", "sunset", 3), ("owns", "é\tü", -1)],
            foreign: false,
        };
        let body = frame(&rec).expect("frame");
        let (back, _) =
            bincode::serde::decode_from_slice::<Record, _>(&body[8..], bincode::config::standard())
                .expect("decode");
        let Record::Merge {
            version,
            ids: i,
            deltas,
            foreign,
        } = back
        else {
            panic!("not a merge");
        };
        assert_eq!((version, i, deltas, foreign), (43, ids, want, false));
    }
}
