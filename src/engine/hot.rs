//! Hot keys: the results of a key found again and again, kept in memory
//! (DESIGN.md §5.3.2).
//!
//! A FIND of a large key streams one 160-byte slot per result; LMDB's leaf
//! holds a result in some 45 bytes, so a peak FIND drawn over and over
//! (a Zipf-drawn workload) stays in the CPU's caches there and not here.
//! A key whose FIND returned at least [`MIN_RESULTS`] results twice since
//! its last write has its results copied, packed, on its third FIND; later
//! FINDs read the copy until a write to the key drops it. Memory only:
//! nothing is written, a reopen starts empty.

use crate::format::Half;
use foldhash::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// FINDs returning fewer results are not copied: a FIND of a few hundred
/// results costs a few µs, and copies of the many keys that size churned
/// through the bound (files 5 M: the Zipf p50 8.6 → 10.3 µs, every key
/// once 1.73× → 1.37× LMDB with 32 here).
const MIN_RESULTS: u64 = 256;
/// FINDs of a large key since its last write before the next one copies it.
const SEEN_BEFORE_COPY: u32 = 2;
/// Keys counted at once; the count starts over past it.
const MAX_SEEN: usize = 65_536;
/// Default bound on the bytes of all copies.
pub(super) const DEFAULT_BYTES: usize = 32 << 20;
/// Words of [`Hot::marks`] (4,096 bits).
const MARK_WORDS: usize = 64;
/// A `seen` count that never copies: the key's results passed the bound.
const TOO_BIG: u32 = u32::MAX;

/// The results of one key, concatenated, and where each ends.
pub(crate) struct HotSet {
    pub text: String,
    pub ends: Vec<u32>,
}

impl HotSet {
    /// Bytes of memory the copy holds.
    fn bytes(&self) -> usize {
        self.text.len() + 4 * self.ends.len() + 64
    }

    /// Result `i`, if the copy has one (each end is a character boundary,
    /// checked when the copy was made).
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        self.text.get(start..end)
    }
}

struct Entry {
    half: Half,
    relationship: Box<str>,
    name: Box<str>,
    set: Arc<HotSet>,
    /// Read since the clock hand last passed it.
    used: AtomicBool,
    /// Which keeping of the key this is (the clock's entries name it).
    seq: u64,
}

#[derive(Default)]
struct Inner {
    /// Copies by key hash (one key a hash; another key of the same hash
    /// is not copied while it stands).
    copies: HashMap<u64, Entry>,
    /// Large FINDs of each key since its last write.
    seen: HashMap<u64, u32>,
    /// The clock: copies in the order kept, as (hash, seq); an entry whose
    /// copy has gone since is skipped.
    clock: VecDeque<(u64, u64)>,
    bytes: usize,
    seq: u64,
}

impl Inner {
    /// Marks the key of `hash` too big to copy: no copy until it is written.
    fn set_too_big(&mut self, hash: u64) {
        self.seen.insert(hash, TOO_BIG);
    }

    /// Drops one copy: the first in the clock not read since the hand last
    /// passed it (a copy read meanwhile goes round again). False if none is kept.
    fn evict_one(&mut self) -> bool {
        while let Some((hash, seq)) = self.clock.pop_front() {
            let Some(e) = self.copies.get_mut(&hash).filter(|e| e.seq == seq) else {
                continue;
            };
            if e.used.swap(false, Ordering::Relaxed) {
                self.clock.push_back((hash, seq));
                continue;
            }
            if let Some(e) = self.copies.remove(&hash) {
                self.bytes -= e.set.bytes();
            }
            return true;
        }
        false
    }
}

/// What a FIND does with a key (see [`Hot::look`]).
pub(crate) enum Look {
    /// Reads this copy.
    Copy(Arc<HotSet>),
    /// Walks the blocks and makes a copy.
    Make,
    /// Walks the blocks.
    Walk,
}

/// The copies of hot keys' results and what decides them.
pub(crate) struct Hot {
    inner: RwLock<Inner>,
    /// 4,096 bits, one chosen by bits 20–31 of a key's hash (its low 16
    /// are the key fingerprint): set when a key of that bit is counted,
    /// cleared only when every copy and count goes. A FIND or write of a key whose bit is clear has no
    /// copy or count to look at, and takes no lock.
    marks: [AtomicU64; MARK_WORDS],
    /// Bound on the bytes of all copies; 0 keeps none.
    limit: AtomicUsize,
    /// Fewest results a FIND must return to count ([`MIN_RESULTS`]).
    min_results: AtomicU64,
    /// FINDs answered from a copy since the store was opened.
    reads: AtomicU64,
}

impl Hot {
    /// No copies, bounded by `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Hot {
            inner: RwLock::new(Inner::default()),
            marks: std::array::from_fn(|_| AtomicU64::new(0)),
            limit: AtomicUsize::new(limit),
            min_results: AtomicU64::new(MIN_RESULTS),
            reads: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The word and bit of a key hash's mark.
    fn mark_of(hash: u64) -> (usize, u64) {
        let b = (hash >> 20) as usize % (64 * MARK_WORDS);
        (b / 64, 1 << (b % 64))
    }

    fn marked(&self, hash: u64) -> bool {
        let (w, bit) = Self::mark_of(hash);
        self.marks[w].load(Ordering::Relaxed) & bit != 0
    }

