//! The merged counts, the tag cloud index, and exactly-once merging of increments.

use super::increment::{CloudEntry, Increment, IncrementId, MergeOutcome};
use super::log::{CountsFile, RecordRef};
use super::pending::SharedDeltas;
use crate::error::{Error, Result};
use foldhash::HashMap as FastMap;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The merged counts, the cloud index and the ids already merged.
#[derive(Debug, Default)]
pub struct Counts {
    pub version: u64,
    /// True while every merged increment came from this store's own tags, so
    /// the counts can be rebuilt from (and checked against) the tags.
    pub own_only: bool,
    /// By relationship, then subject (looked up by `&str`, no allocation).
    /// Signed: increments of one writer may merge out of order, so a count
    /// can dip below zero until the earlier increment arrives.
    counts: FastMap<String, FastMap<String, i64>>,
    /// The cloud index of each relationship whose cloud was asked for:
    /// `(count desc, subject)` for every positive count, kept current from
    /// then on. Built on the first `cloud` call, so loads and merges of
    /// relationships nobody asks the cloud of pay nothing for it.
    cloud: BTreeMap<String, BTreeSet<(Reverse<u64>, String)>>,
    /// The load cut off a torn or damaged record.
    pub cut: bool,
    pub processed: HashSet<IncrementId>,
    /// Increments received but not yet merged.
    queue: Vec<Increment>,
}

impl Counts {
    /// No counts yet, at `version`.
    pub fn empty(version: u64, own_only: bool) -> Counts {
        Counts {
            version,
            own_only,
            ..Counts::default()
        }
    }

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

    /// Counts of a snapshot, into counts that hold none yet: each map is
    /// sized once (growing them one count at a time was 43 % of loading
    /// 259,000 counts), and no count is looked up before it is stored.
    pub(super) fn load_snapshot(&mut self, list: Vec<(String, String, i64)>) {
        self.reserve_for(list.iter().map(|(r, _, _)| r.as_str()));
        for (r, s, n) in list {
            if n != 0 && self.cloud.is_empty() {
                if let Some(m) = self.counts.get_mut(&r) {
                    m.insert(s, n);
                    continue;
                }
            }
            self.set(r, s, n);
        }
        self.counts.retain(|_, m| !m.is_empty());
    }

