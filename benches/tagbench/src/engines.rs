//! The engines under test behind one trait: tagstore, SQLite (rusqlite,
//! bundled) and redb. Each keeps its files in its own directory.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use tagstore::{CreateOptions, Store, Tag};

/// Tags per write transaction of the peers' bulk load.
pub const LOAD_TXN: usize = 10_000;

/// One storage engine holding a double index of tags.
pub trait Engine {
    fn name(&self) -> &'static str;
    /// Inserts every tag (all distinct); durability as cheap as the engine allows.
    fn load(&mut self, tags: &[Tag]) -> Result<()>;
    /// Makes everything so far durable (tagstore: msync + fsync).
    fn sync(&mut self) -> Result<()>;
    /// FIND <object, rel, *>: appends the subjects to `out`.
    fn find_subjects(&mut self, object: &str, rel: &str, out: &mut Vec<String>) -> Result<()>;
    /// FIND <*, rel, subject>: appends the objects to `out`.
    fn find_objects(&mut self, subject: &str, rel: &str, out: &mut Vec<String>) -> Result<()>;
    /// One atomic insert into both indexes; false if present.
    fn insert(&mut self, t: &Tag) -> Result<bool>;
    /// One atomic delete from both indexes; false if absent.
    fn delete(&mut self, t: &Tag) -> Result<bool>;
    /// Bytes the filesystem allocated to the engine's files.
    fn allocated_bytes(&mut self) -> Result<u64>;
    /// Shuts down cleanly.
    fn close(self: Box<Self>) -> Result<()>;
}

/// Allocated bytes (st_blocks * 512) of every file in `dir`.
pub fn dir_allocated(dir: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let m = e?.metadata()?;
        if m.is_file() {
            n += m.blocks() * 512;
        }
    }
    Ok(n)
}

pub fn open(name: &str, dir: &Path, opts: &CreateOptions) -> Result<Box<dyn Engine>> {
    std::fs::create_dir_all(dir)?;
    Ok(match name {
        "tagstore" => Box::new(Tagstore::create(dir, opts)?),
        "sqlite" => Box::new(Sqlite::create(dir)?),
        "redb" => Box::new(Redb::create(dir)?),
        other => bail!("unknown engine {other:?} (known: tagstore, sqlite, redb)"),
    })
}

// ---------------------------------------------------------------- tagstore

pub struct Tagstore {
    pub store: Store,
    dir: PathBuf,
}

impl Tagstore {
    pub fn create(dir: &Path, opts: &CreateOptions) -> Result<Self> {
        let store = Store::create(dir.join("bench.tags"), opts)?;
        Ok(Tagstore {
            store,
            dir: dir.to_path_buf(),
        })
    }
}

impl Engine for Tagstore {
    fn name(&self) -> &'static str {
        "tagstore"
    }
    fn load(&mut self, tags: &[Tag]) -> Result<()> {
        let (out, r) = self.store.insert_batch(tags);
        r?;
        if out.changed != tags.len() as u64 {
            bail!("tagstore: {} of {} tags were new", out.changed, tags.len());
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(self.store.sync()?)
    }
    fn find_subjects(&mut self, object: &str, rel: &str, out: &mut Vec<String>) -> Result<()> {
        for s in self.store.find_subjects(object, rel) {
            out.push(s?);
        }
        Ok(())
    }
    fn find_objects(&mut self, subject: &str, rel: &str, out: &mut Vec<String>) -> Result<()> {
        for s in self.store.find_objects(subject, rel) {
            out.push(s?);
        }
        Ok(())
    }
    fn insert(&mut self, t: &Tag) -> Result<bool> {
        Ok(self.store.insert(t)?)
    }
    fn delete(&mut self, t: &Tag) -> Result<bool> {
        Ok(self.store.delete(t)?)
    }
    fn allocated_bytes(&mut self) -> Result<u64> {
        dir_allocated(&self.dir)
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.store.close()?)
    }
}

// ---------------------------------------------------------------- SQLite

/// Two WITHOUT ROWID tables, one per direction; WAL; synchronous=OFF for
/// the bulk rows and single operations (tagstore syncs only on close), FULL
/// for the final checkpoint that makes the load durable.
pub struct Sqlite {
    conn: rusqlite::Connection,
    dir: PathBuf,
}

pub const SQLITE_SETTINGS: &str = "WAL, synchronous=OFF (FULL for the final checkpoint), \
     cache_size=256 MiB, mmap_size=1 GiB, two WITHOUT ROWID tables (rel,object,subject) and \
     (rel,subject,object), 10,000 rows per load transaction, one transaction per INSERT/DELETE";

