//! Disk space for never-written blocks, backed ahead of need on a helper
//! thread.
//!
//! In the journaled modes a block is backed (`fallocate`) before its first
//! write, so that a full disk is an error of the INSERT that needs the
//! block, never a SIGBUS at the checkpoint's write through the map. After
//! a bulk load nearly every durable INSERT wrote a block never written
//! before (the next block of a bucket, or a new secondary bucket's first),
//! and its `fallocate` was a seventh of the INSERT's CPU time. The pager
//! asks for the blocks it will likely need next (a block's successor once
//! the block is full, the next free secondary bucket's first block); the
//! helper backs them while the writer waits for its `fdatasync`, and the
//! writer takes them as backed when it gets to them. A block asked for and
//! not yet backed is backed by the writer as before; a `fallocate` that
//! fails here (a full disk) is only forgotten.

use std::fs::File;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// Bytes of one block.
const BLOCK: u64 = crate::format::BLOCK_SIZE as u64;

/// Asks kept before they go to the helper together: each message wakes
/// it, and one wake per block was a seventh of the writer's time under a
/// pipelined durable `serve`.
const BATCH: usize = 16;

/// The helper thread and the blocks it backed, each with the generation
/// it was asked in.
#[derive(Debug)]
pub struct Ahead {
    ask: Option<Sender<Vec<(u64, u64)>>>,
    /// Asks not sent yet (see [`BATCH`]).
    asks: Vec<(u64, u64)>,
    done: Arc<Mutex<Vec<(u64, u64)>>>,
    thread: Option<JoinHandle<()>>,
}

impl Ahead {
    /// Starts the helper on a clone of `file` (it shares the file's lock
    /// and is joined when this drops); `None` if it cannot start.
    pub fn start(file: &File) -> Option<Ahead> {
        let f = file.try_clone().ok()?;
        let (ask, asked) = channel::<Vec<(u64, u64)>>();
        let done = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name("tagstore-ahead".into())
            .spawn(move || {
                for batch in asked {
                    for (gen, b) in batch {
                        if keep_size_fallocate(&f, b * BLOCK, BLOCK) {
                            out.lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .push((gen, b));
                        }
                    }
                }
            })
            .ok()?;
        Some(Ahead {
            ask: Some(ask),
            asks: Vec::new(),
            done,
            thread: Some(thread),
        })
    }

    /// Asks for block `b` to be backed (generation `gen`); the asks go to
    /// the helper [`BATCH`] at a time, or at [`Ahead::send`].
    pub fn ask(&mut self, gen: u64, b: u64) {
        self.asks.push((gen, b));
        if self.asks.len() >= BATCH {
            self.send();
        }
    }

    /// Sends the asks kept so far (a writer about to wait for its commit's
    /// `fdatasync`, while the helper works).
    pub fn send(&mut self) {
        if self.asks.is_empty() {
            return;
        }
        let asks = std::mem::take(&mut self.asks);
        if let Some(a) = &self.ask {
            let _ = a.send(asks);
        }
    }

    /// The blocks backed since the last call, with their generations.
    pub fn take_done(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.done.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // Closing the channel ends the helper's loop.
        self.ask = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Backs `[off, off + len)` without changing the file's size (a block past
/// the end, after the file shrank meanwhile, must not grow it back); true
/// when it did.
#[cfg(target_os = "linux")]
fn keep_size_fallocate(f: &File, off: u64, len: u64) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate reads no memory of ours; `f` is open.
    unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_KEEP_SIZE,
            off as libc::off_t,
            len as libc::off_t,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn keep_size_fallocate(_: &File, _: u64, _: u64) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::{Ahead, BATCH, BLOCK};
    use std::os::unix::fs::MetadataExt;
    use std::time::{Duration, Instant};

    /// A block asked for is backed (its disk blocks allocated), reported
    /// once with its generation, and the file keeps its size.
    #[test]
    fn a_block_asked_for_is_backed_and_reported() {
        let dir = tempfile::tempdir().expect("test setup");
        let path = dir.path().join("sparse");
        let f = std::fs::File::create(&path).expect("test setup");
        f.set_len(64 * BLOCK).expect("test setup");
        let before = f.metadata().expect("test setup").blocks();
        let mut a = Ahead::start(&f).expect("helper starts");
        a.ask(7, 5);
        a.ask(7, 70); // past the end: never grows the file
        a.send();
        let t = Instant::now();
        let mut done = Vec::new();
        while done.len() < 2 && t.elapsed() < Duration::from_secs(5) {
            done.extend(a.take_done());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(done.contains(&(7, 5)), "block 5 reported: {done:?}");
        assert!(a.take_done().is_empty(), "reported once");
        let m = f.metadata().expect("test setup");
        assert_eq!(m.len(), 64 * BLOCK, "the size is unchanged");
        assert!(m.blocks() > before, "disk space was allocated");
    }

    /// Asks wait until a batch is full or sent: one wake of the helper per
    /// batch, not per block.
    #[test]
    fn asks_go_to_the_helper_a_batch_at_a_time() {
        let dir = tempfile::tempdir().expect("test setup");
        let f = std::fs::File::create(dir.path().join("sparse")).expect("test setup");
        f.set_len(64 * BLOCK).expect("test setup");
        let mut a = Ahead::start(&f).expect("helper starts");
        let wait_for = |a: &Ahead, n: usize| {
            let t = Instant::now();
            let mut done = Vec::new();
            while done.len() < n && t.elapsed() < Duration::from_secs(5) {
                done.extend(a.take_done());
                std::thread::sleep(Duration::from_millis(5));
            }
            done
        };
        a.ask(1, 0);
        std::thread::sleep(Duration::from_millis(50));
        assert!(a.take_done().is_empty(), "one ask is kept, not sent");
        for b in 1..BATCH as u64 {
            a.ask(1, b);
        }
        let done = wait_for(&a, BATCH);
        assert_eq!(done.len(), BATCH, "a full batch is sent: {done:?}");
        a.ask(2, 40);
        a.send();
        assert_eq!(wait_for(&a, 1), vec![(2, 40)], "send sends what is kept");
    }
}
