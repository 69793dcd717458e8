//! The keys a half holds, listed in pages that cost what they return
//! (`tagstore serve`'s SCAN), even while the store grows between pages.
//!
//! A key's tags all lie in one primary bucket's chain, so a page walks a
//! few buckets and returns their keys. Growth splits bucket `b` into `b`
//! and `b + m` between pages; to neither miss nor repeat a key, pages walk
//! *virtual* buckets: the table as it will be once every bucket of this
//! level is split, `base · 2^(level+1)` of them, each key in the one its
//! hash gives. A virtual bucket whose physical bucket is not split yet is
//! read from that bucket, keeping only its own keys. Virtual bucket `v` is
//! `r + base · q` with `r < base`: the cursor runs over `r`, and within it
//! over `q` in reversed-bit order, as Redis's SCAN does over a table that
//! doubles: the `q`s visited before a doubling are exactly those whose
//! children are visited before the cursor after it.

use super::find::form_holds;
use super::state::State;
use super::{Reading, Store};
use crate::error::{Error, Result};
use crate::format::hash::key_hash;
use crate::format::tag::{decode, MAX_TAG_BYTES};
use crate::format::{Half, Layout};
use crate::index::ChainWalk;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

/// Buckets a page reads at most, whatever it is asked: the page holds the
/// read lock while it reads them (some 35,000 tags at the default fill:
/// 4,096 stalled a node's other clients up to 0.4 s under `COUNT 100000`).
const MAX_PAGE_BUCKETS: usize = 512;

/// A key: (relationship, object or subject).
type Key = (String, String);

/// One page of a half's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPage {
    /// Each key once, as (relationship, object) in the object half or
    /// (relationship, subject) in the subject half.
    pub keys: Vec<(String, String)>,
    /// The cursor of the next page; 0 once the half is done.
    pub next: u64,
}

/// Where a cursor stands: the residue `r`, and `q` in reversed-bit form.
fn split_cursor(c: u64) -> (u32, u32) {
    ((c >> 32) as u32, c as u32)
}

/// The low `bits` bits of a `u32`.
fn mask(bits: u32) -> u32 {
    u32::MAX.checked_shr(32 - bits.min(32)).unwrap_or(0)
}

/// The cursor after `(r, t)` over `bits` bits of `q`: 0 past the last.
fn advance(r: u32, t: u32, bits: u32, residues: u32) -> u64 {
    let t = ((t | !mask(bits)).reverse_bits().wrapping_add(1)).reverse_bits();
    match (t, r + 1 < residues) {
        (0, true) => u64::from(r + 1) << 32,
        (0, false) => 0,
        (t, _) => u64::from(r) << 32 | u64::from(t),
    }
}

/// The shape pages walk: residues, bits of `q`, and for virtual bucket
/// `(r, t)` the physical half-local bucket and the virtual index a key's
/// hash must give (none in a store that does not grow).
struct Shape {
    residues: u32,
    bits: u32,
}

impl Shape {
    fn of(l: &Layout) -> Shape {
        Shape {
            residues: l.base,
            // A store that does not grow: its buckets, one after another.
            bits: if l.grows() { l.level + 1 } else { 0 },
        }
    }

    /// Physical bucket and the virtual index its keys must have.
    fn bucket(&self, l: &Layout, r: u32, t: u32) -> (u32, Option<u64>) {
        if !l.grows() {
            return (r, None);
        }
        let v = u64::from(r) + u64::from(l.base) * u64::from(t & mask(self.bits));
        let m = u64::from(l.base) << l.level;
        let b = v % m;
        let physical = if b < u64::from(l.split) { v } else { b };
        (physical as u32, Some(v))
    }
}

impl Store {
    /// One page of the keys stored in `half`, from `cursor` (0 to start):
    /// the keys of about `want` buckets, or fewer buckets once `want`
    /// keys are found; the page's `next` is 0 when the half is done.
    ///
    /// A key stored throughout a scan is returned exactly once, even if the
    /// store grows between pages; a key added or removed meanwhile may or
    /// may not be, and so may a key longer than a slot allows inline whose
    /// tags move between its stored forms meanwhile (its first form
    /// emptied or filled: DESIGN.md §17). A page costs the tags of the
    /// buckets it reads (at most 512), not the store's.
    pub fn key_page(&self, half: Half, cursor: u64, want: usize) -> Result<KeyPage> {
        let _reading = Reading::new(self);
        let st = self.read();
        let l = *st.index.layout();
        let shape = Shape::of(&l);
        let (mut r, mut t) = split_cursor(cursor);
        if r >= shape.residues {
            // Past every bucket (a cursor no page gave): the half is done,
            // as Redis's SCAN ends on a cursor past its table.
            return Ok(KeyPage::default());
        }
        let mut page = KeyPage::default();
        let mut seen: HashSet<Key> = HashSet::new();
        let mut canonical = HashMap::new();
        let mut buckets = 0usize;
        loop {
            let (b, v) = shape.bucket(&l, r, t);
            keys_of_bucket(&st, half, b, v, &mut seen, &mut canonical, &mut page.keys)?;
            buckets += 1;
            let next = advance(r, t, shape.bits, shape.residues);
            if next == 0
                || buckets >= want.clamp(1, MAX_PAGE_BUCKETS)
                || page.keys.len() >= want.max(1)
            {
                page.next = next;
                return Ok(page);
            }
            (r, t) = split_cursor(next);
        }
    }
}