impl Sqlite {
    pub fn create(dir: &Path) -> Result<Self> {
        let conn = rusqlite::Connection::open(dir.join("bench.sqlite"))?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=OFF;
             PRAGMA cache_size=-262144;
             PRAGMA mmap_size=1073741824;
             CREATE TABLE by_obj(rel TEXT NOT NULL, object TEXT NOT NULL, subject TEXT NOT NULL,
                                 PRIMARY KEY(rel, object, subject)) WITHOUT ROWID;
             CREATE TABLE by_subj(rel TEXT NOT NULL, subject TEXT NOT NULL, object TEXT NOT NULL,
                                  PRIMARY KEY(rel, subject, object)) WITHOUT ROWID;",
        )?;
        Ok(Sqlite {
            conn,
            dir: dir.to_path_buf(),
        })
    }

    fn insert_rows(&self, t: &Tag) -> Result<bool> {
        let mut a = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO by_obj VALUES (?1, ?2, ?3)")?;
        let mut b = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO by_subj VALUES (?1, ?2, ?3)")?;
        let n = a.execute((&t.relationship, &t.object, &t.subject))?;
        b.execute((&t.relationship, &t.subject, &t.object))?;
        Ok(n > 0)
    }

    fn select(&self, sql: &str, rel: &str, key: &str, out: &mut Vec<String>) -> Result<()> {
        let mut st = self.conn.prepare_cached(sql)?;
        let mut rows = st.query((rel, key))?;
        while let Some(row) = rows.next()? {
            out.push(row.get(0)?);
        }
        Ok(())
    }
}

impl Engine for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }
    fn load(&mut self, tags: &[Tag]) -> Result<()> {
        for chunk in tags.chunks(LOAD_TXN) {
            let tx = self.conn.transaction()?;
            {
                let mut a =
                    tx.prepare_cached("INSERT OR IGNORE INTO by_obj VALUES (?1, ?2, ?3)")?;
                let mut b =
                    tx.prepare_cached("INSERT OR IGNORE INTO by_subj VALUES (?1, ?2, ?3)")?;
                for t in chunk {
                    a.execute((&t.relationship, &t.object, &t.subject))?;
                    b.execute((&t.relationship, &t.subject, &t.object))?;
                }
            }
            tx.commit()?;
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        self.conn.execute_batch(
            "PRAGMA synchronous=FULL; PRAGMA wal_checkpoint(TRUNCATE); PRAGMA synchronous=OFF;",
        )?;
        Ok(())
    }
    fn find_subjects(&mut self, object: &str, rel: &str, out: &mut Vec<String>) -> Result<()> {
        self.select(
            "SELECT subject FROM by_obj WHERE rel = ?1 AND object = ?2",
            rel,
            object,
            out,
        )
    }
    fn find_objects(&mut self, subject: &str, rel: &str, out: &mut Vec<String>) -> Result<()> {
        self.select(
            "SELECT object FROM by_subj WHERE rel = ?1 AND subject = ?2",
            rel,
            subject,
            out,
        )
    }
    fn insert(&mut self, t: &Tag) -> Result<bool> {
        self.conn.execute_batch("BEGIN")?;
        let r = self.insert_rows(t);
        self.conn
            .execute_batch(if r.is_ok() { "COMMIT" } else { "ROLLBACK" })?;
        r
    }
    fn delete(&mut self, t: &Tag) -> Result<bool> {
        let tx = self.conn.transaction()?;
        let n = {
            let mut a = tx.prepare_cached(
                "DELETE FROM by_obj WHERE rel = ?1 AND object = ?2 AND subject = ?3",
            )?;
            let mut b = tx.prepare_cached(
                "DELETE FROM by_subj WHERE rel = ?1 AND subject = ?2 AND object = ?3",
            )?;
            let n = a.execute((&t.relationship, &t.object, &t.subject))?;
            b.execute((&t.relationship, &t.subject, &t.object))?;
            n
        };
        tx.commit()?;
        Ok(n > 0)
    }
    fn allocated_bytes(&mut self) -> Result<u64> {
        dir_allocated(&self.dir)
    }
    fn close(self: Box<Self>) -> Result<()> {
        self.conn.close().map_err(|(_, e)| e)?;
        Ok(())
    }
}

// ---------------------------------------------------------------- redb

const BY_OBJ: redb::TableDefinition<&[u8], ()> = redb::TableDefinition::new("by_obj");
const BY_SUBJ: redb::TableDefinition<&[u8], ()> = redb::TableDefinition::new("by_subj");

pub const REDB_SETTINGS: &str = "two tables keyed by the bytes len(rel)|rel|len(key)|key|other \
     (FIND = prefix range), cache 1 GiB (default), Durability::None for load transactions of \
     10,000 tags and for single INSERT/DELETE, one Immediate commit as the final sync, one read \
     transaction per FIND";

