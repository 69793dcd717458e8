//! The engines under test behind one trait: tagstore, SQLite (rusqlite,
//! bundled), redb, LMDB (heed) and fjall. Each keeps its files in its own
//! directory.
//!
//! FINDs hand every result to a visitor as borrowed bytes, so each engine
//! delivers the way it can without copying (redb `AccessGuard::value()`,
//! heed `&[u8]`, rusqlite `get_ref`, a fjall key slice).

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tagstore::{CreateOptions, Durability, MaintainOptions, Store, Tag};

/// Tags per write transaction of the peers' bulk load and bulk delete
/// (`--peer-txn`); by default one transaction for the whole call, the
/// natural best mode of a B-tree or an LSM for bulk work.
pub static LOAD_TXN: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Memory for tagstore's hot copies (`--hot-bytes`); `usize::MAX`: the store's default.
pub static HOT_BYTES: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Applies `--hot-bytes` to a store just made or opened.
fn hot_bytes(store: Store) -> Store {
    let b = HOT_BYTES.load(Ordering::Relaxed);
    if b != usize::MAX {
        store.set_hot_bytes(b);
    }
    store
}

/// `tags` cut into the peers' write transactions (see [`LOAD_TXN`]).
fn txns(tags: &[Tag]) -> std::slice::Chunks<'_, Tag> {
    tags.chunks(LOAD_TXN.load(Ordering::Relaxed).max(1))
}

/// The names `open` knows, in the default column order.
pub const ENGINES: [&str; 6] = [
    "tagstore",
    "tagstore-grown",
    "sqlite",
    "redb",
    "lmdb",
    "fjall",
];

/// The visitor a FIND hands each result to (the subject or object, as bytes).
pub type Visit<'a> = &'a mut dyn FnMut(&[u8]);

/// A read handle that can run FINDs on another thread.
pub trait Finder: Send {
    /// FIND <object, rel, *>: calls `f` with each subject.
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()>;
    /// FIND <*, rel, subject>: calls `f` with each object.
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()>;
}

/// Apparent and allocated sizes of an engine's files.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Files {
    /// Sum of `st_size`.
    pub bytes: u64,
    /// Sum of `st_blocks * 512`.
    pub allocated: u64,
}

/// One storage engine holding a double index of tags.
pub trait Engine {
    fn name(&self) -> &'static str;
    /// Inserts every tag (all distinct); durability as cheap as the engine
    /// allows while still surviving a process kill.
    fn load(&mut self, tags: &[Tag]) -> Result<()>;
    /// Makes everything so far durable (tagstore: msync + fsync).
    fn sync(&mut self) -> Result<()>;
    /// FIND <object, rel, *>: calls `f` with each subject.
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()>;
    /// FIND <*, rel, subject>: calls `f` with each object.
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()>;
    /// FIND whose results the caller keeps: each one appended to `out` as
    /// an owned `String`. By default the visitor FIND, each result copied
    /// (and checked as UTF-8); tagstore uses its iterator API, which hands
    /// out `String`s.
    fn find_owned(
        &mut self,
        key: &str,
        rel: &str,
        by_object: bool,
        out: &mut Vec<String>,
    ) -> Result<()> {
        let mut bad = false;
        let mut f = |b: &[u8]| match std::str::from_utf8(b) {
            Ok(s) => out.push(s.to_owned()),
            Err(_) => bad = true,
        };
        if by_object {
            self.find_subjects(key, rel, &mut f)?;
        } else {
            self.find_objects(key, rel, &mut f)?;
        }
        if bad {
            bail!("{}: a FIND result is not UTF-8", self.name());
        }
        Ok(())
    }
    /// A second read handle for FINDs on another thread.
    fn reader(&mut self) -> Result<Box<dyn Finder>>;
    /// One atomic insert into both indexes; false if present.
    fn insert(&mut self, t: &Tag) -> Result<bool>;
    /// One atomic delete from both indexes; false if absent.
    fn delete(&mut self, t: &Tag) -> Result<bool>;
    /// Deletes many tags, in `LOAD_TXN`-sized write transactions (by default
    /// one), cheap durability.
    fn delete_many(&mut self, tags: &[Tag]) -> Result<()>;
    /// Switches into (or out of) the mode of the durable rows, where a
    /// commit is fsynced before it returns. Untimed.
    fn set_durable(&mut self, on: bool) -> Result<()>;
    /// One insert into both indexes, durable (fsynced) when it returns.
    fn insert_durable(&mut self, t: &Tag) -> Result<bool>;
    /// One atomic batch into both indexes, durable when it returns.
    fn insert_batch_durable(&mut self, tags: &[Tag]) -> Result<()>;
    /// Waits for background work the last turn left behind (fjall's
    /// flushes and compactions), so it does not run during another engine's
    /// turn. Untimed.
    fn settle(&mut self) -> Result<()> {
        Ok(())
    }
    /// Sizes of every file the engine keeps.
    fn files(&mut self) -> Result<Files>;
    /// Compacts the engine's files the way its documentation suggests;
    /// returns the engine ready for more work.
    fn compact(self: Box<Self>) -> Result<Box<dyn Engine>>;
    /// Shuts down cleanly.
    fn close(self: Box<Self>) -> Result<()>;
}

