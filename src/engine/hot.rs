//! Hot keys: the results of a key FOUND again and again, kept in memory
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
use foldhash::{HashMap, HashMapExt};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// FINDs returning fewer results are not worth a copy (a primary bucket's
/// FIND reads a few lines).
const MIN_RESULTS: u64 = 32;
/// FINDs of a large key since its last write before the next one copies it.
const SEEN_BEFORE_COPY: u32 = 2;
/// Keys counted at once; the count starts over past it.
const MAX_SEEN: usize = 65_536;
/// Default bound on the bytes of all copies.
pub(super) const DEFAULT_BYTES: usize = 32 << 20;
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
    used: u64,
}

#[derive(Default)]
struct Inner {
    /// Copies by key hash (one key a hash; another key of the same hash
    /// is not copied while it stands).
    copies: HashMap<u64, Entry>,
    /// Large FINDs of each key since its last write.
    seen: HashMap<u64, u32>,
    bytes: usize,
    tick: u64,
}

/// The copies of hot keys' results and what decides them.
pub(crate) struct Hot {
    inner: Mutex<Inner>,
    /// Some copy or count exists (a FIND or write of a cold store skips the lock).
    any: AtomicBool,
    /// Bound on the bytes of all copies; 0 keeps none.
    limit: AtomicUsize,
}

impl Hot {
    /// No copies, bounded by `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Hot {
            inner: Mutex::new(Inner {
                copies: HashMap::new(),
                seen: HashMap::new(),
                bytes: 0,
                tick: 0,
            }),
            any: AtomicBool::new(false),
            limit: AtomicUsize::new(limit),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The copy of a key's results, if one is kept.
    pub fn get(
        &self,
        hash: u64,
        half: Half,
        relationship: &str,
        name: &str,
    ) -> Option<Arc<HotSet>> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let mut g = self.lock();
        g.tick += 1;
        let tick = g.tick;
        let e = g.copies.get_mut(&hash)?;
        if e.half != half || &*e.relationship != relationship || &*e.name != name {
            return None;
        }
        e.used = tick;
        Some(e.set.clone())
    }

    /// Counts a FIND of the key that returned `results` results.
    pub fn note(&self, hash: u64, results: u64) {
        if results < MIN_RESULTS || self.limit() == 0 {
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
        self.any.store(true, Ordering::Relaxed);
    }

    /// True when this FIND of the key should make its copy.
    pub fn wants_copy(&self, hash: u64) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let g = self.lock();
        let n = g.seen.get(&hash).copied().unwrap_or(0);
        n >= SEEN_BEFORE_COPY && n != TOO_BIG && !g.copies.contains_key(&hash)
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
        self.lock().seen.insert(hash, TOO_BIG);
    }

    /// Keeps a copy made under the read lock (no write came between its
    /// walk and now), dropping the least recently used past the bound.
    pub fn keep(&self, hash: u64, half: Half, relationship: &str, name: &str, set: Arc<HotSet>) {
        let limit = self.limit();
        let mut g = self.lock();
        let need = set.bytes();
        while g.bytes + need > limit {
            let Some((&old, _)) = g.copies.iter().min_by_key(|(_, e)| e.used) else {
                break;
            };
            if let Some(e) = g.copies.remove(&old) {
                g.bytes -= e.set.bytes();
            }
        }
        if g.bytes + need > limit {
            return;
        }
        g.tick += 1;
        let used = g.tick;
        g.bytes += need;
        g.seen.remove(&hash);
        let e = Entry {
            half,
            relationship: relationship.into(),
            name: name.into(),
            set,
            used,
        };
        if let Some(old) = g.copies.insert(hash, e) {
            g.bytes -= old.set.bytes();
        }
        self.any.store(true, Ordering::Relaxed);
    }

    /// True when some copy or count is kept.
    pub fn active(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// A write to the key of `hash` (under the write lock): its copy and count go.
    pub fn forget(&self, hash: u64) {
        if !self.active() {
            return;
        }
        let mut g = self.lock();
        g.seen.remove(&hash);
        if let Some(e) = g.copies.remove(&hash) {
            g.bytes -= e.set.bytes();
        }
    }

    /// A write whose keys are not known one by one (a bulk round, a tag
    /// naming long strings): every copy and count goes.
    pub fn forget_all(&self) {
        if !self.active() {
            return;
        }
        let mut g = self.lock();
        *g = Inner::default();
        self.any.store(false, Ordering::Relaxed);
    }

    /// Sets the bound on the bytes of all copies (0 keeps none), dropping
    /// every copy kept.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
        self.any.store(true, Ordering::Relaxed);
        self.forget_all();
    }

    /// Copies kept and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        let g = self.lock();
        (g.copies.len(), g.bytes)
    }
}

impl super::Store {
    /// Sets the memory kept for copies of hot keys' FIND results (default
    /// 32 MiB; 0 keeps none), dropping the copies kept so far.
    pub fn set_hot_bytes(&self, bytes: usize) {
        self.hot.set_limit(bytes);
    }

    /// Copies of hot keys' FIND results kept now, and the bytes they hold.
    pub fn hot_usage(&self) -> (usize, usize) {
        self.hot.usage()
    }
}
