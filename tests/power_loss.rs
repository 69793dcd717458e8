//! Crash simulation: power loss in the journaled durability modes, process
//! crashes in every mode.
//!
//! A case creates a store with tiny buckets (1–3 primary buckets per half of
//! 1–2 blocks, 1–2-block secondary buckets, so chains link and the file grows
//! within a few dozen tags), picks a mode and runs 40–200 random INSERTs,
//! DELETEs, `insert_batch`/`delete_batch` calls, `sync()` calls,
//! `insert_with(.., Some(Immediate))` calls and clean close/reopen cycles
//! against a model. The doc-hidden sync hook records what is durable:
//!
//! * at `JournalSynced` the journal bytes (read incrementally: the journal is
//!   append-only between checkpoints) and the model state they hold;
//! * at `StoreSynced` the store file bytes.
//!
//! A *crash point* is either a hook call (`JournalSynced`, `Applied`,
//! `StoreSynced`, including the commits made by `close()`), a point between
//! two calls, or an operation cut by `fail_after_writes(Some(k))`. Rather
//! than stopping the run there, the hook takes a copy of the disk as it is at
//! that instant and the run goes on; every copy is then recovered on its own
//! in a fresh directory. For power loss the simulated disk is:
//!
//! * store file: page by page either the last `StoreSynced` copy or the live
//!   file (what the OS may have written back), its length either one's; in
//!   some images pages that differ are torn 512-byte sector by sector
//!   (old, new or garbage sectors);
//! * journal: the last `JournalSynced` copy — or empty if a checkpoint
//!   (`StoreSynced`) came after it — plus, often, a tail the cut left: random
//!   bytes, zeros, a strict prefix of the commit being written (crash points
//!   at `JournalSynced` also yield the image of the commit torn before its
//!   fsync), a copy of the last commit with a wrong CRC, a well-formed commit
//!   of another store, or one with a gap in its sequence number. The last
//!   two carry an all-zero image of a live block, so wrongly applying one
//!   loses tags.
//!
//! For a process crash the disk is the live store file and journal. In
//! `Durability::None` only process crashes are simulated (the live file at a
//! point between calls, or after an operation cut at its k-th write), plus
//! the exact store file at each `StoreSynced` (what `sync()` and
//! `insert_with(.., Some(Immediate))` promise).
//!
//! Each image must open with `Store::open` (a quarter of them first with
//! `open_read_only`, which must recover too) and then:
//!
//! * the export, the object half (every `find_subjects(o, r)`), the subject
//!   half (every `find_objects(s, r)`) and `contains()` agree tag by tag, with
//!   no duplicates, and `len()` matches: no tag is in one half only and FIND
//!   returns nothing that was not stored;
//! * the promise: every tag whose last operation was acknowledged as durable
//!   (Immediate: the call returned Ok; OnSync and None: a later `sync()` or
//!   `insert_with(.., Some(Immediate))` returned Ok) is present or absent as
//!   that operation left it;
//! * the design, stricter: in the journaled modes the store holds exactly the
//!   state of the last commit in the durable journal (nothing unsynced leaks
//!   in, nothing journaled is lost); in None mode after a process crash it
//!   holds every call that returned. Only the tags of an operation cut by
//!   fault injection may go either way (wholly);
//! * `check()` reports no fault;
//! * the store is usable: inserts into the peak chain and a delete work, a
//!   clean close and reopen keep exactly the result.
//!
//! `crash_around_a_checkpoint` drives one OnSync store past the (lowered)
//! journal checkpoint and takes crash points just before, at and after it.
//!
//! Crash points exercised are counted and printed (`--nocapture` shows
//! them). `TAGSTORE_CRASH_CASES=n` runs n cases per mode (default 120);
//! `TAGSTORE_CRASH_SEED=s` reruns only the case with seed s (printed on
//! failure). Scratch files go to /dev/shm when it exists (the simulation
//! needs no real fsync; set `TAGSTORE_CRASH_DIR` to choose another place).

mod common;

use common::crash::{mode_tests, panic_message, Rng};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use tagstore::testing::SyncPoint;
use tagstore::{journal_path, CreateOptions, Durability, Store, Tag};

const PAGE: usize = 4096;
const SECTOR: usize = 512;
/// Journal commit framing, versions 2 and 3 (see src/pager/journal.rs): a 40-byte
/// header whose bytes 32..36 hold the body length, the body, CRC and `TEND`.
const J_HEADER: usize = 40;

/// Bytes of the commit starting at `at` (from its header).
fn commit_size(j: &[u8], at: usize) -> usize {
    let body = u32::from_le_bytes(j[at + 32..at + 36].try_into().expect("4 bytes")) as usize;
    J_HEADER + body + 8
}

// ---------------------------------------------------------------- helpers

/// The environment variable `name` as a number, if set and valid.
fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Cases per mode (`TAGSTORE_CRASH_CASES`, default 120).
fn cases() -> u64 {
    env_u64("TAGSTORE_CRASH_CASES").unwrap_or(120)
}

/// A scratch directory, in /dev/shm when it exists (`TAGSTORE_CRASH_DIR` overrides).
fn scratch() -> tempfile::TempDir {
    let base = std::env::var_os("TAGSTORE_CRASH_DIR")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|p| p.is_dir()));
    let b = tempfile::Builder::new().prefix("tagstore-crash").clone();
    match base {
        Some(dir) => b.tempdir_in(dir),
        None => b.tempdir(),
    }
    .expect("scratch directory")
}

/// Locks `m`, taking over a poisoned lock.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The file at `path`, or nothing when it is missing.
fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_default()
}

/// A random tag over a small key space, with a "hub" peak subject.
fn random_tag(rng: &mut Rng) -> Tag {
    let o = rng.below(24);
    let r = rng.below(3);
    // "hub" is a peak: one subject-half bucket takes a long chain.
    let s = if rng.chance(300) {
        "hub".to_string()
    } else {
        format!("s{}", rng.below(8))
    };
    Tag::new(format!("o{o}"), format!("r{r}"), s)
}