/// Sizes of every file under `dir`, recursively.
pub fn dir_files(dir: &Path) -> Result<Files> {
    use std::os::unix::fs::MetadataExt;
    let mut f = Files::default();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        if m.is_dir() {
            let sub = dir_files(&e.path())?;
            f.bytes += sub.bytes;
            f.allocated += sub.allocated;
        } else if m.is_file() {
            f.bytes += m.len();
            f.allocated += m.blocks() * 512;
        }
    }
    Ok(f)
}

pub fn open(name: &str, dir: &Path, opts: &CreateOptions) -> Result<Box<dyn Engine>> {
    std::fs::create_dir_all(dir)?;
    Ok(match name {
        "tagstore" => Box::new(Tagstore::create(dir, opts)?),
        // The same engine created with no size hint: it grows by splits.
        "tagstore-grown" => Box::new(Tagstore::create(
            dir,
            &CreateOptions {
                expected_tags: 0,
                primary_buckets_per_half: None,
                ..opts.clone()
            },
        )?),
        "sqlite" => Box::new(Sqlite::create(dir)?),
        "redb" => Box::new(Redb::create(dir)?),
        "lmdb" => Box::new(Lmdb::create(dir)?),
        "fjall" => Box::new(Fjall::create(dir)?),
        other => bail!("unknown engine {other:?} (known: {})", ENGINES.join(", ")),
    })
}

/// Index key of the peers: `len(rel) rel len(key) key other`, each length
/// one byte below 128 and two above (so a short key is as before, and a
/// long one is not cut); returns the length of the prefix that FIND
/// ranges over.
fn index_key(buf: &mut Vec<u8>, rel: &str, key: &str, other: &str) -> usize {
    fn len(buf: &mut Vec<u8>, n: usize) {
        if n < 128 {
            buf.push(n as u8);
        } else {
            buf.push(0x80 | (n >> 8) as u8);
            buf.push(n as u8);
        }
    }
    buf.clear();
    len(buf, rel.len());
    buf.extend_from_slice(rel.as_bytes());
    len(buf, key.len());
    buf.extend_from_slice(key.as_bytes());
    let prefix = buf.len();
    buf.extend_from_slice(other.as_bytes());
    prefix
}

// ---------------------------------------------------------------- tagstore

pub struct Tagstore {
    pub store: Arc<Store>,
    dir: PathBuf,
    path: PathBuf,
}

pub const TAGSTORE_DURABLE: &str = "durable rows: store in Durability::OnSync, single inserts \
     insert_with(.., Some(Durability::Immediate)) (journal fsync per tag), batches insert_batch + \
     sync() (one journal fsync per batch); compaction: close, Store::maintain, reopen";

impl Tagstore {
    pub fn create(dir: &Path, opts: &CreateOptions) -> Result<Self> {
        let path = dir.join("bench.tags");
        let store = hot_bytes(Store::create(&path, opts)?);
        Ok(Tagstore {
            store: Arc::new(store),
            dir: dir.to_path_buf(),
            path,
        })
    }

    fn unwrap_store(store: Arc<Store>) -> Result<Store> {
        Arc::try_unwrap(store).map_err(|_| anyhow!("tagstore: a reader still holds the store"))
    }
}

fn tagstore_find(store: &Store, by_object: bool, key: &str, rel: &str, f: Visit<'_>) -> Result<()> {
    if by_object {
        store.for_each_subject(key, rel, |s| f(s.as_bytes()))?;
    } else {
        store.for_each_object(key, rel, |o| f(o.as_bytes()))?;
    }
    Ok(())
}

struct TagstoreReader(Arc<Store>);

