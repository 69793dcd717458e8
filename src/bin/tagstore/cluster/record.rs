//! The reshard record: what `cluster reshard` last copied of each moved key,
//! so the next run applies to the new node only what changed on the old
//! node since (adds and deletes), and `--remove` knows it has started.
//!
//! A text file, written whole to a temporary beside it, synced, renamed:
//! ```text
//! tagstore reshard record 2
//! old <md5 of OLD's placement>
//! new <md5 of NEW's placement>
//! state copying|removing
//! mark <old node's address> <instance> <next window> <keys listed>   (0 or more)
//! <key>\t<member>        (TSV-escaped, one line per copied member)
//! pending
//! <key>\t<member>        (members a copy was changing when it stopped)
//! end <member lines> <md5 of every line before this one>
//! ```
//! A file without its `end` line, or whose count or digest disagree, is
//! refused: a record cut short would read as members never copied.
//!
//! A `mark` says that the record holds that old node's moved keys as they
//! were when its TAGSTORE.CHANGES window `next - 1` closed (serve instance
//! `instance`), so a copy that gets window `next` of that instance reads
//! only the keys it names; `keys listed` is how many keys the node had at
//! its last full read. Version 1 (no marks) is still read.

use super::config::{Distribution, Pool};
use super::hash::md5;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use tagstore::tsv;

const HEADER: &str = "tagstore reshard record 2";
/// The first version, without marks: still read.
const HEADER_1: &str = "tagstore reshard record 1";

/// Where an old node's TAGSTORE.CHANGES windows stood after its last copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The serve instance (16 hex digits; new at each start).
    pub instance: String,
    /// The window whose keys the next copy needs.
    pub next: u64,
    /// Keys the node had at its last full read.
    pub listed: usize,
}

/// Where a reshard stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Copies made; `--remove` not started.
    Copying,
    /// `--remove` started: the old nodes may have lost members, so a copy
    /// would read those losses as deletes.
    Removing,
}

/// Members per key.
pub type Sets = BTreeMap<String, BTreeSet<String>>;

/// What the last copy put on the new nodes, per moved key.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub old: String,
    pub new: String,
    pub state: State,
    /// Members on the new node for certain (copied, not deleted since).
    pub copied: Sets,
    /// Members a copy was adding or deleting on the new node when it
    /// stopped: their state there is unknown until the next copy sets it.
    pub pending: Sets,
    /// Per old node's address: its change window after its last copy.
    pub marks: BTreeMap<String, Mark>,
}

/// The default place of the record: NEW_CONFIG's path plus `.reshard`.
pub fn default_path(new_config: &Path) -> PathBuf {
    let mut p = new_config.as_os_str().to_owned();
    p.push(".reshard");
    PathBuf::from(p)
}

/// A digest of everything that places keys in `pool`.
pub fn fingerprint(pool: &Pool) -> String {
    let mut text = format!(
        "{}\n{}\n",
        pool.hash.name(),
        match pool.distribution {
            Distribution::Ketama => "ketama",
            Distribution::Modula => "modula",
        }
    );
    for s in &pool.servers {
        let name = s.name.as_deref().unwrap_or("");
        text.push_str(&format!("{}:{}:{} {name}\n", s.host, s.port, s.weight));
    }
    hex(&md5(text.as_bytes()))
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Holds the directory of a record locked (exclusive `flock`) while a
/// reshard runs, so two runs never work on one record at once.
pub struct Lock(#[allow(dead_code)] fs::File);

impl Lock {
    /// Locks the directory of `path`, or says that another run holds it.
    pub fn take(path: &Path) -> Result<Lock, String> {
        use std::os::fd::AsRawFd;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let f = fs::File::open(dir)
            .map_err(|e| format!("opening {} to lock the reshard record: {e}", dir.display()))?;
        // SAFETY: plain syscall on a descriptor we own.
        let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(format!(
                    "locking {} for the reshard record: {e}",
                    dir.display()
                ));
            }
            return Err(format!(
                "another `tagstore cluster reshard` is running with a record in {}; wait for it \
                 to finish (two runs at once could undo each other's work)",
                dir.display()
            ));
        }
        Ok(Lock(f))
    }
}