    fn mark(&self, hash: u64) {
        let (w, bit) = Self::mark_of(hash);
        self.marks[w].fetch_or(bit, Ordering::Relaxed);
    }

    /// Whether a FIND of the key reads its copy, makes one, or walks.
    pub fn look(&self, hash: u64, half: Half, relationship: &str, name: &str) -> Look {
        if !self.marked(hash) {
            return Look::Walk;
        }
        let g = self.read();
        if let Some(e) = g.copies.get(&hash) {
            if e.half == half && &*e.relationship == relationship && &*e.name == name {
                e.used.store(true, Ordering::Relaxed);
                self.reads.fetch_add(1, Ordering::Relaxed);
                return Look::Copy(e.set.clone());
            }
            // Another key of the same hash holds the place.
            return Look::Walk;
        }
        match g.seen.get(&hash) {
            Some(&n) if n >= SEEN_BEFORE_COPY && n != TOO_BIG => Look::Make,
            _ => Look::Walk,
        }
    }

    /// Counts a FIND of the key that returned `results` results.
    pub fn note(&self, hash: u64, results: u64) {
        if results < self.min_results.load(Ordering::Relaxed) || self.limit() == 0 {
            return;
        }
        let mut g = self.lock();
        if g.seen.len() >= MAX_SEEN {
            g.seen.clear();
        }
        let n = g.seen.entry(hash).or_insert(0);
        if *n != TOO_BIG {
            *n = (*n + 1).min(TOO_BIG - 1);
        }
        self.mark(hash);
    }

    /// Most bytes of results one copy may hold.
    pub fn max_copy(&self) -> usize {
        (self.limit() / 4).min(u32::MAX as usize / 2)
    }

    fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// The key's results passed [`Hot::max_copy`]: no copy until it is written.
    pub fn too_big(&self, hash: u64) {
        self.lock().set_too_big(hash);
    }

    /// Keeps a copy made under the read lock (no write came between its
    /// walk and now), dropping copies not read lately past the bound.
    pub fn keep(&self, hash: u64, half: Half, relationship: &str, name: &str, set: Arc<HotSet>) {
        let limit = self.limit();
        let mut g = self.lock();
        let need = set.bytes();
        if need > self.max_copy() {
            // Past a quarter of the bound (a walk stops there only between
            // steps): not kept, and no other copy dropped for it.
            g.set_too_big(hash);
            return;
        }
        while g.bytes + need > limit && g.evict_one() {}
        if g.bytes + need > limit {
            return;
        }
        g.seq += 1;
        let seq = g.seq;
        g.bytes += need;
        g.seen.remove(&hash);
        let e = Entry {
            half,
            relationship: relationship.into(),
            name: name.into(),
            set,
            used: AtomicBool::new(false),
            seq,
        };
        if let Some(old) = g.copies.insert(hash, e) {
            g.bytes -= old.set.bytes();
        }
        // (Its mark was set when it was counted: no mark is cleared but
        // with every copy and count.)
        g.clock.push_back((hash, seq));
        // Entries of copies dropped by writes, past twice the copies kept.
        if g.clock.len() > 2 * g.copies.len() + 1024 {
            let Inner { clock, copies, .. } = &mut *g;
            clock.retain(|(h, q)| copies.get(h).is_some_and(|e| e.seq == *q));
        }
    }

    /// A write to the key of `hash` (under the write lock): its copy and count go.
    pub fn forget(&self, hash: u64) {
        if !self.marked(hash) {
            return;
        }
        let mut g = self.lock();
        g.seen.remove(&hash);
        if let Some(e) = g.copies.remove(&hash) {
            g.bytes -= e.set.bytes();
        }
    }

    /// A write whose keys are not known one by one (a bulk round): every
    /// copy and count goes.
    pub fn forget_all(&self) {
        if self.marks.iter().all(|w| w.load(Ordering::Relaxed) == 0) {
            return;
        }
        let mut g = self.lock();
        *g = Inner::default();
        for w in &self.marks {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// Sets the bound on the bytes of all copies (0 keeps none), dropping
    /// every copy kept.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
        self.mark(0);
        self.forget_all();
    }

    /// Copies kept, their bytes, and the FINDs they answered.
    pub fn usage(&self) -> HotUsage {
        let g = self.read();
        HotUsage {
            copies: g.copies.len(),
            bytes: g.bytes,
            reads: self.reads.load(Ordering::Relaxed),
        }
    }
}

/// What a store's hot copies of FIND results hold ([`super::Store::hot_usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotUsage {
    /// Keys whose results are copied now.
    pub copies: usize,
    /// Bytes of memory the copies hold.
    pub bytes: usize,
    /// FINDs answered from a copy since the store was opened.
    pub reads: u64,
}

impl super::Store {
    /// Sets the memory kept for copies of hot keys' FIND results (default
    /// 32 MiB; 0 keeps none), dropping the copies kept so far.
    pub fn set_hot_bytes(&self, bytes: usize) {
        self.hot.set_limit(bytes);
    }

    /// What the hot copies of FIND results hold now, and how many FINDs
    /// they answered.
    pub fn hot_usage(&self) -> HotUsage {
        self.hot.usage()
    }

    /// Sets the fewest results a FIND must return to count towards a copy
    /// (256), so tests reach copies with small keys.
    #[cfg(feature = "test-hooks")]
    pub fn set_hot_min_results(&self, n: u64) {
        self.hot.min_results.store(n, Ordering::Relaxed);
    }
}
