//! FIND and export: streaming iterators that walk a primary bucket and its chain.
//!
//! Each step takes the store's read lock for a few blocks only, so writers
//! interleave with long FINDs. A tag present for the whole iteration is
//! returned exactly once (tags never move while the store is open); a tag
//! inserted or deleted meanwhile may or may not appear.

use crate::block::{prefetch, BlockRef};
use crate::chains::next_in_mask;
use crate::error::{Error, Result};
use crate::format::Geometry;
use crate::store::{Inner, Store};
use crate::tables::{filter_has, Tables, NONE};
use crate::tag::{
    self, bucket_of, key_fp, key_hash, Half, Tag, SLOT_HEADER, SLOT_MARKER, SLOT_SIZE,
};
use std::collections::VecDeque;

thread_local! {
    /// Result buffers reused by the visitor FINDs of this thread.
    static VISIT_BUFS: std::cell::Cell<Option<(Vec<u8>, Vec<usize>)>> =
        const { std::cell::Cell::new(None) };
}

/// Blocks read per lock acquisition.
const BLOCKS_PER_STEP: usize = 16;
/// Blocks whose matching slots are fetched together (a primary bucket).
const GROUP: usize = 4;

#[derive(Clone, Copy, Debug)]
enum Pos {
    /// At the start of chain `g`: the primary bucket's extent is not read yet.
    Start,
    /// Block `i` of `n` worth reading in the primary bucket.
    Primary(u32, u32),
    /// Block `i` of secondary bucket `s`, following the chain's links.
    Secondary(u32, u32),
    /// The `k`-th candidate of the chain index: bucket `s`, its block mask,
    /// and the next block to consider.
    Indexed(usize, u32, u64, u32),
    Done,
}

/// Walks the blocks of one or more chains, skipping secondary buckets that
/// cannot hold the key `fp` (key filters, or the chain index of long chains).
#[derive(Clone, Debug)]
struct ChainWalk {
    g: u32,
    g_end: u32,
    pos: Pos,
    fp: Option<u16>,
}

impl ChainWalk {
    fn new(g: u32, g_end: u32, fp: Option<u16>) -> Self {
        let pos = if g < g_end { Pos::Start } else { Pos::Done };
        ChainWalk { g, g_end, pos, fp }
    }

    fn done(&self) -> bool {
        matches!(self.pos, Pos::Done)
    }

    fn skip_to_match(&self, t: &Tables, mut s: u32) -> u32 {
        if let Some(fp) = self.fp {
            while s != NONE && !filter_has(&t.secondary[s as usize].filter, fp) {
                s = t.secondary[s as usize].next;
            }
        }
        s
    }

    /// The `k`-th candidate bucket of the chain index, if the chain has one.
    fn candidate(
        &self,
        inner: &Inner,
        geo: &Geometry,
        k: usize,
    ) -> Result<Option<Option<(u32, u64)>>> {
        let Some(fp) = self.fp else {
            return Ok(None);
        };
        inner.accel.with_index(
            self.g,
            &inner.tables,
            geo,
            |b| inner.block(b),
            |ci| ci.candidates(fp).get(k).copied(),
        )
    }

    /// Next block to read.
    fn next_block(&mut self, geo: &Geometry, inner: &Inner) -> Result<Option<u64>> {
        let t = &inner.tables;
        loop {
            match self.pos {
                Pos::Done => return Ok(None),
                Pos::Start => {
                    let n = inner.accel.extent(self.g, geo, |b| inner.block(b))?;
                    // Ask for every header of the bucket (and the table
                    // entry read after them) at once: the misses overlap.
                    inner.prefetch_bucket(self.g, n);
                    self.pos = Pos::Primary(0, n);
                }
                Pos::Primary(i, n) if i < n => {
                    self.pos = Pos::Primary(i + 1, n);
                    return Ok(Some(geo.primary_start(self.g) + i as u64));
                }
                Pos::Primary(..) => {
                    self.pos = match self.candidate(inner, geo, 0)? {
                        Some(Some((s, mask))) => Pos::Indexed(0, s, mask, 0),
                        Some(None) => self.next_chain(),
                        None => {
                            let s = self.skip_to_match(t, t.primary[self.g as usize].head);
                            if s == NONE {
                                self.next_chain()
                            } else {
                                Pos::Secondary(s, 0)
                            }
                        }
                    };
                }
                Pos::Secondary(s, i) if i < geo.blocks_per_secondary => {
                    if i == 0 {
                        inner.prefetch_headers(geo.secondary_start(s), geo.blocks_per_secondary);
                    }
                    self.pos = Pos::Secondary(s, i + 1);
                    return Ok(Some(geo.secondary_start(s) + i as u64));
                }
                Pos::Indexed(k, s, mask, i) => {
                    if let Some(b) = next_in_mask(mask, geo.blocks_per_secondary, i) {
                        if i == 0 {
                            // Entering candidate k: its headers were asked for
                            // when candidate k-1 was entered; ask for k+1's
                            // now, so their page walks overlap this bucket's
                            // slot reads instead of stalling the next entry.
                            if k == 0 {
                                prefetch_masked(inner, geo, s, mask);
                            }
                            if let Some(Some((s2, m2))) = self.candidate(inner, geo, k + 1)? {
                                prefetch_masked(inner, geo, s2, m2);
                            }
                        }
                        self.pos = Pos::Indexed(k, s, mask, b + 1);
                        return Ok(Some(geo.secondary_start(s) + b as u64));
                    }
                    self.pos = match self.candidate(inner, geo, k + 1)? {
                        Some(Some((s, mask))) => Pos::Indexed(k + 1, s, mask, 0),
                        _ => self.next_chain(),
                    };
                }
                Pos::Secondary(s, _) => {
                    let n = self.skip_to_match(t, t.secondary[s as usize].next);
                    self.pos = if n == NONE {
                        self.next_chain()
                    } else {
                        Pos::Secondary(n, 0)
                    };
                }
            }
        }
    }

