//! Shared test helpers for building stores and comparing them with a model.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use tagstore::{CreateOptions, Error, Half, Store, Tag};

/// splitmix64: a small deterministic generator for workload data.
pub struct Rng(pub u64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// True with probability `permille`/1000.
    pub fn chance(&mut self, permille: u64) -> bool {
        self.below(1000) < permille
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// Roughly Zipf(1) over `0..n`: index 0 is the most frequent.
    pub fn zipf(&mut self, n: u64) -> u64 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((n as f64).powf(u) as u64).saturating_sub(1).min(n - 1)
    }

    /// Shuffles `v` in place.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// The answer to a FIND of `name` under `rel` in `half`, sorted.
pub fn sorted_find(store: &Store, half: Half, name: &str, rel: &str) -> Vec<String> {
    let found = match half {
        Half::Object => store.find_subjects(name, rel),
        Half::Subject => store.find_objects(name, rel),
    };
    let mut v: Vec<String> = found
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("FIND of {name:?} under {rel:?} in the {half:?} half: {e}"));
    v.sort();
    v
}

/// The objects carrying `subject` under `rel`, sorted.
pub fn sorted_objects(store: &Store, subject: &str, rel: &str) -> Vec<String> {
    sorted_find(store, Half::Subject, subject, rel)
}

/// The subjects of `object` under `rel`, sorted.
pub fn sorted_subjects(store: &Store, object: &str, rel: &str) -> Vec<String> {
    sorted_find(store, Half::Object, object, rel)
}

/// Asserts FIND in both directions, for every key of `want`, returns
/// exactly `want`'s tags under that key.
pub fn assert_finds(store: &Store, want: &BTreeSet<Tag>, when: &str) {
    let mut subjects_of: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    let mut objects_of: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for t in want {
        subjects_of
            .entry((&t.object, &t.relationship))
            .or_default()
            .push(t.subject.clone());
        objects_of
            .entry((&t.subject, &t.relationship))
            .or_default()
            .push(t.object.clone());
    }
    for ((o, r), mut w) in subjects_of {
        w.sort();
        assert_eq!(
            sorted_subjects(store, o, r),
            w,
            "{when}: FIND <{o}, {r}, *>"
        );
    }
    for ((s, r), mut w) in objects_of {
        w.sort();
        assert_eq!(sorted_objects(store, s, r), w, "{when}: FIND <*, {r}, {s}>");
    }
}

/// Asserts `check()` runs and finds no fault.
pub fn assert_check_ok(store: &Store, what: &str) {
    let r = store
        .check()
        .unwrap_or_else(|e| panic!("{what}: check(): {e}"));
    assert!(r.ok(), "{what}: check() faults: {:?}", r.faults);
}

/// Asserts `r` failed because another handle holds the store at `path`.
pub fn expect_locked<T>(r: tagstore::Result<T>, path: &Path, what: &str) {
    match r {
        Err(Error::Locked(p)) => assert_eq!(p, path, "{what}: Locked names the path"),
        Err(e) => panic!("{what}: expected Error::Locked, got {e:?}"),
        Ok(_) => panic!("{what}: succeeded although the store is held"),
    }
}

/// True if /proc/locks shows process `pid` holding a write (flock) lock on
/// `path`. Probing with an open of our own would take a lock and could make
/// the other process's open fail, so the kernel's lock table is read instead.
pub fn holds_write_lock(pid: u32, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(path).expect("stat").ino().to_string();
    let locks = std::fs::read_to_string("/proc/locks").expect("read /proc/locks");
    locks.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 4242 fd:01:123456 0 EOF"
        f.len() >= 6
            && f[1] == "FLOCK"
            && f[3] == "WRITE"
            && f[4] == pid.to_string()
            && f[5].rsplit(':').next() == Some(ino.as_str())
    })
}

/// Waits until the store at `path` is marked open (its superblock's clean
/// flag, bit 0 of the flags at byte 36, cleared): a writer takes the lock
/// first and writes that mark after, so bytes read between the two are
/// not yet the open store's.
pub fn wait_until_marked_open(path: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let sb = std::fs::read(path).expect("read the store");
        if rd32(&sb, 36) & 1 == 0 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never marked the store open"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Little-endian u32 at byte `o` of `b`.
pub fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

/// Little-endian u64 at byte `o` of `b`.
pub fn rd64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// Serialises the tests of one test file (a test crate) that must not
/// overlap (e.g. a store held open by one test thread could be inherited,
/// still locked, by a child another thread spawns); a poisoned lock is taken over.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts `tagstore insert STORE --file -`: it opens the store exclusively
/// and holds it while it waits on its (piped) stdin.
pub fn spawn_cli_holder(path: &Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagstore"))
        .arg("insert")
        .arg(path)
        .args(["--file", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn holder")
}

/// Options for a store sized for `expected_tags` with a fixed hash `seed`.
pub fn sized(expected_tags: u64, seed: u64) -> CreateOptions {
    CreateOptions {
        expected_tags,
        seed: Some(seed),
        ..CreateOptions::default()
    }
}
