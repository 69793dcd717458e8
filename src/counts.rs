//! Tag usage counters and the tag cloud, kept current from merged increments
//! (after seed 004: in-memory increments, merged in batches, exactly once,
//! one new version per merge).
//!
//! Counts are kept per `(relationship, subject)`: how many objects carry it.
//! They live in `STORE.counts`, an append-only file of CRC-framed records:
//! a snapshot, then one record per merge. A merge is one record appended and
//! fsynced, so after a crash the counts are those of a whole number of
//! merges; a torn last record is dropped. See DESIGN.md §12 for the layout.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Identifies an increment: the writer that produced it and its sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IncrementId {
    /// Random id of the producing store handle (fresh at every open).
    pub writer: u64,
    /// Sequence number within that writer, from 0.
    pub seq: u64,
}

/// A batch of count changes: `(relationship, subject) -> delta` since the last one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Increment {
    /// Unique id; a collector merges each id once.
    pub id: IncrementId,
    /// Count changes, sorted by (relationship, subject), no zero deltas.
    pub deltas: Vec<(String, String, i64)>,
}

impl Increment {
    /// Serialises the increment for shipping to a collector (bincode 2).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        bincode::serde::encode_to_vec(self, bincode::config::standard())
            .map_err(|e| Error::InvalidArgument(format!("encoding increment: {e}")))
    }

    /// Parses bytes made by [`Increment::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<Increment> {
        let (inc, used): (Increment, usize) =
            bincode::serde::decode_from_slice(b, bincode::config::standard())
                .map_err(|e| Error::InvalidArgument(format!("not an increment: {e}")))?;
        if used != b.len() {
            return Err(Error::InvalidArgument(format!(
                "increment has {} trailing bytes",
                b.len() - used
            )));
        }
        Ok(inc)
    }
}

/// One subject of a tag cloud.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CloudEntry {
    /// The subject.
    pub subject: String,
    /// Objects carrying it under the relationship.
    pub count: u64,
    /// Weight in 1.0..=10.0, log-scaled between the least and most used shown (for font sizes).
    pub weight: f64,
}

/// What a merge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MergeOutcome {
    /// Counts version after the merge (unchanged if nothing merged).
    pub version: u64,
    /// Increments merged.
    pub merged: usize,
    /// Increments discarded as duplicates or already merged.
    pub discarded: usize,
}

/// Which consumer of a handle's count changes: its own counts (merged
/// locally) or the outbox (shipped to a collector by `take_increment`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Channel {
    /// Changes not yet merged into this handle's own counts.
    Own = 0,
    /// Changes not yet shipped as an increment.
    Outbox = 1,
}

/// Per-key deltas of both channels; bit `c` of `seen` marks a key added
/// to channel `c` since it was last taken.
#[derive(Debug, Default)]
struct Delta {
    d: [i64; 2],
    seen: u8,
}

/// Accumulates count deltas in memory as tags change, for both channels in
/// one map (one lookup per change, not two).
#[derive(Debug, Default)]
pub(crate) struct Pending {
    // foldhash, not SipHash, and one map for both channels: every
    // INSERT/DELETE looks its key up here, and two SipHash maps were a
    // tenth of the load's time.
    deltas: foldhash::HashMap<String, foldhash::HashMap<String, Delta>>,
    keys: [usize; 2],
    net: [i64; 2],
}

impl Pending {
    /// Records +1 (insert) or -1 (delete) for (relationship, subject) in both channels.
    pub fn add(&mut self, relationship: &str, subject: &str, d: i64) {
        self.net[0] += d;
        self.net[1] += d;
        let m = match self.deltas.get_mut(relationship) {
            Some(m) => m,
            None => self.deltas.entry(relationship.to_owned()).or_default(),
        };
        let e = match m.get_mut(subject) {
            Some(e) => e,
            None => m.entry(subject.to_owned()).or_default(),
        };
        for c in 0..2 {
            if e.seen & (1 << c) == 0 {
                e.seen |= 1 << c;
                self.keys[c] += 1;
            }
            e.d[c] += d;
        }
    }

