//! Set commands that pick or move members: SRANDMEMBER, SPOP, SMOVE, with
//! Redis 7.0's replies (RESP2 and RESP3).

use super::keys::{self, Change, Key};
use super::resp;
use tagstore::{Store, Tag};

/// The optional count of SRANDMEMBER and SPOP: `None` when absent.
fn count(rest: &[&[u8]]) -> Result<Option<i64>, String> {
    match rest.get(1) {
        None => Ok(None),
        Some(c) => std::str::from_utf8(c)
            .ok()
            .and_then(|c| c.parse::<i64>().ok())
            .map(Some)
            .ok_or_else(|| "value is not an integer or out of range".to_owned()),
    }
}

/// A small generator for picking members, seeded once per server.
fn next_random() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let mut b = [0u8; 8];
            let _ = getrandom::fill(&mut b);
            u64::from_le_bytes(b) | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    })
}

/// Moves `k` members picked at random to the front of `members`.
fn shuffle_front(members: &mut [String], k: usize) {
    let n = members.len();
    for i in 0..k.min(n) {
        let j = i + (next_random() % (n - i) as u64) as usize;
        members.swap(i, j);
    }
}

/// The members of a key's set, read whole.
fn all(store: &Store, key: &Key) -> tagstore::Result<Vec<String>> {
    let mut v = Vec::new();
    keys::members(store, key, |m| v.push(m.to_owned()))?;
    Ok(v)
}

/// `SRANDMEMBER key [count]`: a member, or `count` distinct ones (with
/// repeats when `count` is negative), none removed.
pub fn srandmember(
    store: &Store,
    rest: &[&[u8]],
    resp3: bool,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let key = keys::parse_key(rest[0])?;
    let n = count(rest)?;
    let mut members = all(store, &key).map_err(|e| format!("store: {e}"))?;
    match n {
        None => match members.is_empty() {
            true => resp::null(out, resp3),
            false => {
                shuffle_front(&mut members, 1);
                resp::bulk(out, members[0].as_bytes());
            }
        },
        Some(n) if n >= 0 => {
            let k = usize::try_from(n).unwrap_or(usize::MAX).min(members.len());
            shuffle_front(&mut members, k);
            resp::array(out, k);
            for m in &members[..k] {
                resp::bulk(out, m.as_bytes());
            }
        }
        Some(n) => {
            // Repeats allowed: each pick from the whole set.
            let k = if members.is_empty() {
                0
            } else {
                n.unsigned_abs()
            };
            let k = usize::try_from(k).map_err(|_| "value is out of range".to_owned())?;
            resp::array(out, k);
            for _ in 0..k {
                let i = (next_random() % members.len() as u64) as usize;
                resp::bulk(out, members[i].as_bytes());
            }
        }
    }
    Ok(())
}

/// `SPOP key [count]`: removes and returns a member, or up to `count`.
/// Returns the members removed (for WATCH).
pub fn spop(
    store: &Store,
    rest: &[&[u8]],
    resp3: bool,
    out: &mut Vec<u8>,
) -> Result<Vec<String>, String> {
    let key = keys::parse_key(rest[0])?;
    let n = count(rest)?;
    if n.is_some_and(|n| n < 0) {
        return Err("value is out of range, must be positive".to_owned());
    }
    let mut members = all(store, &key).map_err(|e| format!("store: {e}"))?;
    let k = match n {
        None => members.len().min(1),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(members.len()),
    };
    shuffle_front(&mut members, k);
    members.truncate(k);
    for m in &members {
        keys::with_tag(&key, m, |t| keys::apply(store, key.half, t, Change::Remove))
            .map_err(|e| format!("store: {e}"))?;
    }
    match (n, members.first()) {
        (None, None) => resp::null(out, resp3),
        (None, Some(m)) => resp::bulk(out, m.as_bytes()),
        (Some(_), _) => {
            resp::set(out, members.len(), resp3);
            for m in &members {
                resp::bulk(out, m.as_bytes());
            }
        }
    }
    Ok(members)
}

/// `SMOVE source destination member`: the tag `source` and `member` name
/// goes, the tag `destination` and `member` name comes (refused before
/// any change if it would not fit a slot). True if `member` was in
/// `source` (and so moved).
pub fn smove(store: &Store, rest: &[&[u8]], out: &mut Vec<u8>) -> Result<bool, String> {
    let (src, dst) = (keys::parse_key(rest[0])?, keys::parse_key(rest[1])?);
    let m = keys::member(rest[2])?;
    let to: Tag = keys::tag(&dst, m);
    if to.encoded_len() > tagstore::SLOT_SIZE {
        return Err(tagstore::Error::TagTooLarge {
            needed: to.encoded_len(),
            limit: tagstore::SLOT_SIZE,
        }
        .to_string());
    }
    let store_err = |e: tagstore::Error| format!("store: {e}");
    let present = keys::contains(store, &src, m).map_err(store_err)?;
    if present && src != dst {
        let from = keys::tag(&src, m);
        keys::apply(store, src.half, &from, Change::Remove).map_err(store_err)?;
        keys::apply(store, dst.half, &to, Change::Add).map_err(store_err)?;
    }
    resp::int(out, i64::from(present));
    Ok(present && src != dst)
}