    /// Makes room for one more count of each relationship named (a
    /// snapshot's or a merge's, about to be loaded), each map grown once.
    pub(super) fn reserve_for<'a>(&mut self, rels: impl Iterator<Item = &'a str>) {
        let mut per: FastMap<&str, usize> = FastMap::default();
        for r in rels {
            *per.entry(r).or_default() += 1;
        }
        for (r, n) in per {
            match self.counts.get_mut(r) {
                Some(m) => m.reserve(n),
                None => {
                    let mut m = FastMap::default();
                    m.reserve(n);
                    self.counts.insert(r.to_owned(), m);
                }
            }
        }
    }

    pub(super) fn set(&mut self, r: String, s: String, n: i64) {
        let old = self.signed(&r, &s);
        self.change(r, s, old, n);
    }

    /// Moves the count of (`r`, `s`) from `old` (what it is) to `n`.
    fn change(&mut self, r: String, s: String, old: i64, n: i64) {
        if old == n {
            return;
        }
        if let Some(idx) = self.cloud.get_mut(&r) {
            if old > 0 {
                idx.remove(&(Reverse(old as u64), s.clone()));
            }
            if n > 0 {
                idx.insert((Reverse(n as u64), s.clone()));
            }
        }
        if n != 0 {
            self.counts.entry(r).or_default().insert(s, n);
        } else if let Some(m) = self.counts.get_mut(&r) {
            m.remove(&s);
            if m.is_empty() {
                self.counts.remove(&r);
            }
        }
    }

    /// Adds each delta to its count, copying a key's strings only when the
    /// key is new to the counts (an own merge borrows them from the
    /// pending map; a merge of queued increments from their records).
    pub(super) fn apply<'a>(&mut self, deltas: impl IntoIterator<Item = (&'a str, &'a str, i64)>) {
        let mut emptied = false;
        for (r, s, d) in deltas {
            if d == 0 {
                continue;
            }
            if self.cloud.contains_key(r) {
                // The cloud index of this relationship moves with its counts.
                let old = self.signed(r, s);
                self.change(r.to_owned(), s.to_owned(), old, old + d);
                continue;
            }
            let m = match self.counts.get_mut(r) {
                Some(m) => m,
                None => self.counts.entry(r.to_owned()).or_default(),
            };
            match m.get_mut(s) {
                Some(n) => {
                    *n += d;
                    if *n == 0 {
                        m.remove(s);
                        emptied |= m.is_empty();
                    }
                }
                None => {
                    m.insert(s.to_owned(), d);
                }
            }
        }
        if emptied {
            self.counts.retain(|_, m| !m.is_empty());
        }
    }

    fn signed(&self, relationship: &str, subject: &str) -> i64 {
        self.counts
            .get(relationship)
            .and_then(|m| m.get(subject))
            .copied()
            .unwrap_or(0)
    }

    /// Count of (relationship, subject); never below zero.
    pub fn get(&self, relationship: &str, subject: &str) -> u64 {
        self.signed(relationship, subject).max(0) as u64
    }

    /// Sum of all counts (equals the tag count when `own_only`).
    pub fn total(&self) -> i64 {
        self.counts.values().flat_map(|m| m.values()).sum()
    }

    /// Every non-zero count, sorted (for checks).
    pub fn all(&self) -> BTreeMap<(String, String), i64> {
        self.counts
            .iter()
            .flat_map(|(r, m)| m.iter().map(move |(s, n)| ((r.clone(), s.clone()), *n)))
            .collect()
    }

    /// The top `k` subjects of a relationship with weights.
    pub fn cloud(&mut self, relationship: &str, k: usize) -> Vec<CloudEntry> {
        if !self.cloud.contains_key(relationship) {
            let idx: BTreeSet<(Reverse<u64>, String)> = self
                .counts
                .get(relationship)
                .into_iter()
                .flatten()
                .filter(|(_, n)| **n > 0)
                .map(|(s, n)| (Reverse(*n as u64), s.clone()))
                .collect();
            self.cloud.insert(relationship.to_owned(), idx);
        }
        let Some(idx) = self.cloud.get(relationship) else {
            return Vec::new();
        };
        let top: Vec<(u64, &str)> = idx
            .iter()
            .take(k)
            .map(|(Reverse(n), s)| (*n, s.as_str()))
            .collect();
        weigh(top)
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
        let ids: Vec<IncrementId> = queue.iter().map(|i| i.id).collect();
        let foreign = ids.iter().any(|i| i.writer != own_writer);
        let deltas: Vec<(&str, &str, i64)> = if let [one] = queue.as_slice() {
            // One increment (a handle's own changes): its keys are distinct
            // already, and a merge record needs no order.
            one.deltas
                .iter()
                .map(|(r, s, d)| (r.as_str(), s.as_str(), *d))
                .collect()
        } else {
            let mut merged: BTreeMap<(&str, &str), i64> = BTreeMap::new();
            for inc in &queue {
                for (r, s, d) in &inc.deltas {
                    *merged.entry((r.as_str(), s.as_str())).or_default() += d;
                }
            }
            merged.into_iter().map(|((r, s), d)| (r, s, d)).collect()
        };
        if let Err(e) = self.write_merge(file, ids, deltas, foreign) {
            // Still queued, for the next attempt.
            self.queue = queue;
            return Err(e);
        }
        Ok(MergeOutcome {
            version: self.version,
            merged: queue.len(),
            discarded: 0,
        })
    }

    /// Merges a handle's own changes, taken as increment `id`, as one new
    /// version, durably; nothing else may be queued. Their strings are
    /// borrowed for the record and copied only for keys new to the counts.
    pub fn merge_own(
        &mut self,
        file: &mut CountsFile,
        id: IncrementId,
        deltas: &SharedDeltas,
    ) -> Result<MergeOutcome> {
        if !self.queue.is_empty() {
            return Err(Error::corrupt("own merge with increments queued"));
        }
        if self.processed.contains(&id) {
            return Ok(MergeOutcome {
                version: self.version,
                merged: 0,
                discarded: 1,
            });
        }
        let deltas = deltas.iter().map(|(r, s, d)| (&**r, &**s, *d)).collect();
        self.write_merge(file, vec![id], deltas, false)?;
        Ok(MergeOutcome {
            version: self.version,
            merged: 1,
            discarded: 0,
        })
    }

    /// Records increment ids as merged without changing counts (ids this
    /// store shipped: their changes are already in its own counts).
    pub fn record_shipped(&mut self, file: &mut CountsFile, ids: Vec<IncrementId>) -> Result<()> {
        self.write_merge(file, ids, Vec::new(), false)
    }

    /// Appends one merge record (zero deltas dropped) and makes it durable,
    /// then applies it: the new version. Nothing changes if the append fails.
    fn write_merge(
        &mut self,
        file: &mut CountsFile,
        ids: Vec<IncrementId>,
        mut deltas: Vec<(&str, &str, i64)>,
        foreign: bool,
    ) -> Result<()> {
        deltas.retain(|x| x.2 != 0);
        let rec = RecordRef::Merge {
            version: self.version + 1,
            ids,
            deltas,
            foreign,
        };
        file.append(&rec)?;
        let RecordRef::Merge { ids, deltas, .. } = rec else {
            return Err(Error::corrupt("merge record changed kind"));
        };
        if deltas.len() >= 4096 {
            // A bulk load's thousands of new keys: each map grown once,
            // not step by step with a rehash each time.
            let grows: Vec<&str> = (deltas.iter())
                .filter(|x| x.2 > 0 && !self.cloud.contains_key(x.0))
                .map(|x| x.0)
                .collect();
            self.reserve_for(grows.into_iter());
        }
        self.apply(deltas);
        self.processed.extend(ids);
        self.version += 1;
        self.own_only &= !foreign;
        Ok(())
    }

    /// The snapshot record of these counts, borrowing their strings (a
    /// copy and sort of every count was half of a compaction's time).
    pub(super) fn snapshot(&self) -> RecordRef<'_> {
        let counts: Vec<(&str, &str, i64)> = self
            .counts
            .iter()
            .flat_map(|(r, m)| m.iter().map(move |(s, n)| (r.as_str(), s.as_str(), *n)))
            .collect();
        let mut processed: Vec<IncrementId> = self.processed.iter().copied().collect();
        processed.sort_unstable();
        RecordRef::Snapshot {
            version: self.version,
            own_only: self.own_only,
            counts,
            processed,
        }
    }
}

