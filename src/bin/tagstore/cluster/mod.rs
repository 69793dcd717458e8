//! Cluster placement: which node of a nutcracker (twemproxy) pool holds a
//! key, computed exactly as nutcracker 0.5.0 computes it. Pure: reads the
//! proxy's configuration file and the keys, talks to no node.
//!
//! `config.rs` reads the YAML, `hash.rs` the key hashes, `ketama.rs` the
//! ring; this file is the `tagstore ring` command. `tools.rs` is `tagstore
//! cluster cloud|repair`, which do talk to the nodes, through the RESP
//! client of `client.rs`; `reshard.rs` is `cluster reshard`, with the record
//! of its copies in `record.rs`.

pub mod client;
pub mod config;
pub mod hash;
pub mod ketama;
pub mod moved;
pub mod record;
pub mod reshard;
pub mod tools;

use crate::out::{say, Out};
use clap::Args;
use config::Pool;
use ketama::Ring;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use tagstore::tsv;

/// The longest key line `--file` accepts (escaped), in bytes.
const MAX_KEY_LINE: u64 = 1 << 20;

/// `tagstore ring` arguments.
#[derive(Args)]
pub struct RingArgs {
    /// nutcracker's configuration file (YAML).
    config: PathBuf,
    /// Keys to place (taken literally).
    #[arg(required_unless_present = "file")]
    keys: Vec<String>,
    /// The pool to use when the file defines several.
    #[arg(long)]
    pool: Option<String>,
    /// Keys one per line, TSV-escaped (`\t`, `\n`, `\r`, `\\`); '-' reads stdin.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Instead of each key's node, print how many of the keys change node
    /// going from this older configuration to CONFIG, in all and per node.
    #[arg(long, value_name = "OLD_CONFIG")]
    moved_from: Option<PathBuf>,
}

/// Reads a configuration file and picks its pool.
pub fn load_pool(path: &Path, name: Option<&str>) -> Result<Pool, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let c = config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let p = c
        .pool(name)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if p.hash_defaulted {
        say_err!(
            "warning: {}: pool {:?} sets no hash: nutcracker then uses fnv1a_64, which \
             clusters keys that differ in their last characters; set `hash: md5` or \
             `hash: murmur` (placement below follows fnv1a_64)",
            path.display(),
            p.name
        );
    }
    Ok(p.clone())
}

/// `tagstore ring`: prints `KEY<TAB>NODE` for each key, NODE being the
/// server's name, or `host:port` for a server without one.
pub fn ring(a: &RingArgs, out: &mut Out) -> Result<(), String> {
    let pool = load_pool(&a.config, a.pool.as_deref())?;
    if let Some(old) = &a.moved_from {
        let old = load_pool(old, a.pool.as_deref())?;
        return moved(a, &old, &pool, out);
    }
    let r = Ring::new(&pool);
    let labels: Vec<String> = pool
        .servers
        .iter()
        .map(|s| tsv::escape(&s.label()))
        .collect();
    let mut place = |key: &str| {
        say!(
            out,
            "{}\t{}",
            tsv::escape(key),
            labels[r.locate(key.as_bytes())]
        )
    };
    for k in &a.keys {
        if !place(k) {
            return Ok(());
        }
    }
    if let Some(f) = &a.file {
        for_each_key(f, |k| Ok(place(k)))?;
    }
    Ok(())
}

/// `tagstore ring NEW --moved-from OLD`: the share of keys that change node,
/// then per node (TSV): keys before, after, moved in, moved out.
fn moved(a: &RingArgs, old: &Pool, new: &Pool, out: &mut Out) -> Result<(), String> {
    let mut c = moved::Compare::new(old, new);
    for k in &a.keys {
        c.add(k.as_bytes());
    }
    if let Some(f) = &a.file {
        for_each_key(f, |k| {
            c.add(k.as_bytes());
            Ok(true)
        })?;
    }
    let m = &c.moves;
    say!(
        out,
        "moved {} of {} keys ({:.2}%)",
        m.moved,
        m.keys,
        100.0 * m.share()
    );
    say!(out, "node\tbefore\tafter\tmoved_in\tmoved_out");
    for (label, n) in &m.nodes {
        say!(
            out,
            "{}\t{}\t{}\t{}\t{}",
            tsv::escape(label),
            n.before,
            n.after,
            n.moved_in,
            n.moved_out
        );
    }
    Ok(())
}

/// Calls `f` with each key of a `--file` (unescaped), until it returns false.
pub fn for_each_key(
    path: &Path,
    mut f: impl FnMut(&str) -> Result<bool, String>,
) -> Result<(), String> {
    let input: Box<dyn Read> = if path == Path::new("-") {
        Box::new(io::stdin())
    } else {
        Box::new(File::open(path).map_err(|e| format!("{}: {e}", path.display()))?)
    };
    let mut r = BufReader::with_capacity(1 << 16, input);
    let mut buf = Vec::new();
    for n in 1.. {
        buf.clear();
        let got = (&mut r)
            .take(MAX_KEY_LINE + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| format!("{}: line {n}: {e}", path.display()))?;
        if got == 0 {
            break;
        }
        let err = |m: &str| format!("{}: line {n}: {m}", path.display());
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if got as u64 > MAX_KEY_LINE {
            return Err(err(&format!("line is longer than {MAX_KEY_LINE} bytes")));
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        let mut line = std::str::from_utf8(&buf).map_err(|_| err("not valid UTF-8"))?;
        if n == 1 {
            line = line.strip_prefix(tsv::BOM).unwrap_or(line);
        }
        if line.is_empty() {
            return Err(err("blank line"));
        }
        if line.contains('\t') {
            return Err(err("a raw tab: write a key's tab as \\t"));
        }
        let key = tsv::unescape(line).map_err(|e| err(&e))?;
        if !f(&key)? {
            break;
        }
    }
    Ok(())
}