/// Appends the keys of half-local bucket `b` not yet in `seen`, keeping
/// those whose hash gives virtual bucket `v` (when given).
fn keys_of_bucket(
    st: &State,
    half: Half,
    b: u32,
    v: Option<u64>,
    seen: &mut HashSet<Key>,
    canonical: &mut HashMap<Key, (Vec<Key>, usize)>,
    out: &mut Vec<Key>,
) -> Result<()> {
    let l = st.index.layout();
    let g = l.global(half, b);
    let modulus = u64::from(l.base) << (l.level + 1);
    let mut walk = ChainWalk::new(g, g + 1, None);
    while let Some(blk_no) = walk.next_block(&st.index, &st.pager)? {
        let blk = st.pager.block(blk_no)?;
        for i in blk.occupied_slots() {
            let Some(view) = decode(blk.slot(i)) else {
                return Err(Error::corrupt(format!(
                    "block {blk_no}, slot {i}: occupied slot does not decode as a tag"
                )));
            };
            let stored = (view.relationship, view.key_name(half));
            if let Some(v) = v {
                let h = key_hash(st.index.seed(), half, stored.0, stored.1);
                if (h >> 16) % modulus != v {
                    continue;
                }
            }
            let key = (
                st.expand(stored.0)?.to_owned(),
                st.expand(stored.1)?.to_owned(),
            );
            if seen.contains(&key) {
                continue;
            }
            // A long key may be stored in several forms, each in its own
            // bucket: it is listed from the first form holding a tag (its
            // forms and that one found once per page, not per tag).
            let (forms, first) = match canonical.entry(key.clone()) {
                Entry::Occupied(known) => known.into_mut(),
                Entry::Vacant(new) => {
                    let forms = key_forms(st, new.key());
                    let first = first_holding(st, half, &forms, position(&forms, stored))?;
                    new.insert((forms, first))
                }
            };
            if position(forms, stored).is_none_or(|at| at == *first) {
                seen.insert(key.clone());
                out.push(key);
            }
        }
    }
    Ok(())
}

/// The stored forms of `key`, in the order that picks the one it is
/// listed from (the key alone, for every key without long strings).
fn key_forms(st: &State, key: &Key) -> Vec<Key> {
    let (rel, name) = (key.0.as_str(), key.1.as_str());
    let mut forms: Vec<Key> = Vec::new();
    if rel.len() <= MAX_TAG_BYTES && name.len() <= MAX_TAG_BYTES {
        forms.push((rel.to_owned(), name.to_owned()));
    }
    forms.extend(st.other_key_forms(rel, name));
    forms
}

/// Where the stored form `stored` stands among `forms`.
fn position(forms: &[Key], stored: (&str, &str)) -> Option<usize> {
    forms
        .iter()
        .position(|(r, n)| r == stored.0 && n == stored.1)
}

/// The first of `forms` that holds a tag (the one at `at` does: a tag
/// stored in it is being read).
fn first_holding(st: &State, half: Half, forms: &[Key], at: Option<usize>) -> Result<usize> {
    for (j, (r, n)) in forms.iter().enumerate() {
        if Some(j) == at || form_holds(st, half, r, n)? {
            return Ok(j);
        }
    }
    Ok(at.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis's reversed-bit order visits every `q` once, and the `q`s
    /// visited before a doubling are those whose children are visited
    /// before the cursor after it.
    #[test]
    fn reversed_bit_cursor_survives_doubling() {
        for bits in 1..6u32 {
            // Every cursor position; then double there.
            let mut order = Vec::new();
            let mut c = 0u64;
            loop {
                let (_, t) = split_cursor(c);
                order.push(t & ((1 << bits) - 1));
                c = advance(0, t, bits, 1);
                if c == 0 {
                    break;
                }
            }
            let mut sorted = order.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 1 << bits, "bits {bits}: {order:?}");
            for stop in 0..order.len() {
                let before: HashSet<u32> = order[..stop].iter().copied().collect();
                // Continue at the next cursor with one more bit.
                let mut c = 0u64;
                for _ in 0..stop {
                    c = advance(0, split_cursor(c).1, bits, 1);
                }
                let mut after = HashSet::new();
                if stop == 0 || c != 0 {
                    loop {
                        let t = split_cursor(c).1;
                        after.insert(t & ((1 << (bits + 1)) - 1));
                        c = advance(0, t, bits + 1, 1);
                        if c == 0 {
                            break;
                        }
                    }
                }
                for q in 0..(1u32 << (bits + 1)) {
                    let parent_seen = before.contains(&(q & ((1 << bits) - 1)));
                    assert_eq!(
                        after.contains(&q),
                        !parent_seen,
                        "bits {bits}, stop {stop}, q {q}"
                    );
                }
            }
        }
    }
}