impl Record {
    /// An empty record for this pair of pools.
    pub fn new(old: &Pool, new: &Pool) -> Record {
        Record {
            old: fingerprint(old),
            new: fingerprint(new),
            state: State::Copying,
            copied: BTreeMap::new(),
            pending: BTreeMap::new(),
            marks: BTreeMap::new(),
        }
    }

    /// Reads the record at `path`; `None` when there is none.
    pub fn load(path: &Path) -> Result<Option<Record>, String> {
        let text = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(format!(
                    "reading the reshard record {}: {e}",
                    path.display()
                ))
            }
        };
        let bad = |why: &str| format!("{} is no reshard record: {why}", path.display());
        let text = String::from_utf8(text).map_err(|_| bad("not UTF-8"))?;
        // The end line: the member lines' count and the digest of the rest.
        let body_end = text.trim_end_matches('\n').rfind('\n').map_or(0, |i| i + 1);
        let (body, end) = text.split_at(body_end);
        let mut end = end.trim_end_matches('\n').split(' ');
        let (Some("end"), Some(count), Some(digest), None) =
            (end.next(), end.next(), end.next(), end.next())
        else {
            return Err(bad(
                "its last line is not its `end` line (cut short, or written to after it)",
            ));
        };
        if !text.ends_with('\n') || digest != hex(&md5(body.as_bytes())) {
            return Err(bad("its digest does not match its lines"));
        }
        let mut lines = body.lines().peekable();
        let version = lines.next();
        if version != Some(HEADER) && version != Some(HEADER_1) {
            return Err(bad(&format!("its first line is not `{HEADER}`")));
        }
        let mut field = |name: &str| {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .map(str::to_owned)
                .ok_or_else(|| bad(&format!("no `{name}` line")))
        };
        let old = field("old")?;
        let new = field("new")?;
        let state = match field("state")?.as_str() {
            "copying" => State::Copying,
            "removing" => State::Removing,
            other => return Err(bad(&format!("unknown state `{other}`"))),
        };
        let mut marks = BTreeMap::new();
        // Lines before the members (for the line numbers of errors).
        let mut header_lines = 5;
        while let Some(m) = lines.peek().and_then(|l| l.strip_prefix("mark ")) {
            let bad_mark = || bad(&format!("bad mark line `mark {m}`"));
            let [addr, instance, next, listed] = m.split(' ').collect::<Vec<_>>()[..] else {
                return Err(bad_mark());
            };
            let (Ok(next), Ok(listed)) = (next.parse(), listed.parse()) else {
                return Err(bad_mark());
            };
            let instance = instance.to_owned();
            marks.insert(
                addr.to_owned(),
                Mark {
                    instance,
                    next,
                    listed,
                },
            );
            lines.next();
            header_lines += 1;
        }
        let (mut copied, mut pending) = (Sets::new(), Sets::new());
        let mut into_pending = false;
        let mut members = 0u64;
        for (n, line) in lines.enumerate() {
            if line == "pending" && !into_pending {
                into_pending = true;
                continue;
            }
            let at = |why: String| bad(&format!("line {}: {why}", n + header_lines));
            let (k, m) = line
                .split_once('\t')
                .ok_or_else(|| at("no tab between key and member".into()))?;
            let k = tsv::unescape(k).map_err(at)?;
            let m = tsv::unescape(m).map_err(at)?;
            let sets = if into_pending {
                &mut pending
            } else {
                &mut copied
            };
            sets.entry(k).or_default().insert(m);
            members += 1;
        }
        if count != members.to_string() {
            return Err(bad("its member count does not match its lines"));
        }
        Ok(Some(Record {
            old,
            new,
            state,
            copied,
            pending,
            marks,
        }))
    }

    /// Writes the record to `path`, replacing it whole.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let state = match self.state {
            State::Copying => "copying",
            State::Removing => "removing",
        };
        let mut text = format!(
            "{HEADER}\nold {}\nnew {}\nstate {state}\n",
            self.old, self.new
        );
        for (addr, m) in &self.marks {
            text.push_str(&format!(
                "mark {addr} {} {} {}\n",
                m.instance, m.next, m.listed
            ));
        }
        let mut count = 0u64;
        for (i, sets) in [&self.copied, &self.pending].into_iter().enumerate() {
            if i == 1 {
                text.push_str("pending\n");
            }
            for (k, members) in sets {
                let k = tsv::escape(k);
                for m in members {
                    text.push_str(&k);
                    text.push('\t');
                    text.push_str(&tsv::escaped(m));
                    text.push('\n');
                    count += 1;
                }
            }
        }
        let digest = hex(&md5(text.as_bytes()));
        text.push_str(&format!("end {count} {digest}\n"));
        let tmp = tmp_path(path);
        let err = |e| tmp_error(path, e);
        let mut f = fs::File::create(&tmp).map_err(err)?;
        f.write_all(text.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        drop(f);
        fs::rename(&tmp, path).map_err(err)?;
        sync_parent(path);
        Ok(())
    }

    /// Fails as [`Record::save`] would if `path`'s temporary cannot be
    /// created (no such directory, no permission), writing nothing else.
    pub fn check_writable(path: &Path) -> Result<(), String> {
        let tmp = tmp_path(path);
        let err = |e| tmp_error(path, e);
        fs::File::create(&tmp).map_err(err)?;
        fs::remove_file(&tmp).map_err(err)
    }

    /// Deletes the record at `path` (the reshard is over).
    pub fn remove(path: &Path) -> Result<(), String> {
        match fs::remove_file(path) {
            Ok(()) => {
                sync_parent(path);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!(
                "removing the reshard record {}: {e}",
                path.display()
            )),
        }
    }
}

