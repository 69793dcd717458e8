//! What a configuration change moves: for a list of keys, which change node
//! between an old and a new pool (`tagstore ring NEW --moved-from OLD`).
//! Nodes are matched by their label (name, or `host:port` when unnamed).

use super::config::Pool;
use super::ketama::Ring;
use std::collections::BTreeMap;

/// Per node: keys before, after, moved in and moved out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeMoves {
    pub before: u64,
    pub after: u64,
    pub moved_in: u64,
    pub moved_out: u64,
}

/// The tally over all keys.
#[derive(Clone, Debug, Default)]
pub struct Moves {
    pub keys: u64,
    pub moved: u64,
    /// By node label, sorted.
    pub nodes: BTreeMap<String, NodeMoves>,
}

impl Moves {
    /// The share of keys whose node changed.
    pub fn share(&self) -> f64 {
        if self.keys == 0 {
            0.0
        } else {
            self.moved as f64 / self.keys as f64
        }
    }
}

/// Counts keys as they are placed under `old` and under `new`.
pub struct Compare {
    old: (Ring, Vec<String>),
    new: (Ring, Vec<String>),
    pub moves: Moves,
}

impl Compare {
    pub fn new(old: &Pool, new: &Pool) -> Compare {
        let side = |p: &Pool| (Ring::new(p), p.servers.iter().map(|s| s.label()).collect());
        let mut moves = Moves::default();
        for s in old.servers.iter().chain(&new.servers) {
            moves.nodes.entry(s.label()).or_default();
        }
        Compare {
            old: side(old),
            new: side(new),
            moves,
        }
    }

    /// Places one key under both pools.
    pub fn add(&mut self, key: &[u8]) {
        let a = &self.old.1[self.old.0.locate(key)];
        let b = &self.new.1[self.new.0.locate(key)];
        let m = &mut self.moves;
        m.keys += 1;
        if let Some(n) = m.nodes.get_mut(a) {
            n.before += 1;
        }
        if let Some(n) = m.nodes.get_mut(b) {
            n.after += 1;
        }
        if a != b {
            m.moved += 1;
            if let Some(n) = m.nodes.get_mut(a) {
                n.moved_out += 1;
            }
            if let Some(n) = m.nodes.get_mut(b) {
                n.moved_in += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::config::test_pool as pool;

    #[test]
    fn three_to_four_equal_nodes_moves_about_a_quarter() {
        for hash in ["md5", "murmur"] {
            let old = pool(
                hash,
                &[
                    "127.0.0.1:7001:1 a",
                    "127.0.0.1:7002:1 b",
                    "127.0.0.1:7003:1 c",
                ],
            );
            let new = pool(
                hash,
                &[
                    "127.0.0.1:7001:1 a",
                    "127.0.0.1:7002:1 b",
                    "127.0.0.1:7003:1 c",
                    "127.0.0.1:7004:1 d",
                ],
            );
            let mut c = Compare::new(&old, &new);
            for i in 0..100_000 {
                let key = match i % 3 {
                    0 => format!("o:3:isa:photo{i}"),
                    1 => format!("s:3:isa:subject-{i}"),
                    _ => format!("user:{i}"),
                };
                c.add(key.as_bytes());
            }
            let m = &c.moves;
            let share = m.share();
            assert!((0.20..=0.30).contains(&share), "{hash}: moved {share}");
            // Consistent hashing: every moved key goes to the new node.
            let d = &m.nodes["d"];
            assert_eq!(d.before, 0);
            assert_eq!(d.moved_in, m.moved);
            assert_eq!(d.after, m.moved);
            for n in ["a", "b", "c"] {
                assert_eq!(m.nodes[n].moved_in, 0, "{hash}: {n}");
                assert_eq!(m.nodes[n].before - m.nodes[n].moved_out, m.nodes[n].after);
            }
        }
    }

    #[test]
    fn same_pool_moves_nothing() {
        let p = pool("md5", &["h:1:1 a", "h:2:2 b"]);
        let mut c = Compare::new(&p, &p);
        for i in 0..1000 {
            c.add(format!("k{i}").as_bytes());
        }
        assert_eq!((c.moves.keys, c.moves.moved), (1000, 0));
    }
}
