//! The set commands: SADD, SREM, SISMEMBER, SMISMEMBER, SMEMBERS, SCARD,
//! SSCAN, the SCAN extension and DEL, each from arguments checked for
//! arity to its reply; and `touched`, which every set write calls for
//! WATCH and TAGSTORE.CHANGES.

use super::commands::Context;
use super::keys::{self, Change, Key};
use super::resp;
use super::scan;
use super::sscan;
use tagstore::Store;

/// `DEL key…` (and `UNLINK`, the same here): empties each key's set;
/// replies how many of the keys had members. Every key is checked before
/// the first write, so a malformed one changes nothing.
pub fn del_command(ctx: &Context<'_>, rest: &[&[u8]], out: &mut Vec<u8>) -> Result<(), Failure> {
    let parsed = rest
        .iter()
        .map(|k| keys::parse_key(k))
        .collect::<Result<Vec<_>, _>>()?;
    let mut n = 0;
    for (key, raw) in parsed.iter().zip(rest) {
        // Noted before the removal, which may stop midway at a store error
        // with members already gone (a review's finding: a reshard's next
        // copy would not read the key again); a key noted that then does
        // not change costs a read, never a wrong copy.
        let members = keys::member_list(ctx.store, key)?;
        for m in &members {
            touched(ctx, key, raw, m);
        }
        keys::remove_all(ctx.store, key, &members)?;
        n += i64::from(!members.is_empty());
    }
    resp::int(out, n);
    Ok(())
}

/// A set write changed the tag `raw` (parsed: `key`) and `member` name:
/// bumps the versions of the keys whose sets changed, if any is watched,
/// and notes them for TAGSTORE.CHANGES, if a window is open (the other
/// key of the tag too, unless the store is half-only).
pub fn touched(ctx: &Context<'_>, key: &Key, raw: &[u8], member: &str) {
    let (watching, noting) = (ctx.watches.any(), ctx.changes.open());
    if !(watching || noting) {
        return;
    }
    let other = (!ctx.store.is_half_only()).then(|| keys::other_key(key, member));
    for k in std::iter::once(raw).chain(other.as_deref().map(str::as_bytes)) {
        if watching {
            ctx.watches.touched(k);
        }
        if noting {
            ctx.changes.touched(k);
        }
    }
}

/// The failure of an SADD or SREM (`name`) that a store error `e` (a full
/// disk) stopped at member `at` (from 0) of `total`: past the first, the
/// members before it changed and stay (`changed` of them), and the error
/// says so, as Redis's error reply would otherwise read as nothing done.
fn stopped(
    e: tagstore::Error,
    name: &str,
    at: usize,
    total: usize,
    changed: i64,
    change: Change,
) -> Failure {
    if at == 0 {
        return Failure::Store(e);
    }
    let stay = match change {
        Change::Add => "added",
        Change::Remove => "removed",
    };
    Failure::Refused(format!(
        "{} ({} stopped at member {} of {total}: the {changed} members before it that changed \
         stay {stay})",
        Failure::Store(e),
        name.to_uppercase(),
        at + 1,
    ))
}

/// Why a set command failed before replying: a refused argument, or the store.
pub enum Failure {
    /// An argument refused, with the reason (after `ERR `).
    Refused(String),
    /// The store's error.
    Store(tagstore::Error),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused(m) => f.write_str(m),
            Failure::Store(e @ tagstore::Error::TagTooLarge { .. }) => write!(f, "{e}"),
            Failure::Store(e) => write!(f, "store: {e}"),
        }
    }
}

impl From<String> for Failure {
    fn from(m: String) -> Self {
        Failure::Refused(m)
    }
}

impl From<tagstore::Error> for Failure {
    fn from(e: tagstore::Error) -> Self {
        Failure::Store(e)
    }
}

