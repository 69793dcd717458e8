//! Write-back started early: the runs a bulk write hands to the page cache,
//! and the blocks a checkpoint copies into the store file, start on their
//! way to the disk from a helper thread while the next ones are made, so
//! the sync at the end finds them written (or in flight).
//!
//! Only a hint: nothing waits for it but the next one and the drop, and the
//! sync that makes the data durable is unchanged and reports any error.

use std::fs::File;
use std::thread::JoinHandle;

/// One background `sync_file_range(SYNC_FILE_RANGE_WRITE)` at a time: a
/// new one first waits for the last, so the disk, not memory, sets the pace.
#[derive(Debug, Default)]
pub struct Writeback {
    running: Option<JoinHandle<()>>,
}

impl Writeback {
    /// Starts writing `[off, off + len)` of `file` back in the background.
    pub fn start(&mut self, file: &File, off: u64, len: u64) {
        self.wait();
        // The clone shares the open file (and its lock); the thread is
        // joined before this drops, so it never outlives the handle.
        let Ok(f) = file.try_clone() else {
            return;
        };
        self.running = std::thread::Builder::new()
            .name("tagstore-writeback".into())
            .spawn(move || initiate(&f, off, len))
            .ok();
    }

    /// Waits for the write-back started last, if any.
    pub fn wait(&mut self) {
        if let Some(h) = self.running.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Writeback {
    fn drop(&mut self) {
        self.wait();
    }
}

#[cfg(target_os = "linux")]
fn initiate(f: &File, off: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: sync_file_range reads no memory of ours; `f` is open.
    unsafe {
        libc::sync_file_range(
            f.as_raw_fd(),
            off as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn initiate(_: &File, _: u64, _: u64) {}
