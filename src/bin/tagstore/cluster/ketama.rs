//! Placement as nutcracker 0.5.0 computes it (`src/hashkit/nc_ketama.c`,
//! `nc_modula.c`, `server_pool_idx` in `src/nc_server.c`).
//!
//! Ketama: each server gets points on a 32-bit ring in proportion to its
//! weight, 160 for an average server, computed in `f32` exactly as the C
//! does; point group `k` of a server is the md5 digest of `"<name>-<k>"`,
//! which gives 4 points (its four little-endian words). A key's hash goes
//! to the first point at or after it, wrapping past the top to the first
//! point. Servers are in nutcracker's order (sorted by name, see
//! [`config::Pool::servers`]) and equal points keep that order (glibc's
//! `qsort` is a stable merge sort for arrays this size).

use super::config::{Distribution, Pool, Server};
use super::hash::{md5, md5_word, Hash};

/// Points per server of average weight.
const POINTS_PER_SERVER: u32 = 160;
/// Points taken from one md5 digest.
const POINTS_PER_HASH: u32 = 4;

/// A pool's placement: a key's bytes to the index of its server.
#[derive(Clone, Debug)]
pub struct Ring {
    hash: Hash,
    /// Ketama: `(point, server)` sorted by point. Modula: one entry per unit
    /// of weight, in server order, and the point is unused.
    points: Vec<(u32, u32)>,
    distribution: Distribution,
    servers: usize,
}

impl Ring {
    /// Builds the ring of `pool` (every server live: `auto_eject_hosts` is off).
    pub fn new(pool: &Pool) -> Ring {
        let points = match pool.distribution {
            Distribution::Ketama => continuum(&pool.servers),
            Distribution::Modula => pool
                .servers
                .iter()
                .enumerate()
                .flat_map(|(i, s)| std::iter::repeat_n((0, i as u32), s.weight as usize))
                .collect(),
        };
        Ring {
            hash: pool.hash,
            points,
            distribution: pool.distribution,
            servers: pool.servers.len(),
        }
    }

    /// The index (into the pool's servers) of the server holding `key`.
    pub fn locate(&self, key: &[u8]) -> usize {
        // nutcracker skips hashing for a single server and hashes an empty key to 0.
        if self.servers == 1 || self.points.is_empty() {
            return 0;
        }
        let h = if key.is_empty() {
            0
        } else {
            self.hash.hash(key)
        };
        match self.distribution {
            Distribution::Ketama => self.dispatch(h),
            Distribution::Modula => self.points[h as usize % self.points.len()].1 as usize,
        }
    }

    /// The server of the first point at or after `h`, wrapping to the first point.
    fn dispatch(&self, h: u32) -> usize {
        let i = self.points.partition_point(|&(p, _)| p < h);
        self.points.get(i).unwrap_or(&self.points[0]).1 as usize
    }

    /// The ring's points, sorted (ketama only).
    #[cfg(test)]
    pub fn points(&self) -> &[(u32, u32)] {
        &self.points
    }
}

/// How many points a server of `weight` gets out of `total` over `n`
/// servers: `floorf(pct × 160 / 4 × n + 1e-10) × 4` with `pct` a `float`,
/// every step in `f32` as in the C (the `1e-10` is a double: the sum is
/// rounded back to `f32` by `floorf`).
pub fn points_for(weight: u32, total: u32, n: u32) -> u32 {
    let pct = weight as f32 / total as f32;
    let x = pct * POINTS_PER_SERVER as f32 / POINTS_PER_HASH as f32 * n as f32;
    let x = (f64::from(x) + 0.000_000_000_1) as f32;
    x.floor() as u32 * POINTS_PER_HASH
}