/// Where `--remove` lists the pending members it could not settle.
pub fn unsure_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".unsure");
    PathBuf::from(p)
}

/// Appends `(state, key, member)` lines to `list`, TSV-escaped, synced;
/// a line the list holds already is not written again (a `--remove` run
/// again after a failure lists the same members).
pub fn append_unsure(list: &Path, rows: &[(&str, String, String)]) -> Result<(), String> {
    let err = |e: std::io::Error| format!("writing {}: {e}", list.display());
    let had = match fs::read(list) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("reading {}: {e}", list.display())),
    };
    let mut seen: BTreeSet<&[u8]> = had.split(|&b| b == b'\n').collect();
    let lines: Vec<String> = rows
        .iter()
        .map(|(state, k, m)| format!("{state}\t{}\t{}", tsv::escape(k), tsv::escaped(m)))
        .collect();
    let mut text = String::new();
    for line in &lines {
        if seen.insert(line.as_bytes()) {
            text.push_str(line);
            text.push('\n');
        }
    }
    if text.is_empty() {
        return Ok(());
    }
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(list)
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)
}

/// A failure to write the record `path` by way of its temporary.
fn tmp_error(path: &Path, e: std::io::Error) -> String {
    format!(
        "writing {} (for the reshard record {}): {e}",
        tmp_path(path).display(),
        path.display()
    )
}