    fn next_chain(&mut self) -> Pos {
        self.g += 1;
        if self.g < self.g_end {
            Pos::Start
        } else {
            Pos::Done
        }
    }
}

/// Asks for the headers of the blocks of secondary bucket `s` set in `mask`.
fn prefetch_masked(inner: &Inner, geo: &Geometry, s: u32, mask: u64) {
    let mut j = 0;
    while let Some(x) = next_in_mask(mask, geo.blocks_per_secondary, j) {
        inner.prefetch_headers(geo.secondary_start(s) + x as u64, 1);
        j = x + 1;
    }
}

/// Compares a slot's key fields with a FIND key without decoding the slot.
///
/// A slot holds `object ++ relationship ++ subject`, so each half's key is
/// contiguous in it: `object ++ relationship` at the front for the object
/// half, `relationship ++ subject` at the back for the subject half. One
/// comparison against that concatenation (the needle) checks the whole key.
#[derive(Clone)]
struct KeyMatch {
    half: Half,
    rel_len: usize,
    name_len: usize,
    needle: [u8; SLOT_SIZE],
}

impl KeyMatch {
    /// The key of a FIND; `None` when it cannot fit in a slot (finds nothing).
    fn new(half: Half, relationship: &str, name: &str) -> Option<Self> {
        let (r, n) = (relationship.as_bytes(), name.as_bytes());
        if SLOT_HEADER + r.len() + n.len() > SLOT_SIZE {
            return None;
        }
        let mut needle = [0u8; SLOT_SIZE];
        let (a, b) = match half {
            Half::Object => (n, r),
            Half::Subject => (r, n),
        };
        needle[..a.len()].copy_from_slice(a);
        needle[a.len()..a.len() + b.len()].copy_from_slice(b);
        Some(KeyMatch {
            half,
            rel_len: r.len(),
            name_len: n.len(),
            needle,
        })
    }

    /// The field a FIND returns, if slot `s` holds the key.
    #[inline]
    fn other<'s>(&self, s: &'s [u8]) -> Option<&'s [u8]> {
        let (lo, lr, ls) = (s[1] as usize, s[2] as usize, s[3] as usize);
        if s[0] != SLOT_MARKER || lr != self.rel_len || SLOT_HEADER + lo + lr + ls > s.len() {
            return None;
        }
        let k = self.rel_len + self.name_len;
        let r = SLOT_HEADER + lo;
        match self.half {
            Half::Object => (lo == self.name_len
                && eq_short(&s[SLOT_HEADER..SLOT_HEADER + k], &self.needle[..k]))
            .then(|| &s[r + lr..r + lr + ls]),
            Half::Subject => (ls == self.name_len && eq_short(&s[r..r + k], &self.needle[..k]))
                .then(|| &s[SLOT_HEADER..r]),
        }
    }
}

/// Eight bytes of `s` from `i` as a word.
#[inline(always)]
fn word(s: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[i..i + 8]);
    u64::from_ne_bytes(w)
}

/// Equality of two short byte runs (a key: at most a slot), word by word
/// and inline: a call to `memcmp` per slot was 6 % of a large FIND.
#[inline(always)]
fn eq_short(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0;
    }
    let mut i = 0;
    while i + 8 < n {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    // The last word, overlapping the previous one when n is not a multiple of 8.
    word(a, n - 8) == word(b, n - 8)
}