    /// Sum of the channel's deltas.
    pub fn net(&self, ch: Channel) -> i64 {
        self.net[ch as usize]
    }

    /// Distinct keys pending in the channel.
    pub fn len(&self, ch: Channel) -> usize {
        self.keys[ch as usize]
    }

    /// The channel's non-zero deltas, unsorted.
    pub fn iter(&self, ch: Channel) -> impl Iterator<Item = (&str, &str, i64)> + '_ {
        let c = ch as usize;
        self.deltas.iter().flat_map(move |(r, m)| {
            m.iter()
                .filter(move |(_, e)| e.seen & (1 << c) != 0 && e.d[c] != 0)
                .map(move |(s, e)| (r.as_str(), s.as_str(), e.d[c]))
        })
    }

    /// Forgets the channel's deltas.
    pub fn clear(&mut self, ch: Channel) {
        let _ = self.drain(ch, false);
    }

    /// Takes the channel's deltas, sorted (zeros dropped).
    pub fn take(&mut self, ch: Channel) -> Vec<(String, String, i64)> {
        let mut out = self.drain(ch, true);
        out.sort_unstable();
        out
    }

    fn drain(&mut self, ch: Channel, collect: bool) -> Vec<(String, String, i64)> {
        let c = ch as usize;
        let mut out = Vec::new();
        if self.keys[c] == 0 && self.net[c] == 0 {
            return out;
        }
        for (r, m) in self.deltas.iter_mut() {
            m.retain(|s, e| {
                if e.seen & (1 << c) != 0 {
                    if collect && e.d[c] != 0 {
                        out.push((r.clone(), s.clone(), e.d[c]));
                    }
                    e.seen &= !(1 << c);
                    e.d[c] = 0;
                }
                e.seen != 0
            });
        }
        self.deltas.retain(|_, m| !m.is_empty());
        self.keys[c] = 0;
        self.net[c] = 0;
        out
    }
}

#[derive(Serialize, Deserialize)]
enum Record {
    Snapshot {
        version: u64,
        own_only: bool,
        counts: Vec<(String, String, i64)>,
        processed: Vec<IncrementId>,
    },
    Merge {
        version: u64,
        ids: Vec<IncrementId>,
        deltas: Vec<(String, String, i64)>,
        foreign: bool,
    },
}

/// Current counts-file magic. `TSCOUNT1` (unsigned snapshot counts) was
/// never released and is treated like a missing file.
const MAGIC: &[u8; 8] = b"TSCOUNT2";
const HEADER: usize = 16;

/// Path of the counts file beside a store.
pub fn counts_path(store: &Path) -> PathBuf {
    let mut s = store.as_os_str().to_owned();
    s.push(".counts");
    PathBuf::from(s)
}

/// The merged counts, the cloud index and the ids already merged.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub version: u64,
    /// True while every merged increment came from this store's own tags, so
    /// the counts can be rebuilt from (and checked against) the tags.
    pub own_only: bool,
    /// Signed: increments of one writer may merge out of order, so a count
    /// can dip below zero until the earlier increment arrives.
    counts: HashMap<(String, String), i64>,
    cloud: BTreeMap<String, BTreeSet<(Reverse<u64>, String)>>,
    /// The load cut off a torn or damaged record.
    pub cut: bool,
    processed: HashSet<IncrementId>,
    /// Increments received but not yet merged.
    queue: Vec<Increment>,
}

impl Counts {
    /// Counts built from scratch (e.g. from the tags).
    pub fn from_counts(counts: HashMap<(String, String), u64>) -> Counts {
        let mut c = Counts {
            own_only: true,
            ..Counts::default()
        };
        for ((r, s), n) in counts {
            c.set(r, s, n as i64);
        }
        c
    }

    fn set(&mut self, r: String, s: String, n: i64) {
        let old = self
            .counts
            .get(&(r.clone(), s.clone()))
            .copied()
            .unwrap_or(0);
        if old == n {
            return;
        }
        let idx = self.cloud.entry(r.clone()).or_default();
        if old > 0 {
            idx.remove(&(Reverse(old as u64), s.clone()));
        }
        if n > 0 {
            idx.insert((Reverse(n as u64), s.clone()));
        }
        if idx.is_empty() {
            self.cloud.remove(&r);
        }
        if n != 0 {
            self.counts.insert((r, s), n);
        } else {
            self.counts.remove(&(r, s));
        }
    }