/// Where a record is written before it is renamed over `path`.
fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Makes a rename or removal in `path`'s directory durable (best effort).
fn sync_parent(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::config::test_pool;

    /// Regression (last session's note): a `--remove` run again after a
    /// failure appended its `kept` lines to the unsure list a second time.
    #[test]
    fn the_unsure_list_holds_each_line_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let list = dir.path().join("r.unsure");
        let rows = |ms: &[&str]| -> Vec<(&str, String, String)> {
            ms.iter()
                .map(|m| ("kept", "o:1:r:k\tx".to_owned(), (*m).to_owned()))
                .collect()
        };
        append_unsure(&list, &rows(&["a", "b\nc"])).expect("first");
        append_unsure(&list, &rows(&["b\nc", "d", "d"])).expect("again");
        append_unsure(&list, &rows(&["a"])).expect("nothing new");
        let text = fs::read_to_string(&list).expect("read");
        assert_eq!(
            text,
            "kept\to:1:r:k\\tx\ta\nkept\to:1:r:k\\tx\tb\\nc\nkept\to:1:r:k\\tx\td\n"
        );
    }

    /// Adds member `m` to key `k` of `sets`.
    fn add(sets: &mut Sets, k: &str, m: &str) {
        sets.entry(k.into()).or_default().insert(m.into());
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let old = test_pool("md5", &["127.0.0.1:7001:1 a", "127.0.0.1:7002:1 b"]);
        let new = test_pool("md5", &["127.0.0.1:7001:1 a", "127.0.0.1:7003:2 c"]);
        assert_ne!(fingerprint(&old), fingerprint(&new));
        let mut r = Record::new(&old, &new);
        r.state = State::Removing;
        for (k, m) in [
            ("o:3:isa:p\t1", "x\ny"),
            ("s:3:isa:日本", ""),
            ("o:1:a:b", "c"),
            ("o:1:a:b", "d"),
        ] {
            add(&mut r.copied, k, m);
        }
        add(&mut r.pending, "o:1:a:b", "pending");
        add(&mut r.pending, "s:1:a:\\", "e");
        for (addr, next) in [("127.0.0.1:7001", 3), ("127.0.0.1:7002", 1)] {
            let instance = format!("{next:016x}");
            let listed = 10 * next as usize;
            r.marks.insert(
                addr.into(),
                Mark {
                    instance,
                    next,
                    listed,
                },
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.yml.reshard");
        r.save(&path).unwrap();
        assert_eq!(Record::load(&path).unwrap(), Some(r));
        Record::remove(&path).unwrap();
        assert_eq!(Record::load(&path).unwrap(), None);
    }

    #[test]
    fn a_foreign_or_damaged_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let sealed =
            |body: &str, count: u64| format!("{body}end {count} {}\n", hex(&md5(body.as_bytes())));
        let head = "tagstore reshard record 1\nold a\nnew b\nstate copying\n";
        for text in [
            "hello\n".to_owned(),
            sealed("hello\n", 0),
            sealed("tagstore reshard record 1\nold a\n", 0),
            sealed("tagstore reshard record 1\nold a\nnew b\nstate done\n", 0),
            sealed(
                "tagstore reshard record 3\nold a\nnew b\nstate copying\n",
                0,
            ),
            sealed(&format!("{head}mark a b c d\n"), 0),
            sealed(&format!("{head}mark a b 1\n"), 0),
            sealed(&format!("{head}no tab\n"), 1),
            // The right lines, but the count or the digest wrong.
            sealed(&format!("{head}k\tm\n"), 2),
            format!("{head}k\tm\nend 1 00\n"),
        ] {
            fs::write(&path, &text).unwrap();
            let e = Record::load(&path).unwrap_err();
            assert!(e.contains("is no reshard record"), "{text:?}: {e}");
        }
        fs::write(&path, sealed(&format!("{head}k\tm\n"), 1)).unwrap();
        assert!(Record::load(&path).unwrap().is_some());
        // Version 1, without marks, as the twenty-fourth session wrote it.
        let v2 = head.replace("record 1", "record 2");
        for text in [head.to_owned(), v2] {
            let text = format!("{text}mark h:1 ab 4 9\nk\tm\n");
            fs::write(&path, sealed(&text, 1)).unwrap();
            let r = Record::load(&path).unwrap().unwrap();
            let mark = Mark {
                instance: "ab".into(),
                next: 4,
                listed: 9,
            };
            assert_eq!(r.marks.get("h:1"), Some(&mark));
            assert_eq!(r.copied.get("k").map(BTreeSet::len), Some(1));
        }
    }

    /// A record cut short at a line boundary read as members never copied
    /// (a review's finding): every cut of a saved record is refused.
    #[test]
    fn a_record_cut_short_anywhere_is_refused() {
        let old = test_pool("md5", &["127.0.0.1:7001:1 a"]);
        let mut r = Record::new(&old, &old);
        for i in 0..50 {
            add(&mut r.copied, &format!("o:1:r:{}", i % 7), &format!("m{i}"));
        }
        add(&mut r.pending, "s:1:r:x", "y");
        let instance = "00000000000000ff".to_owned();
        r.marks.insert(
            "127.0.0.1:7001".into(),
            Mark {
                instance,
                next: 12,
                listed: 77,
            },
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        r.save(&path).unwrap();
        let full = fs::read(&path).unwrap();
        for cut in 0..full.len() {
            fs::write(&path, &full[..cut]).unwrap();
            assert!(Record::load(&path).is_err(), "cut at {cut} accepted");
        }
        fs::write(&path, &full).unwrap();
        assert_eq!(Record::load(&path).unwrap(), Some(r));
    }

    #[test]
    fn one_run_at_a_time_per_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.yml.reshard");
        let first = Lock::take(&path).unwrap();
        let e = Lock::take(&path).err().unwrap();
        assert!(
            e.contains("another `tagstore cluster reshard` is running"),
            "{e}"
        );
        drop(first);
        assert!(Lock::take(&path).is_ok());
    }
}
