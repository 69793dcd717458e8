//! `WATCH`: a transaction's optimistic lock. A connection notes the
//! version of each key it watches; every write that changes a set bumps
//! its key's version (and on a whole-tag store the other key of each tag
//! changed); `EXEC` runs nothing, answering a null array, if a watched key's
//! version moved. Only watched keys have versions, so writes cost one
//! emptiness check while nobody watches.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// One watched key: its version and how many connections watch it.
struct Entry {
    version: u64,
    watchers: usize,
}

/// The versions of the keys some connection watches (the event loop's
/// thread only).
#[derive(Default)]
pub struct Watches(RefCell<HashMap<Vec<u8>, Entry>>);

impl Watches {
    /// True if some connection watches a key.
    pub fn any(&self) -> bool {
        !self.0.borrow().is_empty()
    }

    /// The set named by `key` changed.
    pub fn touched(&self, key: &[u8]) {
        if let Some(e) = self.0.borrow_mut().get_mut(key) {
            e.version += 1;
        }
    }

    fn watch(&self, key: &[u8]) -> u64 {
        let mut m = self.0.borrow_mut();
        let e = m.entry(key.to_vec()).or_insert(Entry {
            version: 0,
            watchers: 0,
        });
        e.watchers += 1;
        e.version
    }

    fn unwatch(&self, key: &[u8]) {
        let mut m = self.0.borrow_mut();
        if let Some(e) = m.get_mut(key) {
            e.watchers -= 1;
            if e.watchers == 0 {
                m.remove(key);
            }
        }
    }

    fn version(&self, key: &[u8]) -> Option<u64> {
        self.0.borrow().get(key).map(|e| e.version)
    }
}

/// The keys one connection watches, each with the version it saw.
#[derive(Default)]
pub struct Watched {
    keys: Vec<(Vec<u8>, u64)>,
    watches: Option<Rc<Watches>>,
}

impl Watched {
    /// Watches `key` from its current version.
    pub fn add(&mut self, watches: &Rc<Watches>, key: &[u8]) {
        let w = self.watches.get_or_insert_with(|| Rc::clone(watches));
        let v = w.watch(key);
        self.keys.push((key.to_vec(), v));
    }

    /// True if a watched key changed since it was watched.
    pub fn broken(&self) -> bool {
        let Some(w) = &self.watches else {
            return false;
        };
        self.keys.iter().any(|(k, v)| w.version(k) != Some(*v))
    }

    /// Forgets every watched key (`UNWATCH`, `EXEC`, `DISCARD`, the end
    /// of the connection).
    pub fn clear(&mut self) {
        if let Some(w) = &self.watches {
            for (k, _) in self.keys.drain(..) {
                w.unwatch(&k);
            }
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_versioned_while_a_connection_watches_it() {
        let w = Rc::new(Watches::default());
        let (mut a, mut b) = (Watched::default(), Watched::default());
        a.add(&w, b"o:1:r:k");
        b.add(&w, b"o:1:r:k");
        w.touched(b"o:1:r:other");
        assert!(!a.broken() && !b.broken(), "another key changed");
        drop(b);
        assert!(w.any(), "a still watches the key");
        w.touched(b"o:1:r:k");
        assert!(a.broken());
        a.clear();
        assert!(!w.any(), "nobody watches: no version is kept");
        a.add(&w, b"o:1:r:k");
        assert!(!a.broken(), "watched again from the current version");
        drop(a);
        assert!(!w.any(), "a connection's end unwatches its keys");
    }
}