    fn apply(&mut self, deltas: &[(String, String, i64)]) {
        for (r, s, d) in deltas {
            let old = self.signed(r, s);
            self.set(r.clone(), s.clone(), old + d);
        }
    }

    fn signed(&self, relationship: &str, subject: &str) -> i64 {
        self.counts
            .get(&(relationship.to_owned(), subject.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Count of (relationship, subject); never below zero.
    pub fn get(&self, relationship: &str, subject: &str) -> u64 {
        self.signed(relationship, subject).max(0) as u64
    }

    /// Sum of all counts (equals the tag count when `own_only`).
    pub fn total(&self) -> i64 {
        self.counts.values().sum()
    }

    /// Every non-zero count, sorted (for checks).
    pub fn all(&self) -> BTreeMap<(String, String), i64> {
        self.counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// The top `k` subjects of a relationship with weights.
    pub fn cloud(&self, relationship: &str, k: usize) -> Vec<CloudEntry> {
        let Some(idx) = self.cloud.get(relationship) else {
            return Vec::new();
        };
        let top: Vec<(u64, &String)> = idx.iter().take(k).map(|(Reverse(n), s)| (*n, s)).collect();
        let (max, min) = (
            top.first().map_or(1, |x| x.0) as f64,
            top.last().map_or(1, |x| x.0) as f64,
        );
        top.into_iter()
            .map(|(n, s)| CloudEntry {
                subject: s.clone(),
                count: n,
                weight: if max > min {
                    1.0 + 9.0 * ((n as f64).ln() - min.ln()) / (max.ln() - min.ln())
                } else {
                    10.0
                },
            })
            .collect()
    }

    /// Queues an increment unless already merged or queued; true if queued.
    pub fn submit(&mut self, inc: Increment) -> bool {
        if self.processed.contains(&inc.id) || self.queue.iter().any(|q| q.id == inc.id) {
            return false;
        }
        self.queue.push(inc);
        true
    }

    /// Increments waiting to be merged.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Merges every queued increment as one new version, durably.
    pub fn merge_queue(&mut self, file: &mut CountsFile, own_writer: u64) -> Result<MergeOutcome> {
        if self.queue.is_empty() {
            return Ok(MergeOutcome {
                version: self.version,
                ..MergeOutcome::default()
            });
        }
        let queue = std::mem::take(&mut self.queue);
        let mut merged: BTreeMap<(String, String), i64> = BTreeMap::new();
        for inc in &queue {
            for (r, s, d) in &inc.deltas {
                *merged.entry((r.clone(), s.clone())).or_default() += d;
            }
        }
        let deltas: Vec<(String, String, i64)> = merged
            .into_iter()
            .filter(|(_, d)| *d != 0)
            .map(|((r, s), d)| (r, s, d))
            .collect();
        let ids: Vec<IncrementId> = queue.iter().map(|i| i.id).collect();
        let foreign = ids.iter().any(|i| i.writer != own_writer);
        let rec = Record::Merge {
            version: self.version + 1,
            ids: ids.clone(),
            deltas,
            foreign,
        };
        if let Err(e) = file.append(&rec) {
            self.queue = queue;
            return Err(e);
        }
        let Record::Merge { deltas, .. } = rec else {
            return Err(Error::corrupt("merge record changed kind"));
        };
        self.apply(&deltas);
        self.processed.extend(ids);
        self.version += 1;
        self.own_only &= !foreign;
        Ok(MergeOutcome {
            version: self.version,
            merged: queue.len(),
            discarded: 0,
        })
    }

    /// Records increment ids as merged without changing counts (ids this
    /// store shipped: their changes are already in its own counts).
    pub fn record_shipped(&mut self, file: &mut CountsFile, ids: Vec<IncrementId>) -> Result<()> {
        let rec = Record::Merge {
            version: self.version + 1,
            ids: ids.clone(),
            deltas: Vec::new(),
            foreign: false,
        };
        file.append(&rec)?;
        self.processed.extend(ids);
        self.version += 1;
        Ok(())
    }

    fn snapshot(&self) -> Record {
        let mut counts: Vec<(String, String, i64)> = self
            .counts
            .iter()
            .map(|((r, s), n)| (r.clone(), s.clone(), *n))
            .collect();
        counts.sort_unstable();
        let mut processed: Vec<IncrementId> = self.processed.iter().copied().collect();
        processed.sort_unstable();
        Record::Snapshot {
            version: self.version,
            own_only: self.own_only,
            counts,
            processed,
        }
    }
}

/// The counts file: header then CRC-framed records.
pub(crate) struct CountsFile {
    file: File,
    path: PathBuf,
    len: u64,
    seed: u64,
    snapshot_len: u64,
}

impl CountsFile {
    /// Loads the counts file; `Ok(None)` when absent, damaged or foreign (rebuild).
    pub fn load(store: &Path, seed: u64, writable: bool) -> Result<Option<(Counts, CountsFile)>> {
        let path = counts_path(store);
        let file = match OpenOptions::new().read(true).write(writable).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
        };
        let mut data = Vec::new();
        (&file)
            .read_to_end(&mut data)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        if data.len() < HEADER || &data[..8] != MAGIC || data[8..16] != seed.to_le_bytes() {
            return Ok(None);
        }
        let mut at = HEADER;
        let mut counts: Option<Counts> = None;
        let mut snapshot_len = 0;
        while data.len() >= at + 8 {
            let len =
                u32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]) as usize;
            let crc = u32::from_le_bytes([data[at + 4], data[at + 5], data[at + 6], data[at + 7]]);
            let Some(body) = data.get(at + 8..at + 8 + len) else {
                break;
            };
            if crc32fast::hash(body) != crc {
                break;
            }
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
                    let mut c = Counts {
                        version,
                        own_only,
                        ..Counts::default()
                    };
                    for (r, s, n) in list {
                        c.set(r, s, n);
                    }
                    c.processed = processed.into_iter().collect();
                    snapshot_len = (8 + len) as u64;
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
                    c.apply(&deltas);
                    c.processed.extend(ids);
                    c.version = version;
                    c.own_only &= !foreign;
                }
                _ => break,
            }
            at += 8 + len;
        }
        let Some(mut counts) = counts else {
            return Ok(None);
        };
        counts.cut = at < data.len();
        // A torn last merge was never acknowledged: cut it off.
        if writable && at < data.len() {
            file.set_len(at as u64)
                .and_then(|()| file.sync_all())
                .map_err(|e| Error::io(format!("truncating {}", path.display()), e))?;
        }
        Ok(Some((
            counts,
            CountsFile {
                file,
                path,
                len: at as u64,
                seed,
                snapshot_len,
            },
        )))
    }

    /// Writes a fresh file holding one snapshot, atomically (temp + rename).
    pub fn create(store: &Path, seed: u64, counts: &Counts) -> Result<CountsFile> {
        let path = counts_path(store);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let io = |e, what: &str| Error::io(format!("{what} {}", tmp.display()), e);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| io(e, "creating"))?;
        let mut head = Vec::with_capacity(HEADER);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&seed.to_le_bytes());
        file.write_all_at(&head, 0).map_err(|e| io(e, "writing"))?;
        let mut f = CountsFile {
            file,
            path: tmp.clone(),
            len: HEADER as u64,
            seed,
            snapshot_len: 0,
        };
        f.append(&counts.snapshot())?;
        f.snapshot_len = f.len - HEADER as u64;
        std::fs::rename(&tmp, &path).map_err(|e| {
            Error::io(
                format!("renaming {} to {}", tmp.display(), path.display()),
                e,
            )
        })?;
        if let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        f.path = path;
        Ok(f)
    }

    fn append(&mut self, rec: &Record) -> Result<()> {
        let body = bincode::serde::encode_to_vec(rec, bincode::config::standard())
            .map_err(|e| Error::InvalidArgument(format!("encoding counts record: {e}")))?;
        let mut buf = Vec::with_capacity(body.len() + 8);
        buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
        buf.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        buf.extend_from_slice(&body);
        let r = self
            .file
            .write_all_at(&buf, self.len)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = r {
            let _ = self.file.set_len(self.len);
            return Err(Error::io(format!("writing {}", self.path.display()), e));
        }
        self.len += buf.len() as u64;
        Ok(())
    }

    /// True when the merge log has grown past the snapshot and should be folded.
    pub fn wants_compaction(&self) -> bool {
        self.len > HEADER as u64 + 2 * self.snapshot_len.max(64 << 10)
    }

    /// Rewrites the file as a single snapshot of `counts`.
    pub fn compact(&mut self, store: &Path, counts: &Counts) -> Result<()> {
        *self = CountsFile::create(store, self.seed, counts)?;
        Ok(())
    }
}