/// Cloud entries of the top subjects (count descending), weighted 1–10 by
/// the log of their count between the smallest and the largest shown.
pub(super) fn weigh(top: Vec<(u64, &str)>) -> Vec<CloudEntry> {
    let (max, min) = (
        top.first().map_or(1, |x| x.0) as f64,
        top.last().map_or(1, |x| x.0) as f64,
    );
    top.into_iter()
        .map(|(n, s)| CloudEntry {
            subject: s.to_owned(),
            count: n,
            weight: if max > min {
                1.0 + 9.0 * ((n as f64).ln() - min.ln()) / (max.ln() - min.ln())
            } else {
                10.0
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_orders_and_weights() {
        let mut m = HashMap::new();
        m.insert(("isa".to_string(), "a".to_string()), 100);
        m.insert(("isa".to_string(), "b".to_string()), 10);
        m.insert(("isa".to_string(), "c".to_string()), 1);
        m.insert(("owns".to_string(), "z".to_string()), 5);
        let mut c = Counts::from_counts(m);
        let cl = c.cloud("isa", 2);
        assert_eq!(cl.len(), 2);
        assert_eq!((cl[0].subject.as_str(), cl[0].count), ("a", 100));
        assert_eq!(cl[0].weight, 10.0);
        assert_eq!(cl[1].weight, 1.0);
        assert_eq!(c.total(), 116);
    }
}