/// The ketama continuum of `servers` (in nutcracker's order), sorted.
fn continuum(servers: &[Server]) -> Vec<(u32, u32)> {
    let total = servers
        .iter()
        .map(|s| s.weight)
        .fold(0u32, u32::wrapping_add);
    let n = servers.len() as u32;
    let mut points = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        let name = s.ketama_name();
        for k in 0..points_for(s.weight, total, n) / POINTS_PER_HASH {
            let mut label = format!("{name}-{k}").into_bytes();
            // nutcracker formats into a 273-byte buffer and truncates there.
            label.truncate(272);
            let d = md5(&label);
            for w in 0..POINTS_PER_HASH as usize {
                points.push((md5_word(&d, w), i as u32));
            }
        }
    }
    // Stable, as glibc's merge sort: equal points keep server order.
    points.sort_by_key(|&(p, _)| p);
    points
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::config::test_pool as pool;

    #[test]
    fn points_follow_weights() {
        // Equal weights: 160 each (3 servers: 1/3 in f32 still floors to 40).
        for n in 1..=20 {
            assert_eq!(points_for(1, n, n), 160, "n = {n}");
        }
        assert_eq!(points_for(2, 5, 4), 256);
        assert_eq!(points_for(1, 5, 4), 128);
        // A tiny share can get no point at all, as in nutcracker.
        assert_eq!(points_for(1, 1000, 2), 0);
        let p = pool("md5", &["a:1:3 x", "a:2:1 y", "a:3:1 z", "a:4:1"]);
        let r = Ring::new(&p);
        let mut per = vec![0; 4];
        for &(_, s) in r.points() {
            per[s as usize] += 1;
        }
        // Sorted order: x, y, z, a:4; weights 3, 1, 1, 1 of 6 over 4 servers.
        assert_eq!(per, [320, 104, 104, 104]);
    }

    #[test]
    fn continuum_is_sorted_and_dispatch_wraps() {
        let p = pool("md5", &["h:1:1 a", "h:2:1 b", "h:3:1 c"]);
        let r = Ring::new(&p);
        let pts = r.points();
        assert_eq!(pts.len(), 480);
        assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0));
        // Exactly on a point, just after it, past the last point (wraps).
        for (i, &(v, s)) in pts.iter().enumerate() {
            assert_eq!(r.dispatch(v), s as usize);
            if i + 1 < pts.len() && pts[i + 1].0 > v {
                assert_eq!(r.dispatch(v + 1), pts[i + 1].1 as usize);
            }
        }
        let last = pts[pts.len() - 1].0;
        if last < u32::MAX {
            assert_eq!(r.dispatch(last + 1), pts[0].1 as usize);
        }
        assert_eq!(r.dispatch(0), pts[0].1 as usize);
    }

    #[test]
    fn first_points_are_md5_words_of_name_dash_k() {
        let p = pool("md5", &["h:1:1 alpha", "h:2:1"]);
        let r = Ring::new(&p);
        let d = md5(b"alpha-0");
        // "alpha" sorts after "h:2" (longer): it is server 1.
        for w in 0..4 {
            assert!(r.points().contains(&(md5_word(&d, w), 1)));
        }
        let d = md5(b"h:2-159");
        assert!(!r.points().contains(&(md5_word(&d, 0), 0)));
        let d = md5(b"h:2-39");
        assert!(r.points().contains(&(md5_word(&d, 3), 0)));
    }

    #[test]
    fn shares_are_near_the_weights() {
        let p = pool("murmur", &["n:1:1 a", "n:2:1 b", "n:3:2 c"]);
        let r = Ring::new(&p);
        let mut per = [0u32; 3];
        for i in 0..40_000 {
            per[r.locate(format!("key:{i}").as_bytes())] += 1;
        }
        // c has half the weight; a and b a quarter each, within ring noise.
        assert!((16_000..24_000).contains(&per[2]), "{per:?}");
        assert!(
            per[..2].iter().all(|&n| (7_000..13_000).contains(&n)),
            "{per:?}"
        );
    }

    #[test]
    fn single_server_and_empty_key() {
        let r = Ring::new(&pool("md5", &["h:1:1"]));
        assert_eq!(r.locate(b"anything"), 0);
        let p = pool("md5", &["h:1:1 a", "h:2:1 b"]);
        let r = Ring::new(&p);
        assert_eq!(r.locate(b""), r.dispatch(0));
    }

    #[test]
    fn modula_uses_weight_slots() {
        let mut p = pool("crc32a", &["h:1:2 a", "h:2:1 b"]);
        p.distribution = Distribution::Modula;
        let r = Ring::new(&p);
        for key in ["x", "yy", "zzz", "photo1"] {
            let h = Hash::Crc32a.hash(key.as_bytes());
            let want = if h % 3 < 2 { 0 } else { 1 };
            assert_eq!(r.locate(key.as_bytes()), want, "{key}");
        }
    }
}
