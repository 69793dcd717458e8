//! FIND and export: streaming iterators that walk a primary bucket and its chain.
//!
//! Each step takes the store's read lock for a few blocks only, so writers
//! interleave with long FINDs. A tag present for the whole iteration is
//! returned exactly once (tags never move while the store is open); a tag
//! inserted or deleted meanwhile may or may not appear, and one deleted
//! and inserted again meanwhile may appear twice (its new slot lies past
//! the walk's place): collect into a set where that matters.

use super::hot::{HotSet, Look};
use super::keymatch::KeyMatch;
use super::state::State;
use super::{Reading, Store};
use crate::error::{Error, Result};
use crate::format::tag::decode;
use crate::format::{place, prefetch, BlockRef, Half, SlotBytes, Tag};
use crate::index::ChainWalk;
use std::collections::VecDeque;
use std::sync::{Arc, RwLockReadGuard};

thread_local! {
    /// Result buffers reused by the visitor FINDs of this thread.
    static VISIT_BUFS: std::cell::Cell<Option<(Vec<u8>, Vec<usize>)>> =
        const { std::cell::Cell::new(None) };
}

/// This thread's FIND buffers, if no FIND holds them (`try_with`: never a
/// panic, even from a thread's last destructors).
fn take_bufs() -> (Vec<u8>, Vec<usize>) {
    VISIT_BUFS
        .try_with(std::cell::Cell::take)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Gives FIND buffers back to the thread, for its next FIND.
fn give_bufs(bufs: (Vec<u8>, Vec<usize>)) {
    let _ = VISIT_BUFS.try_with(|c| c.set(Some(bufs)));
}

/// Blocks read per lock acquisition.
const BLOCKS_PER_STEP: usize = 16;
/// Blocks whose matching slots are fetched together (a primary bucket).
const GROUP: usize = 4;
/// Matching slots past which a secondary block is dense: only its first
/// slots are prefetched one by one.
const DENSE: u32 = 12;
/// The slots of a dense block prefetched one by one (a mask of the first 4).
const DENSE_AHEAD: u32 = 0xF;

/// One FIND in progress: its key and where its walk stands.
#[derive(Clone)]
struct Search {
    key: KeyMatch,
    fp: u16,
    walk: ChainWalk,
    half: Half,
    /// Further stored forms of a long key (`long.rs`), searched in turn.
    rest: Vec<(String, String)>,
    /// The key's hash (its first form's).
    hash: u64,
    /// The key has one stored form, as given: its results may be kept
    /// in a hot copy (`hot.rs`).
    one_form: bool,
}

impl Search {
    /// The search for a key; the caller holds a [`Reading`] so that no
    /// split moves the key's tags until it is done.
    fn new(st: &State, half: Half, relationship: &str, name: &str) -> Self {
        // The key as it is first: its bucket is asked for before the
        // strings are looked up for other forms (a long key's lookup then
        // overlaps that miss).
        let mut s = Self::at(st, half, relationship, name, Vec::new());
        s.rest = st.other_key_forms(relationship, name);
        let shaped_as_ref = st.is_held_ref(relationship) || st.is_held_ref(name);
        if shaped_as_ref {
            // The reference of a string the store holds: those bytes in a
            // slot stand for that string, not for this key, which is
            // stored by its own reference (a review, 2026-11-29: such a
            // FIND returned that string's tags). A store written before
            // format 3 holds strings of this shape as they are, but never
            // together with the string they would be the reference of.
            s.walk = ChainWalk::new(0, 0, None);
            if !s.next_form(st) {
                s.finish();
            }
        }
        s.one_form = !shaped_as_ref && s.rest.is_empty() && !s.walk.done();
        s
    }

    /// The search for one stored form of the key.
    fn at(
        st: &State,
        half: Half,
        relationship: &str,
        name: &str,
        rest: Vec<(String, String)>,
    ) -> Self {
        let p = place(st.index.layout(), st.index.seed(), half, relationship, name);
        let (key, walk) = match KeyMatch::new(half, relationship, name) {
            Some(k) => {
                // Asked for before the key is built: the directory's line
                // and the blocks' page walks overlap that work, and each
                // other (random FINDs by object, npm 0.5 M: -10 %).
                st.index.prefetch_first_look(&st.pager, p.bucket);
                (k, ChainWalk::new(p.bucket, p.bucket + 1, Some(p.fp())))
            }
            // Longer than any slot: finds nothing.
            None => (KeyMatch::never(half), ChainWalk::new(0, 0, None)),
        };
        Search {
            key,
            fp: p.fp(),
            walk,
            half,
            rest,
            hash: p.hash,
            one_form: false,
        }
    }

    /// Ends the search (its results came from a hot copy).
    fn finish(&mut self) {
        self.walk = ChainWalk::new(0, 0, None);
        self.rest.clear();
    }

    /// The key's results from a hot copy (`hot.rs`): the copy kept, or
    /// one made now by walking the rest of the search under `st` (a copy
    /// past its bound leaves the search not done, the rest to walk).
    /// `None`: the search walks the blocks as any FIND's.
    fn hot(
        &mut self,
        st: &State,
        key: (Half, &str, &str),
        text: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<Option<Arc<HotSet>>> {
        if !self.one_form {
            return Ok(None);
        }
        match st.hot.look(self.hash, key.0, key.1, key.2) {
            Look::Copy(set) => {
                self.finish();
                Ok(Some(set))
            }
            Look::Make => copy_walk(st, self, key, text, ends).map(Some),
            Look::Walk => Ok(None),
        }
    }

    /// True once every form of the key is searched.
    fn done(&self) -> bool {
        self.walk.done() && self.rest.is_empty()
    }

    /// Moves to the next stored form of the key, if any is left.
    fn next_form(&mut self, st: &State) -> bool {
        let Some((r, n)) = self.rest.pop() else {
            return false;
        };
        let rest = std::mem::take(&mut self.rest);
        *self = Self::at(st, self.half, &r, &n, rest);
        true
    }

    /// Reads up to `most` blocks into `text` (emptied first), their results
    /// concatenated, with where each ends in `ends`.
    fn step(
        &mut self,
        st: &State,
        most: usize,
        text: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) -> Result<()> {
        text.clear();
        ends.clear();
        // Blocks are taken in groups: every matching slot of a group is
        // asked for before the first is compared, so the slot misses of a
        // bucket's blocks overlap instead of following one another.
        let mut taken = 0;
        while taken < most {
            let mut blocks: [(u64, BlockRef<'_>, u32); GROUP] = [(0, BlockRef(&[]), 0); GROUP];
            let mut n = 0;
            while n < GROUP && taken < most {
                let Some(b) = self.walk.next_block(&st.index, &st.pager)? else {
                    break;
                };
                taken += 1;
                let blk: BlockRef<'_> = st.pager.block(b)?;
                let m = blk.matching(self.fp);
                // Ask for every matching slot's cache lines at once: a peak's
                // block is all matches, and fetching them one after another
                // would serialise the misses.
                // A secondary block of mostly matches (a peak's) is read
                // whole and in order: asked for its first slots, the
                // hardware's stream prefetch fetches the rest, and asking for
                // all 50 lines cost more than it saved with the peak in cache
                // (8.5 → 7.6 ns per result); asking for none, or for one line
                // a slot, lost 5–12 % on cold 5 M-tag peaks.
                let dense = m.count_ones() > DENSE && self.walk.in_overflow();
                let mut p = if dense { m & DENSE_AHEAD } else { m };
                while p != 0 {
                    let i = p.trailing_zeros() as usize;
                    p &= p - 1;
                    prefetch(blk.slot(i), &[0, 64]);
                }
                blocks[n] = (b, blk, m);
                n += 1;
            }
            if n == 0 {
                // A group never mixes two forms of a key: the next form's
                // blocks start a group of their own.
                if self.walk.done() && self.next_form(st) {
                    continue;
                }
                return Ok(());
            }
            for &(_, blk, mut m) in &blocks[..n] {
                while m != 0 {
                    let i = m.trailing_zeros() as usize;
                    m &= m - 1;
                    let slot = blk.slot(i);
                    if let Some(field) = self.key.other(slot) {
                        if let Some(whole) = st.strings.whole(&slot[field.clone()])? {
                            text.extend_from_slice(whole.as_bytes());
                        } else {
                            copy_field(text, slot, field);
                        }
                        ends.push(text.len());
                    }
                }
            }
        }
        Ok(())
    }
}

/// True when the stored form (`relationship`, `name`) of a key holds a
/// tag in `half` (that form's chain alone; the caller holds the read lock).
pub(super) fn form_holds(st: &State, half: Half, relationship: &str, name: &str) -> Result<bool> {
    let mut s = Search::at(st, half, relationship, name, Vec::new());
    let (mut text, mut ends) = (Vec::new(), Vec::new());
    while !s.walk.done() {
        s.step(st, BLOCKS_PER_STEP, &mut text, &mut ends)?;
        if !ends.is_empty() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Appends `slot[field]` to `text`. A short field is copied as a fixed
/// window of the slot (32 or 64 bytes, then cut to length): a constant-size
/// copy is a few moves inline, where a copy of any other length calls
/// `memcpy`, which was a fifth of a FIND by subject of a peak.
#[inline]
fn copy_field(text: &mut Vec<u8>, slot: &[u8], field: std::ops::Range<usize>) {
    if !(copy_window::<32>(text, slot, &field) || copy_window::<64>(text, slot, &field)) {
        text.extend_from_slice(&slot[field]);
    }
}

/// [`copy_field`] through a window of `W` bytes; false if the field is
/// longer or the window would pass the slot's end.
#[inline(always)]
fn copy_window<const W: usize>(
    text: &mut Vec<u8>,
    slot: &[u8],
    field: &std::ops::Range<usize>,
) -> bool {
    let (at, len) = (field.start, field.len());
    if len > W {
        return false;
    }
    let window = slot.get(at..at + W);
    let Some(w) = window.and_then(|w| <&[u8; W]>::try_from(w).ok()) else {
        return false;
    };
    let end = text.len() + len;
    text.extend_from_slice(w);
    text.truncate(end);
    true
}

/// Walks the rest of a search under one read lock, its results gathered
/// into a copy that is kept for later FINDs of the key (`hot.rs`; no write
/// can come between the walk and the copy kept). Past the copy's bound the
/// walk stops there, nothing is kept, and the search is left not done:
/// what was gathered is still to be handed out, then the rest walked.
fn copy_walk(
    st: &State,
    s: &mut Search,
    key: (Half, &str, &str),
    text: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Result<Arc<HotSet>> {
    let max = st.hot.max_copy();
    let (mut all, mut all_ends) = (Vec::new(), Vec::new());
    while !s.done() && all.len() <= max {
        s.step(st, BLOCKS_PER_STEP, text, ends)?;
        let base = all.len();
        all.extend_from_slice(text);
        all_ends.extend(ends.iter().map(|&e| (base + e) as u32));
    }
    let text = String::from_utf8(all).map_err(|_| bad_result())?;
    if !all_ends.iter().all(|&e| text.is_char_boundary(e as usize)) {
        return Err(bad_result());
    }
    let set = Arc::new(HotSet {
        text,
        ends: all_ends,
    });
    if s.done() {
        st.hot.keep(s.hash, key.0, key.1, key.2, set.clone());
    } else {
        st.hot.too_big(s.hash);
    }
    Ok(set)
}

/// Hands each result of a copy to `f`; returns how many there were.
fn deliver(set: &HotSet, f: &mut impl FnMut(&str)) -> Result<u64> {
    for i in 0..set.ends.len() {
        f(set.get(i).ok_or_else(bad_result)?);
    }
    Ok(set.ends.len() as u64)
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
    /// Registered once the first step leaves blocks to read (no split
    /// moves tags between two steps); a FIND done in one step never is.
    _reading: Option<Reading<'s>>,
    search: Search,
    /// Results of the last step, concatenated (checked as UTF-8 once, not
    /// once per result), and where each ends: the visitor FINDs' buffers,
    /// taken from the thread and given back on drop.
    text: String,
    ends: Vec<usize>,
    /// Results of the last step already returned, and where the next starts.
    taken: usize,
    start: usize,
    /// Steps taken: the first reads one group of blocks (a primary bucket
    /// of the default 4 blocks: most FINDs of a few tags in one step, and a
    /// `take(n)` reads little more than it needs); the later ones read
    /// [`BLOCKS_PER_STEP`] blocks, as the visitor FINDs do. (One block per
    /// step, a `String` queued per result and checked on its own, made a
    /// peak's FIND 4.5 times the visitor's.)
    steps: u32,
    failed: bool,
    /// The first step's error, returned by the first `next`.
    first_error: Option<Error>,
    /// Results from a hot copy (`hot.rs`), handed out before any step's,
    /// and how many of them were.
    hot: Option<Arc<HotSet>>,
    hot_at: usize,
    /// Results returned from steps, counted for `hot.rs` when the FIND
    /// ends (a key of one stored form whose results were read from blocks).
    counted: Option<u64>,
}

impl<'s> Find<'s> {
    /// Places the search and takes its first step under one read lock (a
    /// FIND of a few tags then takes the lock once, as the visitor does).
    pub(crate) fn new(store: &'s Store, half: Half, relationship: &str, name: &str) -> Self {
        let (mut bytes, mut ends) = take_bufs();
        let st = store.read();
        let mut search = Search::new(&st, half, relationship, name);
        let key = (half, relationship, name);
        let (hot, first_error) = match search.hot(&st, key, &mut bytes, &mut ends) {
            Ok(hot) => (hot, None),
            Err(e) => (None, Some(e)),
        };
        bytes.clear();
        ends.clear();
        let counted = (search.one_form && hot.is_none()).then_some(0);
        let mut f = Find {
            store,
            _reading: None,
            search,
            text: String::from_utf8(bytes).unwrap_or_default(),
            ends,
            taken: 0,
            start: 0,
            steps: 0,
            failed: first_error.is_some(),
            first_error,
            hot,
            hot_at: 0,
            counted,
        };
        if f.failed {
            return f;
        }
        if f.hot.is_none() {
            if let Err(e) = f.fill(&st) {
                f.failed = true;
                f.ends.clear();
                f.first_error = Some(e);
                return f;
            }
        }
        if !f.search.done() {
            // Registered before the lock goes: no split between the steps.
            f._reading = Some(Reading::new(store));
        }
        f
    }

    fn fill(&mut self, st: &State) -> Result<()> {
        let mut text = std::mem::take(&mut self.text).into_bytes();
        (self.taken, self.start) = (0, 0);
        let most = if self.steps == 0 {
            GROUP
        } else {
            BLOCKS_PER_STEP
        };
        self.steps = self.steps.saturating_add(1);
        let r = self.search.step(st, most, &mut text, &mut self.ends);
        match String::from_utf8(text) {
            Ok(t) => self.text = t,
            Err(_) => {
                self.ends.clear();
                r?;
                return Err(bad_result());
            }
        }
        r
    }
}

impl Iterator for Find<'_> {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.first_error.take() {
            return Some(Err(e));
        }
        if let Some(set) = &self.hot {
            if self.hot_at < set.ends.len() {
                let r = set.get(self.hot_at).map(str::to_owned);
                self.hot_at += 1;
                return Some(r.ok_or_else(bad_result));
            }
            self.hot = None;
        }
        loop {
            if let Some(&end) = self.ends.get(self.taken) {
                let start = std::mem::replace(&mut self.start, end);
                self.taken += 1;
                if let Some(n) = &mut self.counted {
                    *n += 1;
                }
                // Each result must also start and end on a character
                // boundary to be valid on its own.
                let r = self.text.get(start..end).map(str::to_owned);
                if r.is_none() {
                    self.failed = true;
                    self.ends.clear();
                }
                return Some(r.ok_or_else(bad_result));
            }
            if self.failed || self.search.done() {
                if let (Some(n), false) = (self.counted.take(), self.failed) {
                    self.store.hot.note(self.search.hash, n);
                }
                return None;
            }
            let st = self.store.read();
            if let Err(e) = self.fill(&st) {
                self.failed = true;
                self.ends.clear();
                return Some(Err(e));
            }
        }
    }
}

impl Drop for Find<'_> {
    fn drop(&mut self) {
        give_bufs((
            std::mem::take(&mut self.text).into_bytes(),
            std::mem::take(&mut self.ends),
        ));
    }
}

/// Streaming export of every tag once (read from the object half).
pub struct Tags<'s> {
    store: &'s Store,
    _reading: Reading<'s>,
    walk: ChainWalk,
    /// The subject half, walked after the object half (half-only stores).
    then: Option<ChainWalk>,
    /// Walking the subject half of a half-only store: a tag whose object
    /// half is stored too was returned already and is skipped.
    skip_object_held: bool,
    /// A salvage: a slot that does not decode is left out, not an error.
    salvage: bool,
    /// Tags returned from the subject half (see [`Tags::from_subject_half`]).
    from_subject: u64,
    /// Tags a salvage left out (see [`Tags::lost_to_strings`]).
    lost_strings: u64,
    buf: VecDeque<Tag>,
    failed: bool,
}

impl Tags<'_> {
    /// How many of the tags returned so far came from the subject half:
    /// in a half-only store, those whose object half is held elsewhere; in
    /// a salvage, those whose object half was unreadable.
    pub fn from_subject_half(&self) -> u64 {
        self.from_subject
    }

    /// How many tags a salvage left out so far because a long string they
    /// name is not in the strings file (lost or damaged).
    pub fn lost_to_strings(&self) -> u64 {
        self.lost_strings
    }
}

impl Iterator for Tags<'_> {
    type Item = Result<Tag>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(t) = self.buf.pop_front() {
                return Some(Ok(t));
            }
            if self.walk.done() {
                if let Some(w) = self.then.take() {
                    self.walk = w;
                    self.skip_object_held = true;
                }
            }
            if self.failed || self.walk.done() {
                return None;
            }
            let st = self.store.read();
            let r = (|| -> Result<()> {
                for _ in 0..BLOCKS_PER_STEP {
                    let Some(b) = self.walk.next_block(&st.index, &st.pager)? else {
                        return Ok(());
                    };
                    let blk = st.pager.block(b)?;
                    for i in blk.occupied_slots() {
                        let raw = blk.slot(i);
                        let Some(v) = decode(raw) else {
                            if self.salvage {
                                continue;
                            }
                            return Err(bad_slot(b, i));
                        };
                        if self.skip_object_held {
                            let slot: &SlotBytes = raw.try_into().map_err(|_| bad_slot(b, i))?;
                            if st.contains(slot, Half::Object)? {
                                continue;
                            }
                            self.from_subject += 1;
                        }
                        match st.expand_view(&v) {
                            Ok(t) => self.buf.push_back(t),
                            // A salvage leaves out a tag whose long string
                            // is lost with the strings file.
                            Err(_) if self.salvage => {
                                self.lost_strings += 1;
                                continue;
                            }
                            Err(e) => return Err(e),
                        }
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
    ///
    /// A subject stored throughout comes once; one inserted or deleted
    /// while the stream runs may or may not, and one deleted and inserted
    /// again meanwhile may come twice.
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
        // The first step under the lock the search was placed under (most
        // FINDs take one step): one lock per FIND, not two.
        let st = self.read();
        let mut s = Search::new(&st, half, relationship, name);
        // Results of one step, concatenated, and where each ends. The
        // buffers are kept per thread (a nested FIND from `f` makes its own).
        let (mut text, mut ends) = take_bufs();
        let key = (half, relationship, name);
        let r = match s.hot(&st, key, &mut text, &mut ends) {
            Ok(Some(set)) => {
                // A copy past its bound: the walk goes on as any FIND's.
                let reading = (!s.done()).then(|| Reading::new(self));
                drop(st);
                deliver(&set, &mut f).and_then(|n| {
                    let more = self.visit_with(None, reading, &mut s, &mut text, &mut ends, &mut f);
                    Ok(n + more?)
                })
            }
            Ok(None) => {
                let r = self.visit_with(Some(st), None, &mut s, &mut text, &mut ends, &mut f);
                if let (Ok(n), true) = (&r, s.one_form) {
                    self.hot.note(s.hash, *n);
                }
                r
            }
            Err(e) => Err(e),
        };
        give_bufs((text, ends));
        r
    }

    fn visit_with<'s>(
        &'s self,
        first: Option<RwLockReadGuard<'s, State>>,
        mut reading: Option<Reading<'s>>,
        s: &mut Search,
        text: &mut Vec<u8>,
        ends: &mut Vec<usize>,
        f: &mut impl FnMut(&str),
    ) -> Result<u64> {
        let mut n = 0u64;
        let mut held = first;
        // Splits wait for a FIND that lets the lock go between steps; one
        // done in a single step (most) never registers.
        while !s.done() {
            {
                // Released before `f` runs: it may write to the store.
                let st = held.take().unwrap_or_else(|| self.read());
                s.step(&st, BLOCKS_PER_STEP, text, ends)?;
                if reading.is_none() && !s.done() {
                    // Registered before the lock goes: no split between.
                    reading = Some(Reading::new(self));
                }
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
    ///
    /// In a half-only store: the object half's tags, then those of the
    /// subject half whose object half is not stored (a tag stored in both
    /// halves comes once). There, a half written or deleted while the
    /// iteration runs may make a tag come twice or not at all.
    pub fn tags(&self) -> Tags<'_> {
        let half_only = self.read().half_only();
        let mut t = self.half_tags(Half::Object);
        if half_only {
            t.then = Some(self.half_tags(Half::Subject).walk);
        }
        t
    }

    /// Streams every tag readable in either half once: the object half's,
    /// then those of the subject half whose object half is not readable.
    /// For a store opened with [`Store::open_salvage`]: a tag is lost only
    /// if both its halves are.
    pub fn salvaged_tags(&self) -> Tags<'_> {
        let mut t = self.half_tags(Half::Object);
        t.then = Some(self.half_tags(Half::Subject).walk);
        t.salvage = true;
        t
    }

    /// The damaged blocks met so far: those that fail their checksum (read
    /// for their sound slots) or do not belong where they lie (read as
    /// empty), in a store opened with [`Store::open_salvage`]; otherwise none.
    pub fn unreadable_blocks(&self) -> Vec<u64> {
        self.read().pager.unreadable()
    }

    /// Streams the tags stored in one half (in a store that is not
    /// half-only, every tag, as [`Store::tags`]).
    pub fn half_tags(&self, half: Half) -> Tags<'_> {
        let reading = Reading::new(self);
        let (first, end, step) = {
            let st = self.read();
            st.pager.read_ahead_for_scan();
            st.index.geometry().half_buckets(half)
        };
        Tags {
            store: self,
            _reading: reading,
            walk: ChainWalk::every(first, end, step, None),
            then: None,
            skip_object_held: false,
            salvage: false,
            from_subject: 0,
            lost_strings: 0,
            buf: VecDeque::new(),
            failed: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::copy_field;

    /// Every field of a slot, at every position and length (windows that
    /// fit, and ones that would pass the slot's end), is copied exactly.
    #[test]
    fn copy_field_copies_exactly_the_field() {
        let slot: Vec<u8> = (0..160u32).map(|i| (i * 7 + 3) as u8).collect();
        for start in 0..160 {
            for end in start..=160 {
                let mut text = b"prefix".to_vec();
                copy_field(&mut text, &slot, start..end);
                assert_eq!(&text[..6], b"prefix");
                assert_eq!(&text[6..], &slot[start..end], "field {start}..{end}");
            }
        }
    }
}
