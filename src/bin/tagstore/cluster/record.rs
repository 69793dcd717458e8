//! The reshard record: what `cluster reshard` last copied of each moved key,
//! so the next run applies to the new node only what changed on the old
//! node since (adds and deletes), and `--remove` knows it has started.
//!
//! A text file, written whole to a temporary beside it, synced, renamed:
//! ```text
//! tagstore reshard record 1
//! old <md5 of OLD's placement>
//! new <md5 of NEW's placement>
//! state copying|removing
//! <key>\t<member>        (TSV-escaped, one line per copied member)
//! ```

use super::config::{Distribution, Pool};
use super::hash::md5;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use tagstore::tsv;

const HEADER: &str = "tagstore reshard record 1";

/// Where a reshard stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Copies made; `--remove` not started.
    Copying,
    /// `--remove` started: the old nodes may have lost members, so a copy
    /// would read those losses as deletes.
    Removing,
}

/// What the last copy put on the new nodes, per moved key.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub old: String,
    pub new: String,
    pub state: State,
    pub copied: BTreeMap<String, BTreeSet<String>>,
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
    md5(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Record {
    /// An empty record for this pair of pools.
    pub fn new(old: &Pool, new: &Pool) -> Record {
        Record {
            old: fingerprint(old),
            new: fingerprint(new),
            state: State::Copying,
            copied: BTreeMap::new(),
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
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
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
        let mut copied: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (n, line) in lines.enumerate() {
            let at = |why: String| bad(&format!("line {}: {why}", n + 5));
            let (k, m) = line
                .split_once('\t')
                .ok_or_else(|| at("no tab between key and member".into()))?;
            let k = tsv::unescape(k).map_err(at)?;
            let m = tsv::unescape(m).map_err(at)?;
            copied.entry(k).or_default().insert(m);
        }
        Ok(Some(Record {
            old,
            new,
            state,
            copied,
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
        for (k, members) in &self.copied {
            let k = tsv::escape(k);
            for m in members {
                text.push_str(&k);
                text.push('\t');
                text.push_str(&tsv::escaped(m));
                text.push('\n');
            }
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let err = |e: std::io::Error| format!("writing the reshard record {}: {e}", path.display());
        let mut f = fs::File::create(&tmp).map_err(err)?;
        f.write_all(text.as_bytes()).map_err(err)?;
        f.sync_all().map_err(err)?;
        drop(f);
        fs::rename(&tmp, path).map_err(err)?;
        sync_parent(path);
        Ok(())
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
        ] {
            r.copied.entry(k.into()).or_default().insert(m.into());
        }
        r.copied
            .entry("o:1:a:b".into())
            .or_default()
            .insert("d".into());
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
        for text in [
            "hello\n",
            "tagstore reshard record 1\nold a\n",
            "tagstore reshard record 1\nold a\nnew b\nstate done\n",
            "tagstore reshard record 1\nold a\nnew b\nstate copying\nno tab\n",
        ] {
            fs::write(&path, text).unwrap();
            let e = Record::load(&path).unwrap_err();
            assert!(e.contains("is no reshard record"), "{e}");
        }
    }
}