/// One FIND in progress: its key and where its walk stands.
#[derive(Clone)]
struct Search {
    key: KeyMatch,
    fp: u16,
    walk: ChainWalk,
}

impl Search {
    fn new(store: &Store, half: Half, relationship: &str, name: &str) -> Self {
        let geo = store.geometry;
        let h = key_hash(store.seed, half, relationship, name);
        let g = geo.global(half, bucket_of(h, geo.primary_buckets_per_half));
        let (key, walk) = match KeyMatch::new(half, relationship, name) {
            Some(k) => (k, ChainWalk::new(g, g + 1, Some(key_fp(h)))),
            None => (
                KeyMatch {
                    half,
                    rel_len: 0,
                    name_len: 0,
                    needle: [0; SLOT_SIZE],
                },
                ChainWalk::new(0, 0, None),
            ),
        };
        Search {
            key,
            fp: key_fp(h),
            walk,
        }
    }

    /// Reads up to [`BLOCKS_PER_STEP`] blocks, passing each result to `out`;
    /// stops early after a block that produced results when `eager`.
    fn step(
        &mut self,
        inner: &Inner,
        geo: &Geometry,
        eager: bool,
        mut out: impl FnMut(&[u8], u64, usize) -> Result<()>,
    ) -> Result<()> {
        // Blocks are taken in groups: every matching slot of a group is
        // asked for before the first is compared, so the slot misses of a
        // bucket's blocks overlap instead of following one another. (An
        // eager step stops after the first block with results, so it must
        // not take a block from the walk ahead of using it.)
        let group = if eager { 1 } else { GROUP };
        let mut taken = 0;
        while taken < BLOCKS_PER_STEP {
            let mut blocks: [(u64, BlockRef<'_>, u32); GROUP] = [(0, BlockRef(&[]), 0); GROUP];
            let mut n = 0;
            while n < group && taken < BLOCKS_PER_STEP {
                let Some(b) = self.walk.next_block(geo, inner)? else {
                    break;
                };
                taken += 1;
                let blk: BlockRef<'_> = inner.block(b)?;
                let m = blk.matching(self.fp);
                // Ask for every matching slot's cache lines at once: a peak's
                // block is all matches, and fetching them one after another
                // would serialise the misses.
                let mut p = m;
                while p != 0 {
                    let i = p.trailing_zeros() as usize;
                    p &= p - 1;
                    prefetch(blk.slot(i), &[0, 64]);
                }
                blocks[n] = (b, blk, m);
                n += 1;
            }
            if n == 0 {
                return Ok(());
            }
            let mut any = false;
            for &(b, blk, mut m) in &blocks[..n] {
                while m != 0 {
                    let i = m.trailing_zeros() as usize;
                    m &= m - 1;
                    if let Some(v) = self.key.other(blk.slot(i)) {
                        out(v, b, i)?;
                        any = true;
                    }
                }
            }
            if eager && any {
                return Ok(());
            }
        }
        Ok(())
    }
}

fn bad_result() -> Error {
    Error::corrupt("a FIND result is not valid UTF-8 (`tagstore check` names the block)")
}

fn bad_slot(block: u64, slot: usize) -> Error {
    Error::corrupt(format!(
        "block {block}, slot {slot}: occupied slot does not decode as a tag"
    ))
}

/// Streaming FIND results: the subjects of an object, or the objects of a subject.
pub struct Find<'s> {
    store: &'s Store,
    search: Search,
    buf: VecDeque<String>,
    failed: bool,
}

impl<'s> Find<'s> {
    pub(crate) fn new(store: &'s Store, half: Half, relationship: &str, name: &str) -> Self {
        Find {
            store,
            search: Search::new(store, half, relationship, name),
            buf: VecDeque::new(),
            failed: false,
        }
    }

    fn fill(&mut self, inner: &Inner) -> Result<()> {
        let buf = &mut self.buf;
        self.search
            .step(inner, &self.store.geometry, true, |v, b, i| {
                let s = std::str::from_utf8(v).map_err(|_| bad_slot(b, i))?;
                buf.push_back(s.to_owned());
                Ok(())
            })
    }
}

impl Iterator for Find<'_> {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(s) = self.buf.pop_front() {
                return Some(Ok(s));
            }
            if self.failed || self.search.walk.done() {
                return None;
            }
            let inner = self.store.read();
            if let Err(e) = self.fill(&inner) {
                self.failed = true;
                return Some(Err(e));
            }
        }
    }
}

/// Streaming export of every tag once (read from the object half).
pub struct Tags<'s> {
    store: &'s Store,
    walk: ChainWalk,
    buf: VecDeque<Tag>,
    failed: bool,
}

