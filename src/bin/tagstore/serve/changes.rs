//! `TAGSTORE.CHANGES` (an extension): the keys whose sets changed since
//! the last call, so that `cluster reshard` reads again only those and
//! its tail copy (the pause) lasts as long as the writes since the last
//! copy took, not a read of every moved key.
//!
//! Nothing is kept until the first call. Each call answers the window
//! that the previous call opened, and opens the next:
//!
//! ```text
//! 1) "<instance>"     16 hex digits, new each time serve starts
//! 2) (integer) <n>    the window answered: 0 for the first call
//! 3) (integer) <k>    how many keys follow, or -1: not known (the first
//!                     call, or more changed than a window keeps)
//! 4…) the keys
//! ```
//!
//! A caller that saw window `n` of this instance and now gets window
//! `n + 1` of the same instance has every key changed since its last
//! call; anything else (a restart, a call by someone else in between, -1)
//! means it must read everything again.

use super::resp;
use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};

/// Key bytes one window keeps at most (64 MiB); past them it only
/// remembers that it overflowed.
const WINDOW_BYTES: usize = 64 << 20;

/// The window of changed keys (the event loop's thread only).
pub struct Changes {
    instance: u64,
    inner: RefCell<Window>,
}

#[derive(Default)]
struct Window {
    /// The window's number; `None` until the first call (nothing kept).
    number: Option<u64>,
    keys: HashSet<Vec<u8>>,
    bytes: usize,
    overflowed: bool,
}

impl Default for Changes {
    fn default() -> Self {
        Changes::new(
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
        )
    }
}

impl Changes {
    /// No window open yet, for the server instance `instance`.
    pub fn new(instance: u64) -> Changes {
        Changes {
            instance,
            inner: RefCell::default(),
        }
    }

    /// The server instance, as `TAGSTORE.CHANGES` and INFO's `run_id` give it.
    pub fn instance_hex(&self) -> String {
        format!("{:016x}", self.instance)
    }

    /// True once a window is open (changes are being noted).
    pub fn open(&self) -> bool {
        self.inner.borrow().number.is_some()
    }

    /// The set named by `key` changed.
    pub fn touched(&self, key: &[u8]) {
        let mut w = self.inner.borrow_mut();
        if w.number.is_none() || w.overflowed || w.keys.contains(key) {
            return;
        }
        w.bytes += key.len() + 32;
        if w.bytes > WINDOW_BYTES {
            w.overflowed = true;
            w.keys = HashSet::new();
            return;
        }
        w.keys.insert(key.to_vec());
    }

    /// Answers `TAGSTORE.CHANGES` and opens the next window.
    pub fn call(&self, out: &mut Vec<u8>) {
        let mut w = self.inner.borrow_mut();
        let done = std::mem::take(&mut *w);
        w.number = Some(done.number.map_or(1, |n| n + 1));
        resp::array(out, 3 + done.keys.len());
        resp::bulk(out, self.instance_hex().as_bytes());
        resp::int(out, done.number.unwrap_or(0) as i64);
        match done.number {
            Some(_) if !done.overflowed => {
                resp::int(out, done.keys.len() as i64);
                let mut keys: Vec<Vec<u8>> = done.keys.into_iter().collect();
                keys.sort_unstable();
                for k in &keys {
                    resp::bulk(out, k);
                }
            }
            _ => resp::int(out, -1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(c: &Changes) -> String {
        let mut out = Vec::new();
        c.call(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn each_call_answers_the_keys_changed_since_the_last() {
        let c = Changes::new(0xabc);
        c.touched(b"o:1:r:before");
        assert_eq!(
            call(&c),
            "*3\r\n$16\r\n0000000000000abc\r\n:0\r\n:-1\r\n",
            "the first call knows nothing"
        );
        c.touched(b"s:1:r:b");
        c.touched(b"o:1:r:a");
        c.touched(b"s:1:r:b");
        assert_eq!(
            call(&c),
            "*5\r\n$16\r\n0000000000000abc\r\n:1\r\n:2\r\n$7\r\no:1:r:a\r\n$7\r\ns:1:r:b\r\n"
        );
        assert_eq!(call(&c), "*3\r\n$16\r\n0000000000000abc\r\n:2\r\n:0\r\n");
    }

    #[test]
    fn a_window_past_its_bound_says_it_does_not_know() {
        let c = Changes::new(1);
        call(&c);
        let big = vec![b'k'; 1 << 20];
        for i in 0..70u8 {
            let mut k = big.clone();
            k[0] = i;
            c.touched(&k);
        }
        assert_eq!(call(&c), "*3\r\n$16\r\n0000000000000001\r\n:1\r\n:-1\r\n");
        c.touched(b"o:1:r:a");
        assert!(call(&c).ends_with(":2\r\n:1\r\n$7\r\no:1:r:a\r\n"));
    }
}
