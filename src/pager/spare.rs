//! Buffers for private copies, recycled, and made ahead on a helper thread.
//!
//! In the journaled modes a block's first write since the last checkpoint
//! needs a fresh 4 KiB copy. Memory new to the process costs a page fault
//! and the kernel's zero fill on first touch: at 5 M tags, where nearly
//! every durable INSERT writes two blocks not yet copied, that was a fifth
//! of its time. A helper thread makes buffers ahead (while the writer
//! waits for its fsync, say), so the writer finds them ready.

use super::file::ZERO_BLOCK;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// Buffers kept for reuse at most (4 MiB).
const KEEP: usize = 1024;
/// Buffers the helper makes per request (1 MiB).
const BATCH: usize = 256;

/// A copy of `src` in `buf` when that buffer is unshared and of the same
/// size, else in a new one.
pub fn copy_into(buf: Option<Arc<[u8]>>, src: &[u8]) -> Arc<[u8]> {
    buf.and_then(|mut buf| {
        let dst = Arc::get_mut(&mut buf).filter(|d| d.len() == src.len())?;
        dst.copy_from_slice(src);
        Some(buf)
    })
    .unwrap_or_else(|| src.into())
}

/// Block-sized buffers ready for private copies.
#[derive(Default)]
pub struct Spares {
    ready: Vec<Arc<[u8]>>,
    helper: Option<Helper>,
}

struct Helper {
    ask: SyncSender<()>,
    /// In a mutex only so the pager stays `Sync` (used through `&mut`).
    made: Mutex<Receiver<Vec<Arc<[u8]>>>>,
    asked: bool,
    thread: JoinHandle<()>,
}

impl Spares {
    /// A buffer of one block, unshared (its bytes are stale), if one is
    /// ready; asks the helper for more when few are left.
    pub fn take(&mut self) -> Option<Arc<[u8]>> {
        if let Some(h) = self.helper.as_mut() {
            if h.asked {
                let made = h.made.get_mut().unwrap_or_else(PoisonError::into_inner);
                if let Ok(batch) = made.try_recv() {
                    self.ready.extend(batch);
                    h.asked = false;
                }
            }
        }
        if self.ready.len() < BATCH / 4 {
            self.ask();
        }
        self.ready.pop()
    }

    /// Keeps a buffer no longer used, up to the bound.
    pub fn give(&mut self, buf: Arc<[u8]>) {
        if self.ready.len() < KEEP && Arc::strong_count(&buf) == 1 {
            self.ready.push(buf);
        }
    }

    fn ask(&mut self) {
        if self.helper.is_none() {
            self.helper = Helper::start();
        }
        if let Some(h) = self.helper.as_mut().filter(|h| !h.asked) {
            h.asked = h.ask.try_send(()).is_ok();
        }
    }
}

impl Helper {
    fn start() -> Option<Helper> {
        let (ask, asks) = sync_channel::<()>(1);
        let (give, made) = sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("tagstore-spares".into())
            .spawn(move || {
                // Each buffer written whole: its pages are touched here.
                while asks.recv().is_ok() {
                    let batch: Vec<Arc<[u8]>> =
                        (0..BATCH).map(|_| Arc::from(&ZERO_BLOCK[..])).collect();
                    if give.send(batch).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Helper {
            ask,
            made: Mutex::new(made),
            asked: false,
            thread,
        })
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        if let Some(h) = self.helper.take() {
            // Closing both channels ends the helper's loop.
            drop(h.ask);
            drop(h.made);
            let _ = h.thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::BLOCK_SIZE;
    use std::time::{Duration, Instant};

    #[test]
    fn the_helper_makes_buffers_and_a_shared_one_is_not_kept() {
        let mut s = Spares::default();
        let deadline = Instant::now() + Duration::from_secs(30);
        let b = loop {
            if let Some(b) = s.take() {
                break b;
            }
            assert!(Instant::now() < deadline, "the helper made no buffer");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(b.len(), BLOCK_SIZE);
        let before = s.ready.len();
        let shared = Arc::clone(&b);
        s.give(b);
        assert_eq!(s.ready.len(), before, "a buffer still shared was kept");
        s.give(shared);
        assert_eq!(s.ready.len(), before + 1);
    }
}
