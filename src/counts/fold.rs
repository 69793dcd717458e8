//! Folding a large counts file on another thread, so that the merge that
//! finds the log grown does not wait for every count to be rewritten.
//!
//! The thread reads the file's first `covered` bytes (through its own
//! handle on the same inode), folds them into one snapshot and writes it to
//! `STORE.counts.fold`. A later merge, on the caller's thread, appends the
//! records written since `covered` to that file, fsyncs it and renames it
//! over `STORE.counts`. Until then the old file stays the file: a crash or
//! a dropped fold leaves it whole, and the temporary is removed.

use super::log::{parse, snapshot_file, CountsFile, HEADER};
use crate::error::{Error, Result};
use crate::side::{side_path, AppendLog};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

/// Snapshot size (bytes) from which a fold runs on another thread; smaller
/// files are folded in place (a few milliseconds).
pub(super) const BACKGROUND_FOLD_MIN: u64 = 4 << 20;

/// A fold in progress: how much of the file it covers, and its thread,
/// which returns the new file (one snapshot) and the snapshot's length.
pub(super) struct Fold {
    covered: u64,
    tmp: PathBuf,
    thread: Option<JoinHandle<Result<(AppendLog, u64)>>>,
}

/// Path of the temporary a background fold writes.
pub fn fold_path(store: &Path) -> PathBuf {
    side_path(store, "counts.fold")
}

impl Fold {
    /// Starts folding the first `covered` bytes of `file` (a handle on the
    /// counts file) into `STORE.counts.fold`; `None` if no thread starts.
    pub(super) fn start(store: &Path, seed: u64, file: File, covered: u64) -> Option<Fold> {
        let tmp = fold_path(store);
        let to = tmp.clone();
        let thread = std::thread::Builder::new()
            .name("tagstore-counts-fold".into())
            .spawn(move || write_folded(&file, seed, covered, to))
            .ok()?;
        Some(Fold {
            covered,
            tmp,
            thread: Some(thread),
        })
    }

    /// True once the thread has finished.
    pub(super) fn done(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Waits for the thread; its new file and snapshot length.
    pub(super) fn join(&mut self) -> Result<(AppendLog, u64)> {
        let Some(t) = self.thread.take() else {
            return Err(Error::corrupt("counts fold already taken".to_string()));
        };
        t.join()
            .map_err(|_| Error::corrupt("the counts fold thread panicked".to_string()))?
    }

    /// Bytes of the old file the fold covers.
    pub(super) fn covered(&self) -> u64 {
        self.covered
    }
}

impl Drop for Fold {
    /// A fold never swapped in is waited for and its temporary removed.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// While set, background folds wait after writing their file, before they
/// end (tests: a fold still running when its handle is dropped).
#[cfg(feature = "test-hooks")]
static HOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes background counts folds wait before they end, or lets them go (tests).
#[cfg(feature = "test-hooks")]
pub fn hold_counts_folds(hold: bool) {
    HOLD.store(hold, std::sync::atomic::Ordering::SeqCst);
}

/// The thread's work: parse `covered` bytes, write one snapshot to `to`.
fn write_folded(file: &File, seed: u64, covered: u64, to: PathBuf) -> Result<(AppendLog, u64)> {
    let len = usize::try_from(covered)
        .map_err(|_| Error::corrupt(format!("counts file of {covered} bytes")))?;
    let mut data = vec![0u8; len];
    file.read_exact_at(&mut data, 0)
        .map_err(|e| Error::io("reading the counts file to fold it".to_string(), e))?;
    let counts = match parse(&data, seed) {
        Some(p) if p.end == len => p.counts,
        _ => {
            return Err(Error::corrupt(
                "the counts file changed under its fold".to_string(),
            ))
        }
    };
    drop(data);
    let mut log = AppendLog::create(to)?;
    log.append(&snapshot_file(seed, &counts)?)?;
    let snapshot = log.len() - HEADER as u64;
    #[cfg(feature = "test-hooks")]
    while HOLD.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok((log, snapshot))
}

impl CountsFile {
    /// Swaps in a finished background fold (when `wait`, waits for one in
    /// progress): the records appended since it started are copied after
    /// its snapshot, and the file renamed over `STORE.counts`. A fold that
    /// failed is dropped, leaving the old file (the next merge may start
    /// another).
    pub(super) fn finish_fold(&mut self, store: &Path, wait: bool) -> Result<()> {
        let Some(mut fold) = self.fold.take_if(|f| wait || f.done()) else {
            return Ok(());
        };
        let swapped = fold.join().and_then(|(mut new, snapshot)| {
            let tail = self.log.read_from(fold.covered())?;
            new.append(&tail)?;
            new.rename(super::log::counts_path(store))?;
            Ok((new, snapshot))
        });
        match swapped {
            Ok((new, snapshot)) => {
                self.log = new;
                self.snapshot_len = snapshot;
            }
            Err(_) => {
                let _ = std::fs::remove_file(&fold.tmp);
                // Not again at every merge (a full disk would re-read the
                // whole file each time): after another snapshot's worth.
                self.fold_retry_at = self.log.len() + self.snapshot_len;
            }
        }
        Ok(())
    }