/// The first eight tags of `tags` for a message, and how many more.
fn show(tags: &BTreeSet<Tag>) -> String {
    let v: Vec<String> = tags
        .iter()
        .take(8)
        .map(|t| format!("<{},{},{}>", t.object, t.relationship, t.subject))
        .collect();
    let more = tags.len().saturating_sub(8);
    if more > 0 {
        format!("[{} … and {more} more]", v.join(" "))
    } else {
        format!("[{}]", v.join(" "))
    }
}

// --------------------------------------------------------- observation

/// Reads the store every way there is and returns its tags; fails if the
/// ways disagree or `check()` reports a fault.
fn observe(store: &Store, extra: &BTreeSet<Tag>) -> Result<BTreeSet<Tag>, String> {
    let export: Vec<Tag> = store
        .tags()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tags() failed: {e}"))?;
    let set: BTreeSet<Tag> = export.iter().cloned().collect();
    if set.len() != export.len() {
        return Err(format!(
            "tags() exported {} tags but only {} distinct",
            export.len(),
            set.len()
        ));
    }
    if store.len() != set.len() as u64 {
        return Err(format!(
            "len() says {} but tags() exported {}",
            store.len(),
            set.len()
        ));
    }
    let all: BTreeSet<&Tag> = set.iter().chain(extra.iter()).collect();
    let object_half = read_half(store, &all, false)?;
    let subject_half = read_half(store, &all, true)?;
    if object_half != set {
        return Err(format!(
            "object half (find_subjects) and export disagree: only in the object half {}, only in the export {}",
            show(&object_half.difference(&set).cloned().collect()),
            show(&set.difference(&object_half).cloned().collect()),
        ));
    }
    if subject_half != set {
        return Err(format!(
            "torn tags: only in the object half {}, only in the subject half (find_objects) {}",
            show(&set.difference(&subject_half).cloned().collect()),
            show(&subject_half.difference(&set).cloned().collect()),
        ));
    }
    for t in all {
        let c = store
            .contains(t)
            .map_err(|e| format!("contains({t:?}) failed: {e}"))?;
        if c != set.contains(t) {
            return Err(format!(
                "contains({t:?}) = {c} disagrees with the export and FIND"
            ));
        }
    }
    let report = store.check().map_err(|e| format!("check() failed: {e}"))?;
    if !report.ok() {
        let f: Vec<&String> = report.faults.iter().take(5).collect();
        return Err(format!("check() reports faults: {f:?}"));
    }
    Ok(set)
}

/// One half of the store as FIND reads it, for the keys of the tags in
/// `all`: the object half (every `find_subjects(o, r)`) or, `by_subject`,
/// the subject half (every `find_objects(s, r)`). Fails if a FIND fails or
/// returns a value twice.
fn read_half(
    store: &Store,
    all: &BTreeSet<&Tag>,
    by_subject: bool,
) -> Result<BTreeSet<Tag>, String> {
    let (call, value) = if by_subject {
        ("find_objects", "an object")
    } else {
        ("find_subjects", "a subject")
    };
    let keys: BTreeSet<(&str, &str)> = all
        .iter()
        .map(|t| {
            let key = if by_subject { &t.subject } else { &t.object };
            (key.as_str(), t.relationship.as_str())
        })
        .collect();
    let mut half = BTreeSet::new();
    for (k, r) in keys {
        let found: Result<Vec<String>, _> = if by_subject {
            store.find_objects(k, r).collect()
        } else {
            store.find_subjects(k, r).collect()
        };
        let found = found.map_err(|e| format!("{call}({k}, {r}) failed: {e}"))?;
        let n = found.len();
        let distinct: BTreeSet<String> = found.into_iter().collect();
        if distinct.len() != n {
            return Err(format!("{call}({k}, {r}) returned {value} twice"));
        }
        half.extend(distinct.into_iter().map(|v| {
            if by_subject {
                Tag::new(v, r, k)
            } else {
                Tag::new(k, r, v)
            }
        }));
    }
    Ok(half)
}

/// `(want − seen, seen − want)`, each leaving out the tags in `skip`;
/// `None` when both are empty.
fn differences(
    want: &BTreeSet<Tag>,
    seen: &BTreeSet<Tag>,
    skip: &BTreeSet<Tag>,
) -> Option<(BTreeSet<Tag>, BTreeSet<Tag>)> {
    let only = |a: &BTreeSet<Tag>, b: &BTreeSet<Tag>| -> BTreeSet<Tag> {
        a.difference(b)
            .filter(|t| !skip.contains(*t))
            .cloned()
            .collect()
    };
    let (missing, extra) = (only(want, seen), only(seen, want));
    (!missing.is_empty() || !extra.is_empty()).then_some((missing, extra))
}

// ------------------------------------------------------------ images

/// What a recovered image must hold.
#[derive(Clone)]
struct Expect {
    /// State at the last acknowledgement of durability.
    acked: BTreeSet<Tag>,
    /// Tags changed by a call after that acknowledgement.
    dirty: BTreeSet<Tag>,
    /// The design's exact state (see the file header).
    exact: BTreeSet<Tag>,
    /// Tags of an operation cut by fault injection: either way, wholly.
    either: BTreeSet<Tag>,
}

impl Expect {
    /// Whether `seen` keeps the promise and the design's exact state.
    fn judge(&self, seen: &BTreeSet<Tag>) -> Result<(), String> {
        if let Some((lost, back)) = differences(&self.acked, seen, &self.dirty) {
            return Err(format!(
                "PROMISE BROKEN: acknowledged inserts missing {}, acknowledged deletes undone {}",
                show(&lost),
                show(&back)
            ));
        }
        if let Some((missing, extra)) = differences(&self.exact, seen, &self.either) {
            return Err(format!(
                "state differs from the durable journal/model: missing {} (unacknowledged among them: {}), unexpected {}",
                show(&missing),
                show(&missing.intersection(&self.dirty).cloned().collect()),
                show(&extra)
            ));
        }
        Ok(())
    }

    /// Every tag this expectation speaks of.
    fn all_tags(&self) -> BTreeSet<Tag> {
        let mut a = self.exact.clone();
        a.extend(self.acked.iter().cloned());
        a.extend(self.dirty.iter().cloned());
        a.extend(self.either.iter().cloned());
        a
    }
}

