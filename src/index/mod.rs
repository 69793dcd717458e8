//! The index over the pager: bucket tables (fill, chain links, key filters),
//! the in-memory accelerators, and the one chain walk that every reader of a
//! bucket uses (FIND, export, DELETE's and INSERT's look-ups).

mod accel;
mod directory;
mod image;
mod locate;
mod rebuild;
mod tables;
mod walk;

pub use accel::{next_in_mask, Accel};
pub use image::{TABLE_MAGIC, TABLE_MAGIC_1};
pub use locate::Found;
pub use tables::{filter_add, filter_has, SecondaryEntry, Tables};
pub use walk::ChainWalk;

use crate::format::{prefetch_val, Half, Layout, NONE};
use crate::pager::Pager;

/// The bucket tables and accelerators of one open store.
pub struct Index {
    /// Per-bucket fill, links and filters.
    pub tables: Tables,
    /// Learned primary extents and chain indexes (memory only).
    pub accel: Accel,
    /// Per primary bucket: a secondary bucket of its chain such that all
    /// earlier ones are full (NONE: start at the head). Speeds INSERT on peaks.
    pub open_hint: Vec<u32>,
    /// Per primary bucket: every block of its chain was read (its checksum
    /// verified) since open, so a bulk round need not read it first again.
    pub chain_read: Vec<bool>,
    geo: Layout,
    seed: u64,
}

impl Index {
    /// An index over `tables` of a store with geometry `geo` and hash `seed`.
    pub fn new(mut tables: Tables, geo: Layout, seed: u64) -> Index {
        // Empty buckets need no extent learning (see `Accel::new`).
        let mut accel = Accel::new(geo.primary_buckets(), geo.blocks_per_primary, |g| {
            tables.primary.get(g as usize).is_some_and(|e| e.used == 0)
        });
        accel.set_secondary_extents(std::mem::take(&mut tables.extents));
        Index {
            tables,
            accel,
            open_hint: vec![NONE; geo.primary_buckets() as usize],
            chain_read: vec![false; geo.primary_buckets() as usize],
            geo,
            seed,
        }
    }

    /// The geometry the index was built for.
    pub fn geometry(&self) -> Layout {
        self.geo
    }

    /// The layout, borrowed (a copy is 420 bytes: FIND's walk asks for it
    /// at every block).
    pub fn layout(&self) -> &Layout {
        &self.geo
    }

    /// Takes the layout after a split: tables, accelerators and hints
    /// gain the new buckets (never written, empty).
    pub fn set_layout(&mut self, l: Layout) {
        let n = l.primary_buckets();
        self.tables.grow_primary(n);
        self.accel.grow(n);
        self.open_hint.resize(n as usize, NONE);
        self.chain_read.resize(n as usize, false);
        self.geo = l;
    }

    /// The store's hash seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Tags in one half (each tag is in both), from the tables.
    pub fn count_half(&self) -> u64 {
        self.count_in(Half::Object)
    }

    /// What a store's tag count counts, from the tables: tags (each is in
    /// both halves), or halves in a half-only store.
    pub fn count_stored(&self, half_only: bool) -> u64 {
        if half_only {
            self.count_in(Half::Object) + self.count_in(Half::Subject)
        } else {
            self.count_half()
        }
    }

    /// Tags stored in half `half`, from the tables.
    pub fn count_in(&self, half: Half) -> u64 {
        let (first, end, step) = self.geo.half_buckets(half);
        (first..end)
            .step_by(step as usize)
            .map(|g| self.tables.chain_load(g))
            .sum()
    }

    /// Asks the CPU for the headers of the first `blocks` blocks of primary
    /// bucket `g` and for its table entry, so their misses overlap.
    #[inline]
    pub fn prefetch_bucket(&self, pager: &Pager, g: u32, blocks: u32) {
        pager.prefetch_headers(self.geo.primary_start(g), blocks);
        if let Some(e) = self.tables.primary.get(g as usize) {
            prefetch_val(e);
        }
    }

    /// Asks the CPU for primary bucket `g`'s slot directory and the first
    /// line of each of its blocks, as soon as a FIND knows the bucket.
    pub fn prefetch_first_look(&self, pager: &Pager, g: u32) {
        self.accel.prefetch_dir(g);
        pager.prefetch_pages(self.geo.primary_start(g), self.geo.blocks_per_primary);
    }

    /// The blocks among the first `n` of primary bucket `g` whose slot
    /// directory names key fingerprint `fp` (bit `i`: block `i`; the walk
    /// reads blocks past 64 whatever the directory says), after asking
    /// the CPU for their headers, the named slots and the bucket's table
    /// entry: the header and slot misses overlap instead of the slots
    /// waiting for the header.
    pub fn prefetch_matching(&self, pager: &Pager, g: u32, n: u32, fp: u16) -> u64 {
        let start = self.geo.primary_start(g);
        let mut want = 0;
        for i in 0..n.min(64) {
            let mut m = self.accel.dir_matching(g, i, fp);
            if m != 0 {
                want |= 1 << i;
                pager.prefetch_headers(start + i as u64, 1);
            }
            while m != 0 {
                pager.prefetch_slot(start + i as u64, m.trailing_zeros() as usize);
                m &= m - 1;
            }
        }
        if n > 64 {
            pager.prefetch_headers(start + 64, n - 64);
        }
        if let Some(e) = self.tables.primary.get(g as usize) {
            prefetch_val(e);
        }
        want
    }

    /// Asks for the block headers and table entries of primary buckets
    /// about to be searched or written, so their misses overlap.
    pub fn prefetch_buckets(&self, pager: &Pager, gs: &[u32]) {
        for &g in gs {
            // The written blocks and the first unwritten one (where INSERT
            // may put the tag); touching holes only costs page walks.
            let n = self
                .accel
                .known_extent(g)
                .map_or(self.geo.blocks_per_primary, |e| {
                    (e + 1).min(self.geo.blocks_per_primary)
                });
            self.prefetch_bucket(pager, g, n);
            // The INSERT writes a byte of it.
            self.accel.prefetch_dir(g);
        }
    }
}