    /// Starts folding the file on another thread; false (nothing started)
    /// if no thread could be made, and the caller folds in place.
    pub(super) fn start_fold(&mut self, store: &Path) -> bool {
        let Ok(file) = self.log.handle() else {
            return false;
        };
        self.fold = Fold::start(store, self.seed, file, self.log.len());
        self.fold.is_some()
    }

    /// True while a background fold is running or waiting to be swapped in.
    #[cfg(test)]
    pub fn folding(&self) -> bool {
        self.fold.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::increment::{Increment, IncrementId};
    use crate::counts::log::counts_path;
    use crate::counts::model::Counts;
    use std::collections::HashMap;

    /// Merges `keys` subjects (`name`-0 … under "isa") as increment `seq`.
    fn merge(c: &mut Counts, f: &mut CountsFile, seq: u64, name: &str, keys: u64) {
        let deltas = (0..keys)
            .map(|k| ("isa".to_string(), format!("{name}-{k}"), 1 + (k % 3) as i64))
            .collect();
        let id = IncrementId { writer: 9, seq };
        assert!(c.submit(Increment { id, deltas }));
        c.merge_queue(f, 1).expect("merge");
    }

    fn reload(store: &Path) -> Counts {
        CountsFile::load(store, 5, true)
            .expect("load")
            .expect("present")
            .0
    }

    /// Merges made while a fold runs are in the file it swaps in, and the
    /// file shrinks to one snapshot plus those merges.
    #[test]
    fn a_background_fold_keeps_the_merges_appended_meanwhile() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut c = Counts::from_counts(HashMap::new());
        let mut f = CountsFile::create(&store, 5, &c).expect("create");
        for seq in 0..6 {
            merge(&mut c, &mut f, seq, "a", 500);
        }
        let before = f.log.len();
        assert!(f.start_fold(&store));
        assert!(f.folding());
        merge(&mut c, &mut f, 6, "b", 40);
        merge(&mut c, &mut f, 7, "a", 10);
        f.finish_fold(&store, true).expect("finish");
        assert!(!f.folding());
        assert!(!fold_path(&store).exists(), "the temporary was renamed");
        assert!(
            f.log.len() < before,
            "{} bytes, {before} before",
            f.log.len()
        );
        // The handle appends to the new file.
        merge(&mut c, &mut f, 8, "c", 5);
        let back = reload(&store);
        assert_eq!(back.version, c.version);
        assert_eq!(back.all(), c.all());
        assert_eq!(back.get("isa", "a-0"), 6 + 1);
        assert_eq!(back.get("isa", "c-4"), 2);
        let dup = Increment {
            id: IncrementId { writer: 9, seq: 3 },
            deltas: vec![("isa".into(), "a-0".into(), 1)],
        };
        let mut back = back;
        assert!(!back.submit(dup), "merged ids survive the fold");
    }

    /// A fold dropped before it is swapped in (a close, a rebuild) leaves the
    /// old file whole and no temporary.
    #[test]
    fn a_dropped_fold_leaves_the_old_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut c = Counts::from_counts(HashMap::new());
        let mut f = CountsFile::create(&store, 5, &c).expect("create");
        for seq in 0..3 {
            merge(&mut c, &mut f, seq, "a", 100);
        }
        let len = std::fs::metadata(counts_path(&store)).expect("stat").len();
        assert!(f.start_fold(&store));
        merge(&mut c, &mut f, 3, "b", 10);
        drop(f);
        assert!(!fold_path(&store).exists());
        assert!(std::fs::metadata(counts_path(&store)).expect("stat").len() > len);
        assert_eq!(reload(&store).all(), c.all());
    }

    /// A merge that finds the log grown past twice a large snapshot folds
    /// it on another thread; a later merge swaps the result in.
    #[test]
    fn a_large_file_is_folded_off_the_merge() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("s.tags");
        let mut c = Counts::from_counts(HashMap::new());
        let mut f = CountsFile::create(&store, 5, &c).expect("create");
        let mut seq = 0;
        // A snapshot past BACKGROUND_FOLD_MIN: folded in place the first time.
        while f.snapshot_len < BACKGROUND_FOLD_MIN {
            merge(&mut c, &mut f, seq, &format!("k{seq}"), 40_000);
            seq += 1;
            f.fold_if_grown(&store, &c).expect("fold");
            assert!(!f.folding(), "small snapshots fold in place");
        }
        for _ in 0..40 {
            if f.folding() {
                break;
            }
            merge(&mut c, &mut f, seq, &format!("k{}", seq % 4), 40_000);
            seq += 1;
            f.fold_if_grown(&store, &c).expect("fold");
        }
        assert!(f.folding(), "a large snapshot folds on another thread");
        let grown = f.log.len();
        merge(&mut c, &mut f, seq, "late", 3);
        f.finish_fold(&store, true).expect("finish");
        assert!(f.log.len() < grown);
        assert_eq!(reload(&store).all(), c.all());
    }
}