/// One simulated disk after a crash.
struct Image {
    label: String,
    /// A power cut (else a process crash).
    power: bool,
    store: Vec<u8>,
    journal: Option<Vec<u8>>,
    expect: Expect,
}

/// Recovers `img` in a fresh directory and checks it.
fn verify_image(img: &Image, rng: &mut Rng) -> Result<(), String> {
    let dir = scratch();
    let path = dir.path().join("crashed.tags");
    fs::write(&path, &img.store).map_err(|e| format!("writing image: {e}"))?;
    if let Some(j) = &img.journal {
        fs::write(journal_path(&path), j).map_err(|e| format!("writing journal: {e}"))?;
    }
    let extra = img.expect.all_tags();
    if rng.chance(250) {
        // Whatever the crash cut (a split or a bulk round included: seed
        // 20903605830045 of base 19 was refused with `SplitPending` until
        // 2026-11-29), a read-only open recovers in memory.
        let ro = Store::open_read_only(&path)
            .map_err(|e| format!("open_read_only did not recover: {e}"))?;
        let seen = observe(&ro, &extra).map_err(|e| format!("after open_read_only: {e}"))?;
        img.expect
            .judge(&seen)
            .map_err(|e| format!("after open_read_only: {e}"))?;
        drop(ro);
    }
    let store = Store::open(&path).map_err(|e| format!("open did not recover: {e}"))?;
    let seen = observe(&store, &extra)?;
    img.expect.judge(&seen)?;
    // Still usable: grow the peak chain, delete something, close, reopen.
    let mut want = seen.clone();
    for k in 0..3 {
        let t = Tag::new(format!("fresh{k}"), "r1", "hub");
        let added = store
            .insert(&t)
            .map_err(|e| format!("insert after recovery failed: {e}"))?;
        if !added {
            return Err(format!("insert of new {t:?} after recovery said present"));
        }
        want.insert(t);
    }
    if let Some(t) = seen.iter().next().cloned() {
        let gone = store
            .delete(&t)
            .map_err(|e| format!("delete after recovery failed: {e}"))?;
        if !gone {
            return Err(format!("delete of stored {t:?} after recovery said absent"));
        }
        want.remove(&t);
    }
    store
        .close()
        .map_err(|e| format!("close after recovery failed: {e}"))?;
    let store = Store::open(&path).map_err(|e| format!("reopen after recovery failed: {e}"))?;
    if store.recovered_on_open() {
        return Err("a clean close after recovery was not clean".into());
    }
    let again = observe(&store, &extra).map_err(|e| format!("after reopen: {e}"))?;
    if again != want {
        return Err(format!(
            "after close and reopen: missing {}, unexpected {}",
            show(&want.difference(&again).cloned().collect()),
            show(&again.difference(&want).cloned().collect())
        ));
    }
    store.close().map_err(|e| format!("final close: {e}"))?;
    Ok(())
}

/// A store file as a power cut may leave it: each page old (last fsync) or
/// new (live), sometimes torn sector by sector.
fn mix_store(rng: &mut Rng, synced: &[u8], live: &[u8]) -> Vec<u8> {
    let len = if rng.chance(500) {
        synced.len()
    } else {
        live.len()
    };
    let p_live = match rng.below(4) {
        0 => 0,
        1 => 1000,
        _ => rng.below(1001),
    };
    let tear = rng.chance(400);
    let zero = [0u8; PAGE];
    let page_of = |b: &[u8], i: usize| -> [u8; PAGE] {
        let mut p = zero;
        let lo = (i * PAGE).min(b.len());
        let hi = ((i + 1) * PAGE).min(b.len());
        p[..hi - lo].copy_from_slice(&b[lo..hi]);
        p
    };
    let mut out = Vec::with_capacity(len);
    for i in 0..len.div_ceil(PAGE) {
        let (old, new) = (page_of(synced, i), page_of(live, i));
        let mut page = if rng.below(1000) < p_live { new } else { old };
        if tear && old != new && rng.chance(400) {
            for s in 0..PAGE / SECTOR {
                let r = s * SECTOR..(s + 1) * SECTOR;
                match rng.below(9) {
                    0..=3 => page[r.clone()].copy_from_slice(&old[r]),
                    4..=7 => page[r.clone()].copy_from_slice(&new[r]),
                    _ => page[r].copy_from_slice(&rng.bytes(SECTOR)),
                }
            }
        }
        out.extend_from_slice(&page);
    }
    out.truncate(len);
    out
}

/// Start offsets of the commits of the round at the front of a journal:
/// the file is written ahead with zeros and reused after a checkpoint, so
/// they end where a header does not start or names another round (salt at
/// bytes 28..32) or a sequence number out of turn.
fn commit_starts(j: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut out = Vec::new();
    let mut round: Option<(u32, u64)> = None;
    while j.len() >= at + J_HEADER && &j[at..at + 4] == b"TJNL" {
        let seq = u64::from_le_bytes(j[at + 16..at + 24].try_into().expect("8 bytes"));
        let salt = u32::from_le_bytes(j[at + 28..at + 32].try_into().expect("4 bytes"));
        let size = commit_size(j, at);
        if j.len() < at + size || round.is_some_and(|r| r != (salt, seq)) {
            break;
        }
        out.push(at);
        round = Some((salt, seq + 1));
        at += size;
    }
    out
}

/// The bytes of the round's commits at the front of a journal file.
fn journal_commits(j: &[u8]) -> &[u8] {
    let end = commit_starts(j)
        .last()
        .map_or(0, |&at| at + commit_size(j, at));
    &j[..end]
}

/// A well-formed commit (valid CRC) of round `salt` that replaces `block` with zeros.
fn zeroing_commit(seed: u64, seq: u64, salt: u32, block: u64) -> Vec<u8> {
    let mut c = Vec::new();
    c.extend_from_slice(b"TJNL");
    c.extend_from_slice(&2u32.to_le_bytes());
    c.extend_from_slice(&seed.to_le_bytes());
    c.extend_from_slice(&seq.to_le_bytes());
    c.extend_from_slice(&1u32.to_le_bytes());
    c.extend_from_slice(&salt.to_le_bytes());
    // Body: one entry, the block's 4096 zeros as one zero run (4 bytes).
    c.extend_from_slice(&16u32.to_le_bytes());
    c.extend_from_slice(&0u32.to_le_bytes());
    c.extend_from_slice(&block.to_le_bytes());
    c.extend_from_slice(&4u32.to_le_bytes());
    c.extend_from_slice(&(PAGE as u16).to_le_bytes());
    c.extend_from_slice(&0u16.to_le_bytes());
    let crc = crc32fast::hash(&c);
    c.extend_from_slice(&crc.to_le_bytes());
    c.extend_from_slice(b"TEND");
    c
}