/// Distinct pending keys past which a handle merges its own increment.
pub const AUTO_MERGE_KEYS: usize = 1_000_000;

/// Counts in memory plus their file (absent for read-only handles that rebuilt).
pub(crate) struct Loaded {
    counts: Counts,
    file: Option<CountsFile>,
    threshold: usize,
}

/// Counts every tag's (relationship, subject) by reading the store.
fn count_tags(store: &crate::Store) -> Result<HashMap<(String, String), u64>> {
    let mut m: HashMap<(String, String), u64> = HashMap::new();
    for t in store.tags() {
        let t = t?;
        *m.entry((t.relationship, t.subject)).or_default() += 1;
    }
    Ok(m)
}

impl crate::Store {
    /// Loads (or rebuilds) the counts; the caller holds the counts mutex.
    fn ensure_counts<'a>(&self, slot: &'a mut Option<Loaded>) -> Result<&'a mut Loaded> {
        let stale = self.read().counts_stale;
        if stale && slot.as_ref().is_some_and(|l| l.counts.own_only) {
            // Changes were made with counting off (or lost in a crash):
            // counts of our own tags must be rebuilt.
            *slot = None;
        }
        if slot.is_none() {
            let (writable, tags, pending_net) = {
                let g = self.read();
                (g.file.writable(), g.tag_count, g.pending.net(Channel::Own))
            };
            let loaded = CountsFile::load(self.path(), self.seed, writable)?;
            // Ids already merged (or shipped) stay merged across a rebuild.
            let (prev_processed, prev_version) = loaded
                .as_ref()
                .map(|(c, _)| (c.processed.clone(), c.version))
                .unwrap_or_default();
            let usable = loaded.filter(|(c, _)| {
                // Counts of our own tags must add up to the tag count, and
                // must not have lost a record; otherwise rebuild.
                !c.own_only || (!stale && !c.cut && c.total() + pending_net == tags as i64)
            });
            *slot = Some(match usable {
                Some((counts, file)) => Loaded {
                    counts,
                    file: Some(file),
                    threshold: 1,
                },
                None => {
                    // The scan reflects every change so far: drop what is
                    // pending for the local merge (the outbox stays).
                    {
                        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
                        g.pending.clear(Channel::Own);
                        g.counts_stale = false;
                    }
                    let mut counts = Counts::from_counts(count_tags(self)?);
                    counts.processed = prev_processed;
                    counts.version = prev_version;
                    let file = if writable {
                        Some(CountsFile::create(self.path(), self.seed, &counts)?)
                    } else {
                        None
                    };
                    Loaded {
                        counts,
                        file,
                        threshold: 1,
                    }
                }
            });
        }
        slot.as_mut()
            .ok_or_else(|| Error::corrupt("counts failed to load"))
    }

    fn counts_lock(&self) -> std::sync::MutexGuard<'_, Option<Loaded>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn next_id(&self) -> IncrementId {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        let seq = g.next_seq;
        g.next_seq += 1;
        IncrementId {
            writer: self.writer_id,
            seq,
        }
    }

    /// Takes this handle's count changes since the last call as an increment
    /// to ship to a collector; `None` if nothing changed. The store's own
    /// counts already include these changes, and it records the id as merged,
    /// so submitting the increment back here changes nothing.
    pub fn take_increment(&self) -> Result<Option<Increment>> {
        if !self.read().file.writable() {
            return Ok(None);
        }
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        let l = self.ensure_counts(&mut slot)?;
        let deltas = {
            let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
            g.pending.take(Channel::Outbox)
        };
        if deltas.is_empty() {
            return Ok(None);
        }
        let id = self.next_id();
        let file = l.file.as_mut().ok_or(Error::ReadOnly)?;
        l.counts.record_shipped(file, vec![id])?;
        Ok(Some(Increment { id, deltas }))
    }

    /// Receives an increment (from another writer, or back from this one);
    /// merges the queue once it holds the merge threshold. Returns false if
    /// the increment was a duplicate or already merged (it is discarded).
    pub fn submit_increment(&self, inc: Increment) -> Result<bool> {
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        let l = self.ensure_counts(&mut slot)?;
        let fresh = l.counts.submit(inc);
        if l.counts.queued() >= l.threshold {
            merge_loaded(self, l)?;
        }
        Ok(fresh)
    }

    /// Merges every queued increment now, as one new counts version.
    pub fn merge_increments(&self) -> Result<MergeOutcome> {
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        let l = self.ensure_counts(&mut slot)?;
        merge_loaded(self, l)
    }

    /// Sets how many increments are queued before a merge (1 = merge each).
    pub fn set_merge_threshold(&self, n: usize) -> Result<()> {
        let mut slot = self.counts_lock();
        self.ensure_counts(&mut slot)?.threshold = n.max(1);
        Ok(())
    }

    /// Turns counting of this handle's changes on or off (on by default).
    /// Changes made while off make the counts stale; they are then rebuilt
    /// from the tags on next use, and are never shipped.
    pub fn set_counting(&self, on: bool) {
        let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
        g.counting = on;
    }

    /// Merges this handle's own pending changes into its counts.
    pub(crate) fn merge_own_counts(&self) -> Result<()> {
        let (pending, stale, writable) = {
            let g = self.read();
            (
                g.pending.len(Channel::Own) > 0,
                g.counts_stale,
                g.file.writable(),
            )
        };
        if !writable || (!pending && !stale) {
            return Ok(());
        }
        let mut slot = self.counts_lock();
        let l = self.ensure_counts(&mut slot)?;
        let deltas = {
            let mut g = self.inner.write().unwrap_or_else(|p| p.into_inner());
            g.pending.take(Channel::Own)
        };
        if deltas.is_empty() {
            return Ok(());
        }
        let id = self.next_id();
        l.counts.submit(Increment { id, deltas });
        merge_loaded(self, l).map(|_| ())
    }

    /// At close: merge own pending changes, or drop stale own counts.
    pub(crate) fn finish_counts(&self) -> Result<()> {
        let (writable, stale) = {
            let g = self.read();
            (g.file.writable(), g.counts_stale)
        };
        if !writable {
            return Ok(());
        }
        let own_only = || match CountsFile::load(self.path(), self.seed, false) {
            Ok(Some((c, _))) => c.own_only,
            _ => true,
        };
        if stale && own_only() {
            // Counts of our own tags that missed changes: drop them; the next
            // use rebuilds them from the tags. (A collector's counts include
            // other writers' increments and are kept.)
            *self.counts_lock() = None;
            return match std::fs::remove_file(counts_path(self.path())) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(
                    format!("removing stale {}", counts_path(self.path()).display()),
                    e,
                )),
                _ => Ok(()),
            };
        }
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        if let Some(l) = slot.as_mut() {
            if l.counts.queued() > 0 {
                merge_loaded(self, l)?;
            }
        }
        Ok(())
    }

    /// Objects carrying `subject` under `relationship`, as of the last merge
    /// (this handle's own changes are merged first).
    pub fn count(&self, subject: &str, relationship: &str) -> Result<u64> {
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        Ok(self
            .ensure_counts(&mut slot)?
            .counts
            .get(relationship, subject))
    }

    /// The `top` most used subjects of `relationship`, most used first.
    pub fn cloud(&self, relationship: &str, top: usize) -> Result<Vec<CloudEntry>> {
        self.merge_own_counts()?;
        let mut slot = self.counts_lock();
        Ok(self
            .ensure_counts(&mut slot)?
            .counts
            .cloud(relationship, top))
    }

    /// Version of the counts: the number of merges so far.
    pub fn counts_version(&self) -> Result<u64> {
        let mut slot = self.counts_lock();
        Ok(self.ensure_counts(&mut slot)?.counts.version)
    }

    /// Compares persisted counts with counts derived from the tags; one line per fault.
    pub fn check_counts(&self) -> Result<Vec<String>> {
        let Some((c, _)) = CountsFile::load(self.path(), self.seed, false)? else {
            return Ok(Vec::new());
        };
        if !c.own_only {
            return Ok(Vec::new());
        }
        let mut persisted = c.all();
        {
            // Files that would not be served (stale, cut, or a total that
            // disagrees with the tag count) are rebuilt on next use.
            let g = self.read();
            if g.counts_stale
                || c.cut
                || c.total() + g.pending.net(Channel::Own) != g.tag_count as i64
            {
                return Ok(Vec::new());
            }
            // This handle's unmerged changes are not in the file yet.
            for (r, s, d) in g.pending.iter(Channel::Own) {
                *persisted.entry((r.to_owned(), s.to_owned())).or_default() += d;
            }
        }
        persisted.retain(|_, v| *v != 0);
        let derived: BTreeMap<(String, String), i64> = count_tags(self)?
            .into_iter()
            .map(|(k, v)| (k, v as i64))
            .collect();
        if persisted == derived {
            return Ok(Vec::new());
        }
        let mut faults = Vec::new();
        for (k, v) in &derived {
            let p = persisted.get(k).copied().unwrap_or(0);
            if p != *v && faults.len() < 20 {
                faults.push(format!(
                    "counts: <*, {:?}, {:?}> has {v} tags but the counts file says {p}",
                    k.0, k.1
                ));
            }
        }
        for (k, p) in &persisted {
            if !derived.contains_key(k) && faults.len() < 20 {
                faults.push(format!(
                    "counts: <*, {:?}, {:?}> has no tags but the counts file says {p}",
                    k.0, k.1
                ));
            }
        }
        Ok(faults)
    }
}

