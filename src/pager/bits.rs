//! A set of block numbers, one bit per block (the pager's block marks:
//! backed, a bulk write's unsealed copies and early write-backs, holes).

/// A set of block numbers as a bitmap that grows as blocks are added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockBits(Vec<u64>);

fn at(n: u64) -> (usize, u64) {
    ((n / 64) as usize, 1u64 << (n % 64))
}

impl BlockBits {
    /// An empty set with room for blocks below `blocks`.
    pub fn with_blocks(blocks: u64) -> BlockBits {
        BlockBits(vec![0; blocks.div_ceil(64) as usize])
    }

    /// True if block `n` is in the set.
    #[inline]
    pub fn contains(&self, n: u64) -> bool {
        let (w, bit) = at(n);
        self.0.get(w).is_some_and(|x| x & bit != 0)
    }

    /// Adds block `n`.
    pub fn insert(&mut self, n: u64) {
        let (w, bit) = at(n);
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= bit;
    }

    /// Removes block `n`; true if it was in the set.
    pub fn remove(&mut self, n: u64) -> bool {
        let (w, bit) = at(n);
        match self.0.get_mut(w) {
            Some(x) if *x & bit != 0 => {
                *x &= !bit;
                true
            }
            _ => false,
        }
    }

    /// Removes every block from `end` on.
    pub fn truncate(&mut self, end: u64) {
        let (w, bit) = at(end);
        if let Some(x) = self.0.get_mut(w) {
            *x &= bit - 1;
        }
        self.0.truncate(w + 1);
    }

    /// Adds every block of `other`.
    pub fn union_with(&mut self, other: &BlockBits) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (d, s) in self.0.iter_mut().zip(&other.0) {
            *d |= s;
        }
    }

    /// Removes every block.
    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// The blocks in the set, ascending (unit tests).
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &x)| {
            (0..64u64)
                .filter(move |i| x & (1 << i) != 0)
                .map(move |i| w as u64 * 64 + i)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::BlockBits;

    /// Blocks on either side of a word's edges, as a `BTreeSet` would hold them.
    #[test]
    fn a_bitmap_holds_what_a_set_would() {
        let mut b = BlockBits::default();
        let mut model = std::collections::BTreeSet::new();
        for n in [0u64, 1, 63, 64, 65, 127, 128, 1000, 4095] {
            b.insert(n);
            model.insert(n);
        }
        assert!(b.remove(64) && !b.remove(64) && !b.remove(5000));
        model.remove(&64);
        let got: Vec<u64> = (0..5000).filter(|&n| b.contains(n)).collect();
        assert_eq!(got, model.iter().copied().collect::<Vec<_>>());
        assert_eq!(b.iter().collect::<Vec<_>>(), got);
        b.truncate(128);
        let got: Vec<u64> = (0..5000).filter(|&n| b.contains(n)).collect();
        assert_eq!(got, [0, 1, 63, 65, 127]);
        let mut c = BlockBits::with_blocks(10);
        c.insert(3);
        c.union_with(&b);
        let got: Vec<u64> = (0..5000).filter(|&n| c.contains(n)).collect();
        assert_eq!(got, [0, 1, 3, 63, 65, 127]);
        c.clear();
        assert!(!c.contains(3));
    }
}