/// What a power cut may leave after the durable journal.
fn journal_tail(rng: &mut Rng, journal: &[u8], store_seed: u64) -> Vec<u8> {
    let starts = commit_starts(journal);
    let last = starts.last().map(|&at| {
        let seq = u64::from_le_bytes(journal[at + 16..at + 24].try_into().expect("8 bytes"));
        let block = u64::from_le_bytes(journal[at + 40..at + 48].try_into().expect("8 bytes"));
        (at, commit_size(journal, at), seq, block)
    });
    let salt = starts.first().map_or(1, |&at| {
        u32::from_le_bytes(journal[at + 28..at + 32].try_into().expect("4 bytes"))
    });
    match rng.below(10) {
        0..=3 => Vec::new(),
        4 => {
            let n = 1 + rng.below(9000) as usize;
            rng.bytes(n)
        }
        5 => vec![0u8; 1 + rng.below(9000) as usize],
        6 => match last {
            // The last commit again, numbered next, one body byte flipped.
            Some((at, size, seq, _)) => {
                let mut c = journal[at..at + size].to_vec();
                c[16..24].copy_from_slice(&(seq + 1).to_le_bytes());
                let i = J_HEADER + rng.below((size - J_HEADER - 8) as u64) as usize;
                c[i] ^= 1 << rng.below(8);
                if rng.chance(500) {
                    c.truncate(1 + rng.below(size as u64 - 1) as usize);
                }
                c
            }
            None => rng.bytes(64),
        },
        7 => {
            // Well formed, but another store's (a different seed).
            let (seq, block) = last.map_or((0, 2), |l| (l.2 + 1, l.3));
            zeroing_commit(store_seed ^ 0x5555_0000_AAAA, seq, salt, block)
        }
        8 => match last {
            // Well formed, this store's, but not the next in sequence.
            Some((_, _, seq, block)) if rng.chance(500) => {
                zeroing_commit(store_seed, seq + 2, salt, block)
            }
            // Next in sequence, but an older round's (a reused journal
            // file's stale tail): another salt.
            Some((_, _, seq, block)) => zeroing_commit(store_seed, seq + 1, salt ^ 0x0101, block),
            None => rng.bytes(100),
        },
        _ => match last {
            Some((at, size, _, _)) => {
                let cut = 1 + rng.below(size as u64 - 1) as usize;
                journal[at..at + cut].to_vec()
            }
            None => rng.bytes(10),
        },
    }
}

