//! Reads across sets: SINTER, SUNION, SDIFF, SINTERCARD (which objects
//! carry both tags, which subjects two objects share), EXISTS and TYPE.
//! Each reads every key named with one FIND; the stored `…STORE` forms
//! are not served (DESIGN.md §15.7).

use super::keys::{self, Key};
use super::resp;
use std::collections::HashSet;
use tagstore::Store;

/// A set read whole.
type Members = Vec<String>;

/// Every key parsed before any is read: a malformed key refuses the request.
fn parse_all<'a>(raw: &[&'a [u8]]) -> Result<Vec<Key<'a>>, String> {
    raw.iter().map(|k| keys::parse_key(k)).collect()
}

/// Members of every set, in the keys' order.
fn read_all(store: &Store, keys: &[Key]) -> tagstore::Result<Vec<Members>> {
    keys.iter().map(|k| keys::member_list(store, k)).collect()
}

/// The members of the first set found in every other, at most `limit`.
fn intersection(mut sets: Vec<Members>, limit: usize) -> Members {
    sets.sort_by_key(Vec::len);
    let mut sets = sets.into_iter();
    let Some(first) = sets.next() else {
        return Vec::new();
    };
    let rest: Vec<HashSet<String>> = sets.map(|s| s.into_iter().collect()).collect();
    first
        .into_iter()
        .filter(|m| rest.iter().all(|r| r.contains(m)))
        .take(limit)
        .collect()
}

/// Runs SINTER, SUNION or SDIFF (`name` lowercase) over `raw` keys, or
/// says why not.
pub fn combine(
    store: &Store,
    name: &str,
    raw: &[&[u8]],
    resp3: bool,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let keys = parse_all(raw)?;
    let sets = read_all(store, &keys).map_err(|e| format!("store: {e}"))?;
    let result: Members = match name {
        "sinter" => intersection(sets, usize::MAX),
        "sunion" => {
            let mut seen = HashSet::new();
            let all = sets.into_iter().flatten();
            all.filter(|m| seen.insert(m.clone())).collect()
        }
        _ => {
            let mut sets = sets.into_iter();
            let first = sets.next().unwrap_or_default();
            let minus: HashSet<String> = sets.flatten().collect();
            first.into_iter().filter(|m| !minus.contains(m)).collect()
        }
    };
    resp::set(out, result.len(), resp3);
    for m in &result {
        resp::bulk(out, m.as_bytes());
    }
    Ok(())
}

/// `SINTERCARD numkeys key [key …] [LIMIT limit]`.
pub fn intercard(store: &Store, args: &[&[u8]], out: &mut Vec<u8>) -> Result<(), String> {
    let number = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
    };
    let n = number(args[0]).ok_or("numkeys should be greater than 0")?;
    if n < 1 {
        return Err("numkeys should be greater than 0".into());
    }
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    let rest = &args[1..];
    if n > rest.len() {
        return Err("Number of keys can't be greater than number of args".into());
    }
    let limit = match &rest[n..] {
        [] => usize::MAX,
        [opt, v] if opt.eq_ignore_ascii_case(b"limit") => match number(v) {
            Some(0) => usize::MAX,
            Some(l) if l > 0 => usize::try_from(l).unwrap_or(usize::MAX),
            // Redis words a LIMIT that is not a number the same way.
            Some(_) | None => return Err("LIMIT can't be negative".into()),
        },
        _ => return Err("syntax error".into()),
    };
    let keys = parse_all(&rest[..n])?;
    let sets = read_all(store, &keys).map_err(|e| format!("store: {e}"))?;
    resp::int(out, intersection(sets, limit).len() as i64);
    Ok(())
}

/// `EXISTS key [key …]`: how many of the keys hold a member (a key named
/// twice counts twice, as in Redis).
pub fn exists_command(store: &Store, raw: &[&[u8]], out: &mut Vec<u8>) -> Result<(), String> {
    let keys = parse_all(raw)?;
    let mut n = 0;
    for k in &keys {
        n += i64::from(keys::has_member(store, k).map_err(|e| format!("store: {e}"))?);
    }
    resp::int(out, n);
    Ok(())
}

/// `TYPE key`: `set` if the key holds a member, else `none`.
pub fn type_command(store: &Store, raw: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let key = keys::parse_key(raw)?;
    let hit = keys::has_member(store, &key).map_err(|e| format!("store: {e}"))?;
    resp::simple(out, if hit { "set" } else { "none" });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::intersection;

    fn set(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn intersection_keeps_what_every_set_holds_up_to_the_limit() {
        let sets = vec![
            set(&["a", "b", "c", "d"]),
            set(&["d", "b"]),
            set(&["b", "d", "x"]),
        ];
        let mut got = intersection(sets.clone(), usize::MAX);
        got.sort();
        assert_eq!(got, set(&["b", "d"]));
        assert_eq!(intersection(sets, 1).len(), 1);
        assert!(intersection(vec![set(&["a"]), Vec::new()], usize::MAX).is_empty());
        assert!(intersection(Vec::new(), usize::MAX).is_empty());
    }
}
