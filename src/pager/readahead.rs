//! Reading ahead for scans of the whole store.
//!
//! The map is advised `MADV_RANDOM` (DESIGN.md §3): buckets are reached by
//! hash, and readahead would fill the page cache with neighbours a FIND
//! never reads. But a scan of every tag (`stats`, `check`, `export`,
//! `maintain`, counting from the tags, `serve`'s SCAN) on a store not in
//! the page cache then read it one 4 KB page fault at a time: `stats` of a
//! 2.5 M-tag store (1.8 GB on disk) took 25 s cold against 0.4 s warm. So
//! the first such scan of a handle asks the kernel (`MADV_WILLNEED`) to
//! read every data run of the file (holes are skipped: reading them would
//! fill the page cache with zeros) in large reads, before the scan starts
//! (the call returns once the reads are queued, which for a cold store of
//! gigabytes may take a second or two, under the store's read lock; the
//! scan without it took ten times as long). Only when the store's disk
//! blocks take at most half the memory the process may use (the machine's,
//! or its cgroup's limit if lower: a larger store would evict its own
//! pages before the scan got to them, so it is scanned as before), and not
//! when a sample of its data blocks finds nearly all of them in the page
//! cache already.

use super::Pager;
use crate::format::{BLOCK_SIZE, INTENT_BLOCK};
use std::sync::atomic::Ordering;

impl Pager {
    /// Asks for the whole store's data to be read into the page cache, once
    /// per handle, if it fits in half the machine's memory (a hint).
    pub fn read_ahead_for_scan(&self) {
        if self.scanned_ahead.swap(true, Ordering::Relaxed) {
            return;
        }
        if usable_memory().is_none_or(|ram| self.file.allocated_bytes() > ram / 2) {
            return;
        }
        if self.mostly_cached() {
            return;
        }
        let bs = BLOCK_SIZE as u64;
        let mut at = 0u64;
        while let Some((start, end)) = self.file.next_data_run(at) {
            if end <= start {
                break;
            }
            self.file.will_need(start * bs, (end - start) * bs);
            self.read_ahead
                .fetch_add((end - start) * bs, Ordering::Relaxed);
            at = end;
        }
    }

    /// True when nearly every data block of up to [`SAMPLES`] spread over
    /// the bucket blocks is in the page cache already (a block not cached
    /// counts only if it holds data): asking for a store already there cost
    /// a warm `export` of 1.8 GB 0.2 s of walking it. False when too few
    /// samples hold data to tell (a sparse store: reading ahead its little
    /// data costs little, missing it costs the slow scan).
    fn mostly_cached(&self) -> bool {
        let bs = BLOCK_SIZE as u64;
        // The superblock and intent record are read at every open.
        let first = INTENT_BLOCK + 1;
        let blocks = (self.file.len() / bs).saturating_sub(first);
        let k = SAMPLES.min(blocks);
        let (mut data, mut cached) = (0u64, 0u64);
        for j in 0..k {
            let b = first + j * blocks / k;
            if self.file.resident(b * bs) {
                (data, cached) = (data + 1, cached + 1);
            } else if self.file.next_data_run(b).is_some_and(|(s, _)| s == b) {
                data += 1;
            }
        }
        data >= MIN_DATA_SAMPLES && cached * 10 >= data * 9
    }
}

/// Blocks sampled for [`Pager::mostly_cached`].
const SAMPLES: u64 = 256;

/// Samples holding data below which the sample cannot tell.
const MIN_DATA_SAMPLES: u64 = 16;

impl Pager {
    /// Bytes asked for so far by [`Pager::read_ahead_for_scan`].
    #[cfg(feature = "test-hooks")]
    pub fn read_ahead_bytes(&self) -> u64 {
        self.read_ahead.load(Ordering::Relaxed)
    }
}

/// Bytes of memory this process may use, if the system says: the
/// machine's, or its cgroup's limit (v2 `memory.max`) if lower.
#[cfg(target_os = "linux")]
fn usable_memory() -> Option<u64> {
    // SAFETY: sysinfo fills the struct we own and reads nothing else.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    if unsafe { libc::sysinfo(&mut si) } != 0 {
        return None;
    }
    let ram = (si.totalram as u64).checked_mul(u64::from(si.mem_unit.max(1)))?;
    let limit = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    Some(limit.map_or(ram, |l| l.min(ram)))
}

#[cfg(not(target_os = "linux"))]
fn usable_memory() -> Option<u64> {
    None
}
