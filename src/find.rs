//! FIND and export: streaming iterators that walk a primary bucket and its chain.
//!
//! Each step takes the store's read lock for a few blocks only, so writers
//! interleave with long FINDs. A tag present for the whole iteration is
//! returned exactly once (tags never move while the store is open); a tag
//! inserted or deleted meanwhile may or may not appear.

use crate::block::BlockRef;
use crate::error::{Error, Result};
use crate::format::Geometry;
use crate::store::{Inner, Store};
use crate::tables::{filter_has, Tables, NONE};
use crate::tag::{self, bucket_of, key_fp, key_hash, Half, Tag, SLOT_SIZE};
use std::collections::VecDeque;

/// Blocks read per lock acquisition.
const BLOCKS_PER_STEP: usize = 16;

#[derive(Clone, Copy, Debug)]
enum Pos {
    Primary(u32),
    Secondary(u32, u32),
    Done,
}

/// Walks the blocks of one or more chains, skipping secondary buckets whose
/// key filter rules out `fp`.
#[derive(Clone, Debug)]
struct ChainWalk {
    g: u32,
    g_end: u32,
    pos: Pos,
    fp: Option<u16>,
}

impl ChainWalk {
    fn new(g: u32, g_end: u32, fp: Option<u16>) -> Self {
        let pos = if g < g_end {
            Pos::Primary(0)
        } else {
            Pos::Done
        };
        ChainWalk { g, g_end, pos, fp }
    }

    fn skip_to_match(&self, t: &Tables, mut s: u32) -> u32 {
        if let Some(fp) = self.fp {
            while s != NONE && !filter_has(&t.secondary[s as usize].filter, fp) {
                s = t.secondary[s as usize].next;
            }
        }
        s
    }

    /// Next block to read, with the bucket it belongs to.
    fn next_block(&mut self, geo: &Geometry, t: &Tables) -> Option<u64> {
        loop {
            match self.pos {
                Pos::Done => return None,
                Pos::Primary(i) if i < geo.blocks_per_primary => {
                    self.pos = Pos::Primary(i + 1);
                    return Some(geo.primary_start(self.g) + i as u64);
                }
                Pos::Primary(_) => {
                    let s = self.skip_to_match(t, t.primary[self.g as usize].head);
                    self.pos = if s == NONE {
                        self.next_chain()
                    } else {
                        Pos::Secondary(s, 0)
                    };
                }
                Pos::Secondary(s, i) if i < geo.blocks_per_secondary => {
                    self.pos = Pos::Secondary(s, i + 1);
                    return Some(geo.secondary_start(s) + i as u64);
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
            Pos::Primary(0)
        } else {
            Pos::Done
        }
    }
}

fn bad_slot(block: u64, slot: usize) -> Error {
    Error::corrupt(format!(
        "block {block}, slot {slot}: occupied slot does not decode as a tag"
    ))
}

/// Streaming FIND results: the subjects of an object, or the objects of a subject.
pub struct Find<'s> {
    store: &'s Store,
    half: Half,
    relationship: String,
    name: String,
    fp: u16,
    walk: ChainWalk,
    buf: VecDeque<String>,
    failed: bool,
}

impl<'s> Find<'s> {
    pub(crate) fn new(store: &'s Store, half: Half, relationship: &str, name: &str) -> Self {
        let geo = store.geometry;
        let h = key_hash(store.seed, half, relationship, name);
        let g = geo.global(half, bucket_of(h, geo.primary_buckets_per_half));
        let fits = relationship.len() + name.len() + tag::SLOT_HEADER <= SLOT_SIZE;
        Find {
            store,
            half,
            relationship: relationship.to_owned(),
            name: name.to_owned(),
            fp: key_fp(h),
            walk: if fits {
                ChainWalk::new(g, g + 1, Some(key_fp(h)))
            } else {
                ChainWalk::new(0, 0, None)
            },
            buf: VecDeque::new(),
            failed: false,
        }
    }

    fn fill(&mut self, inner: &Inner) -> Result<()> {
        let geo = self.store.geometry;
        for _ in 0..BLOCKS_PER_STEP {
            let Some(b) = self.walk.next_block(&geo, &inner.tables) else {
                return Ok(());
            };
            let blk: BlockRef<'_> = inner.block(b)?;
            let mut m = blk.matching(self.fp);
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                let v = tag::decode(blk.slot(i)).ok_or_else(|| bad_slot(b, i))?;
                if v.relationship == self.relationship && v.key_name(self.half) == self.name {
                    self.buf.push_back(v.other_name(self.half).to_owned());
                }
            }
            if !self.buf.is_empty() {
                return Ok(());
            }
        }
        Ok(())
    }
}

impl Iterator for Find<'_> {
    type Item = Result<String>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(s) = self.buf.pop_front() {
                return Some(Ok(s));
            }
            if self.failed || matches!(self.walk.pos, Pos::Done) {
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
            if self.failed || matches!(self.walk.pos, Pos::Done) {
                return None;
            }
            let inner = self.store.read();
            let geo = self.store.geometry;
            let r = (|| -> Result<()> {
                for _ in 0..BLOCKS_PER_STEP {
                    let Some(b) = self.walk.next_block(&geo, &inner.tables) else {
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