/// Two tables keyed `len(rel) rel len(key) key other`; FIND is a prefix range.
pub struct Redb {
    db: redb::Database,
    dir: PathBuf,
    key: Vec<u8>,
}

fn redb_key(buf: &mut Vec<u8>, rel: &str, key: &str, other: &str) -> usize {
    buf.clear();
    buf.push(rel.len() as u8);
    buf.extend_from_slice(rel.as_bytes());
    buf.push(key.len() as u8);
    buf.extend_from_slice(key.as_bytes());
    let prefix = buf.len();
    buf.extend_from_slice(other.as_bytes());
    prefix
}

impl Redb {
    pub fn create(dir: &Path) -> Result<Self> {
        let db = redb::Database::create(dir.join("bench.redb"))?;
        let tx = db.begin_write()?;
        tx.open_table(BY_OBJ)?;
        tx.open_table(BY_SUBJ)?;
        tx.commit()?;
        Ok(Redb {
            db,
            dir: dir.to_path_buf(),
            key: Vec::with_capacity(256),
        })
    }

    fn range(
        &mut self,
        table: redb::TableDefinition<&[u8], ()>,
        rel: &str,
        key: &str,
        out: &mut Vec<String>,
    ) -> Result<()> {
        use redb::ReadableDatabase;
        let p = redb_key(&mut self.key, rel, key, "");
        let prefix = &self.key[..p];
        let tx = self.db.begin_read()?;
        let t = tx.open_table(table)?;
        for item in t.range(prefix..)? {
            let (k, _) = item?;
            let k = k.value();
            if !k.starts_with(prefix) {
                break;
            }
            out.push(String::from_utf8(k[p..].to_vec()).context("redb key is not UTF-8")?);
        }
        Ok(())
    }

    fn write_txn(&self) -> Result<redb::WriteTransaction> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(redb::Durability::None)?;
        Ok(tx)
    }
}

impl Engine for Redb {
    fn name(&self) -> &'static str {
        "redb"
    }
    fn load(&mut self, tags: &[Tag]) -> Result<()> {
        let mut k = std::mem::take(&mut self.key);
        for chunk in tags.chunks(LOAD_TXN) {
            let tx = self.write_txn()?;
            {
                let mut a = tx.open_table(BY_OBJ)?;
                let mut b = tx.open_table(BY_SUBJ)?;
                for t in chunk {
                    redb_key(&mut k, &t.relationship, &t.object, &t.subject);
                    a.insert(k.as_slice(), ())?;
                    redb_key(&mut k, &t.relationship, &t.subject, &t.object);
                    b.insert(k.as_slice(), ())?;
                }
            }
            tx.commit()?;
        }
        self.key = k;
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        let tx = self.db.begin_write()?;
        tx.commit()?;
        Ok(())
    }
    fn find_subjects(&mut self, object: &str, rel: &str, out: &mut Vec<String>) -> Result<()> {
        self.range(BY_OBJ, rel, object, out)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, out: &mut Vec<String>) -> Result<()> {
        self.range(BY_SUBJ, rel, subject, out)
    }
    fn insert(&mut self, t: &Tag) -> Result<bool> {
        let tx = self.write_txn()?;
        let new = {
            let mut a = tx.open_table(BY_OBJ)?;
            redb_key(&mut self.key, &t.relationship, &t.object, &t.subject);
            let new = a.insert(self.key.as_slice(), ())?.is_none();
            let mut b = tx.open_table(BY_SUBJ)?;
            redb_key(&mut self.key, &t.relationship, &t.subject, &t.object);
            b.insert(self.key.as_slice(), ())?;
            new
        };
        tx.commit()?;
        Ok(new)
    }
    fn delete(&mut self, t: &Tag) -> Result<bool> {
        let tx = self.write_txn()?;
        let had = {
            let mut a = tx.open_table(BY_OBJ)?;
            redb_key(&mut self.key, &t.relationship, &t.object, &t.subject);
            let had = a.remove(self.key.as_slice())?.is_some();
            let mut b = tx.open_table(BY_SUBJ)?;
            redb_key(&mut self.key, &t.relationship, &t.subject, &t.object);
            b.remove(self.key.as_slice())?;
            had
        };
        tx.commit()?;
        Ok(had)
    }
    fn allocated_bytes(&mut self) -> Result<u64> {
        dir_allocated(&self.dir)
    }
    fn close(self: Box<Self>) -> Result<()> {
        let tx = self.db.begin_write()?;
        tx.commit()?;
        drop(self.db);
        Ok(())
    }
}