impl Finder for TagstoreReader {
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        tagstore_find(&self.0, true, object, rel, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        tagstore_find(&self.0, false, subject, rel, f)
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
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        tagstore_find(&self.store, true, object, rel, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        tagstore_find(&self.store, false, subject, rel, f)
    }
    fn find_owned(
        &mut self,
        key: &str,
        rel: &str,
        by_object: bool,
        out: &mut Vec<String>,
    ) -> Result<()> {
        let found = match by_object {
            true => self.store.find_subjects(key, rel),
            false => self.store.find_objects(key, rel),
        };
        for r in found {
            out.push(r?);
        }
        Ok(())
    }
    fn reader(&mut self) -> Result<Box<dyn Finder>> {
        Ok(Box::new(TagstoreReader(self.store.clone())))
    }
    fn insert(&mut self, t: &Tag) -> Result<bool> {
        Ok(self.store.insert(t)?)
    }
    fn delete(&mut self, t: &Tag) -> Result<bool> {
        Ok(self.store.delete(t)?)
    }
    fn delete_many(&mut self, tags: &[Tag]) -> Result<()> {
        let (_, r) = self.store.delete_batch(tags);
        Ok(r?)
    }
    fn set_durable(&mut self, on: bool) -> Result<()> {
        Ok(self.store.set_durability(if on {
            Durability::OnSync
        } else {
            Durability::None
        })?)
    }
    fn insert_durable(&mut self, t: &Tag) -> Result<bool> {
        Ok(self.store.insert_with(t, Some(Durability::Immediate))?)
    }
    fn insert_batch_durable(&mut self, tags: &[Tag]) -> Result<()> {
        let (_, r) = self.store.insert_batch(tags);
        r?;
        Ok(self.store.sync()?)
    }
    fn files(&mut self) -> Result<Files> {
        dir_files(&self.dir)
    }
    fn compact(self: Box<Self>) -> Result<Box<dyn Engine>> {
        let Tagstore { store, dir, path } = *self;
        Self::unwrap_store(store)?.close()?;
        Store::maintain(&path, &MaintainOptions::default(), |_, _| {})?;
        let store = hot_bytes(Store::open(&path)?);
        Ok(Box::new(Tagstore {
            store: Arc::new(store),
            dir,
            path,
        }))
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(Self::unwrap_store(self.store)?.close()?)
    }
}

// ---------------------------------------------------------------- SQLite

/// Two WITHOUT ROWID tables, one per direction; WAL; synchronous=OFF for
/// the bulk rows and single operations (tagstore syncs only on close), FULL
/// for the final checkpoint that makes the load durable.
pub struct Sqlite {
    conn: rusqlite::Connection,
    dir: PathBuf,
    path: PathBuf,
}

pub const SQLITE_SETTINGS: &str = "WAL, synchronous=OFF (FULL for the final checkpoint and the \
     durable rows), cache_size=256 MiB, mmap_size=1 GiB, two WITHOUT ROWID tables \
     (rel,object,subject) and (rel,subject,object), one transaction per bulk load/delete call (--peer-txn), one \
     transaction per INSERT/DELETE; second reader: its own read-only connection; compaction: \
     VACUUM + wal_checkpoint(TRUNCATE)";

const SQLITE_CACHE: &str = "PRAGMA cache_size=-262144; PRAGMA mmap_size=1073741824;";
const SQL_SUBJECTS: &str = "SELECT subject FROM by_obj WHERE rel = ?1 AND object = ?2";
const SQL_OBJECTS: &str = "SELECT object FROM by_subj WHERE rel = ?1 AND subject = ?2";

impl Sqlite {
    pub fn create(dir: &Path) -> Result<Self> {
        let path = dir.join("bench.sqlite");
        let conn = rusqlite::Connection::open(&path)?;
        conn.execute_batch(SQLITE_CACHE)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=OFF;
             CREATE TABLE by_obj(rel TEXT NOT NULL, object TEXT NOT NULL, subject TEXT NOT NULL,
                                 PRIMARY KEY(rel, object, subject)) WITHOUT ROWID;
             CREATE TABLE by_subj(rel TEXT NOT NULL, subject TEXT NOT NULL, object TEXT NOT NULL,
                                  PRIMARY KEY(rel, subject, object)) WITHOUT ROWID;",
        )?;
        Ok(Sqlite {
            conn,
            dir: dir.to_path_buf(),
            path,
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

    /// One transaction inserting `tags` into both tables.
    fn insert_txn(&mut self, tags: &[Tag]) -> Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut a = tx.prepare_cached("INSERT OR IGNORE INTO by_obj VALUES (?1, ?2, ?3)")?;
            let mut b = tx.prepare_cached("INSERT OR IGNORE INTO by_subj VALUES (?1, ?2, ?3)")?;
            for t in tags {
                a.execute((&t.relationship, &t.object, &t.subject))?;
                b.execute((&t.relationship, &t.subject, &t.object))?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}

fn sqlite_select(
    conn: &rusqlite::Connection,
    sql: &str,
    rel: &str,
    key: &str,
    f: Visit<'_>,
) -> Result<()> {
    let mut st = conn.prepare_cached(sql)?;
    let mut rows = st.query((rel, key))?;
    while let Some(row) = rows.next()? {
        f(row.get_ref(0)?.as_bytes()?);
    }
    Ok(())
}

struct SqliteReader(rusqlite::Connection);

impl Finder for SqliteReader {
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        sqlite_select(&self.0, SQL_SUBJECTS, rel, object, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        sqlite_select(&self.0, SQL_OBJECTS, rel, subject, f)
    }
}

impl Engine for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }
    fn load(&mut self, tags: &[Tag]) -> Result<()> {
        for chunk in txns(tags) {
            self.insert_txn(chunk)?;
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        self.conn.execute_batch(
            "PRAGMA synchronous=FULL; PRAGMA wal_checkpoint(TRUNCATE); PRAGMA synchronous=OFF;",
        )?;
        Ok(())
    }
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        sqlite_select(&self.conn, SQL_SUBJECTS, rel, object, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        sqlite_select(&self.conn, SQL_OBJECTS, rel, subject, f)
    }
    fn reader(&mut self) -> Result<Box<dyn Finder>> {
        use rusqlite::OpenFlags;
        let conn = rusqlite::Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.execute_batch(SQLITE_CACHE)?;
        Ok(Box::new(SqliteReader(conn)))
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
    fn delete_many(&mut self, tags: &[Tag]) -> Result<()> {
        for chunk in txns(tags) {
            let tx = self.conn.transaction()?;
            {
                let mut a = tx.prepare_cached(
                    "DELETE FROM by_obj WHERE rel = ?1 AND object = ?2 AND subject = ?3",
                )?;
                let mut b = tx.prepare_cached(
                    "DELETE FROM by_subj WHERE rel = ?1 AND subject = ?2 AND object = ?3",
                )?;
                for t in chunk {
                    a.execute((&t.relationship, &t.object, &t.subject))?;
                    b.execute((&t.relationship, &t.subject, &t.object))?;
                }
            }
            tx.commit()?;
        }
        Ok(())
    }
    fn set_durable(&mut self, on: bool) -> Result<()> {
        self.conn.execute_batch(if on {
            "PRAGMA synchronous=FULL;"
        } else {
            "PRAGMA synchronous=OFF;"
        })?;
        Ok(())
    }
    fn insert_durable(&mut self, t: &Tag) -> Result<bool> {
        self.insert(t)
    }
    fn insert_batch_durable(&mut self, tags: &[Tag]) -> Result<()> {
        self.insert_txn(tags)
    }
    fn files(&mut self) -> Result<Files> {
        dir_files(&self.dir)
    }
    fn compact(self: Box<Self>) -> Result<Box<dyn Engine>> {
        self.conn
            .execute_batch("VACUUM; PRAGMA wal_checkpoint(TRUNCATE);")?;
        Ok(self)
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
     (FIND = prefix range), cache 1 GiB (default), Durability::None for load/delete transactions \
     (one per bulk call, --peer-txn) and for single INSERT/DELETE, one Immediate commit as the final sync, \
     Immediate commits in the durable rows, one read transaction per FIND; second reader: the \
     same Database shared (Sync); compaction: Database::compact";

/// Two tables keyed `len(rel) rel len(key) key other`; FIND is a prefix range.
pub struct Redb {
    db: Arc<redb::Database>,
    dir: PathBuf,
    key: Vec<u8>,
}

fn redb_range(
    db: &redb::Database,
    buf: &mut Vec<u8>,
    table: redb::TableDefinition<&[u8], ()>,
    rel: &str,
    key: &str,
    f: Visit<'_>,
) -> Result<()> {
    use redb::ReadableDatabase;
    let p = index_key(buf, rel, key, "");
    let prefix = &buf[..p];
    let tx = db.begin_read()?;
    let t = tx.open_table(table)?;
    for item in t.range(prefix..)? {
        let (k, _) = item?;
        let k = k.value();
        if !k.starts_with(prefix) {
            break;
        }
        f(&k[p..]);
    }
    Ok(())
}

struct RedbReader {
    db: Arc<redb::Database>,
    key: Vec<u8>,
}

impl Finder for RedbReader {
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        redb_range(&self.db, &mut self.key, BY_OBJ, rel, object, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        redb_range(&self.db, &mut self.key, BY_SUBJ, rel, subject, f)
    }
}

impl Redb {
    pub fn create(dir: &Path) -> Result<Self> {
        let db = redb::Database::create(dir.join("bench.redb"))?;
        let tx = db.begin_write()?;
        tx.open_table(BY_OBJ)?;
        tx.open_table(BY_SUBJ)?;
        tx.commit()?;
        Ok(Redb {
            db: Arc::new(db),
            dir: dir.to_path_buf(),
            key: Vec::with_capacity(256),
        })
    }

    fn write_txn(&self, durability: redb::Durability) -> Result<redb::WriteTransaction> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(durability)?;
        Ok(tx)
    }

    fn insert_txn(&mut self, tags: &[Tag], durability: redb::Durability) -> Result<()> {
        let tx = self.write_txn(durability)?;
        {
            let mut a = tx.open_table(BY_OBJ)?;
            let mut b = tx.open_table(BY_SUBJ)?;
            for t in tags {
                index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
                a.insert(self.key.as_slice(), ())?;
                index_key(&mut self.key, &t.relationship, &t.subject, &t.object);
                b.insert(self.key.as_slice(), ())?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn insert_one(&mut self, t: &Tag, durability: redb::Durability) -> Result<bool> {
        let tx = self.write_txn(durability)?;
        let new = {
            let mut a = tx.open_table(BY_OBJ)?;
            index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
            let new = a.insert(self.key.as_slice(), ())?.is_none();
            let mut b = tx.open_table(BY_SUBJ)?;
            index_key(&mut self.key, &t.relationship, &t.subject, &t.object);
            b.insert(self.key.as_slice(), ())?;
            new
        };
        tx.commit()?;
        Ok(new)
    }
}

impl Engine for Redb {
    fn name(&self) -> &'static str {
        "redb"
    }
    fn load(&mut self, tags: &[Tag]) -> Result<()> {
        for chunk in txns(tags) {
            self.insert_txn(chunk, redb::Durability::None)?;
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        let tx = self.db.begin_write()?;
        tx.commit()?;
        Ok(())
    }
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        redb_range(&self.db, &mut self.key, BY_OBJ, rel, object, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        redb_range(&self.db, &mut self.key, BY_SUBJ, rel, subject, f)
    }
    fn reader(&mut self) -> Result<Box<dyn Finder>> {
        Ok(Box::new(RedbReader {
            db: self.db.clone(),
            key: Vec::with_capacity(256),
        }))
    }
    fn insert(&mut self, t: &Tag) -> Result<bool> {
        self.insert_one(t, redb::Durability::None)
    }
    fn delete(&mut self, t: &Tag) -> Result<bool> {
        let tx = self.write_txn(redb::Durability::None)?;
        let had = {
            let mut a = tx.open_table(BY_OBJ)?;
            index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
            let had = a.remove(self.key.as_slice())?.is_some();
            let mut b = tx.open_table(BY_SUBJ)?;
            index_key(&mut self.key, &t.relationship, &t.subject, &t.object);
            b.remove(self.key.as_slice())?;
            had
        };
        tx.commit()?;
        Ok(had)
    }
    fn delete_many(&mut self, tags: &[Tag]) -> Result<()> {
        for chunk in txns(tags) {
            let tx = self.write_txn(redb::Durability::None)?;
            {
                let mut a = tx.open_table(BY_OBJ)?;
                let mut b = tx.open_table(BY_SUBJ)?;
                for t in chunk {
                    index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
                    a.remove(self.key.as_slice())?;
                    index_key(&mut self.key, &t.relationship, &t.subject, &t.object);
                    b.remove(self.key.as_slice())?;
                }
            }
            tx.commit()?;
        }
        Ok(())
    }
    fn set_durable(&mut self, _on: bool) -> Result<()> {
        Ok(())
    }
    fn insert_durable(&mut self, t: &Tag) -> Result<bool> {
        self.insert_one(t, redb::Durability::Immediate)
    }
    fn insert_batch_durable(&mut self, tags: &[Tag]) -> Result<()> {
        self.insert_txn(tags, redb::Durability::Immediate)
    }
    fn files(&mut self) -> Result<Files> {
        dir_files(&self.dir)
    }
    fn compact(mut self: Box<Self>) -> Result<Box<dyn Engine>> {
        Arc::get_mut(&mut self.db)
            .ok_or_else(|| anyhow!("redb: a reader still holds the database"))?
            .compact()?;
        Ok(self)
    }
    fn close(self: Box<Self>) -> Result<()> {
        let tx = self.db.begin_write()?;
        tx.commit()?;
        drop(self.db);
        Ok(())
    }
}

// ---------------------------------------------------------------- LMDB (heed)

/// Map size of the LMDB environment: room for N = 5,000,000 tags many times
/// over; the file grows only as pages are written.
pub const LMDB_MAP_SIZE: usize = 64 << 30;

pub const LMDB_SETTINGS: &str = "heed 0.23 (LMDB 0.9.x, mdb.master), two named databases \
     by_obj/by_subj keyed by the bytes len(rel)|rel|len(key)|key|other with empty values (FIND = \
     prefix_iter), map size 64 GiB (sparse), EnvFlags::NO_SYNC for load/delete transactions (one \
     per bulk call, --peer-txn) and for single INSERT/DELETE (commits reach the OS, survive a process kill), one \
     force_sync() as the final sync; NO_SYNC cleared in the durable rows (fsync per commit); one \
     read transaction per FIND; second reader: the same Env shared; compaction: \
     copy_to_path(CompactionOption::Enabled), fsync, rename over data.mdb, reopen";

type LmdbDb = heed::Database<'static, heed::types::Bytes, heed::types::Unit>;

/// Two databases keyed `len(rel) rel len(key) key other`; FIND is a prefix iteration.
pub struct Lmdb {
    env: heed::Env,
    by_obj: LmdbDb,
    by_subj: LmdbDb,
    dir: PathBuf,
    key: Vec<u8>,
}

fn lmdb_open(dir: &Path) -> Result<(heed::Env, LmdbDb, LmdbDb)> {
    let mut o = heed::EnvOpenOptions::new();
    o.map_size(LMDB_MAP_SIZE).max_dbs(2);
    // SAFETY: NO_SYNC only weakens durability on a system crash (a process
    // kill loses nothing committed); the final sync is an explicit
    // force_sync(). The directory belongs to this benchmark alone.
    let env = unsafe {
        o.flags(heed::EnvFlags::NO_SYNC);
        o.open(dir)?
    };
    let wtxn = env.write_txn()?;
    let (a, b) = env
        .create_databases_and_commit(wtxn, |dbo, wtxn| -> heed::Result<_> {
            let a: heed::Database<heed::types::Bytes, heed::types::Unit> =
                dbo.create_database(wtxn, Some("by_obj"))?;
            let b: heed::Database<heed::types::Bytes, heed::types::Unit> =
                dbo.create_database(wtxn, Some("by_subj"))?;
            Ok(heed::CommitOrAbort::<_, ()>::Commit((a, b)))
        })?
        .unwrap_commit();
    Ok((env, a, b))
}

fn lmdb_range(
    env: &heed::Env,
    db: LmdbDb,
    buf: &mut Vec<u8>,
    rel: &str,
    key: &str,
    f: Visit<'_>,
) -> Result<()> {
    let p = index_key(buf, rel, key, "");
    let rtxn = env.read_txn()?;
    for item in db.prefix_iter(&rtxn, &buf[..p])? {
        let (k, ()) = item?;
        f(&k[p..]);
    }
    Ok(())
}

struct LmdbReader {
    env: heed::Env,
    by_obj: LmdbDb,
    by_subj: LmdbDb,
    key: Vec<u8>,
}

impl Finder for LmdbReader {
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        lmdb_range(&self.env, self.by_obj, &mut self.key, rel, object, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        lmdb_range(&self.env, self.by_subj, &mut self.key, rel, subject, f)
    }
}

impl Lmdb {
    pub fn create(dir: &Path) -> Result<Self> {
        let (env, by_obj, by_subj) = lmdb_open(dir)?;
        Ok(Lmdb {
            env,
            by_obj,
            by_subj,
            dir: dir.to_path_buf(),
            key: Vec::with_capacity(256),
        })
    }

    fn insert_txn(&mut self, tags: &[Tag]) -> Result<()> {
        let mut w = self.env.write_txn()?;
        for t in tags {
            index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
            self.by_obj.put(&mut w, &self.key, &())?;
            index_key(&mut self.key, &t.relationship, &t.subject, &t.object);
            self.by_subj.put(&mut w, &self.key, &())?;
        }
        w.commit()?;
        Ok(())
    }

    fn close_env(env: heed::Env) {
        env.prepare_for_closing().wait();
    }
}

impl Engine for Lmdb {
    fn name(&self) -> &'static str {
        "lmdb"
    }
    fn load(&mut self, tags: &[Tag]) -> Result<()> {
        for chunk in txns(tags) {
            self.insert_txn(chunk)?;
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(self.env.force_sync()?)
    }
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        lmdb_range(&self.env, self.by_obj, &mut self.key, rel, object, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        lmdb_range(&self.env, self.by_subj, &mut self.key, rel, subject, f)
    }
    fn reader(&mut self) -> Result<Box<dyn Finder>> {
        Ok(Box::new(LmdbReader {
            env: self.env.clone(),
            by_obj: self.by_obj,
            by_subj: self.by_subj,
            key: Vec::with_capacity(256),
        }))
    }
    fn insert(&mut self, t: &Tag) -> Result<bool> {
        let mut w = self.env.write_txn()?;
        index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
        let new = self.by_obj.get_or_put(&mut w, &self.key, &())?.is_none();
        if new {
            index_key(&mut self.key, &t.relationship, &t.subject, &t.object);
            self.by_subj.put(&mut w, &self.key, &())?;
        }
        w.commit()?;
        Ok(new)
    }
    fn delete(&mut self, t: &Tag) -> Result<bool> {
        let mut w = self.env.write_txn()?;
        index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
        let had = self.by_obj.delete(&mut w, &self.key)?;
        index_key(&mut self.key, &t.relationship, &t.subject, &t.object);
        self.by_subj.delete(&mut w, &self.key)?;
        w.commit()?;
        Ok(had)
    }
    fn delete_many(&mut self, tags: &[Tag]) -> Result<()> {
        for chunk in txns(tags) {
            let mut w = self.env.write_txn()?;
            for t in chunk {
                index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
                self.by_obj.delete(&mut w, &self.key)?;
                index_key(&mut self.key, &t.relationship, &t.subject, &t.object);
                self.by_subj.delete(&mut w, &self.key)?;
            }
            w.commit()?;
        }
        Ok(())
    }
    fn set_durable(&mut self, on: bool) -> Result<()> {
        let mode = if on {
            heed::FlagSetMode::Disable
        } else {
            heed::FlagSetMode::Enable
        };
        // SAFETY: only this thread sets flags, and no write transaction is open.
        unsafe { self.env.set_flags(heed::EnvFlags::NO_SYNC, mode)? };
        Ok(())
    }
    fn insert_durable(&mut self, t: &Tag) -> Result<bool> {
        self.insert(t)
    }
    fn insert_batch_durable(&mut self, tags: &[Tag]) -> Result<()> {
        self.insert_txn(tags)
    }
    fn files(&mut self) -> Result<Files> {
        dir_files(&self.dir)
    }
    fn compact(self: Box<Self>) -> Result<Box<dyn Engine>> {
        let Lmdb { env, dir, .. } = *self;
        let tmp = dir.join("compact.mdb.tmp");
        let copy = env
            .copy_to_path(&tmp, heed::CompactionOption::Enabled)
            .context("lmdb: compacting copy")?;
        copy.sync_all()?;
        drop(copy);
        Self::close_env(env);
        std::fs::rename(&tmp, dir.join("data.mdb"))?;
        std::fs::File::open(&dir)?.sync_all()?;
        Ok(Box::new(Lmdb::create(&dir)?))
    }
    fn close(self: Box<Self>) -> Result<()> {
        self.env.force_sync()?;
        Self::close_env(self.env);
        Ok(())
    }
}

// ---------------------------------------------------------------- fjall

pub const FJALL_SETTINGS: &str = "fjall 3.1 (LSM), one Database, two keyspaces by_obj/by_subj \
     keyed by the bytes len(rel)|rel|len(key)|key|other with empty values (FIND = prefix scan), \
     block cache 1 GiB (default 32 MiB), default keyspace options (lz4), one write batch per \
     bulk load/delete call (--peer-txn) with PersistMode::Buffer (no fsync; survives a process kill), one \
     persist(SyncAll) as the final sync; single INSERT/DELETE: contains_key then one atomic \
     batch over both keyspaces; durable rows: batches committed with SyncAll; background \
     flushes/compactions waited for after every turn (untimed, reported); second reader: the \
     keyspace handles shared; compaction: rotate_memtable_and_wait + major_compact per keyspace";

/// Block cache of the fjall peer.
const FJALL_CACHE: u64 = 1 << 30;

/// Two keyspaces keyed `len(rel) rel len(key) key other`; FIND is a prefix scan.
pub struct Fjall {
    db: fjall::Database,
    by_obj: fjall::Keyspace,
    by_subj: fjall::Keyspace,
    dir: PathBuf,
    key: Vec<u8>,
}

fn fjall_prefix(
    ks: &fjall::Keyspace,
    buf: &mut Vec<u8>,
    rel: &str,
    key: &str,
    f: Visit<'_>,
) -> Result<()> {
    let p = index_key(buf, rel, key, "");
    for g in ks.prefix(&buf[..p]) {
        let k = g.key()?;
        f(&k[p..]);
    }
    Ok(())
}

struct FjallReader {
    by_obj: fjall::Keyspace,
    by_subj: fjall::Keyspace,
    key: Vec<u8>,
}

impl Finder for FjallReader {
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        fjall_prefix(&self.by_obj, &mut self.key, rel, object, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        fjall_prefix(&self.by_subj, &mut self.key, rel, subject, f)
    }
}

const EMPTY: &[u8] = &[];

impl Fjall {
    pub fn create(dir: &Path) -> Result<Self> {
        let db = fjall::Database::builder(dir)
            .cache_size(FJALL_CACHE)
            .open()?;
        let by_obj = db.keyspace("by_obj", fjall::KeyspaceCreateOptions::default)?;
        let by_subj = db.keyspace("by_subj", fjall::KeyspaceCreateOptions::default)?;
        Ok(Fjall {
            db,
            by_obj,
            by_subj,
            dir: dir.to_path_buf(),
            key: Vec::with_capacity(256),
        })
    }

    fn batch(&mut self, tags: &[Tag], insert: bool, mode: fjall::PersistMode) -> Result<()> {
        let mut b = self.db.batch().durability(Some(mode));
        for t in tags {
            index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
            if insert {
                b.insert(&self.by_obj, self.key.as_slice(), EMPTY);
            } else {
                b.remove(&self.by_obj, self.key.as_slice());
            }
            index_key(&mut self.key, &t.relationship, &t.subject, &t.object);
            if insert {
                b.insert(&self.by_subj, self.key.as_slice(), EMPTY);
            } else {
                b.remove(&self.by_subj, self.key.as_slice());
            }
        }
        b.commit()?;
        Ok(())
    }

    fn present(&mut self, t: &Tag) -> Result<bool> {
        index_key(&mut self.key, &t.relationship, &t.object, &t.subject);
        Ok(self.by_obj.contains_key(&self.key)?)
    }

    fn busy(&self) -> bool {
        self.db.outstanding_flushes() > 0 || self.db.active_compactions() > 0
    }
}

impl Engine for Fjall {
    fn name(&self) -> &'static str {
        "fjall"
    }
    fn load(&mut self, tags: &[Tag]) -> Result<()> {
        for chunk in txns(tags) {
            self.batch(chunk, true, fjall::PersistMode::Buffer)?;
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        Ok(self.db.persist(fjall::PersistMode::SyncAll)?)
    }
    fn find_subjects(&mut self, object: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        fjall_prefix(&self.by_obj, &mut self.key, rel, object, f)
    }
    fn find_objects(&mut self, subject: &str, rel: &str, f: Visit<'_>) -> Result<()> {
        fjall_prefix(&self.by_subj, &mut self.key, rel, subject, f)
    }
    fn reader(&mut self) -> Result<Box<dyn Finder>> {
        Ok(Box::new(FjallReader {
            by_obj: self.by_obj.clone(),
            by_subj: self.by_subj.clone(),
            key: Vec::with_capacity(256),
        }))
    }
    fn insert(&mut self, t: &Tag) -> Result<bool> {
        if self.present(t)? {
            return Ok(false);
        }
        self.batch(std::slice::from_ref(t), true, fjall::PersistMode::Buffer)?;
        Ok(true)
    }
    fn delete(&mut self, t: &Tag) -> Result<bool> {
        if !self.present(t)? {
            return Ok(false);
        }
        self.batch(std::slice::from_ref(t), false, fjall::PersistMode::Buffer)?;
        Ok(true)
    }
    fn delete_many(&mut self, tags: &[Tag]) -> Result<()> {
        for chunk in txns(tags) {
            self.batch(chunk, false, fjall::PersistMode::Buffer)?;
        }
        Ok(())
    }
    fn set_durable(&mut self, _on: bool) -> Result<()> {
        Ok(())
    }
    fn insert_durable(&mut self, t: &Tag) -> Result<bool> {
        if self.present(t)? {
            return Ok(false);
        }
        self.batch(std::slice::from_ref(t), true, fjall::PersistMode::SyncAll)?;
        Ok(true)
    }
    fn insert_batch_durable(&mut self, tags: &[Tag]) -> Result<()> {
        self.batch(tags, true, fjall::PersistMode::SyncAll)
    }
    fn settle(&mut self) -> Result<()> {
        // Idle when no flush or compaction is queued or running on three
        // polls in a row (a flush may schedule a compaction right after).
        let give_up = Instant::now() + Duration::from_secs(600);
        let mut quiet = 0;
        while quiet < 3 {
            if Instant::now() > give_up {
                bail!("fjall: background work still running after 600 s");
            }
            std::thread::sleep(Duration::from_millis(1));
            quiet = if self.busy() { 0 } else { quiet + 1 };
        }
        Ok(())
    }
    fn files(&mut self) -> Result<Files> {
        dir_files(&self.dir)
    }
    fn compact(self: Box<Self>) -> Result<Box<dyn Engine>> {
        for ks in [&self.by_obj, &self.by_subj] {
            ks.rotate_memtable_and_wait()?;
            ks.major_compact()?;
        }
        self.db.persist(fjall::PersistMode::SyncAll)?;
        Ok(self)
    }
    fn close(self: Box<Self>) -> Result<()> {
        self.db.persist(fjall::PersistMode::SyncAll)?;
        Ok(())
    }
}