/// The set commands; `rest` has been checked for arity. Every argument is
/// checked before the first write, so a refused request changes nothing.
pub fn set_command(
    ctx: &Context<'_>,
    name: &str,
    rest: &[&[u8]],
    resp3: bool,
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    let store = ctx.store;
    let key = keys::parse_key(rest[0])?;
    let args = &rest[1..];
    match name {
        "sadd" | "srem" => {
            let members = utf8_all(args)?;
            let change = if name == "sadd" {
                Change::Add
            } else {
                Change::Remove
            };
            if change == Change::Add {
                // Refuse an oversized tag before writing any member.
                for m in &members {
                    keys::check_fits(&key, m)?;
                }
            }
            let mut n = 0;
            for (i, m) in members.iter().enumerate() {
                let changed = keys::with_tag(&key, m, |t| keys::apply(store, key.half, t, change))
                    .map_err(|e| stopped(e, name, i, members.len(), n, change))?;
                if changed {
                    touched(ctx, &key, rest[0], m);
                }
                n += i64::from(changed);
            }
            resp::int(out, n);
        }
        "sismember" => {
            let m = keys::member(args[0])?;
            let hit = keys::contains(store, &key, m)?;
            resp::int(out, i64::from(hit));
        }
        "smismember" => {
            let members = utf8_all(args)?;
            let mut body = Vec::new();
            for m in &members {
                resp::int(&mut body, i64::from(keys::contains(store, &key, m)?));
            }
            resp::array(out, members.len());
            out.extend_from_slice(&body);
        }
        "smembers" => {
            let mut body = Vec::new();
            let n = keys::members(store, &key, |m| resp::bulk(&mut body, m.as_bytes()))?;
            resp::set(out, n as usize, resp3);
            out.extend_from_slice(&body);
        }
        "scard" => {
            let n = keys::members(store, &key, |_| {})?;
            resp::int(out, n as i64);
        }
        "sscan" => sscan_command(store, &key, args, out)?,
        other => return Err(format!("unknown command '{other}'").into()),
    }
    Ok(())
}

fn utf8_all<'a>(args: &[&'a [u8]]) -> Result<Vec<&'a str>, String> {
    args.iter().map(|a| keys::member(a)).collect()
}

/// `SSCAN key cursor [MATCH pattern] [COUNT n]`.
fn sscan_command(
    store: &Store,
    key: &Key,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    let (cursor, pattern, count) = scan_options(args)?;
    let (members, next) = sscan::page(store, key, cursor, pattern, count)?;
    page_reply(out, &members, next);
    Ok(())
}

/// `SCAN cursor [MATCH pattern] [COUNT n]` (a tagstore extension: the keys
/// the store's tags make, see `scan.rs`).
pub fn scan_command(store: &Store, args: &[&[u8]], out: &mut Vec<u8>) -> Result<(), Failure> {
    let (cursor, pattern, count) = scan_options(args)?;
    let (keys, next) = scan::page(store, cursor, pattern, count)?;
    page_reply(out, &keys, next);
    Ok(())
}

/// The reply of SCAN and SSCAN: `[next cursor, [items…]]`.
fn page_reply(out: &mut Vec<u8>, items: &[String], next: u64) {
    resp::array(out, 2);
    resp::bulk(out, next.to_string().as_bytes());
    resp::array(out, items.len());
    for i in items {
        resp::bulk(out, i.as_bytes());
    }
}

/// `cursor [MATCH pattern] [COUNT n]` of SCAN and SSCAN.
fn scan_options<'a>(args: &[&'a [u8]]) -> Result<(u64, Option<&'a [u8]>, usize), Failure> {
    // As Redis's `strtoul`: a leading '-' negates modulo 2^64 (`-1` is the
    // largest cursor, past every page: the scan ends).
    let cursor = std::str::from_utf8(args[0])
        .ok()
        .and_then(|c| match c.strip_prefix('-') {
            Some(n) => n.parse::<u64>().ok().map(u64::wrapping_neg),
            None => c.parse::<u64>().ok(),
        })
        .ok_or_else(|| "invalid cursor".to_owned())?;
    let (mut pattern, mut count) = (None, 10usize);
    let mut opts = args[1..].chunks(2);
    for pair in opts.by_ref() {
        let [opt, value] = pair else {
            return Err("syntax error".to_owned().into());
        };
        match opt.to_ascii_lowercase().as_slice() {
            b"match" => pattern = Some(*value),
            b"count" => {
                let n = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<i64>().ok())
                    .ok_or_else(|| "value is not an integer or out of range".to_owned())?;
                if n < 1 {
                    return Err("syntax error".to_owned().into());
                }
                count = usize::try_from(n).unwrap_or(usize::MAX);
            }
            _ => return Err("syntax error".to_owned().into()),
        }
    }
    Ok((cursor, pattern, count))
}