/// The hash seed recorded in a store file's superblock (0 if too short).
fn store_seed(store: &[u8]) -> u64 {
    store
        .get(40..48)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

// ------------------------------------------------------- shared state

/// State the sync hook and the driver share.
struct Shared {
    mode: Durability,
    path: PathBuf,
    /// Store file at the last StoreSynced.
    store_synced: Vec<u8>,
    /// Journal bytes made durable by the last JournalSynced.
    journal: Vec<u8>,
    /// A checkpoint (StoreSynced) came after the last JournalSynced: the
    /// journal may have been emptied since.
    checkpointed: bool,
    /// Every call so far, including the one in flight.
    model: BTreeSet<Tag>,
    /// The state the durable journal (or synced store) holds.
    committed: BTreeSet<Tag>,
    acked: BTreeSet<Tag>,
    dirty: BTreeSet<Tag>,
    /// Tags of a call being cut by fault injection (either way, wholly).
    cutting: BTreeSet<Tag>,
    rng: Rng,
    /// Chance, per mille, that a hook call becomes a crash point.
    capture: u64,
    /// Only capture when the journal is at least this long (checkpoint test).
    capture_min_journal: usize,
    /// Capture every hook call while positive (checkpoint test).
    capture_next: u32,
    /// Hook calls to capture after each checkpoint (checkpoint test).
    follow_checkpoint: u32,
    images: Vec<Image>,
    label: String,
    hook_calls: u64,
    store_syncs: u64,
}

impl Shared {
    fn expect(&self, exact: BTreeSet<Tag>) -> Expect {
        Expect {
            acked: self.acked.clone(),
            dirty: self.dirty.clone(),
            exact,
            either: self.cutting.clone(),
        }
    }

    /// Brings `journal` up to the file's current (durable) contents.
    fn refresh_journal(&mut self) {
        if self.checkpointed {
            self.journal.clear();
        }
        // The journal file is written ahead and reused after a checkpoint:
        // what is durable is the round's commits at its front.
        let Ok(all) = fs::read(journal_path(&self.path)) else {
            return;
        };
        self.journal = journal_commits(&all).to_vec();
    }

    fn power_cut(&mut self, label: &str, live: &[u8], journal: Vec<u8>, exact: BTreeSet<Tag>) {
        let store = mix_store(&mut self.rng, &self.store_synced, live);
        let mut journal = journal;
        if !journal.is_empty() && self.checkpointed && self.rng.chance(500) {
            journal.clear();
        }
        let tail = journal_tail(&mut self.rng, &journal, store_seed(live));
        journal.extend_from_slice(&tail);
        let journal = (!journal.is_empty() || self.rng.chance(500)).then_some(journal);
        let expect = self.expect(exact);
        self.images.push(Image {
            label: format!("{} at {label} (power cut)", self.label),
            power: true,
            store,
            journal,
            expect,
        });
    }

    /// Starts call `op` labelled `label`: the model moves on and its tags
    /// are dirty; returns the model before it.
    fn begin(&mut self, op: &Op, label: &str) -> BTreeSet<Tag> {
        self.label = label.to_string();
        let before = self.model.clone();
        self.model = op.apply(&before);
        self.dirty.extend(op.tags());
        before
    }

    /// After the store at `path` was recovered or closed cleanly holding
    /// `state`: all of it is durable, the journal empty.
    fn settle(&mut self, state: BTreeSet<Tag>) {
        self.model = state.clone();
        self.committed = state.clone();
        self.acked = state;
        self.dirty.clear();
        self.journal.clear();
        self.checkpointed = false;
        self.store_synced = read(&self.path);
    }

    fn wants_capture(&mut self) -> bool {
        if self.capture_next > 0 {
            self.capture_next -= 1;
            return true;
        }
        self.journal.len() >= self.capture_min_journal && self.rng.chance(self.capture)
    }

    fn on_sync_point(&mut self, p: SyncPoint) {
        self.hook_calls += 1;
        let n = self.hook_calls;
        match p {
            SyncPoint::JournalSynced => {
                let old_len = if self.checkpointed {
                    0
                } else {
                    self.journal.len()
                };
                self.refresh_journal();
                self.checkpointed = false;
                if self.wants_capture() {
                    let live = read(&self.path);
                    // Cut while the commit was being written: a strict
                    // prefix of it reached the disk; the store file has
                    // nothing of it.
                    let commit = &self.journal[old_len..];
                    let mut torn = self.journal[..old_len].to_vec();
                    let cut = self.rng.below(commit.len() as u64) as usize;
                    torn.extend_from_slice(&commit[..cut]);
                    if self.rng.chance(300) {
                        let n = 1 + self.rng.below(5000) as usize;
                        let mut tail = self.rng.bytes(n);
                        // Garbage, not the rest of the commit: with seed
                        // 23094039150642 of base 21 its first byte was the
                        // commit's missing last one, the commit whole, and
                        // rightly replayed (the image was judged as torn).
                        if tail[0] == commit[cut] {
                            tail[0] ^= 0xFF;
                        }
                        torn.extend_from_slice(&tail);
                    }
                    let expect = self.expect(self.committed.clone());
                    self.images.push(Image {
                        label: format!(
                            "{} at hook call {n} (JournalSynced), commit torn after {cut} of {} bytes (power cut)",
                            self.label,
                            commit.len()
                        ),
                        power: true,
                        store: mix_store(&mut self.rng, &self.store_synced, &live),
                        journal: Some(torn),
                        expect,
                    });
                    // Cut just after the fsync: the commit is durable.
                    let (j, m) = (self.journal.clone(), self.model.clone());
                    self.power_cut(&format!("hook call {n} (JournalSynced)"), &live, j, m);
                }
                self.committed = self.model.clone();
            }
            // The strings file: these tests store no long tag.
            SyncPoint::StringsSynced => {}
            SyncPoint::Applied => {
                if self.wants_capture() {
                    let live = read(&self.path);
                    let (j, c) = (self.journal.clone(), self.committed.clone());
                    self.power_cut(&format!("hook call {n} (Applied)"), &live, j, c);
                }
            }
            SyncPoint::StoreSynced => {
                self.store_syncs += 1;
                self.store_synced = read(&self.path);
                if self.mode == Durability::None {
                    // Everything written so far is on disk.
                    self.committed = self.model.clone();
                    if self.wants_capture() {
                        let expect = self.expect(self.model.clone());
                        self.images.push(Image {
                            label: format!(
                                "{} at hook call {n} (StoreSynced, None mode; power cut)",
                                self.label
                            ),
                            power: true,
                            store: self.store_synced.clone(),
                            journal: None,
                            expect,
                        });
                    }
                    return;
                }
                self.checkpointed = true;
                if self.follow_checkpoint > 0 {
                    self.capture_next = self.follow_checkpoint + 1;
                }
                if self.wants_capture() {
                    let live = self.store_synced.clone();
                    let (j, c) = (self.journal.clone(), self.committed.clone());
                    self.power_cut(&format!("hook call {n} (StoreSynced)"), &live, j, c);
                }
            }
        }
    }
}

/// Installs the sync hook that feeds `sh` on `store`.
fn install_hook(store: &Store, sh: &Arc<Mutex<Shared>>) {
    let sh = Arc::clone(sh);
    store.set_sync_hook(Some(Box::new(move |p: SyncPoint| {
        lock(&sh).on_sync_point(p)
    })));
}

// ------------------------------------------------------------- driver

#[derive(Default)]
struct Tally {
    images: u64,
    power_cuts: u64,
    process_crashes: u64,
    cut_operations: u64,
    hook_calls: u64,
    store_syncs: u64,
}

/// One call the driver makes.
enum Op {
    Insert(Tag),
    Delete(Tag),
    InsertBatch(Vec<Tag>),
    DeleteBatch(Vec<Tag>),
    InsertImmediate(Tag),
    DeleteImmediate(Tag),
    Sync,
}

impl Op {
    fn tags(&self) -> Vec<Tag> {
        match self {
            Op::Insert(t) | Op::Delete(t) | Op::InsertImmediate(t) | Op::DeleteImmediate(t) => {
                vec![t.clone()]
            }
            Op::InsertBatch(v) | Op::DeleteBatch(v) => v.clone(),
            Op::Sync => Vec::new(),
        }
    }

    /// The model after this call.
    fn apply(&self, model: &BTreeSet<Tag>) -> BTreeSet<Tag> {
        let mut m = model.clone();
        match self {
            Op::Insert(t) | Op::InsertImmediate(t) => {
                m.insert(t.clone());
            }
            Op::Delete(t) | Op::DeleteImmediate(t) => {
                m.remove(t);
            }
            Op::InsertBatch(v) => m.extend(v.iter().cloned()),
            Op::DeleteBatch(v) => {
                for t in v {
                    m.remove(t);
                }
            }
            Op::Sync => {}
        }
        m
    }

    /// Whether a successful call makes everything so far durable.
    fn acknowledges(&self, mode: Durability) -> bool {
        match self {
            Op::Sync => mode != Durability::Immediate,
            Op::InsertImmediate(_) | Op::DeleteImmediate(_) => true,
            _ => mode == Durability::Immediate,
        }
    }

    /// Runs the call; checks its answer against the model before it.
    fn run(&self, store: &Store, before: &BTreeSet<Tag>) -> Result<(), String> {
        let say = |e: tagstore::Error| e.to_string();
        match self {
            Op::Insert(t) | Op::InsertImmediate(t) => {
                let d = matches!(self, Op::InsertImmediate(_)).then_some(Durability::Immediate);
                let changed = store.insert_with(t, d).map_err(say)?;
                if changed == before.contains(t) {
                    return Err(format!("insert({t:?}) returned {changed}"));
                }
            }
            Op::Delete(t) | Op::DeleteImmediate(t) => {
                let d = matches!(self, Op::DeleteImmediate(_)).then_some(Durability::Immediate);
                let changed = store.delete_with(t, d).map_err(say)?;
                if changed != before.contains(t) {
                    return Err(format!("delete({t:?}) returned {changed}"));
                }
            }
            Op::InsertBatch(v) | Op::DeleteBatch(v) => {
                let insert = matches!(self, Op::InsertBatch(_));
                let (out, r) = if insert {
                    store.insert_batch(v.iter())
                } else {
                    store.delete_batch(v.iter())
                };
                r.map_err(say)?;
                let changed = v.iter().filter(|t| before.contains(*t) != insert).count();
                if out.changed != changed as u64 {
                    return Err(format!(
                        "batch changed {} tags, the model says {changed}",
                        out.changed
                    ));
                }
            }
            Op::Sync => store.sync().map_err(say)?,
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        match self {
            Op::Insert(_) => "insert",
            Op::Delete(_) => "delete",
            Op::InsertBatch(_) => "insert_batch",
            Op::DeleteBatch(_) => "delete_batch",
            Op::InsertImmediate(_) => "insert_with(Immediate)",
            Op::DeleteImmediate(_) => "delete_with(Immediate)",
            Op::Sync => "sync",
        }
    }
}

/// `n` distinct random tags.
fn distinct_tags(rng: &mut Rng, n: usize) -> Vec<Tag> {
    let mut v: Vec<Tag> = Vec::new();
    while v.len() < n {
        let t = random_tag(rng);
        if !v.contains(&t) {
            v.push(t);
        }
    }
    v
}

/// A random call for `mode`, given the tags stored (`model`).
fn pick_op(rng: &mut Rng, mode: Durability, model: &BTreeSet<Tag>) -> Op {
    let present = |rng: &mut Rng| -> Option<Tag> {
        (!model.is_empty()).then(|| {
            let i = rng.below(model.len() as u64) as usize;
            model.iter().nth(i).cloned().expect("index in range")
        })
    };
    let r = rng.below(100);
    match r {
        0..=44 => Op::Insert(random_tag(rng)),
        45..=66 => match present(rng) {
            Some(t) => Op::Delete(t),
            None => Op::Insert(random_tag(rng)),
        },
        67..=69 => Op::Delete(random_tag(rng)),
        70..=75 => {
            let n = 2 + rng.below(6) as usize;
            Op::InsertBatch(distinct_tags(rng, n))
        }
        76..=78 => {
            let mut v: BTreeSet<Tag> = (0..1 + rng.below(4)).filter_map(|_| present(rng)).collect();
            v.insert(random_tag(rng));
            Op::DeleteBatch(v.into_iter().collect())
        }
        79..=83 if mode != Durability::Immediate => Op::InsertImmediate(random_tag(rng)),
        84..=85 if mode != Durability::Immediate => match present(rng) {
            Some(t) => Op::DeleteImmediate(t),
            None => Op::Sync,
        },
        _ => {
            if mode == Durability::Immediate && rng.chance(700) {
                Op::Insert(random_tag(rng))
            } else {
                Op::Sync
            }
        }
    }
}

/// A copy of the disk as a process crash leaves it: the live files.
fn process_crash_image(sh: &Shared, label: String, exact: BTreeSet<Tag>) -> Image {
    let jp = journal_path(&sh.path);
    Image {
        label,
        power: false,
        store: read(&sh.path),
        journal: jp.exists().then(|| read(&jp)),
        expect: sh.expect(exact),
    }
}

struct Case {
    seed: u64,
    mode: Durability,
    rng: Rng,
    sh: Arc<Mutex<Shared>>,
    path: PathBuf,
    _dir: tempfile::TempDir,
    tally: Tally,
}

impl Case {
    /// A case on a store with tiny random geometry.
    fn new(seed: u64, mode: Durability) -> (Case, Store) {
        let mut rng = Rng::new(seed);
        let opts = CreateOptions {
            expected_tags: 50,
            primary_buckets_per_half: Some(1 + rng.below(3) as u32),
            blocks_per_primary: Some(1 + rng.below(2) as u32),
            blocks_per_secondary: Some(1 + rng.below(2) as u32),
            seed: Some(rng.next()),
        };
        Case::with_options(rng, seed, mode, &opts, |_| {})
    }

    /// A case on a store created with `opts`; `tune` adjusts the capture
    /// policy before the mode is set.
    fn with_options(
        mut rng: Rng,
        seed: u64,
        mode: Durability,
        opts: &CreateOptions,
        tune: impl FnOnce(&mut Shared),
    ) -> (Case, Store) {
        let dir = scratch();
        let path = dir.path().join("case.tags");
        let store = Store::create(&path, opts).expect("create");
        let capture = match mode {
            Durability::None => 60,
            _ => 120,
        };
        let sh = Arc::new(Mutex::new(Shared {
            mode,
            path: path.clone(),
            store_synced: read(&path),
            journal: Vec::new(),
            checkpointed: false,
            model: BTreeSet::new(),
            committed: BTreeSet::new(),
            acked: BTreeSet::new(),
            dirty: BTreeSet::new(),
            cutting: BTreeSet::new(),
            rng: Rng::new(rng.next()),
            capture,
            capture_min_journal: 0,
            capture_next: 0,
            follow_checkpoint: 0,
            images: Vec::new(),
            label: format!("case seed {seed} ({mode:?}), setup"),
            hook_calls: 0,
            store_syncs: 0,
        }));
        tune(&mut lock(&sh));
        let mut case = Case {
            seed,
            mode,
            rng,
            sh,
            path,
            _dir: dir,
            tally: Tally::default(),
        };
        let store = case.start(store);
        (case, store)
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        lock(&self.sh)
    }

    /// Installs the hook and the mode on a freshly opened store.
    fn start(&mut self, store: Store) -> Store {
        install_hook(&store, &self.sh);
        store.set_durability(self.mode).expect("set_durability");
        store
    }

    fn fail(&self, what: &str, e: String) -> ! {
        panic!(
            "case seed {} ({:?}): {what}: {e}\n(rerun with TAGSTORE_CRASH_SEED={})",
            self.seed, self.mode, self.seed
        );
    }

    /// Recovers and checks every pending image.
    fn drain(&mut self) {
        let images = std::mem::take(&mut self.shared().images);
        for img in images {
            self.tally.images += 1;
            if img.power {
                self.tally.power_cuts += 1;
            } else {
                self.tally.process_crashes += 1;
            }
            if let Err(e) = verify_image(&img, &mut self.rng) {
                self.fail(&img.label, e);
            }
        }
    }

    /// Runs one call, keeping the model and the acknowledgement state.
    fn step(&mut self, store: &Store, op: &Op, label: String) {
        let before = self.shared().begin(op, &label);
        if let Err(e) = op.run(store, &before) {
            self.fail(&label, e);
        }
        let mut s = self.shared();
        if op.acknowledges(self.mode) {
            s.acked = s.model.clone();
            s.dirty.clear();
        }
    }

    /// A copy of the disk between two calls.
    fn capture_between(&mut self, label: &str) {
        let mut s = self.shared();
        let label = format!("{} after {label}", s.label);
        if self.mode == Durability::None {
            let m = s.model.clone();
            let img = process_crash_image(&s, format!("{label} (process crash)"), m);
            s.images.push(img);
        } else {
            let live = read(&s.path);
            let (j, c) = (s.journal.clone(), s.committed.clone());
            s.power_cut(&label, &live, j, c);
        }
    }

    /// Cuts `op` at its k-th write, as a crash would; then takes the live
    /// files as the crashed disk and recovers the store in place.
    fn cut(&mut self, store: Store, op: &Op, label: String) -> Store {
        let k = self.rng.below(8);
        let label = format!("{label} cut at write {k}");
        let before = {
            let mut s = self.shared();
            s.cutting = op.tags().into_iter().collect();
            s.begin(op, &label)
        };
        store.fail_after_writes(Some(k));
        let r = op.run(&store, &before);
        store.abandon();
        let mut img = {
            let mut s = self.shared();
            s.cutting.clear();
            if r.is_ok() && op.acknowledges(self.mode) {
                s.acked = s.model.clone();
                s.dirty.clear();
            }
            let exact = if self.mode != Durability::None {
                // A process crash loses what is not in the journal.
                s.committed.clone()
            } else if r.is_ok() {
                s.model.clone()
            } else {
                before.clone()
            };
            process_crash_image(&s, format!("{label} (process crash)"), exact)
        };
        if r.is_err() {
            img.expect.either = op.tags().into_iter().collect();
        }
        self.tally.cut_operations += 1;
        let expect = img.expect.clone();
        self.shared().images.push(img);
        self.drain();
        // Recover the original in place and carry on from what it holds.
        let store = match Store::open(&self.path) {
            Ok(s) => s,
            Err(e) => self.fail(&format!("{label}, reopening in place"), e.to_string()),
        };
        let seen = match observe(&store, &expect.all_tags()) {
            Ok(seen) => seen,
            Err(e) => self.fail(&format!("{label}, reopened in place"), e),
        };
        if let Err(e) = expect.judge(&seen) {
            self.fail(&format!("{label}, reopened in place"), e);
        }
        self.shared().settle(seen);
        self.start(store)
    }

    /// Closes cleanly and reopens: everything so far is durable.
    fn reopen_clean(&mut self, store: Store, label: String) -> Store {
        self.shared().label = label.clone();
        if let Err(e) = store.close() {
            self.fail(&label, e.to_string());
        }
        self.drain();
        {
            let mut s = self.shared();
            let state = s.model.clone();
            s.settle(state);
        }
        let store = match Store::open(&self.path) {
            Ok(s) => s,
            Err(e) => self.fail(&format!("{label}, reopening"), e.to_string()),
        };
        if store.recovered_on_open() {
            self.fail(&label, "a clean close was not clean on reopen".into());
        }
        self.start(store)
    }

    fn tally(mut self) -> Tally {
        let s = lock(&self.sh);
        self.tally.hook_calls = s.hook_calls;
        self.tally.store_syncs = s.store_syncs;
        drop(s);
        std::mem::take(&mut self.tally)
    }
}

/// One random case; returns what it exercised.
fn run_case(seed: u64, mode: Durability) -> Tally {
    let (mut case, mut store) = Case::new(seed, mode);
    let n_ops = 40 + case.rng.below(161);
    for i in 0..n_ops {
        let model = case.shared().model.clone();
        let op = pick_op(&mut case.rng, mode, &model);
        let label = format!("case seed {seed} ({mode:?}), call {i} {}", op.name());
        let r = case.rng.below(1000);
        if r < 20 {
            store = case.cut(store, &op, label);
            continue;
        }
        if r < 40 {
            store = case.reopen_clean(
                store,
                format!("case seed {seed} ({mode:?}), close before call {i}"),
            );
        }
        case.step(&store, &op, label);
        if case.rng.chance(100) {
            case.capture_between(op.name());
        }
        case.drain();
    }
    let label = format!("case seed {seed} ({mode:?}), end");
    match case.rng.below(3) {
        0 => {
            store = case.reopen_clean(store, format!("{label}: close"));
            let want = case.shared().model.clone();
            match observe(&store, &want) {
                Ok(seen) if seen == want => {}
                Ok(seen) => case.fail(
                    &label,
                    format!(
                        "after a clean close: missing {}, unexpected {}",
                        show(&want.difference(&seen).cloned().collect()),
                        show(&seen.difference(&want).cloned().collect())
                    ),
                ),
                Err(e) => case.fail(&label, e),
            }
            drop(store);
        }
        1 => {
            case.shared().label = format!("{label}: abandon");
            store.abandon();
            let img = {
                let s = case.shared();
                let exact = if mode == Durability::None {
                    s.model.clone()
                } else {
                    s.committed.clone()
                };
                process_crash_image(&s, format!("{label}: abandon (process crash)"), exact)
            };
            case.shared().images.push(img);
        }
        _ => {
            let model = case.shared().model.clone();
            let op = pick_op(&mut case.rng, mode, &model);
            let store = case.cut(store, &op, format!("{label}: {}", op.name()));
            drop(store);
        }
    }
    case.drain();
    case.tally()
}

/// The number that marks a mode in case seeds.
fn mode_tag(mode: Durability) -> u64 {
    match mode {
        Durability::Immediate => 1,
        Durability::OnSync => 2,
        Durability::None => 3,
    }
}

/// Runs every case of `mode` (or only `TAGSTORE_CRASH_SEED`), listing the failures together.
fn run_mode(mode: Durability) {
    let tag = mode_tag(mode) << 32;
    let base = env_u64("TAGSTORE_CRASH_BASE").unwrap_or(0) << 40;
    let seeds: Vec<u64> = match env_u64("TAGSTORE_CRASH_SEED") {
        Some(s) if s & (0xFF << 32) == tag => vec![s],
        Some(_) => Vec::new(),
        None => (0..cases()).map(|i| base | tag | i).collect(),
    };
    let mut t = Tally::default();
    let n = seeds.len();
    let mut failed: Vec<String> = Vec::new();
    for seed in seeds {
        // Every case runs even when one fails, so one bug does not hide
        // the rest; the failures are listed together at the end.
        let c = match std::panic::catch_unwind(|| run_case(seed, mode)) {
            Ok(c) => c,
            Err(p) => {
                failed.push(panic_message(&*p));
                continue;
            }
        };
        t.images += c.images;
        t.power_cuts += c.power_cuts;
        t.process_crashes += c.process_crashes;
        t.cut_operations += c.cut_operations;
        t.hook_calls += c.hook_calls;
        t.store_syncs += c.store_syncs;
    }
    eprintln!(
        "power_loss {mode:?}: {n} cases ({} failed), {} crash points recovered ({} power cuts, {} process crashes of which {} cut mid-operation), {} sync-hook calls, {} store fsyncs",
        failed.len(), t.images, t.power_cuts, t.process_crashes, t.cut_operations, t.hook_calls, t.store_syncs
    );
    assert!(
        failed.is_empty(),
        "{} of {n} {mode:?} cases failed; first failure:\n{}",
        failed.len(),
        failed[0]
    );
    if n > 0 {
        assert!(t.images > n as u64, "too few crash points exercised");
    }
}

mode_tests! { run_mode;
    power_loss_immediate => Durability::Immediate,
    power_loss_on_sync => Durability::OnSync,
    process_crash_none => Durability::None,
}

/// Drives an OnSync store past the journal checkpoint (lowered): crash points
/// at the last commits before it (journal near the checkpoint), at the checkpoint's
/// store fsync (journal full or already emptied) and at the first commits
/// after it (journal restarted), then a process crash at the end.
#[test]
fn crash_around_a_checkpoint() {
    if env_u64("TAGSTORE_CRASH_SEED").is_some() {
        return;
    }
    // The store's checkpoint threshold, lowered by the test hook from the
    // 64–256 MB the store file's size gives.
    const CHECKPOINT: usize = 6 << 20;
    // Many one-block buckets, so one commit carries hundreds of KB.
    let opts = CreateOptions {
        expected_tags: 10_000,
        primary_buckets_per_half: Some(256),
        blocks_per_primary: Some(1),
        blocks_per_secondary: Some(1),
        seed: Some(0xC0FFEE),
    };
    let (mut case, store) =
        Case::with_options(Rng::new(7), 0xC0FFEE, Durability::OnSync, &opts, |s| {
            s.capture = 1000;
            s.capture_min_journal = CHECKPOINT - (3 << 20);
            s.follow_checkpoint = 4;
        });
    store.set_checkpoint_bytes(CHECKPOINT as u64);
    let setup_syncs = case.shared().store_syncs;
    let mut round = 0;
    let mut after = 0;
    while after < 2 {
        assert!(round < 200, "no checkpoint after {round} rounds");
        let tags = distinct_wide_tags(&mut case.rng, 1500);
        for op in [
            Op::InsertBatch(tags.clone()),
            Op::Sync,
            Op::DeleteBatch(tags),
            Op::Sync,
        ] {
            let label = format!("checkpoint round {round} {}", op.name());
            case.step(&store, &op, label);
            case.drain();
        }
        if case.shared().store_syncs > setup_syncs {
            after += 1;
        }
        round += 1;
    }
    // Leave unsynced changes and a non-empty journal behind, then crash.
    let tags = distinct_wide_tags(&mut case.rng, 300);
    case.step(&store, &Op::InsertBatch(tags.clone()), "last batch".into());
    case.step(&store, &Op::Sync, "last sync".into());
    case.step(
        &store,
        &Op::DeleteBatch(tags[..100].to_vec()),
        "unsynced".into(),
    );
    store.abandon();
    let img = {
        let s = case.shared();
        process_crash_image(
            &s,
            "checkpoint test: abandon (process crash)".into(),
            s.committed.clone(),
        )
    };
    case.shared().images.push(img);
    case.drain();
    let checkpoints = case.shared().store_syncs - setup_syncs;
    let t = case.tally();
    eprintln!(
        "power_loss checkpoint: {round} rounds, {checkpoints} checkpoint(s), {} crash points recovered ({} power cuts)",
        t.images, t.power_cuts
    );
    assert!(checkpoints >= 1, "the journal never reached a checkpoint");
    assert!(t.images >= 6, "too few crash points around the checkpoint");
}

/// `n` distinct random tags spread over many keys (large commits).
fn distinct_wide_tags(rng: &mut Rng, n: usize) -> Vec<Tag> {
    let mut set = BTreeSet::new();
    while set.len() < n {
        set.insert(Tag::new(
            format!("w{}", rng.below(1_000_000)),
            "r0",
            format!("v{}", rng.below(1_000_000)),
        ));
    }
    set.into_iter().collect()
}