impl Iterator for Tags<'_> {
    type Item = Result<Tag>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(t) = self.buf.pop_front() {
                return Some(Ok(t));
            }
            if self.failed || self.walk.done() {
                return None;
            }
            let inner = self.store.read();
            let geo = self.store.geometry;
            let r = (|| -> Result<()> {
                for _ in 0..BLOCKS_PER_STEP {
                    let Some(b) = self.walk.next_block(&geo, &inner)? else {
                        return Ok(());
                    };
                    let blk = inner.block(b)?;
                    let mut bits = blk.bitmap() & ((1 << crate::block::SLOTS_PER_BLOCK) - 1);
                    while bits != 0 {
                        let i = bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        let v = tag::decode(blk.slot(i)).ok_or_else(|| bad_slot(b, i))?;
                        self.buf.push_back(v.to_tag());
                    }
                }
                Ok(())
            })();
            if let Err(e) = r {
                self.failed = true;
                return Some(Err(e));
            }
        }
    }
}

impl Store {
    /// FIND <object, relationship, *>: streams the subjects.
    pub fn find_subjects(&self, object: &str, relationship: &str) -> Find<'_> {
        Find::new(self, Half::Object, relationship, object)
    }

    /// FIND <*, relationship, subject>: streams the objects.
    pub fn find_objects(&self, subject: &str, relationship: &str) -> Find<'_> {
        Find::new(self, Half::Subject, relationship, subject)
    }

    /// FIND <object, relationship, *>: calls `f` with each subject and
    /// returns how many there were.
    ///
    /// Faster than [`Store::find_subjects`]: nothing is allocated per result.
    /// Results are gathered a few blocks at a time under the read lock and
    /// handed to `f` after it is released, so `f` may call back into the store
    /// (even write); what a FIND running alongside writers sees is as for
    /// [`Store::find_subjects`].
    pub fn for_each_subject(
        &self,
        object: &str,
        relationship: &str,
        f: impl FnMut(&str),
    ) -> Result<u64> {
        self.visit(Half::Object, relationship, object, f)
    }

    /// FIND <*, relationship, subject>: calls `f` with each object and returns
    /// how many there were (see [`Store::for_each_subject`]).
    pub fn for_each_object(
        &self,
        subject: &str,
        relationship: &str,
        f: impl FnMut(&str),
    ) -> Result<u64> {
        self.visit(Half::Subject, relationship, subject, f)
    }

    fn visit(
        &self,
        half: Half,
        relationship: &str,
        name: &str,
        mut f: impl FnMut(&str),
    ) -> Result<u64> {
        let mut s = Search::new(self, half, relationship, name);
        // Results of one step, concatenated, and where each ends. The
        // buffers are kept per thread (a nested FIND from `f` makes its own).
        let (mut text, mut ends) = VISIT_BUFS.take().unwrap_or_default();
        let r = self.visit_with(&mut s, &mut text, &mut ends, &mut f);
        VISIT_BUFS.set(Some((text, ends)));
        r
    }

    fn visit_with(
        &self,
        s: &mut Search,
        text: &mut Vec<u8>,
        ends: &mut Vec<usize>,
        f: &mut impl FnMut(&str),
    ) -> Result<u64> {
        let mut n = 0u64;
        while !s.walk.done() {
            text.clear();
            ends.clear();
            {
                let inner = self.read();
                s.step(&inner, &self.geometry, false, |v, _, _| {
                    text.extend_from_slice(v);
                    ends.push(text.len());
                    Ok(())
                })?;
            }
            // One UTF-8 check for the whole step instead of one per result
            // (a tenth of a large FIND); every result must then also start
            // and end on a character boundary to be valid on its own.
            let all = std::str::from_utf8(text).map_err(|_| bad_result())?;
            let mut at = 0;
            for &e in ends.iter() {
                f(all.get(at..e).ok_or_else(bad_result)?);
                at = e;
            }
            n += ends.len() as u64;
        }
        Ok(n)
    }

    /// Streams every stored tag exactly once.
    pub fn tags(&self) -> Tags<'_> {
        Tags {
            store: self,
            walk: ChainWalk::new(0, self.geometry.primary_buckets_per_half, None),
            buf: VecDeque::new(),
            failed: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::eq_short;

    #[test]
    fn eq_short_matches_slice_equality() {
        let base: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37)).collect();
        for n in 0..=40 {
            let a = &base[..n];
            assert!(eq_short(a, a));
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x40;
                assert!(!eq_short(a, &b), "length {n}, byte {at} differs");
            }
            if n > 0 {
                assert!(!eq_short(a, &base[..n - 1]));
            }
        }
    }
}