fn merge_loaded(store: &crate::Store, l: &mut Loaded) -> Result<MergeOutcome> {
    let Some(file) = l.file.as_mut() else {
        return Err(Error::ReadOnly);
    };
    let out = l.counts.merge_queue(file, store.writer_id)?;
    if file.wants_compaction() {
        file.compact(store.path(), &l.counts)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increment_bytes_roundtrip_and_reject() {
        let inc = Increment {
            id: IncrementId { writer: 3, seq: 9 },
            deltas: vec![("isa".into(), "sunset".into(), 2)],
        };
        let b = inc.to_bytes().expect("encode");
        assert_eq!(Increment::from_bytes(&b).expect("decode"), inc);
        assert!(Increment::from_bytes(&b[..b.len() - 1]).is_err());
        let mut long = b.clone();
        long.push(0);
        assert!(Increment::from_bytes(&long).is_err());
    }

    #[test]
    fn cloud_orders_and_weights() {
        let mut m = HashMap::new();
        m.insert(("isa".to_string(), "a".to_string()), 100);
        m.insert(("isa".to_string(), "b".to_string()), 10);
        m.insert(("isa".to_string(), "c".to_string()), 1);
        m.insert(("owns".to_string(), "z".to_string()), 5);
        let c = Counts::from_counts(m);
        let cl = c.cloud("isa", 2);
        assert_eq!(cl.len(), 2);
        assert_eq!((cl[0].subject.as_str(), cl[0].count), ("a", 100));
        assert_eq!(cl[0].weight, 10.0);
        assert_eq!(cl[1].weight, 1.0);
        assert_eq!(c.total(), 116);
    }

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
        let full = f.len;
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
}
